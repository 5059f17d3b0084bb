"""Tests of torchfair.losses: gradients (gradcheck), values against the measures and plain-Python formulas,
masks, undefined lists, low precision, and the FairnessRegularizer.

Conventions: the loss registry ``LOSSES`` maps a name to ``f(scores, relevance, groups, mask, ordering,
reduction)``; losses that take no ordering ignore the argument.  Data are small (B = 2, N = 5) with scores at
least 0.2 apart and temperatures 0.5 (``scale="none"``), so the relaxations are smooth and the kinks of
``|x|``, ``max`` and ``relu`` are avoided; every gradcheck asserts that precondition on the data first.
"""
from __future__ import annotations

import inspect
import math

import pytest
import torch

import loss_reference as ref
import reference as pref
import exposure_reference as eref
from torchfair.losses import (DIPSLoss, FairnessRegularizer, ListNetLoss, approx_ndcg_loss, deltr_loss, dips_loss,
                              exposure_misallocation_loss, fair_pg_rank_loss, listmle_loss, listnet_loss,
                              neural_ndcg_loss, pairwise_accuracy_gap_loss, pairwise_correlation_loss)
from torchfair.metrics import dips, pairwise_accuracy
from torchfair.metrics.exposure import expected_exposure, exposure_misallocation
from torchfair.metrics.utility import ndcg
from torchfair.orderings import Hard, NeuralSort, PlackettLuce, SoftRank, SoftSort

TAU = 0.5
F64 = torch.float64


# ------------------------------------------------------------------------------------------------ orderings
def _fast_soft_rank(temperature=1.7):
    """FastSoftRank.  Its positions are piecewise linear in the scores (a projection onto the permutahedron),
    with kinks where two scores are exactly ``temperature`` apart; the test scores are multiples of 0.1 with gaps
    of 0.5, so the default temperature here is chosen off that grid (and large enough for non-zero gradients)."""
    mod = pytest.importorskip("torchfair.orderings.fast_soft_rank")
    cls = getattr(mod, "FastSoftRank", None)
    if cls is None:
        pytest.skip("torchfair.orderings.fast_soft_rank has no FastSoftRank yet")
    params = inspect.signature(cls).parameters
    kw = {}
    if "scale" in params:
        kw["scale"] = "none"
    if "temperature" in params:
        kw["temperature"] = temperature
    elif "regularization_strength" in params:
        kw["regularization_strength"] = temperature
    return cls(**kw)


SOFT_ORDERINGS = {
    "softrank": lambda: SoftRank(TAU, scale="none"),
    "neuralsort": lambda: NeuralSort(TAU, scale="none"),
    "softsort": lambda: SoftSort(TAU, scale="none"),
    "fastsoftrank": _fast_soft_rank,
}
ALL_ORDERINGS = {**SOFT_ORDERINGS, "pl_exact": lambda: PlackettLuce(exact=True)}


# ------------------------------------------------------------------------------------------------ losses
def _dips(mode, **kw):
    return lambda s, r, g, m, o, red="mean": dips_loss(s, r, g, mode=mode, mask=m, num_groups=2, ordering=o,
                                                        reduction=red, **kw)


def _exp(target, norm):
    return lambda s, r, g, m, o, red="mean": exposure_misallocation_loss(s, r, g, target=target, norm=norm, mask=m,
                                                                          num_groups=2, ordering=o, reduction=red)


def _acc(which):
    return lambda s, r, g, m, o, red="mean": pairwise_accuracy_gap_loss(s, r, g, which=which, mask=m, num_groups=2,
                                                                         ordering=o, reduction=red)


ORDERED = {
    "dips_abs": _dips("abs"),
    "dips_square": _dips("square"),
    "dips_one_sided": _dips("one_sided", protected=1),
    **{f"exp_{t}_{n}": _exp(t, n) for t in ("ee", "ea", "ea-dp") for n in ("l1", "l2sq")},
    "exp_ee-l": _exp("ee", "ee-l"),
    "acc_inter": _acc("inter"),
    "acc_intra": _acc("intra"),
    "acc_both": _acc("both"),
    "fair_pg_rank": lambda s, r, g, m, o, red="mean": fair_pg_rank_loss(s, r, g, mask=m, num_groups=2, ordering=o,
                                                                        reduction=red),
}
UNORDERED = {
    "deltr": lambda s, r, g, m, o=None, red="mean": deltr_loss(s, g, mask=m, num_groups=2, reduction=red),
    "correlation": lambda s, r, g, m, o=None, red="mean": pairwise_correlation_loss(s, r, g, mask=m, num_groups=2),
    "listnet": lambda s, r, g, m, o=None, red="mean": listnet_loss(s, r, mask=m, reduction=red),
    "listmle": lambda s, r, g, m, o=None, red="mean": listmle_loss(s, r, mask=m, reduction=red),
    "approx_ndcg": lambda s, r, g, m, o=None, red="mean": approx_ndcg_loss(s, r, temperature=TAU, mask=m,
                                                                          reduction=red),
    "neural_ndcg": lambda s, r, g, m, o=None, red="mean": neural_ndcg_loss(s, r, temperature=TAU, mask=m,
                                                                          reduction=red),
}
LOSSES = {**ORDERED, **UNORDERED}
#: losses with an |x|, max or relu kink in the per-list value: the data must keep them away from it
KINKED = {"dips_abs", "dips_one_sided", "exp_ee_l1", "exp_ea_l1", "exp_ea-dp_l1", "acc_inter", "acc_intra",
          "acc_both", "fair_pg_rank", "correlation"}
#: the losses the brief asks to gradcheck through PlackettLuce(exact=True)
PL_LOSSES = [n for n in ORDERED]


# ------------------------------------------------------------------------------------------------ data
def _data(dtype=F64):
    """B = 2, N = 5: two groups in each list, relevance crossing the groups both ways; the scores favour group 0
    (group 1, the protected one, is under-ranked) and sit at least 0.2 apart."""
    s = torch.tensor([[2.0, 1.0, 1.5, -0.5, 0.0],
                      [-1.0, 1.2, -0.2, 0.6, 1.8]], dtype=dtype)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0, 1.0],
                      [1.0, 2.0, 3.0, 0.0, 1.0]], dtype=dtype)
    g = torch.tensor([[0, 0, 0, 1, 1],
                      [1, 0, 1, 0, 0]])
    m = torch.ones(2, 5, dtype=torch.bool)
    return s, r, g, m


def _check_away_from_kink(name, s, r, g, m, o):
    if name not in KINKED:
        return
    if name == "correlation":
        per = LOSSES[name](s, r, g, m, o).reshape(1)
    else:
        per = LOSSES[name](s, r, g, m, o, "none")
    assert (per > 1e-3).all(), f"data sit at a kink of {name}: per-list values {per.tolist()}"


