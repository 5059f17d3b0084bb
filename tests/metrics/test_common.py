"""torchfair.metrics.common: the plumbing every measure goes through.

* ``safe_div`` / ``safe_log``: the value where defined, 0 elsewhere, and no NaN in the gradient;
* ``reduce`` / ``finish``: per-entry means over the lists where the entry is defined, against a loop;
* ``expectation_over_rankings``: a weighted mean over the rankings of a mixture, nested mixtures expanded,
  against the measure evaluated on each ranking by hand;
* ``ideal_sort`` against a stable sort written out; ``clamp_rounding`` (rounding clamped with a straight-through
  gradient, real excursions kept); ``order`` and the argument checks.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchfair._validation import Batch
from torchfair.browsing import RBP, TopK
from torchfair.metrics.common import (check_bool, check_k, check_ordering, check_target_string, clamp_rounding,
                                       cut_browsing, expectation_over_rankings, finish, ideal_sort, order,
                                       out_of_range_tolerance, precise_dtype, reduce, safe_div, safe_log)
from torchfair.orderings import Hard, Sampled, SoftRank
from torchfair.orderings.mixture import MixtureOrderedBatch

F64 = torch.float64
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------------ arithmetic
def test_safe_div_and_safe_log_are_zero_with_zero_gradient_where_undefined():
    num = torch.tensor([1.0, 2.0, 3.0, 0.0], dtype=F64, requires_grad=True)
    den = torch.tensor([2.0, 0.0, -1.0, 4.0], dtype=F64, requires_grad=True)
    value, valid = safe_div(num, den)
    assert value.tolist() == [0.5, 0.0, 0.0, 0.0] and valid.tolist() == [True, False, False, True]
    gn, gd = torch.autograd.grad(value.sum(), (num, den))
    assert gn.tolist() == [0.5, 0.0, 0.0, 0.25] and gd.tolist() == [-0.25, 0.0, 0.0, 0.0]
    x = torch.tensor([math.e, 0.0, -2.0, 1.0], dtype=F64, requires_grad=True)
    y = safe_log(x)
    assert y.tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0])
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert gx.tolist() == pytest.approx([1 / math.e, 0.0, 0.0, 1.0]) and torch.isfinite(gx).all()


def test_precision_helpers():
    assert precise_dtype(torch.device("cpu"), torch.float32) == F64
    assert precise_dtype("cpu", torch.float16) == F64
    assert out_of_range_tolerance(torch.float32) == out_of_range_tolerance(torch.bfloat16) == 1e-4
    assert out_of_range_tolerance(F64) == 1e-9


def test_clamp_rounding_clamps_rounding_only_and_keeps_the_gradient():
    tol = out_of_range_tolerance(F64)
    x = torch.tensor([-0.5 * tol, 0.3, 1.0 + 0.5 * tol, 1.0 + 10 * tol, -0.2], dtype=F64, requires_grad=True)
    y = clamp_rounding(x, 0.0, 1.0)
    assert y.tolist() == [0.0, 0.3, 1.0, 1.0 + 10 * tol, -0.2]  # real excursions stay visible
    (g,) = torch.autograd.grad((y * torch.arange(1.0, 6.0, dtype=F64)).sum(), x)
    assert g.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]  # straight through
    # the slack grows with the bound: 1 + |bound| times the tolerance
    z = torch.tensor([10.0 + 5 * tol], dtype=F64)
    assert clamp_rounding(z, high=10.0).item() == 10.0
    assert clamp_rounding(z, low=-1.0).item() == z.item()  # within range: unchanged


# ------------------------------------------------------------------------------------------------ ideal ranking
@SETTINGS
@given(rows=st.lists(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=8), min_size=1,
                     max_size=3).filter(lambda r: len({len(x) for x in r}) == 1))
def test_ideal_sort_is_the_stable_descending_sort_with_padding_last(rows):
    key = torch.tensor([[float(k) for k, _ in row] for row in rows], dtype=F64)
    mask = torch.tensor([[m for _, m in row] for row in rows])
    srt, idx = ideal_sort(key, mask)
    for b, row in enumerate(rows):
        real = sorted((i for i in range(len(row)) if row[i][1]), key=lambda i: (-row[i][0], i))
        pad = [i for i in range(len(row)) if not row[i][1]]
        assert idx[b].tolist() == real + pad
        assert srt[b].tolist() == [float(row[i][0]) for i in real] + [-math.inf] * len(pad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ideal_sort_is_torchs_stable_sort(dtype):
    """Hard's order (its compiled radix sort on plain CPU tensors) equals torch's stable descending sort with padded
    items last, on long lists of mostly tied relevance (full-catalogue lists: a few relevant items among
    thousands)."""
    g = torch.Generator().manual_seed(3)
    key = (torch.rand(5, 3000, generator=g) < 0.01).to(dtype) * torch.randint(1, 6, (5, 3000), generator=g)
    mask = torch.rand(5, 3000, generator=g) < 0.9
    fast = ideal_sort(key, mask)
    ref = torch.sort(torch.where(mask, key, torch.full_like(key, float("-inf"))), dim=-1, descending=True, stable=True)
    assert torch.equal(fast[1], ref.indices) and torch.equal(fast[0], ref.values)


# ------------------------------------------------------------------------------------------------ reductions
@SETTINGS
@given(B=st.integers(1, 5), G=st.integers(1, 3), seed=st.integers(0, 2 ** 31 - 1))
def test_reduce_is_the_per_entry_mean_over_the_lists_defining_it(B, G, seed):
    gen = torch.Generator().manual_seed(seed)
    value = torch.randn(B, G, generator=gen, dtype=F64)
    valid = torch.rand(B, G, generator=gen) < 0.6
    mean, total = reduce(value, valid, "mean", True), reduce(value, valid, "sum", True)
    for g in range(G):
        vals = [value[b, g].item() for b in range(B) if valid[b, g]]
        assert total[g].item() == pytest.approx(sum(vals), abs=1e-12)
        assert mean[g].item() == pytest.approx(sum(vals) / len(vals) if vals else 0.0, abs=1e-12)
    assert reduce(value, valid, "none", True) is value and reduce(value, valid, "mean", False) is value


def test_finish_zeroes_undefined_entries_reduces_and_squeezes():
    value = torch.tensor([1.0, float("nan"), 3.0], dtype=F64)
    valid = torch.tensor([True, False, True])
    b = Batch(scores=torch.zeros(3, 2), mask=torch.ones(3, 2, dtype=torch.bool))
    v, ok = finish(b, value, valid, "none", True)
    assert v.tolist() == [1.0, 0.0, 3.0] and ok.tolist() == [True, False, True]
    v, ok = finish(b, value, valid, "mean", True)
    assert v.item() == 2.0 and ok.item() is True
    assert finish(b, value, torch.zeros(3, dtype=torch.bool), "mean", False).item() == 0.0
    one = Batch(scores=torch.zeros(1, 2), mask=torch.ones(1, 2, dtype=torch.bool), squeeze=True)
    v, ok = finish(one, value[:1], valid[:1], "mean", True)  # a 1-D input: no batch to reduce, scalar out
    assert v.dim() == 0 and v.item() == 1.0 and ok.dim() == 0
    with pytest.raises(ValueError, match="`return_valid`"):
        finish(b, value, valid, "none", 1)
    with pytest.raises(ValueError, match="`reduction`"):
        finish(b, value, valid, "avg", False)


# ------------------------------------------------------------------------------------------------ mixtures
def _first_position_of_item0(inner, S):
    """A measure that is not linear in the ordering: the square of item 0's expected position, per list."""
    return inner.expected_positions()[:, 0] ** 2


