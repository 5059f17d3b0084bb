"""Tests of the prefix family (rND, rRD, rKL, PreF, skew@k, NDKL, FAIR) against plain-Python references."""
import itertools
import math
import random

import pytest
import torch

from torchfair.metrics.prefix import fair, ndkl, pref, rkl, rnd, rrd, skew
from torchfair.orderings import Hard

import prefix_reference as ref

torch.set_default_dtype(torch.float32)


def as_inputs(ranking):
    """Scores whose descending sort puts item i at position i; groups = the ranking's group ids."""
    n = len(ranking)
    return -torch.arange(n, dtype=torch.float64), torch.tensor(ranking)


def batch_of(rankings):
    n = len(rankings[0])
    s = -torch.arange(n, dtype=torch.float64).expand(len(rankings), n).clone()
    return s, torch.tensor(rankings)


def random_ranking(rng, n, G, unknown=False):
    lo = -1 if unknown else 0
    return [rng.randint(lo, G - 1) for _ in range(n)]


# ------------------------------------------------------------------ vs reference, brute-force normaliser
@pytest.mark.parametrize("delta", ["nd", "rd", "kl"])
@pytest.mark.parametrize("step", [1, 2, 3])
def test_pref_matches_reference_with_brute_force_z(delta, step):
    rng = random.Random(7 + step)
    for _ in range(6):
        n = rng.randint(2, 7)
        G = 2 if delta != "kl" else rng.choice([2, 3])
        r = random_ranking(rng, n, G)
        if len(set(r)) < 2:
            continue
        s, g = as_inputs(r)
        v, valid = pref(s, g, delta=delta, step=step, protected=1, num_groups=G, return_valid=True)
        kw = {"protected": 1} if delta != "kl" else {"G": G}
        if delta == "rd" and all(x == 1 for x in r):
            continue
        Z = ref.brute_max(r, delta, step, **kw)
        defined = Z > ref.Z_ROUNDING  # Z of rounding size only: the composition cannot be unfair (undefined)
        expected = ref.pref_raw(r, delta, step, **kw) / Z if defined else 0.0
        assert bool(valid) == defined
        assert float(v) == pytest.approx(expected, abs=1e-9), (r, delta, step)


@pytest.mark.parametrize("fn,delta", [(rnd, "nd"), (rrd, "rd"), (rkl, "kl2")])
def test_yang_stoyanovich_measures_match_reference(fn, delta):
    rng = random.Random(3)
    for step in (1, 2):
        for _ in range(5):
            n = rng.randint(3, 7)
            r = random_ranking(rng, n, 2)
            if len(set(r)) < 2:
                continue
            s, g = as_inputs(r)
            assert float(fn(s, g, step=step)) == pytest.approx(ref.pref_ref(r, delta, step), abs=1e-9)


