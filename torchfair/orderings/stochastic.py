"""Orderings for stochastic rankings: explicit samples of rankings, and doubly stochastic matrices.

A ranking *policy* (a distribution over rankings for each list) is the object of the exposure measures over
sequences of rankings (Raj & Ekstrand, SIGIR 2022, §2.3: ``eps(q) = E_pi[eps_L]``) and of the doubly stochastic
framework of Kuhlman et al. (AIES 2021, eq. 10, ``R[k, i] = P(item i at position k)``).  Two orderings describe one:

* :class:`Sampled`: ``S`` rankings per list (samples of the policy, a sequence of rankings of the same items, or
  all the rankings of a finite policy with ``weights``).  Every quantity of the :class:`OrderedBatch` is the
  (weighted) mean over the samples: expected positions, exposure ``E[F(pos_i)]``, ``above``/``joint`` pair blocks
  and the position matrix.  Pair contractions with a relevance-level pair weight (every pairwise measure) sweep
  down each ranking, a few samples at a time, in ``O(S B N H L)``; other pair weights use pair blocks built one
  sample (or a few) at a time, so the row-block memory bound of :meth:`OrderedBatch.contract` holds whatever
  ``S`` is.
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

from functools import cached_property
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_number
from ..browsing import BrowsingModel
from .base import (PAIR_BLOCK_ELEMENTS, LevelPairWeight, OrderedBatch, Ordering, PairBlock, ranked_exposure,
                   _promote)
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


class _RankedHard(HardOrderedBatch):
    """A :class:`~torchfair.orderings.hard.HardOrderedBatch` (``ties="first"``) of lists whose order is given:
    ``order [L, N]`` holds the real items first.  No sort; positions and tie blocks are derived on first use."""

    def __init__(self, order: Tensor, mask: Tensor, dtype: torch.dtype):
        L, N = order.shape
        self.order = order
        self.mask = mask
        self.ties = "first"
        self.scores = torch.zeros((), dtype=dtype, device=order.device).expand(L, N)  # dtype / shape only
        self.n_items = mask.sum(-1)

    @cached_property
    def positions(self) -> Tensor:  # type: ignore[override]
        L, N = self.order.shape
        return torch.empty_like(self.order).scatter_(-1, self.order,
                                                     torch.arange(N, device=self.order.device).expand(L, N))

    @property
    def block(self) -> Tensor:  # type: ignore[override]
        return self.positions

    @property
    def block_sorted(self) -> Tensor:  # type: ignore[override]
        return torch.arange(self.order.shape[1], device=self.order.device).expand(self.order.shape)

    @property
    def block_start(self) -> Tensor:  # type: ignore[override]
        return self.block_sorted

    @property
    def block_size(self) -> Tensor:  # type: ignore[override]
        return torch.ones((), dtype=self.scores.dtype, device=self.order.device).expand(self.order.shape)


def _canonical(rankings: Tensor, mask: Tensor) -> Tensor:
    """``[S, B, N]`` rankings with the padded items moved after the real ones (real order kept, pads by index)."""
    S, B, N = rankings.shape
    pos = torch.empty_like(rankings).scatter_(-1, rankings, torch.arange(N, device=rankings.device).expand(S, B, N))
    key = torch.where(mask, pos, N + torch.arange(N, device=rankings.device))  # real by position, then pads by index
    return torch.sort(key, dim=-1).indices  # (distinct keys)


class SampledOrderedBatch(MixtureOrderedBatch):
    """Result of :class:`Sampled`: ``S`` hard orderings of a ``[B, N]`` batch, averaged with weights ``w [S, B]``.

    ``rankings [S, B, N]`` hold the items by position; with ``canonical=True`` the caller guarantees that the real
    items come first in every ranking (as :func:`~torchfair.orderings.sample_rankings` returns them), otherwise the
    padded items are moved there first.  Every quantity is ``sum_s w[s, b] q_s`` computed from the rankings
    directly: exposure by one scatter of the position exposures, pair contractions by a sweep down each ranking
    (per relevance level, O(S B N H L), see :meth:`contract`), never ``[B, N, N]`` pairs unless a pair weight
    without level structure asks for them.  Gradients flow through ``weights`` (Plackett-Luce probabilities or
    score-function weights).  ``inner``, a :class:`~torchfair.orderings.hard.HardOrderedBatch` of the ``S * B``
    lists (sample-major), is built on first use.
    """

    def __init__(self, rankings: Tensor, weights: Tensor, scores: Tensor, mask: Tensor, *, canonical: bool = False):
        S, B, N = rankings.shape
        self.scores = scores
        self.mask = mask
        self.num_samples = S
        self.weights = weights.to(scores.dtype)
        self.rankings = rankings if canonical else _canonical(rankings, mask)

    # ----------------------------------------------------------------- helpers
    @cached_property
    def inner(self) -> HardOrderedBatch:  # type: ignore[override]
        S, B, N = self.rankings.shape
        return _RankedHard(self.rankings.reshape(S * B, N), self.mask.repeat(S, 1), self.dtype)

    @cached_property
    def sample_positions(self) -> Tensor:
        """``[S, B, N]`` 0-based position of every item in every sample (padded items after the real ones)."""
        S, B, N = self.rankings.shape
        return torch.empty_like(self.rankings).scatter_(
            -1, self.rankings, torch.arange(N, device=self.rankings.device).expand(S, B, N))

    def _weigh(self, x: Tensor, weights: Optional[Tensor] = None) -> Tensor:
        """``sum_s w[s, b] x[s, b, ...]`` for ``x [S, B, ...]``."""
        w = self.weights if weights is None else weights
        return (w.reshape(*w.shape, *([1] * (x.dim() - 2))) * x).sum(0)

    def _position_exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor]) -> Tensor:
        """Exposure of every position: ``[B, N]`` for a position-based model (the same in every sample), else
        ``[S, B, N]`` (the ranked relevance of each sample); 0 at positions ``k >= n_b``."""
        if not browsing.relevance_dependent:
            return ranked_exposure(browsing, None, self.mask, self.dtype, None)
        S, B, N = self.rankings.shape
        rk = self.rankings
        rel = None if relevance is None else relevance.unsqueeze(0).expand(S, B, N)
        f = ranked_exposure(browsing, None if rel is None else rel.reshape(S * B, N), self.mask.repeat(S, 1),
                            self.dtype, lambda r: r.gather(-1, rk.reshape(S * B, N)))
        return f.reshape(S, B, N)

    def _sample_exposure(self, f: Tensor) -> Tensor:
        """``[S, B, N]`` exposure of every item in every sample, from the position exposures ``f``."""
        S, B, N = self.rankings.shape
        return torch.zeros(S, B, N, dtype=f.dtype, device=f.device).scatter_(-1, self.rankings, f.expand(S, B, N))

    # ----------------------------------------------------------------- per item
    def expected_positions(self) -> Tensor:
        return self._weigh(self.sample_positions.to(self.dtype))

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        return self._exposure(browsing, relevance, self.weights)

    def _exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor], weights: Tensor) -> Tensor:
        e = self._sample_exposure(self._position_exposure(browsing, relevance))
        return self._weigh(e, weights) * self.mask.to(self.dtype)

    # ----------------------------------------------------------------- pairs
    def contract(self, right: Tensor, *, which: str = "above", pair_weight=None,
                 browsing: Optional[BrowsingModel] = None, relevance: Optional[Tensor] = None,
                 block_elements: Optional[int] = None, lv=None) -> Tensor:
        """:meth:`OrderedBatch.contract` by a sweep down every sampled ranking when the pair weight is absent or a
        :class:`~torchfair.orderings.base.LevelPairWeight` with at most 64 relevance levels and ``right`` needs no
        gradient: ``O(S B N H L)`` time, memory bounded by sweeping a few samples at a time.  Otherwise the
        generic row blocks (each built a few samples at a time).  Same values up to rounding
        (tests/orderings/test_stochastic.py compares both).  ``lv``: the levels of ``pair_weight`` if already known
        (``_levels``)."""
        out = self._sweep(right, which, pair_weight, browsing, relevance, block_elements, self.weights, lv=lv)
        if out is None:  # many relevance levels (continuous relevance): the rankings' sorted sweeps, O(log N)
            out = self.sorted_contract(right, which=which, pair_weight=pair_weight, browsing=browsing,
                                       relevance=relevance)
        if out is None:
            return OrderedBatch.contract(self, right, which=which, pair_weight=pair_weight, browsing=browsing,
                                         relevance=relevance, block_elements=block_elements)
        return out

    def _sweep(self, right, which, pair_weight, browsing, relevance, block_elements, weights, lv=None
               ) -> Optional[Tensor]:
        if which not in ("above", "joint", "one") or (which == "joint" and browsing is None):
            return None  # the generic path raises the error
        if right.requires_grad and torch.is_grad_enabled():
            return None
        lv = _levels(pair_weight, self.mask, right.dtype) if lv is None else lv
        if lv is None:
            return None
        lvl, W, L = lv
        S, B, N = self.rankings.shape
        H = right.shape[-1]
        dt = right.dtype
        maskf = self.mask.to(dt)
        V = (right.unsqueeze(-1) * torch.nn.functional.one_hot(lvl, L).to(dt).unsqueeze(-2)
             * maskf[..., None, None]).reshape(B, N, H * L)  # right of item j in the column of its level
        Wl = W[lvl]  # [B, N(i), L]: weight of a pair (i, j) by the level of j
        if which == "one":  # every other real item, whatever the ordering
            acc = (V.sum(1, keepdim=True) - V).reshape(B, N, H, L)
            return torch.einsum("bnhl,bnl->bnh", acc, Wl) * maskf[..., None]
        f = self._position_exposure(browsing, relevance).to(dt) if which == "joint" else None
        budget = 16 * (block_elements if block_elements is not None else PAIR_BLOCK_ELEMENTS)
        step = max(1, budget // max(1, B * N * H * L))
        per_sample = weights.requires_grad and torch.is_grad_enabled()
        uniform = getattr(self, "uniform", False) and weights is self.weights
        outs = []
        acc = torch.zeros(B * N, H * L, dtype=dt, device=right.device)
        for s0 in range(0, S, step):
            s1 = min(S, s0 + step)
            s = s1 - s0
            y = self.rankings[s0:s1]
            rows = (torch.arange(B, device=y.device)[:, None] * N + y).reshape(-1)  # [B * N] row of each position
            before = _sweep_before(V, y, rows, None if f is None else (f if f.dim() == 2 else f[s0:s1]))
            if per_sample:  # keep each sample's value (the weights carry the gradient): contract the levels first
                Wp = Wl.reshape(B * N, L).index_select(0, rows).view(s, B, N, 1, L)
                o = (before.view(s, B, N, H, L) * Wp).sum(-1)  # [s, B, N(position), H]
                outs.append(torch.zeros_like(o).view(-1, H).index_copy_(0, rows + (
                    torch.arange(s, device=y.device) * B * N).repeat_interleave(B * N), o.view(-1, H)).view(s, B, N, H))
            else:  # add every sample's value at its items: no per-sample tensor in item order
                if not uniform:
                    before = before.mul_(weights[s0:s1].to(dt)[:, :, None, None])
                acc.index_add_(0, rows, before.view(-1, H * L))
        if per_sample:
            out = self._weigh(torch.cat(outs, 0), weights.to(dt))
        else:
            acc = acc / S if uniform else acc
            out = torch.einsum("bnhl,bnl->bnh", acc.view(B, N, H, L), Wl)
        return out * maskf[..., None]

    def pair_context(self, browsing, relevance):
        if browsing is None:
            return None
        return self._sample_exposure(self._position_exposure(browsing, relevance))  # [S, B, N]

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
        """``sum_s weights[s] onehot(positions of sample s)``, ``[B, N, N]`` (one scatter-add)."""
        S, B, N = self.rankings.shape
        dt = self.dtype
        # R[b, k, i] at flat index k * N + i: sample s puts weights[s, b] at (pos_s(i), i) = (k, rankings[s, b, k])
        idx = (torch.arange(N, device=self.mask.device) * N + self.rankings).permute(1, 0, 2).reshape(B, S * N)
        src = weights.to(dt).t()[:, :, None].expand(B, S, N).reshape(B, S * N)
        R = torch.zeros(B, N * N, dtype=dt, device=self.mask.device).scatter_add(1, idx, src).reshape(B, N, N)
        return R * self.mask[:, None, :].to(dt)


#: the per-level sweep of SampledOrderedBatch is used up to this many distinct relevance levels (on the CPU, where
#: counting them is free); beyond, and on other devices, the rankings' sorted sweeps (no host synchronisation)
_SWEEP_MAX_LEVELS = 64


def _levels(pair_weight, mask: Tensor, dtype: torch.dtype):
    """``(lvl [B, N] long, W [L, L], L)`` for a pair weight absent (one level, weight 1) or a
    :class:`~torchfair.orderings.base.LevelPairWeight` with at most ``_SWEEP_MAX_LEVELS`` distinct relevance levels
    over the real items; ``None`` otherwise (the caller takes the generic path)."""
    B, N = mask.shape
    if pair_weight is None:
        return (torch.zeros(B, N, dtype=torch.long, device=mask.device), torch.ones(1, 1, dtype=dtype,
                                                                                  device=mask.device), 1)
    if not isinstance(pair_weight, LevelPairWeight) or mask.device.type != "cpu":
        return None
    rel = pair_weight.relevance
    levels = torch.unique(rel[mask]) if bool(mask.any()) else rel.new_zeros(1)
    L = int(levels.numel())
    if L > _SWEEP_MAX_LEVELS:
        return None
    lvl = torch.searchsorted(levels, rel.contiguous()).clamp(max=L - 1)
    return lvl, pair_weight.level_matrix(levels).to(dtype), L


def _sweep_before(V: Tensor, rankings: Tensor, rows: Tensor, f: Optional[Tensor]) -> Tensor:
    """``out[s, b, k] = sum_{t < k} f(t) V[b, y_t]`` in position order (``y = rankings``, ``f = 1`` when None):
    ``[s, B, N, C]`` for ``V [B, N, C]``, ``rankings [s, B, N]``, ``rows = b * N + rankings`` flattened and
    position exposures ``f`` ``[B, N]`` or ``[s, B, N]``.  Rows are moved with ``index_select`` (contiguous
    ``C``-vectors), not a gather with an expanded index."""
    s, B, N = rankings.shape
    C = V.shape[-1]
    Vs = V.reshape(B * N, C).index_select(0, rows).view(s, B, N, C)  # in position order
    if f is not None:
        Vs = Vs.mul_(f.unsqueeze(-1))
    before = torch.zeros_like(Vs)
    if N > 1:
        torch.cumsum(Vs[:, :, :-1], 2, out=before[:, :, 1:])  # strictly above position k
    return before


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
