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
:func:`long_csv` (one row per run and measure).  The files: :func:`write_report` writes ``report.json``,
``report.md`` (:func:`report_markdown`), optionally ``report.csv`` (:func:`long_csv`) and, when the runs carry
``position_share`` (:class:`~torchfair.evaluation.accumulators.PositionShares`), ``exposure_by_position.png``
(:func:`plot_position_shares`); :func:`pyplot`, :func:`save_figure` and :func:`write_markdown` are the plotting
and markdown primitives the sweep report (:mod:`torchfair.sweeps.tradeoff`) writes through too.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ._format import fmt, jsonable, markdown_rows
from .table import EvaluationTable, bootstrap_interval

__all__ = ["compare", "paired_differences", "markdown_table", "long_csv", "LONG_CSV_HEADER", "markdown_rows",
           "jsonable", "fmt", "report_markdown", "write_report", "write_json", "write_markdown",
           "plot_position_shares", "pyplot", "save_figure", "REPORT_FILES"]


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


def markdown_table(report: Mapping[str, Any], width: Optional[int] = None) -> str:
    """One row per measure column, one column per run (``mean [interval]``) and one per paired difference
    (``run - reference``).  ``width``: the widest line allowed (``None``: one table however wide); a wider table
    is several tables, each with the measure column and as many run / difference columns as fit
    (:func:`~torchfair.evaluation._format.markdown_rows`)."""
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
    return markdown_rows(head, rows, width=width)


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


# --------------------------------------------------------------------------------------------- files
#: the files of :func:`write_report`, by kind
REPORT_FILES = {"json": "report.json", "md": "report.md", "csv": "report.csv", "png": "exposure_by_position.png"}

PathLike = Union[str, "os.PathLike[str]"]


def write_json(obj: Any, path: PathLike) -> str:
    """``obj`` through :func:`jsonable` into ``path`` (indented); returns the path."""
    with open(path, "w") as f:
        json.dump(jsonable(obj), f, indent=2)
    return str(path)


