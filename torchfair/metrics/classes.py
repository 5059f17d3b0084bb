"""The torchmetrics ``Metric`` classes: accumulate a measure over batches, exactly, across processes.

Public as :mod:`torchfair.metrics` names, beside the functions (``from torchfair.metrics import DIPS, dips``), as
torchmetrics keeps a domain's classes in its domain package; ``import torchfair.metrics`` loads this module (and
torchmetrics, the ``[torchmetrics]`` extra) only when a class is first used.

Every declared measure (:data:`torchfair.metrics.MEASURES`) has its class here, written out:
``class DIPS(FairnessMetric)`` with its statics declared (``measure``, ``higher_is_better`` from the declaration,
``is_differentiable``, ``full_state_update``) and an ``__init__`` whose keywords are the measure's options (defaults
and types from the function or its registration), so IDEs, type checkers, ``help()`` and LightningCLI see them.  The
measures whose options are the same (names, order, defaults and types) share that ``__init__``, written once in a
private base (``class DP(_ExposureRatioMetric)``, likewise EUR and RUR); ``inspect.signature(DP)`` shows the options
all the same.  The suite checks each class, and each base, against the declarations
(``tests/metrics/test_classes.py``).  :func:`metric_class` makes the class of a measure registered later
(:func:`torchfair.evaluation.register`).

Each metric keeps two ``[C]`` states per instance, one entry per column of the measure (see
:mod:`torchfair.metrics.registry`): ``total`` (sum of the column over the lists where it is valid) and ``count``
(the number of such lists), both declared with ``dist_reduce_fx="sum"``.  ``compute()`` returns
``total / count``: the exact corpus-level mean over valid lists, whatever the batching and the number of processes
(0 for a column no list defines, the library convention; :attr:`FairnessMetric.counts` tells them apart).

Example::

    >>> m = DIPS(browsing="uniform")                 # two groups by default
    >>> scores, relevance = torch.tensor([[2., 3., 4., 1.]]), torch.tensor([[4., 3., 2., 1.]])
    >>> groups, mask = torch.tensor([[0, 1, 0, 0]]), torch.ones(1, 4, dtype=torch.bool)
    >>> m.update(scores, relevance, groups, mask)    # [B, N] each, any number of times
    >>> {k: round(float(v), 4) for k, v in m.compute().items()}
    {'dips_AB': 0.3333, 'dips_BA': 0.3333, 'dips_gap': 0.0}
    >>> gap = DIPS(column="dips_gap")                # a scalar tensor, e.g. for LightningModule.log
"""
import inspect
import typing
from typing import Any, Dict, List, Optional, Union

import torch
from torch import Tensor

from .._extras import require

require("torchfair.metrics.classes (the Metric classes: torchfair.metrics.DIPS...)", "torchmetrics")

from torchmetrics import Metric  # noqa: E402

from ..orderings.base import OrderingLike  # noqa: E402
from .exposure import BrowsingLike  # noqa: E402
from .prefix import TargetLike  # noqa: E402
from .registry import _DATA_ARGS, MeasureRequest, MeasureSpec, get_measure, parse_request  # noqa: E402
from .utility import GainLike  # noqa: E402

__all__ = ["FairnessMetric", "DIPS", "IGI", "REE", "PairwiseAccuracy", "RankParity", "KendallTau", "metric_class",
           "NDCG", "DCG", "Precision", "Recall", "MRR", "AveragePrecision", "RPrecision", "RankBiasedPrecision", "ERR",
           "ExposureShare", "AWRF", "IAA", "ExpectedExposure", "ExposureMisallocation", "ExpRR", "DP", "EUR", "RUR",
           "RND", "RRD", "RKL", "Skew", "NDKL", "PreF", "FAIR", "MPC", "Top1ExposureGap", "DisparateExposure",
           "DiscordantFraction"]


