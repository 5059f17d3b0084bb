"""Running a sweep: the study lock (``filelock``) and per-trial claims of a shared sweep, the progress line,
the forkserver / ``Popen`` pool, Optuna's ask / tell (resumed from the result files) and the Ray Tune backend."""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

__all__ = ["run_sweep", "SweepLockedError"]

from .report import write_sweep_report
from .spec import SweepSpec, Trial, _goodness, _objective_direction, expand_trials, load_sweep
from .trial import _atomic_json, _log_error, _provenance, _status, check_trial_keys, run_trial


class SweepLockedError(RuntimeError):
    """Another sweep holds the output directory's lock."""


# --------------------------------------------------------------------------------------------- the runner
@contextlib.contextmanager
def _lock(out: Path, wait: bool = False) -> Iterator[None]:
    """The study directory's lock (``filelock``: an OS lock on every platform, released by the OS when its
    holder dies, so a killed sweep leaves no stale lock).  ``wait=False``: :class:`SweepLockedError` when another
    process holds it; ``wait=True``: wait for it (the short critical sections of a shared sweep)."""
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
    """This process's claim on a trial (a held ``filelock``), or ``None`` when another process holds it."""
    from filelock import FileLock, Timeout

    (out / "locks").mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / "locks" / f"{trial_id}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


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


def _prepare(out: Path, spec: SweepSpec, t: Trial, provenance: Optional[dict] = None) -> Path:
    """The trial's directory, reset unless the trial is finished; ``trial.json`` describes it (its parameters,
    resolved config, the base config's content hash, the sweep it belongs to, the torchfair version / commit)."""
    tdir = out / "trials" / t.trial_id
    tdir.mkdir(parents=True, exist_ok=True)
    if _status(tdir) != "done":
        for stale in tdir.iterdir():  # an unfinished or failed attempt starts afresh
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
        _atomic_json(tdir / "trial.json", {"trial_id": t.trial_id, "params": t.params, "base": str(spec.base),
                                           "base_sha256": spec.base_sha, "config": spec.trial_config(t.params),
                                           "sweep": spec.label, "provenance": provenance or {}})
    return tdir


class OptunaSearch:
    """The ``--search optuna`` strategy: Optuna's ask / tell over the sweep's space: grid keys as categorical, ``random`` keys as their
    distributions; finished trials found on disk are told to the study first (resume)."""

    def __init__(self, spec: SweepSpec, n_trials: int, seed: int):
        try:
            import optuna
        except ImportError:
            raise ValueError("`search`: optuna is not installed (`pip install torchfair[optuna]`)") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        d = optuna.distributions
        self.optuna, self.spec, self.n_trials = optuna, spec, n_trials
        if any("grid" in bundle for bundles in spec.variants.values() for bundle in bundles.values()):
            raise ValueError("`search`: optuna searches one space; variants with their own `grid` values are "
                             "run with --search grid")
        self.space = {k: d.CategoricalDistribution(list(v)) for k, v in {**spec.variants, **spec.grid}.items()}
        for k, v in spec.random.items():
            kind, arg = next(iter(v.items()))
            self.space[k] = (d.FloatDistribution(float(arg[0]), float(arg[1]), log=kind == "loguniform")
                             if kind in ("uniform", "loguniform") else
                             d.IntDistribution(int(arg[0]), int(arg[1])) if kind == "int" else
                             d.CategoricalDistribution(arg))
        if not self.space:
            raise ValueError("`search`: optuna needs at least one key under `grid`, `random` or `variants`")
        self.seed = seed
        self.direction = _objective_direction(spec.objective)
        self.study = None
        self._told: List[Tuple[Dict[str, Any], float]] = []  # finished trials of an earlier run with their values
        self.known: Dict[str, Optional[float]] = {}
        self.pending: Dict[str, Any] = {}
        self.asked = 0

    def _study(self):
        if self.study is None:  # seeded by what is already known, so that a resumed run draws new points
            sampler = self.optuna.samplers.TPESampler(seed=self.seed + len(self.known))
            self.study = self.optuna.create_study(
                direction="maximize" if self.direction == "higher" else "minimize", sampler=sampler)
            for params, value in self._told:
                self.study.add_trial(self.optuna.trial.create_trial(params=params, distributions=self.space,
                                                                     value=value))
        return self.study

    def _value(self, value: Optional[float]) -> Optional[float]:
        """The study's value of an objective measure (``|v|`` for a signed measure, whose parity is best)."""
        if value is None or not math.isfinite(value):
            return None
        return abs(value) if self.direction == "abs" else value

    def tell_finished(self, params: Dict[str, Any], value: Optional[float]) -> None:
        value = self._value(value)
        self.known[self.spec.make_trial(params).trial_id] = value
        self.asked += 1
        if value is not None:
            self._told.append((params, value))

    def ask(self) -> Optional[Trial]:
        if self.asked >= self.n_trials:
            return None
        study = self._study()
        for _ in range(100):  # a point already run is told again (its value is known) and another one asked
            ot = study.ask(self.space)
            t = self.spec.make_trial(dict(ot.params))
            if t.trial_id not in self.known and t.trial_id not in self.pending:
                break
            value = self.known.get(t.trial_id)
            study.tell(ot, value, state=self.optuna.trial.TrialState.COMPLETE if value is not None
                       else self.optuna.trial.TrialState.FAIL)
        else:
            return None
        self.asked += 1
        self.pending[t.trial_id] = ot
        return t

    def tell(self, trial_id: str, value: Optional[float]) -> None:
        ot = self.pending.pop(trial_id, None)
        if ot is None:
            return
        value = self._value(value)
        ok = value is not None
        self.known[trial_id] = value if ok else None
        self.study.tell(ot, value if ok else None,
                        state=self.optuna.trial.TrialState.COMPLETE if ok else self.optuna.trial.TrialState.FAIL)


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


