"""Optional dependencies: which extra brings which module, and the one-line error when an extra is missing.

``pip install torchfair`` installs the core (torch, numpy, numba): every measure, ordering, loss, re-ranker,
browsing model and compat layer, and the evaluation engine (:func:`torchfair.evaluation.evaluate_lists`, the file
readers).  The rest is opt-in::

    pip install 'torchfair[cli]'           # the `torchfair metrics` command (jsonargparse)
    pip install 'torchfair[torchmetrics]'  # the torchmetrics Metric classes (torchfair.metrics.DIPS...)
    pip install 'torchfair[train]'         # training, MovieLens, `torchfair fit|evaluate` (Lightning, pandas...)
    pip install 'torchfair[sweep]'         # `torchfair sweep` (train + optuna, filelock)

A module or command whose extra is missing raises (or prints) one line:
``torchfair.training needs the [train] extra: pip install 'torchfair[train]'``.

:func:`error_line` is the one formatter of the line a ``torchfair`` command prints for a bad input (exit code 2).
"""
from __future__ import annotations

import importlib.util
import re
from typing import Dict, Mapping, Optional, Tuple, Union

__all__ = ["EXTRAS", "COMMAND_EXTRAS", "MissingExtraError", "missing_modules", "extra_message", "require",
           "command_error", "error_text", "error_line"]

_CLI = ("jsonargparse", "yaml")
_TRAIN = ("pytorch_lightning", "torchmetrics", "pandas", "matplotlib") + _CLI

#: extra -> the top-level modules torchfair imports from it (mirrors pyproject.toml's optional-dependencies)
EXTRAS: Dict[str, Tuple[str, ...]] = {
    "cli": _CLI,
    "torchmetrics": ("torchmetrics",),
    "train": _TRAIN,
    "sweep": _TRAIN + ("optuna", "filelock"),
    "ray": ("ray",),
    "parquet": ("pandas", "pyarrow"),
}

#: ``torchfair COMMAND`` -> the extra it needs
COMMAND_EXTRAS: Dict[str, str] = {"metrics": "cli", "evaluate": "train", "fit": "train", "validate": "train",
                                  "test": "train", "predict": "train", "sweep": "sweep", "sweep-report": "sweep"}


