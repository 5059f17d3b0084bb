"""The shared testers of ``tests/test_contract.py``: :class:`ContractTester` (every check of the robustness contract
on one row of ``tests/contract_cases.py``) and :class:`MeasureTester` (what every declared measure of
:data:`torchfair.metrics.MEASURES` must satisfy, in the spirit of torchmetrics' ``MetricTester``, over the option
values its declaration says are worth testing).

:class:`MeasureTester` checks, on a small deterministic corpus (several batches of lists of different lengths, two
groups, graded relevance, padded slots holding NaN scores and garbage relevance / group ids):

* ``functional`` (:meth:`~MeasureTester.run_functional`): valid values lie in the declared range, invalid ones are
  0, and ``reduction="mean"`` / ``"sum"`` are the mean / sum of the per-list values over the valid lists (entry
  by entry);
* ``metric_class`` (:meth:`~MeasureTester.run_class`): the metric class, updated batch by batch, computes the mean
  over valid lists of the functional's per-list values (the columns of :mod:`torchfair.metrics.registry`,
  rebuilt here from the documented naming);
* ``batch_vs_lists`` (:meth:`~MeasureTester.run_batch_vs_lists`): a padded batch gives, list by list, what each
  list gives alone (``[N]`` input of its real items, no mask), hard and soft membership, exact and relaxed
  ordering;
* ``padding`` (:meth:`~MeasureTester.run_padding`): extra padded slots (first and last, garbage in every input)
  change nothing, integer ids and soft membership;
* ``dtypes`` (:meth:`~MeasureTester.run_dtypes`): fp16 / bf16 / fp32 inputs give float32 results, fp64 float64,
  all equal to the fp64 values up to the float32 rounding, integer ids and soft membership.

Each is a check of :class:`ContractTester` on the row of the measure, so one pytest item
(``tests/test_contract.py::test_check[metrics.ndcg-dtypes]``); a failure names the check, the options and the
entry.  The declaration against the function's signature is checked in ``tests/metrics/test_declarations.py``.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from torchfair import metrics as tm
from torchfair.metrics.declarations import MEASURES, Measure, RelevanceBound
from torchfair.orderings import SoftRank

#: options a measure cannot run without (MPC needs one pair-selection threshold)
REQUIRED: Dict[str, Dict[str, Any]] = {"mpc": {"eps": 0.5}}
F64 = torch.float64
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@functools.lru_cache(maxsize=None)
def corpus(soft: bool = False) -> Tuple[Tuple[Tensor, Tensor, Tensor, Tensor], ...]:
    """Three float64 batches ``(scores, relevance, groups, mask)`` of 3, 1 and 2 lists (padded widths 6, 6, 5).
    Scores are distinct quarters (exact in every float dtype), every list holds a grade-2 item (ERR's default
    ``max_grade`` is then the same for a list, a batch and the corpus), one list has a single group and one an
    unknown (-1) item; padded slots hold NaN scores, relevance 7 and group id 5 (soft: NaN rows)."""
    lists = [  # (scores, relevance, group ids) of the real items
        ([1.5, 0.25, 2.0, 0.75, 1.0], [2, 0, 1, 1, 0], [0, 1, 1, 0, 1]),
        ([0.5, 1.25, 0.0, 2.25], [0, 2, 1, 0], [1, 1, 0, 0]),
        ([0.75, 0.5, 1.75], [1, 2, 0], [0, 0, 0]),
        ([2.5, 1.0, 0.25, 1.5, 0.5, 2.0], [1, 0, 2, 2, 0, 1], [1, 0, -1, 0, 1, 0]),
        ([1.25, 0.75], [2, 1], [0, 1]),
        ([0.25, 1.0, 2.75, 1.75], [0, 2, 1, 1], [1, 0, 1, 0]),
    ]
    batches = []
    for idx, width, holes in (((0, 1, 2), 6, {0: (1,)}), ((3,), 6, {}), ((4, 5), 5, {0: (0, 2)})):
        B = len(idx)
        s = torch.full((B, width), float("nan"), dtype=F64)
        r = torch.full((B, width), 7.0, dtype=F64)
        g = torch.full((B, width), 5)
        m = torch.zeros(B, width, dtype=torch.bool)
        for b, i in enumerate(idx):
            slots = [j for j in range(width) if j not in holes.get(b, ())][:len(lists[i][0])]
            for j, (sv, rv, gv) in zip(slots, zip(*lists[i])):
                s[b, j], r[b, j], g[b, j], m[b, j] = sv, rv, gv, True
        batches.append((s, r, _soft(g, m) if soft else g, m))
    return tuple(batches)  # shared: never modified in place


def _soft(g: Tensor, m: Tensor) -> Tensor:
    """Soft membership of ids: 3/4 on the item's group, 1/4 on the other (unknown: 1/4 each), NaN when padded."""
    known = (g >= 0) & (g < 2)
    one = torch.nn.functional.one_hot(torch.where(known, g, torch.zeros_like(g)), 2).to(F64)
    w = torch.where(known[..., None], 0.25 + 0.5 * one, torch.full_like(one, 0.25))
    return torch.where(m[..., None], w, torch.full_like(w, float("nan")))