def _gradcheck(name, ordering_factory):
    s, r, g, m = _data()
    o = None if ordering_factory is None else ordering_factory()
    with torch.no_grad():
        _check_away_from_kink(name, s, r, g, m, o)
    s = s.clone().requires_grad_(True)
    f = LOSSES[name]
    assert torch.autograd.gradcheck(lambda x: f(x, r, g, m, o), (s,), eps=1e-6, atol=1e-6, rtol=1e-4)
    # not a vacuous check: the loss really depends on the scores
    (grad,) = torch.autograd.grad(f(s, r, g, m, o), s)
    assert grad.abs().max() > 1e-6, f"{name}: zero gradient on unfair data"


# =============================================================================================== 1. gradcheck
@pytest.mark.parametrize("oname", list(SOFT_ORDERINGS))
@pytest.mark.parametrize("name", list(ORDERED))
def test_gradcheck_soft_orderings(name, oname):
    _gradcheck(name, SOFT_ORDERINGS[oname])


@pytest.mark.parametrize("name", PL_LOSSES)
def test_gradcheck_plackett_luce_exact(name):
    _gradcheck(name, lambda: PlackettLuce(exact=True))


@pytest.mark.parametrize("name", ["deltr", "correlation", "listnet", "listmle"])
def test_gradcheck_ordering_free(name):
    _gradcheck(name, None)


@pytest.mark.parametrize("name,Ord,kw", [("approx_ndcg", SoftRank, {}),
                                          ("neural_ndcg", NeuralSort, {"sinkhorn_iters": 20})])
def test_ndcg_losses_gradient_is_that_of_the_frozen_temperature(name, Ord, kw):
    """approx/neural NDCG use ``scale="std"``: the list's std is a detached constant, so their gradient is the one
    of ``1 - NDCG`` on ``Ord(temperature * std, scale="none")`` (gradchecked here), not the derivative of the
    loss value as a function of the scores (the value also moves with the std)."""
    s, r, g, m = _data()
    for b in range(2):
        sb = s[b:b + 1].clone().requires_grad_(True)
        rb = r[b:b + 1]
        std = sb.detach().std(unbiased=False).item()
        frozen = Ord(TAU * std, scale="none", **kw)

        def one_minus_ndcg(x):
            return 1.0 - ndcg(x, rb, ordering=frozen, reduction="mean")

        loss = LOSSES[name](sb, rb, None, None)
        (g_loss,) = torch.autograd.grad(loss, sb)
        (g_frozen,) = torch.autograd.grad(one_minus_ndcg(sb), sb)
        torch.testing.assert_close(loss, one_minus_ndcg(sb), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g_loss, g_frozen, rtol=1e-10, atol=1e-12)
        assert torch.autograd.gradcheck(one_minus_ndcg, (sb,), eps=1e-6, atol=1e-6, rtol=1e-4)
        assert g_loss.abs().max() > 1e-6


# =============================================================================================== 2. values
def _rows(x, m, b):
    return [v for v, keep in zip(x[b].tolist(), m[b].tolist()) if keep]


def _batch_with_undefined(dtype=F64):
    """``_data`` plus a one-group list and a list with a single real item (the rest NaN padding)."""
    s, r, g, m = _data(dtype)
    nan = float("nan")
    s = torch.cat([s, torch.tensor([[0.3, 1.9, -0.8, 1.1, 0.2], [0.7, nan, nan, nan, nan]], dtype=dtype)])
    r = torch.cat([r, torch.tensor([[1.0, 3.0, 0.0, 2.0, 1.0], [2.0, 0.0, 0.0, 0.0, 0.0]], dtype=dtype)])
    g = torch.cat([g, torch.tensor([[0, 0, 0, 0, 0], [1, 0, 0, 0, 0]])])
    m = torch.cat([m, torch.tensor([[True] * 5, [True, False, False, False, False]])])
    return s, r, g, m


def _mean_valid(per, valid):
    vals = [p for p, v in zip(per, valid) if v]
    return sum(vals) / len(vals) if vals else 0.0


def _gap_ref(M, V, mode, protected=None):
    """Per-list reduction written from the docstrings: largest |M_gh - M_hg| (or its square) over the valid pairs
    g != h; one_sided: largest relu(M_ph - M_hp) over valid h != p.  (value, valid)."""
    G = len(M)
    vals = []
    for a in range(G):
        for h in range(G):
            if a == h or not (V[a][h] and V[h][a]):
                continue
            if mode == "one_sided" and a != protected:
                continue
            d = M[a][h] - M[h][a]
            vals.append(abs(d) if mode == "abs" else d * d if mode == "square" else max(0.0, d))
    return (max(vals), True) if vals else (0.0, False)


@pytest.mark.parametrize("mode", ["abs", "square", "one_sided"])
@pytest.mark.parametrize("oname", ["softrank", "neuralsort", "pl_exact"])
def test_dips_loss_is_reduced_metric(mode, oname):
    s, r, g, m = _batch_with_undefined()
    o = ALL_ORDERINGS[oname]()
    M, V = dips(s, r, g, mask=m, num_groups=2, ordering=o, return_valid=True)
    per = []
    for b in range(s.shape[0]):
        per.append(_gap_ref(M[b].tolist(), V[b].tolist(), mode, protected=1))
    expect = _mean_valid([p for p, _ in per], [v for _, v in per])
    assert [v for _, v in per] == [True, True, False, False]
    got = dips_loss(s, r, g, mode=mode, protected=1, mask=m, num_groups=2, ordering=o)
    assert math.isclose(got.item(), expect, rel_tol=1e-10, abs_tol=1e-12)
    if mode == "abs":  # the brief's formula for two groups
        gap = (M[:, 0, 1] - M[:, 1, 0]).abs()
        assert math.isclose(got.item(), gap[:2].mean().item(), rel_tol=1e-10)


@pytest.mark.parametrize("mode", ["abs", "square", "one_sided"])
def test_dips_loss_hard_matches_plain_reference(mode):
    """End to end with the exact ordering against tests/references/reference.py's loops (RBP(0.9), c_t = 0.5)."""
    s, r, g, m = _batch_with_undefined()
    per, valid = [], []
    for b in range(s.shape[0]):
        sc, rl, ids = _rows(s, m, b), _rows(r, m, b), _rows(g, m, b)
        M, V = pref.dips(pref.rank(sc), rl, pref.membership_from_ids(ids, 2), pref.ref_rbp(0.9), 0.5)
        p, v = _gap_ref(M, V, mode, protected=1)
        per.append(p)
        valid.append(v)
    got = dips_loss(s, r, g, mode=mode, protected=1, mask=m, num_groups=2, ordering=Hard())
    assert math.isclose(got.item(), _mean_valid(per, valid), rel_tol=1e-10, abs_tol=1e-12)


