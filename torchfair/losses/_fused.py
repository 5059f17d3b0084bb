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
(:func:`torchfair.kernels.pick`, family ``ramp_losses``) picks the kernels.  The value checks of
:func:`torchfair._validation.prepare` (finite scores, finite relevance ``>= 0``, ids in ``[-1, num_groups)`` on
the real items) and the group codes are part of the forward walk, which runs before the autograd node is made: an
input that fails a check (or a batch without a real item) goes down the torch path, whose checks name what is
wrong.  :func:`fused_loss` takes the batch reduction into the node too (``mean`` over the lists where the loss is
defined, ``sum``, ``none``), so that the scores reach the loss through one node.

Each walk is the same ordering, measure and reducer as the torch path, step by step (positions, exposure, the
measure's group sums and normaliser, its validity and rounding clamp, the reducer's value and validity), proven
equal to it by ``tests/losses/test_fused.py`` (values and gradients in float64 to 1e-10, gradcheck, float32 close);
the definitions stay in :mod:`torchfair.metrics` and :mod:`torchfair.losses.transform`.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .._validation import group_codes
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
    """``out, valid = fused(scores)``: the forward walk has run already (:class:`_Call`, outside autograd, so that
    an input its checks refuse can still go down the torch path); ``backward`` runs the backward walk."""

    @staticmethod
    def forward(ctx, scores: Tensor, call: "_Call"):
        ctx.call = call
        out, ok = call.outputs(scores.dtype)
        ctx.mark_non_differentiable(ok)
        return out, ok

    @staticmethod
    def backward(ctx, g_out: Tensor, g_ok):
        if not ctx.needs_input_grad[0]:
            return None, None
        return ctx.call.backward(g_out).to(g_out.dtype), None


