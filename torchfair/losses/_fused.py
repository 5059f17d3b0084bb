"""The fused CPU path of the fairness losses on :class:`~torchfair.orderings.RampRank`: one autograd node per loss
whose forward and backward each run one compiled walk per list (:mod:`torchfair.kernels.ramp_losses`).

It is an *implementation* of ``reducer(measure(RampRank(scores)))`` as :func:`torchfair.losses.measure_loss` writes
it (ordering, measure, list reducer), not a definition: :func:`fused_per_list` answers ``None`` whenever the call is
not one it implements, and the torch path -- the reference, and the path on other devices, orderings, browsing
models, ``backend="torch"`` or when the kernels are not picked -- runs instead.  It implements:

* ``dips`` with ``gap_abs`` / ``gap_square`` (the DIPS loss's ``mode="abs"`` / ``"square"``), RBP browsing, no
  cut-off ``k``;
* ``exposure_misallocation`` with ``l1`` / ``l2sq`` (targets ``ee``, ``ea``, ``ea-dp``), RBP browsing, no ``k``;
* ``pairwise_accuracy`` with ``inter`` / ``intra`` / ``both``;

for integer group ids ``[B, N]`` (or ``[N]``), float32 / float64 CPU scores, an ordering that is ``None`` (the
losses' default ``RampRank(0.1)``) or a :class:`~torchfair.orderings.RampRank`, when the gate
(:func:`torchfair.kernels.pick`, family ``ramp_losses``) picks the kernels.  Input checks run once per call on the
host, by the quick whole-tensor reads of :func:`torchfair._validation.prepare`; an input they do not pass goes down
the torch path, whose checks name what is wrong.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from .._validation import _values_ok, group_codes, work_dtype
from ..browsing import RBP, get_browsing
from ..orderings import RampRank

FAMILY = "ramp_losses"
_DEFAULT = RampRank(temperature=0.1)


def _kernels(backend: str, *tensors):
    """The fused kernel module when the gate picks it for these (detached) tensors (family ``ramp_losses``, from
    ``torchfair.kernels.MIN_ELEMENTS["ramp_losses"]`` list items under ``"auto"``), else None."""
    from .. import kernels

    return kernels.pick(FAMILY, backend, *tensors)


class _FusedLoss(torch.autograd.Function):
    """``value [B], valid [B] = fused(scores)``: the forward walk in ``forward``, the backward walk in
    ``backward``; ``call`` holds the kernels and the call's constant inputs."""

    @staticmethod
    def forward(ctx, scores: Tensor, call: "_Call"):
        value, ok, saved = call.forward(scores)
        ctx.call, ctx.saved = call, saved
        ctx.mark_non_differentiable(ok)
        return value.to(scores.dtype), ok

    @staticmethod
    def backward(ctx, g_value: Tensor, g_ok):
        if not ctx.needs_input_grad[0]:
            return None, None
        ds = ctx.call.backward(g_value, ctx.saved)
        return ds.to(g_value.dtype), None


class _Call:
    def __init__(self, K, measure: str, s: Tensor, mask: Tensor, r: Optional[Tensor], codes: Tensor, G: int,
                 ordering: RampRank, opts: Dict[str, Any]):
        self.K, self.measure, self.s, self.mask, self.r, self.codes, self.G = K, measure, s, mask, r, codes, G
        self.ordering, self.opts = ordering, opts

    def _ordering_args(self):
        o = self.ordering
        return (o.temperature, o.scale == "std", o.min_scale, o.rel_min_scale)

    def forward(self, scores: Tensor):
        o, K = self.opts, self.K
        s = scores.detach()
        if self.measure == "dips":
            return K.dips_forward(s, self.mask, self.r, self.codes, self.G, *self._ordering_args(), o["weights"],
                                  o["gamma"], o["tie"], o["square"])
        raise AssertionError(self.measure)  # pragma: no cover

    def backward(self, g_value: Tensor, saved) -> Tensor:
        o, K = self.opts, self.K
        if self.measure == "dips":
            return K.dips_backward(g_value, self.s, self.mask, self.codes, self.G, o["gamma"], o["tie"], o["square"],
                                   saved)
        raise AssertionError(self.measure)  # pragma: no cover


def _batch(x: Optional[Tensor], dim: int) -> Optional[Tensor]:
    return x.unsqueeze(0) if isinstance(x, Tensor) and x.dim() == dim - 1 else x


def fused_per_list(name: str, reducer: str, scores, relevance, groups, *, mask, num_groups, ordering, protected,
                   reference, validate_args: bool, options: Dict[str, Any]) -> Optional[Tuple[Tensor, Tensor]]:
    """``(per_list [B], valid [B])`` of :func:`torchfair.losses.transform.per_list_loss` by the fused kernels, or
    ``None`` when this call is not one they implement (module docstring): the caller then runs the torch path."""
    if name != "dips" or reducer not in ("gap_abs", "gap_square"):
        return None
    if ordering is None:
        ordering = _DEFAULT
    if type(ordering) is not RampRank or ordering.backend == "torch":
        return None
    if not (isinstance(scores, Tensor) and isinstance(groups, Tensor) and isinstance(relevance, Tensor)):
        return None
    if scores.dtype not in (torch.float32, torch.float64) or scores.dim() not in (1, 2) or \
            groups.is_floating_point() or groups.dtype == torch.bool or scores.device.type != "cpu":
        return None
    s, r, g = _batch(scores, 2), _batch(relevance, 2), _batch(groups, 2)
    m = _batch(mask, 2)
    B, N = s.shape
    if B == 0 or N == 0 or r.shape != (B, N) or g.shape != (B, N) or r.dtype == torch.bool or r.is_complex():
        return None
    if m is None:
        m = torch.ones(B, N, dtype=torch.bool)
    elif m.dtype != torch.bool or m.shape != (B, N):
        return None
    opts = dict(options)
    k = opts.pop("k", None)
    browsing = opts.pop("browsing", None)
    tie = opts.pop("tie_weight", 0.5)
    if k is not None or opts:
        return None
    try:
        F = get_browsing(browsing, RBP(0.9))
    except Exception:  # noqa: BLE001 - the torch path names the error
        return None
    if type(F) is not RBP or F.gamma >= 1.0 or isinstance(tie, bool) or not isinstance(tie, (int, float)) or \
            not 0.0 <= tie <= 1.0:
        return None
    K = _kernels(ordering.backend, s.detach(), r.detach(), m)
    if K is None:
        return None
    sv = s.detach() if mask is None else torch.where(m, s.detach(), torch.zeros((), dtype=s.dtype))
    if validate_args and not _values_ok(sv, m, r, g, num_groups, False, work_dtype(s.dtype)):
        return None  # the torch path's checks say what is wrong
    codes, G = group_codes(g, m, num_groups, False)
    rr = r.to(s.dtype)  # the measure reads the relevance in the scores' dtype (prepare)
    call = _Call(K, "dips", s, m.contiguous(), rr.contiguous(), codes.contiguous(), G, ordering,
                 dict(weights=F.weights(N + 1, dtype=torch.float64), gamma=F.gamma, tie=float(tie),
                      square=reducer == "gap_square"))
    return _FusedLoss.apply(s, call)
