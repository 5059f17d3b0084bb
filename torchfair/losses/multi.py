r"""Several fairness measures as one loss, through the one transformation and on one ordering.

Lowering one fairness measure can raise another: a model trained on the DIPS gap alone (Fabris et al., WSDM 2023,
eq. 11) may move items so that the inter-group pairwise accuracy gap (Raj & Ekstrand, SIGIR 2022, §2.5) grows.
:func:`multi_measure_loss` trains on several declared measures at once, weighted::

    loss = sum_t  w_t / c_t * measure_loss(measure_t, scores, relevance, groups, reducer=reducer_t,
                                           ordering=<the one ordering>, **options_t)

each term being :func:`~torchfair.losses.measure_loss` of a declared fairness measure
(:data:`torchfair.metrics.MEASURES`) -- no formula is written twice -- with ``c_t = 1`` unless scales are given
(:class:`MultiMeasureLoss` with ``normalize="start"``).  With the default list reducers and two groups the DIPS +
pairwise-accuracy loss is

.. math::

    w_1 \operatorname{mean}_b |M^{(b)}_{AB} - M^{(b)}_{BA}|
    + w_2 \operatorname{mean}_b |A^{(b)}_{rp} - A^{(b)}_{pr}|

with ``M`` the DIPS matrix (Fabris et al. 2023, eq. 7-11) and ``A`` the pairwise accuracies (Raj & Ekstrand
2022, eq. 11), each mean over the lists where that term is defined.

Terms
-----
``terms`` is a sequence of term specs (or one string of specs joined by ``+``):

* ``"dips"``: the measure with weight 1 and its declared loss reducer; ``"dips:0.5"``: weight 0.5;
* ``{"measure": "dips", "weight": 1.0, "reducer": "gap_square", "browsing": "rbp:0.8", "tie_weight": 0.0}``:
  ``reducer`` one of :data:`~torchfair.losses.REDUCERS` (default: the measure's declared one), ``protected`` /
  ``reference`` group ids for the measures and reducers that read them, ``name`` the key of the term in
  :attr:`MultiMeasureLoss.last_terms` (default: the measure's name, ``dips_2``... for a repeated one), and any
  option of the measure itself (``browsing``, ``tie_weight``, ``target``, ``k``...).

Weights are finite and ``>= 0``.  Only fairness measures are accepted (utility belongs in the
:class:`~torchfair.losses.FairnessRegularizer`'s utility loss).  An empty ``terms``, an unknown measure, a
measure without a loss reducer and no ``reducer``, a reducer of another shape, a bad weight, an unknown option, a
per-term ``ordering`` / ``mask`` / ``num_groups`` / ``reduction`` (those are shared: give them to the loss) are a
``ValueError`` naming ``terms`` and the entry.

One ordering
------------
Every term is evaluated on the *same* ordering (default :func:`~torchfair.losses.default_ordering`), so a
relaxation's temperature is the same for every term.  The ordering is applied once per call and the resulting
:class:`~torchfair.orderings.OrderedBatch` is handed to every term (a relaxation's sorts are done once; a
stochastic ordering such as ``PlackettLuce`` draws one set of rankings that every term reads).  A measure that
depends on the score values rather than on an ordering (``top1_exposure_gap``, DELTR's) does not receive it.

Reduction
---------
``reduction="none"`` returns ``[B]``: ``sum_t w_t / c_t * v_t[b]``, where ``v_t[b]`` is term ``t``'s per-list
value (0 on a list where term ``t`` is undefined).  ``"mean"`` reduces each term over *its own* valid lists first
(as :func:`~torchfair.losses.measure_loss` does) and then takes the weighted sum -- so a term defined on few lists
weighs what its weight says, not its share of lists; this is not the mean of the ``"none"`` output over lists.
``"sum"`` is the sum of the ``"none"`` output.  A list on which no term is defined contributes exactly 0; a batch
of such lists gives 0 with zero gradient, never NaN.

Shapes: ``scores`` ``[B, N]`` (or ``[N]``, a batch of one); ``relevance`` ``[B, N]``; ``groups`` ``[B, N]`` ids or
``[B, N, G]`` soft membership; ``mask`` ``[B, N]`` bool.  Returns a scalar, or ``[B]`` for ``reduction="none"``
(a scalar for ``[N]`` input, as :func:`~torchfair.losses.measure_loss`).

Example::

    >>> s = torch.randn(4, 10, requires_grad=True)
    >>> r, g = torch.rand(4, 10), torch.randint(0, 2, (4, 10))
    >>> loss = multi_measure_loss(s, r, g, terms=["dips", "pairwise_accuracy:0.5"], num_groups=2)
    >>> loss.backward()
    >>> mm = MultiMeasureLoss(terms=[{"measure": "dips", "weight": 1.0},
    ...                              {"measure": "exposure_misallocation", "weight": 2.0, "target": "ea"}])
    >>> value = mm(s.detach(), r, g)
    >>> sorted(mm.last_terms)
    ['dips', 'exposure_misallocation']
"""
import inspect
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .._validation import check_choice, check_group_id, check_reduction, prepare
from ..metrics.declarations import Measure, get_declaration
from ..orderings.base import OrderedBatch, Ordering, OrderingLike
from .transform import _DATA_ARGS, REDUCERS, _as_batch, default_ordering, per_list_loss, reduce_loss

