"""Input validation: bad inputs raise ValueError naming the argument; dtypes are handled as documented."""
from __future__ import annotations

import pytest
import torch

import reference as ref
from torchfair.browsing import RBP
from torchfair.metrics import (dips, discordant_fraction, igi, individual_dissatisfaction, kendall_tau,
                               pairwise_accuracy, rank_parity, ree)
from torchfair.orderings import Hard

S = torch.tensor([[0.3, 0.1, 0.7, 0.2], [0.5, 0.9, 0.4, 0.8]])
R = torch.tensor([[1.0, 2.0, 0.0, 3.0], [2.0, 0.0, 1.0, 1.0]])
G = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 1]])
M = torch.ones(2, 4, dtype=torch.bool)

# every measure that takes (scores, relevance, groups)
GROUP_FNS = {
    "dips": lambda s, r, g, **kw: dips(s, r, g, **kw),
    "igi": lambda s, r, g, **kw: igi(s, r, g, **kw),
    "ree": lambda s, r, g, **kw: ree(s, r, g, **kw),
    "pairwise_accuracy": lambda s, r, g, **kw: pairwise_accuracy(s, r, g, **kw),
    "individual_dissatisfaction": lambda s, r, g, **kw: individual_dissatisfaction(s, r, g, **kw),
    "rank_parity": lambda s, r, g, **kw: rank_parity(s, g, **kw).per_group,
}
REL_FNS = {
    "dips": lambda s, r, **kw: dips(s, r, G, **kw),
    "igi": lambda s, r, **kw: igi(s, r, G, **kw),
    "individual_dissatisfaction": lambda s, r, **kw: individual_dissatisfaction(s, r, **kw),
    "pairwise_accuracy": lambda s, r, **kw: pairwise_accuracy(s, r, G, **kw),
    "discordant_fraction": lambda s, r, **kw: discordant_fraction(s, r, **kw),
    "kendall_tau": lambda s, r, **kw: kendall_tau(s, r, **kw),
}
ALL_FNS = {**{f"rel:{k}": v for k, v in REL_FNS.items()},
           **{f"grp:{k}": (lambda f: lambda s, r, **kw: f(s, r, G, **kw))(v) for k, v in GROUP_FNS.items()}}


def _raises(fn, name, *args, **kwargs):
    with pytest.raises(ValueError) as exc:
        fn(*args, **kwargs)
    assert f"`{name}`" in str(exc.value), str(exc.value)


# ------------------------------------------------------------------------------------------- scores


@pytest.mark.parametrize("key", sorted(ALL_FNS))
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scores(key, bad):
    s = S.clone()
    s[1, 2] = bad
    _raises(ALL_FNS[key], "scores", s, R)


@pytest.mark.parametrize("key", sorted(ALL_FNS))
def test_scores_wrong_dim(key):
    _raises(ALL_FNS[key], "scores", S.unsqueeze(0), R)  # 3-D
    _raises(ALL_FNS[key], "scores", torch.tensor(1.0), R)  # 0-D


def test_scores_not_a_tensor_or_empty_or_bool():
    _raises(discordant_fraction, "scores", [0.1, 0.2], R[0])
    _raises(discordant_fraction, "scores", torch.zeros(2, 0), torch.zeros(2, 0))
    _raises(discordant_fraction, "scores", torch.tensor([True, False]), R[0, :2])


# ------------------------------------------------------------------------------------------- relevance


@pytest.mark.parametrize("key", sorted(REL_FNS))
def test_relevance_bad(key):
    fn = REL_FNS[key]
    _raises(fn, "relevance", S, R[:, :3])  # shape mismatch
    _raises(fn, "relevance", S, R[0])  # [N] with [B, N] scores
    r = R.clone()
    r[0, 1] = -0.5
    _raises(fn, "relevance", S, r)  # negative
    r = R.clone()
    r[1, 0] = float("nan")
    _raises(fn, "relevance", S, r)
    r[1, 0] = float("inf")
    _raises(fn, "relevance", S, r)


