"""Evaluate a whole set of ranked lists at once: per-list values, means over valid lists, bootstrap intervals.

:func:`evaluate_lists` takes lists of ragged lengths, computes every requested measure in padded batches (lists sorted
by length, so little padding), and returns an :class:`EvaluationTable` with one row per list and the aggregate rows
``mean`` (over the lists where the column is valid), ``ci_low``/``ci_high`` (percentile bootstrap over lists,
seeded) and ``n_valid``.

Bootstrap: each replicate draws L lists with replacement (the same draw for every column, so the intervals of
different columns are paired); a column's replicate value is the mean of its valid values among the drawn lists.
The interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles of the replicates.

Streaming (:class:`StreamingEvaluation`, :func:`evaluate_stream`): lists that do not fit in memory together (ML-20M's
138 493 full-catalogue test lists of 26 744 items) arrive in chunks; each chunk is measured and dropped, only its
per-list values are kept (``[L, C]`` float64: 20 MB for ML-20M), and the means and bootstrap intervals are
computed from them by the same code as :func:`evaluate_lists`.  Every path pads a list to a width that depends on
its own length only (:func:`padded_width`: at most 1/8 of padding) and never batches lists of different widths, so a
chunk of full-catalogue lists is measured in one or two batches (the earlier rule, each list padded as the globally
length-sorted eager batches would pad it, cut a chunk of 512 ML-20M lists into hundreds of batches of a few lists
and made the streamed evaluation of every ML-20M user 1.6x slower).  Streamed per-list values equal the eager ones up
to rounding in the working precision (float32 for float32 scores: a batched product's summation order can depend on
how many lists share the batch; tests/evaluation/test_table.py), and are bit-identical when the chunks hold the
same batches; means and intervals are computed from the per-list values by the same code.

trec_eval's conventions are options (:data:`TREC_EVAL`, with ``read_trec(..., **TREC_READ)``): each list read from
a qrels file carries ``ideal_relevance`` (every judged grade of its query: NDCG's ideal, recall's / AP's
denominators), items come in trec_eval's order (score descending, then docno descending), NDCG's gain is linear
and a query without relevant judged item counts 0 (``undefined="zero"``)::

    from torchfair.evaluation import TREC_EVAL, TREC_READ, evaluate_lists, read_trec
    data = read_trec("run.txt", "qrels.txt", **TREC_READ)
    table = evaluate_lists(data.lists, ["map", "P_10", "ndcg_cut_10", "recall_100"], **TREC_EVAL)
    print(table)   # the means trec_eval prints (its -q per-query values: table.values)
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ._format import jsonable, markdown_rows
from .registry import MeasureRequest, compute_columns, get_measure, normalise_options, parse_request

__all__ = ["EvaluationTable", "evaluate_lists", "as_lists", "bootstrap_interval", "AGGREGATE_ROWS",
           "StreamingEvaluation", "evaluate_stream", "pad_lists", "TREC_EVAL", "UNDEFINED"]

#: the ``kind`` of the aggregate rows, in output order
AGGREGATE_ROWS = ("mean", "ci_low", "ci_high", "n_valid")


def _num(x: float) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


@dataclass
class EvaluationTable:
    """Per-list values and their aggregates.

    ``values`` is ``[L, C]`` float64 with NaN where the column is undefined for the list (invalid);
    ``mean``/``ci_low``/``ci_high`` map a column to a float (NaN when no list defines it or without bootstrap);
    ``n_valid`` to the number of lists where it is defined.  ``meta`` records the measures, options, bootstrap
    settings and group names.
    """

    columns: List[str]
    list_ids: List[Any]
    values: np.ndarray
    mean: Dict[str, float]
    ci_low: Dict[str, float]
    ci_high: Dict[str, float]
    n_valid: Dict[str, int]
    meta: Dict[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------- access
    @property
    def valid(self) -> np.ndarray:
        """``[L, C]`` bool."""
        return ~np.isnan(self.values)

    def __getitem__(self, column: str) -> np.ndarray:
        """Per-list values of ``column`` (NaN = invalid)."""
        return self.values[:, self.columns.index(column)]

    def __len__(self) -> int:
        return len(self.list_ids)

    def aggregate(self) -> Dict[str, Dict[str, Any]]:
        """``{column: {"mean", "ci_low", "ci_high", "n_valid"}}``."""
        return {c: {"mean": self.mean[c], "ci_low": self.ci_low[c], "ci_high": self.ci_high[c],
                    "n_valid": self.n_valid[c]} for c in self.columns}

    def rows(self) -> List[Dict[str, Any]]:
        """All rows as dicts ``{"kind", "list_id", column...}``: per-list rows (kind ``"list"``) then aggregates."""
        out = []
        for lid, row in zip(self.list_ids, self.values):
            out.append({"kind": "list", "list_id": lid, **{c: _num(v) for c, v in zip(self.columns, row)}})
        for kind in AGGREGATE_ROWS:
            src = getattr(self, kind)
            out.append({"kind": kind, "list_id": None,
                        **{c: (src[c] if kind == "n_valid" else _num(src[c])) for c in self.columns}})
        return out

    # ----------------------------------------------------------------- JSON
    def to_json(self, path: Union[str, os.PathLike, None] = None, indent: Optional[int] = 2) -> str:
        """JSON text (written to ``path`` when given): ``columns``, ``lists`` (id + values, null = invalid),
        ``aggregate`` (per column) and ``meta``."""
        doc = {"columns": self.columns,
               "lists": [{"list_id": lid, "values": [_num(v) for v in row]}
                         for lid, row in zip(self.list_ids, self.values)],
               "aggregate": {c: {k: (v if k == "n_valid" else _num(v)) for k, v in a.items()}
                             for c, a in self.aggregate().items()},
               "meta": jsonable(self.meta)}
        text = json.dumps(doc, indent=indent)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    @classmethod
    def from_json(cls, source: Union[str, os.PathLike]) -> "EvaluationTable":
        """Read :meth:`to_json` output (a path or the JSON text)."""
        text = _read_source(source, "{")
        doc = json.loads(text)
        cols = list(doc["columns"])
        vals = np.array([[np.nan if v is None else v for v in r["values"]] for r in doc["lists"]],
                        dtype=np.float64).reshape(len(doc["lists"]), len(cols))
        agg = doc["aggregate"]
        f = lambda c, k: np.nan if agg[c][k] is None else float(agg[c][k])  # noqa: E731
        return cls(cols, [r["list_id"] for r in doc["lists"]], vals, {c: f(c, "mean") for c in cols},
                   {c: f(c, "ci_low") for c in cols}, {c: f(c, "ci_high") for c in cols},
                   {c: int(agg[c]["n_valid"]) for c in cols}, doc.get("meta", {}))

    # ----------------------------------------------------------------- CSV
    def to_csv(self, path: Union[str, os.PathLike, None] = None, per_list: bool = True) -> str:
        """One CSV table with columns ``kind,list_id,<measure columns>``: a row per list (``kind=list``, empty cell =
        invalid) followed by the rows ``mean``, ``ci_low``, ``ci_high``, ``n_valid``.  ``per_list=False`` keeps
        only the aggregate rows.  Floats are written with full precision (``repr``)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["kind", "list_id"] + self.columns)
        for r in self.rows():
            if r["kind"] == "list" and not per_list:
                continue
            w.writerow([r["kind"], "" if r["list_id"] is None else r["list_id"]] +
                       ["" if r[c] is None else repr(r[c]) for c in self.columns])
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", newline="") as f:
                f.write(text)
        return text

    @classmethod
    def from_csv(cls, source: Union[str, os.PathLike]) -> "EvaluationTable":
        """Read :meth:`to_csv` output (a path or the CSV text). List ids come back as strings."""
        text = _read_source(source, "kind,")
        rd = csv.reader(io.StringIO(text))
        header = next(rd)
        if header[:2] != ["kind", "list_id"]:
            raise ValueError("not a torchfair evaluation CSV: the header must start with kind,list_id")
        cols = header[2:]
        ids, vals = [], []
        agg: Dict[str, List[float]] = {}
        for row in rd:
            if not row:
                continue
            nums = [np.nan if x == "" else float(x) for x in row[2:]]
            if row[0] == "list":
                ids.append(row[1])
                vals.append(nums)
            else:
                agg[row[0]] = nums
        values = np.array(vals, dtype=np.float64).reshape(len(ids), len(cols))
        get = lambda kind: {c: (agg[kind][i] if kind in agg else np.nan) for i, c in enumerate(cols)}  # noqa: E731
        n = get("n_valid")
        n_valid = {c: (int(n[c]) if not math.isnan(n[c]) else int((~np.isnan(values[:, i])).sum()))
                   for i, c in enumerate(cols)}
        return cls(cols, ids, values, get("mean"), get("ci_low"), get("ci_high"), n_valid, {})

    # ----------------------------------------------------------------- display
    def to_markdown(self, per_list: bool = False, digits: int = 4, width: Optional[int] = None) -> str:
        """The aggregate table (one row per column: mean, interval, number of valid lists), or with
        ``per_list=True`` the per-list table (lists as rows, ``-`` = invalid).  ``width``: the widest line allowed
        (``None``: one table however wide); a wider table is several tables, each with the first column (measure /
        list id) and as many of the others as fit (:func:`~torchfair.evaluation._format.markdown_rows`)."""
        fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"  # noqa
        if per_list:
            rows = [[lid] + [fmt(v) for v in row] for lid, row in zip(self.list_ids, self.values)]
            return markdown_rows(["list_id"] + list(self.columns), rows, align="l" + "r" * len(self.columns),
                                 width=width)
        level = self.meta.get("confidence", 0.95)
        rows = []
        for c in self.columns:
            lo, hi = self.ci_low[c], self.ci_high[c]
            ci = "-" if (lo is None or math.isnan(lo)) else f"[{fmt(lo)}, {fmt(hi)}]"
            rows.append([c, fmt(self.mean[c]), ci, self.n_valid[c]])
        return markdown_rows(["measure", "mean", f"{int(round(level * 100))}% CI", "n_valid"], rows, align="lrrr",
                             width=width)

    def __str__(self) -> str:
        return self.to_markdown()

    def to_pandas(self, per_list: bool = True):
        """A ``pandas.DataFrame`` (requires pandas): per-list values indexed by ``list_id`` or, with
        ``per_list=False``, the aggregate rows indexed by column name."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("EvaluationTable.to_pandas needs pandas: pip install 'torchfair[parquet]' (or pandas)") from e
        if per_list:
            return pd.DataFrame(self.values, index=pd.Index(self.list_ids, name="list_id"), columns=self.columns)
        return pd.DataFrame(self.aggregate()).T


def _read_source(source, marker: str) -> str:
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not source.lstrip().startswith(marker)
                                           and os.path.exists(source)):
        with open(source) as f:
            return f.read()
    return str(source)


# --------------------------------------------------------------------------------------------- inputs
ListLike = Union[Mapping[str, Any], Sequence[Any]]
_ID_KEYS = ("list_id", "id", "qid")


def _vec(x, name: str, floating: Optional[bool]) -> Optional[Tensor]:
    if x is None:
        return None
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
    if floating is True or (floating is None and t.is_floating_point()):
        t = t.to(torch.float64 if t.dtype == torch.float64 else torch.float32)
    elif floating is None or floating is False:
        t = t.long() if not t.is_floating_point() else t
    return t


def as_lists(lists: Union[Sequence[ListLike], Mapping[str, Any]], list_ids: Optional[Sequence[Any]] = None
             ) -> Tuple[List[Any], List[Tuple[Tensor, Optional[Tensor], Optional[Tensor]]]]:
    """Normalise the inputs of :func:`evaluate_lists` to ``(ids, [(scores [n], relevance [n] | None, groups | None)])``.

    Accepted: a sequence of dicts (keys ``scores``, ``relevance``, ``groups``, optional id under ``list_id``/
    ``id``/``qid``) or of tuples ``(scores, relevance[, groups])`` of 1-D tensors / arrays / lists (groups may be
    ``[n, G]`` soft membership); or one padded batch as a dict of ``[B, N]`` tensors with an optional ``mask``.
    """
    out = []
    ids: List[Any] = []
    if isinstance(lists, Mapping):
        scores = torch.as_tensor(lists["scores"])
        if scores.dim() == 1:
            return as_lists([lists], list_ids)
        if scores.dim() != 2:
            raise ValueError(f"a padded batch needs `scores` of shape [B, N]; got {tuple(scores.shape)}")
        B, N = scores.shape
        mask = lists.get("mask")
        mask = torch.ones(B, N, dtype=torch.bool) if mask is None else torch.as_tensor(mask).bool()
        rel, grp = lists.get("relevance"), lists.get("groups")
        rel = None if rel is None else torch.as_tensor(rel)
        grp = None if grp is None else torch.as_tensor(grp)
        rows = [{"scores": scores[b][mask[b]], "relevance": None if rel is None else rel[b][mask[b]],
                 "groups": None if grp is None else grp[b][mask[b]]} for b in range(B)]
        ids_in = lists.get("list_id", lists.get("list_ids"))
        return as_lists(rows, list_ids if list_ids is not None else (list(ids_in) if ids_in is not None else None))
    for i, item in enumerate(lists):
        if isinstance(item, Mapping):
            s, r, g = item.get("scores"), item.get("relevance"), item.get("groups")
            lid = next((item[k] for k in _ID_KEYS if k in item), i)
        elif isinstance(item, (tuple, list)) and 1 <= len(item) <= 3:
            s, r, g = (tuple(item) + (None, None))[:3]
            lid = i
        else:
            raise ValueError(f"list {i}: expected a dict or a (scores, relevance[, groups]) tuple; got "
                             f"{type(item).__name__}")
        if s is None:
            raise ValueError(f"list {i}: `scores` is missing")
        s = _vec(s, "scores", True)
        r = _vec(r, "relevance", True)
        g = _vec(g, "groups", None)
        if s.dim() != 1:
            raise ValueError(f"list {i}: `scores` must be 1-D; got shape {tuple(s.shape)}")
        n = s.shape[0]
        if r is not None and tuple(r.shape) != (n,):
            raise ValueError(f"list {i}: `relevance` must have shape ({n},); got {tuple(r.shape)}")
        if g is not None and (g.shape[0] != n or g.dim() != (2 if g.is_floating_point() else 1)):
            raise ValueError(f"list {i}: `groups` must be ({n},) integer ids or ({n}, G) soft membership; "
                             f"got {tuple(g.shape)} {g.dtype}")
        ids.append(lid)
        out.append((s, r, g))
    if list_ids is not None:
        if len(list_ids) != len(out):
            raise ValueError(f"`list_ids` has {len(list_ids)} entries for {len(out)} lists")
        ids = list(list_ids)
    return ids, out


def _infer_num_groups(data) -> Optional[int]:
    gs = [g for _, _, g in data if g is not None]
    if not gs:
        return None
    soft = {g.is_floating_point() for g in gs}
    if len(soft) > 1:
        raise ValueError("`groups` mixes integer ids and soft membership across lists")
    if soft.pop():
        sizes = {g.shape[-1] for g in gs}
        if len(sizes) > 1:
            raise ValueError(f"soft membership has different numbers of groups across lists: {sorted(sizes)}")
        return sizes.pop()
    mx = max((int(g.max()) for g in gs if g.numel()), default=0)
    return max(mx + 1, 1)


def pad_lists(lists: Sequence[Tuple[Tensor, Optional[Tensor], Optional[Tensor]]], soft: bool = False,
              num_groups: Optional[int] = None, device: Union[str, torch.device, None] = None,
              width: Optional[int] = None) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Tensor]:
    """One padded batch ``(scores [B, N], relevance [B, N] | None, groups, mask [B, N])`` of ragged lists, as
    every evaluation batch is built (:func:`evaluate_lists`, :class:`StreamingEvaluation`).

    ``lists``: ``(scores [n], relevance [n] | None, groups | None)`` tuples, as :func:`as_lists` returns them.
    ``N`` is ``width`` (default: the longest list, at least 1); list ``b`` fills row ``b`` from the left and
    ``mask`` marks its ``n`` real entries.  Scores and relevance are float64 when any list's scores are, float32
    otherwise; padded entries hold 0.  ``groups``: integer ids ``[B, N]`` (padding ``-1``) or, with ``soft=True``,
    membership ``[B, N, num_groups]`` (padding 0); ``None`` when a list has no groups (likewise relevance).
    Moved to ``device`` (default: where they are, the CPU).

    Example::

        >>> s, r, g, m = pad_lists([(torch.tensor([0.5, 0.1]), torch.tensor([1.0, 0.0]), torch.tensor([1, 0])),
        ...                         (torch.tensor([0.3]), torch.tensor([2.0]), torch.tensor([1]))])
        >>> g, m
        (tensor([[ 1,  0],
                [ 1, -1]]), tensor([[ True,  True],
                [ True, False]]))
    """
    chunk = lists
    if not isinstance(chunk, (list, tuple)) or not chunk:
        raise ValueError("`lists` must be a non-empty sequence of (scores, relevance, groups) tuples")
    if soft and num_groups is None:
        raise ValueError("`num_groups` is required with `soft=True` (the membership width)")
    if width is not None and (isinstance(width, bool) or not isinstance(width, (int, np.integer))
                              or width < max(s.shape[0] for s, _, _ in chunk)):
        raise ValueError(f"`width` must be an int at least the longest list's length; got {width!r}")
    dtype_groups_soft, G = soft, num_groups
    B = len(chunk)
    N = max(max(s.shape[0] for s, _, _ in chunk), 1) if width is None else int(width)
    fdt = torch.float64 if any(s.dtype == torch.float64 for s, _, _ in chunk) else torch.float32
    scores = torch.zeros(B, N, dtype=fdt)
    mask = torch.zeros(B, N, dtype=torch.bool)
    has_rel = all(r is not None for _, r, _ in chunk)
    has_grp = all(g is not None for _, _, g in chunk)
    rel = torch.zeros(B, N, dtype=fdt) if has_rel else None
    if has_grp:
        grp = torch.zeros(B, N, G, dtype=fdt) if dtype_groups_soft else torch.full((B, N), -1, dtype=torch.long)
    else:
        grp = None
    for b, (s, r, g) in enumerate(chunk):
        n = s.shape[0]
        scores[b, :n] = s
        mask[b, :n] = True
        if rel is not None:
            rel[b, :n] = r
        if grp is not None:
            grp[b, :n] = g.to(grp.dtype)
    if device is None:
        return scores, rel, grp, mask
    mv = lambda t: None if t is None else t.to(device)  # noqa: E731
    return mv(scores), mv(rel), mv(grp), mv(mask)


def bootstrap_interval(values: np.ndarray, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95,
                       chunk: int = 200) -> Tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the per-column mean over lists, ``values [L, C]`` with NaN = invalid.

    Lists are resampled with replacement (one draw per replicate shared by all columns) with a
    ``torch.Generator`` seeded by ``seed``; returns ``(low [C], high [C])`` (NaN for a column no list defines).
    """
    L, C = values.shape
    if n_boot < 1 or L == 0:
        nan = np.full(C, np.nan)
        return nan, nan.copy()
    if not (0 < confidence < 1):
        raise ValueError(f"`confidence` must lie in (0, 1); got {confidence}")
    valid = torch.as_tensor(~np.isnan(values), dtype=torch.float64)
    vals = torch.as_tensor(np.nan_to_num(values, nan=0.0), dtype=torch.float64)
    gen = torch.Generator().manual_seed(int(seed))
    reps = []
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        idx = torch.randint(0, L, (m, L), generator=gen)
        w = torch.zeros(m, L, dtype=torch.float64).scatter_add_(1, idx, torch.ones(m, L, dtype=torch.float64))
        num = w @ (vals * valid)
        den = w @ valid
        reps.append(torch.where(den > 0, num / den.clamp(min=1e-300), torch.full_like(num, float("nan"))))
    R = torch.cat(reps).numpy()  # [n_boot, C]
    alpha = (1 - confidence) / 2
    lo = np.full(C, np.nan)
    hi = np.full(C, np.nan)
    for c in range(C):
        col = R[:, c]
        col = col[~np.isnan(col)]
        if col.size:
            lo[c], hi[c] = np.quantile(col, [alpha, 1 - alpha])
    return lo, hi


