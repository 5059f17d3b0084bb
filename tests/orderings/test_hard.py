"""torchfair.orderings.hard: the exact ordering (sorting) and ``scores_from_ranking``.

* every quantity of ``HardOrderedBatch`` (expected positions, exposure, the pair quantities read through the
  sorted-sweep contraction, the position matrix) against plain loops over the score-consistent orders of the
  real items (one order for ``ties="first"``: the stable sort; all of them, averaged, for ``"average"``), with
  padding holding NaN anywhere, position-based and cascade browsing;
* the tie rules on a worked example; permuting the items permutes the quantities under ``"average"``;
* ``scores_from_ranking`` reproduces any ranking; argument checks;
* the sweep contraction against the generic row-block contraction of ``OrderedBatch``.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from torchfair.browsing import RBP, Cascade, TopK
from torchfair.orderings import Hard, scores_from_ranking
from torchfair.orderings.hard import HardOrderedBatch

F64 = torch.float64
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: browsing models and their plain-Python counterparts (tests/references/reference.py)
BROWSING = {"rbp": (RBP(0.8), ref.ref_rbp(0.8)), "top3": (TopK(RBP(0.9), 3), ref.ref_topk(ref.ref_rbp(0.9), 3)),
            "cascade": (Cascade(0.9, max_grade=2.0), ref.ref_cascade(0.9, 2.0))}


def _reference(scores, rel, ties, F):
    """Plain loops for one list of real items: the mean over the orders of the ranking (the stable sort for
    "first", every score-consistent order for "average") of pos_i, F-exposure of i, 1(pos_j < pos_i),
    F(pos_j) 1(pos_j < pos_i) and 1(pos_i = k)."""
    n = len(scores)
    orders = [ref.rank(scores)] if ties == "first" else list(ref.tie_orders(scores))
    pos = [0.0] * n
    expo = [0.0] * n
    above = [[0.0] * n for _ in range(n)]
    joint = [[0.0] * n for _ in range(n)]
    R = [[0.0] * n for _ in range(n)]
    w = 1.0 / len(orders)
    for order in orders:
        p = ref.positions(order)
        e = F.exposure([rel[i] for i in order])  # exposure of each position of this order
        for i in range(n):
            pos[i] += w * p[i]
            expo[i] += w * e[p[i]]
            R[p[i]][i] += w
            for j in range(n):
                if p[j] < p[i]:
                    above[i][j] += w
                    joint[i][j] += w * e[p[j]]
    return pos, expo, above, joint, R


@st.composite
def _lists(draw):
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 6))
    scores = draw(st.lists(st.lists(st.integers(0, 3), min_size=N, max_size=N), min_size=B, max_size=B))
    rel = draw(st.lists(st.lists(st.integers(0, 2), min_size=N, max_size=N), min_size=B, max_size=B))
    mask = draw(st.lists(st.lists(st.booleans(), min_size=N, max_size=N), min_size=B, max_size=B))
    return torch.tensor(scores, dtype=F64), torch.tensor(rel, dtype=F64), torch.tensor(mask)


@SETTINGS
@given(data=_lists(), ties=st.sampled_from(["first", "average"]), fname=st.sampled_from(sorted(BROWSING)),
       backend=st.sampled_from(["torch", "numba"]))
def test_quantities_are_the_mean_over_the_orders_of_the_real_items(data, ties, fname, backend):
    """Both backends of Hard (the torch reference and the compiled kernels) against the loops."""
    s, rel, mask = data
    if ties == "average" and fname == "cascade":
        fname = "rbp"  # a relevance-dependent model needs a strict order (test_cascade_needs_a_strict_order)
    F, refF = BROWSING[fname]
    B, N = s.shape
    ob = Hard(ties, backend=backend)(torch.where(mask, s, torch.full_like(s, float("nan"))), mask)  # NaN padding
    rel_in = torch.where(mask, rel, torch.full_like(rel, float("nan")))
    pos, e, R = ob.expected_positions(), ob.exposure(F, rel_in), ob.position_matrix()
    eye = torch.eye(N, dtype=F64).expand(B, N, N)
    above = ob.contract(eye, which="above")  # out[i, h] = X[i, h]: the pair matrix itself
    joint = ob.contract(eye, which="joint", browsing=F, relevance=rel_in)
    for b in range(B):
        idx = [i for i in range(N) if mask[b, i]]
        n = len(idx)
        if n:
            P, E, A, J, RR = _reference([float(s[b, i]) for i in idx], [float(rel[b, i]) for i in idx], ties, refF)
            for a, i in enumerate(idx):
                assert math.isclose(float(pos[b, i]), P[a], abs_tol=1e-12)
                assert math.isclose(float(e[b, i]), E[a], abs_tol=1e-12)
                for c, j in enumerate(idx):
                    assert math.isclose(float(above[b, i, j]), A[a][c], abs_tol=1e-12)
                    assert math.isclose(float(joint[b, i, j]), J[a][c], abs_tol=1e-12)
                for k in range(n):
                    assert math.isclose(float(R[b, k, i]), RR[k][a], abs_tol=1e-12)
        pad = ~mask[b]
        assert (e[b, pad] == 0).all() and (above[b, pad] == 0).all() and (above[b][:, pad] == 0).all()
        assert (joint[b, pad] == 0).all() and (R[b][:, pad] == 0).all() and (R[b, n:] == 0).all()
        # the sort itself: real items first (by score), padded items after them
        assert sorted(ob.order[b, :n].tolist()) == idx
        assert ob.n_items[b].item() == n


def test_worked_example_of_the_tie_rules():
    """Scores (1, 2, 2, 0): "first" ranks the tied items 1, 2 by index; "average" gives both position 0.5, the
    mean exposure of positions 0 and 1, probability 1/2 either way and the tied-pair joint
    sum_p F(a + p) (t - 1 - p) / (t (t - 1)) = F(0) / 2 (module docstring, McSherry & Najork)."""
    s, m = torch.tensor([[1.0, 2.0, 2.0, 0.0]], dtype=F64), torch.ones(1, 4, dtype=torch.bool)
    F = RBP(0.5)
    first, avg = Hard()(s, m), Hard(ties="average")(s, m)
    assert first.order.tolist() == [[1, 2, 0, 3]] and first.positions.tolist() == [[2, 0, 1, 3]]
    assert first.expected_positions().tolist() == [[2.0, 0.0, 1.0, 3.0]]
    assert first.exposure(F).tolist() == [[0.25, 1.0, 0.5, 0.125]]
    assert avg.expected_positions().tolist() == [[2.0, 0.5, 0.5, 3.0]]
    assert avg.exposure(F).tolist() == [[0.25, 0.75, 0.75, 0.125]]
    eye = torch.eye(4, dtype=F64)[None]
    assert avg.contract(eye).tolist() == [[[0, 1, 1, 0], [0, 0, 0.5, 0], [0, 0.5, 0, 0], [1, 1, 1, 0]]]
    assert avg.contract(eye, which="joint", browsing=F).tolist() == [
        [[0, 0.75, 0.75, 0], [0, 0, 0.5, 0], [0, 0.5, 0, 0], [0.25, 0.75, 0.75, 0]]]
    R = avg.position_matrix()[0]
    assert R[:, 1].tolist() == R[:, 2].tolist() == [0.5, 0.5, 0, 0] and R[:, 0].tolist() == [0, 0, 1, 0]


@SETTINGS
@given(seed=st.integers(0, 2 ** 31 - 1), N=st.integers(2, 9))
def test_average_ties_are_invariant_to_permuting_the_items(seed, N):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 3, (2, N), generator=gen).to(F64)
    rel = torch.randint(0, 3, (2, N), generator=gen).to(F64)
    m = torch.rand(2, N, generator=gen) < 0.8
    perm = torch.randperm(N, generator=gen)
    F = TopK(RBP(0.7), 4)
    a, b = Hard("average")(s, m), Hard("average")(s[:, perm], m[:, perm])
    torch.testing.assert_close(b.expected_positions()[m[:, perm]], a.expected_positions()[:, perm][m[:, perm]])
    torch.testing.assert_close(b.exposure(F), a.exposure(F)[:, perm])
    torch.testing.assert_close(b.position_matrix(), a.position_matrix()[:, :, perm])
    right = torch.rand(2, N, 2, generator=gen, dtype=F64)
    for which in ("above", "joint"):
        ca = a.contract(right, which=which, browsing=F, relevance=rel)
        cb = b.contract(right[:, perm], which=which, browsing=F, relevance=rel[:, perm])
        torch.testing.assert_close(cb, ca[:, perm])


def test_cascade_needs_a_strict_order():
    s, m = torch.tensor([[1.0, 2.0, 2.0]]), torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="ties='first'"):
        Hard("average")(s, m).exposure(Cascade(0.9), torch.ones(1, 3))
    with pytest.raises(ValueError, match="`relevance` is required"):
        Hard()(s, m).exposure(Cascade(0.9))


def test_hard_detaches_promotes_and_checks_its_argument():
    s = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float16, requires_grad=True)
    ob = Hard()(s, torch.ones(1, 3, dtype=torch.bool))
    assert isinstance(ob, HardOrderedBatch) and not Hard.differentiable
    assert not ob.scores.requires_grad and ob.dtype == torch.float32  # half precision works in float32
    assert ob.expected_positions().dtype == torch.float32 and ob.order.tolist() == [[2, 0, 1]]
    assert repr(Hard("average")) == "Hard(ties='average')"
    with pytest.raises(ValueError, match="`ties`"):
        Hard("random")


@SETTINGS
@given(data=st.data())
def test_scores_from_ranking_reproduces_any_ranking(data):
    B, N = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 12))
    ranking = torch.stack([torch.tensor(data.draw(st.permutations(list(range(N))))) for _ in range(B)])
    s = scores_from_ranking(ranking)
    assert s.shape == (B, N) and s.dtype == torch.float32
    for b in range(B):  # scores[ranking[k]] = N - k
        assert [float(s[b, int(ranking[b, k])]) for k in range(N)] == [float(N - k) for k in range(N)]
    assert torch.equal(Hard()(s, torch.ones(B, N, dtype=torch.bool)).order, ranking)
    assert torch.equal(scores_from_ranking(ranking[0]), s[0])


@pytest.mark.parametrize("bad", [torch.tensor([0, 0, 1]), torch.tensor([0, 1, 3]), torch.tensor([-1, 0, 1]),
                                 torch.tensor([[0.0, 1.0]]), torch.zeros(2, 2, 2, dtype=torch.long), [0, 1]])
def test_scores_from_ranking_rejects_what_is_not_a_permutation(bad):
    with pytest.raises(ValueError, match="`ranking`"):
        scores_from_ranking(bad)


# ------------------------------------------------------------------------------------------- moved from the
# robustness file: scores_from_ranking under another default dtype, the sweep against the generic contraction
@pytest.mark.parametrize("default", [torch.float32, torch.float64])
def test_scores_from_ranking_any_default_dtype(default):
    """Regression: ``scores_from_ranking`` crashed under ``torch.set_default_dtype(torch.float64)``.
    It returns float32 unless ``dtype=`` says otherwise, whatever the default dtype."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        s = scores_from_ranking(torch.tensor([[2, 0, 1], [0, 1, 2]]))
        assert s.dtype == torch.float32
        assert s.tolist() == [[2.0, 1.0, 3.0], [3.0, 2.0, 1.0]]
        s64 = scores_from_ranking(torch.tensor([2, 0, 1]), dtype=torch.float64)
        assert s64.dtype == torch.float64 and s64.tolist() == [2.0, 1.0, 3.0]
        assert Hard()(s, torch.ones(2, 3, dtype=torch.bool)).order.tolist() == [[2, 0, 1], [0, 1, 2]]
    finally:
        torch.set_default_dtype(old)
    with pytest.raises(ValueError, match="dtype"):
        scores_from_ranking(torch.tensor([0, 1]), dtype=torch.int64)
    with pytest.raises(ValueError, match="ranking"):
        scores_from_ranking(torch.tensor([True, False]))


