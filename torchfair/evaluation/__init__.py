"""Evaluation tooling: a registry of named measures, corpus tables, accumulators and file readers.

* the measure registry, ``name -> measure`` returning named per-list columns (:func:`get_measure`, :func:`register`,
  :func:`parse_request`), defined in :mod:`torchfair.metrics.registry` below this package and exported here
  (:mod:`.registry` re-exports it at its earlier address);
* the torchmetrics classes ``FairnessMetric``, ``DIPS``, ``NDCG``..., exact corpus means synchronised across
  processes, are :mod:`torchfair.metrics` names (``torchfair.metrics.DIPS`` beside ``dips``), defined in
  :mod:`torchfair.metrics.classes` (:mod:`.metric` re-exports them);
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
import importlib
import sys
from typing import Any, List

from .io import TREC_READ, RankedLists, read_group_file, read_qrels, read_run, read_table, read_trec
from ..metrics.registry import (MeasureRequest, MeasureSpec, available_measures, compute_columns, get_measure,
                                parse_request, register, unregister)
from .table import TREC_EVAL, EvaluationTable, bootstrap_interval, evaluate_lists
from ._format import terminal_width

#: the accumulators, imported on first access (PEP 562); the torchmetrics classes built on the registry
#: (:mod:`torchfair.metrics.classes`) are public as ``torchfair.metrics.DIPS`` etc., beside the functions
_LAZY = {name: "accumulators" for name in ("PooledMPC", "PositionShares")}

__all__ = ["register", "unregister", "get_measure", "available_measures", "compute_columns", "parse_request",
           "MeasureSpec", "MeasureRequest", "evaluate_lists", "EvaluationTable",
           "bootstrap_interval", "RankedLists", "read_trec", "read_run", "read_qrels", "read_group_file", "read_table",
           "TREC_EVAL", "TREC_READ", "PositionShares", "PooledMPC", "terminal_width"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(vars(sys.modules[__name__])) | set(_LAZY))