class FairnessMetric(Metric):
    """Mean of a registered measure's columns over all valid lists seen by :meth:`update`.

    Args:
        measure: a registered name (``"dips"``, ``"ndcg"``...), ``"ndcg@10"``-style string, or
            :class:`~torchfair.metrics.registry.MeasureRequest`.
        num_groups: G, fixed for the metric's lifetime (the columns depend on it); default 2 for measures taking
            groups (ids ``>= num_groups`` then raise, they are not silently dropped).
        column: if given, :meth:`compute` returns only this column as a scalar tensor.
        **options: the measure's options (``browsing``, ``tie_weight``, ``k``, ``ordering``...).
    """

    is_differentiable = False
    higher_is_better: Optional[bool] = None
    full_state_update = False

    total: Tensor
    count: Tensor

    def __init__(self, measure: Union[str, MeasureRequest] = "dips", *, num_groups: Optional[int] = None,
                 column: Optional[str] = None, validate_args: bool = True, **options: Any):
        metric_kwargs = {k: options.pop(k) for k in list(options) if k in _METRIC_KWARGS}
        super().__init__(**metric_kwargs)
        req = parse_request(measure)
        self.request = MeasureRequest(req.name, {**req.options, **options}, req.label)
        try:
            self.spec = get_measure(req.name)
        except ValueError as e:
            raise ValueError(f"`measure`: {e}") from None
        self.num_groups = (num_groups if num_groups is not None else 2) if self.spec.uses_groups else None
        self.validate_args = validate_args
        if not validate_args and self.spec.accepts("validate_args"):
            self.request.options["validate_args"] = False
        self.columns: List[str] = self.spec.column_names(self.num_groups, label=self.request.label,
                                                         **self.request.options)
        if column is not None and column not in self.columns:
            raise ValueError(f"`column` must be one of {self.columns}; got {column!r}")
        self.column = column
        C = len(self.columns)
        self.add_state("total", default=torch.zeros(C, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(C, dtype=torch.float64), dist_reduce_fx="sum")

    def _options(self, kwargs: Dict[str, Any], **options: Any) -> Dict[str, Any]:
        """What a measure's class (``DIPS(...)``) passes on to :class:`FairnessMetric`: its options that differ from
        their defaults (LightningCLI passes every default explicitly: the request, its columns and its label stay
        what they are without them) and torchmetrics' own keywords (``kwargs``); any other keyword in ``kwargs`` is
        a ``ValueError`` naming it."""
        name = type(self).__name__
        try:
            defaults = _option_defaults(get_measure(self.measure))
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        bad = sorted(k for k in kwargs if k not in _METRIC_KWARGS)
        if bad:
            raise ValueError(f"{name}: unknown option(s) {bad}; the measure {self.measure!r} takes {sorted(defaults)}")
        return {**{k: v for k, v in options.items() if not _same(v, defaults.get(k))}, **kwargs}

    def update(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
               mask: Optional[Tensor] = None) -> None:
        """Add a batch ``[B, N]`` (or one list ``[N]``)."""
        cols = self.spec.compute(scores.detach(), None if relevance is None else relevance.detach(),
                                 groups if self.spec.uses_groups else None, mask, label=self.request.label,
                                 num_groups=self.num_groups, **self.request.options)
        if not self.columns:  # e.g. the off-diagonal entries of a one-group DIPS matrix: nothing to accumulate
            return
        if list(cols) != self.columns:
            raise RuntimeError(f"measure {self.request.name!r} produced columns {list(cols)}, expected "
                               f"{self.columns}")
        vals = torch.stack([v.detach().to(torch.float64) for v, _ in cols.values()], -1)  # [B, C]
        valid = torch.stack([m for _, m in cols.values()], -1).to(torch.float64)
        vals = torch.where(valid > 0, vals, torch.zeros_like(vals))
        self.total += (vals * valid).sum(0).to(self.total.device)
        self.count += valid.sum(0).to(self.count.device)

    def compute(self) -> Union[Dict[str, Tensor], Tensor]:
        mean = torch.where(self.count > 0, self.total / self.count.clamp(min=1), torch.zeros_like(self.total))
        if self.column is not None:
            return mean[self.columns.index(self.column)]
        return {c: mean[i] for i, c in enumerate(self.columns)}

    def merge_state(self, incoming_state) -> None:
        """torchmetrics' :meth:`~torchmetrics.Metric.merge_state` (states summed), also counting the incoming
        metric's updates so that ``compute()`` after a merge does not warn about a missing ``update``."""
        super().merge_state(incoming_state)
        if isinstance(incoming_state, Metric):
            self._update_count += incoming_state._update_count
        else:
            self._update_count += 1

    @property
    def counts(self) -> Dict[str, int]:
        """Number of valid lists per column accumulated so far (on this process, before sync)."""
        return {c: int(self.count[i]) for i, c in enumerate(self.columns)}

    def extra_repr(self) -> str:  # pragma: no cover - cosmetic
        return f"measure={self.request.name!r}, num_groups={self.num_groups}, options={self.request.options}"


#: torchmetrics' own keyword arguments, accepted by every metric class
_METRIC_KWARGS = ("compute_on_cpu", "dist_sync_on_step", "process_group", "dist_sync_fn", "distributed_available_fn",
                  "sync_on_compute", "compute_with_cache")


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except Exception:  # noqa: BLE001 - tensors, objects without a boolean ==
        return False


def _options_of(spec: MeasureSpec) -> List[inspect.Parameter]:
    """The measure's options (the parameters of its function that are not data), in the function's order."""
    return [p for name, p in spec._params.items()
            if name not in _DATA_ARGS and name not in ("column", "label")
            and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]


def _option_defaults(spec: MeasureSpec) -> Dict[str, Any]:
    """``{option: default}``: the registration's default, else the function's (``None`` where it has none)."""
    out = {}
    for p in _options_of(spec):
        default = spec.defaults.get(p.name, p.default)
        out[p.name] = None if default is inspect.Parameter.empty else default
    return out


def _option_parameters(spec: MeasureSpec) -> List[inspect.Parameter]:
    """The measure's options as keyword-only parameters (defaults from the function or the registration, types
    from its annotations): the signature of its class's ``__init__`` after ``num_groups``, ``column`` and
    ``validate_args``."""
    try:
        hints = typing.get_type_hints(spec.fn)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: no type, the parameter still shows
        hints = {}
    defaults = _option_defaults(spec)
    return [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=defaults[p.name],
                              annotation=hints.get(p.name, inspect.Parameter.empty)) for p in _options_of(spec)]


