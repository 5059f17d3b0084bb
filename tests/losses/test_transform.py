"""torchfair.losses.transform: the one transformation measure -> loss.

* every list reducer of ``REDUCERS`` against a plain loop written from the module docstring (random values and
  validity masks, protected / reference ids beyond the groups of the batch);
* ``reduce_loss`` against a loop;
* ``measure_loss`` on group- and list-shaped measures is the reduced measure; ``[N]`` input is a batch of one;
  soft one-hot membership equals integer ids; permuting items, padding and relabelling groups change nothing;
  a batch of undefined lists is exactly 0 with zero gradient;
* the module forms: ``LossModule``'s generated signature and input routing, ``MeasureLoss``;
* the errors that name their argument.

(DIPS, rND and NDCG through ``measure_loss`` and the errors on ``reducer`` / ``ordering`` / unknown options are in
tests/test_design.py.)
"""
from __future__ import annotations

import inspect
import math
import typing

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loss_cases import check_item_invariances
from torchfair.losses import (REDUCERS, DELTRLoss, LossModule, MeasureLoss, deltr_loss, default_ordering,
                              measure_loss, reduce_loss)
from torchfair.metrics import awrf, exposure_misallocation, iaa
from torchfair.orderings import Hard, SoftRank

F64 = torch.float64
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------------ plain loops
def _pair_ref(name, M, V, protected, reference):
    """One list: the pair reducers as the docstring states them (value, valid).  ``M``, ``V``: G x G lists; ids
    beyond G are absent groups (their entries undefined)."""
    G = len(M)

    def m(a, b):
        return M[a][b] if a < G and b < G else 0.0

    def v(a, b):
        return bool(V[a][b]) if a < G and b < G else False

    if name in ("gap_abs", "gap_square"):
        vals = [(m(a, b) - m(b, a)) for a in range(G) for b in range(G) if a != b and v(a, b) and v(b, a)]
        if not vals:
            return 0.0, False
        return max(abs(x) if name == "gap_abs" else x * x for x in vals), True
    if name == "gap_one_sided":
        p = protected
        vals = [max(0.0, m(p, h) - m(h, p)) for h in range(max(G, p + 1)) if h != p and v(p, h) and v(h, p)]
        return (max(vals), True) if vals else (0.0, False)
    p = 1 if protected is None else protected
    r = 0 if reference is None else reference
    inter, v_inter = abs(m(r, p) - m(p, r)), v(r, p) and v(p, r)
    intra, v_intra = abs(m(r, r) - m(p, p)), v(r, r) and v(p, p)
    if name == "inter":
        return (inter if v_inter else 0.0), v_inter
    if name == "intra":
        return (intra if v_intra else 0.0), v_intra
    return (inter if v_inter else 0.0) + (intra if v_intra else 0.0), v_inter or v_intra


def _group_ref(name, x, ok, present):
    """One list: ``l1`` / ``l2sq`` over the present groups; valid when two groups are present and each is defined."""
    total = sum(abs(a) if name == "l1" else a * a for a, o, p in zip(x, ok, present) if o and p)
    valid = sum(present) >= 2 and all(o for o, p in zip(ok, present) if p)
    return total, valid


_LIST_REF = {"value": lambda x: x, "one_minus": lambda x: max(0.0, 1.0 - x), "abs": abs,
             "hinge": lambda x: max(0.0, x), "squared_hinge": lambda x: max(0.0, x) ** 2}


def _mean_valid(per, ok):
    vals = [p for p, o in zip(per, ok) if o]
    return sum(vals) / len(vals) if vals else 0.0


# ------------------------------------------------------------------------------------------------ reducers
def test_reducer_table_covers_every_shape():
    assert {shape for shape, _ in REDUCERS.values()} == {"pair", "group", "list"}
    assert set(REDUCERS) == {"gap_abs", "gap_square", "gap_one_sided", "inter", "intra", "both", "l1", "l2sq",
                             "value", "one_minus", "abs", "hinge", "squared_hinge"}