class MeasureTester:
    """The checks of one declared measure (see the module docstring)."""

    def __init__(self, m: Measure):
        self.m = m
        self.params = inspect.signature(m.fn).parameters
        self.base = {**m.defaults, **REQUIRED.get(m.name, {})}
        cls = [c for c in (getattr(tm, n) for n in tm.__all__)
               if inspect.isclass(c) and issubclass(c, tm.FairnessMetric) and getattr(c, "measure", None) == m.name]
        self.metric_class = cls[0] if cls else None
        self._memo: Dict[Tuple, Any] = {}

    # ------------------------------------------------------------------------------------------ plumbing
    def option_sets(self) -> Iterator[Dict[str, Any]]:
        """The defaults, then every declared option value alone."""
        yield {}
        for k, values in self.m.options.items():
            for v in values:
                yield {k: v}

    def call(self, s, r, g, mask, opts: Mapping[str, Any], **kw):
        """The functional on ``(s, r, g, mask)`` with the declaration's data and ``opts`` (``return_valid`` when
        it has one; ``num_groups=2`` for integer ids); calls on the corpus are computed once."""
        key = (id(s), id(r), id(g), id(mask), repr(sorted({**opts, **kw}.items())))
        shared = any(s is b[0] for soft in (False, True) for b in corpus(soft))
        if shared and key in self._memo:
            return self._memo[key]
        out = self._call(s, r, g, mask, opts, **kw)
        if shared:
            self._memo[key] = out
        return out

    def _call(self, s, r, g, mask, opts: Mapping[str, Any], **kw):
        data = {"scores": s, "relevance": r, "groups": g, "mask": mask}
        # optional data the corpus does not hold (``ideal_relevance``) keep their default
        args = {k: data[k] for k in self.m.data if k != "scores" and data.get(k) is not None}
        if "num_groups" in self.params and g is not None and not g.is_floating_point():
            args["num_groups"] = 2
        if "return_valid" in self.params:
            args["return_valid"] = True
        return self.m.fn(s, **args, **{**self.base, **opts, **kw})

    def entries(self, res, B: Optional[int] = None) -> Dict[str, Tuple[Tensor, Optional[Tensor]]]:
        return pieces(self.m, res, B)

    def range_of(self, name: str, opts, relevance: Tensor, mask: Tensor) -> Tuple[float, float]:
        return declared_range(self.m, name, opts, float(relevance[mask].max()) if mask.any() else 0.0)

    def _applicable(self, opts) -> bool:
        """Whether ``opts`` give one value per list on the corpus (not an error, not a batch-level value)."""
        s, r, g, mask = corpus()[0]
        try:
            per = self.entries(self.call(s, r, g, mask, opts, **self._none()), s.shape[0])
        except ValueError:
            return False
        return bool(per) and all(v.dim() > 0 for v, _ in per.values())

    def _none(self) -> Dict[str, str]:
        return {"reduction": "none"} if "reduction" in self.params else {}

    # ------------------------------------------------------------------------------------------ checks
    def run_functional(self, opts: Mapping[str, Any], reductions: bool = True) -> None:
        """The declared range on the valid entries, zeros on the invalid ones, and (``reductions``) the
        reductions against the per-list values."""
        for s, r, g, mask in corpus():
            per = self.entries(self.call(s, r, g, mask, opts, **self._none()), s.shape[0])
            for name, (v, ok) in per.items():
                ok = torch.ones_like(v, dtype=torch.bool) if ok is None else ok
                lo, hi = self.range_of(name, opts, r, mask)
                vals = v[ok].double()
                tol = 1e-9 * max(1.0, abs(lo) if lo > -float("inf") else 1.0, abs(hi) if hi < float("inf") else 1.0)
                _assert(bool(((vals >= lo - tol) & (vals <= hi + tol)).all()),
                        f"{name}: valid values {vals.tolist()} outside the declared range [{lo}, {hi}]", opts)
                _assert(bool((v[~ok] == 0).all()), f"{name}: invalid entries are not 0: {v[~ok].tolist()}", opts)
            if not reductions or "reduction" not in self.params:
                continue
            for red in ("mean", "sum"):
                got = self.entries(self.call(s, r, g, mask, opts, reduction=red))
                for name, (v, ok) in per.items():
                    if not v.is_floating_point() or ok is None:  # an unknown validity: no reference mean
                        continue
                    total = torch.where(ok, v, torch.zeros_like(v)).sum(0)
                    want = total if red == "sum" else total / ok.sum(0).clamp(min=1)
                    _close(got[name][0], want, f"{name}: reduction={red!r} against the per-list values", opts)

    def run_class(self, opts: Mapping[str, Any]) -> None:
        """The metric class updated batch by batch against the mean of the per-list functional values."""
        if self.metric_class is None:
            return
        metric = self.metric_class(num_groups=2, **{**REQUIRED.get(self.m.name, {}), **opts})
        per: Dict[str, List[Tuple[Tensor, Tensor]]] = {}
        for s, r, g, mask in corpus():
            metric.update(s, r, g, mask)
            for c, vv in _columns(self.m, self.call(s, r, g, mask, opts, **self._none()), opts).items():
                per.setdefault(c, []).append(vv)
        got = metric.compute()
        _assert(sorted(got) == sorted(per), f"class columns {sorted(got)} != functional columns {sorted(per)}", opts)
        for c, parts in per.items():
            v = torch.cat([p[0].double() for p in parts])
            ok = torch.cat([p[1] for p in parts])
            want = torch.where(ok, v, torch.zeros_like(v)).sum() / ok.sum().clamp(min=1)
            _close(got[c], want, f"{self.metric_class.__name__} column {c!r} against the functional", opts)

    def run_batch_vs_lists(self, opts: Mapping[str, Any], variants: bool = True) -> None:
        """Each list of a padded batch against the list alone (``[N]`` real items, no mask), under the exact
        ordering and (``variants``) a relaxed one, with integer ids and (``variants``, where accepted) soft
        membership."""
        orderings = [{}] + ([{"ordering": SoftRank(0.1)}] if variants and "ordering" in self.params else [])
        softs = [False] + ([True] if variants and "groups" in self.m.data and self.m.accepts_soft(opts) else [])
        for soft in softs:
            for o in orderings:
                for s, r, g, mask in corpus(soft):
                    batch = self.entries(self.call(s, r, g, mask, {**opts, **o}, **self._none()), s.shape[0])
                    for b in range(s.shape[0]):
                        keep = mask[b]
                        one = self.entries(self.call(s[b][keep], r[b][keep], g[b][keep], None, {**opts, **o}))
                        for name, (v, ok) in batch.items():
                            what = f"{name} of list {b} (soft={soft}, {o or 'default ordering'})"
                            _assert(ok is None or bool((ok[b] == one[name][1]).all()), f"{what}: validity in "
                                    f"the batch {ok if ok is None else ok[b].tolist()} != alone "
                                    f"{one[name][1]}", opts)
                            _close(v[b], one[name][0], f"{what}: batch against the list alone", opts)

    def run_padding(self, opts: Mapping[str, Any]) -> None:
        """Two more padded slots (first and last: NaN / 1e4 scores, NaN / garbage relevance, group ids -5 / 17 out
        of range, or garbage soft-membership rows) change nothing, with integer ids and (where accepted) soft
        membership."""
        for soft in self._softs(opts):
            for s, r, g, mask in corpus(soft):
                base = self.entries(self.call(s, r, g, mask, opts, **self._none()), s.shape[0])
                B = s.shape[0]

                def pad(t, first, last):
                    col = torch.full((B, 1) + tuple(t.shape[2:]), first, dtype=t.dtype)
                    return torch.cat([col, t, torch.full_like(col, last)], 1)

                gp = pad(g, float("nan"), 3.0) if soft else pad(g, -5, 17)
                padded = self.entries(self.call(pad(s, float("nan"), 1e4), pad(r, float("nan"), 3.0), gp,
                                                pad(mask, False, False), opts, **self._none()), B)
                for name, (v, ok) in base.items():
                    what = f"{name} (soft={soft})"
                    _assert(ok is None or bool((ok == padded[name][1]).all()),
                            f"{what}: validity changes with padding", opts)
                    _close(padded[name][0], v, f"{what}: padded slots change the value", opts)

    def run_dtypes(self, opts: Mapping[str, Any]) -> None:
        """fp16 / bf16 / fp32 inputs (scores, relevance and soft membership where accepted): float32 results equal
        to the fp64 ones up to float32 rounding; fp64 inputs: float64 results."""
        for soft in self._softs(opts):
            for s, r, g, mask in corpus(soft):
                want = self.entries(self.call(s, r, g, mask, opts, **self._none()), s.shape[0])
                for name, (v, _) in want.items():
                    _assert(not v.is_floating_point() or v.dtype == F64,
                            f"{name}: {v.dtype} result for fp64 input (soft={soft})", opts)
                for dt in DTYPES:
                    gd = g.to(dt) if soft else g
                    got = self.entries(self.call(s.to(dt), r.to(dt), gd, mask, opts, **self._none()), s.shape[0])
                    for name, (v, ok) in want.items():
                        w = got[name][0]
                        what = f"{name}: {dt} input (soft={soft})"
                        _assert(not w.is_floating_point() or w.dtype == torch.float32,
                                f"{what}: {w.dtype} result (expected torch.float32)", opts)
                        _assert(ok is None or bool((got[name][1] == ok).all()), f"{what}: validity differs", opts)
                        _close(w, v, f"{what} against fp64", opts, tol=1e-4)

    def _softs(self, opts) -> List[bool]:
        return [False] + ([True] if "groups" in self.m.data and self.m.accepts_soft(opts) else [])

    #: the checks (:meth:`check`), each one pytest item per declared measure (``tests/test_contract.py``)
    CHECKS = ("functional", "metric_class", "batch_vs_lists", "padding", "dtypes")
    #: the checks run at the defaults only (the others: at the defaults and at every declared option value alone)
    DEFAULTS_ONLY = ("padding", "dtypes")

    def check(self, name: str) -> List[str]:
        """Check ``name`` at the defaults and (except :data:`DEFAULTS_ONLY`) at every declared option value alone
        through the range, class and batch checks, the latter with the exact ordering and integer ids (the values
        that raise for this corpus, or give a batch-level value, are skipped); every failure, one per option set,
        each naming its options."""
        run = {"functional": lambda o, first: self.run_functional(o, reductions=first),
               "metric_class": lambda o, first: self.run_class(o),
               "batch_vs_lists": lambda o, first: self.run_batch_vs_lists(o, variants=first),
               "padding": lambda o, first: self.run_padding(o),
               "dtypes": lambda o, first: self.run_dtypes(o)}[name]
        out = []
        for i, opts in enumerate(self.option_sets()):
            if i > 0 and name in self.DEFAULTS_ONLY:
                break
            if not self._applicable(opts):
                if i == 0:
                    out.append(f"the default options give no per-list value on the corpus (options {dict(opts)})")
                continue
            try:
                run(opts, i == 0)
            except AssertionError as e:
                out.append(str(e))
        return out

    def run_all(self) -> None:
        """Every check (:meth:`check`); an ``AssertionError`` listing every failure."""
        failures = [f"[{c}] {f}" for c in self.CHECKS if c != "metric_class" or self.metric_class is not None
                    for f in self.check(c)]
        if failures:
            raise AssertionError("\n".join(failures))