__all__ = ["multi_measure_loss", "MultiMeasureLoss", "parse_terms", "Term", "TermSpec", "NORMALIZATIONS"]

#: one term: ``"dips"``, ``"dips:0.5"``, or ``{"measure": "dips", "weight": 0.5, ...}``
TermSpec = Union[str, Dict[str, Any]]

#: ``normalize`` of :class:`MultiMeasureLoss`
NORMALIZATIONS = ("none", "start")

#: keys of a term dict that are not options of its measure
_TERM_KEYS = ("measure", "weight", "reducer", "name", "protected", "reference")
#: arguments shared by every term: given to the loss, not to a term
_SHARED = ("ordering", "mask", "num_groups", "reduction", "validate_args", "scores", "relevance", "groups",
           "return_valid", "normalize", "scales")
#: the reducers that read ``protected`` / ``reference`` (see :data:`~torchfair.losses.REDUCERS`)
_READS = {"protected": ("gap_one_sided", "inter", "intra", "both"), "reference": ("inter", "intra", "both")}


@dataclass(frozen=True)
class Term:
    """One parsed term: its ``name`` (key in ``last_terms``), declared ``measure``, ``weight``, list ``reducer``,
    ``protected`` / ``reference`` ids and the measure's own ``options``."""

    name: str
    measure: Measure
    weight: float
    reducer: str
    protected: Optional[int] = None
    reference: Optional[int] = None
    options: Tuple[Tuple[str, Any], ...] = ()

    @property
    def takes_ordering(self) -> bool:
        """Whether the measure is evaluated on an ordering (not on the score values, as DELTR's exposure gap).
        A plain property: ``functools.cached_property`` takes a lock on Python 3.11, which ``torch.compile``
        cannot trace (a graph break in every loss call)."""
        return "ordering" in inspect.signature(self.measure.fn).parameters

    def spec(self) -> Dict[str, Any]:
        """The term as a dict spec (what :func:`parse_terms` reads back to this term)."""
        out: Dict[str, Any] = {"measure": self.measure.name, "weight": self.weight, "reducer": self.reducer,
                               "name": self.name}
        for k in ("protected", "reference"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        out.update(self.options)
        return out


def _term_error(i: int, spec: Any, message: str) -> ValueError:
    return ValueError(f"`terms`[{i}] {spec!r}: {message}")


def _weight(i: int, spec: Any, w: Any) -> float:
    if isinstance(w, Tensor) and w.numel() == 1 and w.is_floating_point():
        w = w.item()
    if isinstance(w, bool) or not isinstance(w, (int, float)):
        raise _term_error(i, spec, f"`weight` must be a finite number >= 0; got {w!r}")
    w = float(w)
    if not math.isfinite(w) or w < 0:
        raise _term_error(i, spec, f"`weight` must be a finite number >= 0; got {w!r}")
    return w


def _from_string(i: int, spec: str) -> Dict[str, Any]:
    name, sep, weight = spec.strip().partition(":")
    out: Dict[str, Any] = {"measure": name.strip()}
    if sep:
        try:
            out["weight"] = float(weight)
        except ValueError:
            raise _term_error(i, spec, f"a string term is 'measure' or 'measure:weight'; {weight!r} is not a "
                                       f"number") from None
    return out


def _parse_one(i: int, spec: Any) -> Tuple[Dict[str, Any], Measure, float, str, Dict[str, Any]]:
    if isinstance(spec, Measure):
        d: Dict[str, Any] = {"measure": spec}
    elif isinstance(spec, str):
        d = _from_string(i, spec)
    elif isinstance(spec, Mapping):
        d = dict(spec)
    else:
        raise _term_error(i, spec, "a term is a string 'measure[:weight]' or a dict {'measure': ..., 'weight': ...}")
    if "measure" not in d:
        raise _term_error(i, spec, "a term dict needs a `measure` (a declared fairness measure)")
    try:
        m = d["measure"] if isinstance(d["measure"], Measure) else get_declaration(d["measure"])
    except ValueError as e:
        raise _term_error(i, spec, str(e)) from None
    if m.kind != "fairness":
        raise _term_error(i, spec, f"{m.name!r} is a {m.kind} measure; a fairness loss takes fairness measures "
                                   f"(a utility loss goes in FairnessRegularizer's `utility`)")
    w = _weight(i, spec, d.get("weight", 1.0))
    reducer = d.get("reducer")
    if reducer is None:
        reducer = m.loss
        if reducer is None:
            raise _term_error(i, spec, f"measure {m.name!r} declares no loss reducer: give a `reducer` (one of "
                                       f"{', '.join(REDUCERS)})")
    if not isinstance(reducer, str) or reducer not in REDUCERS:
        raise _term_error(i, spec, f"`reducer` must be one of {', '.join(REDUCERS)}; got {reducer!r}")
    if m.output == "record" and m.loss_field is None:
        raise _term_error(i, spec, f"measure {m.name!r} gives a record with no field a loss can use")
    if m.output != "record" and REDUCERS[reducer][0] != m.output:
        raise _term_error(i, spec, f"`reducer` {reducer!r} reduces {REDUCERS[reducer][0]} values but {m.name!r} "
                                   f"gives {m.output} values")
    params = inspect.signature(m.fn).parameters
    for k in ("protected", "reference"):
        if d.get(k) is None:
            continue
        if k not in params and reducer not in _READS[k]:
            raise _term_error(i, spec, f"`{k}` is read neither by measure {m.name!r} nor by reducer {reducer!r}")
        try:
            check_group_id(d[k], k)
        except ValueError as e:
            raise _term_error(i, spec, str(e)) from None
    options = {k: v for k, v in d.items() if k not in _TERM_KEYS}
    for k in options:
        if k in _SHARED:
            raise _term_error(i, spec, f"`{k}` is shared by every term: give it to the loss, not to a term")
        if k not in params or k in _DATA_ARGS:
            allowed = [p for p in params if p not in _DATA_ARGS]
            raise _term_error(i, spec, f"`{k}` is not an option of measure {m.name!r}; a term takes "
                                       f"{', '.join(list(_TERM_KEYS[1:]) + allowed)}")
    name = d.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise _term_error(i, spec, f"`name` must be a non-empty string; got {name!r}")
    return d, m, w, reducer, options


def parse_terms(terms: Union[str, Sequence[Any]]) -> Tuple[Term, ...]:
    """Parse and check term specs (see the module docstring); ``ValueError`` naming ``terms`` and the entry.

    Example::

        >>> [(t.name, t.weight, t.reducer) for t in parse_terms("dips + pairwise_accuracy:0.5")]
        [('dips', 1.0, 'gap_abs'), ('pairwise_accuracy', 0.5, 'inter')]
    """
    if isinstance(terms, str):
        terms = terms.split("+") if terms.strip() else []
    elif isinstance(terms, (Mapping, Measure)):
        terms = [terms]
    elif not isinstance(terms, Sequence):
        raise ValueError(f"`terms` must be a list of term specs ('dips', 'dips:0.5' or {{'measure': 'dips', "
                         f"'weight': 0.5, ...}}); got {terms!r}")
    if len(terms) == 0:
        raise ValueError("`terms` must hold at least one term, e.g. ['dips', 'pairwise_accuracy']")
    parsed = [_parse_one(i, spec) for i, spec in enumerate(terms)]
    explicit = [d["name"] for d, *_ in parsed if d.get("name") is not None]
    if len(set(explicit)) != len(explicit):
        dup = next(n for n in explicit if explicit.count(n) > 1)
        raise ValueError(f"`terms`: two terms are named {dup!r}; give each a distinct `name`")
    taken = set(explicit)
    out = []
    for d, m, w, reducer, options in parsed:
        name = d.get("name")
        if name is None:
            name, k = m.name, 1
            while name in taken:
                k += 1
                name = f"{m.name}_{k}"
        taken.add(name)
        out.append(Term(name, m, w, reducer, d.get("protected"), d.get("reference"), tuple(options.items())))
    return tuple(out)


def _shared_ordering(terms: Sequence[Term], scores: Tensor, mask: Optional[Tensor], ordering: OrderingLike,
                     validate_args: bool) -> OrderingLike:
    """The one ordering of every term, applied once to the batch (as each measure would apply it)."""
    if not any(t.takes_ordering for t in terms):
        if ordering is not None:
            raise ValueError("`ordering`: no term's measure depends on an ordering (they read the score values)")
        return None
    if ordering is None:
        ordering = default_ordering()
    if isinstance(ordering, OrderedBatch):
        return ordering
    if not isinstance(ordering, Ordering):
        raise ValueError(f"`ordering` must be an Ordering (e.g. torchfair.orderings.RampRank(0.1)); got {ordering!r}")
    b = prepare(scores, None, None, mask, validate=validate_args)  # the measures' own batching of the scores
    return ordering(b.scores, b.mask)


def _evaluate(terms: Sequence[Term], scores: Tensor, relevance: Optional[Tensor], groups: Optional[Tensor], *,
              ordering: OrderingLike, mask: Optional[Tensor], num_groups: Optional[int], reduction: str,
              validate_args: bool) -> Tuple[List[Tensor], Dict[str, Tensor]]:
    """Each term reduced by ``reduction`` and weighted, and each term's value (its mean over its valid lists,
    detached, unweighted)."""
    check_reduction(reduction)
    ob = _shared_ordering(terms, scores, mask, ordering, validate_args)
    parts: List[Tensor] = []
    values: Dict[str, Tensor] = {}
    for term in terms:
        per, ok = per_list_loss(term.measure, scores, relevance, groups, reducer=term.reducer,
                                ordering=ob if term.takes_ordering else None, mask=mask, num_groups=num_groups,
                                protected=term.protected, reference=term.reference, validate_args=validate_args,
                                **dict(term.options))
        mean = reduce_loss(per, ok, "mean")
        values[term.name] = mean.detach()
        parts.append((mean if reduction == "mean" else reduce_loss(per, ok, reduction)) * term.weight)
    return parts, values


def _combine(parts: Sequence[Tensor], scales: Optional[Tensor], scores: Tensor, mask: Optional[Tensor],
             reduction: str) -> Tensor:
    """``sum_t part_t / scale_t``, a loss one can call ``.backward()`` on (zero gradient when no term is defined
    on any list), 1-D input with ``"none"`` squeezed as :func:`~torchfair.losses.measure_loss` does."""
    total = parts[0] if scales is None else parts[0] / scales[0].to(parts[0])
    for t in range(1, len(parts)):
        total = total + (parts[t] if scales is None else parts[t] / scales[t].to(parts[t]))
    if isinstance(scores, Tensor) and scores.requires_grad and not total.requires_grad:
        s, msk = _as_batch(scores, 2), _as_batch(mask, 2)
        real = torch.ones_like(s, dtype=torch.bool) if msk is None else msk
        total = total + torch.where(real, s, torch.zeros_like(s)).sum() * 0.0
    if reduction == "none" and scores.dim() == 1:
        total = total.squeeze(0)
    return total


def multi_measure_loss(scores: Tensor, relevance: Optional[Tensor], groups: Optional[Tensor], *,
                       terms: Union[str, Sequence[TermSpec]], ordering: OrderingLike = None,
                       mask: Optional[Tensor] = None, num_groups: Optional[int] = None, reduction: str = "mean",
                       validate_args: bool = True, scales: Optional[Sequence[float]] = None) -> Tensor:
    """Weighted sum of fairness measures as losses, every term on one ordering (see the module docstring):

    ``sum_t weight_t / scale_t * measure_loss(measure_t, scores, relevance, groups, ordering=<one ordering>,
    reducer=reducer_t, reduction=reduction, **options_t)``.

    Args:
        scores: ``[B, N]`` (or ``[N]``); relevance ``[B, N]``; groups ``[B, N]`` ids or ``[B, N, G]`` membership.
        terms: term specs, e.g. ``["dips", "pairwise_accuracy:0.5"]`` or
            ``[{"measure": "dips", "weight": 1.0, "browsing": "rbp:0.8"}, ...]`` (:func:`parse_terms`).
        ordering: the one ordering of every term (default :func:`~torchfair.losses.default_ordering`).
        mask, num_groups, validate_args: as for every measure.
        reduction: ``"mean"`` (each term over its own valid lists, then weighted), ``"sum"``, ``"none"`` (``[B]``).
        scales: optional positive divisor of each term (``c_t``), e.g. each term's value at the start of
            training (what :class:`MultiMeasureLoss` with ``normalize="start"`` passes).

    Example::

        >>> s = torch.randn(8, 20, requires_grad=True)
        >>> multi_measure_loss(s, torch.rand(8, 20), torch.randint(0, 2, (8, 20)), num_groups=2,
        ...                    terms=["dips", {"measure": "pairwise_accuracy", "weight": 0.5}]).backward()
    """
    parsed = parse_terms(terms)
    sc = None
    if scales is not None:
        sc_list = list(scales.tolist() if isinstance(scales, Tensor) else scales)
        if len(sc_list) != len(parsed) or not all(
                isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0
                for c in sc_list):
            raise ValueError(f"`scales` must hold one finite positive number per term ({len(parsed)}); got {scales!r}")
        sc = torch.tensor(sc_list, dtype=torch.float64)
    parts, _ = _evaluate(parsed, scores, relevance, groups, ordering=ordering, mask=mask, num_groups=num_groups,
                         reduction=reduction, validate_args=validate_args)
    return _combine(parts, sc, scores, mask, reduction)


class MultiMeasureLoss(nn.Module):
    """Module form of :func:`multi_measure_loss`: ``MultiMeasureLoss(terms=["dips", "pairwise_accuracy"])(scores,
    relevance, groups, mask)``, the call signature of every loss (usable as a
    :class:`~torchfair.losses.FairnessRegularizer` / :class:`~torchfair.training.FairRankingModule` fairness loss).

    Args:
        terms: term specs (see :mod:`torchfair.losses.multi`), checked at construction.
        ordering: the one ordering of every term (default :func:`~torchfair.losses.default_ordering`).
        num_groups, reduction, validate_args: as for :func:`multi_measure_loss`.
        normalize: ``"none"`` (default) or ``"start"``: each term is divided by its own (detached, unweighted)
            value at the first call where that value is positive, so that the weights are relative to each
            measure's starting scale (``"dips:1 + pairwise_accuracy:1"`` then starts at 2 whatever the raw sizes).
            The scales are the buffer ``start_scale`` (one entry per term, 0 = not set yet: the term is then
            divided by 1), stored in the ``state_dict``: a run resumed from a checkpoint keeps them;
            ``loss.start_scale.zero_()`` starts over.  Under DDP, buffers are broadcast from rank 0 after the
            first step, so every rank uses rank 0's scales from then on.

    After each call :attr:`last_terms` maps each term's name to its detached, unweighted, unnormalised value
    (the mean over the lists where it is defined); :class:`~torchfair.losses.FairnessRegularizer` adds them to its
    ``last`` as ``fairness/<name>``, so :class:`~torchfair.training.FairRankingModule` logs
    ``train/fairness/<name>``.

    From a LightningCLI config::

        model:
          fairness_loss:
            class_path: torchfair.losses.MultiMeasureLoss
            init_args:
              terms: [{measure: dips, weight: 1.0}, {measure: pairwise_accuracy, weight: 1.0}]
              num_groups: 2
              ordering: {class_path: torchfair.orderings.RampRank, init_args: {temperature: 0.1}}
    """

    def __init__(self, terms: Union[List[Union[str, Dict[str, Any]]], str], ordering: Optional[Ordering] = None,
                 num_groups: Optional[int] = None, reduction: str = "mean", normalize: str = "none",
                 validate_args: bool = True):
        super().__init__()
        self.terms: Tuple[Term, ...] = parse_terms(terms)
        if ordering is not None and not isinstance(ordering, Ordering):
            raise ValueError(f"`ordering` must be an Ordering (e.g. torchfair.orderings.RampRank(0.1)); "
                             f"got {ordering!r}")
        if ordering is not None and not any(t.takes_ordering for t in self.terms):
            raise ValueError("`ordering`: no term's measure depends on an ordering (they read the score values)")
        if num_groups is not None and (isinstance(num_groups, bool) or not isinstance(num_groups, int)
                                       or num_groups < 1):
            raise ValueError(f"`num_groups` must be a positive int; got {num_groups!r}")
        check_reduction(reduction)
        check_choice(normalize, "normalize", NORMALIZATIONS)
        if not isinstance(validate_args, bool):
            raise ValueError(f"`validate_args` must be True or False; got {validate_args!r}")
        self.ordering = ordering
        self.num_groups = num_groups
        self.reduction = reduction
        self.normalize = normalize
        self.validate_args = validate_args
        self.register_buffer("start_scale", torch.zeros(len(self.terms)))
        self.last_terms: Dict[str, Tensor] = {}

    @property
    def weights(self) -> Dict[str, float]:
        """``{term name: weight}``."""
        return {t.name: t.weight for t in self.terms}

    def forward(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tensor:
        parts, values = _evaluate(self.terms, scores, relevance, groups, ordering=self.ordering, mask=mask,
                                  num_groups=self.num_groups, reduction=self.reduction,
                                  validate_args=self.validate_args)
        self.last_terms = values
        scales = None
        if self.normalize == "start":
            buf = self.start_scale
            with torch.no_grad():  # a term's scale is set once: at the first call where its value is positive
                v = torch.stack([values[t.name].to(buf) for t in self.terms])
                buf.copy_(torch.where((buf <= 0) & torch.isfinite(v) & (v > 0), v, buf))
            scales = torch.where(buf > 0, buf, torch.ones_like(buf))
        return _combine(parts, scales, scores, mask, self.reduction)

    def extra_repr(self) -> str:
        terms = " + ".join(f"{t.weight:g} * {t.measure.name}" + (f"[{t.reducer}]" if t.reducer != t.measure.loss
                                                                 else "")
                           + ("" if not t.options else "(" + ", ".join(f"{k}={v!r}" for k, v in t.options) + ")")
                           for t in self.terms)
        parts = [terms]
        if self.ordering is not None:
            parts.append(f"ordering={self.ordering!r}")
        if self.num_groups is not None:
            parts.append(f"num_groups={self.num_groups}")
        if self.reduction != "mean":
            parts.append(f"reduction={self.reduction!r}")
        if self.normalize != "none":
            parts.append(f"normalize={self.normalize!r}")
        return ", ".join(parts)