#: the pair weights of the sweep test: none, by relevance level (ties weighted 0.5), with a weight on 'less' pairs
SWEEP_PAIR_WEIGHTS = {"none": None, "level-ties-half": (1.0, 0.5), "level-less": (1.0, 0.0, 0.3)}


@pytest.mark.parametrize("scores", ["tied", "distinct"])
@pytest.mark.parametrize("levels", [3, 7, 1000], ids=["graded", "many-grades", "continuous"])
@pytest.mark.parametrize("pw", list(SWEEP_PAIR_WEIGHTS))
@pytest.mark.parametrize("which", ["above", "joint", "one"])
@pytest.mark.parametrize("ties", ["first", "average"])
def test_hard_sweep_contraction_equals_the_pairwise_contraction(ties, which, pw, levels, scores):
    """HardOrderedBatch.contract's sorted sweep (no pairs; graded, many-grade and continuous relevance) against the
    generic row-block contraction of OrderedBatch (every pair formed), for every `which`, level weights with ties and
    'less' entries, browsing models incl. top-k and (strict ties) Cascade, padding, tied scores, and list chunks of
    one list; on batches of lists of 1, 2, 9 and 40 slots."""
    from torchfair.browsing import get_browsing
    from torchfair.orderings import Hard
    from torchfair.orderings.base import LevelPairWeight, OrderedBatch
    g = torch.Generator().manual_seed(["first", "average"].index(ties) * 1000 + ["above", "joint", "one"].index(which)
                                      * 100 + list(SWEEP_PAIR_WEIGHTS).index(pw) * 10 + levels % 9)
    models = [get_browsing("rbp:0.9"), get_browsing("topk:3:rbp:0.8")] + \
        ([get_browsing("cascade:0.9")] if ties == "first" else [])
    for N in (1, 2, 9, 40):
        B, H = 4, int(torch.randint(1, 4, (), generator=g))
        s = torch.randint(0, 4, (B, N), generator=g).double() if scores == "tied" else \
            torch.randn(B, N, generator=g).double()
        mask = torch.rand(B, N, generator=g) < 0.8
        rel = torch.randint(0, levels, (B, N), generator=g).double()
        rel = rel / 7 if levels == 1000 else rel
        right = torch.rand(B, N, H, generator=g).double()
        ob = Hard(ties)(s, mask)
        weight = None if SWEEP_PAIR_WEIGHTS[pw] is None else LevelPairWeight(rel, *SWEEP_PAIR_WEIGHTS[pw])
        for br in (models if which == "joint" else [None]):
            for be in (None, 1):
                fast = ob.contract(right, which=which, pair_weight=weight, browsing=br, relevance=rel,
                                   block_elements=be)
                if which == "one":  # both paths count pairs by the same sweep: form them here
                    pair = (mask[:, :, None] & mask[:, None, :] & ~torch.eye(N, dtype=torch.bool)).double()
                    w = pair if weight is None else pair * weight(0, N)
                    dense = torch.bmm(w, right)
                else:
                    dense = OrderedBatch.contract(ob, right, which=which, pair_weight=weight, browsing=br,
                                                  relevance=rel)
                assert torch.allclose(fast, dense, atol=1e-12), (N, br, be)


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_sort_order_is_a_stable_descending_sort_with_padding_last(backend):
    """hard.sort_order (the ideal rankings' sort): by a plain loop -- key descending, ties by index, padded last."""
    from torchfair.orderings.hard import sort_order

    g = torch.Generator().manual_seed(5)
    key = torch.randint(0, 3, (6, 40), generator=g).double()
    mask = torch.rand(6, 40, generator=g) < 0.8
    got = sort_order(key, mask, backend=backend)
    for b in range(6):
        real = sorted((i for i in range(40) if mask[b, i]), key=lambda i: (-float(key[b, i]), i))
        assert got[b, :len(real)].tolist() == real
        assert sorted(got[b, len(real):].tolist()) == [i for i in range(40) if not mask[b, i]]
