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

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..browsing import BrowsingModel
from .._validation import check_choice
from ..kernels import BACKENDS, FOLLOW
from ._pairsums import LevelPairWeight, _dense_rank, _prefix, _take, _untake, kernels
from .base import OrderedBatch, PairBlock, row_blocks
from .soft import MIN_SCALE, REL_MIN_SCALE, SoftRankOrderedBatch, _Tempered, _offdiag, _work

__all__ = ["RampRank", "RampRankOrderedBatch", "ramp_sums"]

#: the CPU path holds one prefix sum per relevance level; beyond this many levels it takes the bit sweep instead
MAX_LEVELS = 16


class _Window:
    """The sort and window bounds of one ramp contraction (they depend only on the scores, the temperature and the
    grouping, not on the values summed): computed once, reused for every sum over the same ordering."""

    def __init__(self, z: Optional[Tensor], mask: Tensor, group: Optional[Tensor] = None, backend: str = "auto",
                 scores: Optional[Tensor] = None, u: Optional[Tensor] = None):
        self.backend = backend
        acc = torch.float32 if mask.device.type == "mps" else torch.float64
        B, N = mask.shape
        u = z.to(acc) / 4 if u is None else u.to(acc)
        big = torch.finfo(acc).max
        # the windows family leads (its threshold decides the whole contraction), its sort follows
        K = (kernels("sorting", backend, u.detach(), size=FOLLOW) if kernels("windows", backend, u.detach()) is not None
             else None) if group is None and acc == torch.float64 else None
        if K is not None and scores is not None and scores.dtype in (torch.float32, torch.float64):
            # CPU: the compiled radix sort of the scores themselves (z = s / tau is non-decreasing in s, so their
            # ascending order sorts the keys; float32 scores take 4 byte passes where the float64 keys take 8),
            # padded items last; the smallest real u is then the first one (a list without real items: a
            # padded 0, and off is 0 everywhere)
            with torch.no_grad():
                self.order = K.sort_desc(-scores.detach(), mask)[0]
                lo_u = u.detach().gather(-1, self.order[:, :1])
            self.off = torch.where(mask, u - lo_u, 0.0)
            key = self.off.detach()
            self.hi, self.lo = kernels("windows", backend, key, size=FOLLOW).ordered_window_bounds(key, mask, self.order)
            self.end = self.start = None
            self.mask, self.acc, self.group = mask, acc, group
            return
        with torch.no_grad():  # the window bounds: piecewise constant in the scores (a list without real
            # items gets lo_u = big and off = 0 everywhere)
            lo_u = torch.where(mask, u, big).amin(-1, keepdim=True)
        #: u - min u over the real items, in [0, span - 2] (0 for padded items, which sum nothing)
        self.off = torch.where(mask, u - lo_u, 0.0)
        with torch.no_grad():
            key = self.off.detach()
            if K is not None:  # CPU: the compiled radix sort (ascending key = descending -key), the same bounds
                # by two pointers up the sorted keys
                self.order = K.sort_desc(-key, torch.ones_like(mask))[0]
                self.hi, self.lo = kernels("windows", backend, key, size=FOLLOW).window_bounds(key.gather(-1, self.order),
                                                                                  self.order)
            else:
                if group is not None:  # each group in its own band of keys, span apart
                    hi_u = torch.where(mask, u, -big).amax(-1, keepdim=True)
                    span = (hi_u - torch.where(lo_u < big, lo_u, 0.0)).clamp(min=0) + 2
                    base = group.to(acc) * span
                    key = base + key
                key_s, self.order = torch.sort(key, dim=-1)
                # the window [lo, hi) = keys in (key - 1/2, key + 1/2) and the end of the group, in one binary
                # search
                above = torch.nextafter(key - 0.5, torch.full((), float("inf"), dtype=acc, device=key.device))
                q = torch.cat([key + 0.5, above] + ([base + span - 1, base] if group is not None else []), -1)
                hi_lo = torch.searchsorted(key_s, q, side="left")
                self.hi, self.lo = hi_lo[:, :N], hi_lo[:, N:2 * N]
        # the group of item i occupies [start_i, end_i) of the sorted keys (the whole list without groups)
        self.end = hi_lo[:, 2 * N:3 * N] if group is not None else None
        self.start = hi_lo[:, 3 * N:] if group is not None else None
        self.mask, self.acc, self.group = mask, acc, group

    def sums(self, right: Tensor, select: Optional[Tensor] = None) -> Tensor:
        """``out[b, i, h] = sum_j ramp(z_j - z_i) right[b, j, h]`` over the real ``j`` (``j = i`` included, weight
        1/2) of ``i``'s group with ``select_j`` (bool ``[B, N]``, every ``j`` when None)."""
        keep = self.mask if select is None else self.mask & select
        return _WindowSum.apply(right.to(self.acc) * keep.to(self.acc)[..., None], self.off, self)


