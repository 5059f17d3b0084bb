"""`torchfair sweep`: the sweep file, trial expansion, the Pareto front, and the runner end to end on the synthetic
stand-in (runs, records a failing trial, resumes after a kill without rerunning finished trials, refuses a second
sweep on the same directory, rebuilds its report)."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchfair.cli import main as cli_main
from torchfair.sweep import (SweepLockedError, Trial, collect_results, expand_trials, load_sweep, pareto_front,
                             run_sweep, write_sweep_report)

ROOT = Path(__file__).resolve().parents[2]
SYNTH = {"data.variant": "synthetic", "data.n_test": 3, "data.n_val": 2, "data.num_negatives": 5,
         "data.batch_size": 16, "data.eval_batch_size": 32, "trainer.max_epochs": 1,
         "trainer.enable_progress_bar": False, "trainer.enable_model_summary": False, "model.schedule": "constant"}


def _write(tmp_path, body: dict, name="sweep.yaml") -> Path:
    import yaml
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body))
    return path


def _sweep(tmp_path, grid, **extra) -> Path:
    return _write(tmp_path, {"base": str(ROOT / "configs" / "ml100k_dips.yaml"), "overrides": SYNTH, "grid": grid,
                             **extra})


# ------------------------------------------------------------------------------------------------ the file
def test_sweep_file_errors_name_the_field(tmp_path):
    base = str(ROOT / "configs" / "ml100k_dips.yaml")
    cases = [({"grid": {"model.lam": [0]}}, "`base`"),
             ({"base": "nope.yaml"}, "`base`"),
             ({"base": base, "grid": {"model.lam": []}}, "`grid`"),
             ({"base": base, "grid": {"--model.lam": [1]}}, "`grid`"),
             ({"base": base, "random": {"model.lam": {"normal": [0, 1]}}}, "`random`"),
             ({"base": base, "random": {"model.lam": {"loguniform": [0, 1]}}}, "loguniform"),
             ({"base": base, "grid": {"model.lam": [1]}, "overrides": {"model.lam": 2}}, "twice"),
             ({"base": base, "samples": 0}, "`samples`"),
             ({"base": base, "lambda": 1}, "unknown fields")]
    for body, match in cases:
        with pytest.raises(ValueError, match=match):
            load_sweep(_write(tmp_path, body))
    with pytest.raises(ValueError, match="`config`"):
        load_sweep(tmp_path / "missing.yaml")


def test_trials_are_the_grid_product_with_seeded_draws(tmp_path):
    path = _write(tmp_path, {"base": str(ROOT / "configs" / "ml100k_dips.yaml"),
                             "grid": {"model.lam": [0.0, 0.5, 1.0], "seed_everything": [0, 1]},
                             "random": {"model.lr": {"loguniform": [1e-3, 1e-1]}, "model.ranker": {"choice": ["mf"]}},
                             "samples": 2, "seed": 7})
    spec = load_sweep(path)
    trials = expand_trials(spec)
    assert len(trials) == 3 * 2 * 2
    assert {(t.params["model.lam"], t.params["seed_everything"]) for t in trials} == \
        {(a, b) for a in (0.0, 0.5, 1.0) for b in (0, 1)}
    assert all(1e-3 <= t.params["model.lr"] <= 1e-1 for t in trials)
    assert [t.params for t in expand_trials(load_sweep(path))] == [t.params for t in trials]  # seeded
    ids = [t.trial_id for t in trials]
    assert len(set(ids)) == len(ids)
    assert Trial({"b": 1, "a": 2}).trial_id == Trial({"a": 2, "b": 1}).trial_id  # order-free identity


def test_pareto_front_against_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 12)
        u = [rng.choice([0.1, 0.2, 0.3, rng.random()]) for _ in range(n)]
        f = [rng.choice([0.0, 0.5, rng.random()]) for _ in range(n)]
        want = {i for i in range(n) if not any(u[j] >= u[i] and f[j] <= f[i] and (u[j] > u[i] or f[j] < f[i])
                                               for j in range(n))}
        got = pareto_front(u, f)
        assert set(got) == want
        assert [f[i] for i in got] == sorted(f[i] for i in got)
    assert pareto_front([1.0, float("nan")], [0.5, 0.1]) == [0]


def test_sweep_config_smoke_file_is_valid():
    spec = load_sweep(ROOT / "configs" / "sweep_smoke.yaml")
    assert len(expand_trials(spec)) >= 4


# ------------------------------------------------------------------------------------------------ the runner
@pytest.mark.slow
def test_sweep_runs_records_failures_and_rebuilds_its_report(tmp_path):
    # lam = -1 is rejected by the module: a deliberately failing trial
    cfg = _sweep(tmp_path, {"model.lam": [0.0, 1.0, -1.0]})
    out = tmp_path / "out"
    res = run_sweep(cfg, out, workers=2, threads=1)
    assert res == {"done": 2, "failed": 1, "skipped": 0, "total": 3}
    df = collect_results(out)
    assert sorted(df["status"]) == ["done", "done", "failed"]
    done = df[df["status"] == "done"]
    assert {"test/ndcg@10", "val/ndcg@10", "test/dips_gap", "checkpoint"} <= set(df.columns)
    assert done["test/ndcg@10"].between(0, 1).all() and all(Path(p).is_file() for p in done["checkpoint"])
    assert "lam" in df[df["status"] == "failed"]["error"].iloc[0]
    assert (out / "results.csv").is_file() and (out / "report.md").is_file() and (out / "pareto_dips_gap.png").is_file()
    (out / "report.md").unlink()
    assert cli_main(["sweep-report", str(out)]) == 0
    assert "Pareto front" in (out / "report.md").read_text() and "Failed trials" in (out / "report.md").read_text()
    # the same command again: nothing rerun, the failed trial retried (and failing again)
    mtimes = {p: p.stat().st_mtime for p in out.glob("trials/*/result.json")}
    res = run_sweep(cfg, out, workers=2, threads=1)
    assert res["skipped"] == 2 and res["failed"] == 1
    assert {p: p.stat().st_mtime for p in out.glob("trials/*/result.json")} == mtimes


@pytest.mark.slow
def test_sweep_resumes_after_a_kill_and_refuses_a_concurrent_sweep(tmp_path):
    cfg = _sweep(tmp_path, {"model.lam": [0.0, 0.5, 1.0]})
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "torchfair.cli", "sweep", "--config", str(cfg), "--out",
                             str(out), "--workers", "1", "--threads", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not list(out.glob("trials/*/result.json")):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-2000:]
            time.sleep(0.5)
        with pytest.raises(SweepLockedError, match="another sweep"):
            run_sweep(cfg, out, workers=1, threads=1)
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its running trial, mid-way
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finished = {p.parent.name: p.stat().st_mtime for p in out.glob("trials/*/result.json")}
    assert 1 <= len(finished) < 3
    res = run_sweep(cfg, out, workers=2, threads=1)
    assert res["done"] == 3 and res["failed"] == 0 and res["skipped"] == len(finished)
    assert {k: v for k, v in ((p.parent.name, p.stat().st_mtime) for p in out.glob("trials/*/result.json"))
            if k in finished} == finished
    assert len(collect_results(out)) == 3
    assert json.loads((out / "sweep.json").read_text())["trials"]


@pytest.mark.slow
def test_optuna_search_proposes_in_the_space_and_resumes(tmp_path):
    pytest.importorskip("optuna", reason="optuna is an optional extra (pip install torchfair[optuna])")
    cfg = _sweep(tmp_path, {"seed_everything": [0, 1]}, random={"model.lam": {"loguniform": [0.01, 1.0]}})
    out = tmp_path / "out"
    res = run_sweep(cfg, out, workers=2, threads=1, search="optuna", n_trials=3)
    assert res["done"] == 3 and res["failed"] == 0
    df = collect_results(out)
    assert len(df) == 3 and df["param:model.lam"].between(0.01, 1.0).all()
    assert set(df["param:seed_everything"]) <= {0, 1}
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    assert len(pd.read_parquet(out / "results.parquet")) == 3
    res = run_sweep(cfg, out, workers=1, threads=1, search="optuna", n_trials=4)  # one more, the 3 kept
    assert res["skipped"] == 3 and res["done"] == 4 and len(collect_results(out)) == 4
    with pytest.raises(ValueError, match="`n_trials`"):
        run_sweep(cfg, out, search="optuna")
    with pytest.raises(ValueError, match="`search`"):
        run_sweep(cfg, out, search="bayes")


@pytest.mark.slow
def test_ray_backend_runs_the_grid_into_the_same_directory(tmp_path):
    pytest.importorskip("ray", reason="ray is an optional extra (pip install torchfair[ray])")
    cfg = _sweep(tmp_path, {"model.lam": [0.0, 1.0, -1.0]})
    out = tmp_path / "out"
    res = run_sweep(cfg, out, workers=2, threads=1, backend="ray")
    assert res == {"done": 2, "failed": 1, "skipped": 0, "total": 3}
    df = collect_results(out)
    assert sorted(df["status"]) == ["done", "done", "failed"] and (out / "report.md").is_file()
    res = run_sweep(cfg, out, workers=2, threads=1, backend="ray")  # resumed: the finished trials are kept
    assert res["skipped"] == 2
    with pytest.raises(ValueError, match="`search`"):
        run_sweep(cfg, out, backend="ray", search="optuna", n_trials=2)


def test_runner_arguments_are_checked(tmp_path):
    cfg = _sweep(tmp_path, {"model.lam": [0.0]})
    for kw, match in (({"workers": 0}, "`workers`"), ({"threads": 0}, "`threads`"), ({"search": "bayes"}, "`search`"),
                      ({"backend": "slurm"}, "`backend`"), ({"search": "optuna"}, "`n_trials`")):
        with pytest.raises(ValueError, match=match):
            run_sweep(cfg, tmp_path / "out", **kw)
    with pytest.raises(ValueError, match="`out`"):
        write_sweep_report(tmp_path / "nothing")


# ------------------------------------------------------------------------------------------------ variants
def test_variants_are_named_bundles_crossed_with_the_grid(tmp_path):
    loss = {"class_path": "torchfair.losses.DELTRLoss"}
    path = _write(tmp_path, {"base": str(ROOT / "configs" / "ml100k_dips.yaml"), "overrides": {"trainer.max_epochs": 1},
                             "grid": {"model.lam": [0.0], "seed_everything": [0, 1]},
                             "variants": {"loss": {"none": {"model.fairness_loss": None},
                                                   "deltr": {"model.fairness_loss": loss,
                                                             "grid": {"model.lam": [1.0, 10.0]}}},
                                          "groups": {"pop": {"data.groups": "popularity"},
                                                     "drama": {"data.groups": "genre", "data.genre": "Drama",
                                                               "trainer.max_epochs": 2}}}})
    spec = load_sweep(path)
    trials = expand_trials(spec)
    # none: lam 0 only; deltr: its own lams; x 2 groups x 2 seeds
    want = {(lo, g, lam, s) for g in ("pop", "drama") for s in (0, 1)
            for lo, lam in (("none", 0.0), ("deltr", 1.0), ("deltr", 10.0))}
    got = {(t.params["loss"], t.params["groups"], t.params["model.lam"], t.params["seed_everything"]) for t in trials}
    assert got == want and len(trials) == len(want)
    t = next(t for t in trials if t.params["loss"] == "deltr" and t.params["groups"] == "drama")
    cfg = spec.trial_config(t.params)
    assert cfg["model.fairness_loss"] == loss and cfg["data.genre"] == "Drama" and "grid" not in cfg
    assert cfg["trainer.max_epochs"] == 2  # a bundle overrides `overrides`
    assert "loss" not in cfg and "groups" not in cfg  # the labels are columns, not config keys
    t0 = next(t for t in trials if t.params["loss"] == "none" and t.params["groups"] == "pop")
    assert spec.trial_config(t0.params)["model.fairness_loss"] is None
    assert spec.trial_config(t0.params)["trainer.max_epochs"] == 1


def test_variant_errors_name_the_field(tmp_path):
    base = str(ROOT / "configs" / "ml100k_dips.yaml")
    cases = [({"variants": [1]}, "`variants`"),
             ({"variants": {"loss": {}}}, "`variants`"),
             ({"variants": {"loss": {"a": 3}}}, "mapping"),
             ({"grid": {"model.lam": [0]}, "variants": {"model.lam": {"a": {}}}}, "also a grid"),
             ({"grid": {"model.lam": [0]}, "variants": {"loss": {"a": {"model.lam": 1}}}}, "varies"),
             ({"grid": {"model.lam": [0]}, "variants": {"loss": {"a": {"grid": {"model.lr": [1]}}}}}, "replace"),
             ({"grid": {"model.lam": [0]}, "variants": {"loss": {"a": {"grid": {"model.lam": []}}}}}, "at least one"),
             ({"variants": {"loss": {"a": {"-x": 1}}}}, "dotted")]
    for body, match in cases:
        with pytest.raises(ValueError, match=match):
            load_sweep(_write(tmp_path, {"base": base, **body}))
    # optuna searches one space: a bundle with its own grid values is refused
    cfg = _write(tmp_path, {"base": base, "overrides": SYNTH, "grid": {"model.lam": [0.0]},
                            "variants": {"loss": {"a": {"grid": {"model.lam": [1.0]}}}}})
    pytest.importorskip("optuna")
    with pytest.raises(ValueError, match="`search`"):
        run_sweep(cfg, tmp_path / "out", search="optuna", n_trials=2)


def test_the_headline_sweep_file_is_valid():
    spec = load_sweep(ROOT / "configs" / "sweep_headline.yaml")
    trials = expand_trials(spec)
    losses = {t.params["loss"] for t in trials}
    assert {"none", "dips_soft", "dips_pl", "misallocation_soft", "misallocation_pl", "pairgap_soft", "pairgap_pl",
            "deltr", "fair_pg_rank_pl", "beutel"} <= losses
    for loss in losses - {"none"}:  # >= 6 lam values from 0 per loss (0 is the shared baseline)
        lams = {t.params["model.lam"] for t in trials if t.params["loss"] == loss} | {0.0}
        assert len(lams) >= 6 and min(lams) == 0
    assert {t.params["seed"] for t in trials} == {"0", "1", "2"}
    assert {t.params["groups"] for t in trials} == {"popularity", "drama"}


@pytest.mark.parametrize("loss", ["none", "dips_soft", "dips_pl", "misallocation_soft", "misallocation_pl",
                                  "pairgap_soft", "pairgap_pl", "deltr", "fair_pg_rank_soft", "fair_pg_rank_pl",
                                  "beutel"])
def test_every_headline_trial_config_trains_under_fast_dev_run(loss, tmp_path, monkeypatch):
    # the trial arguments the sweep passes to `torchfair fit`, on the synthetic stand-in, without the pretrained start
    from torchfair.sweep import trial_args
    spec = load_sweep(ROOT / "configs" / "sweep_headline.yaml")
    trial = next(t for t in expand_trials(spec) if t.params["loss"] == loss and t.params["groups"] == "drama")
    cfg = spec.trial_config(trial.params)
    cfg.pop("model.init_from")
    cfg.update({k: v for k, v in SYNTH.items() if k not in ("trainer.max_epochs",)})
    monkeypatch.chdir(tmp_path)
    assert cli_main(["fit"] + trial_args(spec.base, cfg, tmp_path)[:] + ["--trainer.fast_dev_run", "true"]) == 0
