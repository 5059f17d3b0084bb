"""Compiled (numba) prefix-sum passes of :class:`~torchfair.orderings.RampRank`'s windows on CPU tensors: the
window bounds (:func:`window_bounds`), the fused pass (:func:`window_pass`) and the pass with a relevance-level pair
weight (:func:`level_window_pass`).  Imported through :func:`torchfair.kernels.load`; the torch code of
:mod:`torchfair.orderings.ramp` is the reference (tests/kernels/test_windows.py).

    >>> from torchfair.kernels import load
    >>> key = torch.tensor([[0., 0.25, 2.]], dtype=torch.float64)
    >>> load("windows").window_bounds(key, torch.tensor([[0, 1, 2]]))
    (tensor([[2, 2, 3]]), tensor([[0, 0, 2]]))
"""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor

from ._threads import np_view, run as _run

__all__ = ["window_bounds", "ordered_window_bounds", "window_pass", "level_window_pass", "list_scale", "ramp_contract",
           "ramp_contract_backward", "ramp_positions", "ramp_positions_backward", "warmup"]

@numba.njit(cache=True, nogil=True)
def _window_rows(X, off, order, hi, lo, start, end, grouped, lower, W, OUT, b0, b1):  # pragma: no cover - compiled
    """:func:`window_pass` for the lists ``[b0, b1)``: per list, the prefix sums of ``X`` and ``off * X`` along
    ``order`` (``[N + 1, 2H]`` scratch), read at each item's window bounds."""
    N = X.shape[1]
    H = X.shape[2]
    C = np.empty((N + 1, 2 * H))
    for b in range(b0, b1):
        for h in range(2 * H):
            C[0, h] = 0.0
        for k in range(N):
            it = order[b, k]
            o = off[b, it]
            for h in range(H):
                x = X[b, it, h]
                C[k + 1, h] = C[k, h] + x
                C[k + 1, H + h] = C[k, H + h] + x * o
        for i in range(N):
            a = hi[b, i]
            c = lo[b, i]
            o = off[b, i]
            for h in range(H):
                wv = C[a, h] - C[c, h]
                uw = C[a, H + h] - C[c, H + h]
                W[b, i, h] = wv
                if lower:
                    first = C[c, h] - (C[start[b, i], h] if grouped else 0.0)
                    OUT[b, i, h] = first + (0.5 + o) * wv - uw
                else:
                    last = C[end[b, i], h] if grouped else C[N, h]
                    OUT[b, i, h] = (last - C[a, h]) + (0.5 - o) * wv + uw


@numba.njit(cache=True, nogil=True)
def _levels_of(lvl, b0, b1):  # pragma: no cover - compiled
    """The number of levels ``max level + 1`` of the lists ``[b0, b1)``."""
    L = 1
    for b in range(b0, b1):
        for i in range(lvl.shape[1]):
            if lvl[b, i] + 1 > L:
                L = lvl[b, i] + 1
    return L


@numba.njit(cache=True, nogil=True)
def _level_list(X, off, lvl, order, hi, lo, L, lower, cb, ce, ca, D, W, OUT):  # pragma: no cover - compiled
    """One list of :func:`level_window_pass`: ``X [N, H]``, ``off`` / ``lvl`` / ``order`` / ``hi`` / ``lo`` ``[N]``,
    scratch ``D [2, N + 1, L]``, outputs ``W`` / ``OUT [N, H]``.  Column by column, along ``order``, ``D`` holds
    the prefix sums of ``X`` and ``off * X`` over the items of level ``<= l`` for every level ``l`` (cumulative over
    the levels); item ``i`` of level ``l_i`` reads the weighted sum of its partners,
    ``(below - equal) D[., l_i - 1] + (equal - above) D[., l_i] + above D[., L - 1]``, at its window bounds: three
    reads per value whatever the number of levels (one, without levels)."""
    _level_cols(X, off, lvl, order, hi, lo, L, lower, cb, ce, ca, D, W, OUT, lvl, 0)


