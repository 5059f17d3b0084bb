"""Tests of the differentiable orderings (torchfair.orderings.soft)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchfair.browsing import RBP, Cascade, Logarithmic, TopK
from torchfair.metrics import dips, igi, pairwise_accuracy, rank_parity
from torchfair.orderings import Hard
from torchfair.orderings.fast_soft_rank import FastSoftRank as FastSoftRank_
from torchfair.orderings.soft import NeuralSort, SoftRank, SoftSort

ORDERINGS = [SoftRank, NeuralSort, SoftSort]
TAUS = [1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001]


def _separated(B, N, gen, gap=1.0, dtype=torch.float64):
    """Scores without ties: a random permutation of 0..N-1 times ``gap`` plus jitter below gap/2."""
    perm = torch.stack([torch.randperm(N, generator=gen) for _ in range(B)]).to(dtype)
    return (perm + 0.5 * torch.rand(B, N, generator=gen, dtype=dtype)) * gap


def _batch(B=4, N=9, seed=0, dtype=torch.float64, gap=1.0):
    gen = torch.Generator().manual_seed(seed)
    s = _separated(B, N, gen, gap, dtype)
    mask = torch.ones(B, N, dtype=torch.bool)
    if B > 1:
        mask[1, N - 3:] = False
    if B > 2:
        mask[2, 0] = False  # a padded item at the front
    rel = torch.randint(0, 4, (B, N), generator=gen).to(dtype)
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[:, 1], g[:, 2] = 0, 1
    return s, mask, rel, g


MEASURES = {
    "dips": lambda s, m, r, g, o: dips(s, r, g, mask=m, num_groups=2, ordering=o),
    "dips_log_topk": lambda s, m, r, g, o: dips(s, r, g, mask=m, num_groups=2, ordering=o,
                                                browsing=TopK(Logarithmic(), k=4)),
    "igi": lambda s, m, r, g, o: igi(s, r, g, mask=m, num_groups=2, ordering=o),
    "pairwise_accuracy": lambda s, m, r, g, o: pairwise_accuracy(s, r, g, mask=m, num_groups=2, ordering=o),
    "rank_parity": lambda s, m, r, g, o: torch.cat([rank_parity(s, g, mask=m, num_groups=2, ordering=o).wins.flatten(1),
                                                    rank_parity(s, g, mask=m, num_groups=2, ordering=o).per_group], 1),
}


# ------------------------------------------------------------------------------------------- (a) faithfulness
@pytest.mark.parametrize("Ord", ORDERINGS)
@pytest.mark.parametrize("measure", list(MEASURES))
def test_converges_to_hard_absolute_tau(Ord, measure):
    """Gaps >= 0.5 score units, scale='none': |soft - exact| < 1e-3 already at tau = 0.03 (measured <= 5e-10) and
    < 1e-12 at tau = 1e-3; the error never increases along the tau sequence."""
    s, m, r, g = _batch()
    f = MEASURES[measure]
    exact = f(s, m, r, g, Hard())
    errs = [(f(s, m, r, g, Ord(t, scale="none")) - exact).abs().max().item() for t in TAUS]
    assert errs[0] > 1e-3  # the relaxation is really soft at tau = 1
    assert all(b <= a + 1e-15 for a, b in zip(errs, errs[1:])), errs
    assert errs[TAUS.index(0.03)] < 1e-3, errs
    assert errs[-1] < 1e-12, errs


@pytest.mark.parametrize("Ord", ORDERINGS)
def test_converges_to_hard_std_scale_float32(Ord):
    """Scores of tiny magnitude (gaps ~ 0.005, std ~ 0.09), float32, scale='std' with the absolute floor lowered
    below the std (the std rule is then scale-free): error < 1e-3 at tau = 1e-2 (measured <= 7e-5) and < 1e-6 at
    tau = 1e-3 (measured 0), monotone along the sequence."""
    s, m, r, g = _batch(B=4, N=30, seed=1, dtype=torch.float32, gap=0.01)
    for f in (MEASURES["dips"], MEASURES["pairwise_accuracy"]):
        exact = f(s, m, r, g, Hard())
        errs = [(f(s, m, r, g, Ord(t, min_scale=1e-6)) - exact).abs().max().item() for t in TAUS]
        assert all(b <= a + 1e-6 for a, b in zip(errs, errs[1:])), errs
        assert errs[TAUS.index(0.01)] < 1e-3, errs
        assert errs[-1] < 1e-6, errs


@pytest.mark.parametrize("Ord", ORDERINGS)
def test_scale_std_is_affine_invariant(Ord):
    s, m, r, g = _batch(seed=2)
    a = dips(s, r, g, mask=m, num_groups=2, ordering=Ord(0.2))
    b = dips(37.0 * s - 5.0, r, g, mask=m, num_groups=2, ordering=Ord(0.2))
    torch.testing.assert_close(a, b)
    c = dips(37.0 * s - 5.0, r, g, mask=m, num_groups=2, ordering=Ord(0.2, scale="none"))
    # a large offset is harmless in float32 too
    d = dips((s + 1e4).float(), r.float(), g, mask=m, num_groups=2, ordering=Ord(0.2))
    torch.testing.assert_close(d.double(), a, atol=1e-4, rtol=0)
    assert (a - c).abs().max() > 1e-3  # an absolute temperature does depend on the score range


@pytest.mark.parametrize("Ord", ORDERINGS)
def test_quantities_converge_to_hard(Ord):
    s, m, r, g = _batch(seed=3)
    hard = Hard()(s, m)
    soft = Ord(1e-3, scale="none")(s, m)
    F = RBP(0.8)
    torch.testing.assert_close(soft.expected_positions() * m, hard.expected_positions() * m)
    torch.testing.assert_close(soft.exposure(F), hard.exposure(F))
    # SoftRank's Gaussian position matrix keeps 1 - 2 Phi(-5) ~ 1 - 6e-7 at the hard position (min_position_std)
    torch.testing.assert_close(soft.position_matrix(), hard.position_matrix(), atol=1e-6, rtol=0)
    ch, cs = hard.pair_context(F, None), soft.pair_context(F, None)
    bh, bs = hard.pair_block(ch, 0, s.shape[1]), soft.pair_block(cs, 0, s.shape[1])
    torch.testing.assert_close(bs.above, bh.above)
    torch.testing.assert_close(bs.joint, bh.joint)
    # relevance-dependent browsing goes through the (soft) position matrix
    C = Cascade(0.9, max_grade=3.0)
    torch.testing.assert_close(soft.exposure(C, r), hard.exposure(C, r), atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------------------- (b) gradcheck
@pytest.mark.parametrize("Ord", ORDERINGS)
@pytest.mark.parametrize("measure", ["dips", "pairwise_accuracy"])
def test_gradcheck(Ord, measure):
    """float64 gradcheck; scale='none' because with scale='std' the temperature is a detached constant (the
    analytical gradient deliberately ignores d std / d s, see test_std_gradient_is_fixed_temperature_gradient)."""
    gen = torch.Generator().manual_seed(4)
    s = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    m = torch.ones(2, 5, dtype=torch.bool)
    m[1, 3] = False
    r = torch.tensor([[3., 1., 0., 2., 1.], [0., 2., 1., 3., 2.]], dtype=torch.float64)
    g = torch.tensor([[0, 1, 0, 1, 1], [1, 0, 0, 1, 0]])
    f = MEASURES[measure]
    o = Ord(0.7, scale="none")
    assert torch.autograd.gradcheck(lambda x: f(x, m, r, g, o), (s.requires_grad_(),))


@pytest.mark.parametrize("Ord", ORDERINGS)
def test_gradcheck_quantities(Ord):
    gen = torch.Generator().manual_seed(5)
    s = torch.randn(2, 6, generator=gen, dtype=torch.float64).requires_grad_()
    m = torch.ones(2, 6, dtype=torch.bool)
    m[0, 4:] = False
    r = torch.randint(0, 3, (2, 6), generator=gen).double()
    o = Ord(0.5, scale="none")

    def quantities(x):
        ob = o(x, m)
        return (ob.expected_positions(), ob.exposure(RBP(0.7)), ob.exposure(Cascade(0.9, max_grade=2.0), r),
                ob.position_matrix())

    assert torch.autograd.gradcheck(quantities, (s,))


@pytest.mark.parametrize("Ord", ORDERINGS)
def test_std_gradient_is_fixed_temperature_gradient(Ord):
    s, m, r, g = _batch(B=1, seed=6)
    std = s[m].std(unbiased=False).item()
    grads = []
    for o in (Ord(0.3), Ord(0.3 * std, scale="none")):
        x = s.clone().requires_grad_()
        dips(x, r, g, mask=m, num_groups=2, ordering=o).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])


# ----------------------------------------------------------------------------------------------- (c) masking
@pytest.mark.parametrize("Ord", ORDERINGS)
def test_padded_items_get_exactly_zero_gradient(Ord):
    s, m, r, g = _batch(seed=7)
    s = s.clone()
    s[~m] = torch.tensor([float("nan"), 1e30, -1e30, 3.0])[: int((~m).sum())].double()
    x = s.clone().requires_grad_()
    o = Ord(0.5)
    loss = (dips(x, r, g, mask=m, num_groups=2, ordering=o).sum()
            + igi(x, r, g, mask=m, num_groups=2, ordering=o).sum()
            + pairwise_accuracy(x, r, g, mask=m, num_groups=2, ordering=o).sum()
            + rank_parity(x, g, mask=m, num_groups=2, ordering=o).per_group.sum())
    ob = o(x, m)  # directly, without the measures' input preparation
    loss = loss + ob.expected_positions().sum() + ob.exposure(RBP()).sum() + ob.position_matrix().pow(2).sum()
    loss = loss + ob.exposure(Cascade(max_grade=3.0), r).sum()
    loss.backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[~m] == 0).all()
    assert (x.grad[m] != 0).any()


@pytest.mark.parametrize("Ord", ORDERINGS)
def test_padded_items_get_nothing(Ord):
    s, m, r, g = _batch(seed=8)
    ob = Ord(0.5)(s, m)
    n = m.sum(-1)
    assert (ob.exposure(RBP())[~m] == 0).all()
    R = ob.position_matrix()
    assert (R.transpose(1, 2)[~m] == 0).all()  # padded columns
    rows_pad = torch.arange(s.shape[1])[None, :] >= n[:, None]
    assert (R[rows_pad] == 0).all()  # positions k >= n_b
    blk = ob.pair_block(ob.pair_context(RBP(), None), 0, s.shape[1])
    real = m[:, :, None] & m[:, None, :]
    assert (blk.above[~real] == 0).all() and (blk.joint[~real] == 0).all()
    assert (torch.diagonal(blk.above, dim1=1, dim2=2) == 0).all()
    # padding changes nothing for the real items
    ob2 = Ord(0.5)(s[1:2, :6], m[1:2, :6])
    torch.testing.assert_close(ob.expected_positions()[1, :6], ob2.expected_positions()[0])
    torch.testing.assert_close(ob.exposure(RBP())[1, :6], ob2.exposure(RBP())[0])


# -------------------------------------------------------------------------------------------- (d) low precision
@pytest.mark.parametrize("Ord", ORDERINGS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_finite(Ord, dtype):
    s, m, r, g = _batch(seed=9, dtype=torch.float32)
    x = s.to(dtype).requires_grad_()
    for o in (Ord(0.1), Ord(1e-3, scale="none")):
        val = dips(x, r.to(dtype), g, mask=m, num_groups=2, ordering=o)
        assert val.dtype == torch.float32 and torch.isfinite(val).all()
        ref = dips(s.to(dtype).float(), r, g, mask=m, num_groups=2, ordering=o)
        torch.testing.assert_close(val, ref)
        val.sum().backward()
        assert torch.isfinite(x.grad).all()
        ob = o(x, m)  # the ordering alone also computes in float32
        assert ob.expected_positions().dtype == torch.float32
        assert torch.isfinite(ob.position_matrix()).all()


# ------------------------------------------------------------------------------------ (e) against plain loops
def test_softrank_expected_positions_loop():
    s, m, _, _ = _batch(seed=10)
    tau = 0.4
    pos = SoftRank(tau, scale="none")(s, m).expected_positions()
    B, N = s.shape
    for b in range(B):
        for i in range(N):
            if not m[b, i]:
                continue
            want = sum(1 / (1 + math.exp(-(s[b, j].item() - s[b, i].item()) / tau))
                       for j in range(N) if j != i and m[b, j])
            assert abs(pos[b, i].item() - want) < 1e-12


def test_softrank_row_blocks_and_custom_backward():
    """Tiny blocks give the same values and gradients as a naive full [B, N, N] autograd computation."""
    s, m, _, _ = _batch(B=3, N=11, seed=11)
    x1 = s.clone().requires_grad_()
    x2 = s.clone().requires_grad_()
    w = torch.randn(3, 11, dtype=torch.float64)
    ob = SoftRank(0.3, block_elements=1)(x1, m)  # one row per block
    std = torch.stack([s[b][m[b]].std(unbiased=False) for b in range(3)])[:, None, None]
    a = torch.sigmoid((x2[:, None, :] - x2[:, :, None]) / (0.3 * std))
    pair = (m[:, :, None] & m[:, None, :] & ~torch.eye(11, dtype=torch.bool)).double()
    naive_pos = (a * pair).sum(-1) * m
    naive_var = (a * (1 - a) * pair).sum(-1) * m
    torch.testing.assert_close(ob.expected_positions(), naive_pos)
    # what the reduction keeps for backward is O(B N): only its per-item inputs
    node = ob.expected_positions().grad_fn.next_functions[0][0]
    assert type(node).__name__ == "_SigmoidRowSumBackward"
    assert all(t.dim() <= 2 for t in node.saved_tensors)
    torch.testing.assert_close(ob.position_variance(), naive_var)
    ((ob.expected_positions() * w).sum() + (ob.position_variance() * w ** 2).sum()).backward()
    ((naive_pos * w).sum() + (naive_var * w ** 2).sum()).backward()
    torch.testing.assert_close(x1.grad, x2.grad)


def test_softrank_double_backward():
    s, m, _, _ = _batch(B=2, N=5, seed=12)
    x = s.clone().requires_grad_()
    assert torch.autograd.gradgradcheck(lambda y: SoftRank(0.8, scale="none")(y, m).expected_positions(), (x,))


def _neuralsort_loop(s, tau):
    """Grover et al. 2019, eq. 4, 1-based k: P[k, :] = softmax(((n + 1 - 2k) s - A_s 1) / tau)."""
    n = len(s)
    A1 = [sum(abs(si - sj) for sj in s) for si in s]
    P = []
    for k in range(1, n + 1):
        z = [((n + 1 - 2 * k) * s[i] - A1[i]) / tau for i in range(n)]
        mx = max(z)
        e = [math.exp(v - mx) for v in z]
        P.append([v / sum(e) for v in e])
    return P


def _softsort_loop(s, tau):
    """Prillo & Eisenschlos 2020, eq. 2 with d = |.|: P[k, :] = softmax(-|sort(s)_k - s| / tau)."""
    srt = sorted(s, reverse=True)
    P = []
    for k in range(len(s)):
        e = [math.exp(-abs(srt[k] - si) / tau) for si in s]
        P.append([v / sum(e) for v in e])
    return P


@pytest.mark.parametrize("Ord,loop", [(NeuralSort, _neuralsort_loop), (SoftSort, _softsort_loop)])
def test_relaxed_permutation_vs_paper_loop(Ord, loop):
    gen = torch.Generator().manual_seed(13)
    s = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    m = torch.ones(3, 7, dtype=torch.bool)
    m[0, [1, 4]] = False
    m[2, 6] = False
    tau = 0.6
    P = Ord(tau, scale="none").relaxed_permutation(s, m)
    for b in range(3):
        idx = [i for i in range(7) if m[b, i]]
        want = torch.tensor(loop([s[b, i].item() for i in idx], tau), dtype=torch.float64)
        n = len(idx)
        torch.testing.assert_close(P[b][:n][:, idx], want, rtol=1e-12, atol=1e-12)
        assert (P[b][n:] == 0).all() and (P[b][:, ~m[b]] == 0).all()
    # rows of real positions sum to 1 exactly; columns only approximately
    n = m.sum(-1)
    rows = P.sum(-1)
    torch.testing.assert_close(rows, (torch.arange(7)[None, :] < n[:, None]).double())
    cols = P.sum(1)[m]
    assert (cols - 1).abs().max() < 0.5 and (cols - 1).abs().max() > 1e-6
    # Sinkhorn balancing: rows exact, columns within 1e-6 after 200 iterations
    Q = Ord(tau, scale="none", sinkhorn_iters=200).relaxed_permutation(s, m)
    torch.testing.assert_close(Q.sum(-1), rows)
    assert (Q.sum(1)[m] - 1).abs().max() < 1e-6
    assert (Q.sum(1)[~m] == 0).all()


@pytest.mark.parametrize("Ord", [NeuralSort, SoftSort])
def test_pair_quantities_vs_loop(Ord):
    s, m, r, _ = _batch(B=2, N=5, seed=14)
    F = RBP(0.7)
    ob = Ord(0.8, scale="none")(s, m)
    P = ob.position_matrix()
    f = F.weights(5, dtype=torch.float64)
    blk = ob.pair_block(ob.pair_context(F, None), 0, 5)
    part = ob.pair_block(ob.pair_context(F, None), 2, 4)
    for b in range(2):
        for i in range(5):
            assert abs(ob.exposure(F)[b, i] - sum(P[b, k, i] * f[k] for k in range(5))) < 1e-12
            for j in range(5):
                above = sum(P[b, l, i] * P[b, k, j] for l in range(5) for k in range(l))
                joint = sum(P[b, l, i] * f[k] * P[b, k, j] for l in range(5) for k in range(l))
                if i == j:
                    above = joint = 0.0
                assert abs(blk.above[b, i, j] - above) < 1e-12
                assert abs(blk.joint[b, i, j] - joint) < 1e-12
    torch.testing.assert_close(part.above, blk.above[:, 2:4])
    torch.testing.assert_close(part.joint, blk.joint[:, 2:4])


def test_softrank_pairs_and_position_matrix():
    s, m, r, _ = _batch(seed=15)
    ob = SoftRank(0.5)(s, m)
    F = Logarithmic()
    blk = ob.pair_block(ob.pair_context(F, None), 0, s.shape[1])
    real = (m[:, :, None] & m[:, None, :] & ~torch.eye(s.shape[1], dtype=torch.bool)).double()
    torch.testing.assert_close(blk.above + blk.above.transpose(1, 2), real)
    torch.testing.assert_close(blk.joint, F.weight(ob.expected_positions())[:, None, :] * blk.above)
    torch.testing.assert_close(ob.exposure(F), F.weight(ob.expected_positions()) * m)
    R = ob.position_matrix()
    torch.testing.assert_close(R.sum(1), m.double())  # columns exact
    k = torch.arange(s.shape[1], dtype=torch.float64)[None, :, None]
    assert ((k * R).sum(1) - ob.expected_positions()).abs().max() < 0.3  # mean ~ expected position
    R2 = SoftRank(0.5, sinkhorn_iters=200)(s, m).position_matrix()
    n = m.sum(-1)
    torch.testing.assert_close(R2.sum(-1), (torch.arange(s.shape[1])[None, :] < n[:, None]).double())
    assert (R2.sum(1) - m.double()).abs().max() < 1e-6


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=12), st.floats(0.01, 3.0))
def test_softrank_positions_sum(values, tau):
    """sigmoid(x) + sigmoid(-x) = 1, so the expected positions of n items sum to n (n - 1) / 2."""
    s = torch.tensor([values], dtype=torch.float64)
    m = torch.ones_like(s, dtype=torch.bool)
    n = len(values)
    pos = SoftRank(tau)(s, m).expected_positions()
    assert abs(pos.sum().item() - n * (n - 1) / 2) < 1e-9
    assert (pos >= 0).all() and (pos <= n - 1 + 1e-12).all()


# ------------------------------------------------------------------------------------------------- (f) ties
@pytest.mark.parametrize("Ord", ORDERINGS)
@pytest.mark.parametrize("scale", ["std", "none"])
def test_tied_scores_finite_gradients(Ord, scale):
    _, m, r, g = _batch(B=3, N=6, seed=16)
    s = torch.tensor([[1., 1., 1., 1., 1., 1.], [2., 2., 0., 0., 0., 1.], [0., 0., 0., 0., 3., 3.]],
                     dtype=torch.float64)
    x = s.clone().requires_grad_()
    o = Ord(0.1, scale=scale)
    loss = (dips(x, r, g, mask=m, num_groups=2, ordering=o).sum()
            + pairwise_accuracy(x, r, g, mask=m, num_groups=2, ordering=o).sum()
            + rank_parity(x, g, mask=m, num_groups=2, ordering=o).pair.sum()
            + o(x, m).position_matrix().sum())
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(x.grad).all()
    # a fully tied list: every ordered pair is a coin flip for SoftRank
    if Ord is SoftRank:
        blk = o(s, m).pair_block(o(s, m).pair_context(None, None), 0, 6)
        assert (blk.above[0][~torch.eye(6, dtype=torch.bool)] == 0.5).all()


def test_single_item_and_empty_lists():
    s = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    m = torch.tensor([[True, False, False], [False, False, False]])
    for Ord in ORDERINGS:
        ob = Ord(0.1)(s, m)
        out = ob.expected_positions().sum() + ob.exposure(RBP()).sum() + ob.position_matrix().sum()
        assert torch.isfinite(out)
        torch.testing.assert_close(ob.exposure(RBP()), torch.tensor([[1., 0., 0.], [0., 0., 0.]],
                                                                    dtype=torch.float64))
        (g,) = torch.autograd.grad(out, s)
        assert torch.isfinite(g).all()


@pytest.mark.parametrize("kwargs,name", [
    (dict(temperature=0.0), "temperature"), (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("inf")), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=True), "temperature"), (dict(temperature="0.1"), "temperature"),
    (dict(temperature=0.1, scale="max"), "scale"), (dict(temperature=0.1, min_scale=0.0), "min_scale"),
    (dict(min_scale=float("nan")), "min_scale"), (dict(min_scale=True), "min_scale"),
    (dict(min_scale=float("inf")), "min_scale"), (dict(rel_min_scale=-0.1), "rel_min_scale"),
    (dict(rel_min_scale=float("nan")), "rel_min_scale")])
@pytest.mark.parametrize("Ord", ALL_SOFT_ORDERINGS := [SoftRank, NeuralSort, SoftSort, FastSoftRank_])
def test_invalid_arguments(Ord, kwargs, name):
    with pytest.raises(ValueError, match=name):
        Ord(**kwargs)


@pytest.mark.parametrize("make,name", [
    (lambda: SoftRank(sinkhorn_iters=2.0), "sinkhorn_iters"), (lambda: SoftRank(sinkhorn_iters=True), "sinkhorn_iters"),
    (lambda: NeuralSort(sinkhorn_iters=-1), "sinkhorn_iters"),
    (lambda: SoftSort(sinkhorn_iters=None), "sinkhorn_iters"),
    (lambda: SoftRank(min_position_std=0.0), "min_position_std"),
    (lambda: SoftRank(min_position_std=float("nan")), "min_position_std"),
    (lambda: SoftRank(block_elements=0), "block_elements"), (lambda: SoftRank(block_elements=1.5), "block_elements"),
    (lambda: FastSoftRank_(backend="cuda"), "backend"), (lambda: FastSoftRank_(window_budget=0), "window_budget"),
    (lambda: FastSoftRank_(window_budget=True), "window_budget"),
])
def test_invalid_other_arguments(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_differentiable_flag_and_repr():
    for Ord in ORDERINGS:
        assert Ord().differentiable
        assert Ord.__name__ in repr(Ord())


# ------------------------------------------------------------------------------- temperature, large scores
from torchfair.orderings import FastSoftRank, PlackettLuce  # noqa: E402
from torchfair.orderings import fast_soft_rank as _fsr  # noqa: E402
from torchfair.orderings import soft as _soft  # noqa: E402
from torchfair.orderings.soft import MIN_SCALE, list_scale  # noqa: E402

ALL_SOFT = [SoftRank, NeuralSort, SoftSort, FastSoftRank]


def _std_ref(values):
    """Population std in exact rational arithmetic (then rounded): the reference for extreme magnitudes."""
    from fractions import Fraction
    xs = [Fraction(float(v)) for v in values]
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    return math.sqrt(float(var)) if var < Fraction(10) ** 300 else math.sqrt(float(var / 10 ** 200)) * 1e100


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e19, 1e30, 1e37])
def test_list_scale_no_overflow(dtype, scale):
    """Regression: the per-list std overflowed in float32 from |s| ~ 1e19 on (tau = inf, every position
    (n - 1) / 2).  ``list_scale`` matches the exact std at every magnitude (and the floor below it)."""
    rows = [[3.0, -1.0, 2.0, 0.5, -2.5], [1.0, 1.0, 1.0, 1.0, 1.0], [7.0, -7.0, 0.0, 0.0, 0.0]]
    s = torch.tensor(rows, dtype=torch.float64).mul(scale).to(dtype)
    mask = torch.tensor([[True] * 5, [True] * 5, [True, True, False, False, False]])
    got = list_scale(s, mask, min_scale=1e-300 if dtype == torch.float64 else 1e-38)[:, 0]
    for b in range(3):
        vals = [v for v, m in zip(s[b].tolist(), mask[b].tolist()) if m]
        assert got[b].item() == pytest.approx(max(_std_ref(vals), 1e-300 if dtype == torch.float64 else 1e-38),
                                              rel=1e-5)


def test_list_scale_floors():
    s = torch.tensor([[0.0, 0.0, 0.0], [5.0, 5.0, 5.0], [100.0, 100.1, 99.9], [1.0, 3.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(4, 3, dtype=torch.bool)
    std2 = math.sqrt(0.02 / 3)
    torch.testing.assert_close(list_scale(s, mask)[:, 0], torch.tensor([MIN_SCALE, MIN_SCALE, MIN_SCALE,
                                                                        math.sqrt(2 / 3)], dtype=torch.float64))
    torch.testing.assert_close(list_scale(s, mask, min_scale=1e-3)[:, 0],
                               torch.tensor([1e-3, 1e-3, std2, math.sqrt(2 / 3)], dtype=torch.float64))
    torch.testing.assert_close(list_scale(s, mask, min_scale=1e-3, rel_min_scale=0.01)[:, 0],
                               torch.tensor([1e-3, 0.05, 1.0, math.sqrt(2 / 3)], dtype=torch.float64))
    # the floors reach every soft ordering through the one definition
    for Ord in ALL_SOFT:
        o = Ord(0.5, min_scale=2.0, rel_min_scale=0.01)
        torch.testing.assert_close(o._tau(s, mask)[:, 0], 0.5 * torch.tensor([2.0, 2.0, 2.0, 2.0],
                                                                             dtype=torch.float64))
    assert _fsr._temperature is _soft._temperature


@pytest.mark.parametrize("Ord", ALL_SOFT)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_large_scores_do_not_collapse(Ord, dtype):
    """Regression: with |scores| >= 1e19 every soft ordering returned (n - 1) / 2 for every item.
    Scaled copies of a well separated list give the same, nearly hard positions at any magnitude."""
    base = torch.tensor([[1.0, -1.0, 3.0, 0.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.bool)
    hard = torch.tensor([[2.0, 4.0, 0.0, 3.0, 1.0]], dtype=torch.float64)
    scales = [1.0, 1e4] if dtype == torch.float16 else [1.0, 1e19, 1e30, 1e37]
    for c in scales:
        s = (base * c).to(dtype).requires_grad_(True)
        ob = Ord(0.01)(s, mask)
        pos = ob.expected_positions()
        torch.testing.assert_close(pos.double(), hard, atol=1e-3, rtol=0)
        out = pos.sum() + ob.exposure(RBP(0.8)).sum() + ob.position_matrix().sum()
        (g,) = torch.autograd.grad(out, s)
        assert torch.isfinite(g).all()


def _dips_grad_norm(s0, r, g, ordering=None, dtype=torch.float32):
    from torchfair.losses import dips_loss
    s = s0.clone().to(dtype).requires_grad_(True)
    loss = dips_loss(s, r, g, num_groups=2, ordering=ordering)
    (grad,) = torch.autograd.grad(loss, s)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    return grad.float().norm().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_tied_scores_give_gradients_of_ordinary_size(dtype):
    """Regression: on tied scores (a freshly initialised model) the temperature collapsed to its floor
    1e-6 and the DIPS loss gradient reached ~1e5 (inf in float16).  With the floor ``min_scale`` its norm on
    all-zero and on all-equal (5.0) scores is within 20x of its norm on N(0, 1) scores (measured ~10x)."""
    gen = torch.Generator().manual_seed(0)
    r = torch.rand(8, 50, generator=gen)
    g = torch.randint(0, 2, (8, 50), generator=gen)
    ref = min(_dips_grad_norm(torch.randn(8, 50, generator=gen), r, g, dtype=dtype) for _ in range(3))
    for s0 in (torch.zeros(8, 50), torch.full((8, 50), 5.0)):
        n = _dips_grad_norm(s0, r, g, dtype=dtype)
        assert 0 < n < 20 * ref, (n, ref)
    # autocast: the loss computed under float16 autocast from a float16 model output
    with torch.autocast("cpu", dtype=torch.float16):
        n = _dips_grad_norm(torch.zeros(8, 50), r, g, dtype=dtype)
    assert 0 < n < 20 * ref


@pytest.mark.parametrize("Ord", ALL_SOFT + [lambda: PlackettLuce(8, estimator="relaxed",
                                                                 generator=torch.Generator().manual_seed(0))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_tied_scores_every_soft_ordering(Ord, dtype):
    """Every soft ordering on tied lists: finite gradients of moderate size (< 100; NeuralSort's are the largest,
    ~40 at N = 50, from its (n - 1 - 2k) logit factors; SoftSort's are 0 on exact ties)."""
    gen = torch.Generator().manual_seed(1)
    r = torch.rand(8, 50, generator=gen)
    g = torch.randint(0, 2, (8, 50), generator=gen)
    for s0 in (torch.zeros(8, 50), torch.full((8, 50), 5.0), torch.full((8, 50), -3e4)):
        assert _dips_grad_norm(s0, r, g, ordering=Ord(), dtype=dtype) < 100



# --------------------------------------------------------------------- dense vs row-block strategies (SoftRank)
@pytest.mark.parametrize("name", ["dips", "igi", "ree", "pairwise_accuracy", "exposure_misallocation",
                                  "individual_dissatisfaction"])
def test_softrank_dense_strategy_equals_the_row_block_strategy(name):
    """The dense SoftRank strategy (all [B, N, N] sigmoids at once, hand-written backward) gives the values and
    gradients of the row-block strategy (blocks recomputed in backward), with padding, a fully padded list, tied
    scores and tied relevance; position variance and the position matrix too."""
    from torchfair.losses import measure_loss
    from torchfair.orderings import SoftRank
    g = torch.Generator().manual_seed(3)
    B, N = 5, 17
    s = torch.randn(B, N, generator=g, dtype=torch.float64)
    s[1] = 0.7  # tied scores
    r = torch.randint(0, 3, (B, N), generator=g).double()
    grp = torch.randint(0, 2, (B, N), generator=g)
    m = torch.rand(B, N, generator=g) < 0.8
    m[2] = False  # fully padded
    m[0, :2] = True
    s[3, ~m[3]] = float("nan")  # whatever padded entries hold
    outs = []
    for dense in (None, 0):
        x = s.clone().requires_grad_()
        o = SoftRank(0.3, dense_elements=dense)
        if name == "individual_dissatisfaction":
            from torchfair.metrics import individual_dissatisfaction
            val = individual_dissatisfaction(x, r, grp, mask=m, num_groups=2, ordering=o).square().sum()
        else:
            val = measure_loss(name, x, relevance=r, groups=grp, mask=m, num_groups=2, ordering=o)
        ob = o(x, m)
        val = val + (ob.position_variance() * m).sum() + ob.position_matrix().sum()
        assert (ob._above is None) == (dense == 0)
        grad, = torch.autograd.grad(val, x)
        outs.append((val.detach(), grad))
    assert torch.isfinite(outs[0][1]).all()
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-12)
    assert torch.allclose(outs[0][1], outs[1][1], atol=1e-12)