def metric_class(measure: str, class_name: Optional[str] = None,
                 higher_is_better: Optional[bool] = None) -> type:
    """A named subclass of :class:`FairnessMetric` bound to ``measure``, for a measure registered at run time (the
    declared measures have their classes written out in this module: ``DIPS``, ``NDCG``...).

    Its ``__init__`` has the measure's real signature: ``num_groups``, ``column``, ``validate_args`` and every
    option of the measure function as a keyword (defaults and types from the function), so ``help()`` and
    LightningCLI see them; an unknown keyword is a ``ValueError`` naming it.  ``higher_is_better`` defaults to the
    measure's registration (its declaration for a declared measure).

    Example (a class for a measure, e.g. one added with :func:`torchfair.evaluation.register`)::

        >>> MyNDCG = metric_class("ndcg", "MyNDCG")
        >>> MyNDCG(k=10).request.options, MyNDCG.higher_is_better
        ({'k': 10}, True)
    """
    spec = get_measure(measure)
    hib = spec.higher_is_better if higher_is_better is None else higher_is_better
    name = class_name or measure.upper()
    options = _option_parameters(spec)
    known = {p.name for p in options}

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None,
                 validate_args: bool = True, **kwargs: Any):
        FairnessMetric.__init__(self, measure, num_groups=num_groups, column=column, validate_args=validate_args,
                                **self._options({k: v for k, v in kwargs.items() if k not in known},
                                                **{k: v for k, v in kwargs.items() if k in known}))

    self_p = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    kw = inspect.Parameter.KEYWORD_ONLY
    __init__.__signature__ = inspect.Signature(
        [self_p, inspect.Parameter("num_groups", kw, default=None, annotation=Optional[int]),
         inspect.Parameter("column", kw, default=None, annotation=Optional[str]),
         inspect.Parameter("validate_args", kw, default=True, annotation=bool)] + options)
    __init__.__qualname__ = f"{name}.__init__"
    return type(name, (FairnessMetric,), {"__init__": __init__, "higher_is_better": hib, "__doc__": class_doc(spec),
                                          "__module__": __name__, "measure": measure})


