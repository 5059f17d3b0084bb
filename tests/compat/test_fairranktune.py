"""torchfair.compat.fairranktune against FairRankTune 0.0.7 (documented toy values, and the real package if installed)."""
import math
import random
import warnings

import pytest
import torch

from torchfair.compat import fairranktune as ft
from torchfair.orderings import Hard, scores_from_ranking

RTOL = 1e-9

TOY = ["Joe", "Jack", "Nick", "David", "Mark", "Josh", "Dave", "Bella", "Heidi", "Amy"]
TOY_GROUPS = {x: "M" if i < 7 else "W" for i, x in enumerate(TOY)}


def close(a, b, rtol=RTOL, atol=1e-12):
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


# ------------------------------------------------------------------ documented toy example
def test_toy_exp():
    res = ft.EXP(TOY, TOY_GROUPS, "MinMaxRatio")
    d = res.to_dict()
    assert res.labels == ["M", "W"]
    assert close(d["M"], 0.5197142341886783) and close(d["W"], 0.3018532329225326)
    assert close(res.value, 0.5808061682084833)
    assert res.value.dtype == torch.float64


def test_toy_erbe_ndkl_awrf():
    d = ft.ERBE(TOY, TOY_GROUPS, 0.75, "MinMaxRatio").to_dict()
    assert close(d["M"], 0.86651611328125) and close(d["W"], 0.07717037200927734)
    assert close(ft.NDKL(TOY, TOY_GROUPS), 0.2925554332073208)
    assert close(ft.AWRF(TOY, TOY_GROUPS, 0.1, "MinMaxRatio").to_dict()["M"], 7.45290142857143)


def test_toy_tensor_forms_agree():
    ids = torch.arange(10)
    gt = torch.tensor([0] * 7 + [1] * 3)
    a = ft.EXP(ids, gt, "MinMaxRatio")  # integer tensor of item ids + tensor item -> group
    assert close(a.value, 0.5808061682084833)
    # float scores form: items in list order, ranked by score
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    scores = scores_from_ranking(perm).double()
    # item perm[k] sits at position k; positions >= 7 hold group 1
    groups = torch.empty(10, dtype=torch.long).scatter_(0, perm, (torch.arange(10) >= 7).long())
    b = ft.EXP(scores, groups, "MinMaxRatio")
    assert close(b.value, 0.5808061682084833)
    assert close(ft.NDKL(scores, groups), 0.2925554332073208)


def test_aggregators_and_strict_docs():
    v = torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64)
    assert close(ft.aggregate(v, "LTwo"), math.sqrt(0.04 + 0.25 + 0.64))
    assert close(ft.aggregate(v, "LTwo", strict_docs=True), 0.04 + 0.25 + 0.64)
    assert close(ft.aggregate(v, "Variance"), 0.06)
    assert close(ft.aggregate(v, "Variance", strict_docs=True), 0.09)
    assert close(ft.aggregate(v, "MaxAbsDiff"), 0.3)
    assert close(ft.aggregate(v, "MeanAbsDev"), 0.2)
    assert close(ft.aggregate(v, "MaxMinRatio"), 4.0)
    assert close(ft.MaxAbsDiff(torch.tensor([float("nan"), 1.0])), 0.0)  # FRT's scan skips NaN
    assert torch.isinf(ft.aggregate(torch.tensor([0.0, 1.0]), "MaxMinRatio"))
    with pytest.raises(ValueError):
        ft.EXP(TOY, TOY_GROUPS, "L2")
    # batched aggregation over leading dims
    assert ft.aggregate(torch.rand(5, 3), "MinMaxRatio").shape == (5,)


def test_input_errors():
    with pytest.raises(AssertionError):  # FRTInputError is also an AssertionError, like FRT's
        ft.EXPU(TOY, TOY_GROUPS, [[2.0] * 10], "MinMaxRatio")
    with pytest.raises(ValueError):
        ft.EXPRU(TOY, TOY_GROUPS, [[0.5] * 10], [[-0.1] * 10], "MinMaxRatio")
    with pytest.raises(KeyError):
        ft.EXP(TOY + ["Zoe"], TOY_GROUPS, "MinMaxRatio")
    # ERBR: FRT's binary check is dead code: any relevance is accepted
    ft.ERBR(TOY, TOY_GROUPS, [[0.3] * 10], 0.5, "MinMaxRatio")


