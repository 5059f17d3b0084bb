"""Hypothesis property tests of the exact pairwise evaluators."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import reference as ref
from torchfair.browsing import RBP, Cascade, Geometric, Logarithmic, ReciprocalRank, TopK, Uniform
from torchfair.metrics import (dips, discordant_fraction, igi, individual_dissatisfaction, kendall_tau,
                               pairwise_accuracy, pairwise_gap, rank_parity, ree)
from torchfair.orderings import Hard

SETTINGS = settings(max_examples=40, deadline=None)

MONOTONE = [RBP(0.7), Geometric(0.4), Logarithmic(), ReciprocalRank(), Uniform(), Cascade(0.9, max_grade=3.0),
            TopK(RBP(0.9), k=3)]
REF_MONOTONE = [ref.ref_rbp(0.7), ref.ref_geometric(0.4), ref.ref_logarithmic(), ref.ref_reciprocal(),
                ref.ref_uniform(), ref.ref_cascade(0.9, 3.0), ref.ref_topk(ref.ref_rbp(0.9), 3)]


@st.composite
def ranked_list(draw, G=2, distinct=True, soft=False, min_n=2, max_n=7):
    n = draw(st.integers(min_n, max_n))
    if distinct:
        scores = draw(st.lists(st.integers(-50, 50), min_size=n, max_size=n, unique=True))
    else:
        scores = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    rel = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    if soft:
        rows = draw(st.lists(st.lists(st.floats(0.05, 1.0), min_size=G, max_size=G), min_size=n, max_size=n))
        groups = torch.tensor([[x / sum(r) for x in r] for r in rows], dtype=torch.float64)
    else:
        groups = torch.tensor(draw(st.lists(st.integers(-1, G - 1), min_size=n, max_size=n)))
    return (torch.tensor(scores, dtype=torch.float64), torch.tensor(rel, dtype=torch.float64), groups)


def measures(s, r, g, G, mask=None, ordering=None, browsing=RBP(0.8), ct=0.5):
    """Group-matrix measures [G, G] and per-item measures [N, ...] of one list."""
    kw = dict(mask=mask, num_groups=G, ordering=ordering)
    rp = rank_parity(s, g, **kw)
    mats = {
        "dips": dips(s, r, g, browsing=browsing, tie_weight=ct, **kw),
        "igi": igi(s, r, g, tie_weight=ct, **kw),
        "ree": ree(s, r, g, tie_weight=ct, **kw),
        "acc": pairwise_accuracy(s, r, g, **kw),
        "wins": rp.wins,
    }
    vecs = {"per_group": rp.per_group, "pair": rp.pair}
    scal = {"disc": discordant_fraction(s, r, mask=mask, ordering=ordering),
            "tau": kendall_tau(s, r, mask=mask, ordering=ordering)}
    items = {"ind": individual_dissatisfaction(s, r, browsing=browsing, tie_weight=ct, mask=mask,
                                               ordering=ordering),
             "ind_g": individual_dissatisfaction(s, r, g, browsing=browsing, tie_weight=ct, **kw)}
    return mats, vecs, scal, items


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _check_permutation(s, r, g, perm, G, ordering, browsing):
    p = torch.tensor(perm)
    m1, v1, s1, i1 = measures(s, r, g, G, ordering=ordering, browsing=browsing)
    m2, v2, s2, i2 = measures(s[p], r[p], g[p], G, ordering=ordering, browsing=browsing)
    for k in m1:
        close(m1[k], m2[k])
    for k in v1:
        close(v1[k], v2[k])
    for k in s1:
        close(s1[k], s2[k])
    for k in i1:
        close(i1[k][p], i2[k])  # item perm[t] of the original list is item t of the permuted one


@SETTINGS
@given(data=st.data(), soft=st.booleans())
def test_permuting_items_changes_nothing_distinct_scores(data, soft):
    G = data.draw(st.sampled_from([2, 3]))
    s, r, g = data.draw(ranked_list(G=G, soft=soft))
    perm = data.draw(st.permutations(range(len(s))))
    browsing = data.draw(st.sampled_from(MONOTONE))
    _check_permutation(s, r, g, perm, G, None, browsing)


@SETTINGS
@given(data=st.data(), soft=st.booleans())
def test_permuting_items_changes_nothing_average_ties(data, soft):
    G = data.draw(st.sampled_from([2, 3]))
    s, r, g = data.draw(ranked_list(G=G, distinct=False, soft=soft))
    perm = data.draw(st.permutations(range(len(s))))
    browsing = data.draw(st.sampled_from([b for b in MONOTONE if not b.relevance_dependent]))
    _check_permutation(s, r, g, perm, G, Hard("average"), browsing)


JUNK = [float("nan"), float("inf"), float("-inf"), 1e30, -1e30, 0.0, 1.0]


@SETTINGS
@given(data=st.data(), soft=st.booleans(), ties=st.sampled_from(["first", "average"]))
def test_padding_changes_nothing(data, soft, ties):
    G = data.draw(st.sampled_from([2, 3]))
    s, r, g = data.draw(ranked_list(G=G, distinct=(ties == "first"), soft=soft))
    n = len(s)
    k = data.draw(st.integers(1, 3))
    where = data.draw(st.lists(st.integers(0, n + k - 1), min_size=k, max_size=k, unique=True))
    where = sorted(where)
    ps, pr, pg, mask, t = [], [], [], [], 0
    for slot in range(n + k):
        if slot in where:
            ps.append(data.draw(st.sampled_from(JUNK)))
            pr.append(data.draw(st.sampled_from(JUNK + [-3.0])))
            if soft:
                # arbitrary finite rows (not summing to 1): padded membership must be ignored
                pg.append([data.draw(st.floats(-5, 5)) for _ in range(G)])
            else:
                pg.append(data.draw(st.sampled_from([-7, -1, 0, G - 1, G, 99])))
            mask.append(False)
        else:
            ps.append(float(s[t]))
            pr.append(float(r[t]))
            pg.append(g[t].tolist())
            mask.append(True)
            t += 1
    ps = torch.tensor(ps, dtype=torch.float64)
    pr = torch.tensor(pr, dtype=torch.float64)
    pg = torch.tensor(pg, dtype=torch.float64 if soft else torch.long)
    mask = torch.tensor(mask)
    real = torch.nonzero(mask).flatten()
    browsing = data.draw(st.sampled_from(MONOTONE if ties == "first" else [b for b in MONOTONE if not b.relevance_dependent]))
    m1, v1, s1, i1 = measures(s, r, g, G, ordering=Hard(ties), browsing=browsing)
    m2, v2, s2, i2 = measures(ps, pr, pg, G, mask=mask, ordering=Hard(ties), browsing=browsing)
    for key in m1:
        close(m1[key], m2[key])
    for key in v1:
        close(v1[key], v2[key])
    for key in s1:
        close(s1[key], s2[key])
    for key in i1:
        close(i1[key], i2[key][real])
        assert torch.all(i2[key][~mask] == 0)


@SETTINGS
@given(data=st.data(), soft=st.booleans())
def test_relabelling_groups_permutes_matrices(data, soft):
    G = data.draw(st.sampled_from([2, 3]))
    s, r, g = data.draw(ranked_list(G=G, soft=soft))
    pi = data.draw(st.permutations(range(G)))  # old label h -> new label pi[h]
    if soft:
        g2 = torch.zeros_like(g)
        for h in range(G):
            g2[:, pi[h]] = g[:, h]
    else:
        g2 = torch.tensor([pi[int(x)] if x >= 0 else -1 for x in g])
    browsing = data.draw(st.sampled_from(MONOTONE))
    m1, v1, _, i1 = measures(s, r, g, G, browsing=browsing)
    m2, v2, _, i2 = measures(s, r, g2, G, browsing=browsing)
    idx = torch.tensor(pi)
    for key in m1:
        # M2[pi g, pi h] = M1[g, h]
        close(m2[key][idx][:, idx], m1[key])
    for key in v1:
        close(v2[key][idx], v1[key])
    close(i2["ind_g"][:, idx], i1["ind_g"])
    if G == 2 and list(pi) == [1, 0]:
        # swapping the two labels transposes the DIPS gap: (M_AB - M_BA) changes sign
        close(pairwise_gap(m2["dips"]), pairwise_gap(m1["dips"]).T)
        assert float(pairwise_gap(m2["dips"])[0, 1]) == pytest.approx(-float(pairwise_gap(m1["dips"])[0, 1]))


@SETTINGS
@given(data=st.data(), soft=st.booleans(), ct=st.floats(0.0, 1.0))
def test_bounds_and_finiteness(data, soft, ct):
    G = data.draw(st.sampled_from([2, 3]))
    s, r, g = data.draw(ranked_list(G=G, soft=soft, distinct=data.draw(st.booleans()), min_n=1))
    i = data.draw(st.integers(0, len(MONOTONE) - 1))
    ties = data.draw(st.sampled_from(["first", "average"])) if not MONOTONE[i].relevance_dependent else "first"
    mats, vecs, scal, items = measures(s, r, g, G, ordering=Hard(ties), browsing=MONOTONE[i], ct=ct)
    for d in (mats, vecs, scal, items):
        for key, x in d.items():
            assert torch.isfinite(x).all(), key
    eps = 1e-12
    for key in ("dips", "igi", "ree", "acc", "wins"):
        assert (mats[key] >= -eps).all() and (mats[key] <= 1 + eps).all(), (key, mats[key])
    gap = pairwise_gap(mats["dips"])
    # 000 §4.4 states (-1, 1); the bound is attained (see test_pairwise::test_dips_gap_reaches_one...)
    assert (gap.abs() <= 1 + eps).all(), gap
    assert (vecs["pair"] >= -eps).all() and (vecs["pair"] <= 1 + eps).all()
    assert -eps <= float(scal["disc"]) <= 1 + eps and -1 - eps <= float(scal["tau"]) <= 1 + eps
    assert (items["ind"] >= -eps).all()


@SETTINGS
@given(data=st.data(), soft=st.booleans(), ct=st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_dips_matches_reference_random(data, soft, ct):
    G = data.draw(st.sampled_from([2, 3]))
    s, r, g = data.draw(ranked_list(G=G, soft=soft, distinct=data.draw(st.booleans()), min_n=1))
    i = data.draw(st.integers(0, len(MONOTONE) - 1))
    M, V = dips(s, r, g, browsing=MONOTONE[i], tie_weight=ct, num_groups=G, return_valid=True)
    memb = g.tolist() if soft else ref.membership_from_ids(g.tolist(), G)
    eM, eV = ref.dips(ref.rank(s.tolist()), r.tolist(), memb, REF_MONOTONE[i], ct)
    for a in range(G):
        for b in range(G):
            assert float(M[a, b]) == pytest.approx(eM[a][b], rel=1e-9, abs=1e-12)
            assert bool(V[a, b]) == eV[a][b]
