"""Plackett-Luce orderings checked against a plain-Python enumeration (tests/references/pl_reference.py).

1. the reference itself (probabilities sum to 1, top-1 = softmax, pair = sigmoid);
2. closed forms and ``PlackettLuce(exact=True)`` against the enumeration: positions, exposure, pair blocks,
   position matrix, the measures (with masks and variable-length lists) and exact gradients vs finite differences;
3. sampling: chi-square goodness of fit of sampled rankings, padded items last, reproducibility;
4. faithfulness: Monte Carlo values converge to the exact expectation within their Monte Carlo error;
5. unbiasedness of the score-function and PL-Rank gradient estimates (means over many independent draws vs the
   exact gradient, 4 standard errors per coordinate plus a small absolute tolerance) and their variances;
6. the relaxed estimator (finite gradients, value -> exact as the relaxation temperature -> 0);
7. masks (exactly zero gradient for padded items), float32, argument validation.
8-9. large logit spans, half precision, the fast paths against independent references;
10. the per-list temperature rule of the default (``scale="std"``): exact values and gradients against the
    enumeration at hand-computed logits, invariance to rescaling, a trained ranker's lists (NDCG@10 kept, the
    DIPS loss reduces the exact gap), ties, padding, half precision and huge scores, argument validation.

Independent draws are obtained by replicating one list ``R`` times in the batch: every row samples its own rankings
(and has its own leave-one-out baseline), its objective depends on its own samples only, so the rows of
``x.grad`` after one backward of the summed objective are ``R`` i.i.d. gradient estimates.  All generators are
seeded: the tests are deterministic.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import pl_reference as plr
from torchfair.browsing import RBP, Logarithmic
from torchfair.metrics import (dips, expected_exposure, exposure_misallocation, igi, pairwise_accuracy,
                               rank_parity)
from torchfair.orderings import (PlackettLuce, SoftRank, all_rankings, log_probability, pair_probability,
                                 sample_rankings, top1_probability)

D = torch.float64
GAMMA = 0.8


def PLAbs(*args, **kwargs):
    """``PlackettLuce`` with an absolute temperature (``scale="none"``, default ``temperature=1``: the policy
    ``softmax(scores)``, the class's former default).  The tests of the PL machinery -- enumeration, estimators,
    numerics at a given logit span -- take their references at logits ``s / T`` written by hand, so they fix the
    temperature; the per-list rule of the default (``scale="std"``) is tested in section 10."""
    kwargs.setdefault("temperature", 1.0)
    kwargs.setdefault("scale", "none")
    return PlackettLuce(*args, **kwargs)


def F_ref(k):
    return GAMMA ** k


def gen(seed):
    return torch.Generator().manual_seed(seed)


def real_indices(mask_row):
    return [i for i, m in enumerate(mask_row) if m]


# A batch of variable-length lists with padded items at arbitrary indices (N = 6).
BATCH_SCORES = [[0.9, -0.4, 0.3, 1.2, -1.1, 0.0],
                [0.5, 7.0, -0.2, 0.8, 3.0, -0.6],
                [-0.3, 0.4, 9.0, 0.1, -9.0, 1.5]]
BATCH_MASK = [[True, True, True, True, True, True],
              [True, False, True, True, False, True],
              [False, True, False, True, False, True]]
BATCH_REL = [[2., 1., 0., 2., 1., 0.],
             [1., 5., 0., 2., 5., 1.],
             [0., 2., 0., 0., 0., 1.]]
BATCH_IDS = [[0, 1, 0, 1, 1, 0],
             [0, 0, 1, 1, 0, 0],
             [0, 0, 1, 1, 0, 1]]
TEMP = 0.8


def batch_tensors(dtype=D):
    s = torch.tensor(BATCH_SCORES, dtype=dtype)
    mask = torch.tensor(BATCH_MASK)
    rel = torch.tensor(BATCH_REL, dtype=dtype)
    ids = torch.tensor(BATCH_IDS)
    return s, mask, rel, ids


def real_list(b):
    """Logits, relevance and ids of the real items of list b, and their indices in the padded list."""
    idx = real_indices(BATCH_MASK[b])
    return ([BATCH_SCORES[b][i] / TEMP for i in idx], [BATCH_REL[b][i] for i in idx],
            [BATCH_IDS[b][i] for i in idx], idx)


def close(a, b, tol=1e-9):
    return abs(float(a) - float(b)) <= tol


# ================================================================================ 1. the reference


def test_reference_probabilities_sum_to_one_and_closed_forms():
    m = [0.3, -1.2, 2.0, 0.1, 0.7]
    dist = plr.enumerate_pl(m)
    assert len(dist) == 120
    assert abs(sum(p for _, p in dist) - 1.0) < 1e-12
    z = sum(math.exp(x) for x in m)
    for i, p in enumerate(plr.top1(m)):
        assert abs(p - math.exp(m[i]) / z) < 1e-12
    A = plr.above(m)
    for i, j in itertools.permutations(range(5), 2):
        assert abs(A[i][j] - 1 / (1 + math.exp(m[i] - m[j]))) < 1e-12
    R = plr.position_matrix(m)
    for k in range(5):
        assert abs(sum(R[k]) - 1) < 1e-12 and abs(sum(R[x][k] for x in range(5)) - 1) < 1e-12
    # the probability of one ranking, written out by hand
    e = [math.exp(x) for x in m[:3]]
    assert abs(plr.pl_probability(m[:3], (2, 0, 1)) - e[2] / sum(e) * e[0] / (e[0] + e[1])) < 1e-15


# ================================================================================ 2. closed forms and exact=True


def test_pair_probability_matches_enumeration():
    s = torch.tensor([0.3, -1.2, 2.0, 0.1, 0.7], dtype=D)
    for T in (1.0, 0.6, 2.5):
        P = pair_probability(s, T)
        A = plr.above([x / T for x in s.tolist()])
        for i, j in itertools.permutations(range(5), 2):
            assert close(P[i, j], A[i][j], 1e-12)
    # batched form
    sb = torch.tensor(BATCH_SCORES, dtype=D)
    P = pair_probability(sb, TEMP)
    assert P.shape == (3, 6, 6)
    for b in range(3):
        A = plr.above([x / TEMP for x in BATCH_SCORES[b]])
        for i, j in itertools.permutations(range(6), 2):
            assert close(P[b, i, j], A[i][j], 1e-12)


def test_top1_probability_matches_enumeration_with_mask():
    s, mask, _, _ = batch_tensors()
    P = top1_probability(s, TEMP, mask)
    for b in range(3):
        m, _, _, idx = real_list(b)
        t = plr.top1(m)
        for a, i in enumerate(idx):
            assert close(P[b, i], t[a], 1e-12)
        for i in range(6):
            if not BATCH_MASK[b][i]:
                assert P[b, i] == 0
    Pn = top1_probability(s[0], 1.0)
    t = plr.top1(BATCH_SCORES[0])
    assert all(close(Pn[i], t[i], 1e-12) for i in range(6))


def test_all_rankings_and_log_probability():
    P = all_rankings(4)
    assert P.shape == (24, 4) and len({tuple(r) for r in P.tolist()}) == 24
    with pytest.raises(ValueError):
        all_rankings(9)
    m = [0.3, -1.2, 2.0, 0.1]
    lp = log_probability(torch.tensor([m], dtype=D), P.unsqueeze(1), torch.ones(1, 4, dtype=torch.bool))
    for r, v in zip(P.tolist(), lp[:, 0].tolist()):
        assert abs(math.exp(v) - plr.pl_probability(m, r)) < 1e-12


def test_exact_ordering_matches_enumeration():
    """expected positions, exposure, pair blocks (above / joint) and position matrix, with padded items."""
    s, mask, rel, _ = batch_tensors()
    ob = PLAbs(exact=True, temperature=TEMP)(s, mask)
    F = RBP(GAMMA)
    pos = ob.expected_positions()
    ex = ob.exposure(F)
    blk = ob.pair_block(ob.pair_context(F, None), 0, 6)
    R = ob.position_matrix()
    for b in range(3):
        m, _, _, idx = real_list(b)
        n = len(idx)
        rpos, rex = plr.expected_positions(m), plr.expected_exposure_items(m, F_ref)
        rab, rjo, rR = plr.above(m), plr.joint(m, F_ref), plr.position_matrix(m)
        for a, i in enumerate(idx):
            assert close(pos[b, i], rpos[a]) and close(ex[b, i], rex[a])
            for c, j in enumerate(idx):
                assert close(blk.above[b, i, j], rab[a][c]) and close(blk.joint[b, i, j], rjo[a][c])
            for k in range(6):
                assert close(R[b, k, i], rR[k][a] if k < n else 0.0)
        for i in range(6):
            if not BATCH_MASK[b][i]:
                assert ex[b, i] == 0 and (blk.above[b, i] == 0).all() and (blk.above[b, :, i] == 0).all()
                assert (blk.joint[b, i] == 0).all() and (blk.joint[b, :, i] == 0).all() and (R[b, :, i] == 0).all()
    # contract() over small row blocks agrees with the full block
    right = torch.randn(3, 6, 2, dtype=D, generator=gen(0))
    full = torch.bmm(blk.joint, right)
    assert torch.allclose(ob.contract(right, which="joint", browsing=F, block_elements=7), full, atol=1e-12)


def _measures(ordering, s, mask, rel, ids, F=None):
    F = F or RBP(GAMMA)
    return dict(
        dips=dips(s, rel, ids, browsing=F, tie_weight=0.5, mask=mask, num_groups=2, ordering=ordering),
        igi=igi(s, rel, ids, tie_weight=0.3, mask=mask, num_groups=2, ordering=ordering),
        acc=pairwise_accuracy(s, rel, ids, mask=mask, num_groups=2, ordering=ordering),
        parity=rank_parity(s, ids, mask=mask, num_groups=2, ordering=ordering),
        mis=exposure_misallocation(s, rel, ids, browsing=F, mask=mask, num_groups=2, ordering=ordering),
        ee=expected_exposure(s, rel, browsing=F, mask=mask, ordering=ordering),
    )


def test_exact_measures_match_enumeration_with_masks():
    s, mask, rel, ids = batch_tensors()
    out = _measures(PLAbs(exact=True, temperature=TEMP), s, mask, rel, ids)
    for b in range(3):
        m, r, g, _ = real_list(b)
        M = plr.exp_dips(m, r, g, 2, F_ref, 0.5)
        I = plr.exp_igi(m, r, g, 2, 0.3)
        A = plr.exp_pairwise_accuracy(m, r, g, 2)
        wins, per_group, pair = plr.exp_rank_parity(m, g, 2)
        for x, y in itertools.product(range(2), range(2)):
            assert close(out["dips"][b, x, y], M[x][y]), ("dips", b, x, y)
            assert close(out["igi"][b, x, y], I[x][y]), ("igi", b, x, y)
            assert close(out["acc"][b, x, y], A[x][y]), ("acc", b, x, y)
            assert close(out["parity"].wins[b, x, y], wins[x][y]), ("wins", b, x, y)
        for x in range(2):
            assert close(out["parity"].per_group[b, x], per_group[x])
            assert close(out["parity"].pair[b, x], pair[x])
        delta = plr.exp_misallocation(m, r, g, 2, F_ref, "ee")
        assert all(close(out["mis"][b, x], delta[x]) for x in range(2))
        loss, disp, relv = plr.exp_expected_exposure(m, r, F_ref)
        ee = out["ee"]
        assert close(ee.loss[b], loss) and close(ee.disparity[b], disp) and close(ee.relevance[b], relv)


def test_exact_single_list_and_n8():
    """1-D input, and the largest enumerable list (N = 8) for a cheap quantity."""
    s = torch.tensor([0.2, -0.5, 1.0, 0.3], dtype=D)
    r, g = torch.tensor([1., 0., 2., 1.], dtype=D), torch.tensor([0, 1, 1, 0])
    M = dips(s, r, g, browsing=RBP(GAMMA), num_groups=2, ordering=PLAbs(exact=True))
    Mr = plr.exp_dips(s.tolist(), r.tolist(), g.tolist(), 2, F_ref, 0.5)
    assert M.shape == (2, 2) and all(close(M[x, y], Mr[x][y]) for x in range(2) for y in range(2))
    s8 = torch.linspace(-1, 1, 8, dtype=D).reshape(1, 8)
    ob = PLAbs(exact=True)(s8, torch.ones(1, 8, dtype=torch.bool))
    assert torch.allclose(ob.position_matrix().sum(1), torch.ones(1, 8, dtype=D), atol=1e-12)
    t = plr.top1(s8[0].tolist())
    assert all(close(ob.position_matrix()[0, 0, i], t[i]) for i in range(8))


# exact gradients: autograd through exact=True vs finite differences of the enumeration
GRAD_S = [0.8, -0.3, 0.5, 0.0, -1.0]
GRAD_REL = [2., 1., 0., 2., 1.]
GRAD_IDS = [0, 1, 0, 1, 1]
GRAD_W = [1.0, -0.5, 0.3, 2.0, -1.0]
GRAD_TEMP = 0.7
ACC_COEF = [[0.0, 1.0], [-1.0, 0.0]]  # InterAcc-type gap A[0,1] - A[1,0]


def _reference_objectives():
    return dict(
        expo=plr.obj_weighted_exposure(GRAD_W, F_ref),
        dips=plr.obj_dips_gap(GRAD_REL, GRAD_IDS, F_ref, 0.5),
        acc=plr.obj_pairwise_accuracy(GRAD_REL, GRAD_IDS, ACC_COEF),
        mis=plr.obj_misallocation_l1(GRAD_REL, GRAD_IDS, 2, F_ref),
        ee=lambda m: plr.exp_expected_exposure(m, GRAD_REL, F_ref)[0],
    )


_EXACT_GRAD_CACHE = {}


def exact_gradient(name, T=GRAD_TEMP, s=GRAD_S):
    """d objective / d scores by finite differences of the enumeration (chain rule through m = s / T)."""
    key = (name, T, tuple(s))
    if key not in _EXACT_GRAD_CACHE:
        f = _reference_objectives()[name]
        g = plr.fd_gradient(f, [x / T for x in s])
        _EXACT_GRAD_CACHE[key] = torch.tensor([v / T for v in g], dtype=D)
    return _EXACT_GRAD_CACHE[key]


def _sign_of_exact_delta():
    delta = plr.exp_misallocation([x / GRAD_TEMP for x in GRAD_S], GRAD_REL, GRAD_IDS, 2, F_ref)
    return [math.copysign(1.0, d) for d in delta]


def lib_objective(name, x, ordering, mask=None, rel=None, ids=None, w=None):
    """Per-row objective [R] for scores x [R, N] (the library's version of _reference_objectives)."""
    R, N = x.shape
    mask = torch.ones(R, N, dtype=torch.bool) if mask is None else mask
    rel = torch.tensor(GRAD_REL, dtype=x.dtype).expand(R, N) if rel is None else rel
    ids = torch.tensor(GRAD_IDS).expand(R, N) if ids is None else ids
    F = RBP(GAMMA)
    if name == "expo":
        w = torch.tensor(GRAD_W, dtype=x.dtype) if w is None else w
        return (ordering(x, mask).exposure(F) * w).sum(-1)
    if name == "dips":
        M = dips(x, rel, ids, browsing=F, tie_weight=0.5, mask=mask, num_groups=2, ordering=ordering)
        return M[:, 0, 1] - M[:, 1, 0]
    if name == "acc":
        A = pairwise_accuracy(x, rel, ids, mask=mask, num_groups=2, ordering=ordering)
        return A[:, 0, 1] - A[:, 1, 0]
    if name == "mis":
        return exposure_misallocation(x, rel, ids, browsing=F, mask=mask, num_groups=2,
                                      ordering=ordering).abs().sum(-1)
    if name == "mis_lin":  # the l1 norm linearised at the exact point: same gradient there, linear in E
        sg = torch.tensor(_sign_of_exact_delta(), dtype=x.dtype)
        return (exposure_misallocation(x, rel, ids, browsing=F, mask=mask, num_groups=2,
                                       ordering=ordering) * sg).sum(-1)
    if name == "ee":
        return expected_exposure(x, rel, browsing=F, mask=mask, ordering=ordering).loss
    raise KeyError(name)


@pytest.mark.parametrize("name", ["expo", "dips", "acc", "mis", "ee"])
def test_exact_gradient_matches_finite_differences(name):
    x = torch.tensor([GRAD_S], dtype=D, requires_grad=True)
    lib_objective(name, x, PLAbs(exact=True, temperature=GRAD_TEMP)).sum().backward()
    assert torch.allclose(x.grad[0], exact_gradient(name), atol=1e-8, rtol=0), (x.grad[0], exact_gradient(name))


def test_exact_gradient_with_padding_matches_finite_differences():
    """List 1 of the batch (two padded items) through dips: gradient of the real items = FD, padded = 0."""
    s, mask, rel, ids = batch_tensors()
    x = s.clone().requires_grad_()
    M = dips(x, rel, ids, browsing=RBP(GAMMA), tie_weight=0.5, mask=mask, num_groups=2,
             ordering=PLAbs(exact=True, temperature=TEMP))
    (M[:, 0, 1] - M[:, 1, 0]).sum().backward()
    for b in range(3):
        m, r, g, idx = real_list(b)
        fd = plr.fd_gradient(plr.obj_dips_gap(r, g, F_ref, 0.5), m)
        for a, i in enumerate(idx):
            assert close(x.grad[b, i], fd[a] / TEMP, 1e-8)
        for i in range(6):
            if not BATCH_MASK[b][i]:
                assert x.grad[b, i] == 0


# ================================================================================ 3. sampling


def _chi_square(counts, probs, total):
    from scipy.stats import chisquare
    f_exp = [p * total for p in probs]
    return chisquare(counts, f_exp).pvalue


def test_sampled_ranking_frequencies_match_pl_probabilities():
    m = [1.0, 0.2, -0.4, 0.5]
    S = 20000
    rk = sample_rankings(torch.tensor([m], dtype=D), torch.ones(1, 4, dtype=torch.bool), S, gen(123))
    assert rk.shape == (S, 1, 4)
    counts = {}
    for r in rk[:, 0].tolist():
        counts[tuple(r)] = counts.get(tuple(r), 0) + 1
    dist = plr.ranking_distribution(m)
    perms = sorted(dist)
    assert sum(counts.values()) == S and set(counts) <= set(perms)
    assert min(dist.values()) * S > 5  # chi-square approximation valid
    p = _chi_square([counts.get(r, 0) for r in perms], [dist[r] for r in perms], S)
    assert p > 1e-3, p


def test_sampled_frequencies_with_padding_and_temperature():
    """Through the ordering: PLAbs(samples=S).rankings with a padded item, temperature 2."""
    s = torch.tensor([[0.6, 5.0, -0.6, 1.4, 0.0]], dtype=D)
    mask = torch.tensor([[True, False, True, True, False]])
    S = 12000
    ob = PLAbs(samples=S, temperature=2.0, generator=gen(7))(s, mask)
    rk = ob.rankings[:, 0]
    assert (rk[:, 3:] == torch.tensor([1, 4])).all()  # padded items last, in index order
    idx = [0, 2, 3]
    dist = plr.ranking_distribution([s[0, i].item() / 2.0 for i in idx])
    perms = sorted(dist)
    counts = {r: 0 for r in perms}
    for r in rk[:, :3].tolist():
        counts[tuple(idx.index(i) for i in r)] += 1
    p = _chi_square([counts[r] for r in perms], [dist[r] for r in perms], S)
    assert p > 1e-3, p


def test_padded_items_always_last():
    s, mask, _, _ = batch_tensors()
    rk = sample_rankings(s, mask, 500, gen(5))
    for b in range(3):
        n = sum(BATCH_MASK[b])
        pads = [i for i in range(6) if not BATCH_MASK[b][i]]
        real = rk[:, b, :n]
        assert torch.tensor(BATCH_MASK[b])[real].all()
        assert (rk[:, b, n:] == torch.tensor(pads, dtype=torch.long)).all()
    # extreme logits of padded items do not matter
    s2 = s.clone()
    s2[~mask] = 1e6
    rk2 = sample_rankings(s2, mask, 500, gen(5))
    assert torch.equal(rk, rk2)


def test_generator_makes_sampling_reproducible():
    s, mask, rel, ids = batch_tensors()
    a = sample_rankings(s, mask, 50, gen(11))
    b = sample_rankings(s, mask, 50, gen(11))
    c = sample_rankings(s, mask, 50, gen(12))
    assert torch.equal(a, b) and not torch.equal(a, c)
    for est in ("pl_rank", "score_function", "relaxed"):
        outs = []
        for _ in range(2):
            x = s.clone().requires_grad_()
            M = dips(x, rel, ids, mask=mask, num_groups=2, ordering=PLAbs(samples=16, estimator=est,
                                                                          generator=gen(3)))
            M.sum().backward()
            outs.append((M.detach(), x.grad))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1]), est


