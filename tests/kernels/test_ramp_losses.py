"""torchfair/kernels/ramp_losses.py at the level of its arrays (the losses' fused path against the torch path is
tests/losses/test_fused.py): warm-up signatures, the per-list values and validity, a zero upstream gradient."""
import pytest
import torch

pytest.importorskip("numba")
from torchfair.kernels import ramp_losses as K  # noqa: E402
from torchfair.losses.transform import per_list_loss  # noqa: E402
from torchfair.orderings import RampRank  # noqa: E402

#: RampRank(0.1)'s arguments of the walks: (temperature, scale "std", min_scale, rel_min_scale)
ORDERING = (0.1, True, 0.25, 0.0)


def test_warmup_runs():
    K.warmup()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dips_forward_is_the_per_list_loss(dtype):
    s, r, groups, mask = _lists(dtype)
    B, N = s.shape
    w = 0.9 ** torch.arange(N + 1, dtype=torch.float64)
    cum = torch.cat([w.new_zeros(1), w.cumsum(0)]).numpy()
    value, ok, saved = K.dips_forward(s, mask, r, groups, 2, ORDERING, cum, 0.9, 0.5, False)
    ref, ref_ok = per_list_loss("dips", s, r, groups, reducer="gap_abs", num_groups=2,
                                ordering=RampRank(0.1, backend="torch"))
    assert value.dtype == torch.float64 and ok.tolist() == ref_ok.tolist() and not ok[0]
    assert torch.allclose(value.to(dtype), torch.where(ref_ok, ref, 0.0), atol=1e-6)
    ds = K.dips_backward(torch.zeros(B, dtype=dtype), s, mask, 2, 0.9, 0.5, False, saved)
    assert ds.shape == (B, N) and (ds == 0).all()


def _lists(dtype):
    g = torch.Generator().manual_seed(1)
    B, N = 5, 9
    s = torch.randn(B, N, generator=g, dtype=dtype)
    r = torch.randint(0, 3, (B, N), generator=g).to(dtype)
    groups = torch.randint(0, 2, (B, N), generator=g)
    groups[0] = 1  # one group: invalid
    mask = torch.ones(B, N, dtype=torch.bool)
    return s, r, groups, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_misallocation_forward_is_the_per_list_loss(dtype):
    s, r, groups, mask = _lists(dtype)
    B, N = s.shape
    value, ok, saved = K.misallocation_forward(s, mask, r, groups, 2, r, ORDERING, 0.9, False)
    ref, ref_ok = per_list_loss("exposure_misallocation", s, r, groups, reducer="l1", num_groups=2, target="ea",
                                ordering=RampRank(0.1, backend="torch"))
    assert value.dtype == torch.float64 and ok.tolist() == ref_ok.tolist() and not ok[0]
    assert torch.allclose(value.to(dtype), ref, atol=1e-6)  # the one-group list keeps its value, invalid
    ds = K.misallocation_backward(torch.zeros(B, dtype=dtype), s, mask, 2, 0.9, False, saved)
    assert ds.shape == (B, N) and (ds == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_accuracy_forward_is_the_per_list_loss(dtype):
    s, r, groups, mask = _lists(dtype)
    B, N = s.shape
    for which, reducer in enumerate(("inter", "intra", "both")):
        value, ok, saved = K.accuracy_forward(s, mask, r, groups, 2, 1, 0, which, ORDERING)
        ref, ref_ok = per_list_loss("pairwise_accuracy", s, r, groups, reducer=reducer, num_groups=2,
                                    ordering=RampRank(0.1, backend="torch"))
        assert value.dtype == torch.float64 and ok.tolist() == ref_ok.tolist()
        assert torch.allclose(value.to(dtype), torch.where(ref_ok, ref, 0.0), atol=1e-6)
        ds = K.accuracy_backward(torch.zeros(B, dtype=dtype), s, mask, 1, 0, which, saved)
        assert ds.shape == (B, N) and (ds == 0).all()
