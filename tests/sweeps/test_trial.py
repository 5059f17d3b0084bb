"""torchfair.sweeps.trial: a trial's ``torchfair fit`` arguments (every headline trial trains), the check of every
key before a sweep starts, the trial directory, the real error line of a failing trial, the checkpoint a trial
records, and its timing (stage seconds, wall interval, load, worker slot)."""
import contextlib
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from torchfair.cli import main as cli_main
from torchfair.sweeps import expand_trials, load_sweep, run_sweep
from torchfair.sweeps.trial import run_trial, trial_args
from torchfair.sweeps.trial import _log_error, _prepare, _status

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "ml100k_dips.yaml"


def test_a_misspelt_key_is_refused_before_any_trial_starts(tmp_path, write_yaml, synth):
    cfg = write_yaml({"base": str(BASE), "overrides": synth, "grid": {"model.lamm": [0.0, 1.0]}})
    with pytest.raises(ValueError, match=r"`grid`: 'model.lamm'.*unrecognized"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)
    assert not (tmp_path / "out" / "trials").exists()
    cfg = write_yaml({"base": str(BASE), "overrides": {**synth, "model.fairnes_loss": None},
                      "grid": {"model.lam": [0.0]}})
    with pytest.raises(ValueError, match=r"`overrides`: 'model.fairnes_loss'"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)
    cfg = write_yaml({"base": str(BASE), "overrides": synth, "grid": {"model.lam": [0.0]},
                      "variants": {"loss": {"ok": {}, "bad": {"model.nope": 1}}}})
    with pytest.raises(ValueError, match=r"`variants.loss.bad`: 'model.nope'"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)


def test_a_failing_trial_records_its_real_error_line(tmp_path, synth, monkeypatch):
    tdir = tmp_path / "t"
    tdir.mkdir()
    (tdir / "trial.json").write_text(json.dumps({"trial_id": "x", "params": {}, "base": str(BASE),
                                                 "config": {**synth, "model.lamm": 0.5}}))
    monkeypatch.delenv("TORCHFAIR_SWEEP_SLOT", raising=False)
    assert run_trial(tdir) == 1
    failed = json.loads((tdir / "error.json").read_text())
    err = failed["error"]
    assert "model.lamm" in err and "SystemExit" not in err
    # its timing: the wall interval of the attempt, no stage seconds, no slot (run in this process, not by a runner)
    t = failed["timing"]
    assert t["wall_start"] <= t["wall_end"] and t["train_s"] is None and t["slot"] is None
    # a trial killed by its parser's exit: the line of its log, not `SystemExit: 2`
    (tdir / "trial.log").write_text("Seed set to 0\nusage: torchfair [-h]\ntorchfair: error: Key 'model.x' is "
                                    "not expected\n")
    assert _log_error(tdir) == "torchfair: error: Key 'model.x' is not expected"


def test_the_trial_directory_is_reset_unless_finished(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0]}))
    t = expand_trials(spec)[0]
    tdir = _prepare(tmp_path, spec, t, {"torchfair": "x"})
    desc = json.loads((tdir / "trial.json").read_text())
    assert tdir.name == t.trial_id and desc["params"] == t.params and desc["sweep"] == spec.label
    assert desc["config"] == spec.trial_config(t.params) and len(desc["base_sha256"]) == 64
    (tdir / "error.json").write_text("{}")
    (tdir / "logs").mkdir()
    assert _status(tdir) == "failed"
    _prepare(tmp_path, spec, t)  # a failed attempt starts afresh
    assert sorted(p.name for p in tdir.iterdir()) == ["trial.json"] and _status(tdir) == "pending"
    (tdir / "result.json").write_text("{}")
    _prepare(tmp_path, spec, t)  # a finished one is kept
    assert _status(tdir) == "done"


_LOSS_TRADEOFF = load_sweep(ROOT / "configs" / "sweep_loss_tradeoff.yaml")
_LOSS_TRADEOFF_TRIALS = expand_trials(_LOSS_TRADEOFF)  # 4 000 trials: expanded once for the variants below


