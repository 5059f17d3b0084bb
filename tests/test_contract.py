"""The robustness contract, as property tests over every public function x ordering x dtype mode x options.

For every public function and every ordering, on CPU in fp32 and fp64, with fp16 / bf16 inputs and under
``torch.autocast("cpu", dtype=...)`` (and under ``torch.set_default_dtype(torch.float64)``):

* valid input (anything the README allows: all-tied / huge / tiny scores, logits spanning more than 88, graded
  relevance up to 1000, tiny or zero relevance, one group, an absent group, unknown (-1) items, soft membership
  rows summing to 1 or less, fully padded lists, single items, NaN in padded slots) gives finite values, 0 on
  entries flagged invalid, values inside the documented range, float64 results for float64 inputs and float32
  otherwise; with a differentiable ordering the gradient of a weighted sum of the valid values is finite on real
  items and exactly 0 on padded items;
* invalid input raises ``ValueError`` naming the argument in backticks; any other exception is a failure.

The rows (one per public function: its options, documented ranges...) and the checks live in
``tests/contract_cases.py``; the rows of the declared measures (``torchfair.metrics.MEASURES``) are generated from
their declarations, the other rows (orderings, losses, browsing, compat, evaluation) are written by hand.  One
tester, :class:`tester.ContractTester`, runs each check of a row over its matrix (ordering x dtype mode x declared
options) and reports every violation at once, each naming its case; a declared measure also goes through the
checks of :class:`tester.MeasureTester`.  ``python tests/contract_cases.py probe [ROW ...]`` reports every
violation of a catalogue of degenerate inputs with a reproduction, ``python tests/contract_cases.py explore N
[ROW ...]`` does the same for N random examples.  The violations still open are ``KNOWN_VIOLATIONS`` in ``contract_cases.py``,
keyed by row, check and kind of violation: strict expected failures of that kind only (reported once they pass);
``TORCHFAIR_CONTRACT_STRICT=1`` reports them as failures.

Tests
-----
* ``test_public_surface_is_covered``: every name of ``__all__`` of metrics, losses, orderings, browsing,
  compat.fairranktune, compat.expeval and evaluation has a row or a documented exemption.
* ``test_check[<row>-<check>]``: one item per row and check of :meth:`tester.ContractTester.checks_of` (``sweep``:
  fixed degenerate batches through every ordering and dtype mode; ``valid``: hypothesis examples; ``invalid``:
  every bad argument; ``functional`` / ``metric_class`` / ``batch_vs_lists`` / ``padding`` / ``dtypes``: the
  declared-measure tester; ``mixture``; ``tied``: tied scores; ``scale``: the soft relaxations at any score
  magnitude), e.g. ``-k "metrics.ndcg-sweep"``.  An item with a ``KNOWN_VIOLATIONS`` entry is a strict expected
  failure raising ``contract_cases.KnownViolation``: only violations of the entry's kind and message are expected;
  any other violation of the check fails it, and so does the entry once its violation no longer occurs.
* ``test_invalid_construction[<case>]``: bad constructor and helper arguments raise ``ValueError`` naming them.
* ``test_valid_family[family]`` (``slow``): >= 10 000 hypothesis examples per family (row drawn too).
* ``test_sweep_full[row]`` (``slow``): the degenerate catalogue through every ordering x every dtype mode.

Profiles
--------
``python -m pytest -q`` (``make test``) runs the fast profile (``contract-fast`` in ``tests/conftest.py``:
derandomized and a fixed seed per row, so CI is deterministic; no shrinking; ``FAST_EXAMPLES`` examples per row).
``python -m pytest -q -m slow tests/test_contract.py`` (``make test-contract-slow``) uses the ``contract-slow``
profile for the tests marked ``slow`` (random seed, shrinking, 10 000 examples per family, the full catalogue x
ordering x dtype sweep); ``TORCHFAIR_CONTRACT_PROFILE=slow`` applies that profile to every contract test;
``TORCHFAIR_CONTRACT_EXAMPLES=N`` sets the fast profile's examples per row; ``TORCHFAIR_CONTRACT_SHRINK=1``
shrinks failing examples to minimal ones in the fast profile too.
"""
from __future__ import annotations

import inspect
import os
import pathlib
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import contract_cases as cc
from tester import ContractTester, draw_call, hypothesis_settings, hypothesis_violations
from torchfair import metrics as M

pytestmark = pytest.mark.contract

