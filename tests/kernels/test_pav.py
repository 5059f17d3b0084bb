"""torchfair.kernels.pav: the compiled pool-adjacent-violators of FastSoftRank against a plain-Python PAV and the
torch solver.

* ``project_rows`` gives the soft positions of the isotonic regression (paper Prop. 3) written out by hand;
* ``backward_rows`` is minus the block-centred gradient over ``eps``;
* ``soft_rank`` is the same on both backends, values and gradients.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from torchfair.kernels import pav
from torchfair.orderings.fast_soft_rank import soft_rank


def _pav_positions(theta, eps):
    """Blondel et al. Prop. 3 by hand: sort z = -theta / eps descending, isotonic (non-increasing) fit of z - w by
    a textbook PAV, positions z - v."""
    n = len(theta)
    order = np.argsort(theta, kind="stable")  # descending z
    z = -np.asarray(theta, dtype=np.float64)[order] / eps
    y = z - np.arange(n - 1, -1, -1, dtype=np.float64)
    blocks = []  # [sum, count]
    for v in y:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] <= blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    fit = np.concatenate([[s / c] * c for s, c in blocks])
    pos = np.empty(n)
    pos[order] = np.clip(z - fit, 0, n - 1)
    return pos


@pytest.mark.parametrize("seed", range(4))
def test_project_rows_is_the_isotonic_regression_by_hand(seed):
    rng = np.random.default_rng(seed)
    B, N = 3, 12
    theta = rng.normal(size=(B, N)).round(1)  # ties
    eps = np.array([0.05, 0.5, 3.0])
    order = np.argsort(theta, axis=1, kind="stable")
    n = np.full(B, N, dtype=np.int64)
    pos, blk = np.zeros((B, N)), np.empty((B, N), np.int64)
    pav.project_rows(theta, eps, order, n, pos, blk)
    for b in range(B):
        np.testing.assert_allclose(pos[b], _pav_positions(theta[b], eps[b]), rtol=0, atol=1e-9)


def test_backward_rows_is_the_block_centred_gradient():
    theta = np.array([[0.0, 0.0, 1.0, 5.0]])  # one tied block of two, two singletons at eps = 1
    eps = np.array([1.0])
    order = np.argsort(theta, axis=1, kind="stable")
    n = np.array([4])
    pos, blk = np.zeros((1, 4)), np.empty((1, 4), np.int64)
    pav.project_rows(theta, eps, order, n, pos, blk)
    grad = np.array([[1.0, 3.0, 2.0, 7.0]])
    out = np.zeros((1, 4))
    pav.backward_rows(grad, eps, order, blk, n, out)
    assert blk[0, 0] == blk[0, 1]  # the tie pools
    np.testing.assert_allclose(out, [[1.0, -1.0, 0.0, 0.0]])  # -(g - block mean) / eps


@pytest.mark.parametrize("eps", [0.01, 0.3, 2.0])
def test_soft_rank_is_the_same_on_both_backends(eps):
    g = torch.Generator().manual_seed(5)
    s0 = torch.randn(4, 20, generator=g, dtype=torch.float64)
    outs, grads = {}, {}
    for backend in ("numba", "torch"):
        s = s0.clone().requires_grad_(True)
        out = soft_rank(s, temperature=eps, backend=backend)
        (out * torch.arange(20, dtype=torch.float64)).sum().backward()
        outs[backend], grads[backend] = out.detach(), s.grad
    torch.testing.assert_close(outs["numba"], outs["torch"], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grads["numba"], grads["torch"], rtol=1e-10, atol=1e-10)
