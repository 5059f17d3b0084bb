"""torchfair.compat.fairranktune.DETCONSTSORT / EPSILONGREEDY against FairRankTune 0.0.7's ``Rankers`` (skipped
where FairRankTune is not installed), FRT's quirks on small hand-checked cases, and bad input."""
import random

import numpy as np
import pytest
import torch

from line_count import StillLooping, lines_run  # tests/references

from torchfair.compat import fairranktune as ft
from torchfair.rerank import det_const_sort, epsilon_greedy

pd = pytest.importorskip("pandas")


def _frt():
    return pytest.importorskip("FairRankTune").Rankers


def _same(ours, theirs):
    """Identical triples: frames (values, dtypes, index), the group dicts (items, order, key and value types)."""
    (r1, d1, s1), (r2, d2, s2) = ours, theirs
    pd.testing.assert_frame_equal(r1, r2)
    pd.testing.assert_frame_equal(s1, s2)
    assert list(d1.items()) == list(d2.items())
    assert [(type(a), type(b)) for a, b in d1.items()] == [(type(a), type(b)) for a, b in d2.items()]


def _frame(values, kind):
    if kind == "object":
        return pd.DataFrame({0: pd.Series(values, dtype=object)})
    if kind == "two_columns":  # FRT re-ranks column 0 only
        return pd.DataFrame({0: values, 1: list(reversed(values))})
    return pd.DataFrame(values)


def _case(seed, duplicates=False):
    """A random FRT input: ranking and score frames, item -> group dict (possibly with items outside the ranking),
    the group labels in the dict."""
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 5, 8, 13, rng.randint(2, 40), rng.randint(40, 90)])
    G = rng.randint(2, 4)
    labels = rng.choice([[f"g{i}" for i in range(G)], list(range(G)), [10 * (G - i) for i in range(G)],
                         ["b", "a", "c", "d"][:G]])
    pool = [f"it{i}" for i in range(n + 5)] if rng.random() < 0.5 else list(range(100, 100 + n + 5))
    rng.shuffle(pool)
    items = pool[:n]
    if duplicates and n > 2:
        items[rng.randrange(n)] = items[rng.randrange(n)]
    # group sizes: sometimes very unequal, sometimes a group only outside the ranking
    weights = [rng.random() ** 2 + 0.01 for _ in range(G)]
    grp = {it: rng.choices(labels, weights)[0] for it in pool}
    for lab, it in zip(labels, pool[n:]):  # every label in the dict, not always in the ranking
        grp[it] = lab
    kind = rng.choice(["sorted", "sorted", "ties", "unsorted", "int_ties", "all_equal"])
    if kind == "sorted":
        scores = sorted((rng.random() for _ in range(n)), reverse=True)
    elif kind == "ties":
        scores = sorted((round(rng.random(), 1) for _ in range(n)), reverse=True)
    elif kind == "unsorted":
        scores = [rng.random() for _ in range(n)]
    elif kind == "int_ties":
        scores = [rng.randint(0, 3) for _ in range(n)]
    else:
        scores = [0.5] * n
    fkind = rng.choice(["plain", "plain", "object", "two_columns"])
    R = _frame(items, fkind)
    S = _frame(scores, "plain" if fkind == "object" else fkind)
    return rng, R, grp, S, labels, items


def _distribution(rng, labels):
    """A target distribution over ``labels`` (a dict, or a list when the labels are 0..G-1)."""
    G = len(labels)
    kind = rng.choice(["random", "random", "uniform", "zero", "floor", "one"])
    if kind == "uniform":
        shares = [1.0 / G] * G
    elif kind == "floor":  # shares whose products k * p land just below integers: floor(5 * (1 - 0.8)) = 0
        a = rng.choice([0.8, 0.7, 0.9, 0.71, 0.5])
        shares = [a, 1 - a] + [0.0] * (G - 2)
        rng.shuffle(shares)
    elif kind == "one":
        shares = [0.0] * G
        shares[rng.randrange(G)] = 1.0
    else:
        w = [rng.random() for _ in range(G)]
        if kind == "zero":
            w[rng.randrange(G)] = 0.0
            if sum(w) == 0:
                w[0] = 1.0
        shares = [x / sum(w) for x in w]
    if labels == list(range(G)) and rng.random() < 0.3:
        return shares  # FRT's documented list form
    return dict(zip(labels, shares))