def evaluate_lists(lists: Union[Sequence[ListLike], Mapping[str, Any]],
             measures: Sequence[Union[str, MeasureRequest, Tuple[str, Mapping[str, Any]]]] = ("dips",), *,
             bootstrap: int = 1000, seed: int = 0, confidence: float = 0.95, num_groups: Optional[int] = None,
             list_ids: Optional[Sequence[Any]] = None, batch_size: int = 256, max_batch_elements: int = 2 ** 18,
             device: Union[str, torch.device, None] = None, group_names: Optional[Sequence[str]] = None,
             accumulators: Sequence[Any] = (), undefined: str = "skip", **options: Any) -> EvaluationTable:
    """Evaluate ``measures`` on every list and aggregate (see the module doc).

    Args:
        lists: ragged lists (see :func:`as_lists`) or a padded batch dict with ``mask``.
        measures: registered names, ``"ndcg@10"``/``"dips:tie_weight=0"`` strings, ``(name, options)`` pairs or
            :class:`~torchfair.evaluation.registry.MeasureRequest`.
        bootstrap: number of bootstrap replicates (0: no interval); ``seed`` seeds them; ``confidence`` the level.
        num_groups: G (default: ``max id + 1`` over all lists, so that every batch has the same columns).
        batch_size, max_batch_elements: padded batches hold at most this many lists and ``lists * max length``
            entries; lists are sorted by length first.
        device: where to compute (default CPU).
        group_names: names of the group ids, recorded in ``meta`` (column letters A, B, ... are ids 0, 1, ...).
        accumulators: objects with ``update(scores=, relevance=, groups=, mask=)`` (torchmetrics Metrics, e.g.
            :class:`~torchfair.evaluation.accumulators.PositionShares`, on ``device``): every padded batch the
            measures see (:func:`pad_lists`; empty lists are in none) is passed to each; call their ``compute()``
            afterwards.
        undefined: ``"skip"`` (default): a list where a measure is undefined (NDCG without a relevant item...) is
            left out of that column's mean and ``n_valid``; ``"zero"``: in the columns of utility measures it counts
            as 0 (trec_eval's convention: every query counts; ``n_valid`` is then every non-empty list), its
            per-list value is 0, and ``meta["zeroed"]`` counts such lists per column (``meta["undefined"]`` records
            the choice).  Fairness columns are never zeroed (0 is a value there: parity).
        **options: global measure options (``browsing``, ``tie_weight``, ``k``, ``ordering``/``ties``...), passed
            to the measures that accept them; per-measure options win.

    A list dict may carry ``"ideal_relevance"`` (1-D: the grades of every judged item of its query, e.g. from
    :func:`~torchfair.evaluation.read_trec`; for a padded batch dict ``[B, M]`` padded with 0): it is padded per
    batch and passed to the measures that take it (NDCG's ideal, the relevant count of recall, AP and
    R-precision, RR's definedness).  trec_eval's numbers: ``evaluate_lists(read_trec(run, qrels, **TREC_READ).lists,
    ["map", "P_10", "ndcg_cut_10"], **TREC_EVAL)`` (:data:`TREC_EVAL`).
    """
    accumulators = _check_accumulators(accumulators)
    undefined = _check_undefined(undefined)
    ids, data = as_lists(lists, list_ids)
    if not data:
        raise ValueError("`lists` is empty")
    ideals = _ideals(lists)
    reqs = [parse_request(m) for m in measures]
    if not reqs:
        raise ValueError("`measures` is empty")
    for r in reqs:
        try:
            get_measure(r.name)  # unknown names fail before any computation
        except ValueError as e:
            raise ValueError(f"`measures`: {e}") from None
    G = num_groups if num_groups is not None else _infer_num_groups(data)
    soft = any(g is not None and g.is_floating_point() for _, _, g in data)
    if any(g is None for _, _, g in data) and any(g is not None for _, _, g in data):
        raise ValueError("`groups` is given for some lists and not for others")
    if any(r is None for _, r, _ in data) and any(r is not None for _, r, _ in data):
        raise ValueError("`relevance` is given for some lists and not for others")
    dev = torch.device(device) if device is not None else torch.device("cpu")

    columns: Optional[List[str]] = None
    results: Dict[int, np.ndarray] = {}
    for chunk_idx, width in _plan_batches([d[0].shape[0] for d in data], batch_size, max_batch_elements):
        cols, arr = _batch_values([data[i] for i in chunk_idx], reqs, soft, G, dev, options, width, accumulators,
                                  ideals=None if ideals is None else [ideals[i] for i in chunk_idx])
        if columns is None:
            columns = cols
        elif cols != columns:  # pragma: no cover - guarded by the fixed num_groups
            raise RuntimeError(f"batches produced different columns: {columns} vs {cols}")
        for j, i in enumerate(chunk_idx):
            results[i] = arr[j]
    if columns is None:  # every list empty: columns from a synthetic list
        columns = _empty_columns(reqs, G, options)
    C = len(columns)
    values = np.stack([results.get(i, np.full(C, np.nan)) for i in range(len(data))]).reshape(len(data), C)
    return _table(columns, ids, values, reqs, options, G, bootstrap, seed, confidence, group_names, undefined)


