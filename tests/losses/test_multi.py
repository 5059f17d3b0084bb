"""torchfair.losses.multi: several fairness measures as one loss on one ordering.

* values and gradients equal the weighted sum of the single losses (``dips_loss``,
  ``pairwise_accuracy_gap_loss``, ``exposure_misallocation_loss``, ``deltr_loss``) computed separately, for every
  reduction; with ``Hard()`` they equal the exact measures of ``torchfair.metrics`` and the plain-Python loops of
  tests/references/ on tiny lists; as the temperature goes to 0 (SoftRank / RampRank at 1e-3) the loss converges to
  the exact weighted objective;
* "mean" reduces each term over its own valid lists, "none" is the weighted per-list sum;
* padding, permuting items and relabelling the two groups change nothing; one-group lists, fully padded lists, tied
  scores and float16 give finite values and zero / finite gradients;
* one ordering: applied once per call and shared by every term;
* the module form: the function's value, ``last_terms``, the regulariser's ``fairness/<name>`` logs,
  ``normalize="start"`` and its state_dict;
* bad term specs are ``ValueError`` naming ``terms`` and the entry;
* a short optimisation: Adam on DIPS + pairwise accuracy lowers the exact DIPS gap without raising the exact
  inter-group pairwise accuracy gap.
(The LightningCLI YAML path is in tests/training/test_cli.py, FairRankingModule with it in
tests/training/test_module.py, the contract rows in tests/contract_cases.py.)
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exposure_reference as eref
import reference as pref
from loss_cases import _batch_with_undefined, _data, _mean_valid, _rows, check_item_invariances
from torchfair import metrics
from torchfair.losses import (DIPSLoss, FairnessRegularizer, ListNetLoss, MultiMeasureLoss, deltr_loss, dips_loss,
                              exposure_misallocation_loss, multi_measure_loss, pairwise_accuracy_gap_loss)
from torchfair.losses.multi import parse_terms
from torchfair.metrics import get_declaration
from torchfair.orderings import Hard, NeuralSort, RampRank, SoftRank

F64 = torch.float64
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: three terms of three shapes (pair, pair, group), with options, a non-default reducer and weights
TERMS = [{"measure": "dips", "weight": 0.7, "reducer": "gap_square", "browsing": "rbp:0.8"},
         "pairwise_accuracy:1.5",
         {"measure": "exposure_misallocation", "weight": 0.3, "target": "ea"}]


def _singles(s, r, g, m, o, reduction="mean"):
    """The same three terms as single losses, computed separately, weighted and summed."""
    kw = dict(mask=m, num_groups=2, ordering=o, reduction=reduction)
    return (0.7 * dips_loss(s, r, g, mode="square", browsing="rbp:0.8", **kw)
            + 1.5 * pairwise_accuracy_gap_loss(s, r, g, **kw)
            + 0.3 * exposure_misallocation_loss(s, r, g, target="ea", **kw))


ORDERINGS = {"softrank": lambda: SoftRank(0.3), "ramprank": lambda: RampRank(1.0),
             "neuralsort": lambda: NeuralSort(0.3), "hard": lambda: Hard()}


# ------------------------------------------------------------------------------------------------ values
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("oname", list(ORDERINGS))
def test_value_is_the_weighted_sum_of_the_single_losses(oname, reduction):
    s, r, g, m = _batch_with_undefined()  # two ordinary lists, a one-group list, a one-item list
    o = ORDERINGS[oname]()
    got = multi_measure_loss(s, r, g, terms=TERMS, mask=m, num_groups=2, ordering=o, reduction=reduction)
    want = _singles(s, r, g, m, o, reduction)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)
    module = MultiMeasureLoss(TERMS, ordering=o, num_groups=2, reduction=reduction)
    assert torch.equal(module(s, r, g, m), got)


def test_default_ordering_and_reducers_are_those_of_the_single_losses():
    s, r, g, m = _batch_with_undefined()
    got = multi_measure_loss(s, r, g, terms=["dips", "pairwise_accuracy", "exposure_misallocation"], mask=m,
                             num_groups=2)
    want = (dips_loss(s, r, g, mask=m, num_groups=2) + pairwise_accuracy_gap_loss(s, r, g, mask=m, num_groups=2)
            + exposure_misallocation_loss(s, r, g, mask=m, num_groups=2))
    assert math.isclose(got.item(), want.item(), rel_tol=1e-12)


def test_a_term_without_an_ordering_reads_the_scores():
    """DELTR's exposure gap depends on the score values: it gets no ordering, the other terms share theirs."""
    s, r, g, m = _data()
    o = SoftRank(0.3)
    got = multi_measure_loss(s, r, g, terms=["dips", {"measure": "top1_exposure_gap", "protected": 1,
                                                      "weight": 2.0}], mask=m, num_groups=2, ordering=o)
    want = dips_loss(s, r, g, mask=m, num_groups=2, ordering=o) + 2.0 * deltr_loss(s, g, mask=m, num_groups=2)
    assert math.isclose(got.item(), want.item(), rel_tol=1e-12)
    with pytest.raises(ValueError, match="`ordering`"):
        multi_measure_loss(s, r, g, terms=["top1_exposure_gap"], ordering=o)