def test_relevance_required():
    _raises(dips, "relevance", S, None, G)
    _raises(individual_dissatisfaction, "relevance", S, None)


# ------------------------------------------------------------------------------------------- groups


@pytest.mark.parametrize("key", sorted(GROUP_FNS))
def test_groups_bad(key):
    fn = GROUP_FNS[key]
    _raises(fn, "groups", S, R, G[:, :3])  # wrong N
    _raises(fn, "groups", S, R, G[0])  # [N] with [B, N] scores
    _raises(fn, "groups", S, R, G.bool())  # bool is not ids
    g = G.clone()
    g[0, 0] = 2
    _raises(fn, "groups", S, R, g, num_groups=2)  # id >= num_groups
    g[0, 0] = -2
    _raises(fn, "groups", S, R, g, num_groups=2)  # id < -1
    g[0, 0] = -2
    _raises(fn, "groups", S, R, g)  # also with inferred num_groups
    soft = torch.tensor([[0.5, 0.5], [0.2, 0.9], [1.0, 0.0], [0.0, 1.0]]).expand(2, 4, 2).clone()
    _raises(fn, "groups", S, R, soft)  # a row sums to 1.1 (a sum below 1 is a partly unknown group)
    soft[0, 1] = torch.tensor([1.3, -0.3])  # sums to 1 but negative
    _raises(fn, "groups", S, R, soft)
    soft[0, 1] = torch.tensor([float("nan"), 0.5])
    _raises(fn, "groups", S, R, soft)
    good = torch.tensor([[0.5, 0.5], [0.3, 0.7], [1.0, 0.0], [0.0, 1.0]]).expand(2, 4, 2)
    _raises(fn, "groups", S, R, good[:, :3])  # soft with wrong N
    _raises(fn, "groups", S, R, good, num_groups=3)  # last dim disagrees with num_groups


def test_groups_required_and_num_groups():
    _raises(dips, "groups", S, R, None)
    _raises(rank_parity, "groups", S, None)
    _raises(dips, "num_groups", S, R, G, num_groups=0)


# Garbage in padded slots (group ids out of range, soft-membership rows that are not memberships) is checked for
# every declared measure by the contract's padding check (tests/tester.py, MeasureTester.run_padding).


# ------------------------------------------------------------------------------------------- mask


@pytest.mark.parametrize("key", sorted(ALL_FNS))
def test_mask_bad(key):
    fn = ALL_FNS[key]
    _raises(fn, "mask", S, R, mask=torch.zeros(2, 4, dtype=torch.bool))  # no real item
    _raises(fn, "mask", S, R, mask=torch.ones(2, 4))  # float
    _raises(fn, "mask", S, R, mask=torch.ones(2, 4, dtype=torch.long))  # int
    _raises(fn, "mask", S, R, mask=torch.ones(2, 3, dtype=torch.bool))  # shape
    _raises(fn, "mask", S, R, mask=torch.ones(4, dtype=torch.bool))  # [N] with [B, N] scores


def test_mask_with_one_empty_list_is_fine():
    mask = torch.tensor([[True, True, True, True], [False, False, False, False]])
    s = S.clone()
    s[1] = float("nan")
    M, V = dips(s, R, G, mask=mask, return_valid=True)
    assert torch.isfinite(M).all() and not V[1].any() and V[0].all()


# ------------------------------------------------------------------------------------------- other arguments


def test_other_bad_arguments():
    _raises(dips, "tie_weight", S, R, G, tie_weight=1.5)
    _raises(igi, "tie_weight", S, R, G, tie_weight=-0.1)
    _raises(dips, "reduction", S, R, G, reduction="avg")
    _raises(dips, "browsing", S, R, G, browsing="nonsense")
    _raises(dips, "ordering", S, R, G, ordering="hard")
    _raises(dips, "ordering", S, R, G, ordering=Hard()(S[:, :3], M[:, :3]))
    with pytest.raises(ValueError, match="ties"):
        Hard("random")