def test_softrank_fused_row_block_contraction_equals_the_generic_contraction():
    """SoftRank's fused row-block kernel (hand-written backward, reused buffers) against the generic checkpointed
    row-block contraction of OrderedBatch: values and gradients (scores and the right-hand side), every level weight,
    "above" and "joint", padded and fully padded lists, tied scores, one-row blocks."""
    from torchfair.browsing import get_browsing
    from torchfair.orderings import SoftRank
    from torchfair.orderings.base import LevelPairWeight, OrderedBatch
    g = torch.Generator().manual_seed(5)
    B, N, H = 4, 13, 3
    s0 = torch.randn(B, N, generator=g, dtype=torch.float64)
    s0[1, :5] = 0.2
    rel = torch.randint(0, 3, (B, N), generator=g).double()
    m = torch.rand(B, N, generator=g) < 0.8
    m[3] = False
    r0 = torch.rand(B, N, H, generator=g, dtype=torch.float64)
    for which in ("above", "joint"):
        for pw in (None, LevelPairWeight(rel, 1.0, 0.5), LevelPairWeight(rel, 1.0, 0.0, 0.3)):
            for be in (None, 1, 40):
                res = []
                for path in ("fused", "generic"):
                    s, right = s0.clone().requires_grad_(), r0.clone().requires_grad_()
                    ob = SoftRank(0.5, dense_elements=0)(s, m)
                    kw = dict(which=which, pair_weight=pw, browsing=get_browsing("rbp:0.8") if which == "joint"
                              else None, relevance=rel, block_elements=be)
                    out = ob.contract(right, **kw) if path == "fused" else OrderedBatch.contract(ob, right, **kw)
                    gs, gr = torch.autograd.grad((out * torch.linspace(-1, 2, H, dtype=out.dtype)).sum(), (s, right))
                    res.append((out.detach(), gs, gr))
                for a, b in zip(*res):
                    assert torch.allclose(a, b, atol=1e-12), (which, pw, be)
                assert (res[0][1][~m] == 0).all()
