"""``torchfair sweep``: grids and random searches over training configs, resumable, with a trade-off report.

A sweep file (YAML) names a base training config (``configs/ml100k_*.yaml``, read by ``torchfair fit``) and the
keys to vary, in the dotted syntax of the command line::

    base: ml100k_dips.yaml            # relative to the sweep file
    overrides:                        # applied to every trial
      trainer.max_epochs: 3
    grid:                             # every combination
      model.lam: [0.0, 0.1, 1.0]
      seed_everything: [0, 1, 2]
    random:                           # optional: `samples` draws on top of each grid point
      model.fairness_loss.init_args.ordering.init_args.temperature: {loguniform: [0.01, 1.0]}
    samples: 4
    variants:                         # optional: named bundles of keys, each dimension crossed with the grid
      loss:                           # a column `loss` holds the bundle's name
        dips_soft: {model.fairness_loss: {class_path: torchfair.losses.DIPSLoss}}
        deltr:
          model.fairness_loss: {class_path: torchfair.losses.DELTRLoss}
          grid: {model.lam: [1.0, 10.0]}   # a bundle may replace the values of grid keys for its trials
        none: {model.fairness_loss: null, grid: {model.lam: [0.0]}}
    seed: 0                           # seed of the random draws
    objective: val/ndcg@10            # maximised: "best so far" and Optuna's target

``torchfair sweep --config FILE --out DIR [--workers K] [--search optuna --trials T]`` runs the trials (every
trial of the file, or ``T`` trials proposed by Optuna's TPE sampler in the same space, maximising ``objective``),
``K`` at a time, each in its own
process (one GPU each when there are GPUs, ``CUDA_VISIBLE_DEVICES``), and shows trials done / running / failed and
the best so far.  Nothing is lost: a finished trial writes ``DIR/trials/<trial id>/result.json`` atomically (its
parameters, every exact validation and test measure, its checkpoint); running the same command again skips
finished trials and reruns unfinished ones; a failing trial writes ``error.json`` (its traceback) and the others
go on; a second sweep on the same ``DIR`` is refused while the first holds its lock.  The trial id is a hash of
the trial's parameters, so adding values to a grid keeps the finished trials.

Outputs: ``DIR/results.csv`` (and ``results.parquet`` when pyarrow is installed: ``pip install torchfair[parquet]``)
with one row per trial (``trial_id``, ``status``, the parameters, every measure), ``DIR/pareto_<measure>.png`` and
``DIR/report.md`` (the Pareto front of every fairness measure against NDCG@10, as figures and tables).
``torchfair sweep-report DIR`` rebuilds them from a finished or partial sweep.  ``--backend ray [--address ...]``
runs the trials through Ray Tune (one Tune trial per trial, GPUs as resources) into the same ``DIR``.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

__all__ = ["SweepSpec", "Trial", "load_sweep", "expand_trials", "run_sweep", "collect_results", "pareto_front",
           "write_sweep_report", "SweepLockedError"]

#: the default objective's measure column (the utility axis of the Pareto fronts is the objective's column)
UTILITY_COLUMN = "ndcg@10"
#: summary columns the measures' column builders derive from several entries: a signed difference of two entries
#: (parity, 0, is best) or a norm (lower is best); see :mod:`torchfair.evaluation.registry`
_DIFFERENCE_SUFFIXES = ("_gap", "_inter", "_intra")
_NORM_SUFFIXES = ("_l1",)
_DISTRIBUTIONS = ("uniform", "loguniform", "choice", "int")


class SweepLockedError(RuntimeError):
    """Another sweep holds the output directory's lock."""


