"""torchfair.sweeps.study: the sweep's Optuna study in DIR/study.journal, without training anything: the grid
enqueued once, processes sharing one queue, a trial left running by a dead process run again (or recorded when
it wrote its result), a widened grid keeping its finished trials, result files no study knows, TPE asking
distinct trials up to the budget, directions from the declarations, and the output directory's lock."""
import json
import math
import os
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna", reason="the local executor's study store (pip install torchfair[sweep])")

from torchfair.sweeps import SweepLockedError, expand_trials, load_sweep  # noqa: E402
from torchfair.sweeps.study import JOURNAL, SweepStudy, _lock  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
S = optuna.trial.TrialState


def _load(out: Path, name: str):
    from optuna.storages.journal import JournalFileBackend
    return optuna.load_study(study_name=name, storage=optuna.storages.JournalStorage(
        JournalFileBackend(str(out / JOURNAL))))


def _result(out: Path, trial, **metrics) -> None:
    """What a finished trial process leaves: its result.json."""
    tdir = out / "trials" / trial.trial_id
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "result.json").write_text(json.dumps({"trial_id": trial.trial_id, "params": trial.params,
                                                  "metrics": metrics or {"val/ndcg@10": 0.5}}))


def _run(study: SweepStudy, out: Path, value: float = 0.5) -> list:
    """Claim and finish every trial left, as the runner does; the parameters of each."""
    ran = []
    while (c := study.claim()) is not None:
        _result(out, c.trial, **{"val/ndcg@10": value})
        study.finish(c, True)
        ran.append(c.trial.params)
    return ran


def test_the_grid_is_enqueued_in_the_journal_once(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0, 1.0], "seed_everything": [0, 1]}))
    trials, out = expand_trials(spec), tmp_path / "out"
    assert SweepStudy(out, spec).prepare(trials) == 0
    assert (out / JOURNAL).is_file()
    study = _load(out, f"grid:{spec.objective}")
    waiting = study.get_trials(states=(S.WAITING,))
    assert [ft.user_attrs["trial_id"] for ft in waiting] == [t.trial_id for t in trials]
    assert [ft.system_attrs["fixed_params"] for ft in waiting] == [t.params for t in trials]
    assert {ft.user_attrs["sweep"] for ft in waiting} == {spec.label}
    assert SweepStudy(out, spec).prepare(trials) == 0  # a rerun or a second process: nothing enqueued twice
    assert len(_load(out, f"grid:{spec.objective}").trials) == 4


def test_processes_share_the_queue_and_each_trial_is_taken_once(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0, 0.5, 1.0, 2.0]}))
    trials, out = expand_trials(spec), tmp_path / "out"
    a, b = SweepStudy(out, spec), SweepStudy(out, spec)  # two journal clients: two workers of Optuna
    a.prepare(trials)
    b.prepare(trials)
    claims = [a.claim(), b.claim(), a.claim(), b.claim()]
    assert sorted(c.trial.trial_id for c in claims) == sorted(t.trial_id for t in trials)
    assert a.claim() is None and b.claim() is None and a.unfinished()
    for c, who in zip(claims, (a, b, a, b)):
        _result(out, c.trial)
        who.finish(c, True)
    assert not a.unfinished() and a.counts()["done"] == b.counts()["done"] == 4
    assert [ft.state for ft in _load(out, f"grid:{spec.objective}").trials] == [S.COMPLETE] * 4


def test_a_trial_left_running_by_a_dead_process_is_run_again(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0, 1.0, 2.0]}))
    trials, out = expand_trials(spec), tmp_path / "out"
    dead = SweepStudy(out, spec)
    dead.prepare(trials)
    done, left = dead.claim(), dead.claim()
    _result(out, done.trial)
    dead.finish(done, True)
    live = SweepStudy(out, spec)
    assert live.prepare(trials) == 1
    assert [c.trial.trial_id for c in iter(live.claim, None)] == [trials[2].trial_id]  # still held: not taken
    left.lock.release()  # its process died: the OS released its lock, the study still says RUNNING
    later = SweepStudy(out, spec)
    assert later.prepare(trials) == 1
    again = later.claim()
    assert again.trial.trial_id == left.trial.trial_id and again.number != left.number
    old = _load(out, f"grid:{spec.objective}").trials[left.number]
    assert old.state == S.FAIL and "left running" in old.user_attrs["error"]


