"""torchfair.sweeps.runner: the sweep end to end on the synthetic stand-in (runs, records a failing trial, resumes
after a kill from the study without rerunning finished trials, refuses a second sweep on the same directory, two
processes share one study, Optuna's search resumes, another config trains again), its arguments, and the
progress line's objective direction."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from torchfair.cli import main as cli_main
from torchfair.sweeps import SweepLockedError, collect_results, run_sweep
from torchfair.sweeps.runner import _Progress
from torchfair.sweeps.study import JOURNAL

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "ml100k_dips.yaml"


def _trials(out: Path, name: str):
    """The Optuna trials of the study ``name`` in ``out``'s journal."""
    import optuna
    from optuna.storages.journal import JournalFileBackend
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(out / JOURNAL)))
    return optuna.load_study(study_name=name, storage=storage).trials


def test_runner_arguments_are_checked(tmp_path, sweep_file):
    cfg = sweep_file({"model.lam": [0.0]})
    for kw, match in (({"workers": 0}, "`workers`"), ({"threads": 0}, "`threads`"), ({"search": "bayes"}, "`search`"),
                      ({"executor": "slurm"}, "`executor`"), ({"search": "optuna"}, "`n_trials`"),
                      ({"executor": "ray", "share": True}, "`share`")):
        with pytest.raises(ValueError, match=match):
            run_sweep(cfg, tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()


def test_the_sweep_shim_module_is_gone():
    """``torchfair.sweep`` re-exported ``torchfair.sweeps`` for old imports; dropped before 0.1.0 (one import path)."""
    import importlib.util
    assert importlib.util.find_spec("torchfair.sweep") is None


def test_the_objective_direction_is_the_declared_one():
    prog = _Progress(2, "val/discordant_fraction", stream=open(os.devnull, "w"))
    prog.update(1, 0, 0, {"trial_id": "a", "metrics": {"val/discordant_fraction": 0.3}})
    prog.update(2, 0, 0, {"trial_id": "b", "metrics": {"val/discordant_fraction": 0.1}})
    assert prog.best[1] == "b"  # lower is better for a declared lower-is-better measure


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_sweep_runs_records_failures_and_rebuilds_its_report(tmp_path, sweep_file):
    # lam = -1 is rejected by the module: a deliberately failing trial
    cfg = sweep_file({"model.lam": [0.0, 1.0, -1.0]})
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
    # the study holds the grid: two complete trials with their values, one failed with its error
    trials = _trials(out, "grid:val/ndcg@10")
    assert sorted(ft.state.name for ft in trials) == ["COMPLETE", "COMPLETE", "FAIL"]
    assert {ft.user_attrs["trial_id"]: ft.value for ft in trials if ft.value is not None} == \
        dict(zip(done["trial_id"], done["val/ndcg@10"]))
    assert "lam" in next(ft.user_attrs["error"] for ft in trials if ft.state.name == "FAIL")
    (out / "report.md").unlink()
    assert cli_main(["sweep-report", str(out)]) == 0
    assert "Pareto front" in (out / "report.md").read_text() and "Failed trials" in (out / "report.md").read_text()
    # the same command again: nothing rerun, the failed trial retried (and failing again)
    mtimes = {p: p.stat().st_mtime for p in out.glob("trials/*/result.json")}
    res = run_sweep(cfg, out, workers=2, threads=1)
    assert res["skipped"] == 2 and res["failed"] == 1
    assert {p: p.stat().st_mtime for p in out.glob("trials/*/result.json")} == mtimes


@pytest.mark.slow
def test_sweep_resumes_after_a_kill_and_refuses_a_concurrent_sweep(tmp_path, sweep_file):
    cfg = sweep_file({"model.lam": [0.0, 0.5, 1.0]})
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "torchfair.cli", "sweep", str(cfg), "--out", str(out),
                             "--workers", "1", "--threads", "1"], env=env,
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
    left = [ft for ft in _trials(out, "grid:val/ndcg@10") if ft.state.name == "RUNNING"]
    assert left  # the study says the killed trial is running
    res = run_sweep(cfg, out, workers=2, threads=1)
    assert res["done"] == 3 and res["failed"] == 0 and res["skipped"] == len(finished)
    assert {k: v for k, v in ((p.parent.name, p.stat().st_mtime) for p in out.glob("trials/*/result.json"))
            if k in finished} == finished
    assert len(collect_results(out)) == 3
    assert json.loads((out / "sweep.json").read_text())["trials"]
    # read from the journal: the killed trial was failed and run again (or recorded, had it written its result)
    trials = _trials(out, "grid:val/ndcg@10")
    for ft in left:
        assert trials[ft.number].state.name in ("FAIL", "COMPLETE")
    assert {ft.user_attrs["trial_id"] for ft in trials if ft.state.name == "COMPLETE"} == \
        {p.parent.name for p in out.glob("trials/*/result.json")}