def test_precomputed_ordering_is_accepted():
    ob = Hard()(S, M)
    torch.testing.assert_close(dips(S, R, G, ordering=ob), dips(S, R, G))


# ------------------------------------------------------------------------------------------- dtypes


def _half_case():
    gen = torch.Generator().manual_seed(3)
    s = (torch.randperm(8, generator=gen).float() / 4).reshape(2, 4)  # exactly representable in half types
    s = torch.cat([s, s.flip(-1) + 2], dim=1)
    r = torch.randint(0, 4, (2, 8), generator=gen).float()
    g = torch.randint(-1, 2, (2, 8), generator=gen)
    soft = torch.tensor([0.25, 0.75]).expand(2, 8, 2).clone()
    soft[:, ::2] = torch.tensor([1.0, 0.0])
    return s, r, g, soft


# Every input dtype of the declared measures (dips, igi, ree, pairwise_accuracy, rank_parity, discordant_fraction,
# kendall_tau...), integer ids and soft membership: the contract's dtypes check (tests/tester.py,
# MeasureTester.run_dtypes); individual_dissatisfaction is not declared, so here.
@pytest.mark.parametrize("groups", ["ids", "soft"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_individual_dissatisfaction_half_precision_inputs_match_float32(dtype, groups):
    s, r, g, soft = _half_case()
    grp = g if groups == "ids" else soft
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    a = individual_dissatisfaction(s, r, grp, mask=mask, num_groups=2)
    b = individual_dissatisfaction(s.to(dtype), r.to(dtype), grp.to(dtype) if groups == "soft" else grp, mask=mask,
                                   num_groups=2)
    assert torch.isfinite(b).all() and b.dtype == torch.float32
    torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("groups", ["ids", "soft"])
@pytest.mark.parametrize("dt", [torch.float64, torch.float32])
def test_individual_dissatisfaction_keeps_float64_and_float32(dt, groups):
    s, r, g, soft = _half_case()
    grp = g if groups == "ids" else soft.to(dt)
    assert individual_dissatisfaction(s.to(dt), r.to(dt), grp, num_groups=2).dtype == dt


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_dips_is_the_plain_python_reference(dtype):
    """DIPS of half-precision inputs (computed in float32) against the plain-Python loop of tests/reference.py."""
    s, r, g, _ = _half_case()
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    M = dips(s.to(dtype), r.to(dtype), g, mask=mask, num_groups=2)
    for b in range(2):
        keep = [i for i in range(8) if mask[b, i]]
        eM, _ = ref.dips(ref.rank([float(s[b, i]) for i in keep]), [float(r[b, i]) for i in keep],
                         ref.membership_from_ids([int(g[b, i]) for i in keep], 2), ref.ref_rbp(0.9), 0.5)
        for x in range(2):
            for y in range(2):
                assert float(M[b, x, y]) == pytest.approx(eM[x][y], rel=1e-5, abs=1e-6)


def test_integer_scores_are_accepted():
    s = torch.tensor([[3, 1, 2, 0]])
    r = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    assert kendall_tau(s, r).dtype == torch.float32
    assert float(kendall_tau(s, r)[0]) == pytest.approx(
        ref.kendall_tau(ref.rank([3.0, 1.0, 2.0, 0.0]), [0.0, 1.0, 2.0, 3.0])[0])


def test_a_misspelt_measure_name_gets_its_closest_spelling():
    from torchfair.metrics import get_declaration

    with pytest.raises(ValueError, match=r"got 'dipz' \(did you mean 'dips'\?\)"):
        get_declaration("dipz")


def test_check_choice_names_the_closest_choice():
    from torchfair._validation import check_choice

    with pytest.raises(ValueError, match=r"`reduction` must be one of 'none', 'mean', 'sum'; got 'maen' "
                                         r"\(did you mean 'mean'\?\)"):
        check_choice("maen", "reduction", ("none", "mean", "sum"))