@SETTINGS
@given(B=st.integers(1, 4), G=st.integers(2, 4), seed=st.integers(0, 2 ** 31 - 1),
       name=st.sampled_from(["gap_abs", "gap_square", "gap_one_sided", "inter", "intra", "both"]),
       p_off=st.integers(0, 2), r_off=st.integers(0, 2))
def test_pair_reducers_against_the_loop(B, G, seed, name, p_off, r_off):
    gen = torch.Generator().manual_seed(seed)
    M = torch.rand(B, G, G, generator=gen, dtype=F64)
    V = torch.rand(B, G, G, generator=gen) < 0.7
    protected = (G - 1 + p_off) % (G + 1)  # sometimes == G: a protected group absent from the batch
    reference = (protected + 1 + r_off) % (G + 1)
    if reference == protected:
        reference = (reference + 1) % (G + 1)
    ctx = {"protected": protected, "reference": reference}
    per, ok = REDUCERS[name][1](M, V, ctx)
    assert per.shape == ok.shape == (B,)
    for b in range(B):
        want, valid = _pair_ref(name, M[b].tolist(), V[b].tolist(), protected, reference)
        assert bool(ok[b]) == valid, (b, name)
        if valid:
            assert math.isclose(float(per[b]), want, rel_tol=1e-12, abs_tol=1e-15), (b, name)


@SETTINGS
@given(B=st.integers(1, 4), G=st.integers(1, 4), seed=st.integers(0, 2 ** 31 - 1), name=st.sampled_from(["l1", "l2sq"]))
def test_group_reducers_against_the_loop(B, G, seed, name):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, G, generator=gen, dtype=F64)
    ok = torch.rand(B, G, generator=gen) < 0.8
    present = torch.rand(B, G, generator=gen) < 0.7
    per, valid = REDUCERS[name][1](x, ok, {"present": present, "protected": None, "reference": None})
    for b in range(B):
        want, v = _group_ref(name, x[b].tolist(), ok[b].tolist(), present[b].tolist())
        assert bool(valid[b]) == v
        assert math.isclose(float(per[b]), want, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize("name", sorted(_LIST_REF))
def test_list_reducers_against_the_loop(name):
    x = torch.tensor([-2.0, -0.5, 0.0, 0.3, 1.0, 1.7], dtype=F64)
    ok = torch.tensor([True, False, True, True, True, False])
    per, valid = REDUCERS[name][1](x, ok, {})
    assert torch.equal(valid, ok)  # elementwise reducers keep the measure's own validity
    assert per.tolist() == pytest.approx([_LIST_REF[name](v) for v in x.tolist()], abs=1e-15)


def test_one_sided_and_accuracy_reducers_check_their_ids():
    M, V = torch.rand(2, 2, 2), torch.ones(2, 2, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="`protected`"):
        REDUCERS["gap_one_sided"][1](M, V, {"protected": None, "reference": None})
    for name in ("inter", "intra", "both"):
        with pytest.raises(ValueError, match="distinct"):
            REDUCERS[name][1](M, V, {"protected": 0, "reference": 0})


# ------------------------------------------------------------------------------------------------ reduce_loss
@SETTINGS
@given(values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=8), data=st.data())
def test_reduce_loss_against_the_loop(values, data):
    ok = data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    per, valid = torch.tensor(values, dtype=F64), torch.tensor(ok)
    assert math.isclose(float(reduce_loss(per, valid, "mean")), _mean_valid(values, ok), rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(float(reduce_loss(per, valid, "sum")), sum(v for v, o in zip(values, ok) if o),
                        rel_tol=1e-12, abs_tol=1e-12)
    assert reduce_loss(per, valid, "none").tolist() == [v if o else 0.0 for v, o in zip(values, ok)]


def test_reduce_loss_half_precision_is_reduced_in_float32_and_nan_on_invalid_lists_is_dropped():
    per = torch.tensor([1.0, float("nan"), 3.0, 60000.0], dtype=torch.float16)
    valid = torch.tensor([True, False, True, True])
    out = reduce_loss(per, valid, "sum")
    assert out.dtype == torch.float32 and out.item() == 60004.0  # 60004 is not representable in float16
    assert reduce_loss(per, torch.zeros(4, dtype=torch.bool)).item() == 0.0
    with pytest.raises(ValueError, match="`reduction`"):
        reduce_loss(per, valid, "median")


# ------------------------------------------------------------------------------------------------ measure_loss
def _batch(seed=0, B=4, N=7, G=2, dtype=F64):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=gen, dtype=dtype)
    r = torch.randint(0, 3, (B, N), generator=gen).to(dtype)
    g = torch.randint(0, G, (B, N), generator=gen)
    g[:-1, 0], g[:-1, 1] = 0, 1
    g[-1] = 0  # a list with one group
    m = torch.rand(B, N, generator=gen) < 0.85
    m[:, :2] = True
    return s, r, g, m