def class_doc(spec: MeasureSpec) -> str:
    """The docstring of a measure's class: its description and its options with their defaults."""
    return (f"Corpus-level mean of the ``{spec.name}`` columns (see :class:`FairnessMetric`): "
            f"{spec.description}.\n\nOptions (keywords): "
            + (", ".join(f"``{p.name}={p.default!r}``" for p in _option_parameters(spec)) or "none") + ".")


# --- one class per declared measure (tests/metrics/test_classes.py checks each against its declaration and
# prints the source of a missing or stale one); the measures whose options are the same (names, order, defaults and
# types) inherit their ``__init__`` from one private base, the others write their own ---------------------------


class _PairErrorMetric(FairnessMetric):
    """The ``__init__`` of :class:`IGI` and :class:`REE`: their measures take the same options, defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 tie_weight: float = 0.0, k: Optional[int] = None, ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, tie_weight=tie_weight, k=k, ordering=ordering))


class _OrderingMetric(FairnessMetric):
    """The ``__init__`` of :class:`PairwiseAccuracy`, :class:`RankParity`, :class:`KendallTau` and
    :class:`DiscordantFraction`: their measures take the same options, defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, ordering=ordering))


class _GainMetric(FairnessMetric):
    """The ``__init__`` of :class:`NDCG` and :class:`DCG`: their measures take the same options, defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 k: Optional[int] = None, gain: GainLike = "exponential", ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, k=k, gain=gain, ordering=ordering))


class _ThresholdMetric(FairnessMetric):
    """The ``__init__`` of :class:`Recall`, :class:`MRR` and :class:`AveragePrecision`: their measures take the same
    options, defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 k: Optional[int] = None, threshold: float = 0.0, ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, k=k, threshold=threshold, ordering=ordering))


class _ExposureMetric(FairnessMetric):
    """The ``__init__`` of :class:`ExposureShare`, :class:`ExpectedExposure` and :class:`ExpRR`: their measures take
    the same options, defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 browsing: BrowsingLike = None, k: Optional[int] = None, ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, browsing=browsing, k=k, ordering=ordering))


class _ExposureRatioMetric(FairnessMetric):
    """The ``__init__`` of :class:`DP`, :class:`EUR` and :class:`RUR`: their measures take the same options,
    defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 protected: int = 1, reference: Optional[int] = None, browsing: BrowsingLike = None,
                 k: Optional[int] = None, amortize: bool = False, ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, protected=protected, reference=reference, browsing=browsing, k=k,
                                         amortize=amortize, ordering=ordering))


class _PrefixDivergenceMetric(FairnessMetric):
    """The ``__init__`` of :class:`RND`, :class:`RRD` and :class:`RKL`: their measures take the same options,
    defaults and types."""

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 protected: int = 1, step: int = 10, k: Optional[int] = None, normalize: bool = True,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, protected=protected, step=step, k=k, normalize=normalize,
                                         ordering=ordering))


