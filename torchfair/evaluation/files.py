"""Measures of rankings stored in files: TREC runs + qrels (+ a group file) or a CSV/Parquet table.

:func:`evaluate_files` is what ``torchfair metrics`` runs (the command line is generated from its signature) and
what a Python user calls to get the same numbers; :func:`show_files` prints and writes its result.

Conventions.  By default the measures keep the library's conventions (the ones the losses are trained with):
NDCG's gain is exponential (``2^rel - 1``, Burges et al. 2005, as gdeval, LightGBM and rax), each measure treats
equal scores its own way (DIPS averages over the tied orders), and a list where a measure is undefined (no relevant
document) is left out of that measure's mean (its ``n_valid`` says how many lists count).  Whatever the convention,
with qrels NDCG's ideal ranking, recall's and AP's denominators and RR come from every judged document of the query
(:func:`~torchfair.evaluation.io.read_trec` carries them as ``ideal_relevance``), also those the run does not rank.
``trec=True`` (``torchfair metrics --trec``) gives trec_eval's numbers: linear gain, ties broken by docno
(descending), relevant = grade >= 1, undefined values count as 0, and only the queries of the run that have qrels.

Example::

    res = evaluate_files("bm25.txt", "qrels.txt", measures=["ndcg_cut_10", "P_5", "map"], trec=True)
    res.tables["bm25"].mean["ndcg@10"]
"""
from __future__ import annotations

import os
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Sequence, Union

try:  # range types the command line reads from this signature (one-line error while parsing); int/float otherwise
    from jsonargparse.typing import NonNegativeInt, OpenUnitInterval, PositiveInt
except ImportError:  # pragma: no cover - jsonargparse comes with the command line
    NonNegativeInt = PositiveInt = int  # type: ignore[misc]
    OpenUnitInterval = float  # type: ignore[misc]

__all__ = ["evaluate_files", "show_files", "FilesEvaluation", "split_measures", "print_measures"]


@dataclass
class FilesEvaluation:
    """What :func:`evaluate_files` returns: one :class:`EvaluationTable` per run (``tables``, in input order),
    with several runs the comparison report (:func:`torchfair.evaluation.report.compare`, each run's paired
    difference from the first over the queries both rank), the group names and the readers' notes."""

    tables: Dict[str, Any]
    comparison: Optional[Dict[str, Any]] = None
    group_names: Optional[List[str]] = None
    notes: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)


def split_measures(items: Union[str, Sequence[str]]) -> List[str]:
    """``["dips,igi", "ndcg@10"]`` -> ``["dips", "igi", "ndcg@10"]``; commas inside a measure's options
    (``"dips:tie_weight=0,browsing=uniform"``) are kept."""
    import re

    split = re.compile(r",(?=\s*[A-Za-z_]\w*(?:@\d+)?\s*(?:[:,]|$))")  # a comma before `name`, `name@k`, `name:`
    out: List[str] = []
    for it in [items] if isinstance(items, str) else list(items):
        out += [p.strip() for p in split.split(str(it)) if p.strip()]
    return out


def _check_file(path: Optional[str], option: str) -> None:
    if path is not None and not os.path.isfile(path):
        raise ValueError(f"`{option}`: {'not a file' if os.path.exists(path) else 'no such file'}: {path}")


