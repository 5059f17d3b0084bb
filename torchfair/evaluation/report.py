"""The one report layer: runs side by side, paired differences on shared resamples, markdown and JSON.

``torchfair evaluate`` (checkpoints, with or without re-rankers) and ``torchfair metrics`` (several ``--run``
files) build their reports here, as ranx users expect of an IR evaluation: one column per run (mean over lists
with a bootstrap interval), and for each run its difference from a reference run with a *paired* bootstrap
interval (the same lists drawn for both, the same resamples for every column).

A report is a plain dict (JSON-ready through :func:`jsonable`)::

    {"order": [run names], "models": {name: {"measures": {column: {mean, ci_low, ci_high, ...}}, ...}},
     "differences": {name: {"paired": True, "reference": ref, "columns": {column: {mean, ci_low, ci_high}}}}}

Example::

    tables = {"bm25": evaluate(lists_a, ["ndcg@10", "dips"], bootstrap=1000),
              "bm25+fair": evaluate(lists_b, ["ndcg@10", "dips"], bootstrap=1000)}
    report = compare(tables, reference={"bm25+fair": "bm25"})
    print(markdown_table(report))
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .table import EvaluationTable, bootstrap_interval

__all__ = ["compare", "paired_differences", "markdown_table", "jsonable", "fmt"]


def fmt(x: Optional[float], digits: int = 4) -> str:
    """A number for a table: ``n/a`` for None / NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def jsonable(x: Any) -> Any:
    """Mappings, sequences, numpy scalars -> JSON values (NaN -> None, unknown objects -> repr)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(float(x)) else float(x)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (str, int)) or x is None:
        return x
    return repr(x)


def paired_differences(a: EvaluationTable, b: EvaluationTable, *, bootstrap: int = 1000, seed: int = 0,
                       confidence: float = 0.95) -> Dict[str, Any]:
    """``b - a`` per list for every column both tables hold, with a paired percentile bootstrap interval (the
    same lists resampled for every column; a list where either value is undefined is left out of that column).
    ``{"columns": {column: {mean, ci_low, ci_high, n_valid}}}``.  The tables must hold the same lists in the
    same order (``ValueError`` otherwise)."""
    ids_a, ids_b = list(a.list_ids), list(b.list_ids)
    if ids_a != ids_b:
        raise ValueError("`b` holds other lists than `a`: paired differences need the same lists in the same order")
    cols = [c for c in b.columns if c in a.columns]
    diff = np.stack([np.asarray(b[c], dtype=float) - np.asarray(a[c], dtype=float) for c in cols], 1)
    lo, hi = bootstrap_interval(diff, n_boot=bootstrap, seed=seed, confidence=confidence)
    out = {}
    for j, c in enumerate(cols):
        ok = ~np.isnan(diff[:, j])
        out[c] = {"mean": float(np.mean(diff[ok, j])) if ok.any() else float("nan"),
                  "ci_low": float(lo[j]), "ci_high": float(hi[j]), "n_valid": int(ok.sum())}
    return {"columns": out}


def compare(tables: Mapping[str, EvaluationTable], *, reference: Optional[Mapping[str, str]] = None,
            same_lists: Optional[Mapping[str, bool]] = None, bootstrap: int = 1000, seed: int = 0,
            confidence: float = 0.95, extra: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Dict[str, Any]:
    """Runs side by side.  ``tables``: run name -> :class:`EvaluationTable` (in display order).  ``reference``:
    run name -> the run it is paired with (default: every run after the first against the first).
    ``same_lists[name] = False`` marks a run scored on other lists than its reference (no paired difference,
    said in the report).  ``extra[name]`` is merged into that run's entry (metadata, plots' data)."""
    names = list(tables)
    if not names:
        raise ValueError("`tables` is empty: give at least one run")
    ref = dict(reference) if reference is not None else {n: names[0] for n in names[1:]}
    for n, r in ref.items():
        if n not in tables or r not in tables:
            raise ValueError(f"`reference`: {n!r} -> {r!r} names a run that is not in `tables`")
    report: Dict[str, Any] = {"order": names, "models": {}, "differences": {}, "bootstrap": bootstrap,
                              "seed": seed, "confidence": confidence}
    for n in names:
        report["models"][n] = {"measures": tables[n].aggregate(), "n_lists": len(tables[n].list_ids),
                               **(dict(extra[n]) if extra and n in extra else {})}
    for n, r in ref.items():
        if same_lists is not None and not same_lists.get(n, True):
            report["differences"][n] = {"paired": False, "reference": r,
                                        "why": "the lists differ (other data settings); no paired difference"}
            continue
        d = paired_differences(tables[r], tables[n], bootstrap=bootstrap, seed=seed, confidence=confidence)
        report["differences"][n] = {"paired": True, "reference": r, **d}
    return report


def markdown_table(report: Mapping[str, Any]) -> str:
    """One row per measure column, one column per run (``mean [interval]``) and one per paired difference
    (``run - reference``)."""
    names = list(report["order"])
    cols: List[str] = []
    for n in names:
        cols += [c for c in report["models"][n]["measures"] if c not in cols]
    diffs = [(n, d) for n, d in report.get("differences", {}).items() if d.get("paired")]
    head = ["measure"] + names + [f"{n} - {d['reference']}" for n, d in diffs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cols:
        row = [c]
        for n in names:
            a = report["models"][n]["measures"].get(c)
            row.append("n/a" if a is None else f"{fmt(a['mean'])} [{fmt(a['ci_low'])}, {fmt(a['ci_high'])}]")
        for n, d in diffs:
            e = d["columns"].get(c)
            row.append("n/a" if e is None or e["mean"] is None or math.isnan(e["mean"]) else
                       f"{e['mean']:+.4f} [{fmt(e['ci_low'])}, {fmt(e['ci_high'])}]")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