def test_expectation_over_rankings_is_the_weighted_mean_over_the_rankings():
    gen = torch.Generator().manual_seed(0)
    B, N, S = 2, 5, 3
    rk = torch.stack([torch.stack([torch.randperm(N, generator=gen) for _ in range(B)]) for _ in range(S)])
    w = torch.tensor([0.2, 0.5, 0.3], dtype=F64)
    mask = torch.ones(B, N, dtype=torch.bool)
    ob = Sampled(rk, w)(torch.zeros(B, N, dtype=F64), mask)
    got = expectation_over_rankings(ob, _first_position_of_item0)
    want = [sum(w[s].item() * float((rk[s, b] == 0).nonzero().item()) ** 2 for s in range(S)) for b in range(B)]
    assert got.tolist() == pytest.approx(want, abs=1e-12)
    # not the measure of the mean ordering (the square of the mean position)
    assert got.tolist() != pytest.approx((ob.expected_positions()[:, 0] ** 2).tolist())
    # a plain ordering: the measure itself (S = 1)
    hard = Hard()(torch.randn(B, N, generator=gen, dtype=F64), mask)
    torch.testing.assert_close(expectation_over_rankings(hard, _first_position_of_item0),
                               hard.expected_positions()[:, 0] ** 2)


def test_expectation_over_rankings_expands_nested_mixtures():
    """A mixture (weights u [2, B]) of a mixture (weights w [3, 2 B]) of hard rankings: sum_s u_s sum_t w_t f."""
    gen = torch.Generator().manual_seed(1)
    B, N, S, T = 2, 4, 2, 3
    rk = torch.stack([torch.stack([torch.randperm(N, generator=gen) for _ in range(S * B)]) for _ in range(T)])
    mask = torch.ones(B, N, dtype=torch.bool)
    w = torch.rand(T, S * B, generator=gen, dtype=F64)
    w = w / w.sum(0)
    u = torch.rand(S, B, generator=gen, dtype=F64)
    u = u / u.sum(0)
    inner = Sampled(rk, w)(torch.zeros(S * B, N, dtype=F64), mask.repeat(S, 1))
    outer = MixtureOrderedBatch(inner, u, torch.zeros(B, N, dtype=F64), mask)
    got = expectation_over_rankings(outer, _first_position_of_item0)
    for b in range(B):
        want = 0.0
        for s in range(S):
            for t in range(T):
                pos = float((rk[t, s * B + b] == 0).nonzero().item())
                want += u[s, b].item() * w[t, s * B + b].item() * pos ** 2
        assert got[b].item() == pytest.approx(want, abs=1e-12)


