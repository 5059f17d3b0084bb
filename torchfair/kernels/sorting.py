"""Compiled (numba) sorting and ranking of CPU tensors: the order of :class:`~torchfair.orderings.Hard` and dense
relevance ranks.  Imported through :func:`torchfair.kernels.load` (never at ``import torchfair``).

* :func:`sort_desc` -- descending scores, ties by list index, padded items keyed ``-inf``: a least-significant-digit
  radix sort of the float bits mapped to unsigned keys of the same order (8-bit digits, 32-bit keys for float32; a
  pass is skipped when one digit holds the whole list), stable by construction, ``O(N)`` per list.  ``-0.0`` sorts
  as ``0.0`` and every NaN above ``+inf`` (first), as ``torch.sort`` does.
* :func:`dense_rank` -- the dense rank of the relevance among each list's real items: up to 64 distinct values
  through a small hash table (no sort), beyond by the radix sort.

Every kernel has one entry point per key width (``*32`` for float32 bits, ``*64`` for float64), so a call compiles
only the width it reads.  Lists run in parallel (:func:`torchfair.kernels._threads.run`).

    >>> from torchfair.kernels import load
    >>> load("sorting").sort_desc(torch.tensor([[1., 3., 2.]]), torch.ones(1, 3, dtype=torch.bool))[0]
    tensor([[1, 2, 0]])
"""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor

from ._threads import np_view, run as _run

__all__ = ["sort_desc", "dense_rank", "tie_average", "ideal_exposure", "supported", "warmup"]

_U8 = np.uint64(8)


_U255 = np.uint64(255)