_VARIANT_DIMS = ([{"loss": name} for name in _LOSS_TRADEOFF.variants["loss"]]
                 + [{"utility": name, "loss": "dips_ramp"} for name in _LOSS_TRADEOFF.variants["utility"]]
                 + [{"protocol": name, "loss": "dips_ramp"} for name in _LOSS_TRADEOFF.variants["protocol"]])


@pytest.mark.parametrize("dims", _VARIANT_DIMS, ids=[",".join(f"{k}={v}" for k, v in d.items()) for d in _VARIANT_DIMS])
def test_every_loss_tradeoff_variant_trains_under_fast_dev_run(dims, tmp_path, monkeypatch, synth):
    # each loss / utility term / protocol of the headline sweep (configs/sweep_loss_tradeoff.yaml), as the sweep
    # passes it to `torchfair fit`, on the synthetic stand-in without the pretrained start: the start is built here
    # by the base config's iALS initialisation, one alternation of it (its 15 are the start's, not the variant's;
    # implicit_als itself: tests/training/test_ials.py)
    spec = _LOSS_TRADEOFF
    want = {"groups": "popularity", "utility": "listnet", "protocol": "finetune", "seed": "0", **dims}
    trial = next(t for t in _LOSS_TRADEOFF_TRIALS if all(t.params[k] == v for k, v in want.items()))
    cfg = spec.trial_config(trial.params)
    cfg["model.init_from"] = None
    cfg["model.ranker_args.ials_iterations"] = 1
    cfg.update({k: v for k, v in synth.items() if k not in ("trainer.max_epochs",)})
    monkeypatch.chdir(tmp_path)
    assert cli_main(["fit"] + trial_args(spec.base, cfg, tmp_path)[:] + ["--trainer.fast_dev_run", "true"]) == 0


