"""torchfair.rerank.interleave: the share interleaving against a plain per-slot loop of its rule (keep the top,
then slot j is protected iff fewer than p * j protected items sit in the merged prefix), its invariants
(hypothesis), the spec, and the targeted re-ranker's share family as the argmin over the interleavings."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchfair.metrics import dips, pairwise_gap
from torchfair.rerank import get_reranker, interleave, targeted_rerank


def loop_interleave(scores, groups, p, keep, protected):
    """The rule slot by slot: the ranker's order (ties by index), the top ``keep`` fixed, then the protected item
    when the count of protected items placed is below ``p * j`` for slot ``j`` (1-based), else the other one."""
    n = len(scores)
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    k = min(keep, n)
    out = order[:k]
    prot = [i for i in order[k:] if groups[i] == protected]
    other = [i for i in order[k:] if groups[i] != protected]
    c = 0
    for j in range(1, n - k + 1):
        if prot and (not other or c < p * j - 1e-12):
            out.append(prot.pop(0))
            c += 1
        else:
            out.append(other.pop(0))
    return out


@pytest.mark.parametrize("p", [0.0, 0.1, 0.3, 0.5, 0.7, 0.95, 1.0])
@pytest.mark.parametrize("keep", [0, 2, 7])
def test_interleave_equals_the_per_slot_loop(p, keep):
    gen = torch.Generator().manual_seed(int(100 * p) + keep)
    s = torch.randint(0, 6, (12,), generator=gen).float()  # ties: by index
    g = torch.randint(-1, 3, (12,), generator=gen)
    got = interleave(s, g, p=p, keep=keep, protected=1).ranking.tolist()
    assert got == loop_interleave(s.tolist(), g.tolist(), p, keep, 1)


def test_interleave_worked_example():
    s, g = torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1])
    assert interleave(s, g, p=0.5, keep=1).ranking.tolist() == [0, 3, 1, 4, 2, 5]
    assert interleave(s, g, p=1.0, keep=1).ranking.tolist() == [0, 3, 4, 5, 1, 2]
    assert interleave(s, g, p=0.0, keep=1).ranking.tolist() == [0, 1, 2, 3, 4, 5]
    # p = 2/3 at keep 0: prefixes 1, 2, 3 hold ceil(2j/3) = 1, 2, 2 protected items
    assert interleave(s, g, p=2 / 3).ranking.tolist() == [3, 4, 0, 5, 1, 2]


def test_interleave_batched_and_masked_equals_one_list_at_a_time():
    gen = torch.Generator().manual_seed(3)
    s = torch.randn(4, 9, generator=gen)
    g = torch.randint(0, 2, (4, 9), generator=gen)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[1, 6:] = False
    mask[3, :] = False
    out = interleave(s, g, p=0.8, keep=3, mask=mask)
    for b in range(3):
        n = int(mask[b].sum())
        one = interleave(s[b, :n], g[b, :n], p=0.8, keep=3).ranking
        assert out.ranking[b, :n].tolist() == one.tolist()
        assert out.ranking[b, n:].tolist() == list(range(n, 9))  # padding last, in index order
    assert out.ranking[3].tolist() == list(range(9))


def test_interleave_keep_longer_than_the_list_leaves_it_unchanged():
    s, g = torch.tensor([1., 3., 2.]), torch.tensor([1, 0, 1])
    assert interleave(s, g, p=1.0, keep=10).ranking.tolist() == [1, 2, 0]


def test_interleave_met_and_one_group():
    s = torch.tensor([[6., 5., 4., 3., 2., 1.], [6., 5., 4., 3., 2., 1.]])
    g = torch.tensor([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])
    out = interleave(s, g, p=0.5)
    # one protected item cannot fill half of six slots; a list without any cannot either
    assert out.met.tolist() == [False, False]
    assert out.one_group.tolist() == [False, True]
    assert interleave(s[:1], g[:1], p=0.1).met.tolist() == [True]


@pytest.mark.parametrize("bad, arg", [({"p": 1.5}, "p"), ({"p": -0.1}, "p"), ({"p": float("nan")}, "p"),
                                      ({"keep": -1}, "keep"), ({"keep": 1.5}, "keep"), ({"protected": -1}, "protected"),
                                      ({"protected": 2, "num_groups": 2}, "protected")])
def test_interleave_bad_input_names_the_argument(bad, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        interleave(torch.randn(4), torch.tensor([0, 1, 0, 1]), **bad)


def test_interleave_refuses_soft_membership():
    with pytest.raises(ValueError, match="groups"):
        interleave(torch.randn(4), torch.rand(4, 2))


def test_interleave_spec():
    r = get_reranker("interleave:p=0.9,keep=2")
    s, g = torch.tensor([[5., 4., 3., 2., 1.]]), torch.tensor([[0, 0, 0, 1, 1]])
    assert r(s, None, g).ranking.tolist() == [[0, 1, 3, 4, 2]]
    with pytest.raises(ValueError, match="kep"):
        get_reranker("interleave:p=0.9,kep=2")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1)), min_size=1, max_size=14),
       st.floats(0.0, 1.0), st.integers(0, 5))
def test_interleave_properties(items, p, keep):
    s = torch.tensor([float(x) for x, _ in items])
    g = torch.tensor([y for _, y in items])
    out = interleave(s, g, p=p, keep=keep)
    r = out.ranking.tolist()
    assert sorted(r) == list(range(len(items)))  # a permutation
    start = sorted(range(len(items)), key=lambda i: (-float(s[i]), i))
    k = min(keep, len(items))
    assert r[:k] == start[:k]  # the top keep fixed
    for grp in (0, 1):  # each group keeps the ranker's order
        assert [i for i in r if g[i] == grp] == [i for i in start if g[i] == grp]
    # every merged prefix holds at least ceil(p j) protected items while the protected side lasts
    c, total = 0, int((g[start[k:]] == 1).sum()) if k < len(items) else 0
    for j, i in enumerate(r[k:], 1):
        c += int(g[i] == 1)
        assert c >= min(math.ceil(p * j - 1e-9), total) or c == total


def _gap(s, g):
    s = s.double()
    return float(pairwise_gap(dips(s, torch.zeros_like(s), g, num_groups=2, browsing="uniform"))[0, 1].abs())


@pytest.mark.parametrize("seed", range(4))
def test_targeted_share_family_is_the_argmin_over_the_interleavings(seed):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(8, generator=gen)
    g = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])[torch.randperm(8, generator=gen)]
    shares = (0.3, 0.6, 1.0)
    out = targeted_rerank(s, g, keep=seed % 3, family="interleave", shares=shares, browsing="uniform")
    best = _gap(s, g)
    for c in (0, 1):
        for p in shares:
            best = min(best, _gap(interleave(s, g, p=p, keep=seed % 3, protected=c).scores, g))
    assert _gap(out.scores, g) == pytest.approx(best, abs=1e-12)
    assert float(out.objective[1]) == pytest.approx(best, abs=1e-9)


def test_targeted_share_family_reaches_the_plain_interleaving():
    # one share, one group able to lower the measure: the targeted choice is that interleaving
    s, g = torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1])
    out = targeted_rerank(s, g, keep=1, family="interleave", shares=1.0, browsing="uniform")
    assert out.ranking.tolist() == interleave(s, g, p=1.0, keep=1).ranking.tolist()


@pytest.mark.parametrize("bad, arg", [({"family": "swap"}, "family"), ({"shares": (0.5, 1.2)}, "shares"),
                                      ({"shares": "0.5"}, "shares"), ({"shares": ()}, "shares")])
def test_targeted_share_family_bad_input(bad, arg):
    kw = {"family": "interleave", **bad}
    with pytest.raises(ValueError, match=f"`{arg}`"):
        targeted_rerank(torch.randn(4), torch.tensor([0, 1, 0, 1]), **kw)


def test_targeted_share_family_refuses_soft_membership():
    with pytest.raises(ValueError, match="family"):
        targeted_rerank(torch.randn(4), torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0], [0.2, 0.8]]),
                        family="interleave")
