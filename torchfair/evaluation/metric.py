"""torchmetrics wrappers: accumulate any registered measure over batches, exactly, across processes.

Public as :mod:`torchfair.metrics` names, beside the functions (``from torchfair.metrics import DIPS, dips``), as
torchmetrics keeps a domain's classes in its domain package; ``import torchfair.metrics`` loads this module (and
torchmetrics) only when a class is first used.

Each metric keeps two ``[C]`` states per instance, one entry per column of the measure (see
:mod:`torchfair.evaluation.registry`): ``total`` (sum of the column over the lists where it is valid) and ``count``
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
from __future__ import annotations

import inspect
import typing
from typing import Any, Dict, List, Optional, Union

import torch
from torch import Tensor

from .._extras import require

require("torchfair.evaluation.metric (the Metric classes: torchfair.metrics.DIPS...)", "torchmetrics")

from torchmetrics import Metric  # noqa: E402

from .registry import _DATA_ARGS, MeasureRequest, get_measure, parse_request

__all__ = ["FairnessMetric", "DIPS", "IGI", "REE", "PairwiseAccuracy", "RankParity", "KendallTau", "metric_class",
           "NDCG", "DCG", "Precision", "Recall", "MRR", "AveragePrecision", "RPrecision", "RankBiasedPrecision", "ERR", "ExposureShare", "AWRF", "IAA", "ExpectedExposure",
           "ExposureMisallocation", "ExpRR", "DP", "EUR", "RUR", "RND", "RRD", "RKL", "Skew", "NDKL", "PreF",
           "FAIR", "MPC", "Top1ExposureGap", "DisparateExposure", "DiscordantFraction"]


class FairnessMetric(Metric):
    """Mean of a registered measure's columns over all valid lists seen by :meth:`update`.

    Args:
        measure: a registered name (``"dips"``, ``"ndcg"``...), ``"ndcg@10"``-style string, or
            :class:`~torchfair.evaluation.registry.MeasureRequest`.
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


def _option_parameters(spec) -> List[inspect.Parameter]:
    """The measure's options as keyword-only parameters (defaults from the function or the registration, types
    from its annotations): what the generated class's signature shows to IDEs, ``help()`` and LightningCLI."""
    try:
        hints = typing.get_type_hints(spec.fn)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: no type, the parameter still shows
        hints = {}
    out = []
    for name, prm in spec._params.items():
        if name in _DATA_ARGS or prm.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL) \
                or name in ("column", "label"):
            continue
        default = spec.defaults.get(name, prm.default)
        if default is inspect.Parameter.empty:
            default = None
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=hints.get(name, inspect.Parameter.empty)))
    return out


def metric_class(measure: str, class_name: Optional[str] = None,
                 higher_is_better: Optional[bool] = None) -> type:
    """A named subclass of :class:`FairnessMetric` bound to ``measure`` (``NDCG = metric_class("ndcg")``).

    Its ``__init__`` has the measure's real signature: ``num_groups``, ``column``, ``validate_args`` and every
    option of the measure function as a keyword (defaults and types from the function), so IDEs, ``help()`` and
    LightningCLI see them; an unknown keyword is a ``ValueError`` naming it.  ``higher_is_better`` defaults to the
    measure's declaration (:data:`torchfair.metrics.MEASURES`).

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
        bad = sorted(k for k in kwargs if k not in known and k not in _METRIC_KWARGS)
        if bad:
            raise ValueError(f"{name}: unknown option(s) {bad}; the measure {measure!r} takes {sorted(known)}")
        sig_defaults = {p.name: p.default for p in options}
        # only the options that differ from their defaults (LightningCLI passes every default explicitly): the
        # request, its columns and its label stay what they are without them
        given = {k: v for k, v in kwargs.items() if k in known and not _same(v, sig_defaults.get(k))}
        FairnessMetric.__init__(self, measure, num_groups=num_groups, column=column, validate_args=validate_args,
                                **given, **{k: v for k, v in kwargs.items() if k in _METRIC_KWARGS})

    self_p = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    kw = inspect.Parameter.KEYWORD_ONLY
    __init__.__signature__ = inspect.Signature(
        [self_p, inspect.Parameter("num_groups", kw, default=None, annotation=Optional[int]),
         inspect.Parameter("column", kw, default=None, annotation=Optional[str]),
         inspect.Parameter("validate_args", kw, default=True, annotation=bool)] + options)
    __init__.__qualname__ = f"{name}.__init__"
    doc = (f"Corpus-level mean of the ``{measure}`` columns (see :class:`FairnessMetric`): "
           f"{spec.description}.\n\nOptions (keywords): "
           + (", ".join(f"``{p.name}={p.default!r}``" for p in options) or "none") + ".")
    return type(name, (FairnessMetric,), {"__init__": __init__, "higher_is_better": hib, "__doc__": doc,
                                          "__module__": __name__, "measure": measure})


DIPS = metric_class("dips", "DIPS")
IGI = metric_class("igi", "IGI")
REE = metric_class("ree", "REE")
PairwiseAccuracy = metric_class("pairwise_accuracy", "PairwiseAccuracy")
RankParity = metric_class("rank_parity", "RankParity")
KendallTau = metric_class("kendall_tau", "KendallTau")
DiscordantFraction = metric_class("discordant_fraction", "DiscordantFraction")
NDCG = metric_class("ndcg", "NDCG")
DCG = metric_class("dcg", "DCG")
Precision = metric_class("precision", "Precision")
Recall = metric_class("recall", "Recall")
MRR = metric_class("mrr", "MRR")
AveragePrecision = metric_class("average_precision", "AveragePrecision")
RPrecision = metric_class("r_precision", "RPrecision")
RankBiasedPrecision = metric_class("rbp", "RankBiasedPrecision")  # not RBP: that is the browsing model
ERR = metric_class("err", "ERR")
ExposureShare = metric_class("exposure_share", "ExposureShare")
AWRF = metric_class("awrf", "AWRF")
IAA = metric_class("iaa", "IAA")
ExpectedExposure = metric_class("expected_exposure", "ExpectedExposure")
ExposureMisallocation = metric_class("exposure_misallocation", "ExposureMisallocation")
ExpRR = metric_class("exp_rr", "ExpRR")
DP = metric_class("dp", "DP")
EUR = metric_class("eur", "EUR")
RUR = metric_class("rur", "RUR")
RND = metric_class("rnd", "RND")
RRD = metric_class("rrd", "RRD")
RKL = metric_class("rkl", "RKL")
Skew = metric_class("skew", "Skew")
NDKL = metric_class("ndkl", "NDKL")
PreF = metric_class("pref", "PreF")
FAIR = metric_class("fair", "FAIR")
MPC = metric_class("mpc", "MPC")
Top1ExposureGap = metric_class("top1_exposure_gap", "Top1ExposureGap")
DisparateExposure = metric_class("disparate_exposure", "DisparateExposure")