@numba.njit(cache=True, nogil=True)
def _level_cols(X, off, lvl, order, hi, lo, L, lower, cb, ce, ca, D, W, OUT, col, own):  # pragma: no cover
    """:func:`_level_list` for the entries ``(i, h)`` a caller reads, the others left 0: ``own`` 0 every entry,
    1 the columns ``h != col[i]`` of the items with ``col[i] >= 0``, 2 the column ``h == col[i]`` alone (``col``
    ``[N]`` int: the item's own column, -1 none).  The fused DIPS walk reads the other groups' sums of an item
    forward and its own group's backward (the gap reducers never read ``M_gg``)."""
    N = X.shape[0]
    H = X.shape[1]
    Dx = D[0]
    Du = D[1]
    w1 = ce - ca
    for h in range(H):
        if L == 1:  # no levels: plain prefix sums, every partner weighted `above` (= equal = below)
            Dx[0, 0] = 0.0
            Du[0, 0] = 0.0
            for k in range(N):
                it = order[k]
                x = X[it, h]
                Dx[k + 1, 0] = Dx[k, 0] + x
                Du[k + 1, 0] = Du[k, 0] + x * off[it]
            tot = ce * Dx[N, 0]
            for i in range(N):
                if own != 0 and (col[i] < 0 or (own == 1) == (col[i] == h)):
                    W[i, h] = 0.0
                    OUT[i, h] = 0.0
                    continue
                a = hi[i]
                c = lo[i]
                o = off[i]
                va = ce * Dx[a, 0]
                vc = ce * Dx[c, 0]
                wv = va - vc
                uw = ce * (Du[a, 0] - Du[c, 0])
                W[i, h] = wv
                if lower:
                    OUT[i, h] = vc + (0.5 + o) * wv - uw
                else:
                    OUT[i, h] = (tot - va) + (0.5 - o) * wv + uw
            continue
        for l in range(L):
            Dx[0, l] = 0.0
            Du[0, l] = 0.0
        for k in range(N):
            it = order[k]
            x = X[it, h]
            xu = x * off[it]
            li = lvl[it]
            for l in range(L):
                on = l >= li
                Dx[k + 1, l] = Dx[k, l] + (x if on else 0.0)
                Du[k + 1, l] = Du[k, l] + (xu if on else 0.0)
        for i in range(N):
            if own != 0 and (col[i] < 0 or (own == 1) == (col[i] == h)):
                W[i, h] = 0.0
                OUT[i, h] = 0.0
                continue
            a = hi[i]
            c = lo[i]
            o = off[i]
            li = lvl[i]
            w0 = cb - ce if li > 0 else 0.0
            l0 = li - 1 if li > 0 else 0
            va = w0 * Dx[a, l0] + w1 * Dx[a, li] + ca * Dx[a, L - 1]
            vc = w0 * Dx[c, l0] + w1 * Dx[c, li] + ca * Dx[c, L - 1]
            ua = w0 * Du[a, l0] + w1 * Du[a, li] + ca * Du[a, L - 1]
            uc = w0 * Du[c, l0] + w1 * Du[c, li] + ca * Du[c, L - 1]
            wv = va - vc
            W[i, h] = wv
            if lower:
                OUT[i, h] = vc + (0.5 + o) * wv - (ua - uc)
            else:
                tot = w0 * Dx[N, l0] + w1 * Dx[N, li] + ca * Dx[N, L - 1]
                OUT[i, h] = (tot - va) + (0.5 - o) * wv + (ua - uc)


@numba.njit(cache=True, nogil=True)
def _level_window_rows(X, off, lvl, order, hi, lo, lower, cb, ce, ca, W, OUT, b0, b1):  # pragma: no cover
    """:func:`level_window_pass` for the lists ``[b0, b1)`` (:func:`_level_list` per list)."""
    N = X.shape[1]
    L = _levels_of(lvl, b0, b1)
    D = np.empty((2, N + 1, L))
    for b in range(b0, b1):
        _level_list(X[b], off[b], lvl[b], order[b], hi[b], lo[b], L, lower, cb, ce, ca, D, W[b], OUT[b])


