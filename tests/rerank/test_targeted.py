"""torchfair.rerank.targeted: the measure-targeted re-ranker -- the exact argmin over its candidate family
(enumerated in tests/references/rerank_reference.py with objectives from the plain-loop measures), never worse
than the input and never better than the optimum over all permutations, the utility bound, ties, soft
membership, ``estimate_relevance``; guards on other fairness measures (the brute-force guarded argmin, the guard
holding on every list, the undefined-list rule, the spec forms); bad input."""
import itertools
import math

import pytest
import torch

import exposure_reference as eref
import reference as pref
import rerank_reference as R
from torchfair.metrics import accuracy_gaps, dips, pairwise_accuracy, pairwise_gap
from torchfair.rerank import Guard, estimate_relevance, get_reranker, parse_guards, targeted_rerank
from torchfair.rerank.targeted import DEFAULT_BOOSTS


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


def _memb(groups, G):
    return pref.membership_from_ids(groups, G)


def _objective(measure, rel, groups, G, *, browsing, tie_weight=0.5):
    """The targeted objective of a ranking (list of local indices), from the plain-loop measures: DIPS ->
    max_{g != h} |M_gh - M_hg| (Fabris et al., WSDM 2023, eq. 7-11); exposure misallocation -> sum_g |delta_g|
    (eq. 12-16, target "ee"); pairwise accuracy -> |A_01 - A_10| (Raj & Ekstrand, SIGIR 2022, §2.5: InterAcc);
    AWRF -> sum_g |eps_g - 1/G| (equal target); over the groups present; 0 where undefined."""
    present = [g for g in range(G) if g in groups]
    F = {"uniform": pref.ref_uniform(), "rbp:0.9": pref.ref_rbp(0.9), "geometric:0.5": pref.ref_geometric(0.5),
         "rbp:0.5": pref.ref_rbp(0.5)}[browsing]

    def obj(ranking):
        if measure == "dips":
            M, V = pref.dips(ranking, rel, _memb(groups, G), F, tie_weight)
            gaps = [abs(M[a][b] - M[b][a]) for a in range(G) for b in range(G) if a != b and V[a][b] and V[b][a]]
            return max(gaps) if gaps else 0.0
        if measure == "pairwise_accuracy":
            A, V = pref.pairwise_accuracy(ranking, rel, _memb(groups, G))
            return abs(A[0][1] - A[1][0]) if V[0][1] and V[1][0] else 0.0
        if measure == "exposure_misallocation":
            d = eref.misallocation([ranking], rel, groups, G, F.position, "ee")
            return 0.0 if d is None or len(present) < 2 else sum(abs(d[g]) for g in present)
        if measure == "awrf":
            d = eref.awrf([ranking], groups, G, F.position, [1.0 / G] * G, "nd")
            return 0.0 if d is None or len(present) < 2 else sum(d[g] for g in present)
        raise AssertionError(measure)
    return obj


TARGETED_CASES = [  # measure, relevance (None: "zeros"), browsing, G
    ("dips", None, "uniform", 2), ("dips", "tensor", "rbp:0.9", 2), ("dips", "tensor", "rbp:0.5", 3),
    ("exposure_misallocation", "tensor", "rbp:0.9", 2), ("exposure_misallocation", "tensor", "uniform", 3),
    ("pairwise_accuracy", "tensor", None, 2), ("awrf", None, "geometric:0.5", 2), ("awrf", None, "rbp:0.9", 3),
]


def _targeted_inputs(seed, N, G):
    gen = torch.Generator().manual_seed(1000 + seed)
    s = torch.randn(N, generator=gen).double()
    g = torch.randint(0, G, (N,), generator=gen)
    g[:G] = torch.arange(G)  # every group present
    g = g[torch.randperm(N, generator=gen)]
    rel = torch.randint(0, 3, (N,), generator=gen).double()
    return s, g, rel


