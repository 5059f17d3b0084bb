r"""DetConstSort (Geyik, Ambler, Kenthapadi. *Fairness-Aware Ranking in Search & Recommendation Systems with
Application to LinkedIn Talent Search*. KDD 2019, Algorithm 3).

For a target distribution ``p`` over groups, the algorithm walks prefix lengths ``k' = 1, 2, ...``; whenever the
minimum count ``floor(k' p_g)`` of a group grows, that group's best remaining item is appended (several groups in the
order of their items' scores) with the deadline ``k'``, and is then moved up past items of lower score whose own
deadline allows them to move one position down (insertion with deadlines).  Every prefix ``i`` of the output then
holds at least ``min(floor(i p_g), |g|)`` items of each group ``g``.

Here: the paper's 1-based deadline test (an item may move down to position ``i`` only if ``i <= deadline``);
FairRankTune 0.0.7 applies it to 0-based indices, which lets an item sit one position past its deadline
(:func:`torchfair.compat.fairranktune.DETCONSTSORT` reproduces that).  Scores are compared through the starting
order, so ties go to the item that ranked higher.  The walk stops when the prefix holds ``k`` items or when no group
with ``p_g > 0`` has items left; the items it did not place (groups with ``p_g = 0``, unknown group -1, the rest
beyond ``k``) follow in score order.

The algorithm is sequential within a list: it runs as a compiled CPU kernel (:mod:`torchfair.kernels.detconstsort`;
``backend="torch"``, or a missing numba, runs the same walk as a plain Python loop), ``O(k^2)`` per list in the
worst case of the insertion;
inputs on another device are copied to the host and the result copied back (one synchronisation per call: a
post-processing step, not a training hot path).
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from .._validation import check_choice
from ..kernels import BACKENDS, pick
from ._common import Reranking, finish_rerank, groups_present, integer_codes, prepare_rerank, start_order

__all__ = ["det_const_sort", "check_distribution"]

DistributionLike = Union[Sequence[float], Mapping[int, float], Tensor]

#: the smallest positive share :func:`check_distribution` accepts (the walk jumps to prefix length ~ n / share)
MIN_SHARE = 1e-13


def detconstsort_walk(codes_sorted: np.ndarray, n: np.ndarray, p: np.ndarray, k: int, *,
                      key: Optional[np.ndarray] = None, deadline_slack: int = 0, floor_eps: float = 1e-9,
                      whole_batches: bool = False, backend: str = "auto") -> np.ndarray:
    """Run the DetConstSort walk on host arrays: ``codes_sorted [B, N]`` int64 groups in start order (-1: none),
    ``n [B]`` real items, ``p [B, G]`` float64 shares, prefix length ``k``.  Returns ``[B, N]`` int64: the start
    positions in output order.  The keywords are the knobs :func:`torchfair.compat.fairranktune.DETCONSTSORT`
    needs (``key [B, N]`` int64 comparison keys, lower = better, default the start positions; ``deadline_slack=1``;
    ``floor_eps=0``; ``whole_batches=True``); the defaults are the paper's algorithm as :func:`det_const_sort` runs
    it.  ``backend``: ``"auto"`` / ``"numba"`` (the compiled walk of :mod:`torchfair.kernels.detconstsort`) or
    ``"torch"`` (the same walk as a plain Python loop, no compilation; slow for long lists)."""
    check_choice(backend, "backend", BACKENDS)
    B, N = codes_sorted.shape
    if key is None:
        key = np.ascontiguousarray(np.broadcast_to(np.arange(N, dtype=np.int64), (B, N)))
    out = np.empty((B, N), dtype=np.int64)
    K = pick("detconstsort", backend, size=B * N)
    if K is None:
        from ..kernels.detconstsort import walk_python as walk
    else:
        walk = K.walk
    walk(codes_sorted, n, p, int(k), out, key, int(deadline_slack), float(floor_eps), bool(whole_batches))
    return out


def check_distribution(distribution: DistributionLike, G: int, B: int, name: str = "distribution") -> Tensor:
    """A target distribution over ``G`` groups as float64 ``[B, G]`` (CPU): a sequence, a ``{group id: share}``
    mapping (FairRankTune's form; missing ids get 0) or a tensor ``[G]`` / ``[B, G]``; non-negative, summing to 1
    (tolerance 1e-6), naming no group id outside ``[0, G)``, each 0 or at least ``MIN_SHARE`` (1e-13).
    ``ValueError`` naming ``name`` otherwise."""
    if isinstance(distribution, Mapping):
        bad = [g for g in distribution if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0]
        if bad:
            raise ValueError(f"`{name}` keys must be group ids (ints >= 0); got {bad[0]!r}")
        out_of_range = sorted(int(g) for g in distribution if g >= G)
        if out_of_range:
            raise ValueError(f"`{name}` names group {out_of_range[0]}, absent from the groups (ids in [0, {G}))")
        vec = [float(distribution.get(g, 0.0)) for g in range(G)]
        d = torch.tensor(vec, dtype=torch.float64)
    else:
        try:
            d = torch.as_tensor(distribution, dtype=torch.float64).detach().cpu()
        except Exception:
            raise ValueError(f"`{name}` must be a sequence of shares, a {{group id: share}} mapping or a tensor; "
                             f"got {type(distribution).__name__}") from None
        if d.dim() not in (1, 2) or d.shape[-1] < 1:
            raise ValueError(f"`{name}` must have shape [G] or [B, G]; got {tuple(d.shape)}")
        if d.shape[-1] > G:
            extra = d[..., G:]
            if (extra != 0).any():
                raise ValueError(f"`{name}` has {d.shape[-1]} shares but the groups hold {G} ids: it names groups "
                                 f"absent from the batch")
            d = d[..., :G]
        elif d.shape[-1] < G:
            raise ValueError(f"`{name}` must have one share per group: {G}; got {d.shape[-1]}")
        if d.dim() == 2 and d.shape[0] not in (1, B):
            raise ValueError(f"`{name}` of shape [B, G] must have B = {B} rows; got {d.shape[0]}")
    if not torch.isfinite(d).all() or (d < 0).any():
        raise ValueError(f"`{name}` shares must be finite and non-negative")
    if ((d > 0) & (d < MIN_SHARE)).any():
        raise ValueError(f"`{name}` shares must be 0 or at least {MIN_SHARE:g}: a smaller share first asks for an "
                         f"item after more than 1e13 positions (the walk's prefix lengths stay 64-bit ints); "
                         f"got {d[(d > 0) & (d < MIN_SHARE)].flatten()[0].item():g}")
    s = d.sum(-1)
    if ((s - 1.0).abs() > 1e-6).any():
        raise ValueError(f"`{name}` shares must sum to 1; got {s.flatten()[0].item():.6g}")
    return d.reshape(-1, G).expand(B, G).contiguous()


def det_const_sort(scores: Tensor, groups: Tensor, *, distribution: Optional[DistributionLike] = None,
                   k: Optional[int] = None, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                   backend: str = "auto", validate_args: bool = True) -> Reranking:
    r"""DetConstSort re-ranking (Geyik et al., KDD 2019, Algorithm 3) to a target group distribution.

    Every prefix ``i <= k`` of the output holds at least ``min(floor(i p_g), |g|)`` items of every group ``g``
    (``met`` flags lists where that holds at every prefix, which the algorithm guarantees for every list it
    re-ranks; a one-group list is returned unchanged, and with items of unknown group its order may not hold
    them); within those minimums items are placed by score.

    ``distribution``: the target shares ``p_g`` over the ``G`` groups (sequence, ``{id: share}``, tensor ``[G]`` or
    ``[B, G]``; must sum to 1 and name no id outside ``[0, G)``); default: each group's share of the list's own
    real items of known group (so a list re-ranks the same alone or in any batch).  ``k >= 1``: the length of the
    constructed prefix, clamped to each list's length (default: the whole list).  The walk takes time linear in
    the list length whatever the shares (it jumps over the prefix lengths at which no minimum grows).
    ``groups``: ``[B, N]`` int ids (-1: unknown group, placed after the prefix).  Lists with fewer than two groups
    present are returned unchanged (``one_group``).  ``backend``: ``"auto"`` (the compiled walk, as
    :func:`torchfair.kernels.load` decides), ``"numba"`` or ``"torch"`` (a plain Python loop); the same ranking.

    Example (2 groups, 50/50 target; scores favour group 0)::

        >>> det_const_sort(torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1]),
        ...                distribution=[0.5, 0.5]).ranking
        tensor([0, 3, 1, 4, 2, 5])
    """
    check_choice(backend, "backend", BACKENDS)
    b = prepare_rerank(scores, groups, mask, num_groups, validate_args=validate_args, name="det_const_sort")
    codes, G = integer_codes(groups, b, num_groups, "det_const_sort", validate_args)
    B, N = b.mask.shape
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"`k` must be an int >= 1 (the length of the constructed prefix; clamped to each list's "
                         f"length); got {k!r}")
    K = N if k is None else min(k, N)
    if distribution is None:  # each list's own shares: a list re-ranks the same in any batch
        known = (codes >= 0) & b.mask
        counts = (torch.nn.functional.one_hot(codes.clamp(min=0), G) * known[..., None]).sum(1).cpu().to(
            torch.float64)  # [B, G]
        p = (counts / counts.sum(-1, keepdim=True).clamp(min=1)).contiguous()
    else:
        p = check_distribution(distribution, G, B)
    order, _ = start_order(b)
    codes_sorted = codes.gather(-1, order)
    n = b.mask.sum(-1)
    out = detconstsort_walk(codes_sorted.cpu().numpy().astype(np.int64), n.cpu().numpy().astype(np.int64),
                            p.numpy(), int(K), backend=backend)
    sel = torch.from_numpy(out).to(order.device)  # start positions in output order
    ranking = order.gather(-1, sel)
    one_group = groups_present(b) < 2
    # met is checked on what is returned: a one-group list keeps its start order (with items of unknown group,
    # that order need not hold the group's minimum counts)
    ranking = torch.where(one_group[:, None], order, ranking)
    # met: every prefix i <= min(K, n) holds min(floor(i p_g), |g|) items of g
    onehot = torch.nn.functional.one_hot(codes.gather(-1, ranking).clamp(min=0), G) * \
        (codes.gather(-1, ranking) >= 0)[..., None]
    cnt = torch.cumsum(onehot, 1)[:, :K]  # [B, K, G]
    i = torch.arange(1, K + 1, device=order.device, dtype=torch.float64)
    need = torch.floor(i[None, :, None] * p.to(order.device)[:, None, :] + 1e-9)
    total = cnt[:, -1:, :] if K == N else torch.cumsum(onehot, 1)[:, -1:, :]
    need = torch.minimum(need, total.to(need.dtype))
    inside = (torch.arange(K, device=order.device)[None, :] < n[:, None])[..., None]
    met = ((cnt >= need) | ~inside).all(-1).all(-1)
    return finish_rerank(b, ranking, order, one_group, met)
