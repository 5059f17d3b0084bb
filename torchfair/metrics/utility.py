"""Utility (ranking quality) measures: DCG, NDCG, precision, recall, MRR, AP, R-precision, RBP, ERR; the ideal
ranking and ideal DCG.

Like every measure of the package they are written once against an ordering (:mod:`torchfair.orderings`): an
item's contribution is its gain times its exposure ``E[F(pos_i)]`` under a browsing model, so the default
``ordering=Hard()`` gives the exact values and a soft ordering a differentiable one.  Positions are 0-based.

Common arguments
----------------
scores, relevance : ``[B, N]`` or ``[N]`` float; ``relevance >= 0`` (graded or binary).
k : cut-off (only positions ``0 .. k-1`` count); ``None`` = the whole list.  It is the browsing model truncated
    at ``k`` (:class:`~torchfair.browsing.TopK`); on the real-valued positions of soft orderings the cut-off is
    TopK's linear ramp.  The same keyword, with the same meaning, as every other measure of the package.
mask : ``[B, N]`` bool, True for real items (default: all real).  Padded items are never ranked nor counted.
ordering : an :class:`~torchfair.orderings.Ordering` (default ``Hard()``, ties broken by list index; use
    ``Hard(ties="average")`` for the tie-averaged values of McSherry & Najork) or a precomputed ``OrderedBatch``.
reduction : ``"none"`` (per list, default), ``"mean"`` or ``"sum"`` over the lists where the value is defined.
return_valid : also return the boolean validity mask.
ideal_relevance : (NDCG, recall, MRR, AP, R-precision) ``[B, M]`` or ``[M]`` float, padded with 0: the grades of
    *every* judged item of each list's query, also those the list does not rank (``M`` may differ from ``N``).
    NDCG's ideal ranking, the number of relevant items (recall, AP, R-precision) and whether RR is defined then
    come from all judged items (trec_eval's conventions); ``None`` (default): from the list's own items.
    :func:`torchfair.evaluation.read_trec` gives it from a qrels file, and
    :func:`~torchfair.evaluation.evaluate_lists` passes it on.  It must hold the list's own grades.

trec_eval (Voorhees & Harman, TREC: Experiment and Evaluation in IR, 2005): ``ndcg`` / ``ndcg_cut_k`` is
``ndcg(..., gain="linear", ideal_relevance=...)``, ``P_k`` ``precision(k=k)`` (divisor ``k``), ``recall_k``,
``recip_rank``, ``map`` and ``Rprec`` are :func:`recall`, :func:`mrr`, :func:`average_precision` and
:func:`r_precision` with ``ideal_relevance``; relevant is ``r > threshold``, trec_eval's ``r >= 1`` for integer
grades at the default ``threshold=0``; items in trec_eval's order (``read_trec(ties="docno")``); a query without
relevant item counts 0 (``evaluate_lists(undefined="zero")``).  :data:`torchfair.evaluation.TREC_EVAL` gathers
these options.

Returns: ``value`` of shape ``[B]`` (``[]`` for a single ``[N]`` list or a reduced batch); with
``return_valid=True`` the pair ``(value, valid)`` of that shape.

Stochastic orderings (``Sampled``, ``PlackettLuce``).  DCG, NDCG, precision, recall, RBP and ERR are linear in the
items' expected exposure (ERR's cascade exposure is computed ranking by ranking), so on a mixture of rankings
they *are* the expectation of the measure over the rankings.  MRR is not linear (a maximum over the relevant
items): it is evaluated on every ranking of the mixture and averaged with the mixture's weights, so it is the
expected reciprocal rank as well.  On a relaxed ordering (``SoftRank``, ``NeuralSort``, ``FastSoftRank``) MRR is
a differentiable surrogate (see :func:`mrr`).

Ranges.  The ranges stated for each measure hold exactly for ``Hard``, ``Sampled``, ``DoublyStochastic`` and
``PlackettLuce`` orderings (mixtures of rankings).  Relaxed orderings are smooth approximations and their values
can leave the range: SoftRank evaluates the browsing model at the expected position (``F(E[pos])``, not
``E[F(pos)]``), so precision@k of an all-tied list counts every item in the top ``k`` and NDCG@k can exceed 1.

Large grades.  The exponential gain ``2**r - 1`` overflows float32 at ``r >= 128``.  NDCG and ERR are ratios in
which a common factor ``2**c`` cancels: gains are computed relative to the largest grade of the list (NDCG) or
to ``max_grade`` (ERR), so both are exact for grades up to the dtype's exponent range (~1000 in float32 for
NDCG).  Unnormalised DCG is scaled back by ``2**c``; a DCG above the largest finite value of the dtype, and a
DCG of a list holding a grade whose own gain is not finite in the dtype (``>= 128`` in float32, even ranked past
the cut-off: the gradient would be infinite), is undefined there (0, invalid): use float64 (grades up to ~1000)
or NDCG.

Undefined values (an empty list; NDCG or recall of a list with no relevant item; an overflowing DCG) are 0 and
flagged ``False`` in the validity mask; ``reduction="mean"`` excludes them.  Nothing returns NaN.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Tuple, Union

import torch
from torch import Tensor

from .._validation import Batch, check_number, check_reduction, prepare, require
from ..browsing import Cascade, Logarithmic, RBP, ReciprocalRank, Uniform, BrowsingModel
from ..orderings.base import OrderingLike
from ..orderings import OrderedBatch
from ..orderings.hard import HardOrderedBatch
from .common import (check_bool, check_k, clamp_rounding, cut_browsing, expectation_over_rankings, finish,
                      ideal_sort, order, precise_dtype, safe_div)
from .exposure import _ideal

__all__ = ["dcg", "ndcg", "precision", "recall", "mrr", "average_precision", "r_precision", "rbp", "err", "ideal_dcg",
           "ideal_ranking"]

GainLike = Union[str, Callable[[Tensor], Tensor]]

#: exponential gains are computed as ``2**(r - c)`` with ``c = max(0, max_r - GAIN_EXPONENT_HEADROOM)`` per list
GAIN_EXPONENT_HEADROOM = 64.0


# ----------------------------------------------------------------------------------------------------- helpers
def _cut(base: BrowsingModel, k: Optional[int]) -> BrowsingModel:
    return cut_browsing(base, base, k)


def scaled_gains(b: Batch, gain: GainLike, validate: bool, rmax: Optional[Tensor] = None):
    """Gains ``[B, N]`` divided by ``2**c`` and ``c [B]`` (``c > 0`` only for exponential gains of grades > 64).
    ``rmax [B]``: the largest grade that sets ``c`` (default: the list's own).  Shared with
    :func:`torchfair.losses.lambda_ndcg_loss` (one gain rule for the measure and the loss)."""
    return _gain_values(b.relevance, b.mask, gain, validate, rmax)


def _gain_values(rel: Tensor, mask: Tensor, gain: GainLike, validate: bool, rmax: Optional[Tensor] = None):
    """:func:`scaled_gains` on ``relevance [B, N]`` and ``mask [B, N]``."""
    c = torch.zeros(rel.shape[0], dtype=rel.dtype, device=rel.device)
    if callable(gain):
        g = gain(rel)
        if not isinstance(g, Tensor) or g.shape != rel.shape:
            raise ValueError(f"`gain` callable must return a tensor of the relevance's shape {tuple(rel.shape)}")
        g = g.to(rel.dtype)
        if validate:
            require(lambda: ((torch.isfinite(g) & (g >= 0)) | ~mask).all(),
                    "`gain` callable must return finite, non-negative gains", g.device)
    elif gain == "exponential":
        if rmax is None:
            rmax = torch.where(mask, rel, torch.zeros_like(rel)).amax(-1)
        c = (rmax - GAIN_EXPONENT_HEADROOM).clamp(min=0).detach()
        # 2**r - 1 = 2**c (2**(r - c) - 2**(-c)); exactly 2**r - 1 when c = 0, and expm1(r ln 2) below r = 1,
        # where 2**r - 1 cancels (a relevance of 1e-30 would get gain 0)
        small = rel < 1
        plain = torch.where(small, torch.expm1(torch.where(small, rel, torch.zeros_like(rel)) * math.log(2.0)),
                            torch.pow(2.0, torch.where(small, torch.ones_like(rel), rel)) - 1.0)
        g = torch.where(c[:, None] > 0, torch.exp2(rel - c[:, None]) - torch.exp2(-c[:, None]),
                        torch.where(c[:, None] > 0, torch.zeros_like(rel), plain))
    elif gain == "linear":
        g = rel
    else:
        raise ValueError(f"`gain` must be 'exponential' (2**r - 1), 'linear' (r) or a callable; got {gain!r}")
    return torch.where(mask, g, torch.zeros_like(g)), c


def _nonempty(b: Batch) -> Tensor:
    return b.mask.any(-1)


def _check_threshold(threshold) -> float:
    return check_number(threshold, "threshold")


def _ideal_batch(ideal_relevance: Optional[Tensor], b: Batch, validate: bool) -> Optional[Tensor]:
    """``ideal_relevance`` (``[B, M]``, or ``[M]`` for a single ``[N]`` list; padded with 0) as ``[B, max(M, 1)]``
    in the batch's dtype and device; ``None`` stays ``None``.  With ``validate``: finite, non-negative, and holding
    the list's own grades (:func:`_check_covers`)."""
    if ideal_relevance is None:
        return None
    if not isinstance(ideal_relevance, Tensor):
        raise ValueError(f"`ideal_relevance` must be a torch.Tensor ([B, M] grades of every judged item, padded "
                         f"with 0) or None; got {type(ideal_relevance).__name__}")
    if ideal_relevance.is_complex():
        raise ValueError(f"`ideal_relevance` must be a real tensor; got {ideal_relevance.dtype}")
    x = ideal_relevance
    B = b.scores.shape[0]
    if b.squeeze:
        if x.dim() != 1:
            raise ValueError(f"`ideal_relevance` of a single list ([N] scores) must have shape [M]; got "
                             f"{tuple(x.shape)}")
        x = x.unsqueeze(0)
    elif x.dim() != 2 or x.shape[0] != B:
        raise ValueError(f"`ideal_relevance` must have shape [B, M] = [{B}, M] (the grades of every judged item of "
                         f"each list, padded with 0); got {tuple(x.shape)}")
    x = x.to(device=b.scores.device, dtype=b.scores.dtype)
    if x.shape[1] == 0:  # nothing judged: one zero grade per list
        x = x.new_zeros(B, 1)
    if validate:
        require(lambda: torch.isfinite(x).all(), "`ideal_relevance` must be finite (no NaN or inf)", x.device)
        require(lambda: (x >= 0).all(), "`ideal_relevance` must be non-negative (padded with 0)", x.device)
        _check_covers(b, x)
    return x


def _check_covers(b: Batch, ideal: Tensor) -> None:
    """``ideal`` must hold the grades of the list's own items: its grades sorted in decreasing order dominate the
    list's, position by position (then every ideal DCG and every count of relevant items of the list is at most
    the ideal's, so no NDCG, recall or AP exceeds 1)."""
    rel = b.relevance
    own = torch.where(b.mask, rel, torch.zeros_like(rel))
    N, M = own.shape[1], ideal.shape[1]
    K = min(N, M)  # the list's K largest grades against the ideal's; beyond M the list's grades must be 0

    def ok() -> Tensor:
        top = own.topk(K, -1).values  # sorted, descending
        ide = ideal.sort(-1, descending=True).values[:, :K]
        return (top <= ide).all() & ((own > 0).sum(-1) <= M).all()

    require(ok, "`ideal_relevance` must hold the grades of every judged item of the list, the list's own items "
            "included: a list holds grades that `ideal_relevance` lacks", rel.device)


def _ideal_threshold(threshold: float, ideal: Optional[Tensor]) -> None:
    if ideal is not None and threshold < 0:
        raise ValueError(f"`threshold` must be >= 0 with `ideal_relevance` (padded with 0, and a padding entry "
                         f"must not count as relevant); got {threshold}")


def _judged_setup(scores, relevance, mask, threshold, ideal_relevance, ordering, reduction, validate_args):
    """The checked inputs of the binary-relevance measures (recall, MRR, AP, R-precision): ``(threshold, batch,
    ideal relevance or None, ordered batch)``."""
    threshold = _check_threshold(threshold)
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ideal = _ideal_batch(ideal_relevance, b, validate_args)
    _ideal_threshold(threshold, ideal)
    return threshold, b, ideal, order(b, ordering)


def _n_relevant(rel: Tensor, ideal: Optional[Tensor], threshold: float) -> Tensor:
    """``[B]`` the number of relevant judged items: of ``ideal`` when given, else of the list (``rel``: its
    binary relevance, masked)."""
    return rel.sum(-1) if ideal is None else (ideal > threshold).to(rel.dtype).sum(-1)


def _scale_back(x: Tensor, c: Tensor):
    """``x * 2**c`` and whether it is finite in the dtype (``x >= 0``); 0 with zero gradient where it is not."""
    big = c > 0
    log_max = math.log2(torch.finfo(x.dtype).max)
    pos = x > 0
    lx = torch.log2(torch.where(pos, x, torch.ones_like(x))) + c
    ok = ~big | ~pos | (lx.detach() < log_max)
    scaled = torch.exp2(torch.where(ok & pos, lx, torch.zeros_like(lx)))
    out = torch.where(big, torch.where(pos & ok, scaled, torch.zeros_like(x)), x)
    return out, ok


def _gains_representable(b: Batch, gain: GainLike, grad_dtype: Optional[torch.dtype] = None) -> Tensor:
    """``[B]``: whether every item's gain is finite in the dtype (``2**r - 1`` overflows at ``r >= 128`` in
    float32, ``r >= 1024`` in float64).  Where it is not, the derivative of the unnormalised DCG with respect to
    that item's exposure is not representable (an infinite gradient, NaN once multiplied by a zero slope), wherever
    the item is placed: :func:`dcg` is undefined there (0, invalid, zero gradient).  ``grad_dtype``: the dtype of
    scores that carry a gradient, when it is narrower (float16: the gain must stay below 65504, ``r < 16``: the
    gradient reaches the scores in their own dtype)."""
    if gain != "exponential":
        return torch.ones(b.relevance.shape[0], dtype=torch.bool, device=b.relevance.device)
    log_max = math.log2(torch.finfo(b.relevance.dtype).max)
    if grad_dtype is not None and grad_dtype.is_floating_point:
        log_max = min(log_max, math.log2(torch.finfo(grad_dtype).max))
    return ~((b.relevance.detach() >= log_max) & b.mask).any(-1)


def _dcg(b: Batch, ob: OrderedBatch, k: Optional[int], g: Tensor) -> Tensor:
    """DCG of the ordering with gains ``g`` (already scaled)."""
    e = ob.exposure(_cut(Logarithmic(), k))
    return (g * e).sum(-1)


def ideal_dcg_of_gains(g: Tensor, mask: Tensor, k: Optional[int]) -> Tensor:
    """The one ideal-DCG computation: the DCG of the ranking by decreasing gain (ties by index), ``[B]`` (also
    :func:`torchfair.losses.lambda_ndcg_loss`'s normaliser).

    The ideal ranking and the exposure of its positions come from
    :func:`torchfair.metrics.exposure._ideal` (the ideal-exposure computation), with the DCG discount cut at ``k``:
    ``IDCG = sum_i g_i t_i`` where ``t_i`` is the discount of item i's ideal position (averaged over items of equal
    gain, which leaves the sum unchanged)."""
    return (g * _ideal(g, mask, _cut(Logarithmic(), k))).sum(-1)


def ideal_ranking(relevance: Tensor, *, mask: Optional[Tensor] = None, validate_args: bool = True) -> Tensor:
    r"""The ideal ranking: items by decreasing relevance, ties by list index, padded items last.

    .. math:: \sigma^* = \operatorname{argsort}(-r) \quad (\text{stable})

    ``relevance`` ``[B, N]`` or ``[N]``; returns ``[B, N]`` (``[N]``) long item indices by 0-based position.  The
    one sort behind :func:`ideal_dcg`, :func:`~torchfair.metrics.exposure.ideal_exposure` and ListMLE's target
    ranking (:func:`torchfair.losses.listmle_loss`).

    Example::

        >>> ideal_ranking(torch.tensor([1., 3., 0., 3.]))
        tensor([1, 3, 0, 2])
    """
    b = prepare(relevance, None, None, mask, validate=validate_args, scores_name="relevance")
    if validate_args:
        require(lambda: ((b.scores >= 0) | ~b.mask).all(), "`relevance` must be non-negative", b.scores.device)
    return b.out(ideal_sort(b.scores, b.mask)[1])


def ideal_dcg(relevance: Tensor, *, k: Optional[int] = None, gain: GainLike = "exponential",
              mask: Optional[Tensor] = None, return_valid: bool = False, validate_args: bool = True):
    r"""DCG@k of the ideal ranking (relevance sorted), the normaliser of :func:`ndcg`.

    .. math:: \mathrm{IDCG@}k = \sum_{p < k} \frac{g(r_{\sigma^*(p)})}{\log_2(p + 2)}, \qquad
              \sigma^* = \operatorname{argsort}(-g(r))

    (Järvelin & Kekäläinen, TOIS 2002.)  ``relevance`` ``[B, N]`` or ``[N]``; returns ``[B]`` (``[]``), or
    ``(value, valid)`` with ``return_valid``.  ``gain`` as in :func:`dcg`.  Undefined (0, invalid): an empty list,
    and an ideal DCG above the dtype's largest finite value (exponential gains of grades ``>= 128`` in float32:
    use :func:`ndcg`, which cancels the scale, or float64).

    Example::

        >>> ideal_dcg(torch.tensor([1., 0., 2.]))   # 3 + 1/log2(3)
        tensor(3.6309)
    """
    k = check_k(k)
    b = prepare(relevance, None, None, mask, validate=validate_args, scores_name="relevance")
    if validate_args:
        require(lambda: ((b.scores >= 0) | ~b.mask).all(), "`relevance` must be non-negative", b.scores.device)
    b.relevance = b.scores
    g, c = scaled_gains(b, gain, validate_args)
    value, ok = _scale_back(ideal_dcg_of_gains(g, b.mask, k), c)
    valid = ok & _nonempty(b)
    value, valid = b.out(torch.where(valid, value, torch.zeros_like(value))), b.out(valid)
    return (value, valid) if check_bool(return_valid, "return_valid") else value


# ----------------------------------------------------------------------------------------------------- DCG / NDCG
def dcg(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, gain: GainLike = "exponential",
        mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Discounted cumulative gain at ``k`` (Järvelin & Kekäläinen, TOIS 2002; Burges et al., ICML 2005 for
    ``2^r - 1``).

    .. math:: \mathrm{DCG@}k = \sum_i g(r_i)\, \frac{1(\mathrm{pos}_i < k)}{\log_2(\mathrm{pos}_i + 2)}

    The discount is the :class:`~torchfair.browsing.Logarithmic` browsing model applied through the ordering's
    ``exposure``, so a soft ordering makes DCG differentiable.  ``gain``: ``"exponential"`` ``2**r - 1``
    (default), ``"linear"`` ``r`` (sklearn and torchmetrics), or a callable ``[B, N] -> [B, N]`` returning
    non-negative gains.  Shape ``[B]`` (``[]``); invalid (0, zero gradient) for an empty list, for a DCG that
    overflows the dtype, and for a list holding an item whose exponential gain ``2**r - 1`` overflows the dtype
    (a grade ``>= 128`` in float32, ``>= 1024`` in float64) wherever that item is ranked, past the cut-off
    included: the DCG's derivative with respect to that item's exposure is infinite there, so no finite gradient
    exists (see the module docstring).  Scores in half precision that carry a gradient receive it in their dtype:
    there a gain must stay below its largest value too (float16: grades ``< 16``).  Use float64 or :func:`ndcg`,
    which cancels the scale.

    Example::

        >>> dcg(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]))   # 1/log2(2) + 1/log2(4)
        tensor(1.5000)
    """
    k = check_k(k)
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    g, c = scaled_gains(b, gain, validate_args)
    ob = order(b, ordering)
    value, ok = _scale_back(_dcg(b, ob, k, g), c)
    grad_dtype = scores.dtype if scores.requires_grad and torch.is_grad_enabled() else None
    ok = ok & _gains_representable(b, gain, grad_dtype)
    return finish(b, value, ok & _nonempty(b), reduction, return_valid)


def ndcg(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, gain: GainLike = "exponential",
         ideal_relevance: Optional[Tensor] = None, mask: Optional[Tensor] = None, ordering: OrderingLike = None,
         reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Normalised DCG at ``k``: :func:`dcg` divided by the DCG@k of the ideal ranking (:func:`ideal_dcg`).

    .. math:: \mathrm{NDCG@}k = \frac{\mathrm{DCG@}k(\sigma)}{\mathrm{DCG@}k(\sigma^*)}, \qquad
              \sigma^* = \mathrm{argsort}(-r)

    The ideal ranking sorts the list's own items, or, with ``ideal_relevance`` (``[B, M]``, or ``[M]`` for a single
    list: the grades of *every* judged item of the query, also those the list does not rank, padded with 0; ``M``
    may differ from ``N``), all the judged items: trec_eval's ``ndcg`` / ``ndcg_cut_k`` (Voorhees & Harman, TREC,
    2005; with ``gain="linear"``), which :func:`torchfair.evaluation.read_trec` gives from a qrels file.  A grade-0
    entry of ``ideal_relevance`` adds nothing to the ideal DCG (it is padding), and ``ideal_relevance`` must hold the
    list's own grades (``ValueError`` otherwise), so NDCG stays in ``[0, 1]``.

    In ``[0, 1]``.  A list with no relevant item (ideal DCG 0) has no defined NDCG: it is returned as 0 and
    flagged ``False`` in ``valid``, so ``reduction="mean"`` averages over the lists that have a relevant item
    (trec_eval counts it as 0: ``undefined="zero"`` of :func:`~torchfair.evaluation.evaluate_lists`).
    **Other libraries differ here**: sklearn's ``ndcg_score`` and torchmetrics' ``retrieval_normalized_dcg`` also
    return 0 for such a list but *include* it in their mean (torchmetrics' ``RetrievalNormalizedDCG`` module
    has an ``empty_target_action`` option instead).  Both use linear gains (``gain="linear"`` here) and average
    over tied scores (``ordering=Hard(ties="average")`` here); our default breaks ties by list index.
    Exponential gains are computed relative to the list's largest grade (the factor cancels), so grades up to
    ~1000 are exact in float32.  Shape ``[B]`` (``[]``).

    Example::

        >>> ndcg(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]))   # 1.5 / (1 + 1/log2(3))
        tensor(0.9197)
        >>> # a third judged relevant item the list does not hold: 1.5 / (1 + 1/log2(3) + 1/2)
        >>> ndcg(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), ideal_relevance=torch.tensor([1., 1., 1.]))
        tensor(0.7039)
    """
    k = check_k(k)
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ideal = _ideal_batch(ideal_relevance, b, validate_args)
    if ideal is None:
        g, _ = scaled_gains(b, gain, validate_args)
        idcg = ideal_dcg_of_gains(g, b.mask, k)
    else:  # one scale 2**c for the list's and the ideal's exponential gains (it cancels in the ratio)
        imask = ideal > 0
        rmax = torch.maximum(torch.where(b.mask, b.relevance, torch.zeros_like(b.relevance)).amax(-1),
                             ideal.amax(-1))
        g, _ = scaled_gains(b, gain, validate_args, rmax)
        gi, _ = _gain_values(ideal, imask, gain, validate_args, rmax)
        idcg = ideal_dcg_of_gains(gi, imask, k)
    ob = order(b, ordering)
    value, valid = safe_div(_dcg(b, ob, k, g), idcg)
    value = clamp_rounding(value, 0.0, 1.0)
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
    Shape ``[B]`` (``[]``), in ``[0, 1]``; a list without relevant item has precision 0 (valid); invalid only for
    an empty list.

    Example::

        >>> precision(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), k=2)
        tensor(0.5000)
    """
    k = check_k(k)
    threshold = _check_threshold(threshold)
    check_bool(adaptive_k, "adaptive_k")
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    hits, _ = _relevant_in_top(b, ob, k, threshold)
    n = b.mask.sum(-1).to(hits.dtype)
    den = n if k is None else (torch.clamp(n, max=float(k)) if adaptive_k else torch.full_like(n, float(k)))
    value, valid = safe_div(hits, den * _nonempty(b).to(n.dtype))
    return finish(b, clamp_rounding(value, 0.0, 1.0), valid, reduction, return_valid)


def recall(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, threshold: float = 0.0,
           ideal_relevance: Optional[Tensor] = None, mask: Optional[Tensor] = None, ordering: OrderingLike = None,
           reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Recall at ``k``: the fraction of the relevant items (``r > threshold``) ranked in the top ``k``.

    .. math:: R@k = \frac{\sum_i 1(r_i > \theta)\, 1(\mathrm{pos}_i < k)}{|\{j \text{ judged}: r_j > \theta\}|}

    The denominator counts the list's relevant items, or, with ``ideal_relevance`` (``[B, M]`` / ``[M]``, the grades
    of every judged item of the query padded with 0, as in :func:`ndcg`), all the relevant judged items, also
    those the list does not rank: trec_eval's ``recall_k`` (Voorhees & Harman, TREC, 2005), where ``recall@100`` of a
    100-item list is below 1 when relevant items were missed.  Relevant is ``r > threshold``: for the integer grades
    of a qrels file, ``threshold=0`` is trec_eval's ``r >= 1`` (its relevance level 1).  Shape ``[B]`` (``[]``), in
    ``[0, 1]``; undefined (0, invalid) without a relevant (judged) item.

    Example::

        >>> recall(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), k=2)
        tensor(0.5000)
        >>> recall(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), k=2,
        ...        ideal_relevance=torch.tensor([1., 1., 2., 0.]))   # 1 of the 3 relevant judged items
        tensor(0.3333)
    """
    k = check_k(k)
    threshold, b, ideal, ob = _judged_setup(scores, relevance, mask, threshold, ideal_relevance, ordering,
                                            reduction, validate_args)
    hits, n_rel = _relevant_in_top(b, ob, k, threshold)
    if ideal is not None:
        n_rel = (ideal > threshold).to(hits.dtype).sum(-1)
    value, valid = safe_div(hits, n_rel)
    return finish(b, clamp_rounding(value, 0.0, 1.0), valid, reduction, return_valid)


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


