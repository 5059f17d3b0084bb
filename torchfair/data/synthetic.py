"""The synthetic two-group data of the DIPS paper (``000`` §6.1) and its ranking policies.

* :func:`two_group_relevance`: ``N_A`` items of group A (id 0) with relevance ``U(0.5, 1)`` and ``N_B`` items of
  group B (id 1) with relevance ``U(0.2, 0.7)`` (``000`` §6.1: N = 1000, N_A = N_B = 500);
* :func:`ideal_ranking`: the ranking by decreasing relevance, ``sigma* = argsort(-r)`` (re-exported from
  :func:`torchfair.metrics.ideal_ranking`);
* :func:`promote`: experimental condition 1 (``000`` §6.1.1), the ``count`` most relevant items of a group moved
  to positions ``k .. k + count - 1`` while every other item keeps its relative order;
* :func:`tie_breaking_rankings`: experimental condition 2 (``000`` §6.1.2), rankings of maximum utility for tied
  (e.g. binarised) relevance where, at each position, a tie between the groups is broken in favour of group A with
  probability ``p_A``.

Rankings are integer tensors ``ranking[..., k]`` = index of the item at 0-based position ``k``; turn them into
scores for the measures with :func:`torchfair.orderings.scores_from_ranking` or use them in
:class:`torchfair.orderings.stochastic.Sampled`.

Example::

    >>> rel, groups = two_group_relevance(4, 4, generator=torch.Generator().manual_seed(0))
    >>> rel.shape, groups.tolist()
    (torch.Size([8]), [0, 0, 0, 0, 1, 1, 1, 1])
    >>> r = ideal_ranking(torch.tensor([0.2, 0.9, 0.5, 0.7]))
    >>> r.tolist(), promote(r, torch.tensor([0, 0, 1, 1]), group=1, count=1, k=0).tolist()
    ([1, 3, 2, 0], [3, 1, 2, 0])
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..metrics.utility import ideal_ranking  # the one ideal ranking (stable sort by decreasing relevance)

__all__ = ["two_group_relevance", "ideal_ranking", "promote", "tie_breaking_rankings"]


def _check_count(x, name: str, minimum: int = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}; got {x!r}")
    return x


def two_group_relevance(n_a: int = 500, n_b: int = 500, *, range_a: Tuple[float, float] = (0.5, 1.0),
                        range_b: Tuple[float, float] = (0.2, 0.7), generator: Optional[torch.Generator] = None,
                        dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """Relevance ``[n_a + n_b]`` and group ids ``[n_a + n_b]`` (A = 0 first, then B = 1), ``000`` §6.1.

    Relevance is uniform on ``range_a`` for group A and on ``range_b`` for group B (defaults: the paper's
    ``U(0.5, 1)`` and ``U(0.2, 0.7)``).  Items are listed group by group; no measure depends on the listing order
    except through tie-breaking of equal scores.
    """
    _check_count(n_a, "n_a")
    _check_count(n_b, "n_b")
    if n_a + n_b == 0:
        raise ValueError("`n_a + n_b` must be positive")
    for name, (lo, hi) in (("range_a", range_a), ("range_b", range_b)):
        if not (0 <= lo <= hi):
            raise ValueError(f"`{name}` must be (low, high) with 0 <= low <= high; got {(lo, hi)!r}")
    u = torch.rand(n_a + n_b, generator=generator, dtype=torch.float64)
    lo = torch.cat([torch.full((n_a,), float(range_a[0])), torch.full((n_b,), float(range_b[0]))]).double()
    hi = torch.cat([torch.full((n_a,), float(range_a[1])), torch.full((n_b,), float(range_b[1]))]).double()
    rel = (lo + (hi - lo) * u).to(dtype)
    groups = torch.cat([torch.zeros(n_a, dtype=torch.long), torch.ones(n_b, dtype=torch.long)])
    return rel, groups


def promote(ranking: Tensor, groups: Tensor, *, group: int = 1, count: int = 20, k: int = 0) -> Tensor:
    """Condition 1 of ``000`` §6.1.1: move the first ``count`` items of ``group`` in ``ranking`` (for the ideal
    ranking, its most relevant ones) to positions ``k`` to ``k + count - 1``; all other items keep their relative order.

    ``ranking`` ``[N]`` (item by position), ``groups`` ``[N]`` ids (by item).  Returns the new ranking ``[N]``.
    With ``k`` above the promoted items' current positions they are demoted instead (same rule).
    """
    if not isinstance(ranking, Tensor) or ranking.dim() != 1 or ranking.is_floating_point():
        raise ValueError("`ranking` must be an integer tensor [N] of item indices by position")
    if not isinstance(groups, Tensor) or groups.shape != ranking.shape:
        raise ValueError(f"`groups` must be a tensor of the shape of `ranking` {tuple(ranking.shape)}")
    N = ranking.numel()
    _check_count(count, "count")
    _check_count(k, "k")
    in_group = groups[ranking] == group  # by position
    n_group = int(in_group.sum())
    if count > n_group:
        raise ValueError(f"`count`={count} exceeds the {n_group} items of group {group}")
    if k + count > N:
        raise ValueError(f"`k + count` = {k + count} exceeds the list length {N}")
    chosen = in_group & (torch.cumsum(in_group.long(), 0) <= count)  # first `count` members, by position
    promoted = ranking[chosen]
    rest = ranking[~chosen]
    return torch.cat([rest[:k], promoted, rest[k:]])


def tie_breaking_rankings(relevance: Tensor, groups: Tensor, p_a: float, num_samples: int = 1, *,
                          favoured: int = 0, generator: Optional[torch.Generator] = None) -> Tensor:
    """Condition 2 of ``000`` §6.1.2: ``num_samples`` rankings ``[S, N]`` of maximum utility under ties.

    Items are ranked by decreasing relevance.  Within a relevance level, each position is filled by the best
    remaining item of group ``favoured`` (A = 0) with probability ``p_a`` and of the other items with probability
    ``1 - p_a``, as long as both kinds remain; then the rest follow.  Within a kind, items keep their index order.
    ``p_a = 1`` ranks every tied A item first, ``p_a = 0`` last.  Meant for two groups (every non-``favoured``
    item is "the other group").
    """
    if not isinstance(relevance, Tensor) or relevance.dim() != 1:
        raise ValueError("`relevance` must be a tensor [N]")
    if not isinstance(groups, Tensor) or groups.shape != relevance.shape:
        raise ValueError(f"`groups` must be a tensor of the shape of `relevance` {tuple(relevance.shape)}")
    if isinstance(p_a, bool) or not isinstance(p_a, (int, float)) or not (0.0 <= p_a <= 1.0):
        raise ValueError(f"`p_a` must be a probability in [0, 1]; got {p_a!r}")
    _check_count(num_samples, "num_samples", 1)
    S = num_samples
    is_a = groups == favoured
    out = []
    levels = torch.unique(relevance, sorted=True).flip(0)  # decreasing relevance
    for level in levels:
        items = torch.nonzero(relevance == level).flatten()  # index order
        a_items, b_items = items[is_a[items]], items[~is_a[items]]
        na, nb = a_items.numel(), b_items.numel()
        n = na + nb
        if na == 0 or nb == 0:
            out.append(items.expand(S, n))
            continue
        draw = torch.rand(S, n, generator=generator, dtype=torch.float64) < p_a  # True: take A if possible
        ca = torch.cumsum(draw.long(), 1)
        cb = torch.arange(1, n + 1).expand(S, n) - ca
        # the draws decide until one kind is exhausted (after the step where ca == na or cb == nb)
        exhausted = (ca >= na) | (cb >= nb)
        stop = torch.where(exhausted.any(1), exhausted.long().argmax(1), torch.full((S,), n - 1))
        t = torch.arange(n).expand(S, n)
        a_ran_out = ca.gather(1, stop[:, None]) >= na  # [S, 1]
        take_a = torch.where(t <= stop[:, None], draw, ~a_ran_out.expand(S, n))
        # k-th A slot gets the k-th A item, k-th B slot the k-th B item
        ia = (torch.cumsum(take_a.long(), 1) - 1).clamp(0, max(na - 1, 0))
        ib = (torch.cumsum((~take_a).long(), 1) - 1).clamp(0, max(nb - 1, 0))
        out.append(torch.where(take_a, a_items[ia], b_items[ib]))
    return torch.cat(out, 1)
