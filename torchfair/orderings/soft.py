"""Differentiable (relaxed) orderings: measures evaluated on them become losses.

Three relaxations, each an :class:`~torchfair.orderings.base.Ordering`:

* :class:`SoftRank` -- pairwise sigmoids (ApproxRank / SmoothRank, Qin et al. 2010; Wu et al. 2009)::

      above[i, j] = sigmoid((s_j - s_i) / tau)              (P(j above i), i != j, both real)
      pos_i       = sum_{j != i, real} above[i, j]           (expected 0-based position)
      exposure_i  = F(pos_i)                                (browsing model on a real-valued position)
      joint[i, j] = F(pos_j) * above[i, j]

  ``exposure`` is ``F(E[pos])``, not ``E[F(pos)]``; both agree in the limit ``tau -> 0``.  Memory is O(B N) for
  the per-item quantities (expected positions are reduced in row blocks with a hand-written backward that
  recomputes the blocks, so no ``[B, N, N]`` tensor is kept for autograd) plus the row blocks of
  :meth:`~torchfair.orderings.base.OrderedBatch.contract`.

  :meth:`SoftRankOrderedBatch.position_matrix` is an approximation: treating the pairwise events as independent
  Bernoullis (the assumption of Taylor et al.'s SoftRank, 2008) the position of item i is Poisson-binomial
  with mean ``mu_i = pos_i`` and variance ``v_i = sum_j above[i, j] (1 - above[i, j])``.  We use its normal
  approximation with continuity correction, ``R[k, i] = Phi((k + 1/2 - mu_i) / sd_i) - Phi((k - 1/2 - mu_i) / sd_i)``
  with ``sd_i = sqrt(v_i + min_position_std**2)``, the tails folded into positions ``0`` and ``n_b - 1``, so each
  column sums to 1 exactly and rows sum to 1 only approximately (``sinkhorn_iters > 0`` balances them; rows are
  then exact, columns approximate).  It is exact in the limit ``tau -> 0`` (with ``min_position_std = 0.1`` a
  hard position keeps ``1 - 6e-7`` of its mass) but, for intermediate ``tau``, only an approximation of the rank
  distribution: prefer :class:`NeuralSort` / :class:`SoftSort` for prefix measures.  It costs O(B N^2) memory.
  Relevance-dependent browsing (:class:`~torchfair.browsing.Cascade`) also goes through this matrix.

* :class:`NeuralSort` (Grover et al., ICLR 2019, eq. 4): the relaxed permutation matrix, 0-based position k of
  a list of ``n`` real items::

      P_hat[k, :] = softmax( ((n - 1 - 2k) s - A_s 1) / tau ),   (A_s)_{ij} = |s_i - s_j|

* :class:`SoftSort` (Prillo & Eisenschlos, ICML 2020, eq. 2 with ``d = |.|``)::

      P_hat[k, :] = softmax( -|sort(s)_k - s| / tau )

  For both, every row ``k < n_b`` is a distribution over the real items (rows sum to 1 exactly); columns sum
  to 1 only approximately (exactly in the limit ``tau -> 0``; ``sinkhorn_iters > 0`` applies that many
  Sinkhorn-Knopp column/row normalisations, ending with the rows).  The quantities are::

      exposure_i    = sum_k P_hat[k, i] F(k)
      above[i, j]   = sum_l P_hat[l, i] sum_{k<l} P_hat[k, j]          (i != j)
      joint[i, j]   = sum_l P_hat[l, i] sum_{k<l} F(k) P_hat[k, j]
      position_matrix = P_hat
      expected pos_i = sum_k k P_hat[k, i] / sum_k P_hat[k, i]         (mean of column i)

  ``above`` and ``joint`` treat the positions of i and j as independent draws from columns i and j of
  ``P_hat`` (an approximation: ``above[i, j] + above[j, i] = 1 - sum_l P_hat[l, i] P_hat[l, j]`` when the
  columns sum to 1, which tends to 1 as ``tau -> 0``).  Memory and time are O(N^2) per list (``P_hat`` and its
  cumulative sums are ``[B, N, N]``) and O(B N^3) flops for the pair blocks: fine for lists up to a few
  hundred items.  With Cascade browsing the position exposures come from the softly sorted relevance
  ``P_hat @ r``.

Masks
-----
Padded items are replaced (``torch.where``) by a constant before anything is computed, so whatever they hold
(NaN included) they receive exactly zero gradient.  They get no exposure, take part in no pair, and for the
permutation relaxations they are excluded from the softmax (they "sort last": the relaxation is built over the
``n_b`` real items only, rows ``k >= n_b`` and padded columns of ``P_hat`` are 0).

Temperature
-----------
All relaxations compare score *differences* with ``tau`` (for NeuralSort, too: the logit gap between the item at
a position and its neighbour equals their score gap divided by ``tau``).  An absolute ``tau`` therefore means
something different for every score range, so by default (``scale="std"``) the temperature of list ``b`` is::

    tau_b = temperature * max(std_b, rel_min_scale * mean_b|s|, min_scale)

with ``std_b`` the population std of the real scores of the list.  ``tau_b`` is detached: it is a constant of the
loss, not a function of the scores.  With ``scale="none"`` ``temperature`` is absolute, in score units (no floors).
This one rule (:func:`list_scale`, :func:`_temperature`) serves :class:`SoftRank`, :class:`NeuralSort`,
:class:`SoftSort`, :class:`~torchfair.orderings.FastSoftRank` (its ``epsilon``),
:class:`~torchfair.orderings.RampRank` and :class:`~torchfair.orderings.PlackettLuce` (its logits
``scores / tau_b``; the relaxed estimator also through the soft ordering it applies).

*Floors: tied lists.*  A list whose scores are all equal (every freshly initialised model: zero weights, a
constant bias) or nearly so has ``std`` 0: scaling by it alone gives ``tau = 0`` and gradients of size
``1 / tau`` (the former floor ``1e-6`` gave ~1e6 in float32 and ``inf`` in float16).  A tied list carries no
scale, so the floor must be a number: ``min_scale`` (score units, default ``0.25``) is the spread a list is
assumed to have at least.  Lists whose std is at least ``min_scale`` keep the scale-free rule ``temperature * std``
-- in particular a layer with PyTorch's default initialisation on unit-variance features (output std ~ 0.5) --
while a tied list is relaxed with the absolute temperature ``temperature * min_scale``.  Measured with the default
DIPS loss (``SoftRank(0.1)``, B = 8, N = 50): the gradient norm on all-zero or all-equal scores is ~10x its norm
on N(0, 1) scores in float32 and float16 (~1e6x with the former floor); a floor of 1 would bring it to ~2.5x at
the price of a 4x smoother relaxation for lists of std below 1.  NeuralSort's logits carry a factor
``n - 1 - 2k``, so its gradients on ties are larger (~40 at N = 50, ~165x); SoftSort's are exactly 0 on ties
(``|x|`` has a zero subgradient at 0).  ``rel_min_scale`` (default 0, off) bounds the scale below by a fraction of
the mean absolute score, for scores whose differences are below their own resolution (e.g. ``1e-3`` for
half-precision scores: differences below ``2**-10 |s|`` are rounding); it is off by default because the
relaxations are shift-invariant and scores trained with shift-invariant utility losses drift, and a floor
relative to their offset would smooth them more the further they drift.

*Large scores.*  ``std`` is computed after dividing the list by its largest absolute score (then by its largest
centred value), so it neither overflows nor underflows: a plain ``sum(s**2)`` is ``inf`` in float32 from
``|s| ~ 1e19`` on, which made ``tau`` infinite and every position ``(n - 1) / 2``.  The permutation relaxations
centre the scores and divide them by ``tau`` before forming their logits.

Choosing ``temperature`` (with ``scale="std"``): a pair whose scores differ by ``d`` standard deviations is
ordered with probability ``sigmoid(d / temperature)``.  Adjacent items of a list of ``N`` roughly evenly spread
scores differ by about ``3.5 / N`` std, so ``temperature`` well below ``1 / N`` gives a nearly hard ranking
(small gradients except for near-ties) and values around ``0.1 - 1`` a smooth one (informative gradients for
most pairs, but biased values).  ``0.1`` is a reasonable start for training; to evaluate use
:class:`~torchfair.orderings.Hard`.

Dtypes and devices: float16 / bfloat16 scores are computed in float32, float64 stays float64; everything stays
on the scores' device and nothing synchronises with the host.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_choice, check_number
from ..browsing import BrowsingModel
from .._validation import check_int as _check_int
from ._pairsums import kernels as _kernels
from .base import LevelPairWeight, OrderedBatch, Ordering, PairBlock, dense_pairs, ranked_exposure, row_blocks, work_scores

__all__ = ["SoftRank", "SoftRankOrderedBatch", "NeuralSort", "SoftSort", "PermutationOrderedBatch", "list_scale",
           "MIN_SCALE", "REL_MIN_SCALE"]

_SCALES = ("std", "none")


# --------------------------------------------------------------------------------------------------- helpers
_work = work_scores


#: default absolute floor of the per-list scale (``min_scale``), in score units (module docstring, Temperature)
MIN_SCALE = 0.25
#: default floor of the per-list scale relative to the mean absolute score (``rel_min_scale``): off
REL_MIN_SCALE = 0.0


def list_scale(s: Tensor, mask: Tensor, min_scale: float = MIN_SCALE, rel_min_scale: float = REL_MIN_SCALE
               ) -> Tensor:
    """``[B, 1]`` per-list scale ``max(std, rel_min_scale * mean|s|, min_scale)`` over the real items (detached).

    ``std`` is the population standard deviation.  It is computed without overflow or underflow for any finite
    scores: the list is divided by its largest absolute score before the mean, centred, and divided by its largest
    centred value before squaring (a plain ``sum(s**2)`` is ``inf`` in float32 from ``|s| ~ 1e19`` on).  A list
    without real items gets ``min_scale``.
    """
    with torch.no_grad():
        K = _kernels("windows", "auto", s) if s.dtype in (torch.float32, torch.float64) else None
        if K is not None:  # the CPU: one compiled pass per list (the torch code below is the reference)
            return K.list_scale(s, mask, min_scale, rel_min_scale)
        x, a, n = _normalised(s, mask)
        zero = torch.zeros((), dtype=s.dtype, device=s.device)
        mean_abs = x.abs().sum(-1, keepdim=True) / n * a
        c = torch.where(mask, x - x.sum(-1, keepdim=True) / n, zero)  # |c| <= 2
        cmax = c.abs().amax(-1, keepdim=True)
        cmax = torch.where(cmax > 0, cmax, torch.ones_like(cmax))
        std = ((c / cmax) ** 2).sum(-1, keepdim=True).div(n).sqrt() * cmax * a
        scale = torch.maximum(std, rel_min_scale * mean_abs) if rel_min_scale > 0 else std
        return scale.clamp(min=min_scale)


def _temperature(s: Tensor, mask: Tensor, temperature: float, scale: str, min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE) -> Tensor:
    """``[B, 1]`` per-list temperature (no gradient): ``temperature * list_scale(...)`` with ``scale="std"``,
    ``temperature`` with ``scale="none"``.  The one definition of the temperature of every soft ordering
    (:class:`SoftRank`, :class:`NeuralSort`, :class:`SoftSort`, :class:`~torchfair.orderings.FastSoftRank`,
    :class:`~torchfair.orderings.RampRank` and :class:`~torchfair.orderings.PlackettLuce`, whose logits are
    ``scores / tau_b``)."""
    B = s.shape[0]
    if scale == "none":
        return torch.full((B, 1), temperature, dtype=s.dtype, device=s.device)
    return temperature * list_scale(s, mask, min_scale, rel_min_scale)


def _check_common(temperature, scale, min_scale, rel_min_scale=0.0):
    """Validate the temperature arguments shared by the soft orderings (``ValueError`` naming the argument)."""
    check_number(temperature, "temperature", low=0, low_open=True)
    check_choice(scale, "scale", _SCALES)
    check_number(min_scale, "min_scale", low=0, low_open=True)
    check_number(rel_min_scale, "rel_min_scale", low=0)


def _check_block_elements(block_elements):
    if block_elements is None:
        return None
    return _check_int(block_elements, "block_elements", low=1)


def _list_mean(s: Tensor, mask: Tensor) -> Tensor:
    """``[B, 1]`` mean of the real scores of each list (detached; no overflow for any finite scores)."""
    with torch.no_grad():
        x, a, n = _normalised(s, mask)
        return x.sum(-1, keepdim=True) / n * a


def _normalised(s: Tensor, mask: Tensor):
    """``(x, a, n)``: the real scores divided by their largest magnitude ``a [B, 1]`` (1 for an all-zero or empty
    list), so that ``|x| <= 1`` and sums of ``x`` or ``x**2`` cannot overflow, and the count ``n >= 1``."""
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    a = torch.where(mask, s.abs(), zero).amax(-1, keepdim=True)
    a = torch.where(a > 0, a, torch.ones_like(a))
    n = mask.sum(-1, keepdim=True).clamp(min=1).to(s.dtype)
    return torch.where(mask, s / a, zero), a, n


def _check_iters(sinkhorn_iters) -> int:
    return _check_int(sinkhorn_iters, "sinkhorn_iters", low=0)


class _Tempered(Ordering):
    """The temperature arguments shared by the soft orderings (module docstring, Temperature)."""

    differentiable = True

    def _init_temperature(self, temperature, scale, min_scale, rel_min_scale) -> None:
        _check_common(temperature, scale, min_scale, rel_min_scale)
        self.temperature, self.scale = float(temperature), scale
        self.min_scale, self.rel_min_scale = float(min_scale), float(rel_min_scale)

    def _tau(self, s: Tensor, mask: Tensor) -> Tensor:
        return _temperature(s, mask, self.temperature, self.scale, self.min_scale, self.rel_min_scale)


def _row_real(mask: Tensor) -> Tensor:
    """``[B, N]`` bool: position k is occupied by a real item (``k < n_b``)."""
    N = mask.shape[1]
    return torch.arange(N, device=mask.device)[None, :] < mask.sum(-1, keepdim=True)


def _sinkhorn(P: Tensor, iters: int) -> Tensor:
    """Alternate column and row normalisation (ending with rows); zero rows / columns stay zero."""
    def normalise(P: Tensor, dim: int) -> Tensor:
        tot = P.sum(dim, keepdim=True)
        # divide by 1 where the sum is 0 (padded rows / columns): keeps them 0 with finite gradients
        return P / torch.where(tot > 0, tot, torch.ones_like(tot))

    for _ in range(iters):
        P = normalise(normalise(P, -2), -1)
    return P


def _offdiag(start: int, stop: int, N: int, device) -> Tensor:
    rows = torch.arange(start, stop, device=device)[:, None]
    return rows != torch.arange(N, device=device)[None, :]  # [rows, N]


def _soft_sorted_exposure(P: Tensor, mask: Tensor, browsing: BrowsingModel, relevance: Optional[Tensor]) -> Tensor:
    """``[B, N]`` exposure of every position of a relaxed permutation ``P [B, K, N]`` (0 for rows ``k >= n_b``);
    a relevance-dependent model sees the softly sorted relevance ``P @ r``."""
    return ranked_exposure(browsing, relevance, mask, P.dtype,
                           lambda rel: _linalg.bmm(P, rel.unsqueeze(-1)).squeeze(-1))


# ------------------------------------------------------------------------------------------------- SoftRank
def _sigmoid_block(z: Tensor, start: int, stop: int, out: Tensor) -> Tensor:
    """``out[b, i - start, j] = sigmoid(z_j - z_i)`` for rows ``i in [start, stop)``, 0 on the diagonal, written into
    the buffer ``out [B, stop - start, N]`` (no allocation: the row-block loops reuse their buffers, so that the
    allocator's heap does not fragment over hundreds of blocks)."""
    torch.sub(z[:, None, :], z[:, start:stop, None], out=out)
    out.sigmoid_()
    out[:, :, start:stop].diagonal(dim1=1, dim2=2).zero_()
    return out


def _buffers(z: Tensor, B: int, N: int, block_elements: Optional[int], k: int):
    """``k`` reusable ``[B, rows, N]`` buffers for :func:`row_blocks` and a view helper for the last, shorter block."""
    rows = max(stop - start for start, stop in row_blocks(B, N, block_elements)) if N else 0
    return [z.new_empty(B, rows, N) for _ in range(k)]


class _SigmoidRowSum(torch.autograd.Function):
    """``out[b, i] = sum_{j != i} g(z_j - z_i)`` with ``g = sigmoid`` (moment 1) or ``sigmoid * (1 - sigmoid)``
    (moment 2), in row blocks; backward recomputes the blocks (O(B N) saved).  ``z`` from :meth:`SoftRankOrderedBatch._z` (padded
    items add exactly 0); rows of padded items are garbage and masked by the caller."""

    @staticmethod
    def forward(ctx, z: Tensor, moment: int, block_elements: Optional[int]):
        ctx.save_for_backward(z)
        ctx.moment, ctx.block_elements = moment, block_elements
        B, N = z.shape
        out = z.new_empty(B, N)
        buf, sq = _buffers(z, B, N, block_elements, 2)
        for start, stop in row_blocks(B, N, block_elements):
            a = _sigmoid_block(z, start, stop, buf[:, :stop - start])
            if moment == 2:
                a = torch.sub(a, torch.mul(a, a, out=sq[:, :stop - start]), out=sq[:, :stop - start])
            out[:, start:stop] = a.sum(-1)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        z, = ctx.saved_tensors
        B, N = z.shape
        grad = torch.zeros_like(z)
        buf, d, t = _buffers(z, B, N, ctx.block_elements, 3)
        for start, stop in row_blocks(B, N, ctx.block_elements):
            r = stop - start
            a = _sigmoid_block(z, start, stop, buf[:, :r])
            da = torch.sub(a, torch.mul(a, a, out=d[:, :r]), out=d[:, :r])  # a (1 - a)
            if ctx.moment == 2:  # d/dx a (1 - a) = a (1 - a) (1 - 2 a)
                da.mul_(torch.mul(a, -2.0, out=t[:, :r]).add_(1.0))
            da.mul_(grad_out[:, start:stop, None])
            grad += da.sum(1)
            grad[:, start:stop] -= da.sum(2)
        return grad, None, None


class _SoftRankContract(torch.autograd.Function):
    """``out[b, i, h] = sum_{j != i} w_ij sigmoid(z_j - z_i) R[b, j, h]`` in row blocks with reused buffers, for a
    :class:`~torchfair.orderings.base.LevelPairWeight` ``w`` (or ``w = 1``); backward recomputes each block:
    ``grad R_j = sum_i w_ij A_ij G_i``, ``grad z_j = sum_i D_ij T_ij - sum_i D_ji T_ji`` with ``D = w A (1 - A)``
    and ``T_ij = G_i . R_j``.  ``z`` as in :class:`_SigmoidRowSum`; rows of padded items are masked by the caller."""

    @staticmethod
    def forward(ctx, z: Tensor, R: Tensor, pair_weight, block_elements: Optional[int]):
        ctx.save_for_backward(z, R)
        ctx.pair_weight, ctx.block_elements = pair_weight, block_elements
        B, N = z.shape
        out = R.new_empty(B, N, R.shape[-1])
        buf, = _buffers(z, B, N, block_elements, 1)
        for start, stop in row_blocks(B, N, block_elements):
            a = _sigmoid_block(z, start, stop, buf[:, :stop - start])
            if pair_weight is not None:
                a.mul_(pair_weight(start, stop).to(a.dtype))
            out[:, start:stop] = torch.bmm(a, R)
        return out

    @staticmethod
    def backward(ctx, G: Tensor):
        z, R = ctx.saved_tensors
        B, N = z.shape
        need_z, need_R = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_z = torch.zeros_like(z) if need_z else None
        grad_R = torch.zeros_like(R) if need_R else None
        buf, d, t = _buffers(z, B, N, ctx.block_elements, 3)
        Rt = R.transpose(1, 2)
        for start, stop in row_blocks(B, N, ctx.block_elements):
            r = stop - start
            a = _sigmoid_block(z, start, stop, buf[:, :r])
            Gb = G[:, start:stop]
            if need_z:
                da = torch.sub(a, torch.mul(a, a, out=d[:, :r]), out=d[:, :r])  # A (1 - A)
            if ctx.pair_weight is not None:
                w = ctx.pair_weight(start, stop).to(a.dtype)
                a.mul_(w)
                if need_z:
                    da.mul_(w)
            if need_R:
                grad_R.baddbmm_(a.transpose(1, 2), Gb)
            if need_z:
                da.mul_(torch.bmm(Gb, Rt, out=t[:, :r]))
                grad_z += da.sum(1)
                grad_z[:, start:stop] -= da.sum(2)
        return grad_z, grad_R, None, None


class _PairSigmoid(torch.autograd.Function):
    """``A[b, i, j] = sigmoid(z_j - z_i)`` off the diagonal, 0 on it (the dense SoftRank pairs): two passes over
    ``[B, N, N]`` forward.  Backward from the saved output: ``d = g A (1 - A)``, ``grad z_j = sum_i d_ij -
    sum_i d_ji`` (no ``[B, N, N]`` negation or masking pass, which autograd of the plain expression spends)."""

    @staticmethod
    def forward(ctx, z: Tensor) -> Tensor:
        A = torch.sigmoid_(z[:, None, :] - z[:, :, None])
        A.diagonal(dim1=1, dim2=2).zero_()
        ctx.save_for_backward(A)
        return A

    @staticmethod
    def backward(ctx, grad: Tensor):
        A, = ctx.saved_tensors
        t = grad * A
        d = torch.addcmul(t, t, A, value=-1)
        return d.sum(1) - d.sum(2)


@dataclass
class _SoftRankCtx:
    exposure: Optional[Tensor]


class SoftRankOrderedBatch(OrderedBatch):
    """Result of :class:`SoftRank` (see the module docstring)."""

    def __init__(self, scores: Tensor, mask: Tensor, tau: Tensor, min_position_std: float, sinkhorn_iters: int,
                 block_elements: Optional[int], dense_elements: Optional[int] = None):
        self.scores, self.mask, self.tau = scores, mask, tau  # tau: [B, 1]
        self.min_position_std = min_position_std
        self.sinkhorn_iters = sinkhorn_iters
        self.block_elements = block_elements
        self.dense_elements = dense_elements
        self._pos: Optional[Tensor] = None
        self._above: Optional[Tensor] = None

    def _z(self) -> Tensor:
        """``(s - max_b s) / tau`` per list (only differences ``z_j - z_i`` are used), kept within +-``max/4`` of the
        dtype so that no difference overflows (with ``scale="std"`` the range is ``<= 20 sqrt(N)`` anyway), padded
        items at ``-max/2``: ``sigmoid(z_pad - z_i) = 0`` exactly for every real ``i``, and nothing is NaN."""
        s, m = self.scores, self.mask
        big = torch.finfo(s.dtype).max
        with torch.no_grad():
            top = torch.where(m, s, torch.full((), -float("inf"), dtype=s.dtype, device=s.device)).amax(-1, keepdim=True)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        z = ((s - top) / self.tau).clamp(-big / 4, big / 4)
        return torch.where(m, z, torch.full((), -big / 2, dtype=z.dtype, device=z.device))

    def _dense(self) -> Optional[Tensor]:
        """``above [B, N, N]`` formed once (dense strategy, see ``DENSE_PAIR_ELEMENTS``), or ``None`` when the
        batch is too large for it or no gradient is needed (then the row-block path keeps memory bounded)."""
        B, N = self.mask.shape
        if self._above is None and self.block_elements is None and dense_pairs(B, N, self.dense_elements) \
                and torch.is_grad_enabled() and self.scores.requires_grad:
            # rows of padded items are not used: positions and contractions are masked by row
            self._above = _PairSigmoid.apply(self._z())
        return self._above

    def expected_positions(self) -> Tensor:
        if self._pos is None:
            A = self._dense()
            if A is not None:
                pos = A.sum(-1)
            else:
                pos = _SigmoidRowSum.apply(self._z(), 1, self.block_elements)
            self._pos = pos * self.mask.to(pos.dtype)
        return self._pos

    def position_variance(self) -> Tensor:
        """``[B, N]`` ``sum_j above[i, j] (1 - above[i, j])``: the Poisson-binomial variance of the position."""
        A = self._dense()
        if A is not None:
            v = (A * (1 - A)).sum(-1)
        else:
            v = _SigmoidRowSum.apply(self._z(), 2, self.block_elements)
        return v * self.mask.to(v.dtype)

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        mf = self.mask.to(self.scores.dtype)
        if not browsing.relevance_dependent:  # F at the expected position (module docstring)
            return browsing.weight(self.expected_positions()) * mf
        R = self.position_matrix()
        f = _soft_sorted_exposure(R, self.mask, browsing, relevance)
        return _linalg.einsum("bk,bki->bi", f, R) * mf

    def pair_context(self, browsing, relevance) -> _SoftRankCtx:
        self._dense()  # formed here, outside any checkpointed row block that would otherwise form it lazily
        return _SoftRankCtx(None if browsing is None else self.exposure(browsing, relevance))

    def joint_factor(self, context: _SoftRankCtx) -> Optional[Tensor]:
        return context.exposure  # joint[i, j] = F(E[pos_j]) above[i, j]

    def contract(self, right: Tensor, *, which: str = "above", pair_weight=None,
                 browsing: Optional[BrowsingModel] = None, relevance: Optional[Tensor] = None,
                 block_elements: Optional[int] = None) -> Tensor:
        """:meth:`OrderedBatch.contract`; beyond the dense budget, ``"above"`` and ``"joint"`` with a
        :class:`~torchfair.orderings.base.LevelPairWeight` (every pairwise measure) run a fused row-block kernel
        with a hand-written backward and reused buffers (:class:`_SoftRankContract`)."""
        if which not in ("above", "joint") or (which == "joint" and browsing is None) or (
                pair_weight is not None and not isinstance(pair_weight, LevelPairWeight)) or (
                block_elements is None and self._dense() is not None):
            return super().contract(right, which=which, pair_weight=pair_weight, browsing=browsing,
                                    relevance=relevance, block_elements=block_elements)
        R = right.to(self.scores.dtype)
        if which == "joint":
            R = R * self.exposure(browsing, relevance).to(R.dtype)[..., None]
        be = block_elements if block_elements is not None else self.block_elements
        out = _SoftRankContract.apply(self._z(), R, pair_weight, be)
        return (out * self.mask.to(out.dtype)[..., None]).to(right.dtype)

    def pair_block(self, context: _SoftRankCtx, start: int, stop: int) -> PairBlock:
        A = self._dense()
        if A is not None:
            above = A[:, start:stop]
        else:
            z, N = self._z(), self.mask.shape[1]  # padded partners j get exactly 0 from z
            keep = self.mask[:, start:stop, None] & _offdiag(start, stop, N, z.device)
            above = torch.sigmoid(z[:, None, :] - z[:, start:stop, None]) * keep.to(z.dtype)
        joint = None if context.exposure is None else context.exposure[:, None, :] * above
        return PairBlock(above=above, joint=joint)

    def position_matrix(self) -> Tensor:
        B, N = self.mask.shape
        dt = self.scores.dtype
        mu = self.expected_positions()[:, None, :]
        sd = torch.sqrt(self.position_variance() + self.min_position_std ** 2)[:, None, :]
        k = torch.arange(N, device=mu.device, dtype=dt)[None, :, None]
        last = (self.mask.sum(-1) - 1).to(dt)[:, None, None]
        up = torch.where(k >= last, torch.ones((), dtype=dt, device=mu.device), torch.special.ndtr((k + 0.5 - mu) / sd))
        lo = torch.where(k <= 0, torch.zeros((), dtype=dt, device=mu.device), torch.special.ndtr((k - 0.5 - mu) / sd))
        R = (up - lo) * _row_real(self.mask).to(dt)[:, :, None] * self.mask.to(dt)[:, None, :]
        return _sinkhorn(R, self.sinkhorn_iters)


class SoftRank(_Tempered):
    """Pairwise-sigmoid relaxation (ApproxRank / SmoothRank): ``P(j above i) = sigmoid((s_j - s_i) / tau)``.

    ``temperature``: relative to each list's score scale with ``scale="std"`` (default), absolute with
    ``scale="none"`` (smaller is closer to the hard ranking).  With ``scale="std"`` the temperature of a list is
    ``temperature * max(std, rel_min_scale * mean|s|, min_scale)``: ``min_scale`` (score units, default 0.25)
    is the floor that keeps tied lists (a freshly initialised model) at gradients of ordinary size,
    ``rel_min_scale`` (default 0, off) a floor relative to the score magnitude; see the module docstring,
    section Temperature.  ``min_position_std`` and ``sinkhorn_iters`` only concern the
    approximate :meth:`~SoftRankOrderedBatch.position_matrix`.  ``block_elements``: pair entries per row block
    of the expected-position reduction (default :data:`~torchfair.orderings.base.PAIR_BLOCK_ELEMENTS`).
    ``dense_elements``: with gradients, batches of at most this many pairs ``B * N * N`` (default
    :data:`~torchfair.orderings.base.DENSE_PAIR_ELEMENTS`) form the ``[B, N, N]`` sigmoids once and share them
    between positions and pair sums (fast, memory ``O(B N^2)``); larger ones (or an explicit ``block_elements``)
    work in row blocks recomputed in backward (memory bounded by the block).  Same values either way.

    Example::

        >>> SoftRank(0.01, scale="none")(torch.tensor([[3., 1., 2.]]), torch.ones(1, 3, dtype=torch.bool)
        ...                               ).expected_positions().round()
        tensor([[0., 2., 1.]])
    """

    def __init__(self, temperature: float = 0.1, scale: str = "std", *, min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE, min_position_std: float = 0.1, sinkhorn_iters: int = 0,
                 block_elements: Optional[int] = None, dense_elements: Optional[int] = None):
        self._init_temperature(temperature, scale, min_scale, rel_min_scale)
        self.min_position_std = check_number(min_position_std, "min_position_std", low=0, low_open=True)
        self.sinkhorn_iters = _check_iters(sinkhorn_iters)
        self.block_elements = _check_block_elements(block_elements)
        self.dense_elements = None if dense_elements is None else _check_int(dense_elements, "dense_elements", low=0)

    def __call__(self, scores: Tensor, mask: Tensor) -> SoftRankOrderedBatch:
        s, mask = _work(scores, mask)
        tau = self._tau(s, mask)
        return SoftRankOrderedBatch(s, mask, tau, self.min_position_std, self.sinkhorn_iters, self.block_elements,
                                    self.dense_elements)

    def __repr__(self) -> str:
        return f"SoftRank(temperature={self.temperature}, scale={self.scale!r})"


# ------------------------------------------------------------------------------ relaxed permutation matrices
@dataclass
class _PermCtx:
    cum: Tensor  # [B, K, N] sum_{k < l} P[k, j]
    cum_f: Optional[Tensor]  # [B, K, N] sum_{k < l} F(k) P[k, j]


def _exclusive_cumsum(x: Tensor, dim: int) -> Tensor:
    c = torch.cumsum(x, dim)
    return torch.cat([torch.zeros_like(c.narrow(dim, 0, 1)), c.narrow(dim, 0, c.shape[dim] - 1)], dim)


class PermutationOrderedBatch(OrderedBatch):
    """An ordering given by a relaxed permutation matrix ``P[b, k, i]`` (rows = positions), as produced by
    :class:`NeuralSort` and :class:`SoftSort` (see the module docstring for the derived quantities)."""

    def __init__(self, scores: Tensor, mask: Tensor, P: Tensor):
        self.scores, self.mask, self.P = scores, mask, P

    def expected_positions(self) -> Tensor:
        B, K, N = self.P.shape
        k = torch.arange(K, dtype=self.P.dtype, device=self.P.device)[None, :, None]
        col = self.P.sum(1).clamp(min=torch.finfo(self.P.dtype).tiny)
        return (k * self.P).sum(1) / col * self.mask.to(self.P.dtype)

    def _position_exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor]) -> Tensor:
        return _soft_sorted_exposure(self.P, self.mask, browsing, relevance)

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        f = self._position_exposure(browsing, relevance)
        return _linalg.einsum("bk,bki->bi", f, self.P) * self.mask.to(self.P.dtype)

    def pair_context(self, browsing, relevance) -> _PermCtx:
        cum = _exclusive_cumsum(self.P, 1)
        cum_f = None
        if browsing is not None:
            f = self._position_exposure(browsing, relevance)
            cum_f = _exclusive_cumsum(f[:, :, None] * self.P, 1)
        return _PermCtx(cum, cum_f)

    def pair_block(self, context: _PermCtx, start: int, stop: int) -> PairBlock:
        N = self.mask.shape[1]
        Pi = self.P[:, :, start:stop].transpose(1, 2)  # [B, rows, K]
        off = _offdiag(start, stop, N, Pi.device).to(Pi.dtype)
        above = _linalg.bmm(Pi, context.cum) * off
        joint = None if context.cum_f is None else _linalg.bmm(Pi, context.cum_f) * off
        return PairBlock(above=above, joint=joint)

    def position_matrix(self) -> Tensor:
        return self.P


