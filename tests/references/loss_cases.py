"""Shared cases of the loss tests (tests/losses/test_fairness.py, test_utility.py, test_regularizer.py): the
orderings, the loss table ``LOSSES``, small batches and the checks that every loss goes through (gradcheck,
padding, undefined lists, low precision).

Conventions: ``LOSSES`` maps a name to ``f(scores, relevance, groups, mask, ordering, reduction)``; losses that take
no ordering ignore the argument.  Data are small (B = 2, N = 5) with scores at least 0.2 apart and temperatures 0.5
(``scale="none"``), so the relaxations are smooth and the kinks of ``|x|``, ``max`` and ``relu`` are avoided; every
gradcheck asserts that precondition on the data first.  ``FAIRNESS`` / ``UTILITY`` split the table by the module
that defines each loss (torchfair.losses.fairness / torchfair.losses.utility).
"""
from __future__ import annotations

import pytest
import torch

from torchfair.losses import (approx_ndcg_loss, deltr_loss, dips_loss, exposure_misallocation_loss,
                              fair_pg_rank_loss, listmle_loss, listnet_loss, neural_ndcg_loss,
                              pairwise_accuracy_gap_loss, pairwise_correlation_loss)
from torchfair.orderings import FastSoftRank, NeuralSort, PlackettLuce, SoftRank, SoftSort


TAU = 0.5
F64 = torch.float64


# ------------------------------------------------------------------------------------------------ orderings
def _fast_soft_rank(temperature=1.7):
    """FastSoftRank.  Its positions are piecewise linear in the scores (a projection onto the permutahedron),
    with kinks where two scores are exactly ``temperature`` apart; the test scores are multiples of 0.1 with gaps
    of 0.5, so the default temperature here is chosen off that grid (and large enough for non-zero gradients)."""
    return FastSoftRank(temperature, scale="none")


SOFT_ORDERINGS = {
    "softrank": lambda: SoftRank(TAU, scale="none"),
    "neuralsort": lambda: NeuralSort(TAU, scale="none"),
    "softsort": lambda: SoftSort(TAU, scale="none"),
    "fastsoftrank": _fast_soft_rank,
}
ALL_ORDERINGS = {**SOFT_ORDERINGS, "pl_exact": lambda: PlackettLuce(exact=True)}


# ------------------------------------------------------------------------------------------------ losses
def _dips(mode, **kw):
    return lambda s, r, g, m, o, red="mean": dips_loss(s, r, g, mode=mode, mask=m, num_groups=2, ordering=o,
                                                        reduction=red, **kw)


def _exp(target, norm):
    return lambda s, r, g, m, o, red="mean": exposure_misallocation_loss(s, r, g, target=target, norm=norm, mask=m,
                                                                          num_groups=2, ordering=o, reduction=red)


def _acc(which):
    return lambda s, r, g, m, o, red="mean": pairwise_accuracy_gap_loss(s, r, g, which=which, mask=m, num_groups=2,
                                                                         ordering=o, reduction=red)


ORDERED = {
    "dips_abs": _dips("abs"),
    "dips_square": _dips("square"),
    "dips_one_sided": _dips("one_sided", protected=1),
    **{f"exp_{t}_{n}": _exp(t, n) for t in ("ee", "ea", "ea-dp") for n in ("l1", "l2sq")},
    "exp_ee-l": _exp("ee", "ee-l"),
    "acc_inter": _acc("inter"),
    "acc_intra": _acc("intra"),
    "acc_both": _acc("both"),
    "fair_pg_rank": lambda s, r, g, m, o, red="mean": fair_pg_rank_loss(s, r, g, mask=m, num_groups=2, ordering=o,
                                                                        reduction=red),
}
UNORDERED = {
    "deltr": lambda s, r, g, m, o=None, red="mean": deltr_loss(s, g, mask=m, num_groups=2, reduction=red),
    "correlation": lambda s, r, g, m, o=None, red="mean": pairwise_correlation_loss(s, r, g, mask=m, num_groups=2),
    "listnet": lambda s, r, g, m, o=None, red="mean": listnet_loss(s, r, mask=m, reduction=red),
    "listmle": lambda s, r, g, m, o=None, red="mean": listmle_loss(s, r, mask=m, reduction=red),
    "approx_ndcg": lambda s, r, g, m, o=None, red="mean": approx_ndcg_loss(s, r, temperature=TAU, mask=m,
                                                                          reduction=red),
    "neural_ndcg": lambda s, r, g, m, o=None, red="mean": neural_ndcg_loss(s, r, temperature=TAU, mask=m,
                                                                          reduction=red),
}
LOSSES = {**ORDERED, **UNORDERED}
#: losses with an |x|, max or relu kink in the per-list value: the data must keep them away from it
KINKED = {"dips_abs", "dips_one_sided", "exp_ee_l1", "exp_ea_l1", "exp_ea-dp_l1", "acc_inter", "acc_intra",
          "acc_both", "fair_pg_rank", "correlation"}
