"""RampRank: SoftRank's pair relaxation with a piecewise-linear kernel, contracted in ``O(B N H log N)``.

``P(j above i) = ramp((s_j - s_i) / tau)`` with ``ramp(d) = clip(1/2 + d / 4, 0, 1)``: the "hard sigmoid", with the
slope of ``sigmoid(d)`` at 0 (so a temperature means what it means for :class:`~torchfair.orderings.SoftRank`),
exactly 0 and 1 beyond ``|s_j - s_i| >= 2 tau`` and ``1/2`` at ties.  Every pairwise measure contracts
``P(j above i)`` (or ``F(E[pos_j]) P(j above i)``) with a relevance pair weight and per-item values
(:meth:`OrderedBatch.contract`); with this kernel the sum over ``j`` splits, after one sort of ``u = s / (4 tau)``,
into prefix sums::

    sum_j ramp_ij R_j = sum_{u_j >= u_i + 1/2} R_j + (1/2 - u_i) sum_{|u_j - u_i| < 1/2} R_j
                        + sum_{|u_j - u_i| < 1/2} u_j R_j

with the window bounds found by binary search.  The relevance pair weight
``w = greater 1(r_i > r_j) + equal 1(r_i = r_j) + less 1(r_i < r_j)`` (:class:`LevelPairWeight`) restricts the
partners to a relevance band: "equal" is the same sum inside each relevance level (one sort on ``(level, u)``),
"greater" a sum over each lower level (on the CPU, where the number of levels is free to read, all levels at once;
elsewhere, without reading it, over the bits of the level as in the exact sweeps), "less" the rest.  Time
``O(B N H log N)`` (``x log L`` off the CPU), memory ``O(B N H L)`` on the CPU and ``O(B N H)`` elsewhere, where
SoftRank's pairs are ``O(B N^2)``.  Gradients are those of the kernel (autograd through the prefix sums): the pairs
within ``2 tau`` of each other, as SoftRank's sigmoid weighs the near pairs most.

As ``tau -> 0`` every pair of distinct scores gets 0 or 1 and the measures converge to the exact values (tied
scores count 1/2 each way, as :class:`~torchfair.orderings.Hard` with ``ties="average"``).  Expected positions,
exposure (``F`` at the expected position) and ``joint`` follow SoftRank's definitions with this kernel; the
approximate ``position_matrix`` of prefix measures forms the ``[B, N, N]`` pairs (as SoftRank's does).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..browsing import BrowsingModel
from ._sweeps import LevelPairWeight, _dense_rank, _prefix, _take, _untake
from .base import OrderedBatch, PairBlock, row_blocks
from .soft import MIN_SCALE, REL_MIN_SCALE, SoftRankOrderedBatch, _Tempered, _offdiag, _work

__all__ = ["RampRank", "RampRankOrderedBatch", "ramp_sums"]

#: the CPU path holds one prefix sum per relevance level; beyond this many levels it takes the bit sweep instead
MAX_LEVELS = 16


def ramp_sums(z: Tensor, right: Tensor, mask: Tensor, group: Optional[Tensor] = None,
              select: Optional[Tensor] = None) -> Tensor:
    """``out[b, i, h] = sum_j ramp(z_j - z_i) right[b, j, h]`` over the real ``j`` (``j = i`` included, weight
    1/2) with ``group_j = group_i`` (every ``j`` when ``group`` is None) and ``select_j`` (bool ``[B, N]``, every
    ``j`` when None).  ``z [B, N]`` are the scores over the temperature; float64 prefix sums (except on MPS)."""
    acc = torch.float32 if z.device.type == "mps" else torch.float64
    B, N = z.shape
    u = z.to(acc) / 4
    big = torch.finfo(acc).max
    with torch.no_grad():  # the window bounds: piecewise constant in the scores
        lo_u = torch.where(mask, u, torch.full((), big, dtype=acc, device=u.device)).amin(-1, keepdim=True)
        hi_u = torch.where(mask, u, torch.full((), -big, dtype=acc, device=u.device)).amax(-1, keepdim=True)
        lo_u = torch.where(torch.isfinite(lo_u) & (lo_u < big), lo_u, torch.zeros_like(lo_u))
        span = (hi_u - lo_u).clamp(min=0) + 2
    off = torch.where(mask, u - lo_u, torch.zeros((), dtype=acc, device=u.device))  # in [0, span - 2]
    with torch.no_grad():
        base = group.to(acc) * span if group is not None else torch.zeros_like(off)
        key = base + off
        key_s, order = torch.sort(key, dim=-1)
        hi = torch.searchsorted(key_s, key + 0.5, side="left")
        lo = torch.searchsorted(key_s, key - 0.5, side="right")
        end = torch.searchsorted(key_s, base + span - 1, side="left") if group is not None else \
            torch.full_like(hi, N)
    keep = mask if select is None else mask & select
    R = right.to(acc) * keep.to(acc)[..., None]
    Rs = _take(R, order)
    A = _prefix(Rs)
    U = _prefix(Rs * _take(off[..., None], order))
    at = lambda C, idx: _take(C, idx)  # noqa: E731  C[b, idx[b, k]]
    a_hi, a_lo = at(A, hi), at(A, lo)
    return (at(A, end) - a_hi) + (0.5 - off)[..., None] * (a_hi - a_lo) + (at(U, hi) - at(U, lo))


def _less_level_sums(z: Tensor, right: Tensor, mask: Tensor, level: Tensor) -> Tensor:
    """``sum_{j: level_j < level_i} ramp(z_j - z_i) right_j``."""
    B, N = level.shape
    H = right.shape[-1]
    top = int(level.masked_fill(~mask, 0).max()) if level.device.type == "cpu" and level.numel() else None
    if top is not None and top + 1 <= MAX_LEVELS:  # every level at once: one sort, prefix sums per level
        L = top + 1
        onehot = torch.nn.functional.one_hot(level.clamp(0, L - 1), L).to(right.dtype)  # [B, N, L]
        S = ramp_sums(z, (right[:, :, None, :] * onehot[..., None]).reshape(B, N, L * H), mask).reshape(B, N, L, H)
        below = torch.nn.functional.pad(S.cumsum(2), (0, 0, 1, 0))[:, :, :L]  # sum over levels < l
        return below.gather(2, level.clamp(0, L - 1)[:, :, None, None].expand(B, N, 1, H)).squeeze(2)
    # the bits of the level, most significant first: j below i at the first bit where they differ
    nbits = max(1, int(top + 1 if top is not None else N).bit_length())
    out = 0
    for bit in range(nbits):
        b = ((level >> bit) & 1).bool()
        part = ramp_sums(z, right, mask, group=level >> (bit + 1), select=~b)
        out = out + torch.where(b[..., None], part, torch.zeros((), dtype=part.dtype, device=part.device))
    return out


def ramp_contract(z: Tensor, right: Tensor, mask: Tensor, pair_weight: Optional[LevelPairWeight]) -> Tensor:
    """``out[b, i, h] = sum_{j != i} w[i, j] ramp(z_j - z_i) right[b, j, h]`` over real ``j`` (rows of padded
    items unspecified)."""
    R = right
    allsum = ramp_sums(z, R, mask)
    self_term = 0.5 * R.to(allsum.dtype) * mask.to(allsum.dtype)[..., None]
    if pair_weight is None:
        return allsum - self_term
    pw = pair_weight
    level = _dense_rank(pw.relevance, mask)
    less = _less_level_sums(z, R, mask, level)  # partners less relevant than i
    out = pw.greater * less
    if pw.equal or pw.less:
        equal = ramp_sums(z, R, mask, group=level) - self_term
        if pw.equal:
            out = out + pw.equal * equal
        if pw.less:
            out = out + pw.less * (allsum - self_term - less - equal)
    return out


class RampRankOrderedBatch(SoftRankOrderedBatch):
    """Result of :class:`RampRank`: SoftRank's quantities with the ramp kernel, pair sums by sorted prefix sums."""

    def _dense(self) -> Optional[Tensor]:
        return None  # never forms [B, N, N] pairs for positions or contractions

    def _pair(self, start: int, stop: int) -> Tensor:
        z, N = self._z(), self.mask.shape[1]
        keep = self.mask[:, start:stop, None] & self.mask[:, None, :] & _offdiag(start, stop, N, z.device)
        return (0.5 + (z[:, None, :] - z[:, start:stop, None]) / 4).clamp(0, 1) * keep.to(z.dtype)

    def expected_positions(self) -> Tensor:
        if self._pos is None:
            one = torch.ones(*self.mask.shape, 1, dtype=self.scores.dtype, device=self.mask.device)
            pos = ramp_contract(self._z(), one, self.mask, None)[..., 0].to(self.scores.dtype)
            self._pos = pos * self.mask.to(pos.dtype)
        return self._pos

    def position_variance(self) -> Tensor:
        B, N = self.mask.shape
        parts = []
        for start, stop in row_blocks(B, N):
            a = self._pair(start, stop)
            parts.append((a * (1 - a)).sum(-1))
        return torch.cat(parts, 1) * self.mask.to(self.scores.dtype)

    def contract(self, right: Tensor, *, which: str = "above", pair_weight=None,
                 browsing: Optional[BrowsingModel] = None, relevance: Optional[Tensor] = None,
                 block_elements: Optional[int] = None) -> Tensor:
        """:meth:`OrderedBatch.contract`: ``"above"`` and ``"joint"`` with no pair weight or a
        :class:`LevelPairWeight` by sorted prefix sums (module docstring); anything else by row blocks."""
        if which not in ("above", "joint") or (which == "joint" and browsing is None) or (
                pair_weight is not None and not isinstance(pair_weight, LevelPairWeight)):
            return OrderedBatch.contract(self, right, which=which, pair_weight=pair_weight, browsing=browsing,
                                         relevance=relevance, block_elements=block_elements)
        R = right.to(self.scores.dtype)
        if which == "joint":
            R = R * self.exposure(browsing, relevance).to(R.dtype)[..., None]
        out = ramp_contract(self._z(), R, self.mask, pair_weight)
        return (out * self.mask.to(out.dtype)[..., None]).to(right.dtype)

    def pair_block(self, context, start: int, stop: int) -> PairBlock:
        above = self._pair(start, stop)
        joint = None if context.exposure is None else context.exposure[:, None, :] * above
        return PairBlock(above=above, joint=joint)


