"""torchfair.rerank.detconstsort: DetConstSort (Geyik et al., KDD 2019, Algorithm 3) against the plain loop of
tests/references/rerank_reference.py, worked examples, the prefix minimums it guarantees; bad input."""
import math

import pytest
import torch
from hypothesis import given, strategies as st

import rerank_reference as R
from rerank_cases import SETTINGS, _batch, _check_padding, _is_one_group, _real
from torchfair.rerank import det_const_sort


@pytest.mark.parametrize("seed", range(4))
def test_det_const_sort_prefix_minimums(seed):
    gen = torch.Generator().manual_seed(seed)
    G = 2 + seed % 3
    s, g = torch.randn(4, 30, generator=gen), torch.randint(0, G, (4, 30), generator=gen)
    dist = torch.rand(G, generator=gen)
    dist = (dist / dist.sum()).tolist()
    out = det_const_sort(s, g, distribution=dist, num_groups=G)
    assert out.met.all()
    for b in range(4):
        r = out.ranking[b].tolist()
        assert sorted(r) == list(range(30))
        for i in range(1, 31):
            for c in range(G):
                have = sum(int(g[b, j]) == c for j in r[:i])
                assert have >= min(math.floor(i * dist[c] + 1e-9), int((g[b] == c).sum()))


def test_det_const_sort_identity_when_the_start_order_meets_every_prefix_minimum():
    """A ranking whose every prefix k already holds floor(p_c k) items of each group c is returned unchanged."""
    gen = torch.Generator().manual_seed(7)
    seen = 0
    for _ in range(300):
        N = int(torch.randint(2, 15, (), generator=gen))
        s = torch.randn(N, generator=gen)
        q = float(torch.rand((), generator=gen)) * 0.6 + 0.2
        order = torch.argsort(s, descending=True, stable=True)
        seq = []
        for k in range(1, N + 1):  # a group sequence that meets the minimums, free choices at random
            need = [c for c in range(2) if seq.count(c) < math.floor((q, 1 - q)[c] * k)]
            seq.append(need[0] if need else int(torch.randint(0, 2, (), generator=gen)))
        if len(set(seq)) < 2:
            continue
        g = torch.empty(N, dtype=torch.long)
        g[order] = torch.tensor(seq)
        out = det_const_sort(s, g, distribution=torch.tensor([q, 1 - q]), num_groups=2)
        assert out.ranking.tolist() == order.tolist() and bool(out.met)
        seen += 1
    assert seen > 200


def test_det_const_sort_worked_examples():
    s = torch.tensor([6., 5., 4., 3., 2., 1.])
    out = det_const_sort(s, torch.tensor([0, 0, 0, 1, 1, 1]), distribution=[0.5, 0.5])
    assert out.ranking.tolist() == [0, 3, 1, 4, 2, 5] and bool(out.met)
    # p = (2/3, 1/3): k'=1: nothing; k'=2: A0 (deadline 2); k'=3: A1 (3), B (3); B's score is below A1's, and
    # A1 may not move below its deadline 3 -> A0 A1 B; k'=4: -; k'=5: A2 (5); k'=6: A3 (6), B4 (6)...
    out = det_const_sort(torch.tensor([9., 8., 7., 6., 5., 4.]), torch.tensor([0, 0, 1, 0, 0, 1]),
                         distribution=[2 / 3, 1 / 3])
    assert out.ranking.tolist() == R.det_const_sort([9., 8., 7., 6., 5., 4.], [0, 0, 1, 0, 0, 1], [2 / 3, 1 / 3], 6)
    # the 1-based deadline: a B item appended at step 1 (p_B = 1) passes the better A items appended later only
    # as far as their deadlines allow
    out = det_const_sort(torch.tensor([3., 2., 1.]), torch.tensor([0, 0, 1]), distribution={1: 0.5, 0: 0.5})
    assert out.ranking.tolist() == R.det_const_sort([3., 2., 1.], [0, 0, 1], [0.5, 0.5], 3) == [0, 2, 1]


