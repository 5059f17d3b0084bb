"""torchfair.rerank.fa_ir: FA*IR (Zehlike et al., CIKM 2017, Algorithm 1) against the plain loops of
tests/references/rerank_reference.py and of this file, worked examples, the ranked group fairness test on its
output; one-group lists; bad input."""
import pytest
import torch
from hypothesis import given, strategies as st

import rerank_reference as R
from rerank_cases import SETTINGS, _batch, _check_padding, _real
from torchfair.metrics import fa_ir_adjusted_alpha, fa_ir_mtable, fa_ir_test
from torchfair.rerank import fa_ir


def _fa_ir_loop(s, g, n, protected, m, K):
    """Zehlike et al., CIKM 2017, Algorithm 1, one list (a tie between the queue heads: the protected one)."""
    order = sorted(range(n), key=lambda i: (-s[i], i))
    P = [i for i in order if g[i] == protected]
    Q = [i for i in order if g[i] != protected]
    out, tp = [], 0
    for pos in range(n):
        need = pos < K and tp < m[pos]
        if P and (need or not Q or s[P[0]] >= s[Q[0]]):
            out.append(P.pop(0))
            tp += 1
        else:
            out.append(Q.pop(0))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_fa_ir_equals_algorithm_1(seed):
    gen = torch.Generator().manual_seed(seed)
    B, N = 5, 17
    s = torch.randint(0, 6, (B, N), generator=gen).float()  # ties
    g = torch.randint(-1, 2, (B, N), generator=gen)
    mask = torch.rand(B, N, generator=gen) < 0.85
    mask[:, 0] = True
    p, K = (0.3, 0.5, 0.6)[seed % 3], (None, 12)[seed % 2]
    out = fa_ir(s, g, p=p, alpha=0.1, k=K, mask=mask, num_groups=2)
    for b in range(B):
        idx = [i for i in range(N) if mask[b, i]]
        n = len(idx)
        m = fa_ir_mtable(K or n, p, 0.1).tolist()  # default k: the list's own length
        ref = _fa_ir_loop([float(s[b, i]) for i in idx], [int(g[b, i]) for i in idx], n, 1, m, K or n)
        got = out.ranking[b, :n].tolist()
        if out.one_group[b]:
            continue
        assert got == [idx[i] for i in ref], b
        assert sorted(out.ranking[b, n:].tolist()) == [i for i in range(N) if not mask[b, i]]  # padding last
        if out.met[b]:
            assert bool(fa_ir_test(out.scores[b][mask[b]], g[b][mask[b]], p=p, alpha=0.1, k=K or n,
                                  num_groups=2).passed)


def test_fa_ir_identity_when_the_ranking_already_passes():
    s = torch.arange(20, 0, -1).float()
    g = torch.tensor([1, 0] * 10)
    assert fa_ir(s, g, p=0.5).ranking.tolist() == list(range(20))


def _fa_ir_case(seed, B=6, N=13):
    gen = torch.Generator().manual_seed(seed)
    s, g, mask = _batch(gen, B, N, 3)  # ids -1, 0, 1, 2; protected 1
    p = (0.3, 0.5, 0.6, 0.7)[seed % 4]
    alpha = (0.1, 0.05, 0.2)[seed % 3]
    k = (None, 8, 13, 1)[seed % 4]
    adjust = seed % 2 == 0
    return s, g, mask, p, alpha, k, adjust


@pytest.mark.parametrize("seed", range(12))
def test_fa_ir_is_algorithm_1(seed):
    s, g, mask, p, alpha, k, adjust = _fa_ir_case(seed)
    B, N = s.shape
    K = N if k is None else k
    m = fa_ir_mtable(K, p, alpha) if adjust else R.mtable(K, p, alpha)
    m = m.tolist() if isinstance(m, torch.Tensor) else m
    a = fa_ir_adjusted_alpha(K, p, alpha) if adjust else alpha
    out = fa_ir(s, g, p=p, alpha=alpha, k=k, adjust=adjust, mask=mask, num_groups=3)
    _check_padding(out, mask)
    for b in range(B):
        idx, sb, gb = _real(b, s, g, mask)
        ref = [idx[i] for i in R.fa_ir(sb, gb, 1, m, K)]
        one = not (1 in gb and any(x != 1 for x in gb))
        assert bool(out.one_group[b]) == one
        if one:  # unchanged; met says whether the start order holds the table (not without protected items)
            assert out.ranking[b, :len(idx)].tolist() == [idx[i] for i in R.start_order(sb)]
            assert bool(out.met[b]) == R.satisfies_mtable(R.start_order(sb), gb, 1, m)
            continue
        assert out.ranking[b, :len(idx)].tolist() == ref, b
        local = [idx.index(i) for i in ref]
        assert bool(out.met[b]) == R.satisfies_mtable(local, gb, 1, m)
        if out.met[b]:  # passes the ranked group fairness test, by the reference and by fa_ir_test
            assert R.fa_ir_test_passes(local, gb, 1, p, a, K)
    passed = fa_ir_test(out.scores, g, p=p, alpha=alpha, k=K, adjust=adjust, mask=mask, num_groups=3).passed
    assert bool((passed | ~out.met).all())


