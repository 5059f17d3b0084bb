"""An independent compiled O(N log N) exact DIPS, the peer of ``experiments/bench_speed.py``'s "exact" section.

Written from the formula alone (Fabris et al., WSDM 2023, eq. 8, 10, 11), not from torchfair's code: for a hard
ranking (descending scores, ties by list index), RBP browsing ``F(k) = gamma**k`` and two or more integer groups,

    M[g, h] = 1 / C[g, h] * sum_{i in g} sum_{j in h, pos_j < pos_i} F(pos_j) [1(r_i > r_j) + c_t 1(r_i = r_j)]
    C[g, h] = max(N_g sum_{k < N_h} F(k), N_h sum_{k < N_g} F(k))          (0 where C = 0)

Per list: one stable argsort of the scores, one argsort of the relevance (dense relevance ranks; integer grades
``0..n-1`` are used as they are, without a sort), then a sweep down the ranking with one Fenwick (binary indexed) tree per group over the relevance ranks, holding the exposure of the
items already passed: an item of relevance rank ``r`` reads the exposure of each group's items below ``r`` (one
prefix query per group) and of its own rank (a plain per-rank array), then adds its own exposure to its group's
tree.  ``O(N log N)`` per list (the sorts; the sweep is ``O(N G log L)`` for ``L`` relevance levels), compiled with
numba, lists in parallel (``prange``) when ``parallel=True``.

    python experiments/fenwick_reference.py          # checks it against torchfair.metrics.dips and times both
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

__all__ = ["dips_fenwick"]


@numba.njit(nogil=True)
def _one_list(scores, rel, grp, G, gamma, tie, S, sizes):  # pragma: no cover - compiled
    n = scores.shape[0]
    order = np.argsort(-scores, kind="mergesort")  # stable: ties by index
    rank = np.empty(n, np.int64)
    graded = True  # integer grades 0..n-1 are their own ranks (the usual graded labels): no sort needed
    top = 0
    for q in range(n):
        x = rel[q]
        if not (x >= 0 and x < n and x == np.floor(x)):
            graded = False
            break
        rank[q] = np.int64(x)
        top = max(top, rank[q])
    if graded:
        L = top + 1
    else:
        by_rel = np.argsort(rel)
        L = 0
        for q in range(n):
            if q > 0 and rel[by_rel[q]] != rel[by_rel[q - 1]]:
                L += 1
            rank[by_rel[q]] = L
        L += 1
    tree = np.zeros((G, L + 1))  # Fenwick trees, 1-based, one per group
    same = np.zeros((G, L))  # exposure already passed, per group and relevance rank
    f = 1.0
    for k in range(n):
        i = order[k]
        g = grp[i]
        r = rank[i]
        if g >= 0:
            sizes[g] += 1
            for h in range(G):
                less = 0.0
                j = r  # sum over ranks 0..r-1
                while j > 0:
                    less += tree[h, j]
                    j -= j & (-j)
                S[g, h] += less + tie * same[h, r]
            j = r + 1
            while j <= L:
                tree[g, j] += f
                j += j & (-j)
            same[g, r] += f
        f *= gamma


@numba.njit(nogil=True)
def _normalise(S, sizes, gamma, M):  # pragma: no cover - compiled
    G = S.shape[0]
    for g in range(G):
        for h in range(G):
            cg = (1.0 - gamma ** sizes[g]) / (1.0 - gamma) if gamma < 1.0 else float(sizes[g])
            ch = (1.0 - gamma ** sizes[h]) / (1.0 - gamma) if gamma < 1.0 else float(sizes[h])
            c = max(sizes[g] * ch, sizes[h] * cg)
            M[g, h] = min(1.0, S[g, h] / c) if c > 0 else 0.0


@numba.njit(nogil=True)
def _serial(scores, rel, grp, G, gamma, tie, M):  # pragma: no cover - compiled
    for b in range(scores.shape[0]):
        S = np.zeros((G, G))
        sizes = np.zeros(G, np.int64)
        _one_list(scores[b], rel[b], grp[b], G, gamma, tie, S, sizes)
        _normalise(S, sizes, gamma, M[b])


@numba.njit(nogil=True, parallel=True)
def _parallel(scores, rel, grp, G, gamma, tie, M):  # pragma: no cover - compiled
    for b in prange(scores.shape[0]):
        S = np.zeros((G, G))
        sizes = np.zeros(G, np.int64)
        _one_list(scores[b], rel[b], grp[b], G, gamma, tie, S, sizes)
        _normalise(S, sizes, gamma, M[b])


def dips_fenwick(scores: np.ndarray, relevance: np.ndarray, groups: np.ndarray, num_groups: int, *,
                 gamma: float = 0.9, tie_weight: float = 0.5, parallel: bool = False) -> np.ndarray:
    """Exact DIPS ``[B, G, G]`` (float64) of ``[B, N]`` numpy arrays (group id ``-1``: in no group), RBP(gamma)."""
    scores = np.ascontiguousarray(scores)
    relevance = np.ascontiguousarray(relevance)
    groups = np.ascontiguousarray(groups, dtype=np.int64)
    M = np.zeros((scores.shape[0], num_groups, num_groups))
    (_parallel if parallel else _serial)(scores, relevance, groups, num_groups, float(gamma), float(tie_weight), M)
    return M


def main(argv=None) -> int:  # pragma: no cover - a script
    """Check the peer against ``torchfair.metrics.dips`` on random lists and time it."""
    import argparse
    import time

    import torch

    from torchfair.metrics import dips

    ap = argparse.ArgumentParser(description="Check the compiled Fenwick-tree DIPS against torchfair.metrics.dips "
                                             "(max abs difference) and time it, graded and continuous relevance.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--shapes", default="1000x1000,1x100000", help="comma-separated BxN list shapes")
    ap.add_argument("--threads", type=int, default=1, help="torch and numba threads")
    args = ap.parse_args(argv)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    torch.set_num_threads(args.threads)
    numba.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    for B, N in shapes:
        s = torch.randn(B, N, generator=g)
        grp = torch.randint(0, 2, (B, N), generator=g)
        for kind in ("graded", "continuous"):
            r = torch.randint(0, 5, (B, N), generator=g).float() if kind == "graded" else torch.rand(B, N, generator=g)
            ref = dips(s, r, grp, num_groups=2).double().numpy()
            got = dips_fenwick(s.numpy(), r.numpy(), grp.numpy(), 2, parallel=args.threads > 1)
            t0 = time.perf_counter()
            dips_fenwick(s.numpy(), r.numpy(), grp.numpy(), 2, parallel=args.threads > 1)
            t1 = time.perf_counter()
            print(f"{B} x {N} {kind}: max |fenwick - torchfair| = {np.abs(got - ref).max():.1e}, "
                  f"fenwick {t1 - t0:.4f} s")
    return 0


if __name__ == "__main__":
    main()