def _centred_logit_scores(s: Tensor, mask: Tensor, tau: Tensor, in_dtype: Optional[torch.dtype] = None) -> Tensor:
    """``(s - mean) / tau`` of the real items (0 on padding), kept where the permutation logits stay finite.

    The temperature is floored at ``sqrt(tiny)`` of the dtype (~1e-19 in float32): the gradient of a relaxed
    permutation is of order ``N^2 / tau`` at tied scores, which was infinite for tiny temperatures (and a
    temperature that underflows to 0 gave 0/0).  A smaller temperature changes nothing else: score gaps over it are
    already ~1e12 logits apart for scores of order 1, a hard ranking.  ``|z|`` is capped at ``max / (4 N)`` so that
    NeuralSort's ``(n - 1 - 2k) z - sum_j |z_i - z_j|`` (at most ``3 N max|z|``) cannot overflow to ``inf - inf``;
    scores beyond it are one-hot already, only their order among themselves is lost (ties).  ``in_dtype``: the
    dtype of the caller's scores (half types are computed in float32 but their gradient is returned in the half
    type): the floor is also ``4 N^2 / max`` of that dtype, so that the ``N^2 / tau`` gradient fits it."""
    finfo = torch.finfo(s.dtype)
    fin = torch.finfo(in_dtype) if in_dtype is not None and in_dtype.is_floating_point else finfo
    N = max(s.shape[1], 1)
    tau = tau.clamp(min=max(finfo.tiny ** 0.5, fin.tiny ** 0.5, 4.0 * N * N / fin.max))
    bound = finfo.max / (4 * max(s.shape[1], 1))
    z = ((s - _list_mean(s, mask)) / tau).clamp(-bound, bound)
    return torch.where(mask, z, torch.zeros((), dtype=s.dtype, device=s.device))