def _check_accumulators(accumulators) -> Tuple[Any, ...]:
    """``accumulators`` as a tuple, each with a callable ``update`` (ValueError naming the argument otherwise)."""
    if isinstance(accumulators, (str, bytes)) or not isinstance(accumulators, (list, tuple)):
        raise ValueError(f"`accumulators` must be a list or tuple of objects with an `update` method (e.g. "
                         f"torchmetrics Metrics); got {type(accumulators).__name__}")
    for a in accumulators:
        if not callable(getattr(a, "update", None)):
            raise ValueError(f"`accumulators`: {a!r} has no `update` method")
    return tuple(accumulators)


def padded_width(n: int) -> int:
    """The width a list of ``n`` items is padded to in every evaluation batch: ``n`` rounded up to a multiple of
    ``2 ** (bit_length(n) - 4)`` (lists up to 16 items unpadded; at most 1/8 of padding; 8 widths per doubling of
    the length).  Some float32 reductions depend on the padded width in the last bit; a width fixed by the list's
    own length makes its values independent of the lists batched with it."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"`n` must be a non-negative int (a list length); got {n!r}")
    n = int(n)
    if n <= 16:
        return max(n, 1)
    g = 1 << (n.bit_length() - 4)
    return -(-n // g) * g


def _plan_batches(lengths: Sequence[int], batch_size: int, max_batch_elements: int
                  ) -> List[Tuple[List[int], int]]:
    """The padded batches ``(list indices, width)`` of :func:`evaluate_lists` and :class:`StreamingEvaluation`: lists
    grouped by :func:`padded_width` (in increasing width, each group in list order; empty lists left out: every
    column invalid), each group cut into batches of at most ``batch_size`` lists and ``max_batch_elements`` padded
    entries (a batch holds at least one list)."""
    groups: Dict[int, List[int]] = {}
    for i, n in enumerate(lengths):
        if n > 0:
            groups.setdefault(padded_width(n), []).append(i)
    out: List[Tuple[List[int], int]] = []
    for w in sorted(groups):
        idx = groups[w]
        step = max(1, min(batch_size, max_batch_elements // w))
        out += [(idx[a:a + step], w) for a in range(0, len(idx), step)]
    return out


def _batch_values(chunk, reqs, soft: bool, G: Optional[int], dev, options: Mapping[str, Any],
                  width: Optional[int] = None, accumulators: Sequence[Any] = (),
                  ideals: Optional[Sequence[Tensor]] = None) -> Tuple[List[str], np.ndarray]:
    """``(columns, [b, C] float64 values with NaN = invalid)`` of one padded batch (``width``: pad to it); the
    batch is also passed to every accumulator's ``update``.  ``ideals``: each list's ``ideal_relevance`` (padded
    with 0 to ``[b, M]``, passed to the measures that take it)."""
    s, r, g, m = pad_lists(chunk, soft, G, dev, width)
    for acc in accumulators:
        acc.update(scores=s, relevance=r, groups=g, mask=m)
    extra = {} if ideals is None else {"ideal_relevance": _pad_ideals(ideals, s.dtype, s.device)}
    cols = compute_columns(s, r, g, m, reqs, num_groups=G, **extra, **options)
    v = torch.stack([c[0].detach().to(torch.float64).cpu() for c in cols.values()], -1)
    ok = torch.stack([c[1].cpu() for c in cols.values()], -1)
    return list(cols), torch.where(ok, v, torch.full_like(v, float("nan"))).numpy()


def _ideals(lists: Union[Sequence[ListLike], Mapping[str, Any]]) -> Optional[List[Tensor]]:
    """Each list's ``ideal_relevance`` (1-D: the grades of every judged item of its query, e.g. from
    :func:`~torchfair.evaluation.read_trec`), in the order of :func:`as_lists`; ``None`` when no list has one."""
    if isinstance(lists, Mapping):
        x = lists.get("ideal_relevance")
        if x is None:
            return None
        x = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
        if torch.as_tensor(lists["scores"]).dim() == 1:
            rows = [x]
        elif x.dim() == 2:
            rows = list(x)
        else:
            raise ValueError(f"`ideal_relevance` of a padded batch must be [B, M] (padded with 0); got "
                             f"{tuple(x.shape)}")
    else:
        rows = [item.get("ideal_relevance") if isinstance(item, Mapping) else None for item in lists]
    if all(r is None for r in rows):
        return None
    out = []
    for i, r in enumerate(rows):
        if r is None:
            raise ValueError(f"`ideal_relevance` is given for some lists and not for others (not for list {i})")
        t = _vec(r, "ideal_relevance", True)
        if t.dim() != 1:
            raise ValueError(f"list {i}: `ideal_relevance` must be 1-D (the grades of every judged item of its "
                             f"query); got shape {tuple(t.shape)}")
        out.append(t)
    return out


def _pad_ideals(ideals: Sequence[Tensor], dtype: torch.dtype, device) -> Tensor:
    """``[b, M]`` the lists' ``ideal_relevance`` padded with 0 (``M``: the longest, at least 1)."""
    M = max(max((int(t.shape[0]) for t in ideals), default=0), 1)
    out = torch.zeros(len(ideals), M, dtype=dtype)
    for i, t in enumerate(ideals):
        out[i, :t.shape[0]] = t.to(dtype)
    return out.to(device)


