"""Matrix products that ``torch.autocast`` leaves alone.

Autocast runs matrix products in float16 / bfloat16.  Inside the library every quantity is already in its working
precision (float32 for half-precision inputs, float64 for float64, see :mod:`torchfair._validation`), and a
fairness measure summed over thousands of pairs in half precision loses the very differences it measures (or
overflows), so the library's own products run with autocast disabled: under autocast the measures and losses
return float32 values, as they do for half-precision inputs.  Used for every ``bmm`` / ``einsum`` / ``matmul``
in torchfair.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

__all__ = ["bmm", "einsum", "matmul"]


def _autocast_on(kind: str) -> bool:
    """Whether autocast is enabled for the device type ``kind`` (``torch.is_autocast_enabled(kind)``; older torch:
    the CPU / CUDA flags)."""
    try:
        return torch.is_autocast_enabled(kind)
    except TypeError:  # torch < 2.4: no device argument
        return torch.is_autocast_cpu_enabled() if kind == "cpu" else torch.is_autocast_enabled()


def _no_autocast(t: Tensor):
    kind = t.device.type
    if not torch.amp.is_autocast_available(kind) or not _autocast_on(kind):  # e.g. the meta device, or autocast
        return contextlib.nullcontext()  # is off: nothing to disable (entering the context costs more than the op)
    return torch.autocast(device_type=kind, enabled=False)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm`` in the inputs' own dtype, also under autocast."""
    with _no_autocast(a):
        return torch.bmm(a, b)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``torch.matmul`` in the inputs' own dtype, also under autocast."""
    with _no_autocast(a):
        return torch.matmul(a, b)


def einsum(equation: str, *operands: Tensor) -> Tensor:
    """``torch.einsum`` in the operands' own dtype, also under autocast."""
    with _no_autocast(operands[0]):
        return torch.einsum(equation, *operands)