#: hypothesis examples per row in the fast profile
FAST_EXAMPLES = int(os.environ.get("TORCHFAIR_CONTRACT_EXAMPLES", "6"))
#: examples per family in the slow profile
SLOW_EXAMPLES = 10_000

ROW_IDS = [r.name for r in cc.ROWS]
STRICT = bool(os.environ.get("TORCHFAIR_CONTRACT_STRICT"))


def _items():
    """``(row, check)`` of every applicable check; those with known violations are strict expected failures that
    only a :class:`contract_cases.KnownViolation` satisfies."""
    items = []
    for row in cc.ROWS:
        for check in ContractTester.checks_of(row):
            known = [k for k in cc.KNOWN_VIOLATIONS if k[:2] == (row.name, check)]
            marks = [] if STRICT or not known else [pytest.mark.xfail(
                raises=cc.KnownViolation, strict=True,
                reason="; ".join(f"{k[2]}: {cc.KNOWN_VIOLATIONS[k].defect}" for k in known))]
            items.append(pytest.param(row, check, id=f"{row.name}-{check}", marks=marks))
    return items


ITEMS = _items()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread is faster and immune to OpenMP oversubscription on 2-core machines."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _fail_all(failures) -> None:
    if failures:
        pytest.fail(f"{len(failures)} violations:\n\n" + "\n\n".join(failures), pytrace=False)


def _settle(outcome) -> None:
    """Fail on the unknown or stale violations; raise :class:`contract_cases.KnownViolation` when only known ones
    were found."""
    _fail_all(outcome.failures())
    if outcome.known:
        raise cc.KnownViolation(outcome.known_report())


# ============================================================================================== completeness
def test_public_surface_is_covered():
    public = set(cc.public_names())
    covered = {r.name for r in cc.ROWS}
    exempt = set(cc.EXEMPT)
    missing = sorted(public - covered - exempt)
    assert not missing, (f"public names without a contract row (add one to tests/contract_cases.py, or an "
                         f"exemption with its reason to EXEMPT): {missing}")
    stale = sorted((covered | exempt) - public)
    assert not stale, f"rows / exemptions for names that are not public (any more): {stale}"
    both = sorted(covered & exempt)
    assert not both, f"names both covered and exempt: {both}"
    for r in cc.ROWS:  # the row calls the public object itself
        prefix, name = r.name.rsplit(".", 1)
        mod = dict(cc.SURFACE)[prefix]
        assert getattr(mod, name) is r.obj, f"row {r.name} does not call {prefix}.{name}"


def test_every_family_and_ordering_is_swept():
    assert set(cc.FAMILIES) == {"pairwise", "exposure", "prefix", "calibration", "utility", "losses", "orderings",
                                "browsing", "compat", "evaluation"}
    swept = {o for r in cc.ROWS for o in r.ordering_names()}
    assert set(cc.ORDERINGS) <= swept


def test_every_known_violation_names_an_item():
    """A ``KNOWN_VIOLATIONS`` entry names a row, a check that applies to it and a kind; only its item is marked."""
    items = {(p.values[0].name, p.values[1]) for p in ITEMS}
    stale = [k for k in cc.KNOWN_VIOLATIONS if k[:2] not in items]
    assert not stale, f"KNOWN_VIOLATIONS entries naming no (row, check) item: {stale}"
    marked = sorted(p.id for p in ITEMS if p.marks)
    want = [] if STRICT else sorted({f"{r}-{c}" for r, c, _ in cc.KNOWN_VIOLATIONS})
    assert marked == want


def test_every_row_has_its_checks():
    """Every row is swept and drawn; every declared measure goes through the five checks of the measure tester."""
    ids = {p.id for p in ITEMS}
    for row in cc.ROWS:
        assert {f"{row.name}-sweep", f"{row.name}-valid"} <= ids, row.name
    for name, m in cc.MEASURES.items():
        row = cc.ROW_INDEX.get(f"metrics.{name}")
        if row is not None and row.obj is m.fn:
            assert {f"{row.name}-{c}" for c in ("functional", "batch_vs_lists", "padding", "dtypes")} <= ids, name
    assert {f"{n}-scale" for n in cc.SCALE_ROWS} <= ids
    assert len(ids) == len(ITEMS)


@pytest.mark.parametrize("row, check", ITEMS)
def test_check(row, check, contract_profile):
    """One check of one row over its matrix (:meth:`tester.ContractTester.run`), every violation at once."""
    _settle(ContractTester(row, contract_profile, FAST_EXAMPLES).run(check))


