"""Running a sweep: the forkserver / ``Popen`` pool of trial processes (one GPU each when there are GPUs), fed by
the sweep's Optuna study (:mod:`.study`), the progress line, and the dispatch to the Ray Tune executor."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple

from jsonargparse.typing import PositiveInt

__all__ = ["run_sweep", "SweepLockedError"]

from .tradeoff import write_sweep_report
from .spec import SweepSpec, Trial, _goodness, _objective_direction, expand_trials, load_sweep
from .study import SweepLockedError, SweepStudy, _lock, optuna_space
from .trial import (_atomic_json, _guard_trial, _log_attempt, _log_error, _prepare, _provenance, _status,
                    _trial_process, check_trial_keys, run_trial)


class _Progress:
    """One status line (rewritten in place on a terminal, one line per event otherwise)."""

    def __init__(self, total: int, objective: str, stream=None):
        self.total, self.objective = total, objective
        self.direction = _objective_direction(objective)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.best: Optional[Tuple[float, str, float]] = None

    def update(self, done: int, running: int, failed: int, result: Optional[dict] = None) -> None:
        if result is not None:
            v = result.get("metrics", {}).get(self.objective)
            g = _goodness(v, self.direction)
            if g is not None and (self.best is None or g > self.best[2]):
                self.best = (v, result["trial_id"], g)
        best = "-" if self.best is None else f"{self.best[0]:.4f} ({self.best[1]})"
        line = (f"[sweep] done {done}/{self.total} · running {running} · failed {failed} · best {self.objective} "
                f"{best}")
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


class _ForkedTrial:
    """A trial process forked from the warm server, with the ``Popen`` methods the runner uses."""

    def __init__(self, proc):
        self.proc = proc

    def poll(self) -> Optional[int]:
        return self.proc.exitcode

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.exitcode

    def terminate(self) -> None:
        self.proc.terminate()

    def wait(self) -> Optional[int]:
        self.proc.join()
        return self.proc.exitcode


def _warm_context():
    """A ``forkserver`` multiprocessing context whose server preloads the training stack; ``None`` where the
    platform has no ``forkserver`` (then every trial starts a fresh interpreter)."""
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:  # pragma: no cover - Windows
        return None
    ctx.set_forkserver_preload(["torchfair.training.cli", "torchfair.sweeps.runner"])
    return ctx


def _forked_trial(tdir: str, threads: int, slot: Optional[int] = None, sweep_pid: Optional[int] = None
                  ) -> None:  # pragma: no cover - runs in the forked trial process
    _guard_trial(Path(tdir), sweep_pid)  # ends with the sweep; holds the trial's running lock
    fd = os.open(os.path.join(tdir, "trial.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    sys.exit(run_trial(tdir, slot))


def _start_trial(tdir: Path, threads: int, gpu: Optional[int], warm, slot: Optional[int] = None) -> Any:
    """Start the trial of ``tdir`` in its own process: forked from the warm server ``warm``, or a fresh
    interpreter (``python -m torchfair.sweeps _trial``, one GPU through ``CUDA_VISIBLE_DEVICES``); ``slot``: the
    worker slot the trial records in its ``result.json`` (``timing.slot``)."""
    if warm is not None and gpu is None:
        proc = warm.Process(target=_forked_trial, args=(str(tdir), threads, slot, os.getpid()),
                            daemon=False)
        proc.start()
        return _ForkedTrial(proc)
    return _trial_process(tdir, threads, gpu, slot)


def run_sweep(config: os.PathLike, out: str, *, workers: Optional[PositiveInt] = None,
              threads: Optional[PositiveInt] = None, search: Literal["grid", "optuna"] = "grid",
              n_trials: Optional[PositiveInt] = None, executor: Literal["local", "ray"] = "local",
              address: Optional[str] = None, stream=None, report: bool = True, share: bool = False) -> dict:
    """Run (or resume) the sweep of ``config`` into ``out``; returns ``{"done", "failed", "skipped", "total"}``.

    ``workers`` trials run at once (default: the number of GPUs, else 1), each in a worker slot ``0 .. workers - 1``
    that its ``result.json`` records with its timing (:func:`~torchfair.sweeps.run_trial`); each trial process gets
    ``threads`` torch threads (default ``max(1, cpus // workers)``) and, with GPUs, one of them
    (``CUDA_VISIBLE_DEVICES``).
    ``search="grid"`` runs every trial of the file (grid x random draws), enqueued in the sweep's Optuna study
    (``out/study.journal``); ``search="optuna"`` lets TPE ask ``n_trials`` distinct trials in the same space,
    optimising the file's ``objective`` in its declared direction (trials of an earlier run count).
    ``executor="ray"`` runs the grid through Ray Tune on the cluster at ``address`` (default: a local Ray
    instance), GPUs as trial resources, results in the same ``out`` (a directory every node sees).

    Every key the sweep sets is checked against the base config before any trial starts (``ValueError`` naming
    it).  ``share=False``: a second sweep on ``out`` is refused (:class:`SweepLockedError`) while this one runs;
    ``share=True``: several processes, also on machines sharing ``out``, work on its study together, every trial
    run once; each waits for the trials the others run.

    Args:
        config: the sweep file (YAML: base, grid...).
        out: output directory (created; resumed if it exists).
        workers: trials at once (default: the number of GPUs, else 1).
        threads: torch threads per trial (default: CPUs / workers).
        search: grid (every trial of the file) or optuna (TPE over the same space; the optuna extra).
        n_trials: number of trials for search optuna.
        executor: local processes, or ray (Ray Tune on a cluster; the ray extra).
        address: Ray cluster address for executor ray (auto, ray://head:10001; default: a local Ray).
        stream: where the live progress table goes (a file object; default: stderr).
        report: write the report (results.csv, Pareto figures, report.md) at the end.
        share: work on out together with other share processes (each trial run once).
    """
    from .._validation import check_choice

    started = datetime.now()
    spec = load_sweep(config)
    check_choice(search, "search", ("grid", "optuna"))
    check_choice(executor, "executor", ("local", "ray"))
    if executor == "ray" and search != "grid":
        raise ValueError("`search`: the ray executor runs grid / random sweeps; use --executor local for optuna")
    if share and executor != "local":
        raise ValueError("`share`: shared sweeps run on the local executor (Ray schedules its cluster itself)")
    out = Path(out)
    gpus = _gpu_count()
    workers = workers if workers is not None else max(1, gpus)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"`workers` must be an int >= 1; got {workers!r}")
    if search == "optuna" and (isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1):
        raise ValueError(f"`n_trials` must be an int >= 1 with search='optuna'; got {n_trials!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"`threads` must be an int >= 1; got {threads!r}")
    threads = threads if threads is not None else max(1, (os.cpu_count() or 1) // workers)
    if search == "optuna":
        optuna_space(spec)  # its errors before any work
    trials = expand_trials(spec)
    check_trial_keys(spec, trials)
    provenance = _provenance()
    with (contextlib.nullcontext() if share else _lock(out)):
        if executor == "ray":
            from .ray_executor import run_ray

            todo = [t for t in trials if _status(out / "trials" / t.trial_id) != "done"]
            run_ray(out, spec, todo, workers, threads, 1.0 if gpus else 0.0, address, provenance)
            done = sum(_status(out / "trials" / t.trial_id) == "done" for t in trials)
            res = {"done": done, "failed": len(trials) - done, "skipped": len(trials) - len(todo),
                   "total": len(trials), "ids": [t.trial_id for t in trials]}
        else:
            study = SweepStudy(out, spec, search, n_trials, started)
            res = _run_local(out, spec, study, trials, workers, threads, gpus, share, provenance,
                             _Progress(len(trials) if search == "grid" else n_trials, spec.objective, stream))
        with (_lock(out, wait=True) if share else contextlib.nullcontext()):
            _record_sweep(out, spec, config, search, res.pop("ids"))
            if report:
                write_sweep_report(out)
    return res


def _run_local(out: Path, spec: SweepSpec, study: SweepStudy, trials: List[Trial], workers: int, threads: int,
               gpus: int, share: bool, provenance: dict, prog: "_Progress") -> dict:
    """The local pool: claim trials from the study, run ``workers`` at once, tell the study how each ended."""
    with (_lock(out, wait=True) if share else contextlib.nullcontext()):  # one process enqueues at a time
        skipped = study.prepare(trials)
    counts = study.counts()
    for tid in counts["ids"]:
        if _status(out / "trials" / tid) == "done":
            prog.update(counts["done"], 0, counts["failed"], json.loads((out / "trials" / tid / "result.json")
                                                                          .read_text()))
    running: Dict[str, Tuple[Any, Optional[int], Any]] = {}
    free_gpus = list(range(gpus))
    free_slots = list(range(workers))  # the worker slot each trial records (timing.slot)
    slot_of: Dict[str, int] = {}
    # without GPUs, trials fork from a server that has imported the training stack once (saves the ~5-10 s
    # import of Lightning per trial); with GPUs each trial is a fresh interpreter, as CUDA must not be
    # initialised before CUDA_VISIBLE_DEVICES is set
    warm = _warm_context() if gpus == 0 else None
    shown = (counts["done"], 0, counts["failed"])
    try:
        while True:
            while len(running) < workers:
                claim = study.claim()
                if claim is None:
                    break
                tid = claim.trial.trial_id
                tdir = _prepare(out, spec, claim.trial, provenance)
                _log_attempt(out, tid)
                gpu = free_gpus.pop(0) if free_gpus else None
                slot_of[tid] = free_slots.pop(0)
                running[tid] = (_start_trial(tdir, threads, gpu, warm, slot_of[tid]), gpu, claim)
            if not running:
                if not study.unfinished():
                    break
                time.sleep(0.5)  # the trials other processes run (a shared sweep)
            time.sleep(0.2)
            ended = []
            for tid, (p, gpu, claim) in list(running.items()):
                if p.poll() is None:
                    continue
                del running[tid]
                if gpu is not None:
                    free_gpus.append(gpu)
                free_slots.append(slot_of.pop(tid))
                free_slots.sort()
                tdir = out / "trials" / tid
                if _status(tdir) == "pending":  # killed before it could write its error
                    _atomic_json(tdir / "error.json", {"trial_id": tid, "error": _log_error(tdir) or
                                                       f"trial process exited with {p.returncode}"})
                ok = _status(tdir) == "done"
                study.finish(claim, ok, None if ok else json.loads((tdir / "error.json").read_text()).get("error"))
                ended.append(json.loads((tdir / "result.json").read_text()) if ok else None)
            counts = study.counts()
            now = (counts["done"], len(running), counts["failed"])
            for result in ended or ([None] if now != shown else []):  # also the others' trials (shared)
                prog.update(*now, result)
            shown = now
    except BaseException:
        for p, _, _ in running.values():
            p.terminate()
        for tid, (p, _, claim) in running.items():
            p.wait()
            study.finish(claim, _status(out / "trials" / tid) == "done", "interrupted")
        raise
    finally:
        prog.close()
    counts = study.counts()
    return {"done": counts["done"], "failed": counts["failed"], "skipped": skipped, "total": len(counts["ids"]),
            "ids": counts["ids"]}


def _record_sweep(out: Path, spec: SweepSpec, config: os.PathLike, search: str, trial_ids: List[str]) -> None:
    """``sweep.json``: the sweep that ran last (its label, file, trials: the report's "current" sweep);
    ``sweeps.json``: every sweep that ran into ``out`` with its trials."""
    entry = {"sweep": spec.label, "config": str(Path(config).resolve()), "search": search,
             "objective": spec.objective, "base_sha256": spec.base_sha, "trials": trial_ids}
    _atomic_json(out / "sweep.json", entry)
    history_path = out / "sweeps.json"
    history = json.loads(history_path.read_text()) if history_path.is_file() else {}
    old = history.get(spec.label, {}).get("trials", [])
    history[spec.label] = {**entry, "trials": old + [t for t in trial_ids if t not in old]}
    _atomic_json(history_path, history)
