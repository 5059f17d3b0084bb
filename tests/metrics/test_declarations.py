"""torchfair.metrics.declarations: the table of measure declarations and the ``Measure`` API.

Every declaration is checked against the function it declares (its signature is the independent reference): the
data tensors, the option names of every grid / range / soft-membership / default / ignored-global entry, the loss
reducer's shape, the fields of record outputs.  The API: ``default``, ``range_for`` (option values compared by
type and value), ``field_range``, ``accepts_soft``, ``direction``, ``RelevanceBound``; ``__post_init__`` rejects
malformed declarations naming the field; ``get_declaration``.

(That every public measure function is declared and that the registry reads the declarations are in
tests/test_design.py; the declared
ranges, soft membership and expectation flags are exercised on data by the contract harness,
tests/contract_cases.py.)
"""
from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch

from torchfair.losses import REDUCERS
from torchfair.metrics import declarations as D
from torchfair.metrics import ndcg
from torchfair.metrics.declarations import MAX_RELEVANCE, MEASURES, Measure, RelevanceBound, get_declaration

NAMES = sorted(MEASURES)


def _params(m):
    return inspect.signature(m.fn).parameters


def _small_batch(m):
    """One call of the measure on a small batch with two groups present (the data its declaration names)."""
    data = {"scores": torch.tensor([[3.0, 2.0, 2.0, 1.0, 0.0, -1.0]]),
            "relevance": torch.tensor([[2.0, 0.0, 1.0, 1.0, 2.0, 0.0]]),
            "groups": torch.tensor([[0, 1, 0, 1, 0, 1]])}
    kw = {k: v for k, v in data.items() if k in m.data and k != "scores"}
    kw.update(m.defaults)
    if "return_valid" in _params(m):
        kw["return_valid"] = True
    if m.name == "mpc":
        kw["eps"] = 0.5  # matched pairs need a threshold (one of eps, closest, quantile)
    return m.fn(data["scores"], **kw)


def _declaration_violations(name):
    """What of declaration ``name`` its function's signature and output contradict."""
    m = MEASURES[name]
    params = _params(m)
    out = []

    def check(cond, what):
        if not cond:
            out.append(f"{name}: {what}")

    check(list(params)[0] == "scores", "the first argument is not `scores`")
    check(set(m.data) == {p for p in params if p in D.DATA}, f"declared data {m.data} != the tensor parameters")
    for need in set(m.needs) - {"browsing"}:  # needed tensors are required arguments
        check(need in params and params[need].default is inspect.Parameter.empty, f"needed {need!r} is optional")
    check(("browsing" in m.needs) == ("browsing" in params), "`browsing` in needs and in the signature disagree")
    for opt in set(m.data) - set(m.needs) - {"scores", "mask"}:  # the others are optional (IAA's groups)
        check(params[opt].default is None, f"optional data {opt!r} does not default to None")
    required = {p for p, v in params.items() if v.default is v.empty and v.kind is not v.VAR_KEYWORD}
    check(required <= set(m.data), f"required arguments that are not data: {sorted(required - set(m.data))}")
    named = set(m.options) | set(m.option_ranges) | set(m.defaults) | set(m.ignore_global)
    if not isinstance(m.soft_groups, bool):
        named |= set(m.soft_groups)
    for opt in named:
        check(opt in params and opt not in D.DATA and params[opt].kind is inspect.Parameter.KEYWORD_ONLY,
              f"{opt!r} is not a keyword-only option of the function")
    for opt, value in m.defaults.items():  # evaluation defaults differ from the function's own
        check(opt not in params or value != m.default(opt), f"evaluation default {opt}={value!r} is the function's")
    for opt, values in m.options.items():  # the grid adds values: the default is always tested
        default = m.default(opt) if opt in params else object()
        check(not any(v is default or (type(v) is type(default) and v == default) for v in values),
              f"the grid of {opt!r} repeats the default")
    check(bool(m.description and m.source and m.validity), "description, source or validity is empty")
    check("000" not in m.source and "seeds" not in m.source, f"source cites a file: {m.source!r}")
    if not out:
        res = _small_batch(m)
        if m.output == "record":
            check(hasattr(res, "_fields") and (not m.loss_field or m.loss_field in res._fields),
                  "the record has no loss field")
        else:
            value = res[0] if isinstance(res, tuple) else res
            check(value.dim() - 1 == {"list": 0, "group": 1, "pair": 2}[m.output],
                  f"a {m.output} output of shape {tuple(value.shape)}")
    return out


@pytest.mark.parametrize("name", NAMES)
def test_the_declaration_matches_its_function(name):
    """The declaration against the signature (data tensors, needed / optional / required arguments, option names
    and grids, text fields) and the per-list output shape; every violation of the declaration at once."""
    violations = _declaration_violations(name)
    assert not violations, "\n".join(violations)


def test_the_declaration_check_can_fail(monkeypatch):
    ndcg_m = MEASURES["ndcg"]
    bad = dataclasses.replace(ndcg_m, options={**ndcg_m.options, "gain": (ndcg_m.default("gain"),)})
    monkeypatch.setitem(MEASURES, "ndcg", bad)
    assert any("repeats the default" in v for v in _declaration_violations("ndcg"))


@pytest.mark.parametrize("name", [n for n in NAMES if MEASURES[n].loss is not None])
def test_the_default_loss_reducer_fits_the_output(name):
    m = MEASURES[name]
    shape = REDUCERS[m.loss][0]
    if m.output != "record":
        assert shape == m.output
    else:
        out = _small_batch(m)
        value = getattr(out, m.loss_field)
        assert value.dim() - 1 == {"list": 0, "group": 1, "pair": 2}[shape]


