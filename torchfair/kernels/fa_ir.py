"""Compiled (numba) FA*IR m-tables: :func:`torchfair.metrics.fa_ir_mtable` and the bisection of
:func:`torchfair.metrics.fa_ir_adjusted_alpha` (Zehlike et al., CIKM 2017, §4.2-4.3) without a Python loop over the
prefix lengths.  Imported through :func:`torchfair.kernels.pick`; the numpy code of :mod:`torchfair.metrics.prefix`
is the reference, with the same float64 operations in the same order (the sums left to right), so both give the
same bits (tests/kernels/test_fa_ir.py).

    >>> from torchfair.kernels import load
    >>> load("fa_ir").mtable(10, 0.5, 0.1).tolist()
    [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["mtable", "fail_probability", "warmup"]


@numba.njit(cache=True, nogil=True)
def _next_prefix(pmf, i, p, alpha):  # pragma: no cover - compiled
    """Advance the binomial pmf from ``i - 1`` to ``i`` trials (in place, the numpy reference's operations in its
    order) and return ``m(i)``: the first ``m`` with ``BinomCDF(m; i, p) > alpha``."""
    q = 1.0 - p
    for m in range(i, 0, -1):
        pmf[m] = pmf[m] * q + pmf[m - 1] * p
    pmf[0] *= q
    c = 0.0
    m = 0
    while m <= i:
        c += pmf[m]
        if c > alpha:
            break
        m += 1
    return m


@numba.njit(cache=True, nogil=True)
def _mtable(k, p, alpha, out):  # pragma: no cover - compiled
    """``out[i - 1] = m(i)`` for ``i = 1..k`` (:func:`_next_prefix`)."""
    pmf = np.zeros(k + 1)
    pmf[0] = 1.0
    for i in range(1, k + 1):
        out[i - 1] = _next_prefix(pmf, i, p, alpha)


@numba.njit(cache=True, nogil=True)
def _fail(k, p, alpha):  # pragma: no cover - compiled
    """``1 - P(tau_p(i) >= m_alpha(i) for every i <= k)`` for positions protected independently with probability
    ``p``: the m-table and the dynamic programme over protected counts in one sweep over ``i``."""
    pmf = np.zeros(k + 1)
    pmf[0] = 1.0
    dist = np.zeros(k + 1)
    dist[0] = 1.0
    q = 1.0 - p
    for i in range(1, k + 1):
        need = _next_prefix(pmf, i, p, alpha)
        for m in range(i, 0, -1):
            dist[m] = dist[m] * q + dist[m - 1] * p
        dist[0] *= q
        for m in range(min(need, k + 1)):
            dist[m] = 0.0
    total = 0.0
    for m in range(k + 1):  # left to right, as the reference (np.sum would sum pairwise)
        total += dist[m]
    return 1.0 - total


def mtable(k: int, p: float, alpha: float) -> np.ndarray:
    """FA*IR's unadjusted m-table at significance ``alpha`` (``[k]`` int64): ``torchfair.metrics.prefix._mtable``
    compiled."""
    out = np.empty(k, np.int64)
    _mtable(int(k), float(p), float(alpha), out)
    return out


def fail_probability(k: int, p: float, alpha: float) -> float:
    """The probability that a ranking drawn by the fair Bernoulli(``p``) process fails some prefix test of the
    m-table at ``alpha``: ``1 - torchfair.metrics.prefix._success_probability(_mtable(k, p, alpha), p)``, in one
    compiled sweep (``O(k^2)``, no Python loop)."""
    return float(_fail(int(k), float(p), float(alpha)))


def warmup() -> None:
    """Compile (or load from the disk cache) the signatures the library calls."""
    mtable(4, 0.5, 0.1)
    fail_probability(4, 0.5, 0.1)
