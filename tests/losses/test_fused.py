"""The fused CPU path of the fairness losses on RampRank (torchfair/losses/_fused.py, torchfair/kernels/ramp_losses.py)
against the torch path, the reference: values and gradients equal in float64 (1e-10) on batches with padding
(NaN in padded slots), tied scores, unknown group ids, one-group and fully padded lists; gradcheck; float32 close;
the gate takes the fused path only where documented."""
import pytest
import torch

from torchfair.losses import dips_loss, exposure_misallocation_loss, pairwise_accuracy_gap_loss
from torchfair.kernels import MIN_ELEMENTS as _MIN
from torchfair.losses.transform import per_list_loss
from torchfair.orderings import RampRank, SoftRank

pytest.importorskip("numba")

FUSED = RampRank(0.1, backend="numba")
REF = RampRank(0.1, backend="torch")


def _batch(B=12, N=30, dtype=torch.float64, seed=0, levels=4, G=2, equal_list=True):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=g, dtype=dtype)
    s[:, 3] = s[:, 4]  # tied scores
    if equal_list:
        s[1] = 0.5  # a list of equal scores
    r = torch.randint(0, levels, (B, N), generator=g).to(dtype)
    groups = torch.randint(0, G, (B, N), generator=g)
    groups[:, 7] = -1  # unknown group
    groups[2] = 0  # one group only: undefined
    mask = torch.rand(B, N, generator=g) < 0.8
    mask[:, 0] = True
    mask[3] = False  # fully padded
    mask[4, 2:] = False  # two items
    s = torch.where(mask, s, torch.full((), float("nan"), dtype=dtype))  # padding holds garbage
    return s, r, groups, mask


def _fused_path(per):
    return type(per.grad_fn).__name__.startswith("_FusedLoss")


def _both(s, r, groups, mask, ordering=(FUSED, REF), loss=dips_loss, **kw):
    out = []
    for o in ordering:
        x = s.clone().requires_grad_()
        v = loss(x, r, groups, mask=mask, ordering=o, **kw)
        v.sum().backward()
        out.append((v.detach(), x.grad))
    return out


@pytest.mark.parametrize("kw", [dict(num_groups=2), dict(num_groups=2, mode="square"),
                                dict(num_groups=2, tie_weight=0.0, browsing="rbp:0.7"),
                                dict(num_groups=3, reduction="none"), dict(num_groups=2, reduction="sum"),
                                dict(num_groups=2, validate_args=False)],
                         ids=["abs", "square", "tie0-rbp07", "3groups-none", "sum", "unchecked"])
def test_fused_dips_equals_the_torch_path_float64(kw):
    s, r, groups, mask = _batch(G=kw.get("num_groups", 2))
    (v1, g1), (v2, g2) = _both(s, r, groups, mask, **kw)
    assert torch.allclose(v1, v2, rtol=0, atol=1e-10)
    assert torch.allclose(g1, g2, rtol=0, atol=1e-10)
    assert torch.isfinite(g1).all() and (g1[~mask] == 0).all()


@pytest.mark.parametrize("ordering", [RampRank(0.05, scale="none"), RampRank(0.3, min_scale=1.0),
                                      RampRank(0.1, rel_min_scale=0.5)], ids=repr)
def test_fused_dips_follows_the_ordering_options(ordering):
    s, r, groups, mask = _batch(seed=1, levels=7)
    o_fused = RampRank(ordering.temperature, ordering.scale, min_scale=ordering.min_scale,
                       rel_min_scale=ordering.rel_min_scale, backend="numba")
    o_ref = RampRank(ordering.temperature, ordering.scale, min_scale=ordering.min_scale,
                     rel_min_scale=ordering.rel_min_scale, backend="torch")
    (v1, g1), (v2, g2) = _both(s, r, groups, mask, ordering=(o_fused, o_ref), num_groups=2)
    assert torch.allclose(v1, v2, rtol=0, atol=1e-10) and torch.allclose(g1, g2, rtol=0, atol=1e-10)


