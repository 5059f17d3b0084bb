"""Exact pairwise evaluators (Hard ordering) against the plain-Python reference of tests/references/reference.py."""
from __future__ import annotations

import math

import pytest
import torch

import reference as ref
from torchfair.browsing import (RBP, Cascade, Custom, Geometric, Logarithmic, ReciprocalRank, TopK, Uniform)
from torchfair.metrics import (dips, discordant_fraction, igi, individual_dissatisfaction, kendall_tau,
                               pairwise_accuracy, pairwise_gap, rank_parity, ree)
from torchfair.orderings import Hard

TOL = dict(rel=1e-9, abs=1e-9)

MODELS = [
    (RBP(0.8), ref.ref_rbp(0.8)),
    (Geometric(0.3), ref.ref_geometric(0.3)),
    (Logarithmic(), ref.ref_logarithmic()),
    (Logarithmic(flat_top=True), ref.ref_logarithmic(True)),
    (ReciprocalRank(), ref.ref_reciprocal()),
    (Uniform(), ref.ref_uniform()),
    (Cascade(0.9, max_grade=3.0), ref.ref_cascade(0.9, 3.0)),
    (TopK(RBP(0.9), k=3), ref.ref_topk(ref.ref_rbp(0.9), 3)),
    (TopK(Cascade(0.8, max_grade=3.0), k=2), ref.ref_topk(ref.ref_cascade(0.8, 3.0), 2)),
    (Custom([1.0, 0.7, 0.5, 0.2]), ref.ref_custom([1.0, 0.7, 0.5, 0.2])),
]
MODEL_IDS = [r.name for _, r in MODELS]
POSITION_MODELS = [(m, r) for m, r in MODELS if not m.relevance_dependent]
POSITION_IDS = [r.name for _, r in POSITION_MODELS]

# (name, G, soft, unknown ids, padding, score ties)
CONFIGS = [
    ("g2", 2, False, False, False, False),
    ("g2_ties_pad", 2, False, False, True, True),
    ("g3_unknown_pad", 3, False, True, True, False),
    ("soft2", 2, True, False, False, True),
    ("soft3_pad", 3, True, False, True, False),
]
CONFIG_IDS = [c[0] for c in CONFIGS]


def make_case(seed, B, N, G, soft=False, unknown=False, pad=False, score_ties=False, dtype=torch.float64):
    """Random batch: relevance grades 0..3 (many ties), optional tied scores, padding (NaN scores), -1 ids."""
    gen = torch.Generator().manual_seed(seed)
    if score_ties:
        scores = torch.randint(0, 3, (B, N), generator=gen).to(dtype)
    else:
        scores = torch.randn(B, N, generator=gen, dtype=torch.float64).to(dtype)
    rel = torch.randint(0, 4, (B, N), generator=gen).to(dtype)
    if soft:
        raw = torch.rand(B, N, G, generator=gen, dtype=torch.float64) + 0.05
        groups = (raw / raw.sum(-1, keepdim=True)).to(dtype)
    else:
        groups = torch.randint(0, G, (B, N), generator=gen)
        if unknown:
            groups = torch.where(torch.rand(B, N, generator=gen) < 0.2, torch.full_like(groups, -1), groups)
    mask = torch.ones(B, N, dtype=torch.bool)
    if pad:
        mask = torch.rand(B, N, generator=gen) < 0.75
        mask[:, 0] = True  # at least one real item per list
        perm = torch.randperm(N, generator=gen)  # the guaranteed-real item is not always first
        mask = mask[:, perm]
        scores = torch.where(mask, scores, torch.full_like(scores, float("nan")))
    return scores, rel, groups, mask


def real_list(scores, rel, groups, mask, b, G):
    """Python lists of the real items of list b: scores, relevance, membership rows."""
    keep = [i for i in range(scores.shape[1]) if bool(mask[b, i])]
    s = [float(scores[b, i]) for i in keep]
    r = [float(rel[b, i]) for i in keep]
    memb = None
    if groups is not None:
        if groups.is_floating_point():
            memb = [[float(groups[b, i, g]) for g in range(G)] for i in keep]
        else:
            memb = ref.membership_from_ids([int(groups[b, i]) for i in keep], G)
    return keep, s, r, memb


def assert_matrix(lib, expected, tol=TOL):
    G = len(expected)
    for g in range(G):
        for h in range(G):
            assert float(lib[g, h]) == pytest.approx(expected[g][h], **tol), (g, h, lib, expected)


def assert_valid(lib_valid, expected):
    G = len(expected)
    for g in range(G):
        for h in range(G):
            assert bool(lib_valid[g, h]) == expected[g][h], (g, h, lib_valid, expected)


# ------------------------------------------------------------------------------------------- vs reference


@pytest.mark.parametrize("model,refF", MODELS, ids=MODEL_IDS)
@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
def test_dips_matches_reference(model, refF, cfg):
    _, G, soft, unknown, pad, sties = cfg
    for seed in range(3):
        scores, rel, groups, mask = make_case(seed, 3, 7, G, soft, unknown, pad, sties)
        ct = (0.0, 0.5, 1.0)[seed]
        M, valid = dips(scores, rel, groups, browsing=model, tie_weight=ct, mask=mask, num_groups=G,
                        return_valid=True)
        assert M.shape == (3, G, G) and M.dtype == torch.float64
        for b in range(3):
            _, s, r, memb = real_list(scores, rel, groups, mask, b, G)
            eM, eV = ref.dips(ref.rank(s), r, memb, refF, ct)
            assert_matrix(M[b], eM)
            assert_valid(valid[b], eV)


