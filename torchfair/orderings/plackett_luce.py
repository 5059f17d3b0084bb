r"""Plackett-Luce ranking policies: expected measures under sampled rankings, with gradient estimators.

A Plackett-Luce (PL) policy (Luce 1959, *Individual Choice Behavior*; Plackett 1975, *Appl. Statist.* 24) with
logits ``m = scores / tau_b`` draws a ranking of list ``b`` by picking items one by one, item ``d`` next with
probability ``exp(m_d) / sum_{d' not yet placed} exp(m_d')``.  The temperature ``tau_b`` of each list follows the
one rule of the soft orderings (:mod:`torchfair.orderings.soft`, section Temperature; see *Temperature* below):
``temperature * max(std_b, rel_min_scale * mean_b|s|, min_scale)`` with ``scale="std"`` (default), the absolute
``temperature`` with ``scale="none"`` (``scale="none", temperature=1``: the policy ``softmax(scores)``).  Under the
policy every quantity a measure asks for (exposure, pair probabilities, ...) is an expectation;
:class:`PlackettLuce` estimates it from ``samples`` rankings drawn with the Gumbel-max trick
(``argsort(m + Gumbel noise)``) and offers three gradient estimators:

* ``"score_function"``: REINFORCE with a leave-one-out baseline (as Fair-PG-Rank): unbiased for the gradient of
  every expected quantity; the measure's nonlinearity is applied by the chain rule (its ``dL/dE`` at the Monte
  Carlo estimate, so a nonlinear measure has an O(1/S) bias, like every plug-in estimator).  Implemented as sample
  weights ``w_s = 1/S + (S d_s - sum d) / (S (S - 1))`` with ``d_s = log pi(y_s) - stopgrad(log pi(y_s))``: their
  value is ``1/S`` and their gradient the baselined score-function estimate.
* ``"pl_rank"`` (default): PL-Rank-2 (Oosterhuis, SIGIR 2021) for every quantity that is an expectation of a
  per-position reward: exposure ``E[F(pos_i)]`` and the pair quantities ``E[F(pos_j) 1(pos_j < pos_i)]``,
  ``P(j above i)``.  The measure's gradient ``dL/dE`` arrives in backward as per-item (or per-pair) rewards and
  PL-Rank-2 turns them into an unbiased gradient for the logits: for a sampled ranking ``y``,

  .. math:: \hat g_d = G_{\mathrm{rank}(d)+1} + \sum_{k \le \mathrm{rank}(d)} \pi(d \mid y_{1:k-1})\,
            \big(r_k(d) - G_k\big)

  with ``r_k(d)`` the reward of placing ``d`` at step ``k`` and ``G_k`` the sample's reward from step ``k`` on.
  Rewards are centred per list (a baseline that is exact for position-based browsing, where the total exposure
  of a ranking is constant), which also keeps the chain rule unbiased for measures that normalise by the
  estimated total exposure.  Expected positions and the position matrix (prefix measures) are not per-position
  rewards: they get the score-function gradient.  Measured variance (``tests/orderings/test_plackett_luce.py``, N = 5):
  PL-Rank's is 0.35-0.7x the score function's for the DIPS gap, but 2-4x for exposure objectives such as
  misallocation, where the leave-one-out baseline of the score function wins: pick the estimator per objective.
* ``"relaxed"``: Gumbel-perturbed scores through a soft ordering (pathwise, biased, low variance).

``PlackettLuce(exact=True)`` enumerates all rankings (``N <= 8``) with their probabilities instead: exact
expectations, exact gradients by autograd.  It is the reference the tests compare the estimators against.
Closed forms: :func:`pair_probability` ``P(j above i) = e^{m_j} / (e^{m_i} + e^{m_j})`` and
:func:`top1_probability` (softmax); their ``temperature`` is absolute (for a ``scale="std"`` policy pass
``temperature * list_scale(scores, mask)``).

Temperature.  PL compares score *differences* with the temperature (``P(j above i) = sigmoid((s_j - s_i) / tau)``,
the pair probability of :class:`~torchfair.orderings.SoftRank` at the same ``tau``), so an absolute temperature
means something different for every score range.  With the former default (``temperature=1``, absolute), the
scores of a trained ranker -- e.g. a spread of about 0.25 within a list, as reported for the matrix factorisation of
the ML-100K experiments -- give logits spread over 0.25 units: a nearly uniform random policy, whose expected
measures hardly depend on the ranking, so a PL fairness loss learned next to nothing.  The default is therefore
relative: ``scale="std", temperature=0.1``, logits spread over about 10 standard-deviation units, and list ``b`` has
``tau_b = 0.1 * max(std_b, 0.25)`` (detached: a constant of the loss, as for the soft orderings; scaling the scores
of a list by ``c > 0`` leaves the policy unchanged while its std stays above ``min_scale``).  Measured on lists of
``N = 20 / 50 / 100`` items with scores ``0.25 * N(0, 1)`` and graded relevance correlated with the score
(``rho = 0.7``, ~16 % relevant, 256 lists, 500 samples):

=====================================  ============  ============  ============
expected ``NDCG@10``                    N = 20        N = 50        N = 100
=====================================  ============  ============  ============
hard ranking                            0.696         0.624         0.580
``temperature=1, scale="none"`` (old)   0.354         0.204         0.150
uniform random ranking                  0.291         0.157         0.114
``temperature=1`` (``"std"``)           0.507         0.353         0.282
``temperature=0.3``                     0.662         0.566         0.516
``temperature=0.1`` (default)           0.693         0.619         0.571
``temperature=0.05``                    0.695         0.624         0.576
=====================================  ============  ============  ============

At ``0.1`` the policy keeps 98-99 % of the hard ranking's ``NDCG@10`` (the old default: 16 / 10 / 8 % of the way from
random to hard) and is still stochastic (N = 50: the hard top item is drawn first with probability 0.83, the hard
top 10 in its order in 0.5 % of the samples, an item moves 1.6 positions on average).  Training: 20 SGD steps
(lr 1, 16 samples) of the DIPS loss on 32 such lists (N = 50) with a ranker biased towards one group take the
exact DIPS gap from 0.137 to 0.055 at ``temperature=0.1`` (0.046-0.052 at 0.2-0.3; 0.075 at 0.02, nearly hard:
PL-Rank's gradients vanish with the policy's randomness), to 0.133 with the old default; 20 such steps of
``PL-NDCG@10`` (:func:`~torchfair.losses.pl_ndcg_loss`, 32 samples) take the hard ``NDCG@10`` from 0.60 to 0.82 (0.65 with
the old default).  (With Adam the old default's gradient direction still moves free scores, but its loss value, the
expected DIPS of a nearly uniform policy, is 0.05-0.25x the ranking's on such lists.)  ``temperature``
well below ``1 / N`` approaches the hard ranking (and vanishing gradients), ``1`` and more a nearly uniform one.

Numerics.  The logits of each list are ``(s - top_b) / tau_b``, shifted by its largest real score (detached; PL
is shift-invariant) and computed without overflow for any finite scores (with ``scale="std"`` they span at most
``2 sqrt(n) / temperature``).  The sums over the steps of a sampled ranking that PL-Rank and the score function need,
``sum_{k <= rank(d)} x_k pi_k(d)`` with ``pi_k(d) = e^{m_d} / Z_k``, are plain cumulative sums of ``x_k / Z_k``
(the form of PL-Rank's reference code), with the logits of each list shifted to the middle of their range, in
float32 when every list's logits span at most 80, in float64 up to a span of 1000; lists spanning more
(``1 / Z_k`` would overflow) are recomputed in log space (``logcumsumexp`` of ``log |x_k| - log Z_k``, exact for
any span), and so is everything on non-CPU devices (no host synchronisation to choose).  The exact enumeration
normalises its probabilities per list with ``logsumexp``.  Half-precision scores are computed in float32.  Values
and gradients are finite for logits spanning ``1e4`` and more.

Speed (``experiments/bench_pl.py`` compares with plain Gumbel-sort code computing the same numbers).
Sampling sorts the Gumbel keys once, as int32 keys with the same order (a faster sort than float32); the ordered
batch works from the sampled rankings directly (no second sort); exposure is one scatter of the position exposures
per sample; PL-Rank and the score-function gradient are computed in position order with one prefix sum per
quantity and moved to the items by one scatter; the log-probabilities of the score function have their own
backward (``1 - sum_{k <= rank(d)} pi_k(d)``).  Pair contractions (DIPS, IGI, pairwise accuracy, ...) with a pair
weight given by relevance levels sweep down every sampled ranking (``O(S B N H L)`` for ``H`` columns of
``right`` and ``L`` relevance levels) and their PL-Rank backward decomposes the pair rewards by level the same way;
only a pair weight without that structure falls back to ``[B, N, N]`` blocks.

Masks: padded items are never sampled into real positions (they come last, in index order) and receive exactly
zero gradient.
"""
from __future__ import annotations