class _PermutationOrdering(_Tempered):
    def __init__(self, temperature: float = 0.1, scale: str = "std", *, min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE, sinkhorn_iters: int = 0):
        self._init_temperature(temperature, scale, min_scale, rel_min_scale)
        self.sinkhorn_iters = _check_iters(sinkhorn_iters)

    def _logits(self, s: Tensor, mask: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def relaxed_permutation(self, scores: Tensor, mask: Tensor) -> Tensor:
        """``P_hat [B, N, N]``: ``P_hat[b, k, i]`` ~ P(item i at 0-based position k) (rows ``k >= n_b`` and padded
        columns are 0)."""
        s, mask = _work(scores, mask)
        return self._P(s, mask, scores.dtype)

    def _P(self, s: Tensor, mask: Tensor, in_dtype: Optional[torch.dtype] = None) -> Tensor:
        tau = self._tau(s, mask)
        # both relaxations are invariant to a per-list shift of the scores and their logits are homogeneous of
        # degree 1 in the scores: centre (detached mean, so that NeuralSort's (n - 1 - 2k) s terms do not cancel
        # catastrophically for large score offsets) and divide by tau first, so that nothing overflows
        logits = self._logits(_centred_logit_scores(s, mask, tau, in_dtype), mask)  # [B, K, N]
        logits = torch.where(mask[:, None, :], logits,
                             torch.full((), torch.finfo(s.dtype).min, dtype=s.dtype, device=s.device))
        P = torch.softmax(logits, dim=-1)
        P = P * (_row_real(mask)[:, :, None] & mask[:, None, :]).to(s.dtype)
        return _sinkhorn(P, self.sinkhorn_iters)

    def __call__(self, scores: Tensor, mask: Tensor) -> PermutationOrderedBatch:
        s, mask = _work(scores, mask)
        return PermutationOrderedBatch(s, mask, self._P(s, mask, scores.dtype))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(temperature={self.temperature}, scale={self.scale!r}, "
                f"sinkhorn_iters={self.sinkhorn_iters})")


class NeuralSort(_PermutationOrdering):
    """NeuralSort (Grover et al., 2019): ``P_hat[k, :] = softmax(((n - 1 - 2k) s - A_s 1) / tau)`` over the
    ``n`` real items of each list (0-based k).  ``temperature`` / ``scale`` / ``min_scale`` / ``rel_min_scale``
    as in :class:`SoftRank` (``tau = temperature * max(std, rel_min_scale * mean|s|, min_scale)`` with
    ``scale="std"``; module docstring, Temperature); ``sinkhorn_iters`` balances the columns.  O(N^2) memory per
    list.  The temperature is floored at ``sqrt(tiny)`` of the dtype (~1e-19 in float32) and the centred scores
    over it capped at ``max / (4 N)``, so the gradient stays finite on tied scores and the logits never overflow
    (as for :class:`SoftSort`).  Half precision: the gradient at tied scores is ~``N^2 / tau``, beyond float16's
    65 504 when ``tau`` (score units) is below ~``4 N^2 / 65 504``; use a larger temperature there, or float32
    scores."""

    def _logits(self, s: Tensor, mask: Tensor) -> Tensor:
        N = s.shape[1]
        mf = mask.to(s.dtype)
        A1 = ((s[:, :, None] - s[:, None, :]).abs() * mf[:, None, :]).sum(-1)  # [B, N]: sum_j |s_i - s_j|
        n = mf.sum(-1, keepdim=True)  # [B, 1]
        coef = n - 1 - 2 * torch.arange(N, dtype=s.dtype, device=s.device)[None, :]  # [B, K]
        return coef[:, :, None] * s[:, None, :] - A1[:, None, :]


class SoftSort(_PermutationOrdering):
    """SoftSort (Prillo & Eisenschlos, 2020): ``P_hat[k, :] = softmax(-|sort(s)_k - s| / tau)`` over the real
    items of each list (``sort`` descending, real items only).  Arguments as in :class:`NeuralSort` (the same
    temperature rule, module docstring, Temperature).  On exactly tied scores its gradient is 0."""

    def _logits(self, s: Tensor, mask: Tensor) -> Tensor:
        key = torch.where(mask, s, torch.full((), float("-inf"), dtype=s.dtype, device=s.device))
        idx = torch.sort(key, dim=-1, descending=True, stable=True).indices
        sorted_s = s.gather(-1, idx)  # rows k >= n_b hold padded (blanked) scores and are zeroed later
        return -(sorted_s[:, :, None] - s[:, None, :]).abs()