# ================================================================================ 4. faithfulness (values)


def _replicated(b, R):
    s, mask, rel, ids = batch_tensors()
    return (s[b].expand(R, 6).clone(), mask[b].expand(R, 6).clone(), rel[b].expand(R, 6).clone(),
            ids[b].expand(R, 6).clone())


def _flat_values(out):
    """[R, K] all the linear (in the policy) measure values of _measures(), and the exposure loss."""
    lin = torch.cat([out["dips"].flatten(1), out["igi"].flatten(1), out["acc"].flatten(1),
                     out["parity"].wins.flatten(1), out["parity"].per_group, out["mis"]], 1)
    return lin, out["ee"].disparity


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function"])
def test_monte_carlo_values_converge_to_exact(estimator):
    b, R = 0, 300
    s, mask, rel, ids = _replicated(b, R)
    exact = _measures(PLAbs(exact=True, temperature=TEMP), s[:1], mask[:1], rel[:1], ids[:1])
    ex_lin, ex_disp = _flat_values(exact)
    rmse = {}
    for S, seed in ((4, 1), (64, 2)):
        out = _measures(PLAbs(samples=S, estimator=estimator, temperature=TEMP, generator=gen(seed)),
                        s, mask, rel, ids)
        lin, disp = _flat_values(out)
        mean, se = lin.mean(0), lin.std(0) / math.sqrt(R)
        assert ((mean - ex_lin[0]).abs() <= 4 * se + 1e-9).all(), (S, mean - ex_lin[0], se)
        rmse[S] = ((lin - ex_lin[0]) ** 2).mean().sqrt().item()
        # EE-D = ||E||^2 is quadratic: E[||E_hat||^2] = ||E||^2 + sum_i Var(E_hat_i)
        disp = expected_exposure(s, rel, browsing=RBP(GAMMA), mask=mask,
                                 ordering=PLAbs(samples=S, temperature=TEMP, generator=gen(seed))).disparity
        eh = PLAbs(samples=S, temperature=TEMP, generator=gen(seed))(s, mask).exposure(RBP(GAMMA))
        assert torch.allclose((eh ** 2).sum(-1), disp, atol=1e-12)  # same generator state: same draws
        bias_pred = eh.var(0).sum()
        d_mean = disp.mean() - ex_disp[0]
        assert abs(d_mean - bias_pred) <= 4 * disp.std() / math.sqrt(R) + 1e-9, (S, d_mean, bias_pred)
    # Monte Carlo error ~ 1/sqrt(S): 16x the samples, ~4x smaller error
    assert rmse[64] < 0.4 * rmse[4], rmse


