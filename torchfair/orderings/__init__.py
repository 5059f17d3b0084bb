"""Orderings: how measures see a ranking (positions, exposure, pair probabilities).

``Hard`` sorts the scores and gives exact evaluators; relaxed orderings give differentiable losses from the same
measure code.  See :mod:`torchfair.orderings.base` for the interface.
"""
from .base import OrderedBatch, Ordering, PairBlock, PAIR_BLOCK_ELEMENTS, row_blocks
from .hard import Hard, HardOrderedBatch, scores_from_ranking

__all__ = ["Ordering", "OrderedBatch", "PairBlock", "PAIR_BLOCK_ELEMENTS", "row_blocks", "Hard",
           "HardOrderedBatch", "scores_from_ranking"]
