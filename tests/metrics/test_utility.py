"""Utility measures (torchfair.metrics.utility) against plain-loop references and established implementations."""
import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchfair.metrics.utility import (average_precision, dcg, err, ideal_dcg, ideal_ranking, mrr, ndcg, precision,
                                      r_precision, rbp, recall)
from torchfair.orderings import Hard

GEN = torch.Generator().manual_seed(0)


# ------------------------------------------------------------------------------------------ plain references
def _ranked(scores, rel):
    """Relevances in ranked order, ties broken by index (stable descending sort)."""
    idx = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    return [float(rel[i]) for i in idx]


def ref_dcg(scores, rel, k=None, gain="exponential"):
    r = _ranked(scores, rel)
    k = len(r) if k is None else k
    g = (lambda x: 2 ** x - 1) if gain == "exponential" else (lambda x: x)
    return sum(g(x) / math.log2(pos + 2) for pos, x in enumerate(r) if pos < k)


def ref_ndcg(scores, rel, k=None, gain="exponential"):
    ideal = ref_dcg(list(rel), rel, k, gain)
    return 0.0 if ideal == 0 else ref_dcg(scores, rel, k, gain) / ideal


def ref_precision(scores, rel, k, thr=0.0):
    r = _ranked(scores, rel)
    return sum(1 for x in r[:k] if x > thr) / k


def ref_recall(scores, rel, k, thr=0.0):
    r = _ranked(scores, rel)
    n_rel = sum(1 for x in r if x > thr)
    return 0.0 if n_rel == 0 else sum(1 for x in r[:k] if x > thr) / n_rel


def ref_rr(scores, rel, thr=0.0):
    for pos, x in enumerate(_ranked(scores, rel)):
        if x > thr:
            return 1.0 / (pos + 1)
    return 0.0


def ref_rbp(scores, rel, p):
    return (1 - p) * sum(p ** pos * x for pos, x in enumerate(_ranked(scores, rel)))


def ref_err(scores, rel, gmax):
    out, survive = 0.0, 1.0
    for pos, x in enumerate(_ranked(scores, rel)):
        R = (2 ** x - 1) / 2 ** gmax
        out += survive * R / (pos + 1)
        survive *= 1 - R
    return out


def _batch(B=6, N=9, grades=4, tie_scores=False):
    rel = torch.randint(0, grades, (B, N), generator=GEN).double()
    if tie_scores:
        scores = torch.randint(0, 3, (B, N), generator=GEN).double()
    else:
        scores = torch.randn(B, N, generator=GEN, dtype=torch.float64)
    rel[0] = 0.0  # one list without relevant item
    return scores, rel


# ------------------------------------------------------------------------------------------ references
@pytest.mark.parametrize("k", [None, 1, 3, 20])
@pytest.mark.parametrize("gain", ["exponential", "linear"])
def test_dcg_ndcg_match_loops(k, gain):
    s, r = _batch(tie_scores=True)  # default Hard(): ties broken by index, like the reference
    got_d = dcg(s, r, k=k, gain=gain)
    got_n, valid = ndcg(s, r, k=k, gain=gain, return_valid=True)
    for b in range(s.shape[0]):
        assert got_d[b].item() == pytest.approx(ref_dcg(s[b], r[b], k, gain))
        assert got_n[b].item() == pytest.approx(ref_ndcg(s[b], r[b], k, gain))
    assert valid.tolist() == [bool(r[b].sum() > 0) for b in range(s.shape[0])]
    assert got_n[0] == 0 and not valid[0]


@pytest.mark.parametrize("k", [1, 3, 5, 12])
def test_precision_recall_mrr_match_loops(k):
    s, r = _batch()
    p = precision(s, r, k=k, threshold=1.0)
    rc, rv = recall(s, r, k=k, threshold=1.0, return_valid=True)
    rr, mv = mrr(s, r, threshold=1.0, return_valid=True)
    for b in range(s.shape[0]):
        assert p[b].item() == pytest.approx(ref_precision(s[b], r[b], k, 1.0))
        assert rc[b].item() == pytest.approx(ref_recall(s[b], r[b], k, 1.0))
        assert rr[b].item() == pytest.approx(ref_rr(s[b], r[b], 1.0))
        assert bool(rv[b]) == bool(mv[b]) == bool((r[b] > 1.0).any())


@pytest.mark.parametrize("p", [0.5, 0.8, 0.95])
def test_rbp_err_match_loops(p):
    s, r = _batch()
    got_rbp = rbp(s, r, p=p)
    got_err = err(s, r, max_grade=3)
    for b in range(s.shape[0]):
        assert got_rbp[b].item() == pytest.approx(ref_rbp(s[b], r[b], p))
        assert got_err[b].item() == pytest.approx(ref_err(s[b], r[b], 3))