#: the losses the brief asks to gradcheck through PlackettLuce(exact=True)
PL_LOSSES = [n for n in ORDERED]


# ------------------------------------------------------------------------------------------------ data
def _data(dtype=F64):
    """B = 2, N = 5: two groups in each list, relevance crossing the groups both ways; the scores favour group 0
    (group 1, the protected one, is under-ranked) and sit at least 0.2 apart."""
    s = torch.tensor([[2.0, 1.0, 1.5, -0.5, 0.0],
                      [-1.0, 1.2, -0.2, 0.6, 1.8]], dtype=dtype)
    r = torch.tensor([[2.0, 0.0, 1.0, 3.0, 1.0],
                      [1.0, 2.0, 3.0, 0.0, 1.0]], dtype=dtype)
    g = torch.tensor([[0, 0, 0, 1, 1],
                      [1, 0, 1, 0, 0]])
    m = torch.ones(2, 5, dtype=torch.bool)
    return s, r, g, m


def _check_away_from_kink(name, s, r, g, m, o):
    if name not in KINKED:
        return
    if name == "correlation":
        per = LOSSES[name](s, r, g, m, o).reshape(1)
    else:
        per = LOSSES[name](s, r, g, m, o, "none")
    assert (per > 1e-3).all(), f"data sit at a kink of {name}: per-list values {per.tolist()}"


def check_gradcheck(name, ordering_factory):
    s, r, g, m = _data()
    o = None if ordering_factory is None else ordering_factory()
    with torch.no_grad():
        _check_away_from_kink(name, s, r, g, m, o)
    s = s.clone().requires_grad_(True)
    f = LOSSES[name]
    assert torch.autograd.gradcheck(lambda x: f(x, r, g, m, o), (s,), eps=1e-6, atol=1e-6, rtol=1e-4)
    # not a vacuous check: the loss really depends on the scores
    (grad,) = torch.autograd.grad(f(s, r, g, m, o), s)
    assert grad.abs().max() > 1e-6, f"{name}: zero gradient on unfair data"


def _rows(x, m, b):
    return [v for v, keep in zip(x[b].tolist(), m[b].tolist()) if keep]


def _batch_with_undefined(dtype=F64):
    """``_data`` plus a one-group list and a list with a single real item (the rest NaN padding)."""
    s, r, g, m = _data(dtype)
    nan = float("nan")
    s = torch.cat([s, torch.tensor([[0.3, 1.9, -0.8, 1.1, 0.2], [0.7, nan, nan, nan, nan]], dtype=dtype)])
    r = torch.cat([r, torch.tensor([[1.0, 3.0, 0.0, 2.0, 1.0], [2.0, 0.0, 0.0, 0.0, 0.0]], dtype=dtype)])
    g = torch.cat([g, torch.tensor([[0, 0, 0, 0, 0], [1, 0, 0, 0, 0]])])
    m = torch.cat([m, torch.tensor([[True] * 5, [True, False, False, False, False]])])
    return s, r, g, m


