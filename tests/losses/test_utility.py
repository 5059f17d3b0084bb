"""torchfair.losses.utility: ListNet, ListMLE, ApproxNDCG, NeuralNDCG (and the Plackett-Luce expected NDCG) --
gradchecks, values against the plain-Python loops of tests/references/loss_reference.py and against ``1 - NDCG``,
padding, undefined lists, low precision, bad arguments.  Shared cases: tests/references/loss_cases.py.
"""
from __future__ import annotations

import math

import pytest
import torch

import loss_reference as ref
from loss_cases import (F64, LOSSES, TAU, UTILITY, _batch_with_undefined, _data, _rows, check_autocast_bfloat16,
                        check_gradcheck, check_half_precision_inputs, check_padding,
                        check_undefined_lists_are_excluded, check_undefined_lists_reduction_sum_and_none, lowp_cases,
                        mask_cases, reduction_names, undefined_cases)
from torchfair.losses import (ListNetLoss, PLNDCGLoss, approx_ndcg_loss, listmle_loss, listnet_loss, neural_ndcg_loss,
                              pl_ndcg_loss)
from torchfair.metrics.utility import ndcg
from torchfair.orderings import NeuralSort, PlackettLuce, SoftRank


# =============================================================================================== 1. gradcheck
@pytest.mark.parametrize("name", ["listnet", "listmle"])
def test_gradcheck_ordering_free(name):
    check_gradcheck(name, None)


@pytest.mark.parametrize("name,Ord,kw", [("approx_ndcg", SoftRank, {}),
                                          ("neural_ndcg", NeuralSort, {"sinkhorn_iters": 20})])
def test_ndcg_losses_gradient_is_that_of_the_frozen_temperature(name, Ord, kw):
    """approx/neural NDCG use ``scale="std"``: the list's std is a detached constant, so their gradient is the one
    of ``1 - NDCG`` on ``Ord(temperature * std, scale="none")`` (gradchecked here), not the derivative of the
    loss value as a function of the scores (the value also moves with the std)."""
    s, r, g, m = _data()
    for b in range(2):
        sb = s[b:b + 1].clone().requires_grad_(True)
        rb = r[b:b + 1]
        std = sb.detach().std(unbiased=False).item()
        frozen = Ord(TAU * std, scale="none", **kw)

        def one_minus_ndcg(x):
            return 1.0 - ndcg(x, rb, ordering=frozen, reduction="mean")

        loss = LOSSES[name](sb, rb, None, None)
        (g_loss,) = torch.autograd.grad(loss, sb)
        (g_frozen,) = torch.autograd.grad(one_minus_ndcg(sb), sb)
        torch.testing.assert_close(loss, one_minus_ndcg(sb), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g_loss, g_frozen, rtol=1e-10, atol=1e-12)
        assert torch.autograd.gradcheck(one_minus_ndcg, (sb,), eps=1e-6, atol=1e-6, rtol=1e-4)
        assert g_loss.abs().max() > 1e-6


# =============================================================================================== 2. values
def test_listnet_matches_cao_et_al():
    s, r, g, m = _batch_with_undefined()
    per = [ref.listnet(_rows(s, m, b), _rows(r, m, b)) for b in range(4)]
    got = listnet_loss(s, r, mask=m, reduction="none")
    torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-12, atol=1e-12)
    assert math.isclose(listnet_loss(s, r, mask=m).item(), sum(per) / 4, rel_tol=1e-12)