def test_a_trial_records_its_timing_and_slot(tmp_path, sweep_file):
    # three trials, two workers: each trial's result.json has its stage seconds (Lightning's Timer), its wall
    # interval, the load average at both ends and its worker slot; two trials that overlapped in time held
    # different slots
    import torch

    out = tmp_path / "out"
    last = [{"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"filename": "last-{epoch}"}}]
    cfg = sweep_file({"model.lam": [0.0, 0.5, 1.0]})
    body = yaml.safe_load(cfg.read_text())
    body["overrides"].update({"trainer.max_epochs": 3, "trainer.callbacks": last})  # the checkpoint: the last epoch
    cfg.write_text(yaml.safe_dump(body))
    res = run_sweep(cfg, out, workers=2, threads=1, report=False)
    assert res["done"] == 3
    results = [json.loads(p.read_text()) for p in out.glob("trials/*/result.json")]
    timings = [r["timing"] for r in results]
    for r, t in zip(results, timings):
        wall = t["wall_end"] - t["wall_start"]
        assert t["train_s"] > 0 and t["validate_s"] > 0 and t["test_s"] > 0
        # the stages ran inside the trial's wall interval, one after the other
        assert t["train_s"] + t["validate_s"] + t["test_s"] <= wall <= r["seconds"] + 1e-6
        # the training time against the Timer state the last epoch's checkpoint saved a moment before the fit
        # ended (read after validate / test restored that state, it would count it twice)
        saved = torch.load(r["checkpoint"], map_location="cpu", weights_only=False)["callbacks"]["Timer"]
        # counting it twice would give at least twice the saved time; the time between that save and the fit's end
        # is a small part of it on a quiet machine, an unknown part on a loaded one, so the check is that ratio
        # and no wall-clock bound
        train = saved["time_elapsed"]["train"]
        assert train <= t["train_s"] < 2 * train
        assert t["slot"] in (0, 1) and t["pid"] > 0 and t["host"]
        assert len(t["loadavg_start"]) == 3 and len(t["loadavg_end"]) == 3
        env = r["environment"]  # what decides the numbers: one torch thread per trial, deterministic algorithms
        assert env["torch_threads"] == 1 and env["kernels"] in ("auto", "numba", "torch")
        assert env["torch"] == torch.__version__ and env["deterministic"] in (True, False)
    for a in timings:
        for b in timings:
            if a is not b and a["wall_start"] < b["wall_end"] and b["wall_start"] < a["wall_end"]:
                assert a["slot"] != b["slot"]
    assert len({t["pid"] for t in timings}) == 3


def test_without_a_monitored_checkpoint_the_last_one_is_recorded(tmp_path, sweep_file):
    # no validation while fitting (a checkpoint with no monitor, save_last): the trial records and evaluates last.ckpt
    cfg = sweep_file({"model.lam": [0.0]})
    body = yaml.safe_load(cfg.read_text())
    body["overrides"].update({"trainer.max_epochs": 2, "trainer.check_val_every_n_epoch": 10, "trainer.callbacks": [
        {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"save_last": True}}]})
    cfg.write_text(yaml.safe_dump(body))
    out = tmp_path / "out"
    assert run_sweep(cfg, out, workers=1, threads=1, report=False)["done"] == 1
    res = json.loads(next(out.glob("trials/*/result.json")).read_text())
    assert Path(res["checkpoint"]).name == "last.ckpt" and Path(res["checkpoint"]).is_file()
    assert 0 <= res["metrics"]["test/ndcg@10"] <= 1


# ------------------------------------------------------------------------------------------ dying with the sweep
_GUARDED = '''
import os, sys, time
from pathlib import Path
from torchfair.sweeps.trial import _guard_trial

def hold(tdir, sweep_pid):
    _guard_trial(Path(tdir), sweep_pid)
    time.sleep(120)
'''


def _sweep_stand_in(tmp_path: Path, how: str):
    """A stand-in sweep process that starts a guarded trial process (``how``: a fresh interpreter, as
    ``_trial_process``, or forked from a ``forkserver``, as the runner without GPUs) and prints its pid."""
    import subprocess
    import sys
    import textwrap

    (tmp_path / "guarded.py").write_text(_GUARDED)
    tdir = tmp_path / "out" / "trials" / "t0"
    tdir.mkdir(parents=True)
    code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        if {how!r} == "popen":
            child = subprocess.Popen([sys.executable, "-c", "import guarded; guarded.hold({str(tdir)!r}, %d)"
                                      % os.getpid()])
            pid = child.pid
        else:
            import multiprocessing, guarded
            ctx = multiprocessing.get_context("forkserver")
            child = ctx.Process(target=guarded.hold, args=({str(tdir)!r}, os.getpid()))
            child.start()
            pid = child.pid
        print(pid, flush=True)
        time.sleep(120)
        """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, cwd=tmp_path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to tell a zombie from a process")
@pytest.mark.parametrize("how", ["popen", "forkserver"])
def test_a_trial_process_ends_with_the_sweep_killed_alone(tmp_path, how):
    """issue 28: ``kill -9`` of the sweep process alone (not its group) left its trial running as an orphan."""
    import signal
    import time

    from torchfair.sweeps.trial import _alive, _running

    out = tmp_path / "out"
    sweep = _sweep_stand_in(tmp_path, how)
    try:
        trial = int(sweep.stdout.readline())
        deadline = time.time() + 30
        while not _running(out, "t0"):  # the trial process holds its running lock while it lives
            assert time.time() < deadline and _alive(trial)
            time.sleep(0.05)
        assert _alive(trial)
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
        deadline = time.time() + 10
        while (_alive(trial) or _running(out, "t0")) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(trial), "the trial process outlived its sweep"
        assert not _running(out, "t0")  # and its lock is free: the trial may be claimed again
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(trial, signal.SIGKILL)


def test_alive_tells_a_reaped_process_from_a_live_one():
    import subprocess

    from torchfair.sweeps.trial import _alive

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _alive(p.pid) and _alive(os.getpid())
    finally:
        p.kill()
    if sys.platform.startswith("linux"):  # killed, not yet reaped: a zombie is not a live process
        import time
        deadline = time.time() + 10
        while open(f"/proc/{p.pid}/stat").read().rpartition(")")[2].split()[0] != "Z":
            assert time.time() < deadline
            time.sleep(0.02)
        assert not _alive(p.pid)
    p.wait()
    assert not _alive(p.pid)
