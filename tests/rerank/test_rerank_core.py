"""torchfair.rerank: each re-ranker against a plain loop written from its paper, properties, bad input."""
import itertools
import math

import pytest
import torch

from torchfair.metrics import dips, fair_mtable, fair_test, pairwise_gap
from torchfair.rerank import (det_const_sort, epsilon_greedy, fa_ir, get_reranker, list_rerankers, parse_spec,
                              targeted_rerank, RERANKERS)


def _binom_cdf(m, k, p):
    return sum(math.comb(k, j) * p ** j * (1 - p) ** (k - j) for j in range(0, m + 1))


def test_mtable_against_the_binomial_by_hand_and_the_paper():
    assert fair_mtable(10, 0.5, 0.1, adjust=False).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]  # Zehlike et al. Table
    for p, a in ((0.3, 0.1), (0.7, 0.05)):
        ref = [next(m for m in range(k + 1) if _binom_cdf(m, k, p) > a) for k in range(1, 31)]
        assert fair_mtable(30, p, a, adjust=False).tolist() == ref


def test_adjusted_alpha_by_enumerating_every_sequence():
    from torchfair.metrics import fair_adjusted_alpha
    k, p, alpha = 10, 0.5, 0.1
    ac = fair_adjusted_alpha(k, p, alpha)

    def fail_prob(a):
        m = fair_mtable(k, p, a, adjust=False).tolist()
        tot = 0.0
        for seq in itertools.product((0, 1), repeat=k):
            c, ok = 0, True
            for i, x in enumerate(seq):
                c += x
                ok &= c >= m[i]
            if not ok:
                tot += p ** sum(seq) * (1 - p) ** (k - sum(seq))
        return tot

    assert ac < alpha and fail_prob(ac) <= alpha + 1e-12
    assert fail_prob(min(alpha, ac * 1.05)) > alpha or fail_prob(alpha) <= alpha  # the largest such alpha_c


def _fair_loop(s, g, n, protected, m, K):
    """Zehlike et al., CIKM 2017, Algorithm 1, one list (ties: the earlier item in the stable score order)."""
    order = sorted(range(n), key=lambda i: (-s[i], i))
    P = [i for i in order if g[i] == protected]
    Q = [i for i in order if g[i] != protected]
    out, tp = [], 0
    for pos in range(n):
        need = pos < K and tp < m[pos]
        if P and (need or not Q or order.index(P[0]) < order.index(Q[0])):
            out.append(P.pop(0))
            tp += 1
        else:
            out.append(Q.pop(0))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_fa_ir_equals_algorithm_1(seed):
    gen = torch.Generator().manual_seed(seed)
    B, N = 5, 17
    s = torch.randint(0, 6, (B, N), generator=gen).float()  # ties
    g = torch.randint(-1, 2, (B, N), generator=gen)
    mask = torch.rand(B, N, generator=gen) < 0.85
    mask[:, 0] = True
    p, K = (0.3, 0.5, 0.6)[seed % 3], (None, 12)[seed % 2]
    out = fa_ir(s, g, p=p, alpha=0.1, k=K, mask=mask, num_groups=2)
    m = fair_mtable(K or N, p, 0.1).tolist()
    for b in range(B):
        idx = [i for i in range(N) if mask[b, i]]
        n = len(idx)
        ref = _fair_loop([float(s[b, i]) for i in idx], [int(g[b, i]) for i in idx], n, 1, m, K or N)
        got = out.ranking[b, :n].tolist()
        if out.one_group[b]:
            continue
        assert got == [idx[i] for i in ref], b
        assert sorted(out.ranking[b, n:].tolist()) == [i for i in range(N) if not mask[b, i]]  # padding last
        if out.met[b]:
            assert bool(fair_test(out.scores[b][mask[b]], g[b][mask[b]], p=p, alpha=0.1, k=K or N,
                                  num_groups=2).passed)


def test_fa_ir_identity_when_the_ranking_already_passes():
    s = torch.arange(20, 0, -1).float()
    g = torch.tensor([1, 0] * 10)
    assert fa_ir(s, g, p=0.5).ranking.tolist() == list(range(20))


@pytest.mark.parametrize("seed", range(4))
def test_det_const_sort_prefix_minimums(seed):
    gen = torch.Generator().manual_seed(seed)
    G = 2 + seed % 3
    s, g = torch.randn(4, 30, generator=gen), torch.randint(0, G, (4, 30), generator=gen)
    dist = torch.rand(G, generator=gen)
    dist = (dist / dist.sum()).tolist()
    out = det_const_sort(s, g, distribution=dist, num_groups=G)
    assert out.met.all()
    for b in range(4):
        r = out.ranking[b].tolist()
        assert sorted(r) == list(range(30))
        for i in range(1, 31):
            for c in range(G):
                have = sum(int(g[b, j]) == c for j in r[:i])
                assert have >= min(math.floor(i * dist[c] + 1e-9), int((g[b] == c).sum()))