def test_dips_loss_one_sided_protects_the_named_group():
    s, r, g, m = _data()
    M = dips(s, r, g, num_groups=2, ordering=SoftRank(TAU, scale="none"))
    gap10 = M[:, 1, 0] - M[:, 0, 1]  # how much more group 1 is dissatisfied by group 0 than the reverse
    assert (gap10 > 0).all()  # the data disadvantage group 1
    o = SoftRank(TAU, scale="none")
    prot1 = dips_loss(s, r, g, mode="one_sided", protected=1, num_groups=2, ordering=o, reduction="none")
    prot0 = dips_loss(s, r, g, mode="one_sided", protected=0, num_groups=2, ordering=o, reduction="none")
    torch.testing.assert_close(prot1, gap10)
    assert (prot0 == 0).all()
    # protecting the advantaged group gives no gradient at all
    s_ = s.clone().requires_grad_(True)
    dips_loss(s_, r, g, mode="one_sided", protected=0, num_groups=2, ordering=o).backward()
    assert (s_.grad == 0).all()
    # and the symmetric modes agree with it where it is active
    ab = dips_loss(s, r, g, mode="abs", num_groups=2, ordering=o, reduction="none")
    torch.testing.assert_close(ab, prot1)


@pytest.mark.parametrize("oname", ["softrank", "softsort", "hard"])
def test_dips_loss_three_groups_takes_largest_pairwise_gap(oname):
    s = torch.tensor([[2.0, 1.0, 1.5, -0.5, 0.0, 0.9, -1.3], [0.4, -1.0, 1.1, 2.2, -0.1, 0.8, 1.6]], dtype=F64)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0, 1.0, 2.0, 3.0], [1.0, 2.0, 0.0, 3.0, 2.0, 1.0, 0.0]], dtype=F64)
    g = torch.tensor([[0, 0, 0, 1, 1, 2, 2], [2, 1, 0, 0, 1, 2, 2]])
    o = Hard() if oname == "hard" else SOFT_ORDERINGS[oname]()
    M, V = dips(s, r, g, num_groups=3, ordering=o, return_valid=True)
    for mode in ("abs", "square", "one_sided"):
        for p in range(3):
            per = [_gap_ref(M[b].tolist(), V[b].tolist(), mode, protected=p)[0] for b in range(2)]
            got = dips_loss(s, r, g, mode=mode, protected=p, num_groups=3, ordering=o, reduction="none")
            torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-10, atol=1e-12)
            if mode != "one_sided":
                break
    # the largest gap is not always the (0, 1) one: the test really exercises the max over pairs
    gaps = (M - M.transpose(1, 2)).abs()
    assert ((gaps[:, 0, 1] + 1e-9) < gaps.flatten(1).amax(-1)).any()


@pytest.mark.parametrize("target", ["ee", "ea", "ea-dp"])
@pytest.mark.parametrize("norm", ["l1", "l2sq"])
@pytest.mark.parametrize("oname", ["softrank", "softsort", "pl_exact"])
def test_exposure_loss_is_reduced_metric(target, norm, oname):
    s, r, g, m = _data()
    r = torch.cat([r, torch.zeros(1, 5, dtype=F64)])  # no relevant item: undefined under "ea"
    s = torch.cat([s, torch.tensor([[0.1, 0.9, -0.4, 1.3, 2.1]], dtype=F64)])
    g = torch.cat([g, torch.tensor([[0, 1, 1, 0, 1]])])
    m = torch.ones(3, 5, dtype=torch.bool)
    o = ALL_ORDERINGS[oname]()
    delta, valid = exposure_misallocation(s, r, g, target=target, num_groups=2, ordering=o, return_valid=True)
    per = [sum(abs(x) if norm == "l1" else x * x for x in delta[b].tolist()) for b in range(3)]
    ok = [bool(v) for v in valid.all(-1).tolist()]
    assert ok == [True, True, target != "ea"]
    got = exposure_misallocation_loss(s, r, g, target=target, norm=norm, num_groups=2, ordering=o)
    assert math.isclose(got.item(), _mean_valid(per, ok), rel_tol=1e-10, abs_tol=1e-12)


@pytest.mark.parametrize("target", ["ee", "ea", "ea-dp"])
@pytest.mark.parametrize("norm", ["l1", "l2sq", "ee-l"])
def test_exposure_loss_hard_matches_plain_reference(target, norm):
    s, r, g, m = _data()
    rbp = eref.rbp(0.9)
    per = []
    for b in range(2):
        ranking = [pref.rank(s[b].tolist())]
        if norm == "ee-l":
            per.append(eref.expected_exposure(ranking, r[b].tolist(), rbp, groups=g[b].tolist(), G=2)[0])
        else:
            d = eref.misallocation(ranking, r[b].tolist(), g[b].tolist(), 2, rbp, target)
            per.append(sum(abs(x) if norm == "l1" else x * x for x in d))
    got = exposure_misallocation_loss(s, r, g, target=target, norm=norm, num_groups=2, ordering=Hard())
    assert math.isclose(got.item(), sum(per) / 2, rel_tol=1e-10, abs_tol=1e-12)


@pytest.mark.parametrize("oname", ["softrank", "neuralsort", "pl_exact"])
def test_exposure_ee_l_is_metric(oname):
    s, r, g, m = _data()
    o = ALL_ORDERINGS[oname]()
    ee = expected_exposure(s, r, g, num_groups=2, ordering=o)
    got = exposure_misallocation_loss(s, r, g, norm="ee-l", num_groups=2, ordering=o)
    assert math.isclose(got.item(), ee.loss.mean().item(), rel_tol=1e-12)


def _acc_ref(A, V, which, p=1, q=0):
    vi = V[q][p] and V[p][q]
    va = V[q][q] and V[p][p]
    inter, intra = abs(A[q][p] - A[p][q]), abs(A[q][q] - A[p][p])
    if which == "inter":
        return inter, vi
    if which == "intra":
        return intra, va
    return (inter if vi else 0.0) + (intra if va else 0.0), vi or va


def _acc_batch():
    """``_data`` plus lists where only one of the inter / intra gaps is defined."""
    s, r, g, m = _data()
    s = torch.cat([s, torch.tensor([[0.3, 1.9, -0.8, 1.1, 0.2], [0.5, -0.7, 1.4, 0.1, 2.3]], dtype=F64)])
    # list 2: group 1 has a single item -> A[1, 1] undefined (intra undefined), inter defined;
    # list 3: every group-1 item less relevant than every group-0 item -> A[1, 0] undefined (inter undefined),
    # intra defined
    r = torch.cat([r, torch.tensor([[1.0, 3.0, 2.0, 0.0, 1.0], [3.0, 2.0, 1.0, 0.0, 2.0]], dtype=F64)])
    g = torch.cat([g, torch.tensor([[0, 0, 1, 0, 0], [0, 0, 1, 1, 0]])])
    m = torch.ones(4, 5, dtype=torch.bool)
    return s, r, g, m