@dataclass
class SweepSpec:
    """A parsed sweep file (see the module docstring)."""

    base: Path
    overrides: Dict[str, Any] = field(default_factory=dict)
    grid: Dict[str, List[Any]] = field(default_factory=dict)
    random: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    samples: int = 1
    seed: int = 0
    objective: str = "val/" + UTILITY_COLUMN
    source: Optional[Path] = None
    variants: Dict[str, Dict[str, Dict[str, Any]]] = field(default_factory=dict)
    #: sha256 of the base config file's content (part of every trial's identity)
    base_sha: str = ""

    def __post_init__(self):
        if not self.base_sha and Path(self.base).is_file():
            self.base_sha = _file_sha(self.base)

    def identity(self, params: Mapping[str, Any]) -> Dict[str, Any]:
        """What makes a trial what it is: the base config's content, its resolved dotted keys (overrides, variant
        bundles, grid / random values) and its variant names.  Not the grid's other values (widening a grid keeps
        the finished trials of the unchanged points), not the sweep file's path, not the torchfair version."""
        return {"base_sha": self.base_sha, "config": self.trial_config(params),
                "variants": {d: params[d] for d in self.variants if d in params}}

    def make_trial(self, params: Mapping[str, Any]) -> "Trial":
        """The trial of ``params`` in this sweep (its id hashes :meth:`identity`)."""
        return Trial(dict(params), key=_hash(self.identity(params), 40))

    @property
    def sweep_id(self) -> str:
        """Hash of the whole sweep spec (base content, overrides, grid, random, variants, samples, seed, objective)."""
        return _hash({"base_sha": self.base_sha, "overrides": self.overrides, "grid": self.grid,
                      "random": self.random, "variants": self.variants, "samples": self.samples, "seed": self.seed,
                      "objective": self.objective}, 8)

    @property
    def label(self) -> str:
        """``<sweep file stem>-<sweep_id>``: the ``sweep`` column of results.csv."""
        return f"{self.source.stem if self.source else 'sweep'}-{self.sweep_id}"

    def trial_config(self, params: Mapping[str, Any]) -> Dict[str, Any]:
        """The dotted config keys of a trial: the overrides, then its variants' bundles, then its grid / random
        values."""
        cfg = dict(self.overrides)
        for dim, bundles in self.variants.items():
            cfg.update({k: v for k, v in bundles[params[dim]].items() if k != "grid"})
        cfg.update({k: v for k, v in params.items() if k not in self.variants})
        return cfg


