"""The robustness contract of every ordering and browsing model, as property tests.

For every ordering (Hard, the soft relaxations, Plackett-Luce with each estimator, Sampled, DoublyStochastic),
every browsing model (position-based and Cascade) and every input dtype (float32, float64, float16, bfloat16),
on degenerate and extreme batches -- one-item lists, fully padded lists, ``B = 1, N = 1``, ties (all equal, at
0 or at large values), scores of magnitude up to 1e30 (6e4 in float16), NaN / inf in padded slots:

* ``expected_positions``, ``exposure``, the pair contractions (``above`` / ``joint``) and ``position_matrix`` are
  finite and in their documented ranges (positions in ``[0, n_b - 1]``, exposures in ``[0, 1]`` for browsing
  weights ``<= 1``, position-matrix entries in ``[0, 1]``), and 0 on padded items;
* gradients (differentiable orderings) of a random combination of all of them are finite (also once cast back to
  a half-precision input) and exactly 0 on padded items.

The fast profile runs a few dozen examples per family (a few seconds); ``-m slow`` runs 10 000 per family
(``TORCHFAIR_ROBUST_EXAMPLES`` overrides the count).
"""
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from torchfair.browsing import RBP, Cascade, Logarithmic, TopK
from torchfair.orderings import (DoublyStochastic, FastSoftRank, Hard, NeuralSort, PlackettLuce, Sampled, SoftRank,
                                 SoftSort)

FAST = 12
SLOW = int(os.environ.get("TORCHFAIR_ROBUST_EXAMPLES", "10000"))

ORDERINGS = {
    "hard": lambda: Hard(),
    "hard_average": lambda: Hard(ties="average"),
    "softrank": lambda: SoftRank(0.1),
    "softrank_abs": lambda: SoftRank(1e-3, scale="none"),
    "neuralsort": lambda: NeuralSort(0.1, sinkhorn_iters=3),
    "softsort": lambda: SoftSort(0.01),
    "fastsoftrank": lambda: FastSoftRank(0.01, backend="torch"),
    "fastsoftrank_abs": lambda: FastSoftRank(1e-3, scale="none", backend="torch"),
    "pl_rank": lambda: PlackettLuce(4, generator=torch.Generator().manual_seed(0)),
    "pl_score_function": lambda: PlackettLuce(4, estimator="score_function",
                                              generator=torch.Generator().manual_seed(0)),
    "pl_relaxed": lambda: PlackettLuce(3, estimator="relaxed", generator=torch.Generator().manual_seed(0)),
    "pl_exact": lambda: PlackettLuce(exact=True),
}
ORDERINGS["fastsoftrank_numba"] = lambda: FastSoftRank(0.01, backend="numba")  # numba: a core dependency

BROWSING = [RBP(0.8), Logarithmic(), TopK(RBP(0.9), 2), Cascade(0.9, max_grade=3.0), TopK(Cascade(0.7), 3)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
LARGE = {torch.float16: 6e4, torch.bfloat16: 1e30, torch.float32: 1e30, torch.float64: 1e200}


@st.composite
def batches(draw, max_n=6):
    """(scores [B, N] with NaN / inf in padded slots, mask, relevance, dtype) of degenerate and extreme kinds."""
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, max_n))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    gen = torch.Generator().manual_seed(seed)
    big = LARGE[dtype]
    rows = []
    for _ in range(B):
        kind = draw(st.sampled_from(["normal", "zeros", "tied", "large", "large_tied", "mixed", "tiny"]))
        if kind == "normal":
            row = torch.randn(N, generator=gen, dtype=torch.float64) * draw(st.sampled_from([0.01, 1.0, 30.0]))
        elif kind == "zeros":
            row = torch.zeros(N, dtype=torch.float64)
        elif kind == "tied":
            row = torch.full((N,), draw(st.sampled_from([5.0, -3.0, 1e4 if dtype != torch.float16 else 6e3])),
                             dtype=torch.float64)
        elif kind == "large":
            row = (torch.rand(N, generator=gen, dtype=torch.float64) * 2 - 1) * big
        elif kind == "large_tied":
            row = torch.tensor([big, -big, 0.0, 1.0, big / 2], dtype=torch.float64)[
                torch.randint(0, 5, (N,), generator=gen)]
        elif kind == "tiny":
            row = torch.randn(N, generator=gen, dtype=torch.float64) * 1e-30
        else:  # a few distinct values with many ties
            row = torch.randint(-2, 3, (N,), generator=gen).to(torch.float64)
        rows.append(row)
    scores = torch.stack(rows).to(dtype)
    masks = []
    for _ in range(B):
        kind = draw(st.sampled_from(["all", "all", "random", "none", "one"]))
        if kind == "all":
            m = torch.ones(N, dtype=torch.bool)
        elif kind == "none":
            m = torch.zeros(N, dtype=torch.bool)
        elif kind == "one":
            m = torch.zeros(N, dtype=torch.bool)
            m[int(torch.randint(0, N, (1,), generator=gen))] = True
        else:
            m = torch.rand(N, generator=gen) < 0.6
        masks.append(m)
    mask = torch.stack(masks)
    pad = draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, 1e4]))
    scores = torch.where(mask, scores, torch.full((), pad, dtype=dtype))
    rel = torch.randint(0, 5, (B, N), generator=gen).to(dtype)
    rel = torch.where(mask, rel, torch.full((), float("nan"), dtype=dtype))
    return scores, mask, rel, dtype


