"""Fast soft ranks: projection onto the permutahedron (Blondel, Teboul, Berthet & Djolonga, ICML 2020).

Convention
----------
Positions are **0-based and descending**: the item with the highest score gets soft position ~0, the lowest
~``n - 1`` (``n`` = number of real items of the list).  This is the paper's rank minus one:

.. math:: \\mathrm{pos}(\\theta) = P_Q\\big(-\\theta / \\varepsilon,\\; (n-1, n-2, \\dots, 0)\\big),
          \\qquad P_Q(z, w) = \\arg\\min_{\\mu \\in \\mathcal{P}(w)} \\tfrac12 \\|\\mu - z\\|^2

(quadratic regularisation, paper §4-5; ``P(w)`` is the permutahedron, the convex hull of the permutations of
``w``).  The soft positions of a list always sum to ``n (n - 1) / 2`` and lie in ``[0, n - 1]``; they equal the
hard positions as soon as every two real scores differ by at least ``epsilon`` (paper Prop. 2), so the limit
``epsilon -> 0`` is exact, not asymptotic.  Tied scores get equal (averaged) positions.

Algorithm (paper Prop. 3): sort ``z = -theta / epsilon`` descending (``s``), solve the isotonic regression
``v = argmin_{v_1 >= ... >= v_n} ||v - (s - w)||^2`` by pool-adjacent-violators, and ``pos = z - v`` (unsorted).
O(N log N) for the sort, O(N) for the isotonic regression.  The Jacobian of ``v`` is block diagonal with constant
blocks ``1 / |block|`` (paper Lemma 1), so the backward is ``g - unsort(blockmean(sort(g)))`` (times
``-1 / epsilon``): one gather, two segment sums and one scatter, O(N).  ``epsilon`` is treated as a constant.

Two isotonic solvers (``backend``):

* ``"numba"`` -- sequential PAV compiled by numba (:mod:`torchfair.kernels.pav`; the paper authors' own reference
  implementation uses numba for this step): one kernel per list does everything after the sort (gap compression,
  PAV, positions, unsorting) and one does the backward.  Used by ``"auto"`` for CPU tensors as
  :func:`torchfair.kernels.load` decides (``TORCHFAIR_KERNELS``); compiled on first use, cached on disk.
* ``"torch"`` -- pure PyTorch, runs on any device, no compilation.  Parallel PAV over blocks, in rounds.  A plain
  round pools every maximal run of adjacent violators (``mean_k <= mean_{k+1}``; a violating pair always ends in
  one final block).  Plain rounds absorb a *staircase* (a block whose pooled mean keeps violating with the next
  one) one block per round, so once the violations stop dying out (more than half survive a round) a tangent
  round pools each violating pair ``(k, k + 1)`` with the blocks up to the right tangent of ``k``,
  ``argmax_{k <= u < k + W} mean(blocks k..u)``, and from the left tangent of ``k + 1``,
  ``argmin_{k + 2 - W <= t <= k + 1} mean(blocks t..k+1)``: on the cumulative-sum diagram both are chords above
  every point they span, so no final block boundary is inside and the pooling is valid.  The window ``W`` fits
  ``violations * W <= window_budget``.  Each round costs one host synchronisation (the convergence test and the
  new block count).

Both sort the scores once, float32 scores as int32 keys with the same order (a faster sort); the sort need not be
stable, since tied scores end in one block whatever their order.

Masks
-----
Padded items (``mask == False``) are excluded: the projection is over the ``n_b`` real items only, padded items
get position 0, no exposure, no pair mass and exactly zero gradient whatever they hold (NaN included).

Pair quantities of :class:`FastSoftRank`
----------------------------------------
From the soft positions ``p``::

    above[i, j] = clamp(p_i - p_j + 1/2, 0, 1)     (P(j above i); i != j, both real)
    exposure_i  = F(p_i)
    joint[i, j] = F(p_j) * above[i, j]

``above[i, j] + above[j, i] = 1`` for every pair; at hard positions (distinct integers) ``above`` is the exact
0/1 indicator and for tied scores (equal positions) it is ``1/2``, as in ``Hard(ties="average")``.  Hence every
pairwise measure equals its hard value exactly once ``epsilon`` is below the smallest score gap.  Gradients flow
through ``above`` for pairs whose soft positions are less than 1/2 apart, and through the exposures.
:meth:`FastSoftRankOrderedBatch.position_matrix` spreads each item linearly over the two integer positions
around ``p_i`` (``R[k, i] = max(0, 1 - |k - p_i|)``): columns sum to 1 and have mean ``p_i`` exactly, rows sum
to 1 exactly at hard positions and only approximately otherwise.

Temperature
-----------
``epsilon`` is in score units: a pair is treated as tied-ish when its score gap is below ``epsilon`` (the soft
positions of two items differ by ``min(1, gap / epsilon)`` when they pool alone).  :class:`FastSoftRank` uses
``epsilon = temperature * max(std, rel_min_scale * mean|s|, min_scale)`` by default (``scale="std"``, detached),
the one temperature rule of :mod:`torchfair.orderings.soft` (see its section Temperature: ``min_scale``, default
0.25 score units, keeps tied lists at gradients of ordinary size); with ``scale="none"`` ``temperature`` is
``epsilon`` itself.  For the functional :func:`soft_rank` the default is ``scale="none"`` (``temperature`` is then
the paper's ``epsilon``, torchsort's ``regularization_strength``).  Adjacent scores of ``N`` roughly evenly spread
items differ by about ``3.5 / N`` std, so with ``scale="std"`` a ``temperature`` well below ``1 / N`` is nearly
hard and ``temperature`` around ``1 / N .. 10 / N`` is smooth for neighbouring items.

Numerics
--------
``z = -theta / epsilon`` can be huge (``|theta| = 1e19`` with ``epsilon = 1e-3``), and then ``z - w`` loses ``w``
and the mean of tied values differs from them by an ulp, which put soft positions far outside ``[0, n - 1]``.
Before the isotonic regression the sorted ``z`` are therefore rewritten as ``t`` with every gap larger than ``n``
replaced by ``n + 1``: the regression never pools across a gap larger than ``n - 1``, and within the runs between
such gaps ``t`` is ``z`` shifted by a constant, so the positions are unchanged while every number stays of order
``n**2``.  The positions are finally clipped to ``[0, n - 1]`` (rounding only).

Dtypes: the projection is computed in float64 and returned in the scores' dtype (float16 / bfloat16 -> float32).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _linalg
from ..browsing import BrowsingModel
from .._validation import check_int as _check_int
from .._validation import check_choice
from ..kernels import BACKENDS
from .soft import MIN_SCALE, REL_MIN_SCALE, _check_common, _Tempered, _temperature  # one temperature rule
from .base import OrderedBatch, PairBlock, ranked_exposure, work_scores

__all__ = ["soft_rank", "FastSoftRank", "FastSoftRankOrderedBatch", "isotonic_nonincreasing", "numba_available"]


#: elements of the ``[violations, window]`` tensors of a tangent round of the torch PAV solver
WINDOW_BUDGET = 2 ** 16


# ------------------------------------------------------------------------------------------- numba backend
def _numba_kernel(backend: str = "auto"):
    """The compiled PAV kernels (:mod:`torchfair.kernels.pav`), or ``None`` where the loader picks the torch code."""
    from .. import kernels

    return kernels.load("pav", backend)


def numba_available() -> bool:
    """True when the numba backend can be used (numba importable)."""
    from .. import kernels

    return kernels.numba_available()


def _solve_numba(theta: Tensor, eps: Tensor, order: Tensor, n: Tensor) -> Tuple[Tensor, Tensor]:
    """Positions ``[B, N]`` (``theta``'s dtype) and sorted block ids ``[B, N]`` from the sort ``order``."""
    project = _numba_kernel("numba").project_rows
    pos = torch.zeros(theta.shape, dtype=theta.dtype)
    blk = torch.empty(theta.shape, dtype=torch.int64)
    project(theta.detach().contiguous().numpy(), eps.detach().to(torch.float64).reshape(-1).contiguous().numpy(),
            order.numpy(), n.numpy(), pos.numpy(), blk.numpy())
    return pos, blk


def _backward_numba(grad: Tensor, eps: Tensor, order: Tensor, blk: Tensor, n: Tensor) -> Tensor:
    backward = _numba_kernel("numba").backward_rows
    out = torch.zeros(grad.shape, dtype=grad.dtype)
    backward(grad.contiguous().numpy(), eps.to(torch.float64).reshape(-1).contiguous().numpy(), order.numpy(),
             blk.numpy(), n.numpy(), out.numpy())
    return out


def _sort_order(theta: Tensor, mask: Tensor) -> Tensor:
    """``[B, N]`` item indices by ascending ``theta`` (descending ``z = -theta / eps``), padded items last.

    float32 scores are sorted as int32 keys with the same order (a faster sort): the bits of a float read as a
    signed integer increase with it for ``x >= 0`` and decrease for ``x < 0``, so flipping the magnitude bits of the
    negative ones gives an increasing map; padded items get keys ``0x7F800001 + index``, above every real key
    (``+inf`` is ``0x7F800000``).  The sort need not be stable: tied scores end in the same block of the isotonic
    regression (their ``z - w`` violate the order), so they get the same position whatever their order."""
    B, N = theta.shape
    if theta.dtype == torch.float32:
        i = theta.view(torch.int32)
        key = i ^ ((i >> 31) & 0x7FFFFFFF)
        pad = torch.arange(0x7F800001, 0x7F800001 + N, dtype=torch.int32, device=theta.device)
        key = torch.where(mask, key, pad)
    else:
        key = torch.where(mask, theta, torch.full((), float("inf"), dtype=theta.dtype, device=theta.device))
    return torch.sort(key, dim=1).indices


# ------------------------------------------------------------------------------------------- torch backend
def isotonic_nonincreasing(y: Tensor, n: Optional[Tensor] = None, *, window_budget: Optional[int] = None
                           ) -> Tensor:
    """Block id of every entry of the non-increasing isotonic regression of each row of ``y [B, N]``.

    ``argmin_{v_1 >= ... >= v_n} ||v - y[:n]||^2`` is constant on each block (``v`` = block mean of ``y``).
    Only the first ``n[b]`` entries of row ``b`` are used (default all); entries ``k >= n[b]`` get singleton
    blocks.  Returns ``[B, N]`` int64 block ids, non-decreasing along each row and starting at 0.  Pure torch
    (parallel PAV, see the module docstring), any device.  ``window_budget`` bounds the ``[violations, blocks]``
    tensors of a tangent round (default ``WINDOW_BUDGET``; 1: plain rounds only, same result).
    """
    return _isotonic(y, n, window_budget)[0]


def _isotonic(y: Tensor, n: Optional[Tensor], window_budget: Optional[int]) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`isotonic_nonincreasing`, also returning the final block sums and sizes ``[B, M]`` (those of the
    padded entries hold stand-in values).

    Rounds on the blocks (sums ``S``, sizes ``C``): a plain round pools every maximal run of adjacent violators
    (``mean_k <= mean_{k+1}``); once the violations stop dying out (staircases, which plain rounds absorb one block
    at a time) a tangent round pools each violating pair with the blocks up to its windowed tangents
    (:func:`_tangent_links`).  Padded entries get stand-ins ``-1e100 (k + 1)``, strictly decreasing and below
    every real value, so they stay singleton blocks without bookkeeping.  One host synchronisation per round."""
    B, N = y.shape
    dev = y.device
    budget = WINDOW_BUDGET if window_budget is None else int(window_budget)
    y = y.to(torch.float64)  # (the stand-ins below, and exact enough block means)
    k = torch.arange(N, device=dev)
    if n is not None:
        pad = (k + 1).to(y.dtype) * -1e100
        y = torch.where(k[None, :] < n.to(torch.int64)[:, None], y, pad)
    blk = k.expand(B, N)
    SC = torch.stack([y, torch.ones_like(y)], 1)  # [B, 2, M]: block sums and sizes
    M = N
    prev = None
    while M > 1:
        S, C = SC[:, 0], SC[:, 1]
        # adjacent violators: mean_k <= mean_{k+1}; none left: the blocks are the solution (lists with fewer
        # blocks than M end in empty ones, C = 0)
        viol = (S[:, :-1] * C[:, 1:] <= S[:, 1:] * C[:, :-1]) & (C[:, 1:] > 0)
        nv = int(viol.sum())
        if nv == 0:
            break
        L = min(M, budget // nv)  # tangent window (blocks)
        tangent = prev is not None and 2 * nv > prev and L >= 2
        prev = nv
        link = _tangent_links(S, C, viol, M, L) if tangent else viol
        g = torch.cumsum(torch.nn.functional.pad(~link, (1, 0)), 1, dtype=torch.int64)  # new block of each block
        newM = int(g[:, -1].max()) + 1
        SC = torch.zeros(B, 2, newM, dtype=SC.dtype, device=dev).scatter_add_(2, g[:, None, :].expand(B, 2, M), SC)
        blk = g.gather(1, blk)
        M = newM
    return blk, SC[:, 0], SC[:, 1]


def _tangent_links(S: Tensor, C: Tensor, viol: Tensor, M: int, L: int) -> Tensor:
    """Boundaries to pool ``[B, M - 1]`` for the blocks (sums ``S``, sizes ``C``) with the adjacent violations
    ``viol``: for a violation between blocks ``k`` and ``k + 1``, block ``k`` pools with the blocks up to its right
    tangent ``argmax_{k <= u < k + L} mean(k..u)`` and block ``k + 1`` with those from its left tangent
    ``argmin_{k + 2 - L <= t <= k + 1} mean(t..k+1)``.  On the cumulative-sum diagram both are chords above every
    point they span, so no final block boundary lies inside: the pooling is valid, and a run of up to ``L`` blocks
    that plain rounds would absorb one per round (a staircase) is pooled at once.  ``[violations, L]`` tensors;
    candidates beyond the row repeat its last (first) one, and the padded blocks (far below) are never chosen."""
    B = S.shape[0]
    dev = S.device
    bi, ki = viol.nonzero(as_tuple=True)  # [A]
    PS = torch.nn.functional.pad(torch.cumsum(S, 1), (1, 0)).reshape(-1)  # [B * (M + 1)]: prefix sums
    PC = torch.nn.functional.pad(torch.cumsum(C, 1), (1, 0)).reshape(-1)
    row = (bi * (M + 1))[:, None]
    kk = row + ki[:, None]  # flat index of PS[k] (the prefix before block k)
    j = torch.arange(L, device=dev)[None, :]
    # right tangent of block k: max over u in [k, k + L) of (PS[u+1] - PS[k]) / (PC[u+1] - PC[k]) (block sizes are
    # >= 1: no zero denominators)
    iu = torch.minimum(kk + 1 + j, row + M)
    r = ki + (PS[iu] - PS[kk]).div_(PC[iu] - PC[kk]).argmax(1)
    # left tangent of block k + 1: min over t in [k + 2 - L, k + 1] of (PS[k+2] - PS[t]) / (PC[k+2] - PC[t])
    it = torch.maximum(kk + 1 - j, row)
    t = ki + 1 - (PS[kk + 2] - PS[it]).div_(PC[kk + 2] - PC[it]).argmin(1)
    # boundaries k..r-1 and t..k are linked: +1 / -1 marks, summed along the row
    base = bi * M
    one = torch.ones_like(ki)
    idx = torch.cat([base + ki, base + r, base + t, base + ki + 1])
    diff = torch.zeros(B * M, dtype=torch.int64, device=dev).scatter_add_(0, idx, torch.cat([one, -one, one, -one]))
    return (torch.cumsum(diff.view(B, M), 1)[:, :M - 1] > 0) | viol


def _solve_torch(t: Tensor, n: Tensor, window_budget: Optional[int]) -> Tuple[Tensor, Tensor, Tensor]:
    """Sorted positions ``t - blockmean(t - w)`` (``= t - blockmean(t) + blockmean(w)``) for the compressed sorted
    ``t [B, N]``, with the block ids and block sizes."""
    B, N = t.shape
    w = (n[:, None] - 1).to(t.dtype) - torch.arange(N, device=t.device, dtype=t.dtype)
    blk, S, C = _isotonic(t - w, n, window_budget)
    return t - (S / C).gather(1, blk), blk, C


# ------------------------------------------------------------------------------------------- autograd op
def _check_window_budget(window_budget):
    return None if window_budget is None else _check_int(window_budget, "window_budget", low=1)


def _pick_backend(backend: str, s: Tensor) -> str:
    """``"numba"`` or ``"torch"`` for the scores ``s``: ``"auto"`` by :func:`torchfair.kernels.pick` (the input
    size and ``TORCHFAIR_KERNELS``)."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "auto":
        from .. import kernels

        return "numba" if kernels.pick("pav", "auto", s.detach()) is not None else "torch"
    if backend == "numba":
        if s.device.type != "cpu":
            raise ValueError("backend='numba' needs CPU tensors; use backend='torch' (or 'auto') on other devices")
        _numba_kernel("numba")  # ValueError naming the backend when numba cannot be loaded
    return backend


def _compress_gaps(s: Tensor, n: Tensor) -> Tensor:
    """Sorted (descending) ``z [B, N]`` (first ``n[b]`` entries real) mapped to ``t`` with the same projection but
    values of order ``n**2`` only, so that no precision is lost (module docstring, Numerics).

    Gaps ``z_k - z_{k+1}`` larger than ``n`` are replaced by ``n + 1``: the isotonic regression never pools across a
    gap larger than ``n - 1`` (every ``z - w`` on its left exceeds every one on its right), and within the runs
    between such gaps ``t`` is ``z`` shifted by a constant, which the positions ``t - blockmean(t) + blockmean(w)``
    do not see.  Adjacent sorted values that are close are subtracted exactly (Sterbenz), so ties and small gaps
    survive even for ``|z| ~ 1e40``; the padded tail holds finite values, unused."""
    B, N = s.shape
    t = torch.zeros_like(s)
    if N > 1:
        d = torch.nan_to_num_(s[:, :-1] - s[:, 1:], nan=0.0)  # inf - inf (two items tied at infinity): 0
        torch.minimum(d.clamp_(min=0), (n.to(s.dtype) + 1)[:, None], out=d)
        torch.cumsum(d, 1, out=t[:, 1:])
    return t.neg_()  # the padded tail holds finite values (not used)


class _ProjectPermutahedron(torch.autograd.Function):
    """Soft positions of ``theta [B, N]`` (padded entries blanked) with ``eps [B, 1]``, in ``theta``'s dtype
    (computed in float64)."""

    @staticmethod
    def forward(ctx, theta: Tensor, eps: Tensor, mask: Tensor, backend: str, window_budget: Optional[int]):
        th = theta.detach()
        B, N = th.shape
        order = _sort_order(th, mask)
        n = mask.sum(1)
        ctx.backend = backend
        if backend == "numba":
            pos, blk = _solve_numba(th, eps, order, n)
            ctx.save_for_backward(order, blk, mask, eps, n)
            return pos
        s = th.gather(1, order).to(torch.float64).div_(-eps.to(torch.float64))  # z sorted descending
        pos_sorted, blk, C = _solve_torch(_compress_gaps(s, n), n, window_budget)
        # the projection lies in [0, n - 1]; the clamp only removes rounding (the backward uses the blocks)
        hi = (n[:, None] - 1).clamp(min=0).to(torch.float64)
        torch.minimum(pos_sorted.clamp_(min=0), hi, out=pos_sorted)
        real = torch.arange(N, device=th.device)[None, :] < n[:, None]
        pos_sorted = torch.where(real, pos_sorted, torch.zeros((), dtype=pos_sorted.dtype, device=th.device))
        pos = torch.empty_like(th).scatter_(1, order, pos_sorted.to(th.dtype))
        ctx.save_for_backward(order, blk, mask, eps, n, C)
        return pos

    @staticmethod
    def backward(ctx, grad: Tensor):
        if ctx.backend == "numba" and not torch.is_grad_enabled():  # (create_graph: the differentiable torch ops)
            order, blk, mask, eps, n = ctx.saved_tensors
            return _backward_numba(grad, eps, order, blk, n), None, None, None, None
        order, blk, mask, eps, n, *C = ctx.saved_tensors
        gs = grad.gather(1, order)  # sorted; padded items are singleton blocks, masked at the end
        if C:
            cnt = C[0].to(gs.dtype)
        else:
            cnt = torch.zeros_like(gs).scatter_add_(1, blk, torch.ones_like(gs))
        mean = torch.zeros(cnt.shape, dtype=gs.dtype, device=gs.device).scatter_add(1, blk, gs) / cnt.clamp(min=1)
        gz = torch.zeros_like(gs).scatter(1, order, gs - mean.gather(1, blk))
        gtheta = gz * (-1.0 / eps.to(gz.dtype))
        return torch.where(mask, gtheta, torch.zeros((), dtype=gtheta.dtype, device=gtheta.device)), None, None, \
            None, None


# ------------------------------------------------------------------------------------------- public API
def _work(scores: Tensor, mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    if mask is None and isinstance(scores, Tensor):
        mask = torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    return work_scores(scores, mask)


def soft_rank(scores: Tensor, temperature: float = 1.0, mask: Optional[Tensor] = None, *, scale: str = "none",
              min_scale: float = MIN_SCALE, rel_min_scale: float = REL_MIN_SCALE, regularization: str = "l2",
              backend: str = "auto", window_budget: Optional[int] = None, validate_args: bool = True) -> Tensor:
    """Fast soft ranks (Blondel et al., 2020): 0-based soft positions, **0 = highest score** (descending).

    ``scores``: ``[B, N]`` or ``[N]`` floating.  ``temperature``: the regularisation strength ``epsilon`` in score
    units with ``scale="none"`` (default here; torchsort's ``regularization_strength``), or relative to each
    list's detached score scale with ``scale="std"`` (``max(std, rel_min_scale * mean|s|, min_scale)``, see
    :class:`FastSoftRank`).  ``mask``: ``[B, N]`` bool, True for real items (padded
    items get position 0 and zero gradient).  ``regularization``: ``"l2"`` (quadratic; the only one
    implemented).  ``backend``: ``"auto"`` (numba on CPU when installed, else torch), ``"numba"`` or ``"torch"``.
    Forward and backward are O(N log N) (sort) + O(N).  See the module docstring.

    Example::

        >>> soft_rank(torch.tensor([3., 1., 2.]), 0.1)
        tensor([0., 2., 1.])
        >>> soft_rank(torch.tensor([3., 1., 2.]), 10.0)  # strong regularisation: all positions tend to (n-1)/2
        tensor([0.9000, 1.1000, 1.0000])
    """
    check_choice(regularization, "regularization", ("l2",))
    _check_common(temperature, scale, min_scale, rel_min_scale)
    _check_window_budget(window_budget)
    squeeze = isinstance(scores, Tensor) and scores.dim() == 1
    if squeeze:
        scores = scores.unsqueeze(0)
        mask = None if mask is None else mask.unsqueeze(0)
    s, mask = _work(scores, mask)
    if validate_args:
        if not mask.any():  # one host sync; validate_args=False skips it
            raise ValueError("`mask` has no real item: the batch holds no list with an item to rank")
        if not torch.isfinite(s[mask]).all():
            raise ValueError("`scores` must be finite (no NaN or inf) on real items")
    eps = _temperature(s, mask, temperature, scale, min_scale, rel_min_scale)
    be = _pick_backend(backend, s)
    pos = _ProjectPermutahedron.apply(s, eps, mask, be, window_budget)
    return pos.squeeze(0) if squeeze else pos


class FastSoftRankOrderedBatch(OrderedBatch):
    """Result of :class:`FastSoftRank`: soft positions and the quantities derived from them (module docstring)."""

    def __init__(self, scores: Tensor, mask: Tensor, positions: Tensor):
        self.scores, self.mask, self.positions = scores, mask, positions

    def expected_positions(self) -> Tensor:
        return self.positions

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        mf = self.mask.to(self.positions.dtype)
        if not browsing.relevance_dependent:  # F at the soft position
            return browsing.weight(self.positions) * mf
        R = self.position_matrix()  # [B, K, N]: a relevance-dependent model sees the softly sorted relevance R @ r
        f = ranked_exposure(browsing, relevance, self.mask, R.dtype,
                            lambda rel: _linalg.bmm(R, rel.unsqueeze(-1)).squeeze(-1))
        return _linalg.einsum("bk,bki->bi", f, R) * mf

    def pair_context(self, browsing, relevance) -> Optional[Tensor]:
        return None if browsing is None else self.exposure(browsing, relevance)

    def pair_block(self, context: Optional[Tensor], start: int, stop: int) -> PairBlock:
        B, N = self.mask.shape
        p = self.positions
        dt = p.dtype
        above = torch.clamp(p[:, start:stop, None] - p[:, None, :] + 0.5, 0.0, 1.0)
        rows = torch.arange(start, stop, device=p.device)[:, None]
        off = rows != torch.arange(N, device=p.device)[None, :]
        w = (self.mask[:, start:stop, None] & self.mask[:, None, :] & off[None]).to(dt)
        above = above * w
        joint = None if context is None else context[:, None, :] * above
        return PairBlock(above=above, joint=joint)

    def position_matrix(self) -> Tensor:
        B, N = self.mask.shape
        dt = self.positions.dtype
        k = torch.arange(N, device=self.positions.device, dtype=dt)[None, :, None]
        R = torch.clamp(1 - (k - self.positions[:, None, :]).abs(), min=0.0)
        return R * self.mask[:, None, :].to(dt)


class FastSoftRank(_Tempered):
    """Soft positions by projection onto the permutahedron (Blondel et al., 2020), O(N log N) forward/backward.

    ``temperature``: ``epsilon`` relative to each list's score scale with ``scale="std"`` (default:
    ``epsilon = temperature * max(std, rel_min_scale * mean|s|, min_scale)``, the rule of
    :class:`~torchfair.orderings.SoftRank`, module docstring of :mod:`torchfair.orderings.soft`, Temperature),
    absolute with ``scale="none"``; smaller is closer to the hard ranking, which is reached exactly once
    ``epsilon`` is below every score gap.  ``backend``: ``"auto"`` / ``"numba"`` / ``"torch"`` (see
    :func:`soft_rank`).  Pair
    quantities use ``above[i, j] = clamp(p_i - p_j + 1/2, 0, 1)`` (module docstring).

    Example::

        >>> FastSoftRank(0.01, scale="none")(torch.tensor([[3., 1., 2.]]), torch.ones(1, 3, dtype=torch.bool)
        ...                                   ).expected_positions()
        tensor([[0., 2., 1.]])
    """

    def __init__(self, temperature: float = 0.01, scale: str = "std", *, min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE, backend: str = "auto", window_budget: Optional[int] = None):
        self._init_temperature(temperature, scale, min_scale, rel_min_scale)
        self.backend = check_choice(backend, "backend", BACKENDS)
        self.window_budget = _check_window_budget(window_budget)

    def __call__(self, scores: Tensor, mask: Tensor) -> FastSoftRankOrderedBatch:
        s, mask = _work(scores, mask)
        eps = self._tau(s, mask)
        pos = _ProjectPermutahedron.apply(s, eps, mask, _pick_backend(self.backend, s), self.window_budget)
        return FastSoftRankOrderedBatch(s, mask, pos)

    def __repr__(self) -> str:
        return f"FastSoftRank(temperature={self.temperature}, scale={self.scale!r})"
