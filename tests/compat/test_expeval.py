"""torchfair.compat.expeval against expeval's own numbers and an independent plain-Python loop.

``EXPEVAL_PRINTED`` holds what expeval.py (github.com/diazf/expeval, commit 69ab070) printed for the qrels and run
below, one row per command line; the loop ``ref`` follows expeval's documented semantics (the module docstring
of torchfair.compat.expeval), written with dicts as expeval reads TREC files.
"""
import itertools
import math
import random
from collections import defaultdict

import pytest
import torch

from torchfair.compat.expeval import expeval

# qrels (expeval layout 'qid gid docid rel'):   q1: d1 0 1 | d2 1 1 | d3 0 0 | d4 1 0
#                                               q2: d1 0 2 | d2 0|1 1 | d3 1 0 | d4 (no group) 1 | d5 1 0
# run: q1 one ranking d1 d2 d3 d4; q2 two samples  a: d3 d1 d4 d2 d5   b: d5 d2 d1 d3 d4
QRELS = {"q1": {"d1": 1, "d2": 1, "d3": 0, "d4": 0}, "q2": {"d1": 2, "d2": 1, "d3": 0, "d4": 1, "d5": 0}}
GIDS = {"q1": {"d1": [0], "d2": [1], "d3": [0], "d4": [1]},
        "q2": {"d1": [0], "d2": [0, 1], "d3": [1], "d4": [-1], "d5": [1]}}
RUNS = {"q1": [["d1", "d2", "d3", "d4"]],
        "q2": [["d3", "d1", "d4", "d2", "d5"], ["d5", "d2", "d1", "d3", "d4"]]}
# command line -> (disparity, relevance, difference) for q1 then q2, as printed (%f)
EXPEVAL_PRINTED = {
    "-C -U": (1.067383, 0.785645, 0.281738, 0.692947, 0.376938, 0.988174),
    "-C -U -G": (1.208008, 0.902832, 0.305176, 1.990799, 0.910370, 1.563675),
    "-U -G": (1.062500, 0.781250, 0.281250, 0.409729, 0.720947, 0.353577),
    "-U": (1.067383, 0.781250, 0.286133, 0.692947, 0.364990, 1.011795),
    "-C": (0.706089, 1.000000, 0.172059, 0.345985, 0.339941, 0.481040),
    "-C -G": (-1.394176, 1.000000, 0.222499, -0.790433, 1.000000, 0.291814),
    "": (0.800537, 1.000000, 0.135314, 0.519711, 0.347998, 0.424738),
    "-G": (-1.500000, 1.000000, 0.183673, -1.183780, 1.000000, 0.065084),
    "-C -U -u rbp -p 0.8": (2.311744, 2.283552, 0.028192, 2.292430, 2.243313, 0.267278),
    "-C -U -B -G": (1.208008, 0.902832, 0.305176, 1.990799, 1.128998, 0.902298),
}


def flags_to_kwargs(flags: str) -> dict:
    """The documented correspondence between expeval's command line and the torchfair call."""
    f = flags.split()
    kw = dict(complete="-C" in f, normalize="-U" not in f, binarize="-B" in f)
    if "-u" in f:
        kw["user_model"] = f[f.index("-u") + 1]
    if "-p" in f:
        kw["patience"] = float(f[f.index("-p") + 1])
    if "-r" in f:
        kw["utility"] = float(f[f.index("-r") + 1])
    return kw


