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

from ._threads import run as _run

__all__ = ["window_bounds", "window_pass", "level_window_pass"]

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
def _level_window_rows(X, off, lvl, order, hi, lo, lower, cb, ce, ca, W, OUT, b0, b1):  # pragma: no cover
    """:func:`level_window_pass` for the lists ``[b0, b1)``.  Per list, along ``order``, the prefix sums of ``X``
    and ``off * X`` over the items of level ``<= l`` for every level ``l`` (``D [N + 1, L, 2H]`` scratch, cumulative
    over the levels); item ``i`` of level ``l_i`` reads the weighted sum of its partners,
    ``(below - equal) D[., l_i - 1] + (equal - above) D[., l_i] + above D[., L - 1]``, at its window bounds: three
    reads per value whatever the number of levels."""
    N = X.shape[1]
    H = X.shape[2]
    H2 = 2 * H
    L = 1
    for b in range(b0, b1):
        for i in range(N):
            if lvl[b, i] + 1 > L:
                L = lvl[b, i] + 1
    LH = L * H2
    D = np.empty((N + 1, LH))  # D[k, l * 2H + h]
    for b in range(b0, b1):
        for h in range(LH):
            D[0, h] = 0.0
        for k in range(N):
            it = order[b, k]
            o = off[b, it]
            li = lvl[b, it]
            for h in range(li * H2):
                D[k + 1, h] = D[k, h]
            for l in range(li, L):
                base = l * H2
                for h in range(H):
                    x = X[b, it, h]
                    D[k + 1, base + h] = D[k, base + h] + x
                    D[k + 1, base + H + h] = D[k, base + H + h] + x * o
        # the band weights folded into the cumulative sums: sum_j w(l_i, l_j) V_j over a range is
        # (below - equal) D[., l_i - 1] + (equal - above) D[., l_i] + above D[., L - 1]
        last = (L - 1) * H2
        for i in range(N):
            a = hi[b, i]
            c = lo[b, i]
            o = off[b, i]
            li = lvl[b, i]
            w0 = cb - ce if li > 0 else 0.0
            p0 = (li - 1) * H2 if li > 0 else 0
            p1 = li * H2
            w1 = ce - ca
            for h in range(H):
                va = w0 * D[a, p0 + h] + w1 * D[a, p1 + h] + ca * D[a, last + h]
                vc = w0 * D[c, p0 + h] + w1 * D[c, p1 + h] + ca * D[c, last + h]
                ua = w0 * D[a, p0 + H + h] + w1 * D[a, p1 + H + h] + ca * D[a, last + H + h]
                uc = w0 * D[c, p0 + H + h] + w1 * D[c, p1 + H + h] + ca * D[c, last + H + h]
                wv = va - vc
                W[b, i, h] = wv
                if lower:
                    OUT[b, i, h] = vc + (0.5 + o) * wv - (ua - uc)
                else:
                    tot = w0 * D[N, p0 + h] + w1 * D[N, p1 + h] + ca * D[N, last + h]
                    OUT[b, i, h] = (tot - va) + (0.5 - o) * wv + (ua - uc)


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
    args = (X.detach().contiguous().numpy(), off.detach().contiguous().numpy(), order.contiguous().numpy(),
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
    args = (X.detach().contiguous().numpy(), off.detach().contiguous().numpy(), level.contiguous().numpy(),
            order.contiguous().numpy(), hi.contiguous().numpy(), lo.contiguous().numpy(), bool(lower),
            float(below), float(equal), float(above), W.numpy(), OUT.numpy())
    _run(_level_window_rows, args, B, N * H)
    return W, OUT