@pytest.mark.parametrize("model,refF", MODELS, ids=MODEL_IDS)
def test_individual_dissatisfaction_matches_reference(model, refF):
    for seed, (G, soft, unknown, pad, sties) in enumerate([(2, False, True, True, True), (3, True, False, True, False),
                                                            (2, False, False, False, False)]):
        scores, rel, groups, mask = make_case(100 + seed, 3, 7, G, soft, unknown, pad, sties)
        ct = 0.5
        Mi = individual_dissatisfaction(scores, rel, browsing=model, tie_weight=ct, mask=mask)
        Mih = individual_dissatisfaction(scores, rel, groups, browsing=model, tie_weight=ct, mask=mask, num_groups=G)
        assert Mi.shape == (3, 7) and Mih.shape == (3, 7, G)
        for b in range(3):
            keep, s, r, memb = real_list(scores, rel, groups, mask, b, G)
            order = ref.rank(s)
            e_i = ref.individual_dissatisfaction(order, r, refF, ct)
            e_ih = ref.individual_dissatisfaction(order, r, refF, ct, memb)
            for t, i in enumerate(keep):
                assert float(Mi[b, i]) == pytest.approx(e_i[t], **TOL)
                for h in range(G):
                    assert float(Mih[b, i, h]) == pytest.approx(e_ih[t][h], **TOL)
            for i in range(7):
                if not bool(mask[b, i]):
                    assert float(Mi[b, i]) == 0.0
                    assert torch.all(Mih[b, i] == 0)


@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("ct", [0.0, 0.5, 1.0])
def test_igi_ree_match_reference(cfg, ct):
    _, G, soft, unknown, pad, sties = cfg
    for seed in range(3):
        scores, rel, groups, mask = make_case(200 + seed, 3, 7, G, soft, unknown, pad, sties)
        Mi, Vi = igi(scores, rel, groups, tie_weight=ct, mask=mask, num_groups=G, return_valid=True)
        Mr, Vr = ree(scores, rel, groups, tie_weight=ct, mask=mask, num_groups=G, return_valid=True)
        for b in range(3):
            _, s, r, memb = real_list(scores, rel, groups, mask, b, G)
            order = ref.rank(s)
            eM, eV = ref.igi(order, r, memb, ct)
            assert_matrix(Mi[b], eM)
            assert_valid(Vi[b], eV)
            eM, eV = ref.ree(order, r, memb, ct)
            assert_matrix(Mr[b], eM)
            assert_valid(Vr[b], eV)


@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
def test_pairwise_accuracy_matches_reference(cfg):
    _, G, soft, unknown, pad, sties = cfg
    for seed in range(4):
        scores, rel, groups, mask = make_case(300 + seed, 3, 7, G, soft, unknown, pad, sties)
        A, V = pairwise_accuracy(scores, rel, groups, mask=mask, num_groups=G, return_valid=True)
        for b in range(3):
            _, s, r, memb = real_list(scores, rel, groups, mask, b, G)
            eA, eV = ref.pairwise_accuracy(ref.rank(s), r, memb)
            assert_matrix(A[b], eA)
            assert_valid(V[b], eV)


@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
def test_rank_parity_matches_reference(cfg):
    _, G, soft, unknown, pad, sties = cfg
    for seed in range(4):
        scores, rel, groups, mask = make_case(400 + seed, 3, 7, G, soft, unknown, pad, sties)
        rp = rank_parity(scores, groups, mask=mask, num_groups=G)
        for b in range(3):
            keep, s, r, memb = real_list(scores, rel, groups, mask, b, G)
            order = ref.rank(s)
            wins, _, pg, pair, valid = ref.rank_parity(order, memb)
            assert_matrix(rp.wins[b], wins)
            for g in range(G):
                assert bool(rp.valid[b, g]) == valid[g]
                assert float(rp.per_group[b, g]) == pytest.approx(pg[g], **TOL)
                assert float(rp.pair[b, g]) == pytest.approx(pair[g], **TOL)
                if not soft:
                    lit = ref.kuhlman_pair_literal(order, [int(groups[b, i]) for i in keep], g)
                    if lit is None:
                        assert not valid[g]
                    else:
                        assert float(rp.per_group[b, g]) == pytest.approx(lit, **TOL)
                        assert float(rp.pair[b, g]) == pytest.approx(abs(1 - 2 * lit), **TOL)


def test_discordant_fraction_and_kendall_tau_match_reference():
    for seed in range(6):
        scores, rel, _, mask = make_case(500 + seed, 4, 8, 2, pad=seed % 2 == 1, score_ties=seed % 3 == 0)
        D, V = discordant_fraction(scores, rel, mask=mask, return_valid=True)
        T, TV = kendall_tau(scores, rel, mask=mask, return_valid=True)
        for b in range(4):
            _, s, r, _ = real_list(scores, rel, None, mask, b, 2)
            order = ref.rank(s)
            eM, eV = ref.discordant_fraction(order, r)
            assert float(D[b]) == pytest.approx(eM, **TOL) and bool(V[b]) == eV
            eT, _ = ref.kendall_tau(order, r)
            assert float(T[b]) == pytest.approx(eT, **TOL) and bool(TV[b]) == eV
            assert float(T[b]) == pytest.approx(1 - 2 * float(D[b]), **TOL)