def _rows(x: Tensor, idx: Tensor) -> Tensor:
    """``x[b, idx[b, k], :]`` for ``x [B, M, H]`` and ``idx [B, K]``, as one row copy of the flattened batch (much
    faster on the CPU than ``gather`` with an index expanded over ``H``)."""
    B, M, H = x.shape
    flat = (idx + torch.arange(B, device=idx.device)[:, None] * M).reshape(-1)
    return x.reshape(B * M, H).index_select(0, flat).reshape(B, idx.shape[1], H)


def _window_pass(X: Tensor, off: Tensor, win: "_Window", lower: bool) -> Tuple[Tensor, Tensor]:
    """For values ``X [B, N, H]`` (in item order): ``(sum over the window of X, the sum the ramp needs)`` where the
    window of ``i`` is ``|u_j - u_i| < 1/2`` in ``i``'s group and the second term is
    ``sum_{u_j >= u_i + 1/2} X_j + (1/2 - u_i) W_i + sum_W u_j X_j`` (``lower=False``: the forward sum) or
    ``sum_{u_j <= u_i - 1/2} X_j + (1/2 + u_i) W_i - sum_W u_j X_j`` (``lower=True``: the transposed kernel)."""
    K = kernels("windows", win.backend, X, off) if X.dtype == torch.float64 and off.dtype == torch.float64 else None
    if K is not None:  # CPU: the same pass fused into one compiled walk per list (no [B, N, 2H] temporaries)
        return K.window_pass(X, off, win.order, win.hi, win.lo, win.start, win.end, lower)
    H = X.shape[-1]
    Xs = _rows(X, win.order)
    off_s = off.detach().gather(-1, win.order)
    C = _prefix(torch.cat([Xs, Xs * off_s[..., None]], -1))  # [B, N + 1, 2H]: prefix sums of X and u X
    at_hi, at_lo = _rows(C, win.hi), _rows(C, win.lo)
    w = at_hi[..., :H] - at_lo[..., :H]
    uw = at_hi[..., H:] - at_lo[..., H:]
    o = off.detach()[..., None]
    if lower:
        first = at_lo[..., :H] - (0 if win.start is None else _rows(C[..., :H], win.start))
        return w, first + (0.5 + o) * w - uw
    last = C[:, -1:, :H] if win.end is None else _rows(C[..., :H], win.end)
    return w, (last - at_hi[..., :H]) + (0.5 - o) * w + uw


class _WindowSum(torch.autograd.Function):
    """``out_i = sum_j ramp(u_j - u_i) R_j`` by prefix sums, with the hand-written backward: ``dR_j = sum_i
    ramp(u_j - u_i) G_i`` (the same prefix sums of ``G``, the kernel transposed) and ``du_i = sum_h (R_ih sum_W G_h
    - G_ih sum_W R_h)`` (the ramp's slope inside the window), so autograd keeps no gather or cumsum buffers."""

    @staticmethod
    def forward(ctx, R: Tensor, off: Tensor, win: "_Window") -> Tensor:
        w, out = _window_pass(R, off, win, lower=False)
        ctx.win = win
        ctx.save_for_backward(R, off, w)
        return out

    @staticmethod
    def backward(ctx, G: Tensor):
        R, off, wR = ctx.saved_tensors
        wG, dR = _window_pass(G, off, ctx.win, lower=True)
        d_off = (R * wG).sum(-1) - (G * wR).sum(-1) if ctx.needs_input_grad[1] else None
        return dR if ctx.needs_input_grad[0] else None, d_off, None