class _Call:
    """One fused call: the forward walk's result (``VAL`` / ``OK`` ``[B]`` arrays and what the backward reads) and
    the batch reduction it is taken to: ``None`` (the per-list values and validity of
    :func:`~torchfair.losses.transform.per_list_loss`), ``"none"``, ``"sum"`` or ``"mean"``
    (:func:`~torchfair.losses.transform.reduce_loss`: the lists where the loss is undefined give 0 and are left
    out of the mean)."""

    def __init__(self, K, measure: str, s: Tensor, mask: Tensor, opts: Dict[str, Any], result, reduction):
        self.K, self.measure, self.s, self.mask, self.opts = K, measure, s, mask, opts
        value, ok, self.saved = result
        self.VAL, self.OK = value.numpy(), ok.numpy()
        self.value, self.ok, self.reduction = value, ok, reduction

    def outputs(self, dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
        red = self.reduction
        if red is None:
            return self.value.to(dtype), self.ok
        kept = np.where(self.OK, self.VAL, 0.0)
        if red == "none":
            return torch.from_numpy(kept).to(dtype), self.ok
        total = kept.sum() if red == "sum" else kept.sum() / max(int(self.OK.sum()), 1)
        return torch.tensor(total, dtype=dtype), self.ok

    def _upstream(self, g_out: Tensor) -> np.ndarray:
        """The gradient of each list's value ``[B]`` from the gradient of the output."""
        red = self.reduction
        if red is None:
            return g_out.detach().to(torch.float64).numpy()
        if red == "none":
            return np.where(self.OK, g_out.detach().to(torch.float64).numpy(), 0.0)
        g = float(g_out)
        if red == "mean":
            g /= max(int(self.OK.sum()), 1)
        return np.where(self.OK, g, 0.0)

    def backward(self, g_out: Tensor) -> Tensor:
        o, K, G = self.opts, self.K, self.opts["G"]
        GL = self._upstream(g_out)
        if self.measure == "dips":
            return K.dips_backward(GL, self.s, self.mask, G, o["gamma"], o["tie"], o["square"], self.saved)
        if self.measure == "exposure_misallocation":
            return K.misallocation_backward(GL, self.s, self.mask, G, o["gamma"], o["square"], self.saved)
        return K.accuracy_backward(GL, self.s, self.mask, o["protected"], o["reference"], o["which"], self.saved)


def _forward(K, measure: str, s: Tensor, mask: Tensor, r: Tensor, ids: Tensor, o: Dict[str, Any], ordering,
             validate: bool):
    """The forward walk of ``measure``: ``(value, valid, saved)``, or None (a value check failed)."""
    G = o["G"]
    if measure == "dips":
        return K.dips_forward(s, mask, r, ids, G, ordering, o["cum"], o["gamma"], o["tie"], o["square"], validate)
    if measure == "exposure_misallocation":
        return K.misallocation_forward(s, mask, r, ids, G, o["targets"], ordering, o["gamma"], o["square"],
                                       validate)
    return K.accuracy_forward(s, mask, r, ids, G, o["protected"], o["reference"], o["which"], ordering, validate)


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


@functools.lru_cache(maxsize=64)
def _cum_of(gamma: float, N: int) -> np.ndarray:
    w = RBP(gamma).weights(N + 1, dtype=torch.float64)
    return torch.cat([w.new_zeros(1), torch.cumsum(w, 0)]).numpy()


def _cum(F: RBP, N: int) -> np.ndarray:
    """``cum[n] = sum_{k < n} F(k)`` for ``n = 0..N + 1`` (float64), as ``BrowsingModel.cumulative``; read-only,
    cached per ``(gamma, N)``."""
    return _cum_of(float(F.gamma), int(N))


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
        return dict(cum=_cum(F, N), gamma=F.gamma, tie=float(tie), square=reducer == "gap_square")
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


def _call(name: str, reducer: str, scores, relevance, groups, mask, num_groups, ordering, protected, reference,
          validate_args: bool, options: Dict[str, Any], reduction) -> Optional[_Call]:
    """The fused call for these arguments with its forward walk run, or ``None`` when it is not one the walks
    implement (module docstring) or its input fails a check: the caller then runs the torch path."""
    if reducer not in _REDUCERS.get(name, ()):
        return None
    if ordering is None:
        ordering = _DEFAULT
    if type(ordering) is not RampRank or ordering.backend == "torch":
        return None
    if not (isinstance(scores, Tensor) and isinstance(groups, Tensor) and isinstance(relevance, Tensor)):
        return None
    if scores.dtype not in (torch.float32, torch.float64) or scores.dim() not in (1, 2) or \
            groups.is_floating_point() or groups.is_complex() or groups.dtype == torch.bool or \
            scores.device.type != "cpu":
        return None
    s, r, g = _batch(scores, 2), _batch(relevance, 2), _batch(groups, 2)
    m = _batch(mask, 2)
    B, N = s.shape
    if B == 0 or N == 0 or r.shape != (B, N) or g.shape != (B, N) or r.dtype == torch.bool or r.is_complex() or \
            not r.is_floating_point() and r.dtype not in (torch.int32, torch.int64):
        return None
    if m is None:
        m = torch.ones(B, N, dtype=torch.bool)
    elif not isinstance(m, Tensor) or m.dtype != torch.bool or m.shape != (B, N):
        return None
    opts = _measure_options(name, reducer, dict(options), protected, reference, N)
    if opts is None:
        return None
    sd = s.detach()
    rr = r.detach().to(s.dtype)  # the measure reads the relevance in the scores' dtype (prepare)
    K = _kernels(ordering.backend, sd, rr, m)
    if K is None:
        return None
    ids = g.long()
    if num_groups is None:
        num_groups = group_codes(ids, m, None, False)[1]
    elif isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        return None  # the torch path's checks name the error
    opts["G"] = num_groups
    if name == "exposure_misallocation":
        opts["targets"] = _targets(opts.pop("target"), rr, m, opts.pop("browsing"), ordering.backend)
    o = ordering
    result = _forward(K, name, sd, m, rr, ids, opts, (o.temperature, o.scale == "std", o.min_scale,
                                                      o.rel_min_scale), bool(validate_args))
    if result is None:
        return None
    return _Call(K, name, sd, m, opts, result, reduction)


def fused_per_list(name: str, reducer: str, scores, relevance, groups, *, mask, num_groups, ordering, protected,
                   reference, validate_args: bool, options: Dict[str, Any]) -> Optional[Tuple[Tensor, Tensor]]:
    """``(per_list [B], valid [B])`` of :func:`torchfair.losses.transform.per_list_loss` by the fused kernels, or
    ``None`` when this call is not one they implement (module docstring): the caller then runs the torch path."""
    call = _call(name, reducer, scores, relevance, groups, mask, num_groups, ordering, protected, reference,
                 validate_args, options, None)
    return None if call is None else _FusedLoss.apply(scores if scores.dim() == 2 else scores.unsqueeze(0), call)


def fused_loss(name: str, reducer: str, scores, relevance, groups, *, mask, num_groups, ordering, protected,
               reference, validate_args: bool, options: Dict[str, Any], reduction: str) -> Optional[Tensor]:
    """:func:`torchfair.losses.transform.measure_loss` by the fused kernels, the batch reduction included (one
    autograd node from the scores to the loss), or ``None`` as :func:`fused_per_list`."""
    call = _call(name, reducer, scores, relevance, groups, mask, num_groups, ordering, protected, reference,
                 validate_args, options, reduction)
    if call is None:
        return None
    return _FusedLoss.apply(scores if scores.dim() == 2 else scores.unsqueeze(0), call)[0]