@pytest.mark.parametrize("oname", ["softrank", "ramprank", "neuralsort"])
def test_gradient_is_the_weighted_sum_of_the_gradients(oname):
    s, r, g, m = _batch_with_undefined()
    o = ORDERINGS[oname]()
    x = s.clone().requires_grad_(True)
    (got,) = torch.autograd.grad(multi_measure_loss(x, r, g, terms=TERMS, mask=m, num_groups=2, ordering=o), x)
    y = s.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(_singles(y, r, g, m, o), y)
    assert torch.isfinite(got).all() and got[m].abs().max() > 1e-6
    assert torch.equal(got[~m], torch.zeros_like(got[~m]))
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def _exact_reference(s, r, g, m):
    """The three terms with the exact ordering, one list at a time, from the plain-Python loops: DIPS (Fabris et
    al. 2023, eq. 11; RBP(0.8), c_t = 0.5) gap squared, |A_01 - A_10| (Raj & Ekstrand 2022, eq. 11), and
    sum_g |delta_g| of exposure misallocation under "ea" (Fabris et al. 2023, eq. 12-16; RBP(0.9))."""
    d, dv, a, av, e, ev = [], [], [], [], [], []
    for b in range(s.shape[0]):
        sc, rl, ids = _rows(s, m, b), _rows(r, m, b), _rows(g, m, b)
        order, memb = pref.rank(sc), pref.membership_from_ids(ids, 2)
        M, V = pref.dips(order, rl, memb, pref.ref_rbp(0.8), 0.5)
        d.append((M[0][1] - M[1][0]) ** 2 if V[0][1] and V[1][0] else 0.0)
        dv.append(bool(V[0][1] and V[1][0]))
        A, VA = pref.pairwise_accuracy(order, rl, memb)
        a.append(abs(A[0][1] - A[1][0]) if VA[0][1] and VA[1][0] else 0.0)
        av.append(bool(VA[0][1] and VA[1][0]))
        delta = eref.misallocation([order], rl, ids, 2, eref.rbp(0.9), "ea")
        present = [k for k in range(2) if k in ids]
        ok = delta is not None and len(present) == 2
        e.append(sum(abs(delta[k]) for k in present) if ok else 0.0)
        ev.append(ok)
    return 0.7 * _mean_valid(d, dv) + 1.5 * _mean_valid(a, av) + 0.3 * _mean_valid(e, ev)