def test_listnet_relevance_temperature_divides_the_target_logits():
    s, r, g, m = _batch_with_undefined()
    for T in (0.5, 2.0, 4.0):
        per = [ref.listnet(_rows(s, m, b), [x / T for x in _rows(r, m, b)]) for b in range(4)]
        got = listnet_loss(s, r, mask=m, reduction="none", relevance_temperature=T)
        torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-12, atol=1e-12)
    # T = 1 is Cao et al.'s loss, unchanged; another T changes the loss
    torch.testing.assert_close(listnet_loss(s, r, mask=m, relevance_temperature=1.0), listnet_loss(s, r, mask=m))
    assert not torch.isclose(listnet_loss(s, r, mask=m, relevance_temperature=2.0), listnet_loss(s, r, mask=m))
    # the module form takes it as an option (and so a YAML config's init_args)
    mod = ListNetLoss(relevance_temperature=2.0)
    torch.testing.assert_close(mod(s, r, g, m), listnet_loss(s, r, mask=m, relevance_temperature=2.0))
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="relevance_temperature"):
            listnet_loss(s, r, mask=m, relevance_temperature=bad)

def test_listmle_matches_xia_et_al():
    s, r, g, m = _batch_with_undefined()  # relevance ties inside the lists: broken by list index
    per = [ref.listmle(_rows(s, m, b), _rows(r, m, b)) for b in range(4)]
    got = listmle_loss(s, r, mask=m, reduction="none")
    torch.testing.assert_close(got, torch.tensor(per, dtype=F64), rtol=1e-12, atol=1e-12)
    assert math.isclose(listmle_loss(s, r, mask=m).item(), sum(per) / 4, rel_tol=1e-12)


@pytest.mark.parametrize("name,Ord,kw", [("approx_ndcg", SoftRank, {}),
                                          ("neural_ndcg", NeuralSort, {"sinkhorn_iters": 20})])
def test_ndcg_losses_are_one_minus_ndcg(name, Ord, kw):
    s, r, g, m = _batch_with_undefined()
    r = r.clone()
    r[2] = 0.0  # no relevant item: excluded
    o = Ord(TAU, **kw)
    val, valid = ndcg(s, r, mask=m, ordering=o, return_valid=True)
    assert valid.tolist() == [True, True, False, True]
    expect = (1 - val[valid]).mean()
    got = LOSSES[name](s, r, None, m)
    torch.testing.assert_close(got, expect, rtol=1e-12, atol=1e-12)
    # a near-hard temperature: 1 - the plain-Python NDCG of the score ranking
    f = approx_ndcg_loss if name == "approx_ndcg" else neural_ndcg_loss
    per = [ref.ndcg(_rows(s, m, b), _rows(r, m, b)) for b in range(4)]
    hard = sum(1 - p for p in per if p is not None) / 3
    assert math.isclose(f(s, r, temperature=1e-3, mask=m).item(), hard, abs_tol=1e-6)


# =============================================================================================== 3. masks
@pytest.mark.parametrize("name,oname", mask_cases(UTILITY))
def test_padding_zero_gradient_and_same_value(name, oname):
    check_padding(name, oname)


# =============================================================================================== 4. undefined lists
@pytest.mark.parametrize("name,oname", undefined_cases(UTILITY))
def test_undefined_lists_are_excluded(name, oname):
    check_undefined_lists_are_excluded(name, oname)


@pytest.mark.parametrize("name", reduction_names(UTILITY))
@pytest.mark.parametrize("oname", ["softrank", "pl_exact"])
def test_undefined_lists_reduction_sum_and_none(name, oname):
    check_undefined_lists_reduction_sum_and_none(name, oname)


# =============================================================================================== 5. low precision
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,oname", lowp_cases(UTILITY))
def test_half_precision_inputs(name, oname, dtype):
    check_half_precision_inputs(name, oname, dtype)


@pytest.mark.parametrize("name,oname", lowp_cases(UTILITY))
def test_autocast_bfloat16(name, oname):
    check_autocast_bfloat16(name, oname)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_half_precision_neural_ndcg_without_padding(dtype):
    """neural_ndcg in half precision without padding (the padded case is covered above)."""
    s, r, g, m = _data(dtype)
    s = s.clone().requires_grad_(True)
    loss = neural_ndcg_loss(s, r)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()
    s32 = s.detach().float().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = neural_ndcg_loss(s32, r.float())
    loss.float().backward()
    assert torch.isfinite(loss) and torch.isfinite(s32.grad).all()