def test_fa_ir_worked_examples():
    # p = 0.5, alpha = 0.1 unadjusted, k = 10: m = 0 0 0 1 1 1 2 2 3 3; protected items ranked 6th..10th
    s = torch.arange(10, 0, -1).double()
    g = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    out = fa_ir(s, g, p=0.5, alpha=0.1, adjust=False)
    # prefix 4 needs one protected item (the best, 5), prefix 7 a second (6), prefix 9 a third (7); the others
    # fill in by score
    assert out.ranking.tolist() == [0, 1, 2, 5, 3, 4, 6, 7, 8, 9]
    assert bool(out.met) and not bool(out.one_group)
    # not enough protected items: the constraint cannot hold, the rest is by score
    out = fa_ir(s, torch.tensor([0] * 9 + [1]), p=0.5, alpha=0.1, adjust=False)
    assert out.ranking.tolist() == [0, 1, 2, 9, 3, 4, 5, 6, 7, 8] and not bool(out.met)
    # k = 4: only prefix 4 is constrained, then the merge by score continues
    out = fa_ir(s, g, p=0.5, alpha=0.1, k=4, adjust=False)
    assert out.ranking.tolist() == [0, 1, 2, 5, 3, 4, 6, 7, 8, 9]
    # a tie between a protected and a non-protected item goes to the protected one (the authors' rule)
    out = fa_ir(torch.tensor([2., 1., 1., 0.]), torch.tensor([0, 0, 1, 1]), p=0.1, alpha=0.1, adjust=False)
    assert out.ranking.tolist() == [0, 2, 1, 3]
    out = fa_ir(torch.tensor([2., 1., 1., 0.]), torch.tensor([0, 1, 0, 1]), p=0.1, alpha=0.1, adjust=False)
    assert out.ranking.tolist() == [0, 1, 2, 3]



def test_fa_ir_puts_the_protected_item_first_at_equal_scores():
    """Item 6: the documented tie rule, on the minimal example (two items, equal scores, one protected, no prefix
    requiring a protected item: m = 0, 0), as the authors' Algorithm 1 (``>=``) and fairsearchcore do; a
    score-order (stable) merge would keep [0, 1]. Within a group, ties keep index order; padding stays last."""
    s, g = torch.tensor([1., 1.]), torch.tensor([0, 1])
    assert fa_ir_mtable(2, 0.5, 0.1, adjust=False).tolist() == [0, 0]
    out = fa_ir(s, g, adjust=False)
    assert out.ranking.tolist() == [1, 0] and bool(out.met) and not bool(out.one_group)
    assert fa_ir(s, torch.tensor([1, 0]), adjust=False).ranking.tolist() == [0, 1]  # protected already first
    # three-way tie, two protected (ids 1), and a padded item: protected in index order, then the other, padding last
    out = fa_ir(torch.tensor([[3., 3., 3., 9.]]), torch.tensor([[0, 1, 1, 0]]),
                mask=torch.tensor([[True, True, True, False]]), adjust=False)
    assert out.ranking.tolist() == [[1, 2, 0, 3]]
    # the same scores one group only: unchanged
    assert fa_ir(s, torch.tensor([0, 0]), adjust=False).ranking.tolist() == [0, 1]