@pytest.mark.parametrize("fn,delta", [(rnd, "nd"), (rrd, "rd"), (rkl, "kl2")])
def test_unnormalised_sum_matches_reference_long_lists(fn, delta):
    rng = random.Random(11)
    for n, step in [(25, 10), (37, 10), (23, 5)]:
        r = [1 if rng.random() < 0.3 else 0 for _ in range(n)]
        s, g = as_inputs(r)
        v = fn(s, g, step=step, normalize=False)
        assert float(v) == pytest.approx(ref.pref_raw(r, delta, step), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("delta,G", [("nd", 2), ("rd", 2), ("kl", 2), ("kl", 3)])
@pytest.mark.parametrize("step", [1, 2, 3])
def test_normaliser_is_exact_maximum_by_enumeration(delta, G, step):
    """Over all rankings of a composition: every value in [0, 1] and the maximum is exactly 1."""
    for comp in [(2, 3), (1, 5), (3, 3), (4, 2)] if G == 2 else [(1, 2, 3), (2, 2, 2), (1, 1, 4)]:
        base = [g for g, c in enumerate(comp) for _ in range(c)]
        perms = sorted(ref.arrangements(base))
        s, g = batch_of([list(p) for p in perms])
        v, valid = pref(s, g, delta=delta, step=step, num_groups=G, return_valid=True)
        assert valid.all()
        assert (v >= -1e-12).all() and (v <= 1 + 1e-9).all()
        assert float(v.max()) == pytest.approx(1.0, abs=1e-9)


def test_rrd_maximum_is_not_a_block_ranking():
    """For rRD the all-protected-first/last rankings are not the most unfair ones (documented in the module)."""
    r = [1, 0, 1, 0, 0, 0, 0, 0]
    s, g = as_inputs(r)
    assert float(rrd(s, g, step=2)) == pytest.approx(1.0)
    for block in ([1, 1] + [0] * 6, [0] * 6 + [1, 1]):
        sb, gb = as_inputs(block)
        assert float(rrd(sb, gb, step=2)) < 1 - 1e-3
    assert ref.brute_max(r, "rd", 2) > max(ref.pref_raw([1, 1] + [0] * 6, "rd", 2),
                                           ref.pref_raw([0] * 6 + [1, 1], "rd", 2))


@pytest.mark.parametrize("delta", ["nd", "kl2"])
def test_rnd_rkl_maximum_attained_by_a_block_ranking(delta):
    """Enumerated: for rND and rKL one group entirely first (or last) attains Z (checked, not assumed)."""
    for n in range(2, 9):
        for P in range(1, n):
            for step in (1, 2, 3):
                first = [1] * P + [0] * (n - P)
                Z = ref.brute_max(first, delta, step)
                ext = max(ref.pref_raw(first, delta, step), ref.pref_raw(first[::-1], delta, step))
                assert ext == pytest.approx(Z, abs=1e-12)


def test_rkl_equals_multinomial_pref_for_two_groups():
    rng = random.Random(5)
    rs = [random_ranking(rng, 12, 2) for _ in range(4)]
    s, g = batch_of(rs)
    a = rkl(s, g, step=3, protected=0)
    b = pref(s, g, delta="kl", step=3)
    torch.testing.assert_close(a, b)


# ------------------------------------------------------------------ worked examples (hand-computed)
def test_worked_example_rnd_rrd_rkl():
    # 10 items, protected = 3, cut-offs 5 and 10 (the last contributes 0); top-5 holds 2 protected
    r = [1, 0, 1, 0, 0, 0, 0, 1, 0, 0]
    s, g = as_inputs(r)
    # rND: |2/5 - 3/10| = 0.1; max over compositions of the top-5 (0..3 protected): |3/5 - 3/10| = 0.3
    assert float(rnd(s, g, step=5)) == pytest.approx(0.1 / 0.3)
    assert float(rnd(s, g, step=5, normalize=False)) == pytest.approx(0.1 / math.log2(5))
    # rRD: |2/3 - 3/7| vs max |3/2 - 3/7|
    assert float(rrd(s, g, step=5)) == pytest.approx((2 / 3 - 3 / 7) / (3 / 2 - 3 / 7))
    # rKL: KL((.4,.6) || (.3,.7)) / max(KL((.6,.4)||.), KL((0,1)||.))
    num = 0.4 * math.log(0.4 / 0.3) + 0.6 * math.log(0.6 / 0.7)
    den = max(0.6 * math.log(0.6 / 0.3) + 0.4 * math.log(0.4 / 0.7), math.log(1 / 0.7))
    assert float(rkl(s, g, step=5)) == pytest.approx(num / den)


def test_worked_example_default_cutoffs():
    # 30 items, 10 protected (id 1) at positions 0,3,6,...,27 except the last two moved down
    r = [0] * 30
    for pos in [0, 3, 6, 9, 12, 15, 18, 21, 28, 29]:
        r[pos] = 1
    s, g = as_inputs(r)
    # cut-offs 10, 20 (30 = whole list: 0). top-10: 4 protected, top-20: 7 protected; p = 1/3
    raw = abs(4 / 10 - 1 / 3) / math.log2(10) + abs(7 / 20 - 1 / 3) / math.log2(20)
    assert float(rnd(s, g, normalize=False)) == pytest.approx(raw)
    assert float(rnd(s, g)) == pytest.approx(ref.pref_raw(r, "nd", 10) /
                                             max(ref.pref_raw(sorted(r, reverse=True), "nd", 10),
                                                 ref.pref_raw(sorted(r), "nd", 10)))


def test_worked_example_skew_ndkl_fair():
    s = torch.tensor([4., 3., 2., 1.])
    g = torch.tensor([0, 1, 1, 1])
    torch.testing.assert_close(skew(s, g, k=2), torch.tensor([math.log(2), math.log(2 / 3)]))
    # k larger than the list: the top-k is the whole list: skew 0
    torch.testing.assert_close(skew(s, g, k=10), torch.zeros(2))
    # NDKL of [0, 1, 1, 1] with D_X = (1/4, 3/4): prefixes (1,0), (1/2,1/2), (1/3,2/3), (1/4,3/4)
    D = [math.log(4), 0.5 * math.log(2) + 0.5 * math.log(2 / 3),
         (1 / 3) * math.log(4 / 3) + (2 / 3) * math.log(8 / 9), 0.0]
    w = [1 / math.log2(i + 1) for i in range(1, 5)]
    assert float(ndkl(s, g)) == pytest.approx(sum(a * b for a, b in zip(D, w)) / sum(w), rel=1e-6)
    assert float(ndkl(s, g, k=2)) == pytest.approx((D[0] * w[0] + D[1] * w[1]) / (w[0] + w[1]), rel=1e-6)
    # FAIR with p = 3/4: prefixes hold 0, 1, 2, 3 protected
    cdf = [0.25, 1 - 0.75 ** 2, 1 - 0.75 ** 3, 1 - 0.75 ** 4]  # P(X <= k - 1) = 1 - p**k
    assert float(fair(s, g)) == pytest.approx(sum(cdf) / 4, rel=1e-6)


# ------------------------------------------------------------------ skew / ndkl / fair vs reference
def test_skew_matches_reference():
    rng = random.Random(1)
    for _ in range(20):
        n, G, k = rng.randint(1, 12), rng.randint(1, 4), rng.randint(1, 8)
        r = random_ranking(rng, n, G, unknown=True)
        s, g = as_inputs(r)
        v, valid = skew(s, g, k=k, num_groups=G, return_valid=True)
        for gg in range(G):
            e = ref.skew_ref(r, gg, k)
            assert bool(valid[gg]) == (e is not None)
            assert float(v[gg]) == pytest.approx(0.0 if e is None else e, abs=1e-9)


def test_ndkl_matches_reference():
    rng = random.Random(2)
    for _ in range(20):
        n, G = rng.randint(1, 15), rng.randint(1, 4)
        r = random_ranking(rng, n, G, unknown=True)
        if all(x < 0 for x in r):
            continue
        k = rng.choice([None, rng.randint(1, 10)])
        s, g = as_inputs(r)
        assert float(ndkl(s, g, k=k, num_groups=G)) == pytest.approx(ref.ndkl_ref(r, G, k=k), abs=1e-9)


def test_fair_matches_reference_and_scipy():
    rng = random.Random(4)
    for _ in range(15):
        n = rng.randint(1, 30)
        r = random_ranking(rng, n, 2, unknown=True)
        s, g = as_inputs(r)
        p = rng.choice([None, rng.random()])
        assert float(fair(s, g, target=p, num_groups=2)) == pytest.approx(ref.fair_ref(r, p=p), abs=1e-9)
    scipy_stats = pytest.importorskip("scipy.stats")
    r = [0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0, 0]
    s, g = as_inputs(r)
    expect = sum(scipy_stats.binom.cdf(ref.count(r[:k], 1), k, 0.4) for k in range(1, 13)) / 12
    assert float(fair(s, g, target=0.4)) == pytest.approx(expect, abs=1e-9)


def test_pref_with_target_and_unknown_items():
    rng = random.Random(9)
    for _ in range(6):
        r = random_ranking(rng, 7, 3, unknown=True)
        if len({x for x in r if x >= 0}) < 2:
            continue
        s, g = as_inputs(r)
        tgt = [0.2, 0.3, 0.5]
        v = pref(s, g, delta="kl", step=2, target=torch.tensor(tgt, dtype=torch.float64), num_groups=3)
        Z = ref.brute_max(r, "kl", 2, target=tgt, G=3)
        assert float(v) == pytest.approx(ref.pref_raw(r, "kl", 2, target=tgt, G=3) / Z, abs=1e-9)
        # binomial: protected = 2 against the rest (unknown items included)
        r2 = [x for x in r]
        v2 = pref(s, g, delta="nd", protected=2, step=2, target=0.4, num_groups=3)
        Z2 = ref.brute_max(r2, "nd", 2, protected=2, target=0.4)
        assert float(v2) == pytest.approx(ref.pref_raw(r2, "nd", 2, protected=2, target=0.4) / Z2, abs=1e-9)


# ------------------------------------------------------------------ soft membership, orderings
def test_soft_membership_one_hot_equals_ids():
    rng = random.Random(6)
    r = random_ranking(rng, 9, 3)
    s, g = as_inputs(r)
    soft = torch.nn.functional.one_hot(g, 3).double()
    torch.testing.assert_close(pref(s, soft, delta="kl", step=2), pref(s, g, delta="kl", step=2, num_groups=3))
    torch.testing.assert_close(ndkl(s, soft), ndkl(s, g, num_groups=3))
    torch.testing.assert_close(skew(s, soft, k=4), skew(s, g, k=4, num_groups=3))
    torch.testing.assert_close(rkl(s, soft, step=2), rkl(s, g, step=2, num_groups=3))


def test_soft_membership_exact_normaliser_by_enumeration():
    a = torch.tensor([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8], [0.0, 1.0], [0.7, 0.3]], dtype=torch.float64)
    perms = list(itertools.permutations(range(5)))
    scores = torch.stack([torch.empty(5, dtype=torch.float64).scatter_(0, torch.tensor(p),
                                                                      -torch.arange(5, dtype=torch.float64))
                          for p in perms])
    v = pref(scores, a.expand(len(perms), 5, 2), delta="kl", step=1)
    assert float(v.max()) == pytest.approx(1.0, abs=1e-9) and float(v.min()) >= 0


