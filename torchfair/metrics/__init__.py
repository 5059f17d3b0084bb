"""Every fairness and utility measure, written once against an ordering.

With the default ``ordering=Hard()`` a measure is the exact evaluator; pass a relaxed ordering to get a
differentiable value.  Families: :mod:`.pairwise` (DIPS, IGI, REE, pairwise accuracy, rank parity, Kendall's tau).
"""
from .prefix import fair, ndkl, pref, prefix_mass, rkl, rnd, rrd, skew
from .pairwise import (RankParity, accuracy_gaps, dips, discordant_fraction, igi, individual_dissatisfaction,
                       kendall_tau, pairwise_accuracy, pairwise_gap, rank_parity, ree)

__all__ = ["dips", "individual_dissatisfaction", "igi", "ree", "pairwise_gap", "pairwise_accuracy",
           "accuracy_gaps", "rank_parity", "RankParity", "discordant_fraction", "kendall_tau",
           "rnd", "rrd", "rkl", "pref", "skew", "ndkl", "fair", "prefix_mass"]