def check_output_file(path: Optional[str], option: str) -> None:
    """``path`` can be written: its folder exists and it is not a directory (checked before any work)."""
    if path is None:
        return
    if os.path.isdir(path):
        raise ValueError(f"`{option}`: {path} is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"`{option}`: the folder {os.path.dirname(path) or '.'} does not exist")


def _names(runs: List[str], name: Optional[Sequence[str]]) -> List[str]:
    if name is not None and len(name) != len(runs):
        raise ValueError(f"`names`: {len(name)} name(s) for {len(runs)} run file(s); give one per run, in order")
    names = list(name) if name is not None else [os.path.splitext(os.path.basename(r))[0] or r for r in runs]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise ValueError(f"`names`: two runs are named {dup!r}; give each run its own name")
    return names


def _align_groups(datas) -> Optional[List[str]]:
    """Renumber the group ids of runs read against the same labels (a run numbers the labels of the documents it
    ranks) on the union of the labels; returns the group names."""
    import torch

    named = [d.group_names for d in datas if d.group_names is not None]
    if not named or all(n == named[0] for n in named):
        return list(named[0]) if named else None
    labels = set().union(*named)
    try:
        ints = sorted(int(x) for x in labels)
        union = [str(g) for g in range(ints[-1] + 1)] if ints[0] >= 0 else sorted(labels)
    except ValueError:
        union = sorted(labels)
    where = {lab: i for i, lab in enumerate(union)}
    for d in datas:
        if d.group_names is None or list(d.group_names) == union:
            continue
        new_id = torch.tensor([where[lab] for lab in d.group_names], dtype=torch.long)
        for lst in d.lists:
            g = lst.get("groups")
            if g is None:
                continue
            if g.is_floating_point():  # [n, G] shares
                m = torch.zeros(g.shape[0], len(union), dtype=g.dtype)
                m[:, new_id] = g[:, :len(new_id)]
                lst["groups"] = m
            else:
                lst["groups"] = torch.where(g >= 0, new_id[g.clamp(min=0)], g)
        d.group_names = list(union)
    return union


def evaluate_files(run: Union[str, List[str], None] = None, qrels: Optional[str] = None,
                   groups: Optional[str] = None, table: Optional[str] = None, *,
                   names: Optional[List[str]] = None, measures: Union[str, List[str]] = "dips", trec: bool = False,
                   qrels_groups: Literal["auto", "column", "iter", "none"] = "auto", use_rank: bool = False,
                   ideal: Literal["qrels", "run"] = "qrels", missing_groups: Literal["error", "unknown"] = "error",
                   negative_grades: Literal["error", "zero"] = "error", browsing: Optional[str] = None,
                   k: Optional[PositiveInt] = None, tie_weight: Optional[float] = None,
                   ties: Optional[Literal["first", "average"]] = None, num_groups: Optional[PositiveInt] = None,
                   bootstrap: NonNegativeInt = 1000, seed: int = 0,
                   confidence: OpenUnitInterval = 0.95) -> FilesEvaluation:
    """Measures of the rankings in ``run`` (one TREC run file or several, compared side by side) with ``qrels``
    and ``groups``, or in ``table``: per list, aggregated (mean over lists, percentile bootstrap interval).

    Args:
        run: TREC run file(s) ('qid Q0 docid rank score tag'); several runs are compared with the first.
        qrels: TREC qrels ('qid 0 docid rel', or a 5th column holding the document's group).
        groups: group file: 'docid group' or 'qid docid group' per line ('group=0.7' gives a share).
        table: CSV or Parquet file with list_id, item_id, score, relevance, group (instead of run/qrels).
        names: a name per run file (default: the file names without extension).
        measures: measure names, comma separated or a list: 'ndcg@10', 'dips:tie_weight=0', trec_eval names.
        trec: trec_eval's conventions (linear gain, ties by docno, undefined = 0, queries with qrels only).
        qrels_groups: where the qrels carry groups: auto (5th column when present), column, iter (2nd), none.
        use_rank: rank by the run's rank column instead of its score.
        ideal: NDCG's ideal ranking (and recall's denominator): every judged document (qrels) or the run's.
        missing_groups: a ranked document without a group label: an error, or 'unknown' (group -1).
        negative_grades: a negative relevance grade: an error, or 'zero' (read as 0).
        browsing: browsing model of the measures that take one (rbp:0.8, geometric:0.5, topk:10...).
        k: cut-off of the measures that take one.
        tie_weight: c_t of the pairwise measures (DIPS, IGI, REE).
        ties: equal scores: 'first' (the run's rank column; docno with trec) or 'average' over their orders.
        num_groups: number of groups (default: from the data).
        bootstrap: bootstrap replicates (0: no interval).
        seed: bootstrap seed.
        confidence: level of the intervals.
    """
    from .io import read_table, read_trec
    from .registry import get_measure, parse_request
    from .report import compare
    from .table import evaluate_lists

    runs = [run] if isinstance(run, str) else list(run or [])
    if table is not None and (runs or qrels or groups):
        raise ValueError("give either `table` or `run`/`qrels`/`groups`, not both")
    if table is None and not runs:
        if qrels or groups:
            raise ValueError("`qrels` and `groups` need a `run` to score")
        raise ValueError("`run`: no input; give a run file with `qrels` (and `groups`), or a `table`")
    if table is not None and names is not None:
        raise ValueError("`names` names the run files; it does not apply to `table`")
    for path, option in [(table, "table"), (qrels, "qrels"), (groups, "groups")] + [(r, "run") for r in runs]:
        _check_file(path, option)
    measures = split_measures(measures)
    if not measures:
        raise ValueError("`measures` is empty")
    specs = [get_measure(parse_request(m).name) for m in measures]  # a misspelt measure fails before reading
    names = _names(runs, names) if runs else [os.path.splitext(os.path.basename(table))[0]]
    lenient = dict(missing_groups=missing_groups, negative_grades=negative_grades)
    if trec:
        from .io import TREC_READ
    read = {**lenient, "ideal": ideal, **(TREC_READ if trec else {})}
    datas = [read_table(table, **lenient)] if table is not None else \
        [read_trec(r, qrels, groups, qrels_groups=qrels_groups, use_rank=use_rank, **read) for r in runs]
    res = FilesEvaluation(tables={})
    for n, d in zip(names, datas):
        pre = f"{n}: " if len(datas) > 1 else ""
        res.notes += [pre + x for x in d.notes]
        res.warnings += [pre + x for x in d.warnings]
        for spec in specs:
            if spec.needs_groups and not d.has_groups:
                raise ValueError(f"measure {spec.name!r} needs group labels: give `groups`, a 5-column qrels, "
                                 f"qrels_groups='iter', or a 'group' column")
            if spec.needs_relevance and any(x.get("relevance") is None for x in d.lists):
                raise ValueError(f"measure {spec.name!r} needs relevance: give `qrels` with `run`, or a "
                                 f"'relevance' column with `table`")
    res.group_names = _align_groups(datas)
    G = num_groups if num_groups is not None else (len(res.group_names) if res.group_names else None)
    options = {key: v for key, v in dict(browsing=browsing, k=k, tie_weight=tie_weight, ordering=ties).items()
               if v is not None}
    if trec:
        from . import TREC_EVAL
        options = {**TREC_EVAL, **options}
    for n, d in zip(names, datas):
        res.tables[n] = evaluate_lists(d.lists, measures, bootstrap=bootstrap, seed=seed, confidence=confidence,
                                       num_groups=G, group_names=res.group_names, **options)
    if len(names) > 1:
        first = set(res.tables[names[0]].list_ids)
        for n, r in zip(names[1:], runs[1:]):
            if not first & set(res.tables[n].list_ids):
                raise ValueError(f"`run`: {r} ({n}) and {runs[0]} ({names[0]}) have no query in common: the paired "
                                 f"difference needs queries that both runs rank")
        res.comparison = compare(res.tables, bootstrap=bootstrap, seed=seed, confidence=confidence, pair_by="id",
                                 extra={n: {"file": r} for n, r in zip(names, runs)})
        res.comparison.update(measures=measures, options=options, group_names=res.group_names, num_groups=G)
    return res


def show_files(res: FilesEvaluation, *, out_json: Optional[str] = None, out_csv: Optional[str] = None,
               format: Literal["markdown", "csv", "json"] = "markdown", per_list: bool = False,
               quiet: bool = False, width: Optional[NonNegativeInt] = None, stdout=None) -> None:
    """Print :func:`evaluate_files`' result and write its files.

    Args:
        out_json: write the full table (per list + aggregate) as JSON; with several runs, the comparison report.
        out_csv: write the full table as CSV; with several runs, one row per run and measure.
        format: what to print: markdown (the aggregate table, runs side by side), csv or json.
        per_list: also print the per-list table (of each run).
        quiet: print nothing.
        width: the widest line of a printed markdown table (default: the terminal's width, 120 when not a
            terminal; 0: no limit): a wider one is printed as several tables, each with the first column and as
            many of the others as fit.  The files and the csv / json output hold every column in one table.
    """
    import json

    from ._format import terminal_width
    from .report import jsonable, long_csv, markdown_table

    width = terminal_width(width)

    out = stdout or sys.stdout
    names = list(res.tables)
    many = res.comparison is not None
    if many and per_list and format == "csv" and not quiet:
        raise ValueError("`per_list` with several runs prints no CSV (one table per run): use format markdown or "
                         "json, or `out_json`")
    full = None
    if many:
        full = dict(res.comparison, models={
            n: dict(m, columns=list(res.tables[n].columns),
                    lists=[{"list_id": i, "values": row} for i, row in zip(res.tables[n].list_ids,
                                                                          res.tables[n].values)])
            for n, m in res.comparison["models"].items()})
    if out_json:
        if many:
            with open(out_json, "w") as f:
                f.write(json.dumps(jsonable(full), indent=2) + "\n")
        else:
            res.tables[names[0]].to_json(out_json)
    if out_csv:
        if many:
            with open(out_csv, "w", newline="") as f:
                f.write(long_csv(res.comparison))
        else:
            res.tables[names[0]].to_csv(out_csv)
    if quiet:
        return
    if format == "csv":
        out.write(long_csv(res.comparison) if many else res.tables[names[0]].to_csv(per_list=per_list))
        return
    if format == "json":
        out.write((json.dumps(jsonable(full if per_list else res.comparison), indent=2) if many
                   else res.tables[names[0]].to_json()) + "\n")
        return
    if res.group_names:
        out.write("groups: " + ", ".join(f"{chr(65 + i) if len(res.group_names) <= 26 else f'g{i}'}={n}"
                                         for i, n in enumerate(res.group_names)) + "\n")
    out.write("lists: " + ", ".join(f"{n} {len(res.tables[n])}" if many else str(len(res.tables[n]))
                                    for n in names) + "\n")
    if not many:
        out.write(res.tables[names[0]].to_markdown(width=width) + "\n")
    else:
        for n in names[1:]:
            k = res.comparison["differences"][n]["n_lists"]
            if k != len(res.tables[n]) or k != len(res.tables[names[0]]):
                out.write(f"{n} - {names[0]}: paired over the {k} queries both runs rank\n")
        out.write(markdown_table(res.comparison, width=width) + "\n")
        level = int(round(res.comparison["confidence"] * 100))
        out.write(f"cells: mean over the lists where the measure is defined [{level}% bootstrap interval]; "
                  f"'X - {names[0]}': mean per-query difference over the queries both rank [paired {level}% "
                  f"interval, the same resamples for every measure]\n")
    if per_list:
        for n in names:
            out.write(("\n" + (f"per list: {n}\n" if many else "")) +
                      res.tables[n].to_markdown(per_list=True, width=width) + "\n")


def print_measures(out=None) -> None:
    """Each registered measure with its description, wrapped to the terminal width."""
    from .registry import available_measures, get_measure

    out = out or sys.stdout
    width = max(60, min(shutil.get_terminal_size((100, 20)).columns, 120))
    for name in available_measures():
        desc = " ".join((get_measure(name).description or "").split()) or "(no description)"
        head = f"{name:24s} " if len(name) < 24 else f"{name}\n{'':25s}"
        out.write(textwrap.fill(desc, width=width, initial_indent=head, subsequent_indent=" " * 25) + "\n")
