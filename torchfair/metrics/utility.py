"""Utility (ranking quality) measures: DCG, NDCG, precision, recall, MRR, RBP, ERR.

Like every measure of the package they are written once against an ordering (:mod:`torchfair.orderings`): an
item's contribution is its gain times its exposure ``E[F(pos_i)]`` under a browsing model, so the default
``ordering=Hard()`` gives the exact values and a soft ordering a differentiable one.  Positions are 0-based.

Common arguments
----------------
scores, relevance : ``[B, N]`` or ``[N]`` float; ``relevance >= 0`` (graded or binary).
k : cut-off (only positions ``0 .. k-1`` count); ``None`` = the whole list.  On the real-valued positions of
    soft orderings the cut-off is the linear ramp of :class:`~torchfair.browsing.TopK`.
mask : ``[B, N]`` bool, True for real items (default: all real).  Padded items are never ranked nor counted.
ordering : an :class:`~torchfair.orderings.Ordering` (default ``Hard()``, ties broken by list index; use
    ``Hard(ties="average")`` for the tie-averaged values of McSherry & Najork) or a precomputed ``OrderedBatch``.
reduction : ``"none"`` (per list, default), ``"mean"`` or ``"sum"`` over the lists where the value is defined.
return_valid : also return the boolean validity mask.

Undefined values (an empty list; NDCG or recall of a list with no relevant item) are 0 and flagged ``False`` in
the validity mask; ``reduction="mean"`` excludes them.  Nothing returns NaN.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from .._validation import Batch, prepare
from ..browsing import Cascade, Logarithmic, RBP, ReciprocalRank, TopK, Uniform, BrowsingModel
from ..orderings.base import OrderingLike
from ..orderings import OrderedBatch, Ordering
from ..orderings.hard import HardOrderedBatch
from ._common import finish, order, safe_div

__all__ = ["dcg", "ndcg", "precision", "recall", "mrr", "rbp", "err"]

GainLike = Union[str, Callable[[Tensor], Tensor]]


# ----------------------------------------------------------------------------------------------------- helpers
def _check_k(k: Optional[int]) -> Optional[int]:
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive int or None; got {k!r}")
    return k


def _cut(base: BrowsingModel, k: Optional[int]) -> BrowsingModel:
    return base if k is None else TopK(base, k)


def _gains(b: Batch, gain: GainLike, validate: bool) -> Tensor:
    rel = b.relevance
    if callable(gain):
        g = gain(rel)
        if not isinstance(g, Tensor) or g.shape != rel.shape:
            raise ValueError(f"`gain` callable must return a tensor of the relevance's shape {tuple(rel.shape)}")
        g = g.to(rel.dtype)
        if validate and (not torch.isfinite(g[b.mask]).all() or (g[b.mask] < 0).any()):
            raise ValueError("`gain` callable must return finite, non-negative gains")
    elif gain == "exponential":
        g = torch.pow(2.0, rel) - 1.0
    elif gain == "linear":
        g = rel
    else:
        raise ValueError(f"`gain` must be 'exponential' (2**r - 1), 'linear' (r) or a callable; got {gain!r}")
    return torch.where(b.mask, g, torch.zeros_like(g))


def _nonempty(b: Batch) -> Tensor:
    return b.mask.any(-1)


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"`threshold` must be a finite number; got {threshold!r}")
    return float(threshold)


def _dcg(b: Batch, ob: OrderedBatch, k: Optional[int], gain: GainLike, validate: bool) -> Tensor:
    g = _gains(b, gain, validate)
    e = ob.exposure(_cut(Logarithmic(), k))
    return (g * e).sum(-1)


def _ideal_dcg(b: Batch, k: Optional[int], gain: GainLike, validate: bool) -> Tensor:
    g = _gains(b, gain, validate)  # padded items have gain 0 and sort after every real (non-negative) gain
    ideal = torch.sort(g, dim=-1, descending=True).values
    B, N = g.shape
    w = Logarithmic().weights(N, dtype=g.dtype, device=g.device)
    if k is not None:
        w = w * (torch.arange(N, device=g.device) < k).to(g.dtype)
    return (ideal * w).sum(-1)


# ----------------------------------------------------------------------------------------------------- DCG / NDCG
def dcg(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, gain: GainLike = "exponential",
        mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Discounted cumulative gain at ``k`` (Järvelin & Kekäläinen 2002; Burges et al. 2005 for ``2^r - 1``).

    .. math:: \mathrm{DCG@}k = \sum_i g(r_i)\, \frac{1(\mathrm{pos}_i < k)}{\log_2(\mathrm{pos}_i + 2)}

    The discount is the :class:`~torchfair.browsing.Logarithmic` browsing model applied through the ordering's
    ``exposure``, so a soft ordering makes DCG differentiable.  ``gain``: ``"exponential"`` ``2**r - 1``
    (default), ``"linear"`` ``r`` (sklearn and torchmetrics), or a callable ``[B, N] -> [B, N]`` returning
    non-negative gains.  Shape ``[...]``; invalid (0) only for an empty list.

    Example::

        >>> dcg(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]))   # 1/log2(2) + 1/log2(4)
        tensor(1.5000)
    """
    k = _check_k(k)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    value = _dcg(b, ob, k, gain, validate_args)
    return finish(b, value, _nonempty(b), reduction, return_valid)


