"""Sampled and DoublyStochastic orderings: agreement with Hard, the uniform policy, validation, padding."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from torchfair.browsing import RBP, Cascade, Logarithmic, Uniform
from torchfair.metrics.pairwise import dips, individual_dissatisfaction
from torchfair.orderings import Hard, scores_from_ranking
from torchfair.orderings import base as ordering_base
from torchfair.orderings import stochastic as stoch
from torchfair.orderings.stochastic import DoublyStochastic, Sampled

D = torch.float64


def _batch(B=3, N=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    rankings = torch.stack([torch.randperm(N, generator=g) for _ in range(B)])
    rel = torch.randint(0, 3, (B, N), generator=g).to(D)
    mask = torch.ones(B, N, dtype=torch.bool)
    return rankings, rel, mask


def _quantities(ob, rel, F):
    B, N = ob.mask.shape
    right = torch.eye(N, dtype=D).expand(B, N, N).contiguous()
    return dict(pos=ob.expected_positions(), exp=ob.exposure(F, rel),
                above=ob.contract(right, which="above"),
                joint=ob.contract(right, which="joint", browsing=F, relevance=rel),
                R=ob.position_matrix())


@pytest.mark.parametrize("F", [RBP(0.7), Logarithmic(), Cascade(0.9, max_grade=2.0)])
def test_sampled_copies_equal_hard(F):
    rankings, rel, mask = _batch()
    scores = scores_from_ranking(rankings).to(D)
    hard = _quantities(Hard()(scores, mask), rel, F)
    samp = _quantities(Sampled(rankings.expand(4, -1, -1))(torch.zeros_like(scores), mask), rel, F)
    for k in hard:
        torch.testing.assert_close(samp[k], hard[k], msg=k)


def test_sampled_copies_equal_hard_for_pairwise_measure():
    rankings, rel, mask = _batch(seed=3)
    groups = torch.tensor([[0, 1, 0, 1, 1], [1, 1, 0, 0, -1], [0, 0, 0, 1, 1]])
    scores = scores_from_ranking(rankings).to(D)
    want = dips(scores, rel, groups, num_groups=2)
    got = dips(torch.zeros_like(scores), rel, groups, num_groups=2, ordering=Sampled(rankings.expand(3, -1, -1)))
    torch.testing.assert_close(got, want)


def test_sampled_average_of_rankings_is_mean_of_hard():
    N = 4
    g = torch.Generator().manual_seed(1)
    rk = torch.stack([torch.randperm(N, generator=g) for _ in range(5)])  # [S, N]
    rel = torch.tensor([2., 0., 1., 1.], dtype=D)
    F = RBP(0.8)
    per = [individual_dissatisfaction(scores_from_ranking(r).to(D), rel, browsing=F) for r in rk]
    got = individual_dissatisfaction(torch.zeros(N, dtype=D), rel, browsing=F, ordering=Sampled(rk))
    torch.testing.assert_close(got, torch.stack(per).mean(0))


def test_sampled_all_permutations_is_uniform_policy():
    N = 4
    perms = torch.tensor(list(itertools.permutations(range(N))))  # [N!, N]
    mask = torch.ones(1, N, dtype=torch.bool)
    ob = Sampled(perms[:, None, :])(torch.zeros(1, N, dtype=D), mask)
    F = RBP(0.5)
    f = F.weights(N, dtype=D)
    torch.testing.assert_close(ob.expected_positions(), torch.full((1, N), (N - 1) / 2, dtype=D))
    torch.testing.assert_close(ob.exposure(F), torch.full((1, N), float(f.mean()), dtype=D))
    torch.testing.assert_close(ob.position_matrix(), torch.full((1, N, N), 1.0 / N, dtype=D))
    right = torch.eye(N, dtype=D)[None]
    off = 1 - torch.eye(N, dtype=D)[None]
    torch.testing.assert_close(ob.contract(right, which="above"), 0.5 * off)
    # E[F(pos_j) 1(pos_j < pos_i)] for a uniform permutation: sum_k F(k) (N-1-k) / (N (N-1))
    jv = float(sum(f[k] * (N - 1 - k) for k in range(N)) / (N * (N - 1)))
    torch.testing.assert_close(ob.contract(right, which="joint", browsing=F), jv * off)


def test_sampled_weights_match_repetition():
    rk = torch.tensor([[0, 1, 2], [2, 1, 0]])
    w = torch.tensor([3., 1.])
    rep = torch.tensor([[0, 1, 2]] * 3 + [[2, 1, 0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    z = torch.zeros(1, 3, dtype=D)
    a = _quantities(Sampled(rk[:, None], weights=w)(z, mask), None, RBP(0.6))
    b = _quantities(Sampled(rep[:, None])(z, mask), None, RBP(0.6))
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k)


def test_sampled_small_block_budget(monkeypatch):
    rankings, rel, mask = _batch(B=2, N=6, seed=5)
    g = torch.Generator().manual_seed(9)
    samples = torch.stack([torch.stack([torch.randperm(6, generator=g) for _ in range(2)]) for _ in range(7)])
    z = torch.zeros(2, 6, dtype=D)
    want = _quantities(Sampled(samples)(z, mask), rel, RBP(0.8))
    monkeypatch.setattr(ordering_base, "PAIR_BLOCK_ELEMENTS", 30)
    monkeypatch.setattr(stoch, "PAIR_BLOCK_ELEMENTS", 30)
    got = _quantities(Sampled(samples)(z, mask), rel, RBP(0.8))
    for k in want:
        torch.testing.assert_close(got[k], want[k], msg=k)


def test_sampled_padding_invariance():
    # list of 3 real items padded to 5; padded items sit anywhere in the sampled rankings
    rk_real = torch.tensor([[2, 0, 1], [1, 2, 0]])
    rk_pad = torch.tensor([[3, 2, 0, 4, 1], [1, 4, 2, 3, 0]])
    mask = torch.tensor([[True, True, True, False, False]])
    F = RBP(0.7)
    a = Sampled(rk_real[:, None])(torch.zeros(1, 3, dtype=D), torch.ones(1, 3, dtype=torch.bool))
    b = Sampled(rk_pad[:, None])(torch.zeros(1, 5, dtype=D), mask)
    torch.testing.assert_close(b.exposure(F)[:, :3], a.exposure(F))
    assert (b.exposure(F)[:, 3:] == 0).all()
    torch.testing.assert_close(b.expected_positions()[:, :3], a.expected_positions())
    torch.testing.assert_close(b.position_matrix()[:, :3, :3], a.position_matrix())
    assert b.position_matrix()[:, 3:].abs().sum() == 0 and b.position_matrix()[:, :, 3:].abs().sum() == 0


def test_doubly_stochastic_one_hot_equals_hard():
    rankings, rel, mask = _batch(seed=7)
    scores = scores_from_ranking(rankings).to(D)
    hard = Hard()(scores, mask)
    R = hard.position_matrix()
    ds = DoublyStochastic(R)(torch.zeros_like(scores), mask)
    F = RBP(0.6)
    torch.testing.assert_close(ds.exposure(F), hard.exposure(F))
    torch.testing.assert_close(ds.expected_positions(), hard.expected_positions())
    torch.testing.assert_close(ds.position_matrix(), R)


def test_doubly_stochastic_matches_sampled_marginals():
    N = 4
    g = torch.Generator().manual_seed(2)
    rk = torch.stack([torch.randperm(N, generator=g) for _ in range(6)])
    mask = torch.ones(1, N, dtype=torch.bool)
    z = torch.zeros(1, N, dtype=D)
    samp = Sampled(rk[:, None])(z, mask)
    ds = DoublyStochastic(samp.position_matrix())(z, mask)
    for F in (RBP(0.5), Logarithmic(), Uniform()):
        torch.testing.assert_close(ds.exposure(F), samp.exposure(F))
    torch.testing.assert_close(ds.expected_positions(), samp.expected_positions())


def test_doubly_stochastic_padding():
    R = torch.tensor([[0.5, 0.5, 0.3], [0.5, 0.5, 0.7], [0.1, 0.2, 0.0]], dtype=D)  # item 2 and position 2 padded
    mask = torch.tensor([[True, True, False]])
    ob = DoublyStochastic(R[None])(torch.zeros(1, 3, dtype=D), mask)
    torch.testing.assert_close(ob.exposure(RBP(0.5)), torch.tensor([[0.75, 0.75, 0.0]], dtype=D))
    torch.testing.assert_close(ob.expected_positions()[:, :2], torch.tensor([[0.5, 0.5]], dtype=D))


def test_doubly_stochastic_pairwise_raises():
    R = torch.eye(3, dtype=D)
    with pytest.raises(ValueError, match="pairwise measures need rankings"):
        dips(torch.zeros(3, dtype=D), torch.ones(3, dtype=D), torch.tensor([0, 1, 0]),
             ordering=DoublyStochastic(R))
    ob = DoublyStochastic(R)(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="rankings"):
        ob.pair_block(None, 0, 3)
    with pytest.raises(ValueError, match="Sampled"):
        ob.exposure(Cascade(0.9), torch.ones(1, 3))


@pytest.mark.parametrize("bad, match", [
    (torch.tensor([[0, 1, 1]]), "permutations"),
    (torch.tensor([[0., 1., 2.]]), "integer"),
    (torch.tensor([0, 1, 2]), r"\[S, B, N\]"),
    (torch.tensor([[0, 1, 3]]), "permutations"),
])
def test_sampled_validation(bad, match):
    with pytest.raises(ValueError, match="`rankings`") as e:
        Sampled(bad)
    assert e.match(match)


def test_sampled_shape_and_weights_validation():
    s = Sampled(torch.tensor([[[0, 1, 2]]]))
    with pytest.raises(ValueError, match="`rankings`"):
        s(torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="`weights`"):
        Sampled(torch.tensor([[0, 1], [1, 0]]), weights=torch.tensor([1.0]))
    with pytest.raises(ValueError, match="`weights`"):
        Sampled(torch.tensor([[0, 1], [1, 0]]), weights=torch.tensor([1.0, -1.0]))


def test_doubly_stochastic_validation():
    with pytest.raises(ValueError, match="`R`"):
        DoublyStochastic(torch.ones(2, 3))
    with pytest.raises(ValueError, match="`R`"):
        DoublyStochastic(torch.eye(3, dtype=torch.long))
    m = torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="`R` columns"):
        DoublyStochastic(torch.full((3, 3), 0.5))(torch.zeros(1, 3), m)
    with pytest.raises(ValueError, match="`R`"):
        DoublyStochastic(-torch.eye(3))(torch.zeros(1, 3), m)
    with pytest.raises(ValueError, match="`R`"):
        DoublyStochastic(torch.eye(3))(torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.bool))
    R = torch.tensor([[1., 1., 0.], [0., 0., 0.], [0., 0., 1.]])  # columns sum to 1, rows do not
    with pytest.raises(ValueError, match="`R` rows"):
        DoublyStochastic(R)(torch.zeros(1, 3), m)


def test_list_shape():
    assert Sampled(torch.tensor([[0, 1], [1, 0]])).list_shape == (2,)
    assert Sampled(torch.zeros(3, 4, 2, dtype=torch.long) + torch.tensor([0, 1])).list_shape == (4, 2)
    assert DoublyStochastic(torch.eye(3)).list_shape == (3,)
    assert math.isclose(float(Sampled(torch.tensor([[0, 1], [1, 0]])).weights.sum()), 1.0)


# ------------------------------------------------------------------------------------------------- robustness
@pytest.mark.parametrize("make,name", [
    (lambda: DoublyStochastic(torch.eye(3), atol=float("nan")), "atol"),
    (lambda: DoublyStochastic(torch.eye(3), atol=-1.0), "atol"),
    (lambda: DoublyStochastic(torch.eye(3), validate="yes"), "validate"),
    (lambda: Sampled(torch.tensor([[0, 1], [1, 0]]), weights=torch.tensor([True, False])), "weights"),
    (lambda: Hard(ties="random"), "ties"), (lambda: Hard(ties=None), "ties"),
])
def test_arguments_checked(make, name):
    with pytest.raises(ValueError, match=name):
        make()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_placeholders_computed_in_float32(dtype):
    """Sampled / DoublyStochastic / Hard given half-precision scores compute in float32 (library convention): a
    bfloat16 placeholder used to give bfloat16 averages, e.g. expected positions summing to 6.01 instead of 6."""
    N = 300
    gen = torch.Generator().manual_seed(0)
    rk = torch.stack([torch.randperm(N, generator=gen) for _ in range(3)]).unsqueeze(1)  # [3, 1, N]
    mask = torch.ones(1, N, dtype=torch.bool)
    ob = Sampled(rk)(torch.zeros(1, N, dtype=dtype), mask)
    pos = ob.expected_positions()
    assert pos.dtype == torch.float32
    assert pos.double().sum().item() == pytest.approx(N * (N - 1) / 2, abs=1e-2)
    hard = Hard()(torch.arange(N, dtype=torch.float32).flip(0).to(dtype)[None], mask)
    assert hard.expected_positions().dtype == torch.float32
    assert hard.expected_positions()[0, 299].item() == 299.0  # 299 is not representable in bfloat16


def test_sampled_level_sweep_matches_generic_blocks():
    """contract() with a LevelPairWeight sweeps down every ranking; the same weight as a plain callable
    takes the generic pair blocks: equal values, with weighted samples and padded items anywhere."""
    from torchfair.orderings.base import LevelPairWeight
    g = torch.Generator().manual_seed(12)
    S, B, N = 5, 3, 7
    rk = torch.stack([torch.stack([torch.randperm(N, generator=g) for _ in range(B)]) for _ in range(S)])
    mask = torch.rand(B, N, generator=g) > 0.25
    rel = torch.randint(0, 3, (B, N), generator=g).to(D)
    right = torch.rand(B, N, 2, generator=g, dtype=D)
    w = torch.rand(S, B, generator=g, dtype=D)
    ob = Sampled(rk, w)(torch.zeros(B, N, dtype=D), mask)
    lw = LevelPairWeight(rel, greater=1.0, equal=0.3, less=0.1)
    for which, kw in (("above", {}), ("joint", dict(browsing=RBP(0.7))), ("one", {}),
                      ("joint", dict(browsing=Cascade(0.9, max_grade=2.0), relevance=rel))):
        fast = ob.contract(right, which=which, pair_weight=lw, **kw)
        slow = ob.contract(right, which=which, pair_weight=lambda a, b: lw(a, b), **kw)
        torch.testing.assert_close(fast, slow, msg=which)
        assert (fast[~mask] == 0).all()