def test_monte_carlo_values_unbiased_on_padded_batch():
    """Every list of the variable-length batch: mean of 20 seeded runs (S = 64) within 4 standard errors."""
    s, mask, rel, ids = batch_tensors()
    exact, _ = _flat_values(_measures(PLAbs(exact=True, temperature=TEMP), s, mask, rel, ids))
    vals = []
    for seed in range(20):
        vals.append(_flat_values(_measures(PLAbs(samples=64, temperature=TEMP, generator=gen(100 + seed)),
                                           s, mask, rel, ids))[0])
    v = torch.stack(vals)  # [20, B, K]
    mean, se = v.mean(0), v.std(0) / math.sqrt(20)
    assert ((mean - exact).abs() <= 4 * se + 1e-9).all()


# ================================================================================ 5. unbiasedness


def gradient_draws(name, estimator, S, R, seed, T=GRAD_TEMP, **kw):
    """[R, N] i.i.d. gradient estimates of objective `name` (rows of one replicated batch)."""
    x = torch.tensor([GRAD_S], dtype=D).repeat(R, 1).requires_grad_()
    ordering = PLAbs(samples=S, estimator=estimator, temperature=T, generator=gen(seed))
    lib_objective(name, x, ordering, **kw).sum().backward()
    return x.grad


def assert_unbiased(draws, exact, z=4.0, atol=1e-3):
    R = draws.shape[0]
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(R)
    err = (mean - exact).abs()
    assert (err <= z * se + atol).all(), f"mean {mean.tolist()}\nexact {exact.tolist()}\nse {se.tolist()}"


EXACT_OBJECTIVE = {"expo": "expo", "dips": "dips", "acc": "acc", "mis_lin": "mis"}


@pytest.mark.parametrize("estimator", ["score_function", "pl_rank"])
@pytest.mark.parametrize("name", ["expo", "dips", "acc"])
def test_gradient_estimator_unbiased(estimator, name):
    draws = gradient_draws(name, estimator, S=4, R=3000, seed=17)
    assert torch.isfinite(draws).all()
    assert_unbiased(draws, exact_gradient(EXACT_OBJECTIVE[name]))


def test_score_function_unbiased_for_misallocation():
    draws = gradient_draws("mis_lin", "score_function", S=4, R=3000, seed=18)
    assert_unbiased(draws, exact_gradient("mis"))


def test_pl_rank_unbiased_for_misallocation():
    draws = gradient_draws("mis_lin", "pl_rank", S=2, R=8000, seed=18)
    assert_unbiased(draws, exact_gradient("mis"))


@pytest.mark.parametrize("estimator", ["score_function", "pl_rank"])
def test_gradient_estimator_unbiased_with_padding(estimator):
    """A padded list (N = 7, two padded items in the middle): unbiased for the real items, 0 for the padded."""
    R, N = 3000, 7
    real = [0, 1, 3, 4, 6]
    mask = torch.zeros(R, N, dtype=torch.bool)
    mask[:, real] = True
    s = torch.full((R, N), 3.0, dtype=D)
    s[:, real] = torch.tensor(GRAD_S, dtype=D)
    rel = torch.zeros(R, N, dtype=D)
    rel[:, real] = torch.tensor(GRAD_REL, dtype=D)
    ids = torch.zeros(R, N, dtype=torch.long)
    ids[:, real] = torch.tensor(GRAD_IDS)
    for name, seed in (("expo", 31), ("dips", 32)):
        w = torch.zeros(N, dtype=D)
        w[real] = torch.tensor(GRAD_W, dtype=D)
        w[2] = 5.0  # a reward on a padded item must change nothing
        x = s.clone().requires_grad_()
        ordering = PLAbs(samples=4, estimator=estimator, temperature=GRAD_TEMP, generator=gen(seed))
        lib_objective(name, x, ordering, mask=mask, rel=rel, ids=ids, w=w).sum().backward()
        assert (x.grad[:, [2, 5]] == 0).all()
        assert_unbiased(x.grad[:, real], exact_gradient(name))


@pytest.mark.parametrize("estimator", ["score_function", "pl_rank"])
def test_gradient_estimator_unbiased_cascade(estimator, R=3000, atol=1e-3):
    """Relevance-dependent browsing (Cascade): F(k) depends on the items ranked above, i.e. PL-Rank's reward of
    step k depends on the sampled prefix."""
    import reference as ref
    from torchfair.browsing import Cascade
    rel = [1.0, 0.0, 2.0, 1.0, 0.0]
    T = GRAD_TEMP
    Fb = ref.ref_cascade(0.9, max_grade=2.0)
    fd = plr.fd_gradient(lambda m: sum(w * e for w, e in zip(GRAD_W, plr.expected_exposure_browsing(m, rel, Fb))),
                         [v / T for v in GRAD_S])
    x = torch.tensor([GRAD_S], dtype=D).repeat(R, 1).requires_grad_()
    relt = torch.tensor(rel, dtype=D).expand(R, 5)
    ob = PLAbs(samples=4, estimator=estimator, temperature=T, generator=gen(8))(x, torch.ones(R, 5, dtype=torch.bool))
    (ob.exposure(Cascade(0.9, max_grade=2.0), relt) * torch.tensor(GRAD_W, dtype=D)).sum().backward()
    assert_unbiased(x.grad, torch.tensor(fd, dtype=D) / T, atol=atol)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["score_function", "pl_rank"])