def test_kendall_tau_equals_tau_a_without_relevance_ties():
    gen = torch.Generator().manual_seed(7)
    for _ in range(5):
        s = torch.randn(9, generator=gen, dtype=torch.float64)
        r = torch.randperm(9, generator=gen).to(torch.float64)
        expected = ref.kendall_tau_a(ref.rank(s.tolist()), r.tolist())
        assert float(kendall_tau(s, r)) == pytest.approx(expected, **TOL)
    # perfect and reversed rankings
    r = torch.arange(6, dtype=torch.float64)
    assert float(kendall_tau(r, r)) == pytest.approx(1.0)
    assert float(kendall_tau(-r, r)) == pytest.approx(-1.0)


def test_kendall_tau_single_item_invalid():
    tau, valid = kendall_tau(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
                             mask=torch.tensor([[True, False], [True, True]]), return_valid=True)
    assert valid.tolist() == [False, True]
    assert tau[0].item() == 0.0 and tau[1].item() == pytest.approx(-1.0)


def test_default_browsing_is_rbp_09_and_names():
    scores, rel, groups, mask = make_case(600, 2, 6, 2, pad=True)
    M = dips(scores, rel, groups, mask=mask, num_groups=2)
    for b in range(2):
        _, s, r, memb = real_list(scores, rel, groups, mask, b, 2)
        eM, _ = ref.dips(ref.rank(s), r, memb, ref.ref_rbp(0.9), 0.5)
        assert_matrix(M[b], eM)
    for name, refF in [("uniform", ref.ref_uniform()), ("reciprocal", ref.ref_reciprocal()),
                       ("logarithmic", ref.ref_logarithmic()), ("geometric", ref.ref_geometric(0.5))]:
        M = dips(scores, rel, groups, mask=mask, num_groups=2, browsing=name)
        _, s, r, memb = real_list(scores, rel, groups, mask, 0, 2)
        eM, _ = ref.dips(ref.rank(s), r, memb, refF, 0.5)
        assert_matrix(M[0], eM)


def test_row_blocks_do_not_change_results(monkeypatch):
    """Force tiny pair blocks (several row blocks per list): values still match the reference."""
    import torchfair.orderings.base as base
    monkeypatch.setattr(base, "PAIR_BLOCK_ELEMENTS", 9)
    for ties in ("first", "average"):
        scores, rel, groups, mask = make_case(650, 2, 6, 3, unknown=True, pad=True, score_ties=True)
        M = dips(scores, rel, groups, browsing=RBP(0.7), mask=mask, num_groups=3, ordering=Hard(ties))
        A = ree(scores, rel, groups, mask=mask, num_groups=3, tie_weight=0.5, ordering=Hard(ties))
        for b in range(2):
            _, s, r, memb = real_list(scores, rel, groups, mask, b, 3)
            if ties == "first":
                eM, _ = ref.dips(ref.rank(s), r, memb, ref.ref_rbp(0.7), 0.5)
                eA, _ = ref.ree(ref.rank(s), r, memb, 0.5)
            else:
                eM, _ = ref.average_over_tie_orders(s, lambda o: ref.dips(o, r, memb, ref.ref_rbp(0.7), 0.5))
                eA, _ = ref.average_over_tie_orders(s, lambda o: ref.ree(o, r, memb, 0.5))
            assert_matrix(M[b], eM)
            assert_matrix(A[b], eA)


# ------------------------------------------------------------------------------------------- worked examples


TOY_SCORES = torch.tensor([2.0, 3.0, 4.0, 1.0], dtype=torch.float64)  # ranking A2 B1 A0 A3
TOY_REL = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)  # ideal A0 B1 A2 A3
TOY_GROUPS = torch.tensor([0, 1, 0, 0])


def test_toy_igi_ree_section_4_4():
    # ideal ranking: no UDP; C^IGI_AB = 1, C^IGI_BA = 2 are read off the swapped ranking below
    Mi = igi(TOY_REL, TOY_REL, TOY_GROUPS)
    assert torch.all(Mi == 0)
    Mi, Vi = igi(TOY_SCORES, TOY_REL, TOY_GROUPS, return_valid=True)
    assert float(Mi[0, 1]) == pytest.approx(1.0)  # one UDP (A0 below B1) / C_AB = 1
    assert float(Mi[1, 0]) == pytest.approx(0.5)  # one UDP (B1 below A2) / C_BA = 2
    assert float(Mi[0, 0]) == pytest.approx(1.0 / 3.0)  # (A0 below A2) / 3 strictly ordered A-A pairs
    assert float(Mi[1, 1]) == 0.0 and not bool(Vi[1, 1])  # a single B item: no pair
    Mr = ree(TOY_SCORES, TOY_REL, TOY_GROUPS)
    assert float(Mr[0, 1]) == pytest.approx(1.0 / 3.0)  # C^REE = N_A N_B = 3
    assert float(Mr[1, 0]) == pytest.approx(1.0 / 3.0)
    assert float(Mr[0, 0]) == pytest.approx(1.0 / 6.0)  # N_A (N_A - 1) = 6 ordered pairs
    # DIPS with uniform browsing: C_AB = C_BA = max(3 * 1, 1 * 3) = 3 and no unfairness
    Md = dips(TOY_SCORES, TOY_REL, TOY_GROUPS, browsing="uniform", tie_weight=0.0)
    assert float(Md[0, 1]) == pytest.approx(1.0 / 3.0) and float(Md[1, 0]) == pytest.approx(1.0 / 3.0)
    assert float(pairwise_gap(Md)[0, 1]) == pytest.approx(0.0)
    assert float(Md[0, 0]) == pytest.approx(1.0 / 9.0)  # C_AA = 3 * 3


