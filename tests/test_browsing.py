"""Browsing models: F(k) against the formulas (0-based positions), cumulative sums, cascade exposure, parameters."""
from __future__ import annotations

import math

import pytest
import torch

from torchfair.browsing import (RBP, BrowsingModel, Cascade, Custom, Geometric, Logarithmic, ReciprocalRank, TopK,
                                Uniform, get_browsing)

FORMULAS = [
    (RBP(0.9), lambda k: 0.9 ** k),
    (RBP(0.5), lambda k: 0.5 ** k),
    (RBP(1.0), lambda k: 1.0),
    (Geometric(0.3), lambda k: 0.3 * 0.7 ** k),
    (Geometric(1.0), lambda k: 1.0 if k == 0 else 0.0),
    (Logarithmic(), lambda k: 1.0 / math.log2(k + 2)),
    (Logarithmic(flat_top=True), lambda k: 1.0 / math.log2(max(k + 1, 2))),
    (ReciprocalRank(), lambda k: 1.0 / (k + 1)),
    (Uniform(), lambda k: 1.0),
    (Cascade(0.8), lambda k: 0.8 ** k),  # position part
    (TopK(RBP(0.9), k=3), lambda k: 0.9 ** k if k < 3 else 0.0),
    (TopK(k=2), lambda k: 1.0 if k < 2 else 0.0),
    (Custom([1.0, 0.6, 0.3]), lambda k: [1.0, 0.6, 0.3][k] if k < 3 else 0.0),
]
IDS = [repr(m) for m, _ in FORMULAS]


