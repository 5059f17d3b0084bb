"""Orderings for stochastic rankings: explicit samples of rankings, and doubly stochastic matrices.

A ranking *policy* (a distribution over rankings for each list) is the object of the exposure measures over
sequences of rankings (Raj & Ekstrand, SIGIR 2022, §2.3: ``eps(q) = E_pi[eps_L]``) and of the doubly stochastic
framework of Kuhlman et al. (AIES 2021, eq. 10, ``R[k, i] = P(item i at position k)``).  Two orderings describe one:

* :class:`Sampled`: ``S`` rankings per list (samples of the policy, a sequence of rankings of the same items, or
  all the rankings of a finite policy with ``weights``).  Every quantity of the :class:`OrderedBatch` is the
  (weighted) mean over the samples: expected positions, exposure ``E[F(pos_i)]``, ``above``/``joint`` pair blocks
  and the position matrix.  Pair blocks are built one sample (or a few) at a time, so the row-block memory bound
  of :meth:`OrderedBatch.contract` holds whatever ``S`` is.
* :class:`DoublyStochastic`: the marginal matrix ``R [B, N(pos), N(item)]`` only.  Exposure
  ``sum_k R[k, i] F(k)``, expected positions ``sum_k k R[k, i]`` and the position matrix are determined by ``R``;
  pair probabilities are not (many policies share the same ``R``), so pairwise measures raise ``ValueError``.

Both orderings carry the ranking themselves and ignore the scores a measure passes to them.  The exposure
measures (:mod:`torchfair.metrics.exposure`) accept ``scores=None`` with these orderings; other measures take a
placeholder such as ``torch.zeros(B, N)`` (only its shape and dtype are used).

Example::

    >>> from torchfair.browsing import RBP
    >>> ob = Sampled(torch.tensor([[0, 1, 2], [2, 1, 0]]))(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool))
    >>> ob.expected_positions()
    tensor([[1., 1., 1.]])
    >>> ob.exposure(RBP(0.5))
    tensor([[0.6250, 0.5000, 0.6250]])
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_number
from ..browsing import BrowsingModel
from .base import PAIR_BLOCK_ELEMENTS, OrderedBatch, Ordering, PairBlock, ranked_exposure, _promote
from .hard import HardOrderedBatch
from .mixture import MixtureOrderedBatch

__all__ = ["Sampled", "SampledOrderedBatch", "DoublyStochastic", "DoublyStochasticOrderedBatch"]


def _check_rankings(rankings: Tensor) -> Tuple[Tensor, bool]:
    """Validate ``[S, B, N]`` / ``[S, N]`` integer rankings; returns ``[S, B, N]`` long and whether B was absent."""
    if not isinstance(rankings, Tensor):
        raise ValueError(f"`rankings` must be a torch.Tensor; got {type(rankings).__name__}")
    if rankings.is_floating_point() or rankings.dtype == torch.bool or rankings.dim() not in (2, 3):
        raise ValueError("`rankings` must be an integer tensor [S, B, N] (or [S, N]) of item indices by position; "
                         f"got {tuple(rankings.shape)} {rankings.dtype}")
    squeeze = rankings.dim() == 2
    r = (rankings.unsqueeze(1) if squeeze else rankings).long()
    S, B, N = r.shape
    if S == 0 or B == 0 or N == 0:
        raise ValueError(f"`rankings` must hold at least one sample of one list of one item; got {tuple(rankings.shape)}")
    if (r < 0).any() or (r >= N).any() or not torch.equal(torch.sort(r, -1).values,
                                                          torch.arange(N, device=r.device).expand(S, B, N)):
        raise ValueError("`rankings` rows must be permutations of 0..N-1 (padded items may sit anywhere)")
    return r, squeeze


class SampledOrderedBatch(MixtureOrderedBatch):
    """Result of :class:`Sampled`: ``S`` hard orderings of a ``[B, N]`` batch, averaged with weights ``w [S, B]``.

    A :class:`~torchfair.orderings.mixture.MixtureOrderedBatch` of :class:`~torchfair.orderings.hard.Hard`
    orderings whose pair blocks are built from the sampled positions directly, a few samples at a time.
    Gradients flow through ``weights`` (Plackett-Luce probabilities or score-function weights).
    """

    def __init__(self, rankings: Tensor, weights: Tensor, scores: Tensor, mask: Tensor):
        S, B, N = rankings.shape
        dt = scores.dtype
        # scores whose stable descending sort gives each sampled ranking; padded items go last (Hard's sort)
        vals = (N - torch.arange(N, device=rankings.device, dtype=dt)).expand(S, B, N)
        sc = torch.empty(S, B, N, dtype=dt, device=rankings.device).scatter_(-1, rankings, vals)
        inner = HardOrderedBatch(sc.reshape(S * B, N), mask.repeat(S, 1), "first")
        super().__init__(inner, weights, scores, mask)

    @property
    def sample_positions(self) -> Tensor:
        """``[S, B, N]`` 0-based position of every item in every sample (padded items after the real ones)."""
        return self.inner.positions.reshape(self.num_samples, *self.mask.shape)

    def contract(self, right: Tensor, *, block_elements=None, **kwargs) -> Tensor:
        out = self.sorted_contract(right, **kwargs)  # the samples' pair-free sweeps
        if out is not None:
            return out
        # pair_block below bounds its own memory by looping over samples: no need to shrink the row blocks
        return OrderedBatch.contract(self, right, block_elements=block_elements, **kwargs)

    def pair_context(self, browsing, relevance):
        if browsing is None:
            return None
        rel = None if relevance is None else relevance.repeat(self.num_samples, 1)
        return self.inner.exposure(browsing, rel).reshape(self.num_samples, *self.mask.shape)  # [S, B, N]

    def pair_block(self, context, start: int, stop: int) -> PairBlock:
        S = self.num_samples
        B, N = self.mask.shape
        dt = self.dtype
        pos = self.sample_positions
        real = (self.mask[:, start:stop, None] & self.mask[:, None, :]).to(dt)
        # samples per step so that one step holds at most PAIR_BLOCK_ELEMENTS pair entries (at least one sample)
        step = max(1, PAIR_BLOCK_ELEMENTS // max(1, B * (stop - start) * N))
        above = torch.zeros(B, stop - start, N, dtype=dt, device=self.mask.device)
        joint = None if context is None else torch.zeros_like(above)
        for s0 in range(0, S, step):
            s1 = min(S, s0 + step)
            w = self.weights[s0:s1, :, None, None]
            strictly = (pos[s0:s1, :, None, :] < pos[s0:s1, :, start:stop, None]).to(dt) * w  # [s, B, rows, N]
            above += strictly.sum(0)
            if context is not None:
                joint += (strictly * context[s0:s1, :, None, :]).sum(0)
            del strictly
        above = above * real
        if joint is not None:
            joint = joint * real
        return PairBlock(above=above, joint=joint)

    def position_matrix(self) -> Tensor:
        return self._position_matrix(self.weights)

    def _position_matrix(self, weights: Tensor) -> Tensor:
        """``sum_s weights[s] onehot(positions of sample s)``, ``[B, N, N]``."""
        S = self.num_samples
        B, N = self.mask.shape
        dt = self.dtype
        pos = self.sample_positions
        k = torch.arange(N, device=self.mask.device)[None, :, None]
        R = torch.zeros(B, N, N, dtype=dt, device=self.mask.device)
        for s in range(S):  # one [B, N, N] one-hot at a time
            R = R + (k == pos[s][:, None, :]).to(dt) * weights[s][:, None, None]
        return R * self.mask[:, None, :].to(dt)


class Sampled(Ordering):
    """An ordering given by ``S`` rankings per list; every quantity is averaged over them.

    ``rankings[s, b, k]`` is the index of the item at 0-based position ``k`` of list ``b`` in sample ``s``
    (``[S, B, N]``, or ``[S, N]`` for single-list inputs); each row is a permutation of ``0..N-1``.  Padded items
    (``mask`` False) may sit anywhere: they are moved after the real items, whose relative order is kept.
    ``weights`` (``[S]`` or ``[S, B]``, non-negative, default uniform) are the probabilities of the samples, e.g.
    the probabilities of all the rankings of a finite policy; they are normalised to sum to 1 over ``S``.

    The scores passed by a measure are ignored (only their shape, dtype and device are used): pass
    ``scores=None`` to the exposure measures, or a placeholder such as ``torch.zeros(B, N)`` elsewhere.
    Not differentiable.  With ``S`` copies of one ranking every measure equals its value under :class:`Hard`
    on that ranking; with all ``N!`` permutations it is the uniformly random policy.

    Example::

        >>> from torchfair.metrics.exposure import expected_exposure
        >>> rk = torch.tensor([[0, 1], [1, 0]])      # two equally likely rankings of 2 items
        >>> expected_exposure(None, torch.tensor([1., 1.]), browsing="uniform", ordering=Sampled(rk)).loss
        tensor(0.)
    """

    differentiable = False

    def __init__(self, rankings: Tensor, weights: Optional[Tensor] = None):
        self.rankings, self._squeeze = _check_rankings(rankings)
        S, B, N = self.rankings.shape
        if weights is None:
            w = torch.full((S, B), 1.0 / S, dtype=torch.float64, device=self.rankings.device)
        else:
            if not isinstance(weights, Tensor) or weights.shape not in ((S,), (S, B)) or weights.dtype == torch.bool:
                raise ValueError(f"`weights` must be a tensor of shape [S] = [{S}] or [S, B] = [{S}, {B}]; got "
                                 f"{tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__}")
            w = weights.to(torch.float64)
            w = w[:, None].expand(S, B) if w.dim() == 1 else w
            if not torch.isfinite(w).all() or (w < 0).any() or (w.sum(0) <= 0).any():
                raise ValueError("`weights` must be finite, non-negative and not all zero for any list")
            w = w / w.sum(0, keepdim=True)
        self.weights = w

    @property
    def list_shape(self) -> Tuple[int, ...]:
        """Shape of the scores this ordering describes: ``(B, N)``, or ``(N,)`` for ``[S, N]`` rankings."""
        S, B, N = self.rankings.shape
        return (N,) if self._squeeze else (B, N)

    @property
    def num_samples(self) -> int:
        return self.rankings.shape[0]

    def __call__(self, scores: Tensor, mask: Tensor) -> SampledOrderedBatch:
        S, B, N = self.rankings.shape
        if tuple(mask.shape) != (B, N):
            raise ValueError(f"`rankings` describe lists of shape [B, N] = [{B}, {N}] but the inputs have shape "
                             f"{tuple(mask.shape)}")
        r = self.rankings.to(mask.device)
        return SampledOrderedBatch(r, self.weights.to(mask.device), _promote(scores.detach()), mask)

    def __repr__(self) -> str:
        return f"Sampled(rankings=<{list(self.rankings.shape)}>)"


class DoublyStochasticOrderedBatch(OrderedBatch):
    """Result of :class:`DoublyStochastic`: the marginals ``R [B, N, N]`` (position x item)."""

    def __init__(self, R: Tensor, scores: Tensor, mask: Tensor):
        self.scores = scores
        self.mask = mask
        dt = scores.dtype
        n = mask.sum(-1)
        N = mask.shape[1]
        pos_real = (torch.arange(N, device=mask.device)[None, :] < n[:, None]).to(dt)
        self.R = R.to(dt) * mask[:, None, :].to(dt) * pos_real[:, :, None]

    def expected_positions(self) -> Tensor:
        N = self.mask.shape[1]
        k = torch.arange(N, device=self.mask.device, dtype=self.dtype)
        return _linalg.einsum("bki,k->bi", self.R, k)

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        if browsing.relevance_dependent:
            raise ValueError(f"`ordering`: the browsing model {browsing!r} depends on the relevance of the items ranked above, "
                             "which a doubly stochastic matrix does not determine: use Sampled(rankings)")
        f = ranked_exposure(browsing, relevance, self.mask, self.dtype, None)  # [B, K]
        return _linalg.einsum("bki,bk->bi", self.R, f) * self.mask.to(self.dtype)

    def pair_context(self, browsing, relevance):
        raise ValueError("`ordering`: pairwise measures need rankings: a doubly stochastic matrix R (DoublyStochastic) gives "
                         "P(item i at position k) but not P(j above i); use Sampled(rankings) instead")

    def pair_block(self, context, start: int, stop: int) -> PairBlock:
        self.pair_context(None, None)
        raise AssertionError  # pragma: no cover

    def contract(self, right: Tensor, *, which: str = "above", **kwargs) -> Tensor:
        if which != "one":
            self.pair_context(None, None)
        return super().contract(right, which=which, **kwargs)

    def position_matrix(self) -> Tensor:
        return self.R


class DoublyStochastic(Ordering):
    """An ordering given by the marginals ``R[b, k, i] = P(item i at position k)`` (Kuhlman et al., AIES 2021, eq. 10).

    ``R`` is ``[B, N(position), N(item)]`` (or ``[N, N]``), non-negative; for every list with ``n`` real items the
    columns of real items and the first ``n`` rows must sum to 1 (a one-hot ``R`` is a single ranking).  Entries of
    padded items and of positions ``>= n`` are ignored.  Exposure is ``E[F(pos_i)] = sum_k R[k, i] F(k)`` (exact
    for any policy with these marginals; Kuhlman et al., §3.1, instead plugs the expected rank into ``v``), expected
    positions ``sum_k k R[k, i]``.  Only position-based browsing models are supported (a relevance-dependent one,
    ``browsing.relevance_dependent``, raises ``ValueError``).  Pair quantities (``P(j above i)``) are not determined
    by ``R``: pairwise measures raise ``ValueError``; use :class:`Sampled` for them.
    The scores passed by the measure are ignored (see :class:`Sampled`).  ``validate=False`` skips the checks.

    Example::

        >>> from torchfair.browsing import Uniform
        >>> ob = DoublyStochastic(torch.full((2, 2), 0.5))(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
        >>> ob.expected_positions()
        tensor([[0.5000, 0.5000]])
    """

    differentiable = False

    def __init__(self, R: Tensor, *, validate: bool = True, atol: float = 1e-5):
        if not isinstance(R, Tensor) or not R.is_floating_point() or R.dim() not in (2, 3) or R.shape[-1] != R.shape[-2]:
            raise ValueError("`R` must be a floating tensor [B, N, N] (or [N, N]) with R[b, k, i] = "
                             f"P(item i at position k); got "
                             f"{tuple(R.shape) if isinstance(R, Tensor) else type(R).__name__}")
        if not isinstance(validate, bool):
            raise ValueError(f"`validate` must be a bool; got {validate!r}")
        self._squeeze = R.dim() == 2
        self.R = R.unsqueeze(0) if self._squeeze else R
        self.validate = validate
        self.atol = check_number(atol, "atol", low=0)

    @property
    def list_shape(self) -> Tuple[int, ...]:
        B, N, _ = self.R.shape
        return (N,) if self._squeeze else (B, N)

    def __call__(self, scores: Tensor, mask: Tensor) -> DoublyStochasticOrderedBatch:
        B, N, _ = self.R.shape
        if tuple(mask.shape) != (B, N):
            raise ValueError(f"`R` describes lists of shape [B, N] = [{B}, {N}] but the inputs have shape "
                             f"{tuple(mask.shape)}")
        R = self.R.to(mask.device)
        if self.validate:
            n = mask.sum(-1)
            pos_real = torch.arange(N, device=mask.device)[None, :] < n[:, None]  # [B, N]
            sel = pos_real[:, :, None] & mask[:, None, :]
            Rr = torch.where(sel, R, torch.zeros((), dtype=R.dtype, device=R.device))
            if not torch.isfinite(Rr).all() or (Rr < 0).any():
                raise ValueError("`R` must be finite and non-negative")
            one = torch.ones((), dtype=R.dtype, device=R.device)
            cols, rows = Rr.sum(1), Rr.sum(2)
            if not (torch.isclose(cols, one, atol=self.atol) | ~mask).all():
                raise ValueError("`R` columns of real items must sum to 1 over the first n positions "
                                 "(R[b, k, i] = P(item i at position k))")
            if not (torch.isclose(rows, one, atol=self.atol) | ~pos_real).all():
                raise ValueError("`R` rows of the first n positions must sum to 1 over the real items")
        return DoublyStochasticOrderedBatch(R, _promote(scores.detach()), mask)

    def __repr__(self) -> str:
        return f"DoublyStochastic(R=<{list(self.R.shape)}>)"