@pytest.mark.parametrize("case", ["neural_ndcg_loss"])
def test_sinkhorn_with_padding_finite_gradient(case):
    """Minimal reproduction: one list of 4 items, the last one padded (score 0, no NaN anywhere)."""
    s = torch.tensor([[2.0, 1.0, 1.5, 0.0]], requires_grad=True)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0]])
    m = torch.tensor([[True, True, True, False]])
    loss = neural_ndcg_loss(s, r, mask=m)
    loss.backward()
    assert torch.isfinite(s.grad).all()


# =============================================================================================== 6. bad arguments
@pytest.mark.parametrize("call", [
    lambda s, r, g: listnet_loss(s, r, reduction="avg"),
])
def test_loss_bad_arguments(call):
    s, r, g, m = _data()
    with pytest.raises(ValueError):
        call(s, r, g)


# =============================================================================================== 7. gradient sanity
def test_approx_ndcg_loss_stays_in_0_1_when_an_outlier_bunches_the_soft_positions():
    """A -1e19 score widens the list's temperature so the four other items share soft position 1.5: their relaxed
    DCG@3 (4 / log2(3.5) = 2.21) exceeds the ideal DCG@3 (2.13), relaxed NDCG 1.04; the loss is 0, not -0.04."""
    from torchfair.losses import approx_ndcg_loss
    s = torch.tensor([[-1.4467531442642212, -9.931436538696289, -1e19, -1.0, 7.515711307525635]],
                     requires_grad=True)
    loss = approx_ndcg_loss(s, torch.ones(1, 5), k=3, reduction="none")
    assert loss.item() == 0.0
    loss.sum().backward()
    assert torch.isfinite(s.grad).all()


# =============================================================================================== 8. PL-NDCG temperature
def _ndcg_moments(logits, rel, k):
    """Mean and standard deviation of NDCG@k under the PL policy with these logits, by plain enumeration of the n!
    rankings (tests/references/pl_reference.py)."""
    import pl_reference as plr

    idcg = sum((2 ** x - 1) / math.log2(p + 2) for p, x in enumerate(sorted(rel, reverse=True)[:k]))

    def one(y):
        v = sum((2 ** rel[d] - 1) / math.log2(p + 2) for p, d in enumerate(y[:k])) / idcg
        return [v, v * v]

    mean, sq = plr.expect(logits, one)
    return mean, math.sqrt(max(sq - mean * mean, 0.0))


@pytest.mark.parametrize("kw,k", [({}, None), ({}, 3), ({"temperature": 0.5}, 3),
                                  ({"temperature": 1.0, "scale": "none"}, None),
                                  ({"temperature": 1.0, "scale": "none"}, 3)])
def test_pl_ndcg_loss_is_one_minus_expected_ndcg_at_hand_computed_logits(kw, k):
    """pl_ndcg_loss = 1 - E_PL[NDCG@k] with logits s / (temperature * std) per list (default temperature 0.1,
    scale="std"), or s / temperature with scale="none" (softmax(s) at 1): the Monte Carlo value is within 4
    standard errors of the plain enumeration at logits computed here by hand, on scores of std 0.28-0.30 (where the
    rules differ by a factor ~3.5 in the temperature: the other rule's value is outside that band)."""
    import statistics

    s, r, g, m = _data()
    s = 0.3 * s
    T, scale = kw.get("temperature", 0.1), kw.get("scale", "std")
    S = 4000
    got = pl_ndcg_loss(s, r, samples=S, k=k, generator=torch.Generator().manual_seed(0), reduction="none", **kw)
    for b in range(2):
        xs, rel = s[b].tolist(), r[b].tolist()
        sd = statistics.pstdev(xs)
        assert sd > 0.25  # above the min_scale floor
        tau = T * sd if scale == "std" else T
        mean, std = _ndcg_moments([x / tau for x in xs], rel, k or len(xs))
        tol = 4 * std / math.sqrt(S) + 1e-9
        assert abs(got[b].item() - (1 - mean)) < tol, (b, got[b].item(), 1 - mean, tol)
        other = T if scale == "std" else T * sd  # the temperature of the other rule
        assert abs(got[b].item() - (1 - _ndcg_moments([x / other for x in xs], rel, k or len(xs))[0])) > tol
    # the same numbers as NDCG on the PlackettLuce ordering it documents, and as the module form
    same = 1 - ndcg(s, r, k=k, reduction="none", ordering=PlackettLuce(samples=S, temperature=T, scale=scale,
                                                                        generator=torch.Generator().manual_seed(0)))
    torch.testing.assert_close(got, same, rtol=0, atol=1e-12)
    mod = PLNDCGLoss(samples=S, k=k, generator=torch.Generator().manual_seed(0), reduction="none", **kw)
    torch.testing.assert_close(mod(s, r, g, m), got, rtol=0, atol=1e-12)


