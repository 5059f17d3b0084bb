r"""Measures turned into losses: one transformation for every measure.

A loss is a declared measure (:data:`torchfair.metrics.MEASURES`) evaluated on a differentiable ordering, reduced
to one number per list by a *list reducer*, then to one number per batch over the lists where it is defined::

    loss = reduce_over_valid_lists( reducer( measure(scores, ..., ordering=RampRank(0.1)) ) )

in the spirit of rax's ``approx_t12n`` / ``gumbel_t12n``: the ordering is the relaxation (``SoftRank``,
``NeuralSort``, ``FastSoftRank``, or ``PlackettLuce(estimator=...)`` for a stochastic policy), the measure is the
exact evaluator's own code, and nothing re-implements a formula.  ``DIPSLoss``, ``ExposureMisallocationLoss``,
``PairwiseAccuracyGapLoss``, the baselines and the NDCG losses are such declarations; any other measure becomes a
loss the same way::

    >>> import torch
    >>> s = torch.randn(4, 10, requires_grad=True)
    >>> g = torch.randint(0, 2, (4, 10))
    >>> measure_loss("rnd", s, groups=g, num_groups=2).backward()         # rND on a soft ordering
    >>> loss = MeasureLoss("dips", reducer="gap_square", browsing="rbp:0.8")

List reducers (:data:`REDUCERS`), by the shape of the measure's per-list value:

* pair matrices ``[B, G, G]`` (DIPS, IGI, REE): ``"gap_abs"`` ``max_{g != h} |M_gh - M_hg|`` over the pairs where
  both entries are defined; ``"gap_square"`` its square; ``"gap_one_sided"`` ``max_h relu(M_ph - M_hp)`` for the
  ``protected`` group ``p`` only.  Pairwise accuracy ``A`` (Raj & Ekstrand, SIGIR 2022, §2.5): ``"inter"``
  ``|A_rp - A_pr|``, ``"intra"`` ``|A_rr - A_pp|``, ``"both"`` their sum, for ``protected`` p and ``reference`` r.
* group vectors ``[B, G]`` (misallocation, AWRF): ``"l1"`` ``sum_g |x_g|``, ``"l2sq"`` ``sum_g x_g^2`` over the
  entries of the groups present in the list; a list counts only when at least two groups are present in it
  (with one group nothing about the ranking can change the value) and the value of each of them is defined.
* per-list values ``[B]``: ``"value"`` (lower is better already), ``"one_minus"`` (``max(0, 1 - x)``, utility measures in
  ``[0, 1]``; a relaxed NDCG can exceed 1 when soft positions bunch up, e.g. next to a score outlier that widens
  the temperature, and then gives 0), ``"abs"``, ``"hinge"`` ``max(0, x)``, ``"squared_hinge"`` ``max(0, x)^2``.

A list where the measure (or the reducer) is undefined contributes 0 and is left out of ``reduction="mean"``; a
batch of only such lists gives exactly 0 with zero gradient.  ``protected`` / ``reference`` ids missing from a
batch (a batch without the protected group) make its lists undefined, not an error; with soft membership
``[B, N, G]`` the number of groups is known, so ``num_groups != G`` and ids ``>= G`` are a ``ValueError``.
"""
from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .._validation import check_choice, check_group_id, check_reduction, group_codes, prepare, work_dtype
from ..metrics.declarations import Measure, get_declaration
from ..metrics.pairwise import accuracy_gaps, pairwise_gap
from ..orderings import RampRank
from ..orderings.base import OrderingLike
from ._fused import fused_loss, fused_per_list

__all__ = ["measure_loss", "MeasureLoss", "LossModule", "reduce_loss", "REDUCERS", "default_ordering"]


def default_ordering():
    """The ordering a loss uses when none is given: ``RampRank(temperature=0.1)`` (SoftRank's pair relaxation with
    a piecewise-linear kernel, pair sums in ``O(N log N)``; the temperature scaled per list as documented in
    :mod:`torchfair.orderings.soft`).  It replaced ``SoftRank(0.1)`` once its trade-off on ML-100K matched
    SoftRank's at the same lambdas (``experiments/results/ramp_tradeoff.md``) at about half the time per epoch."""
    return RampRank(temperature=0.1)