def test_toy_dips_rbp_by_hand():
    # A2 B1 A0 A3 with F(k) = 0.5**k: UDPs (A0, B1) with B1 at position 1 -> 0.5; (B1, A2) with A2 at position 0 -> 1;
    # (A0, A2) -> 1. N_A = 3, N_B = 1: C_AB = max(3 * 1, 1 * (1 + .5 + .25)) = 3.
    M = dips(TOY_SCORES, TOY_REL, TOY_GROUPS, browsing=RBP(0.5), tie_weight=0.0)
    assert float(M[0, 1]) == pytest.approx(0.5 / 3)
    assert float(M[1, 0]) == pytest.approx(1.0 / 3)
    assert float(M[0, 0]) == pytest.approx(1.0 / (3 * 1.75))


def test_dips_gap_reaches_one_when_one_group_fully_dominates():
    # every B item above every more relevant A item, uniform browsing: M_AB = N_A N_B / (N_A N_B) = 1, M_BA = 0
    scores = torch.tensor([1.0, 2.0, 5.0, 6.0], dtype=torch.float64)
    rel = torch.tensor([3.0, 3.0, 1.0, 1.0], dtype=torch.float64)
    M = dips(scores, rel, torch.tensor([0, 0, 1, 1]), browsing="uniform")
    assert float(pairwise_gap(M)[0, 1]) == pytest.approx(1.0)


def test_relevance_ties_weighted_by_ct():
    # two items with equal relevance, B above A: a partial UDP of weight c_t against A
    scores = torch.tensor([1.0, 2.0], dtype=torch.float64)
    rel = torch.tensor([1.0, 1.0], dtype=torch.float64)
    g = torch.tensor([0, 1])
    for ct in (0.0, 0.3, 1.0):
        M = dips(scores, rel, g, browsing="uniform", tie_weight=ct)
        assert float(M[0, 1]) == pytest.approx(ct)  # C_AB = max(1 * 1, 1 * 1)
        assert float(M[1, 0]) == 0.0
        Mi = individual_dissatisfaction(scores, rel, browsing="uniform", tie_weight=ct)
        assert Mi.tolist() == pytest.approx([ct, 0.0])