@functools.lru_cache(maxsize=None)
def measure_tester(name: str) -> MeasureTester:
    """One tester per declared measure, shared by its checks (its calls on the corpus are computed once)."""
    return MeasureTester(MEASURES[name])


# ---------------------------------------------------------------------------------------------------- helpers
def pieces(m: Measure, res, B: Optional[int] = None) -> Dict[str, Tuple[Tensor, Optional[Tensor]]]:
    """The pieces of a declared measure's result, ``name -> (value, valid)``: ``"value"`` with its validity
    broadcast to its shape, or each tensor field of a ``record`` with ``<field>_valid`` or ``valid`` of its shape
    (``None``: the record holds no validity of that field, e.g. RankParityResult's ``wins``).  With ``B``, the record
    fields whose leading size is not ``B`` (batch-level) are left out."""
    if m.output != "record":
        v, ok = res if isinstance(res, tuple) else (res, torch.ones_like(res, dtype=torch.bool))
        return {"value": (v, _fit(ok, v))}
    out = {}
    for name in res._fields:
        t = getattr(res, name)
        if not isinstance(t, Tensor) or t.dtype == torch.bool or (B is not None and (t.dim() == 0 or
                                                                                      t.shape[0] != B)):
            continue
        ok = getattr(res, f"{name}_valid", getattr(res, "valid", None))
        out[name] = (t, ok if ok is not None and ok.shape == t.shape else None)
    return out