def reduce_loss(per_list: Tensor, valid: Tensor, reduction: str = "mean") -> Tensor:
    """Reduce per-list losses ``[B]`` over the valid lists: ``"mean"`` (0 when none is valid), ``"sum"`` or
    ``"none"`` (per list, 0 where invalid)."""
    check_reduction(reduction)
    per_list = per_list.to(work_dtype(per_list.dtype))  # half precision is reduced in float32
    per_list = torch.where(valid, per_list, torch.zeros_like(per_list))
    if reduction == "none":
        return per_list
    if reduction == "sum":
        return per_list.sum()
    return per_list.sum() / valid.sum().clamp(min=1).to(per_list.dtype)


# --------------------------------------------------------------------------------------------- reducers
def _zero_where(x: Tensor, ok: Tensor) -> Tensor:
    return torch.where(ok, x, torch.zeros_like(x))


def _pad_groups(value: Tensor, valid: Tensor, G: int) -> Tuple[Tensor, Tensor]:
    """Pad ``[B, g, g]`` matrices with undefined entries up to ``G`` groups (a group absent from the batch)."""
    g = value.shape[-1]
    if g >= G:
        return value, valid
    pad = (0, G - g, 0, G - g)
    return nn.functional.pad(value, pad), nn.functional.pad(valid, pad, value=False)


def _pair_gaps(value: Tensor, valid: Tensor) -> Tuple[Tensor, Tensor]:
    """The measure's own gaps ``M_gh - M_hg`` (:func:`torchfair.metrics.pairwise_gap`), off the diagonal."""
    gap, ok = pairwise_gap(value, valid=valid)
    return gap, ok & ~torch.eye(value.shape[-1], dtype=torch.bool, device=value.device)


def _gap_abs(value, valid, ctx):
    gap, ok = _pair_gaps(value, valid)
    return _zero_where(gap.abs(), ok).flatten(1).amax(-1), ok.flatten(1).any(-1)


def _gap_square(value, valid, ctx):
    gap, ok = _pair_gaps(value, valid)
    return _zero_where(gap ** 2, ok).flatten(1).amax(-1), ok.flatten(1).any(-1)


def _gap_one_sided(value, valid, ctx):
    p = ctx["protected"]
    if p is None:
        raise ValueError("`protected` must be given (a group id) for the one-sided reducer")
    value, valid = _pad_groups(value, valid, p + 1)
    gap, ok = _pair_gaps(value, valid)
    g, v = torch.relu(gap[:, p, :]), ok[:, p, :]
    return _zero_where(g, v).amax(-1), v.any(-1)


def _accuracy(which: str):
    def reducer(value, valid, ctx):
        p = 1 if ctx["protected"] is None else ctx["protected"]
        r = 0 if ctx["reference"] is None else ctx["reference"]
        if p == r:
            raise ValueError(f"`protected` and `reference` must be distinct group ids; got {p} and {r}")
        value, valid = _pad_groups(value, valid, max(p, r) + 1)
        (inter, v_inter), (intra, v_intra) = accuracy_gaps(value, p, r, valid=valid)  # the measure's own gaps
        if which == "inter":
            return inter.abs(), v_inter
        if which == "intra":
            return intra.abs(), v_intra
        return _zero_where(inter.abs(), v_inter) + _zero_where(intra.abs(), v_intra), v_inter | v_intra
    return reducer


def _group_norm(power: int):
    def reducer(value, valid, ctx):
        present = ctx["present"][:, :value.shape[-1]]
        ok = valid & present
        x = value.abs() if power == 1 else value ** 2
        return _zero_where(x, ok).sum(-1), (present.sum(-1) >= 2) & (valid | ~present).all(-1)
    return reducer


def _elementwise(fn: Callable[[Tensor], Tensor]):
    def reducer(value, valid, ctx):
        return fn(value), valid
    return reducer


#: name -> (output shape it applies to, reducer(value, valid, ctx) -> (per_list [B], valid [B]))
REDUCERS: Dict[str, Tuple[str, Callable]] = {
    "gap_abs": ("pair", _gap_abs),
    "gap_square": ("pair", _gap_square),
    "gap_one_sided": ("pair", _gap_one_sided),
    "inter": ("pair", _accuracy("inter")),
    "intra": ("pair", _accuracy("intra")),
    "both": ("pair", _accuracy("both")),
    "l1": ("group", _group_norm(1)),
    "l2sq": ("group", _group_norm(2)),
    "value": ("list", _elementwise(lambda x: x)),
    "one_minus": ("list", _elementwise(lambda x: torch.relu(1.0 - x))),
    "abs": ("list", _elementwise(torch.abs)),
    "hinge": ("list", _elementwise(torch.relu)),
    "squared_hinge": ("list", _elementwise(lambda x: torch.relu(x) ** 2)),
}


