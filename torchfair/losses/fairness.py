"""Fairness losses: the exact measures of :mod:`torchfair.metrics` evaluated on a differentiable ordering and
reduced to a scalar.  Nothing here re-implements a measure; each loss picks a measure, an ordering and a reduction.

Default ordering: ``SoftRank(temperature=0.1)`` (pairwise sigmoid with the temperature scaled by each list's
score standard deviation).  Pass ``ordering=PlackettLuce(...)`` to train a stochastic ranking policy, or any other
ordering from :mod:`torchfair.orderings`.

Lists on which the measure is undefined (a group absent, no pair of the needed kind) contribute 0 and are excluded
from ``reduction="mean"``: a batch full of such lists gives a loss of exactly 0 with zero gradient, never NaN.

Baselines users compare against live here too: DELTR (Zehlike & Castillo, WWW 2020), Fair-PG-Rank's group
disparity (Singh & Joachims, NeurIPS 2019) and Beutel et al.'s pairwise-correlation regulariser (KDD 2019).
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor, nn

from .._validation import prepare
from ..browsing import BrowsingModel, Logarithmic, get_browsing
from ..metrics import accuracy_gaps, dips, pairwise_accuracy
from ..metrics.exposure import expected_exposure, exposure_misallocation
from ..orderings.base import OrderingLike
from ..orderings import OrderedBatch, Ordering, PlackettLuce, SoftRank, top1_probability
from ..metrics._common import order, safe_div

__all__ = ["dips_loss", "exposure_misallocation_loss", "pairwise_accuracy_gap_loss", "deltr_loss",
           "fair_pg_rank_loss", "pairwise_correlation_loss", "DIPSLoss", "ExposureMisallocationLoss",
           "PairwiseAccuracyGapLoss", "DELTRLoss", "FairPGRankLoss", "PairwiseCorrelationLoss", "reduce_loss"]



def _default(ordering: OrderingLike) -> Union[Ordering, OrderedBatch]:
    return SoftRank(temperature=0.1) if ordering is None else ordering


def reduce_loss(per_list: Tensor, valid: Tensor, reduction: str = "mean") -> Tensor:
    """Reduce per-list losses ``[B]`` over the valid lists: ``"mean"`` (0 when none is valid), ``"sum"`` or ``"none"``."""
    per_list = torch.where(valid, per_list, torch.zeros_like(per_list))
    if reduction == "none":
        return per_list
    if reduction == "sum":
        return per_list.sum()
    if reduction == "mean":
        return per_list.sum() / valid.sum().clamp(min=1).to(per_list.dtype)
    raise ValueError(f"`reduction` must be 'mean', 'sum' or 'none'; got {reduction!r}")


def _batched(x: Tensor, scores: Tensor) -> Tensor:
    return x.unsqueeze(0) if scores.dim() == 1 else x


def _real_lists(scores: Tensor, mask: Optional[Tensor]) -> Tensor:
    """``[B]`` lists with at least one real item."""
    m = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    return _batched(m, scores).any(-1)


def _groups_present(groups: Tensor, scores: Tensor, mask: Optional[Tensor], G: int) -> Tensor:
    """``[B]`` number of groups with at least one real item (soft membership: positive total membership)."""
    b = prepare(scores, None, groups, mask, num_groups=G if not groups.is_floating_point() else None,
                validate=False)
    return (b.membership.sum(1) > 0).sum(-1)


def _gap_reduce(M: Tensor, valid: Tensor, mode: str, protected: Optional[int], name: str):
    """Per-list reduction of a ``[B, G, G]`` dissatisfaction/accuracy matrix to one number."""
    gap = M - M.transpose(-1, -2)  # [B, G, G]
    pair_valid = valid & valid.transpose(-1, -2)
    G = M.shape[-1]
    off = ~torch.eye(G, dtype=torch.bool, device=M.device)
    pair_valid = pair_valid & off
    if mode == "one_sided":
        if protected is None or not (0 <= protected < G):
            raise ValueError(f"`protected` must be a group id in [0, {G}) for mode='one_sided'; got {protected!r}")
        g = torch.relu(gap[:, protected, :])  # protected dissatisfied by h more than h by protected
        v = pair_valid[:, protected, :]
        per = torch.where(v, g, torch.zeros_like(g)).amax(-1)
        return per, v.any(-1)
    if mode == "abs":
        val = gap.abs()
    elif mode == "square":
        val = gap ** 2
    else:
        raise ValueError(f"`mode` must be 'abs', 'square' or 'one_sided'; got {mode!r}")
    per = torch.where(pair_valid, val, torch.zeros_like(val)).flatten(1).amax(-1)
    return per, pair_valid.flatten(1).any(-1)


def dips_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, mode: str = "abs",
              protected: Optional[int] = None, browsing: Union[BrowsingModel, str, None] = None,
              tie_weight: float = 0.5, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
              ordering: OrderingLike = None, reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """DIPS loss: :func:`torchfair.metrics.dips` on a differentiable ordering, reduced to a scalar.

    ``mode="abs"``: ``|M_AB - M_BA|`` (for more than two groups the largest ``|M_gh - M_hg|``); ``"square"``: its
    square; ``"one_sided"``: ``max_h relu(M_ph - M_hp)`` protecting group ``protected`` only.  See
    :func:`torchfair.metrics.dips` for the measure (``000`` eq. 11) and the other arguments.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> loss = dips_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2)
        >>> loss.backward()
    """
    M, valid = dips(scores, relevance, groups, browsing=browsing, tie_weight=tie_weight, mask=mask,
                    num_groups=num_groups, ordering=_default(ordering), return_valid=True,
                    validate_args=validate_args)
    per, v = _gap_reduce(_batched(M, scores), _batched(valid, scores), mode, protected, "dips")
    return reduce_loss(per, v, reduction)


def exposure_misallocation_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, target: str = "ee",
                                norm: str = "l1", browsing: Union[BrowsingModel, str, None] = None,
                                mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                                ordering: OrderingLike = None, reduction: str = "mean",
                                validate_args: bool = True) -> Tensor:
    """Exposure misallocation loss: ``||delta||_1`` (``norm="l1"``) or ``||delta||_2^2`` (``"l2sq"``) of
    :func:`torchfair.metrics.exposure.exposure_misallocation` (``000`` eq. 12-16, targets ``"ee"``, ``"ea"``,
    ``"ea-dp"``), or the expected-exposure loss EE-L (``norm="ee-l"``, ``002`` eq. 5, group version) on a
    differentiable ordering.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> exposure_misallocation_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2).backward()
    """
    ordering = _default(ordering)
    if norm == "ee-l":
        ee = expected_exposure(scores, relevance, groups, browsing=browsing, mask=mask, num_groups=num_groups,
                               ordering=ordering, validate_args=validate_args)
        per = _batched(ee.loss, scores)
        return reduce_loss(per, _real_lists(scores, mask), reduction)
    delta, valid = exposure_misallocation(scores, relevance, groups, target=target, browsing=browsing, mask=mask,
                                          num_groups=num_groups, ordering=ordering, return_valid=True,
                                          validate_args=validate_args)
    delta, valid = _batched(delta, scores), _batched(valid, scores)
    if valid.dim() == delta.dim():  # per-group validity
        valid = valid.all(-1)
    # a list with fewer than two groups has delta = 0 whatever the ranking: nothing to train, excluded from the mean
    valid = valid & (_groups_present(groups, scores, mask, delta.shape[-1]) >= 2)
    if norm == "l1":
        per = delta.abs().sum(-1)
    elif norm == "l2sq":
        per = (delta ** 2).sum(-1)
    else:
        raise ValueError(f"`norm` must be 'l1', 'l2sq' or 'ee-l'; got {norm!r}")
    return reduce_loss(per, valid, reduction)


def pairwise_accuracy_gap_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, which: str = "inter",
                               protected: int = 1, reference: int = 0, mask: Optional[Tensor] = None,
                               num_groups: Optional[int] = None, ordering: OrderingLike = None,
                               reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """Pairwise accuracy gap loss: ``|InterAcc|``, ``|IntraAcc|`` or their sum (``which="both"``) of
    :func:`torchfair.metrics.pairwise_accuracy` (``002`` eq. 11, §2.5; Beutel et al. 2019, Narasimhan et al.
    2020) on a differentiable ordering.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> pairwise_accuracy_gap_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2).backward()
    """
    if which not in ("inter", "intra", "both"):
        raise ValueError(f"`which` must be 'inter', 'intra' or 'both'; got {which!r}")
    A, valid = pairwise_accuracy(scores, relevance, groups, mask=mask, num_groups=num_groups,
                                 ordering=_default(ordering), return_valid=True, validate_args=validate_args)
    A, valid = _batched(A, scores), _batched(valid, scores)
    inter, intra = accuracy_gaps(A, protected, reference)
    p, r = protected, reference
    v_inter = valid[:, r, p] & valid[:, p, r]
    v_intra = valid[:, r, r] & valid[:, p, p]
    if which == "inter":
        return reduce_loss(inter.abs(), v_inter, reduction)
    if which == "intra":
        return reduce_loss(intra.abs(), v_intra, reduction)
    per = torch.where(v_inter, inter.abs(), torch.zeros_like(inter)) + torch.where(v_intra, intra.abs(),
                                                                                     torch.zeros_like(intra))
    return reduce_loss(per, v_inter | v_intra, reduction)


def _group_means(memb: Tensor, x: Tensor):
    """``[B, G]`` mean of ``x [B, N]`` over each group's items, and whether the group is present."""
    size = memb.sum(1)
    return safe_div(torch.einsum("bng,bn->bg", memb, x), size)