def _reciprocal_rank(ob: OrderedBatch, rel: Tensor, k: Optional[int]) -> Tensor:
    """Reciprocal rank of the first relevant item on one (non-mixture) ordered batch, ``[B]``."""
    if isinstance(ob, HardOrderedBatch) and ob.ties == "average":
        return _hard_average_rr(ob, rel, k)
    e = ob.exposure(_cut(ReciprocalRank(), k))
    return (rel * e).max(-1).values


def mrr(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, threshold: float = 0.0,
        ideal_relevance: Optional[Tensor] = None, mask: Optional[Tensor] = None, ordering: OrderingLike = None,
        reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Reciprocal rank of the first relevant item (``r > threshold``); its batch mean is MRR (Voorhees, TREC-8
    QA track 1999).

    .. math:: RR = \max_{i:\, r_i > \theta} \frac{1(\mathrm{pos}_i < k)}{\mathrm{pos}_i + 1}

    Exact for hard orderings, including ``Hard(ties="average")`` (the expectation over the orders of the tie
    block holding the first relevant items), and the expectation ``E[RR]`` over the rankings of a mixture ordering
    (``Sampled``, ``PlackettLuce``: RR evaluated on each ranking, averaged with the mixture's weights; a
    Plackett-Luce policy gets the score-function gradient).  For other orderings (relaxed ones: ``SoftRank``,
    ``NeuralSort``, ``FastSoftRank``; ``DoublyStochastic``) it is the largest *expected* reciprocal rank
    ``max_i E[1 / (pos_i + 1)]`` of a relevant item (through the ordering's exposure under
    :class:`~torchfair.browsing.ReciprocalRank`), a differentiable surrogate that is exact on hard rankings.  ``k``
    cuts the list: a first relevant item at position ``>= k`` counts 0.  Shape ``[B]`` (``[]``), in ``[0, 1]``;
    undefined (0, invalid) for a list with no relevant item.  With ``ideal_relevance`` (``[B, M]`` / ``[M]``, the
    grades of every judged item of the query padded with 0, as in :func:`ndcg`) it is defined whenever a judged
    item is relevant, and 0 when the list ranks none of them: trec_eval's ``recip_rank`` (Voorhees & Harman, TREC,
    2005).

    Example::

        >>> mrr(torch.tensor([3., 2., 1.]), torch.tensor([0., 1., 1.]))
        tensor(0.5000)
        >>> mrr(torch.tensor([3., 2.]), torch.tensor([0., 0.]), ideal_relevance=torch.tensor([1.]),
        ...     return_valid=True)   # the relevant judged item is not in the list
        (tensor(0.), tensor(True))
    """
    k = check_k(k)
    threshold, b, ideal, ob = _judged_setup(scores, relevance, mask, threshold, ideal_relevance, ordering,
                                            reduction, validate_args)
    rel = ((b.relevance > threshold) & b.mask).to(b.scores.dtype)
    valid = _n_relevant(rel, ideal, threshold) > 0
    value = expectation_over_rankings(ob, lambda inner, S: _reciprocal_rank(inner, rel.repeat(S, 1), k))
    value = clamp_rounding(value, 0.0, 1.0)
    return finish(b, value, valid, reduction, return_valid)


# ----------------------------------------------------------------------------------------------------- AP / R-precision
def _hard_item_blocks(ob: HardOrderedBatch, dt: torch.dtype) -> Tuple[Tensor, Tensor]:
    """``(a, t)`` ``[B, N]``: the first position and the size of each item's tie block (``Hard(ties="first")``:
    its position and 1)."""
    a = ob.block_start.gather(-1, ob.block).long()
    t = ob.block_size.gather(-1, ob.block).to(dt)
    return a, t


def _hard_precision_sum(ob: HardOrderedBatch, rel: Tensor, k: Optional[int]) -> Tensor:
    """Exact ``E[sum_{i relevant, pos_i < k} (1 + #relevant above i) / (pos_i + 1)]`` ``[B]`` on a hard ordering,
    ties first or averaged over the orders of every tie block (McSherry & Najork, ECIR 2008).

    An item of a block starting at ``a`` of size ``t`` holds each of its positions ``a + p`` with probability
    ``1/t``; a tied relevant partner is above it with probability ``p / (t - 1)`` there.  With
    ``w(q) = 1(q < k) / (q + 1)``: ``E[w] = H1 = sum_p w(a + p) / t`` and ``E[w 1(partner above)] = H2 =
    sum_p p w(a + p) / (t (t - 1))``; an item adds ``(1 + relevant in earlier blocks) H1 + (relevant tied
    partners) H2``.  Prefix sums in float64 (harmonic sums over long lists lose float32 digits)."""
    B, N = rel.shape
    pdt = precise_dtype(rel.device, rel.dtype)
    q = torch.arange(N, device=rel.device, dtype=pdt)
    w = 1.0 / (q + 1.0)
    if k is not None:
        w = w * (q < k).to(pdt)
    zero = torch.zeros(1, device=rel.device, dtype=pdt)
    S1 = torch.cat([zero, torch.cumsum(w, 0)])
    S2 = torch.cat([zero, torch.cumsum(q * w, 0)])
    a, t = _hard_item_blocks(ob, pdt)
    e = a + t.long()
    s1 = S1[e] - S1[a]
    s2 = S2[e] - S2[a]
    h1 = s1 / t.clamp(min=1)
    h2 = (s2 - a.to(pdt) * s1) / (t * (t - 1)).clamp(min=1)
    r = rel.to(pdt)
    C = torch.cat([torch.zeros(B, 1, device=rel.device, dtype=pdt), torch.cumsum(r.gather(-1, ob.order), -1)], -1)
    before = C.gather(-1, a)
    tied = C.gather(-1, e) - before - r  # relevant partners in the item's block
    return (r * ((before + 1.0) * h1 + tied * h2)).sum(-1).to(rel.dtype)


def _precision_sum(ob: OrderedBatch, rel: Tensor, k: Optional[int]) -> Tensor:
    """``E[sum_{i relevant, pos_i < k} (1 + #relevant above i) / (pos_i + 1)]`` ``[B]`` on one (non-mixture)
    ordered batch: exact for hard orderings (:func:`_hard_precision_sum`); otherwise from the ordering's position
    matrix ``P[l, i] = P(pos_i = l)``, taking the relevant mass above position ``l`` as independent of item i's
    position, ``sum_i r_i sum_l w(l) P[l, i] (1 + sum_{j != i} r_j sum_{q < l} P[q, j])``: exact on rankings, a
    differentiable surrogate on relaxed and doubly stochastic orderings (which give no pair probabilities)."""
    if isinstance(ob, HardOrderedBatch):
        return _hard_precision_sum(ob, rel, k)
    P = ob.position_matrix()  # [B, position, item]
    r = rel.to(P.dtype)
    N = r.shape[-1]
    q = torch.arange(N, device=r.device, dtype=P.dtype)
    w = 1.0 / (q + 1.0)
    if k is not None:
        w = w * (q < k).to(P.dtype)
    above_all = torch.cumsum(P, 1) - P  # [B, l, j]: P(pos_j < l)
    mass = torch.einsum("blj,bj->bl", above_all, r)  # relevant mass above position l
    own = torch.einsum("bli,bli,l,bi->b", P, above_all, w, r)  # item i's own mass above its position (j = i)
    return (torch.einsum("bli,l,bl,bi->b", P, w, 1.0 + mass, r) - own).to(rel.dtype)


def _hits_within(ob: OrderedBatch, rel: Tensor, R: Tensor) -> Tensor:
    """``E[#relevant items at positions < R_b]`` ``[B]`` on one (non-mixture) ordered batch (exact for hard
    orderings, ties averaged over each block; otherwise from the ordering's position matrix)."""
    if isinstance(ob, HardOrderedBatch):
        a, t = _hard_item_blocks(ob, rel.dtype)
        inside = (R[:, None] - a.to(rel.dtype)).clamp(min=0)
        return (rel * torch.minimum(inside, t) / t.clamp(min=1)).sum(-1)
    P = ob.position_matrix()  # [B, position, item]
    N = rel.shape[-1]
    cut = (torch.arange(N, device=rel.device, dtype=rel.dtype)[None, :] < R[:, None]).to(P.dtype)
    return torch.einsum("bk,bki,bi->b", cut, P, rel.to(P.dtype)).to(rel.dtype)


def average_precision(scores: Tensor, relevance: Tensor, *, k: Optional[int] = None, threshold: float = 0.0,
                      ideal_relevance: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                      ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
                      validate_args: bool = True):
    r"""Average precision: the mean, over the relevant judged items, of the precision at the rank of each one
    ranked in the top ``k`` (0 for one not ranked); its batch mean is MAP (Manning, Raghavan & Schütze,
    Introduction to IR, 2008, ch. 8.4; trec_eval's ``map`` / ``map_cut_k``, Voorhees & Harman, TREC, 2005).

    .. math:: \mathrm{AP@}k = \frac{1}{R} \sum_{i:\, r_i > \theta,\ \mathrm{pos}_i < k}
              \frac{|\{j: r_j > \theta,\ \mathrm{pos}_j \le \mathrm{pos}_i\}|}{\mathrm{pos}_i + 1}

    ``R`` is the number of relevant items of the list, or, with ``ideal_relevance`` (``[B, M]`` / ``[M]``: the grades
    of every judged item of the query padded with 0, as in :func:`ndcg`), of all judged items, also those the
    list does not rank (trec_eval's denominator).  Relevant is ``r > threshold`` (``threshold=0`` is trec_eval's
    ``r >= 1`` on integer grades).  Exact for hard orderings, also ``Hard(ties="average")`` (the mean over the
    orders of every tie block), and the expectation over the rankings of a mixture ordering (``Sampled``,
    ``PlackettLuce``); on other orderings a differentiable surrogate from the ordering's position matrix, exact on
    hard rankings.  Shape ``[B]`` (``[]``), in ``[0, 1]``; undefined (0, invalid)
    without a relevant (judged) item.

    Example::

        >>> s, r = torch.tensor([4., 3., 2., 1.]), torch.tensor([1., 0., 1., 0.])
        >>> average_precision(s, r)   # (1/1 + 2/3) / 2
        tensor(0.8333)
        >>> average_precision(s, r, ideal_relevance=torch.tensor([1., 1., 1.]))   # a third relevant item unranked
        tensor(0.5556)
    """
    k = check_k(k)
    threshold, b, ideal, ob = _judged_setup(scores, relevance, mask, threshold, ideal_relevance, ordering,
                                            reduction, validate_args)
    rel = ((b.relevance > threshold) & b.mask).to(b.scores.dtype)
    total = expectation_over_rankings(ob, lambda inner, S: _precision_sum(inner, rel.repeat(S, 1), k))
    value, valid = safe_div(total, _n_relevant(rel, ideal, threshold))
    return finish(b, clamp_rounding(value, 0.0, 1.0), valid & _nonempty(b), reduction, return_valid)


def r_precision(scores: Tensor, relevance: Tensor, *, threshold: float = 0.0,
                ideal_relevance: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
                validate_args: bool = True):
    r"""R-precision: the precision at ``R``, the number of relevant judged items (Manning, Raghavan & Schütze,
    Introduction to IR, 2008, ch. 8.4; trec_eval's ``Rprec``, Voorhees & Harman, TREC, 2005).

    .. math:: \mathrm{R\text{-}prec} = \frac{1}{R} \sum_i 1(r_i > \theta)\, 1(\mathrm{pos}_i < R)

    ``R`` counts the relevant items of the list, or, with ``ideal_relevance`` (``[B, M]`` / ``[M]``, the grades of
    every judged item of the query padded with 0, as in :func:`ndcg`), all relevant judged items; the divisor is
    ``R`` even for a list shorter than ``R`` (trec_eval).  Relevant is ``r > threshold``.  Exact for hard orderings
    (``Hard(ties="average")``: the mean over tie orders), the expectation over a mixture's rankings, and the
    position-matrix expectation on other orderings.  Without ``ideal_relevance`` it equals recall@R.  Shape ``[B]``
    (``[]``), in ``[0, 1]``; undefined (0, invalid) without a relevant (judged) item.

    Example::

        >>> s, r = torch.tensor([4., 3., 2., 1.]), torch.tensor([1., 0., 1., 0.])
        >>> r_precision(s, r, ideal_relevance=torch.tensor([1., 1., 1.]))   # R = 3: 2 relevant in the top 3
        tensor(0.6667)
    """
    threshold, b, ideal, ob = _judged_setup(scores, relevance, mask, threshold, ideal_relevance, ordering,
                                            reduction, validate_args)
    rel = ((b.relevance > threshold) & b.mask).to(b.scores.dtype)
    R = _n_relevant(rel, ideal, threshold)
    hits = expectation_over_rankings(ob, lambda inner, S: _hits_within(inner, rel.repeat(S, 1), R.repeat(S)))
    value, valid = safe_div(hits, R)
    return finish(b, clamp_rounding(value, 0.0, 1.0), valid & _nonempty(b), reduction, return_valid)


# ----------------------------------------------------------------------------------------------------- RBP / ERR
def rbp(scores: Tensor, relevance: Tensor, *, p: float = 0.8, k: Optional[int] = None,
        mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Rank-biased precision (Moffat & Zobel, TOIS 2008) with persistence ``p``.

    .. math:: \mathrm{RBP@}k = (1 - p) \sum_i p^{\mathrm{pos}_i}\, 1(\mathrm{pos}_i < k)\, r_i

    The :class:`~torchfair.browsing.RBP` browsing model (truncated at ``k``) through the ordering's exposure.
    Relevance is used as the gain as it is (binary, or graded in ``[0, 1]`` for values in ``[0, 1]``).  ``p``
    defaults to 0.8, Moffat & Zobel's usual choice (the DIPS paper's browsing model is ``p = 0.9``).  Shape
    ``[B]`` (``[]``), in ``[0, max r]``; invalid (0) only for an empty list.

    Example::

        >>> rbp(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), p=0.5)   # 0.5 * (1 + 0.25)
        tensor(0.6250)
    """
    p = check_number(p, "p", low=0.0, high=1.0, low_open=True, high_open=True)
    k = check_k(k)
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    value = (1.0 - p) * (b.relevance * ob.exposure(_cut(RBP(p), k))).sum(-1)
    return finish(b, value, _nonempty(b), reduction, return_valid)


class _ERRBrowsing(Cascade):
    """ERR's user: stops after an item with probability ``(2**r - 1) / 2**max_grade``; the reward of stopping at
    position k is ``1 / (k + 1)``, carried here as the position part of the weight.  ``max_grade`` is a number or
    a 0-dim tensor (the batch's largest grade, read without host synchronisation)."""

    def __init__(self, max_grade):
        super().__init__(gamma=1.0)
        self.max_grade = max_grade

    def weight(self, k: Tensor) -> Tensor:
        return 1.0 / (k + 1.0)

    def stop_probability(self, relevance: Tensor) -> Tensor:
        return _err_stop(relevance, self.max_grade)


def _err_stop(relevance: Tensor, max_grade: float) -> Tensor:
    """``(2**r - 1) / 2**g`` computed as ``2**(r - g) - 2**(-g)``: no overflow for any grade ``r <= g``.

    Grades above ``g`` count as ``g`` (stop probability 1): relaxed orderings sort relevance softly, and a softly
    sorted grade may exceed the largest one."""
    g = torch.as_tensor(max_grade, dtype=relevance.dtype, device=relevance.device)
    small = relevance < 1  # 2**r - 1 cancels for tiny r: 2**(-g) expm1(r ln 2) there
    tiny = torch.exp2(-g) * torch.expm1(torch.where(small, relevance, torch.zeros_like(relevance)) * math.log(2.0))
    return torch.where(small, tiny, torch.exp2((relevance - g).clamp(max=0)) - torch.exp2(-g))


def _hard_average_err(ob: HardOrderedBatch, R: Tensor, k: Optional[int]) -> Tensor:
    """Exact ``E[ERR]`` under ``Hard(ties="average")``: the mean over all orders of the tied items, ``[B]``.

    A tie block of size ``t`` starting at position ``a`` is reached with the survival probability ``S`` of the
    blocks above it (a product, whatever their order).  In a uniformly random order of the block the first ``p``
    members all let the user continue with probability ``m_p = e_p(x) / C(t, p)`` (``x = 1 - R``, ``e_p`` the
    elementary symmetric polynomial), so the member at offset ``p`` stops the user with probability
    ``m_p - m_{p+1}`` and the block adds ``S sum_p (m_p - m_{p+1}) / (a + p + 1)``.  ``m`` is built member by member
    with the convex update ``m'_p = ((n + 1 - p) m_p + p x m_{p-1}) / (n + 1)`` (no cancellation), one position of
    every list per step: ``O(N T)`` per list for blocks of size at most ``T``.
    """
    B, N = R.shape
    dt = R.dtype
    dev = R.device
    x = 1.0 - R.gather(-1, ob.order)  # by position; padded positions have R = 0
    a = ob.block_start.gather(-1, ob.block_sorted)  # [B, N] start of the block holding position k
    t = ob.block_size.gather(-1, ob.block_sorted).long()
    pos = torch.arange(N, device=dev)
    w = torch.where(pos[None, :] < ob.n_items[:, None], 1.0 / (pos + 1.0).to(dt)[None, :], torch.zeros((), dtype=dt,
                                                                                                     device=dev))
    if k is not None:
        w = w * (pos < k).to(dt)[None, :]
    T = int(t.max())
    p = torch.arange(T + 1, device=dev, dtype=dt)
    e0 = (p == 0).to(dt).expand(B, T + 1)
    m = e0.clone()
    S = torch.ones(B, dtype=dt, device=dev)
    stop = torch.zeros(B, T, dtype=dt, device=dev)  # w at the offsets of the current block
    out = torch.zeros(B, dtype=dt, device=dev)
    for kk in range(N):
        first = (a[:, kk] == kk)[:, None]
        m = torch.where(first, e0, m)
        stop = torch.where(first, torch.zeros_like(stop), stop)
        n = (kk - a[:, kk]).to(dt)[:, None]  # members already in the block
        m_prev = torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], -1)
        m = ((n + 1 - p).clamp(min=0) * m + p * x[:, kk, None] * m_prev) / (n + 1)
        off = (kk - a[:, kk]).clamp(max=T - 1)
        stop = stop.scatter(-1, off[:, None], w[:, kk, None])
        last = kk == a[:, kk] + t[:, kk] - 1
        gain = (stop * (m[:, :-1] - m[:, 1:])).sum(-1)
        tb = t[:, kk].clamp(max=T)
        out = torch.where(last, out + S * gain, out)
        S = torch.where(last, S * m.gather(-1, tb[:, None])[:, 0], S)
    return out


def err(scores: Tensor, relevance: Tensor, *, max_grade: Optional[float] = None, k: Optional[int] = None,
        mask: Optional[Tensor] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Expected reciprocal rank (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009).

    .. math:: \mathrm{ERR} = \sum_{k} \frac{1}{k + 1}\, R_{\sigma(k)} \prod_{k' < k} (1 - R_{\sigma(k')}),
              \qquad R = \frac{2^{r} - 1}{2^{g_{\max}}}

    (0-based positions ``k``; ``R`` computed as ``2^(r - g_max) - 2^(-g_max)``, which never overflows).
    ``max_grade`` is ``g_max``, the largest grade of the relevance scale (e.g. 4 for 0-4 judgements); ``None``
    uses the largest relevance of the inputs (at least 1), which makes values depend on the batch: pass it
    explicitly.  Uses the cascade browsing model; under ``Hard(ties="average")`` the value is the exact mean over
    all orders of the tied items (McSherry & Najork, ECIR 2008).  On a mixture ordering (``Sampled``,
    ``PlackettLuce``) the cascade is followed ranking by ranking, so the value is the expected ERR.  ``k`` cuts the
    list.  Shape ``[B]`` (``[]``), in ``[0, 1]``; invalid (0) only for an empty list.

    Example::

        >>> err(torch.tensor([3., 2., 1.]), torch.tensor([1., 0., 1.]), max_grade=1)   # 1/2 + 1/3 * 1/2 * 1/2
        tensor(0.5833)
    """
    k = check_k(k)
    check_reduction(reduction)
    if max_grade is not None:
        max_grade = check_number(max_grade, "max_grade", low=0.0, low_open=True)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    if max_grade is None:  # the batch's largest grade (at least 1), kept as a tensor: no host synchronisation
        zero = torch.zeros((), dtype=b.relevance.dtype, device=b.relevance.device)
        max_grade = torch.where(b.mask, b.relevance, zero).amax().clamp(min=1.0).detach()
    elif validate_args:
        mg = max_grade
        require(lambda: ((b.relevance <= mg) | ~b.mask).all(),
                f"`relevance` exceeds `max_grade`={max_grade}: stop probabilities would exceed 1", b.scores.device)
    ob = order(b, ordering)
    R = _err_stop(b.relevance, max_grade) * b.mask
    if isinstance(ob, HardOrderedBatch) and ob.ties == "average":
        value = _hard_average_err(ob, R, k)
    else:
        F = _cut(_ERRBrowsing(max_grade), k)
        value = (R * ob.exposure(F, b.relevance)).sum(-1)
    value = clamp_rounding(value, 0.0, 1.0)
    return finish(b, value, _nonempty(b), reduction, return_valid)
