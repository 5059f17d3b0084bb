"""The ``torchfair`` command line, generated from the signatures of the functions it runs (jsonargparse).

Each option is a parameter of a library function (name, type, range, docstring): ``metrics`` (``evaluate_files``,
``show_files``), ``evaluate`` (``evaluate_checkpoints``), ``sweep`` / ``sweep-report`` (``run_sweep`` /
``write_sweep_report``); ``fit|validate|test|predict`` are LightningCLI's; ``warmup`` is :func:`torchfair.warmup`.
Every generated command takes ``--config FILE`` (a YAML of its options) and ``--print_config``; a list option takes
``--run a --run b``, ``--measures dips ndcg@10`` or one YAML list; a bool is a flag (``--trec``) or takes
``true``/``false``.  A bad value is one line naming the option (:func:`torchfair._extras.error_line`), before any
work.  :func:`main` returns the exit code (0 success, 2 usage or input error, 3 sweep locked, 130 interrupted).
"""
from __future__ import annotations

import collections.abc
import importlib
import inspect
import json
import os
import sys
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._extras import command_error, error_line

__all__ = ["main", "build_parser", "COMMANDS", "LIGHTNING_SUBCOMMANDS"]

#: ``torchfair fit|validate|test|predict ...`` are LightningCLI's (torchfair.training.cli.FairLightningCLI)
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")

#: command -> (its one-line help, the functions whose parameters are its options, parameters left out)
COMMANDS: Dict[str, Tuple[str, Tuple[str, ...], Tuple[str, ...]]] = {
    "metrics": ("fairness / utility measures of rankings in TREC or CSV/Parquet files",
                ("torchfair.evaluation.files:evaluate_files", "torchfair.evaluation.files:show_files"),
                ("res", "stdout")),
    "evaluate": ("exact fairness and utility measures of trained checkpoints on their test lists",
                 ("torchfair.training.evaluate:evaluate_checkpoints", "torchfair.training.evaluate:report_table"),
                 ("report",)),
    "sweep": ("a grid / random search over training configs (resumable) with a trade-off report",
              ("torchfair.sweeps:run_sweep",), ("config", "stream", "report")),
    "sweep-report": ("rebuild results.csv / Pareto figures / report.md of a sweep",
                     ("torchfair.sweeps:write_sweep_report",), ()),
}
_WARMUP = "compile the CPU kernels now (for images and CI) and print the seconds it took"
#: flags that print a list and exit (handled before parsing: the command's required options are not needed)
_LISTINGS = {("metrics", "--list_measures"): "torchfair.evaluation.files:print_measures",
             ("evaluate", "--list_rerankers"): "torchfair.cli:_print_rerankers"}


def _print_rerankers() -> None:
    from .rerank import list_rerankers
    print("\n".join(f"{n:<13} {d}" + (f" ({s})" if s else "") + (f"\n{'':<13} options: {', '.join(o)}" if o else "")
                    for n, d, s, o in list_rerankers()))


def _function(path: str) -> Callable:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _is_list(hint) -> bool:
    return any(typing.get_origin(a) in (list, tuple, collections.abc.Sequence) or a in (list, tuple)
               for a in (typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)))


def _options(command: str) -> Dict[str, Tuple[Any, Any]]:
    """Every option of ``command`` (``--name``): its type hint and, for a function parameter, its default."""
    _, functions, skip = COMMANDS[command]
    out: Dict[str, Tuple[Any, Any]] = {"--config": (str, None), "--print_config": (None, None)}
    for fn in map(_function, functions):
        hints = typing.get_type_hints(fn)
        out.update({f"--{n}": (hints.get(n), p.default) for n, p in inspect.signature(fn).parameters.items()
                    if n not in skip and f"--{n}" not in out})
    return {**out, **{flag: (bool, False) for cmd, flag in _LISTINGS if cmd == command}}


