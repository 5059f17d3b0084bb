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

#: fairness columns and whether lower (True) or a smaller absolute value ("abs") is better
FAIRNESS_COLUMNS = {"dips_gap": "abs", "dips_t0_gap": "abs", "exposure_misallocation_l1": True,
                    "pairwise_accuracy_inter": "abs"}
UTILITY_COLUMN = "ndcg@10"
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

    def trial_config(self, params: Mapping[str, Any]) -> Dict[str, Any]:
        """The dotted config keys of a trial: the overrides, then its variants' bundles, then its grid / random
        values."""
        cfg = dict(self.overrides)
        for dim, bundles in self.variants.items():
            cfg.update({k: v for k, v in bundles[params[dim]].items() if k != "grid"})
        cfg.update({k: v for k, v in params.items() if k not in self.variants})
        return cfg


@dataclass
class Trial:
    """One point of the sweep: its parameters (dotted keys -> values) and a stable id (hash of the parameters)."""

    params: Dict[str, Any]

    @property
    def trial_id(self) -> str:
        blob = json.dumps(self.params, sort_keys=True, default=str).encode()
        return hashlib.sha1(blob).hexdigest()[:12]


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
        trials.append(Trial(params))


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
            cli = FairLightningCLI(args=trial_args(desc["base"], desc["config"], tdir), run=False)
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
        _atomic_json(tdir / "error.json", {"trial_id": desc["trial_id"], "params": desc["params"],
                                           "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                                           "seconds": time.time() - t0})
        if isinstance(e, KeyboardInterrupt):
            raise
        return 1


# --------------------------------------------------------------------------------------------- the runner
@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".sweep.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise SweepLockedError(f"another sweep is writing to {out} (it holds {out / '.sweep.lock'}); wait for it "
                               "or use another --out") from None
    try:
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


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
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.best: Optional[Tuple[float, str]] = None

    def update(self, done: int, running: int, failed: int, result: Optional[dict] = None) -> None:
        if result is not None:
            v = result.get("metrics", {}).get(self.objective)
            if v is not None and math.isfinite(v) and (self.best is None or v > self.best[0]):
                self.best = (v, result["trial_id"])
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


def _prepare(out: Path, spec: SweepSpec, t: Trial) -> Path:
    """The trial's directory, reset unless the trial is finished; ``trial.json`` describes it."""
    tdir = out / "trials" / t.trial_id
    tdir.mkdir(parents=True, exist_ok=True)
    if _status(tdir) != "done":
        for stale in tdir.iterdir():  # an unfinished or failed attempt starts afresh
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
        _atomic_json(tdir / "trial.json", {"trial_id": t.trial_id, "params": t.params, "base": str(spec.base),
                                           "config": spec.trial_config(t.params)})
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
        self.study = None
        self._told: List[Tuple[Dict[str, Any], float]] = []  # finished trials of an earlier run with their values
        self.known: Dict[str, Optional[float]] = {}
        self.pending: Dict[str, Any] = {}
        self.asked = 0

    def _study(self):
        if self.study is None:  # seeded by what is already known, so that a resumed run draws new points
            sampler = self.optuna.samplers.TPESampler(seed=self.seed + len(self.known))
            self.study = self.optuna.create_study(direction="maximize", sampler=sampler)
            for params, value in self._told:
                self.study.add_trial(self.optuna.trial.create_trial(params=params, distributions=self.space,
                                                                     value=value))
        return self.study

    def tell_finished(self, params: Dict[str, Any], value: Optional[float]) -> None:
        self.known[Trial(params).trial_id] = value
        self.asked += 1
        if value is not None and math.isfinite(value):
            self._told.append((params, value))

    def ask(self) -> Optional[Trial]:
        if self.asked >= self.n_trials:
            return None
        study = self._study()
        for _ in range(100):  # a point already run is told again (its value is known) and another one asked
            ot = study.ask(self.space)
            t = Trial(dict(ot.params))
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
        ok = value is not None and math.isfinite(value)
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
              backend: str = "local", address: Optional[str] = None, stream=None, report: bool = True) -> dict:
    """Run (or resume) the sweep of ``config`` into ``out``; returns ``{"done", "failed", "skipped", "total"}``.

    ``workers`` trials run at once (default: the number of GPUs, else 1); each trial process gets ``threads`` torch
    threads (default ``max(1, cpus // workers)``) and, with GPUs, one of them (``CUDA_VISIBLE_DEVICES``).
    ``search="grid"`` runs every trial of the file (grid x random draws); ``search="optuna"`` lets Optuna's TPE
    sampler propose ``n_trials`` trials in the same space, maximising the file's ``objective`` (finished trials of
    an earlier run count towards ``n_trials`` and are told to the study).  ``backend="ray"`` runs the grid through
    Ray Tune on the cluster at ``address`` (default: a local Ray instance), GPUs as trial resources, results in the
    same ``out`` (a directory every node sees)."""
    from ._validation import check_choice

    spec = load_sweep(config)
    check_choice(search, "search", ("grid", "optuna"))
    check_choice(backend, "backend", ("local", "ray"))
    if backend == "ray" and search != "grid":
        raise ValueError("`search`: the ray backend runs grid / random sweeps; use --backend local for optuna")
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
    with _lock(out):
        if tuner is None:
            trials = expand_trials(spec)
        else:  # the trials an earlier run of this sweep finished
            trials = []
            for res in sorted((out / "trials").glob("*/result.json")) if (out / "trials").is_dir() else []:
                r = json.loads(res.read_text())
                if set(r["params"]) == set(tuner.space) and tuner.asked < n_trials:
                    trials.append(Trial(r["params"]))
                    tuner.tell_finished(r["params"], r["metrics"].get(spec.objective))
        tdirs = {t.trial_id: _prepare(out, spec, t) for t in trials}
        todo = [t for t in trials if _status(tdirs[t.trial_id]) != "done"]
        skipped = len(trials) - len(todo)
        total = len(trials) if tuner is None else n_trials
        prog = _Progress(total, spec.objective, stream)
        done, failed = skipped, 0
        for t in trials:
            if _status(tdirs[t.trial_id]) == "done":
                prog.update(done, 0, failed, json.loads((tdirs[t.trial_id] / "result.json").read_text()))
        running: Dict[str, Tuple[Any, Optional[int]]] = {}
        free_gpus = list(range(gpus))
        # without GPUs, trials fork from a server that has imported the training stack once (saves the ~5-10 s
        # import of Lightning per trial); with GPUs each trial is a fresh interpreter, as CUDA must not be
        # initialised before CUDA_VISIBLE_DEVICES is set
        warm = _warm_context() if gpus == 0 else None
        queue = list(todo)
        if backend == "ray":
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
                    tdirs[t.trial_id] = _prepare(out, spec, t)
                return t
            return None

        try:
            while True:
                while len(running) < workers:
                    t = next_trial()
                    if t is None:
                        break
                    gpu = free_gpus.pop(0) if free_gpus else None
                    running[t.trial_id] = (_start_trial(tdirs[t.trial_id], threads, gpu, warm), gpu)
                    prog.update(done, len(running), failed)
                if not running:
                    break
                time.sleep(0.2)
                for tid, (p, gpu) in list(running.items()):
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
                            _atomic_json(tdirs[tid] / "error.json", {"trial_id": tid, "error":
                                                                     f"trial process exited with {p.returncode}"})
                        failed += 1
                        prog.update(done, len(running), failed)
        except KeyboardInterrupt:
            for p, _ in running.values():
                p.terminate()
            for p, _ in running.values():
                p.wait()
            raise
        finally:
            prog.close()
        (out / "sweep.json").write_text(json.dumps({"config": str(Path(config).resolve()), "search": search,
                                                    "trials": [t.trial_id for t in trials]}, indent=1))
        if report:
            write_sweep_report(out)
    return {"done": done, "failed": failed, "skipped": skipped, "total": len(trials)}


