"""Issue 18 (newcomer findings): `torchfair evaluate --out` is checked before any work, default report names are
unique and readable, `torchfair fit`'s bad checkpoint paths and misspelt keys are one-line errors."""
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("pytorch_lightning")

from torchfair.cli import main as cli_main  # noqa: E402
from torchfair.training import evaluate as evaluate_mod  # noqa: E402
from torchfair.training.evaluate import _default_names, evaluate_checkpoints  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.logger", "false", "--trainer.max_epochs", "1"]


@pytest.fixture
def no_work(monkeypatch):
    """Loading a checkpoint (the first work `evaluate` does) fails loudly."""
    def boom(*a, **k):
        raise AssertionError("work started before --out was checked")
    monkeypatch.setattr(evaluate_mod, "load_checkpoint", boom)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Seed set")]
    assert len(lines) == 1, err
    return lines[0]


def test_evaluate_out_naming_a_file_fails_before_any_work(tmp_path, capsys, no_work):
    f = tmp_path / "report"
    f.write_text("x")
    assert cli_main(["evaluate", "--ckpts", str(tmp_path / "a.ckpt"), "--out", str(f)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out" in line and str(f) in line and "Errno" not in line
    with pytest.raises(ValueError, match="`out`"):
        evaluate_checkpoints([str(tmp_path / "a.ckpt")], str(f))


def test_evaluate_out_holding_a_report_needs_overwrite(tmp_path, capsys, monkeypatch, no_work):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "report.json").write_text("{}")
    assert cli_main(["evaluate", "--ckpts", str(tmp_path / "a.ckpt"), "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out" in line and "--overwrite" in line
    with pytest.raises(ValueError, match="`out`.*overwrite=True"):
        evaluate_checkpoints([str(tmp_path / "a.ckpt")], str(out))
    # --overwrite: the check passes (the work starts: the patched loader fails)
    with pytest.raises(AssertionError, match="work started"):
        cli_main(["evaluate", "--ckpts", str(tmp_path / "a.ckpt"), "--out", str(out), "--overwrite"])
    with pytest.raises(AssertionError, match="work started"):
        evaluate_checkpoints([str(tmp_path / "a.ckpt")], str(out), overwrite=True)
    # an existing directory without a report is fine
    with pytest.raises(AssertionError, match="work started"):
        evaluate_checkpoints([str(tmp_path / "a.ckpt")], str(tmp_path))


def test_default_names_are_unique_and_readable():
    a = "runs/ml100k_listnet/version_0/checkpoints/last.ckpt"
    b = "runs/ml100k_dips/version_0/checkpoints/last.ckpt"
    assert _default_names([a, b]) == ["ml100k_listnet/version_0", "ml100k_dips/version_0"]
    best = "runs/ml100k_listnet/version_0/checkpoints/best-epoch=3.ckpt"
    assert _default_names([a, best]) == ["ml100k_listnet/version_0/last", "ml100k_listnet/version_0/best-epoch=3"]
    assert _default_names(["x/plain.ckpt", "y/fair.ckpt"]) == ["plain", "fair"]
    assert _default_names(["x/last.ckpt", "y/last.ckpt"]) == ["x/last", "y/last"]
    # a run directory not named version_N is named alone
    assert _default_names(["out/my_run/checkpoints/last.ckpt", "z/last.ckpt"]) == ["my_run", "z/last"]
    names = _default_names([a, a])
    assert len(set(names)) == 2


def _fit(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return cli_main(["fit", "--config", str(ROOT / "configs" / "ml100k_listnet.yaml")] + SYNTH + args)


@pytest.mark.parametrize("option", ["--ckpt_path", "--model.init_from"])
def test_fit_missing_checkpoint_is_one_line(option, tmp_path, monkeypatch, capsys):
    missing = tmp_path / "missing.ckpt"
    assert _fit([option, str(missing)], tmp_path, monkeypatch) == 2
    line = _one_line(capsys.readouterr().err)
    assert option in line and str(missing) in line and "Traceback" not in line


@pytest.mark.parametrize("option", ["--ckpt_path", "--model.init_from"])
def test_fit_truncated_checkpoint_is_one_line(option, tmp_path, monkeypatch, capsys):
    full = tmp_path / "full.ckpt"
    torch.save({"state_dict": {"ranker.w": torch.zeros(100)}, "epoch": 0}, full)
    cut = tmp_path / "cut.ckpt"
    data = full.read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    assert _fit([option, str(cut)], tmp_path, monkeypatch) == 2
    line = _one_line(capsys.readouterr().err)
    assert option in line and str(cut) in line and "truncated" in line


def test_fit_misspelt_key_is_one_line_with_a_help_hint(tmp_path, monkeypatch, capsys):
    assert _fit(["--model.lamda", "3"], tmp_path, monkeypatch) == 2
    line = _one_line(capsys.readouterr().err)
    assert "lamda" in line and "(torchfair fit --help for the options)" in line
    assert not os.path.exists(tmp_path / "runs")


def test_demo_prints_no_lightning_chatter(tmp_path, capfd):
    import importlib.util
    import sys

    path = ROOT / "experiments" / "movielens_demo.py"
    spec = importlib.util.spec_from_file_location("_exp_movielens_demo_quiet", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        assert mod.main(["--variant", "synthetic", "--seeds", "0", "--epochs", "1", "--bootstrap", "0", "--lam", "0",
                         "--rerank", "none", "--out", str(tmp_path / "d")]) == 0
    finally:
        sys.modules.pop(spec.name, None)
    out, err = capfd.readouterr()
    both = out + err
    for chatter in ("GPU available", "TPU available", "litlogger", "weights_only", "logging interval"):
        assert chatter not in both, chatter
    assert "training (sweep trials" in out and "the tuned ranker" in out and "total time" in out


def test_dips_synthetic_writes_under_runs_unless_results(tmp_path, monkeypatch):
    import importlib.util
    import sys

    path = ROOT / "experiments" / "dips_synthetic.py"
    spec = importlib.util.spec_from_file_location("_exp_dips_synthetic_default", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        written = []
        monkeypatch.setattr(mod, "plots", lambda r1, r2, seed, out_dir: written.append(Path(out_dir)))
        monkeypatch.chdir(tmp_path)
        mod.main(["--fast"])
        assert written[-1] == Path("runs") / "dips_synthetic"
        assert (tmp_path / "runs" / "dips_synthetic" / "dips_synthetic.md").is_file()
        # --results names the tracked folder (not run here: the plot spy and a patched folder stand in)
        monkeypatch.setattr(mod, "RESULTS", tmp_path / "tracked")
        mod.main(["--fast", "--results"])
        assert written[-1] == tmp_path / "tracked" and (tmp_path / "tracked" / "dips_synthetic.md").is_file()
        with pytest.raises(SystemExit):
            mod.main(["--fast", "--results", "--out-dir", str(tmp_path / "x")])
    finally:
        sys.modules.pop(spec.name, None)


def test_metrics_ndcg_ideal_ranking_from_all_judged_documents(tmp_path, capsys):
    """q1: the run ranks d1 (rel 1), d2 (rel 2), d4 (unjudged); the qrels also judge d3 (rel 1), absent from the run.
    q2: the run ranks a (unjudged), b (rel 1); c (rel 2) is judged but absent.  Gain 2^rel - 1 (torchfair's default),
    discount log2(1+pos): the ideal is trec_eval's (every judged document), the gain is not (trec_eval's is linear,
    which gives 0.7224 for q1; tests/evaluation/test_table_trec.py checks trec_eval's own values)."""
    import json
    import math

    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 3.0 r\nq1 Q0 d2 2 2.0 r\nq1 Q0 d4 3 1.0 r\n"
                                      "q2 Q0 a 1 2.0 r\nq2 Q0 b 2 1.0 r\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 2\nq1 0 d3 1\nq2 0 b 1\nq2 0 c 2\n")
    d = lambda pos: math.log2(pos + 1)  # noqa: E731
    dcg1 = 1 / d(1) + 3 / d(2)
    dcg2 = 1 / d(2)
    judged = {"q1": dcg1 / (3 / d(1) + 1 / d(2) + 1 / d(3)), "q2": dcg2 / (3 / d(1) + 1 / d(2))}  # exponential gain
    run_only = {"q1": dcg1 / (3 / d(1) + 1 / d(2)), "q2": dcg2 / (1 / d(1))}
    assert round(judged["q1"], 4) == 0.7003 and round(run_only["q1"], 4) == 0.7967
    trec_eval_q1 = (1 / d(1) + 2 / d(2)) / (2 / d(1) + 1 / d(2) + 1 / d(3))  # linear gain: trec_eval's ndcg
    assert round(trec_eval_q1, 4) == 0.7224

    def per_list(*extra):
        out = tmp_path / "o.json"
        assert cli_main(["metrics", "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt"),
                         "--measures", "ndcg", "ndcg@2", "--bootstrap", "0", "--quiet", "--out-json", str(out),
                         *extra]) == 0
        from torchfair.evaluation.table import EvaluationTable
        t = EvaluationTable.from_json(out)
        return t, {lid: dict(zip(t.columns, row)) for lid, row in zip(t.list_ids, t.values.tolist())}

    t, rows = per_list()  # default: the ideal ranking from every judged document (trec_eval's ideal)
    for q in ("q1", "q2"):
        assert math.isclose(rows[q]["ndcg"], judged[q], rel_tol=1e-6), (q, rows[q])
    assert math.isclose(t.mean["ndcg"], (judged["q1"] + judged["q2"]) / 2, rel_tol=1e-6)
    # at k=2 q1's ideal top 2 (rel 2, 1) is the same either way
    assert math.isclose(rows["q1"]["ndcg@2"], run_only["q1"], rel_tol=1e-6)
    t, rows = per_list("--ideal", "run")
    for q in ("q1", "q2"):
        assert math.isclose(rows[q]["ndcg"], run_only[q], rel_tol=1e-6), (q, rows[q])
    assert json.loads((tmp_path / "o.json").read_text())


def test_readme_install_names_only_real_extras():
    import re
    import tomllib

    readme = (ROOT / "README.md").read_text()
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = set(re.findall(r'pip install (?:-e )?"\.\[([\w-]+)\]"', readme))
    assert {"train", "sweep", "cli", "torchmetrics"} <= named, named
    assert named <= extras, named - extras
    # the install page lists every extra, and only real ones
    page = set(re.findall(r'^\| `"\.\[([\w-]+)\]"` \|', (ROOT / "docs" / "install.md").read_text(), flags=re.M))
    assert page == extras, (page ^ extras)
    assert "pip install torchfair[" not in readme  # no such package on the index
    assert "## Install" in readme and readme.index("## Install") < readme.index("## Quickstart")
    assert "pip install torch==" in readme and "download.pytorch.org/whl/cpu" in readme
