"""The trade-off report of a sweep directory: the results frame (one row per trial, its sweep, parameters and
measures), Pareto fronts, and ``report.md`` with its figures, rendered by the one report layer's primitives
(:func:`torchfair.evaluation.report.markdown_rows`, ``write_markdown``, ``pyplot``, ``save_figure``)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Literal, Sequence

__all__ = ["collect_results", "pareto_front", "write_sweep_report"]

from .spec import UTILITY_COLUMN, _goodness, _objective_direction, column_direction
from .trial import _status


# --------------------------------------------------------------------------------------------- results
def collect_results(out: os.PathLike):
    """One row per trial of ``out`` (finished, failed or pending): ``trial_id``, ``status``, ``sweep`` (the label,
    ``<sweep file>-<spec hash>``, of the sweep that ran it), ``current`` (whether the sweep that ran last into
    ``out`` includes it), the parameters and every measure, and ``timing:<key>`` for each entry of the trial's
    recorded timing (``train_s``, ``wall_start``, ``loadavg_start``, ``slot``...; lists as JSON text), as a pandas
    DataFrame."""
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
        res: Dict[str, Any] = {}
        if row["status"] == "done":
            res = json.loads((tdir / "result.json").read_text())
            row.update(res["metrics"])
            row["checkpoint"], row["seconds"] = res.get("checkpoint"), res.get("seconds")
        elif row["status"] == "failed":
            res = json.loads((tdir / "error.json").read_text())
            row["error"] = res.get("error")
        row.update({f"timing:{k}": (json.dumps(v) if isinstance(v, (list, dict)) else v)
                    for k, v in (res.get("timing") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def pareto_front(utility: Sequence[float], unfairness: Sequence[float]) -> List[int]:
    """Indices of the points not dominated by another (higher or equal utility and lower or equal unfairness, one
    of them strictly), sorted by unfairness."""
    pts = [(u, f, i) for i, (u, f) in enumerate(zip(utility, unfairness)) if math.isfinite(u) and math.isfinite(f)]
    front = [i for (u, f, i) in pts
             if not any((u2 >= u and f2 <= f) and (u2 > u or f2 < f) for (u2, f2, _) in pts)]
    return sorted(front, key=lambda i: unfairness[i])


def write_sweep_report(out: str, split: Literal["test", "val"] = "test", only_current: bool = True) -> Path:
    """``results.csv`` (+ ``results.parquet`` when pyarrow is there), ``pareto_<measure>.png`` and ``report.md``
    for the sweep in ``out`` (finished or partial).  Fronts use the ``split`` measures (``test`` by default): the
    objective's measure (its declared direction) against every fairness summary column the trials logged (each
    measure's declared kind and direction), over the trials of the sweep that ran last into ``out`` unless
    ``only_current=False`` (trials of other sweep files or of another base config stay in results.csv, marked by
    their ``sweep`` column).

    Args:
        out: the sweep's output directory.
        split: which measures the fronts use (test or val).
        only_current: only the trials of the sweep that ran last into out.
    """
    from ..evaluation.report import markdown_rows, pyplot, save_figure, write_markdown

    plt = pyplot()

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
    mixed = bool(len(df)) and df["sweep"].astype(str).nunique() > 1  # the `sweep` column of the tables
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
            save_figure(fig, out / f"pareto_{short}.png")
            tag = ["sweep"] if mixed else []
            rows = [[r["trial_id"]] + [str(r[c]) for c in tag] + [r[p] for p in params]
                    + [f"{r[col]:.4f}", f"{r[ucol]:.4f}"] for _, r in front.iterrows()]
            lines += [f"## Pareto front: {col} against {ucol}", "", f"![front](pareto_{short}.png)", "",
                      markdown_rows(["trial"] + tag + [p[6:] for p in params] + [col, ucol], rows,
                                    align="l" * (1 + len(tag) + len(params)) + "rr"), ""]
    failed = df[df["status"] == "failed"] if len(df) else df
    if len(failed):
        lines += ["## Failed trials", ""] + [f"- {r['trial_id']} ({r['sweep']}): {r.get('error')}"
                                             for _, r in failed.iterrows()]
        lines.append("")
    path = out / "report.md"
    write_markdown(path, lines)
    return path
