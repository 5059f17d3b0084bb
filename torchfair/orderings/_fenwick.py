"""Compiled (numba) kernels of the hard ordering for CPU tensors: the sort and the pair-free sweeps.

Imported lazily by :mod:`torchfair.orderings.hard` and :mod:`torchfair.orderings._sweeps` (importing numba costs
more than importing torchfair, and nothing off the CPU needs it); the torch code of those modules is the reference,
runs on every device and is what these kernels must reproduce (tests/orderings/test_fenwick.py checks them against
each other).  Compiled on first use and cached on disk, like :mod:`torchfair.orderings.fast_soft_rank`'s kernels.

* :func:`sort_desc` -- the order of :class:`~torchfair.orderings.Hard`: descending scores, ties by list index,
  padded items keyed ``-inf``.  A least-significant-digit radix sort of the float bits mapped to unsigned keys of
  the same order (8-bit digits, 32-bit keys for float32; a pass is skipped when one digit holds the whole list),
  stable by construction: ``O(N)`` per list, several times faster than ``torch.sort``.  ``-0.0`` sorts as ``0.0``
  and every NaN above ``+inf`` (first), as ``torch.sort`` does.
* :func:`sweep` -- :meth:`HardOrderedBatch.contract <torchfair.orderings.hard.HardOrderedBatch.contract>` for a
  :class:`~torchfair.orderings.base.LevelPairWeight` (or no pair weight).  Per list, the relevance gets dense
  ranks (up to 64 distinct values through a small hash table, no sort; beyond, a radix sort), then the ranking is
  walked once, top to bottom, holding what the items already passed contribute (``right``, times the exposure for
  ``which="joint"``) per relevance rank: an item reads the sum below its rank, at its rank and above it, then adds
  itself.  The sums below every rank are a plain array for up to 64 ranks (an insertion updates all of them,
  branch-free) and a Fenwick (binary indexed) tree beyond, ``O(log L)`` per read and insertion for ``L`` ranks.
  Columns of ``right`` are walked two at a time.  Under ``ties="average"`` the items of a tie block are all read
  before any is added, and their tied partners are summed by relevance category with a second tree that is
  cleared after the block.  ``O(N)`` scratch per thread.
* :func:`all_pairs` -- :func:`~torchfair.orderings._sweeps.contract_all_pairs` (pair counts, order free): per-rank
  sums and one prefix over the ranks, ``O(N + L)`` after the ranks.

Sums are accumulated in float64 whatever the input dtype (as the torch sweeps do) and written in the dtype of
``right``.  Lists run in parallel on ``torch.get_num_threads()`` threads: the kernels release the GIL (``nogil``)
and a small thread pool of this module hands out slices of the batch (:func:`_run`).  Not numba's ``prange``: its
OpenMP layer is a second OpenMP runtime beside torch's (launching it set torch's thread count to numba's in the
project's environment), and its fork-join waits for every thread, where a slice queue lets the calling thread
finish the work of a helper that the machine runs late; the pool is safe to use from several threads and is
rebuilt after ``fork``.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor

__all__ = ["sort_desc", "sweep", "all_pairs", "window_pass", "level_window_pass", "window_bounds", "dense_rank",
           "supported"]

#: lists x items below which a call runs on the calling thread only (thread hand-off costs ~50 us)
PARALLEL_MIN_ELEMENTS = 1 << 15

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
def _sort_rows(bits, wide, mask, order, positions, b0, b1):  # pragma: no cover - compiled
    N = bits.shape[1]
    if wide:
        _sort_impl(bits, wide, mask, order, positions, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))
    else:  # 32-bit keys: half the memory traffic
        _sort_impl(bits, wide, mask, order, positions, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


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


# ------------------------------------------------------------------------------------------------ sweeps
#: up to this many distinct relevance values a sweep keeps the sums below every rank in a plain array (an insertion
#: updates all of them, branch-free: graded relevance); above, a Fenwick tree (``O(log L)`` per insertion and query)
DENSE_LEVELS = 64


@numba.njit(cache=True, nogil=True, inline='always')
def _below(tree, r, dense):  # pragma: no cover - compiled
    """Sum of what was added at the ranks below ``r``."""
    if dense:
        return tree[r]
    acc = 0.0
    j = r
    while j > 0:
        acc += tree[j]
        j -= j & (-j)
    return acc


@numba.njit(cache=True, nogil=True, inline='always')
def _add(tree, r, w, L, dense):  # pragma: no cover - compiled
    """Add ``w`` at rank ``r``."""
    if dense:
        for t in range(L):
            tree[t] += w if t > r else 0.0
        return
    j = r + 1
    while j <= L:
        tree[j] += w
        j += j & (-j)


@numba.njit(cache=True, nogil=True, inline='always')
def _clear(tree, r, L, dense):  # pragma: no cover - compiled
    """Zero what an :func:`_add` at rank ``r`` touched (the rest is already zero)."""
    if dense:
        for t in range(L):
            tree[t] = 0.0
        return
    j = r + 1
    while j <= L:
        tree[j] = 0.0
        j += j & (-j)


@numba.njit(cache=True, nogil=True, inline='always')
def _below2(tree, r, dense):  # pragma: no cover - compiled
    """:func:`_below` of two interleaved columns."""
    if dense:
        return tree[2 * r], tree[2 * r + 1]
    a0 = 0.0
    a1 = 0.0
    j = r
    while j > 0:
        a0 += tree[2 * j]
        a1 += tree[2 * j + 1]
        j -= j & (-j)
    return a0, a1


@numba.njit(cache=True, nogil=True, inline='always')
def _add2(tree, r, w0, w1, L, dense):  # pragma: no cover - compiled
    """:func:`_add` of two interleaved columns."""
    if dense:
        for t in range(L):
            tree[2 * t] += w0 if t > r else 0.0
            tree[2 * t + 1] += w1 if t > r else 0.0
        return
    j = r + 1
    while j <= L:
        tree[2 * j] += w0
        tree[2 * j + 1] += w1
        j += j & (-j)


@numba.njit(cache=True, nogil=True)
def _first_pair(order, mask, rank, V, f, f_mode, n_real, wg, we, wl, out, b, h, L, dense, tree, same
                ):  # pragma: no cover - compiled
    """The ``ties="first"`` walk of list ``b`` for the columns ``h`` and ``h + 1`` at once (one tree walk for
    both: a Fenwick tree over many levels is latency-bound)."""
    N = order.shape[1]
    for q in range(2 * L + 2):
        tree[q] = 0.0
    for q in range(2 * L):
        same[q] = 0.0
    t0 = 0.0
    t1 = 0.0
    for q in range(N):
        i = order[b, q]
        if not mask[b, i]:
            continue
        r = rank[i]
        a0, a1 = _below2(tree, r, dense)
        e0 = same[2 * r]
        e1 = same[2 * r + 1]
        v0 = wg * a0
        v1 = wg * a1
        if we != 0.0:
            v0 += we * e0
            v1 += we * e1
        if wl != 0.0:
            v0 += wl * (t0 - a0 - e0)
            v1 += wl * (t1 - a1 - e1)
        out[b, i, h] = v0
        out[b, i, h + 1] = v1
        w0 = np.float64(V[b, i, h])
        w1 = np.float64(V[b, i, h + 1])
        if f_mode != 0:
            if f_mode == 1:
                fi = np.float64(f[b, i])
            elif f_mode == 2:
                fi = np.float64(f[b, q])
            else:
                fi = np.float64(f[0, q]) if q < n_real else 0.0
            w0 *= fi
            w1 *= fi
        _add2(tree, r, w0, w1, L, dense)
        same[2 * r] += w0
        same[2 * r + 1] += w1
        t0 += w0
        t1 += w1


@numba.njit(cache=True, nogil=True)
def _sweep_rows(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                wg, we, wl, out, b0, b1):  # pragma: no cover - compiled
    N = order.shape[1]
    if wide:
        _sweep_impl(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                    wg, we, wl, out, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))
    else:
        _sweep_impl(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                    wg, we, wl, out, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _sweep_impl(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                wg, we, wl, out, b0, b1, keys, k2):  # pragma: no cover - compiled
    """``out[b, i] = sum_{j above i} w(r_i, r_j) W_j`` (+ tied partners under ``average``), ``W = V f``; one pass
    down the ranking per column of ``V`` (scalar sums, no inner loop over the columns).  ``f_mode``: 0 no factor,
    1 ``f[b, i]`` per item, 2 ``f[b, k]`` per position, 3 ``f[0, k]`` per position for every list, 0 from the
    position ``n_b`` (the list's number of real items) on."""
    B, N = order.shape
    H = V.shape[2]
    idx, i2, cnt, rank, hkey, hslot = _rank_scratch(N)
    tree = np.empty(N + 2)  # below each rank, of W (dense) or a Fenwick tree over the ranks (1-based)
    same = np.empty(N + 1)  # W per rank
    tree2 = np.empty(2 * (N + 2) if H > 1 and not average else 0)  # the same two for a pair of columns
    same2 = np.empty(2 * (N + 1) if H > 1 and not average else 0)
    M = N if average else 0  # scratch used under average ties only
    btree = np.zeros(M + 2)  # the same two of V inside a tie block, cleared after it
    bsame = np.zeros(M + 1)
    res = np.empty(M)  # per position
    for b in range(b0, b1):
        L = _rank_row(rbits, wide, mask, b, keys, idx, k2, i2, cnt, rank, hkey, hslot) if has_rel else 1
        dense = L <= DENSE_LEVELS
        n_real = 0
        for i in range(N):
            if mask[b, i]:
                n_real += 1
            else:
                for h in range(H):
                    out[b, i, h] = 0.0
        h0 = 0
        if not average:  # columns two at a time, then the last one alone
            while h0 + 1 < H:
                _first_pair(order, mask, rank, V, f, f_mode, n_real, wg, we, wl, out, b, h0, L, dense, tree2,
                            same2)
                h0 += 2
        for h in range(h0, H):
            for q in range(L + 1):
                tree[q] = 0.0
            for q in range(L):
                same[q] = 0.0
            tot = 0.0
            if not average:  # every position its own block: read, then write, item by item
                for q in range(N):
                    i = order[b, q]
                    if not mask[b, i]:
                        continue
                    r = rank[i]
                    lt = _below(tree, r, dense)
                    eq = same[r]
                    v = wg * lt
                    if we != 0.0:
                        v += we * eq
                    if wl != 0.0:
                        v += wl * (tot - lt - eq)
                    out[b, i, h] = v
                    w = np.float64(V[b, i, h])
                    if f_mode == 1:
                        w *= np.float64(f[b, i])
                    elif f_mode == 2:
                        w *= np.float64(f[b, q])
                    elif f_mode == 3:
                        w *= np.float64(f[0, q]) if q < n_real else 0.0
                    _add(tree, r, w, L, dense)
                    same[r] += w
                    tot += w
                continue
            k = 0
            while k < N:
                e = k + 1
                while e < N and blk[b, e] == blk[b, k]:
                    e += 1
                for q in range(k, e):  # read: everything in earlier blocks
                    i = order[b, q]
                    if not mask[b, i]:
                        continue
                    r = rank[i]
                    lt = _below(tree, r, dense)
                    eq = same[r]
                    v = wg * lt
                    if we != 0.0:
                        v += we * eq
                    if wl != 0.0:
                        v += wl * (tot - lt - eq)
                    res[q] = v
                if e - k > 1:  # tied partners: the block's own V by relevance category
                    btot = 0.0
                    for q in range(k, e):
                        i = order[b, q]
                        if mask[b, i]:
                            vi = np.float64(V[b, i, h])
                            _add(btree, rank[i], vi, L, dense)
                            bsame[rank[i]] += vi
                            btot += vi
                    for q in range(k, e):
                        i = order[b, q]
                        if not mask[b, i]:
                            continue
                        r = rank[i]
                        vi = np.float64(V[b, i, h])
                        lt = _below(btree, r, dense)
                        eq = bsame[r] - vi
                        v = wg * lt
                        if we != 0.0:
                            v += we * eq
                        if wl != 0.0:
                            v += wl * (btot - vi - lt - eq)
                        res[q] += (np.float64(tie_arr[b, i]) if use_tie_arr else tie) * v
                    for q in range(k, e):
                        i = order[b, q]
                        if mask[b, i]:
                            _clear(btree, rank[i], L, dense)
                            bsame[rank[i]] = 0.0
                for q in range(k, e):
                    i = order[b, q]
                    if mask[b, i]:
                        out[b, i, h] = res[q]
                for q in range(k, e):  # write: the block joins the items above
                    i = order[b, q]
                    if not mask[b, i]:
                        continue
                    r = rank[i]
                    w = np.float64(V[b, i, h])
                    if f_mode == 1:
                        w *= np.float64(f[b, i])
                    _add(tree, r, w, L, dense)
                    same[r] += w
                    tot += w
                k = e


@numba.njit(cache=True, nogil=True)
def _all_pairs_rows(mask, rbits, wide, V, wg, we, wl, out, b0, b1):  # pragma: no cover - compiled
    N = mask.shape[1]
    if wide:
        _all_pairs_impl(mask, rbits, wide, V, wg, we, wl, out, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))
    else:
        _all_pairs_impl(mask, rbits, wide, V, wg, we, wl, out, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _all_pairs_impl(mask, rbits, wide, V, wg, we, wl, out, b0, b1, keys, k2):  # pragma: no cover - compiled
    """``out[b, i] = sum_{j != i real} w(r_i, r_j) V_j`` by per-rank sums."""
    B, N = mask.shape
    H = V.shape[2]
    idx, i2, cnt, rank, hkey, hslot = _rank_scratch(N)
    per = np.empty(N + 1)  # V per rank
    below = np.empty(N + 1)  # V over the ranks below
    for b in range(b0, b1):
        L = _rank_row(rbits, wide, mask, b, keys, idx, k2, i2, cnt, rank, hkey, hslot)
        for i in range(N):
            if not mask[b, i]:
                for h in range(H):
                    out[b, i, h] = 0.0
        for h in range(H):
            for q in range(L):
                per[q] = 0.0
            tot = 0.0
            for i in range(N):
                if mask[b, i]:
                    vi = np.float64(V[b, i, h])
                    per[rank[i]] += vi
                    tot += vi
            run = 0.0
            for r in range(L):
                below[r] = run
                run += per[r]
            for i in range(N):
                if not mask[b, i]:
                    continue
                r = rank[i]
                vi = np.float64(V[b, i, h])
                lt = below[r]
                eq = per[r] - vi
                v = wg * lt
                if we != 0.0:
                    v += we * eq
                if wl != 0.0:
                    v += wl * (tot - vi - lt - eq)
                out[b, i, h] = v


# ------------------------------------------------------------------------------------------------ ramp windows
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
    over the levels); item ``i`` of level ``l_i`` reads the sums below its level (``D[., l_i - 1]``), at it
    (``D[., l_i] - D[., l_i - 1]``) and above it (``D[., L - 1] - D[., l_i]``) at its window bounds: three reads per
    value whatever the number of levels."""
    N = X.shape[1]
    H = X.shape[2]
    H2 = 2 * H
    L = 1
    for b in range(b0, b1):
        for i in range(N):
            if lvl[b, i] + 1 > L:
                L = lvl[b, i] + 1
    D = np.empty((N + 1, L, H2))
    S = np.empty((3, H2))  # per band (below, at, above): the sums at hi, then at lo
    T = np.empty((3, H2))
    tot = np.empty(H)
    wts = np.empty(3)
    wts[0] = cb
    wts[1] = ce
    wts[2] = ca
    for b in range(b0, b1):
        for l in range(L):
            for h in range(H2):
                D[0, l, h] = 0.0
        for k in range(N):
            it = order[b, k]
            o = off[b, it]
            li = lvl[b, it]
            for l in range(li):
                for h in range(H2):
                    D[k + 1, l, h] = D[k, l, h]
            for l in range(li, L):
                for h in range(H):
                    x = X[b, it, h]
                    D[k + 1, l, h] = D[k, l, h] + x
                    D[k + 1, l, H + h] = D[k, l, H + h] + x * o
        for i in range(N):
            a = hi[b, i]
            c = lo[b, i]
            o = off[b, i]
            li = lvl[b, i]
            for h in range(H2):  # the three bands at hi (S) and at lo (T)
                below_a = D[a, li - 1, h] if li > 0 else 0.0
                below_c = D[c, li - 1, h] if li > 0 else 0.0
                S[0, h] = below_a
                T[0, h] = below_c
                S[1, h] = D[a, li, h] - below_a
                T[1, h] = D[c, li, h] - below_c
                S[2, h] = D[a, L - 1, h] - D[a, li, h]
                T[2, h] = D[c, L - 1, h] - D[c, li, h]
            for h in range(H):
                W[b, i, h] = 0.0
                OUT[b, i, h] = 0.0
            for band in range(3):
                wt = wts[band]
                if wt == 0.0:
                    continue
                if lower:
                    for h in range(H):
                        wv = S[band, h] - T[band, h]
                        W[b, i, h] += wt * wv
                        OUT[b, i, h] += wt * (T[band, h] + (0.5 + o) * wv - (S[band, H + h] - T[band, H + h]))
                else:
                    for h in range(H):
                        if band == 0:
                            tot[h] = D[N, li - 1, h] if li > 0 else 0.0
                        elif band == 1:
                            tot[h] = D[N, li, h] - (D[N, li - 1, h] if li > 0 else 0.0)
                        else:
                            tot[h] = D[N, L - 1, h] - D[N, li, h]
                        wv = S[band, h] - T[band, h]
                        W[b, i, h] += wt * wv
                        uw = S[band, H + h] - T[band, H + h]
                        OUT[b, i, h] += wt * ((tot[h] - S[band, h]) + (0.5 - o) * wv + uw)


@numba.njit(cache=True, nogil=True)
def _dense_rank_rows(bits, wide, mask, rank, levels, b0, b1):  # pragma: no cover - compiled
    """:func:`dense_rank` for the lists ``[b0, b1)``."""
    N = bits.shape[1]
    if wide:
        _dense_rank_impl(bits, wide, mask, rank, levels, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))
    else:
        _dense_rank_impl(bits, wide, mask, rank, levels, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _dense_rank_impl(bits, wide, mask, rank, levels, b0, b1, keys, k2):  # pragma: no cover - compiled
    N = bits.shape[1]
    idx, i2, cnt, row, hkey, hslot = _rank_scratch(N)
    for b in range(b0, b1):
        levels[b] = _rank_row(bits, wide, mask, b, keys, idx, k2, i2, cnt, row, hkey, hslot)
        for j in range(N):
            rank[b, j] = row[j]


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


def dense_rank(relevance: Tensor, mask: Tensor):
    """``(rank, L)``: the dense rank ``[B, N]`` int64 of the relevance among each list's real items (0 = least
    relevant; padded items get their list's number of distinct values) and the largest number of distinct values
    of a list (an int): ``torchfair.orderings._sweeps._dense_rank`` without a sort (a small hash table per list
    for up to 64 distinct values)."""
    B, N = relevance.shape
    bits, wide = _bits(relevance)
    rank = torch.empty(B, N, dtype=torch.int64)
    levels = np.zeros(B, np.int64)
    _run(_dense_rank_rows, (bits, wide, mask.contiguous().numpy(), rank.numpy(), levels), B, N)
    return rank, int(levels.max()) if B else 0


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


# ------------------------------------------------------------------------------------------------ dispatch
_POOL: Optional[ThreadPoolExecutor] = None
_POOL_KEY = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The module's thread pool, rebuilt after a ``fork`` (a child inherits no worker thread) or when more
    workers are asked for."""
    global _POOL, _POOL_KEY
    with _POOL_LOCK:
        if _POOL is None or _POOL_KEY[0] != os.getpid() or _POOL_KEY[1] < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="torchfair-hard")
            _POOL_KEY = (os.getpid(), workers)
        return _POOL