@pytest.mark.parametrize("case", range(len(TARGETED_CASES)))
@pytest.mark.parametrize("seed", range(3))
def test_targeted_is_the_argmin_over_its_family(case, seed):
    measure, relevance, browsing, G = TARGETED_CASES[case]
    N = 5 + (seed + case) % 3  # 5..7
    s, g, rel = _targeted_inputs(seed + 10 * case, N, G)
    keep = (0, 1, 2)[seed]
    mul = (None, 0.05, 0.2)[(seed + case) % 3]
    boosts = DEFAULT_BOOSTS if seed != 1 else (0.3, 1.5, math.inf)
    kw = {} if measure == "pairwise_accuracy" else {"browsing": browsing}
    r_in = rel if relevance == "tensor" else "zeros"
    out = targeted_rerank(s, g, r_in, measure=measure, keep=keep, max_utility_loss=mul, boosts=boosts,
                          num_groups=G, **kw)
    r_ref = rel.tolist() if relevance == "tensor" else [0.0] * N
    obj = _objective(measure, r_ref, g.tolist(), G, browsing=browsing or "uniform")
    best, best_v, rows = R.argmin_candidate(s.tolist(), g.tolist(), G, boosts, keep, obj, max_utility_loss=mul)
    assert out.ranking.tolist() == best, rows
    assert math.isclose(float(out.objective[0]), rows[0][2], abs_tol=1e-9)  # before: the identity's objective
    assert math.isclose(float(out.objective[1]), best_v, abs_tol=1e-9)
    start = R.start_order(s.tolist())
    assert out.ranking[:keep].tolist() == start[:keep]
    if mul is not None:
        loss = 1 - R.estimated_utility(out.ranking.tolist(), s.tolist(), 10) / R.estimated_utility(start, s.tolist(), 10)
        assert loss <= mul + 1e-9
    for c in range(G):  # a boost moves a whole group: each group keeps its relative order
        assert [i for i in out.ranking.tolist() if g[i] == c] == [i for i in start if g[i] == c]


@pytest.mark.parametrize("mul", [0.0, 0.01, 0.03, 0.1])
def test_targeted_utility_bound_binds(mul):
    """A batch of lists with steep scores: the bound excludes some candidates; the output is the argmin over the
    allowed ones (the reference), and the estimated loss is within the bound."""
    gen = torch.Generator().manual_seed(int(mul * 1000))
    B, N, G = 12, 7, 2
    s = (torch.randn(B, N, generator=gen) * 1.5).double()
    g = torch.randint(0, G, (B, N), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    out = targeted_rerank(s, g, measure="dips", browsing="rbp:0.5", max_utility_loss=mul, utility_k=4, num_groups=G)
    excluded = 0
    for b in range(B):
        sb, gb = s[b].tolist(), g[b].tolist()
        obj = _objective("dips", [0.0] * N, gb, G, browsing="rbp:0.5")
        best, _, rows = R.argmin_candidate(sb, gb, G, DEFAULT_BOOSTS, 0, obj, max_utility_loss=mul, utility_k=4)
        assert out.ranking[b].tolist() == best, (b, rows)
        start = R.start_order(sb)
        loss = 1 - R.estimated_utility(best, sb, 4) / R.estimated_utility(start, sb, 4)
        assert loss <= mul + 1e-9
        excluded += sum(1 for r in rows if not r[3] and r[2] < rows[0][2] - 1e-9)
    assert excluded > 0  # the bound did bind (a better candidate was refused) somewhere in the batch


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_targeted_ties_go_to_the_smallest_boost_then_the_lowest_group(dtype):
    """Equally relevant items: the objective depends on the group sequence only, so candidates tie often; the
    first of least objective in the family's order wins (identity, then boosts ascending, groups ascending), for
    float32 scores too (objectives compared in float64).  Seeds 5, 10, 44, 45: two groups' boosts tie."""
    G, N = 3, 6
    tied = 0
    for seed in (0, 1, 5, 10, 44, 45):
        gen = torch.Generator().manual_seed(seed)
        s = torch.randn(N, generator=gen).double().to(dtype)
        g = torch.tensor([0, 1, 2, 0, 1, 2])[torch.randperm(N, generator=gen)]
        out = targeted_rerank(s, g, measure="exposure_misallocation", browsing="rbp:0.5", num_groups=G)
        obj = _objective("exposure_misallocation", [0.0] * N, g.tolist(), G, browsing="rbp:0.5")
        best, best_v, rows = R.argmin_candidate(s.double().tolist(), g.tolist(), G, DEFAULT_BOOSTS, 0, obj)
        assert out.ranking.tolist() == best, (seed, rows)
        tied += any(abs(r[2] - best_v) < 1e-9 and r[1] != best for r in rows)
    assert tied >= 4  # the rule was exercised: another ranking had the same least objective


@pytest.mark.parametrize("case", [0, 1, 3, 5, 6])
@pytest.mark.parametrize("seed", range(2))
def test_targeted_between_the_input_and_the_optimum_over_all_permutations(case, seed):
    measure, relevance, browsing, G = TARGETED_CASES[case]
    N = 6
    s, g, rel = _targeted_inputs(50 + seed + 10 * case, N, G)
    keep = seed
    kw = {} if measure == "pairwise_accuracy" else {"browsing": browsing}
    r_in = rel if relevance == "tensor" else "zeros"
    out = targeted_rerank(s, g, r_in, measure=measure, keep=keep, num_groups=G, **kw)
    r_ref = rel.tolist() if relevance == "tensor" else [0.0] * N
    obj = _objective(measure, r_ref, g.tolist(), G, browsing=browsing or "uniform")
    start = R.start_order(s.tolist())
    got, before = obj(out.ranking.tolist()), obj(start)
    opt = min(obj(start[:keep] + list(rest)) for rest in itertools.permutations(start[keep:]))
    assert opt - 1e-9 <= got <= before + 1e-9
    assert math.isclose(got, float(out.objective[1]), abs_tol=1e-9)


def test_targeted_worked_example_and_zero_objective_is_kept():
    # the docstring's example by hand: uniform browsing, all items equally relevant (DIPS -> exposure parity)
    s, g = torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1])
    out = targeted_rerank(s, g, keep=1, browsing="uniform")
    obj = _objective("dips", [0.0] * 6, g.tolist(), 2, browsing="uniform")
    assert math.isclose(float(out.objective[0]), obj(list(range(6))))
    assert math.isclose(float(out.objective[0]), 0.5)  # 9 tied pairs of B below A x c_t = 0.5 / C = 9
    assert math.isclose(float(out.objective[1]), obj(out.ranking.tolist()), rel_tol=1e-6)  # float32 scores
    # a list already at objective 0 (A B B A: each group has two tied items of the other above it) is kept
    s2, g2 = torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 1, 1, 0])
    assert _objective("dips", [0.0] * 4, g2.tolist(), 2, browsing="uniform")([0, 1, 2, 3]) == 0
    out2 = targeted_rerank(s2, g2, browsing="uniform")
    assert out2.ranking.tolist() == [0, 1, 2, 3] and float(out2.objective[1]) == 0.0


