"""Exposure family vs plain-Python references (tests/references/exposure_reference.py), expeval numbers, EE identity."""
from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

import exposure_reference as ref
from torchfair.browsing import RBP, Cascade, Logarithmic, ReciprocalRank, Uniform
from torchfair.compat.expeval import expeval, rankings_from_ranks
from torchfair.metrics.exposure import (awrf, dp, eur, exp_rr, expected_exposure, exposure_misallocation, iaa,
                                        ideal_exposure, individual_misallocation, log_dp, log_eur, log_rur,
                                        misallocation_norm, rur)
from torchfair.orderings import Hard, scores_from_ranking
from torchfair.orderings.stochastic import DoublyStochastic, Sampled

D = torch.float64
MODELS = [(RBP(0.8), lambda k: 0.8 ** k), (Logarithmic(), lambda k: 1 / math.log2(k + 2)),
          (Uniform(), lambda k: 1.0)]


def _case(rng: random.Random, n=None, G=None, unknown=True, S=None):
    n = n or rng.randint(1, 6)
    G = G or rng.randint(1, 3)
    groups = [rng.choice(list(range(G)) + ([-1] if unknown else [])) for _ in range(n)]
    rel = [float(rng.randint(0, 3)) for _ in range(n)]
    S = S or rng.randint(1, 3)
    rankings = [rng.sample(range(n), n) for _ in range(S)]
    return n, G, groups, rel, rankings


def _t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


def _close(got, want, valid=None, atol=1e-9):
    if want is None:
        assert valid is not None and not bool(valid)
        assert float(got) == 0.0
        return
    if valid is not None:
        assert bool(valid)
    assert abs(float(got) - want) < atol, (float(got), want)


def _orderings(rankings):
    """Hard on the first ranking when there is one, Sampled always."""
    rk = torch.tensor(rankings)
    out = [("sampled", None, Sampled(rk)), ("sampled-placeholder", torch.zeros(rk.shape[1], dtype=D), Sampled(rk))]
    if len(rankings) == 1:
        out.append(("hard", scores_from_ranking(rk[0]).to(D), Hard()))
    return out


# ------------------------------------------------------------------------------------------- misallocation
@pytest.mark.parametrize("target", ["ee", "ea", "ea-dp"])
@pytest.mark.parametrize("mi", range(len(MODELS)))
def test_misallocation_vs_reference(target, mi):
    F, f = MODELS[mi]
    rng = random.Random(hash((target, mi)) % 1000)
    for _ in range(15):
        n, G, groups, rel, rankings = _case(rng)
        want = ref.misallocation(rankings, rel, groups, G, f, target)
        for name, scores, ordering in _orderings(rankings):
            delta, valid = exposure_misallocation(scores, _t(rel), torch.tensor(groups), target=target, browsing=F,
                                                  num_groups=G, ordering=ordering, return_valid=True)
            assert delta.shape == (G,)
            for g in range(G):
                _close(delta[g], None if want is None else want[g], valid[g])


def test_misallocation_cascade_ee():
    F = Cascade(0.9, max_grade=3.0)
    rel = [3., 0., 1., 1., 2.]
    groups = [0, 1, 0, 1, -1]
    ranking = [1, 2, 0, 4, 3]

    def exposures(order):  # cascade along a ranking: gamma^k prod (1 - phi(r))
        e, surv = {}, 1.0
        for k, i in enumerate(order):
            e[i] = 0.9 ** k * surv
            surv *= 1 - (2 ** rel[i] - 1) / 8
        return e

    e = exposures(ranking)
    ideal = sorted(range(5), key=lambda i: -rel[i])
    te = exposures(ideal)  # ties (items 2, 3) share the mean
    te[2] = te[3] = (te[2] + te[3]) / 2
    T = ref.group_sum([te[i] for i in range(5)], groups, 2)
    E = ref.group_sum([e[i] for i in range(5)], groups, 2)
    want = [T[g] / sum(te.values()) - E[g] / sum(e.values()) for g in range(2)]
    got = exposure_misallocation(scores_from_ranking(torch.tensor(ranking)).to(D), _t(rel), torch.tensor(groups),
                                 browsing=F)
    torch.testing.assert_close(got, _t(want))


def test_misallocation_norm_and_sign():
    delta = exposure_misallocation(_t([1., 2., 3., 4.]), _t([1., 1., 0., 0.]), torch.tensor([0, 0, 1, 1]),
                                   target="ea", browsing="uniform")
    torch.testing.assert_close(delta, _t([0.5, -0.5]))
    assert float(misallocation_norm(delta)) == 1.0
    torch.testing.assert_close(misallocation_norm(delta, p=2), torch.tensor(math.sqrt(0.5), dtype=D))