@numba.njit(cache=True, nogil=True)
def _contract_rows(R, e, mask, off, lvl, order, hi, lo, cb, ce, ca, X, W, OUT, b0, b1):  # pragma: no cover
    """:func:`ramp_contract` forward for the lists ``[b0, b1)``: ``X = R e mask`` (float64, 0 on padded items
    whatever ``R`` holds), the level pass, the self pair (``j = i``: ramp 1/2, weight ``equal``) taken out, padded
    rows 0; ``OUT`` in the dtype of ``R`` (the sums in float64)."""
    N = R.shape[1]
    H = R.shape[2]
    L = _levels_of(lvl, b0, b1)
    D = np.empty((2, N + 1, L))
    S = np.empty((N, H))
    half = 0.5 * ce
    for b in range(b0, b1):
        for j in range(N):
            if mask[b, j]:
                f = np.float64(e[b, j])
                for h in range(H):
                    X[b, j, h] = np.float64(R[b, j, h]) * f
            else:
                for h in range(H):
                    X[b, j, h] = 0.0
        _level_list(X[b], off[b], lvl[b], order[b], hi[b], lo[b], L, False, cb, ce, ca, D, W[b], S)
        for i in range(N):
            if mask[b, i]:
                for h in range(H):
                    OUT[b, i, h] = S[i, h] - half * X[b, i, h]
            else:
                for h in range(H):
                    OUT[b, i, h] = 0.0


@numba.njit(cache=True, nogil=True)
def _masked_rows(G, mask, b, GS):  # pragma: no cover - compiled
    """``GS[j] = G[b, j]`` in float64 on the real items of list ``b``, 0 on its padded ones (whatever they hold)."""
    for j in range(G.shape[1]):
        if mask[b, j]:
            for h in range(G.shape[2]):
                GS[j, h] = np.float64(G[b, j, h])
        else:
            for h in range(G.shape[2]):
                GS[j, h] = 0.0


@numba.njit(cache=True, nogil=True)
def _window_sums_only(X, lvl, order, hi, lo, L, cb, ce, ca, Dx, W):  # pragma: no cover - compiled
    """The ``W`` output of :func:`_level_list` alone (the weighted window sums of ``X``; no offsets, no ramp
    sums): what the backward needs when only the offsets' gradient is asked for."""
    N = X.shape[0]
    H = X.shape[1]
    w1 = ce - ca
    for h in range(H):
        for l in range(L):
            Dx[0, l] = 0.0
        for k in range(N):
            it = order[k]
            x = X[it, h]
            li = lvl[it]
            for l in range(L):
                Dx[k + 1, l] = Dx[k, l] + (x if l >= li else 0.0)
        for i in range(N):
            a = hi[i]
            c = lo[i]
            li = lvl[i]
            w0 = cb - ce if li > 0 else 0.0
            l0 = li - 1 if li > 0 else 0
            W[i, h] = (w0 * (Dx[a, l0] - Dx[c, l0]) + w1 * (Dx[a, li] - Dx[c, li])
                       + ca * (Dx[a, L - 1] - Dx[c, L - 1]))


@numba.njit(cache=True, nogil=True)
def _contract_back_off_rows(G, X, WX, mask, lvl, order, hi, lo, cb, ce, ca, dOFF, b0, b1):  # pragma: no cover
    """:func:`ramp_contract_backward` for the lists ``[b0, b1)`` when only ``dOFF`` is needed (``R`` and ``e``
    carry no gradient): the transposed window sums of ``G`` and ``dOFF_i = sum_h (X_ih WG_ih - G_ih WX_ih)``."""
    N = G.shape[1]
    H = G.shape[2]
    L = _levels_of(lvl, b0, b1)
    Dx = np.empty((N + 1, L))
    GS = np.empty((N, H))
    WG = np.empty((N, H))
    for b in range(b0, b1):
        _masked_rows(G, mask, b, GS)
        _window_sums_only(GS, lvl[b], order[b], hi[b], lo[b], L, ca, ce, cb, Dx, WG)
        for j in range(N):
            acc_off = 0.0
            for h in range(H):
                acc_off += X[b, j, h] * WG[j, h] - GS[j, h] * WX[b, j, h]
            dOFF[b, j] = acc_off