def test_pl_ndcg_loss_default_learns_on_trained_scores():
    """On a trained ranker's lists (scores 0.25 * N(0, 1), relevance correlated with the score) ten SGD steps of
    PL-NDCG@10 under the default temperature raise the hard NDCG@10 clearly (measured +0.12 to +0.17), more than
    under the former policy softmax(scores) (temperature 1, scale="none": +0.02 to +0.08)."""
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        z = torch.randn(16, 30, generator=gen, dtype=F64)
        q = 0.7 * z + 0.71 * torch.randn(16, 30, generator=gen, dtype=F64)
        rel = (q > 1.0).to(F64) + (q > 1.8).to(F64)
        s0 = 0.25 * (z - z.mean(-1, keepdim=True)) / z.std(-1, unbiased=False, keepdim=True)

        def train(**kw):
            s = s0.clone().requires_grad_(True)
            g = torch.Generator().manual_seed(1)
            for _ in range(10):
                (grad,) = torch.autograd.grad(pl_ndcg_loss(s, rel, k=10, samples=16, generator=g, **kw), s)
                with torch.no_grad():
                    s -= 1.0 * grad
            return ndcg(s.detach(), rel, k=10).mean().item()

        start = ndcg(s0, rel, k=10).mean().item()
        new, old = train(), train(temperature=1.0, scale="none")
        assert new - start > 0.08 and new - start > 1.5 * (old - start), (seed, start, new, old)


@pytest.mark.parametrize("kw,name", [({"temperature": 0.0}, "temperature"), ({"temperature": float("nan")},
                                                                            "temperature"),
                                     ({"temperature": True}, "temperature"), ({"scale": "relative"}, "scale"),
                                     ({"scale": None}, "scale")])
def test_pl_ndcg_loss_validates_temperature_and_scale(kw, name):
    s, r, g, m = _data()
    with pytest.raises(ValueError, match=name):
        pl_ndcg_loss(s, r, **kw)


def _lambda_reference(s, y, k):
    """LambdaLoss NDCG@k as a plain double loop (Burges 2010, eq. 3-4): |Delta NDCG@k| of swapping i and j in the
    current ranking (ties by index) times log(1 + exp(-(s_i - s_j))), over the pairs with y_i > y_j."""
    import math
    n = len(s)
    order = sorted(range(n), key=lambda i: (-s[i], i))
    pos = {it: p for p, it in enumerate(order)}
    disc = lambda p: 1 / math.log2(p + 2) if k is None or p < k else 0.0  # noqa: E731
    g = [2 ** v - 1 for v in y]
    idcg = sum(x * disc(p) for p, x in enumerate(sorted(g, reverse=True)))
    terms = [abs(g[i] - g[j]) * abs(disc(pos[i]) - disc(pos[j])) / idcg * math.log1p(math.exp(-(s[i] - s[j])))
             for i in range(n) for j in range(n)
             if y[i] > y[j] and abs(g[i] - g[j]) * abs(disc(pos[i]) - disc(pos[j])) > 0]
    return sum(terms) / max(len(terms), 1)  # the mean over the pairs of non-zero weight


