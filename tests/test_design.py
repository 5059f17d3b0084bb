"""The design: one declaration per measure, losses as one transformation of measures, the regulariser.

References here are written independently of the code under test: the loss of a measure is recomputed from the
measure's own value with the reduction written out as a loop over the lists.
"""
import inspect
import math

import pytest
import torch

import torchfair
from torchfair import metrics
from torchfair.evaluation import get_measure
from torchfair.metrics import FairnessMetric
from torchfair.evaluation import metric as metric_module
from torchfair.losses import (REDUCERS, DELTRLoss, DIPSLoss, FairnessRegularizer, FairPGRankLoss, ListNetLoss,
                              MeasureLoss, PairwiseAccuracyGapLoss, PairwiseCorrelationLoss, deltr_loss, dips_loss,
                              fair_pg_rank_loss, measure_loss, pairwise_accuracy_gap_loss, pairwise_correlation_loss)
from torchfair.metrics import MEASURES, Measure, get_declaration
from torchfair.orderings import Hard, SoftRank

torch.manual_seed(0)
B, N = 5, 9
S = torch.randn(B, N, dtype=torch.float64)
R = torch.randint(0, 4, (B, N)).to(torch.float64)
G = torch.randint(0, 2, (B, N))
G[:, 0], G[:, 1] = 0, 1

#: public functions of torchfair.metrics that are not per-list measures (helpers, per-item values, tests, records)
NOT_MEASURES = {"individual_dissatisfaction", "pairwise_gap", "accuracy_gaps", "misallocation_norm",
                "individual_misallocation", "ideal_exposure", "log_dp", "log_eur", "log_rur", "prefix_mass",
                "matched_pairs", "mpc_cluster_variance", "matched_pair_calibration", "monotonicity_test",
                "isotonic_regression", "get_declaration", "ideal_dcg", "ideal_ranking",
                "fa_ir_test", "fa_ir_mtable", "fa_ir_adjusted_alpha",  # FA*IR's test, its table and its significance
                "metric_class"}  # the factory of the torchmetrics classes


def test_every_measure_function_is_declared():
    functions = {n for n in metrics.__all__ if inspect.isfunction(getattr(metrics, n))}
    declared = {m.fn.__name__ for m in MEASURES.values()}
    assert functions - declared - NOT_MEASURES == set()


def test_declaration_rejects_bad_fields():
    with pytest.raises(ValueError, match="`kind`"):
        Measure("x", metrics.ndcg, "speed", True, ("relevance",), "list", "v", "d", "s")
    with pytest.raises(ValueError, match="`output`"):
        Measure("x", metrics.ndcg, "utility", True, ("relevance",), "cube", "v", "d", "s")
    with pytest.raises(ValueError, match="`measure`"):
        get_declaration("no_such_measure")


def test_registry_and_metrics_read_the_declarations():
    for name, m in MEASURES.items():
        spec = get_measure(name)
        assert spec.declaration is m
        assert spec.description == m.description
        assert spec.higher_is_better is m.higher_is_better
        assert spec.kind == m.kind
    classes = [getattr(metric_module, n) for n in metric_module.__all__
               if n not in ("FairnessMetric", "metric_class")]
    covered = set()
    for cls in classes:
        assert issubclass(cls, FairnessMetric)
        spec_name = (cls(eps=0.5) if cls.__name__ == "MPC" else cls()).request.name
        covered.add(spec_name)
        assert cls.higher_is_better is MEASURES[spec_name].higher_is_better
    assert covered == set(MEASURES)


def test_import_does_not_inject_classes_through_globals():
    src = inspect.getsource(torchfair.evaluation)
    assert "globals()" not in src
    assert "globals()" not in inspect.getsource(metric_module)


# ------------------------------------------------------------------------------------------ the transformation
def _mean_valid(per, ok):
    vals = [p for p, o in zip(per, ok) if o]
    return sum(vals) / len(vals) if vals else 0.0


def _dips_gap_reference(ordering, mode, protected=None):
    M, V = metrics.dips(S, R, G, num_groups=2, ordering=ordering, return_valid=True)
    per, ok = [], []
    for b in range(B):
        v = bool(V[b, 0, 1] and V[b, 1, 0])
        d = float(M[b, 0, 1] - M[b, 1, 0])
        if mode == "abs":
            per.append(abs(d))
        elif mode == "square":
            per.append(d * d)
        else:  # one-sided for protected p against the other group
            per.append(max(0.0, d if protected == 0 else -d))
        ok.append(v)
    return _mean_valid(per, ok)