def test_gradient_estimator_unbiased_cascade_slow(estimator):
    test_gradient_estimator_unbiased_cascade(estimator, R=60000, atol=2e-4)


def test_score_function_gradient_is_shift_invariant():
    """Adding a constant to all logits leaves PL unchanged: every score-function draw sums to 0 over items."""
    draws = gradient_draws("dips", "score_function", S=4, R=200, seed=3)
    assert draws.sum(-1).abs().max() < 1e-12


def _variances(name, S, R, seed):
    return {est: gradient_draws(name, est, S=S, R=R, seed=seed).var(0) for est in ("score_function", "pl_rank")}


def test_pl_rank_lower_variance_on_dips():
    """The DIPS gap (pair path of PL-Rank): total variance ~0.55x the score function's at S = 4 (measured with
    R = 20000).  Not asserted for exposure objectives, where PL-Rank's variance is 2-4x higher here (see the
    slow report)."""
    v = _variances("dips", S=4, R=3000, seed=41)
    ratio = (v["pl_rank"].sum() / v["score_function"].sum()).item()
    assert ratio < 0.8, ratio


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["score_function", "pl_rank"])
@pytest.mark.parametrize("S", [2, 16])
@pytest.mark.parametrize("name", ["expo", "dips", "acc"])
def test_gradient_estimator_unbiased_slow(estimator, S, name):
    draws = gradient_draws(name, estimator, S=S, R=100000, seed=1000 + S)
    assert_unbiased(draws, exact_gradient(EXACT_OBJECTIVE[name]), atol=2e-4)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["score_function", "pl_rank"])
def test_gradient_estimator_unbiased_n6_random_lists_slow(estimator):
    """N = 6, several random lists and temperatures (the pair path of PL-Rank with ties in relevance)."""
    g = gen(77)
    for trial in range(3):
        s = (torch.randn(6, dtype=D, generator=g) * 1.5).tolist()
        rel = torch.randint(0, 3, (6,), generator=g).to(D).tolist()
        ids = [0, 1, 0, 1, 0, 1]
        T = [1.0, 0.5, 2.0][trial]
        R = 20000
        x = torch.tensor([s], dtype=D).repeat(R, 1).requires_grad_()
        relt, idt = torch.tensor(rel, dtype=D).expand(R, 6), torch.tensor(ids).expand(R, 6)
        M = dips(x, relt, idt, browsing=Logarithmic(), tie_weight=0.5, num_groups=2,
                 ordering=PLAbs(samples=3, estimator=estimator, temperature=T, generator=gen(trial)))
        (M[:, 0, 1] - M[:, 1, 0]).sum().backward()
        Flog = lambda k: 1.0 / math.log2(k + 2)  # noqa: E731
        fd = plr.fd_gradient(plr.obj_dips_gap(rel, ids, Flog, 0.5), [v / T for v in s])
        assert_unbiased(x.grad, torch.tensor(fd, dtype=D) / T, atol=2e-4)


@pytest.mark.slow
def test_estimator_variance_report_slow(capsys):
    """Per-coordinate variance of both estimators (printed; run with -s to see it).  Asserted only where robust:
    PL-Rank has lower total variance than the score function on the DIPS gap at every S.  (On the exposure
    objectives, where rewards have a large common component that the leave-one-out baseline removes and PL-Rank
    does not, PL-Rank's variance is higher.)"""
    lines = []
    for name in ("expo", "dips", "acc", "mis_lin"):
        for S in (2, 8, 32):
            v = _variances(name, S=S, R=20000, seed=500 + S)
            ratio = (v["pl_rank"].sum() / v["score_function"].sum()).item()
            lines.append(f"{name:8s} S={S:3d} var_sf={[round(a, 5) for a in v['score_function'].tolist()]} "
                         f"var_plrank={[round(a, 5) for a in v['pl_rank'].tolist()]} ratio={ratio:.3f}")
            if name == "dips":
                assert ratio < 0.85, (name, S, ratio)
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_pl_rank_expected_positions_differentiable():
    x = torch.tensor([GRAD_S], dtype=D).repeat(3000, 1).requires_grad_()
    w = torch.tensor(GRAD_W, dtype=D)
    ob = PLAbs(samples=4, temperature=GRAD_TEMP, generator=gen(9))(x, torch.ones_like(x, dtype=torch.bool))
    pos = ob.expected_positions()
    assert pos.requires_grad
    (pos * w).sum().backward()
    fd = plr.fd_gradient(lambda m: sum(a * b for a, b in zip(GRAD_W, plr.expected_positions(m))),
                         [v / GRAD_TEMP for v in GRAD_S])
    assert_unbiased(x.grad, torch.tensor(fd, dtype=D) / GRAD_TEMP)


def test_score_function_expected_positions_unbiased():
    x = torch.tensor([GRAD_S], dtype=D).repeat(3000, 1).requires_grad_()
    w = torch.tensor(GRAD_W, dtype=D)
    ob = PLAbs(samples=4, estimator="score_function", temperature=GRAD_TEMP,
               generator=gen(9))(x, torch.ones_like(x, dtype=torch.bool))
    (ob.expected_positions() * w).sum().backward()
    fd = plr.fd_gradient(lambda m: sum(a * b for a, b in zip(GRAD_W, plr.expected_positions(m))),
                         [v / GRAD_TEMP for v in GRAD_S])
    assert_unbiased(x.grad, torch.tensor(fd, dtype=D) / GRAD_TEMP)


# ================================================================================ 6. relaxed


def test_relaxed_gradients_finite_and_nonzero():
    s, mask, rel, ids = batch_tensors()
    for dtype in (D, torch.float32):
        x = s.to(dtype).clone().requires_grad_()
        out = _measures(PLAbs(samples=8, estimator="relaxed", temperature=TEMP, generator=gen(2)),
                        x, mask, rel.to(dtype), ids)
        total = (out["dips"].sum() + out["igi"].sum() + out["acc"].sum() + out["parity"].per_group.sum()
                 + out["mis"].abs().sum() + out["ee"].loss.sum())
        total.backward()
        assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
        assert (x.grad[~mask] == 0).all()


def test_relaxed_value_converges_as_relaxation_temperature_vanishes():
    b, R = 0, 100
    s, mask, rel, ids = _replicated(b, R)
    ex, _ = _flat_values(_measures(PLAbs(exact=True, temperature=TEMP), s[:1], mask[:1], rel[:1], ids[:1]))
    err = {}
    for t in (1.0, 0.1, 1e-3):
        ordering = PLAbs(samples=50, estimator="relaxed", temperature=TEMP,
                         relaxation=SoftRank(temperature=t, scale="none"), generator=gen(21))
        lin, _ = _flat_values(_measures(ordering, s, mask, rel, ids))
        mean, se = lin.mean(0), lin.std(0) / math.sqrt(R)
        err[t] = (mean - ex[0]).abs()
        if t == 1e-3:
            assert (err[t] <= 4 * se + 1e-4).all(), (err[t], se)
    assert err[1.0].max() > 5 * err[1e-3].max() and err[1.0].max() > err[0.1].max()


# ================================================================================ 7. masks, dtypes, validation


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function", "relaxed", "exact"])
def test_padded_items_get_exactly_zero_gradient(estimator):
    s, mask, rel, ids = batch_tensors()
    s = s.clone()
    s[~mask] = torch.tensor([50.0, -50.0, 3.0, 0.1, 7.0][: int((~mask).sum())], dtype=D)
    ordering = (PLAbs(exact=True, temperature=TEMP) if estimator == "exact" else
                PLAbs(samples=6, estimator=estimator, temperature=TEMP, generator=gen(4)))
    for key in ("dips", "igi", "acc", "parity", "mis", "ee"):
        x = s.clone().requires_grad_()
        out = _measures(ordering, x, mask, rel, ids)[key]
        val = {"parity": lambda o: o.per_group.sum() + o.wins.sum(), "ee": lambda o: o.loss.sum() + o.disparity.sum()}
        loss = val.get(key, lambda o: (o * torch.arange(1, o[0].numel() + 1, dtype=D).reshape(o.shape[1:])).sum())(out)
        loss.backward()
        assert torch.isfinite(x.grad).all(), key
        assert (x.grad[~mask] == 0).all(), (key, x.grad)
        assert x.grad[mask].abs().sum() > 0, key


def test_single_real_item_list():
    s = torch.tensor([[0.3, 0.1, -0.2]], dtype=D, requires_grad=True)
    mask = torch.tensor([[False, True, False]])
    for ordering in (PLAbs(samples=4, generator=gen(0)), PLAbs(samples=4, estimator="score_function",
                                                               generator=gen(0)),
                     PLAbs(exact=True)):
        ob = ordering(s, mask)
        e = ob.exposure(RBP(GAMMA))
        assert torch.allclose(e.detach(), torch.tensor([[0., 1., 0.]], dtype=D))
        if e.requires_grad:
            g, = torch.autograd.grad(e.sum(), s)
            assert (g == 0).all()


