"""torchfair.losses.regularizer: ``FairnessRegularizer`` -- the total and its logged parts against the two losses
computed directly, the linear warm-up, the lambda = 0 logging rhythm (without a graph), padding through the module
forms, bad arguments.
"""
from __future__ import annotations

import pytest
import torch

from loss_cases import SOFT_ORDERINGS, TAU, _data, _padded
from torchfair.losses import DIPSLoss, FairnessRegularizer, ListNetLoss, dips_loss, listnet_loss
from torchfair.orderings import SoftRank


@pytest.mark.parametrize("oname", ["softrank", "neuralsort"])
def test_padding_zero_gradient_module_forms(oname):
    (s, r, g, m), (ps, pr, pg, pm), real = _padded()
    ps = ps.clone().requires_grad_(True)
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2, ordering=SOFT_ORDERINGS[oname]()), lam=2.0)
    reg(ps, pr, pg, pm).backward()
    assert torch.isfinite(ps.grad).all() and (ps.grad[~pm] == 0).all()


def _spy(seen, **kwargs):
    """A DIPSLoss that appends to ``seen``, per call, whether its value carries a graph."""

    class Spy(DIPSLoss):
        def forward(self, *a, **k):
            out = super().forward(*a, **k)
            seen.append(out.requires_grad)
            return out

    return Spy(**kwargs)


def _reg_inputs():
    s, r, g, m = _data(torch.float32)
    return s.clone().requires_grad_(True), r, g, m


def test_regularizer_total_and_last():
    s, r, g, m = _reg_inputs()
    o = SoftRank(TAU, scale="none")
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2, ordering=o), lam=0.7)
    total = reg(s, r, g, m)
    u = listnet_loss(s, r, mask=m)
    f = dips_loss(s, r, g, mask=m, num_groups=2, ordering=o)
    torch.testing.assert_close(total, u + 0.7 * f)
    assert sorted(reg.last) == ["fairness", "lambda", "total", "utility"]
    assert all(not v.requires_grad for v in reg.last.values())
    torch.testing.assert_close(reg.last["utility"], u.detach())
    torch.testing.assert_close(reg.last["fairness"], f.detach())
    torch.testing.assert_close(reg.last["total"], total.detach())
    assert reg.last["lambda"].item() == pytest.approx(0.7)
    (g_total,) = torch.autograd.grad(total, s)
    (g_ref,) = torch.autograd.grad(u + 0.7 * f, s)
    torch.testing.assert_close(g_total, g_ref)


def test_regularizer_linear_warmup():
    s, r, g, m = _reg_inputs()
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=2.0, schedule="linear", warmup_steps=4)
    seen = []
    for step in range(7):
        assert reg.current_step == step
        seen.append(reg.current_lambda)
        reg(s, r, g, m)
        assert reg.last["lambda"].item() == pytest.approx(seen[-1])
        reg.step()
    assert seen == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.0, 2.0])
    reg.current_step = 2
    assert reg.current_lambda == pytest.approx(1.0)
    const = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=2.0)
    assert const.current_lambda == 2.0
    const.step()
    assert const.current_lambda == 2.0


def test_regularizer_lam_zero_logs_fairness_without_graph():
    s, r, g, m = _reg_inputs()
    calls = []
    reg = FairnessRegularizer(ListNetLoss(), _spy(calls, num_groups=2, ordering=SoftRank(TAU, scale="none")), lam=0.0,
                              log_fairness_every=1)
    total = reg(s, r, g, m)
    assert calls == [False]  # measured under no_grad
    f = dips_loss(s, r, g, mask=m, num_groups=2, ordering=SoftRank(TAU, scale="none"))
    assert reg.last["fairness"].item() == pytest.approx(f.item()) and f.item() > 0
    torch.testing.assert_close(total, listnet_loss(s, r, mask=m))
    (g_total,) = torch.autograd.grad(total, s)
    (g_u,) = torch.autograd.grad(listnet_loss(s, r, mask=m), s)
    torch.testing.assert_close(g_total, g_u)
    # the linear schedule at step 0 behaves the same
    warm = FairnessRegularizer(ListNetLoss(), _spy(calls, num_groups=2), lam=1.0, schedule="linear", warmup_steps=3,
                               log_fairness_every=1)
    warm(s, r, g, m)
    assert calls == [False, False]
    warm.step()
    warm(s, r, g, m)
    assert calls[-1] is True