def test_misallocation_undefined_ea():
    delta, valid = exposure_misallocation(_t([1., 2.]), _t([0., 0.]), torch.tensor([0, 1]), target="ea",
                                          return_valid=True)
    assert not valid.any() and (delta == 0).all() and not torch.isnan(delta).any()


def test_individual_misallocation_vs_reference():
    rng = random.Random(4)
    for _ in range(20):
        n, G, groups, rel, rankings = _case(rng)
        for F, f in MODELS:
            got, valid = individual_misallocation(None, _t(rel), browsing=F, ordering=Sampled(torch.tensor(rankings)),
                                                  return_valid=True)
            if sum(rel) == 0:
                assert not bool(valid) and (got == 0).all()
                continue
            torch.testing.assert_close(got, _t(ref.individual_misallocation_ea(rankings, rel, f)))


def test_individual_misallocation_group_sum_is_unnormalised_delta():
    # summing M_i over a group gives (T_g/T - E_g/E) * E (ea target, all items known)
    rel, groups, ranking = [2., 1., 0., 3.], [0, 1, 1, 0], [2, 0, 3, 1]
    sc = scores_from_ranking(torch.tensor(ranking)).to(D)
    M = individual_misallocation(sc, _t(rel), browsing=RBP(0.7))
    delta = exposure_misallocation(sc, _t(rel), torch.tensor(groups), target="ea", browsing=RBP(0.7))
    E = sum(0.7 ** k for k in range(4))
    torch.testing.assert_close(torch.stack([M[[0, 3]].sum(), M[[1, 2]].sum()]), delta * E)


# ------------------------------------------------------------------------------------------ expected exposure
def test_ideal_exposure_ties():
    torch.testing.assert_close(ideal_exposure(_t([1., 0., 1., 0.]), browsing=RBP(0.5)),
                               _t([0.75, 0.1875, 0.75, 0.1875]))
    rng = random.Random(8)
    for _ in range(10):
        n, G, groups, rel, rankings = _case(rng)
        torch.testing.assert_close(ideal_exposure(_t(rel), browsing=RBP(0.8)), _t(ref.ideal_targets(rel, MODELS[0][1])))


@pytest.mark.parametrize("grouped", [False, True])
def test_expected_exposure_vs_reference_and_identity(grouped):
    rng = random.Random(11 + grouped)
    for _ in range(20):
        n, G, groups, rel, rankings = _case(rng)
        for F, f in MODELS:
            L, Dd, Rr = ref.expected_exposure(rankings, rel, f, groups if grouped else None, G)
            for name, scores, ordering in _orderings(rankings):
                ee = expected_exposure(scores, _t(rel), torch.tensor(groups) if grouped else None, browsing=F,
                                       num_groups=G if grouped else None, ordering=ordering)
                _close(ee.loss, L)
                _close(ee.disparity, Dd)
                _close(ee.relevance, Rr)
                torch.testing.assert_close(ee.loss, ee.disparity - 2 * ee.relevance + ee.target_norm)


def test_expected_exposure_ideal_policy_is_zero_and_uniform_random():
    rel = _t([2., 1., 1., 0.])
    # all rankings that sort by relevance (ties either way), equally likely -> EE-L = 0
    rk = torch.tensor([[0, 1, 2, 3], [0, 2, 1, 3]])
    ee = expected_exposure(None, rel, browsing=RBP(0.5), ordering=Sampled(rk))
    assert float(ee.loss) < 1e-12
    # uniform random policy: every item gets the mean exposure
    perms = torch.tensor(list(itertools.permutations(range(4))))
    ee = expected_exposure(None, rel, browsing=RBP(0.5), ordering=Sampled(perms))
    m = sum(0.5 ** k for k in range(4)) / 4
    torch.testing.assert_close(ee.disparity, torch.tensor(4 * m * m, dtype=D))


def test_expected_exposure_batch_reduction():
    rel = _t([[1., 0., 0.], [0., 1., 1.]])
    sc = _t([[3., 2., 1.], [3., 2., 1.]])
    per = expected_exposure(sc, rel, browsing=RBP(0.5))
    mean = expected_exposure(sc, rel, browsing=RBP(0.5), reduction="mean")
    torch.testing.assert_close(mean.loss, per.loss.mean())