def test_iaa_modes():
    rankings = [[0, 1, 2], [2, 1, 0]]
    rel = [[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]]
    att = [1 / math.log2(k + 2) for k in range(3)]
    first = sum(abs(a - r) for a, r in zip(att, rel[0]))
    assert close(ft.IAA(rankings, rel), first)
    per = ft.IAA(rankings, rel, per_ranking=True)
    assert per.shape == (2,) and close(per[1], sum(abs(a - r) for a, r in zip(att, rel[1])))
    # amortized (relevance is positional): item 0 gets att[0] + att[2] and relevance 1 + 1, item 2 relevance 0 + 0
    amort = abs(att[0] + att[2] - 2) + abs(2 * att[1] - 1) + abs(att[2] + att[0] - 0)
    assert close(ft.IAA(rankings, rel, strict_docs=True), amort)


# ------------------------------------------------------------------ against the real FairRankTune
def _random_case(seed, full=True):
    rng = random.Random(seed)
    n_items = rng.randint(6, 14)
    G = rng.randint(2, 4)
    labels = rng.choice([[f"g{i}" for i in range(G)], list(range(10, 10 + G))])
    items = [f"item{i}" for i in range(n_items)] if seed % 2 else list(range(100, 100 + n_items))
    grp = {it: labels[i % G] for i, it in enumerate(items)}  # every group non-empty
    B = rng.randint(1, 4)
    rankings = []
    for _ in range(B):
        r = items[:]
        rng.shuffle(r)
        if not full:
            r = r[:rng.randint(G, n_items)]
        rankings.append(r)
    rel = [[round(rng.random(), 3) for _ in r] for r in rankings]
    ctr = [[round(rng.random(), 3) for _ in r] for r in rankings]
    return rankings, grp, rel, ctr


def _df(pd, cols):
    return pd.DataFrame({i: pd.Series(c, dtype=object) for i, c in enumerate(cols)})


def _check(ours, theirs):
    tv, td = theirs
    assert close(ours.value, tv), (float(ours.value), tv)
    assert len(td) == len(ours.labels)
    od = ours.to_dict()
    for k, v in td.items():
        key = k.item() if hasattr(k, "item") else k
        assert close(od[key], v), (key, od[key], v)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("combo", ft.COMBOS)
