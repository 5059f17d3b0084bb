"""Inputs that used to pass silently (a NaN or infinite gradient, a value marked valid that depends on an absent
group, an ignored mismatch) or fail with a raw IndexError/KeyError/RuntimeError: each gives a finite gradient,
an undefined (0, invalid) value or a ValueError naming the argument."""
import pytest
import torch

from torchfair.compat import fairranktune as ft
from torchfair.losses import DELTRLoss, DIPSLoss, FairPGRankLoss, PairwiseCorrelationLoss
from torchfair.metrics import awrf, dcg, dips, dp, ndcg
from torchfair.orderings import FastSoftRank, NeuralSort, SoftRank


# ------------------------------------------------------------------------------- DCG with overflowing gains
@pytest.mark.parametrize("ordering", [FastSoftRank(1.0, scale="none"), NeuralSort(1.0), SoftRank(1.0)],
                         ids=["fastsoftrank", "neuralsort", "softrank"])
@pytest.mark.parametrize("grades", [[103.0, 128.0], [3.0, 200.0], [0.0, 1000.0]])
def test_dcg_gain_overflow_past_cutoff_has_finite_gradient(ordering, grades):
    """A float32 grade >= 128 past the cut-off: its gain 2**r - 1 is infinite, the gradient was inf * 0 = NaN."""
    s = torch.tensor([2.0, -5.0], requires_grad=True)
    value, valid = dcg(s, torch.tensor(grades), k=1, ordering=ordering, return_valid=True)
    value.backward()
    assert torch.isfinite(s.grad).all()
    assert not bool(valid) and float(value.detach()) == 0.0  # undefined in float32: the gain is not representable
    # ndcg cancels the scale: defined, finite gradient
    s2 = torch.tensor([2.0, -5.0], requires_grad=True)
    v2, ok2 = ndcg(s2, torch.tensor(grades), k=1, ordering=ordering, return_valid=True)
    v2.backward()
    assert bool(ok2) and torch.isfinite(s2.grad).all()


def test_dcg_gain_overflow_hard_and_float64():
    r = torch.tensor([3.0, 200.0])
    s = torch.tensor([2.0, -5.0])
    v, ok = dcg(s, r, k=1, return_valid=True)
    assert not bool(ok) and float(v) == 0.0
    v64, ok64 = dcg(s.double(), r.double(), k=1, return_valid=True)
    assert bool(ok64) and float(v64) == pytest.approx(7.0)
    assert float(dcg(s, torch.tensor([3.0, 127.0]), k=1)) == pytest.approx(7.0)  # representable: unchanged


# ------------------------------------------------------------------------------- FRT compat
def test_erbe_ltwo_no_known_item_has_finite_gradient():
    s = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    r = ft.ERBE(s, torch.tensor([-1, -1, -1]), 0.5, "LTwo", num_groups=2, ordering=NeuralSort(1.0))
    assert float(r.value.detach()) == 0.0
    r.value.backward()
    assert torch.isfinite(s.grad).all() and (s.grad == 0).all()
    assert float(ft.LTwo(torch.tensor([3.0, 4.0]))) == 5.0
    assert torch.isnan(ft.LTwo(torch.tensor([float("nan"), 1.0])))


@pytest.mark.parametrize("fn", ["EXP", "ERBR"])
@pytest.mark.parametrize("scores", [torch.tensor(1.0), torch.tensor([True, False, True]),
                                    torch.tensor([1 + 1j, 2, 3]), torch.zeros(1, 3, 1)],
                         ids=["0d", "bool", "complex", "3d"])
def test_frt_bad_scores_dtype_or_shape_is_value_error(fn, scores):
    args = (torch.tensor([1.0, 0.0, 1.0]), 0.5) if fn == "ERBR" else ()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast of complex scores with a warning only
        with pytest.raises(ValueError, match="`rankings`"):
            getattr(ft, fn)(scores, torch.tensor([0, 1, 0]), *args)


# ------------------------------------------------------------------------------- AWRF with an absent protected group
@pytest.mark.parametrize("protected", [2, 5, 99])
def test_awrf_protected_absent_is_undefined(protected):
    s = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    g = torch.tensor([[0, 1, 0], [0, 1, 1]])
    v, ok = awrf(s, g, protected=protected, return_valid=True)
    assert not ok.any() and (v == 0).all()
    _, ok_dp = dp(s, g, protected=protected, return_valid=True)
    assert not ok_dp.any()


def test_awrf_protected_absent_from_one_list():
    s = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    g = torch.tensor([[0, 1, 0], [0, 0, 0]])
    v, ok = awrf(s, g, protected=1, return_valid=True)
    assert ok.tolist() == [True, False] and float(v[1]) == 0.0
    assert float(v[0]) == pytest.approx(float(awrf(s, g)[0, 1]))
    assert awrf(s, g, return_valid=True)[1].all()  # the [B, G] form keeps |0 - p_g|


def test_awrf_protected_out_of_range_is_value_error():
    s = torch.tensor([3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="`protected`"):
        awrf(s, torch.tensor([0, 1, 0]), protected=99, num_groups=2)
    soft = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="`protected`"):
        awrf(s, soft, protected=2)
    assert awrf(s, soft, protected=1).shape == ()


# ------------------------------------------------------------------------------- losses: group ids and counts
def _batch():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 5, generator=g)
    r = torch.rand(2, 5, generator=g)
    soft = torch.softmax(torch.randn(2, 5, 3, generator=g), -1)
    return s, r, soft


@pytest.mark.parametrize("loss", [PairwiseCorrelationLoss, FairPGRankLoss, DELTRLoss])
def test_loss_protected_beyond_soft_groups_is_value_error(loss):
    s, r, soft = _batch()
    with pytest.raises(ValueError, match="`protected`"):
        loss(protected=99)(s, r, soft)
    with pytest.raises(ValueError, match="`protected`"):
        loss(protected=99, num_groups=2)(s, r, torch.tensor([[0, 1, 0, 1, 0]] * 2))
    assert torch.isfinite(loss(protected=2)(s, r, soft))


@pytest.mark.parametrize("loss", [DIPSLoss, DELTRLoss])
def test_loss_num_groups_mismatch_with_soft_groups_is_value_error(loss):
    s, r, soft = _batch()
    with pytest.raises(ValueError, match="num_groups=4") as measure_error:
        dips(s, r, soft, num_groups=4)
    with pytest.raises(ValueError) as loss_error:
        loss(num_groups=4)(s, r, soft)
    assert str(loss_error.value) == str(measure_error.value)
    assert torch.isfinite(loss(num_groups=3)(s, r, soft))
