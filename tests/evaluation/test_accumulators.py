"""torchfair.evaluation.accumulators: PositionShares against a plain loop over the lists (stable sort, one-hot
counting), its top order against the full stable sort, PooledMPC against the public matched_pair_calibration on
one batch (adjacent pairs, every gap, cluster-robust interval), through the engine (evaluate_lists, streamed), and
merge_state of two halves against one pass; states are summed (DDP)."""
import math

import numpy as np
import pytest
import torch
from torchmetrics.utilities.data import dim_zero_sum

from torchfair.evaluation import evaluate_lists
from torchfair.evaluation.accumulators import PooledMPC, PositionShares, _top_order
from torchfair.evaluation.table import StreamingEvaluation, evaluate_stream, pad_lists
from torchfair.metrics import matched_pair_calibration


def _lists(seed=0, L=120, G=3, max_n=300, soft=False, inf=True):
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(L):
        n = int(torch.randint(0, max_n, (1,), generator=g))
        s = torch.randn(n, generator=g)
        if b % 3 == 0:
            s = torch.round(s * 2) / 2  # ties
        if inf and b % 7 == 0 and n > 3:
            s[:2] = float("-inf")
        grp = torch.randint(0, G, (n,), generator=g)
        if soft:
            grp = torch.softmax(torch.randn(n, G, generator=g), -1)
        out.append({"list_id": b, "scores": s, "relevance": torch.randint(0, 5, (n,), generator=g).float(),
                    "groups": grp})
    return out


def _shares_loop(lists, G, top):
    """Plain reference: every list sorted (stable, descending), the group of the item at each position counted."""
    tot, cnt = np.zeros((top, G)), np.zeros(top)
    for li in lists:
        order = torch.argsort(li["scores"], descending=True, stable=True)[:top].tolist()
        for k, i in enumerate(order):
            cnt[k] += 1
            if li["groups"].is_floating_point():
                tot[k] += li["groups"][i].double().numpy()
            elif 0 <= int(li["groups"][i]) < G:
                tot[k, int(li["groups"][i])] += 1
    return tot / np.maximum(cnt, 1)[:, None]


def _mpc_reference(lists, G, group):
    """The public function on all lists in one float64 batch (what ``torchfair evaluate`` reported eagerly)."""
    lists = [li for li in lists if li["scores"].numel()]
    s, r, g, m = pad_lists([(li["scores"], li["relevance"], li["groups"]) for li in lists], False, G)
    return matched_pair_calibration(s.double(), r.double(), g, group=group, adjacent=True, quantile=1.0, mask=m,
                                    num_groups=G, ci="cluster")