def test_identity_dips_times_normaliser_is_sum_of_individual():
    """000 §4.1: dips[g, h] * C_gh == sum_{i in g} M_ih, with C from eq. 10 computed independently."""
    for model, refF in MODELS:
        for soft in (False, True):
            scores, rel, groups, mask = make_case(700, 3, 7, 3, soft=soft, unknown=not soft, pad=True)
            M = dips(scores, rel, groups, browsing=model, mask=mask, num_groups=3)
            Mih = individual_dissatisfaction(scores, rel, groups, browsing=model, mask=mask, num_groups=3)
            for b in range(3):
                keep, s, r, memb = real_list(scores, rel, groups, mask, b, 3)
                C = ref.dips_normaliser(memb, refF)
                for g in range(3):
                    for h in range(3):
                        total = sum(memb[t][g] * float(Mih[b, i, h]) for t, i in enumerate(keep))
                        assert float(M[b, g, h]) * C[g][h] == pytest.approx(total, rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------------------------------- ties = "average"


def _tied_case(seed, G=2, soft=False, pad=False):
    gen = torch.Generator().manual_seed(seed)
    N = 6
    scores = torch.randint(0, 3, (2, N), generator=gen).double()
    rel = torch.randint(0, 3, (2, N), generator=gen).double()
    if soft:
        raw = torch.rand(2, N, G, generator=gen, dtype=torch.float64) + 0.1
        groups = raw / raw.sum(-1, keepdim=True)
    else:
        groups = torch.randint(-1, G, (2, N), generator=gen)
    mask = torch.ones(2, N, dtype=torch.bool)
    if pad:
        mask[0, 2] = False
        mask[1, 5] = False
        scores = torch.where(mask, scores, torch.full_like(scores, float("nan")))
    return scores, rel, groups, mask


@pytest.mark.parametrize("model,refF", POSITION_MODELS, ids=POSITION_IDS)
def test_average_ties_dips_and_individual_vs_enumeration(model, refF):
    for seed, (soft, pad) in enumerate([(False, False), (True, True)]):
        scores, rel, groups, mask = _tied_case(800 + seed, 2, soft, pad)
        M = dips(scores, rel, groups, browsing=model, mask=mask, num_groups=2, ordering=Hard("average"))
        Mih = individual_dissatisfaction(scores, rel, groups, browsing=model, mask=mask, num_groups=2,
                                         ordering=Hard("average"))
        for b in range(2):
            keep, s, r, memb = real_list(scores, rel, groups, mask, b, 2)
            eM, _ = ref.average_over_tie_orders(s, lambda o: ref.dips(o, r, memb, refF, 0.5))
            assert_matrix(M[b], eM)
            eI = ref.average_over_tie_orders(s, lambda o: ref.individual_dissatisfaction(o, r, refF, 0.5, memb))
            for t, i in enumerate(keep):
                for h in range(2):
                    assert float(Mih[b, i, h]) == pytest.approx(eI[t][h], **TOL)


def test_average_ties_other_measures_vs_enumeration():
    for seed, (G, soft, pad) in enumerate([(2, False, False), (3, False, True), (2, True, True)]):
        scores, rel, groups, mask = _tied_case(900 + seed, G, soft, pad)
        o = Hard("average")
        Mi = igi(scores, rel, groups, mask=mask, num_groups=G, tie_weight=0.5, ordering=o)
        Mr = ree(scores, rel, groups, mask=mask, num_groups=G, tie_weight=0.5, ordering=o)
        A = pairwise_accuracy(scores, rel, groups, mask=mask, num_groups=G, ordering=o)
        rp = rank_parity(scores, groups, mask=mask, num_groups=G, ordering=o)
        D = discordant_fraction(scores, rel, mask=mask, ordering=o)
        T = kendall_tau(scores, rel, mask=mask, ordering=o)
        for b in range(2):
            _, s, r, memb = real_list(scores, rel, groups, mask, b, G)
            assert_matrix(Mi[b], ref.average_over_tie_orders(s, lambda od: ref.igi(od, r, memb, 0.5))[0])
            assert_matrix(Mr[b], ref.average_over_tie_orders(s, lambda od: ref.ree(od, r, memb, 0.5))[0])
            assert_matrix(A[b], ref.average_over_tie_orders(s, lambda od: ref.pairwise_accuracy(od, r, memb))[0])
            wins = ref.average_over_tie_orders(s, lambda od: ref.rank_parity(od, memb)[0])
            pg = ref.average_over_tie_orders(s, lambda od: ref.rank_parity(od, memb)[2])
            assert_matrix(rp.wins[b], wins)
            for g in range(G):
                assert float(rp.per_group[b, g]) == pytest.approx(pg[g], **TOL)
            eD = ref.average_over_tie_orders(s, lambda od: ref.discordant_fraction(od, r)[0])
            assert float(D[b]) == pytest.approx(eD, **TOL)
            assert float(T[b]) == pytest.approx(1 - 2 * eD, **TOL)


def test_average_ties_all_tied_is_symmetric():
    # all scores equal: every order equally likely, P(j above i) = 1/2 for every pair
    scores = torch.zeros(5, dtype=torch.float64)
    rel = torch.tensor([3.0, 2.0, 1.0, 0.0, 2.0], dtype=torch.float64)
    g = torch.tensor([0, 1, 0, 1, 1])
    rp = rank_parity(scores, g, ordering=Hard("average"))
    assert rp.wins[0, 1].item() == pytest.approx(0.5) and rp.pair[0].item() == pytest.approx(0.0)
    # 9 strictly ordered relevance pairs, each discordant with probability 1/2; the tied pair is concordant
    assert kendall_tau(scores, rel, ordering=Hard("average")).item() == pytest.approx(1 - 2 * 4.5 / 10)


def test_cascade_with_average_ties_raises():
    scores = torch.tensor([1.0, 1.0, 0.0])
    rel = torch.tensor([1.0, 0.0, 1.0])
    with pytest.raises(ValueError):
        dips(scores, rel, torch.tensor([0, 1, 0]), browsing=Cascade(), ordering=Hard("average"))


def test_first_tie_rule_lower_index_first():
    # equal scores: item 0 ranked above item 1 -> item 1 (more relevant) suffers a UDP caused by item 0
    scores = torch.tensor([1.0, 1.0], dtype=torch.float64)
    rel = torch.tensor([0.0, 1.0], dtype=torch.float64)
    Mi = individual_dissatisfaction(scores, rel, browsing="uniform")
    assert Mi.tolist() == pytest.approx([0.0, 1.0])
    assert discordant_fraction(scores, rel).item() == pytest.approx(1.0)
    Mi = individual_dissatisfaction(scores.flip(0), rel.flip(0), browsing="uniform")
    assert Mi.tolist() == pytest.approx([0.0, 0.0])


# ------------------------------------------------------------------------------------------- batching, shapes


def _all_measures(scores, rel, groups, mask, G):
    rp = rank_parity(scores, groups, mask=mask, num_groups=G)
    return [
        dips(scores, rel, groups, browsing=RBP(0.8), mask=mask, num_groups=G),
        dips(scores, rel, groups, browsing=Cascade(0.9, max_grade=3.0), mask=mask, num_groups=G),
        individual_dissatisfaction(scores, rel, groups, mask=mask, num_groups=G),
        individual_dissatisfaction(scores, rel, mask=mask),
        igi(scores, rel, groups, mask=mask, num_groups=G),
        ree(scores, rel, groups, mask=mask, num_groups=G),
        pairwise_accuracy(scores, rel, groups, mask=mask, num_groups=G),
        rp.wins, rp.per_group, rp.pair,
        discordant_fraction(scores, rel, mask=mask),
        kendall_tau(scores, rel, mask=mask),
    ]


def test_batch_equals_one_by_one():
    for soft in (False, True):
        scores, rel, groups, mask = make_case(1000, 4, 7, 3, soft=soft, unknown=not soft, pad=True, score_ties=True)
        batched = _all_measures(scores, rel, groups, mask, 3)
        for b in range(4):
            keep = torch.nonzero(mask[b]).flatten()
            one = _all_measures(scores[b, keep], rel[b, keep], groups[b, keep], None, 3)
            for k, (x, y) in enumerate(zip(batched, one)):
                xb = x[b]
                if xb.dim() >= 1 and xb.shape[0] == 7:  # per-item outputs: keep real items
                    xb = xb[keep]
                torch.testing.assert_close(xb, y, rtol=1e-12, atol=1e-12, msg=f"measure {k}, list {b}")


def test_1d_equals_batch_of_one():
    scores, rel, groups, mask = make_case(1100, 1, 6, 2, unknown=True, pad=True)
    batched = _all_measures(scores, rel, groups, mask, 2)
    single = _all_measures(scores[0], rel[0], groups[0], mask[0], 2)
    for x, y in zip(batched, single):
        assert x.shape[1:] == y.shape
        torch.testing.assert_close(x[0], y, rtol=0, atol=0)
    # soft membership [N, G] with 1-D scores
    scores, rel, groups, mask = make_case(1101, 1, 6, 3, soft=True)
    x = dips(scores, rel, groups)
    y = dips(scores[0], rel[0], groups[0])
    assert y.shape == (3, 3)
    torch.testing.assert_close(x[0], y, rtol=0, atol=0)
    # 1-D with reduction: nothing to reduce
    assert dips(scores[0], rel[0], groups[0], reduction="mean").shape == (3, 3)


def test_reduction_mean_and_sum_exclude_invalid_lists():
    # list 1 has no group-1 item: M[., 1] and M[1, .] undefined there
    scores = torch.tensor([[3.0, 1.0, 2.0, 0.5], [1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]], dtype=torch.float64)
    rel = torch.tensor([[1.0, 2.0, 0.0, 3.0], [3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    groups = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0]])
    F = ref.ref_rbp(0.9)
    per = []
    for b in range(3):
        per.append(ref.dips(ref.rank(scores[b].tolist()), rel[b].tolist(),
                            ref.membership_from_ids(groups[b].tolist(), 2), F, 0.5))
    mean, valid = dips(scores, rel, groups, num_groups=2, reduction="mean", return_valid=True)
    total = dips(scores, rel, groups, num_groups=2, reduction="sum")
    assert valid.tolist() == [[True, True], [True, True]]
    for g in range(2):
        for h in range(2):
            vals = [per[b][0][g][h] for b in range(3) if per[b][1][g][h]]
            assert float(mean[g, h]) == pytest.approx(sum(vals) / len(vals), **TOL)
            assert float(total[g, h]) == pytest.approx(sum(vals), **TOL)
    assert len([b for b in range(3) if per[b][1][0][1]]) == 2  # the invalid list really was excluded
    # igi / kendall_tau / discordant_fraction
    m = igi(scores, rel, groups, num_groups=2, reduction="mean")
    vals = [ref.igi(ref.rank(scores[b].tolist()), rel[b].tolist(),
                    ref.membership_from_ids(groups[b].tolist(), 2))[0][0][1] for b in (0, 2)]
    assert float(m[0, 1]) == pytest.approx(sum(vals) / 2, **TOL)
    mask = torch.tensor([[True, True, True, True], [True, False, False, False], [True, True, False, False]])
    t, v = kendall_tau(scores, rel, mask=mask, reduction="mean", return_valid=True)
    e = [ref.kendall_tau(ref.rank(scores[b, :n].tolist()), rel[b, :n].tolist())[0] for b, n in ((0, 4), (2, 2))]
    assert float(t) == pytest.approx(sum(e) / 2, **TOL) and bool(v)
    d = discordant_fraction(scores, rel, mask=mask, reduction="sum")
    e = [ref.discordant_fraction(ref.rank(scores[b, :n].tolist()), rel[b, :n].tolist())[0] for b, n in ((0, 4), (2, 2))]
    assert float(d) == pytest.approx(sum(e), **TOL)
    rp = rank_parity(scores, groups, num_groups=2, reduction="mean")
    e = [ref.rank_parity(ref.rank(scores[b].tolist()), ref.membership_from_ids(groups[b].tolist(), 2))[2][1]
         for b in (0, 2)]
    assert float(rp.per_group[1]) == pytest.approx(sum(e) / 2, **TOL)


def test_reduction_mean_all_invalid_gives_zero_not_nan():
    scores = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    rel = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    groups = torch.tensor([[0, 0], [0, 0]])
    M, V = dips(scores, rel, groups, num_groups=2, reduction="mean", return_valid=True)
    assert torch.isfinite(M).all()
    assert V.tolist() == [[True, False], [False, False]]
    assert M[0, 1].item() == 0.0 and M[1, 1].item() == 0.0


def test_return_valid_flags_absent_group():
    scores = torch.tensor([[0.3, 0.2, 0.9], [0.5, 0.1, 0.4]])
    rel = torch.tensor([[1.0, 2.0, 0.0], [1.0, 1.0, 1.0]])
    groups = torch.tensor([[0, 2, 0], [0, 0, -1]])  # group 1 absent everywhere; group 2 absent from list 1
    for fn in (dips, igi, ree, pairwise_accuracy):
        M, V = fn(scores, rel, groups, num_groups=3, return_valid=True)
        assert M.shape == (2, 3, 3) and V.shape == (2, 3, 3) and V.dtype == torch.bool
        assert torch.isfinite(M).all(), fn.__name__
        assert not V[:, 1, :].any() and not V[:, :, 1].any(), fn.__name__
        assert torch.all(M[:, 1, :] == 0) and torch.all(M[:, :, 1] == 0), fn.__name__
        assert not V[1, 2, :].any() and not V[1, :, 2].any(), fn.__name__
        assert torch.all(M[1, 2, :] == 0) and torch.all(M[1, :, 2] == 0), fn.__name__
    M, V = dips(scores, rel, groups, num_groups=3, return_valid=True)
    assert bool(V[0, 0, 2]) and bool(V[0, 2, 0]) and bool(V[1, 0, 0])
    # IGI / accuracy also need a strictly ordered pair: list 1 is all tied in relevance
    M, V = igi(scores, rel, groups, num_groups=3, return_valid=True)
    assert not bool(V[1, 0, 0]) and M[1, 0, 0].item() == 0.0
    rp = rank_parity(scores, groups, num_groups=3)
    assert rp.valid.tolist() == [[True, False, True], [False, False, False]]
    assert torch.isfinite(rp.pair).all() and rp.pair[1].tolist() == [0.0, 0.0, 0.0]


def test_unknown_group_items_still_ranked():
    # the unknown item (-1) sits on top and is the less relevant one: it still pushes both groups down
    scores = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    rel = torch.tensor([0.0, 2.0, 1.0], dtype=torch.float64)
    groups = torch.tensor([-1, 0, 1])
    M = dips(scores, rel, groups, browsing=RBP(0.5), tie_weight=0.0)
    # group 0 (item 1, position 1): UDP vs unknown item only -> 0; group 1 (item 2, position 2): UDP vs
    # unknown (not in a group) -> 0; vs item 1? r_2 = 1 < r_1 = 2 -> no UDP
    assert torch.all(M == 0)
    Mi = individual_dissatisfaction(scores, rel, browsing=RBP(0.5), tie_weight=0.0)
    assert Mi.tolist() == pytest.approx([0.0, 1.0, 1.0])
    # exposure: group 1's item at position 2 is seen with weight 0.25 by group 0 if it is above a more relevant
    M = dips(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0.0, 2.0, 1.0]), groups, browsing=RBP(0.5),
             tie_weight=0.0)
    # N_0 = N_1 = 1: C = 1 * F(0) = 1; item 1 (pos 2) below item 2 (pos 1, weight 0.5)
    assert M[0, 1].item() == pytest.approx(0.5) and M[1, 0].item() == 0.0