# --------------------------------------------------------------------------------------------- the transformation
_SHAPES = {"list": "[B]", "group": "[B, G]", "pair": "[B, G, G]"}
_DATA_ARGS = {"scores", "relevance", "groups", "mask", "num_groups", "ordering", "return_valid", "reduction",
              "validate_args", "protected", "reference"}

def _as_batch(x: Optional[Tensor], soft_dim: int) -> Optional[Tensor]:
    if not isinstance(x, Tensor):  # None, or a wrong type the measure's validation names
        return x
    return x.unsqueeze(0) if x.dim() == soft_dim - 1 else x


def _check_soft_groups(groups: Tensor, num_groups: Optional[int], protected: Optional[int],
                       reference: Optional[int]) -> None:
    """Soft membership ``[B, N, G]`` fixes the number of groups: ``num_groups`` must agree with it (the measures'
    own ``ValueError``; the measure does not get ``num_groups`` for soft groups) and ``protected`` / ``reference``
    must be ids below it."""
    G = groups.shape[-1]
    if num_groups is not None and G != num_groups:
        raise ValueError(f"`groups` has {G} groups in its last dimension but num_groups={num_groups}")
    for name, val in (("protected", protected), ("reference", reference)):
        if val is not None:
            check_group_id(val, name, G)


def _split(result: Any, field: Optional[str], real: Tensor) -> Tuple[Tensor, Tensor]:
    if hasattr(result, "_fields"):
        value = getattr(result, field)
        valid = getattr(result, "valid", None)
        return value, real if valid is None else valid
    if isinstance(result, tuple):
        return result
    return result, real


def measure_loss(measure: Union[str, Measure], scores: Tensor, relevance: Optional[Tensor] = None,
                 groups: Optional[Tensor] = None, *, reducer: Optional[str] = None, ordering: OrderingLike = None,
                 mask: Optional[Tensor] = None, num_groups: Optional[int] = None, protected: Optional[int] = None,
                 reference: Optional[int] = None, reduction: str = "mean", validate_args: bool = True,
                 **options: Any) -> Tensor:
    """Any declared measure as a loss: ``measure`` on ``ordering`` (default :func:`default_ordering`), reduced per
    list by ``reducer`` (default: the measure's declared ``loss`` reducer, see :data:`REDUCERS`) and over the batch
    by ``reduction`` (``"mean"`` over the lists where it is defined, ``"sum"``, ``"none"``).

    ``options`` are the measure's own keyword arguments (``browsing``, ``tie_weight``, ``target``, ``k``...);
    ``protected`` / ``reference`` go to the measure when it takes them and to the reducers that need them.
    Shapes: ``scores`` ``[B, N]`` or ``[N]``; returns a scalar (``[B]`` for ``reduction="none"``).
    """
    check_reduction(reduction)
    m, reducer = _resolve(measure, reducer, num_groups, protected, reference)
    fused = fused_loss(m.name, reducer, scores, relevance, groups, mask=mask, num_groups=num_groups,
                       ordering=ordering, protected=protected, reference=reference, validate_args=validate_args,
                       options=options, reduction=reduction)
    if fused is not None:  # the compiled implementation, batch reduction included (losses/_fused.py)
        return fused.squeeze(0) if reduction == "none" and scores.dim() == 1 else fused
    per, ok = per_list_loss(m, scores, relevance, groups, reducer=reducer, ordering=ordering, mask=mask,
                            num_groups=num_groups, protected=protected, reference=reference,
                            validate_args=validate_args, **options)
    s, msk = _as_batch(scores, 2) if isinstance(scores, Tensor) else scores, _as_batch(mask, 2)
    out = reduce_loss(per, ok, reduction)
    if isinstance(scores, Tensor) and scores.requires_grad and not out.requires_grad:
        # every list undefined (or a value that does not depend on the scores): still a loss one can call
        # .backward() on, with exactly zero gradient (padded slots may hold NaN: they are masked out first)
        real = torch.ones_like(s, dtype=torch.bool) if msk is None else msk
        out = out + torch.where(real, s, torch.zeros_like(s)).sum() * 0.0
    return out.squeeze(0) if reduction == "none" and scores.dim() == 1 else out