@pytest.mark.parametrize("kw", [dict(lam=-0.1), dict(lam=float("nan")), dict(schedule="cosine"),
                                dict(schedule="linear", warmup_steps=0), dict(schedule="linear"), dict(fairness_every=0),
                                dict(fairness_every=1.5), dict(fairness_every=-2)])
def test_regularizer_bad_arguments(kw):
    with pytest.raises(ValueError, match=f"`{next(iter(kw)) if 'fairness_every' in kw else ''}"):
        FairnessRegularizer(ListNetLoss(), DIPSLoss(), **kw)


def test_lazy_regularizer_trains_fairness_every_kth_step_with_k_times_lambda():
    """``fairness_every=3``: steps 0, 3, 6 give ``u + 3 lam f`` (u and f computed directly), the others ``u`` without
    calling the fairness loss; over 3 steps on the same batch the summed gradient is that of 3 steps of
    ``u + lam f``."""
    s, r, g, m = _reg_inputs()
    o = SoftRank(TAU, scale="none")
    calls = []
    lam, k = 0.7, 3
    reg = FairnessRegularizer(ListNetLoss(), _spy(calls, num_groups=2, ordering=o), lam=lam, fairness_every=k)
    u = listnet_loss(s, r, mask=m)
    f = dips_loss(s, r, g, mask=m, num_groups=2, ordering=o)
    grads, due = [], []
    for step in range(7):
        due.append(reg.regularizes_now)
        assert reg.weight == (k * lam if step % k == 0 else 0.0)
        total = reg(s, r, g, m)
        torch.testing.assert_close(total, u + k * lam * f if step % k == 0 else u)
        assert ("fairness" in reg.last) == (step % k == 0)
        assert reg.last["lambda"].item() == pytest.approx(k * lam if step % k == 0 else 0.0)
        grads.append(torch.autograd.grad(total, s)[0])
        reg.step()
    assert due == [True, False, False, True, False, False, True] and len(calls) == 3
    (g_ref,) = torch.autograd.grad(k * (u + lam * f), s)
    torch.testing.assert_close(sum(grads[:k]), g_ref)
    # the phase is the step count, which resumes from the state dict
    again = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2, ordering=o), lam=lam, fairness_every=k)
    again.load_state_dict(reg.state_dict())
    assert again.current_step == 7 and not again.regularizes_now
    again.step(), again.step()
    assert again.regularizes_now


def test_lazy_regularizer_logs_its_off_steps_without_graph():
    s, r, g, m = _reg_inputs()
    seen = []
    reg = FairnessRegularizer(ListNetLoss(), _spy(seen, num_groups=2), lam=1.0, fairness_every=2, log_fairness_every=1)
    for _ in range(4):
        total = reg(s, r, g, m)
        assert "fairness" in reg.last
        reg.step()
    assert seen == [True, False, True, False]
    torch.testing.assert_close(total, listnet_loss(s, r, mask=m))  # step 3: an off step, the utility alone


def test_regularizer_logging_rhythm_continues_after_a_resume():
    """``log_fairness_every`` counts calls; the count is in the state dict, so a resumed run logs the fairness term
    on the same calls as an uninterrupted one (every 3rd call: 1, 4, 7, ...)."""
    s, r, g, m = _reg_inputs()

    def run(reg, n):
        logged = []
        for _ in range(n):
            reg(s, r, g, m)
            logged.append("fairness" in reg.last)
        return logged

    def make():
        return FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=0.0, log_fairness_every=3)

    whole = run(make(), 8)
    assert whole == [True, False, False, True, False, False, True, False]
    first = make()
    head = run(first, 5)
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    assert head + run(resumed, 3) == whole
    assert resumed.state_dict()["_extra_state"] == {"current_step": 0, "calls": 8}