def test_hard_ordering_is_the_exact_weighted_objective():
    """With Hard() the loss is the exact objective: against the plain loops and against torchfair.metrics."""
    s, r, g, m = _batch_with_undefined()  # distinct scores within each list
    got = multi_measure_loss(s, r, g, terms=TERMS, mask=m, num_groups=2, ordering=Hard())
    assert math.isclose(got.item(), _exact_reference(s, r, g, m), rel_tol=1e-10, abs_tol=1e-12)
    # the same from the exact measures of torchfair.metrics, reduced by hand
    M, V = metrics.dips(s, r, g, mask=m, num_groups=2, browsing="rbp:0.8", return_valid=True)
    A, VA = metrics.pairwise_accuracy(s, r, g, mask=m, num_groups=2, return_valid=True)
    D, VD = metrics.exposure_misallocation(s, r, g, target="ea", mask=m, num_groups=2, return_valid=True)
    present = torch.stack([((g == k) & m).any(-1) for k in range(2)], -1)
    dips_ok = V[:, 0, 1] & V[:, 1, 0]
    acc_ok = VA[:, 0, 1] & VA[:, 1, 0]
    mis_ok = (present.sum(-1) == 2) & VD.all(-1)
    want = (0.7 * _mean_valid(((M[:, 0, 1] - M[:, 1, 0]) ** 2).tolist(), dips_ok.tolist())
            + 1.5 * _mean_valid((A[:, 0, 1] - A[:, 1, 0]).abs().tolist(), acc_ok.tolist())
            + 0.3 * _mean_valid(D.abs().sum(-1).tolist(), mis_ok.tolist()))
    assert math.isclose(got.item(), want, rel_tol=1e-10, abs_tol=1e-12)


@pytest.mark.parametrize("relaxation", [SoftRank, RampRank])
def test_converges_to_the_exact_objective_as_the_temperature_goes_to_zero(relaxation):
    s, r, g, m = _batch_with_undefined()  # scores at least 0.2 apart within each list
    exact = multi_measure_loss(s, r, g, terms=TERMS, mask=m, num_groups=2, ordering=Hard()).item()
    errors = [abs(multi_measure_loss(s, r, g, terms=TERMS, mask=m, num_groups=2,
                                     ordering=relaxation(t)).item() - exact) for t in (0.3, 0.03, 1e-3)]
    assert errors[-1] < 1e-9
    assert errors[0] > errors[-1]


# ------------------------------------------------------------------------------------------------ reductions
def test_mean_reduces_each_term_over_its_own_lists_and_none_is_the_weighted_per_list_sum():
    """List 1 has equal relevance: DIPS is defined there, pairwise accuracy (no pair with r_i > r_j) is not."""
    s = torch.tensor([[2.0, 1.0, 1.5, -0.5], [0.3, 1.2, -0.4, 0.8]], dtype=F64)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0], [1.0, 1.0, 1.0, 1.0]], dtype=F64)
    g = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]])
    o = SoftRank(0.3)
    terms = ["dips:2", "pairwise_accuracy:3"]
    d = dips_loss(s, r, g, ordering=o, reduction="none")
    a = pairwise_accuracy_gap_loss(s, r, g, ordering=o, reduction="none")
    assert d[1] > 0 and a[1] == 0  # the second list: DIPS only
    none = multi_measure_loss(s, r, g, terms=terms, ordering=o, reduction="none")
    assert torch.allclose(none, 2 * d + 3 * a, rtol=1e-12)
    mean = multi_measure_loss(s, r, g, terms=terms, ordering=o)
    assert math.isclose(mean.item(), 2 * d.mean().item() + 3 * a[0].item(), rel_tol=1e-12)  # a: over 1 list
    assert not math.isclose(mean.item(), none.mean().item(), rel_tol=1e-6)
    total = multi_measure_loss(s, r, g, terms=terms, ordering=o, reduction="sum")
    assert math.isclose(total.item(), none.sum().item(), rel_tol=1e-12)
    one = multi_measure_loss(s[1], r[1], g[1], terms=terms, ordering=o, reduction="none")
    assert one.shape == () and math.isclose(one.item(), none[1].item(), rel_tol=1e-12)