def test_float32():
    s, mask, rel, ids = batch_tensors(torch.float32)
    exact = _measures(PLAbs(exact=True, temperature=TEMP), s.double(), mask, rel.double(), ids)
    for est in ("pl_rank", "score_function"):
        x = s.clone().requires_grad_()
        out = _measures(PLAbs(samples=2000, estimator=est, temperature=TEMP, generator=gen(6)),
                        x, mask, rel, ids)
        assert out["dips"].dtype == torch.float32
        assert torch.allclose(out["dips"].double(), exact["dips"], atol=0.02)
        assert torch.allclose(out["mis"].double(), exact["mis"], atol=0.02)
        (out["dips"][:, 0, 1] - out["dips"][:, 1, 0]).sum().backward()
        assert x.grad.dtype == torch.float32 and torch.isfinite(x.grad).all() and (x.grad[~mask] == 0).all()
    # exact gradient in float32 agrees with float64
    x32 = s.clone().requires_grad_()
    x64 = s.double().clone().requires_grad_()
    for x in (x32, x64):
        M = dips(x, rel.to(x.dtype), ids, mask=mask, num_groups=2, ordering=PLAbs(exact=True, temperature=TEMP))
        (M[:, 0, 1] - M[:, 1, 0]).sum().backward()
    assert torch.allclose(x32.grad.double(), x64.grad, atol=1e-5)
    # logits spanning ~40 in float32: PL-Rank stays finite
    big = torch.tensor([[20.0, -20.0, 0.0, 5.0]], requires_grad=True)
    r = torch.tensor([[1., 0., 1., 0.]])
    g = torch.tensor([[0, 1, 1, 0]])
    M = dips(big, r, g, num_groups=2, ordering=PLAbs(samples=16, generator=gen(1)))
    M.sum().backward()
    assert torch.isfinite(big.grad).all()


def test_argument_validation():
    with pytest.raises(ValueError):
        PlackettLuce(samples=1, estimator="score_function")
    with pytest.raises(ValueError):
        PlackettLuce(samples=0)
    with pytest.raises(ValueError):
        PlackettLuce(samples=2.0)
    with pytest.raises(ValueError):
        PlackettLuce(estimator="reinforce")
    with pytest.raises(ValueError):
        PlackettLuce(temperature=0.0)
    PlackettLuce(samples=1, estimator="pl_rank")
    PlackettLuce(samples=1, estimator="relaxed")
    PlackettLuce(samples=1, estimator="score_function", exact=True)  # no baseline needed when exact
    with pytest.raises(ValueError):
        PlackettLuce(exact=True)(torch.zeros(1, 9), torch.ones(1, 9, dtype=torch.bool))


@pytest.mark.parametrize("make,name", [
    (lambda: PlackettLuce(temperature=float("inf")), "temperature"), (lambda: PlackettLuce(temperature=float("nan")),
                                                                      "temperature"),
    (lambda: PlackettLuce(temperature=True), "temperature"), (lambda: PlackettLuce(temperature=-1.0), "temperature"),
    (lambda: PlackettLuce(samples=0), "samples"), (lambda: PlackettLuce(samples=True), "samples"),
    (lambda: PlackettLuce(samples=2.0), "samples"), (lambda: PlackettLuce(samples=float("nan")), "samples"),
    (lambda: PlackettLuce(samples=1, estimator="score_function"), "samples"),
    (lambda: PlackettLuce(estimator="reinforce"), "estimator"), (lambda: PlackettLuce(estimator=None), "estimator"),
    (lambda: PlackettLuce(exact=1), "exact"), (lambda: PlackettLuce(exact="yes"), "exact"),
    (lambda: PlackettLuce(relaxation="softrank"), "relaxation"), (lambda: PlackettLuce(generator=0), "generator"),
    (lambda: sample_rankings(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool), 0), "samples"),
    (lambda: sample_rankings(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool), 2, top_k=4), "top_k"),
    (lambda: sample_rankings(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool), 2, top_k=True), "top_k"),
    (lambda: pair_probability(torch.zeros(3), temperature=float("inf")), "temperature"),
    (lambda: top1_probability(torch.zeros(3), temperature=0.0), "temperature"),
])
def test_argument_validation_names_the_argument(make, name):
    """Every argument checked (NaN, inf, bools, wrong types) with a ValueError naming it."""
    with pytest.raises(ValueError, match=name):
        make()


# ================================================================================ 8. large logits, fp16


SPAN_S = [0.3, -0.5, 1.0, 300.0, -300.0]  # a list whose logits span 600: item 3 always first, item 4 always last
SPAN_W = [1.0, -0.5, 0.8, 0.3, 0.2]


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function"])
def test_large_logit_span_gradient_unbiased_float32(estimator):
    """Regression: with logits spanning more than ~88 in one list, ``e^{m_d}`` and ``1 / Z_k`` overflowed
    in float32 and the PL-Rank gradient was NaN.  Now: finite, and unbiased against the plain-Python enumeration
    (span 600, float32)."""
    R = 3000
    x = torch.tensor([SPAN_S], dtype=torch.float32).repeat(R, 1).requires_grad_()
    ordering = PLAbs(samples=4, estimator=estimator, generator=gen(23))
    lib_objective("expo", x, ordering, w=torch.tensor(SPAN_W)).sum().backward()
    assert torch.isfinite(x.grad).all()
    exact = torch.tensor(plr.fd_gradient(plr.obj_weighted_exposure(SPAN_W, F_ref), SPAN_S), dtype=D)
    assert exact[:3].abs().max() > 0.05  # a real gradient for the three items in the middle
    assert_unbiased(x.grad.double(), exact, atol=2e-3)


def test_large_logit_span_pair_gradient_unbiased_float32():
    """The PL-Rank pair-reward path (DIPS) at a logit span of 600 in float32: finite and unbiased."""
    R = 3000
    rel = torch.tensor(GRAD_REL, dtype=torch.float32).expand(R, 5)
    x = torch.tensor([SPAN_S], dtype=torch.float32).repeat(R, 1).requires_grad_()
    lib_objective("dips", x, PLAbs(samples=4, generator=gen(29)), rel=rel).sum().backward()
    assert torch.isfinite(x.grad).all()
    exact = torch.tensor(plr.fd_gradient(plr.obj_dips_gap(GRAD_REL, GRAD_IDS, F_ref, 0.5), SPAN_S), dtype=D)
    assert_unbiased(x.grad.double(), exact, atol=2e-3)


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function", "relaxed", "exact"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_logits_spanning_1e4_finite_every_path(estimator, dtype):
    """Every PL path (sampling, log-probabilities, score function, PL-Rank, relaxed, exact) gives finite
    values and gradients for logits spanning 1e4, in every dtype, with padding (NaN there) getting zero gradient."""
    s, mask, rel, ids = batch_tensors()
    s = (s / s[mask].abs().max() * 5e3).to(dtype)
    s = torch.where(mask, s, torch.full_like(s, float("nan")))
    ordering = (PLAbs(exact=True) if estimator == "exact" else
                PLAbs(samples=6, estimator=estimator, generator=gen(4)))
    x = s.clone().requires_grad_()
    outs = _measures(ordering, x, mask, rel.to(dtype), ids)  # one graph per measure, each differentiated below
    val = {"parity": lambda o: o.per_group.sum() + o.wins.sum(), "ee": lambda o: o.loss.sum() + o.disparity.sum()}
    for key in ("dips", "acc", "parity", "mis", "ee"):
        loss = val.get(key, lambda o: (o * torch.arange(1, o[0].numel() + 1).reshape(o.shape[1:])).sum())(outs[key])
        assert torch.isfinite(loss), key
        (g,) = torch.autograd.grad(loss, x, retain_graph=True)
        assert torch.isfinite(g).all(), key
        assert (g[~mask] == 0).all(), key
    ob = ordering(torch.where(mask, s, torch.zeros_like(s)).requires_grad_(), mask)
    for q in (ob.expected_positions(), ob.position_matrix(), ob.exposure(RBP(GAMMA))):
        assert torch.isfinite(q).all()
    lp = log_probability(s.float().nan_to_num(), sample_rankings(s.float().nan_to_num(), mask, 3, gen(0)), mask)
    assert torch.isfinite(lp).all() and (lp <= 0).all()


def _ndcg_uniform_policy(rel):
    """NDCG averaged over all n! rankings (the PL policy of all-equal scores), exactly, in Python."""
    n = len(rel)
    ideal = sorted(rel, reverse=True)
    idcg = sum((2 ** r - 1) / math.log2(k + 2) for k, r in enumerate(ideal))
    tot = 0.0
    perms = list(itertools.permutations(range(n)))
    for y in perms:
        tot += sum((2 ** rel[d] - 1) / math.log2(k + 2) for k, d in enumerate(y)) / idcg
    return tot / len(perms)


@pytest.mark.parametrize("value", [0.0, 1e4, 1e6, 3e7])
@pytest.mark.parametrize("n", [4, 6, 7])
def test_exact_large_equal_scores_against_enumeration(value, n):
    """Regression: ``PlackettLuce(exact=True)`` was wrong for large equal scores (each log-probability
    rounded separately: the weights summed to 0.24 at 3e7, NDCG off).  Probabilities are now normalised per list
    in log space: the weights sum to 1 and NDCG equals the brute-force average over the n! rankings."""
    from torchfair.metrics import ndcg
    s = torch.full((1, n), value)
    rel = [3.0, 0.0, 2.0, 1.0, 0.0, 2.0, 1.0][:n]
    ob = PLAbs(exact=True)(s, torch.ones(1, n, dtype=torch.bool))
    assert abs(ob.weights.sum().item() - 1) < 1e-6
    assert torch.allclose(ob.weights[ob.weights > 0], torch.tensor(1.0 / math.factorial(n)), rtol=1e-4)
    got = ndcg(s, torch.tensor([rel]), ordering=PLAbs(exact=True)).item()
    assert got == pytest.approx(_ndcg_uniform_policy(rel), rel=1e-5)
    assert got <= 1.0