@pytest.mark.parametrize("junk", [float("nan"), float("inf")])
def test_padded_soft_membership_may_hold_anything(junk):
    """Padded items may hold anything (the mask says they are not there), also in a soft membership row.

    Scores [1, 2, pad], relevance [1, 0, pad], membership rows A, B, pad: item 0 (A, more relevant) is ranked below
    item 1 (B): one UDP against A, seen at position 0 (F = 1), C_AB = 1 -> M_AB = 1 for every measure below."""
    s = torch.tensor([1.0, 2.0, junk])
    r = torch.tensor([1.0, 0.0, junk])
    m = torch.tensor([True, True, False])
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0], [junk, junk]])
    expected = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    torch.testing.assert_close(dips(s, r, g, mask=m, browsing="uniform"), expected)
    torch.testing.assert_close(igi(s, r, g, mask=m), expected)
    torch.testing.assert_close(ree(s, r, g, mask=m), expected)
    torch.testing.assert_close(individual_dissatisfaction(s, r, g, mask=m, browsing="uniform"),
                               torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(rank_parity(s, g, mask=m).per_group, torch.tensor([0.0, 1.0]))


# ------------------------------------------------------------------------------------------ robustness
def _batch8(seed=0, B=3, N=6, G=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, N, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (B, N), generator=g).double(), torch.randint(0, G, (B, N), generator=g))


