"""Scale options of ``torchfair evaluate`` (evaluate_checkpoints): the streamed evaluation gives the eager path's
numbers (means, bootstrap intervals, paired differences, position shares bit for bit; MPC up to rounding), and a
user sample is recorded in the report, written as an ids file and reproducible from its seed; the data module's
``eval_users`` sample for validation."""
import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pytorch_lightning")

from torchfair.cli import main as cli_main  # noqa: E402
from torchfair.training import MovieLensDataModule  # noqa: E402
from torchfair.training.datamodule import sample_users, user_ids_sha256  # noqa: E402
from torchfair.training.report import evaluate_checkpoints  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.logger", "false", "--trainer.max_epochs", "1"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    old = os.getcwd()
    os.chdir(d)
    try:
        args = ["fit", "--config", str(ROOT / "configs" / "ml100k_listnet.yaml"), "--trainer.default_root_dir", str(d),
                "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.dirpath", str(d / "ck")] + SYNTH
        assert cli_main(args) == 0
        return str(sorted((d / "ck").glob("*.ckpt"))[-1])
    finally:
        os.chdir(old)


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


def test_streamed_evaluation_equals_the_eager_one(ckpt):
    kw = dict(names=["a", "b"], bootstrap=200, seed=5, rerank=["fair:p=0.5,alpha=0.1"], popularity=True)
    eager = evaluate_checkpoints([ckpt, ckpt], None, stream=False, **kw)
    streamed = evaluate_checkpoints([ckpt, ckpt], None, stream=True, chunk_users=7, **kw)
    assert eager["order"] == streamed["order"] == ["a", "a + fair:p=0.5,alpha=0.1", "b", "b + fair:p=0.5,alpha=0.1",
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


def test_ids_only_rankers_are_scored_without_item_feature_tensors(ckpt):
    """MF reads ids only: its full-catalogue batches are collated without the [B, N, genres] tensors, the same
    scores come out, and the data module's setting is restored afterwards."""
    from torchfair.training.report import iter_score_lists, load_checkpoint

    run = load_checkpoint(ckpt)
    seen = []
    forward = run.model.forward
    run.model.forward = lambda batch: seen.append(sorted(batch)) or forward(batch)
    lists = [li for chunk in iter_score_lists(run.model, run.datamodule, "test", chunk_users=None) for li in chunk]
    assert seen and all("item_genres" not in k and "item_decade" not in k for k in seen)
    assert run.datamodule.item_features is True
    run.model.forward = forward
    want = []
    with torch.no_grad():
        for batch in run.datamodule.test_dataloader():  # every feature collated
            assert "item_genres" in batch
            s = run.model(batch)
            want += [s[b][batch["mask"][b]] for b in range(s.shape[0])]
    assert len(want) == len(lists) and all(torch.equal(a, li["scores"]) for a, li in zip(want, lists))


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
    assert full["users"]["n_lists"] == 60 and full["users"]["sample"] is None
    # the CLI: --users / --users-seed / --stream
    out2 = tmp_path / "cli"
    assert cli_main(["evaluate", "--ckpt", ckpt, "--out", str(out2), "--bootstrap", "20", "--name", "m",
                     "--users", "17", "--users-seed", "3", "--stream", "yes", "--chunk-users", "4"]) == 0
    rep2 = json.loads((out2 / "report.json").read_text())
    assert rep2["users"]["sha256"] == u["sha256"] and rep2["users"]["streamed"] == [True]
    assert rep2["models"]["m"]["measures"]["ndcg@10"] == json.loads((out / "report.json").read_text())[
        "models"]["m"]["measures"]["ndcg@10"]
    with pytest.raises(ValueError, match="users"):
        evaluate_checkpoints([ckpt], None, users=0)


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


def test_top_order_is_the_stable_sorts_prefix():
    """The position plot's top items without a full sort: the stable descending sort's first `top`, ties and
    infinities included."""
    import torch

    from torchfair.training.report import _top_order

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        n, k = int(torch.randint(1, 2000, (1,), generator=g)), int(torch.randint(1, 60, (1,), generator=g))
        s = torch.randn(n, generator=g)
        if trial % 3 == 0:
            s = torch.round(s * 2) / 2  # many ties
        if trial % 7 == 0:
            s[torch.randint(0, n, (3,), generator=g)] = float("-inf")
        if trial % 11 == 0:
            s[torch.randint(0, n, (2,), generator=g)] = float("inf")
        if trial % 13 == 0:
            s = torch.zeros(n)
        if trial % 17 == 0:
            s[0] = float("nan")
        assert torch.equal(_top_order(s, k), torch.argsort(s, descending=True, stable=True)[:k]), trial