def test_epsilon_greedy_seeded_and_identity():
    s = torch.randn(3, 25)
    assert epsilon_greedy(s, epsilon=0.0).ranking.tolist() == torch.sort(s, -1, descending=True).indices.tolist()
    a, b = epsilon_greedy(s, epsilon=0.3, seed=4), epsilon_greedy(s, epsilon=0.3, seed=4)
    assert torch.equal(a.ranking, b.ranking)
    assert not torch.equal(a.ranking, epsilon_greedy(s, epsilon=0.3, seed=5).ranking)


def _dips_gap(s, r, g, **kw):
    return float(pairwise_gap(dips(s, r, g, num_groups=2, **kw))[0, 1].abs())


@pytest.mark.parametrize("seed", range(5))
def test_targeted_is_the_argmin_over_its_family_and_never_worse_than_all_permutations(seed):
    gen = torch.Generator().manual_seed(seed)
    N = 6
    s = torch.randn(N, generator=gen)
    g = torch.tensor([0, 0, 0, 1, 1, 1])[torch.randperm(N, generator=gen)]
    rel = torch.zeros(N)
    keep = seed % 3
    out = targeted_rerank(s, g, keep=keep, browsing="uniform", boosts=(0.5, 2.0, math.inf))
    got = _dips_gap(out.scores, rel, g, browsing="uniform")
    before = _dips_gap(s, rel, g, browsing="uniform")
    # the family by hand: z + beta * [g == c]
    z = (s - s.mean()) / s.std(unbiased=False)
    order = sorted(range(N), key=lambda i: (-float(s[i]), i))
    best = before
    for c in (0, 1):
        for beta in (0.5, 2.0, 1e9):
            rest = sorted(order[keep:], key=lambda i: (-(float(z[i]) + beta * (int(g[i]) == c)), order.index(i)))
            cand = order[:keep] + rest
            sc = torch.zeros(N)
            for pos, i in enumerate(cand):
                sc[i] = N - pos
            best = min(best, _dips_gap(sc, rel, g, browsing="uniform"))
    assert math.isclose(got, best, abs_tol=1e-6)
    assert out.ranking[:keep].tolist() == order[:keep]
    # every permutation keeping the top `keep`: the output is between the optimum and the input
    opt = before
    for perm in itertools.permutations(order[keep:]):
        sc = torch.zeros(N)
        for pos, i in enumerate(order[:keep] + list(perm)):
            sc[i] = N - pos
        opt = min(opt, _dips_gap(sc, rel, g, browsing="uniform"))
    assert opt - 1e-9 <= got <= before + 1e-9


def test_targeted_single_boost_is_group_first_within_each_group_in_score_order():
    # boosts=inf (one number, as in the spec "targeted:boosts=inf"): 1 + G candidates, each "group c first"
    gen = torch.Generator().manual_seed(3)
    s, g = torch.randn(4, 12, generator=gen), (torch.rand(4, 12, generator=gen) < 0.4).long()
    g[:, 0], g[:, 1] = 0, 1
    out = targeted_rerank(s, g, keep=2, boosts=math.inf, browsing="uniform")
    via_spec = get_reranker("targeted:keep=2,boosts=inf,browsing=uniform")(s, None, g)
    assert torch.equal(out.ranking, via_spec.ranking)
    for b in range(4):
        order = sorted(range(12), key=lambda i: (-float(s[b, i]), i))
        cands = [order]
        for c in (0, 1):
            rest = [i for i in order[2:] if int(g[b, i]) == c] + [i for i in order[2:] if int(g[b, i]) != c]
            cands.append(order[:2] + rest)
        vals = []
        for cand in cands:
            sc = torch.zeros(12)
            for pos, i in enumerate(cand):
                sc[i] = 12 - pos
            vals.append(_dips_gap(sc, torch.zeros(12), g[b], browsing="uniform"))
        best = min(range(3), key=lambda k: (vals[k] - 1e-9 * (k == 0), k))  # ties keep the input
        assert out.ranking[b].tolist() == cands[best] or math.isclose(
            _dips_gap(out.scores[b], torch.zeros(12), g[b], browsing="uniform"), vals[best], abs_tol=1e-9)


def test_targeted_utility_bound_holds():
    gen = torch.Generator().manual_seed(0)
    s, g = torch.randn(8, 40, generator=gen) * 3, (torch.rand(8, 40, generator=gen) < 0.3).long()
    out = targeted_rerank(s, g, max_utility_loss=0.02)
    for b in range(8):
        gains = torch.softmax(s[b], 0)
        disc = 1 / torch.log2(torch.arange(10).float() + 2)
        u0 = (gains[torch.sort(s[b], descending=True).indices[:10]] * disc).sum()
        u1 = (gains[out.ranking[b, :10]] * disc).sum()
        assert float(1 - u1 / u0) <= 0.02 + 1e-6
    assert (out.objective[1] <= out.objective[0] + 1e-12).all()