# ------------------------------------------------------------------------------------------------- expeval
QRELS_REL = torch.tensor([1., 1., 0., 0.])  # d1 d2 d3 d4
QRELS_GRP = torch.tensor([0, 1, 0, 1])


@pytest.mark.parametrize("ranks, want", [
    (torch.tensor([1, 2, 3, 4]), (1.328125, 1.195312, 0.132812)),  # run d1 d2 d3 d4
    (torch.tensor([3, 4, 1, 2]), (1.328125, 0.5625, 1.398438)),    # run d3 d4 d1 d2
])
def test_expeval_reference_numbers(ranks, want):
    ee = expeval(ranks, QRELS_REL, patience=0.5, user_model="rbp")  # expeval -C -U -u rbp
    got = (float(ee.disparity), float(ee.relevance), float(ee.loss))
    assert [round(x, 6) for x in got] == list(want)
    # the same through the core measure: 0-based RBP p**k on the run's order
    core = expected_exposure(None, QRELS_REL, browsing=RBP(0.5),
                             ordering=Sampled(rankings_from_ranks(ranks)[None]))
    assert [round(float(x), 6) for x in (core.disparity, core.relevance, core.loss)] == list(want)


def test_expeval_group_mode_is_not_the_reference_numbers():
    # group vectors give other values: the reference numbers are document-level.  expeval -G sums the relevant
    # documents without -C (complete=False), all documents with -C (complete=True, the default)
    ee_rel = expeval(torch.tensor([1, 2, 3, 4]), QRELS_REL, QRELS_GRP, patience=0.5, user_model="rbp",
                     complete=False)
    ee_all = expeval(torch.tensor([1, 2, 3, 4]), QRELS_REL, QRELS_GRP, patience=0.5, user_model="rbp")
    assert float(ee_rel.disparity) == 1.25   # relevant docs only: (1, 0.5)
    assert float(ee_all.disparity) == 1.953125  # all docs: (1.25, 0.625)
    torch.testing.assert_close(ee_rel.relevance, torch.tensor(0.75 * 1.0 + 0.75 * 0.5, dtype=D))


def test_expeval_samples_batch_and_gerr():
    ranks = torch.tensor([[1, 2, 3, 4], [3, 4, 1, 2]])  # two sampled rankings of one query
    ee = expeval(ranks, QRELS_REL, patience=0.5, user_model="rbp")
    e = [(1 + 0.25) / 2, (0.5 + 0.125) / 2, (0.25 + 1) / 2, (0.125 + 0.5) / 2]
    torch.testing.assert_close(ee.disparity, torch.tensor(sum(x * x for x in e), dtype=D))
    # batch of two queries
    eb = expeval(ranks, torch.stack([QRELS_REL, QRELS_REL]), patience=0.5, user_model="rbp")
    assert eb.loss.shape == (2,)
    torch.testing.assert_close(eb.loss[1], torch.tensor(1.3984375, dtype=D))
    # gerr: p**i (1-u)**(#relevant above)
    g = expeval(torch.tensor([1, 2, 3, 4]), QRELS_REL, patience=0.5, user_model="gerr", utility=0.5)
    e = [1.0, 0.5 * 0.5, 0.25 * 0.25, 0.125 * 0.25]
    torch.testing.assert_close(g.disparity, torch.tensor(sum(x * x for x in e), dtype=D))
    pp = 0.25  # target of the relevant grade: (1 + pp) / 2; non-relevant: (1-u)^2 (p^2 + p^3) / 2
    t = [(1 + pp) / 2, (1 + pp) / 2, 0.25 * (0.25 + 0.125) / 2, 0.25 * (0.25 + 0.125) / 2]
    torch.testing.assert_close(g.relevance, torch.tensor(sum(a * b for a, b in zip(e, t)), dtype=D))


def test_expeval_validation():
    with pytest.raises(ValueError, match="`ranks`"):
        expeval(torch.tensor([1, 1, 2, 3]), QRELS_REL)
    with pytest.raises(ValueError, match="`ranks`"):
        expeval(torch.tensor([0, 1, 2, 3]), QRELS_REL)
    with pytest.raises(ValueError, match="`ranks`"):
        expeval(torch.tensor([1, 2, 3]), QRELS_REL)
    with pytest.raises(ValueError, match="`user_model`"):
        expeval(torch.tensor([1, 2, 3, 4]), QRELS_REL, user_model="dcg")