# ------------------------------------------------------------------------------------------------ invariances
@SETTINGS
@given(seed=st.integers(0, 2 ** 31 - 1), N=st.integers(3, 8))
def test_permuting_items_padding_and_relabelling_groups_change_nothing(seed, N):
    """A joint permutation of the items, NaN padding inserted anywhere (zero gradient there) and swapping the two
    group ids (every default reducer here is symmetric in the two groups) leave the loss unchanged."""
    terms = ["dips:0.5", "pairwise_accuracy", {"measure": "exposure_misallocation", "weight": 2.0}]
    o = SoftRank(0.5)

    def loss(s_, r_, g_, m_=None):
        return multi_measure_loss(s_, r_, g_, terms=terms, mask=m_, num_groups=2, ordering=o)

    check_item_invariances(loss, torch.Generator().manual_seed(seed), 3, N, pad_group=7)


# ------------------------------------------------------------------------------------------------ degenerate input
def test_lists_undefined_for_every_term_give_zero_with_zero_gradient():
    nan = float("nan")
    s = torch.tensor([[0.3, nan, -1.0, 2.0], [1.0, 0.5, nan, nan], [nan, nan, nan, nan]], dtype=F64,
                     requires_grad=True)
    r = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 0.0], [nan, nan, nan, nan]], dtype=F64)
    g = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 1], [0, 1, 0, 1]])
    m = torch.tensor([[True, False, True, True], [True, True, False, False], [False] * 4])  # one group per list
    for reduction in ("mean", "sum", "none"):
        x = s.detach().clone().requires_grad_(True)
        out = multi_measure_loss(x, r, g, terms=TERMS, mask=m, num_groups=2, reduction=reduction)
        out.sum().backward()
        assert torch.equal(out, torch.zeros_like(out)) and torch.equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("oname", ["softrank", "ramprank", "neuralsort"])
def test_one_group_padded_and_tied_lists_are_finite_with_finite_gradients(oname):
    nan = float("nan")
    s = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0],          # tied scores
                      [5.0, 5.0, 5.0, 5.0, nan],           # tied, padded
                      [1.0, 2.0, 3.0, 0.5, 0.1],           # one group
                      [nan, nan, nan, nan, nan],           # fully padded
                      [0.7, -0.2, 1.3, 0.4, 2.2]])
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0, 0.0], [1.0, 0.0, 1.0, 0.0, 9.0], [1.0, 0.0, 2.0, 1.0, 0.0],
                      [0.0] * 5, [1.0, 2.0, 0.0, 3.0, 1.0]])
    g = torch.tensor([[0, 1, 0, 1, 0], [1, 0, 1, 0, 5], [1, 1, 1, 1, 1], [0, 1, 0, 1, 0], [0, 1, 1, 0, 1]])
    m = torch.isfinite(s)
    x = s.clone().requires_grad_(True)
    out = multi_measure_loss(x, r, g, terms=TERMS, mask=m, num_groups=2, ordering=ORDERINGS[oname]())
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(x.grad).all() and (x.grad[~m] == 0).all()
    assert x.grad[m].abs().sum() > 0  # the tied lists do get a gradient (the relaxation's floor on the scale)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32(dtype):
    s, r, g, m = _data(torch.float32)
    want = multi_measure_loss(s.to(dtype).float(), r, g, terms=TERMS, mask=m, num_groups=2)
    x = s.to(dtype).requires_grad_(True)
    got = multi_measure_loss(x, r.to(dtype), g, terms=TERMS, mask=m, num_groups=2)
    got.backward()
    assert got.dtype == torch.float32 and torch.isfinite(got) and torch.isfinite(x.grad.float()).all()
    assert math.isclose(got.item(), want.item(), rel_tol=1e-2)


# ------------------------------------------------------------------------------------------------ one ordering
class _Counting(SoftRank):
    calls = 0

    def __call__(self, scores, mask):
        type(self).calls += 1
        return super().__call__(scores, mask)