# ------------------------------------------------------------------------------------------ worked numbers
def test_worked_numbers():
    s = torch.tensor([3.0, 2.0, 1.0])
    r = torch.tensor([1.0, 0.0, 2.0])
    # gains 1, 0, 3 at discounts 1, 1/log2(3), 1/2
    assert dcg(s, r).item() == pytest.approx(1 + 3 / 2)
    # ideal: 3, 1, 0 -> 3 + 1/log2(3)
    assert ndcg(s, r).item() == pytest.approx(2.5 / (3 + 1 / math.log2(3)))
    assert ndcg(s, r, gain="linear").item() == pytest.approx((1 + 1) / (2 + 1 / math.log2(3)))
    assert ndcg(s, r, k=1).item() == pytest.approx(1 / 3)
    assert precision(s, r, k=2).item() == pytest.approx(0.5)
    assert precision(s, r, k=5).item() == pytest.approx(2 / 5)
    assert precision(s, r, k=5, adaptive_k=True).item() == pytest.approx(2 / 3)
    assert recall(s, r, k=1).item() == pytest.approx(0.5)
    assert mrr(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([0.0, 0.0, 1.0])).item() == pytest.approx(1 / 3)
    assert rbp(s, r, p=0.5).item() == pytest.approx(0.5 * (1 + 0.25 * 2))
    # ERR, g_max = 2: R = 1/4, 0, 3/4 -> 1/4 + (3/4)(3/4)/3
    assert err(s, r, max_grade=2).item() == pytest.approx(0.25 + 0.75 * 0.75 / 3)
    assert err(s, r).item() == pytest.approx(0.25 + 0.75 * 0.75 / 3)  # max_grade defaults to max relevance


def test_perfect_ranking_ndcg_one_and_k_cut():
    r = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert ndcg(r.clone(), r).item() == pytest.approx(1.0)
    assert ndcg(-r, r, k=4).item() < 1.0
    assert err(r, r, k=1, max_grade=3).item() == pytest.approx(7 / 8)


# ------------------------------------------------------------------------------------------ ties and masks
def test_average_ties_are_mean_over_orders():
    import itertools
    s = torch.tensor([1.0, 1.0, 1.0, 0.5])
    r = torch.tensor([0.0, 1.0, 2.0, 1.0])
    for k in (None, 2):
        orders = list(itertools.permutations(range(3)))
        refs_n, refs_rr = [], []
        for perm in orders:
            s_p = torch.tensor([0.0, 0.0, 0.0, 0.5])
            for pos, i in enumerate(perm):
                s_p[i] = 3.0 - pos
            refs_n.append(ndcg(s_p, r, k=k).item())
            refs_rr.append(mrr(s_p, r, k=k, threshold=1.5).item())
        assert ndcg(s, r, k=k, ordering=Hard("average")).item() == pytest.approx(sum(refs_n) / len(refs_n))
        assert mrr(s, r, k=k, threshold=1.5, ordering=Hard("average")).item() == pytest.approx(
            sum(refs_rr) / len(refs_rr))
    # two relevant items tied at the top of three: E[1/(first+1)]
    got = mrr(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0, 0.0, 1.0]), ordering=Hard("average"))
    assert got.item() == pytest.approx((4 * 1 + 2 * 0.5) / 6)


def test_mask_equals_truncated_list():
    s, r = _batch(B=4, N=7)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[:, 5:] = False
    s_pad, r_pad = s.clone(), r.clone()
    s_pad[:, 5:] = float("nan")  # padded entries may hold anything
    r_pad[:, 5:] = 100.0
    for fn, kw in [(dcg, {}), (ndcg, {"k": 3}), (precision, {"k": 3}), (recall, {"k": 2}), (mrr, {}),
                   (rbp, {}), (err, {"max_grade": 3})]:
        torch.testing.assert_close(fn(s_pad, r_pad, mask=mask, **kw), fn(s[:, :5], r[:, :5], **kw))


def test_reduction_mean_skips_undefined():
    s = torch.tensor([[1.0, 2.0], [1.0, 2.0]])
    r = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    v, valid = ndcg(s, r, reduction="mean", return_valid=True)
    assert v.item() == pytest.approx(1 / math.log2(3)) and bool(valid)
    assert not torch.isnan(ndcg(s, r)).any()


def test_soft_ordering_gradient_through_exposure():
    from torchfair.orderings.base import OrderedBatch

    class _Soft(OrderedBatch):  # a minimal differentiable ordering: expected positions from pairwise sigmoids
        def __init__(self, s, m):
            self.scores, self.mask = s, m
            d = torch.sigmoid(s[:, None, :] - s[:, :, None])  # [i, j] = P(j above i)
            eye = torch.eye(s.shape[1], dtype=s.dtype)
            self.pos = (d * (1 - eye)).sum(-1)

        def expected_positions(self):
            return self.pos

        def exposure(self, browsing, relevance=None):
            return browsing.weight(self.pos) * self.mask

        def pair_context(self, *a):
            raise NotImplementedError

        def pair_block(self, *a):
            raise NotImplementedError

        def position_matrix(self):
            raise NotImplementedError

    s = torch.tensor([[0.1, 0.5, -0.3]], requires_grad=True)
    r = torch.tensor([[2.0, 0.0, 1.0]])
    ob = _Soft(s, torch.ones(1, 3, dtype=torch.bool))
    v = ndcg(s, r, k=2, ordering=ob).sum() + precision(s, r, k=2, ordering=ob).sum() + rbp(s, r, ordering=ob).sum()
    v.backward()
    assert s.grad is not None and torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0
    assert s.grad[0, 0] > 0 and s.grad[0, 1] < 0  # raise the most relevant item, lower the irrelevant one