def test_position_shares_hand_example():
    sh = PositionShares(num_groups=2, top=3)
    sh.update(torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, 0.0]]), groups=torch.tensor([[1, 0, 0], [1, 0, -1]]),
              mask=torch.tensor([[True, True, True], [True, True, False]]))
    # list 1: groups by position 1, 0, 0; list 2: 0, 1 (two items)
    want = torch.tensor([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    assert torch.equal(sh.compute(), want)
    assert sh.count.tolist() == [2.0, 2.0, 1.0]


@pytest.mark.parametrize("soft", [False, True])
def test_position_shares_through_the_engine_equal_a_plain_loop(soft):
    G, top = 3, 40
    lists = _lists(1, soft=soft)
    sh = PositionShares(G, top)
    evaluate_lists(lists, ["ndcg@10"], num_groups=G, bootstrap=0, validate_args=False, accumulators=[sh])
    want = _shares_loop(lists, G, top)
    got = sh.compute().numpy()
    if soft:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:
        assert np.array_equal(got, want)  # sums of 0/1: exact whatever the batching


def test_unknown_group_ids_count_the_position_but_no_group():
    sh = PositionShares(2, top=2)
    sh.update(torch.tensor([[2.0, 1.0]]), groups=torch.tensor([[-1, 1]]))
    assert sh.compute().tolist() == [[0.0, 0.0], [0.0, 1.0]]


def test_top_order_is_the_stable_sorts_prefix():
    """The first `top` items without a full sort of a long row: the stable descending sort's prefix over the real
    items, ties, infinities, NaN and arbitrary masks included."""
    g = torch.Generator().manual_seed(0)
    for trial in range(150):
        N, k, B = int(torch.randint(1, 1500, (1,), generator=g)), int(torch.randint(1, 60, (1,), generator=g)), 3
        s = torch.randn(B, N, generator=g)
        if trial % 3 == 0:
            s = torch.round(s * 2) / 2
        if trial % 7 == 0:
            s[0, torch.randint(0, N, (3,), generator=g)] = float("-inf")
        if trial % 11 == 0:
            s[1, torch.randint(0, N, (2,), generator=g)] = float("inf")
        if trial % 13 == 0:
            s = torch.zeros(B, N)
        if trial % 17 == 0:
            s[2, 0] = float("nan")
        m = torch.arange(N)[None] < torch.randint(0, N + 1, (B,), generator=g)[:, None]
        if trial % 5 == 0:
            m = torch.rand(B, N, generator=g) < 0.7
        order, valid = _top_order(s, m, k)
        for b in range(B):
            idx = torch.nonzero(m[b]).squeeze(1)
            want = idx[torch.argsort(s[b][idx], descending=True, stable=True)[:k]]
            assert torch.equal(order[b][valid[b]], want), (trial, b)
            assert int(valid[b].sum()) == min(k, int(m[b].sum()))


def test_pooled_mpc_hand_example():
    # one list ordered 0 (A, y=0), 1 (B, y=1), 2 (A, y=0), 3 (B, y=3): pairs (1 below 0) and (3 below 2)
    mpc = PooledMPC(num_groups=2, group=1)
    mpc.update(torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0.0, 1.0, 0.0, 3.0]]),
               torch.tensor([[0, 1, 0, 1]]))
    r = mpc.compute()
    assert r["defined"] and r["n_pairs"] == 2 and r["estimate"] == 2.0  # (1 + 3) / 2
    # clusters are single pairs here: V = sum (d - theta)^2 / 2^2 = (1 + 1) / 4
    se = math.sqrt(0.5)
    assert math.isclose(r["ci_high"] - r["estimate"], 1.959963984540054 * se, rel_tol=1e-12)


def test_pooled_mpc_equals_matched_pair_calibration():
    G = 3
    lists = _lists(2, L=80, G=G, inf=False)  # the reference keeps no pair when a gap is NaN (-inf - -inf)
    for group in (0, 1, 2):
        mpc = PooledMPC(G, group)
        evaluate_lists(lists, ["ndcg@10"], num_groups=G, bootstrap=0, validate_args=False, accumulators=[mpc])
        got, want = mpc.compute(), _mpc_reference(lists, G, group)
        assert got["defined"] and got["n_pairs"] == int(want.n_pairs) > 100
        for key, ref in (("estimate", want.estimate), ("ci_low", want.ci_low), ("ci_high", want.ci_high)):
            assert math.isclose(got[key], float(ref), rel_tol=1e-9, abs_tol=1e-12), (group, key)


def test_streamed_accumulators_equal_one_pass():
    G, top = 3, 30
    lists = _lists(3, L=90, G=G)
    one = [PositionShares(G, top), PooledMPC(G, 1)]
    evaluate_lists(lists, ["dips"], num_groups=G, bootstrap=0, validate_args=False, accumulators=one)
    many = [PositionShares(G, top), PooledMPC(G, 1)]
    lengths = [li["scores"].shape[0] for li in lists]
    evaluate_stream((lists[a:a + 13] for a in range(0, len(lists), 13)), ["dips"], num_groups=G, bootstrap=0,
                    lengths=lengths, validate_args=False, accumulators=many)
    assert torch.equal(one[0].compute(), many[0].compute())
    a, b = one[1].compute(), many[1].compute()
    assert a["n_pairs"] == b["n_pairs"] and all(math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-12)
                                                for k in ("estimate", "ci_low", "ci_high"))


