r"""Plackett-Luce ranking policies: expected measures under sampled rankings, with gradient estimators.

A Plackett-Luce (PL) policy with logits ``m = scores / temperature`` draws a ranking by picking items one by one,
item ``d`` next with probability ``exp(m_d) / sum_{d' not yet placed} exp(m_d')``.  Under the policy every
quantity a measure asks for (exposure, pair probabilities, ...) is an expectation; :class:`PlackettLuce` estimates
it from ``samples`` rankings drawn with the Gumbel-max trick (``argsort(m + Gumbel noise)``) and offers three
gradient estimators:

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
  rewards: they get the score-function gradient.  Measured variance (``tests/test_plackett_luce.py``, N = 5):
  PL-Rank's is 0.35-0.7x the score function's for the DIPS gap, but 2-4x for exposure objectives such as
  misallocation, where the leave-one-out baseline of the score function wins: pick the estimator per objective.
* ``"relaxed"``: Gumbel-perturbed scores through a soft ordering (pathwise, biased, low variance).

``PlackettLuce(exact=True)`` enumerates all rankings (``N <= 8``) with their probabilities instead: exact
expectations, exact gradients by autograd.  It is the reference the tests compare the estimators against.
Closed forms: :func:`pair_probability` ``P(j above i) = e^{m_j} / (e^{m_i} + e^{m_j})`` and
:func:`top1_probability` (softmax).

Numerics: every path works in log space.  The logits of each list are shifted by their largest real value
(detached; PL is shift-invariant), probabilities are formed as ``exp(m_d - log Z_k)`` with ``log Z_k`` from
``logcumsumexp`` (never ``e^{m_d}`` and ``1 / Z_k`` apart, which overflow in float32 once a list's logits span more
than ~88), the PL-Rank sums over steps are taken with ``logcumsumexp`` as well, and the exact enumeration
normalises its probabilities per list with ``logsumexp``.  Half-precision scores are computed in float32.  Values
and gradients are finite for logits spanning ``1e4`` and more.

Masks: padded items are never sampled into real positions and receive exactly zero gradient.
Memory: the PL-Rank backward of pair quantities builds ``[B, N, N]`` reward matrices: fine for lists of a few
hundred items; use the score-function estimator beyond.
"""
from __future__ import annotations

import itertools
from typing import Optional

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_choice, check_int as _check_int, check_number
from ..browsing import BrowsingModel, Uniform
from .base import OrderedBatch, Ordering, _promote, row_blocks, work_scores
from .soft import SoftRank
from .mixture import MixtureOrderedBatch
from .stochastic import SampledOrderedBatch

__all__ = ["PlackettLuce", "sample_rankings", "log_probability", "all_rankings", "pair_probability",
           "top1_probability"]

_ESTIMATORS = ("pl_rank", "score_function", "relaxed")


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


def _check_mask(logits, mask, name: str = "logits") -> None:
    if not isinstance(logits, Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"`{name}` must be a floating tensor [B, N]; got {getattr(logits, 'shape', logits)!r}")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != logits.shape:
        raise ValueError(f"`mask` must be a bool tensor with the shape of `{name}` {tuple(logits.shape)}")


def sample_rankings(logits: Tensor, mask: Tensor, samples: int, generator: Optional[torch.Generator] = None,
                    top_k: Optional[int] = None) -> Tensor:
    """Draw ``samples`` PL rankings per list with the Gumbel-max trick: ``[S, B, N]`` item indices by position.

    The ranking is ``argsort(logits + Gumbel noise)`` (descending), an exact PL sample.  Padded items come after
    the real ones.  ``top_k=K`` returns only the first ``K`` positions ``[S, B, K]`` (an exact sample of the PL
    top-K prefix, by ``torch.topk``: cheaper than a full sort for ``K << N``).  Runs on the logits' device; pass a
    ``generator`` on that device for reproducibility.

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
    m = _centred(logits.detach(), mask)
    gumbel = _gumbel((samples, B, N), generator, m)
    key = torch.where(mask, m + gumbel, torch.full_like(gumbel, float("-inf")))
    if top_k is not None:
        return torch.topk(key, top_k, dim=-1, largest=True, sorted=True).indices
    return torch.sort(key, dim=-1, descending=True, stable=True).indices


def _gumbel(shape, generator: Optional[torch.Generator], like: Tensor) -> Tensor:
    """Standard Gumbel noise in ``like``'s dtype (float32 or float64) and device."""
    u = torch.rand(shape, generator=generator, device=like.device, dtype=like.dtype)
    tiny = torch.finfo(like.dtype).tiny
    return -torch.log(-torch.log(u.clamp(min=tiny, max=1 - torch.finfo(like.dtype).eps)))