def test_against_fairranktune(seed, combo):
    pd = pytest.importorskip("pandas")
    frt = pytest.importorskip("FairRankTune")
    M = frt.Metrics
    rankings, grp, rel, ctr = _random_case(seed, full=True)
    R, REL, CTR = _df(pd, rankings), _df(pd, rel), _df(pd, ctr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check(ft.EXP(rankings, grp, combo), M.EXP(R, grp, combo))
        _check(ft.EXPU(rankings, grp, rel, combo), M.EXPU(R, grp, REL, combo))
        _check(ft.EXPRU(rankings, grp, rel, ctr, combo), M.EXPRU(R, grp, REL, CTR, combo))
        _check(ft.AWRF(rankings, grp, 0.2, combo), M.AWRF(R, grp, 0.2, combo))
        _check(ft.ERBE(rankings, grp, 0.8, combo), M.ERBE(R, grp, 0.8, combo))
        _check(ft.ERBP(rankings, grp, 0.8, combo), M.ERBP(R, grp, 0.8, combo))
        _check(ft.ERBR(rankings, grp, rel, 0.8, combo), M.ERBR(R, grp, REL, 0.8, combo))
        _check(ft.ARP(rankings, grp, combo), M.ARP(R, grp, combo))
        # the DataFrame itself is accepted too
        _check(ft.ARP(R, grp, combo), M.ARP(R, grp, combo))
    if combo == "MinMaxRatio":
        assert close(ft.IAA(rankings, rel), M.IAA(R, REL))
        for b, r in enumerate(rankings):
            assert close(ft.NDKL([r], grp), M.NDKL(_df(pd, [r]), grp))
            assert close(ft.NDKL(rankings, grp)[b] if len(rankings) > 1 else ft.NDKL(rankings, grp),
                         M.NDKL(_df(pd, [r]), grp))


@pytest.mark.parametrize("seed", range(6))
def test_partial_rankings_against_fairranktune(seed):
    """Rankings of different lengths (NaN-padded columns in FRT), groups possibly absent from a ranking."""
    pd = pytest.importorskip("pandas")
    frt = pytest.importorskip("FairRankTune")
    M = frt.Metrics
    rankings, grp, rel, ctr = _random_case(100 + seed, full=False)
    R, REL, CTR = _df(pd, rankings), _df(pd, rel), _df(pd, ctr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for combo in ("MinMaxRatio", "Variance", "MaxAbsDiff"):
            _check(ft.EXP(rankings, grp, combo), M.EXP(R, grp, combo))
            _check(ft.EXPU(R, grp, REL, combo), M.EXPU(R, grp, REL, combo))
            _check(ft.EXPRU(rankings, grp, rel, ctr, combo), M.EXPRU(R, grp, REL, CTR, combo))
            _check(ft.AWRF(rankings, grp, 0.3, combo), M.AWRF(R, grp, 0.3, combo))
            _check(ft.ERBP(rankings, grp, 0.6, combo), M.ERBP(R, grp, 0.6, combo))
            _check(ft.ERBR(rankings, grp, rel, 0.6, combo), M.ERBR(R, grp, REL, 0.6, combo))
        assert close(ft.IAA(rankings, rel), M.IAA(R, REL))
        assert close(ft.NDKL(rankings[:1], grp), M.NDKL(_df(pd, rankings[:1]), grp))


def test_batched_tensors_against_fairranktune():
    """Integer item-id tensors [B, N] and float score tensors give FRT's numbers for many rankings at once."""
    pd = pytest.importorskip("pandas")
    frt = pytest.importorskip("FairRankTune")
    M = frt.Metrics
    g = torch.Generator().manual_seed(3)
    B, N, G = 20, 15, 3
    ranks = torch.stack([torch.randperm(N, generator=g) for _ in range(B)])
    item_groups = torch.randint(0, G, (N,), generator=g)
    item_groups[:G] = torch.arange(G)
    rel = torch.rand(B, N, generator=g, dtype=torch.float64)
    grp = {i: int(item_groups[i]) for i in range(N)}
    R, REL = _df(pd, ranks.tolist()), _df(pd, rel.tolist())
    scores = torch.stack([scores_from_ranking(r) for r in ranks]).double()
    gid = item_groups.expand(B, N)                    # list index = item id in the score form
    rel_items = torch.empty_like(rel).scatter_(1, ranks, rel)  # positional -> per item
    sizes = torch.bincount(item_groups, minlength=G)
    for combo in ft.COMBOS:
        want = M.ERBR(R, grp, REL, 0.9, combo)
        _check(ft.ERBR(ranks, item_groups, rel, 0.9, combo), want)
        _check(ft.ERBR(scores, gid, rel_items, 0.9, combo), want)
        want = M.ARP(R, grp, combo)
        _check(ft.ARP(ranks, grp, combo), want)
        _check(ft.ARP(scores, gid, combo), want)
        want = M.EXPU(R, grp, REL, combo)
        _check(ft.EXPU(scores, gid, rel_items, combo, group_sizes=sizes), want)
    nd = ft.NDKL(scores, gid)
    assert nd.shape == (B,)
    for b in (0, 7, 19):
        assert close(nd[b], M.NDKL(_df(pd, [ranks[b].tolist()]), grp))
    assert close(ft.IAA(scores, rel_items), M.IAA(R, REL))


# ------------------------------------------------------------------ the direct path against the ordering machinery
def _tensor_case(seed, soft=False, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    B, N, G = 5, 9, 3
    scores = torch.randint(0, 4, (B, N), generator=g).to(dtype)  # many ties: broken by list index
    mask = torch.rand(B, N, generator=g) > 0.25
    mask[:, 0] = True
    mask[2, 1:] = False                                             # a list of one item
    if soft:
        groups = torch.softmax(torch.randn(B, N, G, generator=g), -1) * 0.9  # partly unknown
    else:
        groups = torch.randint(-1, G, (B, N), generator=g)         # -1: unknown group
        groups[:, :G] = torch.arange(G)
    rel = torch.rand(B, N, generator=g, dtype=torch.float64).to(dtype)
    ctr = torch.rand(B, N, generator=g, dtype=torch.float64).to(dtype)
    return scores, groups, mask, rel, ctr


def _all_metrics(scores, groups, mask, rel, ctr, ordering):
    kw = dict(mask=mask, ordering=ordering)
    out = {}
    for combo in ("MinMaxRatio", "Variance"):
        out[f"EXP-{combo}"] = ft.EXP(scores, groups, combo, **kw)
        out[f"EXPU-{combo}"] = ft.EXPU(scores, groups, rel, combo, **kw)
        out[f"EXPRU-{combo}"] = ft.EXPRU(scores, groups, rel, ctr, combo, **kw)
        out[f"AWRF-{combo}"] = ft.AWRF(scores, groups, 0.3, combo, **kw)
        out[f"ERBE-{combo}"] = ft.ERBE(scores, groups, 0.7, combo, **kw)
        out[f"ERBP-{combo}"] = ft.ERBP(scores, groups, 0.7, combo, **kw)
        out[f"ERBR-{combo}"] = ft.ERBR(scores, groups, rel, 0.7, combo, **kw)
        out[f"ARP-{combo}"] = ft.ARP(scores, groups, combo, **kw)
    for b in range(scores.shape[0]):  # per ranking: one ranking whose ARP is nan (a lone group) hides the others
        out[f"ARP-row{b}"] = ft.ARP(scores[b:b + 1], groups[b:b + 1], "MaxMinDiff", mask=mask[b:b + 1],
                                    ordering=None if ordering is None else _row(ordering, b))
    out["NDKL"] = ft.NDKL(scores, groups, **kw)
    out["IAA"] = ft.IAA(scores, rel, **kw)
    out["IAA-per"] = ft.IAA(scores, rel, per_ranking=True, **kw)
    out["IAA-docs"] = ft.IAA(scores, rel, strict_docs=True, **kw)
    return out


def _row(ob, b):
    from torchfair.orderings import Hard
    return Hard()(ob.scores[b:b + 1], ob.mask[b:b + 1])


def _same(a, b, rtol):
    if isinstance(a, ft.FRTResult):
        assert a.labels == b.labels
        torch.testing.assert_close(a.per_group, b.per_group, rtol=rtol, atol=1e-12, equal_nan=True)
        a, b = a.value, b.value
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a, b, rtol=rtol, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("soft", [False, True], ids=["ids", "soft"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("seed", range(3))
def test_direct_path_equals_the_ordering_path(seed, soft, dtype):
    """``ordering=None`` reads the hard ranking directly; a precomputed ``Hard()`` ordered batch goes through the
    general ordering machinery (exposure, rank_parity, position matrix): same numbers, ties, padding, unknown
    groups and soft membership included."""
    from torchfair.orderings import Hard
    scores, groups, mask, rel, ctr = _tensor_case(seed, soft, dtype)
    work = torch.where(mask, scores, torch.zeros_like(scores)).to(torch.float32 if dtype != torch.float64 else dtype)
    general = _all_metrics(scores, groups, mask, rel, ctr, Hard()(work, mask))
    direct = _all_metrics(scores, groups, mask, rel, ctr, None)
    rtol = 1e-12 if dtype == torch.float64 else 1e-5
    for k in general:
        _same(direct[k], general[k], rtol)
    defined = [k for k in direct if k.startswith("ARP-row") and torch.isfinite(direct[k].per_group).all()]
    assert len(defined) >= 3  # the comparison of ARP is not vacuous


def test_id_tensors_with_padding_anywhere_equal_the_compacted_rankings():
    """Negative ids pad a ranking wherever they sit: the real ids keep their order."""
    ids = torch.tensor([[3, -1, 0, 4, -1, 1, 2], [2, 4, 1, 0, 3, -1, -1], [-1, 4, -1, 3, 2, 1, 0]])
    compact = [[3, 0, 4, 1, 2], [2, 4, 1, 0, 3], [4, 3, 2, 1, 0]]
    groups = {0: "a", 1: "b", 2: "a", 3: "c", 4: "b"}
    rel = torch.rand(3, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rel_compact = [[v for v, i in zip(r, row) if i >= 0] for r, row in zip(rel.tolist(), ids.tolist())]
    for fn in (ft.EXP, ft.ARP):
        _same(fn(ids, groups, "MaxMinDiff"), fn(compact, groups, "MaxMinDiff"), 1e-12)
    _same(ft.ERBR(ids, groups, rel, 0.5, "LTwo"), ft.ERBR(compact, groups, rel_compact, 0.5, "LTwo"), 1e-12)
    _same(ft.NDKL(ids, groups), ft.NDKL(compact, groups), 1e-12)
    _same(ft.IAA(ids, rel, per_ranking=True), ft.IAA(compact, rel_compact, per_ranking=True), 1e-12)
    # ARP by hand for the first ranking 3 0 4 1 2 (c a b b a): a wins 1 of its 6 mixed pairs... counted below
    order = ["c", "a", "b", "b", "a"]
    won = {lab: sum(1 for i, x in enumerate(order) for y in order[i + 1:] if x == lab and y != lab)
           for lab in "abc"}
    mixed = {lab: order.count(lab) * (5 - order.count(lab)) for lab in "abc"}
    one = ft.ARP(ids[:1], groups, "MaxMinDiff").to_dict()
    assert one == pytest.approx({lab: won[lab] / mixed[lab] for lab in "abc"}, rel=1e-12)


def test_relevance_range_check_of_the_direct_path():
    ids = torch.arange(4)
    with pytest.raises(AssertionError):
        ft.EXPU(ids, torch.tensor([0, 1, 0, 1]), torch.tensor([0.5, 1.5, 0.2, 0.1]))
    with pytest.raises(ValueError):  # a NaN does not hide a value out of range
        ft.EXPU(ids, torch.tensor([0, 1, 0, 1]), torch.tensor([float("nan"), 1.5, 0.2, 0.1]))
    ft.EXPU(ids, torch.tensor([0, 1, 0, 1]), torch.tensor([float("nan"), 1.0, 0.2, 0.1]))  # as FRT: NaN passes


# ------------------------------------------- ERBR with relevance FRT does not check (issue 28): FRT's numbers
_ERBR_RANKS = [[0, 1, 2, 3, 4, 5], [5, 3, 1, 0, 2, 4], [2, 4, 0, 1, 3, 5]]
_ERBR_GROUPS = [0, 1, 0, 1, 0, 1]


def _erbr_forms(rel, combo, decay=0.8, frt_form=True):
    """ERBR of ``rel`` (positional, as FRT's relevance_df) in every input form: FRT lists (with ``frt_form``),
    item-id tensors, and score tensors through the direct path and through the ordering machinery."""
    ranks = torch.tensor(_ERBR_RANKS)
    rel_t = torch.tensor(rel, dtype=torch.float64)
    scores = torch.stack([scores_from_ranking(r) for r in ranks]).double()
    gid = torch.tensor(_ERBR_GROUPS).expand(ranks.shape)  # list index = item id in the score form
    rel_items = torch.empty_like(rel_t).scatter_(1, ranks, rel_t)  # positional -> per item
    sizes = torch.tensor([3, 3])
    grp = dict(enumerate(_ERBR_GROUPS))
    out = {"frt": ft.ERBR(_ERBR_RANKS, grp, rel, decay, combo)} if frt_form else {}
    return {**out, "ids": ft.ERBR(ranks, torch.tensor(_ERBR_GROUPS), rel_t, decay, combo),
            "scores": ft.ERBR(scores, gid, rel_items, decay, combo, group_sizes=sizes),
            "ordering": ft.ERBR(scores, gid, rel_items, decay, combo, group_sizes=sizes, ordering=Hard(ties="average"))}


@pytest.mark.parametrize("bad", [math.inf, -math.inf, -0.7, -5.0])
@pytest.mark.parametrize("combo", ["MinMaxRatio", "MaxMinDiff", "Variance"])
def test_erbr_accepts_infinite_and_negative_relevance_as_fairranktune(bad, combo):
    """FRT 0.0.7 accepts any relevance in ERBR (its check is dead code): an infinite or negative value is summed into
    its group only (-5 makes group 0's relevance sum negative).  Every form gives FRT's numbers."""
    pd = pytest.importorskip("pandas")
    frt = pytest.importorskip("FairRankTune")
    rel = [[0.5, 1.0, bad, 0.2, 0.0, 1.0], [1.0, 0.0, 0.3, 0.4, 0.5, 0.6], [0.1, 0.9, 0.8, 0.7, 0.6, 0.5]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = frt.Metrics.ERBR(_df(pd, _ERBR_RANKS), dict(enumerate(_ERBR_GROUPS)), _df(pd, rel), 0.8, combo)
        got = _erbr_forms(rel, combo)
    for form, res in got.items():
        _check(res, want)
        assert math.isfinite(res.to_dict()[1]), form  # the bad value stays in its own group (item 2: group 0)


def test_erbr_nan_relevance_as_fairranktune():
    """FRT drops a NaN relevance cell: the FRT form does the same (a column that becomes too short is an
    IndexError in both; a NaN under a ranking's padding is simply dropped).  A tensor form has no dropped cells: the
    NaN makes its group's value NaN and leaves the other group's value as FRT computes it for any finite value."""
    pd = pytest.importorskip("pandas")
    frt = pytest.importorskip("FairRankTune")
    grp = dict(enumerate(_ERBR_GROUPS))
    nan = float("nan")
    rel = [[0.5, 1.0, nan, 0.2, 0.0, 1.0], [1.0, 0.0, 0.3, 0.4, 0.5, 0.6], [0.1, 0.9, 0.8, 0.7, 0.6, 0.5]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(IndexError):
            frt.Metrics.ERBR(_df(pd, _ERBR_RANKS), grp, _df(pd, rel), 0.8, "MaxMinDiff")
        with pytest.raises(IndexError, match="`relevance`"):
            ft.ERBR(_ERBR_RANKS, grp, rel, 0.8, "MaxMinDiff")
        # a shorter ranking (NaN-padded column in FRT) whose relevance column has a NaN cell beyond it
        short = [_ERBR_RANKS[0], _ERBR_RANKS[1][:4], _ERBR_RANKS[2]]
        rel_short = [rel[1], [1.0, 0.0, 0.3, 0.4, nan, 0.6], rel[2]]
        want = frt.Metrics.ERBR(_df(pd, short), grp, _df(pd, rel_short), 0.8, "MaxMinDiff")
        _check(ft.ERBR(short, grp, rel_short, 0.8, "MaxMinDiff"), want)
        got = _erbr_forms(rel, "MaxMinDiff", frt_form=False)
        for finite in (0.0, 3.0):
            rel_f = [[finite if x != x else x for x in row] for row in rel]
            want = frt.Metrics.ERBR(_df(pd, _ERBR_RANKS), grp, _df(pd, rel_f), 0.8, "MaxMinDiff")[1]
            for form in ("ids", "scores", "ordering"):
                per_group = got[form].to_dict()
                assert math.isnan(per_group[0]) and math.isnan(float(got[form].value)), form
                assert close(per_group[1], want[1]), (form, per_group[1], want[1])


@pytest.mark.parametrize("bad, name", [
    (torch.tensor([[1.0, float("nan"), 0.0]]), "scores"), (torch.tensor([[1.0, float("inf"), 0.0]]), "scores"),
    (torch.ones(1, 1, 3), "rankings"), (torch.tensor([[True, False, True]]), "rankings"),
], ids=["nan-score", "inf-score", "3d", "bool"])
@pytest.mark.parametrize("ordering", [None, Hard(ties="average")], ids=["direct", "ordering"])
def test_errors_name_rankings_or_scores_as_documented(ordering, bad, name):
    """Module docstring: type and shape errors of the first argument name FRT's ``rankings``; the value checks of
    a score tensor name ``scores``, on the direct path and on the ordering path."""
    with pytest.raises(ValueError, match=f"`{name}`"):
        ft.EXP(bad, torch.tensor([[0, 1, 0]]), ordering=ordering)
