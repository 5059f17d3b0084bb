"""Compiled (numba) pair sums of a hard ranking, without forming pairs: what
:meth:`HardOrderedBatch.contract <torchfair.orderings.hard.HardOrderedBatch.contract>` and
:func:`~torchfair.orderings.hard.contract_all_pairs` compute for a :class:`~torchfair.orderings.base.LevelPairWeight`.
Imported through :func:`torchfair.kernels.load`; the torch code of :mod:`torchfair.orderings._pairsums` is the
reference these kernels reproduce (tests/kernels/test_pairs.py).

* :func:`sweep` -- per list, the relevance gets dense ranks (:mod:`torchfair.kernels.sorting`), then the ranking
  is walked once, top to bottom, holding what the items already passed contribute per relevance rank: an item reads
  the sum below its rank, at its rank and above it, then adds itself.  The sums below every rank are a plain array
  for up to :data:`DENSE_LEVELS` ranks and a Fenwick (binary indexed) tree beyond, ``O(log L)`` per read and
  insertion for ``L`` ranks.  Columns are walked two at a time.  Under ``ties="average"`` the items of a tie block
  are all read before any is added, their tied partners summed with a second tree cleared after the block.
* :func:`all_pairs` -- pair counts that do not depend on the order: per-rank sums and one prefix over the ranks.

Sums are accumulated in float64 whatever the input dtype and written in the dtype of ``right``.

    >>> from torchfair.kernels import load
    >>> from torchfair.orderings.base import LevelPairWeight
    >>> m = torch.ones(1, 3, dtype=torch.bool)
    >>> load("pairs").all_pairs(torch.ones(1, 3, 1), m, LevelPairWeight(torch.tensor([[2., 1., 0.]])))[..., 0]
    tensor([[2., 1., 0.]])
"""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor

from ._threads import run as _run
from .sorting import _bits, _rank_row, _rank_scratch

__all__ = ["sweep", "all_pairs", "warmup"]

#: up to this many items a list's pair walk reads its arrays in memory order (:func:`_first_pair`)
BY_ITEM_MAX = 8192

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
def _first_pair(order, mask, rank, V, f, f_mode, n_real, wg, we, wl, out, b, h, L, dense, tree, same, rq, wq, oq,
                pq):  # pragma: no cover - compiled
    """The ``ties="first"`` walk of list ``b`` for the columns ``h`` and ``h + 1`` at once (one tree walk for
    both: a Fenwick tree over many levels is latency-bound).  The items' ranks and weights are first laid out by
    position (``pq [N]``: the position of each item; ``rq [N]`` the rank at each position, -1 for a padded item;
    ``wq`` / ``oq`` ``[2 N]`` the weights and sums); the walk runs on these scratch rows and the sums go back to
    ``out`` after it.  Up to :data:`BY_ITEM_MAX` items the list's arrays are read and written in memory order
    (the scratch rows, in the cache, taking the scattered accesses: a large batch then streams through the
    cache), above it along the ranking (the list's own arrays no longer fit in the cache beside the scratch)."""
    N = order.shape[1]
    for q in range(2 * L + 2):
        tree[q] = 0.0
    for q in range(2 * L):
        same[q] = 0.0
    by_item = N <= BY_ITEM_MAX
    if by_item:
        for q in range(N):
            pq[order[b, q]] = q
    for t in range(N):
        i = t if by_item else order[b, t]
        q = pq[i] if by_item else t
        if not mask[b, i]:
            rq[q] = -1
            continue
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
        rq[q] = rank[i]
        wq[2 * q] = w0
        wq[2 * q + 1] = w1
    t0 = 0.0
    t1 = 0.0
    for k in range(N):
        r = rq[k]
        if r < 0:
            continue
        a0, a1 = _below2(tree, r, dense)
        e0 = same[2 * r]
        e1 = same[2 * r + 1]
        oq[2 * k] = _weigh(a0, e0, t0 - a0 - e0, wg, we, wl)
        oq[2 * k + 1] = _weigh(a1, e1, t1 - a1 - e1, wg, we, wl)
        w0 = wq[2 * k]
        w1 = wq[2 * k + 1]
        _add2(tree, r, w0, w1, L, dense)
        same[2 * r] += w0
        same[2 * r + 1] += w1
        t0 += w0
        t1 += w1
    for t in range(N):
        i = t if by_item else order[b, t]
        if mask[b, i]:
            q = pq[i] if by_item else t
            out[b, i, h] = oq[2 * q]
            out[b, i, h + 1] = oq[2 * q + 1]