def _frt_hangs(R, grp, dist, k):
    """FRT 0.0.7's DetConstSort loops forever when the groups with a positive share hold fewer than min(k + 1, n)
    items of the ranking."""
    items = list(R[0])
    positive = sum(1 for it in items if dist[grp[it]] > 0)
    return positive < min(k + 1, len(items))


# ================================================================================================= DetConstSort
@pytest.mark.parametrize("block", range(10))
def test_detconstsort_against_fairranktune(block):
    R_ = _frt()
    ran = hung = 0
    for seed in range(block * 40, block * 40 + 40):
        rng, R, grp, S, labels, items = _case(seed, duplicates=seed % 9 == 0)
        dist = _distribution(rng, labels)
        n = len(items)
        for k in sorted({1, n, rng.randint(1, n), rng.randint(1, n)}):
            if _frt_hangs(R, grp, dist, k):
                with pytest.raises(ValueError, match="`distribution`.*loops forever"):
                    ft.DETCONSTSORT(R, grp, S, dist, k)
                hung += 1
                continue
            ours = ft.DETCONSTSORT(R, grp, S, dist, k)
            _same(ours, R_.DETCONSTSORT(R, grp, S, dist, k))
            assert len(ours[0]) == k
            ran += 1
    assert ran > 60 and hung > 0


def test_detconstsort_plain_python_kernel(monkeypatch):
    """The plain-Python walk (TORCHFAIR_KERNELS=torch, or numba missing) gives FRT's outputs too."""
    R_ = _frt()
    monkeypatch.setenv("TORCHFAIR_KERNELS", "torch")
    for seed in range(60):
        rng, R, grp, S, labels, items = _case(seed)
        dist = _distribution(rng, labels)
        k = rng.randint(1, len(items))
        if not _frt_hangs(R, grp, dist, k):
            _same(ft.DETCONSTSORT(R, grp, S, dist, k), R_.DETCONSTSORT(R, grp, S, dist, k))


def test_detconstsort_toy_quirks():
    """Hand-checked FRT outputs: the deadline one position late and the walk to k + 1."""
    R = pd.DataFrame([0, 1, 2, 3])
    S = pd.DataFrame([4.0, 3.0, 2.0, 1.0])
    grp = {0: 0, 1: 0, 2: 1, 3: 1}
    # k = 2 with a 50/50 target: step 2 places 0 and 2 (deadline 2); step 4 places 1, which moves above 2 because
    # FRT lets 2 sit at 0-based index 2 (one past its deadline); the top 2 hold no item of group 1
    r, d, s = ft.DETCONSTSORT(R, grp, S, [0.5, 0.5], 2)
    assert list(r[0]) == [0, 1] and list(s[0]) == [4.0, 3.0] and d == {0: 0, 1: 0}
    # torchfair's kernel (the paper's 1-based deadlines, the walk stopped at k) keeps the minimum count
    assert det_const_sort(torch.tensor([4.0, 3.0, 2.0, 1.0]), torch.tensor([0, 0, 1, 1]),
                          distribution=[0.5, 0.5], k=2).ranking[:2].tolist() == [0, 2]
    # floor without tolerance: 5 * (1 - 0.8) = 0.9999999999999998 floors to 0, so group 1 waits until step 10
    R10, S10 = pd.DataFrame(list(range(10))), pd.DataFrame([10.0 - i for i in range(10)])
    g10 = {i: int(i >= 8) for i in range(10)}
    assert list(ft.DETCONSTSORT(R10, g10, S10, {0: 0.8, 1: 1 - 0.8}, 6)[0][0]) == [0, 1, 2, 3, 4, 5]
    assert list(ft.DETCONSTSORT(R10, g10, S10, {0: 0.8, 1: 0.2}, 6)[0][0]) == [0, 1, 2, 3, 4, 8]
    assert det_const_sort(torch.tensor([10.0 - i for i in range(10)]), torch.tensor([int(i >= 8) for i in range(10)]),
                          distribution=[0.8, 1 - 0.8], k=6).ranking[:6].tolist() == [0, 1, 2, 3, 8, 4]
    # the module example
    r, d, s = ft.DETCONSTSORT(pd.DataFrame(list("abcdef")), dict(zip("abcdef", "XXXYYY")),
                              pd.DataFrame([6.0, 5.0, 4.0, 3.0, 2.0, 1.0]), {"X": 0.5, "Y": 0.5}, 4)
    assert list(r[0]) == ["a", "b", "d", "c"] and list(s[0]) == [6.0, 5.0, 3.0, 4.0]


