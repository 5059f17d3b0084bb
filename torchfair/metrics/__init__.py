"""Every fairness and utility measure, written once against an ordering.

With the default ``ordering=Hard()`` a measure is the exact evaluator; pass a relaxed ordering to get a
differentiable value.  Families: :mod:`.pairwise` (DIPS, IGI, REE, pairwise accuracy, rank parity, Kendall's tau),
:mod:`.exposure` (misallocation, expected exposure, IAA, AWRF, DP/EUR/RUR, expRR), :mod:`.prefix` (rND, rRD, rKL,
PreF, skew, NDKL, FAIR), :mod:`.calibration` (matched pair calibration), :mod:`.monotonicity` (the monotonicity
test), :mod:`.utility` (NDCG, DCG, precision, recall, MRR, AP, R-precision, RBP, ERR).
"""
from .calibration import MatchedPairs, MPCResult, matched_pair_calibration, matched_pairs, mpc_cluster_variance
from .exposure import (ExpectedExposure, awrf, exposure_share, dp, eur, exp_rr, expected_exposure, exposure_misallocation, iaa,
                       ideal_exposure, individual_misallocation, log_dp, log_eur, log_rur, misallocation_norm, rur)
from .monotonicity import MonotonicityTest, isotonic_regression, monotonicity_test
from .pairwise import (RankParity, accuracy_gaps, dips, discordant_fraction, igi, individual_dissatisfaction,
                       kendall_tau, pairwise_accuracy, pairwise_gap, rank_parity, ree)
from .prefix import (FairTest, fair, fair_adjusted_alpha, fair_mtable, fair_test, ndkl, pref, prefix_mass, rkl, rnd,
                     rrd, skew)
from .utility import average_precision, dcg, err, ideal_dcg, ideal_ranking, mrr, ndcg, precision, r_precision, rbp, recall
from .disparity import disparate_exposure, top1_exposure_gap
from .declarations import MEASURES, Measure, get_declaration

__all__ = [
    # pairwise
    "dips", "individual_dissatisfaction", "igi", "ree", "pairwise_gap", "pairwise_accuracy", "accuracy_gaps",
    "rank_parity", "RankParity", "discordant_fraction", "kendall_tau",
    # exposure
    "exposure_misallocation", "misallocation_norm", "individual_misallocation", "ideal_exposure",
    "expected_exposure", "ExpectedExposure", "iaa", "exposure_share", "awrf", "dp", "eur", "rur", "log_dp", "log_eur", "log_rur",
    "exp_rr",
    # prefix
    "rnd", "rrd", "rkl", "pref", "skew", "ndkl", "fair", "prefix_mass", "fair_test", "fair_mtable",
    "fair_adjusted_alpha", "FairTest",
    # calibration and tests
    "matched_pair_calibration", "matched_pairs", "mpc_cluster_variance", "MPCResult", "MatchedPairs",
    "monotonicity_test", "MonotonicityTest", "isotonic_regression",
    # utility
    "dcg", "ndcg", "precision", "recall", "mrr", "average_precision", "r_precision", "rbp", "err", "ideal_dcg",
    "ideal_ranking",
    # the baselines' disparities
    "top1_exposure_gap", "disparate_exposure",
    # declarations
    "MEASURES", "Measure", "get_declaration",
]