def declared_range(m: Measure, name: str, opts: Mapping[str, Any], max_relevance: float) -> Tuple[float, float]:
    """The declared range of piece ``name`` (:func:`pieces`) under ``opts``, as numbers (no range: unbounded;
    :data:`~torchfair.metrics.declarations.MAX_RELEVANCE` bounds scale ``max_relevance``)."""
    r = m.field_range(name, opts) if m.output == "record" else m.range_for(opts)
    if r is None:
        return -float("inf"), float("inf")
    lo, hi = (b.scale * max_relevance if isinstance(b, RelevanceBound) else float(b) for b in r)
    return lo, hi


def _fit(valid: Tensor, value: Tensor) -> Tensor:
    valid = valid.to(torch.bool)
    return valid.reshape(tuple(valid.shape) + (1,) * (value.dim() - valid.dim())).expand_as(value)


def _assert(cond: bool, msg: str, opts) -> None:
    if not cond:
        raise AssertionError(f"{msg} (options {dict(opts)})")


def _close(got: Tensor, want: Tensor, what: str, opts, tol: float = 1e-7) -> None:
    g, w = got.detach().double(), want.detach().double()
    _assert(g.shape == w.shape, f"{what}: shape {tuple(g.shape)} != {tuple(w.shape)}", opts)
    bad = ~((g - w).abs() <= tol * (1.0 + w.abs()))
    _assert(not bool(bad.any()), f"{what}: {g[bad][:4].tolist()} != {w[bad][:4].tolist()}", opts)


