"""The DIPS paper's synthetic data (torchfair.data.synthetic) and its qualitative claims (``000`` §6.1)."""
import pytest
import torch

from torchfair.browsing import RBP
from torchfair.data.synthetic import ideal_ranking, promote, tie_breaking_rankings, two_group_relevance
from torchfair.metrics.pairwise import dips, pairwise_gap, ree
from torchfair.orderings import scores_from_ranking


def _data(seed=0):
    return two_group_relevance(500, 500, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------ generator
def test_generator_properties():
    rel, groups = _data()
    assert rel.shape == groups.shape == (1000,)
    assert rel.dtype == torch.float32 and groups.dtype == torch.long
    assert (groups == 0).sum() == 500 and (groups == 1).sum() == 500
    ra, rb = rel[groups == 0], rel[groups == 1]
    assert ra.min() >= 0.5 and ra.max() <= 1.0 and rb.min() >= 0.2 and rb.max() <= 0.7
    assert abs(ra.mean().item() - 0.75) < 0.02 and abs(rb.mean().item() - 0.45) < 0.02
    # every item above 0.7 is A, every item below 0.5 is B (000 §6.1)
    assert (groups[rel > 0.7] == 0).all() and (groups[rel < 0.5] == 1).all()
    # seeded and reproducible
    rel2, _ = _data()
    assert torch.equal(rel, rel2) and not torch.equal(rel, _data(1)[0])


def test_ideal_ranking_and_promotion():
    rel, groups = _data()
    ideal = ideal_ranking(rel)
    assert torch.equal(torch.sort(ideal).values, torch.arange(1000))
    assert (rel[ideal][1:] <= rel[ideal][:-1]).all()
    top_b = ideal[groups[ideal] == 1][:20]  # the 20 most relevant B items
    for k in (0, 7, 99):
        r = promote(ideal, groups, group=1, count=20, k=k)
        assert torch.equal(torch.sort(r).values, torch.arange(1000))
        assert torch.equal(r[k:k + 20], top_b)
        others = torch.cat([r[:k], r[k + 20:]])
        keep = ~torch.isin(ideal, top_b)
        assert torch.equal(others, ideal[keep])  # relative order kept
    assert torch.equal(promote(ideal, groups, count=0, k=5), ideal)
    with pytest.raises(ValueError, match="`count`"):
        promote(ideal, groups, count=501)
    with pytest.raises(ValueError, match="`k \\+ count`"):
        promote(ideal, groups, k=990)
    with pytest.raises(ValueError, match="`ranking`"):
        promote(ideal.float(), groups)
    with pytest.raises(ValueError, match="`range_a`"):
        two_group_relevance(range_a=(1.0, 0.5))


def test_tie_breaking_rankings():
    rel, groups = _data()
    relq = torch.round(rel)
    g = torch.Generator().manual_seed(0)
    for p in (0.0, 0.3, 1.0):
        rk = tie_breaking_rankings(relq, groups, p, 5, generator=g)
        assert rk.shape == (5, 1000)
        assert torch.equal(torch.sort(rk, -1).values, torch.arange(1000).expand(5, 1000))
        assert (relq[rk][:, 1:] <= relq[rk][:, :-1]).all()  # maximum utility
    n_top = int(relq.sum())
    first = tie_breaking_rankings(relq, groups, 1.0, 1)[0, :500]
    assert (groups[first] == 0).all()  # p_A = 1: every tied A item first
    last = tie_breaking_rankings(relq, groups, 0.0, 1)[0, n_top - 500:n_top]
    assert (groups[last] == 0).all()  # p_A = 0: every tied A item after the tied B items
    # p_A = 0.5: A wins about half of the early draws
    rk = tie_breaking_rankings(relq, groups, 0.5, 200, generator=g)
    assert abs((groups[rk[:, :100]] == 0).float().mean().item() - 0.5) < 0.05
    with pytest.raises(ValueError, match="`p_a`"):
        tie_breaking_rankings(relq, groups, 1.5)


# ------------------------------------------------------------------------------------------ the paper's claims
def test_condition1_qualitative_claims():
    """000 §6.1.1: M_AB decays with k, M_BA = 0, M_AB(k=0) > 0.5 while REE's gap stays << 0.1."""
    rel, groups = _data()
    ideal = ideal_ranking(rel)
    ks = list(range(0, 100, 4)) + [99]
    rk = torch.stack([promote(ideal, groups, group=1, count=20, k=k) for k in ks])
    B = len(ks)
    s, R, G = scores_from_ranking(rk), rel.expand(B, -1), groups.expand(B, -1)
    M = dips(s, R, G, browsing=RBP(0.9), num_groups=2)
    M_ree = ree(s, R, G, num_groups=2)
    ab = M[:, 0, 1]
    assert (ab[1:] <= ab[:-1] + 1e-7).all() and ab[-1] < 1e-3
    assert (M[:, 1, 0] == 0).all()
    assert ab[0] > 0.5
    assert (pairwise_gap(M_ree)[:, 0, 1].abs() < 0.1).all() and (pairwise_gap(M_ree)[:, 0, 1] > 0).all()
    # exponential decay: M_AB shrinks by about 0.9 per step of k at large k
    assert 0.8 < (M[ks.index(44), 0, 1] / M[ks.index(40), 0, 1]).item() ** 0.25 < 0.95
    # the ideal ranking itself: no unfairness
    ideal_M = dips(scores_from_ranking(ideal), rel, groups, num_groups=2)
    assert ideal_M.abs().max() == 0


def test_condition2_qualitative_claims():
    """000 §6.1.2: with c_t = 0 DIPS and REE vanish; with c_t = 1 the sign follows the tie-breaking policy."""
    rel, groups = _data()
    relq = torch.round(rel)
    g = torch.Generator().manual_seed(0)
    rk = torch.cat([tie_breaking_rankings(relq, groups, p, 4, generator=g) for p in (0.0, 0.5, 1.0)])
    s, R, G = scores_from_ranking(rk), relq.expand(12, -1), groups.expand(12, -1)
    for measure in (dips, ree):
        assert measure(s, R, G, tie_weight=0.0, num_groups=2).abs().max() == 0
        gap = pairwise_gap(measure(s, R, G, tie_weight=1.0, num_groups=2))[:, 0, 1].reshape(3, 4).mean(1)
        assert gap[0] > 0.3 and gap[2] < -0.3 and gap[0] > gap[1] > gap[2]