@pytest.mark.parametrize("which", ["inter", "intra", "both"])
@pytest.mark.parametrize("oname", ["softrank", "softsort", "pl_exact"])
def test_accuracy_gap_loss_is_reduced_metric(which, oname):
    s, r, g, m = _acc_batch()
    o = ALL_ORDERINGS[oname]()
    A, V = pairwise_accuracy(s, r, g, num_groups=2, ordering=o, return_valid=True)
    per = [_acc_ref(A[b].tolist(), V[b].tolist(), which) for b in range(4)]
    assert [v for _, v in per] == {"inter": [True, True, True, False], "intra": [True, True, False, True],
                                   "both": [True] * 4}[which]
    got = pairwise_accuracy_gap_loss(s, r, g, which=which, num_groups=2, ordering=o)
    assert math.isclose(got.item(), _mean_valid(*zip(*per)), rel_tol=1e-10, abs_tol=1e-12)


@pytest.mark.parametrize("which", ["inter", "intra", "both"])
def test_accuracy_gap_loss_hard_matches_plain_reference(which):
    s, r, g, m = _acc_batch()
    per = []
    for b in range(4):
        A, V = pref.pairwise_accuracy(pref.rank(s[b].tolist()), r[b].tolist(),
                                      pref.membership_from_ids(g[b].tolist(), 2))
        per.append(_acc_ref(A, V, which))
    assert [v for _, v in per] == {"inter": [True, True, True, False], "intra": [True, True, False, True],
                                   "both": [True] * 4}[which]
    got = pairwise_accuracy_gap_loss(s, r, g, which=which, num_groups=2, ordering=Hard())
    assert math.isclose(got.item(), _mean_valid(*zip(*per)), rel_tol=1e-10, abs_tol=1e-12)


def test_listnet_matches_cao_et_al():
    s, r, g, m = _batch_with_undefined()
    per = [ref.listnet(_rows(s, m, b), _rows(r, m, b)) for b in range(4)]
    got = listnet_loss(s, r, mask=m, reduction="none")
    torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-12, atol=1e-12)
    assert math.isclose(listnet_loss(s, r, mask=m).item(), sum(per) / 4, rel_tol=1e-12)



def test_listnet_relevance_temperature_divides_the_target_logits():
    s, r, g, m = _batch_with_undefined()
    for T in (0.5, 2.0, 4.0):
        per = [ref.listnet(_rows(s, m, b), [x / T for x in _rows(r, m, b)]) for b in range(4)]
        got = listnet_loss(s, r, mask=m, reduction="none", relevance_temperature=T)
        torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-12, atol=1e-12)
    # T = 1 is Cao et al.'s loss, unchanged; another T changes the loss
    torch.testing.assert_close(listnet_loss(s, r, mask=m, relevance_temperature=1.0), listnet_loss(s, r, mask=m))
    assert not torch.isclose(listnet_loss(s, r, mask=m, relevance_temperature=2.0), listnet_loss(s, r, mask=m))
    # the module form takes it as an option (and so a YAML config's init_args)
    mod = ListNetLoss(relevance_temperature=2.0)
    torch.testing.assert_close(mod(s, r, g, m), listnet_loss(s, r, mask=m, relevance_temperature=2.0))
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="relevance_temperature"):
            listnet_loss(s, r, mask=m, relevance_temperature=bad)

def test_listmle_matches_xia_et_al():
    s, r, g, m = _batch_with_undefined()  # relevance ties inside the lists: broken by list index
    per = [ref.listmle(_rows(s, m, b), _rows(r, m, b)) for b in range(4)]
    got = listmle_loss(s, r, mask=m, reduction="none")
    torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-12, atol=1e-12)
    assert math.isclose(listmle_loss(s, r, mask=m).item(), sum(per) / 4, rel_tol=1e-12)


def test_deltr_matches_formula():
    s, r, g, m = _batch_with_undefined()
    g = g.clone()
    g[1, 0] = -1  # an unknown-group item: in the softmax, in neither side
    per = [ref.deltr(_rows(s, m, b), _rows(g, m, b)) for b in range(4)]
    assert per[2] is None and per[3] is None and per[0] > 0 and per[1] > 0
    got = deltr_loss(s, g, mask=m, num_groups=2)
    assert math.isclose(got.item(), (per[0] + per[1]) / 2, rel_tol=1e-12)
    # the protected side is the one pushed up: protecting group 0 (favoured) gives 0
    assert deltr_loss(s, g, mask=m, num_groups=2, protected=0).item() == 0.0


@pytest.mark.parametrize("oname", ["hard", "softrank"])
def test_fair_pg_rank_matches_formula(oname):
    s, r, g, m = _batch_with_undefined()
    per = []
    for b in range(4):
        sc, rl, ids = _rows(s, m, b), _rows(r, m, b), _rows(g, m, b)
        pos = ref.hard_positions(sc) if oname == "hard" else ref.softrank_positions(sc, TAU)
        per.append(ref.fair_pg_rank([ref.log_discount(p) for p in pos], rl, ids))
    assert per[2] is None and per[3] is None and per[0] > 0
    o = Hard() if oname == "hard" else SoftRank(TAU, scale="none")
    got = fair_pg_rank_loss(s, r, g, mask=m, num_groups=2, ordering=o)
    assert math.isclose(got.item(), (per[0] + per[1]) / 2, rel_tol=1e-10)
    # zero merit on the protected side: undefined
    r0 = r.clone()
    r0[0, 3:] = 0
    per0 = fair_pg_rank_loss(s, r0, g, mask=m, num_groups=2, ordering=o, reduction="none")
    assert per0[0].item() == 0.0
    got0 = fair_pg_rank_loss(s, r0, g, mask=m, num_groups=2, ordering=o)
    assert math.isclose(got0.item(), per[1], rel_tol=1e-10)


def test_pairwise_correlation_matches_beutel_et_al():
    s, r, g, m = _batch_with_undefined()
    g = g.clone()
    g[0, 1] = -1  # unknown group: in no pair
    pairs = []
    for b in range(4):
        pairs += ref.correlation_pairs(_rows(s, m, b), _rows(r, m, b), _rows(g, m, b))
    expect = ref.pearson_abs(pairs)
    assert expect > 0.1
    got = pairwise_correlation_loss(s, r, g, mask=m, num_groups=2)
    assert math.isclose(got.item(), expect, rel_tol=1e-9)
    # margins that do not depend on the group (binary relevance, scores = 2 * relevance: A = 2 on every pair): 0
    rb = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0, 0.0]], dtype=F64)
    gb = torch.tensor([[0, 1, 1, 0, 0], [1, 0, 1, 1, 0]])
    assert pairwise_correlation_loss(2 * rb, rb, gb, num_groups=2).item() == pytest.approx(0.0, abs=1e-9)


