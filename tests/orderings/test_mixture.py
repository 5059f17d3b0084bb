"""torchfair.orderings.mixture: ``MixtureOrderedBatch``, the weighted mean of ``S`` orderings of one batch.

* every quantity (expected positions, exposure, pair blocks, the contraction, the position matrix) is
  ``sum_s w[s, b] q_s`` of the inner orderings, against a loop over the samples: inner hard rankings (the sorted
  sweep path) and inner soft orderings (the row-block path, whose block budget shrinks by ``S``);
* gradients flow through the weights (d quantity / d w[s, b] is the sample's own quantity) and through a
  differentiable inner ordering;
* ``sorted_contract`` declines (``None``) what it has no sweep for.
"""
from __future__ import annotations

import pytest
import torch

from torchfair.browsing import RBP, TopK
from torchfair.orderings import Hard, SoftRank, scores_from_ranking
from torchfair.orderings.mixture import MixtureOrderedBatch
from torchfair.orderings.base import LevelPairWeight, OrderedBatch

F64 = torch.float64


def _mixture(inner_kind="hard", S=4, B=3, N=7, seed=0, requires_grad=False):
    """``S`` random rankings (hard) or ``S`` perturbed score vectors (soft) of a [B, N] batch with padding, random
    weights summing to 1 over S; returns (mixture, the S inner batches of [B, N] computed one sample at a time,
    weights, relevance, mask)."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, N, generator=gen) < 0.8
    mask[:, 0] = True
    if inner_kind == "hard":
        scores = torch.stack([scores_from_ranking(torch.stack([torch.randperm(N, generator=gen) for _ in range(B)]),
                                                  dtype=F64) for _ in range(S)])
        ordering = Hard()
    else:
        scores = torch.randn(S, B, N, generator=gen, dtype=F64)
        ordering = SoftRank(0.5)
    scores = scores.requires_grad_(requires_grad)
    raw = torch.rand(S, B, generator=gen, dtype=F64) + 0.1
    weights = (raw / raw.sum(0)).requires_grad_(requires_grad)
    inner = ordering(scores.reshape(S * B, N), mask.repeat(S, 1))
    per_sample = [ordering(scores[s], mask) for s in range(S)]
    mix = MixtureOrderedBatch(inner, weights, torch.zeros(B, N, dtype=F64), mask)
    rel = torch.randint(0, 3, (B, N), generator=gen).to(F64)
    return mix, per_sample, weights, rel, mask


def _weighted(weights, values):
    """``sum_s w[s, b] v_s[b, ...]`` written as a loop."""
    out = 0.0
    for s, v in enumerate(values):
        out = out + weights[s].reshape(-1, *([1] * (v.dim() - 1))) * v
    return out


@pytest.mark.parametrize("kind", ["hard", "soft"])
def test_quantities_are_the_weighted_mean_of_the_samples(kind):
    mix, samples, w, rel, mask = _mixture(kind)
    F = TopK(RBP(0.8), 4)
    torch.testing.assert_close(mix.expected_positions(), _weighted(w, [o.expected_positions() for o in samples]))
    torch.testing.assert_close(mix.exposure(F, rel), _weighted(w, [o.exposure(F, rel) for o in samples]))
    torch.testing.assert_close(mix.position_matrix(), _weighted(w, [o.position_matrix() for o in samples]))
    assert (mix.exposure(F, rel)[~mask] == 0).all()
    right = torch.rand(*mask.shape, 2, dtype=F64, generator=torch.Generator().manual_seed(1))
    pw = LevelPairWeight(rel, 1.0, 0.5, 0.2)
    for which, br in (("above", None), ("joint", F), ("one", None)):
        for weight in (None, pw):
            got = mix.contract(right, which=which, browsing=br, relevance=rel, pair_weight=weight)
            want = _weighted(w, [o.contract(right, which=which, browsing=br, relevance=rel, pair_weight=weight)
                                 for o in samples])
            torch.testing.assert_close(got, want, msg=f"{kind} {which} {weight}")
    ctx = mix.pair_context(F, rel)
    blk = mix.pair_block(ctx, 2, 5)
    blocks = [o.pair_block(o.pair_context(F, rel), 2, 5) for o in samples]
    torch.testing.assert_close(blk.above, _weighted(w, [b.above for b in blocks]))
    torch.testing.assert_close(blk.joint, _weighted(w, [b.joint for b in blocks]))


def test_sorted_contract_is_taken_for_hard_rankings_and_declined_otherwise():
    mix, _, _, rel, mask = _mixture("hard")
    right = torch.ones(*mask.shape, 1, dtype=F64)
    assert mix.sorted_contract(right) is not None
    assert mix.sorted_contract(right, which="joint") is None  # no browsing model
    assert mix.sorted_contract(right, pair_weight=lambda a, b: torch.ones(mask.shape[0], b - a, mask.shape[1],
                                                                          dtype=F64)) is None
    soft, _, _, _, _ = _mixture("soft")
    assert soft.sorted_contract(right) is None
    assert soft.sorted_contract(right, which="one") is not None  # counts do not depend on the ordering


@pytest.mark.parametrize("block_elements", [None, 1, 50])
def test_soft_mixture_row_blocks_give_the_dense_values_and_gradients(block_elements):
    """The row-block path (budget divided by S) with gradients through the inner soft ordering and the weights."""
    outs = []
    for be in (block_elements, "generic"):
        mix, _, w, rel, mask = _mixture("soft", requires_grad=True)
        right = torch.rand(*mask.shape, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
        if be == "generic":  # every pair at once, without the mixture's budget
            val = OrderedBatch.contract(mix, right, which="joint", browsing=RBP(0.7), block_elements=10 ** 9)
        else:
            val = mix.contract(right, which="joint", browsing=RBP(0.7), block_elements=be)
        gs, gw = torch.autograd.grad(val.square().sum(), (mix.inner.scores, w))
        outs.append((val.detach(), gs, gw))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b)


def test_gradient_with_respect_to_a_weight_is_the_samples_quantity():
    mix, samples, w, rel, mask = _mixture("hard", requires_grad=True)
    F = RBP(0.6)
    e = mix.exposure(F, rel)
    for s in (0, 2):
        for b in range(mask.shape[0]):
            (g,) = torch.autograd.grad(e[b].sum(), w, retain_graph=True)
            want = torch.zeros_like(w)
            want[:, b] = torch.stack([o.exposure(F, rel)[b].sum() for o in samples])
            torch.testing.assert_close(g, want)


# ------------------------------------------------------------------------------------------- moved from the
# robustness file: mixtures of hard rankings contract through their pair-free sweeps
def test_mixture_sweep_contraction_equals_the_pairwise_contraction():
    """Sampled rankings and an exact Plackett-Luce enumeration (a mixture of hard rankings) contract through the
    rankings' pair-free sweeps: same values as the generic row-block contraction and, for the enumeration, the same
    gradient with respect to the scores (it flows through the permutation probabilities)."""
    from torchfair.browsing import get_browsing
    from torchfair.orderings import PlackettLuce, Sampled
    from torchfair.orderings.base import LevelPairWeight, OrderedBatch
    g = torch.Generator().manual_seed(1)
    B, N, S, H = 3, 9, 5, 2
    mask = torch.rand(B, N, generator=g) < 0.8
    rel = torch.rand(B, N, generator=g).double().round(decimals=1)
    right = torch.rand(B, N, H, generator=g).double()
    rk = torch.stack([torch.stack([torch.randperm(N, generator=g) for _ in range(B)]) for _ in range(S)])
    ob = Sampled(rk, torch.rand(S, generator=g) + 0.1)(torch.zeros(B, N, dtype=torch.float64), mask)
    for which in ("above", "joint", "one"):
        for pw in (None, LevelPairWeight(rel, 1.0, 0.5), LevelPairWeight(rel, 1.0, 0.0, 0.3)):
            br = get_browsing("topk:4:rbp:0.8") if which == "joint" else None
            fast = ob.contract(right, which=which, pair_weight=pw, browsing=br, relevance=rel)
            if which == "one":  # both paths count pairs by the same sweep: form them here
                pair = (mask[:, :, None] & mask[:, None, :] & ~torch.eye(N, dtype=torch.bool)).double()
                dense = torch.bmm(pair if pw is None else pair * pw(0, N), right)
            else:
                dense = OrderedBatch.contract(ob, right, which=which, pair_weight=pw, browsing=br, relevance=rel)
            assert torch.allclose(fast, dense, atol=1e-12), (which, pw)
    n = 4
    s = torch.randn(B, n, dtype=torch.float64, generator=g, requires_grad=True)
    m, r4 = torch.ones(B, n, dtype=torch.bool), rel[:, :n]
    for path in ("fast", "dense"):
        pl = PlackettLuce(estimator="score_function", exact=True)(s, m)
        pw = LevelPairWeight(r4, 1.0, 0.5)
        fn = pl.contract if path == "fast" else (lambda *a, **k: OrderedBatch.contract(pl, *a, **k))
        val = fn(right[:, :n], which="joint", pair_weight=pw, browsing=get_browsing("rbp:0.7"), relevance=r4)
        grad, = torch.autograd.grad(val.square().sum(), s)
        if path == "fast":
            ref_val, ref_grad = val, grad
    assert torch.allclose(ref_val, val, atol=1e-12) and torch.allclose(ref_grad, grad, atol=1e-12)
