"""Utility (ranking-quality) losses for the ranker itself.

ListNet and ListMLE are likelihood losses; ApproxNDCG, NeuralNDCG and the Plackett-Luce expected NDCG are
``1 - NDCG`` of :func:`torchfair.metrics.utility.ndcg` evaluated on a differentiable ordering (the measure is
written once: only the ordering changes).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .._validation import check_number, prepare
from ..metrics.utility import ideal_ranking, ndcg
from ..orderings import NeuralSort, PlackettLuce, RampRank, SoftRank, log_probability  # noqa: F401 (RampRank: docs)
from ..orderings.base import OrderingLike
from .transform import LossModule, measure_loss, reduce_loss

__all__ = ["listnet_loss", "listmle_loss", "approx_ndcg_loss", "neural_ndcg_loss", "pl_ndcg_loss", "ListNetLoss",
           "ListMLELoss", "ApproxNDCGLoss", "NeuralNDCGLoss", "PLNDCGLoss"]

_NEG = -1e30


def listnet_loss(scores: Tensor, relevance: Tensor, *, relevance_temperature: float = 1.0,
                 mask: Optional[Tensor] = None, reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """ListNet (Cao et al., ICML 2007), top-1 version: cross-entropy between ``softmax(relevance / T)`` and
    ``softmax(scores)`` over the real items of each list.

    ``relevance_temperature`` ``T`` (> 0, default 1: Cao et al.'s ``softmax(relevance)``) flattens the target
    over graded relevance: with ratings 1-5 at ``T = 1`` a 5-star item gets ``e^4 ~ 55`` times the target mass of a
    1-star one, at ``T = 2`` ``e^2 ~ 7`` times (a rated item always gets more than an unrated one at 0).  On
    ML-100K's full-catalogue lists ``T = 2`` ranks held-out ratings better (``experiments/tune_ranker.py``)."""
    T = check_number(relevance_temperature, "relevance_temperature", low=0, low_open=True)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    neg = torch.full_like(b.scores, _NEG)
    rel = b.relevance if T == 1.0 else b.relevance / T
    target = torch.softmax(torch.where(b.mask, rel, neg), -1)
    logp = torch.log_softmax(torch.where(b.mask, b.scores, neg), -1)
    per = -(target * torch.where(b.mask, logp, torch.zeros_like(logp))).sum(-1)
    return reduce_loss(per, b.mask.any(-1), reduction)


def listmle_loss(scores: Tensor, relevance: Tensor, *, mask: Optional[Tensor] = None, reduction: str = "mean",
                 validate_args: bool = True) -> Tensor:
    """ListMLE (Xia et al., ICML 2008): ``-log P_PL(sigma* | scores)``, the Plackett-Luce negative log-likelihood
    of the ideal ranking ``sigma*`` (relevance sorted, ties broken by list index), divided by the list length."""
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ideal = ideal_ranking(b.relevance, mask=b.mask, validate_args=False).unsqueeze(0)
    nll = -log_probability(b.scores, ideal, b.mask)[0]
    n = b.mask.sum(-1).to(nll.dtype)
    return reduce_loss(nll / n.clamp(min=1), b.mask.any(-1), reduction)


def _one_minus_ndcg(scores, relevance, mask, k, ordering, reduction, validate_args):
    return measure_loss("ndcg", scores, relevance, reducer="one_minus", k=k, mask=mask, ordering=ordering,
                        reduction=reduction, validate_args=validate_args)


def approx_ndcg_loss(scores: Tensor, relevance: Tensor, *, temperature: float = 0.1, k: Optional[int] = None,
                     ordering: OrderingLike = None, mask: Optional[Tensor] = None, reduction: str = "mean",
                     validate_args: bool = True) -> Tensor:
    """ApproxNDCG (Qin et al., Information Retrieval 13, 2010, eq. 12-13): ``1 - NDCG@k`` with smooth ranks, i.e.
    :func:`torchfair.metrics.ndcg` on ``SoftRank(temperature)``.  ``ordering`` replaces that relaxation, e.g.
    ``RampRank(0.1)`` (the losses' default ordering: the same pair relaxation with a piecewise-linear kernel, pair
    sums in ``O(N log N)`` instead of SoftRank's ``O(N^2)``: what makes a top-k utility term affordable on
    full-catalogue lists); then ``temperature`` is the ordering's own.

    Example::

        >>> s = torch.randn(4, 30, requires_grad=True)
        >>> approx_ndcg_loss(s, torch.rand(4, 30), k=10, ordering=RampRank(0.1)).backward()
    """
    check_number(temperature, "temperature", low=0, low_open=True)
    relax = SoftRank(temperature=temperature) if ordering is None else ordering
    return _one_minus_ndcg(scores, relevance, mask, k, relax, reduction, validate_args)


def neural_ndcg_loss(scores: Tensor, relevance: Tensor, *, temperature: float = 0.1, k: Optional[int] = None,
                     mask: Optional[Tensor] = None, reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """NeuralNDCG (Pobrotyn & Bialobrzeski 2021): ``1 - NDCG`` on the ``NeuralSort(temperature)`` relaxation
    (Sinkhorn-balanced, as in the paper)."""
    return _one_minus_ndcg(scores, relevance, mask, k, NeuralSort(temperature=temperature, sinkhorn_iters=20),
                           reduction, validate_args)


def pl_ndcg_loss(scores: Tensor, relevance: Tensor, *, samples: int = 32, k: Optional[int] = None,
                 mask: Optional[Tensor] = None, generator: Optional[torch.Generator] = None,
                 reduction: str = "mean", validate_args: bool = True) -> Tensor:
    """``1 - E_PL[NDCG]``: expected NDCG of the Plackett-Luce policy ``softmax(scores)``, with the PL-Rank-2
    gradient estimator (Oosterhuis, SIGIR 2021)."""
    return _one_minus_ndcg(scores, relevance, mask, k,
                           PlackettLuce(samples=samples, estimator="pl_rank", generator=generator),
                           reduction, validate_args)


class _UtilityModule(LossModule):
    """Utility losses take no groups: ``groups`` is accepted (and ignored) so that utility and fairness losses
    share one call signature ``loss(scores, relevance, groups, mask)``."""

    _inputs = ("relevance",)


class ListNetLoss(_UtilityModule):
    """Module form of :func:`listnet_loss`."""

    _fn = staticmethod(listnet_loss)


class ListMLELoss(_UtilityModule):
    """Module form of :func:`listmle_loss`."""

    _fn = staticmethod(listmle_loss)


class ApproxNDCGLoss(_UtilityModule):
    """Module form of :func:`approx_ndcg_loss`."""

    _fn = staticmethod(approx_ndcg_loss)


class NeuralNDCGLoss(_UtilityModule):
    """Module form of :func:`neural_ndcg_loss`."""

    _fn = staticmethod(neural_ndcg_loss)


class PLNDCGLoss(_UtilityModule):
    """Module form of :func:`pl_ndcg_loss`."""

    _fn = staticmethod(pl_ndcg_loss)