@numba.njit(cache=True, nogil=True)
def _weigh(below, equal, above, wg, we, wl):  # pragma: no cover - compiled
    """The pair weight applied to the sums of the partners below, at and above an item's relevance rank:
    ``wg below + we equal + wl above`` (a zero weight skips its term, so an infinite sum it would multiply does
    not turn the value into NaN)."""
    v = wg * below
    if we != 0.0:
        v += we * equal
    if wl != 0.0:
        v += wl * above
    return v


@numba.njit(cache=True, nogil=True)
def _sweep_rows32(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                  wg, we, wl, out, b0, b1):  # pragma: no cover - compiled
    N = order.shape[1]
    _sweep_impl(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                wg, we, wl, out, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _sweep_rows64(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                  wg, we, wl, out, b0, b1):  # pragma: no cover - compiled
    N = order.shape[1]
    _sweep_impl(order, mask, rbits, wide, has_rel, V, f, f_mode, blk, average, tie, tie_arr, use_tie_arr,
                wg, we, wl, out, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))


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
    P = N if H > 1 and not average else 0  # the pair walk's ranks, weights and sums in ranking order
    rq = np.empty(P, np.int64)
    pq = np.empty(P, np.int64)
    wq = np.empty(2 * P)
    oq = np.empty(2 * P)
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
                            same2, rq, wq, oq, pq)
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
                    out[b, i, h] = _weigh(lt, eq, tot - lt - eq, wg, we, wl)
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
                    res[q] = _weigh(lt, eq, tot - lt - eq, wg, we, wl)
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
                        v = _weigh(lt, eq, btot - vi - lt - eq, wg, we, wl)
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
def _all_pairs_rows32(mask, rbits, wide, V, wg, we, wl, out, b0, b1):  # pragma: no cover - compiled
    N = mask.shape[1]
    _all_pairs_impl(mask, rbits, wide, V, wg, we, wl, out, b0, b1, np.empty(N, np.uint32), np.empty(N, np.uint32))


@numba.njit(cache=True, nogil=True)
def _all_pairs_rows64(mask, rbits, wide, V, wg, we, wl, out, b0, b1):  # pragma: no cover - compiled
    N = mask.shape[1]
    _all_pairs_impl(mask, rbits, wide, V, wg, we, wl, out, b0, b1, np.empty(N, np.uint64), np.empty(N, np.uint64))


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
                out[b, i, h] = _weigh(lt, eq, tot - vi - lt - eq, wg, we, wl)


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
    _run(_sweep_rows64 if wide else _sweep_rows32, args, B, N)
    return out


def all_pairs(right: Tensor, mask: Tensor, pw) -> Tensor:
    """``out[b, i, h] = sum_{j != i real} w[b, i, j] right[b, j, h]`` for the :class:`LevelPairWeight` ``pw``,
    ``[B, N, H]`` in ``right``'s dtype, 0 for padded items."""
    B, N = mask.shape
    H = right.shape[-1]
    out = torch.empty(B, N, H, dtype=right.dtype)
    rbits, wide = _bits(pw.relevance)
    g, e, l = _weights(pw)
    _run(_all_pairs_rows64 if wide else _all_pairs_rows32, (mask.contiguous().numpy(), rbits, wide, right.detach().contiguous().numpy(), g, e, l,
                           out.numpy()), B, N)
    return out


def warmup() -> None:
    """Compile (or load from the disk cache) every signature the library calls: both relevance key widths (and no
    relevance) with float32 and float64 values, ties first and average, with and without exposure factors."""
    from types import SimpleNamespace

    mask = torch.ones(2, 3, dtype=torch.bool)
    order = torch.tensor([[1, 2, 0], [0, 1, 2]])
    blocks = torch.tensor([[0, 0, 1], [0, 1, 2]])
    for vt in (torch.float32, torch.float64):
        right = torch.ones(2, 3, 2, dtype=vt)
        factor = torch.ones(2, 3, dtype=vt)
        for rt in (None, torch.float32, torch.float64):
            pw = None if rt is None else SimpleNamespace(relevance=torch.tensor([[2., 1., 0.], [0., 1., 1.]], dtype=rt),
                                                         greater=1.0, equal=0.5, less=0.0)
            sweep(order, mask, right, pw)
            for by in ("item", "position"):
                sweep(order, mask, right, pw, factor, by)
            sweep(order, mask, right, pw, factor[:1], "row")
            sweep(order, mask, right, pw, None, "item", blocks)
            sweep(order, mask, right, pw, factor, "item", blocks, factor)
            if pw is not None:
                all_pairs(right, mask, pw)
