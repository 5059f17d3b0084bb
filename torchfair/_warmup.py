"""``torchfair.warmup()``: compile every CPU kernel up front (for images, CI, or before a timed run).

It sits above the measures: it runs each family's own warm-up (:func:`torchfair.kernels.warmup`, arrays only), then
each measure path that reaches a kernel once (on small inputs, with ``backend="auto"`` taking the kernels whatever
the size for this one pass), so that nothing is left to compile on a first call.  The ``torchfair warmup`` command
calls it.
"""
from __future__ import annotations

import time

__all__ = ["warmup"]


def warmup() -> float:
    """Compile (or load from numba's disk cache) every kernel the library calls, for float32 and float64 inputs,
    and return the seconds it took; 0.0 when ``TORCHFAIR_KERNELS=torch`` or numba is missing (warned once).
    ``ValueError`` naming ``TORCHFAIR_KERNELS`` when it is ``numba`` and numba cannot be loaded.

    >>> import torchfair
    >>> seconds = torchfair.warmup()  # doctest: +SKIP
    """
    from . import kernels

    if kernels.mode() == "torch":
        return 0.0
    start = time.perf_counter()
    if kernels.load("sorting") is None:  # numba missing (warned once)
        return 0.0
    kernels.warmup()
    with kernels._quiet(force=True):
        _measure_calls()
    return time.perf_counter() - start


def _measure_calls() -> None:
    """Every measure path that reaches a kernel, float32 and float64, on small ``[B, N]`` lists (the kernels forced by
    :func:`warmup`, or ``TORCHFAIR_KERNELS=numba``)."""
    import torch

    from .metrics import dips, expected_exposure, fa_ir_adjusted_alpha, igi, individual_dissatisfaction, kendall_tau
    from .metrics import pairwise_accuracy
    from .orderings import FastSoftRank, Hard, RampRank, SoftRank
    from .rerank import det_const_sort, fa_ir

    B, N = 4, 16
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        s = torch.randn(B, N, generator=g, dtype=dtype)
        r = torch.randint(0, 3, (B, N), generator=g).to(dtype)
        grp = torch.randint(0, 2, (B, N), generator=g)
        soft = torch.softmax(torch.randn(B, N, 2, generator=g, dtype=dtype), -1)
        for ties in ("first", "average"):
            hard = Hard(ties)
            for groups in (grp, soft):
                dips(s, r, groups, ordering=hard)
                igi(s, r, groups, ordering=hard)
            individual_dissatisfaction(s, r, grp, ordering=hard)
            pairwise_accuracy(s, r, grp, ordering=hard)
            kendall_tau(s, r, ordering=hard)
        expected_exposure(s, r)
        for ordering in (RampRank(0.1), FastSoftRank(0.1), SoftRank(0.1)):
            x = s.clone().requires_grad_(True)
            dips(x, r, grp, ordering=ordering).sum().backward()
        det_const_sort(s, grp)
    fa_ir(torch.randn(2, 8, generator=g), torch.randint(0, 2, (2, 8), generator=g))
    fa_ir_adjusted_alpha(8, 0.5, 0.1)