# --------------------------------------------------------------------------------------------- results
def collect_results(out: os.PathLike):
    """One row per trial of ``out`` (finished, failed or pending): ``trial_id``, ``status``, the parameters and
    every measure, as a pandas DataFrame."""
    import pandas as pd

    out = Path(out)
    rows = []
    for tdir in sorted((out / "trials").glob("*")) if (out / "trials").is_dir() else []:
        desc_path = tdir / "trial.json"
        if not desc_path.is_file():
            continue
        desc = json.loads(desc_path.read_text())
        row: Dict[str, Any] = {"trial_id": desc["trial_id"], "status": _status(tdir)}
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


def write_sweep_report(out: os.PathLike, split: str = "test") -> Path:
    """``results.csv`` (+ ``results.parquet`` when pyarrow is there), ``pareto_<measure>.png`` and ``report.md``
    for the sweep in ``out`` (finished or partial).  Fronts use the ``split`` measures (``test`` by default)."""
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
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    params = [c for c in df.columns if c.startswith("param:")]
    lines = [f"# Sweep report: {out.name}", "",
             f"Trials: {len(df)} (done {counts.get('done', 0)}, failed {counts.get('failed', 0)}, pending "
             f"{counts.get('pending', 0)}). Parameters: {', '.join(p[6:] for p in params) or '-'}.", ""]
    if parquet_note:
        lines += [parquet_note, ""]
    ucol = f"{split}/{UTILITY_COLUMN}"
    done = df[df["status"] == "done"] if len(df) else df
    if len(done) and ucol in done:
        for short, mode in FAIRNESS_COLUMNS.items():
            col = f"{split}/{short}"
            if col not in done:
                continue
            unf = done[col].abs() if mode == "abs" else done[col]
            idx = pareto_front(done[ucol].tolist(), unf.tolist())
            front = done.iloc[idx]
            fig, ax = plt.subplots(figsize=(5, 3.6))
            ax.scatter(unf, done[ucol], s=14, color="0.6", label="trials")
            ax.plot(unf.iloc[idx], front[ucol], "o-", color="C3", label="Pareto front")
            ax.set_xlabel(("|" + col + "|") if mode == "abs" else col)
            ax.set_ylabel(ucol)
            ax.legend(frameon=False)
            fig.tight_layout()
            fig.savefig(out / f"pareto_{short}.png", dpi=120)
            plt.close(fig)
            rows = [[r["trial_id"]] + [r[p] for p in params] + [f"{r[col]:.4f}", f"{r[ucol]:.4f}"]
                    for _, r in front.iterrows()]
            lines += [f"## Pareto front: {col} against {ucol}", "", f"![front](pareto_{short}.png)", "",
                      markdown_rows(["trial"] + [p[6:] for p in params] + [col, ucol], rows,
                                    align="l" * (1 + len(params)) + "rr"), ""]
    failed = df[df["status"] == "failed"] if len(df) else df
    if len(failed):
        lines += ["## Failed trials", ""] + [f"- {r['trial_id']}: {r.get('error')}" for _, r in failed.iterrows()]
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