def test_the_ordering_is_applied_once_and_shared_by_every_term():
    s, r, g, m = _data()
    _Counting.calls = 0
    multi_measure_loss(s, r, g, terms=TERMS, mask=m, num_groups=2, ordering=_Counting(0.3))
    assert _Counting.calls == 1
    ob = SoftRank(0.3)(s, m)  # an OrderedBatch computed beforehand is used as is
    got = multi_measure_loss(s, r, g, terms=TERMS, mask=m, num_groups=2, ordering=ob)
    assert math.isclose(got.item(), _singles(s, r, g, m, SoftRank(0.3)).item(), rel_tol=1e-12)


# ------------------------------------------------------------------------------------------------ term specs
def test_term_spec_forms_and_names():
    terms = parse_terms("dips + pairwise_accuracy:0.5")
    assert [(t.name, t.measure.name, t.weight, t.reducer) for t in terms] == \
        [("dips", "dips", 1.0, "gap_abs"), ("pairwise_accuracy", "pairwise_accuracy", 0.5, "inter")]
    terms = parse_terms(["dips", {"measure": "dips", "browsing": "rbp:0.5", "weight": 2},
                         {"measure": get_declaration("dips"), "name": "dips_t0", "tie_weight": 0.0}])
    assert [t.name for t in terms] == ["dips", "dips_2", "dips_t0"]
    assert terms[1].options == (("browsing", "rbp:0.5"),) and terms[1].weight == 2.0
    assert parse_terms(terms[2].spec()) == (terms[2],)
    pa = parse_terms([{"measure": "pairwise_accuracy", "reducer": "both", "protected": 0, "reference": 1}])[0]
    assert (pa.reducer, pa.protected, pa.reference) == ("both", 0, 1)
    assert parse_terms([{"measure": "exp_rr", "reducer": "l1"}])[0].reducer == "l1"  # no declared reducer: give one


@pytest.mark.parametrize("terms,entry", [
    ([], None),
    ("", None),
    (42, None),
    (["nope"], "[0]"),
    (["dips", "ndcg"], "[1]"),                                                       # a utility measure
    (["dips", {"measure": "exp_rr"}], "[1]"),                                        # no declared reducer
    ([{"measure": "rank_parity", "reducer": "gap_abs"}], "[0]"),                     # a record without a loss field
    ([{"measure": "dips", "reducer": "l1"}], "[0]"),                                 # a reducer of another shape
    ([{"measure": "dips", "reducer": "nope"}], "[0]"),
    ([{"weight": 1.0}], "[0]"),                                                      # no measure
    (["dips:abc"], "[0]"),
    ([{"measure": "dips", "weight": -1.0}], "[0]"),
    ([{"measure": "dips", "weight": float("nan")}], "[0]"),
    ([{"measure": "dips", "weight": float("inf")}], "[0]"),
    (["dips", {"measure": "dips", "weight": True}], "[1]"),
    ([{"measure": "dips", "weight": "1"}], "[0]"),
    ([{"measure": "dips", "bogus": 1}], "[0]"),                                      # unknown option
    ([{"measure": "dips", "ordering": Hard()}], "[0]"),                              # shared: given to the loss
    ([{"measure": "dips", "num_groups": 2}], "[0]"),
    ([{"measure": "exposure_misallocation", "protected": 1}], "[0]"),                # nothing reads it
    ([{"measure": "dips", "reducer": "gap_one_sided", "protected": -1}], "[0]"),
    ([{"measure": "dips", "name": ""}], "[0]"),
    ([{"measure": "dips", "name": "x"}, {"measure": "igi", "name": "x"}], None),     # duplicate names
    ([3.5], "[0]"),
])
def test_bad_terms_name_terms_and_the_entry(terms, entry):
    with pytest.raises(ValueError, match="`terms`") as e:
        parse_terms(terms)
    if entry is not None:
        assert f"`terms`{entry}" in str(e.value)
    s, r, g, _ = _data()
    with pytest.raises(ValueError, match="`terms`"):
        multi_measure_loss(s, r, g, terms=terms)
    with pytest.raises(ValueError, match="`terms`"):
        MultiMeasureLoss(terms)


