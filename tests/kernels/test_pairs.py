"""torchfair.kernels.pairs: the compiled pair sums of ``Hard`` on CPU tensors against the torch code.

* every pairwise measure that reads the sweeps (DIPS, individual dissatisfaction, IGI, REE, pairwise accuracy,
  rank parity, discordant fraction, Kendall's tau) is the same on ``Hard(backend="numba")`` as on
  ``Hard(backend="torch")``: both tie rules, graded relevance (per-rank arrays), continuous relevance (Fenwick
  tree) and the boundary between them, score ties, padding anywhere, unknown group ``-1``, soft membership,
  cut-offs, relevance-dependent browsing;
* the contraction itself for every ``LevelPairWeight`` (greater, equal and less weights), none, and ``which`` in
  ``above`` / ``joint`` / ``one``, also against the pair-by-pair contraction of the base class; mixtures of hard
  rankings (``Sampled``), which reach the kernels through their inner ordering;
* the backend argument and its errors.
"""
from __future__ import annotations

import pytest
import torch

from torchfair.browsing import RBP, Cascade
from torchfair.kernels.pairs import BY_ITEM_MAX
from torchfair.metrics import (dips, discordant_fraction, igi, individual_dissatisfaction, kendall_tau,
                               pairwise_accuracy, rank_parity, ree)
from torchfair.orderings import Hard, Sampled
from torchfair.orderings.hard import HardOrderedBatch
from torchfair.orderings._pairsums import LevelPairWeight, contract_all_pairs


def _tol(dtype):
    return dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-6, atol=1e-6)


def _both(fn, *args, ties="first", **kwargs):
    a = fn(*args, ordering=Hard(ties, backend="numba"), **kwargs)
    b = fn(*args, ordering=Hard(ties, backend="torch"), **kwargs)
    return a, b


def _close(a, b, dtype):
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            _close(x, y, dtype)
        return
    if a.dtype == torch.bool:
        assert torch.equal(a, b)
    else:
        torch.testing.assert_close(a, b, **_tol(dtype))


# ------------------------------------------------------------------------------------------------ the measures
MEASURES = {
    "dips": lambda s, r, g, m, **kw: dips(s, r, g, mask=m, **kw),
    "dips_uniform_k3": lambda s, r, g, m, **kw: dips(s, r, g, mask=m, browsing="uniform", k=3, **kw),
    "dips_tie0": lambda s, r, g, m, **kw: dips(s, r, g, mask=m, tie_weight=0.0, **kw),
    "individual": lambda s, r, g, m, **kw: individual_dissatisfaction(s, r, g, mask=m, **kw),
    "individual_nogroups": lambda s, r, g, m, **kw: individual_dissatisfaction(s, r, None, mask=m, **kw),
    "igi": lambda s, r, g, m, **kw: igi(s, r, g, mask=m, tie_weight=0.5, return_valid=True, **kw),
    "ree_k4": lambda s, r, g, m, **kw: ree(s, r, g, mask=m, k=4, return_valid=True, **kw),
    "pairwise_accuracy": lambda s, r, g, m, **kw: pairwise_accuracy(s, r, g, mask=m, return_valid=True, **kw),
    "rank_parity": lambda s, r, g, m, **kw: tuple(rank_parity(s, g, mask=m, **kw)),
    "discordant_fraction": lambda s, r, g, m, **kw: discordant_fraction(s, r, mask=m, return_valid=True, **kw),
    "kendall_tau": lambda s, r, g, m, **kw: kendall_tau(s, r, mask=m, **kw),
}


@pytest.mark.parametrize("name", sorted(MEASURES))
@pytest.mark.parametrize("ties", ["first", "average"])
@pytest.mark.parametrize("relevance", ["graded", "continuous", "boundary"])
@pytest.mark.parametrize("groups", ["ids", "soft"])
def test_every_pairwise_measure_is_the_same_on_both_backends(name, ties, relevance, groups, kernel_inputs):
    dtype = torch.float64 if groups == "soft" else torch.float32
    s, r, grp, mask = kernel_inputs(hash((name, ties, relevance)) % 1000, 3, 150, dtype, relevance, groups)
    kw = {} if groups == "soft" else {"num_groups": 3}
    if name.startswith(("discordant", "kendall")):
        kw = {}
    a, b = _both(MEASURES[name], s, r, grp, mask, ties=ties, **kw)
    _close(a, b, dtype)


@pytest.mark.parametrize("relevance", ["graded", "continuous"])
def test_lists_longer_than_the_in_cache_layout_are_the_same_on_both_backends(relevance, kernel_inputs):
    """Above ``BY_ITEM_MAX`` items a list's pair walk reads its arrays along the ranking, not in memory order."""
    s, r, grp, mask = kernel_inputs(5, 2, BY_ITEM_MAX + 37, torch.float64, relevance, "ids")
    a, b = _both(dips, s, r, grp, mask=mask, num_groups=3, return_valid=True)
    _close(a, b, torch.float64)


def test_cascade_browsing_is_the_same_on_both_backends(kernel_inputs):
    s, r, grp, mask = kernel_inputs(3, 4, 80, torch.float64, "graded", "ids")
    a, b = _both(dips, s, r, grp, mask=mask, num_groups=3, browsing=Cascade(0.9, max_grade=4.0))
    _close(a, b, torch.float64)