def tensors(qrels, gids, runs):
    """Padded [B, N] grades, [S, B, N] 1-based ranks, [B, N, G+1] multi-hot membership (last: no label)."""
    qids = sorted(qrels)
    docs = {q: sorted(qrels[q]) for q in qids}
    B, N = len(qids), max(len(d) for d in docs.values())
    S = max(len(runs[q]) for q in qids)
    G = 1 + max(g for q in qids for gs in gids[q].values() for g in gs)
    rel = torch.zeros(B, N, dtype=torch.float64)
    mask = torch.zeros(B, N, dtype=torch.bool)
    ranks = torch.zeros(S, B, N, dtype=torch.long)
    memb = torch.zeros(B, N, G + 1, dtype=torch.float64)
    for b, q in enumerate(qids):
        for i, d in enumerate(docs[q]):
            rel[b, i], mask[b, i] = qrels[q][d], True
            for g in gids[q][d]:
                memb[b, i, g if g >= 0 else G] = 1
        for s in range(S):
            rk = runs[q][s % len(runs[q])]  # one ranking given S times: the same average
            for pos, d in enumerate(rk):
                ranks[s, b, docs[q].index(d)] = pos + 1
            for i in range(len(docs[q]), N):
                ranks[s, b, i] = N + 1 + i
    return rel, mask, ranks, memb


def _series(x, n):
    return 1.0 / (1.0 - x) if n == math.inf else (1.0 - x ** n) / (1.0 - x)


def ref(samples, qrels, gids, *, user_model="gerr", patience=0.5, utility=0.5, complete=True, binarize=False,
        normalize=False, group=False):
    """One query, plain Python: (disparity, relevance, difference), or None where expeval skips the query."""
    p, u = patience, utility
    grade = {d: (1 if binarize and g > 0 else g) for d, g in qrels.items()}
    kept = {d: g for d, g in grade.items() if complete or g > 0}
    if not kept:
        return None

    def weight(i, rel_above):
        return p ** i if user_model == "rbp" else p ** i * (1 - u) ** rel_above

    run = defaultdict(float)
    for rk in samples:
        above = 0
        for i, d in enumerate(rk):
            run[d] += weight(i, above) / len(samples)
            above += grade.get(d, 0) > 0
    ideal = sorted(kept, key=lambda d: -kept[d])
    w, above = [], 0
    for i, d in enumerate(ideal):
        w.append(weight(i, above))
        above += kept[d] > 0
    target = {}
    for level in set(kept.values()):
        pos = [i for i, d in enumerate(ideal) if kept[d] == level]
        for d in kept:
            if kept[d] == level:
                target[d] = sum(w[i] for i in pos) / len(pos)
    if group:
        x, y = defaultdict(float), defaultdict(float)
        for d in kept:
            for g in gids[d]:
                x[g] += run.get(d, 0.0)
                y[g] += target[d]
    else:
        x, y = run, target
    keys = set(x) | set(y)
    D = sum(v * v for v in x.values())
    R = sum(x.get(k, 0.0) * y.get(k, 0.0) for k in keys)
    L = sum((x.get(k, 0.0) - y.get(k, 0.0)) ** 2 for k in keys)
    if not normalize:
        return D, R, L
    pp = p if user_model == "rbp" else p * u
    tn = sum(v * v for v in y.values())
    if group:
        k, r = len(y), sum(1 for g in grade.values() if g > 0)
        mass = _series(p, r)
        d_lb, d_ub = (0.0, 0.0) if k == 1 else (k * _series(pp, r) ** 2, k * mass ** 2)
        r_lb = r_ub = 0.0
        l_lb, l_ub = 0.0, max(tn, sum((mass - v) ** 2 for v in y.values()))
    else:
        n = len(kept) if complete else math.inf
        ts = sorted(target.values())
        d_ub = _series(p * p, n)
        d_lb = 0.0 if n == math.inf else _series(pp, n) ** 2 / n
        r_ub = tn
        r_lb = 0.0 if n == math.inf else sum(pp ** i * t for i, t in enumerate(ts))
        if len(set(kept.values())) <= 1:
            r_lb = r_ub = 0.0
        l_lb = 0.0
        l_ub = tn + _series(pp, math.inf) if n == math.inf else sum((pp ** i - t) ** 2 for i, t in enumerate(ts))

    def norm(v, lb, ub, default):
        return default if lb == ub else (v - lb) / (ub - lb)

    return norm(D, d_lb, d_ub, 0.0), norm(R, r_lb, r_ub, 1.0), norm(L, l_lb, l_ub, 0.0)