# ------------------------------------------------------------------------------------------------ keys and sort
@numba.njit(cache=True, nogil=True)
def _ukey(v, wide):  # pragma: no cover - compiled
    """Unsigned integer key with the order of the float whose bits are ``v`` (int32 or int64 bits): ``-0.0`` maps
    to the key of ``0.0`` and every NaN above ``+inf``."""
    x = np.int64(v)
    if wide:
        if x < 0 and (x & 0x7FFFFFFFFFFFFFFF) == 0:
            x = np.int64(0)
        elif (x & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000:
            x = np.int64(0x7FFFFFFFFFFFFFFF)
        if x < 0:
            x = x ^ np.int64(0x7FFFFFFFFFFFFFFF)
        return np.uint64(x) ^ np.uint64(0x8000000000000000)
    if x < 0 and (x & 0x7FFFFFFF) == 0:
        x = np.int64(0)
    elif (x & 0x7FFFFFFF) > 0x7F800000:
        x = np.int64(0x7FFFFFFF)
    if x < 0:
        x = x ^ np.int64(0x7FFFFFFF)
    return np.uint64(x + 2147483648)


@numba.njit(cache=True, nogil=True)
def _radix(keys, idx, k2, i2, n, npass, cnt):  # pragma: no cover - compiled
    """Stable ascending LSD radix sort of ``keys[:n]`` (uint32 or uint64, ``npass`` low bytes significant) carrying
    ``idx[:n]``; the result is left in ``keys`` / ``idx`` (``k2`` / ``i2``: scratch of the same size)."""
    if n <= 1:
        return
    for p in range(npass):
        for d in range(256):
            cnt[p, d] = 0
    if npass == 4:  # the digit counts of every pass in one read (unrolled: a loop over the passes costs ~40 %)
        for j in range(n):
            u = np.uint64(keys[j])
            cnt[0, np.int64(u & _U255)] += 1
            cnt[1, np.int64((u >> np.uint64(8)) & _U255)] += 1
            cnt[2, np.int64((u >> np.uint64(16)) & _U255)] += 1
            cnt[3, np.int64((u >> np.uint64(24)) & _U255)] += 1
    else:
        for j in range(n):
            u = np.uint64(keys[j])
            cnt[0, np.int64(u & _U255)] += 1
            cnt[1, np.int64((u >> np.uint64(8)) & _U255)] += 1
            cnt[2, np.int64((u >> np.uint64(16)) & _U255)] += 1
            cnt[3, np.int64((u >> np.uint64(24)) & _U255)] += 1
            cnt[4, np.int64((u >> np.uint64(32)) & _U255)] += 1
            cnt[5, np.int64((u >> np.uint64(40)) & _U255)] += 1
            cnt[6, np.int64((u >> np.uint64(48)) & _U255)] += 1
            cnt[7, np.int64((u >> np.uint64(56)) & _U255)] += 1
    sk, si, dk, di = keys, idx, k2, i2
    swapped = False
    for p in range(npass):
        sh = _U8 * np.uint64(p)
        if cnt[p, np.int64((sk[0] >> sh) & _U255)] == n:  # one digit holds every key: nothing to do
            continue
        tot = 0
        for d in range(256):
            c = cnt[p, d]
            cnt[p, d] = tot
            tot += c
        for j in range(n):
            u = sk[j]
            d = np.int64((u >> sh) & _U255)
            q = cnt[p, d]
            cnt[p, d] = q + 1
            dk[q] = u
            di[q] = si[j]
        sk, dk = dk, sk
        si, di = di, si
        swapped = not swapped
    if swapped:
        for j in range(n):
            keys[j] = sk[j]
            idx[j] = si[j]


@numba.njit(cache=True, nogil=True)
def _sort_rows32(bits, wide, mask, order, positions, b0, b1):  # pragma: no cover - compiled
    N = bits.shape[1]
    _sort_impl(bits, wide, mask, order, positions, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _sort_rows64(bits, wide, mask, order, positions, b0, b1):  # pragma: no cover - compiled
    N = bits.shape[1]
    _sort_impl(bits, wide, mask, order, positions, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))


@numba.njit(cache=True, nogil=True)
def _sort_impl(bits, wide, mask, order, positions, b0, b1, keys, k2):  # pragma: no cover - compiled
    B, N = bits.shape
    npass = 8 if wide else 4
    top = np.uint64(0xFFFFFFFFFFFFFFFF) if wide else np.uint64(0xFFFFFFFF)
    ninf = _ukey(np.int64(-4503599627370496) if wide else np.int64(-8388608), wide)  # bits of -inf
    idx = np.empty(N, np.int64)
    i2 = np.empty(N, np.int64)
    cnt = np.empty((8, 256), np.int64)
    for b in range(b0, b1):
        for j in range(N):
            u = _ukey(bits[b, j], wide) if mask[b, j] else ninf
            keys[j] = top - u  # descending
            idx[j] = j
        _radix(keys, idx, k2, i2, N, npass, cnt)
        for k in range(N):
            i = idx[k]
            order[b, k] = i
            positions[b, i] = k


_HASH_SLOTS = 128  # open-addressing table for up to _HASH_LEVELS distinct relevance values
_HASH_LEVELS = 64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_HASH_SHIFT = np.uint64(57)  # 64 - log2(_HASH_SLOTS)


@numba.njit(cache=True, nogil=True)
def _rank_scratch(N):  # pragma: no cover - compiled
    """The scratch of :func:`_rank_row` for lists of ``N`` items: ``(idx, i2, cnt, rank, hkey, hslot)``."""
    return (np.empty(N, np.int64), np.empty(N, np.int64), np.empty((8, 256), np.int64), np.zeros(N, np.int64),
            np.empty(_HASH_SLOTS, np.uint64), np.empty(_HASH_SLOTS, np.int64))


@numba.njit(cache=True, nogil=True)
def _rank_row(bits, wide, mask, b, keys, idx, k2, i2, cnt, rank, hkey, hslot):  # pragma: no cover - compiled
    """Dense rank of the relevance (bits of row ``b``) among the real items into ``rank`` (0 = least relevant;
    padded items get the number of distinct values ``L``); returns ``L``.

    Graded relevance first: the distinct values are collected in a small hash table (``hkey`` / ``hslot``, 128
    slots) and sorted alone, one pass over the list; past 64 distinct values the list is radix-sorted instead."""
    N = bits.shape[1]
    for t in range(_HASH_SLOTS):
        hslot[t] = -1
    d = 0
    n = 0
    small = True
    for j in range(N):
        if not mask[b, j]:
            rank[j] = -1
            continue
        n += 1
        u = _ukey(bits[b, j], wide)
        t = np.int64((u * _GOLDEN) >> _HASH_SHIFT)
        while hslot[t] >= 0 and hkey[t] != u:
            t = (t + 1) & (_HASH_SLOTS - 1)
        if hslot[t] < 0:
            if d == _HASH_LEVELS:
                small = False
                break
            hslot[t] = d
            hkey[t] = u
            d += 1
        rank[j] = t  # the slot, for now
    if small:
        m = 0  # the distinct keys with their slots, in increasing order (insertion sort)
        for t in range(_HASH_SLOTS):
            if hslot[t] >= 0:
                u = hkey[t]
                q = m
                while q > 0 and keys[q - 1] > u:
                    keys[q] = keys[q - 1]
                    idx[q] = idx[q - 1]
                    q -= 1
                keys[q] = u
                idx[q] = t
                m += 1
        for q in range(m):
            hslot[idx[q]] = q
        for j in range(N):
            rank[j] = hslot[rank[j]] if rank[j] >= 0 else m
        return m
    n = 0
    for j in range(N):
        if mask[b, j]:
            keys[n] = _ukey(bits[b, j], wide)
            idx[n] = j
            n += 1
        else:
            rank[j] = -1
    _radix(keys, idx, k2, i2, n, 8 if wide else 4, cnt)
    L = 0
    for q in range(n):
        if q > 0 and keys[q] != keys[q - 1]:
            L += 1
        rank[idx[q]] = L
    L = L + 1 if n > 0 else 0
    for j in range(N):
        if rank[j] < 0:
            rank[j] = L
    return L


@numba.njit(cache=True, nogil=True)
def _dense_rank_rows32(bits, wide, mask, rank, levels, b0, b1):  # pragma: no cover - compiled
    """:func:`dense_rank` for the lists ``[b0, b1)``."""
    N = bits.shape[1]
    _dense_rank_impl(bits, wide, mask, rank, levels, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _dense_rank_rows64(bits, wide, mask, rank, levels, b0, b1):  # pragma: no cover - compiled
    """:func:`dense_rank` for the lists ``[b0, b1)``."""
    N = bits.shape[1]
    _dense_rank_impl(bits, wide, mask, rank, levels, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))


@numba.njit(cache=True, nogil=True)
def _dense_rank_impl(bits, wide, mask, rank, levels, b0, b1, keys, k2):  # pragma: no cover - compiled
    N = bits.shape[1]
    idx, i2, cnt, row, hkey, hslot = _rank_scratch(N)
    for b in range(b0, b1):
        levels[b] = _rank_row(bits, wide, mask, b, keys, idx, k2, i2, cnt, row, hkey, hslot)
        for j in range(N):
            rank[b, j] = row[j]


@numba.njit(cache=True, nogil=True)
def _tie_average_rows(skey, f, order, n, out, b0, b1):  # pragma: no cover - compiled
    """:func:`tie_average` for the lists ``[b0, b1)``: one walk down each sorted list, block by block of equal
    keys."""
    N = skey.shape[1]
    for b in range(b0, b1):
        for j in range(N):
            out[b, j] = 0.0
        m = n[b]
        k = 0
        while k < m:
            e = k + 1
            tot = np.float64(f[b, k])
            while e < m and skey[b, e] == skey[b, k]:
                tot += np.float64(f[b, e])
                e += 1
            avg = tot / (e - k)
            for q in range(k, e):
                out[b, order[b, q]] = avg
            k = e


def tie_average(skey: Tensor, f: Tensor, order: Tensor, n: Tensor) -> Tensor:
    """``out[b, order[b, k]] = mean of f[b, q]`` over the positions ``q < n_b`` whose sorted key equals
    ``skey[b, k]`` (ties share their positions' values), 0 for the items beyond ``n_b`` (padded): the ideal
    exposure's tie rule (:func:`torchfair.metrics.exposure._ideal`) in one walk per list, in the dtype of ``f``.
    ``skey`` / ``f`` ``[B, N]`` in sorted order, ``order [B, N]`` int64 (the item at each position), ``n [B]``."""
    B, N = skey.shape
    out = torch.empty(B, N, dtype=f.dtype)
    _run(_tie_average_rows, (np_view(skey), np_view(f),
                             order.contiguous().numpy(), n.to(torch.int64).contiguous().numpy(), out.numpy()), B, N)
    return out


@numba.njit(cache=True, nogil=True)
def _ideal_impl(bits, wide, mask, w, out, b0, b1, keys, k2):  # pragma: no cover - compiled
    """:func:`ideal_exposure` for the lists ``[b0, b1)``: dense ranks, the count of each rank, and the mean
    position weight over each rank's block of the ideal (descending) order, by prefix sums of ``w``."""
    N = bits.shape[1]
    idx, i2, cnt, row, hkey, hslot = _rank_scratch(N)
    cw = np.empty(N + 1)
    cw[0] = 0.0
    for k in range(N):
        cw[k + 1] = cw[k] + np.float64(w[k])
    count = np.zeros(N + 1, np.int64)
    start = np.zeros(N + 1, np.int64)
    for b in range(b0, b1):
        L = _rank_row(bits, wide, mask, b, keys, idx, k2, i2, cnt, row, hkey, hslot)
        for l in range(L + 1):
            count[l] = 0
        for j in range(N):
            if mask[b, j]:
                count[row[j]] += 1
        above = 0
        for l in range(L - 1, -1, -1):  # the most relevant level first
            start[l] = above
            above += count[l]
        for j in range(N):
            if mask[b, j]:
                l = row[j]
                s = start[l]
                e = s + count[l]
                out[b, j] = (cw[e] - cw[s]) / (e - s)
            else:
                out[b, j] = 0.0


@numba.njit(cache=True, nogil=True)
def _ideal_rows32(bits, wide, mask, w, out, b0, b1):  # pragma: no cover - compiled
    N = bits.shape[1]
    _ideal_impl(bits, wide, mask, w, out, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _ideal_rows64(bits, wide, mask, w, out, b0, b1):  # pragma: no cover - compiled
    N = bits.shape[1]
    _ideal_impl(bits, wide, mask, w, out, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))


def ideal_exposure(key: Tensor, mask: Tensor, w: Tensor) -> Tensor:
    """Per-item exposure of the ideal ranking (``key`` descending) under position weights ``w [N]``, averaged over
    the items of equal key: the item of a tie block of ranks ``[s, e)`` gets ``mean(w[s:e])``; padded items 0.
    :func:`torchfair.metrics.exposure._ideal` for a position-based browsing model, without sorting the list (dense
    ranks and their counts give each block).  ``[B, N]`` in the dtype of ``w``."""
    B, N = key.shape
    bits, wide = _bits(key)
    out = torch.empty(B, N, dtype=w.dtype)
    _run(_ideal_rows64 if wide else _ideal_rows32, (bits, wide, mask.contiguous().numpy(), np_view(w), out.numpy()),
         B, N)
    return out


def supported(*tensors: Tensor) -> bool:
    """Whether the kernels can take these tensors: plain CPU tensors (no tensor subclass, as under
    ``torch.compile`` or ``vmap``), outside compilation."""
    if torch.compiler.is_compiling():
        return False
    return all(type(t) is Tensor and t.device.type == "cpu" for t in tensors)


def _bits(x: Tensor):
    """Integer view of the float bits of ``x`` (float32 / float64), and whether they are 64-bit."""
    x = (x.detach() if x.requires_grad else x).contiguous()
    if x.dtype == torch.float64:
        return x.view(torch.int64).numpy(), True
    return x.to(torch.float32).view(torch.int32).numpy(), False


def sort_desc(scores: Tensor, mask: Tensor):
    """``(order, positions)``, ``[B, N]`` int64 each: the stable descending sort of ``where(mask, scores, -inf)``
    (``torch.sort(..., descending=True, stable=True).indices``) and its inverse permutation."""
    B, N = scores.shape
    bits, wide = _bits(scores)
    order = torch.empty(B, N, dtype=torch.int64)
    positions = torch.empty(B, N, dtype=torch.int64)
    _run(_sort_rows64 if wide else _sort_rows32, (bits, wide, mask.contiguous().numpy(), order.numpy(), positions.numpy()), B, N)
    return order, positions


def dense_rank(relevance: Tensor, mask: Tensor):
    """``(rank, L)``: the dense rank ``[B, N]`` int64 of the relevance among each list's real items (0 = least
    relevant; padded items get their list's number of distinct values) and the largest number of distinct values
    of a list (an int): ``torchfair.orderings._pairsums._dense_rank`` without a sort (a small hash table per list
    for up to 64 distinct values)."""
    B, N = relevance.shape
    bits, wide = _bits(relevance)
    rank = torch.empty(B, N, dtype=torch.int64)
    levels = np.zeros(B, np.int64)
    _run(_dense_rank_rows64 if wide else _dense_rank_rows32, (bits, wide, mask.contiguous().numpy(), rank.numpy(), levels), B, N)
    return rank, int(levels.max()) if B else 0


def warmup() -> None:
    """Compile (or load from the disk cache) every signature the library calls: both key widths and both value
    dtypes of each entry point, on tiny inputs."""
    mask = torch.ones(2, 3, dtype=torch.bool)
    for dt in (torch.float32, torch.float64):
        x = torch.tensor([[1., 3., 2.], [0., 0., 1.]], dtype=dt)
        order = sort_desc(x, mask)[0]
        dense_rank(x, mask)
        ideal_exposure(x, mask, torch.ones(3, dtype=dt))
        tie_average(x.gather(-1, order), x, order, mask.sum(-1))