class DIPS(FairnessMetric):
    """Corpus-level mean of the ``dips`` columns (see :class:`FairnessMetric`): DIPS M[g, h]: browsing-weighted
    unfavourable discordant pairs of g caused by h; gap M_gh - M_hg.

    Options (keywords): ``browsing=None``, ``k=None``, ``tie_weight=0.5``, ``ordering=None``.
    """

    measure = "dips"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 browsing: BrowsingLike = None, k: Optional[int] = None, tie_weight: float = 0.5,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, browsing=browsing, k=k, tie_weight=tie_weight, ordering=ordering))


class IGI(_PairErrorMetric):
    """Corpus-level mean of the ``igi`` columns (see :class:`FairnessMetric`): Inter-group inaccuracy: share of (g,
    h) pairs with r_i > r_j ranked the wrong way.

    Options (keywords): ``tie_weight=0.0``, ``k=None``, ``ordering=None``.
    """

    measure = "igi"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False


class REE(_PairErrorMetric):
    """Corpus-level mean of the ``ree`` columns (see :class:`FairnessMetric`): Rank equality error: unfavourable
    discordant (g, h) pairs over all N_g N_h pairs.

    Options (keywords): ``tie_weight=0.0``, ``k=None``, ``ordering=None``.
    """

    measure = "ree"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False


class PairwiseAccuracy(_OrderingMetric):
    """Corpus-level mean of the ``pairwise_accuracy`` columns (see :class:`FairnessMetric`): Pairwise accuracy A[g,
    h]: P(i above j | r_i > r_j, i in g, j in h); InterAcc and IntraAcc gaps.

    Options (keywords): ``ordering=None``.
    """

    measure = "pairwise_accuracy"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class RankParity(_OrderingMetric):
    """Corpus-level mean of the ``rank_parity`` columns (see :class:`FairnessMetric`): Rank parity: share of mixed
    pairs each group wins (ARP) and Kuhlman's pair = abs(1 - 2 share).

    Options (keywords): ``ordering=None``.
    """

    measure = "rank_parity"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False


class KendallTau(_OrderingMetric):
    """Corpus-level mean of the ``kendall_tau`` columns (see :class:`FairnessMetric`): Kendall's tau between the
    ranking and the ideal (relevance) ranking, 1 - 2 x discordant fraction.

    Options (keywords): ``ordering=None``.
    """

    measure = "kendall_tau"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class NDCG(_GainMetric):
    """Corpus-level mean of the ``ndcg`` columns (see :class:`FairnessMetric`): Normalised discounted cumulative
    gain (exponential or linear gain, optional cut-off k).

    Options (keywords): ``k=None``, ``gain='exponential'``, ``ordering=None``.
    """

    measure = "ndcg"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class DCG(_GainMetric):
    """Corpus-level mean of the ``dcg`` columns (see :class:`FairnessMetric`): Discounted cumulative gain
    (unnormalised).

    Options (keywords): ``k=None``, ``gain='exponential'``, ``ordering=None``.
    """

    measure = "dcg"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class Precision(FairnessMetric):
    """Corpus-level mean of the ``precision`` columns (see :class:`FairnessMetric`): Precision at k: share of
    relevant items among the top k.

    Options (keywords): ``k=None``, ``threshold=0.0``, ``adaptive_k=False``, ``ordering=None``.
    """

    measure = "precision"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 k: Optional[int] = None, threshold: float = 0.0, adaptive_k: bool = False,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, k=k, threshold=threshold, adaptive_k=adaptive_k, ordering=ordering))


class Recall(_ThresholdMetric):
    """Corpus-level mean of the ``recall`` columns (see :class:`FairnessMetric`): Recall at k: share of the relevant
    (judged) items that are in the top k.

    Options (keywords): ``k=None``, ``threshold=0.0``, ``ordering=None``.
    """

    measure = "recall"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class MRR(_ThresholdMetric):
    """Corpus-level mean of the ``mrr`` columns (see :class:`FairnessMetric`): Reciprocal rank of the first relevant
    item (expected over a stochastic ordering).

    Options (keywords): ``k=None``, ``threshold=0.0``, ``ordering=None``.
    """

    measure = "mrr"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class AveragePrecision(_ThresholdMetric):
    """Corpus-level mean of the ``average_precision`` columns (see :class:`FairnessMetric`): Average precision: mean
    precision at the ranks of the relevant (judged) items; its mean is MAP.

    Options (keywords): ``k=None``, ``threshold=0.0``, ``ordering=None``.
    """

    measure = "average_precision"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False