# ------------------------------------------------------------------------------------------------------ IAA
def test_iaa_vs_reference():
    rng = random.Random(21)
    for grouped in (False, True):
        for _ in range(10):
            B, n, G = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 3)
            seq, rks, rels, grps = [], [], [], []
            for _ in range(B):
                r = rng.sample(range(n), n)
                u = [float(rng.randint(0, 2)) for _ in range(n)]
                gg = [rng.choice(list(range(G)) + [-1]) for _ in range(n)]
                seq.append((r, u, gg if grouped else None))
                rks.append(r), rels.append(u), grps.append(gg)
            for F, f in MODELS:
                want = ref.iaa(seq, f, G if grouped else None, G)
                sc = scores_from_ranking(torch.tensor(rks)).to(D)
                got, ok = iaa(sc, _t(rels), torch.tensor(grps) if grouped else None, browsing=F,
                              num_groups=G if grouped else None, return_valid=True)
                _close(got, want, ok)
                per, okp = iaa(sc, _t(rels), torch.tensor(grps) if grouped else None, browsing=F, amortize=False,
                               num_groups=G if grouped else None, return_valid=True)
                for b in range(B):
                    _close(per[b], ref.iaa([seq[b]], f, G if grouped else None, G), okp[b])


# ----------------------------------------------------------------------------------------------------- AWRF
@pytest.mark.parametrize("distance", ["nd", "rd", "kl"])
def test_awrf_vs_reference(distance):
    rng = random.Random({"nd": 1, "rd": 2, "kl": 3}[distance])
    for _ in range(20):
        n, G, groups, rel, rankings = _case(rng, G=rng.randint(2, 3))
        raw = [rng.random() + (0.0 if rng.random() < 0.2 else 0.1) for _ in range(G)]
        p = [x / sum(raw) for x in raw]
        for F, f in MODELS:
            want = ref.awrf(rankings, groups, G, f, p, distance)
            for name, scores, ordering in _orderings(rankings):
                got, ok = awrf(scores, torch.tensor(groups), target=_t(p), distance=distance, browsing=F,
                               num_groups=G, ordering=ordering, return_valid=True)
                atol = 1e-9 if got.dtype == D else 1e-5
                if distance == "kl":
                    _close(got, want, ok, atol)
                else:
                    for g in range(G):
                        _close(got[g], None if want is None else want[g], ok[g], atol)


def test_awrf_targets_and_protected():
    sc, grp = _t([3., 2., 1.]), torch.tensor([0, 1, 1])
    e = [1.0, 0.5, 0.25]
    share1 = (0.5 + 0.25) / 1.75
    got = awrf(sc, grp, browsing=RBP(0.5), protected=1)  # equal target 1/2
    torch.testing.assert_close(got, torch.tensor(abs(share1 - 0.5), dtype=D))
    got = awrf(sc, grp, browsing=RBP(0.5), target="list", protected=1)  # list composition 2/3
    torch.testing.assert_close(got, torch.tensor(abs(share1 - 2 / 3), dtype=D))
    assert sum(e) == 1.75
    with pytest.raises(ValueError, match="`target`"):
        awrf(sc, grp, target=_t([0.2, 0.2]))
    with pytest.raises(ValueError, match="`distance`"):
        awrf(sc, grp, distance="l2")
    with pytest.raises(ValueError, match="`protected`"):
        awrf(sc, grp, protected=2, num_groups=2)


# ------------------------------------------------------------------------------------------ DP / EUR / RUR
@pytest.mark.parametrize("kind", ["dp", "eur", "rur"])
def test_ratios_vs_reference(kind):
    fn = {"dp": dp, "eur": eur, "rur": rur}[kind]
    lfn = {"dp": log_dp, "eur": log_eur, "rur": log_rur}[kind]
    rng = random.Random(len(kind) * 7)
    for _ in range(20):
        n, G, groups, rel, rankings = _case(rng, G=rng.randint(2, 3))
        for F, f in MODELS[:2]:
            for reference in (None, 0):
                want = ref.ratio(kind, rankings, rel, groups, f, protected=1, reference=reference)
                for name, scores, ordering in _orderings(rankings):
                    args = (scores, torch.tensor(groups)) if kind == "dp" else (scores, _t(rel), torch.tensor(groups))
                    kw = dict(browsing=F, num_groups=G, ordering=ordering, reference=reference, return_valid=True)
                    got, ok = fn(*args, **kw)
                    atol = 1e-9 if got.dtype == D else 1e-5
                    _close(got, want, ok, atol)
                    lg, lok = lfn(*args, **kw)
                    _close(lg, None if not want else math.log(want), lok, atol)


