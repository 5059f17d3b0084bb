"""GPU readiness: no host synchronisation in the losses' forward and backward nor in the torchmetrics
updates, and the fairness losses under ``torch.compile(fullgraph=True)``.

The ``meta`` device holds shapes but no data, so every host synchronisation raises there: ``.item()``,
``.tolist()``, ``bool(t)`` / ``int(t)`` / a Python ``if`` on a tensor, and the ops with data-dependent output shapes
(``torch.unique``, ``nonzero``, boolean indexing).  Running a loss forward and backward on ``meta`` therefore proves
it launches no synchronisation on a CUDA device either.  The policy on data-dependent value checks (CPU: ValueError;
CUDA and torch.compile: ``torch._assert_async``; other devices: skipped; ``num_groups`` needed off the CPU) is
documented in :mod:`torchfair._validation` and tested here too.

``torch.compile``: the fairness losses (DIPS, exposure misallocation, pairwise accuracy gap, Fair-PG-Rank, DELTR,
pairwise correlation) on SoftRank and NeuralSort compile with ``fullgraph=True`` (no graph break, value checks
included) and give the eager values; so do the utility losses and Fair-PG-Rank on its default Plackett-Luce
policy (checked with ``torch._dynamo.explain`` while writing this).  What still breaks the graph, by design:
integer ``groups`` without ``num_groups`` on the CPU (inferring ``max id + 1`` is an ``.item()``; pass
``num_groups``), and ``FastSoftRank`` (its numba kernel cannot be traced, and its pure-torch isotonic regression
loops until no block is pooled, a data-dependent number of rounds).
"""
from __future__ import annotations

import inspect
import math

import pytest
import torch

import torchfair._validation as V
import torchfair.losses as L
from torchfair.evaluation import metric as tm
from torchfair.metrics import MEASURES
from torchfair.metrics.utility import err
from torchfair.orderings import FastSoftRank, NeuralSort, PlackettLuce, SoftRank, SoftSort

META = torch.device("meta")
B, N, G = 3, 7, 2


def _inputs(device, *, soft_groups=False, requires_grad=True):
    s = torch.randn(B, N, device=device, requires_grad=requires_grad)
    r = torch.rand(B, N, device=device)
    if soft_groups:
        g = torch.softmax(torch.randn(B, N, G, device=device), -1)
    else:
        g = torch.randint(0, G, (B, N), device=device)
    mask = torch.ones(B, N, dtype=torch.bool, device=device)
    mask[:, -2:] = False  # padded items: a no-op on meta, but the masked code paths run
    return s, r, g, mask


def _run_loss(loss, device=META, **kw):
    if isinstance(loss, torch.nn.Module):
        loss = loss.to(device)  # as a training run moves it with the model (MultiMeasureLoss holds a buffer)
    s, r, g, mask = _inputs(device, **kw)
    out = loss(s, r, g, mask)
    assert out.dim() == 0 and out.device.type == torch.device(device).type
    out.backward()
    assert s.grad is not None and s.grad.shape == s.shape
    return out


# ------------------------------------------------------------------------------------------------ the premise
def test_meta_device_raises_on_every_kind_of_host_synchronisation():
    x = torch.ones(3, device=META)
    for sync in (lambda: x.sum().item(), lambda: x.tolist(), lambda: bool(x.any()), lambda: int(x.sum()),
                 lambda: torch.unique(x), lambda: x[x > 0], lambda: x.nonzero()):
        with pytest.raises((RuntimeError, NotImplementedError)):
            sync()


# ------------------------------------------------------------------------------------------------ every loss
#: every loss module of torchfair.losses, with the option sets that take different code paths
_SOFT = {"SoftRank": SoftRank(0.1), "NeuralSort": NeuralSort(0.1), "SoftSort": SoftSort(0.1)}
_LOSS_CASES = [
    ("DIPSLoss", {}), ("DIPSLoss", {"mode": "square"}), ("DIPSLoss", {"mode": "one_sided", "protected": 1}),
    ("DIPSLoss", {"browsing": "cascade:0.9"}), ("DIPSLoss", {"browsing": "topk:3:rbp:0.8"}),
    ("ExposureMisallocationLoss", {}), ("ExposureMisallocationLoss", {"target": "ea", "norm": "l2sq"}),
    ("ExposureMisallocationLoss", {"target": "ea-dp"}), ("ExposureMisallocationLoss", {"norm": "ee-l"}),
    ("PairwiseAccuracyGapLoss", {}), ("PairwiseAccuracyGapLoss", {"which": "both"}),
    ("DELTRLoss", {}), ("FairPGRankLoss", {}), ("PairwiseCorrelationLoss", {}),
    ("ListNetLoss", {}), ("ListMLELoss", {}), ("ApproxNDCGLoss", {}), ("ApproxNDCGLoss", {"k": 3}),
    ("NeuralNDCGLoss", {}), ("PLNDCGLoss", {"samples": 4}),
    ("LambdaNDCGLoss", {}), ("LambdaNDCGLoss", {"k": 3}), ("LambdaNDCGLoss", {"k": None, "block": 2}),
    ("LambdaNDCGLoss", {"k": 3, "gain": "linear"}),
    ("MultiMeasureLoss", {"terms": ["dips", "pairwise_accuracy"]}),
    ("MultiMeasureLoss", {"terms": ["dips", "pairwise_accuracy:0.5"], "normalize": "start"}),
]


