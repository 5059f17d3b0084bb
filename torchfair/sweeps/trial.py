"""One trial: its ``torchfair fit`` arguments, the check of every key against the base config before a sweep
starts, running it in this process (``result.json`` / ``error.json``, with the trial's timing), its status."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["trial_args", "run_trial", "check_trial_keys"]

from .spec import SweepSpec, Trial


# --------------------------------------------------------------------------------------------- one trial
def _cli_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def trial_args(spec_base: os.PathLike, config: Mapping[str, Any], tdir: Path) -> List[str]:
    """The ``torchfair fit`` arguments of a trial: the base config, the trial's dotted keys
    (:meth:`SweepSpec.trial_config`), and a CSV logger and checkpoints under the trial's directory."""
    args = ["--config", str(spec_base)]
    for k, v in config.items():
        args += [f"--{k}", _cli_value(v)]
    logger = {"class_path": "pytorch_lightning.loggers.CSVLogger",
              "init_args": {"save_dir": str(tdir), "name": "logs", "version": ""}}
    args += ["--trainer.default_root_dir", str(tdir), "--trainer.logger", json.dumps(logger)]
    return args


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _trial_cli() -> type:
    """The training CLI class of a trial (``run=False``: no subcommand; set before LightningCLI sets it, for hooks
    that read it while parsing), without :class:`~torchfair.training.cli.ValidateLastEpoch`: a sweep's config may
    turn validation off while training (``check_val_every_n_epoch: 1000``), the trial validates after the fit."""
    from ..training.cli import FairLightningCLI

    class TrialCLI(FairLightningCLI):
        subcommand = None
        validate_last_epoch = False  # run_trial validates (and tests) after the fit itself

    return TrialCLI


#: the environment variable through which the runner tells a trial process its worker slot
SLOT_ENV = "TORCHFAIR_SWEEP_SLOT"