def test_a_trial_killed_after_writing_its_result_is_recorded_not_run_again(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0]}))
    trials, out = expand_trials(spec), tmp_path / "out"
    dead = SweepStudy(out, spec)
    dead.prepare(trials)
    c = dead.claim()
    _result(out, c.trial, **{"val/ndcg@10": 0.25})
    c.lock.release()  # killed between its result and telling the study
    live = SweepStudy(out, spec)
    live.prepare(trials)
    assert live.claim() is None and live.counts()["done"] == 1
    ft = _load(out, f"grid:{spec.objective}").trials[c.number]
    assert ft.state == S.COMPLETE and ft.value == 0.25


def test_a_widened_grid_keeps_its_finished_trials(tmp_path, sweep_file):
    out = tmp_path / "out"
    narrow = load_sweep(sweep_file({"model.lam": [0.0, 1.0]}))
    study = SweepStudy(out, narrow)
    study.prepare(expand_trials(narrow))
    assert len(_run(study, out)) == 2
    wide = load_sweep(sweep_file({"model.lam": [0.0, 1.0, 2.0]}))
    study = SweepStudy(out, wide)
    assert study.prepare(expand_trials(wide)) == 2
    assert _run(study, out) == [{"model.lam": 2.0}]
    assert study.counts()["done"] == 3


def test_a_result_file_no_study_knows_is_recorded(tmp_path, sweep_file):
    # e.g. a trial the Ray executor ran into the same directory
    spec = load_sweep(sweep_file({"model.lam": [0.0, 1.0]}))
    trials, out = expand_trials(spec), tmp_path / "out"
    _result(out, trials[0], **{"val/ndcg@10": 0.75})
    study = SweepStudy(out, spec)
    assert study.prepare(trials) == 1
    recorded = _load(out, f"grid:{spec.objective}").get_trials(states=(S.COMPLETE,))
    assert [(ft.user_attrs["trial_id"], ft.value, ft.user_attrs["recorded"]) for ft in recorded] == \
        [(trials[0].trial_id, 0.75, "result.json")]
    assert _run(study, out) == [trials[1].params]


def test_a_failed_trial_is_retried_by_a_later_run_not_by_a_concurrent_one(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [-1.0]}))
    trials, out = expand_trials(spec), tmp_path / "out"
    t0 = datetime.now()
    first = SweepStudy(out, spec, started=t0)
    first.prepare(trials)
    c = first.claim()
    first.finish(c, False, "lam must be >= 0")
    assert first.counts()["failed"] == 1 and not first.unfinished()
    joined = SweepStudy(out, spec, started=t0)  # started with the first: the failure is this run's
    joined.prepare(trials)
    assert joined.claim() is None
    rerun = SweepStudy(out, spec)  # started after it: retried
    rerun.prepare(trials)
    assert rerun.claim().trial.trial_id == trials[0].trial_id
    assert _load(out, f"grid:{spec.objective}").trials[c.number].user_attrs["error"] == "lam must be >= 0"


def test_optuna_search_asks_distinct_trials_up_to_the_budget(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"seed_everything": [0, 1]}, random={"model.lam": {"loguniform": [0.01, 1.0]}}))
    out = tmp_path / "out"
    study = SweepStudy(out, spec, "optuna", n_trials=3)
    assert study.prepare() == 0
    ran = _run(study, out)
    assert len(ran) == 3 and all(0.01 <= p["model.lam"] <= 1.0 and p["seed_everything"] in (0, 1) for p in ran)
    assert study.study.study_name.startswith(f"optuna:{spec.objective}:")
    for ft in study.study.trials:
        assert ft.user_attrs["trial_id"] == spec.make_trial(ft.params).trial_id
    more = SweepStudy(out, spec, "optuna", n_trials=4)  # resumed from the study: one more
    assert more.prepare() == 3 and len(_run(more, out)) == 1 and more.counts()["done"] == 4
    # two processes on one search: the budget is the study's
    a, b = (SweepStudy(tmp_path / "shared", spec, "optuna", n_trials=3) for _ in range(2))
    claims = [a.claim(), b.claim(), a.claim()]
    assert b.claim() is None and len({c.trial.trial_id for c in claims}) == 3


def test_optuna_search_reuses_trials_run_before(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0, 1.0]}))
    out = tmp_path / "out"
    grid = SweepStudy(out, spec)
    grid.prepare(expand_trials(spec))
    assert len(_run(grid, out, value=0.5)) == 2
    search = SweepStudy(out, spec, "optuna", n_trials=3)  # the space holds 2 points, both run
    assert search.claim() is None
    assert search.counts() == {"done": 2, "failed": 0, "ids": search.counts()["ids"]}
    assert {ft.value for ft in search.study.trials} == {0.5}