def ndcg(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, gain: GainLike = "exponential",
         mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
         return_valid: bool = False, validate_args: bool = True):
    r"""Normalised DCG at ``k``: :func:`dcg` divided by the DCG@k of the ideal ranking (relevance sorted).

    .. math:: \mathrm{NDCG@}k = \frac{\mathrm{DCG@}k(\sigma)}{\mathrm{DCG@}k(\sigma^*)}, \qquad
              \sigma^* = \mathrm{argsort}(-r)

    In ``[0, 1]``.  A list with no relevant item (ideal DCG 0) has no defined NDCG: it is returned as 0 and
    flagged ``False`` in ``valid``, so ``reduction="mean"`` averages over the lists that have a relevant item.
    **Other libraries differ here**: sklearn's ``ndcg_score`` and torchmetrics' ``retrieval_normalized_dcg`` also
    return 0 for such a list but *include* it in their mean (torchmetrics' ``RetrievalNormalizedDCG`` module
    has an ``empty_target_action`` option instead).  Both use linear gains (``gain="linear"`` here) and average
    over tied scores (``ordering=Hard(ties="average")`` here); our default breaks ties by list index.

    Example::

        >>> ndcg(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]))   # 1.5 / (1 + 1/log2(3))
        tensor(0.9197)
    """
    k = _check_k(k)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    value, valid = safe_div(_dcg(b, ob, k, gain, validate_args), _ideal_dcg(b, k, gain, False))
    return finish(b, value, valid & _nonempty(b), reduction, return_valid)


# ----------------------------------------------------------------------------------------------------- set based
def _relevant_in_top(b: Batch, ob: OrderedBatch, k: Optional[int], threshold: float) -> tuple:
    rel = ((b.relevance > threshold) & b.mask).to(b.scores.dtype)
    hits = (rel * ob.exposure(_cut(Uniform(), k))).sum(-1)
    return hits, rel.sum(-1)


