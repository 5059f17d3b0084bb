"""torchfair.orderings.base: the ordering interface every measure is written against.

* ``OrderedBatch.contract`` (the generic row-block path) on an ordering written in this file (pairwise sigmoids,
  differentiable): values against the sum over pairs written as a loop, for ``above`` / ``joint`` / ``one``, any
  pair weight, any block size; ``joint`` through ``joint_factor`` equals ``joint`` formed pair by pair; with
  gradients, the checkpointed row blocks give the gradients of the dense strategy;
* ``row_blocks`` / ``dense_pairs`` budgets, ``work_scores`` checks and masking, ``ranked_exposure`` against the
  browsing loops of tests/references/reference.py.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from torchfair.browsing import RBP, Cascade, TopK
from torchfair.orderings import base
from torchfair.orderings.base import (OrderedBatch, Ordering, PairBlock, dense_pairs, ranked_exposure, row_blocks,
                                      work_scores)

F64 = torch.float64
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class _Sigmoid(OrderedBatch):
    """A test ordering: ``above[i, j] = sigmoid((s_j - s_i) / tau)`` for real ``i != j``, and
    ``joint[i, j] = g_j above[i, j]`` with ``g = sigmoid(s)``, given pair by pair or (``factor=True``) through
    :meth:`joint_factor`.  Differentiable in the scores."""

    def __init__(self, scores, mask, tau=0.7, factor=False):
        self.scores, self.mask, self.tau, self.factor = scores, mask, tau, factor
        self.blocks = []  # the row ranges asked for

    def _above(self, start, stop):
        s, m = self.scores, self.mask
        x = torch.sigmoid((s[:, None, :] - s[:, start:stop, None]) / self.tau)
        keep = m[:, start:stop, None] & m[:, None, :]
        rows = torch.arange(start, stop)[None, :, None] != torch.arange(s.shape[1])[None, None, :]
        return torch.where(keep & rows, x, torch.zeros_like(x))

    def expected_positions(self):
        return self._above(0, self.mask.shape[1]).sum(-1)

    def exposure(self, browsing, relevance=None):
        raise NotImplementedError

    def pair_context(self, browsing, relevance):
        return browsing

    def joint_factor(self, context):
        return torch.sigmoid(self.scores) if (self.factor and context is not None) else None

    def pair_block(self, context, start, stop):
        self.blocks.append((start, stop))
        above = self._above(start, stop)
        joint = None if context is None else torch.sigmoid(self.scores)[:, None, :] * above
        return PairBlock(above=above, joint=joint)

    def position_matrix(self):
        raise NotImplementedError


def _loop(ob, right, which, weight):
    """``out[b, i, h] = sum_{j != i real} w[b, i, j] X[b, i, j] right[b, j, h]``, 0 on padded rows."""
    B, N, H = right.shape
    s, m = ob.scores.detach(), ob.mask
    out = torch.zeros(B, N, H, dtype=F64)
    for b in range(B):
        for i in range(N):
            if not m[b, i]:
                continue
            for j in range(N):
                if j == i or not m[b, j]:
                    continue
                a = torch.sigmoid((s[b, j] - s[b, i]) / ob.tau).item()
                x = {"above": a, "joint": torch.sigmoid(s[b, j]).item() * a, "one": 1.0}[which]
                w = 1.0 if weight is None else weight[b, i, j].item()
                out[b, i] += w * x * right[b, j]
    return out


@SETTINGS
@given(seed=st.integers(0, 2 ** 31 - 1), B=st.integers(1, 3), N=st.integers(1, 7), H=st.integers(1, 3),
       which=st.sampled_from(["above", "joint", "one"]), weighted=st.booleans(), factor=st.booleans(),
       block=st.sampled_from([None, 1, 7, 40]))
def test_contract_is_the_sum_over_pairs(seed, B, N, H, which, weighted, factor, block):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=gen, dtype=F64)
    mask = torch.rand(B, N, generator=gen) < 0.8
    right = torch.randn(B, N, H, generator=gen, dtype=F64)
    W = torch.rand(B, N, N, generator=gen, dtype=F64)
    weight = (lambda start, stop: W[:, start:stop]) if weighted else None
    ob = _Sigmoid(s, mask, factor=factor)
    got = ob.contract(right, which=which, pair_weight=weight, browsing=RBP(0.5) if which == "joint" else None,
                      block_elements=block)
    torch.testing.assert_close(got, _loop(ob, right, which, W if weighted else None))
    if which == "one" and not weighted:
        assert ob.blocks == []  # pair counts never ask the ordering for pairs
    elif which != "one":
        covered = sorted(ob.blocks)
        assert covered[0][0] == 0 and covered[-1][1] == N and all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
        if block is not None:
            assert all(B * (stop - start) * N <= max(block, B * N) for start, stop in covered)


@pytest.mark.parametrize("which", ["above", "joint"])
def test_checkpointed_row_blocks_give_the_dense_gradients(which):
    gen = torch.Generator().manual_seed(0)
    B, N, H = 3, 9, 2
    s0 = torch.randn(B, N, generator=gen, dtype=F64)
    r0 = torch.randn(B, N, H, generator=gen, dtype=F64)
    mask = torch.rand(B, N, generator=gen) < 0.8
    res = []
    for block in (None, 1, 2 * N):  # dense (all pairs, autograd keeps them), one-row blocks, wider blocks
        s, right = s0.clone().requires_grad_(), r0.clone().requires_grad_()
        ob = _Sigmoid(s, mask, factor=which == "joint")
        out = ob.contract(right, which=which, browsing=RBP(0.8) if which == "joint" else None, block_elements=block)
        gs, gr = torch.autograd.grad((out * torch.linspace(-1, 1, H, dtype=F64)).sum(), (s, right))
        res.append((out.detach(), gs, gr, len(ob.blocks)))
    assert res[0][3] == 1 and res[1][3] > N  # one dense block; row blocks recomputed in backward
    for other in res[1:]:
        for a, b in zip(res[0][:3], other[:3]):
            torch.testing.assert_close(a, b)
    assert (res[0][1][~mask] == 0).all()


def test_contract_checks_which_and_browsing():
    ob = _Sigmoid(torch.zeros(1, 3, dtype=F64), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="`which`"):
        ob.contract(torch.ones(1, 3, 1, dtype=F64), which="below")
    with pytest.raises(ValueError, match="`browsing` is required"):
        ob.contract(torch.ones(1, 3, 1, dtype=F64), which="joint")
    assert ob.shape == (1, 3) and ob.dtype == F64
    with pytest.raises(TypeError):
        Ordering()  # abstract


@SETTINGS
@given(B=st.integers(1, 5), N=st.integers(1, 50), budget=st.one_of(st.none(), st.integers(1, 3000)))
def test_row_blocks_cover_the_rows_within_the_budget(B, N, budget):
    blocks = list(row_blocks(B, N, budget))
    limit = base.PAIR_BLOCK_ELEMENTS if budget is None else budget
    assert blocks[0][0] == 0 and blocks[-1][1] == N
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    for start, stop in blocks:
        assert stop > start and (B * (stop - start) * N <= limit or stop - start == 1)
    # the widest blocks that fit: one row more would exceed the budget (unless the list is exhausted)
    rows = blocks[0][1] - blocks[0][0]
    assert rows == N or B * (rows + 1) * N > limit


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_row_blocks_reject_a_bad_budget(bad):
    with pytest.raises(ValueError, match="`budget`"):
        list(row_blocks(2, 3, bad))


def test_dense_pairs_reads_the_module_default_at_call_time(monkeypatch):
    assert dense_pairs(2, 10) and dense_pairs(2, 10, limit=200) and not dense_pairs(2, 10, limit=199)
    monkeypatch.setattr(base, "DENSE_PAIR_ELEMENTS", 199)
    assert not dense_pairs(2, 10) and dense_pairs(1, 10)


def test_work_scores_blanks_padding_promotes_and_checks():
    s = torch.tensor([[1.0, float("nan"), -2.0], [float("inf"), 3.0, 0.5]], dtype=torch.float16, requires_grad=True)
    m = torch.tensor([[True, False, True], [False, True, True]])
    w, mm = work_scores(s, m)
    assert w.dtype == torch.float32 and mm is m
    assert w.tolist() == [[1.0, 0.0, -2.0], [0.0, 3.0, 0.5]]
    (g,) = torch.autograd.grad(w.sum(), s)
    assert g.tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]  # padded slots: exactly zero gradient
    assert work_scores(s.detach().double(), m)[0].dtype == F64
    for bad_s, bad_m, name in ((torch.zeros(3), torch.ones(3, dtype=torch.bool), "scores"),
                               (torch.zeros(2, 3, dtype=torch.long), m, "scores"),
                               (torch.zeros(2, 3), m.long(), "mask"),
                               (torch.zeros(2, 3), m[:, :2], "mask"),
                               (torch.zeros(2, 0), torch.ones(2, 0, dtype=torch.bool), "scores")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            work_scores(bad_s, bad_m)


def test_ranked_exposure_weighs_the_positions_of_each_list():
    mask = torch.tensor([[True, True, False, True], [False, True, False, False], [False] * 4])
    F = TopK(RBP(0.5), 2)
    e = ranked_exposure(F, None, mask, F64, rank_relevance=None)
    refF = ref.ref_topk(ref.ref_rbp(0.5), 2)
    for b, n in enumerate(mask.sum(-1).tolist()):  # positions 0 .. n_b - 1 are weighted, the rest 0
        assert e[b].tolist() == [refF.position(k) if k < n else 0.0 for k in range(4)]
    # a cascade reads the relevance in ranked order (here: reversed), padded entries whatever they hold
    rel = torch.tensor([[2.0, 0.0, float("nan"), 1.0], [5.0, 1.0, 7.0, 0.0], [0.0] * 4], dtype=F64)
    C = Cascade(0.9, max_grade=2.0)
    got = ranked_exposure(C, rel, mask, F64, rank_relevance=lambda r: r.flip(-1))
    refC = ref.ref_cascade(0.9, 2.0)
    for b, n in enumerate(mask.sum(-1).tolist()):
        ranked = torch.where(mask[b], rel[b], torch.zeros(())).flip(-1)[:n].tolist()
        want = refC.exposure(ranked) + [0.0] * (4 - n)
        assert got[b].tolist() == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="`relevance` is required"):
        ranked_exposure(C, None, mask, F64, rank_relevance=lambda r: r)
