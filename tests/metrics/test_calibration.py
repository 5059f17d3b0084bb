"""Matched Pair Calibration (``003``): values against loops written from Definitions 1-3, intervals, errors."""
import math

import pytest
import torch

from torchfair.browsing import RBP
from torchfair.metrics.calibration import matched_pair_calibration, matched_pairs, mpc_cluster_variance
from torchfair.orderings import Hard


# ----------------------------------------------------------------------------- plain-Python references
def ref_pairs(s, y, g, mask, group, eps=None, closest=None, quantile=None, adjacent=False, F=None, mode="top"):
    """Definition 1 (+ §4.1.1 k closest, §4.1.3 adjacency, §4.1.2 weights) as loops over lists of floats."""
    s, y, g, mask = s.tolist(), y.tolist(), g.tolist(), mask.tolist()
    cands = []
    for b in range(len(s)):
        real = [i for i in range(len(s[b])) if mask[b][i]]
        ranked = sorted(real, key=lambda i: -s[b][i])  # stable: ties keep index order, like Hard()
        pos = {i: p for p, i in enumerate(ranked)}
        for i in real:
            if g[b][i] != group:
                continue
            for j in real:
                if g[b][j] == group or g[b][j] < 0:
                    continue
                gap = s[b][j] - s[b][i]
                if gap < 0 or (adjacent and abs(pos[i] - pos[j]) != 1):
                    continue
                if F is None:
                    w = 1.0
                elif mode == "top":
                    w = F(min(pos[i], pos[j]))
                else:
                    w = abs(F(pos[i]) - F(pos[j]))
                cands.append((gap, b, i, j, y[b][i] - y[b][j], w))
    if eps is not None:
        cands = [c for c in cands if c[0] <= eps]
    if closest is not None:
        cands = sorted(cands, key=lambda c: c[:4])[:closest]
    if quantile is not None and cands:
        gaps = sorted(c[0] for c in cands)
        thr = gaps[max(math.ceil(quantile * len(gaps)) - 1, 0)]
        cands = [c for c in cands if c[0] <= thr]
    return cands


def ref_mpc(cands, B):
    """Definition 2 per query and Definition 3 pooled (weighted means)."""
    num = [0.0] * B
    den = [0.0] * B
    for _, b, _, _, d, w in cands:
        num[b] += w * d
        den[b] += w
    per = [num[b] / den[b] if den[b] > 0 else 0.0 for b in range(B)]
    pooled = sum(num) / sum(den) if sum(den) > 0 else 0.0
    return pooled, per


def ref_sandwich(p, cluster="item", item_ids=None):
    """Direct double loop over pairs of pairs: V = sum_{p,p'} 1(p ~ p') w e w' e' / (sum w)^2."""
    q, a, c = p.query.tolist(), p.item_g.tolist(), p.item_other.tolist()
    w, d = p.weight.tolist(), p.diff.tolist()
    if item_ids is not None:
        ids = item_ids.tolist()
        a = [ids[q[t]][a[t]] for t in range(len(a))]
        c = [ids[q[t]][c[t]] for t in range(len(c))]
    else:
        a = [(q[t], a[t]) for t in range(len(a))]
        c = [(q[t], c[t]) for t in range(len(c))]
    W = sum(w)
    theta = sum(wi * di for wi, di in zip(w, d)) / W
    u = [wi * (di - theta) for wi, di in zip(w, d)]
    meat = 0.0
    for t in range(len(u)):
        for r in range(len(u)):
            if cluster == "item":
                share = bool({a[t], c[t]} & {a[r], c[r]})
            else:
                share = q[t] == q[r]
            if share:
                meat += u[t] * u[r]
    return meat / W ** 2


def random_batch(seed, B=6, N=9, levels=None, pad=True):
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(B, N, generator=g, dtype=torch.float64)
    if levels:
        s = torch.floor(s * levels) / levels  # create ties
    y = torch.randint(0, 6, (B, N), generator=g).double() / 2
    grp = torch.randint(-1, 3, (B, N), generator=g)
    mask = torch.ones(B, N, dtype=torch.bool)
    if pad:
        for b in range(B):
            mask[b, N - (b % 3):] = False
    return s, y, grp, mask