def test_average_ties_skew_is_mean_over_tie_orders():
    s = torch.tensor([2., 1., 1., 1., 0.])
    g = torch.tensor([0, 1, 0, 1, 1])
    v = skew(s, g, k=2, ordering=Hard(ties="average"))
    # positions 1-3 tied: the expected protected mass in the top 2 is 0 + 2/3
    torch.testing.assert_close(v, torch.tensor([math.log((4 / 3 / 2) / (2 / 5)), math.log((2 / 3 / 2) / (3 / 5))]))


def test_differentiable_with_a_doubly_stochastic_position_matrix():
    from torchfair.orderings.base import OrderedBatch

    class Uniform(OrderedBatch):
        def __init__(self, scores, mask):
            self.scores, self.mask = scores, mask

        def expected_positions(self):
            raise NotImplementedError

        def exposure(self, browsing, relevance=None):
            raise NotImplementedError

        def pair_context(self, browsing, relevance):
            raise NotImplementedError

        def pair_block(self, context, start, stop):
            raise NotImplementedError

        def position_matrix(self):
            B, N = self.mask.shape
            w = torch.softmax(self.scores, -1)
            return w[:, None, :].expand(B, N, N) * 0 + 1.0 / N  # uniform: every prefix matches the list

    s = torch.tensor([[0.3, 0.1, 0.2, 0.5]])
    g = torch.tensor([[0, 1, 0, 1]])
    ob = Uniform(s, torch.ones(1, 4, dtype=torch.bool))
    for fn in (rnd, rkl):
        v, valid = fn(s, g, step=1, ordering=ob, return_valid=True)
        assert float(v) == pytest.approx(0.0, abs=1e-6) and bool(valid)
    assert float(ndkl(s, g, ordering=ob)) == pytest.approx(0.0, abs=1e-6)