def _mean_valid(per, valid):
    vals = [p for p, v in zip(per, valid) if v]
    return sum(vals) / len(vals) if vals else 0.0


def _gap_ref(M, V, mode, protected=None):
    """Per-list reduction written from the docstrings: largest |M_gh - M_hg| (or its square) over the valid pairs
    g != h; one_sided: largest relu(M_ph - M_hp) over valid h != p.  (value, valid)."""
    G = len(M)
    vals = []
    for a in range(G):
        for h in range(G):
            if a == h or not (V[a][h] and V[h][a]):
                continue
            if mode == "one_sided" and a != protected:
                continue
            d = M[a][h] - M[h][a]
            vals.append(abs(d) if mode == "abs" else d * d if mode == "square" else max(0.0, d))
    return (max(vals), True) if vals else (0.0, False)


def _padded(dtype=F64):
    """Base lists (B = 2, N = 4) and the same lists with two padded columns inserted (index 1 and 4) holding NaN
    / inf scores, NaN relevance and out-of-range group ids, plus an entirely padded third list."""
    s, r, g, m = _data(dtype)
    s, r, g, m = s[:, :4], r[:, :4], g[:, :4], m[:, :4]
    real = [0, 2, 3, 5]
    N = 6
    nan, inf = float("nan"), float("inf")
    ps = torch.tensor([[nan, nan, nan, inf, nan, nan], [nan, -inf, nan, nan, inf, nan],
                       [nan, inf, -inf, nan, nan, nan]], dtype=dtype)
    pr = torch.full((3, N), nan, dtype=dtype)
    pg = torch.full((3, N), 7, dtype=torch.long)
    pm = torch.zeros(3, N, dtype=torch.bool)
    ps[:2, real], pr[:2, real], pg[:2, real], pm[:2, real] = s, r, g, True
    return (s, r, g, m), (ps, pr, pg, pm), real


def _kind_lists(dtype=F64):
    """One list of each undefined kind (N = 5), NaN in padded slots."""
    nan = float("nan")
    L = {
        "one_group": ([0.3, 1.9, -0.8, 1.1, 0.2], [1.0, 3.0, 0.0, 2.0, 1.0], [0, 0, 0, 0, 0], [True] * 5),
        "no_relevant": ([-1.0, 1.2, -0.2, 0.6, 1.8], [0.0] * 5, [1, 0, 1, 0, 0], [True] * 5),
        "single_item": ([0.7, nan, nan, nan, nan], [2.0, nan, nan, nan, nan], [1, 0, 0, 0, 0],
                        [True, False, False, False, False]),
        "empty": ([nan] * 5, [nan] * 5, [0] * 5, [False] * 5),
    }
    return {k: (torch.tensor([v[0]], dtype=dtype), torch.tensor([v[1]], dtype=dtype), torch.tensor([v[2]]),
                torch.tensor([v[3]])) for k, v in L.items()}


_GROUP_UNDEF = {"one_group", "single_item", "empty"}
#: the kinds of list on which each loss's own measure is undefined (and which must be left out of the mean)
UNDEFINED = {
    **{n: _GROUP_UNDEF for n in ("dips_abs", "dips_square", "dips_one_sided", "deltr")},
    **{n: _GROUP_UNDEF | {"no_relevant"} for n in ("acc_inter", "acc_intra", "acc_both", "fair_pg_rank")},
    "exp_ea_l1": {"no_relevant", "empty"}, "exp_ea_l2sq": {"no_relevant", "empty"},
    "exp_ee_l1": {"empty"}, "exp_ee_l2sq": {"empty"}, "exp_ea-dp_l1": {"empty"}, "exp_ea-dp_l2sq": {"empty"},
    "listnet": {"empty"}, "listmle": {"empty"},
    "approx_ndcg": {"no_relevant", "empty"}, "neural_ndcg": {"no_relevant", "empty"},
    # pooled over pairs, not a mean over lists: lists without a cross-group pair of different relevance add nothing
    "correlation": {"one_group", "no_relevant", "single_item", "empty"},
}