import itertools
from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import _linalg
from .._validation import check_choice, check_int as _check_int, check_number
from ..browsing import BrowsingModel, Uniform
from .base import PAIR_BLOCK_ELEMENTS, OrderedBatch, Ordering, _promote, row_blocks, work_scores
from .soft import MIN_SCALE, REL_MIN_SCALE, SoftRank, _Tempered  # one temperature rule (soft.py, Temperature)
from .mixture import MixtureOrderedBatch
from .stochastic import SampledOrderedBatch, _levels

__all__ = ["PlackettLuce", "sample_rankings", "log_probability", "all_rankings", "pair_probability",
           "top1_probability"]

_ESTIMATORS = ("pl_rank", "score_function", "relaxed")
#: default ``temperature`` of :class:`PlackettLuce` (relative to each list's std, ``scale="std"``; see there)
DEFAULT_TEMPERATURE = 0.1


def _centred(logits: Tensor, mask: Tensor) -> Tensor:
    """Logits minus each list's largest real logit (detached: PL probabilities are invariant to the shift, and
    every ``m_d - log Z_k`` is then computed from numbers of the order of the logit span, not of their offset).

    Padded items get a finite stand-in below every real logit of their list by more than the list's span and
    ``1e4`` (``exp`` of it relative to any real logit underflows to exactly 0; a fixed constant such as ``-1e30``
    is not below real logits of magnitude ``1e200``), and exactly zero gradient whatever they held."""
    m = _promote(logits)
    dt = m.dtype
    with torch.no_grad():
        top = torch.where(mask, m, torch.full((), float("-inf"), dtype=dt, device=m.device)).amax(-1, keepdim=True)
        low = torch.where(mask, m, torch.full((), float("inf"), dtype=dt, device=m.device)).amin(-1, keepdim=True)
        any_real = mask.any(-1, keepdim=True)
        top = torch.where(any_real, top, torch.zeros_like(top))
        low = torch.where(any_real, low, torch.zeros_like(low))
        pad = (2 * (low - top) - 1e4).clamp(min=torch.finfo(dt).min)
    return torch.where(mask, m - top, pad)