def log_probability(logits: Tensor, rankings: Tensor, mask: Tensor) -> Tensor:
    """``log pi(y)`` of rankings ``[S, B, N]`` under PL with ``logits [B, N]`` (real positions only): ``[S, B]``.

    Computed in log space (``logcumsumexp`` of the logits shifted by each list's largest one), in float32 for
    half-precision logits: finite, with finite gradients, for any finite logits (e.g. spanning ``1e4``)."""
    _check_mask(logits, mask)
    if not isinstance(rankings, Tensor) or rankings.dim() != 3 or rankings.shape[1:] != logits.shape:
        raise ValueError(f"`rankings` must be [S, B, N] item indices with [B, N] = {tuple(logits.shape)}; got "
                         f"{getattr(rankings, 'shape', rankings)!r}")
    S, B, N = rankings.shape
    m = _centred(logits, mask).unsqueeze(0).expand(S, B, N)
    ms = m.gather(-1, rankings)
    logz = torch.flip(torch.logcumsumexp(torch.flip(ms, [-1]), -1), [-1])
    real = (torch.arange(N, device=mask.device)[None, None, :] < mask.sum(-1)[None, :, None])
    return torch.where(real, ms - logz, torch.zeros_like(ms)).sum(-1)


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
    """PL-Rank-2 gradient of ``E[sum_d w_d F(pos_d)]`` w.r.t. the logits, averaged over samples: ``[B, N]``.

    ``fk [S, B, N]`` is the exposure of each position in each sample (``F(k)``), ``w [B, N]`` the item rewards.
    ``baseline``: subtract each list's mean item reward first.  For a position-based browsing model the total
    ``sum_k F(k)`` is the same for every ranking, so the shift leaves the expected gradient unchanged; it removes
    the reward component common to all items, which lowers the variance and, when ``w`` is itself an estimate
    (``dL/dE`` at the Monte Carlo exposure, e.g. through a normalisation by the total exposure), removes the
    correlation between ``w`` and the samples that would otherwise bias the chain rule.
    """
    if baseline:
        mf = mask.to(w.dtype)
        w = (w - (w * mf).sum(-1, keepdim=True) / mf.sum(-1, keepdim=True).clamp(min=1)) * mf
    m, logz, real_step, ranks = _pl_rank_terms(logits, rankings, mask)
    ws = w.unsqueeze(0).expand_as(rankings).gather(-1, rankings)  # reward weight of the item at step k
    r = fk * ws * real_step  # realised reward per step
    G = torch.flip(torch.cumsum(torch.flip(r, [-1]), -1), [-1])  # reward-to-go G_k
    # pi_k(d) = exp(m_d - log Z_k) <= 1 for k <= rank(d).  The sums over k <= rank(d) are taken in log space
    # (logcumsumexp of log|x_k| - log Z_k, positive and negative parts apart) and only then multiplied by e^{m_d}:
    # finite for any span of the logits (the plain e^{m_d} / Z_k overflows in float32 beyond a span of ~88)
    md = m.unsqueeze(0)
    a = _exp_cumsum_over_z(fk, logz, real_step, ranks, md)  # sum_{k <= rank(d)} F(k) pi_k(d)
    c = _exp_cumsum_over_z(G, logz, real_step, ranks, md)  # sum_{k <= rank(d)} G_k pi_k(d)
    G_next = torch.cat([G[..., 1:], torch.zeros_like(G[..., :1])], -1).gather(-1, ranks)
    g = G_next + w.unsqueeze(0) * a - c
    return (g * mask).mean(0)


def _exp_cumsum_over_z(x: Tensor, logz: Tensor, real_step: Tensor, ranks: Tensor, md: Tensor) -> Tensor:
    """``sum_{k <= rank(d)} x_k exp(m_d - log Z_k)`` for every item ``d``, ``[S, B, N]``, in log space."""
    out = torch.zeros_like(md.expand_as(x))
    for sign in (1.0, -1.0):
        v = (sign * x).clamp(min=0)
        keep = real_step & (v > 0)
        lv = torch.where(keep, torch.log(torch.where(keep, v, torch.ones_like(v))) - logz,
                         torch.full_like(v, float("-inf")))
        lc = torch.logcumsumexp(lv, -1).gather(-1, ranks)
        out = out + sign * torch.exp(md + lc)
    return out