def test_expectation_over_rankings_uses_score_function_weights_when_present():
    B, N = 1, 3
    ob = Sampled(torch.stack([torch.tensor([[0, 1, 2]]), torch.tensor([[2, 1, 0]])]))(
        torch.zeros(B, N, dtype=F64), torch.ones(B, N, dtype=torch.bool))
    ob.sf_weights = torch.tensor([[1.0], [0.0]], dtype=F64)  # as a Plackett-Luce policy carries them
    assert expectation_over_rankings(ob, _first_position_of_item0).item() == 0.0  # only the first ranking counts
    del ob.sf_weights
    assert expectation_over_rankings(ob, _first_position_of_item0).item() == 2.0  # (0 + 2**2) / 2


# ------------------------------------------------------------------------------------------------ arguments
def test_order_resolves_the_ordering_argument():
    s = torch.tensor([[0.1, 0.9, 0.5]], dtype=F64)
    b = Batch(scores=s, mask=torch.ones(1, 3, dtype=torch.bool))
    assert order(b, None).order.tolist() == [[1, 2, 0]]  # None is the exact Hard()
    pre = SoftRank(0.5)(s, b.mask)
    assert order(b, pre) is pre  # a precomputed OrderedBatch is used as it is
    assert type(order(b, SoftRank(0.5))) is type(pre)
    with pytest.raises(ValueError, match="computed for shape"):
        order(Batch(scores=s[:, :2], mask=b.mask[:, :2]), pre)
    for bad in ("hard", 3):
        with pytest.raises(ValueError, match="`ordering`"):
            order(b, bad)
        with pytest.raises(ValueError, match="`ordering`"):
            check_ordering(bad)
    check_ordering(None)


@pytest.mark.parametrize("bad", [0, -1, 2.0, 1.5, True])
def test_check_k_refuses_what_is_not_a_positive_int(bad):
    with pytest.raises(ValueError, match="`k`"):
        check_k(bad)


def test_argument_checks():
    assert check_k(None) is None and check_k(3) == 3
    with pytest.raises(ValueError, match="`cutoff`"):
        check_k(0, "cutoff")
    assert check_bool(False, "flag") is False
    with pytest.raises(ValueError, match="`flag`"):
        check_bool(0, "flag")
    assert check_target_string("ee", ("ee", "ea")) == "ee"
    target = torch.tensor([0.5, 0.5])
    assert check_target_string(target, ("ee",)) is target  # non-strings are checked elsewhere
    with pytest.raises(ValueError, match="`target`"):
        check_target_string("xx", ("ee", "ea"))
    F = cut_browsing("rbp:0.5", RBP(0.9), 2)
    assert isinstance(F, TopK) and F.k == 2
    assert F.item_exposure(torch.zeros(1, 4)).tolist() == [[1.0, 0.5, 0.0, 0.0]]
    default = RBP(0.9)
    assert cut_browsing(None, default, None) is default
