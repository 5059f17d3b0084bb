"""The ordering abstraction every measure is written against.

An :class:`Ordering` turns scores ``[B, N]`` (and a mask) into an :class:`OrderedBatch`, which answers the only
questions the measures ask about a ranking:

* ``expected_positions()``: the (expected) 0-based position of every item, ``[B, N]``;
* ``exposure(browsing, relevance)``: ``E[F(pos_i)]`` for every item, ``[B, N]`` (0 for padded items).  Orderings
  weigh positions through the browsing interface only (:func:`ranked_exposure`, which calls
  :meth:`~torchfair.browsing.BrowsingModel.item_exposure` with the relevance in ranked order when the model
  declares ``relevance_dependent``, e.g. Cascade); ``relevance`` is needed only by such models;
* pair quantities, for every ordered pair ``(i, j)``:

  - ``above[i, j] = P(j is ranked above i)``,
  - ``joint[i, j] = E[F(pos_j) * 1(pos_j < pos_i)]`` (the browsing-weighted "j above i" DIPS needs);

* ``position_matrix()``: ``R[k, i] = P(item i at position k)``, a doubly stochastic matrix over the real items
  (Kuhlman et al., AIES 2021, eq. 10), for prefix measures.

A hard ordering (sorting) answers them exactly, so a measure evaluated on it is the exact evaluator; soft orderings
and Plackett-Luce policies answer them with differentiable or expected values, so the same measure becomes a loss.

Pair quantities are contracted, never returned as a whole: measures call :meth:`OrderedBatch.contract`, which
sums ``w(i, j) * X[i, j] * right[j, h]`` over ``j``.  Each ordering picks its strategy:

* :class:`~torchfair.orderings.Hard` (and mixtures of hard rankings: ``Sampled``, Plackett-Luce samples and
  enumerations) never forms pairs: one sorted sweep, ``O(B N H log N)`` time and ``O(B N H)`` memory, for graded
  or continuous relevance (:meth:`~torchfair.orderings.hard.HardOrderedBatch.contract`).  Pair *counts*
  (``which="one"``) do not depend on the ordering and take the same route for every ordering.
* differentiable orderings, with gradients, form all ``[B, N, N]`` pairs at once while ``B * N * N`` is within
  :data:`DENSE_PAIR_ELEMENTS` (the *dense* strategy: fastest, memory ``O(B N^2)``; SoftRank has a fused kernel
  with a hand-written backward), and beyond it work in row blocks of at most ``PAIR_BLOCK_ELEMENTS`` pair entries,
  recomputed in backward, so that forward + backward keeps only ``[B, N]``-sized tensors per block (SoftRank's
  fused kernel reuses its block buffers, so the process's resident size follows the live memory: ~14 MB of growth
  for the DIPS loss at B = 8, N = 4096 with glibc's default allocator, where allocating each block anew let the
  heap fragment to ~1.9 GB).  Without gradients the row blocks are used whatever the size.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .. import _linalg
from ..browsing import BrowsingModel
from .._validation import check_int
# the sorted sweeps (pair counts independent of the ordering, O(N log N)) and the pair weight they read
from ._pairsums import LevelPairWeight, contract_all_pairs

__all__ = ["Ordering", "OrderedBatch", "OrderingLike", "PairBlock", "PAIR_BLOCK_ELEMENTS", "DENSE_PAIR_ELEMENTS",
           "row_blocks", "ranked_exposure", "dense_pairs"]

#: pair entries (B * rows * N) computed at once by :meth:`OrderedBatch.contract`
PAIR_BLOCK_ELEMENTS = 2 ** 18

#: pair entries (B * N * N) up to which differentiable orderings form all pairs at once and let autograd keep them
#: (the *dense* strategy, fastest while ``[B, N, N]`` fits: ~16 MB per float32 tensor, a few kept for backward);
#: beyond it they work in row blocks recomputed in backward (bounded memory).  Orderings take ``dense_elements``
#: to override it per ordering; setting this attribute changes the default.
DENSE_PAIR_ELEMENTS = 2 ** 22


def row_blocks(B: int, N: int, budget: Optional[int] = None) -> Iterator[Tuple[int, int]]:
    """Row ranges ``[start, stop)`` such that ``B * (stop - start) * N <= budget`` (at least one row)."""
    budget = PAIR_BLOCK_ELEMENTS if budget is None else check_int(budget, "budget", low=1)
    rows = max(1, min(N, budget // max(1, B * N)))
    for start in range(0, N, rows):
        yield start, min(N, start + rows)


def dense_pairs(B: int, N: int, limit: Optional[int] = None) -> bool:
    """Whether the ``[B, N, N]`` pairs of a batch fit the dense budget ``limit`` (default
    :data:`DENSE_PAIR_ELEMENTS`, read at call time)."""
    return B * N * N <= (DENSE_PAIR_ELEMENTS if limit is None else limit)


def _promote(x: Tensor) -> Tensor:
    """Half-precision (and integer) tensors computed in float32, float32 / float64 kept (library convention)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)