def _hash(obj: Any, n: int = 12) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def _file_sha(path: os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Trial:
    """One point of the sweep: its parameters (dotted keys -> values) and a stable id, the hash of the parameters
    and of ``key`` (:meth:`SweepSpec.make_trial`: the hash of the trial's whole resolved config)."""

    params: Dict[str, Any]
    key: str = ""

    @property
    def trial_id(self) -> str:
        return _hash({"params": self.params, "key": self.key} if self.key else self.params)


# --------------------------------------------------------------------------------------------- measure columns
def column_direction(column: str) -> Optional[Tuple[str, str]]:
    """``(kind, direction)`` of a measure column such as ``val/ndcg@10`` or ``test/dips_t0_gap``, read from the
    declaration of the measure it comes from (:func:`torchfair.metrics.declarations.get_declaration`): ``kind`` is
    ``"fairness"`` or ``"utility"``; ``direction`` is ``"higher"``, ``"lower"`` or ``"abs"`` (signed, 0 is best).
    The column of the measure itself takes the declared direction; a summary its column builder derives (``_gap``
    / ``_inter`` / ``_intra``: a signed difference; ``_l1``: a norm) takes that summary's; a per-entry column
    (``dips_AB``) or a column of no declared measure gives ``None``."""
    from .metrics.declarations import MEASURES, get_declaration

    name = column.split("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    measure = max((m for m in MEASURES if name == m or name.startswith(m + "_")), key=len, default=None)
    if measure is None:
        return None
    decl = get_declaration(measure)
    rest = name[len(measure):]
    if not rest:
        return decl.kind, {"higher": "higher", "lower": "lower", "zero": "abs"}[decl.direction]
    if rest.endswith(_DIFFERENCE_SUFFIXES):
        return decl.kind, "abs"
    if rest.endswith(_NORM_SUFFIXES):
        return decl.kind, "lower"
    return None


def _goodness(value: Optional[float], direction: str) -> Optional[float]:
    """``value`` turned into "higher is better" (``None`` for a missing or non-finite value)."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value if direction == "higher" else -value if direction == "lower" else -abs(value)


def _objective_direction(objective: str) -> str:
    found = column_direction(objective)
    return found[1] if found else "higher"


# --------------------------------------------------------------------------------------------- the sweep file
def _check_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key or any(c.isspace() for c in key) or key.startswith("-"):
        raise ValueError(f"`{where}`: keys must be dotted config keys such as 'model.lam'; got {key!r}")
    return key


def load_sweep(path: os.PathLike) -> SweepSpec:
    """Read and check a sweep file; ``ValueError`` naming the field otherwise."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"`config`: no sweep file at {str(path)!r}")
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"`config`: {path} must hold a mapping (base, grid, ...); got {type(raw).__name__}")
    unknown = set(raw) - {"base", "overrides", "grid", "random", "samples", "seed", "objective", "variants"}
    if unknown:
        raise ValueError(f"`config`: unknown fields {sorted(unknown)} in {path}; expected base, overrides, grid, "
                         "random, variants, samples, seed, objective")
    if not isinstance(raw.get("base"), str):
        raise ValueError(f"`base`: {path} must name the base training config (a YAML path)")
    base = (path.parent / raw["base"]).resolve()
    if not base.is_file():
        raise ValueError(f"`base`: no training config at {str(base)!r}")
    overrides = raw.get("overrides") or {}
    grid = raw.get("grid") or {}
    rnd = raw.get("random") or {}
    for name, value in (("overrides", overrides), ("grid", grid), ("random", rnd)):
        if not isinstance(value, dict):
            raise ValueError(f"`{name}` must be a mapping of dotted keys; got {type(value).__name__}")
        for k in value:
            _check_key(k, name)
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ValueError(f"`grid`: {k!r} must list at least one value; got {v!r}")
    for k, v in rnd.items():
        if not isinstance(v, dict) or len(v) != 1 or next(iter(v)) not in _DISTRIBUTIONS:
            raise ValueError(f"`random`: {k!r} must be one of {{uniform: [a, b]}}, {{loguniform: [a, b]}}, "
                             f"{{int: [a, b]}}, {{choice: [...]}}; got {v!r}")
        kind, arg = next(iter(v.items()))
        if not isinstance(arg, list) or not arg or (kind != "choice" and len(arg) != 2):
            raise ValueError(f"`random`: {k!r}: {kind} needs {'a list' if kind == 'choice' else '[low, high]'}")
        if kind == "loguniform" and not (0 < arg[0] < arg[1]):
            raise ValueError(f"`random`: {k!r}: loguniform needs 0 < low < high; got {arg}")
    both = (set(grid) | set(rnd)) & set(overrides)
    if both or set(grid) & set(rnd):
        raise ValueError(f"keys given twice across overrides / grid / random: {sorted(both or set(grid) & set(rnd))}")
    variants = _check_variants(raw.get("variants") or {}, grid, rnd)
    samples, seed = raw.get("samples", 1), raw.get("seed", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"`samples` must be an int >= 1; got {samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int; got {seed!r}")
    objective = raw.get("objective", "val/" + UTILITY_COLUMN)
    if not isinstance(objective, str):
        raise ValueError(f"`objective` must be a measure column such as 'val/ndcg@10'; got {objective!r}")
    return SweepSpec(base=base, overrides=overrides, grid=grid, random=rnd, samples=samples if rnd else 1,
                     seed=seed, objective=objective, source=path, variants=variants)


def _check_variants(variants: Any, grid: Dict[str, List[Any]], rnd: Dict[str, Any]
                    ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """``variants``: dimension -> {name -> {dotted key -> value, optional ``grid``: {grid key -> values}}}; the
    dimension names become parameter columns, so they must not be config keys of the grid / random search, and a
    bundle must not set a searched key (its ``grid`` replaces the values of grid keys for its trials)."""
    searched = set(grid) | set(rnd)
    if not isinstance(variants, dict):
        raise ValueError(f"`variants` must map a dimension name to named bundles; got {type(variants).__name__}")
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for dim, bundles in variants.items():
        _check_key(dim, "variants")
        if dim in searched:
            raise ValueError(f"`variants`: the dimension {dim!r} is also a grid / random key")
        if not isinstance(bundles, dict) or not bundles:
            raise ValueError(f"`variants`: {dim!r} must map at least one name to a bundle of keys; got {bundles!r}")
        out[dim] = {}
        for name, bundle in bundles.items():
            bundle = {} if bundle is None else bundle
            if not isinstance(bundle, dict):
                raise ValueError(f"`variants`: {dim}.{name} must be a mapping of dotted keys; got {bundle!r}")
            own_grid = bundle.get("grid") or {}
            if not isinstance(own_grid, dict) or set(own_grid) - set(grid):
                raise ValueError(f"`variants`: {dim}.{name}.grid may only replace the values of keys of `grid` "
                                 f"({sorted(grid)}); got {own_grid!r}")
            for k, v in own_grid.items():
                if not isinstance(v, list) or not v:
                    raise ValueError(f"`variants`: {dim}.{name}.grid: {k!r} must list at least one value; got {v!r}")
            for k in bundle:
                if k != "grid":
                    _check_key(k, f"variants.{dim}.{name}")
            clash = (set(bundle) - {"grid"}) & searched
            if clash:
                raise ValueError(f"`variants`: {dim}.{name} sets {sorted(clash)}, which the grid / random search "
                                 "varies")
            out[dim][str(name)] = dict(bundle)
    return out


def _draw(spec: Dict[str, Any], rng: random.Random) -> Any:
    kind, arg = next(iter(spec.items()))
    if kind == "uniform":
        return rng.uniform(float(arg[0]), float(arg[1]))
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1])))
    if kind == "int":
        return rng.randint(int(arg[0]), int(arg[1]))
    return rng.choice(arg)