# ------------------------------------------------------------------------------------------ established libraries
def _ndcg_case():
    g = torch.Generator().manual_seed(3)
    rel = torch.randint(0, 4, (8, 12), generator=g)
    scores = torch.randint(0, 5, (8, 12), generator=g).double() / 4  # many tied scores
    rel[2] = 0  # no relevant item: sklearn and torchmetrics score 0 and count it in the mean
    return scores, rel


@pytest.mark.parametrize("k", [None, 1, 3, 5])
def test_ndcg_matches_sklearn(k):
    """sklearn.metrics.ndcg_score: linear gains, 1/log2(pos+2) discount, tied scores averaged (ignore_ties=False),
    all-irrelevant lists scored 0 *and counted* in the mean.  We match with gain="linear",
    ordering=Hard(ties="average"); sklearn's mean equals ours only with the undefined list counted as 0."""
    sk = pytest.importorskip("sklearn.metrics")
    scores, rel = _ndcg_case()
    ours, valid = ndcg(scores, rel.double(), k=k, gain="linear", ordering=Hard("average"), return_valid=True)
    for b in range(scores.shape[0]):
        want = sk.ndcg_score(rel[b:b + 1].numpy(), scores[b:b + 1].numpy(), k=k)
        assert ours[b].item() == pytest.approx(want, abs=1e-9)
    assert ours.mean().item() == pytest.approx(sk.ndcg_score(rel.numpy(), scores.numpy(), k=k), abs=1e-9)
    assert not valid[2]
    # ignore_ties=True is a stable-or-not argsort in sklearn: compare on strictly ordered scores only
    distinct = torch.randn(8, 12, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ours = ndcg(distinct, rel.double(), k=k, gain="linear")
    want = sk.ndcg_score(rel.numpy(), distinct.numpy(), k=k, ignore_ties=True)
    assert ours.mean().item() == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("k", [None, 1, 3, 5])
def test_ndcg_matches_torchmetrics(k):
    """torchmetrics.functional.retrieval_normalized_dcg: one query per call, integer/bool targets, linear gains,
    tied predictions averaged (a port of sklearn), 0 for a query without relevant item."""
    tm = pytest.importorskip("torchmetrics.functional.retrieval")
    scores, rel = _ndcg_case()
    ours = ndcg(scores.float(), rel.float(), k=k, gain="linear", ordering=Hard("average"))
    for b in range(scores.shape[0]):
        want = tm.retrieval_normalized_dcg(scores[b].float(), rel[b], top_k=k)
        assert ours[b].item() == pytest.approx(want.item(), abs=1e-5)
    # exponential gains are not available there: feed it 2**r - 1 as (integer) target
    ours_exp = ndcg(scores.float(), rel.float(), k=k, ordering=Hard("average"))
    for b in range(scores.shape[0]):
        want = tm.retrieval_normalized_dcg(scores[b].float(), 2 ** rel[b] - 1, top_k=k)
        assert ours_exp[b].item() == pytest.approx(want.item(), abs=1e-5)


# ------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("call, match", [
    (lambda s, r: ndcg(s, r, k=0), "`k`"),
    (lambda s, r: precision(s, r, k=1.5), "`k`"),
    (lambda s, r: dcg(s, r, gain="cubic"), "`gain`"),
    (lambda s, r: dcg(s, r, gain=lambda x: -x - 1), "`gain`"),
    (lambda s, r: recall(s, r, threshold=float("nan")), "`threshold`"),
    (lambda s, r: rbp(s, r, p=1.0), "`p`"),
    (lambda s, r: err(s, r, max_grade=0), "`max_grade`"),
    (lambda s, r: err(s, r, max_grade=1), "`max_grade`"),
    (lambda s, r: rbp(s, r, k=0), "`k`"),
    (lambda s, r: ideal_dcg(r, k=0), "`k`"),
    (lambda s, r: ideal_dcg(r, return_valid=1), "`return_valid`"),
    (lambda s, r: ideal_ranking(-r), "`relevance`"),
    (lambda s, r: ndcg(s, -r), "`relevance`"),
    (lambda s, r: ndcg(s, r[:2]), "`relevance`"),
    (lambda s, r: ndcg(s, None), "`relevance`"),
    (lambda s, r: mrr(s, r, reduction="max"), "`reduction`"),
    (lambda s, r: mrr(s, r, ordering="hard"), "`ordering`"),
])
def test_value_errors(call, match):
    s = torch.tensor([0.3, 0.2, 0.1])
    r = torch.tensor([2.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=match):
        call(s, r)


# ------------------------------------------------------------------------------------------ robustness
def _exact_ndcg(scores, rel, k=None):
    """NDCG with exact integer gains 2**r - 1 (Python ints), as a float."""
    from fractions import Fraction
    r = [int(x) for x in _ranked(scores, rel)]
    ideal = sorted((int(x) for x in rel), reverse=True)
    k = len(r) if k is None else k
    disc = [Fraction(1 / math.log2(p + 2)) for p in range(len(r))]
    d = sum((2 ** x - 1) * disc[p] for p, x in enumerate(r) if p < k)
    i = sum((2 ** x - 1) * disc[p] for p, x in enumerate(ideal) if p < k)
    return float(d / i) if i else 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [None, 2])
