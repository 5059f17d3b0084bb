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
from torchfair.losses import ListNetLoss, approx_ndcg_loss, listmle_loss, listnet_loss, neural_ndcg_loss
from torchfair.metrics.utility import ndcg
from torchfair.orderings import NeuralSort, SoftRank


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