# ------------------------------------------------------------------ padding, batching, reductions, validity
@pytest.mark.parametrize("fn,kw", [(rnd, {"step": 2}), (rrd, {"step": 2}), (rkl, {"step": 3}),
                                   (pref, {"step": 2, "delta": "kl"}), (ndkl, {}), (fair, {}),
                                   (skew, {"k": 3})])
def test_padding_and_item_order_invariance(fn, kw):
    rng = random.Random(8)
    r = random_ranking(rng, 9, 2)
    r[0], r[1] = 0, 1
    s, g = as_inputs(r)
    base = fn(s, g, num_groups=2, **kw)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    pad_s = torch.cat([s[perm], torch.tensor([float("nan"), 5.0, -2.0], dtype=torch.float64)])
    pad_g = torch.cat([g[perm], torch.tensor([1, 0, 1])])
    mask = torch.tensor([True] * 9 + [False] * 3)
    torch.testing.assert_close(fn(pad_s, pad_g, mask=mask, num_groups=2, **kw), base)
    # batched with a shorter list beside it
    s2 = torch.stack([pad_s, torch.cat([s[:5], torch.zeros(7, dtype=torch.float64)])])
    g2 = torch.stack([pad_g, torch.cat([g[:5], torch.zeros(7, dtype=torch.long)])])
    m2 = torch.stack([mask, torch.tensor([True] * 5 + [False] * 7)])
    out = fn(s2, g2, mask=m2, num_groups=2, **kw)
    torch.testing.assert_close(out[0], base)
    torch.testing.assert_close(out[1], fn(s[:5], g[:5], num_groups=2, **kw))