def _letters(n: int) -> List[str]:
    return [chr(65 + i) for i in range(n)]


def _columns(m: Measure, res, opts) -> Dict[str, Tuple[Tensor, Tensor]]:
    """The per-list columns the metric class reports for ``m``, from the functional result (the naming of
    :mod:`torchfair.metrics.registry`: ``label``, ``label_A``, ``label_AB``, ``label_gap``; record fields
    ``label_field...``), with the built-in exceptions (pairwise accuracy's diagonal and Inter/IntraAcc,
    misallocation's l1, rank parity's ARP and pair, MPC's per-query estimate)."""
    label = m.name  # a class's label is the measure's name, whatever its options
    if m.name == "mpc":
        return {label: (res.per_query, res.per_query_valid)}
    if m.name == "rank_parity":
        return {**_expand(label, res.per_group, res.valid), **_expand(f"{label}_pair", res.pair, res.valid)}
    if m.output == "record":
        return {k: vv for f in res._fields if f != "valid" for k, vv in
                _expand(f"{label}_{f}", getattr(res, f), torch.ones_like(getattr(res, f), dtype=torch.bool)).items()}
    v, ok = res
    ok = _fit(ok, v)
    out = _expand(label, v, ok, diagonal=m.name == "pairwise_accuracy", gap=m.name != "pairwise_accuracy")
    if m.name == "pairwise_accuracy":
        for key, (a, b) in (("inter", ((0, 1), (1, 0))), ("intra", ((0, 0), (1, 1)))):
            both = ok[:, a[0], a[1]] & ok[:, b[0], b[1]]
            out[f"{label}_{key}"] = (v[:, a[0], a[1]] - v[:, b[0], b[1]], both)
    if m.name == "exposure_misallocation":
        out[f"{label}_l1"] = (v.abs().sum(-1), ok.all(-1))
    return out