@numba.njit(cache=True, nogil=True)
def _contract_back_rows(G, R, e, X, WX, mask, off, lvl, order, hi, lo, cb, ce, ca, dR, dE, dOFF,
                        b0, b1):  # pragma: no cover - compiled
    """:func:`ramp_contract_backward` for the lists ``[b0, b1)``: the transposed pass of ``G`` (padded rows read
    as 0) gives ``dX``; ``dR = dX e``, ``dE = sum_h dX R`` on real items (0 on padded ones), and
    ``dOFF_i = sum_h (X_ih WG_ih - G_ih WX_ih)`` (the ramp's slope inside the window)."""
    N = G.shape[1]
    H = G.shape[2]
    L = _levels_of(lvl, b0, b1)
    D = np.empty((2, N + 1, L))
    GS = np.empty((N, H))
    WG = np.empty((N, H))
    T = np.empty((N, H))
    half = 0.5 * ce
    for b in range(b0, b1):
        _masked_rows(G, mask, b, GS)
        _level_list(GS, off[b], lvl[b], order[b], hi[b], lo[b], L, True, ca, ce, cb, D, WG, T)
        for j in range(N):
            m = mask[b, j]
            f = np.float64(e[b, j]) if m else 0.0
            acc_e = 0.0
            acc_off = 0.0
            for h in range(H):
                dx = T[j, h] - half * GS[j, h]
                if m:
                    dR[b, j, h] = dx * f
                    acc_e += dx * np.float64(R[b, j, h])
                else:
                    dR[b, j, h] = 0.0
                acc_off += X[b, j, h] * WG[j, h] - GS[j, h] * WX[b, j, h]
            dE[b, j] = acc_e
            dOFF[b, j] = acc_off


@numba.njit(cache=True, nogil=True)
def _scale_rows32(x, mask, min_scale, rel_min_scale, out, b0, b1):  # pragma: no cover - compiled
    """:func:`list_scale` of float32 scores for the lists ``[b0, b1)``: ``|s| < 3.5e38``, so their squares cannot
    overflow float64 sums: two passes, the sums and the centred squares."""
    N = x.shape[1]
    for b in range(b0, b1):
        n = 0
        tot = 0.0
        tot_abs = 0.0
        for j in range(N):
            if mask[b, j]:
                v = np.float64(x[b, j])
                n += 1
                tot += v
                tot_abs += abs(v)
        nf = np.float64(max(n, 1))
        mean = tot / nf
        sq = 0.0
        for j in range(N):
            if mask[b, j]:
                c = np.float64(x[b, j]) - mean
                sq += c * c
        scale = np.sqrt(sq / nf)
        if rel_min_scale > 0.0:
            scale = max(scale, rel_min_scale * tot_abs / nf)
        out[b, 0] = max(scale, min_scale)


@numba.njit(cache=True, nogil=True)
def _scale_rows(x, mask, min_scale, rel_min_scale, out, b0, b1):  # pragma: no cover - compiled
    """:func:`list_scale` for the lists ``[b0, b1)``: float64 sums of the scores divided by their largest
    magnitude first, as the torch reference does (float64 scores)."""
    N = x.shape[1]
    for b in range(b0, b1):
        a = 0.0
        n = 0
        for j in range(N):
            if mask[b, j]:
                n += 1
                v = abs(np.float64(x[b, j]))
                if v > a:
                    a = v
        if not a > 0.0:
            a = 1.0
        nf = np.float64(max(n, 1))
        tot = 0.0
        tot_abs = 0.0
        for j in range(N):
            if mask[b, j]:
                v = np.float64(x[b, j]) / a
                tot += v
                tot_abs += abs(v)
        mean = tot / nf
        cmax = 0.0
        for j in range(N):
            if mask[b, j]:
                c = abs(np.float64(x[b, j]) / a - mean)
                if c > cmax:
                    cmax = c
        if not cmax > 0.0:
            cmax = 1.0
        sq = 0.0
        for j in range(N):
            if mask[b, j]:
                c = (np.float64(x[b, j]) / a - mean) / cmax
                sq += c * c
        scale = np.sqrt(sq / nf) * cmax * a
        if rel_min_scale > 0.0:
            scale = max(scale, rel_min_scale * tot_abs / nf * a)
        out[b, 0] = max(scale, min_scale)