def test_undefined_values_are_zero_and_invalid():
    s = -torch.arange(6.)
    v, valid = rnd(s, torch.tensor([1, 1, 0, 0, 0, 0]), return_valid=True)  # no cut-off (n < 10)
    assert float(v) == 0 and not bool(valid)
    v, valid = rnd(s, torch.zeros(6, dtype=torch.long), step=2, num_groups=2, return_valid=True)  # Z = 0
    assert float(v) == 0 and not bool(valid)
    v, valid = rrd(s, torch.ones(6, dtype=torch.long), step=2, return_valid=True)  # no non-protected item
    assert float(v) == 0 and not bool(valid)
    v, valid = skew(s, torch.tensor([0, 0, 0, 1, 1, 1]), k=3, return_valid=True)
    assert valid.tolist() == [True, False] and float(v[1]) == 0
    v, valid = ndkl(s, torch.full((6,), -1), num_groups=2, return_valid=True)
    assert float(v) == 0 and not bool(valid)
    for out in (v,):
        assert torch.isfinite(out).all()


def test_reductions_skip_invalid_lists():
    s = -torch.arange(4.).expand(3, 4)
    g = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    per, valid = rnd(s, g, step=2, num_groups=2, return_valid=True)
    assert valid.tolist() == [True, True, False]
    assert float(rnd(s, g, step=2, num_groups=2, reduction="mean")) == pytest.approx(float(per[:2].mean()))
    assert float(rnd(s, g, step=2, num_groups=2, reduction="sum")) == pytest.approx(float(per.sum()))