@pytest.mark.parametrize("mode", ["abs", "square", "one_sided"])
def test_dips_loss_is_the_reduced_measure(mode):
    o = SoftRank(0.3)
    for p in (0, 1):
        got = dips_loss(S, R, G, mode=mode, protected=p, num_groups=2, ordering=o)
        want = _dips_gap_reference(o, mode, p)
        assert math.isclose(got.item(), want, rel_tol=1e-10, abs_tol=1e-12)
        got2 = measure_loss("dips", S, R, G, reducer="gap_" + mode, protected=p, num_groups=2, ordering=o)
        assert got2.item() == got.item()


def test_any_declared_measure_becomes_a_loss():
    """rND as a loss: the reduced value of the measure on the same ordering, finite gradients."""
    o = SoftRank(0.2)
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(B, 30, dtype=torch.float64, generator=gen).requires_grad_()
    g = torch.randint(0, 2, (B, 30), generator=gen)
    val, ok = metrics.rnd(s, g, ordering=o, return_valid=True)
    want = _mean_valid(val.tolist(), ok.tolist())
    loss = measure_loss("rnd", s, groups=g, ordering=o)
    assert math.isclose(loss.item(), want, rel_tol=1e-12)
    loss.backward()
    assert torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0
    module = MeasureLoss("ndcg", k=5, ordering=o)
    nd, okn = metrics.ndcg(s, R[:, :1].expand(B, 30).contiguous(), k=5, ordering=o, return_valid=True)
    got = module(s, R[:, :1].expand(B, 30).contiguous())
    # the "one_minus" reducer is max(0, 1 - x): a relaxed NDCG may exceed 1
    assert math.isclose(got.item(), _mean_valid((1 - nd).clamp(min=0).tolist(), okn.tolist()), rel_tol=1e-12)


@pytest.mark.parametrize("name", sorted(n for n, m in MEASURES.items() if m.loss))
def test_every_declared_loss_is_finite_with_gradients(name):
    s = torch.randn(3, 8, requires_grad=True)
    r = torch.randint(0, 3, (3, 8)).float()
    g = torch.randint(0, 2, (3, 8))
    m = MEASURES[name]
    kwargs = {"num_groups": 2} if "groups" in m.needs else {}
    loss = measure_loss(name, s, r if "relevance" in m.needs else None, g if "groups" in m.needs else None, **kwargs)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


def test_transformation_errors_name_the_argument():
    with pytest.raises(ValueError, match="`reducer`"):
        measure_loss("dips", S, R, G, reducer="median")
    with pytest.raises(ValueError, match="`reducer`"):
        measure_loss("dips", S, R, G, reducer="l1")  # a group reducer on a pair measure
    with pytest.raises(ValueError, match="`reducer`"):
        measure_loss("rank_parity", S, None, G)  # no default loss for this measure
    with pytest.raises(ValueError, match="`colour`"):
        measure_loss("dips", S, R, G, colour="red")
    with pytest.raises(ValueError, match="`ordering`"):
        measure_loss("top1_exposure_gap", S, None, G, ordering=Hard())
    with pytest.raises(ValueError, match="`reduction`"):
        measure_loss("dips", S, R, G, reduction="foo")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="`protected`"):
            dips_loss(S, R, G, mode="one_sided", protected=bad)
    with pytest.raises(ValueError, match="`mode`"):
        dips_loss(S, R, G, mode="cube")
    with pytest.raises(ValueError, match="`norm`"):
        torchfair.losses.exposure_misallocation_loss(S, R, G, norm="l3")
    with pytest.raises(ValueError, match="`which`"):
        pairwise_accuracy_gap_loss(S, R, G, which="all")


ONE_GROUP = torch.zeros(B, N, dtype=torch.long)


@pytest.mark.parametrize("loss", [
    lambda s: deltr_loss(s, ONE_GROUP),
    lambda s: fair_pg_rank_loss(s, R.float(), ONE_GROUP),
    lambda s: pairwise_correlation_loss(s, R.float(), ONE_GROUP),
    lambda s: pairwise_accuracy_gap_loss(s, R.float(), ONE_GROUP),
    lambda s: dips_loss(s, R.float(), ONE_GROUP, mode="one_sided", protected=1),
    lambda s: DELTRLoss()(s, None, ONE_GROUP),
    lambda s: FairPGRankLoss()(s, R.float(), ONE_GROUP),
    lambda s: PairwiseCorrelationLoss()(s, R.float(), ONE_GROUP),
    lambda s: PairwiseAccuracyGapLoss()(s, R.float(), ONE_GROUP),
], ids=["deltr", "fair_pg", "corr", "acc_gap", "dips_one_sided", "DELTRLoss", "FairPGRankLoss", "CorrLoss",
        "AccGapLoss"])
