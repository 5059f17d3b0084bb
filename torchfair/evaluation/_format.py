"""Formatting shared by the evaluation table and the report layer: numbers for tables, JSON values, markdown rows.

The one markdown-table routine of the package is :func:`markdown_rows`; :class:`~torchfair.evaluation.table.
EvaluationTable`, :func:`torchfair.evaluation.report.markdown_table` and the sweep report render through it.  This
module imports neither :mod:`.table` nor :mod:`.report` (both import it), so there is no import cycle.
"""
from __future__ import annotations

import math
import shutil
import sys
from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

__all__ = ["fmt", "jsonable", "markdown_rows", "terminal_width"]


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


def terminal_width(width: Optional[int] = None) -> Optional[int]:
    """The widest line of a table printed on a terminal: ``width`` when given, ``None`` (no limit) for ``0``, else
    the terminal's columns (``shutil.get_terminal_size``: ``$COLUMNS``, else the terminal of stdout, else 120)."""
    if width is not None:
        if width < 0:
            raise ValueError(f"`width` must be >= 0 (0: no limit); got {width}")
        return width or None
    return shutil.get_terminal_size((120, 24)).columns


def markdown_rows(header: Sequence[Any], rows: Sequence[Sequence[Any]], align: Optional[str] = None,
                  width: Optional[int] = None, keep: int = 1) -> str:
    """A markdown table: ``header`` cells, then one line per row (cells through ``str``; a ``|`` inside a cell is
    escaped).  ``align``: one letter per column, ``l`` (``---``, the default) or ``r`` (``---:``).

    ``width``: the widest line allowed (``None``: no limit).  A table wider than that is printed as several tables
    (blocks) one after another, separated by an empty line: each holds the first ``keep`` columns (the row labels)
    and as many of the next columns as fit, in order, so that every column is in one block with its values
    unchanged; a block holds at least one column beyond the labels, even when that alone is wider.  A table that
    fits is the one table it is without ``width``."""
    n = len(header)
    align = align if align is not None else "l" * n
    if len(align) != n or set(align) - {"l", "r"}:
        raise ValueError(f"`align` needs one letter 'l' or 'r' per column ({n}); got {align!r}")
    for i, row in enumerate(rows):
        if len(row) != n:
            raise ValueError(f"row {i} has {len(row)} cells for {n} columns")
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    table = [[cell(v) for v in header]] + [[cell(v) for v in r] for r in rows]

    def render(cols: Sequence[int]) -> str:
        line = lambda cells: "| " + " | ".join(cells[j] for j in cols) + " |"  # noqa: E731
        sep = "|" + "".join("---:|" if align[j] == "r" else "---|" for j in cols)
        return "\n".join([line(table[0]), sep] + [line(r) for r in table[1:]])

    keep = max(0, min(keep, n))
    if width is None or n <= keep:
        return render(range(n))
    lens = [[len(c) for c in r] for r in table]

    def fits(cols: List[int]) -> bool:  # the widest line of the block: its longest row, or the separator
        sep = 1 + sum(5 if align[j] == "r" else 4 for j in cols)
        return max(max(sum(r[j] for j in cols) for r in lens) + 3 * len(cols) + 1, sep) <= width

    labels, blocks, current = list(range(keep)), [], []
    for j in range(keep, n):
        if current and not fits(labels + current + [j]):
            blocks.append(current)
            current = []
        current.append(j)
    blocks.append(current)
    return "\n\n".join(render(labels + b) for b in blocks)