# ------------------------------------------------------------------ argument errors
def test_value_errors_name_the_argument():
    s = -torch.arange(12.)
    g = torch.tensor([0, 1] * 6)
    soft = torch.nn.functional.one_hot(g, 2).float()
    cases = [
        (lambda: rnd(s, g, step=0), "step"),
        (lambda: rnd(s, g, step=2.5), "step"),
        (lambda: rnd(s, g, protected=3, num_groups=2), "protected"),
        (lambda: rnd(s, soft), "groups"),
        (lambda: rrd(s, soft), "groups"),
        (lambda: fair(s, soft), "groups"),
        (lambda: pref(s, g, delta="xx"), "delta"),
        (lambda: pref(s, soft, delta="nd"), "groups"),
        (lambda: pref(s, g, delta="nd", target=1.5), "target"),
        (lambda: pref(s, g, delta="rd", target=1.0), "target"),
        (lambda: pref(s, g, delta="kl", target=torch.tensor([0.5, 0.3, 0.2])), "target"),
        (lambda: pref(s, g, delta="kl", target=torch.tensor([1.0, 0.0])), "target"),
        (lambda: skew(s, g, k=0), "k"),
        (lambda: ndkl(s, g, k=-1), "k"),
        (lambda: fair(s, g, target=-0.1), "target"),
        (lambda: rnd(s, g[:5]), "groups"),
        (lambda: rnd(s, g, mask=torch.ones(12)), "mask"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=f"`{name}`"):
            call()


def test_normaliser_state_limit(monkeypatch):
    import torchfair.metrics.prefix as P
    monkeypatch.setattr(P, "MAX_NORMALISER_STATES", 10)
    P._Z_CACHE.clear()
    s = -torch.arange(12.)
    g = torch.tensor([0, 1, 2] * 4)
    with pytest.raises(ValueError, match="normalize=False"):
        pref(s, g, step=2)
    assert torch.isfinite(pref(s, g, step=2, normalize=False))


# ------------------------------------------------------------------ robustness and the functional API
def test_kl_measures_have_finite_gradients_when_a_group_share_is_zero():
    """0 log 0 = 0 must have a finite (zero) gradient: before, torch.xlogy's gradient made every score NaN."""
    from torchfair.orderings import SoftRank
    s = torch.tensor([[3.0, 2.0, 1.0, 0.0]], requires_grad=True)
    g = torch.tensor([[0, 0, 1, 1]])
    soft = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]])  # group 2 empty
    for fn in (lambda: ndkl(s, g, ordering=SoftRank(0.1)),
               lambda: ndkl(s, g, num_groups=3, target=torch.tensor([0.4, 0.4, 0.2]), ordering=SoftRank(0.1)),
               lambda: rkl(s, g, step=1, ordering=SoftRank(0.1)),
               lambda: pref(s, g, delta="kl", step=1, ordering=SoftRank(0.1)),
               lambda: pref(s, soft, delta="kl", step=1, ordering=SoftRank(0.1)),
               lambda: skew(s, soft, k=2, ordering=SoftRank(0.1), return_valid=True)[0][..., :2]):
        s.grad = None
        v = fn()
        v.sum().backward()
        assert torch.isfinite(v).all() and torch.isfinite(s.grad).all(), s.grad
        assert s.grad.abs().sum() > 0


@pytest.mark.parametrize("fn", [rnd, rrd, rkl, pref, fair, ndkl, skew])
def test_fully_padded_list_in_a_batch_is_zero_and_invalid(fn):
    """A batch holding a fully padded list: 0 and valid=False for it (before: RuntimeError in the normaliser),
    the other lists unchanged."""
    s = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], dtype=torch.float64)
    g = torch.tensor([[0, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0]])
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1] = False
    kw = {} if fn in (fair, ndkl, skew) else {"step": 2}
    v, valid = fn(s, g, mask=mask, num_groups=2, return_valid=True, **kw)
    assert not valid[1].any() and (v[1] == 0).all()
    alone = fn(s[:1], g[:1], num_groups=2, **kw)
    torch.testing.assert_close(v[:1], alone)