def test_targeted_soft_membership_one_hot_is_integer_ids():
    gen = torch.Generator().manual_seed(3)
    s, g = torch.randn(4, 9, generator=gen), torch.randint(0, 3, (4, 9), generator=gen)
    mask = torch.rand(4, 9, generator=gen) < 0.9
    mask[:, :2] = True
    for measure in ("dips", "exposure_misallocation", "awrf"):
        a = targeted_rerank(s, g, measure=measure, mask=mask, num_groups=3, keep=1)
        b = targeted_rerank(s, torch.nn.functional.one_hot(g, 3).double(), measure=measure, mask=mask, keep=1)
        assert torch.equal(a.ranking, b.ranking) and torch.allclose(a.objective, b.objective)


def test_estimate_relevance():
    s = torch.tensor([[0.3, 2.0, 1.0, 2.0], [1.0, -1.0, 0.0, 5.0]])
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    assert estimate_relevance(s, "top:2", mask=mask).tolist() == [[0, 1, 0, 1], [1, 0, 1, 0]]
    assert estimate_relevance(s, "zeros", mask=mask).tolist() == [[0] * 4] * 2
    assert torch.allclose(estimate_relevance(s, "scores", mask=mask),
                          torch.tensor([[0.0, 1.7, 0.7, 1.7], [2.0, 0.0, 1.0, 0.0]]))


_S, _G = torch.randn(5), torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("call, arg", [
    (lambda: targeted_rerank(_S, _G, keep=-1), "keep"),
    (lambda: targeted_rerank(_S, _G, boosts=(0.0,)), "boosts"),
    (lambda: targeted_rerank(_S, _G, boosts=()), "boosts"),
    (lambda: targeted_rerank(_S, _G, boosts=(-1.0, 2.0)), "boosts"),
    (lambda: targeted_rerank(_S, _G, boosts=("x",)), "boosts"),
    (lambda: targeted_rerank(_S, _G, boosts=(float("nan"),)), "boosts"),
    (lambda: targeted_rerank(_S, _G, max_utility_loss=-0.1), "max_utility_loss"),
    (lambda: targeted_rerank(_S, _G, utility_k=0), "utility_k"),
    (lambda: targeted_rerank(_S, _G, measure="ndcg"), "measure"),
    (lambda: targeted_rerank(_S, _G, relevance="top:0"), "relevance"),
    (lambda: targeted_rerank(_S, _G, relevance="best"), "relevance"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=True), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=(1.0, True)), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts=float("nan")), "boosts"),
    (lambda: targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), boosts="inf"), "boosts"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