def _cat(*batches):
    return tuple(torch.cat(x) for x in zip(*batches))


def _good():
    s, r, g, m = _data()
    return s[:1], r[:1], g[:1], m[:1]


def _lowp_batch(dtype):
    s, r, g, m = _batch_with_undefined(torch.float32)
    return s.to(dtype), r.to(dtype), g, m


#: the losses of torchfair.losses.fairness and of torchfair.losses.utility
UTILITY = ["listnet", "listmle", "approx_ndcg", "neural_ndcg"]
FAIRNESS = [n for n in LOSSES if n not in UTILITY]


def mask_cases(names):
    """(loss, ordering) pairs of the padding test: every ordering for the losses that take one."""
    return [(n, o) for n in names if n in ORDERED for o in ALL_ORDERINGS] + \
        [(n, None) for n in names if n in UNORDERED]


def undefined_cases(names):
    """(loss, ordering) pairs of the undefined-list test (EE-L is defined on every list)."""
    return [(n, o) for n in names if n in ORDERED and n != "exp_ee-l" for o in ALL_ORDERINGS] + \
        [(n, None) for n in names if n in UNORDERED]


def reduction_names(names):
    """Losses of the reduction="sum" / "none" test: those with an undefined kind of list besides the empty one."""
    return [n for n in names if UNDEFINED.get(n) != {"empty"} and n != "exp_ee-l"]


def lowp_cases(names):
    """(loss, ordering) pairs of the half-precision tests."""
    return [(n, o) for n in names if n in ORDERED
            for o in ("softrank", "neuralsort", "softsort", "fastsoftrank", "pl_exact")] + \
        [(n, None) for n in names if n in UNORDERED]


# ------------------------------------------------------------------------------------------------ shared checks
def check_padding(name, oname):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    (s, r, g, m), (ps, pr, pg, pm), real = _padded()
    if name == "exp_ee-l":  # EE-L counts an entirely padded list as valid: see test_ee_l_loss_ignores_empty_lists
        ps, pr, pg, pm = ps[:2], pr[:2], pg[:2], pm[:2]
    f = LOSSES[name]
    s = s.clone().requires_grad_(True)
    ps = ps.clone().requires_grad_(True)
    base = f(s, r, g, m, o)
    pad = f(ps, pr, pg, pm, o)
    assert torch.isfinite(pad)
    torch.testing.assert_close(pad, base, rtol=1e-10, atol=1e-12)
    (gb,) = torch.autograd.grad(base, s)
    (gp,) = torch.autograd.grad(pad, ps)
    assert torch.isfinite(gp).all()
    assert (gp[~pm] == 0).all(), f"padded items get gradient {gp[~pm].tolist()}"
    torch.testing.assert_close(gp[:2, real], gb, rtol=1e-8, atol=1e-12)


def check_undefined_lists_are_excluded(name, oname):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    f = LOSSES[name]
    kinds = _kind_lists()
    good = _good()
    base = f(*good, o)
    assert base.item() > 0
    undefined = [kinds[k] for k in sorted(UNDEFINED[name])]
    s, r, g, m = _cat(good, *undefined)
    s = s.clone().requires_grad_(True)
    loss = f(s, r, g, m, o)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, base, rtol=1e-10, atol=1e-12)
    (grad,) = torch.autograd.grad(loss, s)
    assert torch.isfinite(grad).all()
    assert (grad[1:] == 0).all()  # undefined lists: no gradient
    # ... and a batch made only of undefined lists gives exactly 0 with zero gradient
    s, r, g, m = _cat(*undefined)
    if not m.any():  # only empty lists: rejected by input validation (documented in _validation.prepare)
        with pytest.raises(ValueError, match="no real item"):
            f(s, r, g, m, o)
        return
    s = s.clone().requires_grad_(True)
    loss = f(s, r, g, m, o)
    assert loss.item() == 0.0
    (grad,) = torch.autograd.grad(loss, s, allow_unused=True)
    assert grad is None or (grad == 0).all()