class _LevelWindowSum(torch.autograd.Function):
    """:class:`_WindowSum` with a :class:`LevelPairWeight` fused in (the compiled CPU pass
    :func:`torchfair.kernels.windows.level_window_pass`): ``out_i = sum_j w(l_i, l_j) ramp(u_j - u_i) R_j``
    with ``w = greater / equal / less`` for ``l_j`` below / equal to / above ``l_i``.  Backward: the transposed
    kernel with the transposed weight (``less / equal / greater``) and ``du_i = sum_h (R_ih WG_ih - G_ih WR_ih)``,
    ``WR``, ``WG`` the weighted window sums."""

    @staticmethod
    def forward(ctx, R: Tensor, off: Tensor, win: "_Window", level: Tensor, weights: Tuple[float, float, float]):
        K = kernels("windows", "numba", R, off)

        g, e, l = weights
        w, out = K.level_window_pass(R, off, level, win.order, win.hi, win.lo, False, g, e, l)
        ctx.win, ctx.level, ctx.weights = win, level, weights
        ctx.save_for_backward(R, off, w)
        return out

    @staticmethod
    def backward(ctx, G: Tensor):
        K = kernels("windows", "numba", G, ctx.level)

        R, off, wR = ctx.saved_tensors
        g, e, l = ctx.weights
        win = ctx.win
        wG, dR = K.level_window_pass(G.contiguous(), off, ctx.level, win.order, win.hi, win.lo, True, l, e, g)
        d_off = (R * wG).sum(-1) - (G * wR).sum(-1) if ctx.needs_input_grad[1] else None
        return dR if ctx.needs_input_grad[0] else None, d_off, None, None, None


class _RampContract(torch.autograd.Function):
    """The compiled CPU contraction of :func:`ramp_contract` with everything around the pass fused in
    (:func:`torchfair.kernels.windows.ramp_contract`): ``out[b, i, h] = sum_{j != i} w(l_i, l_j)
    ramp(u_j - u_i) R[b, j, h] e[b, j]`` over real ``j``, 0 on padded rows, for a level weight ``w`` (all ones:
    ``level`` 0 everywhere).  Backward in one compiled walk too: ``dR``, ``de`` and ``d off`` (the ramp's slope)."""

    @staticmethod
    def forward(ctx, R: Tensor, e: Tensor, off: Tensor, win: "_Window", level: Tensor, weights, K):
        out, X, W = K.ramp_contract(R, e, win.mask, off, level, win.order, win.hi, win.lo, *weights)
        ctx.win, ctx.weights, ctx.K = win, weights, K
        ctx.save_for_backward(R, e, off, level, X, W)
        return out

    @staticmethod
    def backward(ctx, G: Tensor):
        R, e, off, level, X, W = ctx.saved_tensors
        win = ctx.win
        need = ctx.needs_input_grad
        dR, dE, dOFF = ctx.K.ramp_contract_backward(G, R, e, X, W, win.mask, off, level, win.order, win.hi, win.lo,
                                                    *ctx.weights, values=need[0] or need[1])
        return dR if need[0] else None, dE if need[1] else None, dOFF if need[2] else None, None, None, None, None


