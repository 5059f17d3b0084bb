"""BelowTopK: the wrapped fairness loss on the items below the current top k, against the loss computed by hand
on the sub-list, and its edge cases."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchfair.losses import BelowTopK, DIPSLoss, MultiMeasureLoss, PairwiseAccuracyGapLoss, below_top_k_mask
from torchfair.orderings import SoftRank


def test_mask_is_the_items_below_the_hard_top_k():
    s = torch.tensor([[0.1, 3.0, 2.0, 0.5, 2.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    m = torch.tensor([[True] * 5, [True, True, True, False, True]])
    out = below_top_k_mask(s, 2, m)
    # list 0: top 2 are ids 1 and 2 (2.0 ties with id 4: the lower index first); list 1: ties by index, the
    # padded id 3 is never "below"
    assert out.tolist() == [[True, False, False, True, True], [False, False, True, False, True]]
    assert below_top_k_mask(s[0], 0).all()
    with pytest.raises(ValueError, match="`k`"):
        below_top_k_mask(s, -1)
    with pytest.raises(ValueError, match="`mask`"):
        below_top_k_mask(s, 1, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="`scores`"):
        below_top_k_mask(torch.tensor([[1.0, float("nan")]]), 1)


@pytest.mark.parametrize("inner", [lambda: DIPSLoss(num_groups=2, ordering=SoftRank(0.3)),
                                   lambda: PairwiseAccuracyGapLoss(num_groups=2, ordering=SoftRank(0.3)),
                                   lambda: MultiMeasureLoss(terms=["dips", "pairwise_accuracy"], num_groups=2,
                                                            ordering=SoftRank(0.3))])
def test_equals_the_loss_on_the_sublist_and_leaves_the_top_alone(inner):
    gen = torch.Generator().manual_seed(1)
    B, N, k = 3, 9, 3
    s = torch.randn(B, N, generator=gen, dtype=torch.float64, requires_grad=True)
    r = torch.randint(0, 3, (B, N), generator=gen).double()
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[:, -2], g[:, -1] = 0, 1
    loss = BelowTopK(inner(), k=k)
    got = loss(s, r, g)
    (grad,) = torch.autograd.grad(got, s)
    # by hand: drop each list's top k (by score) physically (a [B, N - k] batch, no mask) and evaluate the
    # wrapped loss on it
    keep = torch.argsort(s.detach(), dim=-1, descending=True, stable=True)[:, k:].sort(-1).values
    sub = s.gather(-1, keep).detach().clone().requires_grad_(True)
    want = inner()(sub, r.gather(-1, keep), g.gather(-1, keep), None)
    (gsub,) = torch.autograd.grad(want, sub)
    ref_grad = torch.zeros_like(s).scatter(-1, keep, gsub)
    assert torch.allclose(got, want, atol=1e-12)
    assert torch.allclose(grad, ref_grad, atol=1e-12)
    top = ~below_top_k_mask(s, k)
    assert (grad[top] == 0).all()  # no gradient ever moves an item of the top k


def test_edge_cases():
    inner = DIPSLoss(num_groups=2)
    x, y, z = torch.randn(2, 6), torch.rand(2, 6), torch.tensor([[0, 1, 0, 1, 0, 1]] * 2)
    assert BelowTopK(inner, k=0)(x, y, z) == inner(x, y, z)
    s = torch.randn(2, 5, requires_grad=True)
    out = BelowTopK(inner, k=5)(s, torch.rand(2, 5), torch.randint(0, 2, (2, 5)))  # nothing below the top 5
    out.backward()
    assert out.item() == 0 and (s.grad == 0).all()
    h = torch.randn(2, 12).half().requires_grad_()
    lh = BelowTopK(inner, k=2)(h, torch.rand(2, 12).half(), torch.randint(0, 2, (2, 12)))
    lh.backward()
    assert torch.isfinite(lh) and torch.isfinite(h.grad).all()
    with pytest.raises(ValueError, match="`loss`"):
        BelowTopK("dips", k=2)
    with pytest.raises(ValueError, match="`k`"):
        BelowTopK(inner, k=-1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("where", [0, 3], ids=["ranked-in-the-top-k", "ranked-below"])
def test_a_non_finite_score_is_refused_wherever_it_ranks(bad, where):
    # the wrapped loss sees only the items below the top k: the wrapper checks every real item itself
    s = torch.tensor([[0.5, 1.0, 2.0, 3.0, -1.0]])
    s[0, where] = bad
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]])
    g = torch.tensor([[0, 1, 0, 1, 0]])
    with pytest.raises(ValueError, match="`scores` must be finite"):
        BelowTopK(DIPSLoss(num_groups=2), k=2)(s, r, g)


def test_a_non_finite_score_on_a_padded_item_is_ignored():
    s = torch.tensor([[float("nan"), 1.0, 2.0, 3.0, -1.0]])
    m = torch.tensor([[False, True, True, True, True]])
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]])
    g = torch.tensor([[0, 1, 0, 1, 0]])
    assert torch.isfinite(BelowTopK(DIPSLoss(num_groups=2), k=2)(s, r, g, m))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_a_non_finite_real_score_is_refused_wherever_it_ranks(data):
    N = data.draw(st.integers(2, 8), label="N")
    k = data.draw(st.integers(1, N), label="k")
    s = torch.tensor(data.draw(st.lists(st.floats(-3, 3, width=32), min_size=N, max_size=N)))
    at = data.draw(st.integers(0, N - 1), label="at")
    s[at] = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]), label="bad")
    r = torch.tensor(data.draw(st.lists(st.integers(0, 2), min_size=N, max_size=N))).float()
    g = torch.tensor(data.draw(st.lists(st.integers(0, 1), min_size=N, max_size=N)))
    with pytest.raises(ValueError, match="`scores` must be finite"):
        BelowTopK(DIPSLoss(num_groups=2), k=k)(s[None], r[None], g[None])