@numba.njit(cache=True, nogil=True)
def _bounds_rows(key_s, order, hi, lo, b0, b1):  # pragma: no cover - compiled
    """:func:`window_bounds` for the lists ``[b0, b1)``: two pointers moving up the sorted keys."""
    N = key_s.shape[1]
    for b in range(b0, b1):
        a = 0
        c = 0
        for k in range(N):
            v = key_s[b, k]
            while a < N and key_s[b, a] < v + 0.5:
                a += 1
            while c < N and not (key_s[b, c] > v - 0.5):
                c += 1
            hi[b, order[b, k]] = a
            lo[b, order[b, k]] = c


@numba.njit(cache=True, nogil=True)
def _ordered_bounds_list(key, m, order, hi, lo, ks):  # pragma: no cover - compiled
    """One list of :func:`ordered_window_bounds`: the keys read along ``order`` (padded items as ``+inf``) into the
    scratch row ``ks``, then :func:`_bounds_rows`'s two pointers (also the fused losses' window, ramp_losses)."""
    N = key.shape[0]
    for k in range(N):
        it = order[k]
        ks[k] = key[it] if m[it] else np.inf
    a = 0
    c = 0
    for k in range(N):
        v = ks[k]
        while a < N and ks[a] < v + 0.5:
            a += 1
        while c < N and not (ks[c] > v - 0.5):
            c += 1
        hi[order[k]] = a
        lo[order[k]] = c


@numba.njit(cache=True, nogil=True)
def _ordered_bounds_rows(key, mask, order, hi, lo, b0, b1):  # pragma: no cover - compiled
    """:func:`ordered_window_bounds` for the lists ``[b0, b1)`` (:func:`_ordered_bounds_list` each)."""
    ks = np.empty(key.shape[1])
    for b in range(b0, b1):
        _ordered_bounds_list(key[b], mask[b], order[b], hi[b], lo[b], ks)


def ordered_window_bounds(key: Tensor, mask: Tensor, order: Tensor):
    """:func:`window_bounds` of the keys ``key [B, N]`` (float64, item order) taken along ``order`` (ascending keys
    of the real items, padded items last; they count as ``+inf``), without gathering the sorted keys first."""
    B, N = key.shape
    hi = torch.empty(B, N, dtype=torch.int64)
    lo = torch.empty(B, N, dtype=torch.int64)
    _run(_ordered_bounds_rows, (np_view(key), mask.contiguous().numpy(),
                                order.contiguous().numpy(), hi.numpy(), lo.numpy()), B, N)
    return hi, lo


def list_scale(s: Tensor, mask: Tensor, min_scale: float, rel_min_scale: float) -> Tensor:
    """:func:`torchfair.orderings.soft.list_scale` (``[B, 1]``, the dtype of ``s``: float32 / float64) in one
    compiled pass per list instead of about 35 torch ops; the same value up to float64 rounding."""
    B, N = s.shape
    out = torch.empty(B, 1, dtype=torch.float64)
    kernel = _scale_rows32 if s.dtype == torch.float32 else _scale_rows
    _run(kernel, (np_view(s), mask.contiguous().numpy(), float(min_scale), float(rel_min_scale), out.numpy()), B, N)
    return out.to(s.dtype)


def window_bounds(key_s: Tensor, order: Tensor):
    """``(hi, lo)`` ``[B, N]`` int64 in item order: for item ``i = order[k]``, the first sorted position whose key is
    ``>= key_i + 1/2`` and the first whose key is ``> key_i - 1/2`` (``key_s [B, N]`` float64 sorted ascending per
    row): ``torch.searchsorted`` of the ramp window's ends, in ``O(N)`` per list."""
    B, N = key_s.shape
    hi = torch.empty(B, N, dtype=torch.int64)
    lo = torch.empty(B, N, dtype=torch.int64)
    _run(_bounds_rows, (key_s.contiguous().numpy(), order.contiguous().numpy(), hi.numpy(), lo.numpy()), B, N)
    return hi, lo