def build_parser(command: str):
    """The parser of one command: the options of its functions (names, types, ranges and help from their
    signatures and docstrings), ``--config`` and ``--print_config``.  A ``bool`` parameter is an option that also
    is a bare flag (``nargs="?"``, ``const=True``: ``--trec`` = ``--trec true``; jsonargparse parses a value)."""
    import docstring_parser
    from jsonargparse import ActionConfigFile, ArgumentParser

    _, functions, skip = COMMANDS[command]
    fns = [_function(f) for f in functions]
    p = ArgumentParser(prog=f"torchfair {command}", description=(inspect.getdoc(fns[0]) or "").split("\n\n")[0],
                       exit_on_error=False)
    p.add_argument("--config", action=ActionConfigFile, help="a YAML file of this command's options")
    if command == "sweep":
        p.add_argument("sweep_file", help="the sweep file (YAML: base, grid...; see torchfair.sweeps)")
    options = _options(command)
    flags = {o[2:] for o, (hint, _) in options.items() if hint in (bool, Optional[bool]) and (command, o) not in
             _LISTINGS}
    for fn in fns:
        docs = {d.arg_name: d.description for d in docstring_parser.parse(inspect.getdoc(fn) or "").params}
        for name in [n for n in inspect.signature(fn).parameters if n in flags]:
            p.add_argument(f"--{name}", type=options[f"--{name}"][0], nargs="?", const=True,
                           default=options[f"--{name}"][1], help=docs.get(name))
        p.add_function_arguments(fn, as_group=False, skip=set(skip) | flags, as_positional=command == "sweep-report")
    for flag in [flag for cmd, flag in _LISTINGS if cmd == command]:
        p.add_argument(flag, action="store_true", help="print the list and exit")
    return p


def _argv(options: Dict[str, Any], argv: List[str]) -> List[str]:
    """argparse's forms of the list options (``--run a --run b``, ``--measures dips igi``) as one list value each;
    dashed option names (``--out-json``) as the parameter's name."""
    out: List[Optional[str]] = []
    gathered: Dict[str, List[str]] = {}
    i = 0
    while i < len(argv):
        tok, value = argv[i].split("=", 1) if argv[i].startswith("--") and "=" in argv[i] else (argv[i], None)
        tok = "--" + tok[2:].replace("-", "_") if "--" + tok[2:].replace("-", "_") in options else tok
        i += 1
        if not _is_list(options.get(tok, (None,))[0]):
            out += [tok] if value is None else [tok, value]
            continue
        vals = [value] if value is not None else []
        while value is None and i < len(argv) and not argv[i].startswith("--"):
            vals, i = vals + [argv[i]], i + 1
        if len(vals) == 1 and vals[0].lstrip().startswith("["):
            out += [tok, vals[0]]
        else:
            out += [] if tok in gathered else [tok, None]  # None: filled below with every value of the option
            gathered[tok] = gathered.get(tok, []) + vals
    return [json.dumps(gathered[out[j - 1]]) if t is None else t for j, t in enumerate(out)]


def _check_before_work(command: str, cfg) -> None:
    from .evaluation.checks import check_measures, check_rerank
    from .evaluation.files import check_output_file

    check_measures(cfg.get("measures"), "--measures", cfg.get("num_groups"))  # in full: a dry run on tiny lists
    check_rerank(cfg.get("rerank"), "--rerank")
    for key in ("out_json", "out_csv"):  # their folder exists, not a directory
        check_output_file(cfg.get(key), f"--{key}")
    if command in ("evaluate", "sweep"):
        if not (out := cfg.get("out")):
            raise ValueError(f"`--out` is required: the directory for the {command} files")
        if command == "evaluate":  # the library's own check, worded with the options
            from .training.evaluate import check_out
            check_out(out, bool(cfg.get("overwrite")), option="--out", hint="--overwrite")
        if os.path.exists(out) and not os.path.isdir(out):
            raise ValueError(f"--out: {out} is an existing file; give a directory")
        if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise ValueError(f"--out: the folder {os.path.dirname(out.rstrip(os.sep)) or '.'} does not exist")


def _call(path: str, cfg, **extra):
    names = inspect.signature(fn := _function(path)).parameters  # `config` is --config's (the options file)
    return fn(**{k: v for k, v in cfg.items() if k in names and k not in extra and k != "config"}, **extra)


