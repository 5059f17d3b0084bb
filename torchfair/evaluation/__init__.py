"""Evaluation tooling: a registry of named measures, torchmetrics accumulators, corpus tables and file readers.

* :mod:`.registry`: ``name -> measure`` returning named per-list columns (:func:`get_measure`, :func:`register`);
* :mod:`.metric`: :class:`FairnessMetric` and named subclasses (``DIPS``, ``IGI``, ``NDCG``...), exact corpus means
  synchronised across processes;
* :mod:`.table`: :func:`evaluate_lists` -> :class:`EvaluationTable` (per-list rows, means, bootstrap intervals; JSON, CSV,
  Markdown);
* :mod:`.io`: TREC run / qrels / group files and CSV/Parquet tables;
* :mod:`.accumulators`: :class:`PositionShares`, :class:`PooledMPC`, statistics of whole runs that the engine
  (``evaluate_lists(..., accumulators=[...])``) feeds batch by batch; :mod:`.report`: runs side by side and the
  report files.

trec_eval's numbers from Python (its ranking order, query set, ideal from every judged document, linear gain,
undefined = 0; its measure names)::

    from torchfair.evaluation import TREC_EVAL, TREC_READ, evaluate_lists, read_trec
    data = read_trec("run.txt", "qrels.txt", **TREC_READ)
    table = evaluate_lists(data.lists, ["map", "P_10", "ndcg_cut_10", "recall_100", "Rprec"], **TREC_EVAL)
    print(table.mean["map"])
"""
from .accumulators import PooledMPC, PositionShares
from .io import TREC_READ, RankedLists, read_group_file, read_qrels, read_run, read_table, read_trec
from .metric import (AWRF, ExposureShare, DCG, DIPS, DP, ERR, EUR, FAIR, IAA, IGI, MPC, MRR, NDCG, NDKL, RankBiasedPrecision, REE, RKL, RND, RRD, RUR,
                     AveragePrecision, RPrecision,
                     DiscordantFraction, DisparateExposure, ExpectedExposure, ExposureMisallocation, ExpRR, FairnessMetric, KendallTau,
                     PairwiseAccuracy, Precision, PreF, RankParity, Recall, Skew, Top1ExposureGap, metric_class)
from .registry import (MeasureRequest, MeasureSpec, available_measures, compute_columns, get_measure, parse_browsing,
                       parse_request, register, register_declared, unregister)
from .table import TREC_EVAL, EvaluationTable, bootstrap_interval, evaluate_lists

__all__ = ["register", "register_declared", "unregister", "get_measure", "available_measures", "compute_columns",
           "parse_request", "parse_browsing", "MeasureSpec", "MeasureRequest", "FairnessMetric", "metric_class",
           "evaluate_lists", "EvaluationTable", "bootstrap_interval", "RankedLists", "read_trec", "read_run", "read_qrels",
           "read_group_file", "read_table", "TREC_EVAL", "TREC_READ", "AveragePrecision", "RPrecision",
           "PositionShares", "PooledMPC",
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