def test_exact_weights_normalised_with_padding_and_gradients():
    """Exact enumeration with padding and a large logit span: weights sum to 1 per list, gradients match the
    float64 enumeration."""
    s, mask, rel, ids = batch_tensors(torch.float32)
    s = s * 40.0  # spans ~ 720
    ob = PLAbs(exact=True)(s, mask)
    torch.testing.assert_close(ob.weights.sum(0), torch.ones(3))
    x32 = s.clone().requires_grad_()
    x64 = s.double().clone().requires_grad_()
    for x in (x32, x64):
        e = PLAbs(exact=True, temperature=30.0)(x, mask).exposure(RBP(GAMMA))
        (e * torch.arange(6.0, dtype=x.dtype)).sum().backward()
    assert torch.isfinite(x32.grad).all()
    assert torch.allclose(x32.grad.double(), x64.grad, atol=1e-5)


def test_position_matrix_does_not_swap_weights():
    """PL-Rank orderings give the position matrix the score-function gradient by passing those weights, not by
    replacing their own weights for the call (no swapping of state in and out)."""
    s, mask, rel, ids = batch_tensors()
    x = s.clone().requires_grad_()
    ob = PLAbs(samples=8, generator=gen(2))(x, mask)
    w = ob.weights
    R = ob.position_matrix()
    assert ob.weights is w and not w.requires_grad
    C = torch.arange(36.0, dtype=D).reshape(6, 6).sin()  # a reward for every (position, item)
    (g,) = torch.autograd.grad((R * C).sum(), x)
    assert torch.isfinite(g).all() and g.abs().sum() > 0 and (g[~mask] == 0).all()


# ================================================================================ 9. fast paths
# The fast paths (int32-keyed sort, prefix sums of 1 / Z_k in float32 / float64 with a log-space fallback for wide
# lists, the level sweep for pair contractions and its PL-Rank backward) against independent references: a dense
# [N, N] double-precision evaluation of pi_k(d), the generic pair blocks and the dense PL-Rank pair backward.

from torchfair.browsing import Cascade  # noqa: E402
from torchfair.orderings import plackett_luce as plmod  # noqa: E402
from torchfair.orderings.base import LevelPairWeight  # noqa: E402


def _random_batch(B=5, N=9, span=6.0, seed=0, pad=True):
    g = gen(seed)
    s = torch.randn(B, N, generator=g, dtype=D)
    s = s / s.abs().amax(-1, keepdim=True) * span / 2
    mask = torch.ones(B, N, dtype=torch.bool)
    if pad:
        mask[1, [0, 4]] = False
        mask[B - 2, 2:] = False
        mask[B - 1, :N - 1] = False  # a single real item
    return s, mask


def _dense_prefix(m, rankings, mask, x):
    """sum_{k <= j, k < n} x_k exp(m_{y_j} - log Z_k) by an explicit [N, N] matrix in float64 (the reference)."""
    S, B, N = rankings.shape
    out = torch.zeros(S, B, N, dtype=D)
    n = mask.sum(-1)
    for s in range(S):
        for b in range(B):
            y = rankings[s, b]
            ms = m[b, y].double()
            logz = torch.stack([torch.logsumexp(ms[k:int(n[b])], 0) if k < n[b] else torch.tensor(0., dtype=D)
                                for k in range(N)])
            k = torch.arange(N)
            # pi_k(y_j) = exp(m_{y_j} - log Z_k) <= 1 for k <= j (the clamp only guards the unused k > j)
            upto = (k[:, None] <= k[None, :]) & (k[:, None] < n[b])
            P = torch.exp((ms[None, :] - logz[:, None]).clamp(max=0)) * upto
            out[s, b] = (x[s, b].double()[:, None] * P).sum(0) * (k < n[b])
    return out