def test_detconstsort_ties_follow_group_label_order():
    """Equal scores: the groups of one step keep np.unique's label order (Python's stable sort), and the insertion
    passes only strictly lower scores."""
    R_ = _frt()
    for labels in (("a", "b"), ("b", "a")):
        R = pd.DataFrame(["x", "y", "z", "w"])
        S = pd.DataFrame([1.0, 1.0, 1.0, 1.0])
        grp = {"x": labels[1], "y": labels[0], "z": labels[1], "w": labels[0]}
        dist = {"a": 0.5, "b": 0.5}
        ours = ft.DETCONSTSORT(R, grp, S, dist, 4)
        _same(ours, R_.DETCONSTSORT(R, grp, S, dist, 4))
        # group "a" comes first at every step although "x" (group labels[1]) ranks first when labels[1] == "b"
        assert [ours[1][it] for it in ours[0][0]] == ["a", "b", "a", "b"]


def test_detconstsort_unsorted_ranking_keeps_each_groups_order():
    """FRT takes each group's items in the ranking's order, not by score."""
    R_ = _frt()
    R = pd.DataFrame(["a1", "a2", "b1", "b2"])
    S = pd.DataFrame([1.0, 9.0, 5.0, 4.0])
    grp = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}
    for k in (1, 2, 3, 4):
        _same(ft.DETCONSTSORT(R, grp, S, {"A": 0.5, "B": 0.5}, k), R_.DETCONSTSORT(R, grp, S, {"A": 0.5, "B": 0.5}, k))
    # k = 1: the walk's first step takes a1 (A's first in the ranking, score 1) and b1 (5): b1 leads, although a2
    # holds the best score (9); torchfair's det_const_sort starts from the scores' order: a2 leads
    r, d, s = ft.DETCONSTSORT(R, grp, S, {"A": 0.5, "B": 0.5}, 1)
    assert list(r[0]) == ["b1"] and list(s[0]) == [5.0]
    assert det_const_sort(torch.tensor([1.0, 9.0, 5.0, 4.0]), torch.tensor([0, 0, 1, 1]),
                          distribution=[0.5, 0.5], k=1).ranking[0].item() == 1


def _frt_lines(call, limit: int) -> int:
    """Run ``call`` counting the lines FairRankTune's own code executes; :class:`StillLooping` once they pass
    ``limit`` (a bound on the work, not on the clock)."""
    return lines_run(call, lambda f: "FairRankTune" in f, limit)


def test_detconstsort_zero_share_loops_forever_in_fairranktune():
    """Where our ValueError says FRT loops forever, FRT is still looping after 1000 times the lines it runs when it
    terminates (k = 2, n = 4, the only group with a positive share holds 2 items: FRT wants 3)."""
    frt = _frt()
    R, S, grp = pd.DataFrame([0, 1, 2, 3]), pd.DataFrame([4.0, 3.0, 2.0, 1.0]), {0: "A", 1: "B", 2: "A", 3: "B"}
    # k = 1 needs 2 items of A: FRT terminates and so do we
    done = _frt_lines(lambda: frt.DETCONSTSORT(R, grp, S, {"A": 1.0, "B": 0.0}, 1), limit=10 ** 6)
    with pytest.raises(StillLooping):
        _frt_lines(lambda: frt.DETCONSTSORT(R, grp, S, {"A": 1.0, "B": 0.0}, 2), limit=1000 * done)
    with pytest.raises(ValueError, match="`distribution`.*loops forever"):
        ft.DETCONSTSORT(R, grp, S, {"A": 1.0, "B": 0.0}, 2)
    r, d, s = ft.DETCONSTSORT(R, grp, S, {"A": 1.0, "B": 0.0}, 1)
    assert list(r[0]) == [0]
    _same((r, d, s), frt.DETCONSTSORT(R, grp, S, {"A": 1.0, "B": 0.0}, 1))


