"""torchfair.training.evaluate (``torchfair evaluate``): the report's numbers against the engine and plain loops
on the checkpoint's own scored lists (measures, position shares, MPC), the streamed evaluation gives the one-pass
numbers (means, bootstrap intervals, paired differences, position shares bit for bit; MPC up to rounding), the
files, and a user sample recorded in the report, written as an ids file and reproducible from its seed; the data
module's ``eval_users`` sample it relies on."""
import hashlib
import json
import math

import numpy as np
import pytest
import torch

pytest.importorskip("pytorch_lightning")

from torchfair.evaluation import evaluate_lists  # noqa: E402
from torchfair.evaluation.report import jsonable  # noqa: E402
from torchfair.evaluation.table import pad_lists  # noqa: E402
from torchfair.metrics import matched_pair_calibration  # noqa: E402
from torchfair.training import MovieLensDataModule  # noqa: E402
from torchfair.training.checkpoint import load_checkpoint, score_lists  # noqa: E402
from torchfair.training.datamodule import sample_users, user_ids_sha256  # noqa: E402
from torchfair.training.evaluate import REPORT_BROWSING, evaluate_checkpoints  # noqa: E402

def _numbers(rep):
    """Every number of the report except MPC and the record of how it was computed."""
    out = {}
    for n, m in rep["models"].items():
        for c, v in m["measures"].items():
            out[(n, c)] = (v["mean"], v["ci_low"], v["ci_high"], v["n_valid"])
        out[(n, "position_share")] = m["position_share"]
        out[(n, "n_lists")] = m["n_lists"]
    for n, d in rep["differences"].items():
        out[(n, "paired")] = (d["reference"], d["paired"])
        for c, v in d["columns"].items():
            out[(n, "diff", c)] = tuple(v.get(k) for k in ("mean", "ci_low", "ci_high"))
    return out


def test_report_numbers_are_those_of_the_scored_lists(ckpt, tmp_path):
    """Measures: evaluate_lists on the checkpoint's lists; position shares: a plain loop (stable sort, the group at
    each position counted); MPC: matched_pair_calibration (adjacent pairs, every gap, cluster interval) on all the
    lists in one batch; the files hold the report."""
    top = 12
    rep = evaluate_checkpoints([ckpt], str(tmp_path / "rep"), names=["m"], bootstrap=30, seed=2, top=top)
    run = load_checkpoint(ckpt)
    lists = score_lists(run.model, run.datamodule, "test")
    G = int(run.meta["data_info"]["num_groups"])
    table = evaluate_lists(lists, run.meta["measures"] + [f"exposure_share:browsing={REPORT_BROWSING}"],
                           num_groups=G, bootstrap=30, seed=2)
    m = rep["models"]["m"]
    assert m["n_lists"] == len(lists) == 60 and list(m["measures"]) == table.columns
    for c in table.columns:
        for k in ("mean", "ci_low", "ci_high"):
            assert math.isclose(m["measures"][c][k], getattr(table, k)[c], rel_tol=1e-6, abs_tol=1e-9), (c, k)
    tot, cnt = np.zeros((top, G)), np.zeros(top)
    for li in lists:
        for k, i in enumerate(torch.argsort(li["scores"], descending=True, stable=True)[:top].tolist()):
            tot[k, int(li["groups"][i])] += 1
            cnt[k] += 1
    assert m["position_share"] == (tot / cnt[:, None]).tolist()
    s, r, g, mask = pad_lists([(li["scores"], li["relevance"], li["groups"]) for li in lists], False, G)
    want = matched_pair_calibration(s.double(), r.double(), g, group=1, adjacent=True, quantile=1.0, mask=mask,
                                    num_groups=G, ci="cluster")
    assert m["mpc"]["defined"] and m["mpc"]["n_pairs"] == int(want.n_pairs) > 0
    for k, v in (("estimate", want.estimate), ("ci_low", want.ci_low), ("ci_high", want.ci_high)):
        assert math.isclose(m["mpc"][k], float(v), rel_tol=1e-9, abs_tol=1e-12), k
    out = tmp_path / "rep"
    assert sorted(p.name for p in out.iterdir()) == ["exposure_by_position.png", "report.json", "report.md"]
    assert json.loads((out / "report.json").read_text()) == jsonable(rep)
    md = (out / "report.md").read_text()
    assert md.startswith("# torchfair evaluate: test lists\n") and f"under {REPORT_BROWSING}" in md
    assert f"  MPC(group 1) = {m['mpc']['estimate']:+.4f}" in md
    other = evaluate_checkpoints([ckpt], None, names=["m"], bootstrap=0, mpc_group=None, measures="ndcg@5,dips")
    assert other["models"]["m"]["mpc"] == {"defined": False}
    assert list(other["models"]["m"]["measures"])[:1] == ["ndcg@5"] and "dips_gap" in other["models"]["m"]["measures"]


