"""Orderings: how measures see a ranking (positions, exposure, pair probabilities).

``Hard`` sorts the scores and gives exact evaluators; ``Sampled`` / ``DoublyStochastic`` describe stochastic
rankings; ``SoftRank``, ``RampRank``, ``NeuralSort``, ``SoftSort``, ``FastSoftRank`` and ``PlackettLuce`` relax the ranking so
that the same measure code gives differentiable losses.  See :mod:`torchfair.orderings.base` for the interface.
"""
from .base import OrderedBatch, Ordering, OrderingLike, PairBlock, PAIR_BLOCK_ELEMENTS, row_blocks
from .fast_soft_rank import FastSoftRank, FastSoftRankOrderedBatch, soft_rank
from .hard import Hard, HardOrderedBatch, scores_from_ranking
from .mixture import MixtureOrderedBatch
from .plackett_luce import PlackettLuce, all_rankings, log_probability, pair_probability, sample_rankings, top1_probability
from .ramp import RampRank, RampRankOrderedBatch
from .soft import NeuralSort, PermutationOrderedBatch, SoftRank, SoftRankOrderedBatch, SoftSort, list_scale
from .stochastic import DoublyStochastic, DoublyStochasticOrderedBatch, Sampled, SampledOrderedBatch

__all__ = ["Ordering", "OrderedBatch", "OrderingLike", "PairBlock", "PAIR_BLOCK_ELEMENTS", "row_blocks", "Hard",
           "HardOrderedBatch", "scores_from_ranking", "MixtureOrderedBatch", "Sampled", "SampledOrderedBatch",
           "DoublyStochastic", "DoublyStochasticOrderedBatch", "SoftRank", "SoftRankOrderedBatch", "NeuralSort",
           "SoftSort", "PermutationOrderedBatch", "PlackettLuce", "sample_rankings", "log_probability",
           "all_rankings", "pair_probability", "top1_probability", "FastSoftRank", "FastSoftRankOrderedBatch",
           "soft_rank", "list_scale", "RampRank", "RampRankOrderedBatch"]