def deltr_loss(scores: Tensor, groups: Tensor, *, protected: int = 1, mask: Optional[Tensor] = None,
               num_groups: Optional[int] = None, reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """DELTR's disparate-exposure term (Zehlike & Castillo, WWW 2020): ``max(0, U(G0) - U(G1))**2`` with
    ``U(G)`` the mean ListNet top-1 probability (softmax of the scores) of the group's items and ``G1`` the
    protected group (the asymmetric variant; the non-protected group is every other known group).
    Undefined when either side is absent.  Combine with :func:`torchfair.losses.listnet_loss` as DELTR does.
    """
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    p1 = top1_probability(b.scores, mask=b.mask)
    prot = b.membership[..., protected]
    other = b.membership.sum(-1) - prot
    memb = torch.stack([other, prot], -1)
    u, present = _group_means(memb, p1)
    per = torch.relu(u[:, 0] - u[:, 1]) ** 2
    return reduce_loss(per, present.all(-1), reduction)


def fair_pg_rank_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, protected: int = 1,
                      browsing: Union[BrowsingModel, str, None] = None, mask: Optional[Tensor] = None,
                      num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "mean",
                      validate_args: bool = True) -> Tensor:
    """Fair-PG-Rank's group disparity (Singh & Joachims, NeurIPS 2019, disparate exposure with merit):

    ``D = max(0, v(G0) / U(G0) - v(G1) / U(G1))`` with ``v(G)`` the mean expected exposure of the group's items
    under the ranking policy (default ``PlackettLuce(samples=32)``; DCG browsing ``1/log2(k+2)``) and ``U(G)`` the
    group's mean relevance, ``G1`` the protected group.  Undefined when a side is absent or has zero merit.
    """
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    F = get_browsing(browsing, Logarithmic())
    ob = order(b, PlackettLuce(samples=32) if ordering is None else ordering)
    e = ob.exposure(F, b.relevance)
    prot = b.membership[..., protected]
    memb = torch.stack([b.membership.sum(-1) - prot, prot], -1)
    v, present = _group_means(memb, e)
    U, _ = _group_means(memb, b.relevance)
    ratio, ok = safe_div(v, U)
    per = torch.relu(ratio[:, 0] - ratio[:, 1])
    return reduce_loss(per, present.all(-1) & ok.all(-1), reduction)


