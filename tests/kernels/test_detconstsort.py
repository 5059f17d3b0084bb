"""torchfair.kernels.detconstsort: the compiled DetConstSort walk is the plain-Python walk, and det_const_sort gives
the same ranking on both backends.

* ``walk`` (numba) and ``walk_python`` write the same output for random groups, shares, prefix lengths and every
  knob of the FairRankTune reading (``key``, ``slack``, ``floor_eps``, ``whole_batches``);
* ``det_const_sort(backend=...)``: the same ranking, and a bad backend names the argument.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from torchfair.kernels.detconstsort import walk, walk_python
from torchfair.rerank import det_const_sort


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("frt", [False, True])
def test_compiled_walk_is_the_python_walk(seed, frt):
    rng = np.random.default_rng(seed)
    B, N, G = 4, 30, 3
    codes = rng.integers(-1, G, size=(B, N)).astype(np.int64)
    n = rng.integers(1, N + 1, size=B).astype(np.int64)
    p = rng.dirichlet(np.ones(G), size=B)
    key = np.ascontiguousarray(np.argsort(rng.random((B, N)), axis=1).astype(np.int64))
    k = int(rng.integers(1, N + 1))
    args = (codes, n, p, k)
    extra = (key, 1, 0.0, True) if frt else (np.ascontiguousarray(np.broadcast_to(np.arange(N), (B, N))), 0, 1e-9,
                                             False)
    a, b = np.empty((B, N), np.int64), np.empty((B, N), np.int64)
    walk(*args, a, *extra)
    walk_python(*args, b, *extra)
    assert np.array_equal(a, b)
    for r in range(B):  # every start position once
        assert sorted(a[r].tolist()) == list(range(N))


def test_det_const_sort_is_the_same_on_both_backends():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(5, 40, generator=g)
    grp = torch.randint(0, 3, (5, 40), generator=g)
    a = det_const_sort(s, grp, distribution=[0.5, 0.3, 0.2], k=25, backend="numba")
    b = det_const_sort(s, grp, distribution=[0.5, 0.3, 0.2], k=25, backend="torch")
    assert torch.equal(a.ranking, b.ranking)
    assert torch.equal(a.met, b.met)
    with pytest.raises(ValueError, match="backend"):
        det_const_sort(s, grp, backend="cuda")