def test_ndcg_large_grades(dtype, k):
    """Grades >= 128 overflowed 2**r - 1 in float32 (NaN reported as valid); NDCG cancels the scale 2**max_r."""
    g = torch.Generator().manual_seed(1)
    for top in (10, 200, 1000):
        rel = torch.randint(0, top + 1, (4, 6), generator=g).to(dtype)
        s = torch.randn(4, 6, generator=g, dtype=dtype)
        v, valid = ndcg(s, rel, k=k, return_valid=True)
        assert torch.isfinite(v).all()
        for b in range(4):
            want = _exact_ndcg(s[b].tolist(), rel[b].tolist(), k)
            assert bool(valid[b]) == bool((rel[b] > 0).any())
            assert float(v[b]) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_dcg_overflow_is_invalid_and_fp64_exact():
    s = torch.tensor([1.0, 2.0, 3.0])
    r = torch.tensor([200.0, 100.0, 0.0])
    v, valid = dcg(s, r, return_valid=True)  # 2**200 / 2 > float32 max: undefined there
    assert v.item() == 0 and not valid
    v64, valid64 = dcg(s.double(), r.double(), return_valid=True)
    want = (2.0 ** 100 - 1) / math.log2(3) + (2.0 ** 200 - 1) / 2
    assert valid64 and v64.item() == pytest.approx(want, rel=1e-12)
    r2 = torch.tensor([127.0, 100.0, 0.0])  # large but representable: unchanged formula, finite
    assert dcg(s, r2).item() == pytest.approx(ref_dcg([1, 2, 3], [127, 100, 0]), rel=1e-6)
    v, valid = ideal_dcg(r, return_valid=True)
    assert not valid and v.item() == 0


@pytest.mark.parametrize("grade", [16.0, 30.0, 127.0])
def test_dcg_with_half_scores_carrying_a_gradient_refuses_a_gain_beyond_half_range(grade):
    # the gradient reaches float16 scores in float16: a gain 2**16 - 1 > 65504 would make it infinite
    from torchfair.orderings import PlackettLuce

    x = torch.tensor([[0.3, -1.0, 0.5, 2.0, 0.1]], dtype=torch.float16, requires_grad=True)
    r = torch.tensor([[grade, 3.0, 1.0, 0.0, 0.0]], dtype=torch.float16)
    v, valid = dcg(x, r, ordering=PlackettLuce(exact=True), return_valid=True)
    v.sum().backward()
    assert not valid.item() and v.item() == 0
    assert torch.isfinite(x.grad).all() and (x.grad == 0).all()
    # without a gradient the value is defined (computed in float32): the plain loop over the 5! rankings
    ev = dcg(x.detach(), r, ordering=PlackettLuce(exact=True, temperature=1.0, scale="none"))  # logits = scores
    p = torch.softmax(x.detach().float(), -1)
    want = 0.0
    for perm in itertools.permutations(range(5)):
        prob, left = 1.0, 1.0
        for i in perm:
            prob *= p[0, i].item() / left
            left -= p[0, i].item()
        want += prob * sum((2.0 ** r[0, i].item() - 1) / math.log2(pos + 2) for pos, i in enumerate(perm))
    assert ev.item() == pytest.approx(want, rel=1e-4)


def test_dcg_with_half_scores_below_half_range_keeps_a_finite_gradient():
    from torchfair.orderings import PlackettLuce

    x = torch.tensor([[0.3, -1.0, 0.5, 2.0, 0.1]], dtype=torch.float16, requires_grad=True)
    r = torch.tensor([[15.0, 3.0, 1.0, 0.0, 0.0]], dtype=torch.float16)
    v, valid = dcg(x, r, ordering=PlackettLuce(exact=True), return_valid=True)
    v.sum().backward()
    assert valid.item() and torch.isfinite(x.grad).all() and (x.grad != 0).any()
    x32 = x.detach().float().requires_grad_(True)
    dcg(x32, r.float(), ordering=PlackettLuce(exact=True)).sum().backward()
    assert torch.allclose(x.grad.float(), x32.grad, rtol=1e-2, atol=1.0)


def test_err_large_grades():
    """ERR's stop probability (2**r - 1) / 2**g overflowed (NaN for r >= 128 in float32, OverflowError for
    max_grade > 1023)."""
    s = torch.tensor([1.0, 2.0, 3.0])
    r = torch.tensor([200.0, 100.0, 0.0])

    def ref_err_big(scores, rel, gmax):
        out, survive = 0.0, 1.0
        for pos, x in enumerate(_ranked(scores, rel)):
            R = math.ldexp(1.0, int(x) - gmax) - math.ldexp(1.0, -gmax)
            out += survive * R / (pos + 1)
            survive *= 1 - R
        return out

    assert err(s, r).item() == pytest.approx(ref_err_big([1, 2, 3], [200, 100, 0], 200), rel=1e-6)
    assert err(s, r, max_grade=1000).item() == pytest.approx(ref_err_big([1, 2, 3], [200, 100, 0], 1000), abs=1e-30)
    assert torch.isfinite(err(s, r, max_grade=5000))