def precision(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, threshold: float = 0.0,
              adaptive_k: bool = False, mask: Optional[Tensor] = None, ordering: OrderingLike = None,
              reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Precision at ``k``: the fraction of the top ``k`` positions holding a relevant item (``r > threshold``).

    .. math:: P@k = \frac{1}{k} \sum_i 1(r_i > \theta)\, 1(\mathrm{pos}_i < k)

    The divisor is ``k`` even for a list shorter than ``k`` (the trec_eval convention); ``adaptive_k=True``
    divides by ``min(k, n)`` instead.  ``k=None`` means ``k = n`` (the fraction of relevant items).
    Shape ``[...]``; a list without relevant item has precision 0 (valid); invalid only for an empty list.

    Example::

        >>> precision(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), k=2)
        tensor(0.5000)
    """
    k = _check_k(k)
    threshold = _check_threshold(threshold)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    hits, _ = _relevant_in_top(b, ob, k, threshold)
    n = b.mask.sum(-1).to(hits.dtype)
    den = n if k is None else (torch.clamp(n, max=float(k)) if adaptive_k else torch.full_like(n, float(k)))
    value, valid = safe_div(hits, den * _nonempty(b).to(n.dtype))
    return finish(b, value, valid, reduction, return_valid)


def recall(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, threshold: float = 0.0,
           mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
           return_valid: bool = False, validate_args: bool = True):
    r"""Recall at ``k``: the fraction of the relevant items (``r > threshold``) ranked in the top ``k``.

    .. math:: R@k = \frac{\sum_i 1(r_i > \theta)\, 1(\mathrm{pos}_i < k)}{\sum_i 1(r_i > \theta)}

    Shape ``[...]``; undefined (0, invalid) for a list with no relevant item.

    Example::

        >>> recall(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), k=2)
        tensor(0.5000)
    """
    k = _check_k(k)
    threshold = _check_threshold(threshold)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    hits, n_rel = _relevant_in_top(b, ob, k, threshold)
    value, valid = safe_div(hits, n_rel)
    return finish(b, value, valid, reduction, return_valid)


# ----------------------------------------------------------------------------------------------------- MRR
def _hard_average_rr(ob: HardOrderedBatch, rel: Tensor, k: Optional[int]) -> Tensor:
    """Exact E[1 / (first relevant position + 1)] under ``Hard(ties="average")``.

    The first relevant item lies in the first tie block holding a relevant item (start ``a``, size ``t``,
    ``m`` relevant members); a uniformly random order of the block puts its first relevant member at offset
    ``>= p`` with probability ``C(t - p, m) / C(t, m)``.  Positions ``>= k`` count 0.
    """
    dt = rel.dtype
    B, N = rel.shape
    m_block = torch.zeros_like(rel).scatter_add_(-1, ob.block, rel)  # relevant members per block id
    has = m_block > 0
    big = torch.full_like(ob.block_start, N)
    first = torch.where(has, torch.arange(N, device=rel.device).expand(B, N), big).min(-1).values  # [B]
    anyrel = first < N
    fb = first.clamp(max=N - 1)[:, None]
    a = ob.block_start.gather(-1, fb).to(dt)
    t = ob.block_size.gather(-1, fb)
    m = m_block.gather(-1, fb)
    p = torch.arange(N, device=rel.device, dtype=dt)[None, :]
    lg = torch.lgamma

    def log_choose(n, r):
        return lg(n + 1) - lg(r + 1) - lg((n - r).clamp(min=0) + 1)

    # P(offset = p) = [C(t-p, m) - C(t-p-1, m)] / C(t, m) = C(t-p-1, m-1) / C(t, m), for 0 <= p <= t-m
    ok = p <= (t - m)
    if k is not None:
        ok = ok & ((a + p) < k)
    lp = log_choose((t - p - 1).clamp(min=0), (m - 1).clamp(min=0)) - log_choose(t, m)
    prob = torch.where(ok, torch.exp(torch.where(ok, lp, torch.zeros_like(lp))), torch.zeros_like(lp))
    rr = (prob / (a + p + 1)).sum(-1)
    return torch.where(anyrel, rr, torch.zeros_like(rr))


def mrr(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, threshold: float = 0.0,
        mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Reciprocal rank of the first relevant item (``r > threshold``); its batch mean is MRR.

    .. math:: RR = \max_{i:\, r_i > \theta} \frac{1(\mathrm{pos}_i < k)}{\mathrm{pos}_i + 1}

    Exact for hard orderings, including ``Hard(ties="average")`` (the expectation over the orders of the tie
    block holding the first relevant items).  For other orderings it is the largest *expected* reciprocal rank
    ``max_i E[1 / (pos_i + 1)]`` of a relevant item (through the ordering's exposure under
    :class:`~torchfair.browsing.ReciprocalRank`), a differentiable surrogate that is exact on hard rankings.
    Shape ``[...]``; undefined (0, invalid) for a list with no relevant item.  ``k`` (default ``None``)
    cuts the list: a first relevant item at position ``>= k`` counts 0.

    Example::

        >>> mrr(torch.tensor([3., 2., 1.]), torch.tensor([0., 1., 1.]))
        tensor(0.5000)
    """
    k = _check_k(k)
    threshold = _check_threshold(threshold)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    rel = ((b.relevance > threshold) & b.mask).to(b.scores.dtype)
    valid = rel.sum(-1) > 0
    if isinstance(ob, HardOrderedBatch) and ob.ties == "average":
        value = _hard_average_rr(ob, rel, k)
    else:
        e = ob.exposure(_cut(ReciprocalRank(), k))
        value = (rel * e).max(-1).values
    value = torch.where(valid, value, torch.zeros_like(value))
    return finish(b, value, valid, reduction, return_valid)


