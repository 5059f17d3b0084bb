"""Shared by the experiments that train (a module, not a script): every fit is a trial of a sweep file
(``configs/sweep_*.yaml``, run by :func:`torchfair.sweeps.run_sweep`), and an analysis reads the finished trials back.

* :func:`derive`: a copy of a sweep file restricted to some of its variants (a script's options), with a bundle's
  keys or lambda grid replaced (a start's checkpoint per seed), the synthetic stand-in in ``--fast`` mode; the base
  path made absolute.  A derived file keeps the trial ids of the trials it keeps (the id hashes the resolved
  config, not the file), so a stage reuses what an earlier one trained;
* :func:`run`: the sweep into ``out`` (resumable: finished trials are skipped); ``RuntimeError`` naming the failed
  trials and their error lines;
* :func:`finished`: the finished trials of ``out`` (of one sweep file): parameters, measures, checkpoint, seconds
  and timing (``result.json``); :func:`pick` one by its parameters; :func:`copy_starts` copies start checkpoints to the paths
  a sweep file's ``model.init_from`` names;
* :func:`overlap`: the seconds two trials ran at the same time (their ``timing`` wall intervals), to pair trials
  for machine load.

The analyses load a trial's checkpoint with ``torchfair.training.load_checkpoint`` / ``evaluate_checkpoints``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
#: the synthetic MovieLens stand-in (60 users, 80 items) and a tiny ranker: what ``--fast`` trains on
FAST_KEYS = {"data.variant": "synthetic", "data.n_test": 3, "data.n_val": 2, "data.num_negatives": 10,
             "data.batch_size": 16, "model.ranker_args": {"dim": 8}}


def derive(sweep: Path, dest: Path, *, keep: Optional[Mapping[str, Sequence[str]]] = None,
           bundles: Optional[Mapping[str, Mapping[str, Mapping[str, Any]]]] = None,
           grids: Optional[Mapping[str, Mapping[str, Mapping[str, List[Any]]]]] = None,
           overrides: Optional[Mapping[str, Any]] = None, fast: bool = False) -> Path:
    """Write a copy of the sweep file ``sweep`` to ``dest`` and return ``dest``.

    ``keep``: ``{dimension: [names]}``, the variants kept (in that order); ``bundles``: ``{dimension: {name: {key:
    value}}}``, keys set in a bundle (a new name adds a bundle); ``grids``: ``{dimension: {name: {grid key:
    values}}}``, a bundle's own grid; ``overrides``: keys set for every trial; ``fast``: :data:`FAST_KEYS` too
    (before ``overrides``).  The base config's path is made absolute."""
    import yaml

    sweep = Path(sweep)
    raw = yaml.safe_load(sweep.read_text())
    raw["base"] = str((sweep.parent / raw["base"]).resolve())
    raw["overrides"] = dict(raw.get("overrides") or {})
    if fast:
        raw["overrides"].update(FAST_KEYS)
    raw["overrides"].update(overrides or {})
    variants = raw.setdefault("variants", {})
    for dim, named in (bundles or {}).items():
        for name, keys in named.items():
            variants.setdefault(dim, {}).setdefault(name, {})
            variants[dim][name] = {**(variants[dim][name] or {}), **keys}
    for dim, named in (grids or {}).items():
        for name, grid in named.items():
            variants[dim][name] = {**(variants[dim][name] or {}), "grid": {k: list(v) for k, v in grid.items()}}
    for dim, names in (keep or {}).items():
        missing = [n for n in names if n not in variants.get(dim, {})]
        if missing:
            raise ValueError(f"`keep`: {sweep.name} has no {dim} variant {missing}; it has {list(variants.get(dim, {}))}")
        variants[dim] = {n: variants[dim][n] for n in names}
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(raw, sort_keys=False))
    return dest


def run(path: Path, out: Path, *, workers: int = 1, threads: int = 1, stream=None, check: bool = True
        ) -> Dict[str, Any]:
    """Run (or resume) the sweep file ``path`` into ``out`` (``torchfair.sweeps.run_sweep``, no report); returns
    its counts.  ``check``: ``RuntimeError`` naming each failed trial of this file with its error line (the other
    trials ran)."""
    from torchfair.sweeps import expand_trials, load_sweep, run_sweep

    res = run_sweep(path, out, workers=workers, threads=threads, report=False, stream=stream)
    print(f"[sweep] {Path(path).name}: {res}", flush=True)
    if res["failed"] and check:
        ids = {t.trial_id for t in expand_trials(load_sweep(path))}
        errors = []
        for tid in sorted(ids):
            err = Path(out) / "trials" / tid / "error.json"
            if err.is_file():
                errors.append(f"{tid}: {json.loads(err.read_text()).get('error')} (log: {err.parent / 'trial.log'})")
        raise RuntimeError(f"{res['failed']} trial(s) of {Path(path).name} failed:\n" + "\n".join(errors))
    return res


def finished(out: Path, sweep: Optional[Path] = None) -> List[Dict[str, Any]]:
    """The finished trials of the sweep directory ``out`` (with ``sweep``, a sweep file: only its trials; a
    directory may hold the trials of other options too): ``{"trial_id", "params", "metrics", "checkpoint",
    "seconds", "timing", "dir"}`` each (``result.json``), in trial-id order."""
    ids = None
    if sweep is not None:
        from torchfair.sweeps import expand_trials, load_sweep

        ids = {t.trial_id for t in expand_trials(load_sweep(sweep))}
    rows = []
    for f in sorted((Path(out) / "trials").glob("*/result.json")):
        if ids is not None and f.parent.name not in ids:
            continue
        r = json.loads(f.read_text())
        rows.append({"trial_id": r["trial_id"], "params": r["params"], "metrics": r["metrics"],
                     "checkpoint": r.get("checkpoint"), "seconds": r.get("seconds"), "timing": r.get("timing") or {},
                     "dir": f.parent})
    return rows


def pick(rows: Sequence[Dict[str, Any]], **params: Any) -> Optional[Dict[str, Any]]:
    """The finished trial whose parameters match ``params`` (compared as strings: ``seed=0`` matches ``"0"``; a
    parameter name with dots is given as ``**{"model.lam": 0.0}``), or ``None``.  ``ValueError`` when several
    match."""
    found = [r for r in rows if all(str(r["params"].get(k)) == str(v) for k, v in params.items())]
    if len(found) > 1:
        raise ValueError(f"`params`: {len(found)} trials match {params}: {[r['trial_id'] for r in found]}")
    return found[0] if found else None


def copy_starts(rows: Sequence[Dict[str, Any]], dest: Path, match: Mapping[str, Any], seeds: Sequence[Any],
                dim: str = "seed") -> Dict[str, Path]:
    """Copy the checkpoint of each finished start trial (parameters ``match`` and ``dim`` = each of ``seeds``) to
    ``dest/seed<S>.ckpt``, the paths a sweep file's ``model.init_from`` names; ``{seed: path}``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = {}
    for s in seeds:
        r = pick(rows, **match, **{dim: s})
        if r is None or not r["checkpoint"]:
            raise RuntimeError(f"no finished start trial with {dict(match, **{dim: s})}")
        paths[str(s)] = dest / f"seed{s}.ckpt"
        shutil.copyfile(r["checkpoint"], paths[str(s)])
    return paths


def overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Seconds during which the trials of the timings ``a`` and ``b`` (``result.json["timing"]``) both ran: 0 when
    one ended before the other started or a wall time is missing."""
    try:
        return max(0.0, min(a["wall_end"], b["wall_end"]) - max(a["wall_start"], b["wall_start"]))
    except (KeyError, TypeError):
        return 0.0