# ------------------------------------------------------------------------------------------------ guards
# A guard (measure, tol) admits a candidate on a list only when the guard measure's per-list objective is at most
# before + tol |before| (before: the input ranking's value), on the guard relevance estimate; a list where the guard
# measure is undefined for the input is unconstrained.  The references below compute the guard measures with
# torchfair.metrics directly (pairwise_accuracy + accuracy_gaps) or with the plain loops, never through the
# re-ranker's transformation.


def _ranking_scores(ranking, N):
    sc = torch.zeros(N, dtype=torch.float64)
    for pos, i in enumerate(ranking):
        sc[i] = N - pos
    return sc


def _inter_gap(ranking, rel, groups):
    """|InterAcc| = |A_01 - A_10| of a ranking (list of indices) from torchfair.metrics; None where undefined."""
    N = len(ranking)
    A, V = pairwise_accuracy(_ranking_scores(ranking, N), torch.as_tensor(rel, dtype=torch.float64),
                             torch.as_tensor(groups), num_groups=2, return_valid=True)
    (inter, ok), _ = accuracy_gaps(A, valid=V)
    return abs(float(inter)) if bool(ok) else None


def _top_m(scores, m):
    start = R.start_order(scores)
    return [1.0 if start.index(i) < m else 0.0 for i in range(len(scores))]


def _guarded_argmin(scores, groups, G, boosts, keep, objective, guards, max_utility_loss=None, utility_k=10):
    """Brute force over the family: the first candidate of least objective among those within the utility bound
    and every guard ``(value(ranking) -> float or None, tol)``.  Returns (ranking, objective, guard values before
    and after, number of candidates with a lower objective refused by a guard)."""
    start = R.start_order(scores)
    u0 = R.estimated_utility(start, scores, utility_k)
    before = [fn(start) for fn, _ in guards]
    best_r, best_v, refused = None, math.inf, 0
    v0 = objective(start)
    for name, r in R.candidates(scores, groups, G, boosts, keep):
        v = objective(r)
        ok = name[0] == "identity" or max_utility_loss is None or \
            1.0 - R.estimated_utility(r, scores, utility_k) / u0 <= max_utility_loss + 1e-12
        guarded = all(b0 is None or (fn(r) is not None and fn(r) <= b0 + tol * abs(b0) + 1e-9)
                      for (fn, tol), b0 in zip(guards, before))
        refused += ok and not guarded and v < v0 - 1e-9
        if ok and guarded and v < best_v - 1e-9:
            best_r, best_v = r, v
    return best_r, best_v, before, [fn(best_r) for fn, _ in guards], refused