def test_ratio_amortized_sums_before_dividing():
    sc = _t([[2., 1.], [2., 1.]])
    grp = torch.tensor([[0, 1], [1, 0]])
    rel = _t([[1., 1.], [1., 3.]])
    F = ReciprocalRank()
    # lists: e = (1, 1/2) each; G1 gets 1/2 then 1; G0 gets 1 then 1/2
    got = eur(sc, rel, grp, browsing=F, amortize=True)
    want = ((0.5 + 1) / (1 + 1)) / ((1 + 0.5) / (1 + 3))
    torch.testing.assert_close(got, torch.tensor(want, dtype=D))
    assert dp(sc, grp, browsing=F, amortize=True).shape == ()
    torch.testing.assert_close(dp(sc, grp, browsing=F, amortize=True), torch.tensor(1.0, dtype=D))


def test_ratio_validation():
    with pytest.raises(ValueError, match="`protected`"):
        dp(_t([2., 1.]), torch.tensor([0, 1]), protected=2, num_groups=2)
    with pytest.raises(ValueError, match="`reference`"):
        dp(_t([2., 1.]), torch.tensor([0, 1]), protected=1, reference=1)
    with pytest.raises(ValueError, match="`protected`"):  # one declared group: no protected group 1
        dp(_t([2., 1.]), torch.tensor([0, 0]), num_groups=1)
    # without num_groups, a batch holding one group only: the ratio is undefined, not an error
    v, ok = dp(_t([2., 1.]), torch.tensor([0, 0]), return_valid=True)
    assert v.item() == 0 and not ok.item()
    with pytest.raises(ValueError, match="`relevance`"):
        eur(_t([2., 1.]), None, torch.tensor([0, 1]))
    with pytest.raises(TypeError):
        log_dp(_t([2., 1.]), torch.tensor([0, 1]), bogus=1)


# ---------------------------------------------------------------------------------------------------- expRR
def test_exp_rr_vs_reference():
    rng = random.Random(31)
    for _ in range(20):
        n, G, groups, rel, rankings = _case(rng, G=rng.randint(2, 3))
        want = ref.exp_rr(rankings, groups, G, lambda k: 1 / (k + 1))
        for name, scores, ordering in _orderings(rankings):
            got, ok = exp_rr(scores, torch.tensor(groups), num_groups=G, ordering=ordering, return_valid=True)
            for g in range(G):
                _close(got[g], want[g], ok[g], 1e-9 if got.dtype == D else 1e-5)


# ------------------------------------------------------------------------------------ orderings, soft, padding
def test_doubly_stochastic_orderings_in_exposure_measures():
    N = 4
    perms = torch.tensor(list(itertools.permutations(range(N))))
    samp = Sampled(perms)
    R = torch.full((N, N), 1.0 / N, dtype=D)
    ds = DoublyStochastic(R)
    rel, grp = _t([2., 1., 0., 0.]), torch.tensor([0, 1, 0, 1])
    a = expected_exposure(None, rel, grp, browsing=RBP(0.6), ordering=samp)
    b = expected_exposure(None, rel, grp, browsing=RBP(0.6), ordering=ds)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    torch.testing.assert_close(exposure_misallocation(None, rel, grp, ordering=samp),
                               exposure_misallocation(None, rel, grp, ordering=ds))
    torch.testing.assert_close(exp_rr(None, grp, ordering=ds), torch.zeros(2, dtype=D))
    # one-hot R == Hard
    sc = _t([0.3, 2.0, 1.0, -1.0])
    Rh = Hard()(sc[None], torch.ones(1, N, dtype=torch.bool)).position_matrix()[0]
    for fn in (lambda o, s: awrf(s, grp, ordering=o), lambda o, s: dp(s, grp, ordering=o),
               lambda o, s: iaa(s, rel, grp, ordering=o), lambda o, s: rur(s, rel, grp, ordering=o)):
        torch.testing.assert_close(fn(DoublyStochastic(Rh), None), fn(None, sc))


