"""The fused compiled CPU paths against their torch references.

* ``RampRank(backend="numba")`` (the fused ``_RampContract`` of :mod:`torchfair.kernels.windows`) gives the values
  and gradients of ``RampRank(backend="torch")``, through the fairness losses and directly on the ordering;
* :func:`torchfair.kernels.windows.list_scale` is :func:`torchfair.orderings.soft.list_scale`'s torch code;
* :func:`torchfair.kernels.sorting.tie_average` is :func:`torchfair.metrics.exposure._ideal`'s torch code.

Each test counts the calls of the kernel it checks, so a silent fall-back to the torch code on both sides fails.
"""
from __future__ import annotations

import pytest
import torch

import torchfair.kernels as kernels
from torchfair.browsing import RBP, Cascade, Logarithmic
from torchfair.losses import dips_loss, exposure_misallocation_loss, pairwise_accuracy_gap_loss
from torchfair.metrics import exposure as ex
from torchfair.orderings import RampRank
from torchfair.orderings import soft
from torchfair.orderings.base import LevelPairWeight

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-4, atol=1e-6)}


def _kernel(family):
    if not kernels.numba_available():
        pytest.skip("numba cannot be imported: no compiled kernels to check")
    K = kernels.load(family, "numba")
    assert K is not None
    return K