def test_losses_on_a_batch_without_the_protected_group_give_zero(loss):
    """The protected group (id 1) is absent and num_groups is not given: 0 with zero gradient, no IndexError."""
    s = torch.randn(B, N, requires_grad=True)
    out = loss(s)
    assert out.item() == 0.0
    out.backward()
    assert s.grad is None or (s.grad == 0).all()


def test_pairwise_correlation_with_huge_scores_is_finite():
    s = (torch.randn(B, N) * 1e19).requires_grad_()
    out = pairwise_correlation_loss(s, R.float(), G)
    out.backward()
    assert torch.isfinite(out) and 0 <= out.item() <= 1 and torch.isfinite(s.grad).all()


# ------------------------------------------------------------------------------------------ the regulariser
class _Counting(DIPSLoss):
    calls = 0

    def forward(self, *args):
        type(self).calls += 1
        return super().forward(*args)


def test_regularizer_step_counter_resumes_from_state_dict():
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=2.0, schedule="linear", warmup_steps=10)
    for _ in range(4):
        reg.step()
    state = reg.state_dict()
    fresh = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=2.0, schedule="linear", warmup_steps=10)
    assert fresh.current_lambda == 0.0
    fresh.load_state_dict(state)
    assert fresh.current_step == 4 and math.isclose(fresh.current_lambda, 0.8)


@pytest.mark.parametrize("every,expected", [(0, 0), (1, 6), (3, 2)])
def test_regularizer_logging_of_the_fairness_term_at_lambda_zero(every, expected):
    _Counting.calls = 0
    reg = FairnessRegularizer(ListNetLoss(), _Counting(num_groups=2), lam=0.0, log_fairness_every=every)
    s = torch.randn(B, N, requires_grad=True)
    for _ in range(6):
        total = reg(s, R.float(), G)
    assert _Counting.calls == expected
    assert ("fairness" in reg.last) == (every == 1)  # the 6th call is a logging call only for every=1
    assert torch.equal(total.detach(), reg.last["utility"])


def test_regularizer_terms_give_each_gradient_separately():
    reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=0.5)
    s = torch.randn(B, N, requires_grad=True)
    t = reg.terms(s, R.float(), G)
    gu, = torch.autograd.grad(t["utility"], s, retain_graph=True)
    gf, = torch.autograd.grad(t["fairness"], s, retain_graph=True)
    s2 = s.detach().clone().requires_grad_()
    reg(s2, R.float(), G).backward()
    assert torch.allclose(s2.grad, gu + 0.5 * gf, atol=1e-6)
    with pytest.raises(ValueError, match="`lam`"):
        FairnessRegularizer(ListNetLoss(), DIPSLoss(), lam=float("nan"))
    with pytest.raises(ValueError, match="`schedule`"):
        FairnessRegularizer(ListNetLoss(), DIPSLoss(), schedule="cosine")
    with pytest.raises(ValueError, match="`log_fairness_every`"):
        FairnessRegularizer(ListNetLoss(), DIPSLoss(), log_fairness_every=-1)


# ------------------------------------------------------------------------------------------ public surface
import torchfair.browsing  # noqa: E402
import torchfair.compat.expeval  # noqa: E402
import torchfair.compat.fairranktune  # noqa: E402
import torchfair.orderings  # noqa: E402
import torchfair.rerank  # noqa: E402

#: public callables whose **kwargs are documented options passed on (a measure's options, Metric kwargs)
KWARGS_ALLOWED = {"measure_loss", "MeasureLoss", "FairnessMetric", "evaluate_lists", "compute_columns", "metric_class",
                  "targeted_rerank",
                  "PositionShares", "PooledMPC"}  # torchmetrics.Metric's own keywords (sync settings...)


def _public():
    mods = [torchfair.metrics, torchfair.losses, torchfair.orderings, torchfair.browsing, torchfair.evaluation,
            torchfair.compat.fairranktune, torchfair.compat.expeval, torchfair.rerank]
    for mod in mods:
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{mod.__name__}.{name}", name, obj


def test_every_public_function_has_a_docstring_and_a_real_signature():
    missing, vague = [], []
    for qual, name, obj in _public():
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(qual)
        if inspect.isclass(obj) and (issubclass(obj, (FairnessMetric, Exception)) or inspect.isabstract(obj)
                                     or name in ("LossModule", "Ordering", "OrderedBatch", "BrowsingModel")):
            continue  # metric classes take a measure's options; abstract bases are not called
        try:
            params = inspect.signature(obj).parameters.values()
        except (TypeError, ValueError):
            continue
        kinds = {p.kind for p in params}
        if inspect.Parameter.VAR_POSITIONAL in kinds or (
                inspect.Parameter.VAR_KEYWORD in kinds and name not in KWARGS_ALLOWED):
            vague.append(qual)
    assert missing == [] and vague == []