#: choices of ``undefined`` (:func:`evaluate_lists`): an undefined value is left out of its column's mean
#: (``"skip"``), or counts as 0 in the columns of utility measures (``"zero"``, trec_eval's convention)
UNDEFINED = ("skip", "zero")


#: the :func:`evaluate_lists` / :class:`StreamingEvaluation` options under which the measures give trec_eval's
#: numbers (Voorhees & Harman, TREC, 2005; trec_eval 9.0.7, checked against pytrec_eval per query in
#: tests/evaluation/test_trec.py) on lists read by ``read_trec(run, qrels, **TREC_READ)``: linear gains for NDCG,
#: relevant = grade > 0 (trec_eval's relevance level 1 on its integer grades), a query without relevant judged item
#: counts 0.  With trec_eval's names (``"map"``, ``"P_10"``, ``"ndcg_cut_10"``, ``"recall_100"``, ``"recip_rank"``,
#: ``"Rprec"``, ``"ndcg"``; :func:`~torchfair.evaluation.registry.parse_request`).
TREC_EVAL: Dict[str, Any] = {"gain": "linear", "threshold": 0.0, "undefined": "zero"}


def _check_undefined(undefined) -> str:
    if undefined not in UNDEFINED:
        raise ValueError(f"`undefined` must be one of {', '.join(repr(u) for u in UNDEFINED)}; got {undefined!r}")
    return undefined


