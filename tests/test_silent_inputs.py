"""Inputs that used to pass silently (a NaN or infinite gradient, a value marked valid that depends on an absent
group, an ignored mismatch) or fail with a raw IndexError/KeyError/RuntimeError: each gives a finite gradient,
an undefined (0, invalid) value or a ValueError naming the argument."""
import pytest
import torch

from torchfair.compat import fairranktune as ft
from torchfair.losses import DELTRLoss, DIPSLoss, FairPGRankLoss, PairwiseCorrelationLoss
from torchfair.metrics import awrf, dcg, dips, dp, ndcg
from torchfair.orderings import FastSoftRank, NeuralSort, SoftRank


# ------------------------------------------------------------------------------- DCG with overflowing gains
@pytest.mark.parametrize("ordering", [FastSoftRank(1.0, scale="none"), NeuralSort(1.0), SoftRank(1.0)],
                         ids=["fastsoftrank", "neuralsort", "softrank"])
@pytest.mark.parametrize("grades", [[103.0, 128.0], [3.0, 200.0], [0.0, 1000.0]])
def test_dcg_gain_overflow_past_cutoff_has_finite_gradient(ordering, grades):
    """A float32 grade >= 128 past the cut-off: its gain 2**r - 1 is infinite, the gradient was inf * 0 = NaN."""
    s = torch.tensor([2.0, -5.0], requires_grad=True)
    value, valid = dcg(s, torch.tensor(grades), k=1, ordering=ordering, return_valid=True)
    value.backward()
    assert torch.isfinite(s.grad).all()
    assert not bool(valid) and float(value.detach()) == 0.0  # undefined in float32: the gain is not representable
    # ndcg cancels the scale: defined, finite gradient
    s2 = torch.tensor([2.0, -5.0], requires_grad=True)
    v2, ok2 = ndcg(s2, torch.tensor(grades), k=1, ordering=ordering, return_valid=True)
    v2.backward()
    assert bool(ok2) and torch.isfinite(s2.grad).all()


def test_dcg_gain_overflow_hard_and_float64():
    r = torch.tensor([3.0, 200.0])
    s = torch.tensor([2.0, -5.0])
    v, ok = dcg(s, r, k=1, return_valid=True)
    assert not bool(ok) and float(v) == 0.0
    v64, ok64 = dcg(s.double(), r.double(), k=1, return_valid=True)
    assert bool(ok64) and float(v64) == pytest.approx(7.0)
    assert float(dcg(s, torch.tensor([3.0, 127.0]), k=1)) == pytest.approx(7.0)  # representable: unchanged


# ------------------------------------------------------------------------------- FRT compat
def test_erbe_ltwo_no_known_item_has_finite_gradient():
    s = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    r = ft.ERBE(s, torch.tensor([-1, -1, -1]), 0.5, "LTwo", num_groups=2, ordering=NeuralSort(1.0))
    assert float(r.value.detach()) == 0.0
    r.value.backward()
    assert torch.isfinite(s.grad).all() and (s.grad == 0).all()
    assert float(ft.LTwo(torch.tensor([3.0, 4.0]))) == 5.0
    assert torch.isnan(ft.LTwo(torch.tensor([float("nan"), 1.0])))


@pytest.mark.parametrize("fn", ["EXP", "ERBR"])
@pytest.mark.parametrize("scores", [torch.tensor(1.0), torch.tensor([True, False, True]),
                                    torch.tensor([1 + 1j, 2, 3]), torch.zeros(1, 3, 1)],
                         ids=["0d", "bool", "complex", "3d"])
def test_frt_bad_scores_dtype_or_shape_is_value_error(fn, scores):
    args = (torch.tensor([1.0, 0.0, 1.0]), 0.5) if fn == "ERBR" else ()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast of complex scores with a warning only
        with pytest.raises(ValueError, match="`rankings`"):
            getattr(ft, fn)(scores, torch.tensor([0, 1, 0]), *args)


# ------------------------------------------------------------------------------- AWRF with an absent protected group
@pytest.mark.parametrize("protected", [2, 5, 99])
def test_awrf_protected_absent_is_undefined(protected):
    s = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    g = torch.tensor([[0, 1, 0], [0, 1, 1]])
    v, ok = awrf(s, g, protected=protected, return_valid=True)
    assert not ok.any() and (v == 0).all()
    _, ok_dp = dp(s, g, protected=protected, return_valid=True)
    assert not ok_dp.any()