@pytest.mark.slow
def test_optuna_search_proposes_in_the_space_and_resumes(tmp_path, sweep_file):
    pytest.importorskip("optuna", reason="optuna is an optional extra (pip install torchfair[sweep])")
    cfg = sweep_file({"seed_everything": [0, 1]}, random={"model.lam": {"loguniform": [0.01, 1.0]}})
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
def test_rerunning_into_the_same_directory_with_another_config_trains_again(tmp_path, write_yaml, synth):
    out = tmp_path / "out"
    cfg = write_yaml({"base": str(BASE), "overrides": synth, "grid": {"model.lam": [0.0]}}, "s.yaml")
    assert run_sweep(cfg, out, workers=1, threads=1)["done"] == 1
    # another max_epochs: not "1 from before" (the old ids hashed the grid values only)
    cfg = write_yaml({"base": str(BASE), "overrides": {**synth, "trainer.max_epochs": 2},
                      "grid": {"model.lam": [0.0]}}, "s.yaml")
    res = run_sweep(cfg, out, workers=1, threads=1)
    assert res == {"done": 1, "failed": 0, "skipped": 0, "total": 1}
    df = collect_results(out)
    assert len(df) == 2 and df["sweep"].nunique() == 2 and df["current"].sum() == 1
    assert "trials of other sweeps" in (out / "report.md").read_text()
    desc = json.loads(next(out.glob("trials/*/trial.json")).read_text())
    assert desc["provenance"]["torchfair"] and len(desc["base_sha256"]) == 64
    # widening the grid keeps the finished point
    cfg = write_yaml({"base": str(BASE), "overrides": {**synth, "trainer.max_epochs": 2},
                      "grid": {"model.lam": [0.0, 1.0]}}, "s.yaml")
    res = run_sweep(cfg, out, workers=1, threads=1)
    assert res == {"done": 2, "failed": 0, "skipped": 1, "total": 2}
    assert len(_trials(out, "grid:val/ndcg@10")) == 3  # one Optuna trial per point run, none twice


@pytest.mark.slow
def test_two_processes_share_one_study_directory(tmp_path, sweep_file):
    cfg = sweep_file({"model.lam": [0.0, 0.25, 0.5, 1.0, -1.0]})
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, sys
        from torchfair.sweeps import run_sweep
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
    trials = _trials(out, "grid:val/ndcg@10")  # one study, each point enqueued once
    assert sorted(ft.user_attrs["trial_id"] for ft in trials) == sorted(ids)
    assert sorted(ft.state.name for ft in trials) == ["COMPLETE"] * 4 + ["FAIL"]
    df = collect_results(out)
    assert sorted(df["status"]) == ["done"] * 4 + ["failed"]
    import pandas as pd
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 5 and set(csv["trial_id"]) == set(df["trial_id"])
    assert sorted(csv["status"]) == sorted(df["status"])



