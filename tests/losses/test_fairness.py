"""torchfair.losses.fairness: DIPS, exposure misallocation, pairwise accuracy gap, DELTR, Fair-PG-Rank and the
pairwise-correlation losses -- gradchecks, values against the measures and the plain-Python loops of
tests/references/ (reference.py, exposure_reference.py, loss_reference.py), padding, undefined lists, low
precision, bad arguments.  Shared cases: tests/references/loss_cases.py.
"""
from __future__ import annotations

import math

import pytest
import torch

import exposure_reference as eref
import loss_reference as ref
import reference as pref
from loss_cases import (ALL_ORDERINGS, F64, FAIRNESS, ORDERED, PL_LOSSES, SOFT_ORDERINGS, TAU, _batch_with_undefined,
                        _cat, _data, _gap_ref, _good, _kind_lists, _mean_valid, _rows, check_gradcheck,
                        check_half_precision_inputs, check_padding,
                        check_undefined_lists_are_excluded, check_undefined_lists_reduction_sum_and_none, lowp_cases,
                        mask_cases, reduction_names, undefined_cases)
from torchfair.losses import (deltr_loss, dips_loss, exposure_misallocation_loss, fair_pg_rank_loss,
                              pairwise_accuracy_gap_loss, pairwise_correlation_loss)
from torchfair.metrics import dips, pairwise_accuracy
from torchfair.metrics.exposure import expected_exposure, exposure_misallocation
from torchfair.orderings import Hard, NeuralSort, PlackettLuce, SoftRank, SoftSort


# =============================================================================================== 1. gradcheck
def _ids(cases):
    return ["-".join(str(x) for x in c) for c in cases]


#: (loss, ordering): every soft relaxation for the losses taking an ordering, exact Plackett-Luce at an absolute
#: temperature ("pl_exact_abs": the default ``scale="std"`` divides by the list's std, detached (a constant of the
#: loss), which finite differences of the loss value would differentiate too; the frozen-std gradient is checked
#: against the enumeration in tests/orderings/test_plackett_luce.py); the others alone
GRADCHECK = [(n, o) for n in FAIRNESS if n in ORDERED for o in list(SOFT_ORDERINGS) +
             (["pl_exact_abs"] if n in PL_LOSSES else [])] + [(n, None) for n in FAIRNESS if n not in ORDERED]
_GRADCHECK_ORDERINGS = {**SOFT_ORDERINGS, "pl_exact_abs": lambda: PlackettLuce(exact=True, temperature=1.0,
                                                                                 scale="none"), None: None}


@pytest.mark.parametrize("name, oname", GRADCHECK, ids=_ids(GRADCHECK))
def test_gradcheck(name, oname):
    """Against finite differences."""
    check_gradcheck(name, _GRADCHECK_ORDERINGS[oname])


# =============================================================================================== 2. values
@pytest.mark.parametrize("oname", ["softrank", "neuralsort", "pl_exact"])
@pytest.mark.parametrize("mode", ["abs", "square", "one_sided"])
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


@pytest.mark.parametrize("oname", ["softrank", "softsort", "pl_exact"])
@pytest.mark.parametrize("norm", ["l1", "l2sq"])
@pytest.mark.parametrize("target", ["ee", "ea", "ea-dp"])
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


@pytest.mark.parametrize("oname", ["softrank", "softsort", "pl_exact"])
@pytest.mark.parametrize("which", ["inter", "intra", "both"])
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


# =============================================================================================== 3. masks
@pytest.mark.parametrize("name, oname", mask_cases(FAIRNESS), ids=_ids(mask_cases(FAIRNESS)))
def test_padding_zero_gradient_and_same_value(name, oname):
    """Padded slots change neither the value nor the gradient of the real items."""
    check_padding(name, oname)


# =============================================================================================== 4. undefined lists
@pytest.mark.parametrize("name, oname", undefined_cases(FAIRNESS), ids=_ids(undefined_cases(FAIRNESS)))
def test_undefined_lists_are_excluded(name, oname):
    check_undefined_lists_are_excluded(name, oname)


@pytest.mark.parametrize("oname", ["softrank", "pl_exact"])
@pytest.mark.parametrize("name", [n for n in reduction_names(FAIRNESS) if n != "correlation"])  # pooled: no reduction
def test_undefined_lists_reduction_sum_and_none(name, oname):
    check_undefined_lists_reduction_sum_and_none(name, oname)


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
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name, oname", lowp_cases(FAIRNESS), ids=_ids(lowp_cases(FAIRNESS)))
def test_half_precision_inputs(name, oname, dtype):
    """float16 / bfloat16 inputs: finite loss, gradients of the input dtype, zero on padding, and the float32 value
    up to the input rounding (finiteness under autocast: tests/test_contract.py)."""
    check_half_precision_inputs(name, oname, dtype)


@pytest.mark.parametrize("case", ["dips_loss_neuralsort_sinkhorn2", "dips_loss_softsort_sinkhorn2"])
def test_sinkhorn_with_padding_finite_gradient(case):
    """Minimal reproduction: one list of 4 items, the last one padded (score 0, no NaN anywhere)."""
    s = torch.tensor([[2.0, 1.0, 1.5, 0.0]], requires_grad=True)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0]])
    g = torch.tensor([[0, 1, 0, 1]])
    m = torch.tensor([[True, True, True, False]])
    Ord = NeuralSort if "neuralsort" in case else SoftSort
    loss = dips_loss(s, r, g, mask=m, num_groups=2, ordering=Ord(0.5, sinkhorn_iters=2))
    loss.backward()
    assert torch.isfinite(s.grad).all()


# =============================================================================================== 6. bad arguments
BAD_CALLS = {
    "dips_mode_max": (lambda s, r, g: dips_loss(s, r, g, mode="max", num_groups=2), "mode"),
    "dips_one_sided_no_protected": (lambda s, r, g: dips_loss(s, r, g, mode="one_sided", num_groups=2),
                                    "protected"),
    "dips_one_sided_protected_2": (lambda s, r, g: dips_loss(s, r, g, mode="one_sided", protected=2, num_groups=2),
                                   "protected"),
    "dips_reduction_avg": (lambda s, r, g: dips_loss(s, r, g, num_groups=2, reduction="avg"), "reduction"),
    "exposure_norm_l3": (lambda s, r, g: exposure_misallocation_loss(s, r, g, norm="l3", num_groups=2), "norm"),
    "exposure_target_xx": (lambda s, r, g: exposure_misallocation_loss(s, r, g, target="xx", num_groups=2),
                           "target"),
    "accuracy_which_all": (lambda s, r, g: pairwise_accuracy_gap_loss(s, r, g, which="all", num_groups=2), "which"),
    "accuracy_protected_is_reference": (
        lambda s, r, g: pairwise_accuracy_gap_loss(s, r, g, protected=1, reference=1, num_groups=2),
        "protected|reference"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_loss_bad_arguments(case):
    """A bad argument raises ValueError naming it."""
    call, name = BAD_CALLS[case]
    s, r, g, m = _data()
    with pytest.raises(ValueError, match=name):
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