@pytest.mark.parametrize("objective, metrics, direction, value", [
    ("val/ndcg@10", {"val/ndcg@10": 0.25}, "MAXIMIZE", 0.25),
    ("val/discordant_fraction", {"val/discordant_fraction": 0.25}, "MINIMIZE", 0.25),
    ("val/dips_gap", {"val/dips_gap": -0.25}, "MINIMIZE", 0.25),  # signed: |v|
    ("val/ndcg@10", {}, "MAXIMIZE", -math.inf),  # no objective value: the worst
])
def test_the_study_has_the_objective_s_declared_direction(tmp_path, sweep_file, objective, metrics, direction,
                                                          value):
    spec = load_sweep(sweep_file({"model.lam": [0.0]}, objective=objective))
    out = tmp_path / "out"
    study = SweepStudy(out, spec)
    study.prepare(expand_trials(spec))
    c = study.claim()
    _result(out, c.trial, **metrics)
    (out / "trials" / c.trial.trial_id / "result.json").write_text(json.dumps({"metrics": metrics}))
    study.finish(c, True)
    assert study.study.direction.name == direction and study.study.trials[0].value == value


def test_the_study_lock_is_portable_and_refuses_a_second_holder(tmp_path):
    import inspect

    import torchfair.sweeps.runner
    import torchfair.sweeps.study
    assert all("fcntl" not in inspect.getsource(m) for m in (torchfair.sweeps.runner, torchfair.sweeps.study))
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from torchfair.sweeps.study import _lock
        with _lock(Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(SweepLockedError, match="another sweep"):
            with _lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with _lock(tmp_path):  # released by the OS when its holder died: no stale lock
        pass


def test_a_search_trial_left_running_by_a_dead_process_is_asked_again(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"seed_everything": [0, 1]}, random={"model.lam": {"loguniform": [0.01, 1.0]}}))
    out = tmp_path / "out"
    dead = SweepStudy(out, spec, "optuna", n_trials=2)
    left = dead.claim()
    left.lock.release()  # its process died
    live = SweepStudy(out, spec, "optuna", n_trials=2)
    again = live.claim()
    assert again.trial.trial_id == left.trial.trial_id and again.number != left.number
    _result(out, again.trial)
    live.finish(again, True)
    assert len(_run(live, out)) == 1 and live.counts()["done"] == 2
    assert live.study.trials[left.number].state == S.FAIL


@pytest.mark.parametrize("search", ["grid", "optuna"])
def test_a_trial_is_not_run_again_while_an_orphan_of_it_still_runs(tmp_path, sweep_file, search):
    """issue 28: the sweep killed, its trial process went on; the restart ran the trial beside it.  The claim
    waits until no process holds the trial's running lock."""
    from torchfair.sweeps.trial import _running_lock

    spec = load_sweep(sweep_file({"model.lam": [0.0]}) if search == "grid" else
                      sweep_file({"seed_everything": [0]}, random={"model.lam": {"int": [1, 1]}}))
    out = tmp_path / "out"
    dead = SweepStudy(out, spec, search, n_trials=1)
    dead.prepare(expand_trials(spec) if search == "grid" else ())
    left = dead.claim()
    path = _running_lock(out, left.trial.trial_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    orphan = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from filelock import FileLock
        lock = FileLock({str(path)!r})
        lock.acquire(timeout=0)
        print("running", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert orphan.stdout.readline().strip() == b"running"
        left.lock.release()  # the sweep died, its trial process (the orphan) still runs
        live = SweepStudy(out, spec, search, n_trials=1)
        live.prepare(expand_trials(spec) if search == "grid" else ())
        assert live.claim() is None and live.unfinished()  # not beside the orphan
        assert _load(out, live.study.study_name).trials[left.number].state == S.RUNNING
    finally:
        orphan.kill()
        orphan.wait()
    again = live.claim()  # the orphan is gone: failed and run again, once
    assert again.trial.trial_id == left.trial.trial_id and again.number != left.number
    assert live.claim() is None
    _result(out, again.trial)
    live.finish(again, True)
    trials = _load(out, live.study.study_name).trials
    assert trials[left.number].state == S.FAIL and not live.unfinished()
    assert sorted(ft.state.name for ft in trials if ft.user_attrs["trial_id"] == left.trial.trial_id) == \
        ["COMPLETE", "FAIL"]