@pytest.mark.parametrize("ties", ["first", "average"])
def test_one_tie_block_and_one_relevance_level(ties):
    """Every score tied (one block of the whole list) and every relevance equal (one rank)."""
    B, N = 2, 300
    g = torch.Generator().manual_seed(1)
    grp = torch.randint(0, 2, (B, N), generator=g)
    for r in (torch.rand(B, N, generator=g, dtype=torch.float64), torch.ones(B, N, dtype=torch.float64)):
        s = torch.zeros(B, N, dtype=torch.float64)
        for fn in (dips, igi, pairwise_accuracy):
            a, b = _both(fn, s, r, grp, num_groups=2, ties=ties)
            _close(a, b, torch.float64)


def test_lists_with_one_item_or_no_real_item():
    s = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, 0.0]])
    r = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
    grp = torch.tensor([[0, 1, 0], [1, 0, 0]])
    for mask in (torch.tensor([[True, True, True], [True, False, False]]),
                 torch.tensor([[True, True, True], [False, False, False]])):
        for ties in ("first", "average"):
            _close(*_both(dips, s, r, grp, mask=mask, num_groups=2, ties=ties, return_valid=True), torch.float32)
    _close(*_both(dips, torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([0]), num_groups=1), torch.float32)


# ------------------------------------------------------------------------------------------------ the contraction
WEIGHTS = [None, (1.0, 0.0, 0.0), (1.0, 0.5, 0.0), (0.3, 0.7, 0.2), (0.0, 0.0, 1.0)]


@pytest.mark.parametrize("ties", ["first", "average"])
@pytest.mark.parametrize("which", ["above", "joint", "one"])
@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("relevance", ["graded", "continuous"])
def test_contract_is_the_same_on_both_backends(ties, which, weights, relevance, kernel_inputs):
    s, r, _, mask = kernel_inputs(7, 4, 120, torch.float64, relevance, "ids")
    s = torch.where(mask, s, torch.zeros_like(s))
    right = torch.randn(4, 120, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    pw = None if weights is None else LevelPairWeight(r, *weights)
    out = {}
    for backend in ("numba", "torch"):
        ob = HardOrderedBatch(s, mask, ties, backend)
        out[backend] = ob.contract(right, which=which, pair_weight=pw, browsing=RBP(0.8) if which == "joint" else None)
    torch.testing.assert_close(out["numba"], out["torch"], rtol=1e-12, atol=1e-12)
    # and the pair-by-pair contraction of the base class agrees
    ob = HardOrderedBatch(s, mask, ties, "numba")
    generic = super(HardOrderedBatch, ob).contract(right, which=which, pair_weight=pw,
                                                   browsing=RBP(0.8) if which == "joint" else None)
    torch.testing.assert_close(out["numba"], generic, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_contract_all_pairs_is_the_same_on_both_backends(dtype, kernel_inputs):
    s, r, grp, mask = kernel_inputs(5, 3, 90, dtype, "continuous", "soft")
    pw = LevelPairWeight(r, 1.0, 0.5, 0.25)
    a = contract_all_pairs(grp, mask, pw, "numba")
    b = contract_all_pairs(grp, mask, pw, "torch")
    torch.testing.assert_close(a, b, **_tol(dtype))
    assert a.dtype == grp.dtype


def test_sampled_rankings_reach_the_kernels_through_their_inner_ordering(monkeypatch, kernel_inputs):
    s, r, grp, mask = kernel_inputs(9, 3, 50, torch.float64, "continuous", "ids")  # > 64 levels: the sorted sweeps
    g = torch.Generator().manual_seed(0)
    rankings = torch.stack([torch.stack([torch.randperm(50, generator=g) for _ in range(3)]) for _ in range(4)])
    ordering = Sampled(rankings)
    fast = dips(s, r, grp, mask=mask, num_groups=3, ordering=ordering)
    monkeypatch.setenv("TORCHFAIR_KERNELS", "torch")  # the torch code
    slow = dips(s, r, grp, mask=mask, num_groups=3, ordering=ordering)
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------ the argument
def test_backend_argument():
    assert repr(Hard()) == "Hard(ties='first')"
    assert repr(Hard("average", backend="torch")) == "Hard(ties='average', backend='torch')"
    with pytest.raises(ValueError, match="backend"):
        Hard(backend="cuda")
    with pytest.raises(ValueError, match="backend"):
        contract_all_pairs(torch.ones(1, 2, 1), torch.ones(1, 2, dtype=torch.bool), None, "fast")
    meta = torch.zeros(2, 3, device="meta")
    with pytest.raises(ValueError, match="backend='numba'"):
        Hard(backend="numba")(meta, torch.ones(2, 3, dtype=torch.bool, device="meta"))
    # a right-hand side that carries gradients takes the torch code under "auto" and is refused by "numba"
    s = torch.randn(2, 5)
    mask = torch.ones(2, 5, dtype=torch.bool)
    right = torch.rand(2, 5, 2, requires_grad=True)
    out = Hard()(s, mask).contract(right, which="above")
    out.sum().backward()
    assert right.grad is not None
    with pytest.raises(ValueError, match="backend='numba'"):
        Hard(backend="numba")(s, mask).contract(right, which="above")
    # the meta device (no data) and half precision run the torch code under "auto"
    assert Hard()(meta, torch.ones(2, 3, dtype=torch.bool, device="meta")).order.device.type == "meta"