@functools.lru_cache(maxsize=None)
def _parameters(fn: Callable) -> "typing.Mapping[str, inspect.Parameter]":
    """``inspect.signature(fn).parameters``, read once per measure function (it costs about 80 us a call)."""
    return inspect.signature(fn).parameters


def _resolve(measure: Union[str, Measure], reducer: Optional[str], num_groups, protected, reference
             ) -> Tuple[Measure, str]:
    """The measure's declaration and the list reducer (its declared default when ``reducer`` is None), checked,
    with the ``protected`` / ``reference`` ids."""
    m = get_declaration(measure) if not isinstance(measure, Measure) else measure
    reducer = m.loss if reducer is None else reducer
    if reducer is None:
        raise ValueError(f"`reducer` must be given: measure {m.name!r} declares no default loss reducer "
                         f"(choose one of {', '.join(REDUCERS)})")
    check_choice(reducer, "reducer", tuple(REDUCERS))
    if protected is not None:
        check_group_id(protected, "protected", num_groups)
    if reference is not None:
        check_group_id(reference, "reference", num_groups)
    return m, reducer


def per_list_loss(measure: Union[str, Measure], scores: Tensor, relevance: Optional[Tensor] = None,
                  groups: Optional[Tensor] = None, *, reducer: Optional[str] = None, ordering: OrderingLike = None,
                  mask: Optional[Tensor] = None, num_groups: Optional[int] = None, protected: Optional[int] = None,
                  reference: Optional[int] = None, validate_args: bool = True, **options: Any
                  ) -> Tuple[Tensor, Tensor]:
    """The per-list step of :func:`measure_loss` (same arguments, no ``reduction``): ``(per_list [B], valid [B])``,
    the reducer's value of every list and whether it is defined there, before the lists are reduced (and before
    undefined lists are zeroed).  ``measure_loss(..., reduction="none")`` is ``per_list`` where ``valid``, else 0;
    the measure-targeted re-ranker reads ``valid`` to leave a guard unconstrained where its measure is undefined.
    Always batched (``[1]`` for 1-D input)."""
    m, reducer = _resolve(measure, reducer, num_groups, protected, reference)
    shape, fn = REDUCERS[reducer]
    fused = fused_per_list(m.name, reducer, scores, relevance, groups, mask=mask, num_groups=num_groups,
                           ordering=ordering, protected=protected, reference=reference, validate_args=validate_args,
                           options=options)
    if fused is not None:  # the compiled implementation of this ordering + measure + reducer (losses/_fused.py)
        return fused

    params = _parameters(m.fn)
    s = _as_batch(scores, 2) if isinstance(scores, Tensor) else scores
    kw: Dict[str, Any] = {**m.defaults, **options}
    if "relevance" in params:
        kw["relevance"] = _as_batch(relevance, 2)
    if "groups" in params:
        if groups is not None and isinstance(groups, Tensor):
            groups = _as_batch(groups, 3 if groups.is_floating_point() else 2)
            if groups.is_floating_point() and groups.dim() == 3:
                _check_soft_groups(groups, num_groups, protected, reference)
        kw["groups"] = groups
        if num_groups is not None and not (groups is not None and groups.is_floating_point()):
            kw["num_groups"] = num_groups
    msk = _as_batch(mask, 2)
    kw.update(mask=msk, validate_args=validate_args)
    if "ordering" in params:
        kw["ordering"] = default_ordering() if ordering is None else ordering
    elif ordering is not None:
        raise ValueError(f"`ordering`: measure {m.name!r} depends on the score values, not on an ordering")
    for name, val in (("protected", protected), ("reference", reference)):
        if name in params and val is not None:
            kw[name] = val
    if "return_valid" in params:
        kw["return_valid"] = True
    if "reduction" in params:
        kw["reduction"] = "none"
    unknown = sorted(k for k in options if k not in params)
    if unknown:
        raise ValueError(f"`{unknown[0]}` is not an option of measure {m.name!r}; it takes "
                         f"{', '.join(k for k in params if k not in _DATA_ARGS)}")
    result = m.fn(s, **{k: v for k, v in kw.items() if k in params})

    real = (torch.ones_like(s, dtype=torch.bool) if msk is None else msk).any(-1)
    value, valid = _split(result, m.loss_field, real)
    got = {1: "list", 2: "group", 3: "pair"}.get(value.dim())
    if got != shape:
        raise ValueError(f"`reducer` {reducer!r} reduces {shape} values ({_SHAPES[shape]}) but {m.name!r} gave "
                         f"{got} values of shape {tuple(value.shape)} with these options")
    ctx: Dict[str, Any] = {"protected": protected, "reference": reference}
    if shape == "group":
        if groups.is_floating_point():
            b = prepare(s, None, groups, msk, validate=False)
            ctx["present"] = b.membership.sum(1) > 0
        else:  # integer ids: which groups occur among each list's real items, by one scatter (no one-hot rows)
            G = value.shape[-1]
            real = torch.ones_like(s, dtype=torch.bool) if msk is None else msk
            codes, _ = group_codes(groups, real, G, False)
            slot = torch.where(codes >= 0, codes, G)  # unknown and padded items: a spare column, dropped
            ctx["present"] = torch.zeros(codes.shape[0], G + 1, dtype=torch.bool, device=codes.device).scatter_(
                1, slot, True)[:, :G]
    return fn(value, valid, ctx)