def window_pass(X: Tensor, off: Tensor, order: Tensor, hi: Tensor, lo: Tensor, start: Optional[Tensor],
                end: Optional[Tensor], lower: bool):
    """:func:`torchfair.orderings.ramp._window_pass` (the ramp kernel's prefix-sum pass, forward or transposed)
    fused into one walk per list: ``X [B, N, H]`` and ``off [B, N]`` float64, the window's ``order`` / ``hi`` /
    ``lo`` (and ``start`` / ``end`` for grouped windows) ``[B, N]`` int64.  Returns ``(w, out)`` ``[B, N, H]``
    float64, equal to the torch pass up to the order of the float64 additions."""
    B, N, H = X.shape
    W = torch.empty(B, N, H, dtype=torch.float64)
    OUT = torch.empty(B, N, H, dtype=torch.float64)
    grouped = start is not None
    dummy = np.zeros((1, 1), dtype=np.int64)
    args = (np_view(X), np_view(off), order.contiguous().numpy(),
            hi.contiguous().numpy(), lo.contiguous().numpy(),
            start.contiguous().numpy() if grouped else dummy, end.contiguous().numpy() if grouped else dummy,
            grouped, bool(lower), W.numpy(), OUT.numpy())
    _run(_window_rows, args, B, N * H)
    return W, OUT


def level_window_pass(X: Tensor, off: Tensor, level: Tensor, order: Tensor, hi: Tensor, lo: Tensor, lower: bool,
                      below: float, equal: float, above: float):
    """:func:`window_pass` (ungrouped windows) with a pair weight by relevance level: the partners ``j`` of item
    ``i`` are weighted ``below`` / ``equal`` / ``above`` when ``level_j`` is below / equal to / above ``level_i``
    (``level [B, N]`` int64, dense ranks ``>= 0``), both in the window sum ``w`` and in the ramp sum ``out``.  The
    one pass of :func:`torchfair.orderings.ramp.ramp_contract` for a :class:`LevelPairWeight`, without the
    ``[B, N, L H]`` one-hot values of the torch path."""
    B, N, H = X.shape
    W = torch.empty(B, N, H, dtype=torch.float64)
    OUT = torch.empty(B, N, H, dtype=torch.float64)
    args = (np_view(X), np_view(off), level.contiguous().numpy(),
            order.contiguous().numpy(), hi.contiguous().numpy(), lo.contiguous().numpy(), bool(lower),
            float(below), float(equal), float(above), W.numpy(), OUT.numpy())
    _run(_level_window_rows, args, B, N * H)
    return W, OUT


def ramp_contract(R: Tensor, e: Tensor, mask: Tensor, off: Tensor, level: Tensor, order: Tensor, hi: Tensor,
                  lo: Tensor, below: float, equal: float, above: float):
    """The fused forward of :class:`torchfair.orderings.ramp._RampContract`: ``out[b, i, h] = sum_{j != i}
    w(l_i, l_j) ramp(u_j - u_i) R[b, j, h] e[b, j]`` over the real ``j``, 0 on padded rows, with
    ``w = below / equal / above`` for ``l_j`` below / equal to / above ``l_i``; ``R [B, N, H]`` and ``e [B, N]``
    float32 / float64 (anything on padded items), ``off`` float64, ``level`` dense ranks int64.  Returns
    ``(out, X, W)`` ``[B, N, H]``: the contraction (in the dtype of ``R``), the masked float64 values ``X = R e`` and their weighted
    window sums (both kept for :func:`ramp_contract_backward`).  Everything the torch path does around the pass
    (masking, the item weight, the self pair) in one walk per list."""
    B, N, H = R.shape
    X = torch.empty(B, N, H, dtype=torch.float64)
    W = torch.empty(B, N, H, dtype=torch.float64)
    OUT = torch.empty(B, N, H, dtype=R.dtype)
    args = (np_view(R), np_view(e), mask.contiguous().numpy(),
            np_view(off), level.contiguous().numpy(), order.contiguous().numpy(),
            hi.contiguous().numpy(), lo.contiguous().numpy(), float(below), float(equal), float(above),
            X.numpy(), W.numpy(), OUT.numpy())
    _run(_contract_rows, args, B, N * H)
    return OUT, X, W