class RampRank(_Tempered):
    """Piecewise-linear pair relaxation: ``P(j above i) = clip(1/2 + (s_j - s_i) / (4 tau), 0, 1)``, pair sums in
    ``O(N log N)`` per list (module docstring).  Same temperature rule as :class:`~torchfair.orderings.SoftRank`
    (``scale="std"``: relative to each list's spread, with the ``min_scale`` floor for tied lists) and the same
    slope at ties, so the same temperatures apply; converges to the exact measures as ``temperature -> 0``.

    Example::

        >>> RampRank(0.01, scale="none")(torch.tensor([[3., 1., 2.]]), torch.ones(1, 3, dtype=torch.bool)
        ...                               ).expected_positions()
        tensor([[0., 2., 1.]])
    """

    def __init__(self, temperature: float = 0.1, scale: str = "std", *, min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE, min_position_std: float = 0.1, sinkhorn_iters: int = 0):
        from .soft import _check_iters
        from .._validation import check_number

        self._init_temperature(temperature, scale, min_scale, rel_min_scale)
        self.min_position_std = check_number(min_position_std, "min_position_std", low=0, low_open=True)
        self.sinkhorn_iters = _check_iters(sinkhorn_iters)

    def __call__(self, scores: Tensor, mask: Tensor) -> RampRankOrderedBatch:
        s, mask = _work(scores, mask)
        return RampRankOrderedBatch(s, mask, self._tau(s, mask), self.min_position_std, self.sinkhorn_iters, None)

    def __repr__(self) -> str:
        return f"RampRank(temperature={self.temperature}, scale={self.scale!r})"
