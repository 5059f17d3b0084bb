"""The declaration of every measure: what it is, declared once, read by everything that uses measures.

A :class:`Measure` names a measure function of :mod:`torchfair.metrics` together with what the rest of the library
needs to know about it: its kind (fairness or utility), its direction, what it needs (relevance, groups, a
browsing model), the shape of its per-list value, its per-list validity rule, a one-line description, its source,
how it becomes a loss by default, its documented value range (and the options that change it), the data tensors
it takes, whether it accepts soft membership, whether it is an expectation over rankings, and the option values
worth testing.  :data:`MEASURES` holds them all; readers:

* :mod:`torchfair.evaluation` (the registry, :func:`~torchfair.evaluation.evaluate_lists`, the torchmetrics classes,
  whose ``higher_is_better`` comes from here) and the ``torchfair metrics`` CLI (``--list-measures``);
* :mod:`torchfair.losses` (:func:`~torchfair.losses.measure_loss` / :class:`~torchfair.losses.MeasureLoss` turn
  any declared measure into a loss, with the declared ``loss`` reducer by default);
* the tests: the contract harness (``tests/contract_cases.py``) generates one row per declared measure from the
  range, data, soft membership, expectation and options fields, and ``tests/tester.py`` checks every declaration
  (functional value against the metric class, batch against single lists, padding, dtypes) over its options.

Example: the declaration of DIPS::

    Measure("dips", pairwise.dips, kind="fairness", higher_is_better=False,
            needs=("relevance", "groups", "browsing"), output="pair",
            validity="M[g, h] is undefined when group g or h is absent from the list",
            description="DIPS M[g, h]: dissatisfaction of group g caused by group h ...",
            source="Fabris et al., WSDM 2023, eq. 11", loss="gap_abs",
            value_range=(0, 1), data=("scores", "relevance", "groups", "mask"), expectation=True,
            options={"browsing": BROWSING_SPECS, "tie_weight": (0.0, 1.0)})
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ..browsing import Cascade
from . import calibration, disparity, exposure, pairwise, prefix, utility

__all__ = ["Measure", "MEASURES", "get_declaration", "KINDS", "OUTPUTS", "NEEDS", "DATA", "RelevanceBound",
           "MAX_RELEVANCE", "BROWSING_SPECS"]

KINDS = ("fairness", "utility")
#: per-list value: ``list`` ``[B]``, ``group`` ``[B, G]``, ``pair`` ``[B, G, G]``, ``record`` a NamedTuple
OUTPUTS = ("list", "group", "pair", "record")
NEEDS = ("relevance", "groups", "browsing")
#: the data tensors a measure may take (every other argument is an option); ``ideal_relevance`` ``[B, M]``: the
#: grades of every judged item of each list's query (NDCG's ideal, the relevant count of recall / AP / R-precision)
DATA = ("scores", "relevance", "groups", "mask", "ideal_relevance")
INF = math.inf


@dataclass(frozen=True)
class RelevanceBound:
    """A bound of a value range that depends on the data: ``scale`` times the largest relevance of the list's real
    items (RBP's gain is the relevance itself, so its value lies in ``[0, max r]``)."""

    scale: float = 1.0

    def __neg__(self) -> "RelevanceBound":
        return RelevanceBound(-self.scale)

    def __repr__(self) -> str:
        return "MAX_RELEVANCE" if self.scale == 1 else f"{self.scale:g} * MAX_RELEVANCE"


#: the largest relevance of the list's real items, as a bound of a value range
MAX_RELEVANCE = RelevanceBound()

Bound = Union[float, RelevanceBound]
Range = Tuple[Bound, Bound]

#: browsing models worth testing for a measure that takes ``browsing`` (specs of
#: :func:`torchfair.browsing.get_browsing`, and a cascade with graded stop probabilities, which has no spec string)
BROWSING_SPECS = ("uniform", "rbp:0.8", "logarithmic", "reciprocal", "geometric:0.5", "topk:3", "topk:2:rbp:0.8",
                  "cascade", Cascade(0.9, max_grade=4.0))


def _check_range(r: Any, what: str) -> None:
    if r is None:
        return
    ok = isinstance(r, tuple) and len(r) == 2 and all(
        isinstance(b, RelevanceBound) or (isinstance(b, (int, float)) and not isinstance(b, bool) and b == b)
        for b in r)
    if ok and all(isinstance(b, (int, float)) for b in r):
        ok = r[0] <= r[1]
    if not ok:
        raise ValueError(f"`{what}` must be None or (low, high) with numbers (inf allowed) or MAX_RELEVANCE "
                         f"bounds, low <= high; got {r!r}")


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except Exception:  # noqa: BLE001 - tensors, objects without a boolean ==
        return False


@dataclass(frozen=True)
class Measure:
    """A measure's declaration (see the module docstring)."""

    #: the name users ask for (``evaluate_lists(..., ["dips"])``, ``--measures dips``, ``measure_loss("dips", ...)``)
    name: str
    #: the functional measure (scores, [relevance], [groups], keyword options) -> value[, valid]
    fn: Callable[..., Any]
    #: ``"fairness"`` or ``"utility"``
    kind: str
    #: ``True``: higher is better; ``False``: lower is better; ``None``: signed or a vector, 0 / parity is best
    higher_is_better: Optional[bool]
    #: inputs beyond the scores: a subset of ``("relevance", "groups", "browsing")``
    needs: Tuple[str, ...]
    #: shape of the per-list value, one of :data:`OUTPUTS`
    output: str
    #: when the value of one list is undefined (returned as 0 and flagged False in the validity mask)
    validity: str
    #: one line for tables and ``--list-measures``
    description: str
    #: where the formula comes from (authors, venue, year, equation)
    source: str
    #: the list reducer that turns it into a loss by default (``None``: not meant as a loss), see
    #: :data:`torchfair.losses.transform.REDUCERS`
    loss: Optional[str] = None
    #: for ``record`` outputs, the field a loss uses
    loss_field: Optional[str] = None
    #: options the evaluation tools always pass (e.g. per-list IAA)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: global options (CLI flags) that must not reach this measure (MPC's ``k`` is a number of pairs)
    ignore_global: Tuple[str, ...] = ()
    #: the documented range ``(low, high)`` of the value on a valid list under the default options (``inf`` for an
    #: unbounded end; a bound may be :data:`MAX_RELEVANCE`); ``None``: no documented bound (e.g. a signed log ratio).
    #: For ``record`` outputs it applies to every floating field not in ``field_ranges``.
    value_range: Optional[Range] = None
    #: ranges under other option values, ``{option: {value: range}}`` (AWRF's ``distance="kl"`` is unbounded)
    option_ranges: Mapping[str, Mapping[Any, Optional[Range]]] = field(default_factory=dict)
    #: for ``record`` outputs, the range of single fields where it is not ``value_range``
    field_ranges: Mapping[str, Optional[Range]] = field(default_factory=dict)
    #: the data tensors the function takes, a subset of :data:`DATA` holding ``scores``; those in ``needs`` are
    #: required, the others optional (IAA's ``groups``); default: ``scores``, the needed tensors and ``mask``
    data: Optional[Tuple[str, ...]] = None
    #: whether ``groups`` may be soft membership ``[B, N, G]``: ``True`` / ``False``, or ``{option: values}``, the
    #: option values under which it may (PreF: ``{"delta": ("kl",)}``)
    soft_groups: Union[bool, Mapping[str, Tuple[Any, ...]]] = True
    #: the value under a mixture of rankings (``Sampled``, ``PlackettLuce``) is the mixture of its values on each
    #: ranking: an expectation over rankings, so a sampled estimate is unbiased (default options)
    expectation: bool = False
    #: option values worth testing besides the function's default (the tests always try the default first)
    options: Mapping[str, Tuple[Any, ...]] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {KINDS}; got {self.kind!r}")
        if self.output not in OUTPUTS:
            raise ValueError(f"`output` must be one of {OUTPUTS}; got {self.output!r}")
        if not set(self.needs) <= set(NEEDS):
            raise ValueError(f"`needs` must be a subset of {NEEDS}; got {self.needs!r}")
        if self.output == "record" and self.loss is not None and self.loss_field is None:
            raise ValueError("a record measure made a loss must name its `loss_field`")
        if self.data is None:  # default: the scores, the tensors it needs, the mask
            object.__setattr__(self, "data", tuple(d for d in DATA if d in ("scores", "mask") or d in self.needs))
        if "scores" not in self.data or not set(self.data) <= set(DATA) or \
                not set(self.needs) - {"browsing"} <= set(self.data):
            raise ValueError(f"`data` must be a subset of {DATA} holding scores and every needed tensor; "
                             f"got {self.data!r}")
        _check_range(self.value_range, "value_range")
        for table in self.option_ranges.values():
            for r in table.values():
                _check_range(r, "option_ranges")
        for r in self.field_ranges.values():
            _check_range(r, "field_ranges")
        if self.field_ranges and self.output != "record":
            raise ValueError("`field_ranges` is for record outputs")
        if not all(isinstance(v, tuple) and v for v in self.options.values()):
            raise ValueError(f"`options` must map option names to non-empty tuples of values; got {self.options!r}")

    @property
    def direction(self) -> str:
        """``"higher"``, ``"lower"`` or ``"zero"`` (signed: closest to parity is best)."""
        return {True: "higher", False: "lower", None: "zero"}[self.higher_is_better]

    def default(self, option: str) -> Any:
        """The function's default for ``option`` (``None`` for a required or unknown one)."""
        p = inspect.signature(self.fn).parameters.get(option)
        return None if p is None or p.default is inspect.Parameter.empty else p.default

    def range_for(self, options: Mapping[str, Any] = {}) -> Optional[Range]:  # noqa: B006 - read only
        """The documented range of the value (or of ``field`` of a record) under ``options``."""
        for opt, table in self.option_ranges.items():
            if opt in options:
                for value, rng in table.items():
                    if _same(options[opt], value):
                        return rng
        return self.value_range

    def field_range(self, name: str, options: Mapping[str, Any] = {}) -> Optional[Range]:  # noqa: B006
        """The documented range of field ``name`` of a ``record`` value under ``options``."""
        return self.field_ranges[name] if name in self.field_ranges else self.range_for(options)

    def accepts_soft(self, options: Mapping[str, Any] = {}) -> bool:  # noqa: B006 - read only
        """Whether ``groups`` may be soft membership under ``options`` (omitted ones take their defaults)."""
        if isinstance(self.soft_groups, bool):
            return self.soft_groups
        return all(any(_same(options.get(k, self.default(k)), v) for v in values)
                   for k, values in self.soft_groups.items())


def _m(*args, **kwargs) -> Measure:
    return Measure(*args, **kwargs)


_GROUP_ABSENT = "an entry is undefined when a group it involves is absent from the list"

# data tensors
_SRGM = ("scores", "relevance", "groups", "mask")
_SRM = ("scores", "relevance", "mask")
_SRMI = ("scores", "relevance", "mask", "ideal_relevance")  # and the grades of every judged item
_SGM = ("scores", "groups", "mask")
# ranges
_UNIT = (0.0, 1.0)
_SIGNED_UNIT = (-1.0, 1.0)
_NONNEG = (0.0, INF)
_UNNORMALISED = {"normalize": {False: _NONNEG}}
# option grids
_B = {"browsing": BROWSING_SPECS}
_RATIO = {"protected": (0,), "reference": (0, 1), "amortize": (True,), **_B}
_PREFIX = {"step": (1, 2, 3), "protected": (0,), "normalize": (False,)}
_K = (1, 3, 10)

_DECLARED: List[Measure] = [
    # ------------------------------------------------------------------ pairwise
    _m("dips", pairwise.dips, "fairness", False, ("relevance", "groups", "browsing"), "pair",
       "M[g, h] is undefined when group g or h is absent from the list",
       "DIPS M[g, h]: browsing-weighted unfavourable discordant pairs of g caused by h; gap M_gh - M_hg",
       "Fabris et al., WSDM 2023, eq. 7-11", loss="gap_abs",
       value_range=_UNIT, data=_SRGM, expectation=True, options={**_B, "tie_weight": (0.0, 1.0)}),
    _m("igi", pairwise.igi, "fairness", False, ("relevance", "groups"), "pair",
       "M[g, h] is undefined when no (g, h) pair has r_i > r_j",
       "Inter-group inaccuracy: share of (g, h) pairs with r_i > r_j ranked the wrong way",
       "Beutel et al., KDD 2019; Fabris et al., WSDM 2023, eq. 1 and §4.4", loss="gap_abs",
       value_range=_UNIT, data=_SRGM, expectation=True, options={"tie_weight": (0.5, 1.0)}),
    _m("ree", pairwise.ree, "fairness", False, ("relevance", "groups"), "pair",
       "M[g, h] is undefined when group g or h is absent from the list",
       "Rank equality error: unfavourable discordant (g, h) pairs over all N_g N_h pairs",
       "Kuhlman et al., 2019; Fabris et al., WSDM 2023, eq. 1 and §4.4", loss="gap_abs",
       value_range=_UNIT, data=_SRGM, expectation=True, options={"tie_weight": (0.5, 1.0)}),
    _m("pairwise_accuracy", pairwise.pairwise_accuracy, "fairness", True, ("relevance", "groups"), "pair",
       "A[g, h] is undefined when no (g, h) pair has r_i > r_j",
       "Pairwise accuracy A[g, h]: P(i above j | r_i > r_j, i in g, j in h); InterAcc and IntraAcc gaps",
       "Raj & Ekstrand, SIGIR 2022, eq. 11 and §2.5", loss="inter",
       value_range=_UNIT, data=_SRGM, expectation=True),
    _m("rank_parity", pairwise.rank_parity, "fairness", None, ("groups",), "record",
       "a group's entries are undefined when it has no mixed pair (another group absent)",
       "Rank parity: share of mixed pairs each group wins (ARP) and Kuhlman's pair = abs(1 - 2 share)",
       "Kuhlman et al., AIES 2021, eq. 8-9; FairRankTune docs (ARP)",
       value_range=_UNIT, data=_SGM),
    _m("kendall_tau", pairwise.kendall_tau, "utility", True, ("relevance",), "list",
       "undefined for lists of fewer than two items",
       "Kendall's tau between the ranking and the ideal (relevance) ranking, 1 - 2 x discordant fraction",
       "Fabris et al., WSDM 2023, §3.1",
       value_range=_SIGNED_UNIT, data=_SRM, expectation=True),
    _m("discordant_fraction", pairwise.discordant_fraction, "utility", False, ("relevance",), "list",
       "undefined for lists of fewer than two items",
       "Fraction of item pairs ranked against strictly ordered relevance",
       "Fabris et al., WSDM 2023, eq. 3-4",
       value_range=_UNIT, data=_SRM, expectation=True),
    # ------------------------------------------------------------------ exposure
    _m("exposure_misallocation", exposure.exposure_misallocation, "fairness", None,
       ("relevance", "groups", "browsing"), "group",
       "undefined when the list gets no exposure or its total target is 0 (e.g. no relevant item under 'ea')",
       "Exposure misallocation delta_g: target share minus exposure share of group g (> 0: under-exposed)",
       "Fabris et al., WSDM 2023, eq. 12-16", loss="l1",
       value_range=_SIGNED_UNIT, data=_SRGM, expectation=True, options={"target": ("ea", "ea-dp"), **_B}),
    _m("expected_exposure", exposure.expected_exposure, "fairness", None, ("relevance", "browsing"), "record",
       "always defined for a list with a real item",
       "Expected exposure: EE-L (distance to the ideal exposure), EE-D (disparity), EE-R (relevance)",
       "Diaz et al., CIKM 2020; Raj & Ekstrand, SIGIR 2022, eq. 5, 9, 10", loss="value", loss_field="loss",
       value_range=_NONNEG, data=_SRGM, options=_B),
    _m("exposure_share", exposure.exposure_share, "fairness", None, ("groups", "browsing"), "group",
       "undefined when no known-group item gets exposure",
       "Each group's share of the list's exposure (the distribution AWRF compares with its target)",
       "Sapiezynski et al., WWW 2019; Raj & Ekstrand, SIGIR 2022, eq. 3",
       value_range=_UNIT, data=_SGM, options=_B),
    _m("awrf", exposure.awrf, "fairness", False, ("groups", "browsing"), "group",
       "undefined when no known-group item gets exposure",
       "Attention-weighted rank fairness: distance of each group's exposure share from its target share",
       "Sapiezynski et al., WWW 2019; Raj & Ekstrand, SIGIR 2022, eq. 3", loss="l1",
       value_range=_UNIT, option_ranges={"distance": {"rd": _NONNEG, "kl": _NONNEG}}, data=_SGM,
       options={"distance": ("rd", "kl"), "target": ("equal", "list"), "protected": (0, 1), **_B}),
    _m("iaa", exposure.iaa, "fairness", False, ("relevance", "browsing"), "list",
       "undefined when the list has no exposure or no relevance mass",
       "Inequity of amortized attention: L1 distance between normalised attention and relevance",
       "Biega et al., SIGIR 2018; Raj & Ekstrand, SIGIR 2022, eq. 4", loss="value",
       defaults={"amortize": False}, value_range=(0.0, 2.0), data=_SRGM, options={"amortize": (False,), **_B}),
    _m("dp", exposure.dp, "fairness", None, ("groups", "browsing"), "list",
       "undefined when the protected or the reference group is absent or gets no exposure",
       "Demographic parity ratio of mean group exposures (1 = parity)",
       "Singh & Joachims, KDD 2018; Raj & Ekstrand, SIGIR 2022, eq. 6",
       value_range=_NONNEG, data=_SGM, options=_RATIO),
    _m("eur", exposure.eur, "fairness", None, ("relevance", "groups", "browsing"), "list",
       "undefined when a group is absent, gets no exposure or has no relevance",
       "Exposed utility ratio: exposure per unit of relevance, protected over reference (1 = parity)",
       "Singh & Joachims, KDD 2018; Raj & Ekstrand, SIGIR 2022, eq. 7",
       value_range=_NONNEG, data=_SRGM, options=_RATIO),
    _m("rur", exposure.rur, "fairness", None, ("relevance", "groups", "browsing"), "list",
       "undefined when a group is absent or has no realised utility",
       "Realised utility ratio: browsing-weighted relevance per unit of relevance, protected over reference",
       "Singh & Joachims, KDD 2018; Raj & Ekstrand, SIGIR 2022, eq. 8",
       value_range=_NONNEG, data=_SRGM, options=_RATIO),
    _m("exp_rr", exposure.exp_rr, "fairness", False, ("groups", "browsing"), "group",
       "a group's entry is undefined when the group or the rest is absent",
       "expRR: abs(1 - 2 share) of mean reciprocal-rank exposure, each group against the rest (0 = parity)",
       "Kuhlman et al., AIES 2021, eq. 6-7",
       value_range=_UNIT, data=_SGM, options=_B),
    # ------------------------------------------------------------------ prefix
    _m("rnd", prefix.rnd, "fairness", False, ("groups",), "list",
       "undefined when the list has no cut-off or its exact normaliser is 0 (one group only)",
       "Normalised discounted difference: protected share of each prefix vs the whole list",
       "Yang & Stoyanovich, SSDBM 2017; Kuhlman et al., AIES 2021, eq. 1", loss="value",
       value_range=_UNIT, option_ranges=_UNNORMALISED, data=_SGM, soft_groups=False, options=_PREFIX),
    _m("rrd", prefix.rrd, "fairness", False, ("groups",), "list",
       "undefined when the list has no cut-off or its exact normaliser is 0",
       "Normalised discounted ratio: protected-to-rest ratio of each prefix vs the whole list",
       "Yang & Stoyanovich, SSDBM 2017; Kuhlman et al., AIES 2021, eq. 2", loss="value",
       value_range=_UNIT, option_ranges=_UNNORMALISED, data=_SGM, soft_groups=False, options=_PREFIX),
    _m("rkl", prefix.rkl, "fairness", False, ("groups",), "list",
       "undefined when the list has no cut-off or its exact normaliser is 0",
       "Normalised discounted KL divergence of prefix group distributions from the whole list",
       "Yang & Stoyanovich, SSDBM 2017; Kuhlman et al., AIES 2021, eq. 3", loss="value",
       value_range=_UNIT, option_ranges=_UNNORMALISED, data=_SGM, options=_PREFIX),
    _m("pref", prefix.pref, "fairness", False, ("groups",), "list",
       "undefined when the list has no cut-off or a target is missing",
       "Prefix fairness PreF_Delta: discounted divergence of prefix group shares from a target",
       "Raj & Ekstrand, SIGIR 2022, eq. 1", loss="value",
       value_range=_UNIT, option_ranges=_UNNORMALISED, data=_SGM, soft_groups={"delta": ("kl",)},
       options={"delta": ("nd", "rd"), **_PREFIX}),
    _m("skew", prefix.skew, "fairness", None, ("groups",), "group",
       "a group's entry is undefined when it is absent from the top k or has no target share",
       "Skew@k: log ratio of a group's share of the top k to its target share (0 = parity)",
       "Geyik et al., KDD 2019; Kuhlman et al., AIES 2021, eq. 4",
       value_range=None, data=_SGM, options={"k": (1, 2, 5)}),
    _m("ndkl", prefix.ndkl, "fairness", False, ("groups",), "list",
       "undefined for a list without a known-group item",
       "Normalised discounted KL divergence of prefix group distributions from a target",
       "Geyik et al., KDD 2019; FairRankTune docs (NDKL)", loss="value",
       value_range=_NONNEG, data=_SGM, options={"k": (1, 3)}),
    _m("fair", prefix.fair, "fairness", None, ("groups",), "list",
       "undefined when the target is missing",
       "FA*IR's binomial test as a metric: mean over prefixes of the binomial CDF of the protected count (1 = fair)",
       "Zehlike et al., CIKM 2017; Raj & Ekstrand, SIGIR 2022, eq. 2",
       value_range=_UNIT, data=_SGM, soft_groups=False, options={"protected": (0,), "target": (0.3,)}),
    # ------------------------------------------------------------------ utility
    _m("ndcg", utility.ndcg, "utility", True, ("relevance",), "list",
       "undefined when the list (or, with ideal_relevance, the judged items) has no relevant item (ideal DCG is 0)",
       "Normalised discounted cumulative gain (exponential or linear gain, optional cut-off k)",
       "Jarvelin & Kekalainen, TOIS 2002; trec_eval ndcg / ndcg_cut (Voorhees & Harman, TREC, 2005)",
       loss="one_minus", value_range=_UNIT, data=_SRMI, expectation=True, options={"k": _K, "gain": ("linear",)}),
    _m("dcg", utility.dcg, "utility", True, ("relevance",), "list",
       "defined for every list with a real item",
       "Discounted cumulative gain (unnormalised)",
       "Jarvelin & Kekalainen, TOIS 2002",
       value_range=_NONNEG, data=_SRM, expectation=True, options={"k": _K, "gain": ("linear",)}),
    _m("precision", utility.precision, "utility", True, ("relevance",), "list",
       "defined for every list with a real item",
       "Precision at k: share of relevant items among the top k",
       "Manning et al., Introduction to IR, 2008", loss="one_minus",
       value_range=_UNIT, data=_SRM, expectation=True,
       options={"k": _K, "threshold": (0.5,), "adaptive_k": (True,)}),
    _m("recall", utility.recall, "utility", True, ("relevance",), "list",
       "undefined when the list (or, with ideal_relevance, the judged items) has no relevant item",
       "Recall at k: share of the relevant (judged) items that are in the top k",
       "Manning et al., Introduction to IR, 2008; trec_eval recall_k (Voorhees & Harman, TREC, 2005)",
       loss="one_minus", value_range=_UNIT, data=_SRMI, expectation=True, options={"k": _K, "threshold": (0.5,)}),
    _m("mrr", utility.mrr, "utility", True, ("relevance",), "list",
       "undefined when the list (or, with ideal_relevance, the judged items) has no relevant item",
       "Reciprocal rank of the first relevant item (expected over a stochastic ordering)",
       "Voorhees, TREC-8 QA track, 1999; trec_eval recip_rank", loss="one_minus",
       value_range=_UNIT, data=_SRMI, expectation=True, options={"k": _K, "threshold": (0.5,)}),
    _m("average_precision", utility.average_precision, "utility", True, ("relevance",), "list",
       "undefined when the list (or, with ideal_relevance, the judged items) has no relevant item",
       "Average precision: mean precision at the ranks of the relevant (judged) items; its mean is MAP",
       "Manning et al., Introduction to IR, 2008, ch. 8.4; trec_eval map (Voorhees & Harman, TREC, 2005)",
       loss="one_minus", value_range=_UNIT, data=_SRMI, expectation=True,
       options={"k": _K, "threshold": (0.5,)}),
    _m("r_precision", utility.r_precision, "utility", True, ("relevance",), "list",
       "undefined when the list (or, with ideal_relevance, the judged items) has no relevant item",
       "R-precision: precision at R, the number of relevant (judged) items",
       "Manning et al., Introduction to IR, 2008, ch. 8.4; trec_eval Rprec (Voorhees & Harman, TREC, 2005)",
       value_range=_UNIT, data=_SRMI, expectation=True, options={"threshold": (0.5,)}),
    _m("rbp", utility.rbp, "utility", True, ("relevance",), "list",
       "defined for every list with a real item",
       "Rank-biased precision with persistence p",
       "Moffat & Zobel, TOIS 2008", loss="one_minus",
       value_range=(0.0, MAX_RELEVANCE), data=_SRM, expectation=True, options={"p": (0.5,)}),
    _m("err", utility.err, "utility", True, ("relevance",), "list",
       "defined for every list with a real item",
       "Expected reciprocal rank under the cascade model",
       "Chapelle et al., CIKM 2009", loss="one_minus",
       value_range=_UNIT, data=_SRM, expectation=True, options={"max_grade": (10.0, 1000.0), "k": _K}),
    # ------------------------------------------------------------------ calibration
    _m("mpc", calibration.matched_pair_calibration, "fairness", None, ("relevance", "groups", "browsing"), "record",
       "undefined for a list without a matched pair",
       "Matched pair calibration: mean outcome gap over matched cross-group pairs of equal score",
       "Korevaar et al., arXiv 2023, definitions 1-3", defaults={"ci": "none"}, ignore_global=("k",),
       field_ranges={"estimate": (-MAX_RELEVANCE, MAX_RELEVANCE), "per_query": (-MAX_RELEVANCE, MAX_RELEVANCE),
                     "std_error": _NONNEG},
       data=_SRGM, soft_groups=False,
       options={"adjacent": (True,), "ci": ("query", "bootstrap", "none"), "browsing": ("rbp:0.8",),
                "group": (0,)}),
    # ------------------------------------------------------------------ baselines' disparities
    _m("top1_exposure_gap", disparity.top1_exposure_gap, "fairness", None, ("groups",), "list",
       "undefined when the protected group or the rest is absent",
       "DELTR's exposure gap: mean top-1 probability of the rest minus that of the protected group",
       "Zehlike & Castillo, WWW 2020, eq. 6", loss="squared_hinge",
       value_range=_SIGNED_UNIT, data=_SGM, options={"protected": (0,)}),
    _m("disparate_exposure", disparity.disparate_exposure, "fairness", None, ("relevance", "groups", "browsing"),
       "list", "undefined when a side is absent or has zero merit",
       "Fair-PG-Rank disparity: exposure per unit of merit of the rest minus that of the protected group",
       "Singh & Joachims, NeurIPS 2019, §4.1", loss="hinge",
       value_range=None, data=_SRGM, options={"protected": (0,), **_B}),
]

#: name -> :class:`Measure`, every measure of :mod:`torchfair.metrics` that gives one value (or one record) per list
MEASURES: Dict[str, Measure] = {m.name: m for m in _DECLARED}


def get_declaration(name: str) -> Measure:
    """The :class:`Measure` declared as ``name``; ``ValueError`` naming the known ones otherwise.

    Example::

        >>> get_declaration("ndcg").higher_is_better, get_declaration("dips").output
        (True, 'pair')
    """
    try:
        return MEASURES[name]
    except (KeyError, TypeError):
        from .._validation import did_you_mean
        raise ValueError(f"`measure` must be one of {', '.join(sorted(MEASURES))}; got {name!r}"
                         f"{did_you_mean(name, MEASURES)}") from None
