"""torchfair.sweeps.ray_executor: Tune's ``param_space`` holds the sweep's parameters and every Tune config maps back
to the local executor's trial ids (without Ray); with a local Ray instance, the grid runs into the same directory
and an interrupted run resumes with ``Tuner.restore``."""
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchfair.sweeps import collect_results, expand_trials, load_sweep, run_sweep
from torchfair.sweeps.ray_executor import POINT, param_space, trial_params

ROOT = Path(__file__).resolve().parents[2]


def _configs(space: dict):
    """The configs Tune generates from a ``param_space`` of ``grid_search`` entries (their product)."""
    keys = list(space)
    for combo in itertools.product(*(space[k]["grid_search"] for k in keys)):
        yield dict(zip(keys, combo))


def test_param_space_is_the_grid_and_maps_back_to_the_trial_ids(sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0, 1.0, 10.0], "seed_everything": [0, 1]}))
    trials = expand_trials(spec)
    space = param_space(trials)
    assert space == {"model.lam": {"grid_search": [0.0, 1.0, 10.0]}, "seed_everything": {"grid_search": [0, 1]}}
    assert sorted(spec.make_trial(trial_params(c)).trial_id for c in _configs(space)) == \
        sorted(t.trial_id for t in trials)
    # the trials left to run of a product are not one: Tune grids over the points themselves
    space = param_space(trials[1:])
    assert list(space) == [POINT] and len(space[POINT]["grid_search"]) == len(trials) - 1
    assert [spec.make_trial(trial_params(c)).trial_id for c in _configs(space)] == [t.trial_id for t in trials[1:]]


def test_param_space_of_variants_with_their_own_grid_and_random_draws(sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0]}, random={"model.lr": {"loguniform": [1e-3, 1e-1]}}, samples=2,
                                 variants={"loss": {"none": {"model.fairness_loss": None},
                                                    "deltr": {"model.fairness_loss": {
                                                        "class_path": "torchfair.losses.DELTRLoss"},
                                                        "grid": {"model.lam": [1.0, 10.0]}}}}))
    trials = expand_trials(spec)
    space = param_space(trials)
    assert list(space) == [POINT]
    assert [spec.make_trial(trial_params(c)).trial_id for c in _configs(space)] == [t.trial_id for t in trials]


def test_the_ray_executor_says_when_ray_is_missing(tmp_path, sweep_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ValueError, match="`executor`: ray is not installed"):
        run_sweep(sweep_file({"model.lam": [0.0]}), tmp_path / "out", workers=1, threads=1, executor="ray")


@pytest.mark.slow
def test_ray_executor_runs_the_grid_into_the_same_directory(tmp_path, sweep_file):
    pytest.importorskip("ray", reason="ray is an optional extra (pip install torchfair[ray])")
    cfg = sweep_file({"model.lam": [0.0, 1.0, -1.0]})
    out = tmp_path / "out"
    res = run_sweep(cfg, out, workers=2, threads=1, executor="ray")
    assert res == {"done": 2, "failed": 1, "skipped": 0, "total": 3}
    df = collect_results(out)
    assert sorted(df["status"]) == ["done", "done", "failed"] and (out / "report.md").is_file()
    assert set(df["trial_id"]) == {t.trial_id for t in expand_trials(load_sweep(cfg))}  # the local ids
    res = run_sweep(cfg, out, workers=2, threads=1, executor="ray")  # resumed: the finished trials are kept
    assert res["skipped"] == 2
    with pytest.raises(ValueError, match="`search`"):
        run_sweep(cfg, out, executor="ray", search="optuna", n_trials=2)
    # the local executor takes the Ray run's results over
    res = run_sweep(cfg, out, workers=1, threads=1)
    assert res["skipped"] == 2 and res["done"] == 2


@pytest.mark.slow
def test_ray_executor_resumes_an_interrupted_run_with_tuner_restore(tmp_path, sweep_file):
    pytest.importorskip("ray", reason="ray is an optional extra (pip install torchfair[ray])")
    cfg = sweep_file({"model.lam": [0.0, 0.5, 1.0]})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "torchfair.cli", "sweep", str(cfg), "--out", str(out),
                             "--executor", "ray", "--workers", "1", "--threads", "1"],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 300
        while not list(out.glob("trials/*/result.json")):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-2000:]
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # Ctrl-C: Tune saves its state and stops
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    finished = {p.parent.name: p.stat().st_mtime for p in out.glob("trials/*/result.json")}
    experiment = out / "ray" / load_sweep(cfg).sweep_id
    assert 1 <= len(finished) < 3 and not (experiment / "torchfair-ended").exists()
    res = run_sweep(cfg, out, workers=2, threads=1, executor="ray")
    assert res == {"done": 3, "failed": 0, "skipped": len(finished), "total": 3}
    assert {k: v for k, v in ((p.parent.name, p.stat().st_mtime) for p in out.glob("trials/*/result.json"))
            if k in finished} == finished
    # the same Tune experiment, restored: two runs' state files in one directory
    assert (experiment / "torchfair-ended").is_file() and len(list(experiment.glob("experiment_state-*.json"))) == 2