def test_fused_dips_float32_is_close():
    s, r, groups, mask = _batch(dtype=torch.float32, seed=2)
    (v1, g1), (v2, g2) = _both(s, r, groups, mask, num_groups=2)
    assert v1.dtype == torch.float32 and g1.dtype == torch.float32
    assert torch.allclose(v1, v2, rtol=0, atol=1e-5) and torch.allclose(g1, g2, rtol=0, atol=1e-5)


def _gradcheck_batch():
    """float64 lists for gradcheck, one of them padded, and the fused ordering: scale="none", since with "std" the
    (detached) temperature moves with the scores under finite differences."""
    g = torch.Generator().manual_seed(3)
    s = torch.randn(3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randint(0, 3, (3, 7), generator=g).double()
    groups = torch.randint(0, 2, (3, 7), generator=g)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[2, 5:] = False
    return s, r, groups, mask, RampRank(0.5, scale="none", backend="numba")


@pytest.mark.parametrize("mode", ["abs", "square"])
def test_fused_dips_gradcheck(mode):
    s, r, groups, mask, fused = _gradcheck_batch()
    assert torch.autograd.gradcheck(
        lambda x: dips_loss(x, r, groups, mask=mask, num_groups=2, mode=mode, ordering=fused, reduction="none"),
        (s,), eps=1e-7, atol=1e-6)


def _per(s, r, groups, **kw):
    kw.setdefault("num_groups", 2)
    return per_list_loss("dips", s.clone().requires_grad_(), r, groups, reducer=kw.pop("reducer", "gap_abs"),
                         **kw)[0]


def _small_and_large():
    """Lists below and above the fused family's threshold (``MIN_ELEMENTS["ramp_losses"]``)."""
    small = _batch(B=5, N=10)[:3]
    large_n = _MIN["ramp_losses"] // 16 + 1
    g = torch.Generator().manual_seed(4)
    large = (torch.randn(16, large_n, generator=g), torch.randint(0, 3, (16, large_n), generator=g).float(),
             torch.randint(0, 2, (16, large_n), generator=g))
    return small, large


def test_the_gate_takes_the_fused_path_where_documented(monkeypatch):
    monkeypatch.delenv("TORCHFAIR_KERNELS", raising=False)
    small, large = _small_and_large()
    assert not _fused_path(_per(torch.nan_to_num(small[0]), small[1], small[2]))  # below MIN_ELEMENTS: torch
    assert _fused_path(_per(*large))  # the default ordering, RBP browsing
    assert _fused_path(_per(*large, reducer="gap_square", ordering=RampRank(0.2)))
    for kw in (dict(ordering=RampRank(0.1, backend="torch")), dict(ordering=SoftRank(0.1)), dict(browsing="dcg"),
               dict(k=10), dict(reducer="gap_one_sided", protected=1)):
        assert not _fused_path(_per(*large, **kw)), kw
    soft = torch.nn.functional.one_hot(large[2], 2).float()
    assert not _fused_path(_per(large[0], large[1], soft, num_groups=None))
    monkeypatch.setenv("TORCHFAIR_KERNELS", "torch")
    assert not _fused_path(_per(*large))
    monkeypatch.setenv("TORCHFAIR_KERNELS", "numba")
    assert _fused_path(_per(torch.nan_to_num(small[0]), small[1], small[2]))


# ------------------------------------------------------------------ exposure misallocation and pairwise accuracy gap
LOSSES = {"misallocation": exposure_misallocation_loss, "accuracy": pairwise_accuracy_gap_loss}
CASES = [
    ("misallocation", dict(num_groups=2)),  # target "ee", l1
    ("misallocation", dict(num_groups=2, norm="l2sq", target="ea")),
    ("misallocation", dict(num_groups=2, norm="l2sq", target="ea-dp", browsing="rbp:0.7")),
    # ea-dp on a list of equal scores is the l1 norm's kink (delta = 0 up to rounding): l1 without that list
    ("misallocation", dict(num_groups=2, target="ea-dp", equal_list=False)),
    ("misallocation", dict(num_groups=3, reduction="none")),
    ("misallocation", dict(num_groups=2, reduction="sum", validate_args=False)),
    ("accuracy", dict(num_groups=2)),  # inter, protected 1 against reference 0
    ("accuracy", dict(num_groups=2, which="intra")),
    ("accuracy", dict(num_groups=2, which="both", reduction="sum")),
    ("accuracy", dict(num_groups=3, reduction="none")),
    ("accuracy", dict(num_groups=3, protected=2, reference=0, which="both")),
    ("accuracy", dict(num_groups=None, protected=2, reference=0)),  # a group no list holds: undefined everywhere
    ("accuracy", dict(num_groups=2, validate_args=False)),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_fused_misallocation_and_accuracy_equal_the_torch_path_float64(name, kw):
    kw = dict(kw)
    G = kw.get("num_groups") or 2
    s, r, groups, mask = _batch(G=G, equal_list=kw.pop("equal_list", True))
    (v1, g1), (v2, g2) = _both(s, r, groups, mask, loss=LOSSES[name], **kw)
    assert torch.allclose(v1, v2, rtol=0, atol=1e-10)
    assert torch.allclose(g1, g2, rtol=0, atol=1e-10)
    assert torch.isfinite(g1).all() and (g1[~mask] == 0).all()


@pytest.mark.parametrize("name", ["misallocation", "accuracy"])
@pytest.mark.parametrize("ordering", [RampRank(0.05, scale="none"), RampRank(0.3, min_scale=1.0),
                                      RampRank(0.1, rel_min_scale=0.5)], ids=repr)
def test_fused_misallocation_and_accuracy_follow_the_ordering_options(name, ordering):
    s, r, groups, mask = _batch(seed=1, levels=7)
    opts = dict(min_scale=ordering.min_scale, rel_min_scale=ordering.rel_min_scale)
    pair = (RampRank(ordering.temperature, ordering.scale, backend="numba", **opts),
            RampRank(ordering.temperature, ordering.scale, backend="torch", **opts))
    (v1, g1), (v2, g2) = _both(s, r, groups, mask, ordering=pair, loss=LOSSES[name], num_groups=2)
    assert torch.allclose(v1, v2, rtol=0, atol=1e-10) and torch.allclose(g1, g2, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["misallocation", "accuracy"])
def test_fused_misallocation_and_accuracy_float32_are_close(name):
    s, r, groups, mask = _batch(dtype=torch.float32, seed=2, equal_list=False)
    (v1, g1), (v2, g2) = _both(s, r, groups, mask, loss=LOSSES[name], num_groups=2)
    assert v1.dtype == torch.float32 and g1.dtype == torch.float32
    assert torch.allclose(v1, v2, rtol=0, atol=1e-5) and torch.allclose(g1, g2, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name,kw", [("misallocation", dict(norm="l1")), ("misallocation", dict(norm="l2sq")),
                                     ("misallocation", dict(norm="l2sq", target="ea")),
                                     ("accuracy", dict(which="inter")), ("accuracy", dict(which="both"))])
def test_fused_misallocation_and_accuracy_gradcheck(name, kw):
    s, r, groups, mask, fused = _gradcheck_batch()
    loss = LOSSES[name]
    assert torch.autograd.gradcheck(
        lambda x: loss(x, r, groups, mask=mask, num_groups=2, ordering=fused, reduction="none", **kw),
        (s,), eps=1e-7, atol=1e-6)


def _per_measure(measure, reducer, s, r, groups, **kw):
    kw.setdefault("num_groups", 2)
    return per_list_loss(measure, s.clone().requires_grad_(), r, groups, reducer=reducer, **kw)[0]


@pytest.mark.parametrize("measure,reducers,off", [
    ("exposure_misallocation", ("l1", "l2sq"),
     [dict(browsing="dcg"), dict(k=10), dict(target="ea-dp", browsing="uniform")]),
    ("pairwise_accuracy", ("inter", "intra", "both"), []),
])
def test_the_gate_takes_the_fused_misallocation_and_accuracy_where_documented(monkeypatch, measure, reducers, off):
    monkeypatch.delenv("TORCHFAIR_KERNELS", raising=False)
    small, large = _small_and_large()
    red = reducers[0]
    assert not _fused_path(_per_measure(measure, red, torch.nan_to_num(small[0]), small[1], small[2]))
    for reducer in reducers:
        assert _fused_path(_per_measure(measure, reducer, *large))  # the default ordering
    assert _fused_path(_per_measure(measure, red, *large, ordering=RampRank(0.2)))
    for kw in [dict(ordering=RampRank(0.1, backend="torch")), dict(ordering=SoftRank(0.1))] + off:
        assert not _fused_path(_per_measure(measure, red, *large, **kw)), kw
    if measure == "pairwise_accuracy":  # a reducer the walk does not implement: the torch path
        assert not _fused_path(_per_measure(measure, "gap_abs", *large))
    soft = torch.nn.functional.one_hot(large[2], 2).float()
    assert not _fused_path(_per_measure(measure, red, large[0], large[1], soft, num_groups=None))
    monkeypatch.setenv("TORCHFAIR_KERNELS", "torch")
    assert not _fused_path(_per_measure(measure, red, *large))
    monkeypatch.setenv("TORCHFAIR_KERNELS", "numba")
    assert _fused_path(_per_measure(measure, red, torch.nan_to_num(small[0]), small[1], small[2]))


@pytest.mark.parametrize("loss, bad, match", [
    ("dips", dict(relevance=True), "non-negative"), ("dips", dict(shift=5), "ids must lie"),
    ("dips", dict(nan_score=True), "finite"), ("misallocation", dict(inf_relevance=True), "finite"),
    ("accuracy", dict(nan_score=True), "finite"),
    ("misallocation", dict(relevance=True), "non-negative"), ("accuracy", dict(shift=5), "ids must lie"),
    ("accuracy", dict(protected=0, reference=0), "distinct"),
], ids=["dips-negative-relevance", "dips-group-id", "dips-nan-score", "misallocation-inf-relevance",
        "accuracy-nan-score", "misallocation-negative-relevance", "accuracy-group-id", "accuracy-same-ids"])
def test_invalid_input_goes_down_the_torch_path_and_its_message(loss, bad, match):
    s, r, groups, _ = _batch()
    s = torch.nan_to_num(s)
    r = -r - 1 if bad.get("relevance") else r
    if bad.get("nan_score"):
        s[5, 2] = float("nan")  # a real item (column 0..2 of list 5 is real: _batch's mask keeps column 0)
        s[5, 0] = float("nan")
    if bad.get("inf_relevance"):
        r = r.clone()
        r[6, 0] = float("inf")
    groups = groups + bad.get("shift", 0)
    ids = {k: bad[k] for k in ("protected", "reference") if k in bad}
    fn = {"dips": dips_loss, "misallocation": exposure_misallocation_loss, "accuracy": pairwise_accuracy_gap_loss}
    with pytest.raises(ValueError, match=match):
        fn[loss](s, r, groups, num_groups=2, ordering=FUSED, **ids)

@pytest.mark.parametrize("loss", [dips_loss, exposure_misallocation_loss, pairwise_accuracy_gap_loss],
                         ids=["dips", "misallocation", "accuracy"])
def test_a_batch_of_undefined_lists_gives_zero_with_zero_gradient_on_the_fused_path(loss):
    """Every list holds one group only or is fully padded (the loss is undefined on each): the fused node gives
    exactly 0 and a zero gradient; a batch without any real item is refused by the torch path's check of `mask`."""
    g = torch.Generator().manual_seed(7)
    s = torch.randn(4, 30, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randint(0, 3, (4, 30), generator=g).double()
    one_group = torch.ones(4, 30, dtype=torch.long)
    some_padded = torch.ones(4, 30, dtype=torch.bool)
    some_padded[1] = False
    v = loss(s, r, one_group, mask=some_padded, num_groups=2, ordering=FUSED)
    assert _fused_path(v) and v.item() == 0.0
    v.backward()
    assert torch.equal(s.grad, torch.zeros_like(s))
    padded = torch.zeros(4, 30, dtype=torch.bool)
    with pytest.raises(ValueError, match="`mask` has no real item"):
        loss(s, r, torch.randint(0, 2, (4, 30), generator=g), mask=padded, num_groups=2, ordering=FUSED)