def test_merge_state_of_two_halves_equals_one_pass():
    G, top = 3, 25
    lists = _lists(4, L=60, G=G)
    whole = [PositionShares(G, top), PooledMPC(G, 2)]
    halves = [[PositionShares(G, top), PooledMPC(G, 2)] for _ in range(2)]
    evaluate_lists(lists, ["ndcg"], num_groups=G, bootstrap=0, validate_args=False, accumulators=whole)
    stream = StreamingEvaluation(["ndcg"], num_groups=G, bootstrap=0, validate_args=False, accumulators=halves[0])
    stream.add(lists[:31])
    second = StreamingEvaluation(["ndcg"], num_groups=G, bootstrap=0, validate_args=False, accumulators=halves[1])
    second.add(lists[31:])
    for mine, other in zip(halves[0], halves[1]):
        mine.merge_state(other)
    assert torch.equal(halves[0][0].compute(), whole[0].compute())
    a, b = halves[0][1].compute(), whole[1].compute()
    assert a["n_pairs"] == b["n_pairs"] and math.isclose(a["estimate"], b["estimate"], rel_tol=1e-12)
    assert math.isclose(a["ci_high"], b["ci_high"], rel_tol=1e-9)
    for m in whole:  # what DDP's sync does with them
        assert m._reductions and all(fx is dim_zero_sum for fx in m._reductions.values())


def test_pooled_mpc_without_pairs_or_with_soft_membership_is_undefined():
    mpc = PooledMPC(2, 1)
    mpc.update(torch.tensor([[2.0, 1.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0, 0]]))
    r = mpc.compute()
    assert not r["defined"] and r["n_pairs"] == 0 and r["estimate"] == 0.0
    mpc.update(torch.tensor([[2.0, 1.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]))
    assert mpc.compute() == {"defined": False, "why": "MPC needs hard groups"}
    nan = PooledMPC(2, 1)  # a NaN score: its pairs are left out, the others kept
    nan.update(torch.tensor([[3.0, 2.0, float("nan")], [3.0, 2.0, 1.0]]), torch.ones(2, 3),
               torch.tensor([[0, 1, 1]] * 2))
    assert nan.compute()["n_pairs"] == 2


@pytest.mark.parametrize("cls, kw, name", [
    ("PositionShares", {"num_groups": 0}, "num_groups"), ("PositionShares", {"num_groups": 2, "top": 0}, "top"),
    ("PooledMPC", {"num_groups": 1}, "num_groups"), ("PooledMPC", {"num_groups": 2, "group": 2}, "group"),
    ("PooledMPC", {"num_groups": 2, "level": 1.5}, "level"),
])
def test_a_bad_constructor_argument_names_itself(cls, kw, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        {"PositionShares": PositionShares, "PooledMPC": PooledMPC}[cls](**kw)


def test_bad_arguments_name_the_argument():
    s = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="`groups`"):
        PositionShares(2).update(s)
    with pytest.raises(ValueError, match="`relevance`"):
        PooledMPC(2).update(s, groups=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="`mask`"):
        PositionShares(2).update(s, groups=torch.zeros(2, 3, dtype=torch.long), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="`scores`"):
        PositionShares(2).update(torch.zeros(2, 3, dtype=torch.long), groups=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="`groups`"):
        PositionShares(2).update(s, groups=torch.rand(2, 3, 3))


def test_group_ids_out_of_range_are_named_errors():
    """An integer group id outside [-1, num_groups) of a real item is a ValueError naming `groups` (it used to be
    read as an unknown group); -1 (unknown) and padded items' ids are accepted."""
    s = torch.randn(2, 3)
    bad = torch.tensor([[0, 1, 5], [0, 0, 1]])
    with pytest.raises(ValueError, match="`groups` ids must be in"):
        PositionShares(2).update(s, groups=bad)
    with pytest.raises(ValueError, match="`groups` ids must be in"):
        PooledMPC(2).update(s, torch.rand(2, 3), bad)
    ok = PositionShares(2, top=3)
    ok.update(s, groups=torch.tensor([[0, 1, -1], [0, 0, 7]]), mask=torch.tensor([[1, 1, 1], [1, 1, 0]]).bool())
    assert torch.isfinite(ok.compute()).all()