_R4, _S4 = pd.DataFrame(["a", "b", "c", "d"]), pd.DataFrame([4.0, 3.0, 2.0, 1.0])
_GRP4 = {"a": "X", "b": "Y", "c": "X", "d": "Y"}
_OK = {"X": 0.5, "Y": 0.5}
#: bad DETCONSTSORT arguments (positional, as FRT takes them) and the message they must raise
DETCONSTSORT_BAD = {
    "shares-sum-above-1": ((_R4, _GRP4, _S4, {"X": 0.5, "Y": 0.6}, 2), "`distribution`.*sum to 1"),
    "negative-share": ((_R4, _GRP4, _S4, {"X": 1.5, "Y": -0.5}, 2), "`distribution`"),
    "nan-share": ((_R4, _GRP4, _S4, {"X": float("nan"), "Y": 0.5}, 2), "`distribution`"),
    "unknown-group": ((_R4, _GRP4, _S4, {"X": 0.5, "Y": 0.4, "Z": 0.1}, 2), "`distribution` names group 'Z'"),
    "missing-share": ((_R4, _GRP4, _S4, {"X": 1.0}, 2), "`distribution` has no share for group 'Y'"),
    "list-shares-string-labels": ((_R4, _GRP4, _S4, [0.5, 0.5], 2), "`distribution`"),  # needs integer labels
    "string-shares": ((_R4, _GRP4, _S4, "XY", 2), "`distribution`"),
    "k-above-n": ((_R4, _GRP4, _S4, _OK, 5), "`k`"),
    "k-0": ((_R4, _GRP4, _S4, _OK, 0), "`k`"),
    "k-float": ((_R4, _GRP4, _S4, _OK, 2.0), "`k`"),
    "k-bool": ((_R4, _GRP4, _S4, _OK, True), "`k`"),
    "item-without-group": ((_R4, {"a": "X", "b": "Y", "c": "X"}, _S4, _OK, 2), "`item_group_dict`.*'d'"),
    "groups-not-a-dict": ((_R4, [("a", "X")], _S4, _OK, 2), "`item_group_dict`"),
    "scores-too-short": ((_R4, _GRP4, pd.DataFrame([4.0, 3.0, 2.0]), _OK, 2), "`current_ranking_scores_df`"),
    "nan-score": ((_R4, _GRP4, pd.DataFrame([4.0, float("nan"), 2.0, 1.0]), _OK, 2),
                  "`current_ranking_scores_df`.*NaN"),
    "ranking-not-a-frame": ((["a", "b", "c", "d"], _GRP4, _S4, _OK, 2), "`current_ranking_df`"),
    "ranking-named-column": ((pd.DataFrame({"r": ["a", "b", "c", "d"]}), _GRP4, _S4, _OK, 2), "`current_ranking_df`"),
    "scores-not-a-frame": ((_R4, _GRP4, [4.0, 3.0, 2.0, 1.0], _OK, 2), "`current_ranking_scores_df`"),
}


@pytest.mark.parametrize("case", list(DETCONSTSORT_BAD))
def test_detconstsort_bad_input(case):
    args, match = DETCONSTSORT_BAD[case]
    with pytest.raises(ValueError, match=match):
        ft.DETCONSTSORT(*args)