@SETTINGS
@given(data=st.data())
def test_fa_ir_met_passes_fa_ir_test_and_a_passing_ranking_is_unchanged(data):
    N = data.draw(st.integers(2, 12))
    B = data.draw(st.integers(1, 3))
    p = data.draw(st.sampled_from([0.2, 0.4, 0.5, 0.65]))
    alpha = data.draw(st.sampled_from([0.05, 0.1, 0.3]))
    k = data.draw(st.one_of(st.none(), st.integers(1, N)))
    s = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 4), min_size=N, max_size=N),
                                        min_size=B, max_size=B))).double()
    g = torch.tensor(data.draw(st.lists(st.lists(st.integers(-1, 1), min_size=N, max_size=N),
                                        min_size=B, max_size=B)))
    out = fa_ir(s, g, p=p, alpha=alpha, k=k, num_groups=2)
    res = fa_ir_test(out.scores, g, p=p, alpha=alpha, k=k, num_groups=2)
    assert bool((res.passed | ~out.met).all())
    start = torch.sort(s, dim=-1, descending=True, stable=True).indices
    before = fa_ir_test(s, g, p=p, alpha=alpha, k=k, num_groups=2).passed
    K = N if k is None else k
    m = fa_ir_mtable(K, p, alpha).tolist()
    for b in range(B):
        if R.satisfies_mtable(start[b].tolist(), g[b].tolist(), 1, m):  # already fair: the score order, only
            # ties reordered (protected first at equal scores, index order within a group)
            assert s[b][out.ranking[b]].tolist() == s[b][start[b]].tolist()
            protected_first = sorted(range(N), key=lambda i: (-s[b, i].item(), g[b, i].item() != 1, i))
            assert out.ranking[b].tolist() == (start[b].tolist() if bool(out.one_group[b]) else protected_first)
            assert bool(out.met[b]) and bool(before[b])


def test_fa_ir_list_without_protected_items_is_not_met():
    # unchanged (one group) but the m-table needs a protected item by position 4: not met, and fa_ir_test agrees
    s, g = torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 0, 0, 0])
    out = fa_ir(s, g, p=0.5, alpha=0.1, adjust=False, num_groups=2)
    assert bool(out.one_group) and not bool(out.met) and out.ranking.tolist() == [0, 1, 2, 3]
    assert not bool(fa_ir_test(s, g, p=0.5, alpha=0.1, adjust=False, num_groups=2).passed)
    out = fa_ir(s[:3], g[:3], p=0.5, alpha=0.1, adjust=False, num_groups=2)  # m = 0 0 0: nothing required
    assert bool(out.one_group) and bool(out.met)


def test_fa_ir_only_protected_and_unknown_is_two_sided():
    # FA*IR splits protected / everyone else (unknown group included), as documented: not a one-group list
    out = fa_ir(torch.tensor([4., 3., 2., 1.]), torch.tensor([-1, -1, -1, 1]), p=0.5, alpha=0.1, adjust=False)
    assert not bool(out.one_group)
    assert out.ranking.tolist() == [0, 1, 2, 3]  # m = 0 0 0 1: the protected item moves up to position 3 anyway


_S, _G = torch.randn(5), torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("call, arg", [
    (lambda: fa_ir(_S, None), "groups"),  # issue 28: was AttributeError
    (lambda: fa_ir(_S, _G, k=0), "k"),
    (lambda: fa_ir(_S, _G, k=2.0), "k"),
    (lambda: fa_ir(_S, _G, p=0.0), "p"),
    (lambda: fa_ir(_S, _G, p=1.0), "p"),
    (lambda: fa_ir(_S, _G, p=1.5), "p"),
    (lambda: fa_ir(_S, _G, alpha=0.0), "alpha"),
    (lambda: fa_ir(_S, _G, alpha=1.0), "alpha"),
    (lambda: fa_ir(_S, _G, alpha=1.5), "alpha"),
    (lambda: fa_ir(_S, _G, protected=2, num_groups=2), "protected"),
    (lambda: fa_ir(_S, _G, protected=-1), "protected"),
    (lambda: fa_ir(_S, _G, adjust=1), "adjust"),
    (lambda: fa_ir(_S, torch.rand(5, 2)), "groups"),
    (lambda: fa_ir(_S, torch.tensor([0, 1, 0, 1, 2]), num_groups=2), "groups"),
    (lambda: fa_ir(torch.tensor([1., float("nan"), 0., 2., 3.]), _G), "scores"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()