@pytest.mark.parametrize("fn", [rnd, rkl, lambda s, g, **kw: pref(s, g, delta="kl", **kw),
                                lambda s, g, **kw: pref(s, g, delta="rd", **kw)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_only_cut_off_is_the_whole_list_is_undefined(fn, dtype):
    """With the default target the whole list's composition *is* the target, so Z = 0 (up to rounding); before,
    values like 2 or 6.7e7 were reported with valid=True."""
    gen = torch.Generator().manual_seed(0)
    lists = []
    for n in range(2, 40):
        g = torch.randint(0, 3, (n,), generator=gen)
        if (g == 1).all() or (g != 1).all():
            continue
        s = torch.randn(n, generator=gen, dtype=dtype)
        v, valid = fn(s, g, step=n, return_valid=True)
        assert not valid and v == 0, (n, v)
        lists.append((s, g))
    # every cut-off of each list (step 1, all of them padded into one batch): defined, in range
    W = max(len(s) for s, _ in lists)
    s = torch.zeros(len(lists), W, dtype=dtype)
    g = torch.zeros(len(lists), W, dtype=torch.long)
    mask = torch.zeros(len(lists), W, dtype=torch.bool)
    for b, (sb, gb) in enumerate(lists):
        s[b, :len(sb)], g[b, :len(sb)], mask[b, :len(sb)] = sb, gb, True
    v, valid = fn(s, g, mask=mask, step=1, return_valid=True)
    assert valid.all() and ((v >= 0) & (v <= 1)).all(), (v, valid)


@pytest.mark.parametrize("delta", ["nd", "rd", "kl"])
def test_pref_cut_off_k_matches_truncated_reference(delta):
    rng = random.Random(11)
    for _ in range(12):
        n = rng.randint(3, 7)
        r = random_ranking(rng, n, 2)
        if len(set(r)) < 2:
            continue
        k = rng.randint(1, n)
        s, g = as_inputs(r)
        v, valid = pref(s, g, delta=delta, step=1, k=k, num_groups=2, return_valid=True)
        kw = {"protected": 1} if delta != "kl" else {"G": 2}
        Z = max(ref.pref_raw(list(a), delta, 1, k=k, **kw) for a in ref.arrangements(r))
        defined = Z > ref.Z_ROUNDING
        assert bool(valid) == defined
        if defined:
            assert float(v) == pytest.approx(ref.pref_raw(r, delta, 1, k=k, **kw) / Z, abs=1e-9)
        if k == n:  # k at the length of the list is the whole list
            torch.testing.assert_close(v, pref(s, g, delta=delta, step=1, num_groups=2))


def test_fair_cut_off_k_matches_reference():
    rng = random.Random(5)
    for _ in range(10):
        n = rng.randint(2, 8)
        r = random_ranking(rng, n, 2)
        k = rng.randint(1, n + 2)
        s, g = as_inputs(r)
        assert float(fair(s, g, k=k, num_groups=2)) == pytest.approx(ref.fair_ref(r, k=k), abs=1e-9)


def test_rrd_stays_bounded_near_an_all_protected_prefix():
    """rRD's prefix ratio |G+| / |G-| exploded (values ~1e6) when a relaxed ordering put almost only protected
    mass in a prefix; it is continued linearly below one non-protected item, and exact on hard rankings."""
    from torchfair.metrics.prefix import _delta_rd
    i = torch.tensor([4.0, 4.0, 4.0, 4.0], dtype=torch.float64)
    m = torch.tensor([[3.0], [3.5], [3.999999], [4.0]], dtype=torch.float64)
    d = _delta_rd(torch.cat([m, i[:, None] - m], -1), i, torch.tensor(0.0, dtype=torch.float64))
    torch.testing.assert_close(d, torch.tensor([3.0, 1.5, 3e-6, 0.0], dtype=torch.float64), atol=1e-5, rtol=0)
    from torchfair.orderings import SoftRank
    s = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[0, 1, 1, 1, 1]])
    v, valid = rrd(s, g, step=1, protected=1, ordering=SoftRank(0.01, scale="none"), return_valid=True)
    v.sum().backward()
    assert valid and 0 <= float(v.detach()) <= 1 + 1e-6 and torch.isfinite(s.grad).all()


