"""`torchfair sweep` (issue 18): a trial's identity is its whole resolved config (base config content, overrides,
variants, grid point), a directory holding trials of several sweeps says so, misspelt keys are refused before any
trial starts, a failing trial records its real error, the study lock is portable and shareable, and measure
columns / the objective's direction come from the measure declarations."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import torchfair.sweep as sweep
from torchfair.metrics import declarations
from torchfair.sweep import (SweepLockedError, collect_results, column_direction, expand_trials, load_sweep,
                             run_sweep, run_trial, write_sweep_report)

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "ml100k_dips.yaml"
SYNTH = {"data.variant": "synthetic", "data.n_test": 3, "data.n_val": 2, "data.num_negatives": 5,
         "data.batch_size": 16, "data.eval_batch_size": 32, "trainer.max_epochs": 1,
         "trainer.enable_progress_bar": False, "trainer.enable_model_summary": False, "model.schedule": "constant"}


def _write(path: Path, body: dict) -> Path:
    import yaml
    path.write_text(yaml.safe_dump(body))
    return path


def _ids(path: Path):
    return {json.dumps(t.params, sort_keys=True): t.trial_id for t in expand_trials(load_sweep(path))}


# ------------------------------------------------------------------------------------------------ identity
def test_trial_id_is_the_whole_resolved_config(tmp_path):
    grid = {"model.lam": [0.0, 1.0]}
    a = _ids(_write(tmp_path / "a.yaml", {"base": str(BASE), "overrides": {"trainer.max_epochs": 1}, "grid": grid}))
    # another max_epochs: other trials (the old ids hashed the grid values only)
    b = _ids(_write(tmp_path / "b.yaml", {"base": str(BASE), "overrides": {"trainer.max_epochs": 2}, "grid": grid}))
    assert a.keys() == b.keys() and not set(a.values()) & set(b.values())
    # another base config *content* at the same path: other trials
    base = tmp_path / "base.yaml"
    base.write_text(BASE.read_text())
    body = {"base": str(base), "overrides": {"trainer.max_epochs": 1}, "grid": grid}
    c1 = _ids(_write(tmp_path / "c.yaml", body))
    assert c1 == _ids(_write(tmp_path / "c2.yaml", body))  # same content, another sweep file: same trials
    base.write_text(BASE.read_text() + "\n# edited\n")
    c2 = _ids(_write(tmp_path / "c.yaml", body))
    assert not set(c1.values()) & set(c2.values())
    # a variant's bundle is part of the trial
    v1 = _ids(_write(tmp_path / "v.yaml", {"base": str(BASE), "grid": grid,
                                           "variants": {"loss": {"x": {"model.lr": 0.1}}}}))
    v2 = _ids(_write(tmp_path / "v.yaml", {"base": str(BASE), "grid": grid,
                                           "variants": {"loss": {"x": {"model.lr": 0.2}}}}))
    assert v1.keys() == v2.keys() and not set(v1.values()) & set(v2.values())


def test_widening_the_grid_keeps_the_ids_of_unchanged_points(tmp_path):
    body = {"base": str(BASE), "overrides": {"trainer.max_epochs": 1},
            "grid": {"model.lam": [0.0, 1.0], "seed_everything": [0]}}
    narrow = _ids(_write(tmp_path / "s.yaml", body))
    body["grid"]["model.lam"].append(10.0)
    body["grid"]["seed_everything"].append(1)
    wide = _ids(_write(tmp_path / "s.yaml", body))
    assert len(wide) == 6 and all(wide[k] == v for k, v in narrow.items())
    assert load_sweep(tmp_path / "s.yaml").sweep_id != "" and \
        load_sweep(tmp_path / "s.yaml").label.startswith("s-")


# ------------------------------------------------------------------------------------------------ keys, errors
def test_a_misspelt_key_is_refused_before_any_trial_starts(tmp_path):
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": SYNTH, "grid": {"model.lamm": [0.0, 1.0]}})
    with pytest.raises(ValueError, match=r"`grid`: 'model.lamm'.*unrecognized"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)
    assert not (tmp_path / "out" / "trials").exists()
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": {**SYNTH, "model.fairnes_loss": None},
                                       "grid": {"model.lam": [0.0]}})
    with pytest.raises(ValueError, match=r"`overrides`: 'model.fairnes_loss'"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": SYNTH, "grid": {"model.lam": [0.0]},
                                       "variants": {"loss": {"ok": {}, "bad": {"model.nope": 1}}}})
    with pytest.raises(ValueError, match=r"`variants.loss.bad`: 'model.nope'"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)


def test_a_failing_trial_records_its_real_error_line(tmp_path):
    tdir = tmp_path / "t"
    tdir.mkdir()
    (tdir / "trial.json").write_text(json.dumps({"trial_id": "x", "params": {}, "base": str(BASE),
                                                 "config": {**SYNTH, "model.lamm": 0.5}}))
    assert run_trial(tdir) == 1
    err = json.loads((tdir / "error.json").read_text())["error"]
    assert "model.lamm" in err and "SystemExit" not in err
    # a trial killed by its parser's exit: the line of its log, not `SystemExit: 2`
    (tdir / "trial.log").write_text("Seed set to 0\nusage: torchfair [-h]\ntorchfair: error: Key 'model.x' is "
                                    "not expected\n")
    assert sweep._log_error(tdir) == "torchfair: error: Key 'model.x' is not expected"


# ------------------------------------------------------------------------------------------------ the lock
def test_the_study_lock_is_portable_and_refuses_a_second_holder(tmp_path):
    import inspect

    import torchfair.sweeps.runner
    assert "fcntl" not in inspect.getsource(torchfair.sweeps.runner)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from torchfair.sweep import _lock
        with _lock(Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(SweepLockedError, match="another sweep"):
            with sweep._lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with sweep._lock(tmp_path):  # released by the OS when its holder died: no stale lock
        pass


# ------------------------------------------------------------------------------------------------ measures
def _fake_trial(out: Path, tid: str, label: str, metrics: dict, lam: float) -> None:
    tdir = out / "trials" / tid
    tdir.mkdir(parents=True)
    (tdir / "trial.json").write_text(json.dumps({"trial_id": tid, "params": {"model.lam": lam}, "sweep": label}))
    (tdir / "result.json").write_text(json.dumps({"trial_id": tid, "params": {"model.lam": lam},
                                                  "metrics": metrics, "checkpoint": None, "seconds": 1.0}))


def test_measure_columns_and_directions_come_from_the_declarations(tmp_path, monkeypatch):
    assert column_direction("val/ndcg@10") == ("utility", "higher")
    assert column_direction("test/dips_t0_gap") == ("fairness", "abs")
    assert column_direction("test/exposure_misallocation_l1") == ("fairness", "lower")
    assert column_direction("test/pairwise_accuracy_inter") == ("fairness", "abs")
    assert column_direction("test/discordant_fraction") == ("utility", "lower")
    assert column_direction("test/dips_AB") is None and column_direction("seconds") is None
    # a newly declared measure shows up in the report without editing the sweep module
    new = declarations.Measure("my_unfairness", lambda s: s, "fairness", False, (), "list", "-", "-", "-")
    monkeypatch.setitem(declarations.MEASURES, "my_unfairness", new)
    out = tmp_path / "out"
    _fake_trial(out, "a", "s-1", {"test/ndcg@10": 0.5, "test/my_unfairness": 0.1, "test/dips_gap": -0.2}, 0.0)
    _fake_trial(out, "b", "s-1", {"test/ndcg@10": 0.6, "test/my_unfairness": 0.3, "test/dips_gap": 0.1}, 1.0)
    _fake_trial(out, "c", "old-2", {"test/ndcg@10": 0.9, "test/my_unfairness": 0.0, "test/dips_gap": 0.0}, 2.0)
    (out / "sweep.json").write_text(json.dumps({"sweep": "s-1", "config": "s.yaml", "trials": ["a", "b"],
                                                "objective": "val/ndcg@10"}))
    text = write_sweep_report(out).read_text()
    assert "## Pareto front: test/my_unfairness against test/ndcg@10" in text
    assert (out / "pareto_my_unfairness.png").is_file()
    # trial c (another sweep) dominates everything but is left out of the fronts, and the report says so
    assert "trials of other sweeps** (old-2)" in text and "| c " not in text and "| a " in text
    df = collect_results(out)
    assert dict(zip(df["trial_id"], df["sweep"])) == {"a": "s-1", "b": "s-1", "c": "old-2"}
    assert "sweep" in open(out / "results.csv").readline().split(",")
    assert "| trial | sweep | model.lam |" in text  # the tables name each trial's sweep when they mix
    assert "| c | old-2 |" in write_sweep_report(out, only_current=False).read_text()


def test_the_objective_direction_is_the_declared_one():
    prog = sweep._Progress(2, "val/discordant_fraction", stream=open(os.devnull, "w"))
    prog.update(1, 0, 0, {"trial_id": "a", "metrics": {"val/discordant_fraction": 0.3}})
    prog.update(2, 0, 0, {"trial_id": "b", "metrics": {"val/discordant_fraction": 0.1}})
    assert prog.best[1] == "b"  # lower is better for a declared lower-is-better measure


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_rerunning_into_the_same_directory_with_another_config_trains_again(tmp_path):
    out = tmp_path / "out"
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": SYNTH, "grid": {"model.lam": [0.0]}})
    assert run_sweep(cfg, out, workers=1, threads=1)["done"] == 1
    # another max_epochs: not "1 from before" (the old ids hashed the grid values only)
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": {**SYNTH, "trainer.max_epochs": 2},
                                       "grid": {"model.lam": [0.0]}})
    res = run_sweep(cfg, out, workers=1, threads=1)
    assert res == {"done": 1, "failed": 0, "skipped": 0, "total": 1}
    df = collect_results(out)
    assert len(df) == 2 and df["sweep"].nunique() == 2 and df["current"].sum() == 1
    assert "trials of other sweeps" in (out / "report.md").read_text()
    desc = json.loads(next(out.glob("trials/*/trial.json")).read_text())
    assert desc["provenance"]["torchfair"] and len(desc["base_sha256"]) == 64
    # widening the grid keeps the finished point
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": {**SYNTH, "trainer.max_epochs": 2},
                                       "grid": {"model.lam": [0.0, 1.0]}})
    res = run_sweep(cfg, out, workers=1, threads=1)
    assert res == {"done": 2, "failed": 0, "skipped": 1, "total": 2}


@pytest.mark.slow
def test_two_processes_share_one_study_directory(tmp_path):
    cfg = _write(tmp_path / "s.yaml", {"base": str(BASE), "overrides": SYNTH,
                                       "grid": {"model.lam": [0.0, 0.25, 0.5, 1.0, -1.0]}})
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, sys
        from torchfair.sweep import run_sweep
        res = run_sweep({str(cfg)!r}, {str(out)!r}, workers=1, threads=1, share=True, stream=sys.stderr)
        print(json.dumps(res))
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=540)
        assert p.returncode == 0, stderr.decode()[-3000:]
        results.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    # both see the whole sweep: 4 done, the failing trial (lam = -1) failed once
    assert all(r["done"] == 4 and r["failed"] == 1 and r["total"] == 5 for r in results), results
    attempts = [ln.split() for ln in (out / "attempts.log").read_text().splitlines()]
    ids = [a[0] for a in attempts]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 5  # every trial ran exactly once
    assert len({a[1] for a in attempts}) == 2  # and both processes ran some
    df = collect_results(out)
    assert sorted(df["status"]) == ["done"] * 4 + ["failed"]
    import pandas as pd
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 5 and set(csv["trial_id"]) == set(df["trial_id"])
    assert sorted(csv["status"]) == sorted(df["status"])
