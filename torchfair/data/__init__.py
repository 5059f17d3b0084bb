"""Data generators: the synthetic two-group data of the DIPS paper (:mod:`torchfair.data.synthetic`)."""
from .synthetic import ideal_ranking, promote, tie_breaking_rankings, two_group_relevance

__all__ = ["two_group_relevance", "ideal_ranking", "promote", "tie_breaking_rankings"]