def _expand(label: str, v: Tensor, ok: Tensor, diagonal: bool = False, gap: bool = True):
    if v.dim() == 1:
        return {label: (v, ok)}
    L = _letters(v.shape[1])
    if v.dim() == 2:
        return {f"{label}_{L[g]}": (v[:, g], ok[:, g]) for g in range(len(L))}
    out = {f"{label}_{L[g]}{L[h]}": (v[:, g, h], ok[:, g, h]) for g in range(len(L)) for h in range(len(L))
           if g != h or diagonal}
    if gap:
        for g in range(len(L)):
            for h in range(g + 1, len(L)):
                both = ok[:, g, h] & ok[:, h, g]
                out[f"{label}_gap" if len(L) == 2 else f"{label}_gap_{L[g]}{L[h]}"] = (v[:, g, h] - v[:, h, g], both)
    return out



# ==================================================================================================== the contract
@dataclass(frozen=True)
class Found:
    """One violation a check found: its kind (``contract_cases.Violation.kind``) and its report."""

    kind: str
    text: str


@dataclass
class Outcome:
    """What one check of one row found: ``violations`` (not known), and for every ``KNOWN_VIOLATIONS`` entry of
    this (row, check) the violations it matched (none: the entry is stale)."""

    row: str
    check: str
    violations: List[str]
    known: Dict[Tuple[str, str, str], List[str]]

    def failures(self) -> List[str]:
        """The violations that fail the item: the unknown ones, and every known entry that no longer occurs."""
        import contract_cases as cc
        stale = [f"{self.row} [{self.check}]: the known violation {key[2]!r} ({cc.KNOWN_VIOLATIONS[key].defect}) "
                 f"no longer occurs: remove it from contract_cases.KNOWN_VIOLATIONS"
                 for key, hits in self.known.items() if not hits]
        return self.violations + stale

    def known_report(self) -> str:
        return "\n\n".join(f"known ({key[2]}): {len(hits)} x, first:\n{hits[0]}" for key, hits in self.known.items()
                           if hits)