@pytest.mark.parametrize("flags", list(EXPEVAL_PRINTED))
def test_every_flag_combination_gives_expevals_printed_numbers(flags):
    rel, mask, ranks, memb = tensors(QRELS, GIDS, RUNS)
    kw = flags_to_kwargs(flags)
    ee = expeval(ranks, rel, memb if "-G" in flags.split() else None, mask=mask, **kw)
    got = [float(v[b]) for b in range(2) for v in (ee.disparity, ee.relevance, ee.loss)]
    assert got == pytest.approx(EXPEVAL_PRINTED[flags], abs=1e-6)
    # and the plain loop agrees to rounding
    want = [x for q in ("q1", "q2") for x in ref(RUNS[q], QRELS[q], GIDS[q], group="-G" in flags.split(), **kw)]
    assert got == pytest.approx(want, abs=1e-12)


def test_defaults_are_expevals_defaults_in_the_reranking_setting():
    # expeval's defaults: -u gerr -p 0.5 -r 0.5; for [B, N] lists (every document judged) expeval says to use
    # -C; -U gives the raw values.  The hand-derived values of the module docstring:
    # run exposures (1, .25, .0625, .03125); targets (.625, .625, .046875, .046875)
    ee = expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]))
    e = [1.0, 0.25, 0.0625, 0.03125]
    t = [(1 - 0.25 ** 2) / (2 * 0.75)] * 2 + [0.25 * (0.25 - 0.0625) / (2 * 0.5)] * 2
    assert float(ee.disparity) == pytest.approx(sum(x * x for x in e), abs=0) == 1.0673828125
    assert float(ee.relevance) == pytest.approx(sum(a * b for a, b in zip(e, t))) == pytest.approx(0.78564453125)
    assert float(ee.loss) == pytest.approx(sum((a - b) ** 2 for a, b in zip(e, t))) == pytest.approx(0.28173828125)
    # group mode under -C sums over all documents (expeval -C -G), not only the relevant ones
    g = torch.tensor([0, 1, 0, 1])
    all_docs = expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]), g)
    x = [e[0] + e[2], e[1] + e[3]]
    assert float(all_docs.disparity) == pytest.approx(x[0] ** 2 + x[1] ** 2)
    rel_only = expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]), g, complete=False)
    assert float(rel_only.disparity) == pytest.approx(e[0] ** 2 + e[1] ** 2)
    # the relevant_only override keeps -C targets but sums relevant documents only
    over = expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]), g, relevant_only=True)
    assert float(over.disparity) == pytest.approx(e[0] ** 2 + e[1] ** 2)


def test_unlabelled_documents_are_a_group_as_in_expeval():
    rel = torch.tensor([1., 1., 0., 1.])
    ranks = torch.tensor([1, 2, 3, 4])
    ids = torch.tensor([0, 1, 0, -1])
    memb = torch.tensor([[1., 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]])
    a = expeval(ranks, rel, ids)
    b = expeval(ranks, rel, memb)
    torch.testing.assert_close(torch.stack(list(a)), torch.stack(list(b)))
    docs = ["d1", "d2", "d3", "d4"]
    want = ref([docs], dict(zip(docs, [1, 1, 0, 1])), dict(zip(docs, [[0], [1], [0], [-1]])), group=True)
    assert [float(a.disparity), float(a.relevance), float(a.loss)] == pytest.approx(want)
    c = expeval(ranks, rel, ids, unlabeled_group=False)  # torchfair's convention: -1 in no group
    assert float(c.disparity) < float(a.disparity)


