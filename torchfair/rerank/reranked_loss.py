r"""A fairness loss on the *re-ranked* order: train a ranker for the list a re-ranker will serve.

When a re-ranker runs after the model (``interleave:keep=10,p=1.0``: the model's top 10, then every tail item),
a fairness loss on the model's own order pushes on positions the re-ranker rewrites anyway.
:class:`RerankedLoss` evaluates the wrapped fairness loss on the order the re-ranker would serve, and passes its
gradient straight through to the scores:

.. math:: s'_i = s_i + \mathrm{sg}\big(v_{\pi(i)} - s_i\big), \qquad \frac{\partial s'_i}{\partial s_i} = 1,

where ``pi(i)`` is item ``i``'s position in the re-ranker's output (hard, detached, re-made at every call) and
``v_k`` the ``k``-th largest real score of the list: ``s'`` holds the list's own score values in the re-ranked
order, so the loss's ordering (``RampRank``, ``SoftRank``...) sees the served list with realistic spacings, and a
score's gradient is what the measure on the served list asks of the item in its served position (the
straight-through estimator of Bengio, Léonard & Courville 2013, applied to the re-ranker's permutation).  With the
interleaving above, the gradient acts where the re-ranker cannot: the top-``k`` items against the tail items served
just below them, i.e. on which items enter the top ``k``.  The measure is unchanged (the wrapped loss is any
fairness loss of :mod:`torchfair.losses`); only the order it sees is the served one.

Example::

    >>> import torch
    >>> from torchfair.losses import DIPSLoss
    >>> from torchfair.rerank import RerankedLoss
    >>> loss = RerankedLoss(DIPSLoss(num_groups=2), "interleave:keep=2,p=1.0")
    >>> s = torch.randn(4, 12, requires_grad=True)
    >>> loss(s, torch.randint(0, 3, (4, 12)).float(), torch.randint(0, 2, (4, 12))).backward()
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor, nn

from .registry import Reranker, get_reranker

__all__ = ["RerankedLoss", "straight_through_scores"]


def straight_through_scores(scores: Tensor, ranking: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """``s + sg(v[pos] - s)``: the list's own real score values in the order ``ranking`` (``[B, N]``, item at each
    position, real items first), with gradient 1 to each item's own score (module docstring).  Padded slots keep
    their scores."""
    s = scores
    real = torch.ones_like(s, dtype=torch.bool) if mask is None else mask
    keyed = torch.where(real, s.detach(), torch.full_like(s, float("-inf")))
    v = torch.sort(keyed, dim=-1, descending=True).values                     # k-th largest real score at k
    N = s.shape[-1]
    pos = torch.empty_like(ranking).scatter_(-1, ranking, torch.arange(N, device=s.device).expand_as(ranking))
    target = torch.where(real, v.gather(-1, pos), s.detach())
    return s + (target - s.detach())


class RerankedLoss(nn.Module):
    """``loss(straight_through_scores(scores, reranker(scores).ranking), relevance, groups, mask)``: the wrapped
    fairness loss on the order ``reranker`` serves, its gradient passed straight through to the scores (module
    docstring).

    Args:
        loss: a fairness loss of :mod:`torchfair.losses` (``DIPSLoss(num_groups=2)``...).
        reranker: a re-ranker spec (``"interleave:keep=10,p=1.0"``) or :class:`~torchfair.rerank.Reranker`; it sees
            the detached scores, the groups and the mask, never the relevance.
        num_groups: passed to the re-ranker (the number of groups of integer ids), optional.
    """

    def __init__(self, loss: nn.Module, reranker: Union[str, Reranker] = "interleave:keep=10,p=1.0",
                 num_groups: Optional[int] = None):
        super().__init__()
        if not isinstance(loss, nn.Module):
            raise ValueError(f"`loss` must be a loss module (e.g. DIPSLoss(num_groups=2)); got {loss!r}")
        try:
            self.reranker = get_reranker(reranker)
        except ValueError as e:
            raise ValueError(f"`reranker`: {e}") from None
        self.loss = loss
        self.num_groups = num_groups

    def forward(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tensor:
        if not isinstance(scores, Tensor):
            raise ValueError(f"`scores` must be a tensor [B, N]; got {type(scores).__name__}")
        if groups is None:
            raise ValueError("`groups` is required by RerankedLoss (the re-ranker needs the items' groups)")
        squeeze = scores.dim() == 1
        s = scores.unsqueeze(0) if squeeze else scores
        g = groups.unsqueeze(0) if squeeze and groups.dim() == 1 else groups
        m = None if mask is None else (mask.unsqueeze(0) if squeeze else mask)
        r = relevance.unsqueeze(0) if (squeeze and relevance is not None) else relevance
        ranking = self.reranker(s.detach().float(), None, g, m, num_groups=self.num_groups).ranking
        return self.loss(straight_through_scores(s, ranking, m), r, g, m)

    def extra_repr(self) -> str:
        return f"reranker={self.reranker.spec!r}"
