"""A shared tester for the declared measures (:data:`torchfair.metrics.MEASURES`), in the spirit of torchmetrics'
``MetricTester``: one class that, given a declaration, checks what every measure must satisfy, over the option
values its declaration says are worth testing.

:class:`MeasureTester` checks, on a small deterministic corpus (several batches of lists of different lengths, two
groups, graded relevance, padded slots holding NaN scores and garbage relevance / group ids):

* :meth:`~MeasureTester.run_functional`: valid values lie in the declared range, invalid ones are 0, and
  ``reduction="mean"`` / ``"sum"`` are the mean / sum of the per-list values over the valid lists (entry by
  entry);
* :meth:`~MeasureTester.run_class`: the metric class (:mod:`torchfair.evaluation.metric`), updated batch by batch,
  computes the mean over valid lists of the functional's per-list values (the columns of
  :mod:`torchfair.evaluation.registry`, rebuilt here from the documented naming);
* :meth:`~MeasureTester.run_batch_vs_lists`: a padded batch gives, list by list, what each list gives alone
  (``[N]`` input of its real items, no mask), hard and soft membership, exact and relaxed ordering;
* :meth:`~MeasureTester.run_padding`: extra padded slots (first and last) change nothing;
* :meth:`~MeasureTester.run_dtypes`: fp16 / bf16 / fp32 inputs give float32 results, fp64 float64, all equal to
  the fp64 values up to the float32 rounding.

:class:`ContractTester` runs :meth:`~MeasureTester.run_all` for every declaration
(``tests/test_contract.py::test_row``); a failure is an ``AssertionError`` naming the check, the options and the entry.  The declaration against the
function's signature is checked once, in ``tests/metrics/test_declarations.py``.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from torchfair import metrics as tm
from torchfair.metrics.declarations import Measure, RelevanceBound
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
        """Two more padded slots (first and last, NaN scores, garbage relevance and ids) change nothing."""
        for s, r, g, mask in corpus():
            base = self.entries(self.call(s, r, g, mask, opts, **self._none()), s.shape[0])
            B = s.shape[0]

            def pad(t, fill):
                col = torch.full((B, 1) + tuple(t.shape[2:]), fill, dtype=t.dtype)
                return torch.cat([col, t, col], 1)

            padded = self.entries(self.call(pad(s, float("nan")), pad(r, 3.0), pad(g, 1), pad(mask, False), opts,
                                            **self._none()), B)
            for name, (v, ok) in base.items():
                _assert(ok is None or bool((ok == padded[name][1]).all()), f"{name}: validity changes with padding",
                        opts)
                _close(padded[name][0], v, f"{name}: padded slots change the value", opts)

    def run_dtypes(self, opts: Mapping[str, Any]) -> None:
        """fp16 / bf16 / fp32 inputs: float32 results equal to the fp64 ones up to float32 rounding."""
        for s, r, g, mask in corpus():
            want = self.entries(self.call(s, r, g, mask, opts, **self._none()), s.shape[0])
            for name, (v, _) in want.items():
                _assert(not v.is_floating_point() or v.dtype == F64, f"{name}: {v.dtype} result for fp64 input", opts)
            for dt in DTYPES:
                got = self.entries(self.call(s.to(dt), r.to(dt), g, mask, opts, **self._none()), s.shape[0])
                for name, (v, ok) in want.items():
                    w = got[name][0]
                    _assert(not w.is_floating_point() or w.dtype == torch.float32,
                            f"{name}: {w.dtype} result for {dt} input (expected torch.float32)", opts)
                    _assert(ok is None or bool((got[name][1] == ok).all()), f"{name}: validity differs under {dt}",
                            opts)
                    _close(w, v, f"{name}: {dt} input against fp64", opts, tol=1e-4)

    def run_all(self) -> None:
        """Every check at the defaults; every declared option value alone through the range, class and batch
        checks, the latter with the exact ordering and integer ids (the values that raise for this corpus, or give
        a batch-level value, are skipped)."""
        for i, opts in enumerate(self.option_sets()):
            if not self._applicable(opts):
                _assert(i > 0, "the default options give no per-list value on the corpus", opts)
                continue
            self.run_functional(opts, reductions=i == 0)
            self.run_class(opts)
            self.run_batch_vs_lists(opts, variants=i == 0)
            if i == 0:
                self.run_padding(opts)
                self.run_dtypes(opts)


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
    :mod:`torchfair.evaluation.registry`: ``label``, ``label_A``, ``label_AB``, ``label_gap``; record fields
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
class ContractTester:
    """Every check of the robustness contract on one row of ``tests/contract_cases.py`` (a declared measure or a
    hand row: an ordering, a loss, a browsing model, a compat function), over the row's matrix of ordering x dtype
    mode x declared options; :meth:`run_all` returns every violation, each naming its case (row, check, ordering,
    mode, options) with a reproduction.

    * :meth:`sweep`: two fixed degenerate batches (integer ids / soft membership) through every ordering in fp32
      and every dtype mode under a differentiable ordering and ``Hard``, for each of the row's sweep options;
    * :meth:`valid`: hypothesis draws ``examples`` batches, orderings, modes and options (the ``contract-fast``
      profile: derandomized, a seed per row; ``profile="slow"``: ``contract-slow``);
    * :meth:`invalid`: every applicable bad argument of ``contract_cases.INVALID`` and of
      ``contract_cases.ARGUMENT_INVALID`` raises ``ValueError`` naming it;
    * :meth:`declared`: a declared measure through :class:`MeasureTester` (functional against the metric class, a
      batch against its lists alone, padding, dtypes, over the declared options);
    * :meth:`mixture`: a measure that is an expectation over rankings equals, under ``Sampled(rankings)``, the mean
      of its values on each ranking;
    * :meth:`tied`: all-tied scores get finite gradients of ordinary size through every soft relaxation.

    A check listed in ``contract_cases.KNOWN_VIOLATIONS`` is an expected failure, strictly: it must fail (its
    violations are not reported) and a pass is reported, so that the entry gets removed.
    ``TORCHFAIR_CONTRACT_STRICT=1`` reports the known violations too.

    >>> import contract_cases as cc
    >>> ContractTester(cc.ROW_INDEX["metrics.ndcg"]).run_all()
    []
    """

    CHECKS = ("sweep", "valid", "invalid", "declared", "mixture", "tied")

    def __init__(self, row, profile: str = "fast", examples: int = 6):
        import contract_cases as cc
        self.cc, self.row, self.profile, self.examples = cc, row, profile, examples

    # ------------------------------------------------------------------------------------------ checks
    def sweep(self) -> List[str]:
        cc, row, out = self.cc, self.row, []
        for soft in (False, True):
            for ordering, mode in self._sweep_combos(cc.sweep_batch(soft, "fp32")):
                case = cc.sweep_batch(soft, mode)
                for so in row.sweep_opts:
                    out += self._violations(cc.run_valid, row, case, ordering, mode,
                                            {**cc.default_options(row), **so})
        return out

    def sweep_full(self) -> List[str]:
        """The whole degenerate catalogue through every ordering x every dtype mode (slow)."""
        cc, row, out = self.cc, self.row, []
        for case in cc.catalogue():
            for ordering in row.ordering_names(case):
                for mode in cc.MODES:
                    for so in row.sweep_opts:
                        out += self._violations(cc.run_valid, row, case, ordering, mode,
                                                {**cc.default_options(row), **so})
        return out

    def valid(self) -> List[str]:
        from hypothesis import given
        from hypothesis import strategies as st
        cc, row = self.cc, self.row

        @hypothesis_settings(self.profile, self.examples, row.name)
        @given(st.data())
        def run(data):
            cc.run_valid(row, *draw_call(data, row))

        return hypothesis_violations(run)

    def invalid(self) -> List[str]:
        cc, row, out = self.cc, self.row, []
        for inv in cc.invalid_cases_for(row):
            out += self._violations(cc.run_invalid, row, inv)
        for label, factory, names in cc.argument_invalid_for(row):
            out += self._violations(cc.run_constructor_invalid, f"{row.name}: {label}", factory, names)
        return out

    def declared(self) -> List[str]:
        m = self.cc.MEASURES.get(self.row.name.split(".", 1)[1]) if self.row.name.startswith("metrics.") else None
        if m is None or m.fn is not self.row.obj:
            return []
        try:
            MeasureTester(m).run_all()
        except AssertionError as e:
            return [f"{self.row.name} [MeasureTester]: {e}"]
        return []

    def mixture(self) -> List[str]:
        if not self.row.linear:
            return []
        from hypothesis import given
        cc, row = self.cc, self.row

        @hypothesis_settings(self.profile, self.examples, "mixture:" + row.name)
        @given(cc.cases(max_B=3, max_N=8).filter(lambda c: not c.soft))
        def run(case):
            cc.mixture_linearity(row, case)

        return hypothesis_violations(run)

    def tied(self) -> List[str]:
        cc, row, out = self.cc, self.row, []
        if row.name not in cc.TIED_ROWS:
            return []
        orderings = (("default",) if row.family == "losses" else ()) + cc.SOFT_RELAXATIONS
        for ordering in orderings:
            for value in (0.0, 5.0):
                out += self._violations(cc.tied_gradient_size, row, ordering, value)
        return out

    def run_all(self, checks=CHECKS) -> List[str]:
        """Every check of ``checks``; the violations, the strict expected failures applied."""
        import os
        known = self.cc.KNOWN_VIOLATIONS
        strict = bool(os.environ.get("TORCHFAIR_CONTRACT_STRICT"))
        out = []
        for check in checks:
            found = getattr(self, check)()
            why = known.get((self.row.name, check))
            if why is None or strict:
                out += found
            elif not found:
                out.append(f"{self.row.name} [{check}]: the known violation ({why}) no longer occurs: remove it "
                           f"from contract_cases.KNOWN_VIOLATIONS")
        return out

    # ------------------------------------------------------------------------------------------ plumbing
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

    def _violations(self, fn, *args) -> List[str]:
        try:
            fn(*args)
        except self.cc.Violation as v:
            return [str(v)]
        return []


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


def hypothesis_violations(run) -> List[str]:
    """Run a hypothesis test; its violations with hypothesis' notes (the falsifying example)."""
    import contract_cases as cc
    try:
        run()
    except (cc.Violation, BaseExceptionGroup) as e:
        return [_report(e)]
    return []


def _report(exc: BaseException) -> str:
    import contract_cases as cc
    if isinstance(exc, BaseExceptionGroup):
        return f"{len(exc.exceptions)} distinct failures:\n\n" + "\n\n".join(_report(e) for e in exc.exceptions)
    notes = "\n".join(getattr(exc, "__notes__", []))
    head = "" if isinstance(exc, cc.Violation) else f"{type(exc).__name__}: "
    return f"{head}{exc}" + (f"\n{notes}" if notes else "")