def test_random_lists_every_flag_against_the_loop():
    rng = random.Random(7)
    for trial in range(15):
        B, S = rng.randint(1, 3), rng.randint(1, 3)
        qrels, gids, runs = {}, {}, {}
        for b in range(B):
            n = rng.randint(1, 6)
            docs = [f"d{i}" for i in range(n)]
            qrels[f"q{b}"] = {d: rng.choice([0, 0, 1, 2, 3]) for d in docs}
            gids[f"q{b}"] = {d: rng.choice([[0], [1], [2], [0, 1], [-1]]) for d in docs}
            runs[f"q{b}"] = [rng.sample(docs, n) for _ in range(S)]
        rel, mask, ranks, memb = tensors(qrels, gids, runs)
        for um, C, Bz, U, G in itertools.product(("gerr", "rbp"), (True, False), (False, True), (True, False),
                                                 (False, True)):
            kw = dict(user_model=um, complete=C, binarize=Bz, normalize=not U, patience=rng.choice([0.5, 0.8]),
                      utility=rng.choice([0.5, 0.3]))
            ee, ok = expeval(ranks, rel, memb if G else None, mask=mask, return_valid=True, **kw)
            for b, q in enumerate(sorted(qrels)):
                want = ref(runs[q], qrels[q], gids[q], group=G, **kw)
                if want is None:
                    assert not ok[b] and float(ee.loss[b]) == 0.0
                    continue
                assert ok[b]
                got = [float(ee.disparity[b]), float(ee.relevance[b]), float(ee.loss[b])]
                assert got == pytest.approx(list(want), rel=1e-9, abs=1e-12), (trial, kw, G, q)


def test_reduction_and_validity():
    rel = torch.tensor([[1., 0., 0.], [0., 0., 0.]])
    ranks = torch.tensor([[1, 2, 3], [3, 2, 1]])
    per, ok = expeval(ranks, rel, complete=False, return_valid=True)
    assert ok.tolist() == [True, False]
    mean = expeval(ranks, rel, complete=False, reduction="mean")
    torch.testing.assert_close(mean.loss, per.loss[0])  # the skipped query does not count
    assert expeval(ranks, rel).loss.shape == (2,)


@pytest.mark.parametrize("kw, name", [
    (dict(user_model="dcg"), "user_model"), (dict(patience=0.0), "patience"), (dict(patience=float("nan")), "patience"),
    (dict(utility=1.5), "utility"), (dict(complete="yes"), "complete"), (dict(reduction="foo"), "reduction"),
    (dict(patience=1.0, normalize=True), "patience"),
], ids=["user_model", "patience-0", "patience-nan", "utility", "complete", "reduction", "patience-1-normalized"])
def test_a_bad_option_names_itself(kw, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]), **kw)


def test_validation():
    r, rel = torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.])
    with pytest.raises(ValueError, match="`groups`"):
        expeval(r, rel, torch.tensor([0, 1, 0, -2]))
    with pytest.raises(ValueError, match="`relevance`"):
        expeval(r, torch.tensor([1., -1., 0., 0.]))


@pytest.mark.parametrize("garbage", [7, -5], ids=["id-past-num_groups", "id-below--1"])
def test_padded_slots_may_hold_any_group_id(garbage):
    # a padded slot is not read: the values equal those of the list without it
    from torchfair.compat.expeval import expeval

    ranks = torch.tensor([[1, 2, 3, 4]])
    rel = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
    groups = torch.tensor([[0, 1, 1, garbage]])
    mask = torch.tensor([[True, True, True, False]])
    padded = expeval(ranks, rel, groups, num_groups=2, mask=mask)
    alone = expeval(ranks[:, :3], rel[:, :3], groups[:, :3], num_groups=2)
    for key in alone._fields if hasattr(alone, "_fields") else alone:
        a, b = (getattr(alone, key), getattr(padded, key)) if hasattr(alone, "_fields") else (alone[key], padded[key])
        assert torch.allclose(torch.as_tensor(a), torch.as_tensor(b)), key
