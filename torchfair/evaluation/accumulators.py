"""Accumulators: statistics of a whole run gathered batch by batch, beside the per-list measures.

Each is a ``torchmetrics.Metric`` whose states are sums (``dist_reduce_fx="sum"``), so ``merge_state`` of two
halves, DDP's sync and a single pass give the same value (exactly for :class:`PositionShares` with integer group
ids, up to float64 rounding for :class:`PooledMPC`).  ``update(scores, relevance=None, groups=None, mask=None)``
takes a padded batch ``[B, N]``; :func:`~torchfair.evaluation.evaluate_lists`, :class:`~torchfair.evaluation.table.
StreamingEvaluation` and :func:`~torchfair.evaluation.table.evaluate_stream` pass every batch they measure to their
``accumulators=`` (call ``compute()`` afterwards)::

    shares, mpc = PositionShares(num_groups=2, top=10), PooledMPC(num_groups=2, group=1)
    table = evaluate_lists(lists, ["ndcg@10"], num_groups=2, accumulators=[shares, mpc])
    shares.compute()   # [10, 2]: the share of lists whose item at position k belongs to group g
    mpc.compute()      # {"defined", "estimate", "ci_low", "ci_high", "n_pairs", ...}
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from .._extras import require

require("torchfair.evaluation.PositionShares / PooledMPC", "torchmetrics")

from torchmetrics import Metric  # noqa: E402

from ..metrics.calibration import adjacent_candidates
from .._validation import require as require_values  # noqa: E402

__all__ = ["PositionShares", "PooledMPC"]

#: what :class:`PooledMPC` pairs, as its result records it
MPC_PAIRS = "adjacent items of the two groups, every gap (Korevaar et al., §4.1, adjacent variant)"


def _count(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{name}` must be an int >= {low}; got {value!r}")
    return value


def _batch(scores: Tensor, relevance: Optional[Tensor], groups: Optional[Tensor], mask: Optional[Tensor],
           need_relevance: bool) -> Tuple[Tensor, Optional[Tensor], Tensor, Tensor]:
    """Checked ``[B, N]`` inputs of an ``update`` (a single ``[N]`` list becomes a batch of one)."""
    if not isinstance(scores, Tensor) or not scores.is_floating_point() or scores.dim() not in (1, 2):
        raise ValueError("`scores` must be a floating tensor [B, N] (or [N])")
    one = scores.dim() == 1
    up = (lambda t: None if t is None else t.unsqueeze(0)) if one else (lambda t: t)  # noqa: E731
    s, y, g, m = up(scores), up(relevance), up(groups), up(mask)
    if m is None:
        m = torch.ones_like(s, dtype=torch.bool)
    if not isinstance(m, Tensor) or m.dtype != torch.bool or m.shape != s.shape:
        raise ValueError(f"`mask` must be a bool tensor of the shape of `scores` {tuple(s.shape)}")
    if need_relevance and (not isinstance(y, Tensor) or y.shape != s.shape):
        raise ValueError(f"`relevance` is required: a tensor of the shape of `scores` {tuple(s.shape)}")
    if not isinstance(g, Tensor) or g.shape[:2] != s.shape or g.dim() != (3 if g.is_floating_point() else 2):
        raise ValueError(f"`groups` is required: integer ids of the shape of `scores` {tuple(s.shape)} or soft "
                         f"membership [B, N, G]")
    return s.detach(), None if y is None else y.detach(), g, m

def _check_ids(g: Tensor, m: Tensor, num_groups: int) -> None:
    """Integer group ids of real items in ``[-1, num_groups)`` (``-1``: unknown); else ``ValueError`` naming
    ``groups`` (on the CPU; an async assert on CUDA, as every measure checks them)."""
    if not g.is_floating_point():
        require_values(lambda: ((g >= -1) & (g < num_groups) | ~m).all(),
                       f"`groups` ids must be in [-1, {num_groups}) (`num_groups` = {num_groups}); ", g.device,
                       lambda: f"got ids {sorted(set(g[m].tolist()))[:8]}")



def _top_order(scores: Tensor, mask: Tensor, top: int) -> Tuple[Tensor, Tensor]:
    """``(order [B, K], valid [B, K])``, ``K = min(top, N)``: the first ``K`` items of each row's stable descending
    sort of its real items (ties by index; NaN first, as ``torch.sort``), ``valid`` False past the row's length.
    Without a full sort of a long row: the items above its ``K``-th largest score, then the earliest of those
    equal to it, sorted."""
    B, N = scores.shape
    K = min(top, N)
    key = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
    ar = torch.arange(N, device=scores.device).expand(B, N)
    if N <= 4 * top or bool(torch.isnan(key).any()):
        order = torch.sort(key, dim=1, descending=True, stable=True).indices
        if not bool(mask.all()):  # real items before padding also where a real score is -inf
            order = order.gather(1, torch.sort((~mask).gather(1, order).to(torch.int8), dim=1, stable=True).indices)
        order = order[:, :K]
    else:
        v = torch.topk(key, K, dim=1).values[:, -1:]
        above, tied = mask & (key > v), mask & (key == v)
        take = above | (tied & (torch.cumsum(tied, 1) <= K - above.sum(1, keepdim=True)))
        slot = torch.where(take, torch.cumsum(take, 1) - 1, torch.full_like(ar, K))
        order = torch.zeros(B, K + 1, dtype=torch.long, device=scores.device).scatter_(1, slot, ar)[:, :K]
        filled = torch.arange(K, device=scores.device)[None, :] < take.sum(1, keepdim=True)
        sk = torch.where(filled, key.gather(1, order), torch.full((), float("-inf"), dtype=key.dtype,
                                                                      device=key.device))
        order = order.gather(1, torch.sort(sk, dim=1, descending=True, stable=True).indices)
    valid = torch.arange(K, device=scores.device)[None, :] < mask.sum(1, keepdim=True)
    return order, valid


class _Summed(Metric):
    """A Metric of summed states (``merge_state`` also counts the incoming updates, so ``compute()`` after a
    merge does not warn)."""

    is_differentiable = False
    higher_is_better: Optional[bool] = None
    full_state_update = False

    def merge_state(self, incoming_state) -> None:
        super().merge_state(incoming_state)
        self._update_count += incoming_state._update_count if isinstance(incoming_state, Metric) else 1


class PositionShares(_Summed):
    """At each of the first ``top`` positions, the mean group membership of the item placed there, over the lists
    that long: ``share[k, g] = sum_lists memb(item at k)_g / #{lists with more than k items}`` (hard order, ties
    by index; the data of ``torchfair evaluate``'s ``exposure_by_position.png``).

    ``update(scores, relevance=None, groups, mask=None)``: ``groups`` integer ids ``[B, N]`` (an id outside
    ``[0, num_groups)`` counts as no group: its position is counted, no group gets its membership) or soft
    membership ``[B, N, num_groups]``; ``relevance`` is not used.  ``compute()``: ``[top, num_groups]`` float64
    (0 at positions no list reaches).  States: ``total [top, G]``, ``count [top]``, summed.

    Example::

        >>> sh = PositionShares(num_groups=2, top=2)
        >>> sh.update(torch.tensor([[0.9, 0.1, 0.5]]), groups=torch.tensor([[1, 0, 0]]))
        >>> sh.update(torch.tensor([[0.2, 0.8]]), groups=torch.tensor([[1, 0]]))
        >>> sh.compute()   # position 1: groups 1 and 0; position 2: 0 and 1
        tensor([[0.5000, 0.5000],
                [0.5000, 0.5000]], dtype=torch.float64)
    """

    total: Tensor
    count: Tensor

    def __init__(self, num_groups: int, top: int = 50, **kwargs: Any):
        super().__init__(**kwargs)
        self.num_groups = _count(num_groups, "num_groups", 1)
        self.top = _count(top, "top", 1)
        self.add_state("total", default=torch.zeros(top, num_groups, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(top, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
               mask: Optional[Tensor] = None) -> None:
        s, _, g, m = _batch(scores, relevance, groups, mask, need_relevance=False)
        G = self.num_groups
        _check_ids(g, m, G)
        if g.is_floating_point() and g.shape[-1] != G:
            raise ValueError(f"`groups`: soft membership over {g.shape[-1]} groups; `num_groups` is {G}")
        order, valid = _top_order(s, m, self.top)
        K = order.shape[1]
        if g.is_floating_point():
            memb = g.detach().gather(1, order[..., None].expand(-1, -1, G)).double()
        else:
            gi = g.gather(1, order)
            memb = torch.nn.functional.one_hot(gi.clamp(0, G - 1).long(), G).double()
            memb = memb * ((gi >= 0) & (gi < G))[..., None]
        memb = memb * valid[..., None]
        self.total[:K] += memb.sum(0).to(self.total.device)
        self.count[:K] += valid.sum(0).to(self.count)

    def compute(self) -> Tensor:
        return self.total / self.count.clamp(min=1)[:, None]


class PooledMPC(_Summed):
    """Matched Pair Calibration of group ``group`` pooled over every list seen (Korevaar et al., "Matched Pair
    Calibration for Ranking Fairness", arXiv 2023, Definitions 1-3): adjacent pairs under the hard order, every gap
    kept (:func:`~torchfair.metrics.matched_pair_calibration` with ``adjacent=True, quantile=1.0, ci="cluster"``),
    with the item-clustered sandwich interval (§4.1.4, :func:`~torchfair.metrics.mpc_cluster_variance`).  Unlike
    :class:`~torchfair.evaluation.MPC` (the mean over lists of each list's MPC), one estimate over all pairs.

    A cluster (the pairs sharing an item) never spans two lists, so sums kept per batch give the estimate and the
    variance: with ``A_a``, ``B_a`` the sums of ``w d`` and ``w`` over the pairs holding item ``a``,
    ``theta = sum w d / sum w`` and ``V = [sum_a (A_a - theta B_a)^2 - sum_p w_p^2 (d_p - theta)^2] / (sum w)^2``
    (each pair is its own dyad); equal to the one-batch ``matched_pair_calibration`` up to rounding.  Pairs whose
    score gap is NaN are left out.  States: ``sums [8]`` float64, ``n_pairs``, ``n_soft`` (batches with soft
    membership, which MPC cannot use), summed.

    ``update(scores, relevance, groups, mask=None)``: integer group ids ``[B, N]`` (-1: unknown, in no pair).
    ``compute()``: ``{"defined", "group", "estimate", "ci_low", "ci_high", "n_pairs", "pairs"}`` (Python numbers;
    ``defined`` False without a pair, or ``{"defined": False, "why"}`` after soft membership); MPC > 0: the group
    is under-ranked.

    Example::

        >>> mpc = PooledMPC(num_groups=2, group=1)
        >>> mpc.update(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([[0, 1, 0]]))
        >>> r = mpc.compute(); r["estimate"], r["n_pairs"]   # one pair: y(item 1) - y(item 0) = 1
        (1.0, 1)
    """

    sums: Tensor
    n_pairs: Tensor
    n_soft: Tensor

    def __init__(self, num_groups: int, group: int = 1, level: float = 0.95, **kwargs: Any):
        super().__init__(**kwargs)
        self.num_groups = _count(num_groups, "num_groups", 2)
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < num_groups:
            raise ValueError(f"`group` must be a group id in [0, {num_groups}); got {group!r}")
        if isinstance(level, bool) or not isinstance(level, float) or not 0.0 < level < 1.0:
            raise ValueError(f"`level` must be a float in (0, 1); got {level!r}")
        self.group, self.level = group, level
        self.add_state("sums", default=torch.zeros(8, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("n_pairs", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("n_soft", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
               mask: Optional[Tensor] = None) -> None:
        s, y, g, m = _batch(scores, relevance, groups, mask, need_relevance=True)
        if g.is_floating_point():
            self.n_soft += 1
            return
        _check_ids(g, m, self.num_groups)
        known = m & (g >= 0) & (g < self.num_groups)
        in_g = known & (g == self.group)
        q, i, j, gap = adjacent_candidates(s, m, in_g, known & ~in_g)
        keep = ~torch.isnan(gap)
        q, i, j = q[keep], i[keep], j[keep]
        if q.numel() == 0:
            return
        d = y[q, i].double() - y[q, j].double()  # the outcome differences in float64
        w = torch.ones_like(d)  # matched_pairs' weight without a browsing model
        wd = w * d
        N = s.shape[1]
        saa = sab = sbb = d.new_zeros(())
        for side in (i, j):  # an item is on one side of its pairs only
            _, inv = torch.unique(q * N + side, return_inverse=True)
            A = d.new_zeros(int(inv.max()) + 1).index_add_(0, inv, wd)  # sum of w d over the item's pairs
            Bw = torch.zeros_like(A).index_add_(0, inv, w)  # sum of w
            saa, sab, sbb = saa + (A * A).sum(), sab + (A * Bw).sum(), sbb + (Bw * Bw).sum()
        sums = [w.sum(), wd.sum(), saa, sab, sbb, (wd * wd).sum(), (w * wd).sum(), (w * w).sum()]
        self.sums += torch.stack(sums).to(self.sums.device)
        self.n_pairs += int(d.numel())

    def compute(self) -> Dict[str, Any]:
        if int(self.n_soft) > 0:
            return {"defined": False, "why": "MPC needs hard groups"}
        SW, SWD, SAA, SAB, SBB, PAA, PAB, PBB = self.sums.tolist()
        n = int(self.n_pairs)
        if not SW > 0:
            return {"defined": False, "group": self.group, "estimate": 0.0, "ci_low": 0.0, "ci_high": 0.0,
                    "n_pairs": n}
        theta = SWD / SW
        meat = (SAA - 2 * theta * SAB + theta ** 2 * SBB) - (PAA - 2 * theta * PAB + theta ** 2 * PBB)
        se = math.sqrt(max(meat, 0.0) / (SW * SW))
        z = math.sqrt(2.0) * float(torch.erfinv(torch.tensor(self.level, dtype=torch.float64)))
        return {"defined": True, "group": self.group, "estimate": theta, "ci_low": theta - z * se,
                "ci_high": theta + z * se, "n_pairs": n, "pairs": MPC_PAIRS}
