"""The ``torchfair`` command line.

One command-line system: jsonargparse, which LightningCLI is built on.  Every subcommand takes ``--config FILE``
(a YAML of its options, keys as ``--print_config`` prints them) and ``--print_config``; ``fit|validate|test|predict``
are LightningCLI's own.  Subcommands are registered in :data:`SUBCOMMANDS` (name -> ``(add, run)``: ``add(sub)``
builds the parser, ``run(args)`` does the work).

* ``torchfair fit|validate|test|predict --config configs/ml100k_dips.yaml``: LightningCLI over the training
  loop (:mod:`torchfair.training`);
* ``torchfair evaluate --ckpt PATH [--ckpt PATH ...] --out DIR [--fit-config YAML]``: the exact measures of trained
  checkpoints on their test lists, as report.json / report.md / exposure_by_position.png;
* ``torchfair sweep SWEEP_FILE --out DIR`` / ``torchfair sweep-report DIR``: grid and random searches over
  training configs, resumable, with results.csv, Pareto fronts and report.md (:mod:`torchfair.sweep`);
* ``torchfair metrics``: fairness and utility measures of rankings read from a TREC run + qrels (+ group file) or a
  CSV/Parquet table; prints the aggregate table (mean over valid lists, bootstrap interval, number of valid lists).
  Several ``--run`` files are compared side by side through :mod:`torchfair.evaluation.report` (each later run's
  paired difference from the first, over the queries both rank).

Examples::

    torchfair metrics --run run.txt --qrels qrels.txt --groups groups.txt --measures dips igi ndcg@10 \\
        --browsing rbp:0.9 --bootstrap 1000 --out-json results.json --out-csv results.csv
    torchfair metrics --run bm25.txt --run fair.txt --name bm25 --name fair --qrels qrels.txt \\
        --groups groups.txt --measures dips ndcg@10
    torchfair metrics --table items.csv --measures "dips:tie_weight=0,browsing=uniform" kendall_tau
    torchfair metrics --list-measures

:func:`main` returns the exit code: 0 on success, 2 on a usage or input error (message on stderr).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter, Namespace

__all__ = ["main", "build_parser", "split_measures", "SUBCOMMANDS", "LIGHTNING_SUBCOMMANDS", "HelpFormatter"]

#: choices of --missing-groups / --negative-grades (torchfair.evaluation.io.MISSING_GROUPS / NEGATIVE_GRADES,
#: repeated here so that building the parser does not import torchfair.evaluation)
MISSING_GROUPS = ("error", "unknown")
NEGATIVE_GRADES = ("error", "zero")
#: choices of --ideal: where NDCG's ideal ranking comes from with --run / --qrels
IDEAL = ("qrels", "run")

#: a comma starts a new measure when it is followed by ``name``, ``name@k`` or ``name:...`` (not ``key=value``)
_MEASURE_SPLIT = re.compile(r",(?=\s*[A-Za-z_]\w*(?:@\d+)?\s*(?:[:,]|$))")


class HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's formatter, showing an option's default in its help unless the default is None / False (no
    value, a flag) or the help already says it."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def split_measures(items: Sequence[str]) -> List[str]:
    """``["dips,igi", "ndcg@10"]`` -> ``["dips", "igi", "ndcg@10"]``; commas inside a measure's options
    (``"dips:tie_weight=0,browsing=uniform"``) are kept."""
    out = []
    for it in items:
        out += [p.strip() for p in _MEASURE_SPLIT.split(it) if p.strip()]
    return out


def _add_metrics(sub) -> None:
    p = sub.add_parser(
        "metrics", help="fairness / utility measures of rankings from TREC or CSV/Parquet files",
        description="Compute measures per list and aggregate them (mean over the lists where a value is defined, "
                    "percentile bootstrap interval over lists). Input: --run + --qrels [--groups], or --table.",
        epilog="TREC: run 'qid Q0 docid rank score tag'; qrels 'qid 0 docid rel' or 'qid 0 docid rel group'; "
               "group file 'docid group' or 'qid docid group' (several lines = several groups, split equally; "
               "'group=0.7' gives a share, the rest of the document being of unknown group; '-1' = unknown); "
               "--qrels-groups iter reads expeval's layout (groups, '|' or ',' separated, in the 2nd qrels column). "
               "Run items missing from the qrels have relevance 0 (a note counts them). "
               "Bad input is an error naming the file and line: a ranked document without a group label (unless "
               "--missing-groups unknown), a negative grade (unless --negative-grades zero), conflicting qrels "
               "lines, duplicate items, non-finite numbers, empty files. "
               "Table: columns list_id, item_id, score, relevance, group (aliases qid, docid, rel...). "
               "Group ids 0, 1, ... are named A, B, ... in the column names.",
        formatter_class=HelpFormatter)
    src = p.add_argument_group("input")
    src.add_argument("--run", action="append",
                     help="TREC run file; repeat it to compare runs side by side (the first is the reference of "
                          "the paired differences)")
    src.add_argument("--name", action="append",
                     help="a name for each --run, in the same order (repeat it; default: the file name without "
                          "its extension)")
    src.add_argument("--qrels", help="TREC qrels file (4 columns, or 5 with the group label last)")
    src.add_argument("--groups", help="group file: 'docid group' or 'qid docid group' per line")
    src.add_argument("--qrels-groups", choices=("auto", "column", "iter", "none"), default="auto",
                     help="where the qrels carry groups: auto (5th column when present), column, iter (expeval: "
                          "2nd column), none")
    src.add_argument("--use-rank", action="store_true", help="rank by the run's rank column instead of its score")
    src.add_argument("--table", help="CSV or Parquet file with list_id, item_id, score, relevance, group")
    src.add_argument("--missing-groups", choices=MISSING_GROUPS, default="error",
                     help="a ranked document without a group label (while the input has group labels): an "
                          "error, or 'unknown' (group -1, with a warning)")
    src.add_argument("--negative-grades", choices=NEGATIVE_GRADES, default="error",
                     help="a negative relevance grade (qrels or table): an error, or 'zero' (read as 0, with a "
                          "warning; some collections mark junk with -1 or -2)")
    m = p.add_argument_group("measures")
    m.add_argument("--measures", nargs="+", default=["dips"],
                   help="measure names, space or comma separated; 'ndcg@10' sets k, 'dips:tie_weight=0,"
                        "browsing=uniform' sets options, 'label=name' renames the columns")
    m.add_argument("--browsing", help="browsing model for the measures that take one: rbp, rbp:0.8, geometric:0.5, "
                                      "logarithmic, reciprocal, uniform, cascade:0.9, topk:10, topk:10:rbp:0.8")
    m.add_argument("--k", type=int, help="cut-off k for the measures that take one")
    m.add_argument("--tie-weight", type=float, help="c_t for the pairwise measures (DIPS, IGI, REE)")
    m.add_argument("--ties", choices=("first", "average"), default=None,
                   help="equal scores: 'first' (file order) or 'average' over their orders "
                        "(default: each measure's own)")
    m.add_argument("--num-groups", type=int, help="number of groups (default: from the data)")
    m.add_argument("--list-measures", action="store_true", help="print the available measures and exit")
    m.add_argument("--ideal", choices=IDEAL, default="qrels",
                   help="NDCG's ideal ranking with --run/--qrels: 'qrels' (trec_eval's convention: all judged "
                        "documents of the query, also those the run does not rank) or 'run' (only the run's "
                        "documents, as for --table)")
    a = p.add_argument_group("aggregation and output")
    a.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (0: no interval)")
    a.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    a.add_argument("--confidence", type=float, default=0.95, help="interval level")
    a.add_argument("--out-json", help="write the full table (per list + aggregate) as JSON; with several --run, "
                                      "the comparison report (with each run's per-list values)")
    a.add_argument("--out-csv", help="write the full table (per list + aggregate) as CSV; with several --run, one "
                                     "row per run and measure (mean, interval, paired difference)")
    a.add_argument("--per-list", action="store_true", help="also print the per-list table (of each run)")
    a.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown",
                   help="what to print on stdout (markdown: the aggregate table; with several --run, the runs side "
                        "by side with each run's paired difference from the first)")
    a.add_argument("--quiet", action="store_true", help="print nothing on stdout")


def _check_files(args: Namespace, options: Sequence[str]) -> None:
    """Every file option that is given names an existing file (the message names the option)."""
    for opt in options:
        value = getattr(args, opt.replace("-", "_"))
        for path in value if isinstance(value, list) else [value]:
            if path is None:
                continue
            if not os.path.exists(path):
                raise ValueError(f"--{opt}: no such file: {path}")
            if not os.path.isfile(path):
                raise ValueError(f"--{opt}: not a file: {path}")


def _print_measures(out=None) -> None:
    """Each registered measure with its full description, wrapped to the terminal width."""
    from .evaluation.registry import available_measures, get_measure

    out = out or sys.stdout
    width = max(60, min(shutil.get_terminal_size((100, 20)).columns, 120))
    for name in available_measures():
        desc = " ".join((get_measure(name).description or "").split()) or "(no description)"
        head = f"{name:24s} " if len(name) < 24 else f"{name}\n{'':25s}"
        out.write(textwrap.fill(desc, width=width, initial_indent=head, subsequent_indent=" " * 25) + "\n")


def _read_input(args: Namespace, run: Optional[str]):
    """The lists of ``--table`` or of one ``--run`` with ``--qrels`` / ``--groups``."""
    from .evaluation.io import read_table, read_trec

    lenient = dict(missing_groups=args.missing_groups, negative_grades=args.negative_grades)
    if args.table:
        return read_table(args.table, **lenient)
    return read_trec(run, args.qrels, args.groups, qrels_groups=args.qrels_groups, use_rank=args.use_rank, **lenient)


def _check_measures(measures: Sequence[str], data) -> None:
    """Each measure finds the group labels / relevance it needs in ``data``."""
    from .evaluation.registry import get_measure, parse_request

    for mname in measures:
        spec = get_measure(parse_request(mname).name)
        if spec.needs_groups and not data.has_groups:
            raise ValueError(f"measure {spec.name!r} needs group labels: give --groups, a 5-column qrels, "
                             f"--qrels-groups iter, or a 'group' column")
        if spec.needs_relevance and any(d.get("relevance") is None for d in data.lists):
            raise ValueError(f"measure {spec.name!r} needs relevance: give --qrels with --run, or a 'relevance' "
                             f"column with --table")


def _measure_options(args: Namespace) -> Dict[str, object]:
    options: Dict[str, object] = {}
    if args.browsing is not None:
        options["browsing"] = args.browsing
    if args.k is not None:
        options["k"] = args.k
    if args.tie_weight is not None:
        options["tie_weight"] = args.tie_weight
    if args.ties is not None:
        options["ordering"] = args.ties
    return options


def _print_groups(group_names: Optional[Sequence[str]]) -> None:
    if group_names:
        names = ", ".join(f"{chr(65 + i) if len(group_names) <= 26 else f'g{i}'}={n}"
                          for i, n in enumerate(group_names))
        print(f"groups: {names}")


def _print_input_notes(data, prefix: str = "") -> None:
    for note in data.notes:
        print(f"torchfair metrics: note: {prefix}{note}", file=sys.stderr)
    for warning in data.warnings:
        print(f"torchfair metrics: warning: {prefix}{warning}", file=sys.stderr)


def _run_names(args: Namespace) -> List[str]:
    """One name per ``--run`` (``--name``, or the file name without its extension); all different."""
    runs = args.run or []
    if args.name is not None:
        if not runs:
            raise ValueError("--name names the --run files; it does not apply to --table")
        if len(args.name) != len(runs):
            raise ValueError(f"--name: {len(args.name)} name(s) for {len(runs)} --run file(s); give one --name per "
                             f"--run, in the same order")
    names = list(args.name) if args.name is not None else \
        [os.path.splitext(os.path.basename(r))[0] or r for r in runs]
    seen: Dict[str, str] = {}
    for n, r in zip(names, runs):
        if n in seen:
            if args.name is not None:
                raise ValueError(f"--name: two runs are named {n!r} ({seen[n]} and {r}); give each --run its own "
                                 f"--name")
            raise ValueError(f"--name: the runs {seen[n]} and {r} have the same file name {n!r}; name them with "
                             f"--name (one per --run)")
        seen[n] = r
    return names


def _align_groups(datas) -> Optional[List[str]]:
    """Group ids of several runs read against the same group labels: a run numbers the labels of the documents
    it ranks, so runs ranking other documents can number them differently.  Renumbers every run's ``groups``
    on the union of the labels (numbered as one run alone would be) and returns the group names."""
    import torch

    named = [d.group_names for d in datas if d.group_names is not None]
    if not named:
        return None
    if all(n == named[0] for n in named):
        return list(named[0])
    labels = set().union(*named)
    try:
        ints = [int(x) for x in labels]
        union = [str(g) for g in range(max(ints) + 1)] if min(ints) >= 0 else sorted(labels)
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


def _ideal_from_qrels(args: Namespace, table, data, measures: Sequence[str],
                      options: Dict[str, object]) -> None:
    """``--ideal qrels`` (trec_eval's convention): rescale each list's NDCG columns (in place) so that the ideal
    ranking holds every judged document of the query, also those the run does not rank:
    ``NDCG = DCG(run) / IDCG(all judged) = NDCG(run's documents) * IDCG(run's documents) / IDCG(all judged)``; a
    list whose ranked documents are all non-relevant while the qrels hold relevant ones gets 0 (trec_eval's value)
    instead of undefined.  The aggregates and the bootstrap interval are recomputed (same seed)."""
    import numpy as np
    import torch

    from .evaluation.io import _read_qrels
    from .evaluation.registry import get_measure, parse_request
    from .evaluation.table import bootstrap_interval
    from .metrics import ideal_dcg

    if args.ideal != "qrels" or not args.qrels:
        return
    cols = []
    for mname in measures:
        r = parse_request(mname)
        try:
            spec = get_measure(r.name)
        except ValueError:
            continue
        if spec.name != "ndcg" or r.label not in table.columns:
            continue
        opts = {**spec.options_for({k: v for k, v in options.items() if k not in spec.ignore_global}), **r.options}
        cols.append((table.columns.index(r.label), opts.get("k"), opts.get("gain", "exponential")))
    if not cols:
        return
    rels, _, _ = _read_qrels(args.qrels, args.qrels_groups, args.negative_grades, [])
    by_id = {d["list_id"]: d for d in data.lists}
    changed = False
    for i, lid in enumerate(table.list_ids):
        judged = [g for g in rels.get(lid, {}).values()]
        run_rel = by_id[lid]["relevance"]
        if run_rel is None or not judged:
            continue
        all_rel = torch.tensor(judged, dtype=torch.float64).clamp(min=0).unsqueeze(0)
        for j, k, gain in cols:
            full = float(ideal_dcg(all_rel, k=k, gain=gain)[0])
            own = float(ideal_dcg(run_rel.to(torch.float64).unsqueeze(0), k=k, gain=gain)[0]) \
                if run_rel.numel() else 0.0
            if full <= 0 or abs(own - full) <= 1e-12 * full:
                continue
            v = table.values[i, j]
            table.values[i, j] = 0.0 if own <= 0 or np.isnan(v) else v * own / full
            changed = True
    if not changed:
        return
    valid = ~np.isnan(table.values)
    n_valid = valid.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(n_valid > 0, np.nansum(table.values, 0) / np.maximum(n_valid, 1), np.nan)
    meta = table.meta
    lo, hi = bootstrap_interval(table.values, meta.get("bootstrap", args.bootstrap), meta.get("seed", args.seed),
                                meta.get("confidence", args.confidence))
    for j, c in enumerate(table.columns):
        table.mean[c], table.ci_low[c], table.ci_high[c] = float(means[j]), float(lo[j]), float(hi[j])
        table.n_valid[c] = int(n_valid[j])
    meta["ideal"] = "qrels"


def _run_metrics(args: Namespace) -> int:
    from .evaluation.table import evaluate_lists

    if args.list_measures:
        _print_measures()
        return 0
    runs = args.run or []
    if args.table and (runs or args.qrels or args.groups):
        raise ValueError("give either --table or --run/--qrels/--groups, not both")
    if not args.table and not runs:
        if args.qrels or args.groups:
            raise ValueError("--qrels and --groups need a --run to score")
        raise ValueError("no input: give --run RUN --qrels QRELS [--groups FILE], or --table FILE")
    names = _run_names(args)
    _check_files(args, ("table", "run", "qrels", "groups"))
    if len(runs) > 1:
        return _run_metrics_compare(args, names)
    data = _read_input(args, runs[0] if runs else None)
    _print_input_notes(data)
    measures = split_measures(args.measures)
    if not measures:
        raise ValueError("--measures is empty")
    _check_measures(measures, data)
    table = evaluate_lists(data.lists, measures, bootstrap=args.bootstrap, seed=args.seed, confidence=args.confidence,
                     num_groups=args.num_groups, group_names=data.group_names, **_measure_options(args))
    if not args.table:
        _ideal_from_qrels(args, table, data, measures, _measure_options(args))
    if args.out_json:
        table.to_json(args.out_json)
    if args.out_csv:
        table.to_csv(args.out_csv)
    if not args.quiet:
        if args.format == "markdown":
            _print_groups(data.group_names)
            print(f"lists: {len(table)}")
            print(table.to_markdown())
            if args.per_list:
                print()
                print(table.to_markdown(per_list=True))
        elif args.format == "csv":
            sys.stdout.write(table.to_csv(per_list=args.per_list))
        else:
            print(table.to_json())
    return 0


def _run_metrics_compare(args: Namespace, names: List[str]) -> int:
    """Several ``--run`` files against the same qrels / groups: each evaluated alone with the same options, then
    side by side through the report layer (:func:`torchfair.evaluation.report.compare`): every run after the first
    gets its paired difference from the first, over the queries both rank (paired by query id)."""
    import json

    from .evaluation.report import compare, jsonable, long_csv, markdown_table
    from .evaluation.table import evaluate_lists

    runs = list(args.run)
    if args.per_list and args.format == "csv" and not args.quiet:
        raise ValueError("--per-list with several --run prints no CSV (one table per run): use --format markdown or "
                         "json, or --out-json (each run's per-list values)")
    measures = split_measures(args.measures)
    if not measures:
        raise ValueError("--measures is empty")
    datas = []
    for name, run in zip(names, runs):
        data = _read_input(args, run)
        _print_input_notes(data, prefix=f"{name}: ")
        _check_measures(measures, data)
        datas.append(data)
    group_names = _align_groups(datas)
    num_groups = args.num_groups if args.num_groups is not None else (len(group_names) if group_names else None)
    options = _measure_options(args)
    tables = {name: evaluate_lists(data.lists, measures, bootstrap=args.bootstrap, seed=args.seed,
                             confidence=args.confidence, num_groups=num_groups, group_names=group_names, **options)
              for name, data in zip(names, datas)}
    for name, data in zip(names, datas):
        _ideal_from_qrels(args, tables[name], data, measures, options)
    ref_ids = set(tables[names[0]].list_ids)
    for name, run in zip(names[1:], runs[1:]):
        if not ref_ids & set(tables[name].list_ids):
            raise ValueError(f"--run: {run} ({name}) and {runs[0]} ({names[0]}) have no query in common: the "
                             f"paired difference needs queries that both runs rank")
    report = compare(tables, bootstrap=args.bootstrap, seed=args.seed, confidence=args.confidence, pair_by="id",
                     extra={name: {"file": run} for name, run in zip(names, runs)})
    report.update(measures=measures, options=options, group_names=group_names, num_groups=num_groups)
    full = dict(report, models={
        n: dict(m, columns=list(tables[n].columns),
                lists=[{"list_id": lid, "values": row} for lid, row in zip(tables[n].list_ids, tables[n].values)])
        for n, m in report["models"].items()})
    if args.out_json:
        with open(args.out_json, "w") as f:
            f.write(json.dumps(jsonable(full), indent=2) + "\n")
    if args.out_csv:
        with open(args.out_csv, "w", newline="") as f:
            f.write(long_csv(report))
    if args.quiet:
        return 0
    if args.format == "markdown":
        _print_groups(group_names)
        print("lists: " + ", ".join(f"{n} {len(tables[n])}" for n in names))
        for n in names[1:]:
            k = report["differences"][n]["n_lists"]
            if k != len(tables[n]) or k != len(tables[names[0]]):
                print(f"{n} - {names[0]}: paired over the {k} queries both runs rank")
        print(markdown_table(report))
        level = int(round(args.confidence * 100))
        print(f"cells: mean over the lists where the measure is defined [{level}% bootstrap interval]; "
              f"'X - {names[0]}': mean per-query difference over the queries both rank [paired {level}% interval, "
              f"the same resamples for every measure]")
        if args.per_list:
            for n in names:
                print()
                print(f"per list: {n}")
                print(tables[n].to_markdown(per_list=True))
    elif args.format == "csv":
        sys.stdout.write(long_csv(report))
    else:
        print(json.dumps(jsonable(full if args.per_list else report), indent=2))
    return 0


#: subcommand name -> function adding its parser (``func`` default) to the subparsers
def _add_evaluate(sub) -> None:
    p = sub.add_parser(
        "evaluate", help="exact fairness and utility measures of trained checkpoints on their test lists",
        description="Score the test lists of each checkpoint (the data and group settings come from the "
                    "checkpoint; --config overrides them) and write DIR/report.json, DIR/report.md and "
                    "DIR/exposure_by_position.png: NDCG@10 and every configured fairness measure (mean over users "
                    "with a bootstrap interval), each group's exposure share and MPC for the protected group; "
                    "several checkpoints side by side with paired differences from the first.",
        formatter_class=HelpFormatter)
    p.add_argument("--ckpt", action="append", metavar="PATH",
                   help="a checkpoint written by `torchfair fit` (repeat for several; required)")
    p.add_argument("--out", metavar="DIR", help="directory for the report files (required; checked before any work: "
                                                "not a file, and not a directory already holding a report unless "
                                                "--overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace the report files of an earlier run in --out")
    p.add_argument("--rerank", action="append", default=[], metavar="SPEC",
                   help="a re-ranker applied to every checkpoint's test scores, reported as its own column with the "
                        "paired difference from no re-ranking (repeatable), e.g. 'fair:p=0.3', "
                        "'targeted:measure=dips,keep=10'; see --list-rerankers")
    p.add_argument("--popularity", action="store_true",
                   help="add a 'popularity' run: the first checkpoint's lists ranked by training rating counts")
    p.add_argument("--list-rerankers", action="store_true", help="list the re-rankers and their options, then exit")
    p.add_argument("--name", action="append", metavar="NAME", help="a name per checkpoint (default: file names)")
    p.add_argument("--fit-config", metavar="YAML",
                   help="a `torchfair fit` YAML whose data: / model.measures override the checkpoint's")
    p.add_argument("--split", choices=("test", "val"), default="test", help="which lists to score")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (users resampled)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level")
    p.add_argument("--measures", nargs="+", help="measures to report instead of those the runs were validated with "
                                                 "(names as in `torchfair metrics --measures`)")
    p.add_argument("--mpc-group", type=int, default=1, help="the group whose MPC is reported (id; -1: no MPC)")
    p.add_argument("--device", default="cpu", help="where to score the lists (cpu, cuda, cuda:1...)")
    p.add_argument("--users", type=int, default=None, metavar="N",
                   help="evaluate a seeded sample of N users (default: all); the sample (size, seed, SHA-256 of the "
                        "ids) is recorded in report.json and its ids written to DIR/eval_users.txt")
    p.add_argument("--users-seed", type=int, default=0, metavar="S", help="seed of the --users sample")
    p.add_argument("--stream", choices=("auto", "yes", "no"), default="auto",
                   help="score and measure the lists in chunks, keeping only per-list values (same numbers); auto: "
                        "when the lists hold more than 2**24 entries (e.g. 700 ML-20M users)")
    p.add_argument("--chunk-users", type=int, default=512, metavar="N", help="lists per chunk when streaming")


def _run_evaluate(args) -> int:
    from .training.report import check_out, evaluate_checkpoints, markdown_table

    if args.list_rerankers:
        from .rerank import list_rerankers
        for name, desc, src, opts in list_rerankers():
            print(f"{name:<13} {desc}" + (f" ({src})" if src else ""))
            if opts:
                print(f"{'':<13} options: {', '.join(opts)}")
        return 0
    if not args.ckpt:
        raise ValueError("`--ckpt` is required: a checkpoint written by `torchfair fit` (repeat for several)")
    if not args.out:
        raise ValueError("`--out` is required: the directory for the report files")
    if args.bootstrap < 0:
        raise ValueError(f"`--bootstrap` must be >= 0; got {args.bootstrap}")
    if args.users is not None and args.users < 1:
        raise ValueError(f"`--users` must be >= 1; got {args.users}")
    if args.users_seed < 0:
        raise ValueError(f"`--users-seed` must be >= 0; got {args.users_seed}")
    if args.chunk_users < 1:
        raise ValueError(f"`--chunk-users` must be >= 1; got {args.chunk_users}")
    check_out(args.out, args.overwrite, option="--out", hint="--overwrite")  # before any scoring
    report = evaluate_checkpoints(args.ckpt, args.out, config=args.fit_config, names=args.name, rerank=args.rerank,
                                  bootstrap=args.bootstrap, seed=args.seed, confidence=args.confidence,
                                  device=args.device, mpc_group=None if args.mpc_group < 0 else args.mpc_group,
                                  split=args.split, popularity=args.popularity,
                                  measures=split_measures(args.measures) if args.measures else None,
                                  overwrite=args.overwrite, users=args.users, users_seed=args.users_seed,
                                  stream={"auto": None, "yes": True, "no": False}[args.stream],
                                  chunk_users=args.chunk_users)
    print(markdown_table(report))
    u = report["users"]
    print(f"\n{u['n_lists']} of {u['of']} users" + (f" (sample of {u['sample']}, seed {u['seed']}, ids sha256 "
                                                      f"{u['sha256'][:12]}...)" if u["sample"] is not None else ""))
    print(f"wrote {os.path.join(args.out, 'report.json')}, report.md, exposure_by_position.png"
          + (f", {u['ids_file']}" if u.get("ids_file") else ""))
    return 0


def _add_sweep(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a grid / random search over training configs (resumable) with a trade-off report",
        description="Run the trials of a sweep file (a base `torchfair fit` config and the keys to vary) into DIR, "
                    "--workers at a time; finished trials are kept and skipped when the command is run again. "
                    "Writes DIR/results.csv, DIR/results.parquet (with pyarrow), DIR/pareto_<measure>.png and "
                    "DIR/report.md. See torchfair.sweep for the file format.",
        formatter_class=HelpFormatter)
    p.add_argument("sweep_file", metavar="SWEEP_FILE", nargs="?",
                   help="the sweep file (YAML: base, grid, ...; see torchfair.sweeps); given as --config FILE it is "
                        "recognised by its keys")
    p.add_argument("--out", metavar="DIR", help="output directory (created; resumed if it exists; required)")
    p.add_argument("--workers", type=int, default=None,
                   help="trials at once (default: the number of GPUs, else 1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per trial (default: CPUs / workers)")
    p.add_argument("--search", choices=("grid", "optuna"), default="grid",
                   help="grid: every trial of the file; optuna: Optuna's TPE sampler over the same space "
                        "(`pip install -e \".[optuna]\"` in the clone)")
    p.add_argument("--trials", type=int, default=None, help="number of trials for --search optuna")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local: processes on this machine; ray: Ray Tune on a cluster "
                        "(`pip install -e \".[ray]\"` in the clone)")
    p.add_argument("--address", default=None,
                   help="Ray cluster address for --backend ray (e.g. auto or ray://head:10001; default: local Ray)")
    p.add_argument("--share", action="store_true",
                   help="work on DIR together with other `torchfair sweep --share` processes (each trial run once) "
                        "instead of refusing while another sweep holds it")


def _run_sweep(args) -> int:
    from .sweeps import SweepLockedError, run_sweep

    if not args.sweep_file:
        raise ValueError("the sweep file is required: `torchfair sweep SWEEP_FILE --out DIR`")
    if not args.out:
        raise ValueError("`--out` is required: the sweep's output directory")
    try:
        res = run_sweep(args.sweep_file, args.out, workers=args.workers, threads=args.threads, search=args.search,
                        n_trials=args.trials, backend=args.backend, address=args.address, share=args.share)
    except SweepLockedError as e:
        print(f"torchfair sweep: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("\ntorchfair sweep: interrupted; finished trials are kept (run the same command to resume)",
              file=sys.stderr)
        return 130
    print(f"{res['done']} of {res['total']} trials done ({res['skipped']} from before), {res['failed']} failed; "
          f"report: {os.path.join(args.out, 'report.md')}")
    return 0 if res["failed"] == 0 else 1


def _add_sweep_report(sub) -> None:
    p = sub.add_parser("sweep-report", help="rebuild results.csv / Pareto figures / report.md of a sweep",
                       description="Rebuild DIR/results.csv, DIR/results.parquet, DIR/pareto_<measure>.png and "
                                   "DIR/report.md from the trials a (finished or partial) sweep wrote.",
                       formatter_class=HelpFormatter)
    p.add_argument("out", metavar="DIR", help="the sweep's output directory")
    p.add_argument("--split", choices=("test", "val"), default="test", help="which measures the fronts use")


def _run_sweep_report(args) -> int:
    from .sweeps import write_sweep_report

    print(f"wrote {write_sweep_report(args.out, split=args.split)}")
    return 0


#: ``torchfair fit|validate|test|predict ...`` are LightningCLI's (torchfair.training.cli.FairLightningCLI)
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")

#: subcommand name -> (function adding its options to the parser, function running it on the parsed options)
SUBCOMMANDS: Dict[str, Tuple[Callable, Callable]] = {
    "metrics": (_add_metrics, _run_metrics), "evaluate": (_add_evaluate, _run_evaluate),
    "sweep": (_add_sweep, _run_sweep), "sweep-report": (_add_sweep_report, _run_sweep_report)}


class _Subcommands:
    """``sub.add_parser(name, help=..., description=...)`` as argparse has it, building a jsonargparse parser with
    ``--config`` (and so ``--print_config``) registered as a subcommand."""

    def __init__(self, subcommands):
        self._sub = subcommands

    def add_parser(self, name: str, help: Optional[str] = None, **kwargs) -> ArgumentParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        p = ArgumentParser(prog=f"torchfair {name}", exit_on_error=False, **kwargs)
        p.add_argument("--config", action=ActionConfigFile,
                       help="a YAML file of this command's options (the keys --print_config prints)")
        self._sub.add_subcommand(name, p, help=help)
        return p


def build_parser() -> ArgumentParser:
    """The ``torchfair`` parser (jsonargparse); ``parse_args(argv)`` gives ``args.subcommand`` and
    ``args[subcommand]``, the subcommand's options."""
    from . import __version__
    parser = ArgumentParser(prog="torchfair", description="Fairness measures for rankings.", exit_on_error=False,
                            formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"torchfair {__version__}")
    sub = parser.add_subcommands(required=False)
    subs = _Subcommands(sub)
    for add, _ in SUBCOMMANDS.values():
        add(subs)
    for name in LIGHTNING_SUBCOMMANDS:  # listed in --help; parsed by LightningCLI (see main)
        sub.add_subcommand(name, ArgumentParser(prog=f"torchfair {name}", add_help=False),
                           help=f"LightningCLI {name}: train / check a ranker from a YAML config "
                                f"(`torchfair {name} --help`)")
    return parser


def _config_keys(argv: List[str]) -> Tuple[Optional[int], Optional[set]]:
    """The position of ``--config FILE`` in ``argv`` and the top-level keys of that YAML (None if unreadable)."""
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv) or a.startswith("--config="):
            path = argv[i + 1] if a == "--config" else a.split("=", 1)[1]
            try:
                import yaml
                with open(path) as f:
                    data = yaml.safe_load(f)
            except Exception:
                return i, None
            return i, set(data) if isinstance(data, dict) else None
    return None, None


def _legacy_config(argv: List[str]) -> List[str]:
    """Before every subcommand took jsonargparse's ``--config``, ``torchfair sweep --config SWEEP_FILE`` named the
    sweep file and ``torchfair evaluate --config FIT_YAML`` a fit config: a ``--config`` file with a sweep file's
    keys (``base``/``grid``) or a fit config's (``data``/``model``/``trainer``) is still read that way."""
    if not argv or argv[0] not in ("sweep", "evaluate"):
        return argv
    i, keys = _config_keys(argv)
    if i is None or keys is None:
        return argv
    path = argv[i + 1] if argv[i] == "--config" else argv[i].split("=", 1)[1]
    rest = argv[:i] + argv[i + (2 if argv[i] == "--config" else 1):]
    if argv[0] == "sweep" and keys & {"base", "grid"}:
        return rest[:1] + [path] + rest[1:]
    if argv[0] == "evaluate" and keys & {"data", "model", "trainer"}:
        return rest + ["--fit-config", path]
    return argv


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchfair`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
        from .training.cli import run_lightning
        return run_lightning(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(_legacy_config(argv))
    except SystemExit as e:  # --help, --version, --print_config
        return int(e.code or 0)
    except Exception as e:  # jsonargparse's usage errors (exit_on_error=False)
        command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
        print(f"torchfair{' ' + command if command else ''}: error: {e}", file=sys.stderr)
        print(f"(see `torchfair {command + ' ' if command else ''}--help`)", file=sys.stderr)
        return 2
    command = args.get("subcommand")
    if command not in SUBCOMMANDS:
        parser.print_help()
        return 2
    try:
        return int(SUBCOMMANDS[command][1](args[command]) or 0)
    except (ValueError, ImportError, OSError) as e:
        print(f"torchfair {command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