def test_awrf_protected_absent_from_one_list():
    s = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    g = torch.tensor([[0, 1, 0], [0, 0, 0]])
    v, ok = awrf(s, g, protected=1, return_valid=True)
    assert ok.tolist() == [True, False] and float(v[1]) == 0.0
    assert float(v[0]) == pytest.approx(float(awrf(s, g)[0, 1]))
    assert awrf(s, g, return_valid=True)[1].all()  # the [B, G] form keeps |0 - p_g|


def test_awrf_protected_out_of_range_is_value_error():
    s = torch.tensor([3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="`protected`"):
        awrf(s, torch.tensor([0, 1, 0]), protected=99, num_groups=2)
    soft = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="`protected`"):
        awrf(s, soft, protected=2)
    assert awrf(s, soft, protected=1).shape == ()


# ------------------------------------------------------------------------------- losses: group ids and counts
def _batch():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 5, generator=g)
    r = torch.rand(2, 5, generator=g)
    soft = torch.softmax(torch.randn(2, 5, 3, generator=g), -1)
    return s, r, soft


@pytest.mark.parametrize("loss", [PairwiseCorrelationLoss, FairPGRankLoss, DELTRLoss])
def test_loss_protected_beyond_soft_groups_is_value_error(loss):
    s, r, soft = _batch()
    with pytest.raises(ValueError, match="`protected`"):
        loss(protected=99)(s, r, soft)
    with pytest.raises(ValueError, match="`protected`"):
        loss(protected=99, num_groups=2)(s, r, torch.tensor([[0, 1, 0, 1, 0]] * 2))
    assert torch.isfinite(loss(protected=2)(s, r, soft))


@pytest.mark.parametrize("loss", [DIPSLoss, DELTRLoss])
def test_loss_num_groups_mismatch_with_soft_groups_is_value_error(loss):
    s, r, soft = _batch()
    with pytest.raises(ValueError, match="num_groups=4") as measure_error:
        dips(s, r, soft, num_groups=4)
    with pytest.raises(ValueError) as loss_error:
        loss(num_groups=4)(s, r, soft)
    assert str(loss_error.value) == str(measure_error.value)
    assert torch.isfinite(loss(num_groups=3)(s, r, soft))


# ------------------------------------------------------------------------------- NeuralSort: finite gradients
@pytest.mark.parametrize("fn", [ndcg, dcg])
@pytest.mark.parametrize("temperature", [1e-20, 1e-39, 1e-44])
def test_neuralsort_tied_scores_tiny_temperature_finite_gradient(fn, temperature):
    """Tied scores: the relaxed permutation's gradient is ~N^2 / tau, infinite at tau = 1e-44 in float32."""
    x = torch.ones(1, 4, requires_grad=True)
    r = torch.tensor([[1.0, 0.0, 2.0, 3.0]])
    v = fn(x, r, ordering=NeuralSort(temperature, scale="none"), reduction="sum")
    v.backward()
    assert torch.isfinite(v) and torch.isfinite(x.grad).all()
    assert float(v.detach()) == pytest.approx(float(fn(x.detach(), r, ordering=NeuralSort(1e-3, scale="none"),
                                                        reduction="sum")), rel=1e-5)  # tied: tau-free value


@pytest.mark.parametrize("scores", [[[1.0, 1.0, 0.0, 0.0]], [[1e30, 0.0, -1e30, 2.0]], [[3e38, -3e38, 1.0, 0.0]]])
def test_neuralsort_logits_do_not_overflow(scores):
    """Score gaps over the temperature beyond the dtype's range made the logits inf - inf (NaN value and gradient)."""
    x = torch.tensor(scores, requires_grad=True)
    r = torch.tensor([[1.0, 0.0, 2.0, 3.0]])
    v = ndcg(x, r, ordering=NeuralSort(1e-39, scale="none"), reduction="sum")
    v.backward()
    assert torch.isfinite(v) and torch.isfinite(x.grad).all()
    assert 0.0 <= float(v.detach()) <= 1.0 + 1e-6  # gaps far below the extremes round away in the logits: no check


