"""torchfair.kernels.sorting: the radix sort against ``torch.sort`` and the compiled dense ranks against the torch
ranks.

* the radix sort gives ``torch.sort(where(mask, s, -inf), descending=True, stable=True)`` exactly: ties by index,
  ``-0.0`` = ``0.0``, infinities, NaN (first), padding, float32 and float64, lengths around the radix digits;
* the dense ranks (hash table up to 64 distinct values, radix sort beyond) are the sort-based torch ranks;
* ``HardOrderedBatch`` built on either backend is the same; each key width compiles its own entry point only.
"""
from __future__ import annotations

import pytest
import torch

import torchfair.kernels.sorting as K
from torchfair.orderings.hard import HardOrderedBatch
from torchfair.orderings import _pairsums


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("N", [1, 2, 255, 256, 257, 1000])
def test_radix_sort_is_the_stable_descending_sort(dtype, N):
    g = torch.Generator().manual_seed(N)
    B = 5
    s = torch.randn(B, N, generator=g, dtype=dtype)
    s[1] = s[1].round()  # ties
    s[2] = s[2] * 1e30
    s[3] = s[3] * 1e-40 if dtype == torch.float64 else s[3] * 1e-39  # subnormals
    specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -float("nan"), 1.0, -1.0],
                            dtype=dtype)
    s[4] = specials[torch.randint(0, len(specials), (N,), generator=g)]
    mask = torch.rand(B, N, generator=g) > 0.2
    order, positions = K.sort_desc(s, mask)
    key = torch.where(mask, s, torch.full_like(s, float("-inf")))
    assert torch.equal(order, torch.sort(key, dim=-1, descending=True, stable=True).indices)
    assert torch.equal(positions, torch.argsort(order, dim=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("relevance", ["graded", "boundary", "continuous"])
def test_compiled_dense_rank_is_the_torch_dense_rank(dtype, relevance, kernel_inputs):
    """``dense_rank`` (hash table up to 64 distinct values, radix sort beyond) against the sort-based torch
    ranks on the real items, and its level count against the distinct values of each list."""
    _, r, _, mask = kernel_inputs(3, 4, 300, dtype, relevance, "ids")
    mask[3] = False  # a list without a real item
    rank, L = K.dense_rank(r, mask)
    ref = _pairsums._dense_rank(r, mask)
    assert torch.equal(rank[mask], ref[mask])
    assert L == max(int(r[b][mask[b]].unique().numel()) for b in range(4))
    assert (rank[~mask] >= 0).all()  # padded items: a valid rank (clamped by the callers, their values are 0)


def test_hard_ordered_batch_is_the_same_on_both_backends(kernel_inputs):
    s, r, grp, mask = kernel_inputs(0, 4, 60, torch.float32, "graded", "ids")
    s = torch.where(mask, s, torch.zeros_like(s))
    for ties in ("first", "average"):
        a, b = HardOrderedBatch(s, mask, ties, "numba"), HardOrderedBatch(s, mask, ties, "torch")
        for name in ("order", "positions", "block", "block_sorted", "block_start", "block_size", "n_items"):
            assert torch.equal(torch.as_tensor(getattr(a, name)), torch.as_tensor(getattr(b, name))), name


def test_float_scores_compile_only_the_entry_point_of_their_key_width():
    """The key width picks the entry point: sorting float32 scores never compiles the 64-bit kernel (what keeps the
    first call of a float32 measure to one compile per kernel)."""
    before = len(K._sort_rows64.signatures)
    K.sort_desc(torch.tensor([[2.0, 1.0, 3.0]]), torch.ones(1, 3, dtype=torch.bool))
    assert len(K._sort_rows32.signatures) >= 1
    assert len(K._sort_rows64.signatures) == before
