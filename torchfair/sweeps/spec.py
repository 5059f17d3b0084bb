"""The sweep file: :class:`SweepSpec`, :class:`Trial` (ids hashing the whole resolved config), the trial
expansion, and the kinds / directions of measure columns read from the measure declarations."""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["SweepSpec", "Trial", "load_sweep", "expand_trials", "column_direction", "UTILITY_COLUMN"]

#: the default objective's measure column (the utility axis of the Pareto fronts is the objective's column)
UTILITY_COLUMN = "ndcg@10"
#: summary columns the measures' column builders derive from several entries: a signed difference of two entries
#: (parity, 0, is best) or a norm (lower is best); see :mod:`torchfair.evaluation.registry`
_DIFFERENCE_SUFFIXES = ("_gap", "_inter", "_intra")
_NORM_SUFFIXES = ("_l1",)
_DISTRIBUTIONS = ("uniform", "loguniform", "choice", "int")


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
    from ..metrics.declarations import MEASURES, get_declaration

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