@pytest.mark.parametrize("span", [30.0, 75.0])
@pytest.mark.parametrize("mode", ["plain32", "plain64", "log", None])
def test_step_sums_every_path_match_dense_reference(mode, span):
    s, mask = _random_batch(span=span)
    m = plmod._centred(s.float() if mode == "plain32" else s, mask)
    rk = sample_rankings(m, mask, 4, gen(1))
    steps = plmod._Steps(m, rk, mask, _mode=mode)
    real = (torch.arange(9)[None, :] < mask.sum(-1)[:, None]).expand(4, 5, 9)
    x = torch.randn(4, 5, 9, generator=gen(2), dtype=D) * real
    tol = dict(rtol=1e-4, atol=1e-5) if mode == "plain32" else dict(rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(steps.prefix(x.to(m.dtype)).double(), _dense_prefix(m, rk, mask, x), **tol)
    lp_ref = log_probability(s, rk, mask)  # auto path: float64, plain cumulative sums
    lp_dense = torch.zeros(4, 5, dtype=D)
    for a in range(4):
        for b in range(5):
            idx = real_indices(mask[b].tolist())
            lp_dense[a, b] = math.log(plr.pl_probability([float(m[b, i]) for i in idx],
                                                         [idx.index(int(i)) for i in rk[a, b, :len(idx)]]))
    torch.testing.assert_close(steps.log_prob().double(), lp_dense, **tol)
    if m.dtype == D:
        torch.testing.assert_close(lp_ref, lp_dense)


def test_wide_lists_take_the_log_space_path_and_agree():
    """A batch mixing a list whose logits span 2e4 with ordinary ones: the wide list is recomputed in log space
    (the plain float64 sums would overflow), the others stay on the plain path; all match the dense reference."""
    s, mask = _random_batch(span=6.0)
    s[2] = s[2] * 4e3  # span ~ 2.4e4
    m = plmod._centred(s, mask)
    rk = sample_rankings(m, mask, 3, gen(3))
    steps = plmod._Steps(m, rk, mask)
    assert steps.mode == "plain64" and steps.wide.tolist() == [2]
    real = (torch.arange(9)[None, :] < mask.sum(-1)[:, None]).expand(3, 5, 9)
    x = torch.randn(3, 5, 9, generator=gen(4), dtype=D) * real
    torch.testing.assert_close(steps.prefix(x), _dense_prefix(m, rk, mask, x), rtol=1e-9, atol=1e-10)
    log = plmod._Steps(m, rk, mask, _mode="log")
    torch.testing.assert_close(steps.log_prob(), log.log_prob())
    fk = RBP(0.7).weights(9, dtype=D).expand(5, 9) * real[0]
    ws = torch.randn(3, 5, 9, generator=gen(5), dtype=D) * real
    torch.testing.assert_close(steps.exposure_grad(fk, ws), log.exposure_grad(fk, ws))


def test_log_probability_gradient_matches_autograd_of_the_formula():
    s, mask = _random_batch(span=8.0)
    x = s.clone().requires_grad_()
    rk = sample_rankings(s, mask, 6, gen(6))
    w = torch.randn(6, 5, generator=gen(7), dtype=D)
    (g,) = torch.autograd.grad((log_probability(x, rk, mask) * w).sum(), x)
    y = s.clone().requires_grad_()  # the plain formula, differentiated by autograd
    m = torch.where(mask, y - y.detach().masked_fill(~mask, -1e9).amax(-1, keepdim=True), torch.full_like(y, -1e4))
    ms = m.expand(6, 5, 9).gather(-1, rk)
    logz = torch.flip(torch.logcumsumexp(torch.flip(ms, [-1]), -1), [-1])
    real = torch.arange(9)[None, None, :] < mask.sum(-1)[None, :, None]
    lp = torch.where(real, ms - logz, torch.zeros_like(ms)).sum(-1)
    (g_ref,) = torch.autograd.grad((lp * w).sum(), y)
    torch.testing.assert_close(g, g_ref)
    assert (g[~mask] == 0).all()


def test_int32_sort_keys_match_the_float_sort():
    g = gen(8)
    key = torch.randn(3, 40, 30, generator=g)
    key[:, :, 3] = key[:, :, 7]  # ties
    mask = torch.rand(40, 30, generator=g) > 0.3
    key = torch.where(mask, key, torch.full_like(key, float("-inf")))
    want = torch.sort(key, dim=-1, descending=True, stable=True).indices
    got = torch.sort(plmod._descending_int32(key.clone(), mask), dim=-1, stable=True).indices
    assert torch.equal(got, want)
    special = torch.tensor([[[float("-inf"), -3e38, -1.0, -1e-45, 0.0, 1e-45, 1.0, 3e38, float("inf")]]])
    k = plmod._descending_int32(special.clone(), torch.ones(1, 9, dtype=torch.bool))
    assert torch.equal(torch.argsort(k, dim=-1), torch.arange(8, -1, -1)[None, None])


def _callable(w):
    """The same pair weight as a plain callable: the orderings take their generic (dense) paths."""
    return lambda a, b: w(a, b)


@pytest.mark.parametrize("which", ["above", "joint"])
@pytest.mark.parametrize("browsing", [RBP(0.8), Cascade(0.9, max_grade=2.0)])
@pytest.mark.parametrize("estimator", ["pl_rank", "score_function"])
def test_pair_contraction_level_sweep_matches_generic_path(which, browsing, estimator):
    """Values and gradients of contract() with a LevelPairWeight (the sweep, and for PL-Rank the level-decomposed
    backward) equal those of the same weight as a plain callable (generic pair blocks, dense PL-Rank backward)."""
    s, mask = _random_batch(B=4, N=7, span=5.0, seed=9)
    rel = torch.randint(0, 3, (4, 7), generator=gen(10)).to(D)
    right = torch.nn.functional.one_hot(torch.randint(0, 2, (4, 7), generator=gen(11)), 2).to(D)
    gout = torch.randn(4, 7, 2, generator=gen(12), dtype=D)
    lw = LevelPairWeight(rel, greater=1.0, equal=0.5, less=0.2)
    outs = []
    for w in (lw, _callable(lw), None):
        x = s.clone().requires_grad_()
        ob = PLAbs(samples=5, estimator=estimator, generator=gen(13))(x, mask)
        kw = dict(browsing=browsing, relevance=rel) if which == "joint" else {}
        v = ob.contract(right, which=which, pair_weight=w, **kw)
        (g,) = torch.autograd.grad((v * gout).sum(), x)
        outs.append((v.detach(), g))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    torch.testing.assert_close(outs[0][1], outs[1][1])
    assert (outs[0][1][~mask] == 0).all()
    # no pair weight: one level (the sweep) vs a weight of ones as a callable (generic path)
    ones = _callable(LevelPairWeight(torch.zeros(4, 7, dtype=D), greater=1.0, equal=1.0, less=1.0))
    x = s.clone().requires_grad_()
    ob = PLAbs(samples=5, estimator=estimator, generator=gen(13))(x, mask)
    kw = dict(browsing=browsing, relevance=rel) if which == "joint" else {}
    v = ob.contract(right, which=which, pair_weight=ones, **kw)
    (g,) = torch.autograd.grad((v * gout).sum(), x)
    torch.testing.assert_close(outs[2][0], v.detach())
    torch.testing.assert_close(outs[2][1], g)


def test_pair_contraction_sweep_in_small_blocks(monkeypatch):
    """The sweep and the level backward go a few samples at a time: a tiny block budget gives the same numbers."""
    s, mask = _random_batch(B=3, N=6, span=4.0, seed=14)
    rel = torch.randint(0, 3, (3, 6), generator=gen(15)).to(D)
    right = torch.rand(3, 6, 2, generator=gen(16), dtype=D)
    res = []
    for budget in (None, 1):
        if budget:
            monkeypatch.setattr(plmod, "PAIR_BLOCK_ELEMENTS", budget)
            from torchfair.orderings import stochastic
            monkeypatch.setattr(stochastic, "PAIR_BLOCK_ELEMENTS", budget)
        x = s.clone().requires_grad_()
        v = PLAbs(samples=7, generator=gen(17))(x, mask).contract(
            right, which="joint", pair_weight=LevelPairWeight(rel, 1.0, 0.5), browsing=RBP(0.9))
        (g,) = torch.autograd.grad(v.sum(), x)
        res.append((v.detach(), g))
    torch.testing.assert_close(res[0][0], res[1][0])
    torch.testing.assert_close(res[0][1], res[1][1])


def test_position_matrix_matches_loop_over_samples():
    s, mask = _random_batch(seed=18)
    x = s.clone().requires_grad_()
    ob = PLAbs(samples=6, estimator="score_function", generator=gen(19))(x, mask)
    R = ob.position_matrix()
    pos = ob.sample_positions
    ref = sum(ob.weights[a][:, None, None] * (torch.arange(9)[None, :, None] == pos[a][:, None, :]).to(D)
              for a in range(6)) * mask[:, None, :].to(D)
    torch.testing.assert_close(R, ref)
    C = torch.randn(9, 9, generator=gen(20), dtype=D)
    (g1,) = torch.autograd.grad((R * C).sum(), x, retain_graph=True)
    (g2,) = torch.autograd.grad((ref * C).sum(), x)
    torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function"])
def test_log_space_path_end_to_end(monkeypatch, estimator):
    """The path non-CPU devices take (every step sum in log space, no host synchronisation) gives the CPU path's
    values and gradients for exposure and DIPS, with padding."""
    s, mask = _random_batch(B=4, N=8, span=8.0, seed=21)
    rel = torch.randint(0, 3, (4, 8), generator=gen(22)).to(D)
    ids = torch.randint(0, 2, (4, 8), generator=gen(23))
    w = torch.randn(4, 8, generator=gen(24), dtype=D)
    outs = {}
    for mode in (None, "log"):
        monkeypatch.setattr(plmod, "_DEFAULT_MODE", mode)
        x = s.clone().requires_grad_()
        e = PLAbs(samples=6, estimator=estimator, generator=gen(25))(x, mask).exposure(RBP(0.8))
        M = dips(x, rel, ids, mask=mask, num_groups=2, ordering=PLAbs(samples=6, estimator=estimator,
                                                                      generator=gen(26)))
        (g,) = torch.autograd.grad((e * w).sum() + (M * torch.tensor([[0.3, 1.0], [-1.0, 0.2]], dtype=D)).sum(), x)
        outs[mode] = (e.detach(), M.detach(), g)
    for a, b in zip(outs[None], outs["log"]):
        torch.testing.assert_close(a, b)


# ================================================================================ 10. the temperature rule
# The default policy's logits are ``scores / tau_b`` with ``tau_b = temperature * max(std_b, min_scale)`` per list
# (``scale="std"``, the rule of the soft orderings, detached); ``scale="none"`` keeps the absolute temperature.
# References: the plain-Python enumeration (pl_reference) at logits computed here by hand with ``statistics``.

import statistics  # noqa: E402

from torchfair.losses import dips_loss  # noqa: E402
from torchfair.metrics import ndcg, pairwise_gap  # noqa: E402

#: the batch with list 2's scores divided by 20: its std (0.03) is below the default ``min_scale`` 0.25
STD_SCORES = [BATCH_SCORES[0], BATCH_SCORES[1], [x / 20 for x in BATCH_SCORES[2]]]


def _hand_logits(b, temperature, min_scale=0.25, rel_min_scale=0.0, scores=STD_SCORES):
    """Logits of the real items of list b: ``s / (temperature * max(pstdev, rel_min_scale * mean|s|, min_scale))``."""
    idx = real_indices(BATCH_MASK[b])
    xs = [scores[b][i] for i in idx]
    scale = max(statistics.pstdev(xs), rel_min_scale * sum(abs(x) for x in xs) / len(xs), min_scale)
    return [x / (temperature * scale) for x in xs], temperature * scale


def test_default_is_relative_temperature():
    o = PlackettLuce()
    assert (o.temperature, o.scale, o.min_scale, o.rel_min_scale) == (0.1, "std", 0.25, 0.0)
    assert repr(o) == "PlackettLuce(samples=100, estimator='pl_rank', temperature=0.1, scale='std', exact=False)"
    assert repr(PlackettLuce(8, temperature=1.0, scale="none")) == (
        "PlackettLuce(samples=8, estimator='pl_rank', temperature=1.0, scale='none', exact=False)")
    assert "min_scale=0.5" in repr(PlackettLuce(min_scale=0.5))


@pytest.mark.parametrize("temperature,kw", [(0.1, {}), (0.3, {"min_scale": 0.01}), (0.4, {"rel_min_scale": 2.0})])
def test_std_scale_exact_matches_enumeration_at_hand_computed_logits(temperature, kw):
    """exact=True with scale="std" equals the plain enumeration at logits s / (temperature * std) computed by hand,
    list by list (padded lists; list 2 is below the min_scale floor unless min_scale is lowered), values and
    gradients (the gradient of the frozen temperature: tau_b is a constant of the loss)."""
    s = torch.tensor(STD_SCORES, dtype=D)
    mask, rel, ids = torch.tensor(BATCH_MASK), torch.tensor(BATCH_REL, dtype=D), torch.tensor(BATCH_IDS)
    x = s.clone().requires_grad_()
    ordering = PlackettLuce(exact=True, temperature=temperature, **kw)
    ob = ordering(x, mask)
    pos, ex = ob.expected_positions().detach(), ob.exposure(RBP(GAMMA)).detach()
    M = dips(x, rel, ids, browsing=RBP(GAMMA), tie_weight=0.5, mask=mask, num_groups=2, ordering=ordering)
    (M[:, 0, 1] - M[:, 1, 0]).sum().backward()
    M = M.detach()
    for b in range(3):
        m, tau = _hand_logits(b, temperature, **kw)
        idx = real_indices(BATCH_MASK[b])
        r, g = [BATCH_REL[b][i] for i in idx], [BATCH_IDS[b][i] for i in idx]
        rpos, rex = plr.expected_positions(m), plr.expected_exposure_items(m, F_ref)
        Mr = plr.exp_dips(m, r, g, 2, F_ref, 0.5)
        fd = plr.fd_gradient(plr.obj_dips_gap(r, g, F_ref, 0.5), m)
        for a, i in enumerate(idx):
            assert close(pos[b, i], rpos[a]) and close(ex[b, i], rex[a]), (b, i)
            assert close(x.grad[b, i], fd[a] / tau, 1e-7), (b, i, x.grad[b, i].item(), fd[a] / tau)
        assert all(close(M[b, p, q], Mr[p][q]) for p in range(2) for q in range(2)), b
        assert (x.grad[b][~mask[b]] == 0).all()
    if not kw:  # the floor is live for list 2: its policy is that of the absolute temperature 0.25 * temperature
        ab = PLAbs(exact=True, temperature=0.25 * temperature)(s[2:], mask[2:]).expected_positions()
        torch.testing.assert_close(pos[2:], ab, rtol=1e-12, atol=1e-12)


def test_sampled_std_policy_is_the_absolute_policy_at_the_list_temperature():
    """The sampling estimators draw from the same policy: with one generator seed, scale="std" samples the rankings
    that scale="none" samples at the per-list temperature (a single-list batch, so that one number is its tau)."""
    s = torch.tensor([BATCH_SCORES[0]], dtype=D)
    mask = torch.ones(1, 6, dtype=torch.bool)
    _, tau = _hand_logits(0, 0.1, scores=[BATCH_SCORES[0]])
    for est in ("pl_rank", "score_function"):
        a = PlackettLuce(samples=64, estimator=est, generator=gen(5))(s, mask)
        b = PLAbs(samples=64, estimator=est, temperature=tau, generator=gen(5))(s, mask)
        assert torch.equal(a.rankings, b.rankings)


@pytest.mark.parametrize("c", [0.5, 3.0, 1e3])
def test_std_scale_policy_is_invariant_to_scaling_the_scores(c):
    """Scaling every score by c > 0 leaves the scale="std" policy unchanged (lists above the min_scale floor),
    unlike the absolute temperature."""
    s, mask, rel, ids = batch_tensors()  # list stds 0.55-0.71: above the floor for every c >= 0.5
    for kw in ({"exact": True}, {"samples": 32, "generator": None}):
        def run(x, **extra):
            args = {**kw, **extra}
            if "generator" in args:
                args["generator"] = gen(11)
            return args.pop("_cls", PlackettLuce)(**args)(x, mask)
        base, scaled = run(s), run(c * s)
        torch.testing.assert_close(scaled.expected_positions(), base.expected_positions(), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(scaled.exposure(RBP(GAMMA)), base.exposure(RBP(GAMMA)), rtol=1e-9, atol=1e-9)
    Md = [dips(x, rel, ids, mask=mask, num_groups=2, ordering=PlackettLuce(exact=True)) for x in (s, c * s)]
    torch.testing.assert_close(Md[1], Md[0], rtol=1e-9, atol=1e-9)
    absolute = [PLAbs(exact=True)(x, mask).expected_positions() for x in (s, c * s)]
    assert (absolute[1] - absolute[0]).abs().max() > 0.05


def _trained_lists(B, N, seed):
    """Lists scored by a "trained ranker": scores 0.25 * N(0, 1) per list (std exactly 0.25), graded relevance
    correlated with the score (rho = 0.7, ~16 % relevant), and a bias of the ranker towards group 1 at equal
    relevance (so that the hard ranking has a DIPS gap against group 0)."""
    g = gen(seed)
    z = torch.randn(B, N, generator=g, dtype=D)
    groups = (torch.rand(B, N, generator=g) < 0.4).long()
    q = 0.7 * z + 0.71 * torch.randn(B, N, generator=g, dtype=D)
    rel = (q > 1.0).to(D) + (q > 1.8).to(D)
    z = z + 0.5 * groups
    z = (z - z.mean(-1, keepdim=True)) / z.std(-1, unbiased=False, keepdim=True)
    return 0.25 * z, rel, groups


def _uniform_ndcg_at(rel, k):
    """Expected NDCG@k of the uniformly random ranking, per list: every item is at each position w.p. 1/n."""
    n = rel.shape[-1]
    gain = (2 ** rel - 1).sum(-1) / n
    disc = 1 / torch.log2(torch.arange(k, dtype=D) + 2)
    ideal = ((2 ** rel.sort(-1, descending=True).values[:, :k] - 1) * disc).sum(-1)
    return gain * disc.sum() / ideal


def test_default_policy_keeps_the_ranking_of_a_trained_ranker():
    """On a trained ranker's lists (spread 0.25) the default policy's expected NDCG@10 is within 20 % of the hard
    ranking's (measured 98-99 %), while the former default (temperature 1, absolute) is close to random."""
    s, rel, _ = _trained_lists(48, 40, seed=0)
    hard = ndcg(s, rel, k=10).mean().item()
    rand = _uniform_ndcg_at(rel, 10).mean().item()
    new = ndcg(s, rel, k=10, ordering=PlackettLuce(samples=100, generator=gen(1))).mean().item()
    old = ndcg(s, rel, k=10, ordering=PLAbs(samples=100, generator=gen(1))).mean().item()
    assert hard - rand > 0.3  # an informative ranking
    assert new >= 0.8 * hard and new <= hard + 0.01
    assert (new - rand) / (hard - rand) > 0.9
    assert (old - rand) / (hard - rand) < 0.25  # the former default: a nearly uniform random policy
    assert abs(old - rand) < 0.2 * hard


@pytest.mark.parametrize("seed", [0, 1])
def test_default_policy_dips_loss_reduces_the_exact_dips_gap(seed):
    """Ten SGD steps of the DIPS loss under the default PL policy reduce the exact (hard-ranking) DIPS gap of a
    trained ranker's lists by more than half (measured 60-85 %); under the former default the gap hardly moves
    (measured < 10 %).  The default policy's expected gap is the hard ranking's (within 2 %), the former default's
    a fraction of it (the expected DIPS of a nearly uniform policy)."""
    s0, rel, groups = _trained_lists(16, 30, seed)

    def gap(x, ordering=None):
        return pairwise_gap(dips(x, rel, groups, num_groups=2, ordering=ordering), protected=0).mean().item()

    def train(**kw):
        s = s0.clone().requires_grad_(True)
        g = gen(100 + seed)
        for _ in range(10):
            loss = dips_loss(s, rel, groups, num_groups=2, ordering=PlackettLuce(samples=8, generator=g, **kw))
            (grad,) = torch.autograd.grad(loss, s)
            with torch.no_grad():
                s -= 1.0 * grad
        return gap(s.detach())

    start = gap(s0)
    assert start > 0.05
    assert abs(gap(s0, PlackettLuce(samples=32, generator=gen(1))) - start) < 0.1 * start
    assert gap(s0, PLAbs(samples=32, generator=gen(1))) < 0.4 * start
    new, old = train(), train(temperature=1.0, scale="none")
    assert new < 0.5 * start, (start, new)
    assert start - old < 0.25 * (start - new), (start, new, old)


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function", "relaxed", "exact"])
def test_default_temperature_on_ties_padding_and_half_precision(estimator):
    """Tied lists (std 0: the min_scale floor gives a uniform policy), a fully padded list and float16 / bfloat16
    scores give finite values and gradients under the default temperature rule; padded items get zero gradient."""
    s = torch.tensor([[0.7, 0.7, 0.7, 0.7, 0.7, 0.7],  # tied
                      [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # tied at 0 (a freshly initialised model)
                      [5.0, 1.0, 3.0, 2.0, 4.0, 0.0],  # fully padded
                      [0.9, -0.4, 0.3, 1.2, -1.1, 0.0]], dtype=D)
    mask = torch.tensor([[True] * 6, [True, True, True, True, False, False], [False] * 6, [True] * 6])
    rel = torch.tensor([[2., 1., 0., 2., 1., 0.]] * 4, dtype=D)
    ids = torch.tensor([[0, 1, 0, 1, 1, 0]] * 4)
    ordering = (PlackettLuce(exact=True) if estimator == "exact" else
                PlackettLuce(samples=6, estimator=estimator, generator=gen(3)))
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        x = s.to(dtype).requires_grad_()
        ob = ordering(x, mask)
        pos = ob.expected_positions()
        assert torch.isfinite(pos).all()
        M = dips(x, rel.to(dtype), ids, mask=mask, num_groups=2, ordering=ordering)
        loss = (M * torch.tensor([[0.3, 1.0], [-1.0, 0.2]], dtype=M.dtype)).sum() + (ob.exposure(RBP(GAMMA))
                                                                                      * rel.to(pos.dtype)).sum()
        (g,) = torch.autograd.grad(loss, x)
        assert torch.isfinite(loss) and torch.isfinite(g).all(), dtype
        assert (g[~mask] == 0).all() and (g[2] == 0).all()
        if estimator == "exact":  # tied lists: the uniform policy, every item at (n - 1) / 2 on average
            torch.testing.assert_close(pos[0].double(), torch.full((6,), 2.5, dtype=D), rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(pos[1, :4].double(), torch.full((4,), 1.5, dtype=D), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("estimator", ["pl_rank", "score_function", "relaxed", "exact"])
def test_default_temperature_huge_scores_finite(estimator):
    """Regression: a lone score of -5e37 divided by the temperature of a tied list (0.1 * min_scale = 0.025)
    overflowed float32 to -inf (NaN gradient); scores near the float32 limit keep finite logits and gradients, and a
    list's policy does not depend on its magnitude."""
    s = torch.tensor([[0.0, -5e37, 0.0, 0.0], [3e38, -3e38, 1e38, 0.0], [2.0, -1.0, 0.5, 0.0]])
    mask = torch.tensor([[False, True, False, False], [True] * 4, [True] * 4])
    rel = torch.tensor([[1.0, 2.0, 0.0, 1.0]] * 3)
    ids = torch.tensor([[0, 1, 0, 1]] * 3)
    ordering = (PlackettLuce(exact=True) if estimator == "exact" else
                PlackettLuce(samples=6, estimator=estimator, generator=gen(3)))
    x = s.clone().requires_grad_()
    M = dips(x, rel, ids, mask=mask, num_groups=2, ordering=ordering)
    e = ordering(x, mask).exposure(RBP(GAMMA))
    (g,) = torch.autograd.grad((M * torch.tensor([[0.3, 1.0], [-1.0, 0.2]])).sum() + (e * rel).sum(), x)
    assert torch.isfinite(M).all() and torch.isfinite(e).all() and torch.isfinite(g).all()
    assert (g[~mask] == 0).all()
    if estimator == "exact":  # scale-free: list 1 has the policy of its scores divided by 1e38
        small = PlackettLuce(exact=True)(s[1:2] / 1e38, mask[1:2]).expected_positions()
        torch.testing.assert_close(ordering(s[1:2], mask[1:2]).expected_positions(), small)


@pytest.mark.parametrize("make,name", [
    (lambda: PlackettLuce(scale="relative"), "scale"), (lambda: PlackettLuce(scale=None), "scale"),
    (lambda: PlackettLuce(min_scale=0.0), "min_scale"), (lambda: PlackettLuce(min_scale=float("nan")), "min_scale"),
    (lambda: PlackettLuce(min_scale=True), "min_scale"), (lambda: PlackettLuce(rel_min_scale=-1.0), "rel_min_scale"),
    (lambda: PlackettLuce(rel_min_scale=float("inf")), "rel_min_scale"),
    (lambda: PlackettLuce(temperature=0.0, scale="none"), "temperature"),
])
def test_temperature_rule_arguments_are_validated(make, name):
    with pytest.raises(ValueError, match=name):
        make()