class RPrecision(FairnessMetric):
    """Corpus-level mean of the ``r_precision`` columns (see :class:`FairnessMetric`): R-precision: precision at R,
    the number of relevant (judged) items.

    Options (keywords): ``threshold=0.0``, ``ordering=None``.
    """

    measure = "r_precision"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 threshold: float = 0.0, ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, threshold=threshold, ordering=ordering))


class RankBiasedPrecision(FairnessMetric):
    """Corpus-level mean of the ``rbp`` columns (see :class:`FairnessMetric`): Rank-biased precision with
    persistence p.

    Options (keywords): ``p=0.8``, ``k=None``, ``ordering=None``.
    """

    measure = "rbp"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 p: float = 0.8, k: Optional[int] = None, ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, p=p, k=k, ordering=ordering))


class ERR(FairnessMetric):
    """Corpus-level mean of the ``err`` columns (see :class:`FairnessMetric`): Expected reciprocal rank under the
    cascade model.

    Options (keywords): ``max_grade=None``, ``k=None``, ``ordering=None``.
    """

    measure = "err"
    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 max_grade: Optional[float] = None, k: Optional[int] = None, ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, max_grade=max_grade, k=k, ordering=ordering))


class ExposureShare(_ExposureMetric):
    """Corpus-level mean of the ``exposure_share`` columns (see :class:`FairnessMetric`): Each group's share of the
    list's exposure (the distribution AWRF compares with its target).

    Options (keywords): ``browsing=None``, ``k=None``, ``ordering=None``.
    """

    measure = "exposure_share"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False


class AWRF(FairnessMetric):
    """Corpus-level mean of the ``awrf`` columns (see :class:`FairnessMetric`): Attention-weighted rank fairness:
    distance of each group's exposure share from its target share.

    Options (keywords): ``target=None``, ``distance='nd'``, ``protected=None``, ``browsing=None``, ``k=None``,
    ``ordering=None``.
    """

    measure = "awrf"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 target: Union[str, Tensor, None] = None, distance: str = "nd", protected: Optional[int] = None,
                 browsing: BrowsingLike = None, k: Optional[int] = None, ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, target=target, distance=distance, protected=protected,
                                         browsing=browsing, k=k, ordering=ordering))


class IAA(FairnessMetric):
    """Corpus-level mean of the ``iaa`` columns (see :class:`FairnessMetric`): Inequity of amortized attention: L1
    distance between normalised attention and relevance.

    Options (keywords): ``browsing=None``, ``k=None``, ``amortize=False``, ``ordering=None``.
    """

    measure = "iaa"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 browsing: BrowsingLike = None, k: Optional[int] = None, amortize: bool = False,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, browsing=browsing, k=k, amortize=amortize, ordering=ordering))


class ExpectedExposure(_ExposureMetric):
    """Corpus-level mean of the ``expected_exposure`` columns (see :class:`FairnessMetric`): Expected exposure: EE-L
    (distance to the ideal exposure), EE-D (disparity), EE-R (relevance).

    Options (keywords): ``browsing=None``, ``k=None``, ``ordering=None``.
    """

    measure = "expected_exposure"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False


class ExposureMisallocation(FairnessMetric):
    """Corpus-level mean of the ``exposure_misallocation`` columns (see :class:`FairnessMetric`): Exposure
    misallocation delta_g: target share minus exposure share of group g (> 0: under-exposed).

    Options (keywords): ``target='ee'``, ``browsing=None``, ``k=None``, ``ordering=None``.
    """

    measure = "exposure_misallocation"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 target: str = "ee", browsing: BrowsingLike = None, k: Optional[int] = None,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, target=target, browsing=browsing, k=k, ordering=ordering))