@pytest.mark.parametrize("how", ["top:3", "tensor", "two"])
def test_guarded_targeted_is_the_brute_force_guarded_argmin(how):
    """DIPS (zeros relevance) guarded by the pairwise accuracy gap (and, for "two", exposure misallocation too, with
    the objective's browsing): the output is the brute-force argmin over the admissible candidates on every list;
    ``guard`` holds the guard values before and after, ``met`` is True; the guard did refuse a better candidate."""
    B, N, G = 10, 7, 2
    gen = torch.Generator().manual_seed({"top:3": 0, "tensor": 1, "two": 2}[how])
    s = (torch.randn(B, N, generator=gen) * 1.5).double()
    g = torch.randint(0, G, (B, N), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    rel = torch.randint(0, 3, (B, N), generator=gen).double()
    keep, mul, tol = {"top:3": (0, None, 0.1), "tensor": (1, 0.2, 0.1), "two": (0, None, 0.25)}[how]
    guard = {"top:3": "pairwise_gap:0.1", "tensor": [("pairwise_accuracy", tol)],
             "two": f"pairwise_gap:{tol}+exposure_misallocation:0.5"}[how]
    out = targeted_rerank(s, g, measure="dips", browsing="rbp:0.5", keep=keep, max_utility_loss=mul, num_groups=G,
                          guard=guard, guard_relevance="top:3" if how == "top:3" else rel)
    assert out.guard.shape == (2, B, 2 if how == "two" else 1) and bool(out.met.all())
    refused = 0
    for b in range(B):
        sb, gb = s[b].tolist(), g[b].tolist()
        grel = _top_m(sb, 3) if how == "top:3" else rel[b].tolist()
        obj = _objective("dips", [0.0] * N, gb, G, browsing="rbp:0.5")
        guards = [(lambda r, grel=grel, gb=gb: _inter_gap(r, grel, gb), tol)]
        if how == "two":
            mis = _objective("exposure_misallocation", grel, gb, G, browsing="rbp:0.5")
            guards.append((mis, 0.5))
        best, best_v, before, after, n = _guarded_argmin(sb, gb, G, DEFAULT_BOOSTS, keep, obj, guards,
                                                         max_utility_loss=mul)
        assert out.ranking[b].tolist() == best, b
        assert math.isclose(float(out.objective[1, b]), best_v, abs_tol=1e-9)
        for k, (b0, a0) in enumerate(zip(before, after)):
            for got, want in ((out.guard[0, b, k], b0), (out.guard[1, b, k], a0)):
                assert (want is None and bool(torch.isnan(got))) or math.isclose(float(got), want, abs_tol=1e-9)
        refused += n
    assert refused > 0  # the guard did bind: a candidate with a lower objective was refused


@pytest.mark.parametrize("guard_relevance", ["top:5", "oracle"])
def test_guard_holds_on_every_list_of_a_random_batch(guard_relevance):
    """The guard measure after <= (1 + tol) x before on every list where it is defined for the input (computed with
    torchfair.metrics on the output's scores); without the guard it is broken on some list."""
    gen = torch.Generator().manual_seed(7)
    B, N, tol = 48, 20, 0.1
    s = torch.randn(B, N, generator=gen)
    g = (torch.rand(B, N, generator=gen) < 0.35).long()
    g[:, 0], g[:, 1] = 0, 1
    rel = torch.randint(0, 3, (B, N), generator=gen).float()
    mask = torch.rand(B, N, generator=gen) < 0.9
    mask[:, :2] = True
    grel = rel if guard_relevance == "oracle" else estimate_relevance(s, guard_relevance, mask=mask)

    def gap(scores):
        A, V = pairwise_accuracy(scores.double(), grel.double(), g, num_groups=2, mask=mask, return_valid=True)
        (inter, ok), _ = accuracy_gaps(A, valid=V)
        return inter.abs(), ok

    before, defined = gap(s)
    assert int(defined.sum()) >= B // 2
    free = targeted_rerank(s, g, keep=1, mask=mask)
    guarded = targeted_rerank(s, g, keep=1, mask=mask, guard=f"pairwise_gap:{tol}", guard_relevance=grel)
    after_free, _ = gap(free.scores)
    after, ok = gap(guarded.scores)
    bound = before * (1 + tol) + 1e-9
    assert bool((~defined | (ok & (after <= bound))).all())
    assert bool((defined & (after_free > bound)).any())  # unguarded, the gap grows past the bound somewhere
    assert bool(guarded.met.all())
    assert torch.allclose(guarded.guard[0][defined, 0], before[defined].double())
    assert bool(torch.isnan(guarded.guard[0][~defined, 0]).all())
    # the objective still never increases, and some list still improves
    assert bool((guarded.objective[1] <= guarded.objective[0] + 1e-12).all())
    assert bool((guarded.objective[1] < guarded.objective[0] - 1e-6).any())


@pytest.mark.parametrize("example", ["oracle", "top:3"])
def test_guard_stops_the_pairwise_gap_from_worsening(example):
    """Head group 0 on top; the DIPS-targeted re-rank moves tail items (group 1) up past relevant head items: the
    inter-group pairwise accuracy gap worsens by more than 10 %.  With ``guard="pairwise_gap:0.1"`` it does not
    (``"oracle"``: the guard sees the true relevance; ``"top:3"``: the true relevant items are the ranker's top 3)."""
    s = torch.arange(10, 0, -1).float()
    if example == "oracle":
        g = torch.tensor([0, 0, 1, 0, 1, 0, 1, 1, 1, 1])
        rel = torch.tensor([1., 1., 1., 0., 0., 1., 0., 0., 0., 0.])
        grel = rel
    else:
        g = torch.tensor([0, 0, 1, 0, 0, 0, 1, 1, 1, 1])
        rel = torch.tensor([1., 1., 1., 0., 0., 0., 0., 0., 0., 0.])
        grel = "top:3"

    def gap(ranking):
        return _inter_gap(ranking, rel.tolist(), g.tolist())

    before = gap(list(range(10)))
    free = targeted_rerank(s, g, keep=1)
    guarded = targeted_rerank(s, g, keep=1, guard="pairwise_gap:0.1", guard_relevance=grel)
    assert gap(free.ranking.tolist()) > 1.1 * before + 1e-6
    assert gap(guarded.ranking.tolist()) <= 1.1 * before + 1e-9
    assert float(guarded.objective[1]) <= float(guarded.objective[0])
    if example == "top:3":  # a smaller boost is still admissible: DIPS goes down without touching the gap
        assert float(guarded.objective[1]) < float(guarded.objective[0]) - 0.1
        assert guarded.guard.shape == (2, 1) and guarded.guard.tolist() == [[0.0], [0.0]]
    via_spec = get_reranker("targeted:keep=1,guard=pairwise_gap:0.1" + (",guard_relevance=top:3" if
                                                                         example == "top:3" else ""))
    if example == "top:3":
        assert torch.equal(via_spec(s, rel, g).ranking, guarded.ranking)  # the spec never sees `rel`


def test_guard_undefined_for_the_input_is_unconstrained_and_the_default_estimate():
    """With guard relevance "zeros" pairwise accuracy has no pair with r_i > r_j: undefined on every list, the
    guard never binds (the output is the unguarded one) and ``guard`` is NaN.  The default estimate is "top:10"."""
    gen = torch.Generator().manual_seed(4)
    s, g = torch.randn(6, 16, generator=gen), torch.randint(0, 2, (6, 16), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    free = targeted_rerank(s, g, keep=1)
    vacuous = targeted_rerank(s, g, keep=1, guard="pairwise_gap:0", guard_relevance="zeros")
    assert torch.equal(free.ranking, vacuous.ranking) and bool(torch.isnan(vacuous.guard).all())
    default = targeted_rerank(s, g, keep=1, guard="pairwise_gap:0")
    top10 = targeted_rerank(s, g, keep=1, guard="pairwise_gap:0", guard_relevance="top:10")
    assert torch.equal(default.ranking, top10.ranking)
    assert torch.equal(default.guard.nan_to_num(-1.0), top10.guard.nan_to_num(-1.0))
    # the forms of `guard` agree; the alias is pairwise_accuracy with its declared (inter) reducer
    a = targeted_rerank(s, g, keep=1, guard="pairwise_gap:0.1+exposure_misallocation:0.2")
    for form in (["pairwise_accuracy:0.1", "exposure_misallocation:0.2"],
                 [("pairwise_accuracy", 0.1, {"reducer": "inter"}), Guard("exposure_misallocation", 0.2)],
                 "pairwise_accuracy:0.1 + exposure_misallocation:0.2"):
        other = targeted_rerank(s, g, keep=1, guard=form)
        assert torch.equal(a.ranking, other.ranking) and torch.equal(a.guard.nan_to_num(-1), other.guard.nan_to_num(-1))
    one = targeted_rerank(s[0], g[0], keep=1, guard=("pairwise_gap", 0.1))
    assert one.guard.shape == (2, 1) and one.objective.shape == (2,)
    assert parse_guards(None) == () and parse_guards("none") == ()
    assert [x.spec for x in parse_guards("pairwise_gap:0.1+dips:0")] == ["pairwise_accuracy:0.1", "dips:0.0"]


_BAD_GUARDS = ["nope:0.1", "pairwise_gap", "pairwise_gap:x", "pairwise_gap:-0.1", "pairwise_gap:nan",
               "pairwise_gap:inf", "ndcg:0.1", "pairwise_gap:0.1+", "dips:0.1+ndkl", 0.1, ("dips", True),
               ("dips", "0.1x"), ("rank_parity", 0.1), ("dips", 0.1, {"reducer": "l1"}),
               ("dips", 0.1, {"reducer": "nope"}), ("dips", 0.1, {"bogus": 1}), [("kendall_tau", 0.0)]]


@pytest.mark.parametrize("bad", _BAD_GUARDS)
def test_bad_guards_name_guard(bad):
    """An unknown measure, a tolerance that is not a number >= 0, a non-fairness measure, a measure without a loss
    reducer (and none given), a wrong reducer or option: ``ValueError`` naming ``guard``, directly and in a spec."""
    with pytest.raises(ValueError, match="`guard`"):
        targeted_rerank(_S, _G, guard=bad)
    with pytest.raises(ValueError, match="`guard`"):
        parse_guards(bad)
    if isinstance(bad, str):
        with pytest.raises(ValueError, match="`guard`"):
            get_reranker(f"targeted:measure=dips,guard={bad}")


def test_bad_guard_relevance_and_guard_options_at_evaluation():
    with pytest.raises(ValueError, match="`guard_relevance`"):
        targeted_rerank(_S, _G, guard="pairwise_gap:0.1", guard_relevance="top:0")
    with pytest.raises(ValueError, match="`guard_relevance`"):
        targeted_rerank(_S, _G, guard="pairwise_gap:0.1", guard_relevance=torch.zeros(4))
    with pytest.raises(ValueError, match="`guard_relevance`"):
        get_reranker("targeted:guard=pairwise_gap:0.1,guard_relevance=best")
    with pytest.raises(ValueError, match="`guard`"):  # an option value the guard measure refuses
        targeted_rerank(_S, _G, guard=[("exposure_misallocation", 0.1, {"browsing": "nope"})])


def test_keep_longer_than_a_list_is_clamped_to_it():
    # a fixed top longer than the list fixes all of it (as `k` of FA*IR / DetConstSort is clamped), so the README's
    # `keep=9` spec runs on lists shorter than 9
    s, g = torch.tensor([1., 5., 3., 2., 4.]), torch.tensor([0, 1, 0, 1, 0])
    out = targeted_rerank(s, g, keep=6, browsing="uniform")
    assert out.ranking.tolist() == [1, 4, 2, 3, 0]
    guarded = get_reranker("targeted:measure=dips,keep=9,guard=pairwise_gap:0.1")(s[None], None, g[None])
    assert guarded.ranking.tolist() == [[1, 4, 2, 3, 0]]


# ------------------------------------------------------------------- a measure's default group id, absent
def test_a_default_protected_group_absent_from_the_batch_leaves_the_list_unchanged():
    # rkl's default protected group is 1: on a one-group batch it is undefined (as measure_loss says), the same
    # as protected=1 given explicitly
    from torchfair.losses import measure_loss

    s = torch.tensor([[0.3, 2.0, -1.0, 0.7, 1.5, 0.0]])
    z = torch.zeros(1, 6, dtype=torch.long)
    implied = targeted_rerank(s, z, measure="rkl")
    explicit = targeted_rerank(s, z, measure="rkl", protected=1)
    assert implied.ranking.tolist() == explicit.ranking.tolist() == [[1, 4, 3, 0, 5, 2]]  # by score
    assert implied.objective.tolist() == explicit.objective.tolist() == [[0.0], [0.0]]
    assert measure_loss("rkl", s, groups=z, reduction="none").tolist() == [0.0]


# --------------------------------------------------------------------------------- guards and group ids
def _awrf_per_list(scores, groups, protected):
    from torchfair.metrics import awrf
    return awrf(scores, groups, protected=protected)


@pytest.mark.parametrize("how", ["the-re-rank's-protected", "the-guard's-own"])
def test_an_awrf_guard_takes_a_protected_group(how):
    g = torch.Generator().manual_seed(3)
    s = torch.randn(4, 8, generator=g)
    grp = torch.randint(0, 2, (4, 8), generator=g)
    grp[:, 0], grp[:, 1] = 0, 1
    if how == "the-re-rank's-protected":
        out = targeted_rerank(s, grp, measure="dips", protected=1, guard="awrf:0.05")
    else:
        out = targeted_rerank(s, grp, measure="dips", guard=("awrf", 0.05, {"protected": 1}))
    # the guard held on every list: the served order's AWRF distance (protected 1, one value per list, the exact
    # measure) is within 5 % of the start's
    served = torch.empty_like(s)
    served.scatter_(-1, out.ranking, torch.arange(8, 0, -1, dtype=s.dtype).expand(4, 8))
    before, after = _awrf_per_list(s, grp, 1), _awrf_per_list(served, grp, 1)
    assert before.shape == (4,)
    assert (after <= before + 0.05 * before.abs() + 1e-9).all()


def test_a_guard_group_id_is_checked():
    with pytest.raises(ValueError, match="`guard`.*`protected` must be an int group id"):
        parse_guards([("awrf", 0.1, {"protected": -1})])
