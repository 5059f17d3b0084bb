"""Evaluation tooling: a registry of named measures, torchmetrics accumulators, corpus tables and file readers.

* :mod:`.registry`: ``name -> measure`` returning named per-list columns (:func:`get_measure`, :func:`register`);
* :mod:`.metric`: :class:`FairnessMetric` and named subclasses (``DIPS``, ``IGI``, ``NDCG``...), exact corpus means
  synchronised across processes;
* :mod:`.table`: :func:`evaluate` -> :class:`EvaluationTable` (per-list rows, means, bootstrap intervals; JSON, CSV,
  Markdown);
* :mod:`.io`: TREC run / qrels / group files and CSV/Parquet tables.
"""
from . import metric as _metric
from .io import RankedLists, read_group_file, read_qrels, read_run, read_table, read_trec
from .metric import FairnessMetric, metric_class
from .registry import (MeasureRequest, MeasureSpec, available_measures, compute_columns, get_measure, parse_browsing,
                       parse_request, register, unregister)
from .table import EvaluationTable, bootstrap_interval, evaluate

_METRIC_CLASSES = [n for n in _metric.__all__ if n not in ("FairnessMetric", "metric_class")]
globals().update({n: getattr(_metric, n) for n in _METRIC_CLASSES})

__all__ = ["register", "unregister", "get_measure", "available_measures", "compute_columns", "parse_request",
           "parse_browsing", "MeasureSpec", "MeasureRequest", "FairnessMetric", "metric_class", "evaluate",
           "EvaluationTable", "bootstrap_interval", "RankedLists", "read_trec", "read_run", "read_qrels",
           "read_group_file", "read_table"] + _METRIC_CLASSES