class _PLRankExposure(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, value, rankings, mask, fk, baseline):
        ctx.save_for_backward(logits, rankings, mask, fk)
        ctx.baseline = baseline
        return value.clone()

    @staticmethod
    def backward(ctx, grad_out):
        logits, rankings, mask, fk = ctx.saved_tensors
        g = _pl_rank_exposure_grad(logits, rankings, mask, fk, grad_out, ctx.baseline)
        return g, None, None, None, None, None


def _pl_rank_pair_grad(logits, rankings, mask, fk, C):
    """PL-Rank-2 gradient of ``E[sum_{i,j} C[i,j] F(pos_j) 1(pos_j < pos_i)]`` w.r.t. the logits: ``[B, N]``.

    Placing ``d`` at step ``k`` earns ``r_k(d) = F(k) sum_{i not placed before k, i != d} C[i, d]`` (every item
    still unplaced will end up below ``d``), a reward that only depends on ``y_{1:k}``, which PL-Rank-2 needs.
    """
    S, B, N = rankings.shape
    m, logz, real_step, ranks = _pl_rank_terms(logits, rankings, mask)
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


class _PLRankPairContract(torch.autograd.Function):
    """``out[b,i,h] = sum_j w[i,j] X[i,j] right[j,h]`` with X a PL expectation; PL-Rank-2 backward for logits."""

    @staticmethod
    def forward(ctx, logits, value, rankings, mask, fk, right, weight_full, baseline):
        ctx.save_for_backward(logits, rankings, mask, fk, right, weight_full)
        ctx.baseline = baseline
        return value.clone()

    @staticmethod
    def backward(ctx, grad_out):
        logits, rankings, mask, fk, right, weight_full = ctx.saved_tensors
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
    """Sample average over PL rankings ``[S, B, N]``, with the chosen gradient estimator."""

    def __init__(self, rankings, weights, scores, mask, *, logits, estimator="score_function", sf_weights=None):
        super().__init__(rankings, weights, scores, mask)
        self.sf_weights = sf_weights  # score-function weights, for the quantities PL-Rank does not cover
        self.logits = logits
        self.rankings = rankings
        self.estimator = estimator

    def _fk(self, browsing: BrowsingModel, relevance: Optional[Tensor]) -> Tensor:
        """Exposure of each position in each sample ``[S, B, N]`` (position order)."""
        S = self.num_samples
        B, N = self.mask.shape
        rel = self._rep(relevance)
        f = self.inner._sorted_exposure(browsing, rel)  # [S * B, N]
        return f.reshape(S, B, N)

    def expected_positions(self) -> Tensor:
        if self.sf_weights is None:
            return super().expected_positions()
        return self._mean(self.inner.expected_positions(), self.sf_weights)

    def position_matrix(self) -> Tensor:
        # positions and prefixes are not per-position rewards: score-function gradient for them
        return self._position_matrix(self.weights if self.sf_weights is None else self.sf_weights)

    def exposure(self, browsing: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
        value = super().exposure(browsing, relevance)
        if self.estimator != "pl_rank" or not torch.is_grad_enabled() or not self.logits.requires_grad:
            return value
        return _PLRankExposure.apply(self.logits, value.detach(), self.rankings, self.mask,
                                     self._fk(browsing, relevance), not browsing.relevance_dependent)

    def contract(self, right: Tensor, *, which: str = "above", pair_weight=None, browsing=None, relevance=None,
                 block_elements=None) -> Tensor:
        value = super().contract(right, which=which, pair_weight=pair_weight, browsing=browsing,
                                 relevance=relevance, block_elements=block_elements)
        if (self.estimator != "pl_rank" or which == "one" or not torch.is_grad_enabled()
                or not self.logits.requires_grad):
            return value
        B, N = self.mask.shape
        if pair_weight is None:
            wfull = torch.ones(B, N, N, dtype=right.dtype, device=right.device)
        else:
            wfull = torch.cat([pair_weight(a, b) for a, b in row_blocks(B, N)], 1).to(right.dtype)
        F = browsing if which == "joint" else Uniform()
        return _PLRankPairContract.apply(self.logits, value.detach(), self.rankings, self.mask,
                                         self._fk(F, relevance), right.detach(), wfull.detach(),
                                         not F.relevance_dependent)


class PlackettLuce(Ordering):
    """A Plackett-Luce ranking policy with logits ``scores / temperature`` (see the module docstring).

    Parameters
    ----------
    samples : rankings drawn per list (Monte Carlo estimators).
    estimator : ``"pl_rank"`` (default), ``"score_function"`` or ``"relaxed"``.
    temperature : PL temperature; logits are ``scores / temperature``.
    relaxation : for ``"relaxed"``: the soft ordering applied to the Gumbel-perturbed logits
        (default ``SoftRank(temperature=0.1)``, whose temperature follows the one rule of
        :mod:`torchfair.orderings.soft`, section Temperature: relative to the perturbed logits' std, at least
        ``0.1 * min_scale``).
    exact : enumerate all ``N!`` rankings with their probabilities (``N <= 8``) instead of sampling.
    generator : a ``torch.Generator`` on the scores' device, for reproducible samples.

    Example::

        >>> from torchfair.metrics import dips
        >>> s = torch.randn(4, 6, requires_grad=True)
        >>> M = dips(s, torch.rand(4, 6), torch.randint(0, 2, (4, 6)), num_groups=2,
        ...          ordering=PlackettLuce(samples=64))
        >>> M.shape
        torch.Size([4, 2, 2])
    """

    differentiable = True

    def __init__(self, samples: int = 100, estimator: str = "pl_rank", temperature: float = 1.0,
                 relaxation: Optional[Ordering] = None, exact: bool = False,
                 generator: Optional[torch.Generator] = None):
        self.estimator = check_choice(estimator, "estimator", _ESTIMATORS)
        if not isinstance(exact, bool):
            raise ValueError(f"`exact` must be a bool; got {exact!r}")
        self.samples = _check_int(samples, "samples", low=1)
        if estimator == "score_function" and self.samples < 2 and not exact:
            raise ValueError(f"`samples` must be >= 2 for the score-function estimator (leave-one-out baseline); "
                             f"got {samples!r}")
        self.temperature = check_number(temperature, "temperature", low=0, low_open=True)
        if relaxation is not None and not isinstance(relaxation, Ordering):
            raise ValueError(f"`relaxation` must be an Ordering (e.g. SoftRank(0.1)) or None; got {relaxation!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"`generator` must be a torch.Generator or None; got {generator!r}")
        self.relaxation = relaxation
        self.exact = exact
        self.generator = generator

    def __repr__(self) -> str:
        return (f"PlackettLuce(samples={self.samples}, estimator={self.estimator!r}, "
                f"temperature={self.temperature}, exact={self.exact})")

    def __call__(self, scores: Tensor, mask: Tensor) -> OrderedBatch:
        s, mask = work_scores(scores, mask)  # float32 for half types; padding blanked: zero gradient
        B, N = s.shape
        logits = _centred(s / self.temperature, mask)
        if self.exact:
            return self._exact(logits, s, mask)
        S = self.samples
        rankings = sample_rankings(logits, mask, S, self.generator)  # [S, B, N]
        if self.estimator == "relaxed":
            relax = self.relaxation
            if relax is None:
                relax = SoftRank(temperature=0.1)
            pert = (logits.unsqueeze(0) + _gumbel((S, B, N), self.generator, logits)).reshape(S * B, N)
            pert = torch.where(mask.repeat(S, 1), pert, torch.zeros((), dtype=pert.dtype, device=pert.device))
            inner = relax(pert, mask.repeat(S, 1))
            w = torch.full((S, B), 1.0 / S, dtype=s.dtype, device=s.device)
            return MixtureOrderedBatch(inner, w, s, mask)
        sf = _score_function_weights(log_probability(logits, rankings, mask)) if logits.requires_grad else None
        if self.estimator == "score_function":
            return PlackettLuceOrderedBatch(rankings, sf if sf is not None else
                                            torch.full((S, B), 1.0 / S, dtype=s.dtype, device=s.device),
                                            s, mask, logits=logits, estimator=self.estimator)
        w = torch.full((S, B), 1.0 / S, dtype=s.dtype, device=s.device)
        return PlackettLuceOrderedBatch(rankings, w, s, mask, logits=logits, estimator=self.estimator,
                                        sf_weights=sf)

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