def _empty_columns(reqs, G: Optional[int], options: Mapping[str, Any]) -> List[str]:
    columns: List[str] = []
    for r in reqs:
        spec = get_measure(r.name)
        glob = {k: v for k, v in normalise_options(options).items() if k not in spec.ignore_global}
        columns += spec.column_names(G if spec.uses_groups else None, label=r.label,
                                     **{**spec.options_for(glob), **r.options})
    return columns


def _table(columns: List[str], ids: List[Any], values: np.ndarray, reqs, options: Mapping[str, Any],
           G: Optional[int], bootstrap: int, seed: int, confidence: float,
           group_names: Optional[Sequence[str]], undefined: str = "skip") -> EvaluationTable:
    """Means over the valid lists, bootstrap intervals and meta of per-list ``values [L, C]``.  With
    ``undefined="zero"`` the undefined values of the utility measures' columns become 0 first (counted in
    ``meta["zeroed"]``)."""
    zeroed: Dict[str, int] = {}
    if undefined == "zero":
        utility = {r.label for r in reqs if get_measure(r.name).kind == "utility"}
        values = values.copy()
        for j, c in enumerate(columns):
            if c in utility:
                nan = np.isnan(values[:, j])
                zeroed[c] = int(nan.sum())
                values[nan, j] = 0.0
    valid = ~np.isnan(values)
    n_valid = valid.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(n_valid > 0, np.nansum(values, 0) / np.maximum(n_valid, 1), np.nan)
    lo, hi = bootstrap_interval(values, bootstrap, seed, confidence)
    meta = {"measures": [{"name": r.name, "label": r.label, "options": r.options, "kind": get_measure(r.name).kind,
                          "higher_is_better": get_measure(r.name).higher_is_better} for r in reqs],
            "options": dict(options), "num_groups": G, "bootstrap": bootstrap, "seed": seed,
            "confidence": confidence, "n_lists": len(values), "undefined": undefined}
    if undefined == "zero":
        meta["zeroed"] = zeroed
    if group_names is not None:
        meta["group_names"] = list(group_names)
    return EvaluationTable(columns, ids, values, dict(zip(columns, means.tolist())), dict(zip(columns, lo.tolist())),
                           dict(zip(columns, hi.tolist())), dict(zip(columns, (int(x) for x in n_valid))), meta)