def test_pairwise_correlation_sorted_path_equals_the_pair_tensors():
    # integer groups take the O(N log N) prefix-sum path, one-hot float membership the [B, N, N] pair tensors:
    # same values and gradients (ties in relevance, padding, unknown groups, 3 groups, huge logits), and both
    # equal the plain loop over pairs
    gen = torch.Generator().manual_seed(3)
    for trial in range(25):
        B, N = 3, int(torch.randint(2, 25, (1,), generator=gen))
        scale = 1e6 if trial % 5 == 0 else 1.0
        s = (scale * torch.randn(B, N, generator=gen, dtype=F64)).requires_grad_(True)
        r = torch.randint(0, 4, (B, N), generator=gen).to(F64)
        g = torch.randint(-1, 3, (B, N), generator=gen)
        m = torch.rand(B, N, generator=gen) > 0.2
        m[:, 0] = True
        soft = torch.nn.functional.one_hot(g.clamp(min=0), 3).to(F64) * (g >= 0).to(F64).unsqueeze(-1)
        v_int = pairwise_correlation_loss(s, r, g, mask=m, num_groups=3)
        v_soft = pairwise_correlation_loss(s, r, soft, mask=m, num_groups=3)
        (g_int,) = torch.autograd.grad(v_int, s)
        (g_soft,) = torch.autograd.grad(v_soft, s)
        assert math.isclose(v_int.item(), v_soft.item(), rel_tol=1e-9, abs_tol=1e-12)
        assert torch.allclose(g_int, g_soft, rtol=1e-6, atol=1e-12) and torch.isfinite(g_int).all()
        pairs = []
        for b in range(B):
            pairs += ref.correlation_pairs(_rows(s.detach() / s.detach().abs().max().clamp(min=1), m, b),
                                           _rows(r, m, b), _rows(g, m, b))  # group 2 is not protected
        if len(pairs) >= 2:
            assert math.isclose(v_int.item(), ref.pearson_abs(pairs), rel_tol=1e-7, abs_tol=1e-9)
    # no cross-group pair (one group only): 0, with a finite zero gradient, so a batch of such lists still trains
    s = torch.randn(2, 6, dtype=F64, requires_grad=True)
    v = pairwise_correlation_loss(s, torch.rand(2, 6, dtype=F64), torch.zeros(2, 6, dtype=torch.long), num_groups=2)
    v.backward()
    assert v.item() == 0.0 and torch.equal(s.grad, torch.zeros_like(s))


@pytest.mark.parametrize("name,Ord,kw", [("approx_ndcg", SoftRank, {}),
                                          ("neural_ndcg", NeuralSort, {"sinkhorn_iters": 20})])
def test_ndcg_losses_are_one_minus_ndcg(name, Ord, kw):
    s, r, g, m = _batch_with_undefined()
    r = r.clone()
    r[2] = 0.0  # no relevant item: excluded
    o = Ord(TAU, **kw)
    val, valid = ndcg(s, r, mask=m, ordering=o, return_valid=True)
    assert valid.tolist() == [True, True, False, True]
    expect = (1 - val[valid]).mean()
    got = LOSSES[name](s, r, None, m)
    torch.testing.assert_close(got, expect, rtol=1e-12, atol=1e-12)
    # a near-hard temperature: 1 - the plain-Python NDCG of the score ranking
    f = approx_ndcg_loss if name == "approx_ndcg" else neural_ndcg_loss
    per = [ref.ndcg(_rows(s, m, b), _rows(r, m, b)) for b in range(4)]
    hard = sum(1 - p for p in per if p is not None) / 3
    assert math.isclose(f(s, r, temperature=1e-3, mask=m).item(), hard, abs_tol=1e-6)


# =============================================================================================== 3. masks
def _padded(dtype=F64):
    """Base lists (B = 2, N = 4) and the same lists with two padded columns inserted (index 1 and 4) holding NaN
    / inf scores, NaN relevance and out-of-range group ids, plus an entirely padded third list."""
    s, r, g, m = _data(dtype)
    s, r, g, m = s[:, :4], r[:, :4], g[:, :4], m[:, :4]
    real = [0, 2, 3, 5]
    N = 6
    nan, inf = float("nan"), float("inf")
    ps = torch.tensor([[nan, nan, nan, inf, nan, nan], [nan, -inf, nan, nan, inf, nan],
                       [nan, inf, -inf, nan, nan, nan]], dtype=dtype)
    pr = torch.full((3, N), nan, dtype=dtype)
    pg = torch.full((3, N), 7, dtype=torch.long)
    pm = torch.zeros(3, N, dtype=torch.bool)
    ps[:2, real], pr[:2, real], pg[:2, real], pm[:2, real] = s, r, g, True
    return (s, r, g, m), (ps, pr, pg, pm), real


MASK_CASES = [(n, o) for n in ORDERED for o in ALL_ORDERINGS] + [(n, None) for n in UNORDERED]


@pytest.mark.parametrize("name,oname", MASK_CASES)
def test_padding_zero_gradient_and_same_value(name, oname):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    (s, r, g, m), (ps, pr, pg, pm), real = _padded()
    if name == "exp_ee-l":  # EE-L counts an entirely padded list as valid: see test_ee_l_loss_ignores_empty_lists
        ps, pr, pg, pm = ps[:2], pr[:2], pg[:2], pm[:2]
    f = LOSSES[name]
    s = s.clone().requires_grad_(True)
    ps = ps.clone().requires_grad_(True)
    base = f(s, r, g, m, o)
    pad = f(ps, pr, pg, pm, o)
    assert torch.isfinite(pad)
    torch.testing.assert_close(pad, base, rtol=1e-10, atol=1e-12)
    (gb,) = torch.autograd.grad(base, s)
    (gp,) = torch.autograd.grad(pad, ps)
    assert torch.isfinite(gp).all()
    assert (gp[~pm] == 0).all(), f"padded items get gradient {gp[~pm].tolist()}"
    torch.testing.assert_close(gp[:2, real], gb, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("oname", ["softrank", "neuralsort"])
def test_padding_zero_gradient_module_forms(oname):
    (s, r, g, m), (ps, pr, pg, pm), real = _padded()
    ps = ps.clone().requires_grad_(True)
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2, ordering=SOFT_ORDERINGS[oname]()), lam=2.0)
    reg(ps, pr, pg, pm).backward()
    assert torch.isfinite(ps.grad).all() and (ps.grad[~pm] == 0).all()


