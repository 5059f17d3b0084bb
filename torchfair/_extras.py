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
"""
from __future__ import annotations

import importlib.util
from typing import Dict, Optional, Tuple

__all__ = ["EXTRAS", "COMMAND_EXTRAS", "MissingExtraError", "missing_modules", "extra_message", "require",
           "command_error"]

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
    return f"torchfair {command}: error: " + extra_message(f"torchfair {command}", extra, missing) if missing else None
