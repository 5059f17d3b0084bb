"""What every re-ranker shares: input checks, the starting order, the result type.

A re-ranker takes a ranker's scores ``[B, N]`` (``[N]`` works too), the items' groups and a mask, and returns a
:class:`Reranking`: the new ranking (``ranking[b, k]`` = index of the item at 0-based position ``k``), scores whose
descending sort reproduces it (:func:`torchfair.orderings.scores_from_ranking`, so every measure of
:mod:`torchfair.metrics` evaluates it exactly), and per-list flags.

Conventions shared by every re-ranker:

* the starting ranking is the scores sorted descending, ties broken by list order (lower index first), as
  :class:`torchfair.orderings.Hard` does; every re-ranker breaks its own ties by that starting position, so the
  output is deterministic (ε-greedy given its seed);
* padded items (``mask`` False) are never moved into the list: they follow all real items, in index order;
* a list with fewer than two groups present (one group, or only items of unknown group) is returned unchanged and
  flagged in ``one_group``: no re-ranking can change how groups are treated in it (FA*IR's two groups are
  protected and non-protected, unknown items among the latter: :func:`torchfair.rerank.fa_ir`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._validation import Batch, group_codes, prepare

__all__ = ["Reranking", "start_order", "prepare_rerank", "finish_rerank", "integer_codes"]


@dataclass
class Reranking:
    """The result of a re-ranker.

    * ``ranking`` ``[B, N]`` long: the item at each 0-based position; padded items after the real ones;
    * ``scores`` ``[B, N]`` float: ``scores_from_ranking(ranking)``, padded items 0: pass them to any measure;
    * ``one_group`` ``[B]`` bool: lists with fewer than two groups present, returned unchanged;
    * ``met`` ``[B]`` bool: the re-ranker's own constraint holds on the output (FA*IR: every prefix passes the
      ranked group fairness test; DetConstSort: every prefix holds its minimum counts; ε-greedy: always True;
      the measure-targeted re-ranker: the estimated utility bound and every ``guard`` hold on the chosen ranking,
      re-checked from its values -- True on every list, as the input ranking meets them and stays a candidate.
      The guards are judged on the guard relevance *estimate* (``guard_relevance``), so ``met`` says nothing about
      the guard measures on the true relevance);
    * ``objective`` (measure-targeted only) ``[2, B]``: the targeted per-list objective before and after;
    * ``guard`` (measure-targeted with guards only) ``[2, B, K]``: each of the ``K`` guard measures' per-list
      objective (on the guard relevance) before and after; NaN where the guard measure is undefined (a list
      undefined before is not constrained by that guard).

    1-D input gives 1-D outputs (``[N]``, scalars; ``objective`` ``[2]``, ``guard`` ``[2, K]``).
    """

    ranking: Tensor
    scores: Tensor
    one_group: Tensor
    met: Tensor
    objective: Optional[Tensor] = None
    guard: Optional[Tensor] = None

    def __iter__(self):  # ranking, scores = reranker(...)
        return iter((self.ranking, self.scores))


def start_order(b: Batch) -> Tuple[Tensor, Tensor]:
    """The starting ranking of a batch: ``(order, positions)``, both ``[B, N]`` long; stable descending sort of the
    scores with padded items last (in index order)."""
    key = torch.where(b.mask, b.scores, torch.full_like(b.scores, float("-inf")))
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices
    ar = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    positions = torch.empty_like(order).scatter_(-1, order, ar)
    return order, positions


def prepare_rerank(scores: Tensor, groups: Optional[Tensor], mask: Optional[Tensor], num_groups: Optional[int],
                   relevance: Optional[Tensor] = None, validate_args: bool = True, name: Optional[str] = None
                   ) -> Batch:
    """Check and batch the inputs of a re-ranker (``ValueError`` naming the argument).  ``name``: the re-ranker,
    which needs ``groups`` (a ``groups`` that is not a tensor is refused naming it); ``None``: groups optional."""
    if name is not None and not isinstance(groups, Tensor):
        raise ValueError(f"`groups` must be a tensor of group ids [B, N] for {name} (a re-ranker needs the items' "
                         f"groups); got {type(groups).__name__}")
    return prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                   require_groups=groups is not None)


def integer_codes(groups: Tensor, b: Batch, num_groups: Optional[int], name: str, validate_args: bool = True
                  ) -> Tuple[Tensor, int]:
    """``(codes [B, N], G)`` of integer ``groups`` (``-1``: unknown group or padded); soft membership refused."""
    if groups.is_floating_point():
        raise ValueError(f"`groups` must be integer group ids [B, N] for {name}; soft membership [B, N, G] is not "
                         f"supported (it assigns items to one group)")
    g = groups.unsqueeze(0) if b.squeeze and groups.dim() == 1 else groups
    return group_codes(g, b.mask, num_groups, validate_args)


def groups_present(b: Batch) -> Tensor:
    """``[B]`` number of groups with a real item in each list."""
    return (b.membership.sum(1) > 0).sum(-1)


def finish_rerank(b: Batch, ranking: Tensor, order: Tensor, one_group: Tensor, met: Tensor,
                  objective: Optional[Tensor] = None, guard: Optional[Tensor] = None) -> Reranking:
    """Lists flagged ``one_group`` get the starting ``order`` back; padded items are placed last in index order;
    builds the :class:`Reranking` (squeezed for 1-D input)."""
    ranking = torch.where(one_group[:, None], order, ranking)
    # scores_from_ranking's values (N - k at position k), without its permutation check: ranking is one by
    # construction
    N = ranking.shape[-1]
    vals = (N - torch.arange(N, device=ranking.device, dtype=b.scores.dtype)).expand_as(ranking)
    scores = torch.empty_like(vals).scatter_(-1, ranking, vals)
    scores = torch.where(b.mask, scores, torch.zeros_like(scores))
    if b.squeeze:
        return Reranking(ranking[0], scores[0], one_group[0], met[0],
                         None if objective is None else objective[:, 0], None if guard is None else guard[:, 0])
    return Reranking(ranking, scores, one_group, met, objective, guard)