class ContractTester:
    """The checks of the robustness contract on one row of ``tests/contract_cases.py`` (a declared measure or a
    hand row: an ordering, a loss, a browsing model, a compat function), each over the row's matrix of ordering x
    dtype mode x declared options; :meth:`run` runs one check and returns every violation, each naming its case
    (row, check, ordering, mode, options) with a reproduction.  ``tests/test_contract.py`` makes one pytest item
    per (row, check) of :meth:`checks_of`.

    * ``sweep``: two fixed degenerate batches (integer ids / soft membership) through every ordering in fp32
      and every dtype mode under a differentiable ordering and ``Hard``, for each of the row's sweep options;
    * ``valid``: hypothesis draws ``examples`` batches, orderings, modes and options (the ``contract-fast``
      profile: derandomized, a seed per row; ``profile="slow"``: ``contract-slow``);
    * ``invalid``: every applicable bad argument of ``contract_cases.INVALID`` and of
      ``contract_cases.ARGUMENT_INVALID`` raises ``ValueError`` naming it;
    * ``functional``, ``metric_class``, ``batch_vs_lists``, ``padding``, ``dtypes``: a declared measure through
      :class:`MeasureTester` (declared range and reductions, the metric class against the functional, a batch
      against its lists alone, padding, dtypes, over the declared options);
    * ``mixture``: a measure that is an expectation over rankings equals, under ``Sampled(rankings)``, the mean
      of its values on each ranking;
    * ``tied``: all-tied scores get finite gradients of ordinary size through every soft relaxation;
    * ``scale``: a soft relaxation (``scale="std"``) means the same at any score magnitude: the hard limit at a
      low temperature, and the same positions for ``c * s`` at its working temperature.

    ``contract_cases.KNOWN_VIOLATIONS`` names (row, check, kind of violation) with a pattern of its message: a
    violation that matches is set apart as known (:attr:`Outcome.known`; inside a hypothesis check the example
    then counts as passing, so that the search goes on for other violations); an entry that matches nothing is
    reported.  ``TORCHFAIR_CONTRACT_STRICT=1`` reports the known violations as violations.

    >>> import contract_cases as cc
    >>> ContractTester(cc.ROW_INDEX["metrics.ndcg"]).run("sweep").failures()
    []
    """

    CHECKS = ("sweep", "valid", "invalid") + MeasureTester.CHECKS + ("mixture", "tied", "scale")

    def __init__(self, row, profile: str = "fast", examples: int = 6, strict: Optional[bool] = None):
        import os

        import contract_cases as cc
        self.cc, self.row, self.profile, self.examples = cc, row, profile, examples
        self.strict = bool(os.environ.get("TORCHFAIR_CONTRACT_STRICT")) if strict is None else strict
        self._check: Optional[str] = None
        self._hits: Dict[Tuple[str, str, str], List[str]] = {}

    @classmethod
    def checks_of(cls, row) -> List[str]:
        """The checks that apply to ``row`` (the others have nothing to check on it)."""
        import contract_cases as cc
        m = _declared(row)
        applies = {
            "sweep": True, "valid": True,
            "invalid": bool(cc.invalid_cases_for(row) or cc.argument_invalid_for(row)),
            "mixture": row.linear, "tied": row.name in cc.TIED_ROWS, "scale": row.name in cc.SCALE_ROWS,
        }
        for c in MeasureTester.CHECKS:
            applies[c] = m is not None and (c != "metric_class" or measure_tester(m.name).metric_class is not None)
        return [c for c in cls.CHECKS if applies[c]]

    def run(self, check: str) -> Outcome:
        """Run ``check``; its violations, the known ones set apart."""
        self._check = check
        self._hits = {k: [] for k in self.cc.KNOWN_VIOLATIONS if k[:2] == (self.row.name, check)} \
            if not self.strict else {}
        found = getattr(self, check)()
        unknown = [f.text for f in found if not self._absorb(f.kind, f.text)]
        return Outcome(self.row.name, check, unknown, self._hits)

    # ------------------------------------------------------------------------------------------ checks
    def sweep(self) -> List[Found]:
        cc, row, out = self.cc, self.row, []
        for soft in (False, True):
            for ordering, mode in self._sweep_combos(cc.sweep_batch(soft, "fp32")):
                case = cc.sweep_batch(soft, mode)
                for so in row.sweep_opts:
                    out += self._violations(cc.run_valid, row, case, ordering, mode,
                                            {**cc.default_options(row), **so})
        return out

    def sweep_full(self) -> List[Found]:
        """The whole degenerate catalogue through every ordering x every dtype mode (slow)."""
        cc, row, out = self.cc, self.row, []
        for case in cc.catalogue():
            for ordering in row.ordering_names(case):
                for mode in cc.MODES:
                    for so in row.sweep_opts:
                        out += self._violations(cc.run_valid, row, case, ordering, mode,
                                                {**cc.default_options(row), **so})
        return out

    def valid(self) -> List[Found]:
        from hypothesis import given
        from hypothesis import strategies as st
        cc, row = self.cc, self.row

        @hypothesis_settings(self.profile, self.examples, row.name)
        @given(st.data())
        def run(data):
            try:
                cc.run_valid(row, *draw_call(data, row))
            except cc.Violation as v:
                if not self._absorb(v.kind, str(v)):
                    raise

        return hypothesis_violations(run)

    def invalid(self) -> List[Found]:
        cc, row, out = self.cc, self.row, []
        for inv in cc.invalid_cases_for(row):
            out += self._violations(cc.run_invalid, row, inv)
        for label, factory, names in cc.argument_invalid_for(row):
            out += self._violations(cc.run_constructor_invalid, f"{row.name}: {label}", factory, names)
        return out

    def _declared_check(self, check: str) -> List[Found]:
        m = _declared(self.row)
        if m is None:
            return []
        return [Found("MeasureTester", f"{self.row.name} [MeasureTester.{check}]: {f}")
                for f in measure_tester(m.name).check(check)]

    def functional(self) -> List[Found]:
        return self._declared_check("functional")

    def metric_class(self) -> List[Found]:
        return self._declared_check("metric_class")

    def batch_vs_lists(self) -> List[Found]:
        return self._declared_check("batch_vs_lists")

    def padding(self) -> List[Found]:
        return self._declared_check("padding")

    def dtypes(self) -> List[Found]:
        return self._declared_check("dtypes")

    def mixture(self) -> List[Found]:
        if not self.row.linear:
            return []
        from hypothesis import given
        cc, row = self.cc, self.row

        @hypothesis_settings(self.profile, self.examples, "mixture:" + row.name)
        @given(cc.cases(max_B=3, max_N=8).filter(lambda c: not c.soft))
        def run(case):
            try:
                cc.mixture_linearity(row, case)
            except cc.Violation as v:
                if not self._absorb(v.kind, str(v)):
                    raise

        return hypothesis_violations(run)

    def tied(self) -> List[Found]:
        cc, row, out = self.cc, self.row, []
        if row.name not in cc.TIED_ROWS:
            return []
        orderings = (("default",) if row.family == "losses" else ()) + cc.SOFT_RELAXATIONS
        for ordering in orderings:
            for value in (0.0, 5.0):
                out += self._violations(cc.tied_gradient_size, row, ordering, value)
        return out

    def scale(self) -> List[Found]:
        """The hard limit at every magnitude of :data:`contract_cases.SCALES`; the equivariance at each of them in
        fp32 and fp64, with and without ties, on two lists."""
        cc, out = self.cc, []
        for label, make, temperature in cc.SCALE_ROWS.get(self.row.name, ()):
            for scale in cc.SCALES:
                out += self._violations(cc.scale_invariance, label, make, scale)
                for dtype in (torch.float32, torch.float64):
                    for ties in (False, True):
                        for seed in (0, 1):
                            out += self._violations(cc.scale_equivariance, label, make, temperature, scale, dtype,
                                                    ties, seed)
        return out

    # ------------------------------------------------------------------------------------------ plumbing
    def _absorb(self, kind: str, text: str) -> bool:
        """Whether a violation of the running check is a known one (then recorded as such)."""
        if self.strict or self._check is None:
            return False
        key = self.cc.known_violation(self.row.name, self._check, kind, text)
        if key is None or key not in self._hits:
            return False
        self._hits[key].append(text)
        return True

    def _sweep_combos(self, case):
        cc = self.cc
        names = self.row.ordering_names(case)
        diff = next((o for o in names if o in cc.DIFFERENTIABLE), names[0])
        combos = [(o, "fp32") for o in names]
        for mode in cc.MODES[1:]:
            combos.append((diff, mode))
            if "Hard" in names and diff != "Hard":
                combos.append(("Hard", mode))
        return combos

    def _violations(self, fn, *args) -> List[Found]:
        try:
            fn(*args)
        except self.cc.Violation as v:
            return [Found(v.kind, str(v))]
        return []


