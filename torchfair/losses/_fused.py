"""The fused CPU path of the fairness losses on :class:`~torchfair.orderings.RampRank`: one autograd node per loss
whose forward and backward each run one compiled walk per list (:mod:`torchfair.kernels.ramp_losses`).

It is an *implementation* of ``reducer(measure(RampRank(scores)))`` as :func:`torchfair.losses.measure_loss` writes
it (ordering, measure, list reducer), not a definition: :func:`fused_per_list` answers ``None`` whenever the call is
not one it implements, and the torch path -- the reference, and the path on other devices, orderings, browsing
models, ``backend="torch"`` or when the kernels are not picked -- runs instead.  It implements:

* ``dips`` (Fabris et al., WSDM 2023, eq. 11 with eq. 8 and 10) with ``gap_abs`` / ``gap_square`` (the DIPS
  loss's ``mode="abs"`` / ``"square"``), RBP browsing, no cut-off ``k``;
* ``exposure_misallocation`` (Fabris et al., WSDM 2023, eq. 12 with the targets of eq. 13-16: ``ee``, ``ea``,
  ``ea-dp``) with ``l1`` / ``l2sq``, RBP browsing, no ``k``, ``relevance`` given (also for ``ea-dp``); the targets
  are the measure's own (:func:`_targets`), they do not depend on the scores;
* ``pairwise_accuracy`` (Raj & Ekstrand, SIGIR 2022, eq. 11; InterAcc / IntraAcc of §2.5) with ``inter`` /
  ``intra`` / ``both`` for distinct ``protected`` / ``reference`` ids (defaults 1 / 0, as the reducers');

for integer group ids ``[B, N]`` (or ``[N]``), float32 / float64 CPU scores, an ordering that is ``None`` (the
losses' default ``RampRank(0.1)``) or a :class:`~torchfair.orderings.RampRank`, when the gate
(:func:`torchfair.kernels.pick`, family ``ramp_losses``) picks the kernels.  Input checks run once per call on the
host, by the quick whole-tensor reads of :func:`torchfair._validation.prepare`; an input they do not pass goes down
the torch path, whose checks name what is wrong.

Each walk is the same ordering, measure and reducer as the torch path, step by step (positions, exposure, the
measure's group sums and normaliser, its validity and rounding clamp, the reducer's value and validity), proven
equal to it by ``tests/losses/test_fused.py`` (values and gradients in float64 to 1e-10, gradcheck, float32 close);
the definitions stay in :mod:`torchfair.metrics` and :mod:`torchfair.losses.transform`.
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
        if self.measure == "exposure_misallocation":
            return K.misallocation_forward(s, self.mask, self.codes, self.G, o["targets"], *self._ordering_args(),
                                           o["gamma"], o["square"])
        if self.measure == "pairwise_accuracy":
            return K.accuracy_forward(s, self.mask, self.r, self.codes, o["protected"], o["reference"], o["which"],
                                      *self._ordering_args())
        raise AssertionError(self.measure)  # pragma: no cover

    def backward(self, g_value: Tensor, saved) -> Tensor:
        o, K = self.opts, self.K
        if self.measure == "dips":
            return K.dips_backward(g_value, self.s, self.mask, self.codes, self.G, o["gamma"], o["tie"], o["square"],
                                   saved)
        if self.measure == "exposure_misallocation":
            return K.misallocation_backward(g_value, self.s, self.mask, self.codes, self.G, o["gamma"], o["square"],
                                            saved)
        if self.measure == "pairwise_accuracy":
            return K.accuracy_backward(g_value, self.s, self.mask, self.codes, o["protected"], o["reference"],
                                       o["which"], saved)
        raise AssertionError(self.measure)  # pragma: no cover


def _batch(x: Optional[Tensor], dim: int) -> Optional[Tensor]:
    return x.unsqueeze(0) if isinstance(x, Tensor) and x.dim() == dim - 1 else x


#: measure -> the list reducers its fused walk implements
_REDUCERS = {"dips": ("gap_abs", "gap_square"), "exposure_misallocation": ("l1", "l2sq"),
             "pairwise_accuracy": ("inter", "intra", "both")}
_WHICH = {"inter": 0, "intra": 1, "both": 2}
_TARGETS = ("ee", "ea", "ea-dp")


def _rbp(browsing) -> Optional[RBP]:
    """The browsing model when it is RBP with ``gamma < 1`` (the walks' ``e = gamma**pos``), else None."""
    try:
        F = get_browsing(browsing, RBP(0.9))
    except Exception:  # noqa: BLE001 - the torch path names the error
        return None
    return F if type(F) is RBP and F.gamma < 1.0 else None


def _measure_options(name: str, reducer: str, opts: Dict[str, Any], protected, reference, N: int,
                     ) -> Optional[Dict[str, Any]]:
    """The walk's constant options for this measure and reducer, or None when the fused walk does not implement
    them (a cut-off ``k``, another browsing model, an unknown or invalid option: the torch path)."""
    if name == "pairwise_accuracy":  # no options: every pair, no browsing (Raj & Ekstrand, SIGIR 2022, eq. 11)
        if opts:
            return None
        p = 1 if protected is None else protected
        r = 0 if reference is None else reference
        if isinstance(p, bool) or isinstance(r, bool) or not isinstance(p, int) or not isinstance(r, int) or \
                p == r or p < 0 or r < 0:
            return None  # the reducer's checks name the error
        return dict(protected=p, reference=r, which=_WHICH[reducer])
    k = opts.pop("k", None)
    F = _rbp(opts.pop("browsing", None))
    if k is not None or F is None:
        return None
    if name == "dips":
        tie = opts.pop("tie_weight", 0.5)
        if opts or isinstance(tie, bool) or not isinstance(tie, (int, float)) or not 0.0 <= tie <= 1.0:
            return None
        return dict(weights=F.weights(N + 1, dtype=torch.float64), gamma=F.gamma, tie=float(tie),
                    square=reducer == "gap_square")
    target = opts.pop("target", "ee")
    if opts or not isinstance(target, str) or target not in _TARGETS:
        return None
    return dict(browsing=F, gamma=F.gamma, target=target, square=reducer == "l2sq")


def _targets(target: str, r: Tensor, m: Tensor, F: RBP, backend: str) -> Tensor:
    """The measure's per-item target quotas (:func:`torchfair.metrics.exposure._item_targets`, Fabris et al.,
    WSDM 2023, eq. 13-16), by the measure's own code: ``"ea-dp"`` the mask, ``"ea"`` the relevance, ``"ee"`` the
    ideal exposure (:func:`torchfair.metrics.ideal_exposure`; its compiled branch for position-based browsing, the
    sorting family's dense ranks, on the path this call takes)."""
    if target == "ea-dp":
        return m.to(r.dtype)
    if target == "ea":
        return torch.where(m, r, torch.zeros((), dtype=r.dtype))
    from .. import kernels
    from ..metrics import ideal_exposure

    w = F.weights(r.shape[1], dtype=r.dtype)
    KS = kernels.pick("sorting", backend, r, w, size=kernels.FOLLOW)
    return KS.ideal_exposure(r, m, w) if KS is not None else ideal_exposure(r, browsing=F, mask=m,
                                                                           validate_args=False)


def fused_per_list(name: str, reducer: str, scores, relevance, groups, *, mask, num_groups, ordering, protected,
                   reference, validate_args: bool, options: Dict[str, Any]) -> Optional[Tuple[Tensor, Tensor]]:
    """``(per_list [B], valid [B])`` of :func:`torchfair.losses.transform.per_list_loss` by the fused kernels, or
    ``None`` when this call is not one they implement (module docstring): the caller then runs the torch path."""
    if reducer not in _REDUCERS.get(name, ()):
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
    opts = _measure_options(name, reducer, dict(options), protected, reference, N)
    if opts is None:
        return None
    K = _kernels(ordering.backend, s.detach(), r.detach(), m)
    if K is None:
        return None
    sv = s.detach() if mask is None else torch.where(m, s.detach(), torch.zeros((), dtype=s.dtype))
    if validate_args and not _values_ok(sv, m, r, g, num_groups, False, work_dtype(s.dtype)):
        return None  # the torch path's checks say what is wrong
    codes, G = group_codes(g, m, num_groups, False)
    rr = r.to(s.dtype)  # the measure reads the relevance in the scores' dtype (prepare)
    if name == "exposure_misallocation":
        opts["targets"] = _targets(opts.pop("target"), rr.detach(), m, opts.pop("browsing"), ordering.backend)
    call = _Call(K, name, s, m.contiguous(), rr.contiguous(), codes.contiguous(), G, ordering, opts)
    return _FusedLoss.apply(s, call)