def _tempered(s: Tensor, mask: Tensor, tau: Tensor) -> Tensor:
    """The logits ``(s - top_b) / tau_b`` of each list (``top_b`` its largest real score and ``tau_b [B, 1]`` its
    temperature, both detached; PL is shift-invariant), without overflow for any finite scores: the halves of
    ``s`` and ``top`` are subtracted (no overflow, and exact) and divided by ``tau / 2``, the result kept within
    ``+-max / 4`` of the dtype (zero gradient beyond).  With ``scale="std"`` the logits of a list span at most
    ``2 sqrt(n) / temperature``, whatever its scores' magnitude (a single score of ``-5e37`` divided by the
    temperature of a tied list, ``0.025``, overflowed to ``-inf`` and gave a NaN gradient)."""
    with torch.no_grad():
        neg = torch.full((), float("-inf"), dtype=s.dtype, device=s.device)
        top = torch.where(mask, s, neg).amax(-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    big = torch.finfo(s.dtype).max / 4
    return ((s * 0.5 - top * 0.5) / (tau * 0.5)).clamp(-big, big)


def _check_mask(logits, mask, name: str = "logits") -> None:
    if not isinstance(logits, Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"`{name}` must be a floating tensor [B, N]; got {getattr(logits, 'shape', logits)!r}")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != logits.shape:
        raise ValueError(f"`mask` must be a bool tensor with the shape of `{name}` {tuple(logits.shape)}")


def sample_rankings(logits: Tensor, mask: Tensor, samples: int, generator: Optional[torch.Generator] = None,
                    top_k: Optional[int] = None) -> Tensor:
    """Draw ``samples`` PL rankings per list with the Gumbel-max trick: ``[S, B, N]`` item indices by position.

    The ranking is ``argsort(logits + Gumbel noise)`` (descending), an exact PL sample.  Padded items come after
    the real ones, in index order.  ``top_k=K`` returns only the first ``K`` positions ``[S, B, K]`` (an exact
    sample of the PL top-K prefix, by ``torch.topk``: cheaper than a full sort for ``K << N``).  Runs on the
    logits' device; pass a ``generator`` on that device for reproducibility.

    Example::

        >>> sample_rankings(torch.tensor([[5., 0., -5.]]), torch.ones(1, 3, dtype=torch.bool), 2,
        ...                 torch.Generator().manual_seed(0)).shape
        torch.Size([2, 1, 3])
    """
    _check_mask(logits, mask)
    B, N = logits.shape
    samples = _check_int(samples, "samples", low=1)
    if top_k is not None:
        top_k = _check_int(top_k, "top_k", low=1, high=N)
    return _sample(_centred(logits.detach(), mask), mask, samples, generator, top_k)


def _sample(m: Tensor, mask: Tensor, samples: int, generator: Optional[torch.Generator],
            top_k: Optional[int] = None) -> Tensor:
    """:func:`sample_rankings` for centred, detached logits ``m`` (no checks).

    The keys ``m + Gumbel`` (``-inf`` for padded items) are sorted descending; float32 keys are sorted as int32
    (:func:`_descending_int32`, the same order, a faster sort).  The sort need not be stable: real keys are
    continuous (ties have probability 0) and the padded items come last in either case."""
    B, N = m.shape
    inf = torch.full((), float("-inf"), dtype=m.dtype, device=m.device)
    key = _gumbel((samples, B, N), generator, m).add_(torch.where(mask, m, inf))
    if key.dtype == torch.float32:
        key = _descending_int32(key, mask)
        if top_k is not None:
            return torch.topk(key, top_k, dim=-1, largest=False, sorted=True).indices
        return torch.sort(key, dim=-1).indices
    if top_k is not None:
        return torch.topk(key, top_k, dim=-1, largest=True, sorted=True).indices
    return torch.sort(key, dim=-1, descending=True, stable=True).indices


def _descending_int32(x: Tensor, mask: Tensor) -> Tensor:
    """int32 keys whose ascending order is the descending order of the float32 ``x [S, B, N]`` (overwritten),
    with the padded items (``mask`` False, ``x = -inf``) last in index order.

    The bits of a float, read as a signed integer, increase with it for ``x >= 0`` and decrease for ``x < 0``;
    flipping the magnitude bits of the negative ones makes the map increasing (ties stay ties), and ``-1 - i``
    reverses it.  ``-inf`` maps to ``0x7F800000``, above every finite key; padded items get ``0x7F800001 + index``
    instead (``idx - i``), which no real key reaches."""
    i = x.view(torch.int32)
    i.bitwise_xor_((i >> 31).bitwise_and_(0x7FFFFFFF))
    N = mask.shape[-1]
    c = torch.where(mask, torch.full((), -1, dtype=torch.int32, device=mask.device),
                    torch.arange(N, dtype=torch.int32, device=mask.device))
    return torch.sub(c, i, out=i)


def _gumbel(shape, generator: Optional[torch.Generator], like: Tensor) -> Tensor:
    """Standard Gumbel noise ``-log(-log(U))`` in ``like``'s dtype (float32 or float64) and device (in place on
    one buffer)."""
    u = torch.rand(shape, generator=generator, device=like.device, dtype=like.dtype)
    tiny = torch.finfo(like.dtype).tiny
    return u.clamp_(min=tiny, max=1 - torch.finfo(like.dtype).eps).log_().neg_().log_().neg_()


def log_probability(logits: Tensor, rankings: Tensor, mask: Tensor) -> Tensor:
    """``log pi(y)`` of rankings ``[S, B, N]`` under PL with ``logits [B, N]`` (real positions only): ``[S, B]``.

    The rankings hold the real items first (as :func:`sample_rankings` returns them).  Logits shifted by each
    list's largest one; the normalisers ``Z_k`` as reversed cumulative sums of ``e^{m}`` when the list's logits
    span less than 1000 (float64 beyond a span of 80), in log space (``logcumsumexp``) beyond and on non-CPU devices;
    in float32 for half-precision logits: finite, with finite gradients, for any finite logits (e.g. spanning
    ``1e4``).  The gradient ``d log pi(y) / d m_d = 1 - sum_{k <= rank(d)} pi_k(d)`` is one prefix sum (not
    differentiable twice)."""
    _check_mask(logits, mask)
    if not isinstance(rankings, Tensor) or rankings.dim() != 3 or rankings.shape[1:] != logits.shape:
        raise ValueError(f"`rankings` must be [S, B, N] item indices with [B, N] = {tuple(logits.shape)}; got "
                         f"{getattr(rankings, 'shape', rankings)!r}")
    if rankings.is_floating_point() or rankings.dtype == torch.bool:
        raise ValueError(f"`rankings` must be an integer tensor; got {rankings.dtype}")
    return _LogProb.apply(_centred(logits, mask), rankings.long(), mask)


def all_rankings(N: int, device=None) -> Tensor:
    """All ``N!`` permutations of ``0..N-1``: ``[N!, N]`` (``N <= 8``)."""
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise ValueError(f"`N` must be an int >= 1; got {N!r}")
    if N > 8:
        raise ValueError(f"`N`: exact enumeration is limited to N <= 8 items (N! rankings); got N = {N}")
    return torch.tensor(list(itertools.permutations(range(N))), dtype=torch.long, device=device)


def pair_probability(scores: Tensor, temperature: float = 1.0) -> Tensor:
    """Closed form ``P(j above i) = e^{m_j} / (e^{m_i} + e^{m_j}) = sigmoid(m_j - m_i)``: ``[..., N, N]`` (``[i, j]``)."""
    m = _promote(scores) / check_number(temperature, "temperature", low=0, low_open=True)
    return torch.sigmoid(m.unsqueeze(-2) - m.unsqueeze(-1))


def top1_probability(scores: Tensor, temperature: float = 1.0, mask: Optional[Tensor] = None) -> Tensor:
    """``P(item i ranked first) = softmax(m)_i`` over real items: ``[..., N]``."""
    m = _promote(scores) / check_number(temperature, "temperature", low=0, low_open=True)
    if mask is not None:
        m = _centred(m, mask)
    p = torch.softmax(m, -1)
    return p if mask is None else p * mask.to(p.dtype)  # a fully padded list: all 0


# --------------------------------------------------------------------------------------------- step sums
#: logit span (per list) up to which the sums over steps are taken as plain cumulative sums of ``1 / Z_k``
#: in float32 (logits centred on the middle of their range: ``e^{40}`` leaves room for rewards of magnitude 1e20
#: within float32's range) ...
_SPAN_FLOAT32 = 80.0
#: ... and in float64; lists with a wider span take the log-space path (``logcumsumexp``), exact for any span
_SPAN_FLOAT64 = 1000.0
#: the path of :class:`_Steps` when none is asked for: None (by device and span, see there) or a mode name (tests)
_DEFAULT_MODE: Optional[str] = None


class _Steps:
    """The step quantities of PL rankings that PL-Rank and the score function need, for ``rankings [S, B, N]`` of
    lists with centred logits ``m [B, N]`` (detached; real items first in every ranking):

    * :meth:`prefix` ``(x)``: ``sum_{k <= j} x_k pi_k(y_j)`` at every position ``j`` (``pi_k(d) = e^{m_d} / Z_k``,
      ``Z_k`` the mass of the items not placed before step ``k``), for per-step ``x [S, B, N]`` or
      ``[S, B, N, C]`` that is 0 at padded steps ``k >= n_b`` (there the result is 0);
    * :meth:`log_prob`: ``log pi(y)`` ``[S, B]``.

    On CPU the sums are plain cumulative sums of ``x_k / Z_k`` times ``e^{m_d}`` (the form of PL-Rank's reference
    code) with each list's logits shifted to the middle of their range (so ``e^{m}`` and ``1 / Z_k`` stay within
    ``e^{+-span/2}``), in float32 when every list's logits span at most ``_SPAN_FLOAT32``, else in float64; lists
    spanning more than ``_SPAN_FLOAT64`` (``1 / Z_k`` would overflow float64) are recomputed in log space, exact for any
    span: ``sum_k x_k e^{m_d - log Z_k}`` by ``logcumsumexp`` of ``log |x_k| - log Z_k``, positive and negative
    parts apart.  On other devices everything is taken in log space (no host synchronisation to pick a path).
    Padded steps need no mask: there ``e^{m} = 0`` (the padded logits are far below the real ones) and ``Z`` is
    set to 1, so they never reach a real position (the sums run forward, padded steps come last).
    """

    def __init__(self, m: Tensor, rankings: Tensor, mask: Tensor, *, _mode: Optional[str] = None):
        S, B, N = rankings.shape
        self.rankings = rankings
        self.out_dtype = m.dtype
        self.mask = mask
        n = mask.sum(-1)
        self.real_step = torch.arange(N, device=m.device)[None, :] < n[:, None]  # [B, N] (k < n_b)
        self.wide = None
        mode = _mode if _mode is not None else _DEFAULT_MODE
        span = None
        if mode is None:
            if m.device.type != "cpu":
                mode = "log"
            else:
                span = torch.where(mask, -m, torch.zeros((), dtype=m.dtype, device=m.device)).amax(-1)  # [B]
                top = float(span.max()) if span.numel() else 0.0
                if top <= _SPAN_FLOAT32 and m.dtype != torch.float64:
                    mode = "plain32"
                else:
                    mode = "plain64"
                    if not top <= _SPAN_FLOAT64:  # also NaN
                        self.wide = torch.nonzero(~(span <= _SPAN_FLOAT64)).squeeze(1)
                        self.sub = _Steps(m[self.wide], rankings[:, self.wide], mask[self.wide], _mode="log")
        self.mode = mode
        if mode == "log":
            ms = m.unsqueeze(0).expand(S, B, N).gather(-1, rankings)
            self.ms = ms
            self.logz = torch.flip(torch.logcumsumexp(torch.flip(ms, [-1]), -1), [-1])  # [S, B, N] log Z_k
        else:
            self.wd = torch.float32 if mode == "plain32" else torch.float64
            if span is None:
                span = torch.where(mask, -m, torch.zeros((), dtype=m.dtype, device=m.device)).amax(-1)
            m = m + span[:, None] / 2  # the middle of each list's range at 0 (PL is shift-invariant)
            ex = torch.exp(m.to(self.wd)).unsqueeze(0).expand(S, B, N).gather(-1, rankings)  # e^{m} at each step
            Z = torch.flip(torch.flip(ex, [-1]).cumsum_(-1), [-1])
            Z.add_((~self.real_step).to(self.wd))  # padded steps: Z = 0 -> 1 (finite 1 / Z, log Z = 0)
            self.ex, self.Z = ex, Z
            self.invz = Z.reciprocal()
        self.m = m

    def prefix(self, x: Tensor) -> Tensor:
        """``sum_{k <= j} x_k pi_k(y_j)`` for every position ``j``, shape of ``x`` (``[S, B, N, ...]``), in the
        working dtype (float32 / float64)."""
        extra = x.dim() - 3
        if self.mode == "log":
            out = torch.zeros(x.shape, dtype=self.ms.dtype, device=x.device)
            ms = self.ms.reshape(*self.ms.shape, *([1] * extra))
            logz = self.logz.reshape(*self.logz.shape, *([1] * extra))
            real = self.real_step.reshape(*self.real_step.shape, *([1] * extra))
            for sign in (1.0, -1.0):
                v = (sign * x).clamp(min=0).to(ms.dtype)
                keep = real & (v > 0)
                lv = torch.where(keep, torch.log(torch.where(keep, v, torch.ones_like(v))) - logz,
                                 torch.full_like(v, float("-inf")))
                out = out + sign * torch.exp(ms + torch.logcumsumexp(lv, 2))
            return out
        invz = self.invz.reshape(*self.invz.shape, *([1] * extra))
        ex = self.ex.reshape(*self.ex.shape, *([1] * extra))
        out = (x.to(self.wd) * invz).cumsum_(2).mul_(ex)
        if self.wide is not None:
            out[:, self.wide] = self.sub.prefix(x[:, self.wide]).to(out.dtype)
        return out

    def prefix_dot(self, x: Tensor, phi: Tensor) -> Tensor:
        """``<phi_j, prefix(x)_j>`` for ``x, phi [S, B, N, C]``: ``[S, B, N]`` (on the plain paths ``e^{m}`` is applied
        after the dot product)."""
        if self.mode == "log":
            return torch.linalg.vecdot(phi.to(self.ms.dtype), self.prefix(x))
        c = (x.to(self.wd) * self.invz[..., None]).cumsum_(2)
        out = torch.linalg.vecdot(phi.to(self.wd), c).mul_(self.ex)
        if self.wide is not None:
            out[:, self.wide] = self.sub.prefix_dot(x[:, self.wide], phi[:, self.wide]).to(out.dtype)
        return out

    def log_prob(self) -> Tensor:
        """``log pi(y)`` of every ranking, ``[S, B]``: ``sum_k (m_{y_k} - log Z_k)`` over the real steps, i.e. the
        sum of the list's real logits minus ``sum_k log Z_k`` (every ranking holds each real item once)."""
        if self.mode == "log":
            lp = torch.where(self.real_step, self.ms - self.logz, torch.zeros_like(self.ms)).sum(-1)
        else:
            msum = torch.where(self.mask, self.m, torch.zeros((), dtype=self.m.dtype, device=self.m.device)).sum(-1)
            lp = msum.to(self.wd) - torch.log(self.Z).sum(-1)  # padded steps: log 1 = 0
            if self.wide is not None:
                lp[:, self.wide] = self.sub.log_prob().to(lp.dtype)
        return lp.to(self.out_dtype)

    def exposure_grad(self, fk: Tensor, ws: Tensor) -> Tensor:
        """PL-Rank-2 per position for item rewards: ``g(y_j) = G_{j+1} + w_{y_j} sum_{k<=j} F(k) pi_k(y_j)
        - sum_{k<=j} G_k pi_k(y_j)`` with ``G_k = sum_{t >= k} F(t) w_{y_t}``; ``fk`` ``[B, N]`` or ``[S, B, N]``
        and ``ws [S, B, N]`` (0 at padded steps), result ``[S, B, N]`` in position order."""
        if self.mode == "log":
            fk = fk.expand(ws.shape)
            r = fk * ws
            G = torch.flip(torch.flip(r, [-1]).cumsum_(-1), [-1])
            ac = self.prefix(torch.stack([fk, G], -1))
            return (G - r) + (ws * ac[..., 0] - ac[..., 1]).to(G.dtype)
        fk, ws = fk.to(self.wd), ws.to(self.wd)
        r = ws * fk
        G = torch.flip(torch.flip(r, [-1]).cumsum_(-1), [-1])  # reward to go (0 at padded steps)
        cw = (fk * self.invz).cumsum_(-1)  # sum_{k <= j} F(k) / Z_k
        cr = (G * self.invz).cumsum_(-1)  # sum_{k <= j} G_k / Z_k
        out = cw.mul_(ws).sub_(cr).mul_(self.ex).add_(G).sub_(r)  # G_{j+1} = G_j - r_j
        if self.wide is not None:
            fw = fk[self.wide] if fk.dim() == 2 else fk[:, self.wide]
            out[:, self.wide] = self.sub.exposure_grad(fw, ws[:, self.wide]).to(out.dtype)
        return out


def _to_items(x: Tensor, rankings: Tensor) -> Tensor:
    """Per-position ``x [S, B, N]`` moved to item order and summed over the samples: ``[B, N]``."""
    return torch.zeros_like(x).scatter_(-1, rankings, x).sum(0)


class _LogProb(torch.autograd.Function):
    """``log pi(y)`` ``[S, B]`` of rankings under centred logits ``m``; backward
    ``d log pi(y) / d m_d = 1 - sum_{k <= rank(d)} pi_k(d)`` (real items), one prefix sum."""

    @staticmethod
    def forward(ctx, m, rankings, mask):
        steps = _Steps(m.detach(), rankings, mask)
        ctx.steps = steps
        ctx.save_for_backward(mask)
        return steps.log_prob()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        steps = ctx.steps
        real = steps.real_step.to(steps.out_dtype).expand(steps.rankings.shape)
        d = steps.prefix(real).neg_().add_(real)  # [S, B, N] in position order
        g = _to_items(d.mul_(grad.to(d.dtype)[..., None]), steps.rankings)
        return g.to(steps.out_dtype) * mask.to(steps.out_dtype), None, None


# --------------------------------------------------------------------------------------------- PL-Rank-2
def _pl_rank_terms(logits: Tensor, rankings: Tensor, mask: Tensor):
    """Per sample: ``pi_k(d) / e^{m_d} = 1 / Z_k`` for steps k, rank of every item, real-step mask."""
    S, B, N = rankings.shape
    m = _centred(logits.detach(), mask)
    ms = m.unsqueeze(0).expand(S, B, N).gather(-1, rankings)
    logz = torch.flip(torch.logcumsumexp(torch.flip(ms, [-1]), -1), [-1])  # [S, B, N] log Z_k
    real_step = (torch.arange(N, device=mask.device)[None, None, :] < mask.sum(-1)[None, :, None]).expand(S, B, N)
    ranks = torch.empty_like(rankings).scatter_(-1, rankings, torch.arange(N, device=mask.device).expand(S, B, N))
    return m, logz, real_step, ranks


def _pl_rank_exposure_grad(logits, rankings, mask, fk, w, baseline: bool = True):
    """PL-Rank-2 gradient of ``E[sum_d w_d F(pos_d)]`` w.r.t. the (centred, see :func:`_centred`) logits, averaged
    over samples: ``[B, N]``.

    ``fk`` is the exposure of each position, ``[B, N]`` (position-based browsing) or ``[S, B, N]`` (per sample),
    0 at positions ``k >= n_b``; ``w [B, N]`` the item rewards.  ``baseline``: subtract each list's mean item
    reward first.  For a position-based browsing model the total ``sum_k F(k)`` is the same for every ranking, so
    the shift leaves the expected gradient unchanged; it removes the reward component common to all items, which
    lowers the variance and, when ``w`` is itself an estimate (``dL/dE`` at the Monte Carlo exposure, e.g. through
    a normalisation by the total exposure), removes the correlation between ``w`` and the samples that would
    otherwise bias the chain rule.

    Computed in position order (the item placed at step ``j`` is ``y_j``):
    ``g(y_j) = G_{j+1} + w_{y_j} sum_{k<=j} F(k) pi_k(y_j) - sum_{k<=j} G_k pi_k(y_j)`` with the reward to go
    ``G_k = sum_{t >= k} F(t) w_{y_t}``, then moved to item order by one scatter (:class:`_Steps` for the sums).
    """
    S, B, N = rankings.shape
    mf = mask.to(w.dtype)
    if baseline:
        w = (w - (w * mf).sum(-1, keepdim=True) / mf.sum(-1, keepdim=True).clamp(min=1)) * mf
    else:
        w = w * mf
    steps = _Steps(logits.detach(), rankings, mask)  # the ordering's logits are centred already
    ws = w.unsqueeze(0).expand(S, B, N).gather(-1, rankings)  # reward weight of the item at step k
    g = steps.exposure_grad(fk.to(w.dtype), ws)
    return _to_items(g, rankings).to(w.dtype) * (mf / S)


class _PLRankExposure(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, value, rankings, mask, fk, baseline):
        ctx.save_for_backward(logits, rankings, mask, fk)
        ctx.baseline = baseline
        return value.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, rankings, mask, fk = ctx.saved_tensors
        g = _pl_rank_exposure_grad(logits, rankings, mask, fk, grad_out, ctx.baseline)
        return g, None, None, None, None, None


def _pl_rank_pair_grad(logits, rankings, mask, fk, C):
    """PL-Rank-2 gradient of ``E[sum_{i,j} C[i,j] F(pos_j) 1(pos_j < pos_i)]`` w.r.t. the logits: ``[B, N]``, for a
    dense ``C [B, N, N]`` (pair weights without level structure; :func:`_pl_rank_level_grad` otherwise).

    Placing ``d`` at step ``k`` earns ``r_k(d) = F(k) sum_{i not placed before k, i != d} C[i, d]`` (every item
    still unplaced will end up below ``d``), a reward that only depends on ``y_{1:k}``, which PL-Rank-2 needs.
    ``fk`` is ``[B, N]`` or ``[S, B, N]``.
    """
    S, B, N = rankings.shape
    m, logz, real_step, ranks = _pl_rank_terms(logits, rankings, mask)
    fk = fk.expand(S, B, N)
    C = C * (1 - torch.eye(N, dtype=C.dtype, device=C.device))
    col = C.sum(1)  # [B, N]: sum_i C[i, d]
    out = torch.zeros(B, N, dtype=C.dtype, device=C.device)
    for s in range(S):  # one [B, N, N] at a time
        y, lz, rs, rk, f = rankings[s], logz[s], real_step[s].to(C.dtype), ranks[s], fk[s]
        Cy = C.gather(1, y.unsqueeze(-1).expand(B, N, N))  # rows in rank order: Cy[k, d] = C[y_k, d]
        A = torch.cumsum(Cy, 1) - Cy  # A[k, d] = sum_{x < k} C[y_x, d]
        rew = f.unsqueeze(-1) * (col.unsqueeze(1) - A)  # r_k(d) for every step k and item d: [B, N(k), N(d)]
        r_real = rew.gather(2, y.unsqueeze(-1)).squeeze(-1) * rs  # realised r_k(y_k)
        G = torch.flip(torch.cumsum(torch.flip(r_real, [-1]), -1), [-1])
        G_next = torch.cat([G[..., 1:], torch.zeros_like(G[..., :1])], -1).gather(-1, rk)
        # pi_k(d) = exp(m_d - log Z_k) for real steps k <= rank(d) (<= 1 there: no overflow for any logit span)
        upto = (torch.arange(N, device=C.device)[None, :, None] <= rk[:, None, :]) & (rs[:, :, None] > 0)
        pi = torch.where(upto, torch.exp((m[:, None, :] - lz[:, :, None]).clamp(max=0)), torch.zeros((), dtype=C.dtype,
                                                                                                    device=C.device))
        term = ((rew - G.unsqueeze(-1)) * pi).sum(1)  # [B, N(d)]
        out = out + (G_next + term) * mask
    return out / S


def _pl_rank_level_grad(logits, rankings, mask, fk, grad_out, right, lvl, W, baseline: bool,
                        block_elements: Optional[int] = None):
    """PL-Rank-2 gradient of ``sum_{b,i,h} grad_out[b,i,h] E[out[b,i,h]]`` for the contraction
    ``out[i, h] = sum_{j != i} W[lvl_i, lvl_j] F(pos_j) 1(pos_j < pos_i) right[j, h]`` (real items), without
    forming pairs: ``O(S B N H L)`` instead of ``O(S B N^2)``.

    The pair reward ``C[i, d] = W[lvl_i, lvl_d] sum_h grad_out[i, h] right[d, h]`` (minus its mean over the real
    pairs with ``baseline``) gives placing ``d`` at step ``k`` the reward
    ``r_k(d) = F(k) (<phi_d, Q_k> - C[d, d] - cbar (n - k - 1))`` where ``phi_d[h, l] = right[d, h] W[l, lvl_d]``
    and ``Q_k[h, l] = sum of grad_out[i, h] over the real items i of level l not placed before step k`` (a suffix
    sum down the ranking): the same reward as :func:`_pl_rank_pair_grad`, and the same PL-Rank-2 estimate
    ``g(y_j) = G_{j+1} + sum_{k <= j} pi_k(y_j) (r_k(y_j) - G_k)``, every sum over ``k`` a prefix sum
    (:class:`_Steps`).  A few samples at a time (memory ``~ block * 16 * PAIR_BLOCK_ELEMENTS``).
    """
    S, B, N = rankings.shape
    H = right.shape[-1]
    L = W.shape[0]
    dt = grad_out.dtype
    mf = mask.to(dt)
    oh = torch.nn.functional.one_hot(lvl, L).to(dt) * mf[..., None]  # [B, N, L]
    psi = (grad_out.unsqueeze(-1) * oh.unsqueeze(-2)).reshape(B, N, H * L)
    phi = (right.to(dt).unsqueeze(-1) * W.t().to(dt)[lvl].unsqueeze(-2) * mf[..., None, None]).reshape(B, N, H * L)
    Wd = W.to(dt)[lvl, lvl]  # [B, N] W[lvl_d, lvl_d]
    selfc = Wd * (grad_out * right.to(dt)).sum(-1) * mf
    n = mask.sum(-1)
    if baseline:
        Ga = psi.reshape(B, N, H, L).sum(1)  # [B, H, L]
        Ra = (right.to(dt).unsqueeze(-1) * oh.unsqueeze(-2)).sum(1)  # [B, H, L]
        total = torch.einsum("bhl,lm,bhm->b", Ga, W.to(dt), Ra) - selfc.sum(-1)
        cbar = total / (n * (n - 1)).clamp(min=1).to(dt)
    else:
        cbar = torch.zeros(B, dtype=dt, device=mask.device)
    k = torch.arange(N, device=mask.device)
    real_step = k[None, :] < n[:, None]
    u = torch.where(real_step, (n[:, None] - 1 - k[None, :]).to(dt), torch.zeros((), dtype=dt, device=mask.device))
    m = logits.detach()  # the ordering's logits are centred already
    budget = 16 * (block_elements if block_elements is not None else PAIR_BLOCK_ELEMENTS)
    step = max(1, budget // max(1, B * N * H * L))
    psi, phi = psi.reshape(B * N, H * L), phi.reshape(B * N, H * L)
    out = torch.zeros(B, N, dtype=dt, device=mask.device)
    for s0 in range(0, S, step):
        s1 = min(S, s0 + step)
        y = rankings[s0:s1]
        s = s1 - s0
        f = (fk if fk.dim() == 2 else fk[s0:s1]).to(dt).expand(s, B, N)
        rows = (torch.arange(B, device=y.device)[:, None] * N + y).reshape(-1)  # rows of [B * N, .] by position
        Psi = psi.index_select(0, rows).view(s, B, N, H * L)
        Phi = phi.index_select(0, rows).view(s, B, N, H * L)
        # Q_k = sum over the items not placed before step k = total - (inclusive prefix - own)
        Q = torch.cumsum(Psi, 2)
        Q = Q.neg_().add_(Q[:, :, -1:].neg()).add_(Psi)
        selfs = selfc.unsqueeze(0).expand(s, B, N).gather(-1, y)
        V = torch.linalg.vecdot(Phi, Q).sub_(selfs).sub_(cbar[:, None] * u)  # [s, B, N]: r_k(y_k) / F(k)
        G = torch.flip(torch.cumsum(torch.flip(f * V, [-1]), -1), [-1])
        steps = _Steps(m, y, mask)
        dotA = steps.prefix_dot(Q.mul_(f.unsqueeze(-1)), Phi)  # <phi_{y_j}, sum_{k<=j} pi_k(y_j) F(k) Q_k>
        sc = steps.prefix(torch.stack([f, f * u, G], -1))
        G_next = torch.cat([G[..., 1:], torch.zeros_like(G[..., :1])], -1)
        g = G_next + (dotA - selfs * sc[..., 0] - cbar[:, None] * sc[..., 1] - sc[..., 2]).to(dt)
        out = out + _to_items(g, y)
    return out * (mf / S)


class _PLRankPairContract(torch.autograd.Function):
    """``out[b,i,h] = sum_j w[i,j] X[i,j] right[j,h]`` with X a PL expectation; PL-Rank-2 backward for logits.

    ``pair`` is ``("level", lvl [B, N], W [L, L])`` for level-structured pair weights (and none: one level) or
    ``("dense", w [B, N, N])``."""

    @staticmethod
    def forward(ctx, logits, value, rankings, mask, fk, right, pair, baseline):
        kind, *tensors = pair
        ctx.kind = kind
        ctx.save_for_backward(logits, rankings, mask, fk, right, *tensors)
        ctx.baseline = baseline
        return value.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, rankings, mask, fk, right, *tensors = ctx.saved_tensors
        if ctx.kind == "level":
            lvl, W = tensors
            g = _pl_rank_level_grad(logits, rankings, mask, fk, grad_out, right, lvl, W, ctx.baseline)
            return g, None, None, None, None, None, None, None
        (weight_full,) = tensors
        C = _linalg.bmm(grad_out, right.transpose(1, 2)) * weight_full  # C[i, j] = sum_h g[i,h] right[j,h] w[i,j]
        N = C.shape[-1]
        pairs = ((mask.unsqueeze(-1) & mask.unsqueeze(1)) & ~torch.eye(N, dtype=torch.bool, device=C.device)).to(C.dtype)
        C = C * pairs
        if ctx.baseline:
            # sum_{i != j} F(pos_j) 1(pos_j < pos_i) = sum_k F(k) (n - 1 - k) is the same for every ranking under a
            # position-based model: shifting all pair rewards by their mean keeps the gradient unbiased (see
            # _pl_rank_exposure_grad) and removes their common component
            C = (C - (C * pairs).sum((-1, -2), keepdim=True) / pairs.sum((-1, -2), keepdim=True).clamp(min=1)) * pairs
        return _pl_rank_pair_grad(logits, rankings, mask, fk, C), None, None, None, None, None, None, None


def _score_function_weights(lp: Tensor) -> Tensor:
    """Sample weights ``[S, B]`` whose value is ``1/S`` and whose gradient is the score-function estimate with a
    leave-one-out baseline: ``w_s = 1/S + (S d_s - sum d) / (S (S - 1))``, ``d_s = log pi_s - stopgrad(log pi_s)``
    (plain REINFORCE ``1 + d`` when ``S = 1``)."""
    S = lp.shape[0]
    d = lp - lp.detach()
    if S == 1:
        return 1.0 + d
    return 1.0 / S + (S * d - d.sum(0, keepdim=True)) / (S * (S - 1))


class PlackettLuceOrderedBatch(SampledOrderedBatch):
    """Sample average over PL rankings ``[S, B, N]`` (real items first), with the chosen gradient estimator.

    ``weights`` are the plain ``1/S`` (``"pl_rank"``, or no gradient) or the score-function weights.  Under
    ``"pl_rank"`` the score-function weights that expected positions and the position matrix use are computed on
    first use (:attr:`sf_weights`)."""

    def __init__(self, rankings, weights, scores, mask, *, logits, estimator="score_function", sf_weights=None,
                 uniform: bool = False):
        super().__init__(rankings, weights, scores, mask, canonical=True)
        self._sf = sf_weights
        self.logits = logits
        self.estimator = estimator
        self.uniform = uniform  # weights are the constant 1/S

    @property
    def sf_weights(self) -> Optional[Tensor]:
        """Score-function weights for the quantities PL-Rank does not cover (``"pl_rank"`` with a gradient only)."""
        if self._sf is not None or self.estimator != "pl_rank" or not self.logits.requires_grad:
            return self._sf
        if not torch.is_grad_enabled():
            return None
        self._sf = _score_function_weights(_LogProb.apply(self.logits, self.rankings, self.mask))
        return self._sf

    def _weigh(self, x: Tensor, weights: Optional[Tensor] = None) -> Tensor:
        if weights is None and self.uniform:
            return x.mean(0)
        return super()._weigh(x, weights)

    def _fk(self, browsing: BrowsingModel, relevance: Optional[Tensor]) -> Tensor:
        """Exposure of each position, ``[B, N]`` or ``[S, B, N]`` (see ``_position_exposure``)."""
        return self._position_exposure(browsing, relevance)

    def expected_positions(self) -> Tensor:
        sf = self.sf_weights
        return super().expected_positions() if sf is None else self._weigh(self.sample_positions.to(self.dtype), sf)

    def position_matrix(self) -> Tensor:
        # positions and prefixes are not per-position rewards: score-function gradient for them
        sf = self.sf_weights
        return self._position_matrix(self.weights if sf is None else sf)

    def _pl_rank(self) -> bool:
        return self.estimator == "pl_rank" and torch.is_grad_enabled() and self.logits.requires_grad

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        f = self._position_exposure(browsing, relevance)
        value = self._weigh(self._sample_exposure(f)) * self.mask.to(self.dtype)
        if not self._pl_rank():
            return value
        return _PLRankExposure.apply(self.logits, value.detach(), self.rankings, self.mask, f,
                                     not browsing.relevance_dependent)

    def contract(self, right: Tensor, *, which: str = "above", pair_weight=None, browsing=None, relevance=None,
                 block_elements=None) -> Tensor:
        lv = _levels(pair_weight, self.mask, right.dtype) if which in ("above", "joint", "one") else None
        value = super().contract(right, which=which, pair_weight=pair_weight, browsing=browsing,
                                 relevance=relevance, block_elements=block_elements, lv=lv)
        if which == "one" or not self._pl_rank():
            return value
        B, N = self.mask.shape
        F = browsing if which == "joint" else Uniform()
        if lv is not None:
            pair = ("level", lv[0], lv[1])
        elif pair_weight is None:
            pair = ("dense", torch.ones(B, N, N, dtype=right.dtype, device=right.device))
        else:
            pair = ("dense", torch.cat([pair_weight(a, b) for a, b in row_blocks(B, N)], 1).to(right.dtype).detach())
        return _PLRankPairContract.apply(self.logits, value.detach(), self.rankings, self.mask,
                                         self._fk(F, relevance), right.detach(), pair, not F.relevance_dependent)


class PlackettLuce(_Tempered):
    r"""A Plackett-Luce ranking policy (Luce 1959; Plackett 1975) with logits ``scores / tau_b`` (module docstring).

    .. math:: \pi(y \mid s) = \prod_{k=1}^{n_b} \frac{\exp(s_{y_k} / \tau_b)}{\sum_{j \ge k} \exp(s_{y_j} / \tau_b)},
              \qquad \tau_b = \texttt{temperature} \cdot \max(\mathrm{std}_b,\ \texttt{rel\_min\_scale}\cdot
              \overline{|s|}_b,\ \texttt{min\_scale})

    with ``scale="std"`` (default; ``tau_b`` detached), ``tau_b = temperature`` with ``scale="none"``.  Measures
    evaluated on it are expectations over its rankings, estimated from samples with PL-Rank-2 (Oosterhuis, SIGIR
    2021) or score-function gradients, or computed exactly by enumeration.

    Parameters
    ----------
    samples : rankings drawn per list (Monte Carlo estimators).
    estimator : ``"pl_rank"`` (default), ``"score_function"`` or ``"relaxed"``.
    temperature : PL temperature (> 0), default ``0.1``: relative to each list's score scale with ``scale="std"``,
        in score units with ``scale="none"``.  The default keeps 98-99 % of the hard ranking's ``NDCG@10`` on a trained
        ranker's lists while staying stochastic (module docstring, Temperature, for the measurements); smaller is
        closer to the hard ranking.
    relaxation : for ``"relaxed"``: the soft ordering applied to the Gumbel-perturbed logits
        (default ``SoftRank(temperature=0.1)``, whose temperature follows the same rule: relative to the perturbed
        logits' std, at least ``0.1 * min_scale``).
    exact : enumerate all ``N!`` rankings with their probabilities (``N <= 8``) instead of sampling.
    generator : a ``torch.Generator`` on the scores' device, for reproducible samples.
    scale : ``"std"`` (default) or ``"none"``: the temperature rule of :mod:`torchfair.orderings.soft` (module
        docstring, Temperature; :func:`~torchfair.orderings.soft.list_scale`).  ``scale="none", temperature=1.0``
        is the policy ``softmax(scores)`` (the former default; Fair-PG-Rank's policy).
    min_scale : floor of the per-list scale, in score units (default ``0.25``): a tied list gets
        ``tau = temperature * min_scale`` (a uniform policy, finite gradients).
    rel_min_scale : floor of the per-list scale relative to the mean absolute score (default 0, off).

    Example::

        >>> from torchfair.metrics import dips
        >>> s = torch.randn(4, 6, requires_grad=True)
        >>> M = dips(s, torch.rand(4, 6), torch.randint(0, 2, (4, 6)), num_groups=2,
        ...          ordering=PlackettLuce(samples=64))
        >>> M.shape
        torch.Size([4, 2, 2])
        >>> x, m = torch.tensor([[0.5, 0.0, -0.5]]), torch.ones(1, 3, dtype=torch.bool)   # std 0.41
        >>> PlackettLuce(exact=True, temperature=0.5)(x, m).expected_positions()   # tau = 0.5 * 0.41
        tensor([[0.0869, 1.0000, 1.9131]])
        >>> PlackettLuce(exact=True, temperature=0.5)(10 * x, m).expected_positions()   # the same policy
        tensor([[0.0869, 1.0000, 1.9131]])
        >>> PlackettLuce(exact=True, temperature=1.0, scale="none")(x, m).expected_positions()   # softmax(x)
        tensor([[0.6465, 1.0000, 1.3535]])
    """

    differentiable = True

    def __init__(self, samples: int = 100, estimator: str = "pl_rank", temperature: float = DEFAULT_TEMPERATURE,
                 relaxation: Optional[Ordering] = None, exact: bool = False,
                 generator: Optional[torch.Generator] = None, *, scale: str = "std", min_scale: float = MIN_SCALE,
                 rel_min_scale: float = REL_MIN_SCALE):
        self.estimator = check_choice(estimator, "estimator", _ESTIMATORS)
        if not isinstance(exact, bool):
            raise ValueError(f"`exact` must be a bool; got {exact!r}")
        self.samples = _check_int(samples, "samples", low=1)
        if estimator == "score_function" and self.samples < 2 and not exact:
            raise ValueError(f"`samples` must be >= 2 for the score-function estimator (leave-one-out baseline); "
                             f"got {samples!r}")
        # temperature, scale, min_scale, rel_min_scale: validated and stored by the one rule of the soft orderings
        self._init_temperature(temperature, scale, min_scale, rel_min_scale)
        if relaxation is not None and not isinstance(relaxation, Ordering):
            raise ValueError(f"`relaxation` must be an Ordering (e.g. SoftRank(0.1)) or None; got {relaxation!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"`generator` must be a torch.Generator or None; got {generator!r}")
        self.relaxation = relaxation
        self.exact = exact
        self.generator = generator

    def __repr__(self) -> str:
        floors = "" if self.scale == "none" else (
            (f", min_scale={self.min_scale}" if self.min_scale != MIN_SCALE else "")
            + (f", rel_min_scale={self.rel_min_scale}" if self.rel_min_scale != REL_MIN_SCALE else ""))
        return (f"PlackettLuce(samples={self.samples}, estimator={self.estimator!r}, "
                f"temperature={self.temperature}, scale={self.scale!r}{floors}, exact={self.exact})")

    def __call__(self, scores: Tensor, mask: Tensor) -> OrderedBatch:
        s, mask = work_scores(scores, mask)  # float32 for half types; padding blanked: zero gradient
        B, N = s.shape
        logits = _centred(_tempered(s, mask, self._tau(s, mask)), mask)  # tau [B, 1]: the rule of soft.py
        if self.exact:
            return self._exact(logits, s, mask)
        S = self.samples
        if self.estimator == "relaxed":
            relax = self.relaxation
            if relax is None:
                relax = SoftRank(temperature=0.1)
            pert = (logits.unsqueeze(0) + _gumbel((S, B, N), self.generator, logits)).reshape(S * B, N)
            pert = torch.where(mask.repeat(S, 1), pert, torch.zeros((), dtype=pert.dtype, device=pert.device))
            inner = relax(pert, mask.repeat(S, 1))
            w = torch.full((S, B), 1.0 / S, dtype=s.dtype, device=s.device)
            return MixtureOrderedBatch(inner, w, s, mask)
        rankings = _sample(logits.detach(), mask, S, self.generator)  # [S, B, N]; logits are centred already
        uniform = torch.full((S, B), 1.0 / S, dtype=s.dtype, device=s.device)
        if self.estimator == "score_function" and logits.requires_grad:
            sf = _score_function_weights(_LogProb.apply(logits, rankings, mask))  # centred logits
            return PlackettLuceOrderedBatch(rankings, sf, s, mask, logits=logits, estimator=self.estimator)
        # PL-Rank (its score-function weights, for positions and prefixes, are made on first use), or no gradient
        return PlackettLuceOrderedBatch(rankings, uniform, s, mask, logits=logits, estimator=self.estimator,
                                        uniform=True)

    def _exact(self, logits: Tensor, scores: Tensor, mask: Tensor) -> OrderedBatch:
        B, N = logits.shape
        if N > 8:
            raise ValueError(f"`exact`: exact enumeration is limited to lists of N <= 8 items (N! rankings); "
                             f"`scores` has N = {N}: sample instead (exact=False)")
        perms = all_rankings(N, device=scores.device)  # [P, N]
        P = perms.shape[0]
        rk = perms.unsqueeze(1).expand(P, B, N)
        # a ranking is kept when its real items come first and its padded items follow in index order
        n = mask.sum(-1)
        real_at = mask.unsqueeze(0).expand(P, B, N).gather(-1, rk)  # [P, B, N]: is the item at position k real
        first_real = (real_at == (torch.arange(N, device=mask.device)[None, None, :] < n[None, :, None])).all(-1)
        pad_pos = torch.where(real_at, torch.full_like(rk, -1), rk)
        pads_sorted = (pad_pos[..., 1:] >= pad_pos[..., :-1]) | (pad_pos[..., 1:] < 0) | (pad_pos[..., :-1] < 0)
        keep = first_real & pads_sorted.all(-1)
        lp = log_probability(logits, rk, mask)
        # normalised per list in log space: the kept probabilities sum to 1 exactly, not only up to the rounding of
        # each log-probability (which, for logits of magnitude 1e4 in float32, is of order 1e-3 each)
        lp = torch.where(keep, lp, torch.full_like(lp, float("-inf")))
        w = torch.exp(lp - torch.logsumexp(lp, 0, keepdim=True))
        return SampledOrderedBatch(rk, w, scores, mask)
