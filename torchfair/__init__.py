"""torchfair: fairness measures for rankings, exact where you evaluate and differentiable where you train.

Layout: :mod:`torchfair.browsing` (position weights F(k)) -> :mod:`torchfair.orderings` (how a measure sees a
ranking: hard, stochastic, soft, Plackett-Luce) -> :mod:`torchfair.metrics` (every measure, once) ->
:mod:`torchfair.losses` (measures on differentiable orderings, reduced to scalars).

:mod:`torchfair.evaluation` (registry, torchmetrics accumulators, tables, file readers) and
:mod:`torchfair.compat` are imported on first use (``torchfair.evaluation`` or ``from torchfair import
evaluation``), so that ``import torchfair`` does not load torchmetrics, pytorch-lightning or scipy.
"""
from __future__ import annotations

import importlib
from typing import Any, List

from . import browsing, data, losses, metrics, orderings

__version__ = "0.1.0"
__all__ = ["browsing", "orderings", "metrics", "losses", "evaluation", "compat", "data", "__version__"]

#: subpackages imported on first attribute access (PEP 562)
_LAZY_SUBMODULES = ("evaluation", "compat")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        # importing sets the attribute on the package, so this runs once per submodule
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
