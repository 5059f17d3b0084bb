"""torchfair.orderings._pairsums: the sorted sweeps behind the pair-free contractions, against brute-force loops over
the pairs.

* ``LevelPairWeight``: its dense rows and its level matrix;
* ``contract_all_pairs`` (``which="one"``: pair counts that do not depend on the ordering) with and without a level
  weight, ties in relevance, padding, on both backends (torch and the compiled kernel);
* the primitives: ``_less_before`` (the wavelet sweep), ``_segments``, ``_dense_rank``, ``_take`` / ``_untake``,
  ``_prefix``, ``_rank_bits``.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchfair.orderings._pairsums import (LevelPairWeight, _accumulation_dtype, _dense_rank, _less_before, _prefix,
                                         _rank_bits, _segments, _take, _untake, contract_all_pairs)

F64 = torch.float64
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _w(ri, rj, greater, equal, less):
    return greater if ri > rj else equal if ri == rj else less


@st.composite
def _batch(draw, max_n=9):
    B, N, H = draw(st.integers(1, 3)), draw(st.integers(1, max_n)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    gen = torch.Generator().manual_seed(seed)
    levels = draw(st.sampled_from([1, 2, 3, 1000]))  # one level, graded, continuous
    rel = torch.randint(0, levels, (B, N), generator=gen).to(F64) / (7.0 if levels == 1000 else 1.0)
    mask = torch.rand(B, N, generator=gen) < draw(st.sampled_from([0.5, 0.8, 1.1]))
    right = torch.randn(B, N, H, generator=gen, dtype=F64)
    weights = draw(st.tuples(*[st.sampled_from([0.0, 1.0, 0.5, -0.3]) for _ in range(3)]))
    return rel, mask, right, weights


@SETTINGS
@given(data=_batch())
def test_level_pair_weight_rows_and_level_matrix_are_the_comparison_of_relevance(data):
    rel, mask, _, (gt, eq, lt) = data
    pw = LevelPairWeight(rel, gt, eq, lt)
    B, N = rel.shape
    start, stop = N // 3, N
    rows = pw(start, stop)
    assert rows.shape == (B, stop - start, N)
    for b in range(B):
        for i in range(start, stop):
            for j in range(N):
                assert rows[b, i - start, j].item() == _w(rel[b, i].item(), rel[b, j].item(), gt, eq, lt)
    levels = torch.unique(rel)
    L = pw.level_matrix(levels)
    for a in range(len(levels)):
        for c in range(len(levels)):
            assert L[a, c].item() == _w(levels[a].item(), levels[c].item(), gt, eq, lt)


@SETTINGS
@given(data=_batch(), weighted=st.booleans(), backend=st.sampled_from(["torch", "numba"]))
def test_contract_all_pairs_is_the_sum_over_every_other_real_item(data, weighted, backend):
    """Both backends (the torch sweep and the compiled kernel) against the loop over pairs."""
    rel, mask, right, (gt, eq, lt) = data
    pw = LevelPairWeight(rel, gt, eq, lt) if weighted else None
    out = contract_all_pairs(right, mask, pw, backend)
    assert out.dtype == right.dtype and out.shape == right.shape
    B, N, H = right.shape
    for b in range(B):
        for i in range(N):
            for h in range(H):
                want = 0.0
                if mask[b, i]:
                    for j in range(N):
                        if j != i and mask[b, j]:
                            w = 1.0 if pw is None else _w(rel[b, i].item(), rel[b, j].item(), gt, eq, lt)
                            want += w * right[b, j, h].item()
                assert out[b, i, h].item() == pytest.approx(want, abs=1e-12)


def test_contract_all_pairs_ignores_padded_slots():
    """A worked example: the padded slot's relevance (NaN) and right-hand value (a large finite number; the
    contraction multiplies, so the caller keeps ``right`` finite) reach no real item and its own row is 0."""
    rel = torch.tensor([[2.0, float("nan"), 1.0, 2.0]], dtype=F64)
    mask = torch.tensor([[True, False, True, True]])
    right = torch.tensor([[[1.0], [1e9], [10.0], [100.0]]], dtype=F64)
    for backend in ("torch", "numba"):
        out = contract_all_pairs(right, mask, LevelPairWeight(rel, greater=1.0, equal=0.5, less=0.0), backend)
        # item 0 (r = 2): item 2 less relevant (x1), item 3 equally relevant (x0.5); item 2: nothing less relevant
        assert out[0, :, 0].tolist() == [10.0 + 50.0, 0.0, 0.0, 0.5 + 10.0]
        assert contract_all_pairs(right, mask, None, backend)[0, :, 0].tolist() == [110.0, 0.0, 101.0, 11.0]


@SETTINGS
@given(ranks=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=12), min_size=1, max_size=3)
       .filter(lambda rows: len({len(r) for r in rows}) == 1),
       H=st.integers(1, 2), seed=st.integers(0, 1000))
def test_less_before_is_the_dominance_sum(ranks, H, seed):
    """``less[p] = sum_{q < p, rank_q < rank_p} V[q]``, ``equal[p] = sum_{q < p, rank_q = rank_p} V[q]``."""
    rank = torch.tensor(ranks)
    B, N = rank.shape
    V = torch.randn(B, N, H, generator=torch.Generator().manual_seed(seed), dtype=F64)
    less, equal = _less_before(rank, V, _rank_bits(rank, N))
    for b in range(B):
        for p in range(N):
            for h in range(H):
                lt = sum(V[b, q, h].item() for q in range(p) if ranks[b][q] < ranks[b][p])
                eq = sum(V[b, q, h].item() for q in range(p) if ranks[b][q] == ranks[b][p])
                assert less[b, p, h].item() == pytest.approx(lt, abs=1e-12)
                assert equal[b, p, h].item() == pytest.approx(eq, abs=1e-12)


@SETTINGS
@given(keys=st.lists(st.integers(0, 2), min_size=1, max_size=10), second=st.lists(st.integers(0, 1), min_size=10,
                                                                                    max_size=10))
def test_segments_are_the_runs_of_equal_keys(keys, second):
    N = len(keys)
    k1, k2 = torch.tensor([keys]), torch.tensor([second[:N]])
    for ks in ((k1,), (k1, k2)):
        start, end = _segments(*ks)
        rows = [[int(k[0, p]) for k in ks] for p in range(N)]
        for p in range(N):
            s = p
            while s > 0 and rows[s - 1] == rows[p]:
                s -= 1
            e = p + 1
            while e < N and rows[e] == rows[p]:
                e += 1
            assert (start[0, p].item(), end[0, p].item()) == (s, e)


def test_dense_rank_counts_distinct_smaller_values_and_puts_padding_on_top():
    rel = torch.tensor([[0.5, 2.0, 0.5, float("nan"), -1.0, 2.0]], dtype=F64)
    mask = torch.tensor([[True, True, True, False, True, True]])
    rank = _dense_rank(rel, mask)
    assert rank.dtype == torch.int64
    assert rank[0, mask[0]].tolist() == [1, 2, 1, 0, 2]
    assert rank[0, 3].item() > rank[0, mask[0]].max().item()


def test_take_untake_prefix_and_bits():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 3, generator=gen, dtype=F64)
    idx = torch.stack([torch.randperm(5, generator=gen) for _ in range(2)])
    taken = _take(x, idx)
    for b in range(2):
        for k in range(5):
            assert torch.equal(taken[b, k], x[b, idx[b, k]])
    assert torch.equal(_untake(taken, idx), x)
    C = _prefix(x)
    assert C.shape == (2, 6, 3) and (C[:, 0] == 0).all()
    torch.testing.assert_close(C[:, 4], x[:, :4].sum(1))
    assert _rank_bits(torch.tensor([[0, 5, 3]]), 3) == 3 and _rank_bits(torch.zeros(1, 4, dtype=torch.long), 4) == 1
    assert _accumulation_dtype(torch.zeros(1, dtype=torch.float32)) == F64  # float64 prefix sums on the CPU