class _RampPositions(torch.autograd.Function):
    """Expected positions by the compiled pass of :func:`torchfair.kernels.windows.ramp_positions` (the
    contraction of a column of ones, without materialising it), and its one-pass backward to the offsets."""

    @staticmethod
    def forward(ctx, off: Tensor, win: "_Window", dtype: torch.dtype, K):
        pos, W = K.ramp_positions(win.mask, off, win.order, win.hi, win.lo, dtype)
        ctx.win, ctx.K = win, K
        ctx.save_for_backward(W)
        return pos

    @staticmethod
    def backward(ctx, G: Tensor):
        (W,) = ctx.saved_tensors
        win = ctx.win
        d_off = ctx.K.ramp_positions_backward(G, win.mask, win.order, win.hi, win.lo, W) if (
            ctx.needs_input_grad[0]) else None
        return d_off, None, None, None


def _fused_positions(win: "_Window", dtype: torch.dtype) -> Optional[Tensor]:
    """``pos_i = sum_{j != i} ramp(u_j - u_i)`` over real ``j`` by :class:`_RampPositions` where the compiled
    kernels run (an ungrouped float64 window on the CPU); ``None`` elsewhere."""
    if win.group is not None or win.acc != torch.float64 or dtype not in (torch.float32, torch.float64):
        return None
    K = kernels("windows", win.backend, win.off.detach())
    return None if K is None else _RampPositions.apply(win.off, win, dtype, K)


def _fused_contract(win: "_Window", right: Tensor, e: Optional[Tensor],
                    pair_weight: Optional[LevelPairWeight]) -> Optional[Tensor]:
    """:func:`ramp_contract` of ``right * e[..., None]`` by :class:`_RampContract` where the compiled kernels run
    (plain float32 / float64 CPU tensors, an ungrouped float64 window, at most :data:`MAX_LEVELS` relevance
    levels); ``None`` elsewhere (the torch code).  The result is in the dtype of ``right``, 0 on padded rows."""
    if win.group is not None or win.acc != torch.float64 or right.dtype not in (torch.float32, torch.float64):
        return None
    B, N = win.mask.shape
    if e is None:
        e = torch.ones(B, N, dtype=right.dtype)
    detached = [right.detach(), e.detach(), win.off.detach()]
    K = kernels("windows", win.backend, *detached)
    if K is None:
        return None
    if pair_weight is None:
        level, weights = torch.zeros(B, N, dtype=torch.int64), (1.0, 1.0, 1.0)
    else:
        pw = pair_weight
        KS = kernels("sorting", win.backend, *detached, pw.relevance.detach(), size=FOLLOW)  # the same path
        if KS is None:
            return None
        level, L = KS.dense_rank(pw.relevance, win.mask)
        if L > MAX_LEVELS:
            return None
        level, weights = level.clamp(0, max(L, 1) - 1), (float(pw.greater), float(pw.equal), float(pw.less))
    return _RampContract.apply(right, e, win.off, win, level, weights, K)


def ramp_sums(z: Tensor, right: Tensor, mask: Tensor, group: Optional[Tensor] = None,
              select: Optional[Tensor] = None) -> Tensor:
    """``out[b, i, h] = sum_j ramp(z_j - z_i) right[b, j, h]`` over the real ``j`` (``j = i`` included, weight
    1/2) with ``group_j = group_i`` (every ``j`` when ``group`` is None) and ``select_j`` (bool ``[B, N]``, every
    ``j`` when None).  ``z [B, N]`` are the scores over the temperature; float64 prefix sums (except on MPS)."""
    return _Window(z, mask, group).sums(right, select)


def _levels(level: Tensor, mask: Tensor) -> Optional[int]:
    """The number of relevance levels when it is free to read (CPU tensors) and small enough for one prefix sum
    per level (:data:`MAX_LEVELS`); ``None`` otherwise (the bit sweep)."""
    if level.device.type != "cpu" or not level.numel():
        return None
    L = int(level.masked_fill(~mask, 0).max()) + 1
    return L if L <= MAX_LEVELS else None


