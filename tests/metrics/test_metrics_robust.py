"""The robustness contract of every public function of torchfair.metrics, as property tests.

For valid input (what the README allows, degenerate lists included: all-tied scores, one group, one item, fully
padded lists, grades up to 1000, relevance 1e-30, soft membership summing to less than 1, float16 / bfloat16 /
float64) and every ordering (``Hard()``, ``Hard("average")``, ``SoftRank(0.1)``, ``PlackettLuce(samples=8)``):
values are finite, invalid entries are 0, the documented range holds for valid entries (exactly for hard and
Plackett-Luce orderings; relaxed orderings are approximations, see the module docstrings), gradients of the soft
orderings are finite and exactly zero on padding.  Invalid arguments raise ``ValueError`` naming the argument.

The fast profile runs in the default suite; ``-m slow`` runs the long one (10 000 examples per ordering).
The case table is :mod:`metrics_robust_cases`.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import metrics_robust_cases as mc
from torchfair import metrics as M
from torchfair.orderings import Hard, PlackettLuce, Sampled, SoftRank

FAST = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
SLOW = settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def scenarios(draw):
    return dict(B=draw(st.integers(1, 3)), N=draw(st.integers(1, 6)), G=draw(st.integers(1, 3)),
                score_kind=draw(st.sampled_from(mc.SCORE_KINDS)), rel_kind=draw(st.sampled_from(mc.REL_KINDS)),
                group_kind=draw(st.sampled_from(mc.GROUP_KINDS)), dtype=draw(st.sampled_from(mc.DTYPES)),
                pad_list=draw(st.booleans()), pad_items=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 16)))


def run_contract(sc, oname):
    """Every case of the table on one scenario under one ordering; returns the violations."""
    s, r, g, mask = mc.make_batch(torch.Generator().manual_seed(sc["seed"]), sc["B"], sc["N"], sc["G"],
                                  sc["score_kind"], sc["rel_kind"], sc["group_kind"], sc["dtype"], sc["pad_list"],
                                  sc["pad_items"])
    G = sc["G"]
    ordering = mc.orderings(sc["seed"])[oname]
    relaxed = oname == "softrank"
    problems = []
    for case in mc.CASES:
        if case.min_groups > G or (not case.soft_groups and g.is_floating_point()):
            continue
        if case.needs_known:
            known = (g[mask].sum(-1) > 0) if g.is_floating_point() else (g[mask] >= 0)
            if not known.any():
                continue  # documented: nothing to test without an item of known group
        grad = case.differentiable and oname in ("softrank", "pl")
        # Plackett-Luce gradients with logits spanning more than ~88 overflow inside the ordering (exp): the
        # ordering's, not the measures'.  Half-precision gradients beyond the float16 range
        # (SoftRank's tie temperature, unnormalised DCG of grade 100) are told apart in check_case.
        if oname == "pl" and sc["score_kind"] == "large":
            grad = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for p in mc.check_case(case, oname, ordering, s, r, g, mask, G, grad):
                if relaxed and "outside" in p:
                    continue  # relaxations are approximations: only finiteness is promised
                problems.append(f"{case.name} [{oname}]: {p}")
    return problems


@pytest.mark.parametrize("oname", ["hard", "hard_average", "softrank", "pl"])
def test_contract_fast(oname):
    @FAST
    @given(scenarios())
    def prop(sc):
        assert run_contract(sc, oname) == [], sc
    prop()


@pytest.mark.slow
@pytest.mark.parametrize("oname", ["hard", "hard_average", "softrank", "pl"])
def test_contract_slow(oname):
    @SLOW
    @given(scenarios())
    def prop(sc):
        assert run_contract(sc, oname) == [], sc
    prop()


@pytest.mark.parametrize("kinds", [
    # the degenerate corners, every one of them at least once in the default suite
    dict(score_kind="tied", rel_kind="grades1000", group_kind="soft_partial", dtype=torch.float32),
    dict(score_kind="tied", rel_kind="tiny", group_kind="one", dtype=torch.float64),
    dict(score_kind="few", rel_kind="zeros", group_kind="unknown", dtype=torch.bfloat16),
    dict(score_kind="large", rel_kind="grades10", group_kind="soft", dtype=torch.float16),
    dict(score_kind="random", rel_kind="binary", group_kind="ids", dtype=torch.float32),
])
@pytest.mark.parametrize("shape", [(3, 5, 2), (2, 1, 3), (1, 6, 1)])
def test_contract_degenerate_corners(kinds, shape):
    B, N, G = shape
    for oname in ("hard", "hard_average", "softrank", "pl"):
        sc = dict(B=B, N=N, G=G, pad_list=True, pad_items=True, seed=B * 100 + N, **kinds)
        assert run_contract(sc, oname) == [], (sc, oname)


# ------------------------------------------------------------------------------------------- invalid arguments
S4 = torch.tensor([[0.3, 0.2, 0.1, 0.0]])
R4 = torch.tensor([[2.0, 0.0, 1.0, 1.0]])
G4 = torch.tensor([[0, 1, 0, 1]])

#: (function, positional inputs, keyword arguments that must be refused, the argument the message names)
BAD = []
_SRG = ("s", "r", "g")
_SR = ("s", "r")
_SG = ("s", "g")
for fn, inputs in [(M.dcg, _SR), (M.ndcg, _SR), (M.precision, _SR), (M.recall, _SR), (M.mrr, _SR), (M.rbp, _SR),
                   (M.err, _SR), (M.dips, _SRG), (M.igi, _SRG), (M.ree, _SRG), (M.pairwise_accuracy, _SRG),
                   (M.discordant_fraction, _SR), (M.kendall_tau, _SR), (M.rank_parity, _SG),
                   (M.exposure_misallocation, _SRG), (M.expected_exposure, _SRG), (M.iaa, _SRG), (M.awrf, _SG),
                   (M.dp, _SG), (M.eur, _SRG), (M.rur, _SRG), (M.log_dp, _SG), (M.log_eur, _SRG),
                   (M.log_rur, _SRG), (M.exp_rr, _SG), (M.rnd, _SG), (M.rrd, _SG), (M.rkl, _SG), (M.pref, _SG),
                   (M.skew, _SG), (M.ndkl, _SG), (M.fair, _SG)]:
    BAD.append((fn, inputs, dict(reduction="foo"), "reduction"))
    BAD.append((fn, inputs, dict(reduction=None), "reduction"))
    if fn not in (M.pairwise_accuracy, M.discordant_fraction, M.kendall_tau, M.rank_parity, M.rbp):
        for k in (0, -1, 1.5, 2.0, True, "3"):
            BAD.append((fn, inputs, dict(k=k), "k"))
for fn, inputs in [(M.dips, _SRG), (M.exposure_misallocation, _SRG), (M.expected_exposure, _SRG), (M.iaa, _SRG),
                   (M.awrf, _SG), (M.dp, _SG), (M.exp_rr, _SG), (M.individual_dissatisfaction, _SRG),
                   (M.individual_misallocation, _SR)]:
    BAD.append((fn, inputs, dict(browsing="nope"), "browsing"))
    BAD.append((fn, inputs, dict(browsing=0.9), "browsing"))
for fn, inputs in [(M.dips, _SRG), (M.igi, _SRG), (M.ree, _SRG), (M.individual_dissatisfaction, _SRG)]:
    for tw in (float("nan"), 1.5, -0.1, "a", None):
        BAD.append((fn, inputs, dict(tie_weight=tw), "tie_weight"))
for fn, inputs in [(M.rnd, _SG), (M.rrd, _SG), (M.rkl, _SG), (M.fair, _SG), (M.dp, _SG), (M.eur, _SRG),
                   (M.rur, _SRG), (M.log_dp, _SG), (M.awrf, _SG), (M.monotonicity_test, _SG)]:
    for p in (-1, 1.5, True, "1"):
        BAD.append((fn, inputs, dict(protected=p), "protected"))
    # beyond the groups the caller declares: an error (beyond the groups a batch happens to hold: an absent group)
    BAD.append((fn, inputs, dict(protected=5, num_groups=2), "protected"))
for fn, inputs in [(M.dp, _SG), (M.eur, _SRG), (M.rur, _SRG)]:
    for p in (-1, 1.5, True, 1):
        BAD.append((fn, inputs, dict(reference=p), "reference"))
for fn, inputs in [(M.skew, _SG), (M.ndkl, _SG), (M.pref, _SG), (M.fair, _SG), (M.awrf, _SG)]:
    for t in ("uniform", "proportional", 3 + 0j):
        BAD.append((fn, inputs, dict(target=t), "target"))
for fn, inputs in [(M.rnd, _SG), (M.rrd, _SG), (M.rkl, _SG), (M.pref, _SG)]:
    for st_ in (0, 1.5, 2.0, None):
        BAD.append((fn, inputs, dict(step=st_), "step"))
    BAD.append((fn, inputs, dict(normalize="yes"), "normalize"))
BAD += [
    (M.pref, _SG, dict(delta="js"), "delta"),
    (M.awrf, _SG, dict(distance="l2"), "distance"),
    (M.exposure_misallocation, _SRG, dict(target="uniform"), "target"),
    (M.individual_misallocation, _SR, dict(target=None), "target"),
    (M.iaa, _SRG, dict(amortize="yes"), "amortize"),
    (M.dp, _SG, dict(amortize=1), "amortize"),
    (M.precision, _SR, dict(adaptive_k="no"), "adaptive_k"),
    (M.precision, _SR, dict(threshold=float("inf")), "threshold"),
    (M.rbp, _SR, dict(p=float("nan")), "p"),
    (M.rbp, _SR, dict(k=0), "k"),
    (M.err, _SR, dict(max_grade=float("inf")), "max_grade"),
    (M.ndcg, _SR, dict(gain="cubic"), "gain"),
    (M.monotonicity_test, _SG, dict(k=0), "k"),
    (M.ndcg, _SR, dict(return_valid="yes"), "return_valid"),
    (M.dips, _SRG, dict(return_valid=1), "return_valid"),
    (M.iaa, _SRG, dict(return_valid=1), "return_valid"),
    (M.rur, _SRG, dict(amortize=True, return_valid=1), "return_valid"),
    (M.individual_misallocation, _SR, dict(return_valid=None), "return_valid"),
]


def _args(inputs):
    return [{"s": S4, "r": R4, "g": G4}[x] for x in inputs]


@pytest.mark.parametrize("fn, inputs, kwargs, name", BAD,
                         ids=[f"{f.__name__}-{list(kw)[0]}={kw[list(kw)[0]]!r}" for f, _, kw, _ in BAD])
def test_invalid_arguments_raise_value_error_naming_them(fn, inputs, kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        fn(*_args(inputs), **kwargs)


def test_helper_arguments_are_checked():
    D = torch.rand(2, 2)
    for kw, name in [(dict(protected=-1), "protected"), (dict(protected=1.5), "protected"),
                     (dict(protected=0, reference=0), "reference"), (dict(reference=1), "reference"),
                     (dict(valid=torch.ones(3, 3, dtype=torch.bool)), "valid")]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            M.pairwise_gap(D, **kw)
    with pytest.raises(ValueError, match="`reference`"):
        M.pairwise_gap(torch.rand(3, 3), protected=0)  # three groups: the reference must be named
    for kw, name in [(dict(protected=-1), "protected"), (dict(protected=1.5), "protected"),
                     (dict(reference=1), "reference"), (dict(valid=torch.ones(2, 2)), "valid")]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            M.accuracy_gaps(D, **kw)
    with pytest.raises(ValueError, match="`p`"):
        M.misallocation_norm(torch.rand(2), p=0.5)
    with pytest.raises(ValueError, match="`k`"):
        M.ideal_exposure(R4, k=0)
    with pytest.raises(ValueError, match="`k`"):
        M.utility.ideal_dcg(R4, k=1.5)


def test_measures_have_real_signatures_and_docstrings():
    """Every public function: no *args / **kwargs passthrough, a docstring with a formula or an example."""
    import inspect
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
    import pathlib
    import re
    root = pathlib.Path(M.__file__).parent
    for f in ("pairwise", "exposure", "prefix", "utility", "calibration", "monotonicity", "common"):
        text = (root / f"{f}.py").read_text()
        assert not re.search(r"``00[0-4]``", text), f
