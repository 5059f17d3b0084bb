"""torchfair.rerank._common: what every re-ranker shares, through every re-ranker of the registry -- the
``Reranking`` result (a permutation of the real items, padding last in index order, scores reproducing the
ranking), one-group lists returned unchanged, permuting the items permutes the output, 1-D input; and the helpers
themselves (``start_order``, ``finish_rerank``, ``integer_codes``) against loops and worked examples."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import rerank_reference as R
from rerank_cases import SETTINGS, _check_padding, _is_one_group, _real
from torchfair.metrics import fa_ir_mtable
from torchfair.rerank import Reranking, get_reranker
from torchfair.rerank._common import finish_rerank, groups_present, integer_codes, prepare_rerank, start_order


@pytest.mark.parametrize("spec", ["none", "fa_ir:p=0.4", "detconstsort", "epsgreedy:epsilon=0.5,seed=1",
                                  "targeted:measure=exposure_misallocation,keep=1",
                                  "targeted:measure=pairwise_accuracy,relevance=scores", "targeted:measure=awrf"])
def test_every_reranker_permutes_real_items_keeps_padding_and_one_group_lists(spec):
    gen = torch.Generator().manual_seed(1)
    B, N = 6, 15
    s = torch.randn(B, N, generator=gen).half()
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[0] = 0  # a one-group list
    mask = torch.rand(B, N, generator=gen) < 0.8
    mask[:, :2] = True
    out = get_reranker(spec)(s, None, g, mask, num_groups=2)
    for b in range(B):
        n = int(mask[b].sum())
        assert sorted(out.ranking[b, :n].tolist()) == sorted(torch.nonzero(mask[b]).flatten().tolist())
        assert out.ranking[b, n:].tolist() == torch.nonzero(~mask[b]).flatten().tolist()
        redo = torch.sort(torch.where(mask[b], out.scores[b], torch.tensor(-1.0)), descending=True, stable=True)
        assert redo.indices[:n].tolist() == out.ranking[b, :n].tolist()
    if spec != "none" and not spec.startswith("epsgreedy"):
        assert bool(out.one_group[0])
        start = torch.sort(torch.where(mask[0], s[0].float(), torch.tensor(-1e9)), descending=True, stable=True)
        assert out.ranking[0].tolist() == start.indices.tolist()
    one = get_reranker(spec)(s[1].float(), None, g[1], num_groups=2)
    assert one.ranking.dim() == 1


SPECS = ["none", "fa_ir:p=0.4", "fa_ir:p=0.5,alpha=0.2,k=3", "detconstsort", "detconstsort:distribution=0.3/0.7,k=4",
         "epsgreedy:epsilon=0.5,seed=1", "targeted", "targeted:measure=exposure_misallocation,keep=1",
         "targeted:measure=pairwise_accuracy,relevance=scores", "targeted:measure=awrf,max_utility_loss=0.1"]


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_common_properties(spec, data):
    rr = get_reranker(spec)
    B = data.draw(st.integers(1, 3))
    N = data.draw(st.integers(4, 8))
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.float16]))
    raw = data.draw(st.lists(st.lists(st.integers(0, 1000), min_size=N, max_size=N, unique=True),
                             min_size=B, max_size=B))  # tie-free, exact in float16
    s = (torch.tensor(raw, dtype=torch.float64) / 8).to(dtype)
    g = torch.tensor(data.draw(st.lists(st.lists(st.integers(-1, 1), min_size=N, max_size=N),
                                        min_size=B, max_size=B)))
    n = data.draw(st.lists(st.integers(4, N), min_size=B, max_size=B))
    mask = torch.arange(N)[None, :] < torch.tensor(n)[:, None]
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    mask = mask[:, perm]  # padding anywhere
    out = rr(s, None, g, mask, num_groups=2)
    assert isinstance(out, Reranking)
    assert out.ranking.shape == (B, N) and out.ranking.dtype == torch.long
    assert out.one_group.shape == out.met.shape == (B,)
    _check_padding(out, mask)
    # the scores reproduce the ranking under a stable descending sort (padded items: 0, after the real ones)
    assert torch.equal(torch.sort(out.scores, dim=-1, descending=True, stable=True).indices, out.ranking)
    assert bool((out.scores[~mask] == 0).all()) and bool((out.scores[mask] > 0).all())
    assert not out.scores.is_floating_point() or torch.isfinite(out.scores).all()
    for b in range(B):
        idx, sb, gb = _real(b, s.double(), g, mask)
        if _is_one_group(gb) and spec != "none" and not spec.startswith("fa_ir"):
            assert bool(out.one_group[b])
        if out.one_group[b]:
            assert out.ranking[b, :len(idx)].tolist() == [idx[i] for i in R.start_order(sb)]
    # permuting the items permutes the output (tie-free scores); the padded tail is in index order either way
    sigma = torch.randperm(N, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    out_p = rr(s[:, sigma], None, g[:, sigma], mask[:, sigma], num_groups=2)
    for b in range(B):
        k = int(mask[b].sum())
        assert sigma[out_p.ranking[b, :k]].tolist() == out.ranking[b, :k].tolist()
    assert torch.equal(out_p.one_group, out.one_group)
    # 1-D in, 1-D out, the same as the first list of the batch
    one = rr(s[0], None, g[0], mask[0], num_groups=2)
    assert one.ranking.dim() == 1 and one.one_group.dim() == 0
    # epsilon-greedy's draws depend on the batch shape and DetConstSort's default target is the batch's shares,
    # both by design
    if not spec.startswith("epsgreedy") and spec != "detconstsort":
        assert one.ranking.tolist() == out.ranking[0].tolist()


@pytest.mark.parametrize("spec", SPECS)
def test_one_group_lists_are_returned_unchanged(spec):
    s = torch.tensor([[1., 5., 3., 2.], [1., 5., 3., 2.], [4., 3., 2., 1.]])
    g = torch.tensor([[1, 1, 1, 1], [-1, -1, -1, -1], [0, 0, 0, 0]])
    out = get_reranker(spec)(s, None, g, num_groups=2)
    if spec != "none":
        assert out.one_group.tolist() == [True, True, True]
    assert out.ranking.tolist() == [[1, 2, 3, 0], [1, 2, 3, 0], [0, 1, 2, 3]]
    if spec.startswith("fa_ir"):  # all protected: met; no protected item: met only if the table asks for none
        m = fa_ir_mtable(**({"k": 4, "p": 0.4, "alpha": 0.1} if spec == "fa_ir:p=0.4" else
                           {"k": 3, "p": 0.5, "alpha": 0.2})).tolist()
        assert out.met.tolist() == [True, m[-1] == 0, m[-1] == 0]
    else:
        assert bool(out.met.all())


# ----------------------------------------------------------------------------------------------- the helpers

@SETTINGS
@given(data=st.data())
def test_start_order_is_the_stable_descending_sort_with_padding_last_in_index_order(data):
    B, N = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 9))
    s = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 3), min_size=N, max_size=N), min_size=B,
                                        max_size=B)), dtype=torch.float64)
    mask = torch.tensor(data.draw(st.lists(st.lists(st.booleans(), min_size=N, max_size=N), min_size=B, max_size=B)))
    mask[:, 0] = True
    b = prepare_rerank(torch.where(mask, s, torch.full_like(s, float("nan"))), None, mask, None)
    order, positions = start_order(b)
    for i in range(B):
        real = sorted((j for j in range(N) if mask[i, j]), key=lambda j: (-float(s[i, j]), j))
        assert order[i].tolist() == real + [j for j in range(N) if not mask[i, j]]
        assert [order[i, int(positions[i, j])].item() for j in range(N)] == list(range(N))  # inverse permutation


def test_finish_rerank_restores_one_group_lists_and_builds_the_scores():
    s = torch.tensor([[0.1, 0.9, 0.5, 0.0], [3.0, 1.0, 2.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    b = prepare_rerank(s, g, mask, 2)
    order, _ = start_order(b)
    assert groups_present(b).tolist() == [2, 1]
    proposal = torch.tensor([[2, 0, 1, 3], [3, 2, 1, 0]])
    out = finish_rerank(b, proposal, order, groups_present(b) < 2, torch.tensor([True, False]))
    assert out.ranking.tolist() == [[2, 0, 1, 3], [0, 2, 1, 3]]  # list 1 (one group): the start order back
    assert out.scores.tolist() == [[3.0, 2.0, 4.0, 0.0], [4.0, 2.0, 3.0, 1.0]]  # N - k, padded items 0
    assert out.scores.dtype == torch.float64 and out.one_group.tolist() == [False, True]
    assert out.met.tolist() == [True, False] and out.objective is None
    ranking, scores = out  # a Reranking unpacks as (ranking, scores)
    assert ranking is out.ranking and scores is out.scores
    one = prepare_rerank(s[0], g[0], mask[0], 2)
    o1, _ = start_order(one)
    r1 = finish_rerank(one, proposal[:1], o1, torch.tensor([False]), torch.tensor([True]),
                       objective=torch.tensor([[0.5], [0.25]]))
    assert r1.ranking.tolist() == [2, 0, 1, 3] and r1.one_group.dim() == 0 and r1.objective.tolist() == [0.5, 0.25]


def test_integer_codes_refuse_soft_membership_and_check_ids():
    s, mask = torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool)
    g = torch.tensor([[0, -1, 2], [1, 1, 0]])
    b = prepare_rerank(s, g, mask, 3)
    codes, G = integer_codes(g, b, 3, "a re-ranker")
    assert G == 3 and codes.tolist() == g.tolist()
    soft = torch.nn.functional.one_hot(g.clamp(min=0), 3).float()
    with pytest.raises(ValueError, match="soft membership"):
        integer_codes(soft, prepare_rerank(s, soft, mask, None), None, "a re-ranker")
    with pytest.raises(ValueError, match="`groups`"):
        prepare_rerank(s, torch.tensor([[0, 1, 3], [0, 0, 0]]), mask, 3)