def test_mrr_under_sampled_is_the_expectation_over_rankings():
    """Rankings that each put a relevant item first have MRR 1 (before: 0.75, the max of expected RRs)."""
    from torchfair.orderings import Sampled
    rel = torch.tensor([[1.0, 1.0, 0.0]])
    rk = torch.tensor([[[0, 1, 2]], [[1, 0, 2]]])
    assert mrr(torch.zeros(1, 3), rel, ordering=Sampled(rk)).item() == pytest.approx(1.0)
    # weighted rankings, k cut-off, against the per-ranking mean
    g = torch.Generator().manual_seed(4)
    rel = torch.randint(0, 2, (3, 5), generator=g).double()
    rank = torch.stack([torch.stack([torch.randperm(5, generator=g) for _ in range(3)]) for _ in range(4)])
    w = torch.rand(4, 3, generator=g, dtype=torch.float64)
    w = w / w.sum(0)
    for k in (None, 2):
        got = mrr(torch.zeros(3, 5, dtype=torch.float64), rel, k=k, ordering=Sampled(rank, weights=w))
        want = torch.zeros(3, dtype=torch.float64)
        for sidx in range(4):
            from torchfair.orderings import scores_from_ranking
            want += w[sidx] * mrr(scores_from_ranking(rank[sidx]).double(), rel, k=k)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn,kw", [(mrr, {}), (mrr, {"k": 2}), (err, {"max_grade": 3}), (ndcg, {"k": 3}),
                                   (dcg, {}), (precision, {"k": 2}), (recall, {"k": 2}), (rbp, {"p": 0.7})])
