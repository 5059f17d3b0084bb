"""torchfair.metrics.classes: the torchmetrics accumulators -- exact corpus means against the measures list by
list, invalid lists excluded, single columns and the named classes, distributed merges; one real class per
declared measure (defined at module level, source visible), with the measure's real signature and its declared
statics (``torchfair.evaluation.metric`` re-exports them: tests/evaluation/test_metric.py)."""
import ast
import inspect
import textwrap
import typing

import pytest
import torch

import torchfair.metrics.classes as M
from evaluation_lists import direct_mean, make_lists, pad
from torchfair.metrics import DIPS, IGI, MEASURES, REE, FairnessMetric, KendallTau, PairwiseAccuracy, dips
from torchfair.metrics import pairwise as pw
from torchfair.metrics.registry import available_measures, get_measure, parse_browsing

CLASSES = [n for n in M.__all__ if n not in ("FairnessMetric", "metric_class")]
DATA = {"scores", "relevance", "groups", "mask", "num_groups", "return_valid", "reduction", "validate_args",
        "ideal_relevance"}


def _measure_of(cls):
    return cls.measure


@pytest.mark.parametrize("name", CLASSES)
def test_signature_lists_every_option_of_the_measure_function(name):
    """Every option of the function is a keyword-only parameter of the class; besides them ``num_groups``,
    ``column``, ``validate_args`` and ``**kwargs`` (torchmetrics' own keywords: ``sync_on_compute``...)."""
    cls = getattr(M, name)
    fn = get_measure(_measure_of(cls)).fn
    expected = {p for p, prm in inspect.signature(fn).parameters.items()
                if p not in DATA and p not in ("column", "label") and prm.kind is not inspect.Parameter.VAR_KEYWORD}
    params = inspect.signature(cls).parameters
    named = {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    assert named == {"num_groups", "column", "validate_args"} | expected
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in named)
    assert [n for n, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD] == ["kwargs"]


# --- the classes are real classes, one per declared measure, as their declarations say ---------------------------
#: what the source of a measure's class writes for an annotation of its function (the rest is written as it is)
_ALIASES = {"Union[BrowsingModel, str, None]": "BrowsingLike"}


def _wrap(head: str, items, indent: int, end: str = ""):
    lines, cur = [], head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else end)
        if len(cur) + 1 + len(piece) > 120:
            lines.append(cur.rstrip())
            cur = " " * indent + piece
        else:
            cur += ("" if cur.endswith("(") else " ") + piece
    return lines + [cur]


def init_source(measure: str) -> str:
    """The source of the ``__init__`` that takes ``measure``'s options (keyword-only, in the function's order, with
    the declared defaults and the function's types): written once, in the measure's class or in the private base
    that the measures with these same options share."""
    spec = get_measure(measure)
    options = M._option_parameters(spec)
    raw = inspect.signature(spec.fn).parameters
    params = ["self", "*", "num_groups: Optional[int] = None", "column: Optional[str] = None",
              "validate_args: bool = True"]
    for p in options:
        ann = raw[p.name].annotation
        ann = _ALIASES.get(ann, ann) if isinstance(ann, str) else inspect.formatannotation(ann)
        default = f'"{p.default}"' if isinstance(p.default, str) else repr(p.default)
        params.append(f"{p.name}: {ann} = {default}" if ann is not inspect.Parameter.empty else f"{p.name}={default}")
    lines = _wrap("    def __init__(", params + ["**kwargs: Any"], 17, end=") -> None:")
    lines += _wrap("        super().__init__(", ["self.measure", "num_groups=num_groups", "column=column",
                                                 "validate_args=validate_args"], 25, end=",")
    lines += _wrap("                         **self._options(", ["kwargs"] + [f"{p.name}={p.name}" for p in options],
                   41, end="))")
    return "\n".join(lines) + "\n"


