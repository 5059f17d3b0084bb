"""The ``torchfair`` command line, generated from the signatures of the functions it runs (jsonargparse).

Each option is a parameter of a library function, with its name, type, range and docstring: ``metrics``
(:func:`torchfair.evaluation.files.evaluate_files`, ``show_files``), ``evaluate`` (``evaluate_checkpoints``),
``sweep`` / ``sweep-report`` (``run_sweep`` / ``write_sweep_report``); ``fit|validate|test|predict`` are LightningCLI's.
Every command takes ``--config FILE`` (a YAML of its options) and ``--print_config``.  A list option takes its
values as argparse would (``--run a.txt --run b.txt``, ``--measures dips ndcg@10``) or as one YAML list; a bool is a
flag (``--trec``) or takes ``true``/``false``.  A bad value is one line on stderr naming the option, before any work.
:func:`main` returns the exit code (0 success, 2 usage or input error, 3 sweep locked, 130 interrupted).
Example: ``torchfair metrics --run run.txt --qrels qrels.txt --measures ndcg ndcg_cut_10 P_5 map --trec``.
"""
from __future__ import annotations

import collections.abc
import importlib
import inspect
import json
import os
import re
import sys
import typing
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ._extras import command_error

__all__ = ["main", "build_parser", "COMMANDS", "LIGHTNING_SUBCOMMANDS"]

#: ``torchfair fit|validate|test|predict ...`` are LightningCLI's (torchfair.training.cli.FairLightningCLI)
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")

#: command -> (its one-line help, the functions whose parameters are its options, parameters left out)
COMMANDS: Dict[str, Tuple[str, Tuple[str, ...], Tuple[str, ...]]] = {
    "metrics": ("fairness / utility measures of rankings in TREC or CSV/Parquet files",
                ("torchfair.evaluation.files:evaluate_files", "torchfair.evaluation.files:show_files"),
                ("res", "stdout")),
    "evaluate": ("exact fairness and utility measures of trained checkpoints on their test lists",
                 ("torchfair.training.evaluate:evaluate_checkpoints",), ()),
    "sweep": ("a grid / random search over training configs (resumable) with a trade-off report",
              ("torchfair.sweeps:run_sweep",), ("config", "stream", "report")),
    "sweep-report": ("rebuild results.csv / Pareto figures / report.md of a sweep",
                     ("torchfair.sweeps:write_sweep_report",), ()),
}
#: flags that print a list and exit (handled before parsing: the command's required options are not needed)
_LISTINGS = {("metrics", "--list_measures"): "torchfair.evaluation.files:print_measures",
             ("evaluate", "--list_rerankers"): "torchfair.cli:_print_rerankers"}
#: output options checked before any work (their folder exists; not a directory / not a file)
_OUTPUT_FILES = ("out_json", "out_csv")


def _norm(tok: str) -> str:
    """``--out-json`` -> ``--out_json``."""
    return "--" + tok[2:].replace("-", "_") if tok.startswith("--") else tok


def _print_rerankers() -> None:
    from .rerank import list_rerankers

    for name, desc, src, opts in list_rerankers():
        print(f"{name:<13} {desc}" + (f" ({src})" if src else "") + (f"\n{'':<13} options: {', '.join(opts)}"
                                                                      if opts else ""))


def _function(path: str) -> Callable:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _is_list(hint) -> bool:
    args = typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)
    return any(typing.get_origin(a) in (list, tuple, collections.abc.Sequence) or a in (list, tuple)
               for a in args)


def build_parser(command: str):
    """The parser of one command: the options of its functions (names, types, ranges and help from their
    signatures and docstrings), ``--config`` and ``--print_config``."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    help_, functions, skip = COMMANDS[command]
    fns = [_function(f) for f in functions]
    doc = inspect.getdoc(fns[0]) or ""
    p = ArgumentParser(prog=f"torchfair {command}", description=doc.split("\n\n")[0], exit_on_error=False)
    p.add_argument("--config", action=ActionConfigFile, help="a YAML file of this command's options")
    if command == "sweep":
        p.add_argument("sweep_file", help="the sweep file (YAML: base, grid...; see torchfair.sweeps)")
    for fn in fns:
        p.add_function_arguments(fn, as_group=False, skip=set(skip), as_positional=command == "sweep-report")
    for (cmd, flag), _ in _LISTINGS.items():
        if cmd == command:
            p.add_argument(flag, action="store_true", help="print the list and exit")
    for action in p._actions:  # a bool parameter is also a bare flag: `--trec` = `--trec true`
        if getattr(action, "_typehint", None) in (bool, Optional[bool]):
            action.nargs, action.const = "?", True
    return p


def _argv(parser, argv: List[str]) -> List[str]:
    """argparse's forms of the list options (``--run a --run b``, ``--measures dips igi``) as one list value each;
    dashed option names (``--out-json``) as the parameter's name."""
    lists = {s for a in parser._actions if _is_list(getattr(a, "_typehint", None)) for s in a.option_strings}
    known = {s for a in parser._actions for s in a.option_strings}
    out: List[str] = []
    gathered: Dict[str, List[str]] = {}
    i = 0
    while i < len(argv):
        tok, value = argv[i], None
        if tok.startswith("--") and "=" in tok:
            tok, value = tok.split("=", 1)
        tok = _norm(tok) if _norm(tok) in known else tok
        if tok in lists:
            vals = [value] if value is not None else []
            i += 1
            while value is None and i < len(argv) and not argv[i].startswith("--"):
                vals.append(argv[i])
                i += 1
            if len(vals) == 1 and vals[0].lstrip().startswith("["):
                out += [tok, vals[0]]
            else:
                if tok not in gathered:
                    gathered[tok] = []
                    out += [tok, None]  # filled below with every value given to the option
                gathered[tok] += vals
            continue
        out += [tok] if value is None else [tok, value]
        i += 1
    return [json.dumps(gathered[out[j - 1]]) if t is None else t for j, t in enumerate(out)]