# ----------------------------------------------------------------------------- hand-worked example
def test_hand_worked_two_queries():
    # q0: pairs (i_g=1, i_¬g=0) gap 0.1, y diff 2-1 = 1 and (2, 3) gap 0.05, diff 3-1 = 2  -> MPC_q0 = 1.5
    # q1: item 0 (g) tied with item 1 (other, gap 0), diff 0-4 = -4; item 2 has unknown group; item 3 padded
    s = torch.tensor([[3.0, 2.9, 1.0, 1.05], [2.0, 2.0, 0.5, 9.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 2.0, 3.0, 1.0], [0.0, 4.0, 1.0, 0.0]], dtype=torch.float64)
    grp = torch.tensor([[0, 1, 1, 0], [1, 0, -1, 0]])
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    r = matched_pair_calibration(s, y, grp, group=1, eps=0.2, mask=mask, ci="none")
    assert r.n_pairs.item() == 3
    torch.testing.assert_close(r.per_query, torch.tensor([1.5, -4.0], dtype=torch.float64))
    torch.testing.assert_close(r.estimate, torch.tensor((1 + 2 - 4) / 3, dtype=torch.float64))
    assert r.per_query_valid.tolist() == [True, True] and r.per_query_pairs.tolist() == [2, 1]
    # k = 2 closest pairs: gaps 0.0 (q1) and 0.05 (q0) -> (-4 + 2) / 2
    r2 = matched_pair_calibration(s, y, grp, group=1, closest=2, mask=mask, ci="none")
    torch.testing.assert_close(r2.estimate, torch.tensor(-1.0, dtype=torch.float64))
    torch.testing.assert_close(r2.eps, torch.tensor(0.05, dtype=torch.float64))
    # adjacency: q0 ranks 0,1,3,2 -> (1,0) at positions 1,0 and (2,3) at 3,2 are adjacent; q1 (0,1) adjacent
    r3 = matched_pair_calibration(s, y, grp, group=1, eps=0.2, adjacent=True, mask=mask, ci="none")
    assert r3.n_pairs.item() == 3
    # group 0 view: in q0 item 0 (s=3.0) has nobody above and item 3 (1.05) is 1.85 below item 1: no pair;
    # in q1 the exact tie (1 vs 0) is a pair for group 0 as well (0 <= gap): diff 4 - 0
    r4 = matched_pair_calibration(s, y, grp, group=0, eps=0.2, mask=mask, ci="none")
    assert r4.per_query_valid.tolist() == [False, True] and r4.estimate.item() == 4.0


def test_position_weighting_hand_worked():
    # q0 ranking: 0, 1, 3, 2; with RBP(0.5): top weights F(0) = 1 for pair (1,0), F(2) = 0.25 for pair (2,3)
    s = torch.tensor([3.0, 2.9, 1.0, 1.05], dtype=torch.float64)
    y = torch.tensor([1.0, 2.0, 3.0, 1.0], dtype=torch.float64)
    grp = torch.tensor([0, 1, 1, 0])
    r = matched_pair_calibration(s, y, grp, group=1, eps=0.2, browsing=RBP(0.5), ci="none")
    torch.testing.assert_close(r.estimate, torch.tensor((1 * 1 + 0.25 * 2) / 1.25, dtype=torch.float64))
    # swap weights: |F(1) - F(0)| = 0.5 and |F(3) - F(2)| = 0.125
    r = matched_pair_calibration(s, y, grp, group=1, eps=0.2, browsing=RBP(0.5), position_weight="swap", ci="none")
    torch.testing.assert_close(r.estimate, torch.tensor((0.5 * 1 + 0.125 * 2) / 0.625, dtype=torch.float64))
    assert r.per_query.dim() == 0


# ----------------------------------------------------------------------------- against loops
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("opts", [dict(eps=0.15), dict(eps=0.0), dict(closest=7), dict(quantile=0.3),
                                  dict(eps=0.3, adjacent=True), dict(closest=5, adjacent=True),
                                  dict(eps=0.4, F=True, mode="top"), dict(eps=0.4, F=True, mode="swap")])
def test_matches_definition_loops(seed, opts):
    s, y, grp, mask = random_batch(seed, levels=8 if seed % 2 else None)
    opts = dict(opts)
    F = RBP(0.8) if opts.pop("F", False) else None
    mode = opts.pop("mode", "top")
    for group in (0, 1):
        cands = ref_pairs(s, y, grp, mask, group, F=(lambda k: 0.8 ** k) if F else None, mode=mode, **opts)
        pooled, per = ref_mpc(cands, s.shape[0])
        r = matched_pair_calibration(s, y, grp, group=group, mask=mask, browsing=F, position_weight=mode, ci="none",
                                     **opts)
        assert r.n_pairs.item() == len(cands)
        torch.testing.assert_close(r.estimate, torch.tensor(pooled, dtype=torch.float64))
        torch.testing.assert_close(r.per_query, torch.tensor(per, dtype=torch.float64))
        p = matched_pairs(s, y, grp, group=group, mask=mask, browsing=F, position_weight=mode, **opts)
        got = sorted(zip(p.query.tolist(), p.item_g.tolist(), p.item_other.tolist()))
        assert got == sorted((c[1], c[2], c[3]) for c in cands)
        assert torch.isfinite(r.estimate) and torch.isfinite(r.per_query).all()