# =============================================================================================== 4. undefined lists
def _kind_lists(dtype=F64):
    """One list of each undefined kind (N = 5), NaN in padded slots."""
    nan = float("nan")
    L = {
        "one_group": ([0.3, 1.9, -0.8, 1.1, 0.2], [1.0, 3.0, 0.0, 2.0, 1.0], [0, 0, 0, 0, 0], [True] * 5),
        "no_relevant": ([-1.0, 1.2, -0.2, 0.6, 1.8], [0.0] * 5, [1, 0, 1, 0, 0], [True] * 5),
        "single_item": ([0.7, nan, nan, nan, nan], [2.0, nan, nan, nan, nan], [1, 0, 0, 0, 0],
                        [True, False, False, False, False]),
        "empty": ([nan] * 5, [nan] * 5, [0] * 5, [False] * 5),
    }
    return {k: (torch.tensor([v[0]], dtype=dtype), torch.tensor([v[1]], dtype=dtype), torch.tensor([v[2]]),
                torch.tensor([v[3]])) for k, v in L.items()}


_GROUP_UNDEF = {"one_group", "single_item", "empty"}
#: the kinds of list on which each loss's own measure is undefined (and which must be left out of the mean)
UNDEFINED = {
    **{n: _GROUP_UNDEF for n in ("dips_abs", "dips_square", "dips_one_sided", "deltr")},
    **{n: _GROUP_UNDEF | {"no_relevant"} for n in ("acc_inter", "acc_intra", "acc_both", "fair_pg_rank")},
    "exp_ea_l1": {"no_relevant", "empty"}, "exp_ea_l2sq": {"no_relevant", "empty"},
    "exp_ee_l1": {"empty"}, "exp_ee_l2sq": {"empty"}, "exp_ea-dp_l1": {"empty"}, "exp_ea-dp_l2sq": {"empty"},
    "listnet": {"empty"}, "listmle": {"empty"},
    "approx_ndcg": {"no_relevant", "empty"}, "neural_ndcg": {"no_relevant", "empty"},
    # pooled over pairs, not a mean over lists: lists without a cross-group pair of different relevance add nothing
    "correlation": {"one_group", "no_relevant", "single_item", "empty"},
}
UNDEF_CASES = [(n, o) for n in ORDERED if n != "exp_ee-l" for o in ALL_ORDERINGS] + \
              [(n, None) for n in UNORDERED]


def _cat(*batches):
    return tuple(torch.cat(x) for x in zip(*batches))


def _good():
    s, r, g, m = _data()
    return s[:1], r[:1], g[:1], m[:1]


@pytest.mark.parametrize("name,oname", UNDEF_CASES)
def test_undefined_lists_are_excluded(name, oname):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    f = LOSSES[name]
    kinds = _kind_lists()
    good = _good()
    base = f(*good, o)
    assert base.item() > 0
    undefined = [kinds[k] for k in sorted(UNDEFINED[name])]
    s, r, g, m = _cat(good, *undefined)
    s = s.clone().requires_grad_(True)
    loss = f(s, r, g, m, o)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, base, rtol=1e-10, atol=1e-12)
    (grad,) = torch.autograd.grad(loss, s)
    assert torch.isfinite(grad).all()
    assert (grad[1:] == 0).all()  # undefined lists: no gradient
    # ... and a batch made only of undefined lists gives exactly 0 with zero gradient
    s, r, g, m = _cat(*undefined)
    if not m.any():  # only empty lists: rejected by input validation (documented in _validation.prepare)
        with pytest.raises(ValueError, match="no real item"):
            f(s, r, g, m, o)
        return
    s = s.clone().requires_grad_(True)
    loss = f(s, r, g, m, o)
    assert loss.item() == 0.0
    (grad,) = torch.autograd.grad(loss, s, allow_unused=True)
    assert grad is None or (grad == 0).all()


@pytest.mark.parametrize("name", [n for n in LOSSES if UNDEFINED.get(n) != {"empty"} and n != "exp_ee-l"])
@pytest.mark.parametrize("oname", ["softrank", "pl_exact"])
def test_undefined_lists_reduction_sum_and_none(name, oname):
    """reduction="none" puts exactly 0 on the undefined lists; "sum" is the sum of the defined lists."""
    if name == "correlation":
        pytest.skip("pooled loss: no reduction argument")
    o = ALL_ORDERINGS[oname]()
    f = LOSSES[name]
    kinds = _kind_lists()
    undefined = [kinds[k] for k in sorted(UNDEFINED[name])]
    batch = _cat(_data(), *undefined)
    per = f(*batch, o, "none")
    assert per.shape == (2 + len(undefined),)
    assert torch.isfinite(per).all() and (per[2:] == 0).all()
    torch.testing.assert_close(f(*batch, o, "sum"), per.sum())


@pytest.mark.parametrize("norm", ["l1", "l2sq"])
def test_exposure_loss_excludes_lists_with_a_group_absent(norm):
    kinds = _kind_lists()
    o = SoftRank(TAU, scale="none")
    good = _good()
    base = exposure_misallocation_loss(*good[:3], mask=good[3], norm=norm, num_groups=2, ordering=o)
    s, r, g, m = _cat(good, kinds["one_group"], kinds["single_item"])
    loss = exposure_misallocation_loss(s, r, g, mask=m, norm=norm, num_groups=2, ordering=o)
    torch.testing.assert_close(loss, base)


def test_ee_l_loss_ignores_empty_lists():
    kinds = _kind_lists()
    o = SoftRank(TAU, scale="none")
    good = _good()
    base = exposure_misallocation_loss(*good[:3], mask=good[3], norm="ee-l", num_groups=2, ordering=o)
    s, r, g, m = _cat(good, kinds["empty"])
    loss = exposure_misallocation_loss(s, r, g, mask=m, norm="ee-l", num_groups=2, ordering=o)
    torch.testing.assert_close(loss, base)


def test_ee_l_undefined_kinds_finite():
    """EE-L is defined on every list (the metric says so): finite values and gradients on all the odd lists."""
    kinds = _kind_lists()
    s, r, g, m = _cat(_good(), *kinds.values())
    s = s.clone().requires_grad_(True)
    loss = exposure_misallocation_loss(s, r, g, mask=m, norm="ee-l", num_groups=2, ordering=SoftRank(TAU, scale="none"))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all() and (s.grad[~m] == 0).all()


# =============================================================================================== 5. low precision
LOWP_CASES = list([(n, o) for n in ORDERED
                                 for o in ("softrank", "neuralsort", "softsort", "fastsoftrank", "pl_exact")] +
                                [(n, None) for n in UNORDERED])