class ExpRR(_ExposureMetric):
    """Corpus-level mean of the ``exp_rr`` columns (see :class:`FairnessMetric`): expRR: abs(1 - 2 share) of mean
    reciprocal-rank exposure, each group against the rest (0 = parity).

    Options (keywords): ``browsing=None``, ``k=None``, ``ordering=None``.
    """

    measure = "exp_rr"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False


class DP(_ExposureRatioMetric):
    """Corpus-level mean of the ``dp`` columns (see :class:`FairnessMetric`): Demographic parity ratio of mean group
    exposures (1 = parity).

    Options (keywords): ``protected=1``, ``reference=None``, ``browsing=None``, ``k=None``, ``amortize=False``,
    ``ordering=None``.
    """

    measure = "dp"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False


class EUR(_ExposureRatioMetric):
    """Corpus-level mean of the ``eur`` columns (see :class:`FairnessMetric`): Exposed utility ratio: exposure per
    unit of relevance, protected over reference (1 = parity).

    Options (keywords): ``protected=1``, ``reference=None``, ``browsing=None``, ``k=None``, ``amortize=False``,
    ``ordering=None``.
    """

    measure = "eur"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False


class RUR(_ExposureRatioMetric):
    """Corpus-level mean of the ``rur`` columns (see :class:`FairnessMetric`): Realised utility ratio:
    browsing-weighted relevance per unit of relevance, protected over reference.

    Options (keywords): ``protected=1``, ``reference=None``, ``browsing=None``, ``k=None``, ``amortize=False``,
    ``ordering=None``.
    """

    measure = "rur"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False


class RND(_PrefixDivergenceMetric):
    """Corpus-level mean of the ``rnd`` columns (see :class:`FairnessMetric`): Normalised discounted difference:
    protected share of each prefix vs the whole list.

    Options (keywords): ``protected=1``, ``step=10``, ``k=None``, ``normalize=True``, ``ordering=None``.
    """

    measure = "rnd"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False


class RRD(_PrefixDivergenceMetric):
    """Corpus-level mean of the ``rrd`` columns (see :class:`FairnessMetric`): Normalised discounted ratio:
    protected-to-rest ratio of each prefix vs the whole list.

    Options (keywords): ``protected=1``, ``step=10``, ``k=None``, ``normalize=True``, ``ordering=None``.
    """

    measure = "rrd"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False


class RKL(_PrefixDivergenceMetric):
    """Corpus-level mean of the ``rkl`` columns (see :class:`FairnessMetric`): Normalised discounted KL divergence
    of prefix group distributions from the whole list.

    Options (keywords): ``protected=1``, ``step=10``, ``k=None``, ``normalize=True``, ``ordering=None``.
    """

    measure = "rkl"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False


class Skew(FairnessMetric):
    """Corpus-level mean of the ``skew`` columns (see :class:`FairnessMetric`): Skew@k: log ratio of a group's share
    of the top k to its target share (0 = parity).

    Options (keywords): ``k=10``, ``target=None``, ``ordering=None``.
    """

    measure = "skew"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 k: int = 10, target: TargetLike = None, ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, k=k, target=target, ordering=ordering))


class NDKL(FairnessMetric):
    """Corpus-level mean of the ``ndkl`` columns (see :class:`FairnessMetric`): Normalised discounted KL divergence
    of prefix group distributions from a target.

    Options (keywords): ``k=None``, ``target=None``, ``ordering=None``.
    """

    measure = "ndkl"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 k: Optional[int] = None, target: TargetLike = None, ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, k=k, target=target, ordering=ordering))