def test_equivalent_float32_and_batch_consistency():
    s, y, grp, mask = random_batch(11, pad=False)
    full = matched_pair_calibration(s, y, grp, eps=0.2, ci="none")
    for b in range(s.shape[0]):
        one = matched_pair_calibration(s[b], y[b], grp[b], eps=0.2, ci="none")
        torch.testing.assert_close(one.estimate, full.per_query[b])
    r32 = matched_pair_calibration(s.float(), y.float(), grp, eps=0.2, ci="none")
    assert r32.estimate.dtype == torch.float32


# ----------------------------------------------------------------------------- variance
@pytest.mark.parametrize("seed", range(3))
def test_cluster_variance_matches_sandwich_loop(seed):
    s, y, grp, mask = random_batch(seed, B=5, N=10, levels=6)
    for kw in (dict(eps=0.35), dict(eps=0.35, browsing=RBP(0.7))):
        p = matched_pairs(s, y, grp, group=1, mask=mask, **kw)
        assert p.diff.numel() > 5
        for cluster in ("item", "query"):
            torch.testing.assert_close(mpc_cluster_variance(p, cluster=cluster),
                                       torch.tensor(ref_sandwich(p, cluster), dtype=torch.float64))
    # global item ids: the same item id recurs across lists (and pairs of the same two items in two lists)
    ids = torch.arange(10).repeat(5, 1)
    same_grp = torch.randint(0, 2, (10,), generator=torch.Generator().manual_seed(seed)).repeat(5, 1)
    p = matched_pairs(s, y, same_grp, group=1, eps=0.5)
    torch.testing.assert_close(mpc_cluster_variance(p, item_ids=ids),
                               torch.tensor(ref_sandwich(p, "item", ids), dtype=torch.float64))
    r = matched_pair_calibration(s, y, same_grp, group=1, eps=0.5, item_ids=ids, ci="cluster")
    torch.testing.assert_close(r.std_error ** 2, torch.tensor(ref_sandwich(p, "item", ids), dtype=torch.float64))
    z = 1.959963984540054
    torch.testing.assert_close(r.ci_high - r.estimate, z * r.std_error)
    torch.testing.assert_close(r.estimate - r.ci_low, z * r.std_error)


def test_cluster_variance_independent_pairs_is_robust_mean_variance():
    # disjoint pairs (no shared item): the sandwich is sum e^2 / n^2 (HC0 variance of a mean)
    s = torch.tensor([[1.0, 1.1], [2.0, 2.05], [0.3, 0.4]], dtype=torch.float64)
    y = torch.tensor([[3.0, 1.0], [0.0, 1.0], [2.0, 2.0]], dtype=torch.float64)
    grp = torch.tensor([[1, 0], [1, 0], [1, 0]])
    r = matched_pair_calibration(s, y, grp, eps=0.2, ci="cluster")
    d = torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(r.estimate, d.mean())
    torch.testing.assert_close(r.std_error ** 2, ((d - d.mean()) ** 2).sum() / 9)


def test_bootstrap_reproducible_and_matches_loop():
    s, y, grp, mask = random_batch(3, B=12, N=8)
    kw = dict(group=1, eps=0.3, mask=mask, ci="bootstrap", n_boot=50)
    a = matched_pair_calibration(s, y, grp, generator=torch.Generator().manual_seed(7), **kw)
    b = matched_pair_calibration(s, y, grp, generator=torch.Generator().manual_seed(7), **kw)
    c = matched_pair_calibration(s, y, grp, generator=torch.Generator().manual_seed(8), **kw)
    assert all(torch.equal(x, y_) for x, y_ in zip(a, b))
    assert not torch.equal(a.ci_low, c.ci_low) or not torch.equal(a.ci_high, c.ci_high)
    assert a.ci_low <= a.estimate <= a.ci_high
    # loop reference with the same draws: resample the queries that have pairs
    cands = ref_pairs(s, y, grp, mask, 1, eps=0.3)
    qs = sorted({c_[1] for c_ in cands})
    draws = torch.randint(0, len(qs), (50, len(qs)), generator=torch.Generator().manual_seed(7))
    reps = []
    for row in draws.tolist():
        num = den = 0.0
        for t in row:
            for c_ in cands:
                if c_[1] == qs[t]:
                    num += c_[4]
                    den += 1
        reps.append(num / den)
    reps = torch.tensor(reps, dtype=torch.float64)
    torch.testing.assert_close(a.ci_low, torch.quantile(reps, 0.025))
    torch.testing.assert_close(a.ci_high, torch.quantile(reps, 0.975))
    torch.testing.assert_close(a.std_error, reps.std())