def test_streamed_evaluation_equals_the_eager_one(ckpt):
    kw = dict(names=["a", "b"], bootstrap=200, seed=5, rerank=["fa_ir:p=0.5,alpha=0.1"], popularity=True)
    eager = evaluate_checkpoints([ckpt, ckpt], None, stream=False, **kw)
    streamed = evaluate_checkpoints([ckpt, ckpt], None, stream=True, chunk_users=7, **kw)
    assert eager["order"] == streamed["order"] == ["a", "a + fa_ir:p=0.5,alpha=0.1", "b", "b + fa_ir:p=0.5,alpha=0.1",
                                                   "popularity"]
    e, s = _numbers(eager), _numbers(streamed)
    assert e.keys() == s.keys()
    for k in e:
        assert e[k] == s[k], k  # exact: the same per-list values, the same bootstrap draws
    assert streamed["differences"]["b"]["paired"]  # the lists' digests agree
    for n in eager["models"]:
        me, ms = eager["models"][n]["mpc"], streamed["models"][n]["mpc"]
        assert me["defined"] == ms["defined"]
        if me["defined"]:
            assert me["n_pairs"] == ms["n_pairs"]
            for key in ("estimate", "ci_low", "ci_high"):
                assert math.isclose(me[key], ms[key], rel_tol=1e-9, abs_tol=1e-12), (n, key)
    assert eager["users"]["streamed"] == [False, False] and streamed["users"]["streamed"] == [True, True]
    assert eager["users"]["sample"] is None and eager["users"]["n_lists"] == eager["users"]["of"] == 60


def test_user_sample_is_recorded_written_and_reproducible(ckpt, tmp_path):
    out = tmp_path / "rep"
    rep = evaluate_checkpoints([ckpt], str(out), names=["m"], bootstrap=20, users=17, users_seed=3)
    u = rep["users"]
    assert (u["sample"], u["seed"], u["n_lists"], u["of"], u["ids_file"]) == (17, 3, 17, 60, "eval_users.txt")
    ids_file = (out / "eval_users.txt").read_bytes()
    assert hashlib.sha256(ids_file).hexdigest() == u["sha256"]
    ids = [int(x) for x in ids_file.split()]
    assert len(ids) == 17 == len(set(ids)) and ids == sorted(ids)
    assert json.loads((out / "report.json").read_text())["users"] == u
    assert rep["models"]["m"]["n_lists"] == 17
    again = evaluate_checkpoints([ckpt], None, names=["m"], bootstrap=20, users=17, users_seed=3)
    assert again["users"]["sha256"] == u["sha256"] and _numbers(again) == _numbers(rep)
    other = evaluate_checkpoints([ckpt], None, names=["m"], bootstrap=0, users=17, users_seed=4)
    assert other["users"]["sha256"] != u["sha256"]
    # no sample: every user (here streamed)
    full = evaluate_checkpoints([ckpt], None, names=["m"], bootstrap=0, stream=True, chunk_users=5)
    assert full["users"]["n_lists"] == 60 and full["users"]["sample"] is None and full["users"]["chunk_users"] == 5


@pytest.mark.parametrize("kw, name", [({"bootstrap": -1}, "bootstrap"), ({"users": 0}, "users"), ({"chunk_users": 0}, "chunk_users"),
                                      ({"top": 0}, "top"), ({"mpc_group": -1}, "mpc_group"),
                                      ({"stream": "yes"}, "stream"), ({"split": "train"}, "split"),
                                      ({"rerank": ["nope"]}, "spec"), ({"names": ["a", "b"]}, "names"),
                                      ({"popularity": 1}, "popularity")])
def test_bad_arguments_fail_before_any_work(kw, name, tmp_path):
    with pytest.raises(ValueError, match=f"`{name}`"):
        evaluate_checkpoints([str(tmp_path / "missing.ckpt")], None, **kw)  # the file is never opened