@pytest.mark.parametrize("ordering", [Hard(), SoftRank(0.3)], ids=["hard", "softrank"])
@pytest.mark.parametrize("norm", ["l1", "l2sq"])
def test_group_measure_loss_is_the_reduced_measure(ordering, norm):
    """AWRF and exposure misallocation (group vectors): the norm over the groups present in each list, lists with
    fewer than two groups left out, mean over the rest."""
    s, r, g, m = _batch()
    for name, fn, args in (("awrf", awrf, (s, g)), ("exposure_misallocation", exposure_misallocation, (s, r, g))):
        value, valid = fn(*args, mask=m, num_groups=2, ordering=ordering, return_valid=True)
        per, ok = [], []
        for b in range(s.shape[0]):
            present = [bool(((g[b] == c) & m[b]).any()) for c in range(2)]
            x, v = _group_ref(norm, value[b].tolist(), valid[b].tolist(), present)
            per.append(x)
            ok.append(v)
        assert ok[-1] is False and any(ok)
        got = measure_loss(name, s, r, g, reducer=norm, mask=m, num_groups=2, ordering=ordering)
        assert math.isclose(got.item(), _mean_valid(per, ok), rel_tol=1e-10, abs_tol=1e-14)


@pytest.mark.parametrize("reducer", ["value", "abs", "hinge", "squared_hinge", "one_minus"])
def test_list_measure_loss_is_the_reduced_measure(reducer):
    s, r, g, m = _batch(1)
    r[1] = 0.0  # no relevance: IAA undefined there
    o = SoftRank(0.4)
    value, valid = iaa(s, r, mask=m, ordering=o, return_valid=True, amortize=False)
    assert not bool(valid[1])
    per = [_LIST_REF[reducer](x) for x in value.tolist()]
    got = measure_loss("iaa", s, r, reducer=reducer, mask=m, ordering=o)
    assert math.isclose(got.item(), _mean_valid(per, valid.tolist()), rel_tol=1e-10, abs_tol=1e-14)
    none = measure_loss("iaa", s, r, reducer=reducer, mask=m, ordering=o, reduction="none")
    assert none.tolist() == pytest.approx([p if v else 0.0 for p, v in zip(per, valid.tolist())], abs=1e-12)


def test_default_ordering_is_ramprank_at_temperature_0_1():
    from torchfair.orderings import RampRank
    o = default_ordering()
    assert isinstance(o, RampRank) and o is not default_ordering()
    s, r, g, m = _batch(2)
    want = measure_loss("dips", s, r, g, mask=m, num_groups=2, ordering=RampRank(temperature=0.1))
    assert measure_loss("dips", s, r, g, mask=m, num_groups=2).item() == want.item()
    assert want.item() != measure_loss("dips", s, r, g, mask=m, num_groups=2, ordering=SoftRank(0.1)).item()