@pytest.mark.parametrize("spec", ["none", "fair:p=0.4", "detconstsort", "epsgreedy:epsilon=0.5,seed=1",
                                  "targeted:measure=exposure_misallocation,keep=1",
                                  "targeted:measure=pairwise_accuracy,relevance=scores", "targeted:measure=awrf"])
def test_every_reranker_permutes_real_items_keeps_padding_and_one_group_lists(spec):
    gen = torch.Generator().manual_seed(1)
    B, N = 6, 15
    s = torch.randn(B, N, generator=gen).half()
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[0] = 0  # a one-group list
    mask = torch.rand(B, N, generator=gen) < 0.8
    mask[:, :2] = True
    out = get_reranker(spec)(s, None, g, mask, num_groups=2)
    for b in range(B):
        n = int(mask[b].sum())
        assert sorted(out.ranking[b, :n].tolist()) == sorted(torch.nonzero(mask[b]).flatten().tolist())
        assert out.ranking[b, n:].tolist() == torch.nonzero(~mask[b]).flatten().tolist()
        redo = torch.sort(torch.where(mask[b], out.scores[b], torch.tensor(-1.0)), descending=True, stable=True)
        assert redo.indices[:n].tolist() == out.ranking[b, :n].tolist()
    if spec != "none" and not spec.startswith("epsgreedy"):
        assert bool(out.one_group[0])
        start = torch.sort(torch.where(mask[0], s[0].float(), torch.tensor(-1e9)), descending=True, stable=True)
        assert out.ranking[0].tolist() == start.indices.tolist()
    one = get_reranker(spec)(s[1].float(), None, g[1], num_groups=2)
    assert one.ranking.dim() == 1


@pytest.mark.parametrize("call, arg", [
    (lambda: get_reranker("nope"), "spec"),
    (lambda: get_reranker("fair:q=1"), "spec"),
    (lambda: fa_ir(torch.randn(5), torch.tensor([0, 1, 0, 1, 0]), k=6), "k"),
    (lambda: fa_ir(torch.randn(5), torch.tensor([0, 1, 0, 1, 0]), p=1.0), "p"),
    (lambda: fa_ir(torch.randn(5), torch.tensor([0, 1, 0, 1, 0]), p=0.0), "p"),
    (lambda: fa_ir(torch.randn(5), torch.tensor([0, 1, 0, 1, 0]), alpha=1.5), "alpha"),
    (lambda: fa_ir(torch.randn(5), torch.tensor([0, 1, 0, 1, 0]), protected=2, num_groups=2), "protected"),
    (lambda: fa_ir(torch.randn(5), torch.rand(5, 2)), "groups"),
    (lambda: det_const_sort(torch.randn(4), torch.tensor([0, 1, 0, 1]), distribution=[0.5, 0.6]), "distribution"),
    (lambda: det_const_sort(torch.randn(4), torch.tensor([0, 1, 0, 1]), distribution={5: 1.0}), "distribution"),
    (lambda: det_const_sort(torch.randn(4), torch.tensor([0, 1, 0, 1]), k=9), "k"),
    (lambda: epsilon_greedy(torch.randn(4), epsilon=1.5), "epsilon"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), keep=-1), "keep"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=(0.0,)), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=True), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=(1.0, True)), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=float("nan")), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts="inf"), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), measure="ndcg"), "measure"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


def test_registry_round_trip_and_listing():
    for spec in ("fair:p=0.4,alpha=0.05", "detconstsort:distribution=0.3/0.7,k=10", "epsgreedy:epsilon=0.1,seed=2",
                 "targeted:measure=dips,keep=10,relevance=top:10,tie_weight=0.5", "targeted:boosts=1/inf"):
        assert get_reranker(get_reranker(spec).spec).spec == get_reranker(spec).spec
    assert parse_spec("targeted:relevance=top:10,keep=3") == ("targeted", {"relevance": "top:10", "keep": 3})
    assert [x[0] for x in list_rerankers()] == list(RERANKERS)


def test_det_const_sort_identity_when_the_start_order_meets_every_prefix_minimum():
    """A ranking whose every prefix k already holds floor(p_c k) items of each group c is returned unchanged."""
    gen = torch.Generator().manual_seed(7)
    seen = 0
    for _ in range(300):
        N = int(torch.randint(2, 15, (), generator=gen))
        s = torch.randn(N, generator=gen)
        q = float(torch.rand((), generator=gen)) * 0.6 + 0.2
        order = torch.argsort(s, descending=True, stable=True)
        seq = []
        for k in range(1, N + 1):  # a group sequence that meets the minimums, free choices at random
            need = [c for c in range(2) if seq.count(c) < math.floor((q, 1 - q)[c] * k)]
            seq.append(need[0] if need else int(torch.randint(0, 2, (), generator=gen)))
        if len(set(seq)) < 2:
            continue
        g = torch.empty(N, dtype=torch.long)
        g[order] = torch.tensor(seq)
        out = det_const_sort(s, g, distribution=torch.tensor([q, 1 - q]), num_groups=2)
        assert out.ranking.tolist() == order.tolist() and bool(out.met)
        seen += 1
    assert seen > 200