def test_soft_membership_matches_ids_and_is_linear():
    rel, sc = _t([2., 1., 0., 1.]), _t([4., 1., 3., 2.])
    ids = torch.tensor([0, 1, 0, 1])
    soft = torch.nn.functional.one_hot(ids, 2).to(D)
    for fn in (lambda g: exposure_misallocation(sc, rel, g), lambda g: expected_exposure(sc, rel, g).loss,
               lambda g: awrf(sc, g, distance="kl"), lambda g: eur(sc, rel, g), lambda g: exp_rr(sc, g),
               lambda g: iaa(sc, rel, g)):
        torch.testing.assert_close(fn(soft), fn(ids))
    # a half-half item contributes half its exposure to each group
    memb = soft.clone()
    memb[1] = torch.tensor([0.5, 0.5], dtype=D)
    F = RBP(0.5)
    e = Hard()(sc[None], torch.ones(1, 4, dtype=torch.bool)).exposure(F)[0]
    E = memb.T @ e
    t = ideal_exposure(rel, browsing=F)
    T = memb.T @ t
    torch.testing.assert_close(exposure_misallocation(sc, rel, memb, browsing=F), T / t.sum() - E / e.sum())


def test_unknown_group_counts_in_total_only():
    sc, rel = _t([3., 2., 1.]), _t([1., 1., 1.])
    grp = torch.tensor([-1, 0, 1])
    delta = exposure_misallocation(sc, rel, grp, target="ea-dp", browsing="uniform", num_groups=2)
    torch.testing.assert_close(delta, _t([0.0, 0.0]))  # shares 1/3 vs 1/3 each; unknown third left out
    delta = exposure_misallocation(sc, rel, grp, target="ea-dp", browsing=RBP(0.5), num_groups=2)
    torch.testing.assert_close(delta, _t([1 / 3 - 0.5 / 1.75, 1 / 3 - 0.25 / 1.75]))


def _pad(x, N, value=0):
    out = torch.full((N,) + tuple(x.shape[1:]), value, dtype=x.dtype)
    out[: x.shape[0]] = x
    return out


def test_padding_invariance():
    rng = random.Random(41)
    for _ in range(10):
        n, G, groups, rel, rankings = _case(rng, G=2, S=1)
        N = n + 2
        sc = scores_from_ranking(torch.tensor(rankings[0])).to(D)
        g, r = torch.tensor(groups), _t(rel)
        scp = _pad(sc, N, float("nan"))
        gp, rp = _pad(g, N, 7), _pad(r, N, -3.0)
        mask = torch.arange(N) < n
        cases = [
            (lambda s, r_, g_, m: exposure_misallocation(s, r_, g_, num_groups=2, mask=m), False),
            (lambda s, r_, g_, m: individual_misallocation(s, r_, mask=m), True),
            (lambda s, r_, g_, m: torch.stack(list(expected_exposure(s, r_, g_, num_groups=2, mask=m))), False),
            (lambda s, r_, g_, m: torch.stack(list(expected_exposure(s, r_, mask=m))), False),
            (lambda s, r_, g_, m: iaa(s, r_, g_, num_groups=2, mask=m), False),
            (lambda s, r_, g_, m: awrf(s, g_, num_groups=2, mask=m), False),
            (lambda s, r_, g_, m: rur(s, r_, g_, num_groups=2, mask=m), False),
            (lambda s, r_, g_, m: exp_rr(s, g_, num_groups=2, mask=m), False),
        ]
        for fn, per_item in cases:
            a = fn(sc, r, g, None)
            b = fn(scp, rp, gp, mask)
            if per_item:
                torch.testing.assert_close(b[:n], a)
                assert (b[n:] == 0).all()
            else:
                torch.testing.assert_close(b, a)


def test_batch_equals_single_lists():
    sc = _t([[3., 1., 2.], [1., 2., 3.]])
    rel = _t([[1., 0., 2.], [2., 2., 0.]])
    grp = torch.tensor([[0, 1, 1], [1, 0, -1]])
    full = exposure_misallocation(sc, rel, grp, num_groups=2)
    for b in range(2):
        torch.testing.assert_close(full[b], exposure_misallocation(sc[b], rel[b], grp[b], num_groups=2))
    m = exposure_misallocation(sc, rel, grp, num_groups=2, reduction="mean")
    torch.testing.assert_close(m, full.mean(0))


