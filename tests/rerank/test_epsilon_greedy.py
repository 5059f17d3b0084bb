"""torchfair.rerank.epsilon_greedy: epsilon-greedy (Feng & Shah, AAAI 2022) against the plain loop of
tests/references/rerank_reference.py given the same documented draws; seeds; bad input."""
import pytest
import torch

import rerank_reference as R
from rerank_cases import _batch, _check_padding, _is_one_group, _real
from torchfair.rerank import epsilon_greedy


def test_epsilon_greedy_seeded_and_identity():
    s = torch.randn(3, 25)
    assert epsilon_greedy(s, epsilon=0.0).ranking.tolist() == torch.sort(s, -1, descending=True).indices.tolist()
    a, b = epsilon_greedy(s, epsilon=0.3, seed=4), epsilon_greedy(s, epsilon=0.3, seed=4)
    assert torch.equal(a.ranking, b.ranking)
    assert not torch.equal(a.ranking, epsilon_greedy(s, epsilon=0.3, seed=5).ranking)


def _eps_draws(seed, B, N):
    """The draws epsilon_greedy documents: u then v, each torch.rand(B, N, float64) from a CPU Generator."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(B, N, generator=gen, dtype=torch.float64)
    v = torch.rand(B, N, generator=gen, dtype=torch.float64)
    return u, v


@pytest.mark.parametrize("seed, epsilon", [(0, 0.3), (1, 0.7), (2, 1.0), (3, 0.05), (4, 0.5)])
def test_epsilon_greedy_is_the_loop_given_the_same_draws(seed, epsilon):
    gen = torch.Generator().manual_seed(50 + seed)
    B, N = 6, 12
    s, g, mask = _batch(gen, B, N, 2, unknown=False)
    out = epsilon_greedy(s, epsilon=epsilon, seed=seed, mask=mask)
    _check_padding(out, mask)
    u, v = _eps_draws(seed, B, N)
    for b in range(B):
        idx, sb, _ = _real(b, s, g, mask)
        ref = R.epsilon_greedy(sb, epsilon, u[b].tolist(), v[b].tolist())
        assert out.ranking[b, :len(idx)].tolist() == [idx[i] for i in ref], b
    assert bool(out.met.all()) and not bool(out.one_group.any())
    # with groups: the same output for the lists with two groups; the one-group lists are returned unchanged
    g2 = g.clone()
    g2[0] = 0
    out2 = epsilon_greedy(s, g2, epsilon=epsilon, seed=seed, mask=mask)
    for b in range(B):
        idx, sb, gb = _real(b, s, g2, mask)
        assert bool(out2.one_group[b]) == _is_one_group(gb)
        want = [idx[i] for i in R.start_order(sb)] if _is_one_group(gb) else out.ranking[b, :len(idx)].tolist()
        assert out2.ranking[b, :len(idx)].tolist() == want
    assert bool(out2.one_group[0])


def test_epsilon_greedy_seeds():
    s = torch.randn(4, 30, generator=torch.Generator().manual_seed(0))
    start = torch.sort(s, dim=-1, descending=True, stable=True).indices
    assert torch.equal(epsilon_greedy(s, epsilon=0.0, seed=3).ranking, start)  # epsilon = 0: the identity
    a, b = epsilon_greedy(s, epsilon=0.3, seed=4), epsilon_greedy(s, epsilon=0.3, seed=4)
    assert torch.equal(a.ranking, b.ranking) and torch.equal(a.scores, b.scores)
    assert not torch.equal(a.ranking, epsilon_greedy(s, epsilon=0.3, seed=5).ranking)
    assert not torch.equal(a.ranking, start)


_S, _G = torch.randn(5), torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("call, arg", [
    (lambda: epsilon_greedy(_S, epsilon=1.5), "epsilon"),
    (lambda: epsilon_greedy(_S, epsilon=-0.1), "epsilon"),
    (lambda: epsilon_greedy(_S, seed=-1), "seed"),
    (lambda: epsilon_greedy(_S, seed=1.5), "seed"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()