@pytest.mark.parametrize("kwargs, name", [
    ({"normalize": "foo"}, "normalize"), ({"reduction": "foo"}, "reduction"), ({"ordering": "hard"}, "ordering"),
    ({"num_groups": 0}, "num_groups"), ({"validate_args": 1}, "validate_args"),
])
def test_bad_shared_arguments_of_the_module_name_them(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        MultiMeasureLoss(["dips"], **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    ({"reduction": "foo"}, "reduction"), ({"ordering": "hard"}, "ordering"), ({"scales": [1.0]}, "scales"),
    ({"scales": [1.0, 0.0]}, "scales"),
], ids=["reduction", "ordering", "scales-too-few", "scales-zero"])
def test_bad_shared_arguments_of_the_function_name_them(kwargs, name):
    s, r, g, _ = _data()
    with pytest.raises(ValueError, match=f"`{name}`"):
        multi_measure_loss(s, r, g, terms=["dips", "pairwise_accuracy"], **kwargs)


# ------------------------------------------------------------------------------------------------ module form
def test_module_logs_each_term_and_the_regularizer_reports_them():
    s, r, g, m = _batch_with_undefined(torch.float32)
    loss = MultiMeasureLoss(TERMS, num_groups=2, ordering=SoftRank(0.3))
    loss(s, r, g, m)
    kw = dict(mask=m, num_groups=2, ordering=SoftRank(0.3))
    assert set(loss.last_terms) == {"dips", "pairwise_accuracy", "exposure_misallocation"}
    assert math.isclose(loss.last_terms["dips"].item(),
                        dips_loss(s, r, g, mode="square", browsing="rbp:0.8", **kw).item(), rel_tol=1e-6)
    assert math.isclose(loss.last_terms["pairwise_accuracy"].item(), pairwise_accuracy_gap_loss(s, r, g, **kw).item(),
                        rel_tol=1e-6)
    assert loss.weights == {"dips": 0.7, "pairwise_accuracy": 1.5, "exposure_misallocation": 0.3}
    assert "0.7 * dips[gap_square](browsing='rbp:0.8') + 1.5 * pairwise_accuracy" in repr(loss)
    reg = FairnessRegularizer(ListNetLoss(), loss, lam=0.5)
    x = s.clone().requires_grad_(True)
    reg(x, r, g, m).backward()
    assert sorted(reg.last) == ["fairness", "fairness/dips", "fairness/exposure_misallocation",
                                "fairness/pairwise_accuracy", "lambda", "total", "utility"]
    parts = sum(w * reg.last[f"fairness/{k}"] for k, w in loss.weights.items())
    assert math.isclose(reg.last["fairness"].item(), parts.item(), rel_tol=1e-6)
    assert torch.isfinite(x.grad).all() and (x.grad[~m] == 0).all()
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=0.5)  # a single loss logs no terms
    reg(s, r, g, m)
    assert sorted(reg.last) == ["fairness", "lambda", "total", "utility"]


def test_normalize_start_divides_each_term_by_its_first_value_and_resumes():
    s, r, g, m = _data()
    o = SoftRank(0.3)
    loss = MultiMeasureLoss(["dips:2", "pairwise_accuracy:3"], ordering=o, normalize="start")
    assert torch.equal(loss.start_scale, torch.zeros(2))
    first = loss(s, r, g, m)
    assert math.isclose(first.item(), 5.0, rel_tol=1e-6)  # every term at its own start: 2 * 1 + 3 * 1
    start = loss.start_scale.clone()
    assert torch.allclose(start.double(), torch.stack([dips_loss(s, r, g, mask=m, ordering=o),
                                                       pairwise_accuracy_gap_loss(s, r, g, mask=m, ordering=o)]))
    s2 = s.flip(-1).clone().requires_grad_(True)
    second = loss(s2, r, g, m)
    want = (2 * dips_loss(s2, r, g, mask=m, ordering=o) / start[0].double()
            + 3 * pairwise_accuracy_gap_loss(s2, r, g, mask=m, ordering=o) / start[1].double())
    assert math.isclose(second.item(), want.item(), rel_tol=1e-6)
    assert torch.equal(loss.start_scale, start)  # set once
    resumed = MultiMeasureLoss(["dips:2", "pairwise_accuracy:3"], ordering=o, normalize="start")
    resumed.load_state_dict(loss.state_dict())
    assert math.isclose(resumed(s2, r, g, m).item(), second.item(), rel_tol=1e-12)
    plain = MultiMeasureLoss(["dips:2", "pairwise_accuracy:3"], ordering=o)
    plain(s, r, g, m)
    assert torch.equal(plain.start_scale, torch.zeros(2))  # "none" never sets it


