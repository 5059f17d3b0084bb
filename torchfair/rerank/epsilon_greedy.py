r"""ε-greedy re-ranking (Feng & Shah. *Has CEO Gender Bias Really Been Fixed? Adversarial Attacking and Improving
Gender Fairness in Image Search*. AAAI 2022, §5), as FairRankTune ships it.

Walking down the ranking, at each position ``i`` (but the last) with probability ``ε`` the item there is swapped
with an item drawn uniformly from the positions below it; otherwise it stays.  Group-blind exploration: it
spreads exposure towards lower-ranked items (and so, on popularity-biased rankings, towards the tail) at a
utility cost that grows with ``ε``.

Batched: one loop over positions with ``[B]`` operations, on the scores' device.  The random numbers are drawn up
front from a CPU ``torch.Generator`` seeded with ``seed``, so the output depends only on the seed, the batch and
the list lengths, not on the device.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .._validation import check_int, check_number
from ._common import Reranking, finish_rerank, groups_present, prepare_rerank, start_order

__all__ = ["epsilon_greedy"]


def epsilon_greedy(scores: Tensor, groups: Optional[Tensor] = None, *, epsilon: float = 0.1, seed: int = 0,
                   mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                   validate_args: bool = True) -> Reranking:
    r"""ε-greedy re-ranking (Feng & Shah, AAAI 2022): for ``i`` from 0 to ``n - 2``, with probability ``epsilon``
    swap the item at position ``i`` with one drawn uniformly from the positions ``i + 1`` to ``n - 1`` of the
    current ranking.

    ``epsilon`` in [0, 1]; ``seed``: an int (the same seed, batch and lengths give the same output on any device).
    ``groups`` is optional (the algorithm is group-blind); when given, lists with fewer than two groups present are
    returned unchanged (``one_group``), as for every re-ranker.

    Example::

        >>> epsilon_greedy(torch.tensor([3., 2., 1.]), epsilon=0.0).ranking
        tensor([0, 1, 2])
    """
    epsilon = check_number(epsilon, "epsilon", low=0.0, high=1.0)
    seed = check_int(seed, "seed", low=0)
    b = prepare_rerank(scores, groups, mask, num_groups, validate_args=validate_args)
    B, N = b.mask.shape
    dev = b.scores.device
    order, _ = start_order(b)
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(B, N, generator=gen, dtype=torch.float64).to(dev)
    v = torch.rand(B, N, generator=gen, dtype=torch.float64).to(dev)
    n = b.mask.sum(-1)
    cur = order.clone()
    rows = torch.arange(B, device=dev)
    for i in range(max(N - 1, 0)):
        rest = n - i - 1  # items below position i
        swap = (u[:, i] < epsilon) & (rest > 0)
        j = i + 1 + torch.minimum((v[:, i] * rest.clamp(min=1)).long(), (rest - 1).clamp(min=0))
        j = torch.where(swap, j, torch.full_like(j, i))
        a, c = cur[:, i].clone(), cur[rows, j]
        cur[:, i] = c
        cur[rows, j] = a
    one_group = groups_present(b) < 2 if b.membership is not None else torch.zeros(B, dtype=torch.bool, device=dev)
    return finish_rerank(b, cur, order, one_group, torch.ones(B, dtype=torch.bool, device=dev))