def test_value_errors_name_the_argument():
    sc, rel, grp = _t([2., 1.]), _t([1., 0.]), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="`target`"):
        exposure_misallocation(sc, rel, grp, target="xx")
    with pytest.raises(ValueError, match="`relevance`"):
        exposure_misallocation(sc, None, grp, target="ea")
    with pytest.raises(ValueError, match="`relevance`"):
        exposure_misallocation(sc, _t([1., -1.]), grp)
    with pytest.raises(ValueError, match="`groups`"):
        exposure_misallocation(sc, rel, torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="`scores`"):
        expected_exposure(None, rel)
    with pytest.raises(ValueError, match="`scores`"):
        expected_exposure(_t([1., float("nan")]), rel)
    with pytest.raises(ValueError, match="`browsing`"):
        iaa(sc, rel, browsing="nope")
    with pytest.raises(ValueError, match="`ordering`"):
        expected_exposure(None, rel, ordering=Sampled(torch.tensor([[0, 1, 2]])))
    with pytest.raises(ValueError, match="`rankings`"):
        expected_exposure(sc, rel, ordering=Sampled(torch.tensor([[0, 1, 2]])))
    with pytest.raises(ValueError, match="`reduction`"):
        exp_rr(torch.stack([sc, sc]), torch.stack([grp, grp]), reduction="max")
    # ea-dp needs no relevance
    exposure_misallocation(sc, None, grp, target="ea-dp")


def test_no_nan_on_degenerate_inputs():
    sc, grp = _t([1.0]), torch.tensor([0])
    outs = [exposure_misallocation(sc, _t([0.]), grp, target="ea"), awrf(sc, grp, num_groups=2, distance="rd"),
            dp(sc, grp, num_groups=2), log_rur(sc, _t([0.]), grp, num_groups=2), exp_rr(sc, grp, num_groups=2),
            iaa(sc, _t([0.]))]
    for o in outs:
        assert not torch.isnan(o).any()


def test_awrf_kl_undefined_when_target_misses_a_group():
    v, ok = awrf(_t([2., 1.]), torch.tensor([0, 1]), target=_t([1.0, 0.0]), distance="kl", return_valid=True)
    assert not bool(ok) and float(v) == 0.0
    v, ok = awrf(_t([2., 1.]), torch.tensor([0, 0]), target=_t([1.0, 0.0]), distance="kl", num_groups=2,
                 return_valid=True)
    assert bool(ok) and float(v) == 0.0


# ------------------------------------------------------------------------------------------ robustness
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ratios_with_tiny_relevance(dtype):
    """RUR gave NaN for relevance 1e-30 (the products underflowed); EUR and RUR do not change when the utility is
    scaled, so tiny utilities give the values of ordinary ones."""
    s = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]], dtype=dtype)
    r = torch.tensor([[1.0, 3.0, 2.0], [2.0, 1.0, 1.0]], dtype=dtype)
    g = torch.tensor([[0, 1, 1], [1, 0, 1]])
    for fn in (rur, eur, log_rur, log_eur):
        for amortize in (False, True):
            want = fn(s, r, g, amortize=amortize)
            for scale in (1e-30, 1e-20, 1e20):
                got, valid = fn(s, r * scale, g, amortize=amortize, return_valid=True)
                assert valid.all() and torch.isfinite(got).all()
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_exposure_measures_accept_k_as_a_browsing_cut_off():
    """`k` = the browsing model truncated at k (TopK), for the ranking's and the ideal exposure alike."""
    from torchfair.browsing import TopK
    g_ = torch.Generator().manual_seed(2)
    s = torch.randn(3, 6, generator=g_, dtype=D)
    r = torch.randint(0, 3, (3, 6), generator=g_).to(D)
    g = torch.tensor([[0, 1, 0, 1, 1, 0], [1, 1, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1]])
    F = RBP(0.8)
    for k in (1, 3, 10):
        cut = TopK(F, k)
        pairs = [
            (exposure_misallocation(s, r, g, browsing=F, k=k), exposure_misallocation(s, r, g, browsing=cut)),
            (individual_misallocation(s, r, browsing=F, k=k), individual_misallocation(s, r, browsing=cut)),
            (iaa(s, r, g, browsing=F, k=k), iaa(s, r, g, browsing=cut)),
            (awrf(s, g, browsing=F, k=k), awrf(s, g, browsing=cut)),
            (dp(s, g, browsing=F, k=k), dp(s, g, browsing=cut)),
            (eur(s, r, g, browsing=F, k=k), eur(s, r, g, browsing=cut)),
            (rur(s, r, g, browsing=F, k=k), rur(s, r, g, browsing=cut)),
            (log_dp(s, g, browsing=F, k=k), log_dp(s, g, browsing=cut)),
            (exp_rr(s, g, browsing=F, k=k), exp_rr(s, g, browsing=cut)),
            (ideal_exposure(r, browsing=F, k=k), ideal_exposure(r, browsing=cut)),
            (expected_exposure(s, r, g, browsing=F, k=k).loss, expected_exposure(s, r, g, browsing=cut).loss),
        ]
        for got, want in pairs:
            torch.testing.assert_close(got, want)
    # and against a plain loop: EA misallocation with uniform browsing cut at 2, ranking 0 1 2 3
    got = exposure_misallocation(-torch.arange(4.0, dtype=D), torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=D),
                                 torch.tensor([0, 0, 1, 1]), target="ea", browsing="uniform", k=2)
    torch.testing.assert_close(got, torch.tensor([-1.0, 1.0], dtype=D))


