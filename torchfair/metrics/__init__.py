"""Every fairness and utility measure, written once against an ordering.

With the default ``ordering=Hard()`` a measure is the exact evaluator; pass a relaxed ordering to get a
differentiable value.  Families: :mod:`.pairwise` (DIPS, IGI, REE, pairwise accuracy, rank parity, Kendall's tau),
:mod:`.exposure` (misallocation, expected exposure, IAA, AWRF, DP/EUR/RUR, expRR), :mod:`.prefix` (rND, rRD, rKL,
PreF, skew, NDKL, FAIR), :mod:`.calibration` (matched pair calibration), :mod:`.monotonicity` (the monotonicity
test), :mod:`.utility` (NDCG, DCG, precision, recall, MRR, AP, R-precision, RBP, ERR).

The torchmetrics classes live here too, as in torchmetrics: ``dips`` computes a batch, ``DIPS()`` accumulates the
exact corpus mean over ``update`` calls and processes (``pip install 'torchfair[torchmetrics]'``)::

    from torchfair.metrics import DIPS, dips
"""
from .calibration import MatchedPairs, MPCResult, matched_pair_calibration, matched_pairs, mpc_cluster_variance
from .exposure import (ExpectedExposureResult, awrf, exposure_share, dp, eur, exp_rr, expected_exposure, exposure_misallocation, iaa,
                       ideal_exposure, individual_misallocation, log_dp, log_eur, log_rur, misallocation_norm, rur)
from .monotonicity import MonotonicityTest, isotonic_regression, monotonicity_test
from .pairwise import (RankParityResult, accuracy_gaps, dips, discordant_fraction, igi, individual_dissatisfaction,
                       kendall_tau, pairwise_accuracy, pairwise_gap, rank_parity, ree)
from .prefix import (FaIrTest, fa_ir_adjusted_alpha, fa_ir_mtable, fa_ir_test, fair, ndkl, pref, prefix_mass, rkl, rnd,
                     rrd, skew)
from .prefix import fair_adjusted_alpha, fair_mtable, fair_test  # deprecated names of the fa_ir_* (FutureWarning)
from .utility import average_precision, dcg, err, ideal_dcg, ideal_ranking, mrr, ndcg, precision, r_precision, rbp, recall
from .disparity import disparate_exposure, top1_exposure_gap
from .declarations import MEASURES, Measure, get_declaration

#: the torchmetrics ``Metric`` classes, beside the functions they accumulate (``DIPS`` and ``dips``), as torchmetrics
#: keeps a domain's classes in its domain package: exact corpus means over batches and processes, defined in
#: :mod:`torchfair.metrics.classes` over the measure registry (:mod:`torchfair.metrics.registry`) and imported on
#: first access (PEP 562), so that ``import torchfair.metrics`` does not import torchmetrics (the [torchmetrics] extra)
_METRIC_CLASSES = (
    "FairnessMetric", "metric_class", "DIPS", "IGI", "REE", "PairwiseAccuracy", "RankParity", "KendallTau",
    "DiscordantFraction", "NDCG", "DCG", "Precision", "Recall", "MRR", "AveragePrecision", "RPrecision",
    "RankBiasedPrecision", "ERR", "ExposureShare", "AWRF", "IAA", "ExpectedExposure", "ExposureMisallocation", "ExpRR",
    "DP", "EUR", "RUR", "RND", "RRD", "RKL", "Skew", "NDKL", "PreF", "FAIR", "MPC", "Top1ExposureGap",
    "DisparateExposure")

__all__ = [
    # pairwise
    "dips", "individual_dissatisfaction", "igi", "ree", "pairwise_gap", "pairwise_accuracy", "accuracy_gaps",
    "rank_parity", "RankParityResult", "discordant_fraction", "kendall_tau",
    # exposure
    "exposure_misallocation", "misallocation_norm", "individual_misallocation", "ideal_exposure",
    "expected_exposure", "ExpectedExposureResult", "iaa", "exposure_share", "awrf", "dp", "eur", "rur", "log_dp", "log_eur", "log_rur",
    "exp_rr",
    # prefix
    "rnd", "rrd", "rkl", "pref", "skew", "ndkl", "fair", "prefix_mass", "fa_ir_test", "fa_ir_mtable",
    "fa_ir_adjusted_alpha", "FaIrTest",
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
    # the torchmetrics classes (loaded on first access)
    *_METRIC_CLASSES,
]


def __getattr__(name: str):
    if name in _METRIC_CLASSES:
        import importlib

        value = getattr(importlib.import_module("torchfair.metrics.classes"), name)
        globals()[name] = value
        return value
    if name == "FairTest":  # deprecated name of FaIrTest (FutureWarning)
        from . import prefix

        return prefix.FairTest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_METRIC_CLASSES))