@pytest.mark.parametrize("seed", range(10))
def test_det_const_sort_is_algorithm_3(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    G = 2 + seed % 3
    B, N = 5, 16
    s, g, mask = _batch(gen, B, N, G, ties=seed % 2 == 0, unknown=seed % 3 == 0)
    g[0, :] = torch.arange(N) % G  # every group present somewhere
    # continuous shares, or small integer weights (several groups' minimums then grow at the same step)
    raw = torch.rand(G, generator=gen).double() if seed % 2 else torch.randint(1, 4, (G,), generator=gen).double()
    if seed % 4 == 1:
        raw[-1] = 0.0  # a group with share 0
    dist = (raw / raw.sum()).tolist()
    k = (None, 10, 16, 3, 1)[seed % 5]
    form = (dist, {i: x for i, x in enumerate(dist)}, torch.tensor(dist))[seed % 3]
    out = det_const_sort(s, g, distribution=form, k=k, mask=mask, num_groups=G)
    _check_padding(out, mask)
    K = N if k is None else k
    for b in range(B):
        idx, sb, gb = _real(b, s, g, mask)
        ref = [idx[i] for i in R.det_const_sort(sb, gb, dist, K)]
        if out.one_group[b]:  # unchanged; met: whether the start order holds the minimums
            assert len({x for x in gb if x >= 0}) < 2
            assert out.ranking[b, :len(idx)].tolist() == [idx[i] for i in R.start_order(sb)]
            assert bool(out.met[b]) == R.prefix_minimums_hold(R.start_order(sb), gb, dist, K)
            continue
        assert out.ranking[b, :len(idx)].tolist() == ref, b
        assert R.prefix_minimums_hold([idx.index(i) for i in ref], gb, dist, K)
        assert bool(out.met[b])


def test_det_const_sort_default_distribution_is_each_lists_share():
    gen = torch.Generator().manual_seed(7)
    s, g, mask = _batch(gen, 4, 12, 3)
    out = det_const_sort(s, g, mask=mask, num_groups=3)
    for b in range(4):
        idx, sb, gb = _real(b, s, g, mask)
        counts = torch.bincount(g[b][mask[b] & (g[b] >= 0)], minlength=3).double()
        dist = (counts / counts.sum().clamp(min=1)).tolist()  # the list's own shares (issue 28: not the batch's)
        if not out.one_group[b]:
            assert out.ranking[b, :len(idx)].tolist() == [idx[i] for i in R.det_const_sort(sb, gb, dist, 12)]


@SETTINGS
@given(data=st.data())
def test_det_const_sort_prefix_minimums_always_hold(data):
    G = data.draw(st.integers(2, 4))
    N = data.draw(st.integers(1, 14))
    B = data.draw(st.integers(1, 3))
    s = torch.tensor(data.draw(st.lists(st.lists(st.floats(-3, 3, width=32), min_size=N, max_size=N),
                                        min_size=B, max_size=B))).double()
    g = torch.tensor(data.draw(st.lists(st.lists(st.integers(-1, G - 1), min_size=N, max_size=N),
                                        min_size=B, max_size=B)))
    w = data.draw(st.lists(st.integers(0, 5), min_size=G, max_size=G).filter(lambda x: sum(x) > 0))
    dist = [x / sum(w) for x in w]
    k = data.draw(st.integers(1, N))
    out = det_const_sort(s, g, distribution=dist, k=k, num_groups=G)
    for b in range(B):
        holds = R.prefix_minimums_hold(out.ranking[b].tolist(), g[b].tolist(), dist, k)
        assert bool(out.met[b]) == holds
        if not _is_one_group(g[b].tolist()):  # the algorithm guarantees them for every list it re-ranks
            assert holds
            assert out.ranking[b].tolist() == R.det_const_sort(s[b].tolist(), g[b].tolist(), dist, k)


def test_det_const_sort_groups_growing_at_the_same_step():
    # p = (0.4, 0.2, 0.4), k = 3: at k' = 3 groups 0 and 2 both grow; group 0's next item (index 3) ranks below
    # group 2's next item (index 1), so 1 goes first; the walk stops at 3 items: 0, 1, 3, then the rest by score
    s, g = torch.arange(5, 0, -1).double(), [1, 2, 2, 0, 2]
    want = R.det_const_sort(s.tolist(), g, [0.4, 0.2, 0.4], 3)
    assert want == [0, 1, 3, 2, 4]
    assert det_const_sort(s, torch.tensor(g), distribution=[0.4, 0.2, 0.4], k=3).ranking.tolist() == want


def test_det_const_sort_shares_are_floored_with_a_tolerance():
    # 1 - 0.9 = 0.09999999999999998 in floats, and 10 times it is just below 1: the documented tolerance reads the
    # share as 0.1, so the prefix of 10 must hold the group-1 item (its deadline is 10: the group-0 item appended
    # at k' = 12 cannot push it down to position 11)
    s, g, dist = [float(x) for x in range(12, 0, -1)], [0] * 11 + [1], [0.9, 1 - 0.9]
    want = R.det_const_sort(s, g, dist, 12)
    assert want == [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 9, 10]
    assert want != R.det_const_sort(s, g, dist, 12, floor_eps=0.0)  # without the tolerance: 9 then 11
    out = det_const_sort(torch.tensor(s), torch.tensor(g), distribution=dist)
    assert out.ranking.tolist() == want and bool(out.met)


def test_det_const_sort_one_group_with_unknown_items():
    # one known group: returned unchanged; its minimums (p_0 = 1: every prefix all group 0) fail at the unknown item
    out = det_const_sort(torch.tensor([3., 2., 1.]), torch.tensor([0, -1, 0]), distribution=[1.0, 0.0])
    assert bool(out.one_group) and out.ranking.tolist() == [0, 1, 2] and not bool(out.met)


_S, _G = torch.randn(5), torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("call, arg", [
    (lambda: det_const_sort(_S, torch.rand(5, 2)), "groups"),
    (lambda: det_const_sort(_S, _G, distribution=[0.5, 0.6]), "distribution"),
    (lambda: det_const_sort(_S, _G, distribution=[0.5]), "distribution"),
    (lambda: det_const_sort(_S, _G, distribution={5: 1.0}), "distribution"),
    (lambda: det_const_sort(_S, _G, distribution={0: 1.2, 1: -0.2}), "distribution"),
    (lambda: det_const_sort(_S, _G, distribution=[0.5, 0.3, 0.2]), "distribution"),
    (lambda: det_const_sort(_S, _G, distribution="half"), "distribution"),
    (lambda: det_const_sort(_S, None), "groups"),  # issue 28: was AttributeError
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()
