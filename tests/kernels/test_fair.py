"""torchfair/kernels/fair.py: FA*IR's m-tables and failure probability compiled, against the numpy reference of
torchfair.metrics.prefix (the same operations in the same order: equal tables, probabilities to rounding)."""
import numpy as np
import pytest

import torchfair.kernels as kernels
from torchfair.metrics import prefix as P

pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="numba is not available")


def test_mtable_and_fail_probability_are_the_numpy_reference():
    K = kernels.load("fair", "numba")
    rng = np.random.default_rng(0)
    cases = [(1, 0.5, 0.1), (10, 0.5, 0.1), (257, 0.03, 0.01), (64, 0.97, 0.5)]
    cases += [(int(rng.integers(1, 300)), float(rng.uniform(0.02, 0.98)), float(rng.uniform(1e-6, 0.9)))
              for _ in range(12)]
    for k, p, a in cases:
        ref = P._mtable(k, p, a)
        assert K.mtable(k, p, a).tolist() == ref, (k, p, a)
        fail = 1.0 - P._success_probability(ref, p)
        assert K.fail_probability(k, p, a) == pytest.approx(fail, rel=1e-12, abs=1e-15), (k, p, a)


def test_adjusted_alpha_and_table_equal_the_numpy_path(monkeypatch):
    got = {}
    for use_kernels in (True, False):
        monkeypatch.setattr(P, "_ADJUSTED", {})
        if not use_kernels:
            monkeypatch.setattr(kernels, "load", lambda family, backend="auto": None)
        got[use_kernels] = [(P.fair_adjusted_alpha(k, p, 0.1), P.fair_mtable(k, p, 0.1).tolist())
                            for k, p in ((25, 0.5), (200, 0.3), (600, 0.6))]
    for (a1, t1), (a0, t0) in zip(got[True], got[False]):
        assert t1 == t0
        assert a1 == pytest.approx(a0, rel=1e-9)
