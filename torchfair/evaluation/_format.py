"""Formatting shared by the evaluation table and the report layer: numbers for tables, JSON values, markdown rows.

The one markdown-table routine of the package is :func:`markdown_rows`; :class:`~torchfair.evaluation.table.
EvaluationTable`, :func:`torchfair.evaluation.report.markdown_table` and the sweep report render through it.  This
module imports neither :mod:`.table` nor :mod:`.report` (both import it), so there is no import cycle.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Mapping, Optional, Sequence

import numpy as np

__all__ = ["fmt", "jsonable", "markdown_rows"]


def fmt(x: Optional[float], digits: int = 4) -> str:
    """A number for a table: ``n/a`` for None / NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def jsonable(x: Any) -> Any:
    """Mappings, sequences, numpy arrays / scalars and torch tensors -> JSON values (NaN -> None, unknown objects
    -> repr)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    torch = sys.modules.get("torch")  # only loaded modules can have made a tensor
    if torch is not None and isinstance(x, torch.Tensor):
        return jsonable(x.detach().cpu().tolist())
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(float(x)) else float(x)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (str, int)) or x is None:
        return x
    return repr(x)


def markdown_rows(header: Sequence[Any], rows: Sequence[Sequence[Any]], align: Optional[str] = None) -> str:
    """A markdown table: ``header`` cells, then one line per row (cells through ``str``; a ``|`` inside a cell is
    escaped).  ``align``: one letter per column, ``l`` (``---``, the default) or ``r`` (``---:``)."""
    n = len(header)
    align = align if align is not None else "l" * n
    if len(align) != n or set(align) - {"l", "r"}:
        raise ValueError(f"`align` needs one letter 'l' or 'r' per column ({n}); got {align!r}")
    for i, row in enumerate(rows):
        if len(row) != n:
            raise ValueError(f"row {i} has {len(row)} cells for {n} columns")
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    line = lambda cells: "| " + " | ".join(cell(v) for v in cells) + " |"  # noqa: E731
    sep = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return "\n".join([line(header), sep] + [line(r) for r in rows])