def expand_trials(spec: SweepSpec) -> List[Trial]:
    """Every trial of the sweep: the product of the variants and the grid, each with ``samples`` random draws
    (seeded)."""
    dims = list(spec.variants)
    rng = random.Random(spec.seed)
    trials = []
    for labels in itertools.product(*(list(spec.variants[d]) for d in dims)) if dims else [()]:
        grid = dict(spec.grid)
        for d, name in zip(dims, labels):
            grid.update(spec.variants[d][name].get("grid") or {})
        for combo in itertools.product(*grid.values()) if grid else [()]:
            _add_point({**dict(zip(dims, labels)), **dict(zip(grid, combo))}, spec, rng, trials)
    seen, unique = set(), []
    for t in trials:
        if t.trial_id not in seen:
            seen.add(t.trial_id)
            unique.append(t)
    return unique


def _add_point(point: Dict[str, Any], spec: SweepSpec, rng: random.Random, trials: List[Trial]) -> None:
    """Append the point's ``samples`` trials (each with its own random draws)."""
    for _ in range(spec.samples):
        params = dict(point)
        params.update({k: _draw(v, rng) for k, v in spec.random.items()})
        trials.append(spec.make_trial(params))


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


def run_trial(tdir: os.PathLike) -> int:
    """Run the trial described by ``tdir/trial.json`` in this process: fit, then validate and test the best
    checkpoint; write ``result.json`` (or ``error.json``) atomically.  Returns the exit code."""
    tdir = Path(tdir)
    desc = json.loads((tdir / "trial.json").read_text())
    t0 = time.time()
    try:
        from .training.cli import FairLightningCLI

        saved = sys.argv
        sys.argv = sys.argv[:1]
        try:
            cli = FairLightningCLI(args=trial_args(desc["base"], desc["config"], tdir), run=False,
                                   parser_kwargs={"prog": "torchfair", "exit_on_error": False})
        finally:
            sys.argv = saved
        trainer, model, dm = cli.trainer, cli.model, cli.datamodule
        trainer.fit(model, dm)
        ckpt = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
        metrics: Dict[str, float] = {}
        for stage in ("validate", "test"):
            out = getattr(trainer, stage)(model, dm, ckpt_path=ckpt, verbose=False) if ckpt else \
                getattr(trainer, stage)(model, dm, verbose=False)
            for d in out:
                metrics.update({k: float(v) for k, v in d.items()})
        _atomic_json(tdir / "result.json", {"trial_id": desc["trial_id"], "params": desc["params"],
                                            "metrics": metrics, "checkpoint": ckpt,
                                            "seconds": time.time() - t0})
        return 0
    except BaseException as e:  # noqa: BLE001 - a failing trial is recorded, whatever it raised
        error = f"{type(e).__name__}: {e}"
        if isinstance(e, SystemExit):  # a config error: the parser printed the real message to the log
            sys.stdout.flush()
            sys.stderr.flush()
            error = _log_error(tdir) or error
        _atomic_json(tdir / "error.json", {"trial_id": desc["trial_id"], "params": desc["params"],
                                           "error": error, "traceback": traceback.format_exc(),
                                           "seconds": time.time() - t0})
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
    from . import __version__

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

    from .training.cli import FairLightningCLI

    class _Parsed(Exception):
        pass

    class _ParseOnly(FairLightningCLI):
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