def _loadavg() -> Optional[List[float]]:
    try:
        return [round(x, 3) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def _timer(trainer) -> Any:
    """The trainer's ``Timer`` callback (the config's own, else one appended: no duration, so it never stops a
    fit)."""
    from pytorch_lightning.callbacks import Timer

    found = [c for c in trainer.callbacks if isinstance(c, Timer)]
    if found:
        return found[0]
    timer = Timer(duration=None, verbose=False)
    trainer.callbacks.append(timer)
    return timer


def environment() -> Dict[str, Any]:
    """What decides a trial's numbers besides its config and seed, as ``result.json["environment"]`` records it:
    ``torch_threads`` (``torch.get_num_threads()``), ``deterministic`` (``torch.are_deterministic_algorithms_enabled()``),
    ``kernels`` (``TORCHFAIR_KERNELS``, ``auto`` when unset; the code path of each call follows from it and the
    input), ``numba`` (whether numba imports), and the versions of python, torch, numpy, numba and torchfair."""
    import platform

    import numpy
    import torch

    from .. import kernels
    from .._version import __version__

    try:
        from importlib.metadata import version
        numba_version: Optional[str] = version("numba")
    except Exception:  # pragma: no cover - numba not installed
        numba_version = None
    return {"torch_threads": torch.get_num_threads(), "deterministic": torch.are_deterministic_algorithms_enabled(),
            "kernels": kernels.mode(), "numba": kernels.numba_available(), "python": platform.python_version(),
            "torch": torch.__version__, "numpy": numpy.__version__, "numba_version": numba_version,
            "torchfair": __version__, "machine": platform.machine()}


def run_trial(tdir: os.PathLike, slot: Optional[int] = None) -> int:
    """Run the trial described by ``tdir/trial.json`` in this process: fit, then validate and test the best
    checkpoint (else the last one saved; else the model as trained); write ``result.json`` (or ``error.json``)
    atomically.  Returns the exit code.

    ``result.json["timing"]`` records, so that an analysis can pair trials for machine load (trials that ran at
    the same time, or interleaved): ``train_s`` / ``validate_s`` / ``test_s`` (Lightning's ``Timer``: the fit's
    training loop, its validation passes included, and the validate and test calls after it), ``wall_start`` /
    ``wall_end`` (epoch seconds), ``loadavg_start`` / ``loadavg_end`` (``os.getloadavg()``: 1, 5, 15 minutes),
    ``slot`` (the runner's worker slot, ``0 .. workers - 1``; ``slot``, else ``$TORCHFAIR_SWEEP_SLOT``, else
    ``None``), ``host`` and ``pid``.  ``error.json`` has the wall times and load of a failed attempt."""
    import socket

    tdir = Path(tdir)
    desc = json.loads((tdir / "trial.json").read_text())
    t0 = time.time()
    if slot is None and os.environ.get(SLOT_ENV, "").isdigit():
        slot = int(os.environ[SLOT_ENV])
    timing: Dict[str, Any] = {"train_s": None, "validate_s": None, "test_s": None, "wall_start": t0,
                              "wall_end": None, "loadavg_start": _loadavg(), "loadavg_end": None, "slot": slot,
                              "host": socket.gethostname(), "pid": os.getpid()}
    try:
        saved = sys.argv
        sys.argv = sys.argv[:1]
        try:
            cli = _trial_cli()(args=trial_args(desc["base"], desc["config"], tdir), run=False,
                                   parser_kwargs={"prog": "torchfair", "exit_on_error": False})
        finally:
            sys.argv = saved
        trainer, model, dm = cli.trainer, cli.model, cli.datamodule
        timer = _timer(trainer)
        trainer.fit(model, dm)
        # read now: validate / test with a checkpoint restore its Timer state, which offsets the training time
        timing["train_s"] = timer.time_elapsed("train")
        # the best checkpoint; else (no monitored checkpoint was written: e.g. no validation ran) the last one
        ckpt = (getattr(trainer.checkpoint_callback, "best_model_path", "")
                or getattr(trainer.checkpoint_callback, "last_model_path", "") or None)
        metrics: Dict[str, float] = {}
        for stage in ("validate", "test"):
            out = getattr(trainer, stage)(model, dm, ckpt_path=ckpt, verbose=False) if ckpt else \
                getattr(trainer, stage)(model, dm, verbose=False)
            timing[f"{stage}_s"] = timer.time_elapsed(stage)
            for d in out:
                metrics.update({k: float(v) for k, v in d.items()})
        timing.update(wall_end=time.time(), loadavg_end=_loadavg())
        _atomic_json(tdir / "result.json", {"trial_id": desc["trial_id"], "params": desc["params"],
                                            "metrics": metrics, "checkpoint": ckpt,
                                            "seconds": timing["wall_end"] - t0, "timing": timing,
                                            "environment": environment()})
        return 0
    except BaseException as e:  # noqa: BLE001 - a failing trial is recorded, whatever it raised
        error = f"{type(e).__name__}: {e}"
        if isinstance(e, SystemExit):  # a config error: the parser printed the real message to the log
            sys.stdout.flush()
            sys.stderr.flush()
            error = _log_error(tdir) or error
        timing.update(wall_end=time.time(), loadavg_end=_loadavg())
        _atomic_json(tdir / "error.json", {"trial_id": desc["trial_id"], "params": desc["params"],
                                           "error": error, "traceback": traceback.format_exc(),
                                           "seconds": timing["wall_end"] - t0, "timing": timing})
        if isinstance(e, KeyboardInterrupt):
            raise
        return 1


def _log_error(tdir: Path) -> Optional[str]:
    """The real error of a failed trial from its log: the last line holding ``error:`` / ``Error:``, else the
    last non-empty line (``None`` without a log)."""
    try:
        lines = [ln.strip() for ln in (tdir / "trial.log").read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    for ln in reversed(lines):
        if "error:" in ln.lower() and not ln.startswith("SystemExit"):
            return ln
    return lines[-1] if lines else None


def _provenance() -> Dict[str, Optional[str]]:
    """The torchfair version and git commit (recorded in trial.json, not hashed into the trial id: a new commit
    or version, most of which do not touch training, would otherwise orphan every finished trial)."""
    from .._version import __version__

    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                                capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"torchfair": __version__, "git_commit": commit}


def _source_of(spec: SweepSpec, key: str) -> str:
    if key in spec.grid:
        return "grid"
    if key in spec.random:
        return "random"
    if key in spec.overrides:
        return "overrides"
    for dim, bundles in spec.variants.items():
        for name, bundle in bundles.items():
            if key in bundle:
                return f"variants.{dim}.{name}"
    return "config"


def check_trial_keys(spec: SweepSpec, trials: Sequence[Trial]) -> None:
    """Parse the ``torchfair fit`` arguments of one trial per distinct key set (every variant bundle) with the
    training CLI's parser, without instantiating anything; ``ValueError`` naming the offending key and where the
    sweep file sets it, before any trial starts."""
    import tempfile

    class _Parsed(Exception):
        pass

    class _ParseOnly(_trial_cli()):
        def before_instantiate_classes(self) -> None:
            raise _Parsed

        def _set_seed(self) -> None:  # parsing only: leave this process's random state alone
            pass

    seen = set()
    for t in trials:
        cfg = spec.trial_config(t.params)
        keys = tuple(sorted(cfg, key=str))
        if keys in seen:
            continue
        seen.add(keys)
        saved = sys.argv
        sys.argv = sys.argv[:1]
        try:
            with tempfile.TemporaryDirectory() as tmp:
                _ParseOnly(args=trial_args(spec.base, cfg, Path(tmp)), run=False,
                           parser_kwargs={"prog": "torchfair", "exit_on_error": False})
        except _Parsed:
            continue
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a parser error, whatever its type
            msg = " ".join(str(e).split()) or type(e).__name__
            bad = [k for k in cfg if str(k) in msg] or [k for k in cfg if str(k).split(".")[-1] in msg]
            where = f"`{_source_of(spec, bad[0])}`: {bad[0]!r}" if bad else "`config`"
            raise ValueError(f"{where} is not accepted by the base config {spec.base.name} "
                             f"(torchfair fit says: {msg[:400]})") from None
        finally:
            sys.argv = saved


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


def _log_attempt(out: Path, trial_id: str) -> None:
    """Append ``<trial id> <pid> <time>`` to ``out/attempts.log`` (one line per start: who ran what)."""
    fd = os.open(out / "attempts.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{trial_id} {os.getpid()} {time.time():.3f}\n".encode())
    finally:
        os.close(fd)


#: the environment variable through which the runner tells a trial process the sweep's pid (it ends with it)
PARENT_ENV = "TORCHFAIR_SWEEP_PARENT"


def _running_lock(out: Path, trial_id: str) -> Path:
    """The lock a trial process holds while it runs (``out/locks/<trial id>.running.lock``, a ``filelock``: the OS
    releases it when the process ends): a claim never starts a trial beside a live process of it."""
    return out / "locks" / f"{trial_id}.running.lock"


def _running(out: Path, trial_id: str) -> bool:
    """Whether a live process (e.g. an orphan of a killed sweep) holds the trial's :func:`_running_lock`."""
    from filelock import FileLock, Timeout

    path = _running_lock(out, trial_id)
    if not path.exists():
        return False
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no procfs (macOS, Windows)
        return True


def _guard_trial(tdir: Path, sweep_pid: Optional[int]) -> Any:  # pragma: no cover - runs in the trial process
    """Make this trial process end with the sweep that started it, and hold the trial's :func:`_running_lock`.

    ``kill -9`` of a sweep left its trial running as an orphan, which a restart then ran a second time beside it
    (issue 28).  Here the trial process gets Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``,
    prctl(2)) and a daemon thread that polls its parent and ``sweep_pid`` (every platform; a forked trial's parent
    is the fork server, which exits with the sweep); while it lives it holds the running lock, so that no claim
    starts the trial again before it is gone.  Returns the held lock."""
    import signal
    import threading

    from filelock import FileLock

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def gone() -> bool:
        return os.getppid() != parent or (sweep_pid is not None and not _alive(sweep_pid))

    def watch() -> None:
        while not gone():
            time.sleep(0.2)
        os._exit(137)

    if gone():  # the sweep died before the signal was set
        os._exit(137)
    threading.Thread(target=watch, name="torchfair-sweep-parent-watch", daemon=True).start()
    out = tdir.parent.parent
    trial_id = tdir.name
    _running_lock(out, trial_id).parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(_running_lock(out, trial_id)))
    lock.acquire(timeout=60)  # the claim saw it free: at most a dying orphan still holds it
    _HELD.append(lock)  # a dropped FileLock releases itself: held until the process ends
    return lock