class PreF(FairnessMetric):
    """Corpus-level mean of the ``pref`` columns (see :class:`FairnessMetric`): Prefix fairness PreF_Delta:
    discounted divergence of prefix group shares from a target.

    Options (keywords): ``delta='kl'``, ``protected=1``, ``target=None``, ``step=10``, ``k=None``,
    ``normalize=True``, ``ordering=None``.
    """

    measure = "pref"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 delta: str = "kl", protected: int = 1, target: TargetLike = None, step: int = 10,
                 k: Optional[int] = None, normalize: bool = True, ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, delta=delta, protected=protected, target=target, step=step, k=k,
                                         normalize=normalize, ordering=ordering))


class FAIR(FairnessMetric):
    """Corpus-level mean of the ``fair`` columns (see :class:`FairnessMetric`): FA*IR's binomial test as a metric:
    mean over prefixes of the binomial CDF of the protected count (1 = fair).

    Options (keywords): ``protected=1``, ``target=None``, ``k=None``, ``ordering=None``.
    """

    measure = "fair"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 protected: int = 1, target: TargetLike = None, k: Optional[int] = None, ordering: OrderingLike = None,
                 **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, protected=protected, target=target, k=k, ordering=ordering))


class MPC(FairnessMetric):
    """Corpus-level mean of the ``mpc`` columns (see :class:`FairnessMetric`): Matched pair calibration: mean
    outcome gap over matched cross-group pairs of equal score.

    Options (keywords): ``group=1``, ``eps=None``, ``closest=None``, ``quantile=None``, ``adjacent=False``,
    ``browsing=None``, ``position_weight='top'``, ``ci='none'``, ``level=0.95``, ``n_boot=200``, ``generator=None``,
    ``item_ids=None``, ``ordering=None``, ``k=None``.
    """

    measure = "mpc"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 group: int = 1, eps: Optional[float] = None, closest: Optional[int] = None,
                 quantile: Optional[float] = None, adjacent: bool = False, browsing: BrowsingLike = None,
                 position_weight: str = "top", ci: str = "none", level: float = 0.95, n_boot: int = 200,
                 generator: Optional[torch.Generator] = None, item_ids: Optional[Tensor] = None,
                 ordering: OrderingLike = None, k: Optional[int] = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, group=group, eps=eps, closest=closest, quantile=quantile,
                                         adjacent=adjacent, browsing=browsing, position_weight=position_weight, ci=ci,
                                         level=level, n_boot=n_boot, generator=generator, item_ids=item_ids,
                                         ordering=ordering, k=k))


class Top1ExposureGap(FairnessMetric):
    """Corpus-level mean of the ``top1_exposure_gap`` columns (see :class:`FairnessMetric`): DELTR's exposure gap:
    mean top-1 probability of the rest minus that of the protected group.

    Options (keywords): ``protected=1``.
    """

    measure = "top1_exposure_gap"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 protected: int = 1, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, protected=protected))


class DisparateExposure(FairnessMetric):
    """Corpus-level mean of the ``disparate_exposure`` columns (see :class:`FairnessMetric`): Fair-PG-Rank
    disparity: exposure per unit of merit of the rest minus that of the protected group.

    Options (keywords): ``protected=1``, ``browsing=None``, ``k=None``, ``ordering=None``.
    """

    measure = "disparate_exposure"
    higher_is_better = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, *, num_groups: Optional[int] = None, column: Optional[str] = None, validate_args: bool = True,
                 protected: int = 1, browsing: BrowsingLike = None, k: Optional[int] = None,
                 ordering: OrderingLike = None, **kwargs: Any) -> None:
        super().__init__(self.measure, num_groups=num_groups, column=column, validate_args=validate_args,
                         **self._options(kwargs, protected=protected, browsing=browsing, k=k, ordering=ordering))


class DiscordantFraction(_OrderingMetric):
    """Corpus-level mean of the ``discordant_fraction`` columns (see :class:`FairnessMetric`): Fraction of item
    pairs ranked against strictly ordered relevance.

    Options (keywords): ``ordering=None``.
    """

    measure = "discordant_fraction"
    higher_is_better = False
    is_differentiable = False
    full_state_update = False