def write_markdown(path: PathLike, lines: Sequence[str]) -> str:
    """The markdown ``lines`` joined into ``path`` (with a final newline); returns the path."""
    if isinstance(lines, str):
        raise ValueError("`lines` must be a sequence of lines, not one string")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only, no display), as every report figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: PathLike, dpi: int = 120) -> str:
    """Lay out, save and close a figure of :func:`pyplot`; returns the path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return str(path)


def _groups_text(names: Sequence[str]) -> str:
    return ", ".join(f"{chr(65 + g)} = {gn}" for g, gn in enumerate(names)) if len(names) <= 26 \
        else f"{len(names)} groups"


def report_markdown(report: Mapping[str, Any], *, title: Optional[str] = None, notes: str = "",
                    unit: str = "lists") -> str:
    """The report as markdown: ``# title``, one paragraph (bootstrap settings, then ``notes``), the
    :func:`markdown_table`, then a line per run: its checkpoint and training (``meta`` of ``torchfair evaluate``)
    or its number of lists, its groups, and its pooled MPC when defined (``mpc``:
    :class:`~torchfair.evaluation.accumulators.PooledMPC`).  ``unit``: what a list is (``users``).  Default title:
    ``torchfair evaluate: <split> lists`` for a report with a ``split``, else ``torchfair report``."""
    for key in ("order", "models", "confidence", "bootstrap", "seed"):
        if key not in report:
            raise ValueError(f"`report` lacks {key!r}: give a report of compare()")
    if title is None:
        title = f"torchfair evaluate: {report['split']} lists" if "split" in report else "torchfair report"
    md = [f"# {title}", "",
          f"Mean over {unit} with {int(report['confidence'] * 100)}% bootstrap intervals ({report['bootstrap']} "
          f"replicates, seed {report['seed']}); differences are paired (same {unit})."
          + (f"  {notes}" if notes else ""), "", markdown_table(report), ""]
    for n in report["order"]:
        m = report["models"][n]
        meta = m.get("meta") or {}
        groups = f"groups {_groups_text(m['group_names'])}." if m.get("group_names") is not None else ""
        if "checkpoint" in meta:
            fl = meta.get("fairness_loss") or {}
            fair = "no fairness loss" if not fl.get("repr") else f"fairness loss {fl['repr']}" + (
                f" (lambda {meta['lam']:g})" if isinstance(meta.get("lam"), (int, float)) else "")
            md.append(f"- **{n}**: `{_shown_path(meta['checkpoint'])}` (epoch {meta.get('epoch')}); ranker "
                      f"`{meta.get('ranker')}`; {fair}; "
                      f"{'re-ranked by `' + meta['rerank'] + '`; ' if meta.get('rerank') else ''}{m['n_lists']} "
                      f"lists; {groups}".rstrip())
        else:
            md.append(f"- **{n}**: {m['n_lists']} lists{'; ' + groups if groups else '.'}")
        mp = m.get("mpc") or {}
        if mp.get("defined"):
            md.append(f"  MPC(group {mp['group']}) = {mp['estimate']:+.4f} [{mp['ci_low']:+.4f}, "
                      f"{mp['ci_high']:+.4f}] over {mp['n_pairs']} adjacent pairs (> 0: the group is under-ranked).")
    return "\n".join(md)


def _shown_path(path) -> str:
    """A checkpoint path as a report shows it: relative to the working directory when under it (a report pasted
    elsewhere names no home directory), else as given."""
    import os

    p = str(path)
    try:
        rel = os.path.relpath(p)
    except ValueError:  # another drive (Windows)
        return p
    return rel if os.path.isabs(p) and not rel.startswith("..") else p


def plot_position_shares(report: Mapping[str, Any], path: PathLike, max_groups: int = 6) -> str:
    """``exposure_by_position.png``: for (up to ``max_groups``) groups, one panel with a line per run, the share of
    lists whose item at each position belongs to the group (each run's ``position_share [top, G]``)."""
    plt = pyplot()
    names = list(report["order"])
    gnames = report["models"][names[0]]["group_names"]
    show = range(min(len(gnames), max_groups))
    fig, axes = plt.subplots(1, len(show), figsize=(4.2 * len(show), 3.4), squeeze=False)
    for ax, g in zip(axes[0], show):
        for n in names:
            share = np.asarray(report["models"][n]["position_share"])
            ax.plot(np.arange(1, share.shape[0] + 1), share[:, g], label=n)
        ax.set_title(f"group {gnames[g]}")
        ax.set_xlabel("position (1 = top)")
        ax.set_ylabel("share of users")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Group of the item at each position ({report.get('split', 'evaluated')} lists)")
    return save_figure(fig, path)


def write_report(report: Mapping[str, Any], out: PathLike, *, title: Optional[str] = None, notes: str = "",
                 unit: str = "lists", csv: bool = False, plot: Optional[bool] = None) -> Dict[str, str]:
    """Write the report's files into the directory ``out`` (created): ``report.json`` (:func:`jsonable`),
    ``report.md`` (:func:`report_markdown` with ``title``, ``notes``, ``unit``), with ``csv=True`` ``report.csv``
    (:func:`long_csv`) and ``exposure_by_position.png`` (:func:`plot_position_shares`; ``plot=None``: when every run
    has a ``position_share``).  Returns ``{kind: path}`` (kinds of :data:`REPORT_FILES`).

    Example::

        write_report(compare({"a": table_a, "b": table_b}), "reports/", csv=True)
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"`out`: {out} is an existing file; give a directory for the report files")
    text = report_markdown(report, title=title, notes=notes, unit=unit)  # a malformed report fails before writing
    if plot is None:
        plot = all("position_share" in report["models"][n] for n in report["order"])
    os.makedirs(out, exist_ok=True)
    path = {k: os.path.join(out, f) for k, f in REPORT_FILES.items()}
    written = {"json": write_json(report, path["json"]), "md": write_markdown(path["md"], [text])}
    if csv:
        with open(path["csv"], "w", newline="") as f:
            f.write(long_csv(report))
        written["csv"] = path["csv"]
    if plot:
        written["png"] = plot_position_shares(report, path["png"])
    return written
