"""torchfair.kernels.windows: the compiled passes of RampRank's windows against the torch prefix sums.

* ``window_bounds`` is ``torch.searchsorted`` of each window's ends on the sorted keys;
* ``window_pass`` (forward and transposed, grouped and not) is the torch ``_window_pass``;
* ``level_window_pass`` reached through ``RampRank(backend="numba")`` gives the contraction and the gradients of
  ``RampRank(backend="torch")`` for every relevance pair weight.
"""
from __future__ import annotations

import pytest
import torch

import torchfair.kernels.windows as K
from torchfair.orderings import RampRank
from torchfair.orderings import ramp as rp
from torchfair.orderings.base import LevelPairWeight


def _keys(seed, B=3, N=40):
    g = torch.Generator().manual_seed(seed)
    key = (torch.rand(B, N, generator=g, dtype=torch.float64) * 8).round(decimals=1)  # ties and gaps of 1/2
    return key, torch.sort(key, dim=-1).values


def test_window_bounds_are_searchsorted_of_the_window_ends():
    for seed in (0, 1, 2):
        key, key_s = _keys(seed)
        order = torch.argsort(key, dim=-1, stable=True)
        key_s = key.gather(-1, order)
        hi, lo = K.window_bounds(key_s, order)
        want_hi = torch.searchsorted(key_s, key_s + 0.5, side="left")
        want_lo = torch.searchsorted(key_s, key_s - 0.5, side="right")
        assert torch.equal(hi.gather(-1, order), want_hi), seed
        assert torch.equal(lo.gather(-1, order), want_lo), seed
        # the same bounds read along the order from unsorted keys, padded items (+inf) last
        mask = torch.rand(key.shape, generator=torch.Generator().manual_seed(seed)) > 0.2
        padded_last = torch.argsort(torch.where(mask, key, torch.inf), dim=-1, stable=True)
        hi2, lo2 = K.ordered_window_bounds(key, mask, padded_last)
        ks = torch.where(mask, key, torch.inf).gather(-1, padded_last)
        real = mask.gather(-1, padded_last)
        assert torch.equal(hi2.gather(-1, padded_last)[real], torch.searchsorted(ks, ks + 0.5, side="left")[real])
        assert torch.equal(lo2.gather(-1, padded_last)[real], torch.searchsorted(ks, ks - 0.5, side="right")[real])


def test_window_pass_is_the_torch_pass():
    for lower in (False, True):
        for grouped in (False, True):
            g = torch.Generator().manual_seed(3)
            B, N, H = 3, 30, 2
            z = torch.randn(B, N, generator=g, dtype=torch.float64) * 3
            mask = torch.rand(B, N, generator=g) > 0.2
            group = torch.randint(0, 3, (B, N), generator=g) if grouped else None
            win = rp._Window(z, mask, group, backend="torch")
            X = torch.randn(B, N, H, generator=g, dtype=torch.float64)
            w_ref, out_ref = rp._window_pass(X, win.off, win, lower)
            w, out = K.window_pass(X, win.off, win.order, win.hi, win.lo, win.start, win.end, lower)
            torch.testing.assert_close(w, w_ref, rtol=1e-12, atol=1e-12, msg=f"lower={lower} grouped={grouped}")
            torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-12, msg=f"lower={lower} grouped={grouped}")


def test_level_window_pass_through_ramp_rank_is_the_torch_contraction():
    for weights in ((1.0, 0.0, 0.0), (1.0, 0.5, 0.0), (0.3, 0.2, 0.7), (0.0, 0.0, 1.0)):
        g = torch.Generator().manual_seed(4)
        B, N, H = 3, 25, 2
        s = torch.randn(B, N, generator=g, dtype=torch.float64)
        mask = torch.rand(B, N, generator=g) > 0.2
        rel = torch.randint(0, 4, (B, N), generator=g).double()
        R0 = torch.randn(B, N, H, generator=g, dtype=torch.float64)
        outs, grads = {}, {}
        for backend in ("numba", "torch"):
            R = R0.clone().requires_grad_(True)
            out = RampRank(0.5, backend=backend)(s, mask).contract(R, pair_weight=LevelPairWeight(rel, *weights))
            (out * torch.linspace(0, 1, H, dtype=torch.float64)).sum().backward()
            outs[backend], grads[backend] = out.detach(), R.grad
        torch.testing.assert_close(outs["numba"], outs["torch"], rtol=1e-12, atol=1e-12, msg=str(weights))
        torch.testing.assert_close(grads["numba"], grads["torch"], rtol=1e-12, atol=1e-12, msg=str(weights))


def test_ramp_rank_backend_argument():
    assert repr(RampRank(0.1, backend="torch")) == "RampRank(temperature=0.1, scale='std', backend='torch')"
    assert repr(RampRank(0.1)) == "RampRank(temperature=0.1, scale='std')"
    with pytest.raises(ValueError, match="backend"):
        RampRank(0.1, backend="cuda")