def ramp_contract_backward(G: Tensor, R: Tensor, e: Tensor, X: Tensor, W: Tensor, mask: Tensor, off: Tensor,
                           level: Tensor, order: Tensor, hi: Tensor, lo: Tensor, below: float, equal: float,
                           above: float, values: bool = True):
    """The backward of :func:`ramp_contract` for the gradient ``G [B, N, H]`` of its output: ``(dR, dE, dOFF)``
    ``[B, N, H]``, ``[B, N]``, ``[B, N]`` in the dtypes of ``R``, ``e`` and ``off`` (the transposed pass, then the chain rule through ``X = R e``
    and through the window offsets ``off``), in one walk per list.  ``values=False``: only ``dOFF`` (``R`` and ``e``
    carry no gradient), by the cheaper pass of the window sums alone; ``(None, None, dOFF)``."""
    B, N, H = G.shape
    if not values:  # only the offsets' gradient: the transposed window sums, no ramp sums
        dOFF = torch.empty(B, N, dtype=off.dtype)
        args = (np_view(G), X.numpy(), W.numpy(), mask.contiguous().numpy(), level.contiguous().numpy(),
                order.contiguous().numpy(), hi.contiguous().numpy(), lo.contiguous().numpy(), float(below),
                float(equal), float(above), dOFF.numpy())
        _run(_contract_back_off_rows, args, B, N * H)
        return None, None, dOFF
    dR = torch.empty(B, N, H, dtype=R.dtype)
    dE = torch.empty(B, N, dtype=e.dtype)
    dOFF = torch.empty(B, N, dtype=off.dtype)
    args = (np_view(G), np_view(R), np_view(e),
            X.numpy(), W.numpy(), mask.contiguous().numpy(), np_view(off),
            level.contiguous().numpy(), order.contiguous().numpy(), hi.contiguous().numpy(), lo.contiguous().numpy(),
            float(below), float(equal), float(above), dR.numpy(), dE.numpy(), dOFF.numpy())
    _run(_contract_back_rows, args, B, N * H)
    return dR, dE, dOFF


@numba.njit(cache=True, nogil=True)
def _positions_rows(mask, off, order, hi, lo, POS, W, b0, b1):  # pragma: no cover - compiled
    """:func:`ramp_positions` for the lists ``[b0, b1)``: prefix sums of the real items' count and offset along
    ``order``, read at each item's window bounds."""
    N = mask.shape[1]
    Dx = np.empty(N + 1)
    Du = np.empty(N + 1)
    for b in range(b0, b1):
        Dx[0] = 0.0
        Du[0] = 0.0
        for k in range(N):
            it = order[b, k]
            if mask[b, it]:
                Dx[k + 1] = Dx[k] + 1.0
                Du[k + 1] = Du[k] + off[b, it]
            else:
                Dx[k + 1] = Dx[k]
                Du[k + 1] = Du[k]
        tot = Dx[N]
        for i in range(N):
            if mask[b, i]:
                a = hi[b, i]
                c = lo[b, i]
                wv = Dx[a] - Dx[c]
                W[b, i] = wv
                POS[b, i] = (tot - Dx[a]) + (0.5 - off[b, i]) * wv + (Du[a] - Du[c]) - 0.5
            else:
                W[b, i] = 0.0
                POS[b, i] = 0.0