def test_pairwise_gap_with_validity_and_named_groups():
    s, r, g = _batch8()
    g[0] = 0  # list 0 has one group: M[0, 1], M[1, 0] undefined
    M, valid = dips(s, r, g, num_groups=2, return_valid=True)
    torch.testing.assert_close(pairwise_gap(M), M - M.transpose(-1, -2))  # unchanged without keywords
    gap, gv = pairwise_gap(M, valid=valid)
    assert gv.shape == (3, 2, 2) and not gv[0, 0, 1] and gv[1:, 0, 1].all()
    assert (gap[~gv] == 0).all()
    torch.testing.assert_close(gap[gv], (M - M.transpose(-1, -2))[gv])
    p = pairwise_gap(M, protected=1, reference=0)
    torch.testing.assert_close(p, M[:, 1, 0] - M[:, 0, 1])
    torch.testing.assert_close(pairwise_gap(M, protected=1), p)  # two groups: the reference is the other one
    p, pv = pairwise_gap(M, valid=valid, protected=0, reference=1)
    assert pv.tolist() == [False, True, True] and p[0] == 0
    torch.testing.assert_close(p[1:], (M[:, 0, 1] - M[:, 1, 0])[1:])


def test_pairwise_gap_sign_protected_disadvantaged_is_positive():
    # every protected (1) item is ranked below every less relevant group-0 item: group 1 is disadvantaged
    s = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    r = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    g = torch.tensor([0, 0, 1, 1])
    for fn in (dips, igi, ree):
        assert pairwise_gap(fn(s, r, g), protected=1).item() > 0


def test_accuracy_gaps_with_validity():
    from torchfair.metrics import accuracy_gaps
    s, r, g = _batch8(1)
    g[0] = 1
    A, valid = pairwise_accuracy(s, r, g, num_groups=2, return_valid=True)
    inter, intra = accuracy_gaps(A)  # unchanged without `valid`
    torch.testing.assert_close(inter, A[:, 0, 1] - A[:, 1, 0])
    (i2, iv), (a2, av) = accuracy_gaps(A, valid=valid)
    torch.testing.assert_close(iv, valid[:, 0, 1] & valid[:, 1, 0])
    torch.testing.assert_close(av, valid[:, 0, 0] & valid[:, 1, 1])
    assert not iv[0] and i2[0] == 0 and not av[0]
    torch.testing.assert_close(i2[iv], inter[iv])