def _count(monkeypatch, module, name):
    """Wrap ``module.name`` with a call counter; returns the list whose length is the number of calls."""
    calls, fn = [], getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def _batch(dtype, B=5, N=40, seed=0):
    """Graded relevance, groups 0/1 with unknown (-1) ids, padding; list 1: one real item only; list 2: NaN in
    its padded scores; list 3: tied scores; list 4: a single group."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=g, dtype=torch.float64)
    r = torch.randint(0, 5, (B, N), generator=g).to(torch.float64)
    grp = torch.randint(0, 2, (B, N), generator=g)
    grp[torch.rand(B, N, generator=g) < 0.1] = -1
    mask = torch.rand(B, N, generator=g) > 0.2
    mask[:, 0] = True
    mask[0] = True
    mask[1] = False
    mask[1, 7] = True
    s[2] = torch.where(mask[2], s[2], torch.full_like(s[2], float("nan")))
    s[3] = (s[3] * 2).round() / 2  # ties (and gaps within 2 tau)
    grp[4] = torch.where(grp[4] >= 0, torch.zeros_like(grp[4]), grp[4])
    return s.to(dtype), r.to(dtype), grp, mask


def _spy_ramp_kernels(monkeypatch):
    """Call counters of the fused RampRank kernels: contraction, positions and their backwards."""
    _kernel("windows")
    W = kernels.load("windows", "numba")
    return [_count(monkeypatch, W, name) for name in ("ramp_contract", "ramp_positions", "ramp_contract_backward",
                                                      "ramp_positions_backward")]


def test_ramp_rank_losses_numba_match_torch(monkeypatch):
    calls, positions, back, back_pos = _spy_ramp_kernels(monkeypatch)
    cases = [
        ("dips", lambda *a, **k: dips_loss(*a, **k)),
        ("dips square tie0", lambda *a, **k: dips_loss(*a, mode="square", tie_weight=0.0, **k)),
        ("misallocation", lambda *a, **k: exposure_misallocation_loss(*a, **k)),
        ("accuracy gap", lambda *a, **k: pairwise_accuracy_gap_loss(*a, **k)),
        ("accuracy gap both", lambda *a, **k: pairwise_accuracy_gap_loss(*a, which="both", **k)),
        # no fused node for the one-sided reducer nor for DCG browsing: the windows family's contraction
        ("dips one-sided", lambda *a, **k: dips_loss(*a, mode="one_sided", protected=1, **k)),
        ("misallocation dcg", lambda *a, **k: exposure_misallocation_loss(*a, browsing="dcg", **k)),
    ]
    for dtype in (torch.float64, torch.float32):
        s0, r, grp, mask = _batch(dtype)
        for name, loss in cases:
            out = {}
            for backend in ("numba", "torch"):
                # the torch side: every kernel off (temperature, ideal exposure); the numba side: every kernel on
                monkeypatch.setenv(kernels.ENV, backend)
                n0 = len(calls) + len(positions)
                s = s0.clone().requires_grad_(True)
                with kernels.trace() as paths:
                    value = loss(s, r, grp, mask=mask, num_groups=2, ordering=RampRank(0.1, backend=backend))
                (grad,) = torch.autograd.grad(value, s)
                out[backend] = value.detach(), grad
                # the DIPS, misallocation and accuracy-gap losses run as one node of the ramp_losses family
                # (tests/losses/test_fused.py), the others through the windows family's contraction
                node = ("ramp_losses", "numba") in {(f, w) for f, w, _ in paths}
                if backend == "numba":
                    assert node or len(calls) + len(positions) > n0, f"{name}: the fused kernel did not run"
                else:
                    assert not node and len(calls) + len(positions) == n0
            (v, g), (v_ref, g_ref) = out["numba"], out["torch"]
            assert torch.isfinite(v) and torch.isfinite(g).all(), (name, dtype)
            torch.testing.assert_close(v, v_ref, **TOL[dtype], msg=lambda m: f"{name} {dtype} value: {m}")
            torch.testing.assert_close(g, g_ref, **TOL[dtype], msg=lambda m: f"{name} {dtype} grad: {m}")
            assert (g[~mask] == 0).all(), (name, dtype)
    assert back and back_pos, "the fused backwards never ran"


def test_ramp_rank_ordering_numba_matches_torch(monkeypatch):
    calls, positions, back, _ = _spy_ramp_kernels(monkeypatch)
    for dtype in (torch.float64, torch.float32):
        s0, rel, _, mask = _batch(dtype, seed=1)
        R0 = torch.randn(*mask.shape, 3, generator=torch.Generator().manual_seed(2), dtype=dtype)
        out = {}
        for backend in ("numba", "torch"):
            monkeypatch.setenv(kernels.ENV, backend)
            n0, b0 = len(calls), len(back)
            s, R = s0.clone().requires_grad_(True), R0.clone().requires_grad_(True)
            ob = RampRank(0.1, backend=backend)(s, mask)
            pos = ob.expected_positions()
            pw = LevelPairWeight(rel, greater=1.0, equal=0.5, less=0.25)
            c = ob.contract(R, which="joint", browsing=RBP(0.9), pair_weight=pw)
            w = torch.linspace(-1, 1, mask.shape[1] * 3, dtype=dtype).reshape(1, -1, 3)  # an uneven downstream
            gs, gR = torch.autograd.grad((c * w).sum() + (pos * w[..., 0]).sum(), (s, R))
            out[backend] = pos.detach(), c.detach(), gs, gR
            if backend == "numba":
                assert len(calls) >= n0 + 1 and positions and len(back) > b0, "the fused kernels did not run"
            else:
                assert len(calls) == n0 and len(back) == b0
        for name, a, b in zip(("positions", "contract", "grad scores", "grad right"), out["numba"], out["torch"]):
            assert torch.isfinite(a).all(), (name, dtype)
            torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m: f"{name} {dtype}: {m}")


def test_list_scale_kernel_matches_torch(monkeypatch):
    K = _kernel("windows")
    calls = _count(monkeypatch, K, "list_scale")
    monkeypatch.setenv(kernels.ENV, "numba")
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        B, N = 7, 33
        s = torch.randn(B, N, generator=g, dtype=torch.float64) * 3 + 1
        mask = torch.rand(B, N, generator=g) > 0.3
        mask[0] = False  # empty list
        s[1] = 2.5  # constant list
        s[2] = s[2] * (1e30 if dtype == torch.float64 else 1e20)  # huge: sum(s**2) overflows float32
        s[3] = s[3] * 1e-3 + 100.0  # a small spread around a large mean (rel_min_scale > 0 matters)
        s[4] = torch.where(mask[4], s[4], torch.full_like(s[4], float("nan")))  # padded slots hold anything
        mask[5] = False
        mask[5, 3] = True  # a single item
        s = s.to(dtype)
        for min_scale, rel_min_scale in ((0.25, 0.0), (0.25, 0.05), (1e-6, 0.5), (0.0, 0.0)):
            n0 = len(calls)
            got = soft.list_scale(s, mask, min_scale, rel_min_scale)
            assert len(calls) == n0 + 1, "the kernel did not run"
            monkeypatch.setattr(soft, "_kernels", lambda *a, **k: None)
            want = soft.list_scale(s, mask, min_scale, rel_min_scale)
            monkeypatch.setattr(soft, "_kernels", kernels.pick)
            assert got.shape == want.shape == (B, 1) and got.dtype == want.dtype == dtype
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got, want, **TOL[dtype],
                                       msg=lambda m: f"{dtype} min={min_scale} rel={rel_min_scale}: {m}")


def test_ideal_exposure_tie_average_matches_torch(monkeypatch):
    K = _kernel("sorting")
    calls = _count(monkeypatch, K, "tie_average")  # relevance-dependent browsing: the tie blocks of the sort
    calls_pos = _count(monkeypatch, K, "ideal_exposure")  # position-based browsing: dense ranks, no sort
    monkeypatch.setenv(kernels.ENV, "numba")
    g = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.float64):
        B, N = 6, 37
        key = torch.randint(0, 4, (B, N), generator=g).to(dtype)  # many ties
        key[1] = 2.0  # one tie block
        key[2] = torch.randn(N, generator=g).to(dtype)  # no ties
        mask = torch.rand(B, N, generator=g) > 0.25
        mask[3] = False  # empty list
        mask[4] = False
        mask[4, -1] = True  # one real item, last
        key = torch.where(mask | (torch.arange(N) % 2 == 0), key, torch.full_like(key, float("nan")))
        for F in (RBP(0.8), Logarithmic(), Logarithmic(flat_top=True), Cascade(gamma=0.9, max_grade=4)):
            n0 = len(calls) + len(calls_pos)
            got = ex._ideal(key, mask, F)
            assert len(calls) + len(calls_pos) == n0 + 1, "the kernel did not run"
            monkeypatch.setattr(ex, "_kernels", lambda *a, **k: None)
            want = ex._ideal(key, mask, F)
            monkeypatch.setattr(ex, "_kernels", kernels.pick)
            assert got.dtype == want.dtype == dtype and torch.isfinite(got).all()
            assert (got[~mask] == 0).all()
            torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda m: f"{dtype} {F!r}: {m}")