from hypothesis import given, settings, strategies as st  # noqa: E402

_SCORE = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 1e-30, 1e4, -1e4, 6e4, 1e30, -1e30]),
                   st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32))


@settings(max_examples=60, deadline=None)
@given(scores=st.lists(_SCORE, min_size=1, max_size=6), data=st.data(),
       temperature=st.sampled_from([1e-44, 1e-30, 1e-6, 0.1, 10.0]), scale=st.sampled_from(["none", "std"]),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
       fn=st.sampled_from(["ndcg", "dcg", "err", "mrr", "precision", "rbp"]))
def test_neuralsort_utility_gradients_finite(scores, data, temperature, scale, dtype, fn):
    import torchfair.metrics as M
    n = len(scores)
    x = torch.tensor([scores]).to(dtype)
    if not torch.isfinite(x).all():  # beyond the half type's range: not a score of that dtype
        return
    if dtype == torch.float16 and temperature < 0.1:
        # documented limit: the gradient at tied scores is ~N^2 / tau, beyond float16's 65 504 for tau below
        # ~4 N^2 / 65 504 (score units); the metrics compute half inputs in float32 and return the gradient in half
        return
    x.requires_grad_(True)
    real = data.draw(st.integers(1, n))
    mask = torch.arange(n)[None, :] < real
    r = torch.tensor([data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))], dtype=torch.float32)
    v = getattr(M, fn)(x, r, mask=mask, ordering=NeuralSort(temperature, scale=scale), reduction="sum")
    v.backward()
    assert torch.isfinite(v)
    assert torch.isfinite(x.grad).all()


# ------------------------------------------------------------------------------- import graph of the orderings
def test_orderings_import_graph_is_acyclic():
    """``base`` and ``hard`` imported each other (``hard`` at module level, ``base`` inside ``contract``)."""
    import ast
    import pathlib

    import torchfair.orderings as pkg
    root = pathlib.Path(pkg.__file__).parent
    graph = {}
    for path in root.glob("*.py"):
        name = path.stem
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):  # every import, function-level ones included
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                deps.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if (root / f"{d}.py").exists() and d != name}
    graph.pop("__init__", None)
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in graph.get(m, ()):
            assert state.get(d) != "open", f"import cycle: {' -> '.join(path + [d])}"
            if d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m, [m])
    from torchfair.orderings.base import LevelPairWeight  # noqa: F401  (public names where they were)
    from torchfair.orderings.hard import HardOrderedBatch, contract_all_pairs  # noqa: F401


# ------------------------------------------------------------------------------- wrong dtypes and shapes
def _wrong_inputs():
    S, R, G = torch.randn(2, 4), torch.rand(2, 4), torch.tensor([[0, 1, 0, 1]] * 2)
    return [
        ("dcg complex relevance", lambda: dcg(S, torch.ones(2, 4, dtype=torch.complex64)), "`relevance`"),
        ("awrf complex groups", lambda: awrf(S, torch.ones(2, 4, dtype=torch.complex64), protected=1), "`groups`"),
        ("EXP int ids, 2-D groups", lambda: ft.EXP(torch.ones(2, 4, dtype=torch.int8), G), "`groups`"),
        ("ERBR complex relevance", lambda: ft.ERBR(S, G, torch.ones(2, 4, dtype=torch.complex64), 0.5), "`relevance`"),
        ("DIPSLoss list relevance", lambda: DIPSLoss()(S, [[1.0, 2.0]], G), "`relevance`"),
        ("FairPGRankLoss list relevance", lambda: FairPGRankLoss()(S, [[1.0, 2.0]], G), "`relevance`"),
        ("NeuralSort empty lists", lambda: NeuralSort()(torch.ones(2, 0), torch.ones(2, 0, dtype=torch.bool)),
         "`scores`"),
    ]


@pytest.mark.parametrize("case", range(len(_wrong_inputs())))
def test_wrong_dtype_or_shape_is_value_error(case):
    import warnings
    name, call, arg = _wrong_inputs()[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent cast with a warning
        with pytest.raises(ValueError, match=arg):
            call()
