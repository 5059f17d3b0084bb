"""The hard ordering: sort the scores. Measures evaluated on it are the exact (non-differentiable) evaluators.

Ties in the scores are resolved by ``ties``:

* ``"first"`` (default): a stable descending sort, so among equal scores the item with the lower index in the
  list is ranked higher. Deterministic, but not invariant to permuting tied items.
* ``"average"``: every order of the tied items is equally likely and the measures are averaged over these orders
  (McSherry & Najork, ECIR 2008): a tied pair is ranked either way with probability 1/2, a tied block of size t
  starting at position a gives each member exposure ``mean_{p<t} F(a+p)``, and for two tied items
  ``E[F(pos_j) 1(pos_j < pos_i)] = sum_p F(a+p) (t-1-p) / (t (t-1))``.  Invariant to permutations.

Padded items are placed after all real items and excluded from every quantity.
To evaluate a ranking produced elsewhere (an explicit permutation), use :func:`scores_from_ranking`.

Two implementations of the sort and of the pair-free contraction (``Hard(backend=...)``): the torch code below,
which runs on every device without a host synchronisation and is the reference, and compiled kernels for plain
float32 / float64 CPU tensors (:mod:`torchfair.kernels.sorting`: a radix sort of the float bits, and one sweep
per list with per-rank sums or a Fenwick tree over the relevance ranks, lists spread over torch's threads), used by
default there.  They give the same order and the same values up to float64 rounding of the sums
(tests/kernels/test_pairs.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import torch
from torch import Tensor

from .._validation import check_choice
from ..browsing import BrowsingModel
from .base import PAIR_BLOCK_ELEMENTS, LevelPairWeight, OrderedBatch, Ordering, PairBlock, ranked_exposure, _promote
from ..kernels import BACKENDS
from ._pairsums import (_accumulation_dtype, _at, _combine, _dense_rank, _less_before, _prefix, _rank_bits,
                      _segments, _take, _untake, contract_all_pairs, kernels)


__all__ = ["Hard", "HardOrderedBatch", "scores_from_ranking"]


def sort_order(key: Tensor, mask: Tensor, backend: str = "auto") -> Tensor:
    """``[B, N]`` long: each list's items by ``key`` descending, ties by index, padded items last -- the order
    :class:`Hard` sorts with (its compiled radix sort on plain float CPU tensors, torch's stable sort elsewhere),
    without building an ordering; the measures sort their ideal rankings with it."""
    K = kernels("sorting", backend, key, mask)
    if K is not None and not bool(torch.isnan(key).any()):
        return K.sort_desc(key, mask)[0]
    masked = torch.where(mask, key, torch.full_like(key, float("-inf")))
    return torch.sort(masked, dim=-1, descending=True, stable=True).indices


def scores_from_ranking(ranking: Tensor, mask: Optional[Tensor] = None, *, dtype: torch.dtype = torch.float32
                        ) -> Tensor:
    """Scores whose descending sort reproduces an explicit ranking.

    ``ranking[b, k]`` is the index of the item at 0-based position ``k`` of list ``b`` (a permutation of
    ``0..N-1`` per list; padded items, if any, may sit anywhere and are ignored by the measures).
    Returns scores ``[B, N]`` (``[N]`` for 1-D input) of floating ``dtype`` (float32 by default, whatever the
    default dtype) with ``scores[ranking[k]] = N - k``.  ``mask`` is accepted for symmetry and not used.

    Example::

        >>> scores_from_ranking(torch.tensor([2, 0, 1]))
        tensor([2., 1., 3.])
    """
    if not isinstance(ranking, Tensor) or ranking.dim() not in (1, 2) or ranking.is_floating_point() or \
            ranking.dtype == torch.bool:
        raise ValueError("`ranking` must be an integer tensor [B, N] or [N] of item indices by position")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"`dtype` must be a floating torch.dtype; got {dtype!r}")
    r = ranking.unsqueeze(0) if ranking.dim() == 1 else ranking
    B, N = r.shape
    r = r.long()
    if (r < 0).any() or (r >= N).any() or not torch.equal(torch.sort(r, -1).values,
                                                          torch.arange(N, device=r.device).expand(B, N)):
        raise ValueError("`ranking` rows must be permutations of 0..N-1")
    vals = (N - torch.arange(N, device=r.device, dtype=dtype)).expand(B, N)
    scores = torch.empty(B, N, device=r.device, dtype=dtype).scatter_(-1, r, vals)
    return scores.squeeze(0) if ranking.dim() == 1 else scores


@dataclass
class _Ctx:
    exposure: Optional[Tensor]  # [B, N] per item (block mean under average ties)
    tie_joint: Optional[Tensor]  # [B, N] per item: joint value for a tied partner


class HardOrderedBatch(OrderedBatch):
    """Result of :class:`Hard`: sorted order, positions and tie blocks of a batch."""

    def __init__(self, scores: Tensor, mask: Tensor, ties: str, backend: str = "auto"):
        self.scores = scores
        self.mask = mask
        self.ties = ties
        self.backend = check_choice(backend, "backend", BACKENDS)
        B, N = scores.shape
        dev = scores.device
        K = kernels("sorting", backend, scores, mask)
        if K is not None:  # the same stable order by a radix sort of the float bits
            order, self.positions = K.sort_desc(scores, mask)
            sorted_key = None
        else:
            key = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
            sorted_key, order = torch.sort(key, dim=-1, descending=True, stable=True)
            self.positions = torch.empty_like(order).scatter_(-1, order, torch.arange(N, device=dev).expand(B, N))
        ar = torch.arange(N, device=dev).expand(B, N)
        self.order = order  # [B, N]: item at position k
        # self.positions [B, N]: position of item i
        if ties == "first":  # every position is its own tie block
            self.block_sorted = ar
            self.block = self.positions
            self.block_size = torch.ones((), dtype=scores.dtype, device=dev).expand(B, N)
            self.block_start = ar
            return
        if sorted_key is None:
            sorted_key = torch.where(mask, scores, torch.full_like(scores, float("-inf"))).gather(-1, order)
        new = torch.ones_like(sorted_key, dtype=torch.bool)
        new[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
        block_sorted = torch.cumsum(new.long(), -1) - 1  # block id of position k
        self.block_sorted = block_sorted
        self.block = block_sorted.gather(-1, self.positions)  # block id of item i
        ones = torch.ones(B, N, dtype=scores.dtype, device=dev)
        self.block_size = torch.zeros(B, N, dtype=scores.dtype, device=dev).scatter_add_(-1, block_sorted, ones)
        start = torch.full((B, N), N, dtype=torch.long, device=dev).scatter_reduce_(
            -1, block_sorted, ar, reduce="amin", include_self=True)
        self.block_start = start  # start position of block b

    @cached_property
    def n_items(self) -> Tensor:
        """``[B]`` number of real items of every list."""
        return self.mask.sum(-1)

    # ----------------------------------------------------------------- per item
    def expected_positions(self) -> Tensor:
        if self.ties == "first":
            return self.positions.to(self.scores.dtype)
        t = self.block_size.gather(-1, self.block)
        a = self.block_start.gather(-1, self.block).to(self.scores.dtype)
        return a + (t - 1) / 2

    def _sorted_exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor]) -> Tensor:
        if browsing.relevance_dependent and self.ties == "average":
            raise ValueError("`ordering`: relevance-dependent browsing (Cascade) needs a strict order: use "
                                 "Hard(ties='first')")
        return ranked_exposure(browsing, relevance, self.mask, self.scores.dtype,
                               lambda rel: rel.gather(-1, self.order))

    def _block_mean(self, per_position: Tensor) -> Tensor:
        s = torch.zeros_like(per_position).scatter_add_(-1, self.block_sorted, per_position)
        return (s / self.block_size.clamp(min=1)).gather(-1, self.block)

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        f = self._sorted_exposure(browsing, relevance)
        if self.ties == "first":
            e = f.gather(-1, self.positions)
        else:
            e = self._block_mean(f)
        return e * self.mask.to(e.dtype)

    # ----------------------------------------------------------------- pairs
    def pair_context(self, browsing, relevance) -> _Ctx:
        if browsing is None:
            return _Ctx(None, None)
        e = self.exposure(browsing, relevance)
        tie = None
        if self.ties == "average":
            f = self._sorted_exposure(browsing, relevance)
            B, N = f.shape
            k = torch.arange(N, device=f.device, dtype=f.dtype)
            t_pos = self.block_size.gather(-1, self.block_sorted)
            a_pos = self.block_start.gather(-1, self.block_sorted).to(f.dtype)
            contrib = f * (a_pos + t_pos - 1 - k)
            s = torch.zeros_like(f).scatter_add_(-1, self.block_sorted, contrib)
            t = self.block_size
            tie = (s / (t * (t - 1)).clamp(min=1)).gather(-1, self.block)
        return _Ctx(e, tie)

    def pair_block(self, context: _Ctx, start: int, stop: int) -> PairBlock:
        B, N = self.mask.shape
        bi = self.block[:, start:stop, None]
        bj = self.block[:, None, :]
        dt = self.scores.dtype
        real = self.mask[:, start:stop, None] & self.mask[:, None, :]
        strictly = (bj < bi) & real
        above = strictly.to(dt)
        tied = None
        if self.ties == "average":
            rows = torch.arange(start, stop, device=bi.device)[None, :, None]
            cols = torch.arange(N, device=bi.device)[None, None, :]
            tied = (bj == bi) & real & (rows != cols)
            above = above + 0.5 * tied.to(dt)
        joint = None
        if context.exposure is not None:
            joint = context.exposure[:, None, :] * strictly.to(dt)
            if tied is not None:
                joint = joint + context.tie_joint[:, start:stop, None] * tied.to(dt)
        return PairBlock(above=above, joint=joint)

    # ----------------------------------------------------------------- contraction without pairs
    def contract(self, right: Tensor, *, which: str = "above", pair_weight=None,
                 browsing: Optional[BrowsingModel] = None, relevance: Optional[Tensor] = None,
                 block_elements: Optional[int] = None) -> Tensor:
        """:meth:`OrderedBatch.contract` in ``O(B N H log N)`` time and ``O(B N H)`` memory, without forming pairs,
        when the pair weight is absent or a :class:`~torchfair.orderings.base.LevelPairWeight` (every pairwise
        measure of :mod:`torchfair.metrics.pairwise`); any other weight takes the generic row-block path.

        Walking the ranking once, the items strictly above item ``i`` (earlier tie blocks) split into those less
        relevant than ``i`` (a two-dimensional dominance sum, :func:`_less_before`), equally relevant (a segmented
        prefix sum over equal relevance) and the rest; tied partners under ``ties="average"`` (same block, ``1/2``
        or the tied-pair joint) are segment sums inside the block.  Graded or continuous relevance alike; same
        result as the generic path up to rounding (accumulated in float64 where the device has it; tests in
        the ordering rows of tests/test_contract.py compare both).  On CPU tensors the compiled kernels do the same
        walk (:mod:`torchfair.kernels.pairs`, ``O(B N H log L)`` for ``L`` relevance levels, ``O(N)`` scratch
        per thread besides the ``[B, N, H]`` result); ``backend="torch"`` keeps the torch code."""
        if which not in ("above", "joint", "one") or (which == "joint" and browsing is None) or (
                pair_weight is not None and not isinstance(pair_weight, LevelPairWeight)):
            return super().contract(right, which=which, pair_weight=pair_weight, browsing=browsing,
                                    relevance=relevance, block_elements=block_elements)
        return self._contract_sorted(right, which, pair_weight, browsing, relevance)

    def _contract_sorted(self, right: Tensor, which: str, pw: Optional[LevelPairWeight],
                         browsing: Optional[BrowsingModel], relevance: Optional[Tensor]) -> Tensor:
        backend = getattr(self, "backend", "auto")
        if which == "one":  # every other real item, whatever the order
            return contract_all_pairs(right, self.mask, pw, backend)
        K = kernels("pairs", backend, self.order, self.mask, right, *(() if pw is None else (pw.relevance,)))
        if K is not None:
            if self.ties == "first":  # exposure by position: the kernel reads it down the ranking
                f, by = None, "item"
                if which == "joint" and not browsing.relevance_dependent:  # one row of position weights
                    N = self.mask.shape[1]
                    f, by = browsing.item_exposure(torch.zeros(1, N, dtype=self.scores.dtype)), "row"
                elif which == "joint":
                    f, by = self._sorted_exposure(browsing, relevance), "position"
                return K.sweep(self.order, self.mask, right, pw, f, by)
            ctx = self.pair_context(browsing if which == "joint" else None, relevance)
            return K.sweep(self.order, self.mask, right, pw, ctx.exposure if which == "joint" else None, "item",
                           self.block_sorted, ctx.tie_joint if which == "joint" else 0.5)
        ctx = self.pair_context(browsing if which == "joint" else None, relevance)
        B, N = self.mask.shape
        H = right.shape[-1]
        acc = _accumulation_dtype(right)
        maskf = self.mask.to(acc)[..., None]
        V = right.to(acc) * maskf  # [B, N, H]
        rank = None if pw is None else _dense_rank(_promote(pw.relevance), self.mask)

        def combine(less_rel: Tensor, equal_rel: Tensor, more_rel: Tensor) -> Tensor:
            return _combine(pw, less_rel, equal_rel, more_rel)

        if pw is None or self.ties == "first":
            seq = self.order  # position order (tie blocks ascending)
        else:  # tie blocks ascending, most relevant first inside a block
            seq = torch.sort(self.block * N + (N - 1 - rank), dim=-1, stable=True).indices
        W = V if which == "above" else V * ctx.exposure.to(acc)[..., None]  # what an item above contributes
        Ws = _take(W, seq)
        C = _prefix(Ws)
        blk = self.block.gather(-1, seq)
        bst, ben = _segments(blk)
        before = _at(C, bst)  # every item of an earlier tie block
        if pw is None:
            out = before
        else:
            rs = rank.gather(-1, seq)
            nbits = _rank_bits(rs, N)
            lt, eq_all = _less_before(rs, Ws, nbits)  # earlier in `seq`: rank below / equal
            if self.ties == "average":  # equal rank inside the same block earlier in `seq` is a tie, not "above"
                brst, _ = _segments(blk, rs)
                eq = eq_all - (C[:, :N] - _at(C, brst))
            else:
                eq = eq_all
            out = combine(lt, eq, before - lt - eq)
        if self.ties == "average":  # tied partners: 1/2 above (or the tied-pair joint for "joint")
            Vs = _take(V, seq)
            Cr = _prefix(Vs)
            blocksum = _at(Cr, ben) - _at(Cr, bst)
            if pw is None:
                tied = blocksum - Vs
            else:
                brst, bren = _segments(blk, rs)
                more = _at(Cr, brst) - _at(Cr, bst)  # inside the block, before `i` in `seq`: more relevant
                eq = _at(Cr, bren) - _at(Cr, brst) - Vs
                tied = combine(blocksum - Vs - more - eq, eq, more)
            tie_w = ctx.tie_joint.gather(-1, seq).to(acc)[..., None] if which == "joint" else 0.5
            out = out + tie_w * tied
        return (_untake(out, seq) * maskf).to(right.dtype)

    def position_matrix(self) -> Tensor:
        B, N = self.mask.shape
        dt = self.scores.dtype
        k = torch.arange(N, device=self.mask.device)[None, :, None]
        if self.ties == "first":
            R = (k == self.positions[:, None, :]).to(dt)
        else:
            a = self.block_start.gather(-1, self.block)[:, None, :]
            t = self.block_size.gather(-1, self.block)[:, None, :]
            R = ((k >= a) & (k < a + t)).to(dt) / t
        return R * self.mask[:, None, :].to(dt)


class Hard(Ordering):
    """Sort the scores (descending). See the module docstring for ``ties`` ("first" or "average").

    ``backend``: ``"auto"`` (default: the compiled kernels of :mod:`torchfair.kernels` for plain
    float32 / float64 CPU tensors, the torch code elsewhere), ``"numba"`` (those kernels; an error where they
    cannot run) or ``"torch"`` (the torch code, the reference, on every device).  Same values either way, up to
    float64 rounding of the sums."""

    differentiable = False

    def __init__(self, ties: str = "first", *, backend: str = "auto"):
        self.ties = check_choice(ties, "ties", ("first", "average"))
        self.backend = check_choice(backend, "backend", BACKENDS)

    def __call__(self, scores: Tensor, mask: Tensor) -> HardOrderedBatch:
        return HardOrderedBatch(_promote(scores.detach()), mask, self.ties, self.backend)

    def __repr__(self) -> str:
        extra = "" if self.backend == "auto" else f", backend={self.backend!r}"
        return f"Hard(ties={self.ties!r}{extra})"