def _lowp_batch(dtype):
    s, r, g, m = _batch_with_undefined(torch.float32)
    return s.to(dtype), r.to(dtype), g, m


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,oname", LOWP_CASES)
def test_half_precision_inputs(name, oname, dtype):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    s, r, g, m = _lowp_batch(dtype)
    s = s.clone().requires_grad_(True)
    loss = LOSSES[name](s, r, g, m, o)
    assert torch.isfinite(loss)
    loss.backward()
    assert s.grad is not None and s.grad.dtype == dtype
    assert torch.isfinite(s.grad).all() and (s.grad[~m] == 0).all()
    # close to the float32 value (the work is done in float32; only the inputs are rounded)
    s32, r32 = s.detach().float(), r.float()
    ref32 = LOSSES[name](s32, r32, g, m, o)
    torch.testing.assert_close(loss.float(), ref32, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name,oname", LOWP_CASES)
def test_autocast_bfloat16(name, oname):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    s, r, g, m = _batch_with_undefined(torch.float32)
    s = s.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = LOSSES[name](s, r, g, m, o)
    assert torch.isfinite(loss)
    loss.float().backward()
    assert torch.isfinite(s.grad).all() and (s.grad[~m] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_half_precision_neural_ndcg_without_padding(dtype):
    """neural_ndcg in half precision without padding (the padded case is covered above)."""
    s, r, g, m = _data(dtype)
    s = s.clone().requires_grad_(True)
    loss = neural_ndcg_loss(s, r)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()
    s32 = s.detach().float().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = neural_ndcg_loss(s32, r.float())
    loss.float().backward()
    assert torch.isfinite(loss) and torch.isfinite(s32.grad).all()


@pytest.mark.parametrize("case", ["neural_ndcg_loss", "dips_loss_neuralsort_sinkhorn2", "dips_loss_softsort_sinkhorn2"])
def test_sinkhorn_with_padding_finite_gradient(case):
    """Minimal reproduction: one list of 4 items, the last one padded (score 0, no NaN anywhere)."""
    s = torch.tensor([[2.0, 1.0, 1.5, 0.0]], requires_grad=True)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0]])
    g = torch.tensor([[0, 1, 0, 1]])
    m = torch.tensor([[True, True, True, False]])
    if case == "neural_ndcg_loss":
        loss = neural_ndcg_loss(s, r, mask=m)
    else:
        Ord = NeuralSort if "neuralsort" in case else SoftSort
        loss = dips_loss(s, r, g, mask=m, num_groups=2, ordering=Ord(0.5, sinkhorn_iters=2))
    loss.backward()
    assert torch.isfinite(s.grad).all()


# =============================================================================================== 6. regularizer
def _reg_inputs():
    s, r, g, m = _data(torch.float32)
    return s.clone().requires_grad_(True), r, g, m


def test_regularizer_total_and_last():
    s, r, g, m = _reg_inputs()
    o = SoftRank(TAU, scale="none")
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2, ordering=o), lam=0.7)
    total = reg(s, r, g, m)
    u = listnet_loss(s, r, mask=m)
    f = dips_loss(s, r, g, mask=m, num_groups=2, ordering=o)
    torch.testing.assert_close(total, u + 0.7 * f)
    assert sorted(reg.last) == ["fairness", "lambda", "total", "utility"]
    assert all(not v.requires_grad for v in reg.last.values())
    torch.testing.assert_close(reg.last["utility"], u.detach())
    torch.testing.assert_close(reg.last["fairness"], f.detach())
    torch.testing.assert_close(reg.last["total"], total.detach())
    assert reg.last["lambda"].item() == pytest.approx(0.7)
    (g_total,) = torch.autograd.grad(total, s)
    (g_ref,) = torch.autograd.grad(u + 0.7 * f, s)
    torch.testing.assert_close(g_total, g_ref)


def test_regularizer_linear_warmup():
    s, r, g, m = _reg_inputs()
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=2.0, schedule="linear", warmup_steps=4)
    seen = []
    for step in range(7):
        assert reg.current_step == step
        seen.append(reg.current_lambda)
        reg(s, r, g, m)
        assert reg.last["lambda"].item() == pytest.approx(seen[-1])
        reg.step()
    assert seen == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.0, 2.0])
    reg.current_step = 2
    assert reg.current_lambda == pytest.approx(1.0)
    const = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=2.0)
    assert const.current_lambda == 2.0
    const.step()
    assert const.current_lambda == 2.0


def test_regularizer_lam_zero_logs_fairness_without_graph():
    s, r, g, m = _reg_inputs()
    calls = []

    class Spy(DIPSLoss):
        def forward(self, *a, **k):
            out = super().forward(*a, **k)
            calls.append(out.requires_grad)
            return out

    reg = FairnessRegularizer(ListNetLoss(), Spy(num_groups=2, ordering=SoftRank(TAU, scale="none")), lam=0.0,
                              log_fairness_every=1)
    total = reg(s, r, g, m)
    assert calls == [False]  # measured under no_grad
    f = dips_loss(s, r, g, mask=m, num_groups=2, ordering=SoftRank(TAU, scale="none"))
    assert reg.last["fairness"].item() == pytest.approx(f.item()) and f.item() > 0
    torch.testing.assert_close(total, listnet_loss(s, r, mask=m))
    (g_total,) = torch.autograd.grad(total, s)
    (g_u,) = torch.autograd.grad(listnet_loss(s, r, mask=m), s)
    torch.testing.assert_close(g_total, g_u)
    # the linear schedule at step 0 behaves the same
    warm = FairnessRegularizer(ListNetLoss(), Spy(num_groups=2), lam=1.0, schedule="linear", warmup_steps=3,
                               log_fairness_every=1)
    warm(s, r, g, m)
    assert calls == [False, False]
    warm.step()
    warm(s, r, g, m)
    assert calls[-1] is True


@pytest.mark.parametrize("kw", [dict(lam=-0.1), dict(lam=float("nan")), dict(schedule="cosine"),
                                dict(schedule="linear", warmup_steps=0), dict(schedule="linear")])
def test_regularizer_bad_arguments(kw):
    with pytest.raises(ValueError):
        FairnessRegularizer(ListNetLoss(), DIPSLoss(), **kw)