@pytest.mark.parametrize("k", [1, 2, 4, 10])
def test_dips_k_is_the_browsing_model_cut_at_k(k):
    s, r, g = _batch8(2)
    F = RBP(0.8)
    torch.testing.assert_close(dips(s, r, g, browsing=F, k=k), dips(s, r, g, browsing=TopK(F, k)))
    torch.testing.assert_close(individual_dissatisfaction(s, r, g, browsing=F, k=k),
                               individual_dissatisfaction(s, r, g, browsing=TopK(F, k)))
    torch.testing.assert_close(dips(s, r, g, browsing="rbp:0.8", k=k), dips(s, r, g, browsing=TopK(F, k)))


@pytest.mark.parametrize("fn", [igi, ree])
@pytest.mark.parametrize("k", [1, 3, 10])
def test_igi_ree_k_counts_pairs_whose_upper_item_is_in_the_top_k(fn, k):
    """Plain loop: a discordant pair (i below j, r_i > r_j or tied with weight c_t) counts when pos_j < k."""
    s, r, g = _batch8(3, B=2, N=7)
    ct = 0.5
    M = fn(s, r, g, k=k, tie_weight=ct, num_groups=2)
    full = fn(s, r, g, tie_weight=ct, num_groups=2)
    for b in range(2):
        pos = {i: p for p, i in enumerate(sorted(range(7), key=lambda i: (-float(s[b, i]), i)))}
        for gi in range(2):
            for hj in range(2):
                num = 0.0
                for i in range(7):
                    for j in range(7):
                        if i == j or g[b, i] != gi or g[b, j] != hj or not (pos[j] < pos[i] and pos[j] < k):
                            continue
                        num += 1.0 if r[b, i] > r[b, j] else (ct if r[b, i] == r[b, j] else 0.0)
                # same normaliser as without a cut-off: M_full = num_full / C
                num_full = 0.0
                for i in range(7):
                    for j in range(7):
                        if i != j and g[b, i] == gi and g[b, j] == hj and pos[j] < pos[i]:
                            num_full += 1.0 if r[b, i] > r[b, j] else (ct if r[b, i] == r[b, j] else 0.0)
                if num_full > 0:
                    assert M[b, gi, hj].item() == pytest.approx(full[b, gi, hj].item() * num / num_full)
                else:
                    assert M[b, gi, hj].item() == 0
    if k >= 7:
        torch.testing.assert_close(M, full)


@pytest.mark.parametrize("tw", [float("nan"), "0.5", None, 2.0])
@pytest.mark.parametrize("fn", [dips, igi, ree], ids=["dips", "igi", "ree"])
def test_tie_weight_is_validated(fn, tw):
    s, r, g = _batch8()
    with pytest.raises(ValueError, match="`tie_weight`"):
        fn(s, r, g, tie_weight=tw)


def test_kendall_tau_reduction_and_single_list():
    s, r, _ = _batch8()
    tau, valid = kendall_tau(s, r, return_valid=True)
    m, mv = kendall_tau(s, r, reduction="mean", return_valid=True)
    assert m.item() == pytest.approx(tau[valid].mean().item()) and bool(mv)
    assert kendall_tau(s[0], r[0]).dim() == 0
    with pytest.raises(ValueError, match="`reduction`"):
        kendall_tau(s[0], r[0], reduction="foo")


@pytest.mark.parametrize("name", ["dips", "igi", "ree", "acc", "wins", "tau", "disc"])
def test_pairwise_measures_under_plackett_luce_are_expectations_over_rankings(name):
    """Every pairwise measure is linear in the pair quantities (its normaliser does not depend on the ordering):
    under a mixture of rankings it is the expectation of the measure, checked against enumeration."""
    import itertools
    from torchfair.orderings import PlackettLuce, scores_from_ranking
    from torchfair.orderings.plackett_luce import log_probability
    s = torch.tensor([[0.3, -0.2, 1.1, 0.0, 0.5]], dtype=torch.float64)
    r = torch.tensor([[1.0, 0.0, 3.0, 2.0, 1.0]], dtype=torch.float64)
    g = torch.tensor([[0, 1, 1, 0, 1]])

    def measure(scores, ordering=None):
        kw = dict(num_groups=2, ordering=ordering)
        return {"dips": lambda: dips(scores, r, g, browsing=RBP(0.8), **kw),
                "igi": lambda: igi(scores, r, g, tie_weight=0.5, k=3, **kw),
                "ree": lambda: ree(scores, r, g, **kw),
                "acc": lambda: pairwise_accuracy(scores, r, g, **kw),
                "wins": lambda: rank_parity(scores, g, **kw).wins,
                "tau": lambda: kendall_tau(scores, r, ordering=ordering),
                "disc": lambda: discordant_fraction(scores, r, ordering=ordering)}[name]()

    mask = torch.ones(1, 5, dtype=torch.bool)
    want = 0.0
    for perm in itertools.permutations(range(5)):
        p = torch.tensor([perm])
        prob = log_probability(s, p.unsqueeze(0), mask)[0].exp()
        want = want + prob * measure(scores_from_ranking(p).double())
    torch.testing.assert_close(measure(s, PlackettLuce(exact=True, temperature=1.0, scale="none")), want)  # logits s