@pytest.mark.parametrize("name", [n for n in NAMES if MEASURES[n].output == "record"])
def test_record_field_ranges_name_floating_fields(name):
    m = MEASURES[name]
    out = _small_batch(m)
    assert hasattr(out, "_fields")
    for f in m.field_ranges:
        assert f in out._fields and getattr(out, f).is_floating_point(), (name, f)


def test_default_range_for_and_field_range():
    awrf, rnd, mpc, ndcg_m = MEASURES["awrf"], MEASURES["rnd"], MEASURES["mpc"], MEASURES["ndcg"]
    assert awrf.default("distance") == inspect.signature(awrf.fn).parameters["distance"].default
    assert awrf.default("groups") is None and awrf.default("no_such_option") is None  # required / unknown
    assert awrf.range_for() == awrf.range_for({"browsing": "rbp:0.8"}) == (0.0, 1.0)
    assert awrf.range_for({"distance": "kl"}) == (0.0, math.inf)
    assert rnd.range_for({"normalize": False}) == (0.0, math.inf)
    # option values match by type and value: 0 is not False, so the default range applies
    assert rnd.range_for({"normalize": 0}) == (0.0, 1.0)
    assert mpc.field_range("std_error") == (0.0, math.inf)
    assert mpc.field_range("estimate") == (-MAX_RELEVANCE, MAX_RELEVANCE)
    assert mpc.field_range("n_pairs_unknown_field") == mpc.value_range
    assert ndcg_m.field_range("anything") == (0.0, 1.0)
    assert MEASURES["skew"].range_for() is None  # a signed log ratio: no documented bound


def test_accepts_soft_reads_the_options_and_their_defaults():
    pref = MEASURES["pref"]
    assert pref.default("delta") == "kl"
    assert pref.accepts_soft() and pref.accepts_soft({"delta": "kl"})
    assert not pref.accepts_soft({"delta": "nd"}) and not pref.accepts_soft({"delta": "rd"})
    assert MEASURES["dips"].accepts_soft({"tie_weight": 0.0}) and not MEASURES["rnd"].accepts_soft()


def test_direction_and_relevance_bounds():
    assert {MEASURES[n].direction for n in NAMES} == {"higher", "lower", "zero"}
    for n in NAMES:
        m = MEASURES[n]
        assert m.direction == {True: "higher", False: "lower", None: "zero"}[m.higher_is_better]
    assert MAX_RELEVANCE.scale == 1.0 and (-MAX_RELEVANCE).scale == -1.0 and -(-MAX_RELEVANCE) == MAX_RELEVANCE
    assert repr(MAX_RELEVANCE) == "MAX_RELEVANCE" and repr(RelevanceBound(0.5)) == "0.5 * MAX_RELEVANCE"
    assert MEASURES["rbp"].value_range == (0.0, MAX_RELEVANCE)


def _measure(**kw):
    base = dict(name="x", fn=ndcg, kind="utility", higher_is_better=True, needs=("relevance",), output="list",
                validity="v", description="d", source="s", data=("scores", "relevance", "mask"))
    base.update(kw)
    return Measure(**base)


@pytest.mark.parametrize("kw, field", [
    (dict(needs=("relevance", "clicks")), "needs"),
    (dict(output="record", loss="value"), "loss_field"),
    (dict(data=("relevance", "mask")), "data"),
    (dict(data=("scores", "weights")), "data"),
    (dict(data=("scores", "mask")), "data"),  # relevance is needed but not among the data
    (dict(value_range=(1.0, 0.0)), "value_range"),
    (dict(value_range=(0.0, float("nan"))), "value_range"),
    (dict(value_range=(False, 1.0)), "value_range"),
    (dict(value_range=[0.0, 1.0]), "value_range"),
    (dict(option_ranges={"k": {1: (2.0, 1.0)}}), "option_ranges"),
    (dict(field_ranges={"loss": (0.0, 1.0)}), "field_ranges"),
    (dict(output="record", field_ranges={"loss": (0.0, "one")}), "field_ranges"),
    (dict(options={"k": ()}), "options"),
    (dict(options={"k": [1, 2]}), "options"),
])
def test_malformed_declarations_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        _measure(**kw)


def test_well_formed_declaration_and_frozen_table_entries():
    m = _measure(value_range=(0.0, math.inf), options={"k": (1, 5)}, option_ranges={"k": {1: None}})
    assert m.range_for({"k": 1}) is None and m.range_for({"k": 5}) == (0.0, math.inf)
    _measure(value_range=(-MAX_RELEVANCE, MAX_RELEVANCE), output="record", field_ranges={"loss": (0.0, 1.0)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        MEASURES["dips"].loss = "gap_square"  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["NDCG", "no_such", None, ["dips"], 3])
def test_an_unknown_declaration_is_refused(bad):
    with pytest.raises(ValueError, match="`measure` must be one of"):
        get_declaration(bad)


def test_table_keys_and_lookup():
    assert all(MEASURES[n].name == n for n in NAMES) and len(NAMES) == len(D._DECLARED)
    assert get_declaration("ndcg") is MEASURES["ndcg"]
    assert set(D.BROWSING_SPECS) and all(
        "browsing" in _params(MEASURES[n]) for n in NAMES if "browsing" in MEASURES[n].options)