@pytest.mark.parametrize("model,formula", FORMULAS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weights_match_formula(model, formula, dtype):
    w = model.weights(8, dtype=dtype)
    assert w.shape == (8,) and w.dtype == dtype
    for k in range(8):
        assert float(w[k]) == pytest.approx(formula(k), rel=1e-6 if dtype == torch.float32 else 1e-12, abs=1e-12)
    # weight() on real positions equals weights() at integers; __call__ is weight
    k = torch.arange(8, dtype=dtype)
    torch.testing.assert_close(model.weight(k), w)
    torch.testing.assert_close(model(k), w)


@pytest.mark.parametrize("model,formula", FORMULAS, ids=IDS)
def test_weight_on_integer_positions(model, formula):
    """The module promises F at positions ``k`` given as an integer- or real-valued tensor (hard rankings use
    integer positions)."""
    k = torch.arange(6)
    w = model.weight(k)
    for i in range(6):
        assert float(w[i]) == pytest.approx(formula(i), rel=1e-6, abs=1e-9), (model, w)


@pytest.mark.parametrize("model,formula", FORMULAS, ids=IDS)
def test_cumulative_matches_loop(model, formula):
    max_n = 7
    # integer counts, as integer and float tensors
    n_int = torch.arange(max_n + 1)
    for n in (n_int, n_int.double()):
        c = model.cumulative(n, max_n)
        for t in range(max_n + 1):
            assert float(c[t]) == pytest.approx(sum(formula(k) for k in range(t)), rel=1e-6, abs=1e-9)
    # fractional counts: sum_{k < floor n} F(k) + frac F(floor n)
    n = torch.tensor([0.0, 0.25, 1.5, 2.75, 3.0, 4.1, 6.9, 7.0], dtype=torch.float64)
    c = model.cumulative(n, max_n)
    for t, x in enumerate(n.tolist()):
        fl = math.floor(x)
        expected = sum(formula(k) for k in range(fl)) + (x - fl) * formula(fl)
        assert float(c[t]) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert c.dtype == torch.float64
    # batched counts keep their shape
    n2 = torch.tensor([[1.0, 2.5], [0.0, 3.0]])
    assert model.cumulative(n2, max_n).shape == (2, 2)


def test_default_rbp_example_from_docstring():
    torch.testing.assert_close(RBP(0.5).weights(4), torch.tensor([1.0, 0.5, 0.25, 0.125]))


def test_topk_on_real_positions_is_a_ramp():
    m = TopK(RBP(0.5), k=2)
    k = torch.tensor([0.0, 0.5, 1.0, 1.25, 1.5, 2.0, 2.5, 3.7], dtype=torch.float64)
    w = m.weight(k)
    for t, x in enumerate(k.tolist()):
        expected = 0.5 ** x * min(1.0, max(0.0, 2 - x))
        assert float(w[t]) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_custom_on_real_positions_interpolates():
    vals = [1.0, 0.6, 0.3]
    m = Custom(vals)
    k = torch.tensor([0.0, 0.5, 1.0, 1.25, 2.0, 2.5, 3.0, 10.0, -1.0], dtype=torch.float64)
    w = m.weight(k)
    ext = vals + [0.0]

    def interp(x):
        x = min(max(x, 0.0), 3.0)
        lo = math.floor(x)
        hi = min(lo + 1, 3)
        return ext[lo] * (1 - (x - lo)) + ext[hi] * (x - lo)

    for t, x in enumerate(k.tolist()):
        assert float(w[t]) == pytest.approx(interp(x), rel=1e-12, abs=1e-15)
    # a tensor of weights is accepted, dtype follows the positions
    m2 = Custom(torch.tensor(vals))
    assert m2.weight(torch.tensor([1.0], dtype=torch.float32)).dtype == torch.float32


def _cascade_loop(gamma, rel_sorted, phi):
    out, survive = [], 1.0
    for k, r in enumerate(rel_sorted):
        out.append(gamma ** k * survive)
        survive *= min(1.0, max(0.0, 1.0 - phi(r)))
    return out


@pytest.mark.parametrize("gamma,max_grade", [(0.9, 1.0), (0.7, 3.0), (1.0, 2.0)])
def test_cascade_item_exposure_matches_loop(gamma, max_grade):
    m = Cascade(gamma, max_grade=max_grade)
    assert m.relevance_dependent
    phi = lambda r: (2.0 ** r - 1.0) / 2.0 ** max_grade
    gen = torch.Generator().manual_seed(0)
    rel = torch.randint(0, int(max_grade) + 2, (3, 6), generator=gen).double()  # grades above max_grade too
    e = m.item_exposure(rel)
    assert e.shape == (3, 6)
    for b in range(3):
        expected = _cascade_loop(gamma, rel[b].tolist(), phi)
        for k in range(6):
            assert float(e[b, k]) == pytest.approx(expected[k], rel=1e-12, abs=1e-15)
    # 1-D input
    torch.testing.assert_close(m.item_exposure(rel[0]), e[0])


def test_cascade_custom_stop_and_topk_of_cascade():
    stop = lambda r: 0.5 * r
    m = Cascade(0.8, stop=stop)
    rel = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    expected = _cascade_loop(0.8, rel.tolist(), stop)
    assert m.item_exposure(rel).tolist() == pytest.approx(expected)
    t = TopK(m, k=3)
    assert t.relevance_dependent
    assert t.item_exposure(rel).tolist() == pytest.approx(expected[:3] + [0.0, 0.0])
    assert not TopK(RBP(0.5), k=2).relevance_dependent


def test_get_browsing_names_and_default():
    assert isinstance(get_browsing(None), RBP) and get_browsing(None).gamma == 0.9
    u = Uniform()
    assert get_browsing(None, u) is u
    m = RBP(0.3)
    assert get_browsing(m) is m
    for name, cls in [("rbp", RBP), ("exponential", RBP), ("geometric", Geometric), ("logarithmic", Logarithmic),
                      ("log", Logarithmic), ("dcg", Logarithmic), ("reciprocal", ReciprocalRank),
                      ("rr", ReciprocalRank), ("uniform", Uniform), ("cascade", Cascade), ("RBP", RBP)]:
        assert isinstance(get_browsing(name), cls)
    with pytest.raises(ValueError, match="browsing"):
        get_browsing("nope")
    with pytest.raises(ValueError, match="browsing"):
        get_browsing(3)


@pytest.mark.parametrize("make,arg", [
    (lambda: RBP(0.0), "gamma"), (lambda: RBP(1.5), "gamma"), (lambda: RBP(-0.1), "gamma"),
    (lambda: RBP("0.5"), "gamma"), (lambda: RBP(float("nan")), "gamma"),
    (lambda: Geometric(0.0), "p"), (lambda: Geometric(2.0), "p"),
    (lambda: Cascade(0.0), "gamma"), (lambda: Cascade(1.1), "gamma"), (lambda: Cascade(0.9, max_grade=0), "max_grade"),
    (lambda: Cascade(0.9, max_grade=-1.0), "max_grade"),
    (lambda: TopK(RBP(), k=0), "k"), (lambda: TopK(RBP(), k=2.5), "k"), (lambda: TopK(RBP(), k=-3), "k"),
    (lambda: TopK("rbp", k=3), "base"),
    (lambda: Custom([]), "weights"), (lambda: Custom([1.0, -0.5]), "weights"),
    (lambda: Custom([1.0, float("nan")]), "weights"), (lambda: Custom([float("inf")]), "weights"),
    # NaN, inf and bools are refused everywhere (`Cascade(max_grade=nan)` used to be accepted)
    (lambda: Cascade(0.9, max_grade=float("nan")), "max_grade"), (lambda: Cascade(0.9, max_grade=float("inf")),
                                                                   "max_grade"),
    (lambda: Cascade(0.9, max_grade=True), "max_grade"), (lambda: Cascade(True), "gamma"),
    (lambda: Cascade(float("nan")), "gamma"), (lambda: Cascade(0.9, stop=0.5), "stop"),
    (lambda: RBP(True), "gamma"), (lambda: RBP(float("inf")), "gamma"), (lambda: Geometric(float("nan")), "p"),
    (lambda: Geometric(False), "p"), (lambda: TopK(RBP(), k=True), "k"), (lambda: TopK(RBP(), k=3.0), "k"),
    (lambda: TopK(RBP(), k=float("nan")), "k"), (lambda: Logarithmic(flat_top=1), "flat_top"),
    (lambda: Logarithmic(flat_top="yes"), "flat_top"), (lambda: Custom("abc"), "weights"),
    (lambda: Custom([[1.0, float("nan")]]), "weights"),
])
def test_bad_parameters_raise(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


def test_models_on_device_dtype_follow_input():
    for m, _ in FORMULAS:
        assert m.weights(3, dtype=torch.float64).dtype == torch.float64
        assert isinstance(m, BrowsingModel)


# --------------------------------------------------------------------------------- robustness, interface
def _erra_phi_exact(r: float, max_grade: float) -> float:
    """ERR's stop probability in exact (big-number) arithmetic, clipped to [0, 1]."""
    from fractions import Fraction
    if float(r).is_integer() and float(max_grade).is_integer():
        v = Fraction(2 ** int(r) - 1, 2 ** int(max_grade))
        return float(min(Fraction(1), max(Fraction(0), v)))
    return min(1.0, max(0.0, (2.0 ** r - 1.0) / 2.0 ** max_grade))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_cascade_large_grades_finite_gradient(dtype):
    """Regression: grades >= 128 overflowed ``2**r`` in float32 and made the gradient of the cascade
    exposure NaN.  Values match ERR's formula in exact arithmetic (clipped to probability 1 above max_grade),
    gradients are finite, and 0 for the clipped grades."""
    m = Cascade(0.9, max_grade=4.0)
    grades = [0.0, 1.0, 3.0, 4.0, 5.0, 127.0, 128.0, 200.0, 1000.0]
    if dtype != torch.float16:
        grades.append(1e4)
    r = torch.tensor(grades, dtype=dtype, requires_grad=True)
    phi = m.stop_probability(r)
    for x, p in zip(grades, phi.tolist()):
        assert p == pytest.approx(_erra_phi_exact(x, 4.0), rel=1e-3 if dtype == torch.float16 else 1e-6, abs=1e-7)
    (g,) = torch.autograd.grad(phi.sum(), r)
    assert torch.isfinite(g).all()
    assert (g[4:] == 0).all() and (g[:4] > 0).all()  # clipped at 1 from just above max_grade on
    rel = torch.tensor([[3.0, 200.0, 1.0, 1e3 if dtype == torch.float16 else 1e4, 0.0]], dtype=dtype,
                       requires_grad=True)
    e = m.item_exposure(rel)
    expected = _cascade_loop(0.9, rel[0].tolist(), lambda x: _erra_phi_exact(x, 4.0))
    assert e[0].tolist() == pytest.approx(expected, rel=1e-2 if dtype == torch.float16 else 1e-6, abs=1e-7)
    (g,) = torch.autograd.grad(e.sum(), rel)
    assert torch.isfinite(g).all()


def test_cascade_custom_stop_is_clipped():
    m = Cascade(0.9, stop=lambda r: 2.0 * r - 0.5)
    torch.testing.assert_close(m.stop_probability(torch.tensor([0.0, 0.5, 2.0])), torch.tensor([0.0, 0.5, 1.0]))


def test_item_exposure_is_the_browsing_interface():
    """Every model answers ``item_exposure``: position-based models give F(k) broadcast (the relevance is not read),
    relevance-dependent ones use it; ``relevance_dependent`` declares which."""
    rel = torch.tensor([[3.0, 0.0, 1.0, 2.0], [0.0, 0.0, 5.0, 1.0]], dtype=torch.float64)
    for m, formula in FORMULAS:
        e = m.item_exposure(rel)
        assert e.shape == rel.shape and e.dtype == rel.dtype
        if m.relevance_dependent:
            assert isinstance(m, Cascade)
            continue
        expected = torch.tensor([formula(k) for k in range(4)], dtype=torch.float64).expand(2, 4)
        torch.testing.assert_close(e, expected)
        torch.testing.assert_close(m.item_exposure(torch.full_like(rel, float("nan"))), expected)
    assert Cascade().relevance_dependent and TopK(Cascade(), 2).relevance_dependent
    assert not any(m.relevance_dependent for m in (RBP(), TopK(RBP(), 2), Custom([1.0]), Uniform()))


def test_position_based_is_gone():
    """The 0.1.0 alias ``position_based`` was dropped before the release: ``relevance_dependent`` is the one name."""
    assert not hasattr(RBP(), "position_based") and not hasattr(Cascade(), "position_based")
