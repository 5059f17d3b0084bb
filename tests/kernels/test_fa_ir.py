"""torchfair/kernels/fa_ir.py: FA*IR's m-tables and failure probability compiled, against the numpy reference of
torchfair.metrics.prefix (the same float64 operations in the same order, sums left to right: equal tables and the
same bits), and the public functions equal on both backends."""
import numpy as np
import pytest

import torchfair.kernels as kernels
from torchfair.metrics import fa_ir_adjusted_alpha, fa_ir_mtable
from torchfair.metrics import prefix as P

pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="numba is not available")

_RNG = np.random.default_rng(0)
CASES = [(1, 0.5, 0.1), (10, 0.5, 0.1), (257, 0.03, 0.01), (64, 0.97, 0.5)] + [
    (int(_RNG.integers(1, 300)), float(_RNG.uniform(0.02, 0.98)), float(_RNG.uniform(1e-6, 0.9))) for _ in range(12)]


@pytest.mark.parametrize("k, p, a", CASES)
def test_mtable_and_fail_probability_are_the_numpy_reference(k, p, a):
    K = kernels.load("fa_ir", "numba")
    ref = P._mtable(k, p, a)
    assert K.mtable(k, p, a).tolist() == ref
    assert K.fail_probability(k, p, a) == 1.0 - P._success_probability(ref, p)  # the same bits


@pytest.mark.parametrize("k, p", [(25, 0.5), (200, 0.3), (600, 0.6)])
def test_adjusted_alpha_and_table_equal_the_numpy_path(k, p, monkeypatch):
    got = {}
    for backend in ("numba", "torch"):
        monkeypatch.setattr(P, "_ADJUSTED", {})
        got[backend] = (fa_ir_adjusted_alpha(k, p, 0.1, backend=backend),
                        fa_ir_mtable(k, p, 0.1, backend=backend).tolist())
    assert got["numba"] == got["torch"]
