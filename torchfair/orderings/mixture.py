"""A weighted mixture of orderings: ``S`` orderings of the same ``[B, N]`` batch, averaged.

The building block of every ranking *policy*: sampled rankings (:class:`~torchfair.orderings.Sampled`), the
Plackett-Luce estimators (Monte Carlo samples with score-function weights, exact enumeration with the
permutation probabilities as weights, Gumbel-perturbed soft orderings).  The inner ordering describes the
``S * B`` lists stacked sample-major (``[S * B, N]``); every quantity is ``sum_s w[s, b] q_s``.  Gradients flow
through the weights (so probabilities or score-function surrogate weights carry the gradient) and through the
inner ordering (relaxed orderings).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..browsing import BrowsingModel
from .base import PAIR_BLOCK_ELEMENTS, LevelPairWeight, OrderedBatch, PairBlock

__all__ = ["MixtureOrderedBatch"]


class MixtureOrderedBatch(OrderedBatch):
    """``inner`` orders ``S * B`` lists (sample-major); ``weights [S, B]`` sum to 1 over ``S`` (in value)."""

    def __init__(self, inner: OrderedBatch, weights: Tensor, scores: Tensor, mask: Tensor):
        self.inner = inner
        self.scores = scores
        self.mask = mask
        self.num_samples = weights.shape[0]
        self.weights = weights.to(scores.dtype)

    def _mean(self, x: Tensor, weights: Optional[Tensor] = None) -> Tensor:
        S = self.num_samples
        x = x.reshape(S, -1, *x.shape[1:])
        w = (self.weights if weights is None else weights).reshape(S, x.shape[1], *([1] * (x.dim() - 2)))
        return (w * x).sum(0)

    def _rep(self, relevance: Optional[Tensor]) -> Optional[Tensor]:
        return None if relevance is None else relevance.repeat(self.num_samples, 1)

    def expected_positions(self) -> Tensor:
        return self._mean(self.inner.expected_positions())

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        return self._mean(self.inner.exposure(browsing, self._rep(relevance))) * self.mask.to(self.dtype)

    def pair_context(self, browsing, relevance):
        return self.inner.pair_context(browsing, self._rep(relevance))

    def pair_block(self, context, start: int, stop: int) -> PairBlock:
        blk = self.inner.pair_block(context, start, stop)
        return PairBlock(above=self._mean(blk.above), joint=None if blk.joint is None else self._mean(blk.joint))

    def contract(self, right: Tensor, *, block_elements: Optional[int] = None, **kwargs) -> Tensor:
        out = self.sorted_contract(right, **kwargs)
        if out is not None:
            return out
        # the inner blocks hold S times more rows: shrink the block so the memory bound still holds
        budget = (PAIR_BLOCK_ELEMENTS if block_elements is None else block_elements) // self.num_samples
        return super().contract(right, block_elements=max(1, budget), **kwargs)

    def sorted_contract(self, right: Tensor, *, which: str = "above", pair_weight=None,
                        browsing: Optional[BrowsingModel] = None, relevance: Optional[Tensor] = None
                        ) -> Optional[Tensor]:
        """The contraction as the weighted mean of the inner hard rankings' pair-free sweeps
        (:meth:`~torchfair.orderings.hard.HardOrderedBatch.contract`, ``O(S B N H log N)``), or ``None`` when the
        inner ordering or the pair weight has no such sweep (the caller then takes the row-block path)."""
        from .hard import HardOrderedBatch, contract_all_pairs

        if which not in ("above", "joint", "one") or (which == "joint" and browsing is None) or (
                pair_weight is not None and not isinstance(pair_weight, LevelPairWeight)):
            return None
        if which == "one":  # does not depend on the ordering
            return contract_all_pairs(right, self.mask, pair_weight)
        if not isinstance(self.inner, HardOrderedBatch):
            return None
        S = self.num_samples
        pw = None if pair_weight is None else LevelPairWeight(
            pair_weight.relevance.repeat(S, 1), pair_weight.greater, pair_weight.equal, pair_weight.less)
        out = self.inner.contract(right.repeat(S, 1, 1), which=which, pair_weight=pw, browsing=browsing,
                                  relevance=self._rep(relevance))
        return self._mean(out)

    def position_matrix(self) -> Tensor:
        return self._mean(self.inner.position_matrix())
