"""RampRank (torchfair/orderings/ramp.py): the sorted prefix-sum contraction against the [B, N, N] ramp pairs
formed by hand, its gradients against autograd through those pairs, and convergence to the exact measures as the
temperature goes to 0."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from torchfair.losses import DIPSLoss
from torchfair.metrics import dips, exposure_misallocation, igi, pairwise_accuracy
from torchfair.orderings import Hard, RampRank, SoftRank
from torchfair.orderings import ramp as rp
from torchfair.orderings.base import LevelPairWeight

WEIGHTS = [(1, 0, 0), (1, 0.5, 0), (0.3, 0.2, 0.7), (0, 1, 0), (0, 0, 1)]


@pytest.fixture(params=["compiled", "torch"])
def backend(request, monkeypatch):
    """Both implementations of the window pass: the compiled walk (the CPU default) and the torch prefix sums
    (every other device)."""
    if request.param == "torch":
        monkeypatch.setattr(rp, "kernels", lambda *a, **k: None)
    else:  # the kernels under "auto" whatever the input size
        monkeypatch.setenv("TORCHFAIR_KERNELS", "numba")
    return request.param


def _pairs(z, mask):
    """The ramp kernel on every pair, by hand: clip(1/2 + (z_j - z_i) / 4, 0, 1), real off-diagonal pairs."""
    N = z.shape[1]
    A = (0.5 + (z[:, None, :] - z[:, :, None]) / 4).clamp(0, 1)
    keep = mask[:, :, None] & mask[:, None, :] & ~torch.eye(N, dtype=torch.bool)
    return A * keep


def _batch(seed, B=3, N=9, levels=3, H=2):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=g, dtype=torch.float64)
    s[0, 3] = s[0, 5]  # a tie
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, N // 2:] = False
    rel = torch.randint(0, levels, (B, N), generator=g).double()
    R = torch.randn(B, N, H, generator=g, dtype=torch.float64)
    return s, mask, rel, R


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("path", ["levels", "bits"])
@pytest.mark.parametrize("levels", [1, 3, 40])
def test_contract_equals_the_pairs_by_hand(weights, path, levels, monkeypatch, backend):
    if path == "bits":
        monkeypatch.setattr(rp, "MAX_LEVELS", 0)
    s, mask, rel, R = _batch(levels, N=12, levels=levels)
    ob = RampRank(0.5)(s, mask)
    pw = LevelPairWeight(rel, *weights)
    want = torch.einsum("bij,bjh->bih", _pairs(ob._z(), mask) * pw(0, s.shape[1]), R) * mask[..., None]
    torch.testing.assert_close(ob.contract(R, pair_weight=pw), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(ob.expected_positions(), _pairs(ob._z(), mask).sum(-1) * mask, rtol=0, atol=1e-12)


def test_joint_and_generic_pair_weights_follow_the_same_kernel(backend):
    from torchfair.browsing import RBP
    s, mask, rel, R = _batch(1)
    ob = RampRank(0.3)(s, mask)
    A = _pairs(ob._z(), mask)
    f = RBP(0.9).weight(A.sum(-1)) * mask
    want = torch.einsum("bij,bjh->bih", A * f[:, None, :], R) * mask[..., None]
    torch.testing.assert_close(ob.contract(R, which="joint", browsing=RBP(0.9)), want, rtol=0, atol=1e-12)
    w = lambda a, b: torch.rand(s.shape[0], b - a, s.shape[1], generator=torch.Generator().manual_seed(a),  # noqa
                                dtype=torch.float64)
    W = w(0, s.shape[1])
    got = ob.contract(R, pair_weight=lambda a, b: W[:, a:b])  # not a LevelPairWeight: row blocks of pairs
    torch.testing.assert_close(got, torch.einsum("bij,bjh->bih", A * W, R) * mask[..., None], rtol=0, atol=1e-12)


def test_gradients_equal_autograd_through_the_pairs(backend):
    s, mask, rel, R = _batch(2)
    pw = LevelPairWeight(rel, 1, 0.5, 0)
    s1 = s.clone().requires_grad_(True)
    RampRank(0.5)(s1, mask).contract(R, pair_weight=pw).pow(2).sum().backward()
    s2 = s.clone().requires_grad_(True)
    ob = RampRank(0.5)(s2, mask)
    (torch.einsum("bij,bjh->bih", _pairs(ob._z(), mask) * pw(0, s.shape[1]), R) * mask[..., None]).pow(2).sum() \
        .backward()
    torch.testing.assert_close(s1.grad, s2.grad, rtol=0, atol=1e-10)


@pytest.mark.parametrize("measure", [dips, igi, pairwise_accuracy, exposure_misallocation])
def test_converges_to_the_exact_measure_as_the_temperature_goes_to_zero(measure):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(4, 30, generator=g, dtype=torch.float64)
    rel = torch.randint(0, 4, (4, 30), generator=g).double()
    groups = torch.randint(0, 2, (4, 30), generator=g)
    exact = measure(s, rel, groups)
    errs = [(measure(s, rel, groups, ordering=RampRank(t, scale="none")) - exact).abs().max().item()
            for t in (1.0, 0.1, 1e-2, 1e-6)]
    assert errs[0] > 1e-3 and errs[-1] < 1e-9  # far at a large temperature, exact at a tiny one
    assert all(b <= a + 1e-12 for a, b in zip(errs, errs[1:]))


def test_close_to_softrank_at_the_same_temperature():
    """Same slope at ties: at the same temperature the ramp and the sigmoid give close values."""
    g = torch.Generator().manual_seed(3)
    s, rel = torch.randn(8, 50, generator=g), torch.randint(0, 3, (8, 50), generator=g).float()
    groups = torch.randint(0, 2, (8, 50), generator=g)
    a = dips(s, rel, groups, ordering=RampRank(0.1))
    b = dips(s, rel, groups, ordering=SoftRank(0.1))
    exact = dips(s, rel, groups, ordering=Hard())
    assert (a - b).abs().max() < 0.25 * (b - exact).abs().max() + 1e-3


@given(st.integers(0, 10_000), st.sampled_from([torch.float32, torch.float16, torch.float64]))
@settings(max_examples=25, deadline=None)
def test_degenerate_batches_give_finite_values_and_gradients(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    B, N = 4, 7
    s = (torch.randn(B, N, generator=g) * 10 ** torch.randint(-3, 4, (1,), generator=g).item()).to(dtype)
    s[0] = 0.5  # a tied list (a fresh model)
    mask = torch.rand(B, N, generator=g) < 0.7
    mask[1] = False  # fully padded
    mask[2] = False
    mask[2, 0] = True  # a single item
    rel = torch.randint(0, 3, (B, N), generator=g).to(dtype)
    groups = torch.randint(0, 2, (B, N), generator=g)
    s = s.requires_grad_(True)
    loss = DIPSLoss(num_groups=2, ordering=RampRank(0.1))(s, rel, groups, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()
    assert (s.grad[~mask] == 0).all()


def test_padding_and_permutation_change_nothing():
    s, mask, rel, R = _batch(5, B=2, N=10)
    groups = torch.randint(0, 2, s.shape)
    base = dips(s, rel, groups, mask=mask, ordering=RampRank(0.2))
    perm = torch.randperm(10)
    torch.testing.assert_close(dips(s[:, perm], rel[:, perm], groups[:, perm], mask=mask[:, perm],
                                    ordering=RampRank(0.2)), base)
    pad = lambda x, v: torch.cat([x, torch.full((2, 3), v, dtype=x.dtype)], 1)  # noqa: E731
    torch.testing.assert_close(dips(pad(s, 1e9), pad(rel, 3.0), pad(groups, 1), mask=pad(mask, False),
                                    ordering=RampRank(0.2)), base)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="temperature"):
        RampRank(0)
    with pytest.raises(ValueError, match="scale"):
        RampRank(0.1, scale="nope")


@pytest.mark.parametrize("grouped", [False, True])
def test_hand_written_backward_passes_gradcheck(grouped, backend):
    """The window sum's backward (the kernel transposed, the slope inside the window) against finite differences,
    for the scores and the summed values, with and without groups and a selection."""
    g = torch.Generator().manual_seed(7)
    B, N = 2, 8
    z = (torch.randn(B, N, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    R = torch.randn(B, N, 3, generator=g, dtype=torch.float64).requires_grad_(True)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, -2:] = False
    group = torch.randint(0, 3, (B, N), generator=g) if grouped else None
    select = torch.rand(B, N, generator=g) < 0.7 if grouped else None
    assert torch.autograd.gradcheck(lambda z_, R_: rp.ramp_sums(z_, R_, mask, group, select) * mask[..., None],
                                    (z, R), eps=1e-7, atol=1e-6)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_fused_level_pass_runs_on_the_cpu_and_passes_gradcheck(weights, monkeypatch):
    """The compiled pass with the level weights inside (``_LevelWindowSum``): it is what the CPU takes for a
    LevelPairWeight, its values equal the one-hot torch path's and its hand-written backward (the transposed
    kernel with the transposed weights) matches finite differences for the scores and the values."""
    monkeypatch.setenv("TORCHFAIR_KERNELS", "numba")  # the kernels whatever the input size
    g = torch.Generator().manual_seed(13)
    B, N, L = 3, 10, 4
    z = (torch.randn(B, N, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    R = torch.randn(B, N, 2, generator=g, dtype=torch.float64).requires_grad_(True)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[2, -3:] = False
    pw = LevelPairWeight(torch.randint(0, L, (B, N), generator=g).double(), *weights)
    calls = []
    real = rp._LevelWindowSum.apply
    monkeypatch.setattr(rp._LevelWindowSum, "apply", lambda *a: calls.append(1) or real(*a))
    fused = rp.ramp_contract(z, R, mask, pw) * mask[..., None]
    assert calls  # the fused pass ran
    assert torch.autograd.gradcheck(lambda z_, R_: rp.ramp_contract(z_, R_, mask, pw) * mask[..., None], (z, R),
                                    eps=1e-7, atol=1e-6)
    monkeypatch.setattr(rp, "kernels", lambda *a, **k: None)
    torch.testing.assert_close(fused, rp.ramp_contract(z, R, mask, pw) * mask[..., None], rtol=0, atol=1e-12)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("lower", [False, True])
def test_compiled_window_pass_equals_the_torch_pass(grouped, lower, monkeypatch):
    """The fused compiled walk against the torch prefix sums, on a padded batch with ties and groups."""
    g = torch.Generator().manual_seed(11)
    B, N, H = 4, 40, 3
    z = torch.randn(B, N, generator=g, dtype=torch.float64) * 3
    z[0, :5] = z[0, 5]  # a tie block
    mask = torch.rand(B, N, generator=g) < 0.8
    win = rp._Window(z, mask, torch.randint(0, 3, (B, N), generator=g) if grouped else None, backend="numba")
    X = torch.randn(B, N, H, generator=g, dtype=torch.float64)
    w1, o1 = rp._window_pass(X, win.off, win, lower)  # the compiled walk (backend="numba" raises where it cannot)
    monkeypatch.setattr(rp, "kernels", lambda *a, **k: None)
    w2, o2 = rp._window_pass(X, win.off, win, lower)
    torch.testing.assert_close(w1, w2, rtol=0, atol=1e-12)
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)


def test_compiled_window_bounds_equal_the_binary_search(monkeypatch):
    """The two-pointer window bounds against torch.searchsorted, with ties, keys exactly 1/2 apart and padding."""
    g = torch.Generator().manual_seed(5)
    z = torch.randint(-6, 6, (4, 60), generator=g).double()  # many keys exactly 2 apart in z: 1/2 apart in u
    z[1] = torch.randn(60, generator=g, dtype=torch.float64) * 4
    mask = torch.rand(4, 60, generator=g) < 0.85
    fast = rp._Window(z, mask, backend="numba")
    monkeypatch.setattr(rp, "kernels", lambda *a, **k: None)
    ref = rp._Window(z, mask)
    assert torch.equal(fast.hi, ref.hi) and torch.equal(fast.lo, ref.lo)
    # the same sorted keys (the compiled radix sort orders ties by index, torch.sort in any order: the windows
    # never split a tie)
    assert torch.equal(fast.off.gather(-1, fast.order), ref.off.gather(-1, ref.order))
    assert torch.equal(fast.order.sort(-1).values, torch.arange(60).expand(4, 60))
    assert torch.equal(fast.order, torch.sort(fast.off.detach(), dim=-1, stable=True).indices)