_HELD: List[Any] = []


def _trial_process(tdir: Path, threads: int, gpu: Optional[int] = None,
                   slot: Optional[int] = None) -> subprocess.Popen:
    """The trial of ``tdir`` in a fresh interpreter (``python -m torchfair.sweeps _trial``), its output in
    ``trial.log``, ``threads`` torch threads and, with ``gpu``, that GPU alone (``CUDA_VISIBLE_DEVICES``); ``slot``:
    the worker slot it records (:data:`SLOT_ENV`)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TORCHFAIR_SWEEP_THREADS=str(threads))
    env.pop(SLOT_ENV, None)
    env[PARENT_ENV] = str(os.getpid())
    if slot is not None:
        env[SLOT_ENV] = str(slot)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    with open(tdir / "trial.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "torchfair.sweeps", "_trial", str(tdir)], stdout=log,
                                stderr=subprocess.STDOUT, env=env)


def _status(tdir: Path) -> str:
    if (tdir / "result.json").is_file():
        return "done"
    if (tdir / "error.json").is_file():
        return "failed"
    return "pending"


def _main(argv: Sequence[str]) -> int:  # pragma: no cover - the trial subprocess entry point
    if len(argv) == 2 and argv[0] == "_trial":
        parent = os.environ.get(PARENT_ENV)
        _guard_trial(Path(argv[1]), int(parent) if parent else None)
        threads = os.environ.get("TORCHFAIR_SWEEP_THREADS")
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        return run_trial(argv[1])
    print("usage: torchfair sweep SWEEP_FILE --out DIR (this module's entry point is internal)", file=sys.stderr)
    return 2