@pytest.mark.parametrize("name", ["dips", "awrf", "iaa", "ndcg"])
def test_one_dimensional_input_is_a_batch_of_one(name):
    s, r, g, m = _batch(3)
    one = measure_loss(name, s[0], r[0], g[0], num_groups=2)
    batch = measure_loss(name, s[:1], r[:1], g[:1], num_groups=2)
    assert one.item() == batch.item() and one.dim() == 0
    per = measure_loss(name, s[0], r[0], g[0], num_groups=2, reduction="none")
    assert per.dim() == 0 and per.item() == pytest.approx(one.item())


@pytest.mark.parametrize("name,reducer", [("dips", "gap_abs"), ("igi", "gap_square"), ("awrf", "l1"),
                                          ("exposure_misallocation", "l2sq"), ("pairwise_accuracy", "both")])
def test_soft_one_hot_membership_equals_integer_ids(name, reducer):
    s, r, g, m = _batch(4, G=3)
    soft = torch.nn.functional.one_hot(g, 3).to(F64)
    o = SoftRank(0.3)
    a = measure_loss(name, s, r, g, reducer=reducer, mask=m, num_groups=3, ordering=o)
    b = measure_loss(name, s, r, soft, reducer=reducer, mask=m, ordering=o)
    c = measure_loss(name, s, r, soft, reducer=reducer, mask=m, num_groups=3, ordering=o)  # agreeing num_groups
    assert math.isclose(a.item(), b.item(), rel_tol=1e-10, abs_tol=1e-14) and b.item() == c.item()


def test_soft_membership_fixes_the_number_of_groups():
    s, r, g, m = _batch(5)
    soft = torch.nn.functional.one_hot(g, 2).to(F64)
    with pytest.raises(ValueError, match="num_groups"):
        measure_loss("dips", s, r, soft, num_groups=3)
    with pytest.raises(ValueError, match="`protected`"):
        measure_loss("dips", s, r, soft, reducer="gap_one_sided", protected=2)
    with pytest.raises(ValueError, match="`reference`"):
        measure_loss("pairwise_accuracy", s, r, soft, protected=1, reference=5)


@SETTINGS
@given(seed=st.integers(0, 2 ** 31 - 1), N=st.integers(3, 8),
       case=st.sampled_from([("dips", "gap_abs"), ("igi", "gap_abs"), ("awrf", "l1"), ("exposure_misallocation", "l1"),
                             ("pairwise_accuracy", "inter"), ("ndcg", "one_minus"), ("iaa", "value")]))
def test_permuting_items_padding_and_relabelling_groups_change_nothing(seed, N, case):
    """On a soft ordering (distinct scores): a joint permutation of the items, padded slots holding NaN inserted
    anywhere (zero gradient there) and swapping the two group ids (symmetric reducers) leave the loss unchanged;
    gradients are finite."""
    name, reducer = case
    o = SoftRank(0.5)

    def loss(s_, r_, g_, m_=None):
        return measure_loss(name, s_, r_, g_, reducer=reducer, mask=m_, num_groups=2, ordering=o)

    check_item_invariances(loss, torch.Generator().manual_seed(seed), 3, N,
                           symmetric=reducer in ("gap_abs", "l1", "one_minus", "value"))  # symmetric reducers


@pytest.mark.parametrize("name,reducer", [("awrf", "l1"), ("dips", "gap_abs"), ("exposure_misallocation", "l2sq")])
def test_a_batch_of_one_group_lists_is_zero_with_zero_gradient(name, reducer):
    s = torch.tensor([[0.3, float("nan"), -1.0, 2.0], [1.0, 0.5, float("nan"), float("nan")]], dtype=F64,
                     requires_grad=True)
    r = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 0.0]], dtype=F64)
    g = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 1]])
    m = torch.tensor([[True, False, True, True], [True, True, False, False]])
    out = measure_loss(name, s, r, g, reducer=reducer, mask=m, num_groups=2)
    out.backward()
    assert out.item() == 0.0 and torch.equal(s.grad, torch.zeros_like(s))