def test_the_cases_cover_every_loss_of_torchfair_losses():
    modules = {n for n in L.__all__ if n.endswith("Loss") and n not in ("MeasureLoss",)}
    assert modules == {n for n, _ in _LOSS_CASES}


#: options a loss cannot be built without (MultiMeasureLoss needs its terms)
_REQUIRED = {"MultiMeasureLoss": {"terms": ["dips", "pairwise_accuracy"]}}


def _options(cls):
    """The construction options of a loss module: a LossModule's ``_options``, else its ``__init__``'s."""
    if hasattr(cls, "_options"):
        return cls._options
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")


def _loss(name, opts, ordering=None):
    cls = getattr(L, name)
    kw = {**_REQUIRED.get(name, {}), **opts}
    if "num_groups" in _options(cls):
        kw["num_groups"] = G
    if ordering is not None:
        kw["ordering"] = ordering
    return cls(**kw)


@pytest.mark.parametrize("name,opts", _LOSS_CASES, ids=[f"{n}-{o}" for n, o in _LOSS_CASES])
def test_every_loss_runs_forward_and_backward_on_meta_with_its_default_ordering(name, opts):
    _run_loss(_loss(name, opts))  # validate_args=True: the value checks are skipped on meta, not synchronised


@pytest.mark.parametrize("ordering", list(_SOFT), ids=list(_SOFT))
@pytest.mark.parametrize("name", sorted({n for n, _ in _LOSS_CASES
                                         if "ordering" in _options(getattr(L, n))}))
def test_every_loss_with_an_ordering_runs_on_meta_with_each_soft_ordering(name, ordering):
    _run_loss(_loss(name, {}, _SOFT[ordering]))


@pytest.mark.parametrize("name", ["DIPSLoss", "ExposureMisallocationLoss", "PairwiseAccuracyGapLoss",
                                  "FairPGRankLoss", "PairwiseCorrelationLoss", "MultiMeasureLoss"])
def test_losses_with_soft_group_membership_run_on_meta(name):
    _run_loss(_loss(name, {}, SoftRank(0.1) if "ordering" in _options(getattr(L, name)) else None),
              soft_groups=True)


_PL = {"pl_rank": PlackettLuce(samples=4), "score_function": PlackettLuce(samples=4, estimator="score_function")}


@pytest.mark.parametrize("estimator", list(_PL))
def test_fairness_losses_on_a_plackett_luce_policy_run_on_meta(estimator):
    for name in ("DIPSLoss", "ExposureMisallocationLoss", "PairwiseAccuracyGapLoss", "MultiMeasureLoss"):
        _run_loss(_loss(name, {}, _PL[estimator]))


_LOSS_MEASURES = sorted(n for n, m in MEASURES.items() if m.loss is not None)


@pytest.mark.parametrize("measure", _LOSS_MEASURES)
def test_every_declared_measure_as_a_loss_runs_on_meta(measure):
    m = MEASURES[measure]
    takes_ordering = "ordering" in inspect.signature(m.fn).parameters
    for ordering in ([SoftRank(0.1), NeuralSort(0.1)] if takes_ordering else [None]):
        opts = {"max_grade": 1.0} if measure == "err" else {}
        loss = L.MeasureLoss(measure, ordering=ordering, num_groups=G if "groups" in m.needs else None, **opts)
        _run_loss(lambda s, r, g, mask: loss(s, r if "relevance" in m.needs else None,
                                             g if "groups" in m.needs else None, mask))


def test_the_regularizer_runs_on_meta():
    reg = L.FairnessRegularizer(L.ListNetLoss(), L.DIPSLoss(num_groups=G), lam=0.5, schedule="linear",
                                warmup_steps=4)
    reg.step()
    _run_loss(reg)


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="FastSoftRank's pure-torch isotonic regression stops when no block is pooled any more "
                          "(orderings/fast_soft_rank.py, isotonic_nonincreasing: `bool(link.any())` and "
                          "`int(g[:, -1].max())` each round): one host synchronisation per round")
def test_fast_soft_rank_runs_on_meta():
    _run_loss(_loss("DIPSLoss", {}, FastSoftRank()))