def test_normalize_start_waits_for_a_batch_where_the_term_is_defined():
    """A first batch of one-group lists defines no term: no scale is set, the loss is 0; the next batch sets them."""
    s, r, g, m = _data()
    loss = MultiMeasureLoss(["dips", "pairwise_accuracy"], ordering=SoftRank(0.3), normalize="start")
    x = s.clone().requires_grad_(True)
    out = loss(x, r, torch.zeros_like(g), m)
    out.backward()
    assert out.item() == 0.0 and torch.equal(x.grad, torch.zeros_like(x))
    assert torch.equal(loss.start_scale, torch.zeros(2))
    assert math.isclose(loss(s, r, g, m).item(), 2.0, rel_tol=1e-6)
    loss.start_scale.zero_()  # start over
    assert math.isclose(loss(s.flip(-1), r, g, m).item(), 2.0, rel_tol=1e-6)


# ------------------------------------------------------------------------------------------------ a short demo
def _exact_gaps(s, r, g):
    """The exact (Hard) DIPS gap and |pairwise accuracy inter gap|, means over the lists."""
    with torch.no_grad():
        return (dips_loss(s, r, g, num_groups=2, ordering=Hard()).item(),
                pairwise_accuracy_gap_loss(s, r, g, num_groups=2, ordering=Hard()).item())


def test_optimising_dips_and_pairwise_accuracy_lowers_dips_without_raising_the_pairwise_gap():
    """Adam on free scores (16 lists of 12 items) with the DIPS + pairwise accuracy loss on the default ordering: the
    exact DIPS gap goes down, the exact inter-group pairwise accuracy gap does not rise beyond its start + 10 %."""
    gen = torch.Generator().manual_seed(0)
    B, N = 16, 12
    r = torch.randint(0, 4, (B, N), generator=gen).float()
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    s = (r + (1 - g) * 1.5 + torch.randn(B, N, generator=gen)).requires_grad_(True)  # group 0 favoured
    dips0, acc0 = _exact_gaps(s, r, g)
    loss = MultiMeasureLoss(["dips", "pairwise_accuracy"], num_groups=2)
    opt = torch.optim.Adam([s], lr=0.05)
    for _ in range(60):
        opt.zero_grad()
        loss(s, r, g).backward()
        opt.step()
    dips1, acc1 = _exact_gaps(s, r, g)
    assert dips1 < 0.8 * dips0, (dips0, dips1)
    assert acc1 <= 1.1 * acc0, (acc0, acc1)


def test_compiles_into_one_graph():
    """No graph break (a ``functools.cached_property`` on a term took a lock on Python 3.11 that dynamo cannot
    trace): compiled values and gradients equal the eager ones."""
    from torchfair.orderings import SoftRank

    def f(s, r, g):
        return multi_measure_loss(s, r, g, terms=["dips", "pairwise_accuracy"], num_groups=2,
                                  ordering=SoftRank(0.1))

    gen = torch.Generator().manual_seed(0)
    s = torch.randn(4, 10, generator=gen, requires_grad=True)
    r, g = torch.rand(4, 10, generator=gen), torch.randint(0, 2, (4, 10), generator=gen)
    eager = f(s, r, g)
    (ge,) = torch.autograd.grad(eager, s)
    comp = torch.compile(f, fullgraph=True, backend="eager")(s, r, g)
    (gc,) = torch.autograd.grad(comp, s)
    assert torch.allclose(comp, eager, atol=1e-6) and torch.allclose(gc, ge, atol=1e-6)
