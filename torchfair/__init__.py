"""torchfair: fairness measures for rankings, exact where you evaluate and differentiable where you train.

Layout: :mod:`torchfair.browsing` (position weights F(k)) -> :mod:`torchfair.orderings` (how a measure sees a
ranking: hard, stochastic, soft, Plackett-Luce) -> :mod:`torchfair.metrics` (every measure, once) ->
:mod:`torchfair.losses` (measures on differentiable orderings, reduced to scalars).
"""
from . import browsing, losses, metrics, orderings

__version__ = "0.1.0"
__all__ = ["browsing", "orderings", "metrics", "losses", "__version__"]