def expected_source(name: str, measure: str, base: str = "") -> str:
    """The source of ``class <name>`` in torchfair/metrics/classes.py for the declared ``measure``: what a failing
    test below prints, to paste there (a new declared measure, a changed option or description).  With ``base``
    (the private class holding the ``__init__`` of the measures whose options are the same) the class inherits its
    ``__init__``; without, it writes its own."""
    spec = get_measure(measure)
    doc, opts = M.class_doc(spec).split("\n\n")
    wrap = dict(width=116, break_on_hyphens=False, break_long_words=False)
    lines = [f"class {name}({base or 'FairnessMetric'}):"]
    lines += textwrap.wrap(doc, initial_indent='    """', subsequent_indent="    ", **wrap) + [""]
    lines += textwrap.wrap(opts, initial_indent="    ", subsequent_indent="    ", **wrap) + ['    """', ""]
    lines += [f'    measure = "{measure}"', f"    higher_is_better = {spec.higher_is_better!r}",
              "    is_differentiable = False", "    full_state_update = False"]
    return "\n".join(lines) + "\n" + ("" if base else "\n" + init_source(measure))


def _and(names) -> str:
    names = [f":class:`{n}`" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def expected_base_source(base: str, users) -> str:
    """The source of the private ``class <base>`` holding the ``__init__`` shared by the classes ``users`` (in
    ``__all__``'s order), whose measures take the same options (names, order, defaults and types)."""
    doc = f"The ``__init__`` of {_and(users)}: their measures take the same options, defaults and types."
    lines = [f"class {base}(FairnessMetric):"]
    lines += textwrap.wrap(doc, initial_indent='    """', subsequent_indent="    ", width=116, break_on_hyphens=False,
                           break_long_words=False)
    lines[-1] += '"""'
    return "\n".join(lines) + "\n\n" + init_source(getattr(M, users[0]).measure)


def _init_owner(cls) -> type:
    """The class whose body writes ``cls.__init__``: ``cls`` itself or its private base."""
    return next(c for c in cls.__mro__ if "__init__" in vars(c))


def _owners():
    """``{class writing an __init__: [the measure classes using it, in __all__'s order]}``."""
    out = {}
    for n in CLASSES:
        out.setdefault(_init_owner(getattr(M, n)), []).append(n)
    return out


def _suggested_source(name: str, measure: str) -> str:
    """The source to add for a new declared ``measure``'s class ``name``: inheriting the private base already
    written for its options, or with a new base shared with the class that writes them itself, or with its own
    ``__init__`` where no class takes these options."""
    want = init_source(measure)
    for owner, users in _owners().items():
        if init_source(getattr(M, users[0]).measure) == want:
            if owner.__name__ not in users:
                return expected_source(name, measure, owner.__name__)
            return (expected_source(name, measure, "_Name") + f"\n\nand {owner.__name__}'s __init__ moved into:\n\n"
                    + expected_base_source("_Name", [*users, name]))
    return expected_source(name, measure)


def test_one_class_per_declared_measure():
    """The classes are exactly the declared measures' (each declared measure accumulates per-list columns)."""
    measures = [getattr(M, n).measure for n in CLASSES]
    assert len(set(measures)) == len(measures)
    missing = sorted(set(MEASURES) - set(measures))
    assert not missing, "declared measures without a class; add to torchfair/metrics/classes.py (and __all__, " \
        "torchfair.metrics._METRIC_CLASSES):\n\n" + "\n\n".join(_suggested_source(m.title().replace("_", ""), m)
                                                                  for m in missing)
    assert set(measures) == set(MEASURES)
    assert set(M.__all__) == {"FairnessMetric", "metric_class", *CLASSES}


@pytest.mark.parametrize("name", CLASSES)
def test_each_class_is_a_real_class_defined_in_its_module(name):
    """Written as ``class DIPS(FairnessMetric): ...`` (its own ``__init__``) or ``class DP(_ExposureRatioMetric):
    ...`` (the ``__init__`` of the measures with the same options, from a private base written the same way) at the
    top level of torchfair/metrics/classes.py, so that IDEs, type checkers and ``inspect.getsource`` see it (not
    made by a call), its statics declared in its own body."""
    cls = getattr(M, name)
    owner = _init_owner(cls)
    assert cls.__qualname__ == cls.__name__ == name and cls.__module__ == "torchfair.metrics.classes"
    assert owner is cls and cls.__bases__ == (FairnessMetric,) or \
        cls.__bases__ == (owner,) and owner.__bases__ == (FairnessMetric,)
    assert owner.__name__.startswith("_") != (owner is cls) and getattr(M, owner.__name__) is owner
    assert owner.__qualname__ == owner.__name__ and owner.__module__ == "torchfair.metrics.classes"
    assert inspect.getsource(cls).startswith(f"class {name}({cls.__bases__[0].__name__}):")
    top = {node.name: node for node in ast.parse(inspect.getsource(M)).body if isinstance(node, ast.ClassDef)}
    assert name in top and owner.__name__ in top
    assert "__init__" in {f.name for f in top[owner.__name__].body if isinstance(f, ast.FunctionDef)}
    assert cls.__init__.__qualname__ == f"{owner.__name__}.__init__" and not hasattr(cls.__init__, "__signature__")
    assert {"measure", "higher_is_better", "is_differentiable", "full_state_update"} <= set(vars(cls))


@pytest.mark.parametrize("name", CLASSES)
def test_each_class_is_what_its_declaration_says(name):
    """Statics, signature (names, order, defaults, types) and docstring of the class equal what the declaration and
    the measure function say, and so does the source of the class and of the ``__init__`` it writes or inherits; on
    a mismatch the message holds the class's expected source."""
    cls = getattr(M, name)
    decl = MEASURES[cls.measure]
    spec = get_measure(cls.measure)
    owner = _init_owner(cls)
    base = "" if owner is cls else owner.__name__
    hint = f"\nexpected in torchfair/metrics/classes.py:\n\n{expected_source(name, cls.measure, base)}"
    if base:
        hint += f"\nwith its base's __init__ (a measure with other options: its own __init__, as above without " \
            f"the base):\n\n{init_source(cls.measure)}"
    assert cls.higher_is_better is decl.higher_is_better, hint
    assert cls.is_differentiable is False and cls.full_state_update is False, hint
    assert cls.__doc__ is not None and " ".join(cls.__doc__.split()) == " ".join(M.class_doc(spec).split()), hint
    for sig in (inspect.signature(cls.__init__), inspect.signature(owner.__init__)):
        params = list(sig.parameters.values())[1:]
        want = M._option_parameters(spec)
        assert [p.name for p in params] == ["num_groups", "column", "validate_args", *(p.name for p in want),
                                            "kwargs"], hint
    assert list(inspect.signature(cls).parameters) == [p.name for p in params], hint
    hints = typing.get_type_hints(cls.__init__)
    for got, exp in zip(params[3:], want):
        assert got.kind is inspect.Parameter.KEYWORD_ONLY, hint
        assert M._same(got.default, exp.default) or (got.default is None and exp.default is None), hint
        assert hints.get(got.name, inspect.Parameter.empty) == exp.annotation, hint
    assert inspect.getsource(cls).strip() == expected_source(name, cls.measure, base).strip(), hint
    assert inspect.getsource(owner.__init__) == init_source(cls.measure), hint


def test_each_signature_is_written_once():
    """The measures whose options are the same (names, order, defaults and types) share one ``__init__``, written in
    a private base of theirs (``_ExposureRatioMetric`` for DP, EUR, RUR); a base serves two classes or more, is no
    measure's class, and its source is what their declarations say."""
    owners = _owners()
    by_init = {}
    for owner, users in owners.items():
        by_init.setdefault(init_source(getattr(M, users[0]).measure), []).append((owner.__name__, users))
    shared = {k: v for k, v in by_init.items() if len(v) > 1}
    assert not shared, "classes writing the same __init__; give them one private base:\n\n" + "\n\n".join(
        expected_base_source("_Name", [n for _, users in v for n in users]) for v in shared.values())
    bases = {c for c in vars(M).values() if isinstance(c, type) and issubclass(c, FairnessMetric)
             and c.__name__.startswith("_")}
    assert bases == {o for o, users in owners.items() if o.__name__ not in users}  # every private base is used
    for base in bases:
        users = owners[base]
        assert len(users) >= 2 and "measure" not in vars(base) and base.__name__ not in M.__all__, base
        assert inspect.getsource(base) == expected_base_source(base.__name__, users), \
            f"\nexpected in torchfair/metrics/classes.py:\n\n{expected_base_source(base.__name__, users)}"


def test_options_reach_the_measure_and_defaults_change_nothing():
    gen = torch.Generator().manual_seed(0)
    s, r = torch.randn(4, 7, generator=gen), torch.randint(0, 3, (4, 7), generator=gen).float()
    g = torch.randint(0, 2, (4, 7), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    m = M.DIPS(tie_weight=0.0, browsing="uniform")
    m.update(s, r, g)
    ref = dips(s, r, g, tie_weight=0.0, browsing="uniform", num_groups=2)
    got = m.compute()
    assert torch.allclose(got["dips_gap"].double(), (ref[..., 0, 1] - ref[..., 1, 0]).double().mean(), atol=1e-6)
    # every default given explicitly (as LightningCLI does): the same request, columns and values
    defaults = {p.name: p.default for p in inspect.signature(M.DIPS).parameters.values()
                if p.kind is not inspect.Parameter.VAR_KEYWORD}
    a, b = M.DIPS(), M.DIPS(**defaults)
    assert a.request.options == b.request.options and a.columns == b.columns


def test_unknown_option_names_it():
    with pytest.raises(ValueError, match="tie_wieght"):
        M.DIPS(tie_wieght=0.0)


def test_lightningcli_parser_sees_the_options():
    from jsonargparse import ArgumentParser

    p = ArgumentParser()
    p.add_class_arguments(M.NDCG, "metric")
    ns = p.parse_args(["--metric.k", "5", "--metric.gain", "linear"])
    assert ns.metric.k == 5 and ns.metric.gain == "linear"
    m = M.NDCG(**vars(ns.metric))
    assert m.request.options == {"k": 5, "gain": "linear"}


def test_the_metric_classes_live_beside_the_functions():
    """One import path: ``torchfair.metrics.DIPS`` beside ``torchfair.metrics.dips`` (torchmetrics keeps a domain's
    classes in its domain package), loaded on first access; ``torchfair.evaluation`` does not export them, and
    ``import torchfair.metrics`` does not import torchmetrics."""
    import subprocess
    import sys

    import torchfair.evaluation as ev
    import torchfair.metrics as tm

    classes = [n for n in M.__all__]
    assert set(classes) <= set(tm.__all__) and set(classes) <= set(dir(tm))
    for n in classes:
        assert getattr(tm, n) is getattr(M, n), n
        assert n not in ev.__all__ and not hasattr(ev, n), n
    assert tm.DIPS.measure == "dips" and tm.dips is pw.dips
    code = ("import sys, torchfair.metrics as tm; a = 'torchmetrics' in sys.modules; tm.NDCG; "
            "print(a, 'torchmetrics' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_earlier_names_are_gone():
    """``evaluation.evaluate`` (now ``evaluate_lists``) and the RBP metric class ``evaluation.RBP`` (now
    ``RankBiasedPrecision``; ``RBP`` is the browsing model) were dropped before the 0.1.0 release, without shims."""
    import pytest

    import torchfair.evaluation as ev

    for old in ("evaluate", "RBP"):
        assert old not in ev.__all__
        with pytest.raises(AttributeError):
            getattr(ev, old)


@pytest.mark.parametrize("cls,fn,kw", [(DIPS, pw.dips, {"browsing": "uniform", "tie_weight": 0.5}),
                                       (DIPS, pw.dips, {}),
                                       (IGI, pw.igi, {}), (REE, pw.ree, {"tie_weight": 0.5})])
def test_metric_equals_mean_of_direct_per_list(cls, fn, kw):
    lists = make_lists(20, seed=2)
    metric = cls(**kw)
    for start in range(0, 20, 6):  # ragged batches of padded lists
        metric.update(*pad(lists[start:start + 6]))
    out = metric.compute()
    fkw = {"browsing": parse_browsing(kw["browsing"])} if "browsing" in kw else {}
    if "tie_weight" in kw:
        fkw["tie_weight"] = kw["tie_weight"]
    name = metric.request.label
    for col, pick in [("AB", lambda x: x[0, 1]), ("BA", lambda x: x[1, 0])]:
        mean, n = direct_mean(lists, fn, pick, **fkw)
        assert metric.counts[f"{name}_{col}"] == n
        assert float(out[f"{name}_{col}"]) == pytest.approx(mean, abs=1e-10)
    # the gap over lists where both directions are defined
    vals = []
    for d in lists:
        v, ok = fn(d["scores"], d["relevance"], d["groups"], num_groups=2, return_valid=True, **fkw)
        if ok[0, 1] and ok[1, 0]:
            vals.append(float(v[0, 1] - v[1, 0]))
    assert float(out[f"{name}_gap"]) == pytest.approx(sum(vals) / len(vals), abs=1e-10)


def test_metric_invalid_lists_excluded():
    # list 2 has one group only -> every DIPS column invalid there; it must not drag the mean to 0
    lists = make_lists(3, seed=3, max_len=6)
    lists[0]["groups"] = torch.tensor([0, 1] * 3)[:len(lists[0]["scores"])] if len(lists[0]["scores"]) > 1 else \
        lists[0]["groups"]
    one_group = {"scores": torch.tensor([0.3, 0.2, 0.9], dtype=torch.float64),
                 "relevance": torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64), "groups": torch.tensor([0, 0, 0])}
    both = DIPS()
    both.update(*pad(lists + [one_group]))
    only = DIPS()
    only.update(*pad(lists))
    for k, v in only.compute().items():
        assert float(both.compute()[k]) == pytest.approx(float(v))
    assert both.counts == only.counts


def test_metric_single_column_and_named_subclasses():
    lists = make_lists(8, seed=4)
    m = DIPS(column="dips_gap")
    m.update(*pad(lists))
    out = m.compute()
    assert out.dim() == 0
    full = DIPS()
    full.update(*pad(lists))
    assert float(out) == pytest.approx(float(full.compute()["dips_gap"]))
    k = KendallTau()
    k.update(*pad(lists))
    mean, _ = direct_mean(lists, lambda s, r, g, num_groups, return_valid: pw.kendall_tau(s, r, return_valid=True),
                          lambda x: x)
    assert float(k.compute()["kendall_tau"]) == pytest.approx(mean)
    pa = PairwiseAccuracy()
    pa.update(*pad(lists))
    assert "pairwise_accuracy_inter" in pa.compute()
    assert DIPS.full_state_update is False and isinstance(m, FairnessMetric)
    with pytest.raises(ValueError):
        DIPS(column="nope")


def test_metric_ids_beyond_num_groups_raise():
    m = DIPS()  # two groups
    with pytest.raises(ValueError):
        m.update(torch.rand(1, 3), torch.rand(1, 3), torch.tensor([[0, 1, 2]]))


def test_metric_distributed_style_merge():
    lists = make_lists(16, seed=5, G=3)
    a, b, whole = DIPS(num_groups=3), DIPS(num_groups=3), DIPS(num_groups=3)
    a.update(*pad(lists[:9]))
    b.update(*pad(lists[9:]))
    whole.update(*pad(lists))
    # 1) torchmetrics' merge_state (uses each state's dist_reduce_fx = sum)
    merged = DIPS(num_groups=3)
    merged.merge_state(a)
    merged.merge_state(b)
    # 2) summing the states by hand, as an all-reduce would
    summed = DIPS(num_groups=3)
    summed.total = a.total + b.total
    summed.count = a.count + b.count
    summed._update_count = 2  # as after a sync; avoids torchmetrics' compute-before-update warning
    want = whole.compute()
    for m in (merged, summed):
        got = m.compute()
        assert list(got) == list(want)
        for k in want:
            assert float(got[k]) == pytest.approx(float(want[k]), abs=1e-12)
    assert a._reductions["total"] is not None  # declared with a reduction (sum) for sync


def test_optional_metric_classes_exist_only_when_registered():
    import torchfair.metrics as tm
    for cls_name, measure in [("NDCG", "ndcg"), ("AWRF", "awrf"), ("RND", "rnd")]:
        assert hasattr(tm, cls_name) == (measure in available_measures())


@pytest.mark.skipif("ndcg" not in available_measures(), reason="utility module absent")
def test_ndcg_metric_matches_direct():
    from torchfair.metrics.utility import ndcg
    lists = make_lists(10, seed=6)
    m = FairnessMetric("ndcg@3")
    m.update(*pad(lists))
    vals = []
    for d in lists:
        v, ok = ndcg(d["scores"], d["relevance"], k=3, return_valid=True)
        if ok:
            vals.append(float(v))
    assert float(m.compute()["ndcg@3"]) == pytest.approx(sum(vals) / len(vals))