def test_browsing_spec_strings_everywhere():
    s = torch.tensor([2.0, 1.0, 0.5, 0.0], dtype=D)
    r = torch.tensor([1.0, 0.0, 2.0, 1.0], dtype=D)
    g = torch.tensor([0, 1, 1, 0])
    from torchfair.browsing import TopK
    for spec, model in [("rbp:0.7", RBP(0.7)), ("topk:2:rbp:0.7", TopK(RBP(0.7), 2)), ("uniform", Uniform())]:
        torch.testing.assert_close(exposure_misallocation(s, r, g, browsing=spec),
                                   exposure_misallocation(s, r, g, browsing=model))
        torch.testing.assert_close(rur(s, r, g, browsing=spec), rur(s, r, g, browsing=model))
        torch.testing.assert_close(ideal_exposure(r, browsing=spec), ideal_exposure(r, browsing=model))


def test_log_ratios_have_real_signatures():
    import inspect
    for fn, base in ((log_dp, dp), (log_eur, eur), (log_rur, rur)):
        assert list(inspect.signature(fn).parameters) == list(inspect.signature(base).parameters)
    assert dp.__doc__ and "protected" in dp.__doc__ and "Example" in rur.__doc__


def test_exposure_share_is_the_group_share_of_browsing_weight_plain_loop():
    """exposure_share against a plain loop: sort by score, weight position k by 0.5**k, sum per group, normalise."""
    from torchfair.metrics import exposure_share
    g = torch.Generator().manual_seed(3)
    s, grp = torch.randn(4, 7, generator=g), torch.randint(0, 3, (4, 7), generator=g)
    got = exposure_share(s, grp, num_groups=3, browsing="geometric:0.5")
    for b in range(4):
        order = sorted(range(7), key=lambda i: -float(s[b, i]))
        E = [0.0, 0.0, 0.0]
        for pos, i in enumerate(order):
            E[int(grp[b, i])] += 0.5 ** pos
        tot = sum(E)
        assert torch.allclose(got[b], torch.tensor([e / tot for e in E]), atol=1e-6)
    assert torch.allclose(exposure_share(torch.tensor([3., 2., 1.]), torch.tensor([0, 1, 1]), browsing="uniform"),
                          torch.tensor([1 / 3, 2 / 3]))


# ------------------------------------------------------- soft membership: G is declared by the shape (issue 28)
@pytest.mark.parametrize("fn", ["dp", "eur", "rur", "log_dp", "log_eur", "log_rur"])
def test_ratio_soft_protected_beyond_G_is_refused(fn):
    """Soft ``[B, N, G]`` groups declare G: ``protected >= G`` (or ``reference >= G``) is a ValueError naming it, as
    in awrf; the last group still works and equals the one-hot ids; an integer id beyond the batch's groups stays
    undefined (0, invalid): a group absent from the batch."""
    import torchfair.metrics.exposure as E
    f = getattr(E, fn)
    s = torch.tensor([[3., 2., 1., 0.]], dtype=D)
    rel = () if fn in ("dp", "log_dp") else (torch.tensor([[1., 0.5, 1., 0.25]], dtype=D),)
    ids = torch.tensor([[0, 1, 1, 0]])
    soft = torch.nn.functional.one_hot(ids, 2).to(D)
    for bad in (2, 3):
        with pytest.raises(ValueError, match="`protected`"):
            f(s, *rel, soft, protected=bad)
    with pytest.raises(ValueError, match="`reference`"):
        f(s, *rel, soft, protected=1, reference=2)
    got, ok = f(s, *rel, soft, protected=1, return_valid=True)
    want, ok_ids = f(s, *rel, ids, protected=1, return_valid=True)
    assert bool(ok) and bool(ok_ids)
    torch.testing.assert_close(got, want)
    value, valid = f(s, *rel, ids, protected=2, return_valid=True)
    assert not bool(valid) and float(value) == 0.0