def _synthetic(gen, delta, B=40, N=10):
    """Known MPC = delta: outcomes = query effect + delta 1(g) + item noise, scores independent of outcomes."""
    s = torch.rand(B, N, generator=gen, dtype=torch.float64)
    grp = torch.randint(0, 2, (B, N), generator=gen)
    y = 5 + torch.randn(B, 1, generator=gen, dtype=torch.float64) + delta * grp + \
        0.5 * torch.randn(B, N, generator=gen, dtype=torch.float64)
    return s, y.clamp(min=0), grp


def test_coverage_on_known_mpc():
    gen = torch.Generator().manual_seed(0)
    delta, sims = 0.3, 60
    hits = {"cluster": 0, "bootstrap": 0, "query": 0}
    for _ in range(sims):
        s, y, grp = _synthetic(gen, delta)
        for ci in hits:
            r = matched_pair_calibration(s, y, grp, group=1, eps=0.2, ci=ci, n_boot=200, generator=gen)
            hits[ci] += int(r.ci_low <= delta <= r.ci_high)
    for ci, h in hits.items():
        assert h / sims >= 0.85, (ci, h)
    # boosting the group lowers MPC, demoting raises it (003 §5 / App. B.1); here outcomes ignore scores, so
    # the shift enters through which pairs are matched: with a boost, g items matched below others had lower s.
    s, y, grp = _synthetic(torch.Generator().manual_seed(1), 0.0, B=200)
    y = y + 2 * s  # outcomes increase with the score
    est = [matched_pair_calibration(s + a * grp, y, grp, eps=0.1, ci="none").estimate for a in (0.1, 0.0, -0.1)]
    assert est[0] < est[1] < est[2]


def test_no_pairs_is_zero_and_invalid():
    r = matched_pair_calibration(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), torch.tensor([0, 0]),
                                 group=1, eps=1.0, ci="bootstrap")
    assert not r.valid and r.n_pairs.item() == 0 and r.estimate.item() == 0 and not r.per_query_valid
    assert r.ci_low.item() == 0 and r.ci_high.item() == 0
    r = matched_pair_calibration(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), torch.tensor([0, 0]),
                                 group=1, closest=3)
    assert not r.valid and r.eps.item() == 0


def test_k_is_a_deprecated_alias_of_closest():
    s, y, grp, mask = random_batch(0)
    want = matched_pair_calibration(s, y, grp, group=1, closest=4, mask=mask, ci="none")
    with pytest.warns(FutureWarning, match="closest"):
        got = matched_pair_calibration(s, y, grp, group=1, k=4, mask=mask, ci="none")
    assert got.n_pairs.item() == want.n_pairs.item() == 4
    torch.testing.assert_close(got.estimate, want.estimate)
    with pytest.raises(ValueError, match="`closest`"):
        matched_pairs(s, y, grp, group=1, closest=4, k=4, mask=mask)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("kw,match", [
    (dict(), "exactly one"),
    (dict(eps=0.1, closest=2), "exactly one"),
    (dict(eps=-0.1), "eps"),
    (dict(eps=float("nan")), "eps"),
    (dict(closest=0), "`closest`"),
    (dict(closest=2.0), "`closest`"),
    (dict(eps=0.1, group=1.5), "`group`"),
    (dict(eps=0.1, group=True), "`group`"),
    (dict(quantile=0.0), "quantile"),
    (dict(eps=0.1, ci="wald"), "`ci`"),
    (dict(eps=0.1, level=1.0), "level"),
    (dict(eps=0.1, ci="bootstrap", n_boot=1), "n_boot"),
    (dict(eps=0.1, generator=0), "generator"),
    (dict(eps=0.1, group=-1), "group"),
    (dict(eps=0.1, group=3, num_groups=2), "group"),
    (dict(eps=0.1, position_weight="bottom"), "position_weight"),
    (dict(eps=0.1, adjacent=1), "adjacent"),
    (dict(eps=0.1, mask=torch.ones(2, 3)), "mask"),
    (dict(eps=0.1, browsing="nope"), "browsing"),
])
def test_value_errors(kw, match):
    s = torch.tensor([[1.0, 2.0, 3.0], [1.0, 0.5, 0.2]])
    y = torch.tensor([[1.0, 2.0, 3.0], [1.0, 0.5, 0.2]])
    g = torch.tensor([[0, 1, 1], [1, 0, 0]])
    with pytest.raises(ValueError, match=match):
        matched_pair_calibration(s, y, g, **kw)


