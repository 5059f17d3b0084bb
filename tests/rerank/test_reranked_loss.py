"""torchfair.rerank.RerankedLoss: the wrapped fairness loss on the served (re-ranked) order, its gradient passed
straight through -- the values against a hand-built re-ranked list, the gradient against autograd at the
re-ranked scores, the identity re-ranker, padding and undefined lists, bad input."""
import pytest
import torch

from torchfair.losses import DIPSLoss, PairwiseAccuracyGapLoss
from torchfair.rerank import RerankedLoss, straight_through_scores


def test_straight_through_scores_by_hand():
    s = torch.tensor([[4.0, 3.0, 2.0, 1.0]], requires_grad=True)
    ranking = torch.tensor([[0, 2, 3, 1]])  # served: item 0, then 2, 3, 1
    out = straight_through_scores(s, ranking)
    assert out.tolist() == [[4.0, 1.0, 3.0, 2.0]]  # each served position gets the list's k-th largest value
    out.sum().backward()
    assert s.grad.tolist() == [[1.0, 1.0, 1.0, 1.0]]  # gradient 1 to each item's own score


def test_straight_through_scores_keep_padding():
    s = torch.tensor([[4.0, 3.0, 9.0]])
    mask = torch.tensor([[True, True, False]])
    out = straight_through_scores(s, torch.tensor([[1, 0, 2]]), mask)
    assert out.tolist() == [[3.0, 4.0, 9.0]]


def _loop_interleave_p1(scores, groups, keep, protected=1):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    rest = order[keep:]
    return order[:keep] + [i for i in rest if groups[i] == protected] + [i for i in rest if groups[i] != protected]


@pytest.mark.parametrize("seed", range(3))
def test_value_and_gradient_are_the_wrapped_loss_on_the_served_list(seed):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(10, generator=gen, dtype=torch.float64)
    g = torch.randint(0, 2, (10,), generator=gen)
    rel = torch.randint(0, 3, (10,), generator=gen).double()
    inner = DIPSLoss(num_groups=2)
    # the served list by hand: the top 3, then every group-1 item, then the rest; each position gets the k-th
    # largest score
    served = _loop_interleave_p1(s.tolist(), g.tolist(), 3)
    v = torch.sort(s, descending=True).values
    target = torch.empty(10, dtype=torch.float64)
    for k, i in enumerate(served):
        target[i] = v[k]
    target.requires_grad_(True)
    want = inner(target[None], rel[None], g[None])
    want.backward()
    x = s.clone().requires_grad_(True)
    got = RerankedLoss(inner, "interleave:keep=3,p=1.0")(x[None], rel[None], g[None])
    got.backward()
    assert float(got) == pytest.approx(float(want), abs=1e-12)
    torch.testing.assert_close(x.grad, target.grad)


def test_identity_reranker_is_the_wrapped_loss():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(3, 8, generator=gen)
    rel, g = torch.randint(0, 3, (3, 8), generator=gen).float(), torch.randint(0, 2, (3, 8), generator=gen)
    inner = PairwiseAccuracyGapLoss(num_groups=2)
    assert float(RerankedLoss(inner, "none")(s, rel, g)) == pytest.approx(float(inner(s, rel, g)), abs=1e-6)


def test_padded_and_one_group_lists_train_without_nan():
    s = torch.randn(3, 6, requires_grad=True)
    rel = torch.randint(0, 3, (3, 6)).float()
    g = torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1]])
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[2] = False
    loss = RerankedLoss(DIPSLoss(num_groups=2), "interleave:keep=1,p=1.0")(s, rel, g, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()
    assert float(s.grad[1].abs().sum()) == 0.0 and float(s.grad[2].abs().sum()) == 0.0


@pytest.mark.parametrize("kw, arg", [({"loss": "dips"}, "loss"), ({"reranker": "interleave:kep=1"}, "reranker"),
                                     ({"reranker": "nope"}, "reranker")])
def test_bad_arguments_name_them(kw, arg):
    args = {"loss": DIPSLoss(num_groups=2), **kw}
    with pytest.raises(ValueError, match=f"`{arg}`"):
        RerankedLoss(**args)


def test_groups_are_required():
    with pytest.raises(ValueError, match="`groups`"):
        RerankedLoss(DIPSLoss(num_groups=2))(torch.randn(2, 4), torch.rand(2, 4))
