"""A registry of named measures, so that metrics, tables and the CLI can ask for a measure by name.

It sits in :mod:`torchfair.metrics`, below :mod:`torchfair.evaluation` (whose tables, files and the CLI read it),
beside the Metric classes (:mod:`torchfair.metrics.classes`) that run it; :mod:`torchfair.evaluation` exports its
API (:func:`~torchfair.evaluation.register`, :func:`~torchfair.evaluation.get_measure`, ...) and
:mod:`torchfair.evaluation.registry` re-exports its public names.

Every entry maps a name to a :class:`MeasureSpec` whose :meth:`~MeasureSpec.compute` runs the functional measure on a
padded batch and returns **named per-list scalar columns**::

    {"dips_AB": (value [B], valid [B]), "dips_BA": (...), "dips_gap": (...)}

Column names
------------
* scalar measures (``[B]``): the measure's label, e.g. ``"kendall_tau"`` or ``"ndcg@10"``;
* per-group vectors (``[B, G]``): ``label_A``, ``label_B``, ... (group id g is letter ``chr(65 + g)``; more than
  26 groups use ``label_g0``, ``label_g1``, ...);
* group-by-group matrices (``[B, G, G]``): the off-diagonal entries ``label_AB`` (= ``M[..., 0, 1]``), ``label_BA``,
  ... and the antisymmetric gaps ``M[g, h] - M[h, g]`` for ``g < h``: ``label_gap`` for two groups,
  ``label_gap_AB``, ``label_gap_AC``, ... for more (with more than 26 groups ``label_g0_g1``, ``label_gap_g0_g1``);
* NamedTuple results: one block of columns per tensor field, named ``label_field...``.

A column is valid for a list where the underlying entry is (the measure's ``return_valid`` mask; for a gap, both
entries).  Invalid values are 0.

Adding a measure
----------------
Every measure of :mod:`torchfair.metrics` is registered from its declaration (:data:`torchfair.metrics.MEASURES`:
kind, direction, needs, validity, description).  A measure of your own is one line::

    register("my_measure", my_fn, description="...", higher_is_better=False)

The adapter inspects the function's signature and passes ``relevance``, ``groups``, ``mask``, ``num_groups``,
``return_valid`` and options only where the function has such a parameter, so any function following the
library conventions plugs in.  ``columns=`` overrides the column builder (a callable
``(label, result, num_groups) -> dict``).

Options
-------
Per-measure options (``browsing``, ``tie_weight``, ``k``, ``ordering``, ...) are given per request
(:func:`parse_request` understands ``"ndcg@10"`` and ``"dips:browsing=uniform,tie_weight=0"``, and trec_eval's
names ``"ndcg_cut_10"``, ``"P_10"``, ``"recall_100"``, ``"map"``, ``"recip_rank"``, ``"Rprec"``) or as global
options that are passed only to the measures that accept them.  ``ideal_relevance`` (the grades of every judged
item of each list's query) is data, not an option: :func:`compute_columns` passes it to the measures that take it.  ``browsing`` strings may carry a parameter:
``"rbp:0.8"``, ``"geometric:0.3"``, ``"cascade:0.9"``, ``"topk:10"`` (uniform cut at 10), the one spec language
of :func:`torchfair.browsing.get_browsing`.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import browsing as _browsing
from ..orderings import Hard, OrderedBatch
from .declarations import MEASURES, Measure

__all__ = ["MeasureSpec", "MeasureRequest", "normalise_options", "register", "register_declared", "unregister",
           "get_measure",
           "available_measures",
           "parse_request", "parse_browsing", "group_label", "compute_columns", "Columns"]

#: column name -> (value [B], valid [B])
Columns = Dict[str, Tuple[Tensor, Tensor]]

_REGISTRY: Dict[str, "MeasureSpec"] = {}


# --------------------------------------------------------------------------------------------- naming helpers
def group_label(g: int, num_groups: int) -> str:
    """``"A"``, ``"B"``, ... for at most 26 groups, else ``"g0"``, ``"g1"``, ..."""
    return chr(65 + g) if num_groups <= 26 else f"g{g}"


def _pair_label(g: int, h: int, G: int) -> str:
    return f"{group_label(g, G)}{group_label(h, G)}" if G <= 26 else f"{group_label(g, G)}_{group_label(h, G)}"


def _expand(label: str, value: Tensor, valid: Tensor, num_groups: Optional[int], *, diagonal: bool = False,
            gap: bool = True) -> Columns:
    """Turn ``value [B, *rest]`` (validity of the same shape) into scalar columns (see module doc)."""
    if valid.shape != value.shape:
        valid = valid.expand_as(value) if valid.dim() <= value.dim() else valid
    rest = tuple(value.shape[1:])
    out: Columns = {}
    if rest == ():
        out[label] = (value, valid)
    elif len(rest) == 1:
        n = rest[0]
        for g in range(n):
            out[f"{label}_{group_label(g, n)}"] = (value[:, g], valid[:, g])
    elif len(rest) == 2 and rest[0] == rest[1]:
        G = rest[0]
        for g in range(G):
            for h in range(G):
                if g != h or diagonal:
                    out[f"{label}_{_pair_label(g, h, G)}"] = (value[:, g, h], valid[:, g, h])
        if gap:
            for g in range(G):
                for h in range(g + 1, G):
                    name = f"{label}_gap" if G == 2 else f"{label}_gap_{_pair_label(g, h, G)}"
                    v = valid[:, g, h] & valid[:, h, g]
                    d = value[:, g, h] - value[:, h, g]
                    out[name] = (torch.where(v, d, torch.zeros_like(d)), v)
    else:
        flat = value.reshape(value.shape[0], -1)
        fv = valid.reshape(valid.shape[0], -1)
        for i in range(flat.shape[1]):
            out[f"{label}_{i}"] = (flat[:, i], fv[:, i])
    return out


def _split_result(result: Any) -> Tuple[Any, Optional[Tensor]]:
    """``(value, valid)`` from what a measure returned (``return_valid=True`` pair, NamedTuple or Tensor)."""
    if isinstance(result, tuple) and not hasattr(result, "_fields") and len(result) == 2 \
            and isinstance(result[1], Tensor) and result[1].dtype == torch.bool:
        return result[0], result[1]
    return result, None


def _fit_valid(valid: Optional[Tensor], value: Tensor) -> Tensor:
    """A validity mask for ``value``: same shape, or a prefix shape broadcast over trailing dims."""
    if valid is None:
        return torch.isfinite(value)
    if valid.shape == value.shape:
        return valid
    if value.shape[:valid.dim()] == valid.shape:
        return valid.reshape(tuple(valid.shape) + (1,) * (value.dim() - valid.dim())).expand_as(value)
    if valid.shape[:value.dim()] == value.shape:
        return valid.reshape(tuple(value.shape) + (-1,)).all(-1)
    return torch.isfinite(value)


def default_columns(label: str, result: Any, num_groups: Optional[int], **expand_kw) -> Columns:
    """The generic, shape-driven column builder (see module doc)."""
    value, valid = _split_result(result)
    if hasattr(value, "_fields"):  # NamedTuple
        fields = value._asdict()
        nt_valid = fields.get("valid") if isinstance(fields.get("valid"), Tensor) else valid
        out: Columns = {}
        for name, v in fields.items():
            if name == "valid" or not isinstance(v, Tensor) or v.dtype == torch.bool:
                continue
            vv, inner_valid = _split_result(v)
            out.update(_expand(f"{label}_{name}", vv, _fit_valid(inner_valid if inner_valid is not None else nt_valid,
                                                                     vv), num_groups, **expand_kw))
        return out
    if not isinstance(value, Tensor):
        raise TypeError(f"measure {label!r} returned {type(value).__name__}; expected a Tensor or NamedTuple")
    return _expand(label, value, _fit_valid(valid, value), num_groups, **expand_kw)


# --------------------------------------------------------------------------------------------- options
def parse_browsing(spec: Union[str, "_browsing.BrowsingModel", None]):
    """``None`` stays ``None``; anything else goes through :func:`torchfair.browsing.get_browsing` (the one spec
    language: ``"rbp:0.8"``, ``"topk:10:rbp:0.8"``, ...)."""
    return None if spec is None else _browsing.get_browsing(spec)


def _parse_value(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def normalise_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """Options as the measures take them: ``browsing`` strings parsed (:func:`parse_browsing`), ``ordering="first"``
    / ``"average"`` or ``ties=...`` turned into :class:`~torchfair.orderings.Hard`."""
    out = dict(options)
    if isinstance(out.get("browsing"), str):
        out["browsing"] = parse_browsing(out["browsing"])
    if isinstance(out.get("ordering"), str):  # "first" / "average" ties of the hard ordering
        out["ordering"] = Hard(out["ordering"])
    if "ties" in out and "ordering" not in out:
        out["ordering"] = Hard(out.pop("ties"))
    return out


@dataclass
class MeasureRequest:
    """A measure asked for by name, with its options and the label prefixing its columns."""

    name: str
    options: Dict[str, Any] = field(default_factory=dict)
    label: Optional[str] = None

    def __post_init__(self):
        if self.label is None:
            self.label = self.name + (f"@{self.options['k']}" if "k" in self.options else "")


#: trec_eval's measure names (its ``-m`` output names) -> (measure, per-request options); ``_K`` names take a cut-off
_TREC_CUT = {"ndcg_cut": ("ndcg", {"gain": "linear"}), "P": ("precision", {}), "recall": ("recall", {}),
             "map_cut": ("average_precision", {})}
_TREC_PLAIN = {"recip_rank": ("mrr", {}), "map": ("average_precision", {}), "Rprec": ("r_precision", {})}
_TREC_RE = re.compile(r"^(ndcg_cut|P|recall|map_cut)_(\d+)$")


def _trec_request(name: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """``(measure, options)`` of a trec_eval measure name that is not a registered name, else ``None``."""
    if name in _REGISTRY:
        return None
    if name in _TREC_PLAIN:
        m, o = _TREC_PLAIN[name]
        return m, dict(o)
    hit = _TREC_RE.match(name)
    if hit is None:
        return None
    m, o = _TREC_CUT[hit.group(1)]
    k = int(hit.group(2))
    if k < 1:
        raise ValueError(f"the cut-off of trec_eval measure {name!r} must be >= 1")
    return m, {**o, "k": k}


def parse_request(req: Union[str, Tuple[str, Mapping[str, Any]], MeasureRequest]) -> MeasureRequest:
    """``"ndcg@10"`` -> ``ndcg`` with ``k=10``; ``"dips:browsing=uniform,tie_weight=0"`` -> options;
    ``"dips:tie_weight=0,label=dips0"`` names the columns ``dips0_*`` (needed to ask twice for one measure);
    ``("dips", {"tie_weight": 0})`` and :class:`MeasureRequest` are accepted as they are.

    trec_eval's measure names (Voorhees & Harman, TREC, 2005) are accepted where they are not registered names,
    labelled as trec_eval prints them: ``ndcg_cut_K`` (``ndcg`` with ``k=K``, ``gain="linear"``), ``P_K``
    (``precision@K``), ``recall_K``, ``map`` and ``map_cut_K`` (``average_precision``), ``recip_rank`` (``mrr``),
    ``Rprec`` (``r_precision``); options after ``:`` still apply (``"P_10:threshold=1"``).  ``ndcg`` is
    torchfair's own name: it is trec_eval's ``ndcg`` under ``gain="linear"`` (:data:`~torchfair.evaluation.TREC_EVAL`).
    They give trec_eval's values on lists carrying ``ideal_relevance`` (:func:`~torchfair.evaluation.read_trec`)
    with ``undefined="zero"``: see :data:`~torchfair.evaluation.TREC_EVAL`.

    Example::

        >>> parse_request("ndcg_cut_10")
        MeasureRequest(name='ndcg', options={'gain': 'linear', 'k': 10}, label='ndcg_cut_10')
    """
    if isinstance(req, MeasureRequest):
        return req
    if isinstance(req, tuple):
        name, opts = req
        return MeasureRequest(name, dict(opts))
    if not isinstance(req, str):
        raise ValueError(f"a measure must be a name, (name, options) or MeasureRequest; got {req!r}")
    s = req.strip()
    opts: Dict[str, Any] = {}
    label = None
    if ":" in s:
        s, rest = s.split(":", 1)
        for item in filter(None, (x.strip() for x in rest.split(","))):
            if "=" not in item:
                raise ValueError(f"cannot parse option {item!r} of measure {req!r}: use key=value")
            k, v = item.split("=", 1)
            k = k.strip()
            if k == "label":
                label = v.strip()
            else:
                opts[k] = _parse_value(v)
    if "@" in s:
        s, k = s.split("@", 1)
        try:
            opts["k"] = int(k)
        except ValueError:
            raise ValueError(f"cannot parse the cut-off {k.strip()!r} of measure {req!r}: use name@k, e.g. "
                             f"ndcg@10") from None
    trec = _trec_request(s.strip())
    if trec is not None:
        if "k" in opts and "k" in trec[1]:
            raise ValueError(f"measure {req!r}: the trec_eval name {s.strip()!r} already holds a cut-off")
        auto = s.strip() + (f"@{opts['k']}" if "k" in opts else "")
        return MeasureRequest(trec[0], {**trec[1], **opts}, label=label or auto)
    r = MeasureRequest(s.strip(), opts)
    if label is not None:
        r.label = label
    return r


# --------------------------------------------------------------------------------------------- specs
@dataclass
class MeasureSpec:
    """A registered measure: the functional ``fn``, how to turn its output into columns, and its declaration."""

    name: str
    fn: Callable[..., Any]
    defaults: Dict[str, Any] = field(default_factory=dict)
    columns: Optional[Callable[..., Columns]] = None
    diagonal: bool = False
    description: str = ""
    #: global options (:func:`compute_columns`, CLI flags) never passed to this measure, e.g. ``k`` for MPC,
    #: whose ``k`` is a number of pairs, not a cut-off (a per-request option still is)
    ignore_global: Tuple[str, ...] = ()
    #: ``True`` / ``False`` / ``None`` (signed: parity is best), for torchmetrics and report tables
    higher_is_better: Optional[bool] = None
    #: the library's declaration (:class:`torchfair.metrics.Measure`), ``None`` for a user's measure
    declaration: Optional[Measure] = None

    def __post_init__(self):
        try:
            params = inspect.signature(self.fn).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins
            params = {}
        self._params = dict(params)  # a plain dict (not a mappingproxy): specs, metrics and modules pickle (ddp_spawn)
        self._var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
        if not self.description:
            doc = inspect.getdoc(self.fn) or ""
            self.description = " ".join(doc.split("\n\n")[0].split())

    @property
    def kind(self) -> Optional[str]:
        """``"fairness"`` or ``"utility"`` (from the declaration; ``None`` for a user's measure)."""
        return None if self.declaration is None else self.declaration.kind

    def accepts(self, option: str) -> bool:
        return option in self._params or self._var_kw

    def _needs(self, what: str) -> bool:
        if self.declaration is not None:
            return what in self.declaration.needs
        p = self._params.get(what)
        return p is not None and p.default is inspect.Parameter.empty

    @property
    def needs_relevance(self) -> bool:
        return self._needs("relevance")

    @property
    def needs_groups(self) -> bool:
        return self._needs("groups")

    @property
    def uses_groups(self) -> bool:
        return "groups" in self._params

    def options_for(self, options: Mapping[str, Any], strict: bool = False) -> Dict[str, Any]:
        """The subset of ``options`` this measure accepts (all of them, or an error, when ``strict``)."""
        out = {}
        for k, v in options.items():
            if self.accepts(k):
                out[k] = v
            elif strict:
                raise ValueError(f"measure {self.name!r} has no option {k!r}; it accepts "
                                 f"{sorted(p for p in self._params if p not in _DATA_ARGS)}")
        return out

    def __call__(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                 mask: Optional[Tensor] = None, *, label: Optional[str] = None, **options) -> Columns:
        return self.compute(scores, relevance, groups, mask, label=label, **options)

    @property
    def accepts_ideal(self) -> bool:
        """Whether the measure takes ``ideal_relevance`` (the grades of every judged item of the query)."""
        return "ideal_relevance" in self._params

    def compute(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                mask: Optional[Tensor] = None, *, label: Optional[str] = None, num_groups: Optional[int] = None,
                ideal_relevance: Optional[Tensor] = None, **options) -> Columns:
        """Run the measure on a padded batch ``[B, N]`` and return its columns (``{name: (value [B], valid [B])}``).

        ``options`` are the measure's keyword arguments (``browsing``, ``tie_weight``, ``k``...); an option
        the function does not accept raises ``ValueError``.  ``ideal_relevance`` (``[B, M]``, padded with 0: the
        grades of every judged item of each list's query) reaches the measures that take it
        (:attr:`accepts_ideal`: NDCG, recall, MRR, AP, R-precision) and is ignored by the others.
        """
        label = label or self.name
        opts = {**self.defaults, **normalise_options(options)}
        kw = self.options_for(opts, strict=True)
        if scores.dim() == 1:
            scores = scores.unsqueeze(0)
            relevance = None if relevance is None else relevance.unsqueeze(0)
            if groups is not None and ((not groups.is_floating_point() and groups.dim() == 1)
                                       or (groups.is_floating_point() and groups.dim() == 2)):
                groups = groups.unsqueeze(0)
            mask = None if mask is None else mask.unsqueeze(0)
            ideal_relevance = None if ideal_relevance is None else ideal_relevance.unsqueeze(0)
        if ideal_relevance is not None and self.accepts_ideal:
            kw["ideal_relevance"] = ideal_relevance
        if "relevance" in self._params:
            if relevance is None and self.needs_relevance:
                raise ValueError(f"measure {self.name!r} needs relevance")
            kw["relevance"] = relevance
        if "groups" in self._params:
            if groups is None and self.needs_groups:
                raise ValueError(f"measure {self.name!r} needs group labels")
            kw["groups"] = groups
            if num_groups is not None and "num_groups" in self._params and not (
                    groups is not None and groups.is_floating_point()):
                kw["num_groups"] = num_groups
        if "mask" in self._params:
            kw["mask"] = mask
        if "return_valid" in self._params:
            kw["return_valid"] = True
        if "reduction" in self._params:
            kw["reduction"] = "none"
        result = self.fn(scores, **kw)
        if self.columns is not None:
            cols = self.columns(label, result, num_groups)
        else:
            cols = default_columns(label, result, num_groups, diagonal=self.diagonal)
        B = scores.shape[0]
        for k, (v, ok) in cols.items():
            if tuple(v.shape) != (B,) or tuple(ok.shape) != (B,):
                raise ValueError(f"measure {self.name!r} column {k!r} has shape {tuple(v.shape)}, not one value per "
                                 f"list ({B},): a batch-level quantity cannot be a per-list column (check its "
                                 f"options, e.g. iaa needs amortize=False)")
        return cols

    def column_names(self, num_groups: Optional[int] = None, label: Optional[str] = None, **options) -> List[str]:
        """The column names for ``num_groups`` groups, found by running the measure on a small synthetic list."""
        G = num_groups if num_groups is not None else 2
        n = max(2 * G, 4)
        scores = torch.arange(n, 0, -1, dtype=torch.float32).unsqueeze(0)
        relevance = torch.tensor([float(i % 3) for i in range(n)]).unsqueeze(0)
        groups = (torch.arange(n) % G).unsqueeze(0)
        if self.accepts("validate_args"):  # the synthetic values are not the user's (e.g. grades above max_grade)
            options = {**options, "validate_args": False}
        cols = self.compute(scores, relevance, groups if self.uses_groups else None, None, label=label,
                            num_groups=G if self.uses_groups else None, **options)
        return list(cols)


_DATA_ARGS = {"scores", "relevance", "groups", "mask", "num_groups", "return_valid", "reduction", "validate_args",
              "ideal_relevance"}


def register(name: str, fn: Callable[..., Any], *, defaults: Optional[Mapping[str, Any]] = None,
             columns: Optional[Callable[..., Columns]] = None, diagonal: bool = False, overwrite: bool = True,
             description: str = "", ignore_global: Sequence[str] = (), higher_is_better: Optional[bool] = None,
             declaration: Optional[Measure] = None) -> MeasureSpec:
    """Register ``fn`` under ``name`` (see the module doc). Returns the spec."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string; got {name!r}")
    if not callable(fn):
        raise ValueError(f"`fn` must be a callable measure; got {fn!r}")
    if not overwrite and name in _REGISTRY:
        raise ValueError(f"`name`: measure {name!r} is already registered")
    spec = MeasureSpec(name, fn, defaults=dict(defaults or {}), columns=columns, diagonal=diagonal,
                       description=description, ignore_global=tuple(ignore_global),
                       higher_is_better=higher_is_better, declaration=declaration)
    _REGISTRY[name] = spec
    return spec


def register_declared(m: Measure, *, columns: Optional[Callable[..., Columns]] = None, diagonal: bool = False,
                      overwrite: bool = True) -> MeasureSpec:
    """Register a declared measure: name, function, description, direction and options from its declaration."""
    return register(m.name, m.fn, defaults=m.defaults, description=m.description, ignore_global=m.ignore_global,
                    higher_is_better=m.higher_is_better, declaration=m, columns=columns, diagonal=diagonal,
                    overwrite=overwrite)


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (a no-op for an unknown name)."""
    _REGISTRY.pop(name, None)


def available_measures() -> List[str]:
    """Names of the registered measures (sorted)."""
    return sorted(_REGISTRY)


def get_measure(name: str) -> MeasureSpec:
    """The registered measure ``name``; ``ValueError`` listing the available ones otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        from .._validation import did_you_mean

        raise ValueError(f"unknown measure {name!r}{did_you_mean(name, _REGISTRY)}; available: "
                         f"{', '.join(sorted(_REGISTRY))}") from None


def compute_columns(scores: Tensor, relevance: Optional[Tensor], groups: Optional[Tensor], mask: Optional[Tensor],
                    measures: Sequence[Union[str, MeasureRequest, Tuple[str, Mapping[str, Any]]]], *,
                    num_groups: Optional[int] = None, ideal_relevance: Optional[Tensor] = None,
                    **global_options) -> Columns:
    """All columns of several measures on one padded batch. ``global_options`` go to the measures accepting them;
    per-request options win.  ``ideal_relevance`` ``[B, M]`` (the grades of every judged item of each list's
    query, padded with 0) goes to the measures that take it (:attr:`MeasureSpec.accepts_ideal`)."""
    out: Columns = {}
    global_options = normalise_options(global_options)
    shared: Dict[Tuple[str, str], OrderedBatch] = {}
    for req in measures:
        r = parse_request(req)
        spec = get_measure(r.name)
        glob = {k: v for k, v in global_options.items() if k not in spec.ignore_global}
        opts = _shared_hard({**spec.options_for(glob), **r.options}, spec, scores, mask, shared)
        cols = spec.compute(scores, relevance, groups if spec.uses_groups else None, mask, label=r.label,
                            num_groups=num_groups if spec.uses_groups else None,
                            ideal_relevance=ideal_relevance if spec.accepts_ideal else None, **opts)
        for k in cols:
            if k in out:
                raise ValueError(f"column {k!r} produced twice; give the requests distinct labels")
        out.update(cols)
    return out


def _shared_hard(opts: Dict[str, Any], spec: "MeasureSpec", scores: Tensor, mask: Optional[Tensor],
                 shared: Dict[Tuple[str, str], OrderedBatch]) -> Dict[str, Any]:
    """``opts`` with the exact ordering (``Hard``, the default) replaced by one :class:`HardOrderedBatch` of the
    batch per ``(ties, backend)``, computed once and shared by every measure of :func:`compute_columns` (the sort
    of a full-catalogue list costs as much as most measures' own work)."""
    if not spec.accepts("ordering") or mask is None or scores.dim() != 2 or scores.requires_grad \
            or tuple(mask.shape) != tuple(scores.shape):
        return opts
    norm = normalise_options({**spec.defaults, **opts})
    o = Hard() if norm.get("ordering") is None else norm["ordering"]
    if type(o) is not Hard:
        return opts
    key = (o.ties, o.backend)
    if key not in shared:
        shared[key] = o(scores, mask)
    return {**normalise_options(opts), "ordering": shared[key]}


# --------------------------------------------------------------------------------------------- built-in entries
def _rank_parity_columns(label: str, result: Any, num_groups: Optional[int]) -> Columns:
    """``rank_parity``: ``label_A`` = per-group share of mixed pairs won (ARP), ``label_pair_A`` = Kuhlman's pair."""
    out = _expand(label, result.per_group, result.valid, num_groups)
    out.update(_expand(f"{label}_pair", result.pair, result.valid, num_groups))
    return out


def _pairwise_accuracy_columns(label: str, result: Any, num_groups: Optional[int]) -> Columns:
    """All ``A[g, h]`` entries plus, for two groups, InterAcc = A_AB - A_BA and IntraAcc = A_AA - A_BB."""
    value, valid = result
    out = _expand(label, value, valid, num_groups, diagonal=True, gap=False)
    if value.shape[-1] == 2:
        v = valid[:, 0, 1] & valid[:, 1, 0]
        d = value[:, 0, 1] - value[:, 1, 0]
        out[f"{label}_inter"] = (torch.where(v, d, torch.zeros_like(d)), v)
        v = valid[:, 0, 0] & valid[:, 1, 1]
        d = value[:, 0, 0] - value[:, 1, 1]
        out[f"{label}_intra"] = (torch.where(v, d, torch.zeros_like(d)), v)
    return out


def _misallocation_columns(label: str, result: Any, num_groups: Optional[int]) -> Columns:
    """``delta_g`` per group plus ``label_l1`` = ``||delta||_1`` (Fabris et al., WSDM 2023, §5), valid where every
    group's entry is."""
    out = default_columns(label, result, num_groups)
    value, valid = _split_result(result)
    valid = _fit_valid(valid, value)
    v = valid.all(-1)
    l1 = torch.where(valid, value.abs(), torch.zeros_like(value)).sum(-1)
    out[f"{label}_l1"] = (torch.where(v, l1, torch.zeros_like(l1)), v)
    return out


#: column builders of the measures whose result is not a plain value (the rest are shape driven)
_COLUMNS = {
    "exposure_misallocation": _misallocation_columns,
    "pairwise_accuracy": _pairwise_accuracy_columns,
    "rank_parity": _rank_parity_columns,
    "mpc": lambda label, res, G: {label: (res.per_query, res.per_query_valid)},
}

for _m in MEASURES.values():
    register_declared(_m, columns=_COLUMNS.get(_m.name))