def _children(pid: int) -> set:
    """The pids of ``pid``'s own child processes (Linux: read from /proc)."""
    return {c for c in _descendants(pid) if _ppid(c) == pid}


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _descendants(pid: int) -> set:
    """The pids of the live processes below ``pid`` (Linux: read from /proc)."""
    children: dict = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            children.setdefault(_ppid(int(d.name)), []).append(int(d.name))
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the trial processes in /proc")
def test_killing_one_of_two_sharing_processes_mid_trial_leaves_no_orphan_and_reruns_the_trial_once(
        tmp_path, sweep_file):
    """issue 28: ``kill -9`` of one of two ``--share`` processes left its trial running as an orphan, and the
    trial ran again beside it (two writers in one folder).  Now its trial processes end with it, and the other
    process runs the trial again, once, after they are gone."""
    from torchfair.sweeps.trial import _alive, _running

    cfg = sweep_file({"model.lam": [0.0, 0.25, 0.5, 1.0]})
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, sys
        from torchfair.sweeps import run_sweep
        res = run_sweep({str(cfg)!r}, {str(out)!r}, workers=1, threads=1, share=True, stream=sys.stderr,
                        report=False)
        print(json.dumps(res))
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    try:
        deadline, victim = time.time() + 300, None
        while victim is None:  # the first trial a process started, while its trial process runs
            assert time.time() < deadline and all(p.poll() is None for p in procs)
            lines = (out / "attempts.log").read_text().split("\n") if (out / "attempts.log").is_file() else []
            for tid, pid, _ in (ln.split() for ln in lines if ln):
                if _running(out, tid) and not (out / "trials" / tid / "result.json").exists():
                    victim, killed = tid, next(p for p in procs if p.pid == int(pid))
                    break
            time.sleep(0.05)
        orphans = _descendants(killed.pid)  # its helpers (fork server, resource tracker) and the trial process
        # the trial processes: forked by the fork server (the sweep's own children are its helpers)
        trial_procs = orphans - _children(killed.pid)
        assert trial_procs
        killed.kill()  # the sweep process alone, not its process group
        killed.wait()
        killed_at = time.time()
        last_alive, deadline = {p: time.time() for p in orphans}, time.time() + 20
        while any(_alive(p) for p in orphans) and time.time() < deadline:
            for p in orphans:
                if _alive(p):
                    last_alive[p] = time.time()
            time.sleep(0.02)
        assert not any(_alive(p) for p in orphans), "a process outlived its sweep"
        assert max(last_alive[p] for p in trial_procs) < killed_at + 2, "the trial process outlived its sweep"
        survivor = next(p for p in procs if p is not killed)
        stdout, stderr = survivor.communicate(timeout=300)
        assert survivor.returncode == 0, stderr.decode()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
    res = json.loads(stdout.decode().strip().splitlines()[-1])
    assert res["done"] == 4 and res["failed"] == 0 and res["total"] == 4, res
    attempts = [ln.split() for ln in (out / "attempts.log").read_text().splitlines()]
    ids = [a[0] for a in attempts]
    assert sorted(ids) == sorted([*set(ids), victim]) and len(set(ids)) == 4  # rerun once, the others once
    first, again = (a for a in attempts if a[0] == victim)
    assert int(first[1]) == killed.pid and int(again[1]) == survivor.pid
    # no two writers: the trial started again after its first process was gone (the fork server and the
    # resource tracker, which write nothing, may take a moment longer)
    assert float(again[2]) >= max(last_alive[p] for p in trial_procs) - 0.05, (again, last_alive, trial_procs)
    trials = _trials(out, "grid:val/ndcg@10")
    assert sorted(ft.state.name for ft in trials if ft.user_attrs["trial_id"] == victim) == ["COMPLETE", "FAIL"]
    assert sorted(ft.state.name for ft in trials) == ["COMPLETE"] * 4 + ["FAIL"]
    assert run_sweep(cfg, out, workers=1, threads=1, share=True, report=False)["skipped"] == 4  # nothing again