@pytest.mark.parametrize("k", [1, 3, 5, None])
def test_lambda_ndcg_loss_matches_plain_loop_and_its_gradient(k):
    from torchfair.losses import lambda_ndcg_loss
    g = torch.Generator().manual_seed(3)
    s = torch.randn(4, 11, dtype=torch.float64, generator=g).requires_grad_(True)
    y = torch.randint(0, 4, (4, 11), generator=g).double()
    per = lambda_ndcg_loss(s, y, k=k, block=4, reduction="none")
    want = [_lambda_reference(s[b].tolist(), y[b].tolist(), k) for b in range(4)]
    assert torch.allclose(per, torch.tensor(want, dtype=torch.float64), atol=1e-12)
    grad = torch.autograd.grad(per.sum(), s)[0]
    eps = 1e-6
    for b in range(4):
        for i in range(11):
            up, dn = s.detach().clone(), s.detach().clone()
            up[b, i] += eps
            dn[b, i] -= eps
            num = (_lambda_reference(up[b].tolist(), y[b].tolist(), k) -
                   _lambda_reference(dn[b].tolist(), y[b].tolist(), k)) / (2 * eps)
            assert abs(grad[b, i].item() - num) < 1e-6


def test_lambda_ndcg_loss_ignores_order_below_k_padding_and_edge_lists():
    from torchfair.losses import lambda_ndcg_loss
    s = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0]])
    y = torch.tensor([[2.0, 1.0, 0.0, 0.0, 1.0, 2.0]])
    # swapping the scores of two items that both sit below position k changes nothing about which pairs count
    # or their weights: the items at positions 3 and 4 (ids 3, 4) swap -- only the log terms of their pairs move
    s2 = s.clone()
    s2[0, 3], s2[0, 4] = 1.0, 2.0
    a = lambda_ndcg_loss(s.requires_grad_(), y, k=2)
    ga = torch.autograd.grad(a, s)[0]
    # the pair (id 4 over id 3) is below k = 2 on both sides: its weight is 0, so the gradient of item 3 comes only
    # from pairs with the top two items
    assert ga[0, 3] != 0 and abs(float(ga[0, 3] + ga[0, 4] + ga[0, :3].sum() + ga[0, 5])) < 1e-6
    # padding changes nothing
    sp = torch.cat([s.detach(), torch.tensor([[9.0, -3.0]])], -1)
    yp = torch.cat([y, torch.tensor([[4.0, 4.0]])], -1)
    m = torch.tensor([[True] * 6 + [False, False]])
    assert torch.allclose(lambda_ndcg_loss(sp, yp, k=2, mask=m), a.detach())
    # one relevance level, a fully padded list, tied scores, half precision: finite, no NaN
    out = lambda_ndcg_loss(torch.zeros(3, 5, requires_grad=True), torch.tensor([[1.0] * 5, [0, 1, 2, 0, 1],
                                                                                  [0.0] * 5]),
                           mask=torch.tensor([[True] * 5, [True] * 5, [False] * 5]), k=3)
    assert torch.isfinite(out)
    # a batch with no pair of different relevance: exactly 0, and backward still works (zero gradient)
    z = torch.randn(2, 5, requires_grad=True)
    lz = lambda_ndcg_loss(z, torch.ones(2, 5))
    lz.backward()
    assert lz.item() == 0 and (z.grad == 0).all()
    h = torch.randn(2, 8).half().requires_grad_()
    lh = lambda_ndcg_loss(h, torch.randint(0, 3, (2, 8)).half(), k=3)
    lh.backward()
    assert torch.isfinite(lh) and torch.isfinite(h.grad).all()
    with pytest.raises(ValueError, match="sigma"):
        lambda_ndcg_loss(s.detach(), y, sigma=0.0)
    with pytest.raises(ValueError, match="`k`"):
        lambda_ndcg_loss(s.detach(), y, k=0)
