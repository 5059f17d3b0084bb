"""The monotonicity test of Kuhlman, Gerych & Rundensteiner (AIES 2021, §5), with a weighted isotonic regression.

What is tested.  Kuhlman et al.'s comparison of statistical-parity metrics (rND, rKL, rRD, pair, expRR; Theorems 1-2)
assumes that group advantage acts *monotonically* down the ranking: the probability ``M(k)`` that position k
holds a protected item is non-increasing in k when the protected group is advantaged (Assumption 1) and
non-decreasing when it is disadvantaged (Assumption 2).  Given a set of observed rankings, the test

1. estimates ``M_hat(k)`` = (protected items observed at position k) / (items observed at position k);
2. fits the closest non-decreasing and the closest non-increasing curve to ``M_hat`` by weighted isotonic
   regression (weights = number of observations per position) and keeps the one with the smaller chi-square;
3. runs a Pearson chi-square goodness-of-fit test of the observed protected / non-protected counts per position
   against the counts the monotone curve predicts.

How to read it.  ``p_value`` large (e.g. > 0.05): the per-position probabilities are statistically compatible
with a monotone advantage function, so Assumptions 1-2 hold plausibly and the metrics of Kuhlman et al., AIES 2021, §4
agree (minimising one minimises all).  ``p_value`` small: the group's presence rises and falls down the ranking
(e.g. protected items clustered in the middle); the metrics may disagree and should be inspected one by one
(Kuhlman et al., AIES 2021, §7).  ``direction`` says which monotone shape fits: ``"decreasing"`` (protected items
concentrated at the top, an advantage), ``"increasing"`` (concentrated at the bottom, a disadvantage) or
``"constant"`` (no position effect).  The chi-square reference distribution is approximate: the curve is fitted to the
same data (degrees of freedom = observed positions minus fitted levels, the usual effective dimension of an isotonic
fit) and the direction is chosen by the data, so treat the p-value as a screening tool, as Kuhlman et al., AIES 2021
does.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_group_id, pad_groups, prepare
from ..orderings.base import OrderingLike
from .common import check_bool, check_k, check_soft_group_id, order

__all__ = ["isotonic_regression", "MonotonicityTest", "monotonicity_test"]



def _pav(y: np.ndarray, w: np.ndarray):
    """Non-decreasing weighted least squares fit by pool-adjacent-violators; returns (fit, number of levels)."""
    vals, wts, lens = [], [], []
    for x, wx in zip(y.tolist(), w.tolist()):
        vals.append(x)
        wts.append(wx)
        lens.append(1)
        # pool while the last two blocks violate (or tie: pooled blocks are then the distinct levels)
        while len(vals) > 1 and vals[-2] >= vals[-1]:
            wsum = wts[-2] + wts[-1]
            vals[-2] = (wts[-2] * vals[-2] + wts[-1] * vals[-1]) / wsum
            wts[-2] = wsum
            lens[-2] += lens[-1]
            vals.pop(), wts.pop(), lens.pop()
    return np.repeat(np.asarray(vals, dtype=np.float64), lens), len(vals)


def isotonic_regression(y: Tensor, weights: Optional[Tensor] = None, *, increasing: bool = True) -> Tensor:
    r"""Weighted isotonic regression of a sequence by pool-adjacent-violators (exact, O(n)).

    .. math:: \hat m = \arg\min_{m_0 \le m_1 \le \dots \le m_{n-1}} \sum_k w_k (y_k - m_k)^2

    (``m_0 >= m_1 >= ...`` with ``increasing=False``).  ``y`` and ``weights`` are ``[n]``, weights finite and
    ``> 0`` (default 1).  Returns ``[n]`` in the dtype and device of ``y`` (float32 for integer input).  Not
    differentiable (computed in float64 numpy).

    Example::

        >>> isotonic_regression(torch.tensor([1.0, 3.0, 2.0, 4.0]))
        tensor([1.0000, 2.5000, 2.5000, 4.0000])
    """
    check_bool(increasing, "increasing")
    if not isinstance(y, Tensor) or y.dim() != 1 or y.numel() == 0:
        raise ValueError(f"`y` must be a non-empty 1-D tensor; got {y!r}" if not isinstance(y, Tensor)
                         else f"`y` must be a non-empty 1-D tensor; got shape {tuple(y.shape)}")
    yy = y.detach().cpu().double().numpy()
    if not np.isfinite(yy).all():
        raise ValueError("`y` must be finite")
    if weights is None:
        ww = np.ones_like(yy)
    else:
        if not isinstance(weights, Tensor) or weights.shape != y.shape:
            raise ValueError(f"`weights` must be a tensor of the shape of `y` {tuple(y.shape)}")
        ww = weights.detach().cpu().double().numpy()
        if not np.isfinite(ww).all() or (ww <= 0).any():
            raise ValueError("`weights` must be finite and > 0")
    sign = 1.0 if increasing else -1.0
    fit, _ = _pav(sign * yy, ww)
    dt = y.dtype if y.is_floating_point() else torch.float32
    return torch.as_tensor(sign * fit, dtype=dt, device=y.device)


class MonotonicityTest(NamedTuple):
    """Result of :func:`monotonicity_test`. Per-position fields are ``[N]`` (0-based positions)."""

    #: ``M_hat(k)``: fraction of the items observed at position k that are protected (0 where unobserved)
    probabilities: Tensor
    #: number of items (of known group) observed at position k (expected counts for stochastic orderings)
    counts: Tensor
    #: the monotone curve ``M(k)`` that was kept (0 where unobserved)
    fitted: Tensor
    #: ``"increasing"`` (protected items drift down: disadvantage), ``"decreasing"`` (advantage) or ``"constant"``
    direction: str
    #: Pearson chi-square statistic of the counts against the fitted curve
    statistic: Tensor
    #: degrees of freedom: observed positions minus the number of distinct fitted levels
    dof: int
    #: chi-square upper tail probability (1 when ``dof == 0``)
    p_value: Tensor
    #: ``[N]`` bool, positions with at least one observation
    observed: Tensor


def _chi2(p: np.ndarray, n: np.ndarray, m: np.ndarray) -> float:
    """Pearson chi-square over the 2 x K table: ``sum_k n_k (p_k - m_k)^2 / (m_k (1 - m_k))``.

    A term with ``m_k`` in {0, 1} is 0 (an isotonic block at 0 or 1 has all its observations at that value)."""
    den = m * (1.0 - m)
    ok = den > 1e-12
    return float(np.sum(np.where(ok, n * (p - m) ** 2 / np.where(ok, den, 1.0), 0.0)))


def monotonicity_test(scores: Tensor, groups: Tensor, *, protected: int = 1, k: Optional[int] = None,
                      mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                      ordering: OrderingLike = None, validate_args: bool = True,
                      top: Optional[int] = None) -> MonotonicityTest:
    r"""Monotonicity test of the protected group's per-position probability over a set of rankings (Kuhlman et al.,
    AIES 2021, §5).

    Every list of the batch is one observed ranking.  With ``R = ordering(scores).position_matrix()``
    (``R[b, k, i] = P(item i at position k)``, Kuhlman et al., AIES 2021, eq. 10) and memberships ``a``:

    .. math:: n_k = \sum_b \sum_i R_{bki}\, 1(g_i \text{ known}), \qquad
              \hat M(k) = \frac{1}{n_k} \sum_b \sum_i R_{bki}\, a_{i,\mathrm{protected}}

    then ``M`` = the weighted (by ``n_k``) isotonic fit, non-decreasing or non-increasing, whichever has the
    smaller statistic

    .. math:: \chi^2 = \sum_{k: n_k > 0} \frac{n_k (\hat M(k) - M(k))^2}{M(k) (1 - M(k))}

    (the Pearson statistic of the protected / other counts per position), with
    ``dof = #observed positions - #distinct levels of M`` and ``p_value = P(chi2_dof >= statistic)``.
    For a stochastic ordering (Plackett-Luce, soft) the counts are expected counts.  Items of unknown group
    (id -1) are not counted; padded positions are unobserved.  ``k`` restricts the test to positions ``< k``
    (top-k lists; ``top`` is its deprecated name).  Returns a :class:`MonotonicityTest` (per-position fields
    ``[N]``, scalars otherwise).  ``ValueError`` when no position holds an item of known group, or when
    ``protected >= G`` for soft ``[B, N, G]`` membership.  See the module
    docstring for how to read the result.

    Example (the protected group 1 drifts down the rankings)::

        >>> s = torch.tensor([[4., 3., 2., 1.], [4., 3., 2., 1.]])
        >>> t = monotonicity_test(s, torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]]))
        >>> t.probabilities, t.direction, t.dof, t.p_value
        (tensor([0.0000, 0.5000, 0.5000, 1.0000]), 'increasing', 1, tensor(1.))
    """
    check_group_id(protected, "protected", num_groups)
    if top is not None:
        if k is not None:
            raise ValueError("give `k` only (`top` is its deprecated name)")
        warnings.warn("`top` of monotonicity_test is renamed `k` (the package's one cut-off keyword)",
                      FutureWarning, stacklevel=2)
        k = check_k(top, "top")
    top = check_k(k)
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    check_group_id(protected, "protected", num_groups)
    check_soft_group_id(protected, "protected", groups, b)
    b.membership = pad_groups(b.membership, protected + 1)
    ob = order(b, ordering)
    R = ob.position_matrix().detach()  # [B, K, N]
    memb = b.membership.detach().to(R.dtype)
    known = memb.sum(-1)  # 1 for items of known group (0 for unknown and padded)
    counts = _linalg.einsum("bki,bi->k", R, known)
    prot = _linalg.einsum("bki,bi->k", R, memb[..., protected])
    N = counts.shape[0]
    if top is not None and top < N:
        counts = counts.clone()
        prot = prot.clone()
        counts[top:] = 0
        prot[top:] = 0
    observed = counts > 1e-9
    probs = torch.where(observed, prot / torch.where(observed, counts, torch.ones_like(counts)),
                        torch.zeros_like(counts)).clamp(0.0, 1.0)
    idx = observed.nonzero(as_tuple=True)[0].cpu().numpy()
    if idx.size == 0:
        raise ValueError("no position holds an item of known group: nothing to test")
    p = probs.cpu().double().numpy()[idx]
    n = counts.cpu().double().numpy()[idx]

    best = None
    for direction, sign in (("increasing", 1.0), ("decreasing", -1.0)):
        fit, levels = _pav(sign * p, n)
        fit = sign * fit
        stat = _chi2(p, n, fit)
        sse = float(np.sum(n * (p - fit) ** 2))
        key = (stat, sse)
        if best is None or key < best[0]:
            best = (key, direction, fit, levels, stat)
    _, direction, fit, levels, stat = best
    if levels == 1:
        direction = "constant"
    dof = int(idx.size - levels)
    dt, dev = probs.dtype, probs.device
    statistic = torch.tensor(stat, dtype=torch.float64)
    if dof > 0:
        p_value = torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), statistic / 2.0)
    else:
        p_value = torch.tensor(1.0, dtype=torch.float64)
    fitted = torch.zeros(N, dtype=torch.float64)
    fitted[torch.as_tensor(idx)] = torch.as_tensor(fit)
    return MonotonicityTest(probabilities=probs, counts=counts, fitted=fitted.to(dt).to(dev), direction=direction,
                            statistic=statistic.to(dt).to(dev), dof=dof, p_value=p_value.to(dt).to(dev),
                            observed=observed)
