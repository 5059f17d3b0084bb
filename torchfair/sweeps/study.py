"""The sweep's store: Optuna studies in ``DIR/study.journal`` (Optuna's journal file storage: several processes,
also on machines sharing ``DIR``, append to it under Optuna's own file lock).

* grid / random sweeps: every point is an enqueued trial of the study ``grid:<objective>``; a process takes one
  (``WAITING`` -> ``RUNNING``, atomic in the journal) while holding its ``filelock`` (``DIR/locks/<trial id>.lock``),
  and tells the study its objective when its process ends;
* ``--search optuna``: TPE asks new points in the study ``optuna:<objective>:<space hash>``.

Every Optuna trial carries the sweep's trial id (the hash of its resolved config) as the user attr ``trial_id``: a
point complete in any study of the journal is not run again, so a widened grid keeps its finished points.  A
``RUNNING`` trial whose lock is free was left by a process that died: it is failed and run again, once its trial
process (which ends with the process that started it and holds ``DIR/locks/<trial id>.running.lock`` while it
lives) is gone, so that a trial never runs beside a live copy of itself.  Each study has
its objective's declared direction (signed measures: ``|v|`` minimised); a trial without a finite objective value
is told the worst value."""
from __future__ import annotations

import contextlib
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set

from .spec import SweepSpec, Trial, _hash, _objective_direction
from .trial import _running

__all__ = ["SweepStudy", "SweepLockedError", "JOURNAL"]

#: the journal file of the sweep's studies, in its output directory
JOURNAL = "study.journal"


class SweepLockedError(RuntimeError):
    """Another sweep holds the output directory's lock."""


@contextlib.contextmanager
def _lock(out: Path, wait: bool = False) -> Iterator[None]:
    """The output directory's lock (``filelock``: released by the OS when its holder dies).  ``wait=False``:
    :class:`SweepLockedError` when another process holds it; ``wait=True``: wait for it."""
    from filelock import FileLock, Timeout

    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / ".sweep.lock"))
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        raise SweepLockedError(f"another sweep is writing to {out} (it holds {out / '.sweep.lock'}); wait for it, "
                               "use another --out, or run both with --share") from None
    try:
        yield
    finally:
        lock.release()


def _claim(out: Path, trial_id: str):
    """This process's hold on a trial (a held ``filelock``), or ``None`` when another live process holds it.  A
    trial is run under it only when no process of the trial runs (:func:`~.trial._running`: the orphan of a killed
    sweep, which ends with it)."""
    from filelock import FileLock, Timeout

    (out / "locks").mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / "locks" / f"{trial_id}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ValueError("`executor`: the local executor keeps its study in Optuna's journal storage; install it "
                         "with `pip install 'torchfair[sweep]'`") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def optuna_space(spec: SweepSpec) -> Dict[str, Any]:
    """The sweep's space as Optuna distributions: grid keys and variant names categorical, ``random`` keys their
    distributions."""
    d = _optuna().distributions
    if any("grid" in bundle for bundles in spec.variants.values() for bundle in bundles.values()):
        raise ValueError("`search`: optuna searches one space; variants with their own `grid` values are run with "
                         "--search grid")
    space = {k: d.CategoricalDistribution(list(v)) for k, v in {**spec.variants, **spec.grid}.items()}
    for k, v in spec.random.items():
        kind, arg = next(iter(v.items()))
        space[k] = (d.FloatDistribution(float(arg[0]), float(arg[1]), log=kind == "loguniform")
                    if kind in ("uniform", "loguniform") else
                    d.IntDistribution(int(arg[0]), int(arg[1])) if kind == "int" else d.CategoricalDistribution(arg))
    if not space:
        raise ValueError("`search`: optuna needs at least one key under `grid`, `random` or `variants`")
    return space


class Claim(NamedTuple):
    """A trial this process runs: the sweep's trial, its number in the study, the held lock."""

    trial: Trial
    number: int
    lock: Any