def _forked_trial(tdir: str, threads: int) -> None:  # pragma: no cover - runs in the forked trial process
    fd = os.open(os.path.join(tdir, "trial.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    sys.exit(run_trial(tdir))


def _start_trial(tdir: Path, threads: int, gpu: Optional[int], warm) -> Any:
    """Start the trial of ``tdir`` in its own process: forked from the warm server ``warm``, or a fresh
    interpreter (``python -m torchfair.sweep _trial``, one GPU through ``CUDA_VISIBLE_DEVICES``)."""
    if warm is not None and gpu is None:
        proc = warm.Process(target=_forked_trial, args=(str(tdir), threads), daemon=False)
        proc.start()
        return _ForkedTrial(proc)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TORCHFAIR_SWEEP_THREADS=str(threads))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    with open(tdir / "trial.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "torchfair.sweep", "_trial", str(tdir)], stdout=log,
                                stderr=subprocess.STDOUT, env=env)


def _ray_trainable(config: Dict[str, Any]) -> None:  # pragma: no cover - runs inside Ray workers
    """A Ray Tune function trainable: run one prepared trial directory in a subprocess, report its measures."""
    from ray import tune

    tdir = Path(config["tdir"])
    env = dict(os.environ, OMP_NUM_THREADS=str(config["threads"]), TORCHFAIR_SWEEP_THREADS=str(config["threads"]))
    with open(tdir / "trial.log", "w") as log:
        code = subprocess.run([sys.executable, "-m", "torchfair.sweep", "_trial", str(tdir)], stdout=log,
                              stderr=subprocess.STDOUT, env=env).returncode
    if (tdir / "result.json").is_file():
        metrics = json.loads((tdir / "result.json").read_text())["metrics"]
        tune.report({"trial_failed": 0, **{k.replace("/", "_"): v for k, v in metrics.items()}})
    else:
        if not (tdir / "error.json").is_file():
            _atomic_json(tdir / "error.json", {"trial_id": tdir.name, "error": f"trial process exited with {code}"})
        tune.report({"trial_failed": 1})


def _run_ray(out: Path, todo: List[Trial], tdirs: Dict[str, Path], workers: int, threads: int, gpus_per_trial: float,
             address: Optional[str]) -> None:
    """The trials ``todo`` through Ray Tune on an existing cluster (``address``) or a local Ray instance: each a
    Tune trial with ``threads`` CPUs (and ``gpus_per_trial`` GPUs), at most ``workers`` at once.  Trial
    directories must be on storage every node sees (a shared filesystem) for a multi-node cluster."""
    try:
        import ray
        from ray import tune
    except ImportError:
        raise ValueError("`backend`: ray is not installed (`pip install torchfair[ray]`)") from None
    if not todo:
        return
    started = False
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        trainable = tune.with_resources(_ray_trainable, {"cpu": threads, "gpu": gpus_per_trial})
        space = {"tdir": tune.grid_search([str(tdirs[t.trial_id]) for t in todo]), "threads": threads}
        tuner = tune.Tuner(trainable, param_space=space,
                           tune_config=tune.TuneConfig(max_concurrent_trials=workers),
                           run_config=tune.RunConfig(storage_path=str((out / "ray").resolve()), name="tune",
                                                     verbose=1))
        tuner.fit()
    finally:
        if started:
            ray.shutdown()


def run_sweep(config: os.PathLike, out: os.PathLike, *, workers: Optional[int] = None,
              threads: Optional[int] = None, search: str = "grid", n_trials: Optional[int] = None,
              backend: str = "local", address: Optional[str] = None, stream=None, report: bool = True,
              share: bool = False) -> dict:
    """Run (or resume) the sweep of ``config`` into ``out``; returns ``{"done", "failed", "skipped", "total"}``.

    ``workers`` trials run at once (default: the number of GPUs, else 1); each trial process gets ``threads`` torch
    threads (default ``max(1, cpus // workers)``) and, with GPUs, one of them (``CUDA_VISIBLE_DEVICES``).
    ``search="grid"`` runs every trial of the file (grid x random draws); ``search="optuna"`` lets Optuna's TPE
    sampler propose ``n_trials`` trials in the same space, optimising the file's ``objective`` in its declared
    direction (finished trials of an earlier run count towards ``n_trials`` and are told to the study).
    ``backend="ray"`` runs the grid through Ray Tune on the cluster at ``address`` (default: a local Ray instance),
    GPUs as trial resources, results in the same ``out`` (a directory every node sees).

    Every key the sweep sets is checked against the base config before any trial starts (``ValueError`` naming
    it).  ``share=False``: a second sweep on ``out`` is refused (:class:`SweepLockedError`) while this one runs;
    ``share=True`` (grid searches): several processes work on one ``out`` together, each trial claimed by one
    of them (a lock per trial), every trial run once; each process waits for the trials the others run."""
    from .._validation import check_choice

    spec = load_sweep(config)
    check_choice(search, "search", ("grid", "optuna"))
    check_choice(backend, "backend", ("local", "ray"))
    if backend == "ray" and search != "grid":
        raise ValueError("`search`: the ray backend runs grid / random sweeps; use --backend local for optuna")
    if share and (search != "grid" or backend != "local"):
        raise ValueError("`share`: shared sweeps run grid / random searches on the local backend")
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
    tuner = OptunaSearch(spec, n_trials, spec.seed) if search == "optuna" else None
    check_trial_keys(spec, expand_trials(spec))
    provenance = _provenance()
    started_at = time.time()
    with (contextlib.nullcontext() if share else _lock(out)):
        if tuner is None:
            trials = expand_trials(spec)
        else:  # the trials an earlier run of this sweep finished (same resolved config: same id)
            trials = []
            for res in sorted((out / "trials").glob("*/result.json")) if (out / "trials").is_dir() else []:
                r = json.loads(res.read_text())
                if set(r["params"]) == set(tuner.space) and tuner.asked < n_trials \
                        and spec.make_trial(r["params"]).trial_id == r["trial_id"]:
                    trials.append(spec.make_trial(r["params"]))
                    tuner.tell_finished(r["params"], r["metrics"].get(spec.objective))
        tdirs = {t.trial_id: out / "trials" / t.trial_id for t in trials}
        todo = [t for t in trials if _status(tdirs[t.trial_id]) != "done"]
        skipped = len(trials) - len(todo)
        total = len(trials) if tuner is None else n_trials
        prog = _Progress(total, spec.objective, stream)
        done, failed = skipped, 0
        for t in trials:
            if _status(tdirs[t.trial_id]) == "done":
                prog.update(done, 0, failed, json.loads((tdirs[t.trial_id] / "result.json").read_text()))
        running: Dict[str, Tuple[Any, Optional[int], Any]] = {}
        free_gpus = list(range(gpus))
        # without GPUs, trials fork from a server that has imported the training stack once (saves the ~5-10 s
        # import of Lightning per trial); with GPUs each trial is a fresh interpreter, as CUDA must not be
        # initialised before CUDA_VISIBLE_DEVICES is set
        warm = _warm_context() if gpus == 0 else None
        queue = list(todo)
        elsewhere: List[Trial] = []  # claimed by another process (a shared sweep): waited for
        if backend == "ray":
            for t in todo:
                _prepare(out, spec, t, provenance)
            _run_ray(out, todo, tdirs, workers, threads, 1.0 if gpus else 0.0, address)
            queue = []
            for t in todo:
                done += _status(tdirs[t.trial_id]) == "done"
                failed += _status(tdirs[t.trial_id]) != "done"

        def next_trial() -> Optional[Trial]:
            if queue:
                return queue.pop(0)
            if tuner is not None:
                t = tuner.ask()
                if t is not None:
                    trials.append(t)
                    tdirs[t.trial_id] = out / "trials" / t.trial_id
                return t
            return None

        def finished_elsewhere(tdir: Path) -> Optional[str]:
            """``done`` / ``failed`` when the trial ended (here or in another process) during this run."""
            st = _status(tdir)
            if st == "done":
                return st
            if st == "failed" and (tdir / "error.json").stat().st_mtime >= started_at:
                return st
            return None

        try:
            while True:
                while len(running) < workers:
                    t = next_trial()
                    if t is None:
                        break
                    tdir = tdirs[t.trial_id]
                    claim = _claim(out, t.trial_id)
                    if claim is None:
                        elsewhere.append(t)
                        continue
                    ended = finished_elsewhere(tdir)
                    if ended is not None:  # another process ran it while we were busy
                        claim.release()
                        done += ended == "done"
                        failed += ended == "failed"
                        if ended == "done":
                            prog.update(done, len(running), failed,
                                        json.loads((tdir / "result.json").read_text()))
                        continue
                    _prepare(out, spec, t, provenance)
                    _log_attempt(out, t.trial_id)
                    gpu = free_gpus.pop(0) if free_gpus else None
                    running[t.trial_id] = (_start_trial(tdir, threads, gpu, warm), gpu, claim)
                    prog.update(done, len(running), failed)
                if not running:
                    if not elsewhere:
                        break
                    queue.extend(elsewhere)  # wait for the other processes' trials
                    elsewhere.clear()
                    time.sleep(0.5)
                    continue
                time.sleep(0.2)
                for tid, (p, gpu, claim) in list(running.items()):
                    if p.poll() is None:
                        continue
                    del running[tid]
                    if gpu is not None:
                        free_gpus.append(gpu)
                    if _status(tdirs[tid]) == "done":
                        done += 1
                        res = json.loads((tdirs[tid] / "result.json").read_text())
                        if tuner is not None:
                            tuner.tell(tid, res["metrics"].get(spec.objective))
                        prog.update(done, len(running), failed, res)
                    else:
                        if tuner is not None:
                            tuner.tell(tid, None)
                        if _status(tdirs[tid]) != "failed":  # killed before it could write its error
                            _atomic_json(tdirs[tid] / "error.json", {
                                "trial_id": tid, "error": _log_error(tdirs[tid]) or
                                f"trial process exited with {p.returncode}"})
                        failed += 1
                        prog.update(done, len(running), failed)
                    claim.release()
        except KeyboardInterrupt:
            for p, _, _ in running.values():
                p.terminate()
            for p, _, _ in running.values():
                p.wait()
            raise
        finally:
            prog.close()
        with (_lock(out, wait=True) if share else contextlib.nullcontext()):
            _record_sweep(out, spec, config, search, [t.trial_id for t in trials])
            if report:
                write_sweep_report(out)
    return {"done": done, "failed": failed, "skipped": skipped, "total": len(trials)}


def _log_attempt(out: Path, trial_id: str) -> None:
    """Append ``<trial id> <pid> <time>`` to ``out/attempts.log`` (one line per start: who ran what)."""
    fd = os.open(out / "attempts.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{trial_id} {os.getpid()} {time.time():.3f}\n".encode())
    finally:
        os.close(fd)


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