# ============================================================================================== the tester itself
def _found(kind, text):
    from tester import Found
    return Found(kind, text)


class _Broken(ContractTester):
    """A tester whose sweep finds the violations it is given."""

    found: list = []

    def sweep(self):
        return list(self.found)


def test_the_tester_reports_every_violation(monkeypatch):
    monkeypatch.setattr(_Broken, "found", [_found("wrong result", "metrics.ndcg [sweep]: a violation"),
                                           _found("out of range", "metrics.ndcg [sweep]: another")])
    out = _Broken(cc.ROW_INDEX["metrics.ndcg"], strict=False).run("sweep")
    assert out.failures() == ["metrics.ndcg [sweep]: a violation", "metrics.ndcg [sweep]: another"]
    assert out.known == {}


def test_a_known_violation_masks_only_its_kind_and_message(monkeypatch):
    row = cc.ROW_INDEX["metrics.ndcg"]
    key = ("metrics.ndcg", "sweep", "wrong result")
    monkeypatch.setitem(cc.KNOWN_VIOLATIONS, key, cc.Known(r"a violation", "a cause"))
    monkeypatch.setattr(_Broken, "found", [_found("wrong result", "metrics.ndcg [sweep]: a violation")])
    out = _Broken(row, strict=False).run("sweep")
    assert out.failures() == [] and out.known == {key: ["metrics.ndcg [sweep]: a violation"]}
    with pytest.raises(cc.KnownViolation):
        _settle(out)
    # the same check's violations of another kind, or of the same kind with another message, still fail
    other = [_found("out of range", "metrics.ndcg [sweep]: a violation"),
             _found("wrong result", "metrics.ndcg [sweep]: something else")]
    monkeypatch.setattr(_Broken, "found", [_found("wrong result", "metrics.ndcg [sweep]: a violation")] + other)
    out = _Broken(row, strict=False).run("sweep")
    assert out.failures() == [f.text for f in other]
    with pytest.raises(pytest.fail.Exception):
        _settle(out)
    # another check of the row is not masked
    monkeypatch.setattr(_Broken, "valid", lambda self: [_found("wrong result", "metrics.ndcg [valid]: a violation")])
    assert _Broken(row, strict=False).run("valid").failures() == ["metrics.ndcg [valid]: a violation"]
    # strict: the known violation is reported
    monkeypatch.setattr(_Broken, "found", [_found("wrong result", "metrics.ndcg [sweep]: a violation")])
    assert _Broken(row, strict=True).run("sweep").failures() == ["metrics.ndcg [sweep]: a violation"]


def test_a_stale_known_violation_is_reported(monkeypatch):
    key = ("metrics.ndcg", "sweep", "wrong result")
    monkeypatch.setitem(cc.KNOWN_VIOLATIONS, key, cc.Known(r"a violation", "a cause"))
    out = ContractTester(cc.ROW_INDEX["metrics.ndcg"], strict=False).run("sweep")
    assert len(out.failures()) == 1 and "no longer occurs" in out.failures()[0] and "a cause" in out.failures()[0]
    with pytest.raises(pytest.fail.Exception):
        _settle(out)


def test_a_known_violation_does_not_stop_the_hypothesis_search(monkeypatch):
    """Inside ``valid`` a known violation counts as a passing example: a later unknown one is still found."""
    row = cc.ROW_INDEX["metrics.ndcg"]
    key = ("metrics.ndcg", "valid", "wrong result")
    monkeypatch.setitem(cc.KNOWN_VIOLATIONS, key, cc.Known(r"known", "a cause"))
    seen = []

    def fake(row, case, ordering, mode, opts):
        seen.append(case)
        if len(seen) <= 2:
            raise cc.Violation("wrong result", "known")
        if len(seen) == 4:
            raise cc.Violation("out of range", "unknown")

    monkeypatch.setattr(cc, "run_valid", fake)
    out = ContractTester(row, examples=6, strict=False).run("valid")
    assert len(out.known[key]) == 2
    assert len(out.failures()) == 1 and "[out of range] unknown" in out.failures()[0]


def test_the_sweep_finds_a_violation_of_the_library():
    """A measure whose declared range is narrowed below its values: the sweep reports it."""
    row = cc.ROW_INDEX["metrics.ndcg"]
    narrow = cc.replace(row, out=lambda res, ctx: [cc.replace(o, hi=-1.0) for o in row.out(res, ctx)])
    assert ContractTester(narrow).run("sweep").failures(), "a value outside a (wrong) declared range went unreported"