class MissingExtraError(ImportError):
    """An optional dependency group (a pip extra) is not installed."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        return False


def missing_modules(extra: str) -> Tuple[str, ...]:
    """The modules of ``extra`` (a key of :data:`EXTRAS`) that cannot be imported, without importing any."""
    if extra not in EXTRAS:
        raise ValueError(f"`extra` must be one of {sorted(EXTRAS)}; got {extra!r}")
    return tuple(m for m in EXTRAS[extra] if not _installed(m))


def extra_message(what: str, extra: str, missing: Tuple[str, ...] = ()) -> str:
    """``"<what> needs the [<extra>] extra (<missing> not installed): pip install 'torchfair[<extra>]'"``."""
    if extra not in EXTRAS:
        raise ValueError(f"`extra` must be one of {sorted(EXTRAS)}; got {extra!r}")
    why = f" ({', '.join(missing)} not installed)" if missing else ""
    return f"{what} needs the [{extra}] extra{why}: pip install 'torchfair[{extra}]'"


def require(what: str, extra: str, modules: Optional[Tuple[str, ...]] = None) -> None:
    """Raise :class:`MissingExtraError` (one line naming the extra) when a module of ``extra`` is missing; with
    ``modules``, only those are checked (``pandas`` of ``[train]``).

    >>> require("torchfair.training", "train")  # doctest: +SKIP
    MissingExtraError: torchfair.training needs the [train] extra (pandas not installed): pip install 'torchfair[train]'
    """
    missing = missing_modules(extra) if modules is None else tuple(m for m in modules if not _installed(m))
    if missing:
        raise MissingExtraError(extra_message(what, extra, missing), name=missing[0])


def command_error(command: str) -> Optional[str]:
    """The line ``torchfair COMMAND`` prints (exit 2) when its extra is missing; ``None`` when it can run."""
    extra = COMMAND_EXTRAS.get(command)
    missing = missing_modules(extra) if extra else ()
    return error_line(command, extra_message(f"torchfair {command}", extra, missing)) if missing else None


#: jsonargparse's range types (``jsonargparse.typing``) as the words of an error
_RANGES = {"PositiveInt": "an int > 0", "NonNegativeInt": "an int >= 0", "PositiveFloat": "a number > 0",
           "NonNegativeFloat": "a number >= 0", "OpenUnitInterval": "a number > 0 and < 1",
           "ClosedUnitInterval": "a number >= 0 and <= 1"}


def _parse_error(text: str) -> Optional[str]:
    """jsonargparse's (multi-line) error about one key as one line naming its option, ``None`` for another text:
    ``'Parser key "model.lam":\\n  Not of type NonNegativeFloat: -1 does not conform to restriction v>=0'`` ->
    ``'--model.lam must be a number >= 0 (NonNegativeFloat); got -1'``; a choice, a bool and a union error are
    worded the same way, any other reason keeps jsonargparse's words (jsonargparse raises its errors as text:
    this is the one place that reads them)."""
    m = re.match(r'Parser key "([^"]+)":\s*(.*)', text, re.S)
    if m is None:
        return None
    option, rest = "--" + m.group(1), m.group(2)
    given = re.search(r"Given value: ([^\n]*)", rest)
    got = given.group(1).strip() if given else "?"
    if rest.lstrip().startswith("Does not validate against any of the Union subtypes"):
        errors = [" ".join(e.split()) for e in re.findall(r"^\s*- (.*)$", rest, re.M)]
        errors = [e for e in errors if e and "NoneType" not in e]
        for e in errors:  # Optional[PositiveInt], Optional[Literal[...]]: the words of the one type
            if not (line := _reason(option, e, got)).startswith(f"{option}: "):
                return line
        return f"{option}: got {got}" + "".join(f"; {e[0].lower()}{e[1:]}" for e in errors[:2])
    return _reason(option, " ".join(rest.split()), got)


def _reason(option: str, flat: str, got: str) -> str:
    r = re.match(r"Not of type (\w+): (.*)", flat)
    if r is not None:
        name, why = r.groups()
        c = re.match(r"(?:(.*?) )?does not conform to restrictions? (.*)", why)
        if c is not None:
            words = _RANGES.get(name) or ("an int " if name.endswith("Int") else "a number ") + \
                re.sub(r"\bv\s*(<=|>=|==|!=|<|>)\s*", r"\1 ", c.group(2))
            return f"{option} must be {words} ({name}); got {c.group(1) or got}"
        return f"{option} must be {_RANGES[name]} ({name}): {why}" if name in _RANGES else \
            f"{option} must be of type {name}: {why}"
    c = re.match(r"Expected a typing\.Literal\[(.*)\](?:\. Got value: (.*))?$", flat)
    if c is not None:
        return f"{option} must be one of {c.group(1)}; got {c.group(2) or got}"
    c = re.match(r"Expected a <class '(\w+)'>(?:\. Got value: (.*))?$", flat)
    if c is not None:
        return f"{option} must be of type {c.group(1)}; got {c.group(2) or got}"
    return f"{option}: {flat}"


def error_text(error: Union[BaseException, str], options: Optional[Mapping[str, str]] = None, *,
               where: Optional[str] = None) -> str:
    """The words of :func:`error_line` (without ``torchfair COMMAND: error:``).

    ``error`` is jsonargparse's parse error (its key written as the option, :func:`_parse_error`) or the library's
    (its lines joined by ``"; "``).  The library names a parameter in backticks (`` `names` ``,
    `` `test_fraction + val_fraction` ``): a span naming a key of ``options`` is written with the options instead
    (``{"names": "--names"}``, ``{"lam": "--model.lam"}``), without the backticks (as is a span already naming an
    option, `` `--ckpts` ``); ``where`` (``"--model"``) prefixes a message that names none of them.

    >>> error_text(ValueError("`test_fraction + val_fraction` must be < 1"),
    ...            {"test_fraction": "--data.test_fraction", "val_fraction": "--data.val_fraction"}, where="--data")
    '--data.test_fraction + --data.val_fraction must be < 1'
    """
    text = str(error).strip() or type(error).__name__
    line = _parse_error(text)
    if line is not None:
        return line
    line = "; ".join(" ".join(part.split()) for part in text.splitlines() if part.strip())
    if options:
        name = re.compile(r"(?<![\w.-])([A-Za-z_]\w*)")

        def written(span: re.Match) -> str:
            text = name.sub(lambda w: options.get(w.group(1), w.group(1)), span.group(1))
            return text if text != span.group(1) or text.startswith("--") else span.group(0)

        line = re.sub(r"`([^`]+)`", written, line)
    return f"{where}: {line}" if where and where not in line else line


def error_line(command: str, error: Union[BaseException, str], options: Optional[Mapping[str, str]] = None, *,
               where: Optional[str] = None, hint: bool = False) -> str:
    """The one line ``torchfair COMMAND`` prints for a bad input (exit code 2), for every command:
    ``torchfair COMMAND: error: <what>`` (:func:`error_text`; `` (torchfair COMMAND --help for the options)`` added
    with ``hint``).

    >>> error_line("metrics", ValueError("`names`: 1 name(s) for 2 run file(s)"), {"names": "--names"})
    'torchfair metrics: error: --names: 1 name(s) for 2 run file(s)'
    """
    return f"torchfair {command}: error: {error_text(error, options, where=where)}" + \
        (f" (torchfair {command} --help for the options)" if hint else "")