def test_target_strings():
    """`target` strings: "list" (the default, the list's composition) and "equal"; anything else is a
    ValueError naming `target` (before: TypeError from torch.as_tensor)."""
    s = torch.tensor([4.0, 3.0, 2.0, 1.0])
    g = torch.tensor([0, 1, 1, 1])
    torch.testing.assert_close(skew(s, g, k=2, target="equal"), skew(s, g, k=2, target=torch.tensor([0.5, 0.5])))
    torch.testing.assert_close(skew(s, g, k=2, target="list"), skew(s, g, k=2))
    torch.testing.assert_close(ndkl(s, g, target="equal"), ndkl(s, g, target=torch.tensor([0.5, 0.5])))
    torch.testing.assert_close(pref(s, g, step=1, target="equal"), pref(s, g, step=1, target=[0.5, 0.5]))
    torch.testing.assert_close(pref(s, g, delta="nd", step=1, target="equal"),
                               pref(s, g, delta="nd", step=1, target=0.5))
    torch.testing.assert_close(fair(s, g, target="list"), fair(s, g))
    for fn in (skew, ndkl, pref, fair):
        with pytest.raises(ValueError, match="`target`"):
            fn(s, g, target="uniform")


def test_prefix_measures_on_a_mixture_are_the_measure_of_the_expected_composition():
    """The documented semantics: on Sampled rankings a prefix measure is evaluated on the expected prefix
    composition (DoublyStochastic with the mean position matrix), which for the convex distances is at most the mean
    of the per-ranking values (and 0 when every ranking is fair)."""
    from torchfair.orderings import DoublyStochastic, Sampled, scores_from_ranking
    g = torch.tensor([[0, 1, 0, 1, 1, 0]])
    rk = torch.tensor([[[0, 1, 2, 3, 4, 5]], [[1, 4, 2, 0, 5, 3]], [[5, 3, 4, 1, 0, 2]]])  # [S, B, N]
    w = torch.tensor([[0.5], [0.3], [0.2]], dtype=torch.float64)
    samp = Sampled(rk, weights=w)
    s0 = torch.zeros(1, 6, dtype=torch.float64)
    R = samp(s0, torch.ones(1, 6, dtype=torch.bool)).position_matrix()
    for fn, kw in [(rnd, dict(step=2)), (rkl, dict(step=2)), (pref, dict(step=1)), (ndkl, {}), (fair, {}),
                   (skew, dict(k=3))]:
        got = fn(s0, g, ordering=samp, **kw)
        torch.testing.assert_close(got, fn(s0, g, ordering=DoublyStochastic(R), **kw))
        if fn in (rnd, rkl, pref, ndkl):
            per = torch.stack([fn(scores_from_ranking(rk[i]).double(), g, **kw) for i in range(3)])
            assert (got <= (w[:, 0, None] * per).sum(0) + 1e-12).all()


def test_rkl_soft_protected_beyond_G_is_refused():
    """Soft ``[B, N, G]`` groups declare G: ``protected >= G`` is a ValueError naming ``protected`` (issue 28), the
    last group equals the one-hot ids, and an integer id beyond the batch's groups stays undefined (0, invalid)."""
    s = torch.tensor([[4., 3., 2., 1.]], dtype=torch.float64)
    ids = torch.tensor([[1, 1, 0, 0]])  # the most unfair ranking: rKL = 1 (the docstring's example)
    soft = torch.nn.functional.one_hot(ids, 2).to(torch.float64)
    for bad in (2, 5):
        with pytest.raises(ValueError, match="`protected`"):
            rkl(s, soft, protected=bad, step=2)
    got = rkl(s, soft, protected=1, step=2)
    torch.testing.assert_close(got, rkl(s, ids, protected=1, step=2))
    torch.testing.assert_close(got, torch.tensor([1.0], dtype=torch.float64))
    value, valid = rkl(s, ids, protected=2, step=2, return_valid=True)
    assert not bool(valid) and float(value) == 0.0