# ================================================================================================= epsilon-greedy
@pytest.mark.parametrize("block", range(6))
def test_epsilon_greedy_against_fairranktune(block):
    R_ = _frt()
    state = np.random.get_state()
    for seed in range(block * 50, block * 50 + 50):
        rng, R, grp, S, labels, items = _case(seed, duplicates=seed % 5 == 0)
        eps = rng.choice([0.0, 1.0, 0.5, rng.random(), rng.random() / 10])
        s = rng.choice([0, 1, 42, rng.randrange(2 ** 32), np.uint32(7)])
        ours = ft.EPSILONGREEDY(R, grp, S, eps, s)
        assert np.random.get_state()[1].tolist() == state[1].tolist()  # ours leaves the global state alone
        _same(ours, R_.EPSILONGREEDY(R, grp, S, eps, s))
        np.random.set_state(state)
        assert sorted(map(str, ours[0][0])) == sorted(map(str, items))


def test_epsilon_greedy_quirks():
    R_ = _frt()
    R, S = pd.DataFrame(["a", "b", "a", "c"]), pd.DataFrame([4.0, 3.0, 2.0, 1.0])
    grp = {"a": 0, "b": 1, "c": 0}
    # a repeated item: every copy gets its first copy's score (FRT's list.index), whatever the swaps
    for seed in range(20):
        ours = ft.EPSILONGREEDY(R, grp, S, 1.0, seed)
        _same(ours, R_.EPSILONGREEDY(R, grp, S, 1.0, seed))
        assert [sc for it, sc in zip(ours[0][0], ours[2][0]) if it == "a"] == [4.0, 4.0]
    # a swap when the draw equals epsilon (FRT tests rand() <= epsilon)
    R4, S4 = pd.DataFrame(["a", "b", "c", "d"]), pd.DataFrame([4.0, 3.0, 2.0, 1.0])
    g4 = {"a": 0, "b": 1, "c": 0, "d": 1}
    for seed in range(5):
        eps = np.random.RandomState(seed).random_sample()
        ours = ft.EPSILONGREEDY(R4, g4, S4, eps, seed)
        _same(ours, R_.EPSILONGREEDY(R4, g4, S4, eps, seed))
        assert ours[0][0][0] != "a"
    # epsilon = 0 and a single item: unchanged
    R1 = pd.DataFrame(["a", "b", "c"])
    r, d, s = ft.EPSILONGREEDY(R1, grp, pd.DataFrame([3.0, 2.0, 1.0]), 0.0, 3)
    assert list(r[0]) == ["a", "b", "c"] and d == {"a": 0, "b": 1, "c": 0}
    r, d, s = ft.EPSILONGREEDY(pd.DataFrame(["b"]), grp, pd.DataFrame([1.0]), 1.0, 3)
    assert list(r[0]) == ["b"] and list(s[0]) == [1.0]
    # torchfair's epsilon_greedy: the same swap process, torch's generator (not numpy's stream)
    assert epsilon_greedy(torch.tensor([3.0, 2.0, 1.0]), epsilon=0.0).ranking.tolist() == [0, 1, 2]


@pytest.mark.parametrize("epsilon, seed, name", [
    (-0.1, 0, "epsilon"), (1.5, 0, "epsilon"), (float("nan"), 0, "epsilon"), ("0.5", 0, "epsilon"),
    (True, 0, "epsilon"), (None, 0, "epsilon"), (0.5, -1, "seed"), (0.5, 2 ** 32, "seed"), (0.5, 1.5, "seed"),
    (0.5, "x", "seed"),
])
def test_epsilon_greedy_bad_epsilon_or_seed(epsilon, seed, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        ft.EPSILONGREEDY(pd.DataFrame(["a", "b"]), {"a": 0, "b": 1}, pd.DataFrame([2.0, 1.0]), epsilon, seed)


def test_epsilon_greedy_bad_input():
    R, S = pd.DataFrame(["a", "b"]), pd.DataFrame([2.0, 1.0])
    grp = {"a": 0, "b": 1}
    with pytest.raises(ValueError, match="`item_group_dict`.*'b'"):
        ft.EPSILONGREEDY(R, {"a": 0}, S, 0.5, 0)
    with pytest.raises(ValueError, match="`current_ranking_scores_df`"):
        ft.EPSILONGREEDY(R, grp, pd.DataFrame([2.0]), 0.5, 0)
    with pytest.raises(ValueError, match="`current_ranking_df`"):
        ft.EPSILONGREEDY(None, grp, S, 0.5, 0)