def pairwise_correlation_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, protected: int = 1,
                              mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                              validate_args: bool = True) -> Tensor:
    """Beutel et al.'s pairwise fairness regulariser (KDD 2019, §5): ``|Corr(A, B)|`` over the cross-group
    pairs ``(j, j')`` with different relevance, pooled over the batch, where
    ``A = (s_j - s_j') sign(y_j - y_j')`` (the model's pairwise margin in the right direction) and
    ``B = (a_j - a_j') sign(y_j - y_j')`` with ``a`` the protected-group indicator.  Zero when the model's
    margins do not depend on which group holds the more relevant item.  ``O(B N^2)`` memory.
    Returns a scalar (0 when fewer than two such pairs exist).
    """
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    a = b.membership[..., protected]
    known = b.membership.sum(-1) > 0
    sgn = torch.sign(b.relevance[:, :, None] - b.relevance[:, None, :])
    A = (b.scores[:, :, None] - b.scores[:, None, :]) * sgn
    Bv = (a[:, :, None] - a[:, None, :]) * sgn
    sel = (sgn > 0) & (Bv != 0) & (known[:, :, None] & known[:, None, :]) & (b.mask[:, :, None] & b.mask[:, None, :])
    w = sel.to(A.dtype)
    n = w.sum()
    mA = (A * w).sum() / n.clamp(min=1)
    mB = (Bv * w).sum() / n.clamp(min=1)
    cov = ((A - mA) * (Bv - mB) * w).sum()
    var = ((A - mA) ** 2 * w).sum() * ((Bv - mB) ** 2 * w).sum()
    corr = cov / torch.sqrt(var + 1e-12)
    return torch.where(n >= 2, corr.abs(), torch.zeros_like(corr))


class _LossModule(nn.Module):
    """``nn.Module`` wrapper: keyword arguments given at construction are passed to the functional loss."""

    _fn = None

    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, scores: Tensor, relevance: Tensor, groups: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        return type(self)._fn(scores, relevance, groups, mask=mask, **self.kwargs)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())


class DIPSLoss(_LossModule):
    """Module form of :func:`dips_loss`. ``DIPSLoss()(scores, relevance, groups, mask)``."""

    _fn = staticmethod(dips_loss)


class ExposureMisallocationLoss(_LossModule):
    """Module form of :func:`exposure_misallocation_loss`."""

    _fn = staticmethod(exposure_misallocation_loss)


class PairwiseAccuracyGapLoss(_LossModule):
    """Module form of :func:`pairwise_accuracy_gap_loss`."""

    _fn = staticmethod(pairwise_accuracy_gap_loss)


class FairPGRankLoss(_LossModule):
    """Module form of :func:`fair_pg_rank_loss`."""

    _fn = staticmethod(fair_pg_rank_loss)


class PairwiseCorrelationLoss(_LossModule):
    """Module form of :func:`pairwise_correlation_loss`."""

    _fn = staticmethod(pairwise_correlation_loss)


class DELTRLoss(_LossModule):
    """Module form of :func:`deltr_loss` (relevance is accepted and ignored, for a uniform call signature)."""

    def forward(self, scores, relevance, groups, mask=None):
        return deltr_loss(scores, groups, mask=mask, **self.kwargs)