def test_plackett_luce_exact_is_the_expectation_over_all_rankings(fn, kw):
    """Under PlackettLuce(exact=True) every utility measure is sum_pi P(pi) measure(pi) (enumeration)."""
    import itertools
    from torchfair.orderings import PlackettLuce, scores_from_ranking
    from torchfair.orderings.plackett_luce import log_probability
    s = torch.tensor([[0.3, -0.2, 1.1, 0.0]], dtype=torch.float64)
    rel = torch.tensor([[1.0, 0.0, 3.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    want = 0.0
    for perm in itertools.permutations(range(4)):
        p = torch.tensor([perm])
        prob = log_probability(s, p.unsqueeze(0), mask)[0].exp().item()
        want += prob * fn(scores_from_ranking(p).double(), rel, **kw).item()
    pl = PlackettLuce(exact=True, temperature=1.0, scale="none")  # the policy at logits s, as log_probability
    got = fn(s, rel, ordering=pl, **kw).item()
    assert got == pytest.approx(want, rel=1e-10)


def test_mrr_plackett_luce_has_a_gradient():
    from torchfair.orderings import PlackettLuce
    s = torch.tensor([[0.3, -0.2, 1.1, 0.0]], requires_grad=True)
    rel = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    for est in ("pl_rank", "score_function"):
        s.grad = None
        mrr(s, rel, ordering=PlackettLuce(samples=64, estimator=est,
                                         generator=torch.Generator().manual_seed(0))).sum().backward()
        assert torch.isfinite(s.grad).all() and s.grad[0, 0] > 0  # raise the relevant item
    s.grad = None
    mrr(s, rel, ordering=PlackettLuce(exact=True)).sum().backward()
    assert s.grad[0, 0] > 0


def test_ideal_dcg_and_ideal_ranking():
    r = torch.tensor([[1.0, 3.0, 0.0, 3.0], [2.0, 0.0, 1.0, 0.0]])
    assert ideal_ranking(r).tolist() == [[1, 3, 0, 2], [0, 2, 1, 3]]
    mask = torch.tensor([[True, True, False, True], [True, True, True, True]])
    assert ideal_ranking(r, mask=mask).tolist()[0][-1] == 2  # padded item last
    for k in (None, 2):
        for gain in ("exponential", "linear"):
            want = torch.tensor([ref_dcg(list(r[b]), r[b], k, gain) for b in range(2)])
            torch.testing.assert_close(ideal_dcg(r, k=k, gain=gain), want)
            # NDCG's normaliser is this ideal DCG
            torch.testing.assert_close(ndcg(-torch.arange(4.0).expand(2, 4), r, k=k, gain=gain),
                                       dcg(-torch.arange(4.0).expand(2, 4), r, k=k, gain=gain) / want)


def test_rbp_cut_off():
    s = torch.tensor([3.0, 2.0, 1.0])
    r = torch.tensor([1.0, 0.0, 1.0])
    assert rbp(s, r, p=0.5, k=2).item() == pytest.approx(0.5)
    assert rbp(s, r, p=0.5, k=3).item() == pytest.approx(rbp(s, r, p=0.5).item())


def test_tiny_relevance_is_relevant():
    """2**r - 1 cancelled to 0 for r = 1e-30 (NDCG then said "no relevant item"); expm1 keeps the gain r ln 2,
    so exponential NDCG of tiny grades is the linear NDCG."""
    g = torch.Generator().manual_seed(3)
    s = torch.randn(4, 6, generator=g)
    r = torch.randint(0, 3, (4, 6), generator=g).float()
    r[:, 0] = 1.0
    for scale in (1e-30, 1e-8):
        v, valid = ndcg(s, r * scale, return_valid=True)
        assert valid.all()
        torch.testing.assert_close(v, ndcg(s, r, gain="linear"), rtol=1e-5, atol=1e-6)
        e = err(s, r * scale, max_grade=1.0)
        assert (e > 0).all() and torch.isfinite(e).all()
    # ordinary grades keep the exact integer gains
    assert dcg(torch.tensor([2.0, 1.0]), torch.tensor([3.0, 0.5])).item() == pytest.approx(7 + (2 ** 0.5 - 1) / math.log2(3))


@pytest.mark.parametrize("k", [None, 1, 3])
def test_err_under_average_ties_is_the_mean_over_tie_orders(k):
    """ERR's cascade under Hard(ties="average") (a ValueError before): the exact mean over every order of the tied
    items, against enumeration of those orders."""
    import itertools
    g = torch.Generator().manual_seed(7)
    for _ in range(6):
        n = int(torch.randint(2, 7, (1,), generator=g))
        s = torch.randint(0, 3, (n,), generator=g).double()
        r = torch.randint(0, 4, (n,), generator=g).double()
        mask = torch.ones(n, dtype=torch.bool)
        vals = []
        for perm in itertools.permutations(range(n)):
            # a strict order that keeps the score order and orders tied items as `perm` does
            key = torch.tensor([float(perm.index(i)) for i in range(n)], dtype=torch.float64)
            vals.append(err(s * 100 - key, r, max_grade=3, k=k).item())
        want = sum(vals) / len(vals)
        got = err(s, r, max_grade=3, k=k, ordering=Hard("average"), mask=mask)
        assert got.item() == pytest.approx(want, abs=1e-12)
    # a batch with padding and different block structures
    s = torch.tensor([[1.0, 1.0, 1.0, 0.0], [2.0, 1.0, 1.0, 9.0]], dtype=torch.float64)
    r = torch.tensor([[3.0, 1.0, 0.0, 2.0], [1.0, 2.0, 3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    got = err(s, r, max_grade=3, k=k, ordering=Hard("average"), mask=mask)
    one = err(s[1, :3], r[1, :3], max_grade=3, k=k, ordering=Hard("average"))
    assert got[1].item() == pytest.approx(one.item(), abs=1e-12)


# ------------------------------------------------------------------------------------------ AP, R-precision, ideal
def ref_ap(scores, rel, k=None, thr=0.0, n_rel=None):
    """Average precision by its definition: precision at the rank of each relevant item in the top k, over R."""
    r = _ranked(scores, rel)
    R = sum(1 for x in r if x > thr) if n_rel is None else n_rel
    hits, total = 0, 0.0
    for pos, x in enumerate(r):
        if x > thr:
            hits += 1
            if k is None or pos < k:
                total += hits / (pos + 1)
    return total / R if R else 0.0


def ref_rprec(scores, rel, thr=0.0, n_rel=None):
    r = _ranked(scores, rel)
    R = sum(1 for x in r if x > thr) if n_rel is None else n_rel
    return sum(1 for x in r[:R] if x > thr) / R if R else 0.0


def _judged(rel, extra):
    """``ideal_relevance`` ``[B, M]``: every list's own grades plus ``extra[b]`` judged grades it does not rank,
    padded with 0, and the relevant counts (> 0) per list."""
    rows = [[float(x) for x in rel[b]] + list(extra[b]) for b in range(rel.shape[0])]
    M = max(len(x) for x in rows)
    ideal = torch.tensor([x + [0.0] * (M - len(x)) for x in rows], dtype=torch.float64)
    return ideal, rows


@pytest.mark.parametrize("k", [None, 1, 3, 20])
@pytest.mark.parametrize("thr", [0.0, 1.0])
def test_average_precision_and_r_precision_match_loops(k, thr):
    s, r = _batch()
    ap, ok = average_precision(s, r, k=k, threshold=thr, return_valid=True)
    for b in range(s.shape[0]):
        assert ap[b].item() == pytest.approx(ref_ap(s[b], r[b], k, thr))
        assert bool(ok[b]) == bool((r[b] > thr).any())
    if k is None:
        rp = r_precision(s, r, threshold=thr)
        for b in range(s.shape[0]):
            assert rp[b].item() == pytest.approx(ref_rprec(s[b], r[b], thr))
    # every judged item of the query: the list's own plus unranked ones (grades 0..3, some relevant)
    gen = torch.Generator().manual_seed(7)
    extra = [[float(x) for x in torch.randint(0, 4, (int(torch.randint(0, 6, (1,), generator=gen)),),
                                              generator=gen)] for _ in range(s.shape[0])]
    ideal, rows = _judged(r, extra)
    ap = average_precision(s, r, k=k, threshold=thr, ideal_relevance=ideal)
    rp = r_precision(s, r, threshold=thr, ideal_relevance=ideal)
    rc = recall(s, r, k=k, threshold=thr, ideal_relevance=ideal)
    for b in range(s.shape[0]):
        R = sum(1 for x in rows[b] if x > thr)
        assert ap[b].item() == pytest.approx(ref_ap(s[b], r[b], k, thr, n_rel=R))
        assert rp[b].item() == pytest.approx(ref_rprec(s[b], r[b], thr, n_rel=R))
        hits = sum(1 for x in _ranked(s[b], r[b])[:k] if x > thr)
        assert rc[b].item() == pytest.approx(hits / R if R else 0.0)


def test_ndcg_ideal_from_every_judged_item_matches_a_loop():
    s, r = _batch()
    extra = [[3.0], [], [1.0, 2.0, 0.0], [0.0], [2.0, 2.0], [1.0]]
    ideal, rows = _judged(r, extra)
    for gain in ("exponential", "linear"):
        g = (lambda x: 2 ** x - 1) if gain == "exponential" else (lambda x: x)
        for k in (None, 2, 5):
            got, ok = ndcg(s, r, k=k, gain=gain, ideal_relevance=ideal, return_valid=True)
            for b in range(s.shape[0]):
                best = sorted(rows[b], reverse=True)[:len(rows[b]) if k is None else k]
                idcg = sum(g(x) / math.log2(p + 2) for p, x in enumerate(best))
                assert got[b].item() == pytest.approx(ref_dcg(s[b], r[b], k, gain) / idcg if idcg else 0.0)
                assert bool(ok[b]) == (idcg > 0)


def test_trec_conventions_worked_by_hand():
    """The run ranks d1 (grade 1), d2 (0), d3 (2); the qrels also judge d4 (grade 1) and d5 (0), unranked."""
    s = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    r = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64)
    judged = torch.tensor([1.0, 0.0, 2.0, 1.0, 0.0], dtype=torch.float64)
    # NDCG, linear gain: DCG = 1 + 2/2 = 2; ideal 2, 1, 1 -> 2 + 1/log2(3) + 1/2
    assert ndcg(s, r, gain="linear", ideal_relevance=judged).item() == pytest.approx(2 / (2.5 + 1 / math.log2(3)))
    # without the unranked judgment the ideal is 2, 1 only
    assert ndcg(s, r, gain="linear").item() == pytest.approx(2 / (2 + 1 / math.log2(3)))
    # recall@3: 2 of the 3 relevant judged items (a 3-item list, yet not 1)
    assert recall(s, r, k=3, ideal_relevance=judged).item() == pytest.approx(2 / 3)
    assert recall(s, r, k=3).item() == 1.0
    # AP: precision 1/1 at rank 1, 2/3 at rank 3; d4 never retrieved -> (1 + 2/3) / 3
    assert average_precision(s, r, ideal_relevance=judged).item() == pytest.approx((1 + 2 / 3) / 3)
    # R-precision: R = 3, top 3 holds 2 relevant
    assert r_precision(s, r, ideal_relevance=judged).item() == pytest.approx(2 / 3)
    # RR: no relevant item ranked, but one judged -> defined, 0 (trec_eval); without: undefined
    none = torch.zeros(3, dtype=torch.float64)
    v, ok = mrr(s, none, ideal_relevance=torch.tensor([0.0, 1.0]), return_valid=True)
    assert v.item() == 0.0 and bool(ok)
    v, ok = mrr(s, none, return_valid=True)
    assert v.item() == 0.0 and not bool(ok)
    # no relevant judged item at all: undefined everywhere (evaluate_lists(undefined="zero") counts it 0)
    for fn in (ndcg, recall, average_precision, r_precision, mrr):
        assert not bool(fn(s, none, ideal_relevance=torch.zeros(4), return_valid=True)[1]), fn.__name__


@pytest.mark.parametrize("fn,kw", [(average_precision, {}), (average_precision, {"k": 2}), (r_precision, {})])
def test_ap_and_r_precision_average_ties_are_the_mean_over_tie_orders(fn, kw):
    import itertools
    from torchfair.orderings import scores_from_ranking
    s = torch.tensor([[1.0, 1.0, 1.0, 0.5, 0.5, 2.0]], dtype=torch.float64)
    r = torch.tensor([[1.0, 0.0, 2.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    ideal = torch.tensor([[1.0, 0.0, 2.0, 1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    for extra in ({}, {"ideal_relevance": ideal}):
        vals = []
        for perm in itertools.permutations(range(6)):
            if all(s[0, perm[p]] >= s[0, perm[p + 1]] for p in range(5)):  # an order of the tied items
                vals.append(fn(scores_from_ranking(torch.tensor([perm])).double(), r, **kw, **extra).item())
        got = fn(s, r, ordering=Hard("average"), **kw, **extra).item()
        assert len(vals) == 12 and got == pytest.approx(sum(vals) / len(vals), rel=1e-12)


@pytest.mark.parametrize("fn,kw", [(average_precision, {}), (average_precision, {"k": 2}), (r_precision, {})])
def test_ap_and_r_precision_are_expectations_over_rankings(fn, kw):
    import itertools
    from torchfair.orderings import PlackettLuce, Sampled, scores_from_ranking
    from torchfair.orderings.plackett_luce import log_probability
    s = torch.tensor([[0.3, -0.2, 1.1, 0.0]], dtype=torch.float64)
    rel = torch.tensor([[1.0, 0.0, 3.0, 2.0]], dtype=torch.float64)
    ideal = torch.tensor([[1.0, 0.0, 3.0, 2.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    want = 0.0
    for perm in itertools.permutations(range(4)):
        p = torch.tensor([perm])
        prob = log_probability(s, p.unsqueeze(0), mask)[0].exp().item()
        want += prob * fn(scores_from_ranking(p).double(), rel, ideal_relevance=ideal, **kw).item()
    pl = PlackettLuce(exact=True, temperature=1.0, scale="none")
    assert fn(s, rel, ordering=pl, ideal_relevance=ideal, **kw).item() == pytest.approx(want, rel=1e-10)
    rk = torch.tensor([[[0, 1, 2, 3]], [[2, 3, 1, 0]], [[3, 0, 2, 1]]])
    mix = fn(torch.zeros(1, 4, dtype=torch.float64), rel, ordering=Sampled(rk), **kw).item()
    each = [fn(scores_from_ranking(rk[i]).double(), rel, **kw).item() for i in range(3)]
    assert mix == pytest.approx(sum(each) / 3)


def test_ap_and_r_precision_on_relaxed_orderings_have_gradients_and_are_exact_on_rankings():
    from torchfair.orderings import NeuralSort, SoftRank
    s = torch.tensor([[0.3, -0.2, 1.1, 0.0, 0.7]], dtype=torch.float64, requires_grad=True)
    rel = torch.tensor([[1.0, 0.0, 0.0, 2.0, 0.0]], dtype=torch.float64)
    for fn in (average_precision, r_precision):
        for o in (SoftRank(0.05), NeuralSort(0.05)):
            s.grad = None
            fn(s, rel, ordering=o).sum().backward()
            assert torch.isfinite(s.grad).all()
        # very low temperature: the relaxed value tends to the exact one
        hard = fn(s.detach(), rel).item()
        assert fn(s.detach(), rel, ordering=NeuralSort(1e-4)).item() == pytest.approx(hard, abs=1e-6)


#: bad ``ideal_relevance`` for the batch ``[[0.3, 0.2, 0.1]]`` / ``[[2, 0, 1]]`` (``single``: given for one list)
BAD_IDEAL = {
    "1d-for-a-batch": (torch.tensor([2.0, 1.0]), False), "negative": (torch.tensor([[2.0, -1.0, 1.0]]), False),
    "nan": (torch.tensor([[2.0, float("nan"), 1.0]]), False),
    "lacks-the-lists-grade": (torch.tensor([[1.0, 1.0, 1.0]]), False), "not-a-tensor": ([[2.0, 1.0]], False),
    "2d-for-one-list": (torch.tensor([[2.0, 1.0, 1.0]]), True),
}
IDEAL_FNS = {"ndcg": ndcg, "recall": recall, "mrr": mrr, "average_precision": average_precision,
             "r_precision": r_precision}


@pytest.mark.parametrize("case", list(BAD_IDEAL))
@pytest.mark.parametrize("fn", list(IDEAL_FNS))
def test_a_bad_ideal_relevance_is_refused(fn, case):
    s, r = torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[2.0, 0.0, 1.0]])
    bad, single = BAD_IDEAL[case]
    IDEAL_FNS[fn](s, r, ideal_relevance=torch.tensor([[2.0, 1.0, 1.0]]))  # a good one is accepted
    with pytest.raises(ValueError, match="`ideal_relevance`"):
        IDEAL_FNS[fn](s[0] if single else s, r[0] if single else r, ideal_relevance=bad)


@pytest.mark.parametrize("fn", ["recall", "mrr", "average_precision", "r_precision"])
def test_a_negative_threshold_is_refused_with_ideal_relevance(fn):
    s, r = torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[2.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="`threshold`"):
        IDEAL_FNS[fn](s, r, threshold=-0.5, ideal_relevance=torch.tensor([[2.0, 1.0, 1.0]]))


def test_an_empty_judgment_set_is_undefined():
    s = torch.tensor([[0.3, 0.2, 0.1]])
    # an empty judgment set (M = 0): nothing relevant, undefined
    v, valid = recall(s, torch.zeros(1, 3), ideal_relevance=torch.zeros(1, 0), return_valid=True)
    assert not valid.any() and v.item() == 0.0


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_property_dcg_on_half_scores_never_gives_a_non_finite_gradient(data):
    from torchfair.orderings import PlackettLuce

    N = data.draw(st.integers(1, 5), label="N")
    x = torch.tensor([data.draw(st.lists(st.floats(-4, 4, width=16), min_size=N, max_size=N), label="scores")],
                     dtype=torch.float16, requires_grad=True)
    r = torch.tensor([data.draw(st.lists(st.integers(0, 40), min_size=N, max_size=N), label="grades")],
                     dtype=torch.float16)
    v, valid = dcg(x, r, ordering=PlackettLuce(exact=True), return_valid=True)
    v.sum().backward()
    assert torch.isfinite(v).all() and torch.isfinite(x.grad).all()
    assert bool(valid) == bool((r < 16).all())  # float16 holds gains 2**r - 1 below 65504
