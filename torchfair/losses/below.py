"""A fairness term on the items below the current top ``k``: the loss analogue of the re-ranker's ``keep``.

NDCG@k values only the top ``k`` positions, while exposure measures such as DIPS (RBP browsing) count the whole
list.  The measure-targeted re-ranker exploits that: with ``keep=k`` it leaves the top ``k`` alone and reorders
the rest.  :class:`BelowTopK` gives a training loss the same freedom: the wrapped fairness loss is evaluated on
the list without the items that the current scores rank in the top ``k`` (a hard, detached choice, re-made at
every call), so its gradient never pushes an item into or out of the top ``k``; the utility term (e.g.
:class:`~torchfair.losses.LambdaNDCGLoss` with the same ``k``) decides the top.  The measure itself is unchanged
(the wrapped loss is any fairness loss of :mod:`torchfair.losses`, a measure on an ordering): only the items it
sees are restricted, as a mask.  Items of the remaining list are ranked from position 0, so position-based
exposure is that of the sub-list (for RBP a common factor ``gamma**k``).

Example::

    >>> import torch
    >>> from torchfair.losses import BelowTopK, PairwiseAccuracyGapLoss
    >>> loss = BelowTopK(PairwiseAccuracyGapLoss(num_groups=2), k=2)
    >>> s = torch.randn(4, 12, requires_grad=True)
    >>> loss(s, torch.randint(0, 3, (4, 12)).float(), torch.randint(0, 2, (4, 12))).backward()
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from .._validation import check_int, prepare

__all__ = ["BelowTopK", "below_top_k_mask"]


def below_top_k_mask(scores: Tensor, k: int, mask: Optional[Tensor] = None, *, validate_args: bool = True) -> Tensor:
    """``[B, N]`` bool: the real items that the scores do *not* rank in the top ``k`` (ties by list index, as
    :class:`~torchfair.orderings.Hard`); no gradient.  ``[N]`` works too.

    Example::

        >>> below_top_k_mask(torch.tensor([0.1, 3.0, 2.0, 0.5]), 2).tolist()
        [True, False, False, True]
    """
    k = check_int(k, "k", 0)
    b = prepare(scores, None, None, mask, validate=validate_args)
    s = b.scores.detach()
    N = s.shape[-1]
    keyed = torch.where(b.mask, s, torch.full_like(s, float("-inf")))
    order = torch.sort(keyed, dim=-1, descending=True, stable=True).indices
    pos = torch.empty_like(order).scatter_(-1, order, torch.arange(N, device=s.device).expand_as(order))
    return b.out(b.mask & (pos >= k))


class BelowTopK(nn.Module):
    """``loss(scores, relevance, groups, mask & below_top_k_mask(scores, k))``: the wrapped fairness loss on the
    items below the current top ``k`` (module docstring).  ``k = 0`` is the wrapped loss itself.  Lists with at
    most ``k`` real items leave nothing below the top: the wrapped loss sees an empty list there, which every loss
    of :mod:`torchfair.losses` treats as undefined (0, no gradient, left out of the mean)."""

    def __init__(self, loss: nn.Module, k: int = 10):
        super().__init__()
        if not isinstance(loss, nn.Module):
            raise ValueError(f"`loss` must be a loss module (e.g. DIPSLoss(num_groups=2)); got {loss!r}")
        self.loss = loss
        self.k = check_int(k, "k", 0)

    def forward(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tensor:
        if self.k == 0:
            return self.loss(scores, relevance, groups, mask)
        # the scores are checked here on every real item (the wrapped loss checks only the items below the top k,
        # so a NaN or infinite score ranked in the top k would otherwise pass unseen)
        below = below_top_k_mask(scores, self.k, mask, validate_args=getattr(self.loss, "validate_args", True))
        if not bool(below.any()):  # nothing below the top k in the whole batch (one host read, as input checks do)
            real = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
            return torch.where(real, scores, torch.zeros_like(scores)).sum() * 0.0
        return self.loss(scores, relevance, groups, below)

    def extra_repr(self) -> str:
        return f"k={self.k}"