def ramp_contract(z: Tensor, right: Tensor, mask: Tensor, pair_weight: Optional[LevelPairWeight],
                  window: Optional[_Window] = None) -> Tensor:
    """``out[b, i, h] = sum_{j != i} w[i, j] ramp(z_j - z_i) right[b, j, h]`` over real ``j`` (rows of padded
    items unspecified); ``window``: the ungrouped :class:`_Window` of ``z`` if already computed."""
    win = window if window is not None else _Window(z, mask)
    R = right
    B, N, H = R.shape
    self_term = 0.5 * R.to(win.acc) * mask.to(win.acc)[..., None]
    if pair_weight is None:
        return win.sums(R) - self_term
    pw = pair_weight
    K = None
    if win.acc == torch.float64 and win.group is None and kernels("windows", win.backend, win.off.detach(),
                                                                   R.detach()) is not None:
        K = kernels("sorting", win.backend, win.off.detach(), R.detach(), pw.relevance.detach(), size=FOLLOW)
    if K is not None:  # CPU: compiled dense ranks, and the level weights inside the compiled pass
        level, L = K.dense_rank(pw.relevance, mask)
        if L <= MAX_LEVELS:
            X = R.to(win.acc) * mask.to(win.acc)[..., None]
            out = _LevelWindowSum.apply(X, win.off, win, level.clamp(0, max(L, 1) - 1),
                                        (pw.greater, pw.equal, pw.less))
            return out - pw.equal * self_term if pw.equal else out
    else:
        level = _dense_rank(pw.relevance, mask)
    L = _levels(level, mask)
    if L is not None:  # every level in one sum: S[.., l, :] = the sum over the partners of level l
        lvl = level.clamp(0, L - 1)
        onehot = torch.nn.functional.one_hot(lvl, L).to(R.dtype)  # [B, N, L]
        S = win.sums((R[:, :, None, :] * onehot[..., None]).reshape(B, N, L * H)).reshape(B, N, L, H)
        # the pair weight of (i, level l): greater below i's level, equal at it, less above; the self term
        # (j = i, weight 1/2 in the window sums) sits in the "equal" band
        ar = torch.arange(L, device=lvl.device)
        gr, eq, ls = (torch.as_tensor(x, dtype=S.dtype, device=S.device) for x in (pw.greater, pw.equal, pw.less))
        coef = torch.where(ar < lvl[..., None], gr, torch.where(ar == lvl[..., None], eq, ls))
        out = torch.einsum("bnlh,bnl->bnh", S, coef)
        return out - pw.equal * self_term if pw.equal else out
    else:  # the bits of the level, most significant first: j below i at the first bit where they differ
        nbits = max(1, int(N).bit_length())
        less = 0
        for bit in range(nbits):
            b = ((level >> bit) & 1).bool()
            part = _Window(z, mask, group=level >> (bit + 1)).sums(R, select=~b)
            less = less + torch.where(b[..., None], part, torch.zeros((), dtype=part.dtype, device=part.device))
        equal = _Window(z, mask, group=level).sums(R) - self_term if (pw.equal or pw.less) else None
        allsum = win.sums(R) - self_term if pw.less else None
    out = pw.greater * less
    if pw.equal:
        out = out + pw.equal * equal
    if pw.less:
        out = out + pw.less * (allsum - less - equal)
    return out


