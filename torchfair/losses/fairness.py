"""Fairness losses: the exact measures of :mod:`torchfair.metrics` evaluated on a differentiable ordering and
reduced to a scalar.  Nothing here re-implements a measure: each loss is a declaration over
:func:`torchfair.losses.measure_loss` (a measure, a default ordering, a list reducer).

Default ordering: ``RampRank(temperature=0.1)`` (:func:`torchfair.losses.default_ordering`: SoftRank's pair
relaxation with a piecewise-linear kernel, pair sums in ``O(N log N)``, the temperature scaled by each list's score
spread with a floor for tied lists: see :mod:`torchfair.orderings.soft`, section Temperature).  Pass
``ordering=SoftRank(0.1)`` for the pairwise sigmoid (the default before ``RampRank``).  Pass
``ordering=PlackettLuce(...)`` to train a stochastic ranking policy, or any other ordering from
:mod:`torchfair.orderings`.

Lists on which the measure is undefined (a group absent, no pair of the needed kind) contribute 0 and are excluded
from ``reduction="mean"``: a batch full of such lists gives a loss of exactly 0 with zero gradient, never NaN.

Baselines users compare against live here too: DELTR (Zehlike & Castillo, WWW 2020), Fair-PG-Rank's group
disparity (Singh & Joachims, NeurIPS 2019) and Beutel et al.'s pairwise-correlation regulariser (KDD 2019).
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from .._validation import check_choice, check_group_id, prepare
from ..browsing import BrowsingModel
from ..orderings import PlackettLuce
from ..orderings.base import OrderingLike
from .transform import LossModule, measure_loss, reduce_loss

__all__ = ["dips_loss", "exposure_misallocation_loss", "pairwise_accuracy_gap_loss", "deltr_loss",
           "fair_pg_rank_loss", "pairwise_correlation_loss", "DIPSLoss", "ExposureMisallocationLoss",
           "PairwiseAccuracyGapLoss", "DELTRLoss", "FairPGRankLoss", "PairwiseCorrelationLoss", "reduce_loss"]

_DIPS_MODES = {"abs": "gap_abs", "square": "gap_square", "one_sided": "gap_one_sided"}
_NORMS = ("l1", "l2sq", "ee-l")
_WHICH = ("inter", "intra", "both")


def dips_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, mode: str = "abs",
              protected: Optional[int] = None, browsing: Union[BrowsingModel, str, None] = None,
              tie_weight: float = 0.5, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
              ordering: OrderingLike = None, reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """DIPS loss: :func:`torchfair.metrics.dips` (Fabris et al., WSDM 2023, eq. 11) on a differentiable ordering
    (default ``RampRank(0.1)``), reduced per list by ``mode``:

    ``"abs"``: ``|M_AB - M_BA|`` (for more than two groups the largest ``|M_gh - M_hg|``); ``"square"``: its
    square; ``"one_sided"``: ``max_h relu(M_ph - M_hp)`` protecting group ``protected`` only.  The other arguments
    are those of :func:`torchfair.metrics.dips`.  Same as ``measure_loss("dips", ..., reducer="gap_" + mode)``.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> loss = dips_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2)
        >>> loss.backward()
    """
    check_choice(mode, "mode", tuple(_DIPS_MODES))
    return measure_loss("dips", scores, relevance, groups, reducer=_DIPS_MODES[mode], protected=protected,
                        browsing=browsing, tie_weight=tie_weight, mask=mask, num_groups=num_groups,
                        ordering=ordering, reduction=reduction, validate_args=validate_args)


def exposure_misallocation_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, target: str = "ee",
                                norm: str = "l1", browsing: Union[BrowsingModel, str, None] = None,
                                mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                                ordering: OrderingLike = None, reduction: str = "mean",
                                validate_args: bool = True) -> Tensor:
    """Exposure misallocation loss: ``||delta||_1`` (``norm="l1"``) or ``||delta||_2^2`` (``"l2sq"``) of
    :func:`torchfair.metrics.exposure_misallocation` (Fabris et al., WSDM 2023, eq. 12-16; targets ``"ee"``,
    ``"ea"``, ``"ea-dp"``) on a differentiable ordering, or the group expected-exposure loss EE-L
    (``norm="ee-l"``, :func:`torchfair.metrics.expected_exposure`; Diaz et al., CIKM 2020; Raj & Ekstrand,
    SIGIR 2022, eq. 9).  Lists with fewer than two groups present are left out (nothing to rebalance).

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> exposure_misallocation_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2).backward()
    """
    check_choice(norm, "norm", _NORMS)
    common = dict(browsing=browsing, mask=mask, num_groups=num_groups, ordering=ordering, reduction=reduction,
                  validate_args=validate_args)
    if norm == "ee-l":
        return measure_loss("expected_exposure", scores, relevance, groups, reducer="value", **common)
    return measure_loss("exposure_misallocation", scores, relevance, groups, reducer=norm, target=target, **common)


def pairwise_accuracy_gap_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, which: str = "inter",
                               protected: int = 1, reference: int = 0, mask: Optional[Tensor] = None,
                               num_groups: Optional[int] = None, ordering: OrderingLike = None,
                               reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """Pairwise accuracy gap loss: ``|InterAcc|``, ``|IntraAcc|`` or their sum (``which="both"``) of
    :func:`torchfair.metrics.pairwise_accuracy` (Raj & Ekstrand, SIGIR 2022, eq. 11 and §2.5; Beutel et al.,
    KDD 2019; Narasimhan et al., AAAI 2020) on a differentiable ordering, ``protected`` against ``reference``.
    A batch with one group only (or without ``protected``) gives 0.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> pairwise_accuracy_gap_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2).backward()
    """
    check_choice(which, "which", _WHICH)
    return measure_loss("pairwise_accuracy", scores, relevance, groups, reducer=which, protected=protected,
                        reference=reference, mask=mask, num_groups=num_groups, ordering=ordering,
                        reduction=reduction, validate_args=validate_args)


def deltr_loss(scores: Tensor, groups: Tensor, *, protected: int = 1, mask: Optional[Tensor] = None,
               num_groups: Optional[int] = None, reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """DELTR's disparate-exposure term (Zehlike & Castillo, WWW 2020): ``max(0, gap)**2`` of
    :func:`torchfair.metrics.top1_exposure_gap` (mean ListNet top-1 probability of the non-protected items minus
    that of the protected group; the asymmetric variant).  Undefined (left out) when a side is absent.  Combine
    with :func:`torchfair.losses.listnet_loss` as DELTR does.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> deltr_loss(s, torch.randint(0, 2, (8, 20))).backward()
    """
    return measure_loss("top1_exposure_gap", scores, None, groups, reducer="squared_hinge", protected=protected,
                        mask=mask, num_groups=num_groups, reduction=reduction, validate_args=validate_args)


def fair_pg_rank_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, protected: int = 1,
                      browsing: Union[BrowsingModel, str, None] = None, mask: Optional[Tensor] = None,
                      num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "mean",
                      validate_args: bool = True) -> Tensor:
    """Fair-PG-Rank's group disparity (Singh & Joachims, NeurIPS 2019): ``max(0, D)`` of
    :func:`torchfair.metrics.disparate_exposure` (exposure per unit of merit of the non-protected items minus that
    of the protected group) under a ranking policy, default ``PlackettLuce(samples=32)`` with PL-Rank gradients
    (DCG browsing ``1/log2(k+2)``).  Undefined (left out) when a side is absent or has zero merit.  The default
    policy's temperature is 0.1 relative to each list's score std (the rule of the soft orderings, see
    :class:`~torchfair.orderings.PlackettLuce`), so that the loss sees the ranking of a trained ranker rather than a
    nearly uniform one; Singh & Joachims' policy ``softmax(scores)`` is
    ``ordering=PlackettLuce(samples=32, temperature=1.0, scale="none")``.

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> fair_pg_rank_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20))).backward()
    """
    return measure_loss("disparate_exposure", scores, relevance, groups, reducer="hinge", protected=protected,
                        browsing=browsing, mask=mask, num_groups=num_groups,
                        ordering=PlackettLuce(samples=32) if ordering is None else ordering, reduction=reduction,
                        validate_args=validate_args)


def pairwise_correlation_loss(scores: Tensor, relevance: Tensor, groups: Tensor, *, protected: int = 1,
                              mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                              validate_args: bool = True) -> Tensor:
    """Beutel et al.'s pairwise fairness regulariser (KDD 2019, §5): ``|Corr(A, B)|`` over the cross-group
    pairs ``(j, j')`` with different relevance, pooled over the batch, where
    ``A = (s_j - s_j') sign(y_j - y_j')`` (the model's pairwise margin in the right direction) and
    ``B = (a_j - a_j') sign(y_j - y_j')`` with ``a`` the protected-group indicator.  Zero when the model's
    margins do not depend on which group holds the more relevant item.
    Returns a scalar (0 when fewer than two such pairs exist).

    Integer ``groups`` never form the pairs: the correlation needs only the pair counts and the sums of ``A``,
    ``A**2``, ``B`` and ``A B``, and each is a sum over items of prefix sums over the less relevant items of the
    other group, after one sort by relevance (``O(B N log N)`` time, ``O(B N)`` memory).  Soft ``[B, N, G]``
    membership uses the ``O(B N^2)`` pair tensors.
    """
    check_group_id(protected, "protected", num_groups)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    if groups.is_floating_point():  # soft membership [B, N, G]: G is known, a larger id is an error
        check_group_id(protected, "protected", b.membership.shape[-1])
    if protected >= b.membership.shape[-1]:  # the protected group is absent from this batch: no such pair
        return b.scores.sum() * 0.0
    a = b.membership[..., protected]
    known = (b.membership.sum(-1) > 0) & b.mask
    # the correlation is scale invariant: divide the scores by their largest magnitude (a constant) first, so
    # that huge logits do not overflow the squares below
    scale = b.scores.detach().abs().amax().clamp(min=1.0)
    s = b.scores / scale
    if groups.is_floating_point():
        n, sA, sA2, sB, sB2, sAB = _correlation_sums_dense(s, b.relevance, a, known)
    else:
        n, sA, sA2, sB, sB2, sAB = _correlation_sums_sorted(s, b.relevance, a, known)
    cov = sAB - sA * sB / n.clamp(min=1)
    var = (sA2 - sA ** 2 / n.clamp(min=1)).clamp(min=0) * (sB2 - sB ** 2 / n.clamp(min=1)).clamp(min=0)
    ok = (n >= 2) & (var > 0)
    corr = cov / torch.sqrt(torch.where(ok, var, torch.ones_like(var)))
    return torch.where(ok, corr.abs(), torch.zeros_like(corr)).to(b.scores.dtype)


def _correlation_sums_dense(s: Tensor, y: Tensor, a: Tensor, known: Tensor):
    """The pair count and sums of ``A``, ``A**2``, ``B``, ``B**2``, ``A B`` over the selected pairs, from
    ``[B, N, N]`` pair tensors (any membership)."""
    sgn = torch.sign(y[:, :, None] - y[:, None, :])
    A = (s[:, :, None] - s[:, None, :]) * sgn
    Bv = (a[:, :, None] - a[:, None, :]) * sgn
    w = ((sgn > 0) & (Bv != 0) & known[:, :, None] & known[:, None, :]).to(A.dtype)
    return w.sum(), (A * w).sum(), (A * A * w).sum(), (Bv * w).sum(), (Bv * Bv * w).sum(), (A * Bv * w).sum()


def _correlation_sums_sorted(s: Tensor, y: Tensor, a: Tensor, known: Tensor):
    """:func:`_correlation_sums_dense` for a 0/1 indicator ``a``, in ``O(B N log N)``: for an item ``j`` of side
    ``a_j`` its partners are the known items of the other side with ``y < y_j``, each pair has
    ``B = 2 a_j - 1`` and ``A = s_j - s_j'``; prefix sums (float64) of their count, ``s`` and ``s**2`` in
    relevance order give every sum."""
    ys, order = torch.sort(y, dim=1, stable=True)
    sd = s.gather(1, order).double()
    side = a.gather(1, order) > 0.5
    ok = known.gather(1, order)
    # for each position the number of items strictly less relevant: prefix sums are read just before it
    below = torch.searchsorted(ys.contiguous(), ys.contiguous(), right=False)
    sums = {}
    for h, on in ((1, ok & side), (0, ok & ~side)):
        w = on.double()
        stack = torch.stack([w, w * sd, w * sd * sd], -1).cumsum(1)                  # [B, N, 3]
        stack = torch.cat([torch.zeros_like(stack[:, :1]), stack], 1)                # prefix of the first k items
        sums[h] = stack.gather(1, below.unsqueeze(-1).expand(-1, -1, 3))
    partner = torch.where(side.unsqueeze(-1), sums[0], sums[1])                      # the other side's prefix sums
    C, S, Q = partner.unbind(-1)
    okd = ok.double()
    C = C * okd
    S = S * okd
    Q = Q * okd
    sign = side.double() * 2 - 1
    n = C.sum()
    sA_j = C * sd - S
    sA = sA_j.sum()
    sA2 = (C * sd * sd - 2 * sd * S + Q).sum()
    sB = (sign * C).sum()
    sAB = (sign * sA_j).sum()
    return n, sA, sA2, sB, n, sAB


class DIPSLoss(LossModule):
    """Module form of :func:`dips_loss`. ``DIPSLoss()(scores, relevance, groups, mask)``."""

    _fn = staticmethod(dips_loss)


class ExposureMisallocationLoss(LossModule):
    """Module form of :func:`exposure_misallocation_loss`."""

    _fn = staticmethod(exposure_misallocation_loss)


class PairwiseAccuracyGapLoss(LossModule):
    """Module form of :func:`pairwise_accuracy_gap_loss`."""

    _fn = staticmethod(pairwise_accuracy_gap_loss)


class FairPGRankLoss(LossModule):
    """Module form of :func:`fair_pg_rank_loss`."""

    _fn = staticmethod(fair_pg_rank_loss)


class PairwiseCorrelationLoss(LossModule):
    """Module form of :func:`pairwise_correlation_loss`."""

    _fn = staticmethod(pairwise_correlation_loss)


class DELTRLoss(LossModule):
    """Module form of :func:`deltr_loss` (relevance is accepted and ignored, for a uniform call signature)."""

    _fn = staticmethod(deltr_loss)
    _inputs = ("groups",)
