"""torchfair.metrics.disparity: DELTR's top-1 exposure gap and Fair-PG-Rank's disparate exposure, against plain
loops written from the papers' formulas (Zehlike & Castillo, WWW 2020, eq. 6; Singh & Joachims, NeurIPS 2019,
§4.1), worked examples, Plackett-Luce enumeration; properties: permuting items and padding change nothing, swapping
the protected group flips the sign, bounds, validity, finite gradients.

(The losses built on them, ``deltr_loss`` and ``fair_pg_rank_loss``, are tested in tests/losses/test_fairness.py.)
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from torchfair.metrics import disparate_exposure, top1_exposure_gap
from torchfair.orderings import Hard, PlackettLuce, SoftRank

F64 = torch.float64
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------------ plain loops
def _sides(memb, protected):
    """Per item: (weight on the non-protected side, weight on the protected side); ``memb`` rows of G weights
    (one-hot for ids, all zero for an unknown item)."""
    out = []
    for row in memb:
        p = row[protected] if protected < len(row) else 0.0
        out.append((sum(row) - p, p))
    return out


def _side_means(x, sides):
    """Mean of ``x`` over each side (weighted by membership); None for an absent side."""
    means = []
    for s in (0, 1):
        w = sum(sd[s] for sd in sides)
        means.append(None if w <= 0 else sum(sd[s] * v for sd, v in zip(sides, x)) / w)
    return means


def top1_gap_ref(scores, memb, protected=1):
    """Zehlike & Castillo, WWW 2020, eq. 6: U(G) = mean_{i in G} softmax(s)_i; gap = U(rest) - U(protected)."""
    mx = max(scores)
    z = [math.exp(s - mx) for s in scores]
    p1 = [v / sum(z) for v in z]
    u_rest, u_prot = _side_means(p1, _sides(memb, protected))
    if u_rest is None or u_prot is None:
        return None
    return u_rest - u_prot


def disparate_exposure_ref(exposure, rel, memb, protected=1, tiny=0.0):
    """Singh & Joachims, NeurIPS 2019, §4.1: v(G) / U(G) of the rest minus that of the protected group, with
    v the mean exposure and U the mean merit of each side; None when a side is absent or has zero merit."""
    sides = _sides(memb, protected)
    v = _side_means(exposure, sides)
    U = _side_means(rel, sides)
    if None in v or None in U or min(U) <= tiny:
        return None
    return v[0] / U[0] - v[1] / U[1]


def _dcg_exposure(order, k=None):
    """E[F(pos_i)] of a hard ranking with the DCG browsing model 1 / log2(pos + 2), cut at k."""
    e = [0.0] * len(order)
    for pos, i in enumerate(order):
        if k is None or pos < k:
            e[i] = 1.0 / math.log2(pos + 2)
    return e


def _real(x, m, b):
    return [v for v, keep in zip(x[b].tolist(), m[b].tolist()) if keep]


# ------------------------------------------------------------------------------------------------ top-1 gap
@st.composite
def _lists(draw, max_n=8, G=3):
    B, N = draw(st.integers(1, 3)), draw(st.integers(1, max_n))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=gen, dtype=F64) * draw(st.sampled_from([0.1, 1.0, 5.0]))
    r = torch.randint(0, 3, (B, N), generator=gen).to(F64)
    g = torch.randint(-1, G, (B, N), generator=gen)
    m = torch.rand(B, N, generator=gen) < 0.85
    m[:, 0] = True
    return s, r, g, m


@SETTINGS
@given(data=_lists(), protected=st.integers(0, 2))
def test_top1_exposure_gap_is_the_papers_formula(data, protected):
    s, _, g, m = data
    pad = torch.where(m, s, torch.full_like(s, float("nan")))
    gap, valid = top1_exposure_gap(pad, g, protected=protected, mask=m, num_groups=3, return_valid=True)
    for b in range(s.shape[0]):
        want = top1_gap_ref(_real(s, m, b), ref.membership_from_ids(_real(g, m, b), 3), protected)
        assert bool(valid[b]) == (want is not None)
        assert gap[b].item() == pytest.approx(0.0 if want is None else want, abs=1e-12)
        assert -1.0 <= gap[b].item() <= 1.0


def test_top1_exposure_gap_worked_example():
    # softmax(log 4, log 2, log 1, log 1) = (1/2, 1/4, 1/8, 1/8); rest = {0, 2}, protected = {1, 3}:
    # gap = (1/2 + 1/8) / 2 - (1/4 + 1/8) / 2 = 1/8
    s = torch.log(torch.tensor([4.0, 2.0, 1.0, 1.0], dtype=F64))
    g = torch.tensor([0, 1, 0, 1])
    assert top1_exposure_gap(s, g).item() == pytest.approx(0.125, abs=1e-15)
    assert top1_exposure_gap(s, g, protected=0).item() == pytest.approx(-0.125, abs=1e-15)
    # an unknown-group item (-1) takes softmax mass but is on neither side: rest = {0}, protected = {1, 3}
    g2 = torch.tensor([0, 1, -1, 1])
    assert top1_exposure_gap(s, g2).item() == pytest.approx(0.5 - 0.1875, abs=1e-15)
    # the rest of a three-group list is every other known group
    assert top1_exposure_gap(s, torch.tensor([2, 1, 0, 1])).item() == pytest.approx(0.125, abs=1e-15)


def test_top1_exposure_gap_soft_membership_and_absent_sides():
    s = torch.tensor([[0.3, 1.2, -0.4, 0.9]], dtype=F64)
    memb = torch.tensor([[[1.0, 0.0], [0.3, 0.7], [0.0, 0.0], [0.5, 0.5]]], dtype=F64)
    got = top1_exposure_gap(s, memb)
    want = top1_gap_ref(s[0].tolist(), memb[0].tolist(), 1)
    assert got.item() == pytest.approx(want, abs=1e-12)
    # one-hot membership equals the ids
    ids = torch.tensor([[0, 1, 1, 0]])
    assert top1_exposure_gap(s, ids).item() == pytest.approx(
        top1_exposure_gap(s, torch.nn.functional.one_hot(ids, 2).to(F64)).item(), abs=1e-15)
    # a list without the protected group, or with it only, is undefined; the batch mean skips it
    s2 = torch.tensor([[0.3, 1.2, -0.4], [1.0, 0.0, 2.0], [0.5, 0.1, 0.2]], dtype=F64)
    g2 = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0]])
    val, ok = top1_exposure_gap(s2, g2, return_valid=True)
    assert ok.tolist() == [False, False, True] and val[:2].tolist() == [0.0, 0.0]
    assert top1_exposure_gap(s2, g2, reduction="mean").item() == pytest.approx(val[2].item())
    assert top1_exposure_gap(s2, g2, protected=5).tolist() == [0.0, 0.0, 0.0]  # no group 5: every list undefined


@SETTINGS
@given(data=_lists(G=2))
def test_top1_exposure_gap_properties(data):
    """Permuting the items and inserting padding change nothing; swapping the groups of a list without unknown
    items negates the gap; finite gradients, zero on padding."""
    s, _, g, m = data
    g = g.clamp(min=0)
    x = torch.where(m, s, torch.full_like(s, float("nan"))).requires_grad_()
    gap, ok = top1_exposure_gap(x, g, mask=m, num_groups=2, return_valid=True)
    (grad,) = torch.autograd.grad(gap.sum(), x)
    assert torch.isfinite(grad).all() and (grad[~m] == 0).all()
    perm = torch.randperm(s.shape[1], generator=torch.Generator().manual_seed(0))
    gp = top1_exposure_gap(x.detach()[:, perm], g[:, perm], mask=m[:, perm], num_groups=2)
    torch.testing.assert_close(gp, gap.detach())
    flipped = top1_exposure_gap(x.detach(), 1 - g, mask=m, num_groups=2)
    torch.testing.assert_close(flipped, -gap.detach())


# ------------------------------------------------------------------------------------------------ disparate exposure
@SETTINGS
@given(data=_lists(), protected=st.integers(0, 2), k=st.sampled_from([None, 1, 3]))
def test_disparate_exposure_on_the_score_ranking_is_the_papers_formula(data, protected, k):
    s, r, g, m = data
    D, valid = disparate_exposure(s, r, g, protected=protected, k=k, mask=m, num_groups=3, return_valid=True)
    tiny = torch.finfo(F64).tiny ** 0.5
    for b in range(s.shape[0]):
        sc = _real(s, m, b)
        want = disparate_exposure_ref(_dcg_exposure(ref.rank(sc), k), _real(r, m, b),
                                      ref.membership_from_ids(_real(g, m, b), 3), protected, tiny)
        assert bool(valid[b]) == (want is not None)
        assert D[b].item() == pytest.approx(0.0 if want is None else want, abs=1e-12)


def test_disparate_exposure_worked_examples():
    s, r, g = torch.tensor([4.0, 3.0, 2.0, 1.0]), torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    assert disparate_exposure(s, r, g, browsing="uniform").item() == 0.0  # the docstring's example
    # DCG browsing: rest at positions 0, 1, protected at 2, 3, equal merit 1
    e = [1 / math.log2(k + 2) for k in range(4)]
    want = (e[0] + e[1]) / 2 - (e[2] + e[3]) / 2
    assert disparate_exposure(s.double(), r.double(), g).item() == pytest.approx(want, abs=1e-12)
    # merit scales the exposure a side deserves: protected items twice as relevant
    r2 = torch.tensor([1.0, 1.0, 2.0, 2.0], dtype=F64)
    assert disparate_exposure(s.double(), r2, g).item() == pytest.approx((e[0] + e[1]) / 2 - (e[2] + e[3]) / 4)
    # zero merit on a side: undefined
    val, ok = disparate_exposure(s, torch.tensor([1.0, 1.0, 0.0, 0.0]), g, return_valid=True)
    assert not bool(ok) and val.item() == 0.0


@pytest.mark.parametrize("ties", ["first", "average"])
def test_disparate_exposure_under_tied_scores_and_rbp(ties):
    """The exposure is that of the ordering: under average ties the mean over the orders of the tied items."""
    s = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0]], dtype=F64)
    r = torch.tensor([[1.0, 2.0, 0.0, 1.0, 3.0]], dtype=F64)
    g = torch.tensor([[0, 1, 0, 1, 1]])
    F = ref.ref_rbp(0.7)
    orders = [ref.rank(s[0].tolist())] if ties == "first" else list(ref.tie_orders(s[0].tolist()))
    e = [0.0] * 5
    for order in orders:
        for pos, i in enumerate(order):
            e[i] += F.position(pos) / len(orders)
    want = disparate_exposure_ref(e, r[0].tolist(), ref.membership_from_ids(g[0].tolist(), 2))
    got = disparate_exposure(s, r, g, browsing="rbp:0.7", ordering=Hard(ties))
    assert got.item() == pytest.approx(want, abs=1e-12)


def test_disparate_exposure_under_plackett_luce_is_the_expectation_by_enumeration():
    """Exact enumeration of a Plackett-Luce policy: v(G) uses E[F(pos_i)] over all n! rankings."""
    s = torch.tensor([[0.5, -0.3, 1.2, 0.0, 0.7]], dtype=F64)
    r = torch.tensor([[2.0, 1.0, 0.0, 1.0, 3.0]], dtype=F64)
    g = torch.tensor([[0, 1, 0, 1, 1]])
    n = 5
    z = [math.exp(v) for v in s[0].tolist()]
    e = [0.0] * n
    for order in itertools.permutations(range(n)):
        p, left = 1.0, sum(z)
        for i in order:
            p *= z[i] / left
            left -= z[i]
        for pos, i in enumerate(order):
            e[i] += p / math.log2(pos + 2)
    want = disparate_exposure_ref(e, r[0].tolist(), ref.membership_from_ids(g[0].tolist(), 2))
    got = disparate_exposure(s, r, g, ordering=PlackettLuce(exact=True, temperature=1.0, scale="none"))  # logits s
    assert got.item() == pytest.approx(want, abs=1e-12)


@SETTINGS
@given(data=_lists(G=2))
def test_disparate_exposure_properties(data):
    """On SoftRank: permuting items and padding change nothing; finite gradients, zero on padding; swapping the
    groups negates D where both sides are defined."""
    s, r, g, m = data
    g = g.clamp(min=0)
    r = r + 0.5  # every item has merit
    o = SoftRank(0.5)
    x = torch.where(m, s, torch.full_like(s, float("nan"))).requires_grad_()
    D, ok = disparate_exposure(x, r, g, mask=m, num_groups=2, ordering=o, return_valid=True)
    (grad,) = torch.autograd.grad(D.sum(), x)
    assert torch.isfinite(grad).all() and (grad[~m] == 0).all()
    perm = torch.randperm(s.shape[1], generator=torch.Generator().manual_seed(1))
    Dp = disparate_exposure(x.detach()[:, perm], r[:, perm], g[:, perm], mask=m[:, perm], num_groups=2, ordering=o)
    torch.testing.assert_close(Dp, D.detach())
    Df, okf = disparate_exposure(x.detach(), r, 1 - g, mask=m, num_groups=2, ordering=o, return_valid=True)
    assert torch.equal(okf, ok)
    torch.testing.assert_close(Df, -D.detach())


def test_disparate_exposure_tiny_merit_is_zero_merit_with_finite_gradients():
    s = torch.tensor([[1.0, 0.0, -1.0]], requires_grad=True)
    r = torch.tensor([[1.0, 1e-30, 0.0]])  # the protected side's mean merit (5e-31) is below sqrt(tiny) ~ 1e-19
    g = torch.tensor([[0, 1, 1]])
    D, ok = disparate_exposure(s, r, g, ordering=SoftRank(0.5), return_valid=True)
    D.sum().backward()
    assert not bool(ok[0]) and D.item() == 0.0 and torch.isfinite(s.grad).all()


@pytest.mark.parametrize("call, arg", [
    (lambda: top1_exposure_gap(torch.randn(4), torch.tensor([0, 1, 0, 1]), protected=-1), "protected"),
    (lambda: top1_exposure_gap(torch.randn(4), torch.tensor([0, 1, 0, 1]), protected=2, num_groups=2), "protected"),
    (lambda: disparate_exposure(torch.randn(4), torch.rand(4), torch.tensor([0, 1, 0, 1]), k=0), "k"),
    (lambda: disparate_exposure(torch.randn(4), torch.rand(4), torch.tensor([0, 1, 0, 1]), browsing="nope"),
     "browsing"),
    (lambda: disparate_exposure(torch.randn(4), None, torch.tensor([0, 1, 0, 1])), "relevance"),
])
def test_bad_arguments_name_themselves(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


@pytest.mark.parametrize("fn", [top1_exposure_gap, disparate_exposure])
def test_soft_protected_beyond_G_is_refused(fn):
    """Soft ``[B, N, G]`` groups declare G: ``protected >= G`` is a ValueError naming ``protected`` (issue 28); an
    integer id beyond the batch's groups stays undefined (0, invalid)."""
    s = torch.tensor([[3., 2., 1., 0.]], dtype=torch.float64)
    rel = () if fn is top1_exposure_gap else (torch.tensor([[1., 1., 0.5, 1.]], dtype=torch.float64),)
    ids = torch.tensor([[0, 1, 0, 1]])
    soft = torch.nn.functional.one_hot(ids, 2).to(torch.float64)
    with pytest.raises(ValueError, match="`protected`"):
        fn(s, *rel, soft, protected=2)
    torch.testing.assert_close(fn(s, *rel, soft, protected=1), fn(s, *rel, ids, protected=1))
    value, valid = fn(s, *rel, ids, protected=2, return_valid=True)
    assert not bool(valid) and float(value) == 0.0
