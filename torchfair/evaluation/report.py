"""The one report layer: runs side by side, paired differences on shared resamples, markdown and JSON.

``torchfair evaluate`` (checkpoints, with or without re-rankers) and ``torchfair metrics`` (several ``--run``
files) build their reports here, as ranx users expect of an IR evaluation: one column per run (mean over lists
with a bootstrap interval), and for each run its difference from a reference run with a *paired* bootstrap
interval (the same lists drawn for both, the same resamples for every column).

A report is a plain dict (JSON-ready through :func:`jsonable`)::

    {"order": [run names], "models": {name: {"measures": {column: {mean, ci_low, ci_high, ...}}, ...}},
     "differences": {name: {"paired": True, "reference": ref, "n_lists": paired lists,
                            "columns": {column: {mean, ci_low, ci_high, n_valid}}}}}

Example::

    tables = {"bm25": evaluate_lists(lists_a, ["ndcg@10", "dips"], bootstrap=1000),
              "bm25+fair": evaluate_lists(lists_b, ["ndcg@10", "dips"], bootstrap=1000)}
    report = compare(tables, reference={"bm25+fair": "bm25"})
    print(markdown_table(report))

Output: :func:`markdown_table` (through :func:`markdown_rows`, the package's one markdown-table routine, which the
sweep report and :class:`~torchfair.evaluation.table.EvaluationTable` use too), :func:`jsonable` and
:func:`long_csv` (one row per run and measure).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ._format import fmt, jsonable, markdown_rows
from .table import EvaluationTable, bootstrap_interval

__all__ = ["compare", "paired_differences", "markdown_table", "long_csv", "LONG_CSV_HEADER", "markdown_rows",
           "jsonable", "fmt"]


_PAIR_BY = ("order", "id")


def paired_differences(a: EvaluationTable, b: EvaluationTable, *, bootstrap: int = 1000, seed: int = 0,
                       confidence: float = 0.95, pair_by: str = "order") -> Dict[str, Any]:
    """``b - a`` per list for every column both tables hold, with a paired percentile bootstrap interval (the
    same lists resampled for every column; a list where either value is undefined is left out of that column).
    ``{"columns": {column: {mean, ci_low, ci_high, n_valid}}, "n_lists": number of paired lists}``.

    ``pair_by="order"`` (default): the tables must hold the same lists in the same order (``ValueError``
    otherwise).  ``pair_by="id"``: lists are paired by list id over the ids both tables hold, in ``a``'s order
    (``ValueError`` when none is shared or a table repeats an id) -- runs that rank other query sets."""
    if pair_by not in _PAIR_BY:
        raise ValueError(f"`pair_by` must be one of {', '.join(map(repr, _PAIR_BY))}; got {pair_by!r}")
    ids_a, ids_b = list(a.list_ids), list(b.list_ids)
    if pair_by == "order":
        if ids_a != ids_b:
            raise ValueError("`b` holds other lists than `a`: paired differences need the same lists in the same "
                             "order (or pair_by='id')")
        ia = ib = np.arange(len(ids_a))
    else:
        for name, ids in (("a", ids_a), ("b", ids_b)):
            if len(set(ids)) != len(ids):
                dup = next(i for i in ids if ids.count(i) > 1)
                raise ValueError(f"`{name}` holds list id {dup!r} twice: lists cannot be paired by id")
        pos_b = {lid: j for j, lid in enumerate(ids_b)}
        pairs = [(i, pos_b[lid]) for i, lid in enumerate(ids_a) if lid in pos_b]
        if not pairs:
            raise ValueError("`a` and `b` have no list id in common: no paired difference")
        ia = np.array([i for i, _ in pairs], dtype=np.int64)
        ib = np.array([j for _, j in pairs], dtype=np.int64)
    cols = [c for c in b.columns if c in a.columns]
    diff = np.stack([np.asarray(b[c], dtype=float)[ib] - np.asarray(a[c], dtype=float)[ia] for c in cols], 1) \
        if cols else np.zeros((len(ia), 0))
    lo, hi = bootstrap_interval(diff, n_boot=bootstrap, seed=seed, confidence=confidence)
    out = {}
    for j, c in enumerate(cols):
        ok = ~np.isnan(diff[:, j])
        out[c] = {"mean": float(np.mean(diff[ok, j])) if ok.any() else float("nan"),
                  "ci_low": float(lo[j]), "ci_high": float(hi[j]), "n_valid": int(ok.sum())}
    return {"columns": out, "n_lists": int(len(ia))}


def compare(tables: Mapping[str, EvaluationTable], *, reference: Optional[Mapping[str, str]] = None,
            same_lists: Optional[Mapping[str, bool]] = None, bootstrap: int = 1000, seed: int = 0,
            confidence: float = 0.95, extra: Optional[Mapping[str, Mapping[str, Any]]] = None,
            pair_by: str = "order") -> Dict[str, Any]:
    """Runs side by side.  ``tables``: run name -> :class:`EvaluationTable` (in display order).  ``reference``:
    run name -> the run it is paired with (default: every run after the first against the first).
    ``same_lists[name] = False`` marks a run scored on other lists than its reference (no paired difference,
    said in the report).  ``extra[name]`` is merged into that run's entry (metadata, plots' data).  ``pair_by``:
    how lists are paired (:func:`paired_differences`; ``"id"``: over the list ids both runs hold)."""
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
        d = paired_differences(tables[r], tables[n], bootstrap=bootstrap, seed=seed, confidence=confidence,
                               pair_by=pair_by)
        report["differences"][n] = {"paired": True, "reference": r, **d}
    return report


def _columns(report: Mapping[str, Any]) -> List[str]:
    cols: List[str] = []
    for n in report["order"]:
        cols += [c for c in report["models"][n]["measures"] if c not in cols]
    return cols


def _undefined(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def markdown_table(report: Mapping[str, Any]) -> str:
    """One row per measure column, one column per run (``mean [interval]``) and one per paired difference
    (``run - reference``)."""
    names = list(report["order"])
    diffs = [(n, d) for n, d in report.get("differences", {}).items() if d.get("paired")]
    head = ["measure"] + names + [f"{n} - {d['reference']}" for n, d in diffs]
    rows = []
    for c in _columns(report):
        row = [c]
        for n in names:
            a = report["models"][n]["measures"].get(c)
            row.append("n/a" if a is None else f"{fmt(a['mean'])} [{fmt(a['ci_low'])}, {fmt(a['ci_high'])}]")
        for n, d in diffs:
            e = d["columns"].get(c)
            row.append("n/a" if e is None or _undefined(e["mean"]) else
                       f"{e['mean']:+.4f} [{fmt(e['ci_low'])}, {fmt(e['ci_high'])}]")
        rows.append(row)
    return markdown_rows(head, rows)


#: the header of :func:`long_csv`
LONG_CSV_HEADER = ("run", "measure", "mean", "ci_low", "ci_high", "n_valid", "reference", "diff_mean",
                   "diff_ci_low", "diff_ci_high", "diff_n_valid", "diff_n_lists")


def long_csv(report: Mapping[str, Any]) -> str:
    """The report as a long CSV table, one row per run and measure column (:data:`LONG_CSV_HEADER`): the run's
    mean, interval and number of valid lists, then its paired difference from its reference (empty cells for the
    reference run, or where there is no paired difference).  Floats with full precision (``repr``), empty = n/a."""
    import csv
    import io

    def num(x: Any) -> str:
        return "" if _undefined(x) else repr(float(x)) if isinstance(x, (float, np.floating)) else str(x)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LONG_CSV_HEADER)
    diffs = report.get("differences", {})
    for n in report["order"]:
        meas = report["models"][n]["measures"]
        d = diffs.get(n)
        paired = d is not None and d.get("paired")
        for c in _columns(report):
            a = meas.get(c) or {}
            e = d["columns"].get(c) if paired else None
            w.writerow([n, c, num(a.get("mean")), num(a.get("ci_low")), num(a.get("ci_high")), num(a.get("n_valid")),
                        "" if d is None else d["reference"]] +
                       ([num(e["mean"]), num(e["ci_low"]), num(e["ci_high"]), num(e["n_valid"]),
                         num(d.get("n_lists"))] if e is not None else [""] * 5))
    return buf.getvalue()