def _make(name, scores, mask):
    """The ordering, and whether it is differentiable (Sampled / DoublyStochastic are built from the shape)."""
    B, N = mask.shape
    if name == "sampled":
        gen = torch.Generator().manual_seed(B * 10 + N)
        rk = torch.stack([torch.stack([torch.randperm(N, generator=gen) for _ in range(B)]) for _ in range(3)])
        return Sampled(rk), False
    if name == "doubly_stochastic":
        n = mask.sum(-1).clamp(min=1).to(torch.float64)
        return DoublyStochastic(torch.ones(B, N, N, dtype=torch.float64) / n[:, None, None]), False
    o = ORDERINGS[name]()
    return o, o.differentiable


def _check(name, scores, mask, rel):
    B, N = mask.shape
    ordering, diff = _make(name, scores, mask)
    x = scores.clone().requires_grad_(diff)
    # padded slots hold NaN / inf / anything: the orderings must never let them leak (and give them zero gradient)
    ob = ordering(x, mask)
    n = mask.sum(-1, keepdim=True)
    real = mask
    row_real = torch.arange(N)[None, :] < n
    tol = 1e-3 * max(1, N)
    outs = []

    pos = ob.expected_positions()
    assert torch.isfinite(pos).all(), (name, "positions", pos)
    assert ((pos >= -tol) & (pos <= (n - 1).to(pos.dtype) + tol) | ~real).all(), (name, pos)
    if name not in ("neuralsort", "softsort"):  # the others' positions are a (soft) permutation of 0..n_b-1
        total = (pos * real).double().sum(-1)
        nn = n[:, 0].double()
        assert torch.allclose(total, nn * (nn - 1) / 2, atol=tol, rtol=1e-4), (name, pos)
    outs.append(pos * real)

    for F in BROWSING:
        if F.relevance_dependent and (name == "hard_average" or name == "doubly_stochastic"):
            with pytest.raises(ValueError):
                ob.exposure(F, rel)
            continue
        e = ob.exposure(F, rel)
        assert torch.isfinite(e).all(), (name, F, e)
        assert (e >= -1e-6).all() and (e <= 1 + 1e-4).all(), (name, F, e)
        assert (e[~real] == 0).all(), (name, F, e)
        outs.append(e)

    if name != "doubly_stochastic":
        right = torch.ones(B, N, 1, dtype=pos.dtype)
        for which, F in (("above", None), ("joint", RBP(0.7)), ("joint", Cascade(0.8, max_grade=4.0))):
            if which == "joint" and F.relevance_dependent and name == "hard_average":
                continue
            c = ob.contract(right, which=which, browsing=F, relevance=rel)[..., 0]
            assert torch.isfinite(c).all(), (name, which, c)
            assert (c >= -tol).all() and (c <= (n - 1).clamp(min=0).to(c.dtype) + tol).all(), (name, which, c)
            assert (c[~real] == 0).all(), (name, which, c)
            outs.append(c)

    R = ob.position_matrix()
    assert torch.isfinite(R).all(), (name, "R")
    assert (R >= -1e-6).all() and (R <= 1 + 1e-4).all(), (name, R)
    assert (R.transpose(1, 2)[~real] == 0).all() and (R[~row_real] == 0).all(), (name, R)
    outs.append(R.flatten(1))

    if diff:
        gen = torch.Generator().manual_seed(7)
        loss = sum((o.double() * torch.randn(o.shape, generator=gen, dtype=torch.float64)).sum() for o in outs)
        (g,) = torch.autograd.grad(loss, x, allow_unused=True)
        if g is not None:
            assert g.dtype == scores.dtype
            assert torch.isfinite(g).all(), (name, "gradient", g)
            assert (g[~real] == 0).all(), (name, "padding gradient", g)


FAMILIES = list(ORDERINGS) + ["sampled", "doubly_stochastic"]