def _run(command: str, cfg) -> int:
    funcs = COMMANDS[command][1]
    _check_before_work(command, cfg)
    if command == "metrics":
        res = _call(funcs[0], cfg)
        for kind, text in [("note", n) for n in res.notes] + [("warning", w) for w in res.warnings]:
            print(f"torchfair metrics: {kind}: {text}", file=sys.stderr)
        _call(funcs[1], cfg, res=res)
        return 0
    if command == "evaluate":
        report = _call(funcs[0], cfg)
        print(f"{_call(funcs[1], cfg, report=report)}\nwrote {os.path.join(cfg['out'], 'report.json')}, report.md, "
              f"exposure_by_position.png")
        return 0
    if command == "sweep":
        from .sweeps import SweepLockedError

        try:
            res = _call(funcs[0], cfg, config=cfg["sweep_file"])
        except SweepLockedError as e:
            return print(error_line("sweep", e), file=sys.stderr) or 3
        except KeyboardInterrupt:
            return print("\ntorchfair sweep: interrupted; finished trials are kept (run the same command to resume)",
                         file=sys.stderr) or 130
        print(f"{res['done']} of {res['total']} trials done ({res['skipped']} from before), {res['failed']} "
              f"failed; report: {os.path.join(cfg['out'], 'report.md')}")
        return 0 if res["failed"] == 0 else 1
    print(f"wrote {_call(funcs[0], cfg)}")
    return 0


def _warmup(rest: List[str]) -> int:  # no options, no extra needed
    if rest[:1] in (["-h"], ["--help"]):
        return print(f"usage: torchfair warmup\n\n{_WARMUP}.") or 0
    if rest:
        return print(error_line("warmup", f"takes no options; got {' '.join(rest)}"), file=sys.stderr) or 2
    try:  # torchfair.warmup, read from the package this module is part of (it is loaded: no import, no edge)
        seconds = sys.modules[__package__].warmup()
    except ValueError as e:  # TORCHFAIR_KERNELS asks for numba and numba cannot be loaded
        return print(error_line("warmup", e), file=sys.stderr) or 2
    return print(f"torchfair warmup: kernels ready in {seconds:.1f} s") or 0


def _usage() -> str:
    from ._version import __version__

    rows = [f"  {n:<13} {h}" for n, (h, _, _) in COMMANDS.items()] + [f"  {'warmup':<13} {_WARMUP}"]
    rows += [f"  {n:<13} LightningCLI {n}: train / check a ranker from a YAML config" for n in LIGHTNING_SUBCOMMANDS]
    return (f"usage: torchfair [--version] COMMAND [options]  (torchfair {__version__})\n\nFairness measures and "
            f"losses for rankings.\n\ncommands:\n" + "\n".join(rows) + "\n\n`torchfair COMMAND --help` lists the "
            f"options of a command.\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchfair`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (missing := command_error(argv[0])):  # the command's extra is not installed: one line, exit 2
        return print(missing, file=sys.stderr) or 2
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS + ("sweep",):  # config files, specs: checked before Lightning loads
        from .training.cli_checks import check_argv
        try:
            check_argv(argv)
        except ValueError as e:
            return print(error_line(argv[0], e), file=sys.stderr) or 2
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
        from .training.cli import run_lightning
        return run_lightning(argv)
    if argv[:1] == ["warmup"]:
        return _warmup(argv[1:])
    if argv[:1] == ["--version"]:
        return print(_usage().split("(")[1].split(")")[0]) or 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        sys.stdout.write(_usage()) if not argv or argv[0] in ("-h", "--help") else \
            print(f"torchfair: error: unknown command {argv[0]!r} (torchfair --help lists them)", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    command, rest = argv[0], argv[1:]
    names = {"spec": "--rerank"}  # the library's parameter names -> the options (a re-ranker's spec is --rerank's)
    try:
        options = _options(command)
        names = {**{o[2:]: o for o in options}, **names, **({"config": "SWEEP_FILE"} if command == "sweep" else {})}
        for fn in [fn for (cmd, flag), fn in _LISTINGS.items() if cmd == command and flag in _argv(options, rest)]:
            return _function(fn)() or 0
        try:
            cfg = build_parser(command).parse_args(_argv(options, rest))
        except SystemExit as e:  # --help, --print_config
            return int(e.code or 0)
        except Exception as e:  # jsonargparse's usage errors (exit_on_error=False)
            return print(error_line(command, e, hint=True), file=sys.stderr) or 2
        return _run(command, cfg.clone().as_dict() if hasattr(cfg, "as_dict") else cfg)
    except (ValueError, ImportError, OSError) as e:  # the library names a parameter `x`: the option is --x
        return print(error_line(command, e, names), file=sys.stderr) or 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
