"""The ``torchfair`` command line.

Subcommands (one ``argparse`` subparser each, registered in :data:`SUBCOMMANDS`; add ``fit``, ``evaluate``,
``sweep``... by writing ``_add_<name>(subparsers)`` that sets ``func``):

* ``torchfair metrics``: fairness and utility measures of rankings read from a TREC run + qrels (+ group file) or a
  CSV/Parquet table; prints the aggregate table (mean over valid lists, bootstrap interval, number of valid lists).

Examples::

    torchfair metrics --run run.txt --qrels qrels.txt --groups groups.txt --measures dips igi ndcg@10 \\
        --browsing rbp:0.9 --bootstrap 1000 --out-json results.json --out-csv results.csv
    torchfair metrics --table items.csv --measures "dips:tie_weight=0,browsing=uniform" kendall_tau
    torchfair metrics --list-measures

:func:`main` returns the exit code: 0 on success, 2 on a usage or input error (message on stderr).
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Callable, Dict, List, Optional, Sequence

__all__ = ["main", "build_parser", "split_measures", "SUBCOMMANDS"]

#: a comma starts a new measure when it is followed by ``name``, ``name@k`` or ``name:...`` (not ``key=value``)
_MEASURE_SPLIT = re.compile(r",(?=\s*[A-Za-z_]\w*(?:@\d+)?\s*(?:[:,]|$))")


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
               "group file 'docid group' or 'qid docid group' (several lines = several groups, split equally); "
               "--qrels-groups iter reads expeval's layout (groups, comma separated, in the 2nd qrels column). "
               "Run items missing from the qrels have relevance 0; documents without a group are unknown (-1). "
               "Table: columns list_id, item_id, score, relevance, group (aliases qid, docid, rel...). "
               "Group ids 0, 1, ... are named A, B, ... in the column names.")
    src = p.add_argument_group("input")
    src.add_argument("--run", help="TREC run file")
    src.add_argument("--qrels", help="TREC qrels file (4 columns, or 5 with the group label last)")
    src.add_argument("--groups", help="group file: 'docid group' or 'qid docid group' per line")
    src.add_argument("--qrels-groups", choices=("auto", "column", "iter", "none"), default="auto",
                     help="where the qrels carry groups: auto (5th column when present), column, iter (expeval: "
                          "2nd column), none")
    src.add_argument("--use-rank", action="store_true", help="rank by the run's rank column instead of its score")
    src.add_argument("--table", help="CSV or Parquet file with list_id, item_id, score, relevance, group")
    m = p.add_argument_group("measures")
    m.add_argument("--measures", nargs="+", default=["dips"],
                   help="measure names, space or comma separated; 'ndcg@10' sets k, 'dips:tie_weight=0,"
                        "browsing=uniform' sets options, 'label=name' renames the columns (default: dips)")
    m.add_argument("--browsing", help="browsing model for the measures that take one: rbp, rbp:0.8, geometric:0.5, "
                                      "logarithmic, reciprocal, uniform, cascade:0.9, topk:10, topk:10:rbp:0.8")
    m.add_argument("--k", type=int, help="cut-off k for the measures that take one")
    m.add_argument("--tie-weight", type=float, help="c_t for the pairwise measures (DIPS, IGI, REE)")
    m.add_argument("--ties", choices=("first", "average"), default=None,
                   help="equal scores: 'first' (file order) or 'average' over their orders")
    m.add_argument("--num-groups", type=int, help="number of groups (default: from the data)")
    m.add_argument("--list-measures", action="store_true", help="print the available measures and exit")
    a = p.add_argument_group("aggregation and output")
    a.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (0: no interval)")
    a.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    a.add_argument("--confidence", type=float, default=0.95, help="interval level")
    a.add_argument("--out-json", help="write the full table (per list + aggregate) as JSON")
    a.add_argument("--out-csv", help="write the full table (per list + aggregate) as CSV")
    a.add_argument("--per-list", action="store_true", help="also print the per-list table")
    a.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown",
                   help="what to print on stdout (default: the markdown aggregate table)")
    a.add_argument("--quiet", action="store_true", help="print nothing on stdout")
    p.set_defaults(func=_run_metrics)


def _run_metrics(args: argparse.Namespace) -> int:
    from .evaluation.io import read_table, read_trec
    from .evaluation.registry import available_measures, get_measure
    from .evaluation.table import evaluate

    if args.list_measures:
        for name in available_measures():
            print(f"{name:24s} {get_measure(name).description}")
        return 0
    if args.table and (args.run or args.qrels or args.groups):
        raise ValueError("give either --table or --run/--qrels/--groups, not both")
    if args.table:
        data = read_table(args.table)
    elif args.run:
        data = read_trec(args.run, args.qrels, args.groups, qrels_groups=args.qrels_groups, use_rank=args.use_rank)
    else:
        raise ValueError("no input: give --run RUN --qrels QRELS [--groups FILE], or --table FILE")
    for note in data.notes:
        print(f"torchfair: note: {note}", file=sys.stderr)
    measures = split_measures(args.measures)
    if not measures:
        raise ValueError("--measures is empty")
    for mname in measures:
        from .evaluation.registry import parse_request
        spec = get_measure(parse_request(mname).name)
        if spec.needs_groups and not data.has_groups:
            raise ValueError(f"measure {spec.name!r} needs group labels: give --groups, a 5-column qrels, "
                             f"--qrels-groups iter, or a 'group' column")
    options = {}
    if args.browsing is not None:
        options["browsing"] = args.browsing
    if args.k is not None:
        options["k"] = args.k
    if args.tie_weight is not None:
        options["tie_weight"] = args.tie_weight
    if args.ties is not None:
        options["ordering"] = args.ties
    table = evaluate(data.lists, measures, bootstrap=args.bootstrap, seed=args.seed, confidence=args.confidence,
                     num_groups=args.num_groups, group_names=data.group_names, **options)
    if args.out_json:
        table.to_json(args.out_json)
    if args.out_csv:
        table.to_csv(args.out_csv)
    if not args.quiet:
        if args.format == "markdown":
            if data.group_names:
                names = ", ".join(f"{chr(65 + i) if len(data.group_names) <= 26 else f'g{i}'}={n}"
                                  for i, n in enumerate(data.group_names))
                print(f"groups: {names}")
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


#: subcommand name -> function adding its parser (``func`` default) to the subparsers
SUBCOMMANDS: Dict[str, Callable] = {"metrics": _add_metrics}


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(prog="torchfair", description="Fairness measures for rankings.")
    parser.add_argument("--version", action="version", version=f"torchfair {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS.values():
        add(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchfair`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return int(e.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, ImportError, OSError) as e:
        print(f"torchfair {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