def _run(kernel, args, B: int, N: int) -> None:
    """``kernel(*args, b0, b1)`` over the lists ``[0, B)`` on ``torch.get_num_threads()`` threads (the calling
    one included), which take slices of about ``B / (16 threads)`` lists in turn until none is left.  The call
    returns when every slice is done, without waiting for a helper thread that took none: on shared cores a thread
    the machine runs late delays the call by the slice it holds, not by a scheduler slice per call (the
    OpenMP-style fork-join of torch's parallel ops waits for every thread)."""
    threads = min(torch.get_num_threads(), B, os.cpu_count() or 1)
    if threads <= 1 or B * N < PARALLEL_MIN_ELEMENTS:
        kernel(*args, 0, B)
        return
    chunks = min(B, 16 * threads)  # small slices: a late helper holds back little
    bounds = [B * t // chunks for t in range(chunks + 1)]
    state = {"next": 0, "done": 0, "error": None}
    cond = threading.Condition()

    def work():
        while True:
            with cond:
                c = state["next"]
                if c >= chunks:
                    return
                state["next"] = c + 1
            try:
                kernel(*args, bounds[c], bounds[c + 1])
            except BaseException as exc:  # pragma: no cover - re-raised by the calling thread
                state["error"] = exc
            with cond:
                state["done"] += 1
                cond.notify_all()

    pool = _pool(threads - 1)
    for _ in range(threads - 1):
        pool.submit(work)
    work()
    with cond:
        while state["done"] < chunks:
            cond.wait()
    if state["error"] is not None:
        raise state["error"]


def supported(*tensors: Tensor) -> bool:
    """Whether the kernels can take these tensors: plain CPU tensors (no tensor subclass, as under
    ``torch.compile`` or ``vmap``), outside compilation."""
    if torch.compiler.is_compiling():
        return False
    return all(type(t) is Tensor and t.device.type == "cpu" for t in tensors)


def _bits(x: Tensor):
    """Integer view of the float bits of ``x`` (float32 / float64), and whether they are 64-bit."""
    x = x.detach().contiguous()
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
    _run(_sort_rows, (bits, wide, mask.contiguous().numpy(), order.numpy(), positions.numpy()), B, N)
    return order, positions


def _weights(pw):
    return (1.0, 1.0, 1.0) if pw is None else (pw.greater, pw.equal, pw.less)


def sweep(order: Tensor, mask: Tensor, right: Tensor, pw, factor: Optional[Tensor] = None, factor_by: str = "item",
          block_sorted: Optional[Tensor] = None, tie=0.5) -> Tensor:
    """``out[b, i, h] = sum_{j} w[b, i, j] X[b, i, j] right[b, j, h]`` for the hard ranking ``order`` with
    ``X[i, j] = f_j 1(j in an earlier tie block than i) + tie_i 1(j != i in i's tie block)`` and ``w`` the
    :class:`LevelPairWeight` ``pw`` (1 when ``None``).

    ``f_j`` is 1 without ``factor``, else ``factor[b, j]`` (``factor_by="item"``), ``factor[b, pos_j]``
    (``"position"``) or ``factor[0, pos_j]`` for ``pos_j < n_b`` and 0 beyond (``"row"``: one ``[1, N]`` row of
    position weights for every list, ``n_b`` the list's number of real items).  ``tie`` is a float or a ``[B, N]``
    tensor; tie blocks are the runs of equal ``block_sorted`` along the positions (every position its own block
    when it is ``None``; ``factor_by`` must then be ``"item"``).  ``[B, N, H]`` in ``right``'s dtype, 0 for padded
    items."""
    B, N = order.shape
    H = right.shape[-1]
    out = torch.empty(B, N, H, dtype=right.dtype)
    V = right.detach().contiguous().numpy()
    dummy = np.zeros((1, 1), V.dtype)
    if pw is not None:
        rbits, wide = _bits(pw.relevance)
    else:
        rbits, wide = np.zeros((1, 1), np.int32), False
    mode = 0 if factor is None else {"item": 1, "position": 2, "row": 3}[factor_by]
    f = dummy if factor is None else factor.detach().contiguous().numpy()
    average = block_sorted is not None
    if average and mode > 1:
        raise ValueError("per-position factors need ties='first'")
    blk = np.zeros((1, 1), np.int64) if not average else block_sorted.contiguous().numpy()
    tie_arr = isinstance(tie, Tensor)
    ta = tie.detach().contiguous().numpy() if tie_arr else dummy
    g, e, l = _weights(pw)
    args = (order.contiguous().numpy(), mask.contiguous().numpy(), rbits, wide, pw is not None, V, f, mode, blk,
            average, 0.0 if tie_arr else float(tie), ta, tie_arr, g, e, l, out.numpy())
    _run(_sweep_rows, args, B, N)
    return out


def all_pairs(right: Tensor, mask: Tensor, pw) -> Tensor:
    """``out[b, i, h] = sum_{j != i real} w[b, i, j] right[b, j, h]`` for the :class:`LevelPairWeight` ``pw``,
    ``[B, N, H]`` in ``right``'s dtype, 0 for padded items."""
    B, N = mask.shape
    H = right.shape[-1]
    out = torch.empty(B, N, H, dtype=right.dtype)
    rbits, wide = _bits(pw.relevance)
    g, e, l = _weights(pw)
    _run(_all_pairs_rows, (mask.contiguous().numpy(), rbits, wide, right.detach().contiguous().numpy(), g, e, l,
                           out.numpy()), B, N)
    return out
