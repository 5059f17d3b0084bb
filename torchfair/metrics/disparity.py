r"""Two-sided group disparity measures that training baselines regularise, as measures you can evaluate too.

* :func:`top1_exposure_gap`: DELTR's disparate-exposure term (Zehlike & Castillo, *Reducing Disparate Exposure
  in Ranking: A Learning to Rank Approach*, WWW 2020, eq. 6 with the top-one probability of ListNet as exposure):
  the mean top-1 probability of the non-protected items minus that of the protected items.
* :func:`disparate_exposure`: Fair-PG-Rank's group disparity (Singh & Joachims, *Policy Learning for Fairness in
  Ranking*, NeurIPS 2019, §4.1, disparate exposure relative to merit): the exposure per unit of merit of the
  non-protected items minus that of the protected items, under any ordering (a ranking policy for the paper).

Both are signed ``[B]`` per list (positive: the protected group is disadvantaged) and undefined (0, invalid) when
either side is absent from a list (or, for :func:`disparate_exposure`, has zero merit).  The losses of
:mod:`torchfair.losses` (``DELTRLoss``, ``FairPGRankLoss``) are these measures transformed (squared hinge, hinge).

``protected`` is a group id; every other *known* group is the non-protected side (items of unknown group, id
``-1``, or the unknown part of a soft membership row, are on neither side).  A batch in which the protected group
does not occur at all is fine: its lists are invalid (with soft ``[B, N, G]`` membership, G is declared by the
shape and ``protected >= G`` is a ``ValueError``).
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _linalg
from .._validation import Batch, check_group_id, check_number, prepare
from ..browsing import BrowsingModel, Logarithmic, TopK, get_browsing
from ..orderings.base import OrderingLike
from ..orderings.plackett_luce import top1_probability
from .common import check_soft_group_id, finish, order, safe_div

__all__ = ["top1_exposure_gap", "disparate_exposure"]


def _two_sides(b: Batch, protected: int, num_groups: Optional[int], groups: Tensor) -> Tensor:
    """``[B, N, 2]`` membership of (non-protected, protected); a protected id beyond the batch's integer groups is
    empty, one beyond soft membership's ``G`` a ``ValueError``."""
    check_group_id(protected, "protected", num_groups)
    check_soft_group_id(protected, "protected", groups, b)
    memb = b.membership
    prot = memb[..., protected] if protected < memb.shape[-1] else torch.zeros_like(memb[..., 0])
    return torch.stack([memb.sum(-1) - prot, prot], -1)


def _group_means(sides: Tensor, x: Tensor) -> Tuple[Tensor, Tensor]:
    """``[B, 2]`` mean of ``x [B, N]`` over each side's items, and whether the side is present."""
    return safe_div(_linalg.einsum("bns,bn->bs", sides, x), sides.sum(1))


def top1_exposure_gap(scores: Tensor, groups: Tensor, *, protected: int = 1, mask: Optional[Tensor] = None,
                      num_groups: Optional[int] = None, reduction: str = "none", return_valid: bool = False,
                      validate_args: bool = True):
    r"""DELTR's exposure gap (Zehlike & Castillo, WWW 2020, eq. 6):

    .. math:: U(G) = \frac{1}{|G|} \sum_{i \in G} \mathrm{softmax}(s)_i, \qquad
              \mathrm{gap} = U(G_{\neg p}) - U(G_p)

    the mean ListNet top-one probability of the non-protected items minus that of the protected group ``p``.
    Shape ``[...]`` (per list); positive means the protected group gets less top-1 exposure; in ``[-1, 1]``.
    Undefined (0, invalid) when a side is absent.  Depends on the score values (not only their order), so it takes
    no ``ordering``; DELTR's loss is ``max(0, gap)**2`` (:class:`torchfair.losses.DELTRLoss`).

    Example::

        >>> top1_exposure_gap(torch.tensor([0., 0., 0., 0.]), torch.tensor([0, 0, 1, 1]))
        tensor(0.)
    """
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    sides = _two_sides(b, protected, num_groups, groups)
    u, present = _group_means(sides, top1_probability(b.scores, mask=b.mask))
    valid = present.all(-1)
    gap = torch.where(valid, u[:, 0] - u[:, 1], torch.zeros_like(u[:, 0]))
    return finish(b, gap, valid, reduction, return_valid)


def disparate_exposure(scores: Tensor, relevance: Tensor, groups: Tensor, *, protected: int = 1,
                       browsing: Union[BrowsingModel, str, None] = None, k: Optional[int] = None,
                       mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
                       reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Fair-PG-Rank's group disparity (Singh & Joachims, NeurIPS 2019, §4.1, exposure relative to merit):

    .. math:: v(G) = \frac{1}{|G|}\sum_{i \in G} E[F(\mathrm{pos}_i)], \quad U(G) = \frac{1}{|G|}\sum_{i\in G} r_i,
              \quad D = \frac{v(G_{\neg p})}{U(G_{\neg p})} - \frac{v(G_p)}{U(G_p)}

    Positive ``D``: the protected group ``p`` gets less exposure per unit of merit.  ``browsing`` defaults to the
    DCG discount ``1/log2(k+2)`` (the paper's); ``k`` truncates it to the top ``k`` positions.  The expectation is
    over ``ordering`` (default ``Hard()``: the ranking of ``scores``; Fair-PG-Rank trains a Plackett-Luce policy,
    see :class:`torchfair.losses.FairPGRankLoss`, whose loss is ``max(0, D)``).  Shape ``[...]``; undefined (0,
    invalid) when a side is absent or has zero merit (a mean merit below ``sqrt(finfo.tiny)``, about 1e-19 in
    float32, counts as zero: the ratio's gradient would overflow).

    Example (the protected items are the relevant ones, ranked last)::

        >>> disparate_exposure(torch.tensor([4., 3., 2., 1.]), torch.tensor([1., 1., 1., 1.]),
        ...                    torch.tensor([0, 0, 1, 1]), browsing="uniform")
        tensor(0.)
    """
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    F = get_browsing(browsing, Logarithmic())
    if k is not None:
        F = TopK(F, check_number(k, "k", low=1, integer=True))
    sides = _two_sides(b, protected, num_groups, groups)
    e = order(b, ordering).exposure(F, b.relevance)
    v, present = _group_means(sides, e)
    U, _ = _group_means(sides, b.relevance)
    # a merit below sqrt(tiny) (~1e-19 in float32) is zero for this ratio: exposure / merit and its gradient
    # would overflow the dtype
    U = torch.where(U > torch.finfo(U.dtype).tiny ** 0.5, U, torch.zeros_like(U))
    ratio, ok = safe_div(v, U)
    valid = present.all(-1) & ok.all(-1)
    D = torch.where(valid, ratio[:, 0] - ratio[:, 1], torch.zeros_like(ratio[:, 0]))
    return finish(b, D, valid, reduction, return_valid)