# ------------------------------------------------------------------------------------------------ the policy
def test_off_the_cpu_integer_groups_need_num_groups():
    s, r, g, mask = _inputs(META)
    with pytest.raises(ValueError, match="`num_groups` must be given"):
        L.dips_loss(s, r, g, mask=mask)
    # soft membership carries G in its shape: nothing to infer
    s, r, g, mask = _inputs(META, soft_groups=True)
    L.dips_loss(s, r, g, mask=mask).backward()


def test_on_the_cpu_num_groups_is_inferred_as_before():
    s = torch.tensor([[3., 2., 1.]])
    r = torch.tensor([[1., 2., 0.]])
    g = torch.tensor([[0, 2, -1]])
    assert V.prepare(s, r, g).membership.shape == (1, 3, 3)
    assert V.prepare(s, r, torch.tensor([[-1, -1, -1]])).membership.shape == (1, 3, 1)


def test_value_checks_become_async_asserts_where_the_device_is_asynchronous(monkeypatch):
    # the CUDA / torch.compile mode, exercised on the CPU (where torch._assert_async raises at once)
    monkeypatch.setattr(V, "value_check_mode", lambda device: "assert")
    s, r, g, mask = _inputs("cpu")
    with pytest.raises(RuntimeError, match="`relevance` must be non-negative"):
        L.dips_loss(s, -r, g, num_groups=G, mask=mask)
    with pytest.raises(RuntimeError, match=r"`groups` ids must lie in \[0, 2\)"):
        L.dips_loss(s, r, g + 5, num_groups=G, mask=mask)
    L.dips_loss(s, r, g, num_groups=G, mask=mask).backward()  # valid inputs pass


def test_value_checks_are_skipped_where_they_cannot_run(monkeypatch):
    monkeypatch.setattr(V, "value_check_mode", lambda device: "skip")
    s, r, g, mask = _inputs("cpu")
    L.dips_loss(s, -r, g, num_groups=G, mask=mask)  # not checked (as with validate_args=False)


def test_on_the_cpu_value_checks_raise_value_errors_naming_the_argument():
    s, r, g, mask = _inputs("cpu")
    with pytest.raises(ValueError, match="`relevance` must be non-negative"):
        L.dips_loss(s, -r, g, num_groups=G, mask=mask)
    with pytest.raises(ValueError, match=r"`groups` ids must lie in \[0, 2\) \(or -1 for unknown group\); got "
                                         r"values in \[5, 6\]"):
        L.dips_loss(s, r, g + 5, num_groups=G, mask=mask)
    with pytest.raises(ValueError, match="`scores` must be finite"):
        L.dips_loss(torch.full((B, N), math.nan), r, g, num_groups=G)
    with pytest.raises(ValueError, match="`mask` has no real item"):
        L.dips_loss(s, r, g, num_groups=G, mask=torch.zeros(B, N, dtype=torch.bool))


def test_value_check_modes_by_device():
    assert V.value_check_mode(torch.device("cpu")) == "raise"
    assert V.value_check_mode(torch.device("cuda")) == "assert"
    assert V.value_check_mode(META) == "skip"


def test_err_infers_its_largest_grade_without_a_host_read():
    s = torch.tensor([[3., 2., 1., 0.], [1., 2., 3., 4.]])
    r = torch.tensor([[2., 0., 3., 1.], [0., 0., 0.5, 0.]])
    inferred = err(s, r)
    explicit = torch.stack([err(s[i], r[i], max_grade=3.0) for i in range(2)])  # batch max (at least 1): 3
    torch.testing.assert_close(inferred, explicit)
    # the definition by hand for list 0: ranking r = 2, 0, 3, 1 with R = (2**r - 1) / 2**3
    R = [(2 ** x - 1) / 8 for x in (2., 0., 3., 1.)]
    want, keep = 0.0, 1.0
    for k, x in enumerate(R):
        want += keep * x / (k + 1)
        keep *= 1 - x
    assert inferred[0].item() == pytest.approx(want, rel=1e-6)
    s_meta, r_meta, _, mask = _inputs(META)
    L.measure_loss("err", s_meta, r_meta, mask=mask).backward()  # inferred max_grade: no synchronisation


# ------------------------------------------------------------------------------------------------ torchmetrics
#: metric classes whose update synchronises, and why
_METRIC_SYNC = {
    "MPC": "matched-pair calibration builds the set of matched cross-group pairs, whose size depends on the scores "
           "(metrics/calibration.py: `nonzero`)",
}
#: the exact pairwise measures (under Hard(): sweeps over rank bits with shapes fixed by N, no sync)
_PAIRWISE_METRICS = ("DIPS", "IGI", "REE", "PairwiseAccuracy", "KendallTau", "DiscordantFraction")
_METRICS = [n for n in tm.__all__ if n not in ("FairnessMetric", "metric_class")]
_METRIC_OPTIONS = {"MPC": {"closest": 3}, "ERR": {"max_grade": 1.0}}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=_METRIC_SYNC[n]))
                                  if n in _METRIC_SYNC else n for n in _METRICS])
