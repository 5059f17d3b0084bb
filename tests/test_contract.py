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
tester, :class:`tester.ContractTester`, runs every check of a row over its matrix (ordering x dtype mode x declared
options) and reports every violation at once, each naming its case; a declared measure also goes through
:class:`tester.MeasureTester`.  ``python tests/contract_cases.py probe [ROW ...]`` reports every violation of a
catalogue of degenerate inputs with a reproduction, ``python tests/contract_cases.py explore N [ROW ...]`` does
the same for N random examples.  The violations still open are ``KNOWN_VIOLATIONS`` in ``contract_cases.py``:
strict expected failures (reported once they pass); ``TORCHFAIR_CONTRACT_STRICT=1`` reports them as failures.

Tests
-----
* ``test_public_surface_is_covered``: every name of ``__all__`` of metrics, losses, orderings, browsing,
  compat.fairranktune, compat.expeval and evaluation has a row or a documented exemption.
* ``test_row[row]``: :meth:`tester.ContractTester.run_all` (fixed degenerate batches through every ordering and
  dtype mode; hypothesis examples; every bad argument; the declared-measure tester; mixtures; tied scores).
* ``test_invalid_construction``: bad constructor and helper arguments raise ``ValueError`` naming them.
* ``test_temperature_scale_invariance``: ``scale="std"`` soft orderings mean the same at any score magnitude.
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
    stale = [k for k in cc.KNOWN_VIOLATIONS if k[0] not in cc.ROW_INDEX or k[1] not in ContractTester.CHECKS]
    assert not stale, f"KNOWN_VIOLATIONS entries naming no row or check: {stale}"


@pytest.mark.parametrize("row", cc.ROWS, ids=ROW_IDS)
def test_row(row, contract_profile):
    """Every check of the row over its matrix (:meth:`tester.ContractTester.run_all`), every violation at once."""
    _fail_all(ContractTester(row, contract_profile, FAST_EXAMPLES).run_all())


def test_contract_tester_reports_violations_and_stale_known_ones(monkeypatch):
    row = cc.ROW_INDEX["metrics.ndcg"]

    class Broken(ContractTester):
        def sweep(self):
            return ["metrics.ndcg [sweep]: a violation"]

    assert Broken(row).run_all(("sweep",)) == ["metrics.ndcg [sweep]: a violation"]
    monkeypatch.setitem(cc.KNOWN_VIOLATIONS, ("metrics.ndcg", "sweep"), "a cause")
    monkeypatch.delenv("TORCHFAIR_CONTRACT_STRICT", raising=False)
    assert Broken(row).run_all(("sweep",)) == []  # an expected failure that fails
    stale = ContractTester(row).run_all(("sweep",))  # an expected failure that passes: reported
    assert len(stale) == 1 and "no longer occurs" in stale[0]
    # a violation of the library is found: the sweep of a measure whose range is narrowed below its values
    narrow = cc.replace(row, out=lambda res, ctx: [cc.replace(o, hi=-1.0) for o in row.out(res, ctx)])
    assert ContractTester(narrow).sweep(), "a value outside a (wrong) declared range went unreported"


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(cc.FAMILIES))
def test_valid_family(family, contract_profile):
    rows = cc.FAMILIES[family]

    @hypothesis_settings(contract_profile, SLOW_EXAMPLES, family)
    @given(st.data())
    def run(data):
        row = data.draw(st.sampled_from(rows), label="row")
        cc.run_valid(row, *draw_call(data, row))

    _fail_all(hypothesis_violations(run))


@pytest.mark.slow
@pytest.mark.parametrize("row", cc.ROWS, ids=ROW_IDS)
def test_sweep_full(row):
    _fail_all(ContractTester(row).sweep_full()[:30])


# ============================================================================================== invalid input
def test_invalid_construction():
    """Bad constructor and helper arguments (``contract_cases.CONSTRUCTOR_INVALID``) raise ValueError naming them."""
    failures = []
    for label, factory, names in cc.CONSTRUCTOR_INVALID:
        try:
            cc.run_constructor_invalid(label, factory, names)
        except cc.Violation as v:
            failures.append(str(v))
    _fail_all(failures)


# ============================================================================================== properties
def test_temperature_scale_invariance():
    failures = []
    for ordering in cc.SOFT_RELAXATIONS:
        for scale in (1.0, 1e3, 1e10, 1e19, 1e30):
            try:
                cc.scale_invariance(ordering, scale)
            except cc.Violation as v:
                failures.append(str(v))
    _fail_all(failures)


# ============================================================================================== documentation
def test_measures_have_real_signatures_and_docstrings():
    """Every public function of torchfair.metrics: no *args / **kwargs passthrough, a docstring with a formula
    or an example."""
    for name in M.__all__:
        obj = getattr(M, name)
        if inspect.isclass(obj) or not callable(obj):  # NamedTuples, Measure, the MEASURES table
            continue
        params = inspect.signature(obj).parameters.values()
        assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params), name
        doc = inspect.getdoc(obj) or ""
        assert "Example" in doc or ">>>" in doc, name
        assert "math::" in doc or "``" in doc, name


def test_no_file_number_citations():
    root = pathlib.Path(M.__file__).parent
    for f in ("pairwise", "exposure", "prefix", "utility", "calibration", "monotonicity", "common"):
        text = (root / f"{f}.py").read_text()
        assert not re.search(r"``00[0-4]``", text), f
