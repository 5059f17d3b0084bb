"""torchfair: fairness measures for rankings, exact where you evaluate and differentiable where you train.

Layout: :mod:`torchfair.browsing` (position weights F(k)) -> :mod:`torchfair.orderings` (how a measure sees a
ranking) -> :mod:`torchfair.metrics` (every measure, once).
"""
from . import browsing, metrics, orderings

__version__ = "0.1.0"
__all__ = ["browsing", "orderings", "metrics", "__version__"]
