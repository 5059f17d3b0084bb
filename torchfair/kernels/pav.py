"""Compiled (numba) pool-adjacent-violators of :class:`~torchfair.orderings.FastSoftRank` (Blondel et al., ICML
2020, Prop. 3; the authors' reference implementation compiles this step with numba too): one pass per list does
everything after the sort (gap compression, PAV, positions, unsorting), one the backward (block means).  Imported
through :func:`torchfair.kernels.load`; the torch solver of :mod:`torchfair.orderings.fast_soft_rank` is the
reference (tests/kernels/test_pav.py).

    >>> import numpy as np
    >>> pos, blk = np.zeros((1, 2)), np.empty((1, 2), np.int64)
    >>> _ = project_rows(np.array([[1., 0.]]), np.array([1.]), np.array([[1, 0]]), np.array([2]), pos, blk)
    >>> pos.tolist()
    [[0.0, 1.0]]
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["project_rows", "backward_rows", "warmup"]


@numba.njit(cache=True, nogil=True)
def project_rows(theta, eps, order, n, pos, blk):  # pragma: no cover - compiled
    """Everything after the sort, one pass per list: z = -theta / eps in sorted order, gaps above n
    compressed (module docstring, Numerics), PAV, positions, unsorted into ``pos`` (zeros on entry)."""
    B, N = theta.shape
    t = np.empty(N, dtype=np.float64)  # compressed sorted z
    bs = np.empty(N, dtype=np.float64)  # block sums of y = t - w'
    bc = np.empty(N, dtype=np.int64)  # block sizes
    for b in range(B):
        m = n[b]
        for k in range(m, N):
            blk[b, k] = k  # padded positions: singleton blocks (ids >= number of real blocks)
        if m == 0:
            continue
        e = eps[b]
        cap = m + 1.0
        zprev = -theta[b, order[b, 0]] / e
        t[0] = 0.0
        top = -1
        for k in range(m):
            if k > 0:
                z = -theta[b, order[b, k]] / e
                d = zprev - z
                if not (d > 0.0):  # negative rounding, or NaN (inf - inf: tied at infinity)
                    d = 0.0
                elif d > cap:
                    d = cap
                t[k] = t[k - 1] - d
                zprev = z
            top += 1
            bs[top] = t[k] - (m - 1 - k)
            bc[top] = 1
            # non-increasing fit: pool while the previous block mean <= current block mean
            while top > 0 and bs[top - 1] * bc[top] <= bs[top] * bc[top - 1]:
                bs[top - 1] += bs[top]
                bc[top - 1] += bc[top]
                top -= 1
        k = 0
        hi = m - 1.0
        for q in range(top + 1):
            mean = bs[q] / bc[q]
            for _ in range(bc[q]):
                p = t[k] - mean  # = (t_k - mean of t) + (mean of w') over the block
                if p < 0.0:
                    p = 0.0
                elif p > hi:
                    p = hi
                pos[b, order[b, k]] = p
                blk[b, k] = q
                k += 1
    return 0

@numba.njit(cache=True, nogil=True)
def backward_rows(grad, eps, order, blk, n, out):  # pragma: no cover - compiled
    """``out[i] = -(g_i - mean of g over i's block) / eps`` for real items (``out`` zeros on entry)."""
    B, N = grad.shape
    for b in range(B):
        m = n[b]
        e = eps[b]
        a = 0
        while a < m:
            c = a
            acc = 0.0
            while c < m and blk[b, c] == blk[b, a]:
                acc += grad[b, order[b, c]]
                c += 1
            mean = acc / (c - a)
            for k in range(a, c):
                i = order[b, k]
                out[b, i] = -(grad[b, i] - mean) / e
            a = c
    return 0


def warmup() -> None:
    """Compile (or load from the disk cache) the float32 and float64 signatures the library calls."""
    order, n, eps = np.array([[1, 0]]), np.array([2]), np.array([1.])
    for dt in (np.float32, np.float64):
        pos, blk = np.zeros((1, 2), dt), np.empty((1, 2), np.int64)
        project_rows(np.array([[1., 0.]], dt), eps, order, n, pos, blk)
        backward_rows(np.ones((1, 2), dt), eps, order, blk, n, np.zeros((1, 2), dt))