@numba.njit(cache=True, nogil=True)
def _positions_back_rows(G, mask, order, hi, lo, W, dOFF, b0, b1):  # pragma: no cover - compiled
    """:func:`ramp_positions_backward` for the lists ``[b0, b1)``: the window sums of ``G`` by one prefix pass."""
    N = mask.shape[1]
    Dg = np.empty(N + 1)
    for b in range(b0, b1):
        Dg[0] = 0.0
        for k in range(N):
            it = order[b, k]
            Dg[k + 1] = Dg[k] + (np.float64(G[b, it]) if mask[b, it] else 0.0)
        for i in range(N):
            if mask[b, i]:
                dOFF[b, i] = (Dg[hi[b, i]] - Dg[lo[b, i]]) - np.float64(G[b, i]) * W[b, i]
            else:
                dOFF[b, i] = 0.0


def ramp_positions(mask: Tensor, off: Tensor, order: Tensor, hi: Tensor, lo: Tensor, dtype: torch.dtype):
    """RampRank's expected positions ``pos_i = sum_{j != i} ramp(u_j - u_i)`` over the real ``j`` (0 on padded
    items), in ``dtype``: :func:`ramp_contract` with ``R = e = 1`` and no levels, without its inputs.  Returns
    ``(pos, W)``: ``W`` float64 ``[B, N]``, the count of real items in each window (kept for the backward)."""
    B, N = mask.shape
    POS = torch.empty(B, N, dtype=dtype)
    W = torch.empty(B, N, dtype=torch.float64)
    _run(_positions_rows, (mask.contiguous().numpy(), np_view(off), order.contiguous().numpy(),
                           hi.contiguous().numpy(), lo.contiguous().numpy(), POS.numpy(), W.numpy()), B, N)
    return POS, W


def ramp_positions_backward(G: Tensor, mask: Tensor, order: Tensor, hi: Tensor, lo: Tensor, W: Tensor):
    """The gradient of :func:`ramp_positions` with respect to ``off`` for the gradient ``G [B, N]`` of the
    positions: ``dOFF_i = sum_{j in window(i)} G_j - G_i W_i`` (the ramp's slope inside the window), float64."""
    B, N = mask.shape
    dOFF = torch.empty(B, N, dtype=torch.float64)
    _run(_positions_back_rows, (np_view(G), mask.contiguous().numpy(), order.contiguous().numpy(),
                                hi.contiguous().numpy(), lo.contiguous().numpy(), W.numpy(), dOFF.numpy()), B, N)
    return dOFF


def warmup() -> None:
    """Compile (or load from the disk cache) every signature the library calls: the float64 window passes, and
    the entry points that read or write float32 / float64 values in either dtype."""
    B, N, H = 2, 3, 2
    mask = torch.ones(B, N, dtype=torch.bool)
    off = torch.tensor([[0., 0.3, 1.2], [0., 0.9, 0.4]], dtype=torch.float64)
    order = off.argsort(-1)
    hi, lo = ordered_window_bounds(off, mask, order)
    window_bounds(off.gather(-1, order), order)
    X = torch.ones(B, N, H, dtype=torch.float64)
    level = torch.tensor([[0, 1, 1], [1, 0, 0]])
    window_pass(X, off, order, hi, lo, None, None, False)
    window_pass(X, off, order, hi, lo, torch.zeros(B, N, dtype=torch.int64), torch.full((B, N), N), True)
    for lower in (False, True):
        level_window_pass(X, off, level, order, hi, lo, lower, 1.0, 0.5, 0.0)
    for dt in (torch.float32, torch.float64):
        list_scale(off.to(dt), mask, 0.25, 0.0)
        R, e = torch.ones(B, N, H, dtype=dt), torch.ones(B, N, dtype=dt)
        out, XX, W = ramp_contract(R, e, mask, off, level, order, hi, lo, 1.0, 0.5, 0.0)
        for values in (True, False):
            ramp_contract_backward(torch.ones_like(out), R, e, XX, W, mask, off, level, order, hi, lo, 1.0, 0.5, 0.0,
                                   values=values)
        pos, WP = ramp_positions(mask, off, order, hi, lo, dt)
        ramp_positions_backward(torch.ones_like(pos), mask, order, hi, lo, WP)
