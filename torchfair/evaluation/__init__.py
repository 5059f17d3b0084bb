"""Evaluation tooling: a registry of named measures, torchmetrics accumulators, corpus tables and file readers.

* :mod:`.registry`: ``name -> measure`` returning named per-list columns (:func:`get_measure`, :func:`register`);
* :mod:`.metric`: :class:`FairnessMetric` and named subclasses (``DIPS``, ``IGI``, ``NDCG``...), exact corpus means
  synchronised across processes;
* :mod:`.table`: :func:`evaluate_lists` -> :class:`EvaluationTable` (per-list rows, means, bootstrap intervals; JSON, CSV,
  Markdown);
* :mod:`.io`: TREC run / qrels / group files and CSV/Parquet tables.
"""
from .io import RankedLists, read_group_file, read_qrels, read_run, read_table, read_trec
from .metric import (AWRF, ExposureShare, DCG, DIPS, DP, ERR, EUR, FAIR, IAA, IGI, MPC, MRR, NDCG, NDKL, RankBiasedPrecision, REE, RKL, RND, RRD, RUR,
                     DiscordantFraction, DisparateExposure, ExpectedExposure, ExposureMisallocation, ExpRR, FairnessMetric, KendallTau,
                     PairwiseAccuracy, Precision, PreF, RankParity, Recall, Skew, Top1ExposureGap, metric_class)
from .registry import (MeasureRequest, MeasureSpec, available_measures, compute_columns, get_measure, parse_browsing,
                       parse_request, register, register_declared, unregister)
from .table import EvaluationTable, bootstrap_interval, evaluate_lists

__all__ = ["register", "register_declared", "unregister", "get_measure", "available_measures", "compute_columns",
           "parse_request", "parse_browsing", "MeasureSpec", "MeasureRequest", "FairnessMetric", "metric_class",
           "evaluate_lists", "EvaluationTable", "bootstrap_interval", "RankedLists", "read_trec", "read_run", "read_qrels",
           "read_group_file", "read_table",
           "DIPS", "IGI", "REE", "PairwiseAccuracy", "RankParity", "KendallTau", "NDCG", "DCG", "Precision",
           "Recall", "MRR", "RankBiasedPrecision", "ERR", "ExposureShare", "AWRF", "IAA", "ExpectedExposure", "ExposureMisallocation", "ExpRR", "DP",
           "EUR", "RUR", "RND", "RRD", "RKL", "Skew", "NDKL", "PreF", "FAIR", "MPC", "Top1ExposureGap",
           "DisparateExposure", "DiscordantFraction"]

#: earlier names, kept working with a DeprecationWarning: ``evaluate`` (one of three things called "evaluate", with
#: ``torchfair evaluate`` and ``torchfair.training.evaluate_checkpoints``) and ``RBP`` (also the browsing model
#: :class:`torchfair.browsing.RBP`)
_RENAMED = {"evaluate": evaluate_lists, "RBP": RankBiasedPrecision}


def __getattr__(name):
    if name in _RENAMED:
        import warnings
        new = _RENAMED[name].__name__
        warnings.warn(f"torchfair.evaluation.{name} is now torchfair.evaluation.{new}", DeprecationWarning,
                      stacklevel=2)
        return _RENAMED[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
