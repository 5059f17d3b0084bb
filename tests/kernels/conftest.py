"""Shared inputs of the kernel tests: random batches with score ties, graded / continuous relevance (and exactly
``DENSE_LEVELS`` distinct values, the boundary of the sweeps' two trees), padding anywhere and group ids or soft
membership."""
from __future__ import annotations

import pytest
import torch

from torchfair.kernels.pairs import DENSE_LEVELS


def _inputs(seed, B, N, dtype, relevance, groups, G=3):
    g = torch.Generator().manual_seed(seed)
    s = (torch.randn(B, N, generator=g, dtype=dtype) * 3).round()  # many score ties
    if relevance == "graded":
        r = torch.randint(0, 5, (B, N), generator=g).to(dtype)
    elif relevance == "boundary":  # exactly DENSE_LEVELS distinct values in row 0, one more in row 1
        r = torch.stack([torch.arange(N) % (DENSE_LEVELS + b) for b in range(B)]).to(dtype)
        r = r[:, torch.randperm(N, generator=g)]
    else:
        r = torch.rand(B, N, generator=g, dtype=dtype)
        r[:, ::7] = r[:, :1]  # some relevance ties too
    mask = torch.rand(B, N, generator=g) > 0.25
    mask[:, 0] = True
    mask[0] = True  # one full list
    if groups == "ids":
        grp = torch.randint(-1, G, (B, N), generator=g)  # -1: unknown group
    else:
        grp = torch.rand(B, N, G, generator=g, dtype=dtype)
        grp = grp / grp.sum(-1, keepdim=True) * torch.rand(B, N, 1, generator=g, dtype=dtype)  # rows sum <= 1
    s = torch.where(mask, s, torch.full_like(s, float("nan")))  # padded slots may hold anything
    return s, r, grp, mask


@pytest.fixture
def kernel_inputs():
    """:func:`_inputs`: ``(seed, B, N, dtype, relevance, groups, G=3) -> (scores, relevance, groups, mask)``."""
    return _inputs