class RampRankOrderedBatch(SoftRankOrderedBatch):
    """Result of :class:`RampRank`: SoftRank's quantities with the ramp kernel, pair sums by sorted prefix sums."""

    def _dense(self) -> Optional[Tensor]:
        return None  # never forms [B, N, N] pairs for positions or contractions

    def _z(self) -> Tensor:
        """``s / tau`` in the accumulation dtype (float64; float32 on MPS): ``4 u`` (:meth:`_u`).  The ramp uses
        only differences ``z_j - z_i`` of real items, so neither the shift nor the padded value of
        :meth:`SoftRankOrderedBatch._z` is needed (padded entries: 0, never summed)."""
        return self._u() * 4

    def _u(self) -> Tensor:
        """``u = s / (4 tau)``, the window coordinate of the ramp, computed once per ordering: one multiply by a
        per-list factor, clamped to a quarter of the dtype's range only where that can overflow (float32 scores
        over a temperature floored at ``temperature * min_scale`` cannot reach it in float64)."""
        u = getattr(self, "_uc", None)
        if u is None:
            acc = torch.float32 if self.mask.device.type == "mps" else torch.float64
            u = self.scores.to(acc) * (0.25 / self.tau.to(acc))
            big = torch.finfo(acc).max
            floor = getattr(self, "tau_floor", 0.0)  # the smallest temperature the ordering can give a list
            if not (acc == torch.float64 and self.scores.dtype == torch.float32 and floor > 0
                    and 0.25 * torch.finfo(torch.float32).max / floor < big / 16):
                u = u.clamp(-big / 16, big / 16)
            self._uc = u
        return u

    def _window(self) -> _Window:
        if getattr(self, "_win", None) is None:
            self._win = _Window(None, self.mask, backend=getattr(self, "backend", "auto"), scores=self.scores,
                                u=self._u())
        return self._win

    def _pair(self, start: int, stop: int) -> Tensor:
        z, N = self._z(), self.mask.shape[1]
        keep = self.mask[:, start:stop, None] & self.mask[:, None, :] & _offdiag(start, stop, N, z.device)
        return ((0.5 + (z[:, None, :] - z[:, start:stop, None]) / 4).clamp(0, 1) * keep.to(z.dtype)).to(
            self.scores.dtype)

    def expected_positions(self) -> Tensor:
        if self._pos is None:
            fused = _fused_positions(self._window(), self.scores.dtype)
            if fused is not None:
                self._pos = fused
                return self._pos
            one = torch.ones(*self.mask.shape, 1, dtype=self.scores.dtype, device=self.mask.device)
            pos = ramp_contract(self._z(), one, self.mask, None, self._window())[..., 0].to(self.scores.dtype)
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
        e = self.exposure(browsing, relevance).to(R.dtype) if which == "joint" else None
        fused = _fused_contract(self._window(), R, e, pair_weight)
        if fused is not None:
            return fused.to(right.dtype)
        if e is not None:
            R = R * e[..., None]
        out = ramp_contract(self._z(), R, self.mask, pair_weight, self._window())
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
    ``backend``: ``"auto"`` (default: the compiled window passes of :mod:`torchfair.kernels` for plain CPU
    tensors), ``"numba"`` (those kernels, an error where they cannot run) or ``"torch"``; the same values up to
    float64 rounding.

    Example::

        >>> RampRank(0.01, scale="none")(torch.tensor([[3., 1., 2.]]), torch.ones(1, 3, dtype=torch.bool)
        ...                               ).expected_positions()
        tensor([[0., 2., 1.]])
    """

    def __init__(self, temperature: float = 0.1, scale: str = "std", *, min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE, min_position_std: float = 0.1, sinkhorn_iters: int = 0,
                 backend: str = "auto"):
        from .soft import _check_iters
        from .._validation import check_number

        self._init_temperature(temperature, scale, min_scale, rel_min_scale)
        self.min_position_std = check_number(min_position_std, "min_position_std", low=0, low_open=True)
        self.sinkhorn_iters = _check_iters(sinkhorn_iters)
        self.backend = check_choice(backend, "backend", BACKENDS)

    def __call__(self, scores: Tensor, mask: Tensor) -> RampRankOrderedBatch:
        s, mask = _work(scores, mask)
        batch = RampRankOrderedBatch(s, mask, self._tau(s, mask), self.min_position_std, self.sinkhorn_iters, None)
        batch.backend = self.backend
        batch.tau_floor = self.temperature * (self.min_scale if self.scale == "std" else 1.0)
        return batch

    def __repr__(self) -> str:
        extra = "" if self.backend == "auto" else f", backend={self.backend!r}"
        return f"RampRank(temperature={self.temperature}, scale={self.scale!r}{extra})"