def test_the_ordering_checks_can_fail():
    """The extra checks of the ordering rows report positions that are not a permutation, a position matrix with
    mass on padding, and cascade browsing accepted by an ordering without a strict order."""
    case = cc._list_case([[0.3, 0.1, 0.2]], [[1.0, 0.0, 2.0]], [[0, 1, 0]], mask=[[True, True, False]])
    x = case.materialize("fp32")
    ctx = cc.Ctx(cc.ROW_INDEX["orderings.Hard"], case, x, "Hard", "fp32", {})
    res = cc._ordering_call(x, cc.to.Hard(), {})
    cc._ordering_extra(res, ctx)  # the real thing passes
    for label, bad in (("positions not a permutation", {"positions": res["positions"] + 0.5}),
                       ("position matrix nonzero on padding",
                        {"position_matrix": res["position_matrix"] + 0.01}),
                       ("cascade accepted", {"refused Cascade(0.9, max_grade=4.0)": False})):
        with pytest.raises(cc.Violation, match=label):
            cc._ordering_extra({**res, **bad}, ctx)


def test_the_cascade_checks_can_fail():
    """The extra check of the cascade rows reports an exposure that rises down the list or exceeds the
    position-based weights."""
    case = cc._list_case([[0.3, 0.1, 0.2]], [[1.0, 0.0, 2.0]], [[0, 1, 0]])
    x = case.materialize("fp32")
    ctx = cc.Ctx(cc.ROW_INDEX["browsing.Cascade"], case, x, "none", "fp32", {})
    res = cc._browsing_call("Cascade")(x, None, {})
    cc._cascade_extra(res, ctx)

    class Rising(cc.tb.Cascade):
        def item_exposure(self, rel):
            return super().item_exposure(rel).flip(-1)

    with pytest.raises(cc.Violation, match="increases down the list|out of range"):
        cc._cascade_extra({**res, "model": Rising(0.9)}, ctx)
    with pytest.raises(cc.Violation, match="increases down the list"):  # within the weights [1, 0.9, 0.81]
        cc._cascade_extra({**res, "item_exposure": torch.tensor([[0.1, 0.5, 0.5]])}, ctx)
    with pytest.raises(cc.Violation, match="out of range"):
        cc._cascade_extra({**res, "item_exposure": torch.tensor([[1.0, 0.95, 0.5]])}, ctx)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(cc.FAMILIES))
def test_valid_family(family, contract_profile):
    rows = cc.FAMILIES[family]

    @hypothesis_settings(contract_profile, SLOW_EXAMPLES, family)
    @given(st.data())
    def run(data):
        row = data.draw(st.sampled_from(rows), label="row")
        cc.run_valid(row, *draw_call(data, row))

    _fail_all([f.text for f in hypothesis_violations(run)])


@pytest.mark.slow
@pytest.mark.parametrize("row", cc.ROWS, ids=ROW_IDS)
def test_sweep_full(row):
    _fail_all([f.text for f in ContractTester(row).sweep_full()][:30])


# ============================================================================================== invalid input
@pytest.mark.parametrize("label, factory, names", cc.CONSTRUCTOR_INVALID, ids=[c[0] for c in cc.CONSTRUCTOR_INVALID])
def test_invalid_construction(label, factory, names):
    """A bad constructor or helper argument (``contract_cases.CONSTRUCTOR_INVALID``) raises ValueError naming it."""
    failures = []
    try:
        cc.run_constructor_invalid(label, factory, names)
    except cc.Violation as v:
        failures.append(str(v))
    _fail_all(failures)


# ============================================================================================== documentation
FUNCTIONS = [n for n in M.__all__ if callable(getattr(M, n)) and not inspect.isclass(getattr(M, n))]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_measures_have_real_signatures_and_docstrings(name):
    """A public function of torchfair.metrics: no *args / **kwargs passthrough, a docstring with a formula or an
    example (NamedTuples, Measure and the MEASURES table are not functions)."""
    obj = getattr(M, name)
    params = inspect.signature(obj).parameters.values()
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
    doc = inspect.getdoc(obj) or ""
    assert "Example" in doc or ">>>" in doc
    assert "math::" in doc or "``" in doc


@pytest.mark.parametrize("module", ["pairwise", "exposure", "prefix", "utility", "calibration", "monotonicity",
                                    "common"])
def test_no_file_number_citations(module):
    text = (pathlib.Path(M.__file__).parent / f"{module}.py").read_text()
    assert not re.search(r"``00[0-4]``", text)