# ------------------------------------------------------------------------------------------------ module forms
def _scaled_listnet(scores: torch.Tensor, relevance: torch.Tensor, *, alpha: float = 1.0,
                    mask: typing.Optional[torch.Tensor] = None) -> torch.Tensor:
    """A loss of this test module: alpha times the softmax cross-entropy (postponed annotations, as in the library)."""
    logp = torch.log_softmax(scores, -1)
    return -alpha * (torch.softmax(relevance, -1) * logp).sum(-1).mean()


class _ScaledListNet(LossModule):
    """Module form of ``_scaled_listnet``."""

    _fn = staticmethod(_scaled_listnet)
    _inputs = ("relevance",)


def test_loss_module_generates_the_signature_from_the_function():
    sig = inspect.signature(_ScaledListNet)
    assert list(sig.parameters) == ["alpha"]  # keyword-only options, `mask` excluded
    p = sig.parameters["alpha"]
    assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default == 1.0 and p.annotation is float  # not "float"
    init = inspect.signature(_ScaledListNet.__init__)
    assert list(init.parameters) == ["self", "alpha"] and init.parameters["alpha"].annotation is float
    assert _ScaledListNet._options == ("alpha",)
    assert _ScaledListNet.__init__.__doc__ == _ScaledListNet.__doc__


def test_loss_module_routes_the_inputs_and_checks_its_options():
    s, r, g, m = _batch(6)
    mod = _ScaledListNet(alpha=2.5)
    assert mod(s, r, g).item() == pytest.approx(2.5 * _scaled_listnet(s, r).item(), rel=1e-12)
    assert mod(s, r).item() == mod(s, r, g).item()  # groups are accepted and ignored
    assert repr(mod) == "_ScaledListNet(alpha=2.5)"
    with pytest.raises(ValueError, match="`beta` is not an option of _ScaledListNet; it takes alpha"):
        _ScaledListNet(beta=1.0)
    # DELTR takes groups only: relevance is accepted and ignored, mask is passed on
    d = DELTRLoss(num_groups=2)
    want = deltr_loss(s, g, mask=m, num_groups=2)
    assert d(s, r, g, m).item() == want.item() == d(s, None, g, m).item()
    assert inspect.signature(DELTRLoss).parameters.keys() == inspect.signature(DELTRLoss.__init__).parameters.keys() - {"self"}


def test_measure_loss_module_is_measure_loss():
    s, r, g, m = _batch(7)
    o = SoftRank(0.3)
    mod = MeasureLoss("awrf", reducer="l2sq", ordering=o, num_groups=2)
    assert repr(mod) == f"MeasureLoss('awrf', reducer='l2sq', ordering={o!r}, num_groups=2)"
    x1, x2 = s.clone().requires_grad_(), s.clone().requires_grad_()
    a = mod(x1, r, g, m)
    b = measure_loss("awrf", x2, r, g, reducer="l2sq", ordering=o, num_groups=2, mask=m)
    a.backward()
    b.backward()
    assert a.item() == b.item() and torch.equal(x1.grad, x2.grad) and x1.grad.abs().sum() > 0
    from torchfair.metrics import get_declaration
    assert MeasureLoss(get_declaration("awrf")).measure is mod.measure


def test_errors_name_the_argument():
    s, r, g, m = _batch(8)
    with pytest.raises(ValueError, match="`reducer` 'l1' reduces group values"):
        measure_loss("iaa", s, r, reducer="l1")
    with pytest.raises(ValueError, match="it takes browsing, k, tie_weight"):
        measure_loss("dips", s, r, g, num_groups=2, colour="red")
    with pytest.raises(ValueError, match="`protected`"):
        measure_loss("dips", s, r, g, reducer="gap_one_sided", num_groups=2, protected=2)
    with pytest.raises(ValueError, match="`reference`"):
        measure_loss("pairwise_accuracy", s, r, g, num_groups=2, reference=-1)
    with pytest.raises(ValueError, match="`measure`"):
        MeasureLoss("no_such_measure")
