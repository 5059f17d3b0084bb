"""torchfair: fairness measures for rankings, exact where you evaluate and differentiable where you train.

Layout: :mod:`torchfair.browsing` (position weights F(k)) -> :mod:`torchfair.orderings` (how a measure sees a
ranking: hard, stochastic, soft, Plackett-Luce) -> :mod:`torchfair.metrics` (every measure, once) ->
:mod:`torchfair.losses` (measures on differentiable orderings, reduced to scalars).
"""
from . import browsing, data, losses, metrics, orderings
from . import evaluation  # after metrics: its registry loads torchfair.metrics.*

__version__ = "0.1.0"
__all__ = ["browsing", "orderings", "metrics", "losses", "evaluation", "data", "__version__"]