def _declared(row) -> Optional[Measure]:
    """The declaration a row is generated from (``None``: a hand row)."""
    if not row.name.startswith("metrics."):
        return None
    m = MEASURES.get(row.name.split(".", 1)[1])
    return m if m is not None and m.fn is row.obj else None


def draw_call(data, row):
    """(case, ordering, mode, options) of one hypothesis example for ``row``."""
    import contract_cases as cc
    from hypothesis import strategies as st
    case = data.draw(cc.cases(), label="case")
    ordering = data.draw(st.sampled_from(row.ordering_names(case)), label="ordering")
    mode = data.draw(st.sampled_from(cc.MODES), label="mode")
    opts = {k: data.draw(st.sampled_from(list(v)), label=k) for k, v in row.options.items()}
    if "validate_args" in row.params and row.call is None:
        opts["validate_args"] = data.draw(st.sampled_from([cc.OMIT, False]), label="validate_args")
    return case, ordering, mode, opts


def hypothesis_settings(profile: str, examples: int, key: str):
    """The profile's settings (``tests/conftest.py``); in the fast profile also a fixed seed per ``key``, so that
    every row gets its own deterministic examples (derandomized runs of identical inner functions would all draw
    the same)."""
    import zlib
    from hypothesis import seed, settings
    if profile == "slow":
        return settings(settings.get_profile("contract-slow"), max_examples=max(examples, 10_000))
    s = settings(settings.get_profile("contract-fast"), max_examples=examples)

    def apply(fn):
        return seed(zlib.crc32(key.encode()))(s(fn))

    return apply


def hypothesis_violations(run) -> List[Found]:
    """Run a hypothesis test; its violations with hypothesis' notes (the falsifying example), one per distinct
    failure."""
    import contract_cases as cc
    try:
        run()
    except cc.Violation as e:
        return [Found(e.kind, _report(e))]
    except BaseExceptionGroup as e:
        return [Found(getattr(x, "kind", type(x).__name__), _report(x)) for x in e.exceptions]
    return []


def _report(exc: BaseException) -> str:
    import contract_cases as cc
    if isinstance(exc, BaseExceptionGroup):
        return f"{len(exc.exceptions)} distinct failures:\n\n" + "\n\n".join(_report(e) for e in exc.exceptions)
    notes = "\n".join(getattr(exc, "__notes__", []))
    head = "" if isinstance(exc, cc.Violation) else f"{type(exc).__name__}: "
    return f"{head}{exc}" + (f"\n{notes}" if notes else "")