# --------------------------------------------------------------------------------------------- streaming
class StreamingEvaluation:
    """Evaluate lists that arrive in chunks: each chunk is measured and can then be dropped; only the per-list
    values are kept, and :meth:`result` gives the same :class:`EvaluationTable` as one :func:`evaluate_lists` call
    on all the lists (module doc).

    Args: those of :func:`evaluate_lists`, plus ``lengths`` (optional): the number of items of every list, in the
    order the lists will arrive, checked as they arrive (and by :meth:`result`: every list added).  Every list is
    padded to :func:`padded_width` of its own length, as :func:`evaluate_lists` pads it, so every per-list value
    equals the eager path's up to rounding in the working precision, whatever the chunks (module doc);
    ``accumulators`` get every padded batch of every chunk, as :func:`evaluate_lists` passes them.  Lists with
    groups need ``num_groups`` (it cannot be
    inferred from the lists before they have all been seen).  All lists should have the same score dtype (float32
    or float64), as a batch is padded in float64 when any of its lists is.

    Example::

        >>> import torch
        >>> lists = [(torch.rand(n), torch.rand(n), torch.randint(0, 2, (n,))) for n in (5, 3, 8, 4)]
        >>> stream = StreamingEvaluation(["ndcg@3", "dips"], lengths=[5, 3, 8, 4], num_groups=2, bootstrap=20)
        >>> for a in (0, 2):
        ...     _ = stream.add(lists[a:a + 2], list_ids=[a, a + 1])
        >>> eager = evaluate_lists(lists, ["ndcg@3", "dips"], num_groups=2, bootstrap=20)
        >>> stream.result().mean == eager.mean
        True
    """

    def __init__(self, measures: Sequence[Union[str, MeasureRequest, Tuple[str, Mapping[str, Any]]]] = ("dips",), *,
                 lengths: Optional[Sequence[int]] = None, bootstrap: int = 1000, seed: int = 0,
                 confidence: float = 0.95, num_groups: Optional[int] = None, batch_size: int = 256,
                 max_batch_elements: int = 2 ** 18, device: Union[str, torch.device, None] = None,
                 group_names: Optional[Sequence[str]] = None, accumulators: Sequence[Any] = (),
                 undefined: str = "skip", **options: Any):
        self.accumulators = _check_accumulators(accumulators)
        self.undefined = _check_undefined(undefined)
        self._has_ideal: Optional[bool] = None
        self.reqs = [parse_request(m) for m in measures]
        if not self.reqs:
            raise ValueError("`measures` is empty")
        for r in self.reqs:
            try:
                get_measure(r.name)
            except ValueError as e:
                raise ValueError(f"`measures`: {e}") from None
        self.bootstrap, self.seed, self.confidence = bootstrap, seed, confidence
        self.num_groups, self.group_names, self.options = num_groups, group_names, options
        self.batch_size, self.max_batch_elements = int(batch_size), int(max_batch_elements)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.lengths: Optional[np.ndarray] = None
        if lengths is not None:
            self.lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
            if (self.lengths < 0).any():
                raise ValueError("`lengths` must be >= 0")
        self.columns: Optional[List[str]] = None
        self._values: List[np.ndarray] = []
        self._ids: List[Any] = []
        self._soft: Optional[bool] = None
        self._has: Optional[Tuple[bool, bool]] = None
        self.n_lists = 0
        self.n_chunks = 0

    def add(self, lists: Union[Sequence[ListLike], Mapping[str, Any]],
            list_ids: Optional[Sequence[Any]] = None) -> np.ndarray:
        """Measure the next lists (any input of :func:`evaluate_lists`); returns their values ``[n, C]``."""
        ids, data = as_lists(lists, list_ids)
        if not data:
            return np.zeros((0, len(self.columns or [])))
        if any(g is None for _, _, g in data) and any(g is not None for _, _, g in data):
            raise ValueError("`groups` is given for some lists and not for others")
        if any(r is None for _, r, _ in data) and any(r is not None for _, r, _ in data):
            raise ValueError("`relevance` is given for some lists and not for others")
        ideals = _ideals(lists)
        if self._has_ideal is not None and (ideals is not None) != self._has_ideal:
            raise ValueError("`ideal_relevance` is given for some chunks and not for others")
        self._has_ideal = ideals is not None
        has = (data[0][1] is not None, data[0][2] is not None)
        if self._has is not None and has != self._has:
            raise ValueError("`groups` / `relevance` are given for some chunks and not for others")
        self._has = has
        soft = any(g is not None and g.is_floating_point() for _, _, g in data)
        if self._soft is not None and soft != self._soft:
            raise ValueError("`groups` mixes integer ids and soft membership across chunks")
        self._soft = soft
        if has[1] and self.num_groups is None:
            if not soft:
                raise ValueError("`num_groups` is required to stream lists with integer groups")
            self.num_groups = _infer_num_groups(data)
        start, n = self.n_lists, len(data)
        sizes = np.array([d[0].shape[0] for d in data], dtype=np.int64)
        if self.lengths is not None:
            if start + n > len(self.lengths):
                raise ValueError(f"more lists than `lengths` gives ({len(self.lengths)})")
            want = self.lengths[start:start + n]
            if (sizes != want).any():
                k = int(np.flatnonzero(sizes != want)[0])
                raise ValueError(f"list {start + k} has {int(sizes[k])} items; `lengths` says {int(want[k])}")
        batches = _plan_batches(sizes.tolist(), self.batch_size, self.max_batch_elements)
        out: Optional[np.ndarray] = None
        for idx, w in batches:
            cols, arr = _batch_values([data[i] for i in idx], self.reqs, soft, self.num_groups, self.device,
                                      self.options, w, self.accumulators,
                                      ideals=None if ideals is None else [ideals[i] for i in idx])
            if self.columns is None:
                self.columns = cols
            elif cols != self.columns:
                raise RuntimeError(f"chunks produced different columns: {self.columns} vs {cols}")
            if out is None:
                out = np.full((n, len(cols)), np.nan)
            out[idx] = arr
        if out is None:  # every list of the chunk is empty
            if self.columns is None:
                self.columns = _empty_columns(self.reqs, self.num_groups, self.options)
            out = np.full((n, len(self.columns)), np.nan)
        self._values.append(out)
        if list_ids is None:  # a list without an id is numbered by its position in the whole stream, as eagerly
            if isinstance(lists, Mapping):
                if "list_id" not in lists and "list_ids" not in lists:
                    ids = list(range(start, start + n))
            else:
                ids = [next((x[k] for k in _ID_KEYS if k in x), start + i) if isinstance(x, Mapping) else start + i
                       for i, x in enumerate(lists)]
        self._ids += list(ids)
        self.n_lists += n
        self.n_chunks += 1
        return out

    def values(self) -> np.ndarray:
        """``[L, C]`` the per-list values so far."""
        C = len(self.columns or [])
        return np.concatenate(self._values, 0) if self._values else np.zeros((0, C))

    def result(self) -> EvaluationTable:
        """The :class:`EvaluationTable` of every list added (means, intervals: as :func:`evaluate_lists`)."""
        if self.n_lists == 0:
            raise ValueError("no lists were added")
        if self.lengths is not None and self.n_lists != len(self.lengths):
            raise ValueError(f"{self.n_lists} lists were added; `lengths` gives {len(self.lengths)}")
        values = self.values()
        table = _table(list(self.columns), list(self._ids), values, self.reqs, self.options, self.num_groups,
                       self.bootstrap, self.seed, self.confidence, self.group_names, self.undefined)
        table.meta["streamed"] = {"chunks": self.n_chunks, "padded_as_eager": True}
        return table


def evaluate_stream(chunks, measures: Sequence[Union[str, MeasureRequest, Tuple[str, Mapping[str, Any]]]] = ("dips",),
                    **kwargs: Any) -> EvaluationTable:
    """:class:`StreamingEvaluation` over an iterable of chunks (each a list input of :func:`evaluate_lists`, or a
    ``(lists, list_ids)`` pair); keyword arguments as :class:`StreamingEvaluation` (give ``lengths`` for values
    bit-identical to :func:`evaluate_lists` on all the lists; ``accumulators`` see every padded batch)."""
    stream = StreamingEvaluation(measures, **kwargs)
    for chunk in chunks:
        if isinstance(chunk, tuple) and len(chunk) == 2 and not isinstance(chunk[0], Tensor):
            stream.add(chunk[0], chunk[1])
        else:
            stream.add(chunk)
    return stream.result()
