"""The measure registry's earlier address: its public names, re-exported from :mod:`torchfair.metrics.registry`.

The registry (``name -> measure`` returning named per-list columns: :func:`register`, :func:`get_measure`,
:func:`parse_request`, ...) sits in :mod:`torchfair.metrics`, below the evaluation engine that reads it, so that the
Metric classes beside the measures (:mod:`torchfair.metrics.classes`) need nothing from :mod:`torchfair.evaluation`.
``torchfair.evaluation.get_measure`` and ``from torchfair.evaluation.registry import get_measure`` keep working;
the objects are the same (one registry).
"""
from ..metrics.registry import (Columns, MeasureRequest, MeasureSpec, available_measures, compute_columns,
                                default_columns, get_measure, group_label, normalise_options, parse_browsing,
                                parse_request, register, register_declared, unregister)

__all__ = ["MeasureSpec", "MeasureRequest", "normalise_options", "register", "register_declared", "unregister",
           "get_measure", "available_measures", "parse_request", "parse_browsing", "group_label", "compute_columns",
           "Columns", "default_columns"]
