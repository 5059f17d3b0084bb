"""Orderings: how measures see a ranking (positions, exposure, pair probabilities).

``Hard`` sorts the scores and gives exact evaluators; ``Sampled`` / ``DoublyStochastic`` describe stochastic
rankings; ``SoftRank``, ``RampRank``, ``NeuralSort``, ``SoftSort``, ``FastSoftRank`` and ``PlackettLuce`` relax the ranking so
that the same measure code gives differentiable losses.  See :mod:`torchfair.orderings.base` for the interface.
"""
from .base import OrderedBatch, Ordering, OrderingLike, PairBlock
from .fast_soft_rank import FastSoftRank, soft_rank
from .hard import Hard, scores_from_ranking
from .plackett_luce import PlackettLuce, all_rankings, log_probability, pair_probability, sample_rankings, top1_probability
from .ramp import RampRank
from .soft import NeuralSort, SoftRank, SoftSort, list_scale
from .stochastic import DoublyStochastic, Sampled

#: the public API; each ordering's ``OrderedBatch`` subclass (``HardOrderedBatch``...), the pair-block budget
#: ``PAIR_BLOCK_ELEMENTS`` and ``row_blocks`` are internals, importable from their modules for extensions
__all__ = ["Ordering", "OrderedBatch", "OrderingLike", "PairBlock", "Hard", "scores_from_ranking", "Sampled",
           "DoublyStochastic", "SoftRank", "NeuralSort", "SoftSort", "PlackettLuce", "sample_rankings", "log_probability",
           "all_rankings", "pair_probability", "top1_probability", "FastSoftRank", "soft_rank", "list_scale", "RampRank"]