def test_sample_users_seeded_sorted_and_all_by_default():
    users = np.arange(100, 200)
    a, b = sample_users(users, 10, 1), sample_users(users, 10, 1)
    assert np.array_equal(a, b) and len(set(a.tolist())) == 10 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, sample_users(users, 10, 2))
    assert np.array_equal(sample_users(users, None, 1), users) and np.array_equal(sample_users(users, 500, 1), users)
    assert user_ids_sha256([3, 1, 2]) == hashlib.sha256(b"1\n2\n3\n").hexdigest()


def test_datamodule_eval_users_samples_validation_and_test():
    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, eval_users=11, eval_users_seed=2)
    dm.setup("fit")
    assert dm.hparams["eval_users"] == 11 and dm.hparams["eval_users_seed"] == 2
    rec = dm.info["eval_users"]
    assert rec["size"] == 11 and rec["seed"] == 2 and rec["val"]["users"] == rec["test"]["users"] == 11
    assert rec["val"]["of"] == 60 and rec["test"]["sha256"] == user_ids_sha256(dm.eval_user_ids("test"))
    served = np.concatenate([b["user"].numpy() for b in dm.val_dataloader()])
    assert np.array_equal(served, dm.val_dataset.users) and len(served) == 11
    assert np.array_equal(dm.val_dataset.users, dm.test_dataset.users)  # the same users for both
    full = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5)
    full.setup("fit")
    assert "eval_users" not in full.hparams and "eval_users" not in full.info and len(full.val_dataset) == 60
    assert set(dm.val_dataset.users.tolist()) <= set(full.val_dataset.users.tolist())
    # the sampled lists are the full lists of those users
    k = int(np.flatnonzero(full.test_dataset.users == dm.test_dataset.users[0])[0])
    assert all(np.array_equal(x, y) for x, y in zip(dm.test_dataset[0][1:], full.test_dataset[k][1:]))
    assert np.array_equal(full.test_dataset.lengths(), [len(full.test_dataset[i][1]) for i in range(60)])
    with pytest.raises(ValueError, match="eval_users"):
        MovieLensDataModule("synthetic", eval_users=0)


def test_cli_misspelt_rerank_spec_is_one_line_before_any_scoring(ckpt, tmp_path, capsys, monkeypatch):
    """`torchfair evaluate --rerank targeted:measure=dipz`: one line naming --rerank and the measure, and no list is
    scored (the spec is read before the checkpoints are)."""
    from torchfair.cli import main
    from torchfair.training import evaluate as ev

    def no_scoring(*a, **k):
        raise AssertionError("scored before the spec was checked")

    monkeypatch.setattr(ev, "iter_score_lists", no_scoring)
    assert main(["evaluate", "--ckpts", ckpt, "--out", str(tmp_path / "r"), "--rerank", "targeted:measure=dipz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rerank" in err[0] and "'dipz'" in err[0], err
    assert not (tmp_path / "r").exists()


def test_cli_report_table_fits_the_width_and_report_md_keeps_every_column(ckpt, tmp_path, capsys, monkeypatch):
    """`torchfair evaluate` with five runs and four paired differences: stdout's tables are at most --width
    (default: the terminal's) characters a line, each with the measure column, and hold every column of report.md's
    one table with the same cells."""
    from torchfair.cli import main

    def cells(text):  # {(measure, column): cell} of the markdown tables in `text`
        out, header = {}, None
        for line in text.split("\n"):
            if line.startswith("|-"):
                continue
            if not line.startswith("| "):
                header = None
                continue
            row = [c.strip() for c in line[2:-2].split(" | ")]
            header = header or row
            out.update({(row[0], h): c for h, c in zip(header[1:], row[1:])} if row is not header else {})
        return out

    monkeypatch.setenv("COLUMNS", "100")
    out_dir = tmp_path / "r"
    assert main(["evaluate", "--ckpts", ckpt, "--ckpts", ckpt, "--names", "a", "--names", "b", "--popularity",
                 "--rerank", "interleave:keep=8,p=1.0,protected=1", "--bootstrap", "20", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    tables = [line for line in out.split("\n") if line.startswith("|")]
    assert max(map(len, tables)) <= 100 and sum(t.startswith("| measure |") for t in tables) > 1, out
    md = (out_dir / "report.md").read_text()
    full = [line for line in md.split("\n") if line.startswith("| measure |")]
    assert len(full) == 1 and len(full[0]) > 100  # report.md: one table, every column
    assert cells(out) == cells(md) and len({c for _, c in cells(md)}) == len(full[0].split(" | ")) - 1