@pytest.mark.parametrize("call", [
    lambda s, r, g: dips_loss(s, r, g, mode="max", num_groups=2),
    lambda s, r, g: dips_loss(s, r, g, mode="one_sided", num_groups=2),
    lambda s, r, g: dips_loss(s, r, g, mode="one_sided", protected=2, num_groups=2),
    lambda s, r, g: dips_loss(s, r, g, num_groups=2, reduction="avg"),
    lambda s, r, g: exposure_misallocation_loss(s, r, g, norm="l3", num_groups=2),
    lambda s, r, g: exposure_misallocation_loss(s, r, g, target="xx", num_groups=2),
    lambda s, r, g: pairwise_accuracy_gap_loss(s, r, g, which="all", num_groups=2),
    lambda s, r, g: pairwise_accuracy_gap_loss(s, r, g, protected=1, reference=1, num_groups=2),
    lambda s, r, g: listnet_loss(s, r, reduction="avg"),
])
def test_loss_bad_arguments(call):
    s, r, g, m = _data()
    with pytest.raises(ValueError):
        call(s, r, g)


# =============================================================================================== 7. gradient sanity
def test_dips_gradient_nonzero_and_descends_on_unfair_list():
    """Group 1 holds the most relevant items but is ranked last: the DIPS loss through SoftRank has a clearly
    nonzero gradient, and a small step against it reduces the loss (and the hard DIPS gap does not grow)."""
    s = torch.tensor([[3.0, 2.5, 2.0, 1.5, -1.0, -1.5, -2.0]], dtype=F64, requires_grad=True)
    r = torch.tensor([[0.0, 1.0, 0.0, 1.0, 3.0, 2.0, 3.0]], dtype=F64)
    g = torch.tensor([[0, 0, 0, 0, 1, 1, 1]])
    o = SoftRank(temperature=0.5)  # default scale="std"
    loss = dips_loss(s, r, g, num_groups=2, ordering=o)
    loss.backward()
    assert loss.item() > 0.1
    assert s.grad.norm() > 1e-3
    # the gradient pushes group 1 up and group 0 down
    assert (s.grad[0, 4:] < 0).all() and (s.grad[0, :4].sum() > 0)
    with torch.no_grad():
        s2 = s - 0.5 * s.grad / s.grad.norm()
        assert dips_loss(s2, r, g, num_groups=2, ordering=o).item() < loss.item()


def test_approx_ndcg_loss_stays_in_0_1_when_an_outlier_bunches_the_soft_positions():
    """A -1e19 score widens the list's temperature so the four other items share soft position 1.5: their relaxed
    DCG@3 (4 / log2(3.5) = 2.21) exceeds the ideal DCG@3 (2.13), relaxed NDCG 1.04; the loss is 0, not -0.04."""
    from torchfair.losses import approx_ndcg_loss
    s = torch.tensor([[-1.4467531442642212, -9.931436538696289, -1e19, -1.0, 7.515711307525635]],
                     requires_grad=True)
    loss = approx_ndcg_loss(s, torch.ones(1, 5), k=3, reduction="none")
    assert loss.item() == 0.0
    loss.sum().backward()
    assert torch.isfinite(s.grad).all()


@pytest.mark.parametrize("name", ["dips", "igi", "ree", "pairwise_accuracy", "exposure_misallocation",
                                  "individual_dissatisfaction"])
def test_softrank_dense_strategy_equals_the_row_block_strategy(name):
    """The dense SoftRank strategy (all [B, N, N] sigmoids at once, hand-written backward) gives the values and
    gradients of the row-block strategy (blocks recomputed in backward), with padding, a fully padded list, tied
    scores and tied relevance; position variance and the position matrix too."""
    from torchfair.losses import measure_loss
    from torchfair.orderings import SoftRank
    g = torch.Generator().manual_seed(3)
    B, N = 5, 17
    s = torch.randn(B, N, generator=g, dtype=torch.float64)
    s[1] = 0.7  # tied scores
    r = torch.randint(0, 3, (B, N), generator=g).double()
    grp = torch.randint(0, 2, (B, N), generator=g)
    m = torch.rand(B, N, generator=g) < 0.8
    m[2] = False  # fully padded
    m[0, :2] = True
    s[3, ~m[3]] = float("nan")  # whatever padded entries hold
    outs = []
    for dense in (None, 0):
        x = s.clone().requires_grad_()
        o = SoftRank(0.3, dense_elements=dense)
        if name == "individual_dissatisfaction":
            from torchfair.metrics import individual_dissatisfaction
            val = individual_dissatisfaction(x, r, grp, mask=m, num_groups=2, ordering=o).square().sum()
        else:
            val = measure_loss(name, x, relevance=r, groups=grp, mask=m, num_groups=2, ordering=o)
        ob = o(x, m)
        val = val + (ob.position_variance() * m).sum() + ob.position_matrix().sum()
        assert (ob._above is None) == (dense == 0)
        grad, = torch.autograd.grad(val, x)
        outs.append((val.detach(), grad))
    assert torch.isfinite(outs[0][1]).all()
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-12)
    assert torch.allclose(outs[0][1], outs[1][1], atol=1e-12)


def test_softrank_fused_row_block_contraction_equals_the_generic_contraction():
    """SoftRank's fused row-block kernel (hand-written backward, reused buffers) against the generic checkpointed
    row-block contraction of OrderedBatch: values and gradients (scores and the right-hand side), every level weight,
    "above" and "joint", padded and fully padded lists, tied scores, one-row blocks."""
    from torchfair.browsing import get_browsing
    from torchfair.orderings import SoftRank
    from torchfair.orderings.base import LevelPairWeight, OrderedBatch
    g = torch.Generator().manual_seed(5)
    B, N, H = 4, 13, 3
    s0 = torch.randn(B, N, generator=g, dtype=torch.float64)
    s0[1, :5] = 0.2
    rel = torch.randint(0, 3, (B, N), generator=g).double()
    m = torch.rand(B, N, generator=g) < 0.8
    m[3] = False
    r0 = torch.rand(B, N, H, generator=g, dtype=torch.float64)
    for which in ("above", "joint"):
        for pw in (None, LevelPairWeight(rel, 1.0, 0.5), LevelPairWeight(rel, 1.0, 0.0, 0.3)):
            for be in (None, 1, 40):
                res = []
                for path in ("fused", "generic"):
                    s, right = s0.clone().requires_grad_(), r0.clone().requires_grad_()
                    ob = SoftRank(0.5, dense_elements=0)(s, m)
                    kw = dict(which=which, pair_weight=pw, browsing=get_browsing("rbp:0.8") if which == "joint"
                              else None, relevance=rel, block_elements=be)
                    out = ob.contract(right, **kw) if path == "fused" else OrderedBatch.contract(ob, right, **kw)
                    gs, gr = torch.autograd.grad((out * torch.linspace(-1, 2, H, dtype=out.dtype)).sum(), (s, right))
                    res.append((out.detach(), gs, gr))
                for a, b in zip(*res):
                    assert torch.allclose(a, b, atol=1e-12), (which, pw, be)
                assert (res[0][1][~m] == 0).all()
