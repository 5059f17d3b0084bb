"""torchfair._linalg: ``bmm`` / ``matmul`` / ``einsum`` run in the inputs' own dtype, also under autocast.

Under ``torch.autocast`` the plain torch products drop to the autocast dtype (checked here, so that the test means
something); the library's keep float32 / float64 and give the float32 / float64 product, with gradients.  The meta
device (no autocast there) takes the plain path.  On CUDA (when present) the same with float16 autocast.
"""
from __future__ import annotations

import pytest
import torch

from torchfair import _linalg

DEVICES = [pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
           pytest.param("cuda", torch.float16, id="cuda-f16",
                        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]

CASES = {
    "bmm": (lambda a, b: _linalg.bmm(a, b), lambda a, b: torch.bmm(a, b)),
    "matmul": (lambda a, b: _linalg.matmul(a, b), lambda a, b: torch.matmul(a, b)),
    "einsum": (lambda a, b: _linalg.einsum("bij,bjk->bik", a, b), lambda a, b: torch.einsum("bij,bjk->bik", a, b)),
}


def _inputs(device, dtype, requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    # entries whose products lose digits in half precision: 1 + 1e-3 k is not representable in bfloat16
    a = (1 + 1e-3 * torch.randint(0, 50, (2, 3, 64), generator=gen)).to(dtype).to(device)
    b = (1 + 1e-3 * torch.randint(0, 50, (2, 64, 4), generator=gen)).to(dtype).to(device)
    return a.requires_grad_(requires_grad), b.requires_grad_(requires_grad)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("device, low", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_products_keep_the_input_dtype_under_autocast(name, device, low, dtype):
    ours, plain = CASES[name]
    a, b = _inputs(device, dtype)
    exact = plain(a.double(), b.double())
    with torch.autocast(device_type=device, dtype=low):
        got = ours(a, b)
        if dtype == torch.float32:  # the plain product does drop to the low dtype: what the library avoids
            assert plain(a, b).dtype == low
    assert got.dtype == dtype
    torch.testing.assert_close(got, plain(a, b))  # the product outside autocast
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got.double(), exact, rtol=tol, atol=0)
    low_err = (plain(a, b).to(low).double() - exact).abs().max()
    assert low_err > 10 * (got.double() - exact).abs().max()  # the low-precision product is visibly worse


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_under_autocast(name):
    ours, plain = CASES[name]
    a, b = _inputs("cpu", torch.float32, requires_grad=True)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = ours(a, b)
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    ra, rb = torch.autograd.grad(plain(a, b).sum(), (a, b))
    assert ga.dtype == gb.dtype == torch.float32
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


@pytest.mark.parametrize("name", sorted(CASES))
def test_meta_tensors_take_the_plain_path(name):
    ours, _ = CASES[name]
    a, b = torch.empty(2, 3, 5, device="meta"), torch.empty(2, 5, 4, device="meta")
    out = ours(a, b)
    assert out.device.type == "meta" and out.shape == (2, 3, 4) and out.dtype == torch.float32
