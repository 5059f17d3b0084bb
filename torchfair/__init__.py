"""torchfair: fairness measures for rankings, exact where you evaluate and differentiable where you train.

Layout: :mod:`torchfair.browsing` (position weights F(k)) -> :mod:`torchfair.orderings` (how a measure sees a
ranking: hard, stochastic, soft, Plackett-Luce) -> :mod:`torchfair.metrics` (every measure, once) ->
:mod:`torchfair.losses` (measures on differentiable orderings, reduced to scalars).

:mod:`torchfair.evaluation` (registry, tables, file readers) and :mod:`torchfair.compat` are imported on first use
(``torchfair.evaluation`` or ``from torchfair import evaluation``), so that ``import torchfair`` stays light.

``pip install torchfair`` is the core (torch, numpy, numba): everything above, the re-rankers and the compat
layers.  Extras: ``[cli]`` (``torchfair metrics``), ``[torchmetrics]`` (the Metric classes, ``torchfair.metrics.DIPS``),
``[train]`` (:mod:`torchfair.training`, MovieLens, ``torchfair fit|evaluate``), ``[sweep]``, ``[ray]``, ``[parquet]``,
``[docs]``, ``[dev]``; a module whose extra is missing raises one line naming it (``pip install 'torchfair[train]'``).
"""
from __future__ import annotations

import importlib
from typing import Any, List

from . import browsing, data, losses, metrics, orderings
from ._warmup import warmup  # compile every CPU kernel up front (torchfair.kernels; `torchfair warmup`)

from ._version import __version__
__all__ = ["browsing", "orderings", "metrics", "losses", "evaluation", "compat", "data", "warmup", "__version__"]

#: subpackages imported on first attribute access (PEP 562)
_LAZY_SUBMODULES = ("evaluation", "compat")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        # importing sets the attribute on the package, so this runs once per submodule
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
