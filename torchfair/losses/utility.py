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

__all__ = ["listnet_loss", "listmle_loss", "approx_ndcg_loss", "lambda_ndcg_loss", "LambdaNDCGLoss", "neural_ndcg_loss", "pl_ndcg_loss", "ListNetLoss",
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


def lambda_ndcg_loss(scores: Tensor, relevance: Tensor, *, k: Optional[int] = 10, sigma: float = 1.0,
                     gain: str = "exponential", block: int = 64, mask: Optional[Tensor] = None,
                     reduction: str = "mean", validate_args: bool = True) -> Tensor:
    r"""LambdaLoss for NDCG@k with the LambdaRank weights (Burges, MSR-TR-2010-82, eq. 3-4; Wang et al., CIKM 2018,
    "The LambdaLoss Framework", section 4: the NDCG-Loss1 / LambdaRank scheme with a cut-off)::

        loss_b = 1/P_b sum_{i, j: y_i > y_j} |Delta NDCG@k(i, j)| * log(1 + exp(-sigma (s_i - s_j)))

    where ``|Delta NDCG@k(i, j)| = |g_i - g_j| |D(p_i) - D(p_j)| / IDCG@k`` is the change of NDCG@k when items i
    and j swap places in the current (hard, detached) ranking, ``D`` the DCG discount ``1 / log2(p + 2)`` cut at
    ``k`` (0 from position ``k`` on) and ``g`` the gains of :func:`torchfair.metrics.ndcg` (``gain``).  A pair whose
    items both sit at or below position ``k`` has weight 0: the loss values only what NDCG@k values, unlike
    ListNet, which defends the order of the whole list.  The NDCG@k pieces (gains, cut discount, ideal DCG) are
    those of :mod:`torchfair.metrics.utility`.  ``P_b``: the number of pairs of non-zero weight (the mean over
    them, TF-Ranking's ``SUM_BY_NONZERO_WEIGHTS``), so that the loss's gradient has ListNet's order of magnitude
    on recommender lists (measured on ML-100K full-catalogue lists: the plain sum's is ~7000x ListNet's).

    Memory ``O(B * block * N)``: the pairs are taken ``block`` more relevant items at a time, and the gradient is
    the pair sum's analytic one (the LambdaRank "lambdas"), so no pair tensor is kept for backward.  Lists with no
    pair of non-zero weight, or IDCG@k = 0, are invalid (0, left out of the mean).

    Example::

        >>> s = torch.randn(4, 50, requires_grad=True)
        >>> lambda_ndcg_loss(s, torch.randint(0, 3, (4, 50)).float(), k=10).backward()
    """
    from ..browsing import Logarithmic
    from ..metrics.common import cut_browsing
    from ..metrics.utility import ideal_dcg_of_gains, scaled_gains
    from .._validation import check_choice, check_int

    check_number(sigma, "sigma", low=0, low_open=True)
    check_choice(gain, "gain", ("exponential", "linear"))
    block = check_int(block, "block", 1)
    if k is not None:
        k = check_int(k, "k", 1)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    B, N = b.scores.shape
    work = b.scores.dtype if b.scores.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        s = b.scores.detach().to(work)
        g, _ = scaled_gains(b, gain, validate_args)
        g = torch.where(b.mask, g.to(work), torch.zeros_like(s))
        idcg = ideal_dcg_of_gains(g, b.mask, k)
        # positions of the current ranking (hard, ties by index; padding last) and their cut discounts
        keyed = torch.where(b.mask, s, torch.full_like(s, float("-inf")))
        order = torch.sort(keyed, dim=-1, descending=True, stable=True).indices
        pos = torch.empty_like(order).scatter_(-1, order, torch.arange(N, device=s.device).expand(B, N))
        disc = cut_browsing(Logarithmic(), Logarithmic(), k).weights(N, dtype=work, device=s.device)[pos]
        disc = torch.where(b.mask, disc, torch.zeros_like(disc))
        y = torch.where(b.mask, b.relevance.to(work), torch.full_like(s, float("-inf")))
        lam = torch.zeros_like(s)     # d loss / d s, per item
        value = torch.zeros(B, dtype=work, device=s.device)
        npairs = torch.zeros(B, dtype=work, device=s.device)
        norm = idcg.clamp(min=torch.finfo(work).tiny)
        zero = torch.zeros((), dtype=work, device=s.device)

        def pairs(ii: Tensor, jj: Tensor, keep_i: Tensor, keep_j: Tensor) -> None:
            """Add the pairs (i in ``ii``, j in ``jj``) with y_i > y_j (``keep_*``: which of them may pair)."""
            yi, si, gi, di = (t.gather(-1, ii)[:, :, None] for t in (y, s, g, disc))
            yj, sj, gj, dj = (t.gather(-1, jj)[:, None, :] for t in (y, s, g, disc))
            more = (yi > yj) & keep_i[:, :, None] & keep_j[:, None, :]
            w = torch.where(more, (gi - gj).abs() * (di - dj).abs(), zero) / norm[:, None, None]
            diff = sigma * (si - sj)
            value.add_((w * torch.nn.functional.softplus(-diff)).sum((1, 2)))
            npairs.add_((w > 0).sum((1, 2)).to(work))
            # d/ds_i of w log(1 + e^{-sigma (s_i - s_j)}) = -sigma w sigmoid(-diff); s_j gets the opposite
            pull = w * torch.sigmoid(-diff) * sigma
            lam.scatter_add_(-1, ii, -pull.sum(-1))
            lam.scatter_add_(-1, jj, pull.sum(1))

        ar = torch.arange(N, device=s.device).expand(B, N)
        if k is not None and k < N:
            # |Delta| = 0 unless one of the two sits in the top k: (1) the more relevant item in the top k, any
            # partner; (2) the more relevant item below the top k, its partner in the top k -- O(B k N)
            top = order[:, :k]
            in_top = b.mask.gather(-1, top)
            pairs(top, ar, in_top, b.mask)
            pairs(ar, top, b.mask & (pos >= k), in_top)
        else:
            for a in range(0, N, block):
                ii = ar[:, a:a + block]
                pairs(ii, ar, b.mask.gather(-1, ii), b.mask)
        valid = (npairs > 0) & (idcg > 0)
        # mean over the pairs of non-zero weight (TF-Ranking's SUM_BY_NONZERO_WEIGHTS): a list's loss does not
        # grow with its length or its number of relevant items, so lambda means what it means beside ListNet
        value = value / npairs.clamp(min=1)
        lam = lam / npairs.clamp(min=1)[:, None]
    per = value.to(b.scores.dtype) + (lam.to(b.scores.dtype) * b.scores).sum(-1) - \
        (lam.to(b.scores.dtype) * b.scores).sum(-1).detach()
    return reduce_loss(per, valid, reduction)


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
                 temperature: float = 0.1, scale: str = "std", mask: Optional[Tensor] = None,
                 generator: Optional[torch.Generator] = None, reduction: str = "mean",
                 validate_args: bool = True) -> Tensor:
    """``1 - E_PL[NDCG@k]``: expected NDCG of the Plackett-Luce policy
    ``PlackettLuce(samples, temperature=temperature, scale=scale)`` (logits ``scores / tau_b``), with the PL-Rank-2
    gradient estimator (Oosterhuis, SIGIR 2021; PL-Rank's loss).

    ``temperature`` / ``scale``: the temperature rule of the soft orderings (module docstring of
    :mod:`torchfair.orderings.soft`, Temperature).  The default ``temperature=0.1, scale="std"``
    (``tau_b = 0.1 * max(std_b, 0.25)``, detached) is :class:`~torchfair.orderings.PlackettLuce`'s: on a trained
    ranker's scores (spread ~0.25 within a list) the policy keeps 98-99 % of the hard ranking's ``NDCG@10``, so the
    loss tracks ``1 - NDCG@k`` of the ranking being trained, and 20 SGD steps (lr 1) on 32 such lists (N = 50) raise
    their hard ``NDCG@10`` from 0.60 to 0.82, against 0.65 with ``temperature=1.0, scale="none"`` -- the policy
    ``softmax(scores)`` of the former default, nearly uniform on such scores (module docstring of
    :mod:`torchfair.orderings.plackett_luce`, Temperature).  Pass ``temperature=1.0, scale="none"`` for a policy
    whose randomness the model controls through the magnitude of its scores (PL-Rank's setting).

    Example::

        >>> s = torch.randn(4, 30, requires_grad=True)
        >>> pl_ndcg_loss(s, torch.rand(4, 30), k=10, generator=torch.Generator().manual_seed(0)).backward()
    """
    policy = PlackettLuce(samples=samples, estimator="pl_rank", temperature=temperature, generator=generator,
                          scale=scale)
    return _one_minus_ndcg(scores, relevance, mask, k, policy, reduction, validate_args)


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


class LambdaNDCGLoss(_UtilityModule):
    """Module form of :func:`lambda_ndcg_loss`."""

    _fn = staticmethod(lambda_ndcg_loss)