def test_value_errors_inputs():
    s = torch.tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="relevance"):
        matched_pair_calibration(s, torch.ones(1, 2), torch.tensor([[0, 1, 1]]), eps=0.1)
    with pytest.raises(ValueError, match="relevance"):
        matched_pair_calibration(s, -torch.ones(1, 3), torch.tensor([[0, 1, 1]]), eps=0.1)
    with pytest.raises(ValueError, match="groups"):
        matched_pair_calibration(s, torch.ones(1, 3), torch.full((1, 3, 2), 0.5), eps=0.1)
    with pytest.raises(ValueError, match="scores"):
        matched_pair_calibration(torch.tensor([[1.0, float("nan"), 3.0]]), torch.ones(1, 3),
                                 torch.tensor([[0, 1, 1]]), eps=0.1)
    with pytest.raises(ValueError, match="item_ids"):
        matched_pair_calibration(s, torch.ones(1, 3), torch.tensor([[1, 0, 0]]), eps=5.0,
                                 item_ids=torch.tensor([[0, 0, 1]]))
    with pytest.raises(ValueError, match="ordering"):
        matched_pair_calibration(s, torch.ones(1, 3), torch.tensor([[1, 0, 0]]), eps=5.0, adjacent=True,
                                 ordering="hard")


def test_ordering_argument_average_ties_adjacency():
    # three tied items: under Hard(ties="average") they share an expected position, so all count as adjacent
    s = torch.tensor([1.0, 1.0, 1.0])
    y = torch.tensor([1.0, 0.0, 2.0])
    g = torch.tensor([0, 1, 0])
    first = matched_pair_calibration(s, y, g, eps=0.0, adjacent=True, ci="none")
    avg = matched_pair_calibration(s, y, g, eps=0.0, adjacent=True, ci="none", ordering=Hard(ties="average"))
    assert first.n_pairs.item() == 2 and avg.n_pairs.item() == 2
    torch.testing.assert_close(avg.estimate, torch.tensor(-1.5))


def test_adjacent_matched_pairs_equal_a_plain_loop_over_all_pairs():
    """adjacent=True under the hard order: every pair (i in g, j known and not g) at consecutive positions with
    s(j) >= s(i), in (query, i, j) order, against a loop over all pairs (ties broken by index, as Hard())."""
    from torchfair.metrics.calibration import matched_pairs
    g_ = torch.Generator().manual_seed(0)
    for t in range(120):
        B, N = 3, int(torch.randint(1, 15, (), generator=g_))
        s = torch.randint(0, 5, (B, N), generator=g_).float() if t % 2 else torch.randn(B, N, generator=g_)
        r = torch.randint(0, 3, (B, N), generator=g_).float()
        grp = torch.randint(-1, 3, (B, N), generator=g_)
        m = torch.rand(B, N, generator=g_) < 0.85
        want = []
        for b in range(B):
            real = [k for k in range(N) if m[b, k]]
            order = sorted(real, key=lambda k: (-float(s[b, k]), k))
            pos = {k: p for p, k in enumerate(order)}
            for i in real:
                for j in real:
                    if grp[b, i] == 1 and grp[b, j] not in (1, -1) and abs(pos[i] - pos[j]) == 1 \
                            and s[b, j] >= s[b, i]:
                        want.append((b, i, j))
        for kw in ({"quantile": 1.0}, {"eps": 0.5}):
            p = matched_pairs(s, r, grp, group=1, adjacent=True, mask=m, num_groups=3, **kw)
            got = list(zip(p.query.tolist(), p.item_g.tolist(), p.item_other.tolist()))
            exp = [w for w in want if "eps" not in kw or float(s[w[0], w[2]] - s[w[0], w[1]]) <= 0.5]
            assert got == exp, (t, kw)
            assert torch.allclose(p.diff, torch.tensor([float(r[q, i] - r[q, j]) for q, i, j in exp]))