def work_scores(scores: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
    """Check ``scores [B, N]`` (floating) and ``mask [B, N]`` (bool), promote half types to float32 and blank
    padded entries (whatever they hold, NaN included: they get exactly zero gradient).  Shared by the orderings."""
    if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        raise ValueError(f"`scores` must be a floating tensor [B, N]; got {getattr(scores, 'shape', scores)!r}")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != scores.shape:
        raise ValueError(f"`mask` must be a bool tensor with the shape of `scores` {tuple(scores.shape)}")
    if scores.shape[1] == 0:
        raise ValueError(f"`scores` must hold at least one item per list; got shape {tuple(scores.shape)}")
    s = _promote(scores)
    return torch.where(mask, s, torch.zeros((), dtype=s.dtype, device=s.device)), mask


def ranked_exposure(browsing: BrowsingModel, relevance: Optional[Tensor], mask: Tensor, dtype: torch.dtype,
                    rank_relevance: Optional[Callable[[Tensor], Tensor]]) -> Tensor:
    """``[B, N]`` exposure of every position ``k`` of the lists (0 for ``k >= n_b``): the one place where orderings
    weigh positions with a browsing model, through :meth:`~torchfair.browsing.BrowsingModel.item_exposure`.

    A relevance-dependent model (``browsing.relevance_dependent``) needs ``relevance [B, N]`` (padded entries may
    hold anything) and gets it in ranked order from ``rank_relevance(relevance) -> [B, N]`` (exact for a sorted
    list, ``P @ r`` for a relaxed permutation matrix ``P``); for a position-based model neither is used.
    """
    B, N = mask.shape
    row_real = (torch.arange(N, device=mask.device)[None, :] < mask.sum(-1, keepdim=True)).to(dtype)
    if browsing.relevance_dependent:
        if relevance is None:
            raise ValueError(f"`relevance` is required by the relevance-dependent browsing model {browsing!r}")
        rel = torch.where(mask, relevance.to(dtype), torch.zeros((), dtype=dtype, device=mask.device))
        ranked = rank_relevance(rel) * row_real
    else:
        ranked = row_real  # only its shape, dtype and device are read
    return browsing.item_exposure(ranked) * row_real


@dataclass
class PairBlock:
    """Pair quantities for the rows ``i in [start, stop)``: ``above`` and ``joint`` are ``[B, stop-start, N]``.

    Both are 0 on the diagonal and for pairs whose partner ``j`` is padded; rows of padded items ``i`` are 0 except
    in the dense SoftRank blocks (unspecified there: :meth:`OrderedBatch.contract` masks its output rows).
    """

    above: Tensor
    joint: Optional[Tensor] = None


class OrderedBatch(ABC):
    """A batch of lists together with an ordering of their items (see the module docstring)."""

    #: ``[B, N]`` bool, True for real items
    mask: Tensor

    @property
    def shape(self) -> Tuple[int, int]:
        return tuple(self.mask.shape)  # type: ignore[return-value]

    @property
    def dtype(self) -> torch.dtype:
        return self.scores.dtype

    @abstractmethod
    def expected_positions(self) -> Tensor:
        """``[B, N]`` expected 0-based position of every item (padded items: value unspecified, masked)."""

    @abstractmethod
    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        """``[B, N]`` expected exposure ``E[F(pos_i)]``; 0 for padded items.

        ``relevance`` is needed by relevance-dependent models (:class:`~torchfair.browsing.Cascade`)."""

    @abstractmethod
    def pair_context(self, browsing: Optional[BrowsingModel], relevance: Optional[Tensor]) -> object:
        """Per-item quantities shared by all row blocks (computed once per contraction)."""

    @abstractmethod
    def pair_block(self, context: object, start: int, stop: int) -> PairBlock:
        """Pair quantities for rows ``[start, stop)``; ``joint`` only when the context has a browsing model."""

    def joint_factor(self, context: object) -> Optional[Tensor]:
        """``[B, N]`` ``f`` when the ordering's ``joint[i, j] = f_j above[i, j]`` (e.g. SoftRank: ``F(E[pos_j])``),
        so that :meth:`contract` weighs ``right`` by ``f`` instead of forming ``joint``; ``None`` otherwise."""
        return None

    @abstractmethod
    def position_matrix(self) -> Tensor:
        """``[B, N, N]`` with ``R[b, k, i] = P(item i at position k)``; rows ``k >= n_b`` and padded items are 0."""

    def contract(self, right: Tensor, *, which: str = "above",
                 pair_weight: Optional[Callable[[int, int], Tensor]] = None,
                 browsing: Optional[BrowsingModel] = None, relevance: Optional[Tensor] = None,
                 block_elements: Optional[int] = None) -> Tensor:
        """``out[b, i, h] = sum_{j != i} w[b, i, j] * X[b, i, j] * right[b, j, h]`` over real items.

        ``which`` picks ``X``: ``"above"`` (P(j above i)), ``"joint"`` (E[F(pos_j) 1(pos_j < pos_i)], needs
        ``browsing``), or ``"one"`` (1 for every real pair: counts that do not depend on the ordering).
        ``pair_weight(start, stop)`` returns ``w`` for rows ``[start, stop)`` as ``[B, stop-start, N]``
        (default 1).  ``right`` is ``[B, N, H]``.  Computed in row blocks (bounded memory, see module doc).
        """
        if which not in ("above", "joint", "one"):
            raise ValueError(f"`which` must be 'above', 'joint' or 'one'; got {which!r}")
        if which == "joint" and browsing is None:
            raise ValueError("`browsing` is required for which='joint'")
        B, N = self.mask.shape
        if which == "one" and (pair_weight is None or isinstance(pair_weight, LevelPairWeight)):
            return contract_all_pairs(right, self.mask, pair_weight)
        ctx = self.pair_context(browsing if which == "joint" else None, relevance) if which != "one" else None
        if which == "joint":
            f = self.joint_factor(ctx)
            if f is not None:  # joint[i, j] = f_j above[i, j]: weigh `right` instead of every pair
                right = right * f.to(right.dtype)[..., None]
                which, ctx = "above", self.pair_context(None, relevance)
        maskf = self.mask.to(right.dtype)

        def block(start: int, stop: int) -> Tensor:
            if which == "one":
                x = maskf[:, start:stop, None] * maskf[:, None, :]
                rows = torch.arange(start, stop, device=x.device)
                x = x.clone()
                x[:, rows - start, rows] = 0
            else:
                blk = self.pair_block(ctx, start, stop)
                x = blk.joint if which == "joint" else blk.above
            if pair_weight is not None:
                x = x * pair_weight(start, stop)
            return _linalg.bmm(x.to(right.dtype), right)

        # With gradients, each block is recomputed in backward (activation checkpointing) instead of keeping its
        # [B, rows, N] intermediates alive: forward + backward memory stays within the block bound too.  Small
        # batches (dense strategy: [B, N, N] within the ordering's dense budget) form all pairs in one block and
        # autograd keeps them: no recomputation.
        recompute = torch.is_grad_enabled() and which != "one" and (self.scores.requires_grad or right.requires_grad)
        if recompute and block_elements is None and dense_pairs(B, N, getattr(self, "dense_elements", None)):
            return block(0, N) * maskf[..., None]
        if not recompute:
            out = right.new_empty(B, N, right.shape[-1])
            for start, stop in row_blocks(B, N, block_elements):
                out[:, start:stop] = block(start, stop)
            return out * maskf[..., None]
        outs = []
        for start, stop in row_blocks(B, N, block_elements):
            outs.append(checkpoint(block, start, stop, use_reentrant=False))
        return torch.cat(outs, dim=1) * maskf[..., None]


class Ordering(ABC):
    """Maps ``scores [B, N]`` and ``mask [B, N]`` to an :class:`OrderedBatch`."""

    #: True when the ordering carries gradients back to the scores (soft and Plackett-Luce orderings)
    differentiable: bool = False

    @abstractmethod
    def __call__(self, scores: Tensor, mask: Tensor) -> OrderedBatch:
        ...


#: what every measure accepts as ``ordering=``: an :class:`Ordering` (applied to the scores), an
#: :class:`OrderedBatch` computed beforehand (shared by several measures), or ``None`` (the exact ``Hard()``)
OrderingLike = Union[Ordering, OrderedBatch, None]