def test_every_torchmetrics_class_updates_on_meta(name):
    m = getattr(tm, name)(**_METRIC_OPTIONS.get(name, {})).to(META)
    s, r, g, mask = _inputs(META, requires_grad=False)
    m.update(s, r, g, mask)
    assert m.total.device.type == "meta" and m.total.shape == (len(m.columns),)


@pytest.mark.parametrize("name", _PAIRWISE_METRICS)
def test_pairwise_torchmetrics_update_on_meta_on_a_soft_ordering(name):
    m = getattr(tm, name)(ordering=SoftRank(0.1)).to(META)
    s, r, g, mask = _inputs(META, requires_grad=False)
    m.update(s, r, g, mask)


def test_metric_update_on_meta_is_not_vacuous():
    # the same update on the CPU accumulates real numbers (so the meta run above ran the real code path)
    m = tm.NDCG()
    s, r, g, mask = _inputs("cpu", requires_grad=False)
    m.update(s, r, g, mask)
    assert m.count.item() == B and 0 < m.compute()["ndcg"].item() <= 1


# ------------------------------------------------------------------------------------------------ torch.compile
def _fairness_losses(ordering):
    return {
        "dips": lambda s, r, g: L.dips_loss(s, r, g, num_groups=G, ordering=ordering),
        "exposure_misallocation": lambda s, r, g: L.exposure_misallocation_loss(s, r, g, num_groups=G,
                                                                                ordering=ordering),
        "pairwise_accuracy_gap": lambda s, r, g: L.pairwise_accuracy_gap_loss(s, r, g, num_groups=G,
                                                                              ordering=ordering),
        "fair_pg_rank": lambda s, r, g: L.fair_pg_rank_loss(s, r, g, num_groups=G, ordering=ordering),
        "deltr": lambda s, r, g: L.deltr_loss(s, g, num_groups=G),
        "pairwise_correlation": lambda s, r, g: L.pairwise_correlation_loss(s, r, g, num_groups=G),
    }


def _cpu_batch():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(4, 12, generator=gen)
    r = torch.randint(0, 3, (4, 12), generator=gen).float()
    g = torch.randint(0, G, (4, 12), generator=gen)
    return s, r, g


def test_dips_loss_traces_into_one_graph():
    s, r, g = _cpu_batch()
    torch._dynamo.reset()
    ex = torch._dynamo.explain(_fairness_losses(SoftRank(0.1))["dips"])(s, r, g)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, [b.reason for b in ex.break_reasons]


@pytest.mark.parametrize("k", [3, None], ids=["top-k pairs", "blocked all pairs"])
def test_lambda_ndcg_loss_traces_into_one_graph(k):
    # its Python loops run over shapes and options only (k, block), never over tensor values
    s, r, _ = _cpu_batch()
    torch._dynamo.reset()
    ex = torch._dynamo.explain(lambda x: L.lambda_ndcg_loss(x, r, k=k, block=4))(s)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, [b.reason for b in ex.break_reasons]


@pytest.mark.slow
@pytest.mark.parametrize("ordering", ["SoftRank", "NeuralSort"])
def test_fairness_losses_compile_with_fullgraph_and_match_eager(ordering):
    losses = _fairness_losses(_SOFT[ordering])
    if ordering == "NeuralSort":  # the loss-independent ones were compiled with SoftRank already
        losses = {k: v for k, v in losses.items() if k in ("dips", "exposure_misallocation")}
    s, r, g = _cpu_batch()
    for name, fn in losses.items():
        torch._dynamo.reset()
        s1, s2 = s.clone().requires_grad_(), s.clone().requires_grad_()
        eager = fn(s1, r, g)
        eager.backward()
        compiled = torch.compile(fn, fullgraph=True)(s2, r, g)  # fullgraph: any graph break raises
        compiled.backward()
        assert eager.item() > 0, name  # a loss that is 0 would compare nothing
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-6, msg=name)
        torch.testing.assert_close(s2.grad, s1.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_err_metric_with_binary_grades_can_be_built_and_updated():
    # column_names probes the measure on synthetic grades 0..2: the probe must not validate them against max_grade
    m = tm.ERR(max_grade=1.0)
    m.update(torch.tensor([[3., 2., 1.]]), torch.tensor([[1., 0., 1.]]))
    assert m.compute()["err"].item() == pytest.approx(0.5 + 0.5 * 0.5 / 3)