# ----------------------------------------------------------------------------------------------------- RBP / ERR
def rbp(scores: Tensor, relevance: Tensor, *, p: float = 0.8, mask: Optional[Tensor] = None,
        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
        validate_args: bool = True):
    r"""Rank-biased precision (Moffat & Zobel 2008) with persistence ``p``.

    .. math:: \mathrm{RBP} = (1 - p) \sum_i p^{\mathrm{pos}_i}\, r_i

    The :class:`~torchfair.browsing.RBP` browsing model through the ordering's exposure.  Relevance is used as the
    gain as it is (binary, or graded in ``[0, 1]`` for values in ``[0, 1]``).  ``p`` defaults to 0.8, Moffat &
    Zobel's usual choice (the DIPS paper's browsing model is ``p = 0.9``).  Shape ``[...]``; invalid (0) only for an
    empty list.

    Example::

        >>> rbp(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), p=0.5)   # 0.5 * (1 + 0.25)
        tensor(0.6250)
    """
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 < p < 1):
        raise ValueError(f"`p` must be a persistence probability in (0, 1); got {p!r}")
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    value = (1.0 - p) * (b.relevance * ob.exposure(RBP(float(p)))).sum(-1)
    return finish(b, value, _nonempty(b), reduction, return_valid)


class _ERRBrowsing(Cascade):
    """ERR's user: stops after an item with probability ``(2**r - 1) / 2**max_grade``; the reward of stopping at
    position k is ``1 / (k + 1)``, carried here as the position part of the weight."""

    def weight(self, k: Tensor) -> Tensor:
        return 1.0 / (k + 1.0)


def err(scores: Tensor, relevance: Tensor, *, max_grade: Optional[float] = None, k: Optional[int] = None,
        mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Expected reciprocal rank (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009).

    .. math:: \mathrm{ERR} = \sum_{k} \frac{1}{k + 1}\, R_{\sigma(k)} \prod_{k' < k} (1 - R_{\sigma(k')}),
              \qquad R = \frac{2^{r} - 1}{2^{g_{\max}}}

    (0-based positions ``k``).  ``max_grade`` is ``g_max``, the largest grade of the relevance scale (e.g. 4 for
    0-4 judgements); ``None`` uses the largest relevance of the inputs (at least 1), which makes values depend on
    the batch: pass it explicitly.  Uses the cascade browsing model, which needs a strict order:
    ``Hard(ties="average")`` raises ``ValueError``.  ``k`` cuts the list.  Shape ``[...]``; invalid (0) only for an
    empty list.

    Example::

        >>> err(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), max_grade=1)   # 1/2 + 1/3 * 1/2 * 1/2
        tensor(0.5833)
    """
    k = _check_k(k)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    if max_grade is None:
        max_grade = max(1.0, float(b.relevance[b.mask].max())) if b.mask.any() else 1.0
    elif isinstance(max_grade, bool) or not isinstance(max_grade, (int, float)) or not (max_grade > 0):
        raise ValueError(f"`max_grade` must be a positive number; got {max_grade!r}")
    if validate_args and (b.relevance[b.mask] > max_grade).any():
        raise ValueError(f"`relevance` exceeds `max_grade`={max_grade}: stop probabilities would exceed 1")
    ob = order(b, ordering)
    F = _cut(_ERRBrowsing(gamma=1.0, max_grade=float(max_grade)), k)
    R = (torch.pow(2.0, b.relevance) - 1.0) / (2.0 ** float(max_grade))
    value = (R * b.mask * ob.exposure(F, b.relevance)).sum(-1)
    return finish(b, value, _nonempty(b), reduction, return_valid)