def _one_line(message: str) -> str:
    """jsonargparse's (multi-line) parse error as one line: the option and the first concrete reason."""
    lines = [ln.strip().lstrip("- ").strip() for ln in str(message).splitlines() if ln.strip()]
    head = lines[0] if lines else str(message)
    if head.startswith('Parser key "'):
        key = head.split('"')[1]
        skip = ("Does not validate", "Subtypes", "Errors", "Given value type", "Expected <class 'NoneType'>",
                "Expected a <class 'NoneType'>")
        why = [ln for ln in lines[1:] if not ln.startswith(skip)]
        return f"--{key}: " + "; ".join(why[:2])
    return head


def _check_outputs(command: str, cfg) -> None:
    from .evaluation.files import check_output_file

    for key in _OUTPUT_FILES:
        check_output_file(cfg.get(key), f"--{key}")
    out = cfg.get("out")
    if command in ("evaluate", "sweep"):
        if not out:
            raise ValueError(f"`--out` is required: the directory for the {command} files")
        if os.path.exists(out) and not os.path.isdir(out):
            raise ValueError(f"--out: {out} is an existing file; give a directory")
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise ValueError(f"--out: the folder {os.path.dirname(out.rstrip(os.sep)) or '.'} does not exist")


def _call(path: str, cfg, **extra):
    names = inspect.signature(fn := _function(path)).parameters  # `config` is --config's (the options file)
    return fn(**{k: v for k, v in cfg.items() if k in names and k not in extra and k != "config"}, **extra)


def _run(command: str, cfg) -> int:
    funcs = COMMANDS[command][1]
    _check_outputs(command, cfg)
    if command == "metrics":
        res = _call(funcs[0], cfg)
        for kind, text in [("note", n) for n in res.notes] + [("warning", w) for w in res.warnings]:
            print(f"torchfair metrics: {kind}: {text}", file=sys.stderr)
        _call(funcs[1], cfg, res=res)
        return 0
    if command == "evaluate":
        from .evaluation.report import markdown_table

        report = _call(funcs[0], cfg)
        print(markdown_table(report))
        u = report["users"]
        print(f"\n{u['n_lists']} of {u['of']} users" + (f" (sample of {u['sample']}, seed {u['seed']})"
                                                          if u["sample"] is not None else ""))
        print(f"wrote {os.path.join(cfg['out'], 'report.json')}, report.md, exposure_by_position.png")
        return 0
    if command == "sweep":
        from .sweeps import SweepLockedError

        try:
            res = _call(funcs[0], cfg, config=cfg["sweep_file"])
        except SweepLockedError as e:
            print(f"torchfair sweep: error: {e}", file=sys.stderr)
            return 3
        except KeyboardInterrupt:
            print("\ntorchfair sweep: interrupted; finished trials are kept (run the same command to resume)",
                  file=sys.stderr)
            return 130
        print(f"{res['done']} of {res['total']} trials done ({res['skipped']} from before), {res['failed']} "
              f"failed; report: {os.path.join(cfg['out'], 'report.md')}")
        return 0 if res["failed"] == 0 else 1
    print(f"wrote {_call(funcs[0], cfg)}")
    return 0


def _usage() -> str:
    from ._version import __version__

    rows = [f"  {n:<13} {h}" for n, (h, _, _) in COMMANDS.items()]
    rows += [f"  {n:<13} LightningCLI {n}: train / check a ranker from a YAML config" for n in LIGHTNING_SUBCOMMANDS]
    return (f"usage: torchfair [--version] COMMAND [options]  (torchfair {__version__})\n\nFairness measures and "
            f"losses for rankings.\n\ncommands:\n" + "\n".join(rows) + "\n\n`torchfair COMMAND --help` lists the "
            f"options of a command.\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchfair`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (missing := command_error(argv[0])):  # the command's extra is not installed: one line, exit 2
        return print(missing, file=sys.stderr) or 2
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
        from .training.cli import run_lightning
        return run_lightning(argv)
    if argv[:1] == ["--version"]:
        return print(_usage().split("(")[1].split(")")[0]) or 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        sys.stdout.write(_usage()) if not argv or argv[0] in ("-h", "--help") else \
            print(f"torchfair: error: unknown command {argv[0]!r} (torchfair --help lists them)", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    command, rest, known = argv[0], argv[1:], {"--spec": "--rerank"}  # a re-ranker's spec is --rerank's value
    try:
        for (cmd, flag), fn in _LISTINGS.items():
            if cmd == command and flag in map(_norm, rest):
                _function(fn)()
                return 0
        parser = build_parser(command)
        known.update({s: s for a in parser._actions for s in a.option_strings})
        try:
            cfg = parser.parse_args(_argv(parser, rest))
        except SystemExit as e:  # --help, --print_config
            return int(e.code or 0)
        except Exception as e:  # jsonargparse's usage errors (exit_on_error=False)
            print(f"torchfair {command}: error: {_one_line(e)} (torchfair {command} --help for the options)",
                  file=sys.stderr)
            return 2
        return _run(command, cfg.clone().as_dict() if hasattr(cfg, "as_dict") else cfg)
    except (ValueError, ImportError, OSError) as e:  # the library names a parameter `x`: the option is --x
        msg = re.sub(r"`(\w+)`|\b(\w+)=True\b", lambda m: known.get(f"--{m.group(1) or m.group(2)}", m.group(0)),
                     (str(e) or type(e).__name__).splitlines()[0])
        print(f"torchfair {command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