class SweepStudy:
    """The sweep's study in ``out/study.journal`` (see the module docstring): :meth:`prepare` (a grid: enqueue its
    trials), then :meth:`claim` trials one by one (a search: TPE asks up to ``n_trials`` distinct trials) and
    :meth:`finish` each; ``started``: when this run began (a trial failed since then is not retried)."""

    def __init__(self, out: Path, spec: SweepSpec, search: str = "grid", n_trials: Optional[int] = None,
                 started: Optional[datetime] = None):
        optuna = self.optuna = _optuna()
        from optuna.storages.journal import JournalFileBackend

        self.out, self.spec, self.n_trials = out, spec, n_trials
        self.started = started or datetime.now()
        out.mkdir(parents=True, exist_ok=True)
        self.storage = optuna.storages.JournalStorage(JournalFileBackend(str(out / JOURNAL)))
        self.direction = _objective_direction(spec.objective)
        self.space = optuna_space(spec) if search == "optuna" else None
        name = f"{search}:{spec.objective}" + (f":{_hash(repr(self.space), 8)}" if self.space else "")
        self.study = optuna.create_study(storage=self.storage, study_name=name, load_if_exists=True,
                                         direction="maximize" if self.direction == "higher" else "minimize")
        self.study_id = self.storage.get_study_id_from_name(name)
        if self.space:  # seeded by the study's size, so that a resumed search draws new points
            self.study.sampler = optuna.samplers.TPESampler(seed=spec.seed + len(self.study.trials))
        self.trials: Dict[str, Trial] = {}  # this sweep's trials by id, in order (a search: those seen here)

    # ----------------------------------------------------------------------------------------- reading the journal
    def _index(self) -> Dict[str, List[Any]]:
        """trial id -> ``(study id, frozen trial)`` of every Optuna trial that carries it, in every study."""
        index: Dict[str, List[Any]] = {}
        for s in self.optuna.get_all_study_names(self.storage):
            sid = self.storage.get_study_id_from_name(s)
            for ft in self.storage.get_all_trials(sid, deepcopy=False):
                if "trial_id" in ft.user_attrs:
                    index.setdefault(ft.user_attrs["trial_id"], []).append((sid, ft))
        return index

    def _state(self, entries: Sequence[Any]) -> str:
        """``done`` (complete in any study), ``active`` (waiting here or running anywhere), ``failed``, ``new``."""
        T = self.optuna.trial.TrialState
        states = [(sid, ft.state) for sid, ft in entries]
        if any(st == T.COMPLETE for _, st in states):
            return "done"
        if any(st == T.RUNNING or (st == T.WAITING and sid == self.study_id) for sid, st in states):
            return "active"
        return "failed" if states else "new"

    def _value(self, trial_id: str) -> float:
        """The study's value of a trial from its ``result.json`` (the worst value without a finite objective)."""
        path = self.out / "trials" / trial_id / "result.json"
        v = json.loads(path.read_text())["metrics"].get(self.spec.objective) if path.is_file() else None
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return -math.inf if self.direction == "higher" else math.inf
        return abs(v) if self.direction == "abs" else float(v)

    def _attrs(self, trial: Trial) -> Dict[str, Any]:
        return {"trial_id": trial.trial_id, "sweep": self.spec.label}

    def _set_state(self, sid: int, number: int, state, error: Optional[str] = None) -> bool:
        tid = self.storage.get_trial_id_from_study_id_trial_number(sid, number)
        if error:
            self.storage.set_trial_user_attr(tid, "error", error)
        try:
            return self.storage.set_trial_state_values(tid, state)
        except self.optuna.exceptions.UpdateFinishedTrialError:
            return False

    def _fail(self, sid: int, number: int, error: str) -> None:
        self._set_state(sid, number, self.optuna.trial.TrialState.FAIL, error)

    # ----------------------------------------------------------------------------------------- grid / random
    def prepare(self, trials: Sequence[Trial] = ()) -> int:
        """Grid / random: enqueue the ``trials`` that are not complete, queued or running (a failed trial is
        retried, unless it failed since this sweep started: another process of a shared sweep ran it); a
        ``result.json`` the study does not count as complete (written without it, e.g. by the Ray executor) is
        recorded as a complete trial.  Returns the number of trials complete before this run."""
        index = self._index()
        if self.space is not None:
            return sum(self._state(index[tid]) == "done" for tid in self._counted(index))
        self.trials = {t.trial_id: t for t in trials}
        skipped = 0
        for t in trials:
            entries = index.get(t.trial_id, [])
            state = self._state(entries)
            if state in ("new", "failed") and (self.out / "trials" / t.trial_id / "result.json").is_file():
                self.study.add_trial(self.optuna.trial.create_trial(
                    value=self._value(t.trial_id), user_attrs={**self._attrs(t), "recorded": "result.json"}))
                state = "done"
            skipped += state == "done"
            if state == "new" or (state == "failed" and max(
                    ft.datetime_start or datetime.min for _, ft in entries) < self.started):
                self.study.enqueue_trial(dict(t.params), user_attrs=self._attrs(t))
        return skipped

    def claim(self) -> Optional[Claim]:
        """The next trial for this process, now ``RUNNING`` in the study and its lock held; ``None`` when no trial
        is left to take (others may still be running)."""
        if self.space is not None:
            return self._ask()
        T = self.optuna.trial.TrialState
        index = self._index()
        for tid, trial in self.trials.items():
            if self._state(index.get(tid, [])) != "active":
                continue
            lock = _claim(self.out, tid)
            if lock is None:
                continue
            if _running(self.out, tid):  # an orphan of a killed process still runs it: later, once it is gone
                lock.release()
                continue
            self._recover(tid, self._index().get(tid, []))  # read again under the lock
            for sid, ft in self._index().get(tid, []):
                if sid == self.study_id and ft.state == T.WAITING and self._set_state(sid, ft.number, T.RUNNING):
                    return Claim(trial, ft.number, lock)
            lock.release()
        return None

    def _recover(self, tid: str, entries: Sequence[Any]) -> None:
        """Under the trial's lock: a ``RUNNING`` trial was left by a process that died.  Told complete when it wrote
        its result, else failed and enqueued again."""
        T = self.optuna.trial.TrialState
        stale = [(sid, ft) for sid, ft in entries if ft.state == T.RUNNING]
        if not stale:
            return
        done = (self.out / "trials" / tid / "result.json").is_file()
        if not done and not any(sid == self.study_id and ft.state == T.WAITING for sid, ft in entries):
            params = stale[-1][1].params or dict(self.trials[tid].params)
            self.study.enqueue_trial(params, user_attrs=self._attrs(self.trials[tid]))
        for sid, ft in stale:
            if done:
                tr = self.storage.get_trial_id_from_study_id_trial_number(sid, ft.number)
                self.storage.set_trial_state_values(tr, T.COMPLETE, [self._value(tid)])
            else:
                self._fail(sid, ft.number, "left running by a process that ended (killed?); run again")

    def _ids(self, index: Dict[str, List[Any]]) -> List[str]:
        """This sweep's trial ids: the grid's, or the distinct trials of the search (in the order asked)."""
        if self.space is None:
            return list(self.trials)
        return sorted(self._counted(index), key=lambda t: min(
            ft.number for sid, ft in index[t] if sid == self.study_id))

    def unfinished(self) -> bool:
        """Whether a trial of this sweep is still queued or running (here or in another process)."""
        index = self._index()
        return any(self._state(index.get(tid, [])) == "active" for tid in self._ids(index))

    # ----------------------------------------------------------------------------------------- optuna search
    def _counted(self, index: Dict[str, List[Any]]) -> Set[str]:
        """The distinct trials of this search: in its study, complete, queued, running, or failed in this run."""
        T = self.optuna.trial.TrialState
        return {tid for tid, entries in index.items() for sid, ft in entries if sid == self.study_id and (
            ft.state != T.FAIL or (ft.datetime_start or self.started) >= self.started)}

    def _size(self) -> float:
        """The number of points of the space (infinite with a float parameter)."""
        d = self.optuna.distributions
        return math.prod(len(v.choices) if isinstance(v, d.CategoricalDistribution) else
                         v.high - v.low + 1 if isinstance(v, d.IntDistribution) else math.inf
                         for v in self.space.values())

    def _ask(self) -> Optional[Claim]:
        T = self.optuna.trial.TrialState
        index = self._index()
        for tid, entries in index.items():  # trials a dead process left running: queued again (asked first)
            if any(sid == self.study_id and ft.state == T.RUNNING for sid, ft in entries):
                lock = _claim(self.out, tid)
                if lock is not None and _running(self.out, tid):  # its orphan still runs: later
                    lock.release()
                elif lock is not None:
                    params = next(ft.params for sid, ft in entries if sid == self.study_id and ft.state == T.RUNNING)
                    self.trials.setdefault(tid, self.spec.make_trial(params))
                    self._recover(tid, self._index().get(tid, []))
                    lock.release()
        for _ in range(100):  # a point already run is told its value and another one asked
            index = self._index()
            if len(self._counted(index)) >= min(self.n_trials, self._size()) and not any(
                    sid == self.study_id and ft.state == T.WAITING for e in index.values() for sid, ft in e):
                return None
            ot = self.study.ask(self.space)
            t = self.spec.make_trial(dict(ot.params))
            for k, v in self._attrs(t).items():
                ot.set_user_attr(k, v)
            others = [(sid, ft) for sid, ft in index.get(t.trial_id, []) if ft.number != ot.number
                      or sid != self.study_id]
            state = self._state(others)
            lock = None if state in ("done", "active") else _claim(self.out, t.trial_id)
            if lock is None:  # a duplicate: told the value it has, or failed while another process runs it
                ot.set_user_attr("duplicate", True)
                if state == "done":
                    self.study.tell(ot, self._value(t.trial_id))
                else:
                    self.study.tell(ot, state=T.FAIL)
                continue
            self.trials[t.trial_id] = t
            return Claim(t, ot.number, lock)
        return None

    # ----------------------------------------------------------------------------------------- both
    def finish(self, claim: Claim, ok: bool, error: Optional[str] = None) -> None:
        """Tell the study how a claimed trial ended (its objective from ``result.json`` when ``ok``) and release
        its lock."""
        try:
            if ok:
                self.study.tell(claim.number, self._value(claim.trial.trial_id))
            else:
                self._fail(self.study_id, claim.number, error or "failed")
        finally:
            claim.lock.release()

    def counts(self) -> Dict[str, Any]:
        """``done`` / ``failed`` trials of this sweep and their ids (a search: the distinct trials it counts)."""
        index = self._index()
        ids = self._ids(index)
        states = [self._state(index.get(tid, [])) for tid in ids]
        return {"done": states.count("done"), "failed": states.count("failed"), "ids": ids}