def check_undefined_lists_reduction_sum_and_none(name, oname):
    """reduction="none" puts exactly 0 on the undefined lists; "sum" is the sum of the defined lists."""
    if name == "correlation":
        pytest.skip("pooled loss: no reduction argument")
    o = ALL_ORDERINGS[oname]()
    f = LOSSES[name]
    kinds = _kind_lists()
    undefined = [kinds[k] for k in sorted(UNDEFINED[name])]
    batch = _cat(_data(), *undefined)
    per = f(*batch, o, "none")
    assert per.shape == (2 + len(undefined),)
    assert torch.isfinite(per).all() and (per[2:] == 0).all()
    torch.testing.assert_close(f(*batch, o, "sum"), per.sum())


def check_half_precision_inputs(name, oname, dtype):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    s, r, g, m = _lowp_batch(dtype)
    s = s.clone().requires_grad_(True)
    loss = LOSSES[name](s, r, g, m, o)
    assert torch.isfinite(loss)
    loss.backward()
    assert s.grad is not None and s.grad.dtype == dtype
    assert torch.isfinite(s.grad).all() and (s.grad[~m] == 0).all()
    # close to the float32 value (the work is done in float32; only the inputs are rounded)
    s32, r32 = s.detach().float(), r.float()
    ref32 = LOSSES[name](s32, r32, g, m, o)
    torch.testing.assert_close(loss.float(), ref32, rtol=1e-3, atol=1e-4)


def check_autocast_bfloat16(name, oname):
    o = None if oname is None else ALL_ORDERINGS[oname]()
    s, r, g, m = _batch_with_undefined(torch.float32)
    s = s.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = LOSSES[name](s, r, g, m, o)
    assert torch.isfinite(loss)
    loss.float().backward()
    assert torch.isfinite(s.grad).all() and (s.grad[~m] == 0).all()


def check_item_invariances(loss, gen, B: int, N: int, *, pad_group: int = 5, symmetric: bool = True) -> None:
    """Draw a batch ``[B, N]`` (distinct scores, relevance 0..2, both groups present) and check that
    ``loss(scores, relevance, groups, mask=None)`` is unchanged by a joint permutation of the items, by ``P = 3``
    NaN-padded slots inserted anywhere (zero gradient there, the same gradient elsewhere) and, when ``symmetric``,
    by swapping the two group ids; values and gradients finite."""
    import math

    import torch

    s = torch.randn(B, N, generator=gen, dtype=torch.float64) * 2
    r = torch.randint(0, 3, (B, N), generator=gen).to(torch.float64)
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    x = s.clone().requires_grad_()
    base = loss(x, r, g)
    (grad,) = torch.autograd.grad(base, x)
    assert torch.isfinite(base) and torch.isfinite(grad).all()
    perm = torch.randperm(N, generator=gen)
    assert math.isclose(loss(s[:, perm], r[:, perm], g[:, perm]).item(), base.item(), rel_tol=1e-9, abs_tol=1e-12)
    P = 3
    where = torch.randperm(N + P, generator=gen)
    real, pad = where[:N].sort().values, where[N:]
    ps = torch.full((B, N + P), float("nan"), dtype=torch.float64)
    pr, pg = torch.full((B, N + P), float("nan"), dtype=torch.float64), torch.full((B, N + P), pad_group)
    pm = torch.zeros(B, N + P, dtype=torch.bool)
    ps[:, real], pr[:, real], pg[:, real], pm[:, real] = s, r, g, True
    px = ps.clone().requires_grad_()
    padded = loss(px, pr, pg, pm)
    (pgrad,) = torch.autograd.grad(padded, px)
    assert math.isclose(padded.item(), base.item(), rel_tol=1e-9, abs_tol=1e-12)
    assert (pgrad[:, pad] == 0).all() and torch.allclose(pgrad[:, real], grad, atol=1e-10)
    if symmetric:
        assert math.isclose(loss(s, r, 1 - g).item(), base.item(), rel_tol=1e-9, abs_tol=1e-12)