def _status(tdir: Path) -> str:
    if (tdir / "result.json").is_file():
        return "done"
    if (tdir / "error.json").is_file():
        return "failed"
    return "pending"


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


class _Optuna:
    """Optuna's ask / tell over the sweep's space: grid keys as categorical, ``random`` keys as their
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
    ctx.set_forkserver_preload(["torchfair.training.cli", "torchfair.sweep"])
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
    from ._validation import check_choice

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
    tuner = _Optuna(spec, n_trials, spec.seed) if search == "optuna" else None
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


# --------------------------------------------------------------------------------------------- results
def collect_results(out: os.PathLike):
    """One row per trial of ``out`` (finished, failed or pending): ``trial_id``, ``status``, ``sweep`` (the label,
    ``<sweep file>-<spec hash>``, of the sweep that ran it), ``current`` (whether the sweep that ran last into
    ``out`` includes it), the parameters and every measure, as a pandas DataFrame."""
    import pandas as pd

    out = Path(out)
    current = set(json.loads((out / "sweep.json").read_text()).get("trials", [])) \
        if (out / "sweep.json").is_file() else None
    rows = []
    for tdir in sorted((out / "trials").glob("*")) if (out / "trials").is_dir() else []:
        desc_path = tdir / "trial.json"
        if not desc_path.is_file():
            continue
        desc = json.loads(desc_path.read_text())
        row: Dict[str, Any] = {"trial_id": desc["trial_id"], "status": _status(tdir), "sweep": desc.get("sweep"),
                               "current": current is None or desc["trial_id"] in current}
        row.update({f"param:{k}": (json.dumps(v) if isinstance(v, (list, dict)) else v)
                    for k, v in desc["params"].items()})
        if row["status"] == "done":
            res = json.loads((tdir / "result.json").read_text())
            row.update(res["metrics"])
            row["checkpoint"], row["seconds"] = res.get("checkpoint"), res.get("seconds")
        elif row["status"] == "failed":
            row["error"] = json.loads((tdir / "error.json").read_text()).get("error")
        rows.append(row)
    return pd.DataFrame(rows)


def pareto_front(utility: Sequence[float], unfairness: Sequence[float]) -> List[int]:
    """Indices of the points not dominated by another (higher or equal utility and lower or equal unfairness, one
    of them strictly), sorted by unfairness."""
    pts = [(u, f, i) for i, (u, f) in enumerate(zip(utility, unfairness)) if math.isfinite(u) and math.isfinite(f)]
    front = [i for (u, f, i) in pts
             if not any((u2 >= u and f2 <= f) and (u2 > u or f2 < f) for (u2, f2, _) in pts)]
    return sorted(front, key=lambda i: unfairness[i])


def write_sweep_report(out: os.PathLike, split: str = "test", only_current: bool = True) -> Path:
    """``results.csv`` (+ ``results.parquet`` when pyarrow is there), ``pareto_<measure>.png`` and ``report.md``
    for the sweep in ``out`` (finished or partial).  Fronts use the ``split`` measures (``test`` by default): the
    objective's measure (its declared direction) against every fairness summary column the trials logged (each
    measure's declared kind and direction), over the trials of the sweep that ran last into ``out`` unless
    ``only_current=False`` (trials of other sweep files or of another base config stay in results.csv, marked by
    their ``sweep`` column)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .evaluation.report import markdown_rows

    out = Path(out)
    if not (out / "trials").is_dir():
        raise ValueError(f"`out`: {out} holds no sweep (no trials/ directory)")
    df = collect_results(out)
    df.to_csv(out / "results.csv", index=False)
    parquet_note = ""
    try:
        df.to_parquet(out / "results.parquet", index=False)
    except ImportError:
        parquet_note = "results.parquet not written: install pyarrow (`pip install torchfair[parquet]`)."
    meta = json.loads((out / "sweep.json").read_text()) if (out / "sweep.json").is_file() else {}
    objective = meta.get("objective", "val/" + UTILITY_COLUMN)
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    params = [c for c in df.columns if c.startswith("param:")]
    lines = [f"# Sweep report: {out.name}", "",
             f"Trials: {len(df)} (done {counts.get('done', 0)}, failed {counts.get('failed', 0)}, pending "
             f"{counts.get('pending', 0)}). Parameters: {', '.join(p[6:] for p in params) or '-'}.", ""]
    if meta.get("sweep"):
        lines += [f"Current sweep: `{meta['sweep']}` ({Path(meta.get('config', '')).name}), "
                  f"{len(meta.get('trials', []))} trials.", ""]
    if len(df):
        other = df[~df["current"].astype(bool)]
        if len(other):
            labels = sorted({str(x) for x in other["sweep"].fillna("unknown")})
            lines += [f"**This directory also holds {len(other)} trials of other sweeps** ({', '.join(labels)}): "
                      "another sweep file, base config or overrides. They are in results.csv (column `sweep`) "
                      + ("but not in the fronts below." if only_current else "and in the fronts below."), ""]
    if parquet_note:
        lines += [parquet_note, ""]
    ucol = f"{split}/{objective.split('/', 1)[-1]}"
    udir = _objective_direction(ucol)
    done = df[df["status"] == "done"] if len(df) else df
    if only_current and len(done):
        done = done[done["current"].astype(bool)]
    fair_cols = []
    for col in done.columns if len(done) else []:
        found = column_direction(col) if col.startswith(split + "/") else None
        if found is not None and found[0] == "fairness":
            fair_cols.append((col, found[1]))
    if len(done) and ucol in done:
        util = [_goodness(v, udir) for v in done[ucol].tolist()]
        util = [float("nan") if v is None else v for v in util]
        for col, mode in fair_cols:
            short = col.split("/", 1)[-1]
            unf = done[col].abs() if mode == "abs" else -done[col] if mode == "higher" else done[col]
            idx = pareto_front(util, unf.tolist())
            if not idx:
                continue
            front = done.iloc[idx]
            xlabel = ("|" + col + "|") if mode == "abs" else ("-" + col) if mode == "higher" else col
            fig, ax = plt.subplots(figsize=(5, 3.6))
            ax.scatter(unf, done[ucol], s=14, color="0.6", label="trials")
            ax.plot(unf.iloc[idx], front[ucol], "o-", color="C3", label="Pareto front")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ucol)
            ax.legend(frameon=False)
            fig.tight_layout()
            fig.savefig(out / f"pareto_{short}.png", dpi=120)
            plt.close(fig)
            rows = [[r["trial_id"], str(r["sweep"])] + [r[p] for p in params] + [f"{r[col]:.4f}", f"{r[ucol]:.4f}"]
                    for _, r in front.iterrows()]
            lines += [f"## Pareto front: {col} against {ucol}", "", f"![front](pareto_{short}.png)", "",
                      markdown_rows(["trial", "sweep"] + [p[6:] for p in params] + [col, ucol], rows,
                                    align="ll" + "l" * len(params) + "rr"), ""]
    failed = df[df["status"] == "failed"] if len(df) else df
    if len(failed):
        lines += ["## Failed trials", ""] + [f"- {r['trial_id']} ({r['sweep']}): {r.get('error')}"
                                             for _, r in failed.iterrows()]
        lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _main(argv: Sequence[str]) -> int:  # pragma: no cover - the trial subprocess entry point
    if len(argv) == 2 and argv[0] == "_trial":
        threads = os.environ.get("TORCHFAIR_SWEEP_THREADS")
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        return run_trial(argv[1])
    print("usage: torchfair sweep --config FILE --out DIR (this module's entry point is internal)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
