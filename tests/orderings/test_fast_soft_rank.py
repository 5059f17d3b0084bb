"""Fast soft ranks (Blondel et al., 2020): torchfair/orderings/fast_soft_rank.py.

Independent references: a plain-Python pool-adjacent-violators, an explicit QP over the permutahedron's facet
constraints (scipy SLSQP, n <= 5), the closed-form hard limit (gaps >= epsilon give the hard positions exactly),
and float64 gradcheck.  torchsort is compared too when importable.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from torchfair.metrics.pairwise import dips, igi
from torchfair.orderings import Hard
from torchfair.orderings.fast_soft_rank import FastSoftRank, isotonic_nonincreasing, soft_rank

BACKENDS = ["torch", "numba"]  # numba is a core dependency: without it the numba cases fail


# ----------------------------------------------------------------------------------------------- references
def pav_nonincreasing(y):
    """Plain-Python PAV: the non-increasing isotonic regression of the list ``y``."""
    blocks = []  # [sum, count]
    for v in y:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] <= blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out = []
    for s, c in blocks:
        out += [s / c] * c
    return out


def reference_positions(theta, eps):
    """Paper Prop. 3 written out in Python: project -theta/eps onto the permutahedron of (n-1, ..., 0)."""
    n = len(theta)
    z = [-t / eps for t in theta]
    order = sorted(range(n), key=lambda i: -z[i])
    s = [z[i] for i in order]
    v = pav_nonincreasing([s[k] - (n - 1 - k) for k in range(n)])
    pos = [0.0] * n
    for k, i in enumerate(order):
        pos[i] = s[k] - v[k]
    return pos


def qp_positions(theta, eps):
    """Projection by an explicit QP over the permutahedron: sum_{i in A} p_i >= sum of the |A| smallest of
    (0..n-1) for every non-empty subset A, with equality for A = all."""
    opt = pytest.importorskip("scipy.optimize")
    import numpy as np
    n = len(theta)
    z = -np.asarray(theta, dtype=float) / eps
    cons = []
    for r in range(1, n):
        for A in itertools.combinations(range(n), r):
            low = r * (r - 1) / 2
            cons.append({"type": "ineq", "fun": (lambda p, A=A, low=low: p[list(A)].sum() - low)})
    cons.append({"type": "eq", "fun": lambda p: p.sum() - n * (n - 1) / 2})
    res = opt.minimize(lambda p: 0.5 * ((p - z) ** 2).sum(), np.full(n, (n - 1) / 2), jac=lambda p: p - z,
                       constraints=cons, method="SLSQP", options={"ftol": 1e-12, "maxiter": 500})
    assert res.success
    return res.x


def _masked_batch(B, N, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=g, dtype=torch.float64)
    if ties:
        s = (s * 2).round() / 2
    lengths = torch.randint(1, N + 1, (B,), generator=g)
    mask = torch.arange(N)[None, :] < lengths[:, None]
    perm = torch.argsort(torch.rand(B, N, generator=g), dim=1)  # padded items scattered, not only at the tail
    return s, mask.gather(1, perm)


# ----------------------------------------------------------------------------------------------- values
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eps", [1e-3, 0.05, 0.3, 1.0, 30.0])
@pytest.mark.parametrize("ties", [False, True])
def test_matches_python_pav(backend, eps, ties):
    s, mask = _masked_batch(6, 17, seed=int(eps * 1000) + ties, ties=ties)
    pos = soft_rank(s, eps, mask, backend=backend)
    for b in range(s.shape[0]):
        idx = mask[b].nonzero().flatten().tolist()
        ref = reference_positions(s[b, idx].tolist(), eps)
        assert torch.allclose(pos[b, idx], torch.tensor(ref, dtype=torch.float64), atol=1e-9), (b, eps)
        assert (pos[b, ~mask[b]] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_matches_explicit_qp(backend, seed):
    g = torch.Generator().manual_seed(seed)
    n = 3 + seed % 3
    theta = torch.randn(n, generator=g, dtype=torch.float64)
    eps = [0.2, 0.7, 2.0, 5.0][seed]
    ref = qp_positions(theta.tolist(), eps)
    assert torch.allclose(soft_rank(theta, eps, backend=backend), torch.as_tensor(ref), atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hard_limit_is_exact(backend):
    # every pair of real scores at least epsilon apart: the projection is the vertex, i.e. the hard positions
    s, mask = _masked_batch(5, 40, seed=3)
    s = torch.argsort(torch.rand(5, 40, generator=torch.Generator().manual_seed(1)), 1).to(s.dtype) * 0.1
    pos = soft_rank(s, 0.1, mask, backend=backend)
    hard = Hard()(s, mask).expected_positions()
    assert torch.allclose(pos * mask, hard * mask, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_permutahedron_invariants(backend):
    s, mask = _masked_batch(8, 30, seed=5, ties=True)
    for eps in (0.01, 0.5, 5.0, 1e4):
        pos = soft_rank(s, eps, mask, backend=backend)
        n = mask.sum(1).to(pos.dtype)
        assert torch.allclose(pos.sum(1), n * (n - 1) / 2, atol=1e-8)
        assert (pos >= -1e-9).all() and (pos <= (n[:, None] - 1) + 1e-9).all()
        # order-preserving: higher score, smaller (or equal) position
        for b in range(8):
            i = mask[b].nonzero().flatten()
            o = torch.argsort(s[b, i], descending=True)
            assert (pos[b, i][o].diff() >= -1e-9).all()
    # huge epsilon: everything pooled at the centre (n-1)/2
    assert torch.allclose(soft_rank(s, 1e9, mask, backend=backend)[mask],
                          ((mask.sum(1, keepdim=True) - 1) / 2).expand_as(s).to(s.dtype)[mask], atol=1e-6)


def test_backends_agree_and_window_budgets():
    s, mask = _masked_batch(16, 300, seed=7)
    for tau in (1e-3, 3e-3, 1e-2, 0.1):
        ref = soft_rank(s, tau, mask, scale="std", backend="torch")
        for budget in (1, 64, 4096, 2 ** 16):
            assert torch.allclose(soft_rank(s, tau, mask, scale="std", backend="torch", window_budget=budget), ref,
                                  atol=1e-9)
        assert torch.allclose(soft_rank(s, tau, mask, scale="std", backend="numba"), ref, atol=1e-9)


def test_isotonic_solver_vs_pav():
    g = torch.Generator().manual_seed(11)
    y = torch.cumsum(torch.rand(7, 50, generator=g, dtype=torch.float64) - 0.6, 1)  # long increasing runs
    n = torch.tensor([50, 1, 0, 13, 49, 2, 30])
    for budget in (1, 100, None):
        blk = isotonic_nonincreasing(y, n, window_budget=budget)
        for b in range(7):
            m = int(n[b])
            v = torch.zeros(m, dtype=y.dtype).index_add_(0, blk[b, :m], y[b, :m])
            cnt = torch.zeros(m, dtype=y.dtype).index_add_(0, blk[b, :m], torch.ones(m, dtype=y.dtype))
            fit = (v / cnt.clamp(min=1))[blk[b, :m]]
            assert torch.allclose(fit, torch.tensor(pav_nonincreasing(y[b, :m].tolist()), dtype=y.dtype),
                                  atol=1e-10)


def test_torchsort_agreement():
    torchsort = pytest.importorskip("torchsort")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 50, generator=g, dtype=torch.float64)
    for eps in (0.01, 0.3, 3.0):
        ref = torchsort.soft_rank(-x, regularization_strength=eps) - 1  # torchsort: 1 = smallest value
        for backend in BACKENDS:
            assert torch.allclose(soft_rank(x, eps, backend=backend), ref, atol=1e-9)


def test_one_dimensional_and_docstring_examples():
    assert torch.equal(soft_rank(torch.tensor([3., 1., 2.]), 0.1), torch.tensor([0., 2., 1.]))
    assert torch.allclose(soft_rank(torch.tensor([3., 1., 2.]), 10.0), torch.tensor([0.9, 1.1, 1.0]))
    assert soft_rank(torch.tensor([3., 1., 2.], dtype=torch.float16), 0.1).dtype == torch.float32


# ----------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eps", [0.05, 0.5, 3.0])
def test_gradcheck(backend, eps):
    s, mask = _masked_batch(3, 9, seed=int(eps * 100))
    s = s.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: soft_rank(x, eps, mask, backend=backend), (s,), atol=1e-7)
    fn = lambda x: FastSoftRank(eps, scale="none", backend=backend)(x, mask).expected_positions()
    assert torch.autograd.gradcheck(fn, (s,), atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_std_gradient_is_fixed_temperature_gradient(backend):
    # scale="std": epsilon = tau * std is a constant of the loss (detached), so the gradient is the one of the
    # fixed epsilon (gradcheck would differentiate through the std and does not apply)
    s, mask = _masked_batch(3, 9, seed=1)
    w = torch.randn(3, 9, dtype=torch.float64)
    x = s.clone().requires_grad_()
    (FastSoftRank(0.4, backend=backend)(x, mask).expected_positions() * w).sum().backward()
    m = mask.to(s.dtype)
    mean = (s * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    std = ((((s - mean) * m) ** 2).sum(1, keepdim=True) / m.sum(1, keepdim=True)).sqrt()
    y = s.clone().requires_grad_()
    (soft_rank(y / (0.4 * std), 1.0, mask, backend=backend) * w).sum().backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_measure(backend):
    s, _ = _masked_batch(2, 8, seed=4)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    rel = torch.rand(2, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    groups = torch.tensor([[0, 1] * 4, [1, 0] * 4])
    s = s.clone().requires_grad_()
    fn = lambda x: dips(x, rel, groups, mask=mask, ordering=FastSoftRank(0.3, scale="none", backend=backend),
                        validate_args=False)
    assert torch.autograd.gradcheck(fn, (s,), atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_zero_gradient_and_no_effect(backend):
    s, mask = _masked_batch(4, 12, seed=9)
    s_nan = torch.where(mask, s, torch.full_like(s, float("nan"))).requires_grad_()
    pos = soft_rank(s_nan, 0.4, mask, backend=backend)
    w = torch.randn(4, 12, dtype=torch.float64)
    (pos * w).sum().backward()
    assert torch.isfinite(s_nan.grad).all() and (s_nan.grad[~mask] == 0).all()
    assert (s_nan.grad[mask] != 0).any()
    # padded values do not move the real items' positions, and each list equals the list of its real items
    other = torch.where(mask, s, torch.full_like(s, 1e6))
    assert torch.equal(soft_rank(other, 0.4, mask, backend=backend), pos.detach())
    for b in range(4):
        i = mask[b].nonzero().flatten()
        assert torch.allclose(soft_rank(s[b, i], 0.4, backend=backend), pos[b, i].detach(), atol=1e-12)


def test_backward_is_block_averaging():
    # one pooled block {0, 1, 2} and a singleton: d pos / d theta = -(I - J)/eps inside the block, 0 outside
    theta = torch.tensor([0.0, 0.01, 0.02, 10.0], dtype=torch.float64, requires_grad=True)
    J = torch.autograd.functional.jacobian(lambda x: soft_rank(x, 1.0, backend="torch"), theta)
    expect = torch.zeros(4, 4, dtype=torch.float64)
    expect[:3, :3] = -(torch.eye(3, dtype=torch.float64) - 1 / 3)
    assert torch.allclose(J, expect)


# ----------------------------------------------------------------------------------------------- orderings
def _fair_batch(seed, B=4, N=20):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=g, dtype=torch.float64)
    rel = torch.randint(0, 4, (B, N), generator=g).to(torch.float64)
    groups = torch.randint(0, 2, (B, N), generator=g)
    mask = torch.arange(N)[None, :] < torch.randint(N // 2, N + 1, (B,), generator=g)[:, None]
    return s, rel, groups, mask


@pytest.mark.parametrize("backend", BACKENDS)
def test_dips_converges_to_hard(backend):
    # tolerance: exactly equal (1e-12) once epsilon is below the smallest score gap (the projection is then
    # the hard vertex); the error shrinks as tau decreases before that
    s, rel, groups, mask = _fair_batch(0)
    hard = dips(s, rel, groups, mask=mask, ordering=Hard(), browsing="logarithmic")
    errs = []
    for tau in (1.0, 0.3, 0.1, 0.03, 0.01, 1e-4, 1e-6):
        soft = dips(s, rel, groups, mask=mask, ordering=FastSoftRank(tau, backend=backend), browsing="logarithmic")
        errs.append((soft - hard).abs().max().item())
    assert errs[-1] < 1e-12 and errs[-2] < 1e-12
    assert errs[0] > errs[2] > errs[4]
    hard_igi = igi(s, rel, groups, mask=mask, tie_weight=0.5)
    assert torch.allclose(igi(s, rel, groups, mask=mask, tie_weight=0.5, ordering=FastSoftRank(1e-6)), hard_igi)


def test_ties_converge_to_average_ties():
    s, rel, groups, mask = _fair_batch(1)
    s = (s * 2).round()  # many exact ties
    hard = dips(s, rel, groups, mask=mask, ordering=Hard(ties="average"), browsing="rbp")
    soft = dips(s, rel, groups, mask=mask, ordering=FastSoftRank(1e-6), browsing="rbp")
    # tied items share their positions' mean; the pair terms are exact (1/2), F(mean position) differs from
    # the mean of F over the tied positions, so compare the pair probabilities and the positions instead
    ob_h, ob_s = Hard(ties="average")(s, mask), FastSoftRank(1e-6)(s, mask)
    assert torch.allclose(ob_s.expected_positions() * mask, ob_h.expected_positions() * mask)
    assert torch.allclose(ob_s.pair_block(ob_s.pair_context(None, None), 0, 20).above,
                          ob_h.pair_block(ob_h.pair_context(None, None), 0, 20).above)
    assert torch.isfinite(soft).all() and hard.shape == soft.shape


def test_ordered_batch_quantities():
    s, rel, groups, mask = _fair_batch(2)
    ob = FastSoftRank(0.05)(s, mask)
    p = ob.expected_positions()
    blk = ob.pair_block(None, 0, 20).above
    real = mask[:, :, None] & mask[:, None, :] & ~torch.eye(20, dtype=torch.bool)
    assert torch.allclose((blk + blk.transpose(1, 2))[real], torch.ones(()).double())
    assert (blk[~real] == 0).all()
    R = ob.position_matrix()
    assert torch.allclose(R.sum(1)[mask], torch.ones(()).double())
    k = torch.arange(20, dtype=torch.float64)[None, :, None]
    assert torch.allclose((k * R).sum(1), p)
    from torchfair.browsing import RBP, Cascade
    e = ob.exposure(RBP(0.8))
    assert torch.allclose(e, RBP(0.8).weight(p) * mask)
    ctx = ob.pair_context(RBP(0.8), None)
    assert torch.allclose(ob.pair_block(ctx, 3, 9).joint, e[:, None, :] * ob.pair_block(None, 3, 9).above)
    # relevance-dependent browsing goes through the position matrix; exact at the hard limit
    hard_e = Hard()(s, mask).exposure(Cascade(0.9, 3.0), rel)
    assert torch.allclose(FastSoftRank(1e-6)(s, mask).exposure(Cascade(0.9, 3.0), rel), hard_e)


def test_std_scale_is_affine_invariant():
    s, rel, groups, mask = _fair_batch(3)
    a = FastSoftRank(0.05)(s, mask).expected_positions()
    b = FastSoftRank(0.05)(7.0 * s - 3.0, mask).expected_positions()
    assert torch.allclose(a, b)


@pytest.mark.parametrize("kwargs", [dict(temperature=0), dict(temperature=-1.0), dict(temperature=float("nan")),
                                    dict(scale="var"), dict(min_scale=0), dict(backend="cuda")])
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        FastSoftRank(**kwargs)


def test_invalid_inputs():
    with pytest.raises(ValueError):
        soft_rank(torch.ones(3), 1.0, regularization="kl")
    with pytest.raises(ValueError):
        soft_rank(torch.ones(2, 3, dtype=torch.long), 1.0)
    with pytest.raises(ValueError):
        soft_rank(torch.ones(2, 3), 1.0, torch.ones(2, 3))  # mask must be bool
    with pytest.raises(ValueError):
        soft_rank(torch.ones(2, 3), 1.0, backend="jax")


def test_empty_and_single_item_lists():
    s = torch.tensor([[1.0, 2.0], [3.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[False, False], [True, False]])
    pos = soft_rank(s, 0.5, mask)
    assert torch.equal(pos.detach(), torch.zeros(2, 2))
    pos.sum().backward()
    assert torch.equal(s.grad, torch.zeros(2, 2))


# ------------------------------------------------------------------------------- large and tied scores
def exact_positions(theta, eps):
    """Prop. 3 in exact rational arithmetic (no rounding anywhere): the reference for extreme magnitudes."""
    from fractions import Fraction
    n = len(theta)
    z = [-Fraction(float(t)) / Fraction(float(eps)) for t in theta]
    order = sorted(range(n), key=lambda i: -z[i])
    s = [z[i] for i in order]
    blocks = []
    for k in range(n):
        blocks.append([s[k] - (n - 1 - k), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] <= blocks[-1][0] / blocks[-1][1]:
            a, c = blocks.pop()
            blocks[-1][0] += a
            blocks[-1][1] += c
    v = []
    for a, c in blocks:
        v += [a / c] * c
    pos = [0.0] * n
    for k, i in enumerate(order):
        pos[i] = float(s[k] - v[k])
    return pos


LARGE_LISTS = [
    [5e18] * 6,  # all tied at a large value: the mean of the ties was an ulp off (positions ~ -1e6)
    [1e19, 1e19, -1e19, 0.0, 1.0, 1e19, -1e19],
    [1e6, 1e6, 1e6, 0.0, 1e6],
    [1e30, 1.0, 0.0, 1.0, -1e30, 5e29, 5e29],
    [3e38, -3e38, 3e38, 2.0, 2.0],
    [1e6 + 0.0625, 1e6, 1e6 + 0.125, 1e6, -1e6],  # near-ties: gaps of a few ulps
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eps", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("values", LARGE_LISTS, ids=range(len(LARGE_LISTS)))
def test_large_and_tied_scores_match_exact_projection(backend, eps, values):
    """Regression: tied large scores gave soft positions far outside [0, n - 1].  Positions now match
    the projection computed in exact rational arithmetic, lie in [0, n - 1] and sum to n (n - 1) / 2."""
    theta = torch.tensor([values], dtype=torch.float32)
    n = len(values)
    ref = exact_positions(theta[0].tolist(), eps)
    pos = soft_rank(theta, eps, backend=backend)
    assert torch.allclose(pos[0].double(), torch.tensor(ref, dtype=torch.float64), atol=1e-5, rtol=0), (pos, ref)
    assert pos.min() >= 0 and pos.max() <= n - 1
    assert abs(pos.sum().item() - n * (n - 1) / 2) < 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,v", [(torch.float32, 1e6), (torch.float32, 1e19), (torch.float16, 6e4),
                                     (torch.float16, 1.0), (torch.bfloat16, 1e19), (torch.float64, 1e300)])
@pytest.mark.parametrize("kwargs", [dict(temperature=0.01), dict(temperature=1e-4, scale="none"),
                                    dict(temperature=10.0, scale="none")])
def test_ties_in_range_every_dtype(backend, dtype, v, kwargs):
    """Ties at large magnitudes, in every dtype, with padding: real positions in [0, n_b - 1], tied items equal,
    gradients finite and zero on padding."""
    s = torch.tensor([[v, v, v, 0.0, v, -v], [v, -v, v, v, 0.0, 0.0], [v, v, 0.0, 0.0, 0.0, 0.0]], dtype=dtype)
    mask = torch.tensor([[True] * 6, [True, True, True, True, False, False], [True, True, False, False, False,
                                                                                False]])
    s = s.requires_grad_(True)
    pos = FastSoftRank(backend=backend, **kwargs)(s, mask).expected_positions()
    n = mask.sum(-1, keepdim=True).to(pos.dtype)
    assert torch.isfinite(pos).all()
    assert ((pos >= 0) & (pos <= n - 1) | ~mask).all(), pos
    assert pos[0, 0] == pos[0, 1] == pos[0, 2] == pos[0, 4] and pos[2, 0] == pos[2, 1]
    torch.testing.assert_close(pos.sum(-1), (n * (n - 1) / 2).squeeze(-1))
    (g,) = torch.autograd.grad((pos * torch.arange(6.0, dtype=pos.dtype)).sum(), s)
    assert torch.isfinite(g).all() and (g[~mask] == 0).all()


# ----------------------------------------------------------------------------------------------- fast paths
def test_sort_order_int32_keys_match_float_sort():
    """float32 scores are sorted as int32 keys: the same order as the float sort (ties, +-0, infinities), padded
    items last by index."""
    from torchfair.orderings.fast_soft_rank import _sort_order
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20, 30, generator=g)
    x[:, 4] = x[:, 9]
    x[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")])
    mask = torch.rand(20, 30, generator=g) > 0.2
    key = torch.where(mask, x, torch.full_like(x, float("inf")))
    want = torch.sort(key, dim=1, stable=True).values
    order = _sort_order(x, mask)
    got = torch.where(mask.gather(1, order), x.gather(1, order), torch.full_like(x, float("inf")))
    assert torch.equal(got, want)
    n = mask.sum(1)
    for b in range(20):
        assert mask[b, order[b, :n[b]]].all()
        assert torch.equal(order[b, n[b]:], torch.nonzero(~mask[b]).flatten())


def _staircase(B, N, seed):
    """Sorted ``z - w`` with long staircases: a list whose scores are nearly equally spaced at about epsilon."""
    g = torch.Generator().manual_seed(seed)
    z = torch.sort(torch.randn(B, N, generator=g, dtype=torch.float64), dim=1, descending=True).values * N / 3
    return z - torch.arange(N - 1, -1, -1, dtype=torch.float64)


@pytest.mark.parametrize("budget", [None, 2, 64, 2 ** 16])
def test_tangent_rounds_match_plain_pav(budget):
    """The tangent rounds (staircases pooled at once, windows of any size) give the plain PAV blocks exactly."""
    y = _staircase(6, 400, seed=4)
    n = torch.tensor([400, 399, 250, 17, 1, 0])
    blk = isotonic_nonincreasing(y, n, window_budget=budget)
    assert torch.equal(blk, isotonic_nonincreasing(y, n, window_budget=1))
    for b in range(6):
        m = int(n[b])
        first = int(blk[b, m - 1]) + 1 if m else 0  # padded entries: singleton blocks after the real ones
        assert torch.equal(blk[b, m:], torch.arange(first, first + 400 - m))
        if m == 0:
            continue
        v = torch.zeros(m, dtype=y.dtype).index_add_(0, blk[b, :m], y[b, :m])
        cnt = torch.zeros(m, dtype=y.dtype).index_add_(0, blk[b, :m], torch.ones(m, dtype=y.dtype))
        fit = (v / cnt.clamp(min=1))[blk[b, :m]]
        torch.testing.assert_close(fit, torch.tensor(pav_nonincreasing(y[b, :m].tolist()), dtype=y.dtype),
                                   rtol=0, atol=1e-9)


def test_numba_backward_matches_differentiable_backward():
    """The numba backward kernel and the torch ops used when a graph of the gradient is asked for agree."""
    s, mask = _masked_batch(5, 40, seed=8)
    w = torch.randn(5, 40, dtype=torch.float64)
    grads = []
    for create_graph in (False, True):
        x = s.clone().requires_grad_()
        (g,) = torch.autograd.grad((soft_rank(x, 0.05, mask, backend="numba") * w).sum(), x,
                                   create_graph=create_graph)
        grads.append(g.detach())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-12)
    assert (grads[0][~mask] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_staircase_matches_float64(backend):
    """float32 scores (int32-keyed sort, float32 output) against the float64 projection, in the regime where the
    solvers pool staircases (epsilon ~ the score spacing)."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(8, 500, generator=g)
    mask = torch.rand(8, 500, generator=g) > 0.1
    for eps in (1 / 500, 3 / 500, 30 / 500):
        got = soft_rank(x, eps, mask, backend=backend)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), soft_rank(x.double(), eps, mask, backend="torch"), rtol=0,
                                   atol=1e-3)
