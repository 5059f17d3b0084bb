"""The DetConstSort walk (Geyik et al., KDD 2019, Algorithm 3) on host arrays: :func:`walk_python`, the plain
Python loop, and :data:`walk`, the same function compiled by numba (``O(k^2)`` per list in the worst case of the
insertion).  :func:`torchfair.rerank.detconstsort.detconstsort_walk` runs one or the other by ``backend``.

    >>> import numpy as np
    >>> out = np.empty((1, 4), np.int64)
    >>> _ = walk(np.array([[0, 0, 1, 1]]), np.array([4]), np.array([[0.5, 0.5]]), 4, out,
    ...          np.arange(4)[None], 0, 1e-9, False)
    >>> out.tolist()
    [[0, 2, 1, 3]]
"""
from __future__ import annotations

import math

import numpy as np

try:
    import numba
except Exception:  # the plain loop still runs; torchfair.kernels.load reports the missing numba
    numba = None

__all__ = ["walk", "walk_python", "warmup"]


def walk_python(codes_sorted, n, p, k, out, key, slack, floor_eps, whole_batches):
    """One list at a time: ``codes_sorted[b, q]`` the group of the item at start position q; writes into
    ``out[b, :]`` the start positions in output order (all real ones, the unplaced after the prefix).

    ``key[b, q]``: the comparison key of the item at start position q (lower = better;
    :func:`detconstsort_walk` passes ``q``
    itself by default).  ``slack``: how many positions an item may sit past its deadline (0: the paper; 1:
    FairRankTune's 0-based reading).  ``floor_eps``: added before the floor of ``k' p_g``.  ``whole_batches``: the
    items of one step are all placed even past ``k`` (FairRankTune), else the walk stops at ``k``."""
    B, N = codes_sorted.shape
    G = p.shape[1]
    queue = np.empty((G, N), dtype=np.int64)
    qlen = np.zeros(G, dtype=np.int64)
    taken = np.zeros(G, dtype=np.int64)
    minc = np.zeros(G, dtype=np.int64)
    att = np.empty(N, dtype=np.int64)
    rank = np.empty(N, dtype=np.int64)
    dead = np.empty(N, dtype=np.int64)
    used = np.zeros(N, dtype=np.bool_)
    cand = np.empty(G, dtype=np.int64)
    for b in range(B):
        m = n[b]
        for g in range(G):
            qlen[g] = 0
            taken[g] = 0
            minc[g] = 0
        for q in range(m):
            used[q] = False
            g = codes_sorted[b, q]
            if g >= 0:
                queue[g, qlen[g]] = q
                qlen[g] += 1
        last = 0
        kk = 0
        limit = min(k, m)
        while last < limit:
            alive = False
            for g in range(G):
                if p[b, g] > 0.0 and taken[g] < qlen[g]:
                    alive = True
            if not alive:
                break
            # jump to the next prefix length at which some group with items left gains a minimum: the lengths in
            # between place nothing, and stepping through them costs 1 / (smallest share) steps
            # (distribution=[1 - 1e-12, 1e-12] would take 1e12); the minimums are monotone in kk, so the jump
            # gives exactly the walk's placements
            nxt = -1
            for g in range(G):
                if p[b, g] > 0.0 and taken[g] < qlen[g]:
                    t = int(math.ceil((minc[g] + 1 - floor_eps) / p[b, g]))
                    if t < kk + 1:
                        t = kk + 1
                    while t > kk + 1 and int(math.floor((t - 1) * p[b, g] + floor_eps)) > minc[g]:
                        t -= 1
                    while int(math.floor(t * p[b, g] + floor_eps)) <= minc[g]:
                        t += 1
                    if nxt < 0 or t < nxt:
                        nxt = t
            kk = nxt
            nc = 0
            for g in range(G):
                want = int(math.floor(kk * p[b, g] + floor_eps))
                if minc[g] < want and taken[g] < qlen[g]:
                    cand[nc] = g
                    nc += 1
                if want > minc[g]:
                    minc[g] = want
            # the changed groups in the order of their next items' keys (default: start positions), stably
            for a in range(1, nc):
                c = cand[a]
                t = a
                while t > 0 and key[b, queue[cand[t - 1], taken[cand[t - 1]]]] > key[b, queue[c, taken[c]]]:
                    cand[t] = cand[t - 1]
                    t -= 1
                cand[t] = c
            for a in range(nc):
                if last >= limit and not whole_batches:
                    break
                g = cand[a]
                q = queue[g, taken[g]]
                taken[g] += 1
                att[last] = g
                rank[last] = q
                dead[last] = kk
                used[q] = True
                start = last
                # 1-based: the item at `start - 1` may move to 1-based position start + 1 if its deadline allows
                # (FairRankTune: ``slack`` positions more)
                while (start > 0 and dead[start - 1] + slack >= start + 1
                       and key[b, rank[start - 1]] > key[b, rank[start]]):
                    att[start - 1], att[start] = att[start], att[start - 1]
                    rank[start - 1], rank[start] = rank[start], rank[start - 1]
                    dead[start - 1], dead[start] = dead[start], dead[start - 1]
                    start -= 1
                last += 1
        for i in range(last):
            out[b, i] = rank[i]
        j = last
        for q in range(m):
            if not used[q]:
                out[b, j] = q
                j += 1
        for q in range(m, N):
            out[b, q] = q
    return 0


#: :func:`walk_python` compiled (nogil, cached on disk)
walk = None if numba is None else numba.njit(cache=True, nogil=True)(walk_python)


def warmup() -> None:
    """Compile (or load from the disk cache) the signature the library calls."""
    out = np.empty((1, 4), np.int64)
    walk(np.array([[0, 0, 1, 1]]), np.array([4]), np.array([[0.5, 0.5]]), 4, out, np.arange(4)[None], 0, 1e-9, False)