class LossModule(nn.Module):
    """The module form of a functional loss ``_fn``: construction takes the loss's keyword options (checked against
    its signature, which the class shows as its own), the call takes the batch::

        loss = DIPSLoss(mode="square", num_groups=2)      # options of dips_loss
        value = loss(scores, relevance, groups, mask)     # one call signature for every loss

    ``_inputs`` names which of ``relevance`` / ``groups`` the functional loss takes positionally; the others are
    accepted and ignored, so utility and fairness losses are interchangeable (e.g. in
    :class:`~torchfair.losses.FairnessRegularizer`).
    """

    _fn: Optional[Callable[..., Tensor]] = None
    _inputs: Tuple[str, ...] = ("relevance", "groups")

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("_fn")
        if fn is None:
            return
        fn = fn.__func__ if isinstance(fn, staticmethod) else fn
        try:  # real types, not the strings of `from __future__ import annotations` (for jsonargparse / LightningCLI)
            hints = typing.get_type_hints(fn)
        except Exception:  # pragma: no cover - an unresolvable annotation keeps its string
            hints = {}
        options = [p.replace(annotation=hints.get(p.name, p.annotation))
                   for p in inspect.signature(fn).parameters.values()
                   if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name != "mask"]
        cls._options = tuple(p.name for p in options)
        cls.__signature__ = inspect.Signature(options)

        def __init__(self, **kwargs: Any) -> None:  # the options as a real signature (jsonargparse reads __init__)
            LossModule.__init__(self, **kwargs)

        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        __init__.__signature__ = inspect.Signature([self_param] + options)  # type: ignore[attr-defined]
        __init__.__doc__ = cls.__doc__
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        if "__init__" not in cls.__dict__:
            cls.__init__ = __init__  # type: ignore[method-assign]

    def __init__(self, **kwargs: Any):
        super().__init__()
        allowed = getattr(type(self), "_options", ())
        for k in kwargs:
            if k not in allowed:
                raise ValueError(f"`{k}` is not an option of {type(self).__name__}; it takes {', '.join(allowed)}")
        self.kwargs = kwargs

    def forward(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tensor:
        given = {"relevance": relevance, "groups": groups}
        fn = type(self)._fn
        return fn(scores, *(given[k] for k in self._inputs), mask=mask, **self.kwargs)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())


class MeasureLoss(nn.Module):
    """Module form of :func:`measure_loss`: ``MeasureLoss("rnd")(scores, relevance, groups, mask)``.

    Construction arguments (``reducer``, ``ordering``, ``protected``, the measure's options) are fixed; the call
    takes the batch, as for every :class:`LossModule`.
    """

    def __init__(self, measure: Union[str, Measure], **kwargs: Any):
        super().__init__()
        self.measure = get_declaration(measure) if not isinstance(measure, Measure) else measure
        self.kwargs = kwargs

    def forward(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tensor:
        return measure_loss(self.measure, scores, relevance, groups, mask=mask, **self.kwargs)

    def extra_repr(self) -> str:
        return ", ".join([repr(self.measure.name)] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