def _family_test(examples):
    @pytest.mark.parametrize("name", FAMILIES)
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=batches())
    @example(data=(torch.tensor([[0.0]]), torch.tensor([[True]]), torch.tensor([[1.0]]), torch.float32))
    @example(data=(torch.tensor([[float("nan")]]), torch.tensor([[False]]), torch.tensor([[1.0]]), torch.float32))
    @example(data=(torch.tensor([[1e30, -1e30, 1e30], [5.0, 5.0, float("nan")]]),
                   torch.tensor([[True, True, True], [True, True, False]]),
                   torch.tensor([[3.0, 0.0, 1.0], [200.0, 1.0, 0.0]]), torch.float32))
    @example(data=(torch.zeros(2, 4, dtype=torch.float16), torch.ones(2, 4, dtype=torch.bool),
                   torch.ones(2, 4, dtype=torch.float16), torch.float16))
    @example(data=(torch.tensor([[9.4e199, float("nan"), -8.1e198]], dtype=torch.float64),  # PL padding stand-in
                   torch.tensor([[True, False, True]]), torch.tensor([[1.0, 0.0, 2.0]], dtype=torch.float64),
                   torch.float64))
    @example(data=(torch.tensor([[5e18] * 6, [1e19, 1e19, -1e19, 0.0, 1.0, 1e19]]), torch.ones(2, 6, dtype=torch.bool),
                   torch.ones(2, 6), torch.float32))
    def test(name, data):
        scores, mask, rel, _ = data
        _check(name, scores, mask, rel)
    return test


test_orderings_robust = _family_test(FAST)
test_orderings_robust_slow = pytest.mark.slow(_family_test(SLOW))


# --------------------------------------------------------------------------- soft orderings: scale equivariance
STD_SCALED = ["softrank", "neuralsort", "softsort", "fastsoftrank", "fastsoftrank_numba"]


def _equivariance_test(examples):
    @pytest.mark.parametrize("name", STD_SCALED)
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None)
    @given(n=st.integers(2, 6), seed=st.integers(0, 2 ** 31 - 1), dtype=st.sampled_from([torch.float32,
                                                                                        torch.float64]),
           c=st.sampled_from([10.0, 1e4, 1e19, 1e30]), ties=st.booleans())
    def test(name, n, seed, dtype, c, ties):
        """With ``scale="std"`` the positions of ``c * s`` equal those of ``s`` (std >= the floor) at any magnitude:
        catches a per-list scale that overflows (every position collapsing to (n - 1) / 2)."""
        gen = torch.Generator().manual_seed(seed)
        s = torch.randn(1, n, generator=gen, dtype=torch.float64) * 2
        if ties:
            s = s.round()
        if s.std(unbiased=False) < 0.5:
            s[0, 0] = s[0, 0] + 3.0
        mask = torch.ones(1, n, dtype=torch.bool)
        o = ORDERINGS[name]()
        p1 = o(s.to(dtype), mask).expected_positions().double()
        pc = o((s * c).to(dtype), mask).expected_positions().double()
        torch.testing.assert_close(pc, p1, atol=1e-3, rtol=0)
    return test


test_soft_scale_equivariance = _equivariance_test(FAST)
test_soft_scale_equivariance_slow = pytest.mark.slow(_equivariance_test(SLOW))


# ------------------------------------------------------------------------------------- browsing models alone
@settings(max_examples=FAST * 4, deadline=None, derandomize=True, database=None)
@given(gamma=st.floats(0.01, 1.0), max_grade=st.sampled_from([0.5, 1.0, 4.0, 10.0, 300.0]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2 ** 31 - 1),
       scale=st.sampled_from([1.0, 10.0, 130.0, 1e4, 6e4]))
def test_cascade_exposure_finite_with_any_grades(gamma, max_grade, dtype, seed, scale):
    """Cascade exposure: finite, in [0, gamma**k], non-increasing along the list, finite gradients for grades up
    to 6e4 in every dtype (float16 included)."""
    gen = torch.Generator().manual_seed(seed)
    rel = (torch.rand(3, 7, generator=gen, dtype=torch.float64) * scale).to(dtype).requires_grad_(True)
    e = Cascade(gamma, max_grade=max_grade).item_exposure(rel)
    assert torch.isfinite(e).all()
    w = torch.tensor([gamma ** k for k in range(7)], dtype=torch.float64)
    assert (e.double() >= 0).all() and (e.double() <= w + 1e-3).all()
    assert (e[..., 1:].double() <= e[..., :-1].double() + 1e-3).all()
    (g,) = torch.autograd.grad(e.double().sum(), rel)
    assert torch.isfinite(g).all()
