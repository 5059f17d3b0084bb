r"""The exposure family: misallocation (EE / EA / EA-dp targets), expected exposure (EE-L, EE-D, EE-R), IAA, AWRF,
DP / EUR / RUR and their logs, expRR.

Every measure is written once against an ordering (:mod:`torchfair.orderings`): it only uses the expected exposure
``e_i = E[F(pos_i)]`` of every item, summed into groups.  ``ordering=Hard()`` (default) evaluates the ranking given
by ``scores``; ``ordering=Sampled(rankings)`` averages over several rankings per list (a stochastic policy or a
sequence of rankings, Raj & Ekstrand, SIGIR 2022, §2.3: ``eps(q) = E_pi[eps_L]``); ``ordering=DoublyStochastic(R)``
uses a doubly stochastic position matrix (Kuhlman et al., AIES 2021, eq. 10).  With these two orderings ``scores`` may
be ``None`` (the ranking comes from the ordering).

Common arguments
----------------
scores : ``[B, N]`` or ``[N]`` float, or ``None`` with :class:`~torchfair.orderings.Sampled` /
    :class:`~torchfair.orderings.DoublyStochastic`.
relevance : ``[B, N]`` or ``[N]``, ``>= 0`` (graded or binary; for IAA the system's estimated utility).
groups : ``[B, N]`` int ids in ``[0, G)`` or ``[B, N, G]`` soft membership (rows sum to at most 1; Raj & Ekstrand,
    SIGIR 2022 §2.1's alignment matrix; a row summing to less than 1 is partly of unknown group).  Group sums are
    ``sum_i a_ig x_i``; group sizes ``N_g = sum_i a_ig``.
browsing : a :class:`~torchfair.browsing.BrowsingModel` or a spec string (``"rbp:0.9"``, ``"geometric:0.5"``,
    ``"topk:10:rbp:0.8"``, read by :func:`torchfair.browsing.get_browsing`); defaults follow Raj & Ekstrand, SIGIR
    2022, table 1 (see each measure).
k : cut-off: the browsing model truncated at ``k`` (:class:`~torchfair.browsing.TopK`), for the ranking's
    exposure and for the ideal (target) exposure alike.  ``None`` (default) = the whole list.
mask, num_groups, ordering, reduction, return_valid, validate_args : as in :mod:`torchfair.metrics.pairwise`.

Stochastic orderings.  Every measure here is a function of the *expected* exposure ``e_i = E[F(pos_i)]`` (the
policy-level exposure ``eps_pi = E_pi[eps_L]`` of Raj & Ekstrand, SIGIR 2022, §2.3 and of Diaz et al.'s expected
exposure): on a mixture of rankings (``Sampled``, ``PlackettLuce``) or a ``DoublyStochastic`` matrix the value is the
measure of the expected exposure, as the sources define it for policies.  Where the measure is linear in the exposure
(the misallocation ``delta``, individual misallocation and EE-R, under a position-based browsing model: the
total exposure of a ranking is then fixed) this equals the mean of the per-ranking values; where it is not
(EE-L, EE-D, AWRF, IAA, DP / EUR / RUR and their logs, expRR, any Cascade browsing) it does not: for the mean of
per-ranking values evaluate each ranking with ``Hard()`` and average.  The stated ranges hold exactly for
``Hard``, ``Sampled``, ``DoublyStochastic`` and ``PlackettLuce``; relaxed orderings (``SoftRank`` evaluates
``F(E[pos])``, not ``E[F(pos)]``) give smooth approximations that can leave them.

Unknown group (id ``-1``): the item is ranked (it takes a position and pushes the others down) and its exposure is
counted in the list's *total* exposure, but it belongs to no group (Raj & Ekstrand, SIGIR 2022, §2.6: "include
unlabeled items when computing attention weights but exclude them from further analysis").  Hence in
:func:`exposure_misallocation` the group shares of the total need not sum to 1, while measures that compare
*distributions over groups* (AWRF) use the exposure of the known groups only.  To treat "unknown" as a group of its
own (as Raj & Ekstrand, SIGIR 2022, §3.2 does for IAA and EE), map ``-1`` to an extra id.

Undefined values (a zero denominator, an absent group) are 0 and flagged ``False`` in the validity mask; nothing
returns NaN.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _linalg
from ..kernels import pick as _kernels
from .._validation import (Batch, check_choice, check_group_id, check_number, check_reduction, pad_groups, prepare,
                           require)
from ..browsing import RBP, BrowsingModel, Geometric, Logarithmic, ReciprocalRank
from ..orderings.base import OrderingLike
from ..orderings import OrderedBatch
from .common import (check_bool, check_k, check_soft_group_id, check_target_string, clamp_rounding, cut_browsing,
                      finish, ideal_sort, order, safe_div, safe_log)

__all__ = ["exposure_misallocation", "misallocation_norm", "individual_misallocation", "ideal_exposure",
           "expected_exposure", "ExpectedExposureResult", "iaa", "exposure_share", "awrf", "dp", "eur", "rur", "log_dp", "log_eur",
           "log_rur", "exp_rr"]

BrowsingLike = Union[BrowsingModel, str, None]


# --------------------------------------------------------------------------------------------------- plumbing
def _placeholder_scores(scores, ordering, relevance) -> Tensor:
    """``scores`` itself, or zeros of the shape of the lists an explicit-ranking ordering describes."""
    if scores is not None:
        return scores
    shape = getattr(ordering, "list_shape", None)
    if shape is None:
        raise ValueError("`scores` is required unless `ordering` carries its own rankings "
                         "(torchfair.orderings.Sampled or DoublyStochastic)")
    dtype = torch.float32
    if isinstance(relevance, Tensor) and relevance.dtype == torch.float64:
        dtype = torch.float64
    R = getattr(ordering, "R", None)
    if isinstance(R, Tensor) and R.dtype == torch.float64:
        dtype = torch.float64
    src = getattr(ordering, "rankings", R)
    return torch.zeros(shape, dtype=dtype, device=src.device if isinstance(src, Tensor) else None)


def _setup(scores, relevance, groups, mask, num_groups, ordering, validate, *, require_relevance=False,
           require_groups=False):
    name = "scores" if scores is not None else "ordering"
    scores = _placeholder_scores(scores, ordering, relevance)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate, scores_name=name,
                require_relevance=require_relevance, require_groups=require_groups)
    return b, order(b, ordering)


def _exposure(b: Batch, ob: OrderedBatch, F: BrowsingModel) -> Tensor:
    """``[B, N]`` expected item exposure ``E[F(pos_i)]`` (0 on padding)."""
    return ob.exposure(F, b.relevance) * b.mask.to(b.scores.dtype)


def _gsum(memb: Tensor, x: Tensor) -> Tensor:
    """``[B, G]`` group sums ``sum_i a_ig x_i``."""
    return _linalg.bmm(x.unsqueeze(1), memb.to(x.dtype)).squeeze(1)


def ideal_exposure(relevance: Tensor, *, browsing: BrowsingLike = None, k: Optional[int] = None,
                   mask: Optional[Tensor] = None, validate_args: bool = True) -> Tensor:
    r"""Target exposure of every item under the ideal policy (Fabris et al., WSDM 2023, eq. 15, Raj & Ekstrand, SIGIR
    2022, §2.4's ``eps*``).

    .. math:: t_i = \operatorname{mean}_{j: r_j = r_i} F(\sigma^{*-1}(j))

    the exposure each item gets in the ranking by decreasing relevance, averaged over items of equal relevance
    (= the expected exposure under the policy that plays every relevance-sorted ranking with equal probability,
    Diaz et al., CIKM 2020).  For :class:`~torchfair.browsing.Cascade` the exposure of each ideal position is
    computed along the relevance-sorted list (the same for every order of ties).  ``k`` truncates the browsing
    model at ``k`` (:class:`~torchfair.browsing.TopK`).  ``[B, N]`` (``[N]``); padded items get 0.
    ``browsing`` defaults to ``RBP(0.9)``.  The one ideal-exposure computation of the package: the ideal DCG
    (:func:`torchfair.metrics.utility.ideal_dcg`) is ``sum_i g_i t_i`` with the DCG discount.

    Example::

        >>> ideal_exposure(torch.tensor([1., 0., 1., 0.]), browsing=RBP(0.5))
        tensor([0.7500, 0.1875, 0.7500, 0.1875])
    """
    k = check_k(k)
    F = cut_browsing(browsing, RBP(0.9), k)
    b = prepare(relevance, None, None, mask, validate=validate_args, scores_name="relevance")
    if validate_args:
        require(lambda: ((b.scores >= 0) | ~b.mask).all(), "`relevance` must be non-negative", b.scores.device)
    return b.out(_ideal(b.scores, b.mask, F))


def _ideal(key: Tensor, mask: Tensor, F: BrowsingModel, relevance: Optional[Tensor] = None) -> Tensor:
    """Per-item ideal exposure ``[B, N]``: items sorted by ``key`` descending (:func:`ideal_sort`), the exposure
    of each position under ``F`` averaged over items of equal key.  A relevance-dependent ``F`` (Cascade) reads
    ``relevance`` (default: ``key``) along the ideal order."""
    B, N = key.shape
    dt = key.dtype
    if not F.relevance_dependent and dt in (torch.float32, torch.float64):
        w = F.weights(N, dtype=dt, device=key.device)
        K = _kernels("sorting", "auto", key, w)
        if K is not None:  # the CPU: tie blocks from dense ranks, no sort (the code below is the reference)
            return K.ideal_exposure(key, mask, w)
    skey, order_ = ideal_sort(key, mask)
    n = mask.sum(-1)
    sreal = torch.arange(N, device=key.device)[None, :] < n[:, None]
    # the browsing interface: position weights, or (relevance-dependent models) exposure along the ideal order
    srel = skey if relevance is None else relevance.gather(-1, order_)
    f = F.item_exposure(torch.where(sreal, srel.to(dt), torch.zeros((), dtype=dt, device=key.device)))
    f = f * sreal.to(dt)
    K = _kernels("sorting", "auto", skey, f) if skey.dtype in (torch.float32, torch.float64) else None
    if K is not None:  # the CPU: the tie blocks in one compiled walk (the torch code below is the reference)
        return K.tie_average(skey, f, order_, n)
    new = torch.ones_like(sreal)
    new[:, 1:] = skey[:, 1:] != skey[:, :-1]
    block = torch.cumsum(new.long(), -1) - 1
    tot = torch.zeros_like(f).scatter_add_(-1, block, f)
    cnt = torch.zeros_like(f).scatter_add_(-1, block, sreal.to(dt))
    per_pos = (tot / cnt.clamp(min=1)).gather(-1, block)
    t = torch.empty_like(per_pos).scatter_(-1, order_, per_pos)
    return t * mask.to(dt)


_TARGETS = ("ee", "ea", "ea-dp")


def _item_targets(b: Batch, F: BrowsingModel, target: str) -> Tensor:
    """Per-item target quota (unnormalised) of Fabris et al., WSDM 2023, eq. 13-16."""
    check_choice(target, "target", _TARGETS)
    if target == "ea-dp":
        return b.mask.to(b.scores.dtype)
    if b.relevance is None:
        raise ValueError(f"`relevance` is required for target={target!r}: [B, N] non-negative floats")
    if target == "ea":
        return b.relevance
    return _ideal(b.relevance, b.mask, F)


# ------------------------------------------------------------------------------------------- misallocation
def exposure_misallocation(scores: Optional[Tensor], relevance: Optional[Tensor], groups: Tensor, *,
                           target: str = "ee", browsing: BrowsingLike = None, k: Optional[int] = None,
                           mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                           ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
                           validate_args: bool = True):
    r"""Normalised group exposure misallocation ``delta`` (Fabris et al., WSDM 2023, eq. 12, generalised to G groups).

    .. math:: \delta_g = \frac{T_g}{\sum_h T_h} - \frac{E_g}{\sum_h E_h}, \qquad E_g = \sum_{i \in g} F(\sigma^{-1}(i))

    with the targets ``T_g`` of Fabris et al., WSDM 2023: ``"ee"`` expected exposure, ``T_g = sum_{i in g} t_i`` with
    ``t_i`` the ideal-ranking exposure averaged over relevance ties (eq. 15-16, :func:`ideal_exposure`); ``"ea"``
    equity of attention, ``T_g = sum_{i in g} r_i`` (eq. 13); ``"ea-dp"`` demographic parity, ``T_g = N_g`` (eq. 14).
    Positive ``delta_g``: g is under-exposed.  ``[B, G]`` (``[G]``), in ``[-1, 1]``; the unfairness of Fabris et al.,
    WSDM 2023, §6 is the l1 norm
    :func:`misallocation_norm` ``= delta.abs().sum(-1)``.  The sums ``sum_h`` run over *all* real items (items
    of unknown group, id -1, included), so with unknown items the shares of the groups sum to less than 1.
    ``relevance`` may be ``None`` for ``"ea-dp"``.  ``browsing`` defaults to ``RBP(0.9)`` (Fabris et al., WSDM 2023,
    §6.1); ``k`` truncates it (both the ranking's and the ideal exposure).  Undefined (no exposure, or zero total
    target e.g. all relevance 0 under ``"ea"``): 0, invalid.

    Example (two groups, best items of group 0 ranked last)::

        >>> exposure_misallocation(torch.tensor([1., 2., 3., 4.]), torch.tensor([1., 1., 0., 0.]),
        ...                        torch.tensor([0, 0, 1, 1]), target="ea", browsing="uniform")
        tensor([ 0.5000, -0.5000])
    """
    check_choice(target, "target", _TARGETS)
    F = cut_browsing(browsing, RBP(0.9), check_k(k))
    check_reduction(reduction)
    b, ob = _setup(scores, relevance, groups, mask, num_groups, ordering, validate_args, require_groups=True)
    e = _exposure(b, ob, F)
    t = _item_targets(b, F, target)
    T_share, vt = safe_div(_gsum(b.membership, t), t.sum(-1, keepdim=True))
    E_share, ve = safe_div(_gsum(b.membership, e), e.sum(-1, keepdim=True))
    valid = vt & ve
    delta = clamp_rounding(torch.where(valid, T_share - E_share, torch.zeros_like(T_share)), -1.0, 1.0)
    return finish(b, delta, valid.expand_as(delta), reduction, return_valid)


def misallocation_norm(delta: Tensor, p: float = 1.0) -> Tensor:
    r"""The ``p``-norm of the misallocation vector over its last dimension (Fabris et al., WSDM 2023, §6, reports
    ``p = 1``).

    .. math:: \|\delta\|_p = \Big(\sum_g |\delta_g|^p\Big)^{1/p}

    ``delta`` ``[..., G]`` (e.g. from :func:`exposure_misallocation`); ``p >= 1`` or ``float("inf")`` (the largest
    entry).  Returns ``[...]``; for ``p = 1`` in ``[0, 2]``.

    Example::

        >>> misallocation_norm(torch.tensor([0.5, -0.5]))
        tensor(1.)
    """
    if not isinstance(delta, Tensor) or delta.dim() < 1:
        raise ValueError("`delta` must be a tensor [..., G] (a misallocation vector per list)")
    if not (isinstance(p, (int, float)) and not isinstance(p, bool) and p == float("inf")):
        p = check_number(p, "p", low=1.0)
    if p == 1:
        return delta.abs().sum(-1)
    return torch.linalg.vector_norm(delta, ord=p, dim=-1)


def individual_misallocation(scores: Optional[Tensor], relevance: Optional[Tensor], *, target: str = "ea",
                             browsing: BrowsingLike = None, k: Optional[int] = None, mask: Optional[Tensor] = None,
                             ordering: OrderingLike = None, return_valid: bool = False, validate_args: bool = True):
    r"""Individual exposure misallocation (Fabris et al., WSDM 2023, §5.2).

    .. math:: M_i^{EA} = c_i \sum_{i'} F(\sigma^{-1}(i')) - F(\sigma^{-1}(i)), \qquad c_i = r_i / \sum_{i'} r_{i'}

    the item's target share of the list's total exposure minus its exposure (positive: under-exposed).
    ``target="ea"`` (default) is Fabris et al.'s ``M_i^EA``; ``"ee"`` and ``"ea-dp"`` use the quotas of eq. 15 and
    eq. 14 instead of ``r_i`` (``c_i = t_i / sum t`` and ``1 / n``).  Summing over a group gives the unnormalised
    group misallocation.  ``browsing`` defaults to ``RBP(0.9)``; ``k`` truncates it.  Returns ``M [B, N]``
    (``[N]``; padded items 0), or ``(M, valid [B])`` with ``return_valid``; undefined lists (zero total target):
    0, invalid.

    Example::

        >>> individual_misallocation(torch.tensor([2., 1.]), torch.tensor([0., 1.]), browsing="uniform")
        tensor([-1.,  1.])
    """
    check_choice(target, "target", _TARGETS)
    F = cut_browsing(browsing, RBP(0.9), check_k(k))
    b, ob = _setup(scores, relevance, None, mask, None, ordering, validate_args)
    e = _exposure(b, ob, F)
    t = _item_targets(b, F, target)
    c, valid = safe_div(t, t.sum(-1, keepdim=True))
    M = torch.where(valid, c * e.sum(-1, keepdim=True) - e, torch.zeros_like(e)) * b.mask.to(e.dtype)
    valid = valid.squeeze(-1)
    M, valid = b.out(M), b.out(valid)
    return (M, valid) if check_bool(return_valid, "return_valid") else M


# ----------------------------------------------------------------------------------------- expected exposure
class ExpectedExposureResult(NamedTuple):
    """Result of :func:`expected_exposure`, each ``[...]`` (per list, or reduced)."""

    #: EE-L ``||eps - eps*||^2`` (Raj & Ekstrand, SIGIR 2022, eq. 9): 0 is ideal
    loss: Tensor
    #: EE-D ``||eps||^2`` (Raj & Ekstrand, SIGIR 2022, eq. 5): inequality of exposure, lower is more equal
    disparity: Tensor
    #: EE-R ``eps . eps*`` (Diaz et al. / expeval convention; Raj & Ekstrand, SIGIR 2022, eq. 10 doubles it): higher
    #: is better
    relevance: Tensor
    #: ``||eps*||^2``, so that ``loss == disparity - 2 * relevance + target_norm``
    target_norm: Tensor


def expected_exposure(scores: Optional[Tensor], relevance: Tensor, groups: Optional[Tensor] = None, *,
                      browsing: BrowsingLike = None, k: Optional[int] = None, mask: Optional[Tensor] = None,
                      num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
                      validate_args: bool = True) -> ExpectedExposureResult:
    r"""Expected exposure metrics (Diaz et al.; Raj & Ekstrand, SIGIR 2022, eq. 5, 9, 10).

    .. math:: \mathrm{EE\text{-}L} = \|\epsilon - \epsilon^*\|_2^2, \quad \mathrm{EE\text{-}D} = \|\epsilon\|_2^2,
              \quad \mathrm{EE\text{-}R} = \epsilon^\top \epsilon^*, \quad
              \mathrm{EE\text{-}L} = \mathrm{EE\text{-}D} - 2\,\mathrm{EE\text{-}R} + \|\epsilon^*\|_2^2

    ``eps`` is the expected exposure of the ordering (use ``ordering=Sampled(rankings)`` for a stochastic policy,
    Raj & Ekstrand, SIGIR 2022, §2.3) and ``eps*`` the expected exposure under the ideal policy (all relevance-sorted
    rankings equally likely, :func:`ideal_exposure`).  Without ``groups`` both are item vectors (Diaz et al.'s
    individual version); with ``groups`` they are group vectors ``G(L)^T a_L`` (Raj & Ekstrand, SIGIR 2022, §2.3-2.4;
    items of unknown group are ranked but in no group).  Exposure is not normalised.  **EE-R convention**:
    ``eps . eps*`` as in Diaz et al. and expeval; Raj & Ekstrand (SIGIR 2022, eq. 10 and their code) report
    ``2 eps . eps*``.  ``browsing`` defaults to ``RBP(0.9)`` (Raj & Ekstrand, SIGIR 2022, table 1: RBP or cascade);
    ``k`` truncates it.  Returns an :class:`ExpectedExposureResult` of four ``[B]`` (``[]``) tensors.  All values are always defined.

    Example (expeval's convention, see :mod:`torchfair.compat.expeval`)::

        >>> ee = expected_exposure(torch.tensor([4., 3., 2., 1.]), torch.tensor([1., 1., 0., 0.]), browsing=RBP(0.5))
        >>> ee.disparity, ee.relevance, ee.loss
        (tensor(1.3281), tensor(1.1953), tensor(0.1328))
    """
    F = cut_browsing(browsing, RBP(0.9), check_k(k))
    check_reduction(reduction)
    b, ob = _setup(scores, relevance, groups, mask, num_groups, ordering, validate_args, require_relevance=True)
    eps = _exposure(b, ob, F)
    star = _ideal(b.relevance, b.mask, F)
    if b.membership is not None:
        eps, star = _gsum(b.membership, eps), _gsum(b.membership, star)
    loss = ((eps - star) ** 2).sum(-1)
    disp = (eps ** 2).sum(-1)
    rel = (eps * star).sum(-1)
    tnorm = (star ** 2).sum(-1)
    valid = torch.ones_like(loss, dtype=torch.bool)
    out = [finish(b, x, valid, reduction, False) for x in (loss, disp, rel, tnorm)]
    return ExpectedExposureResult(*out)


# ------------------------------------------------------------------------------------------------------ IAA
def iaa(scores: Optional[Tensor], relevance: Tensor, groups: Optional[Tensor] = None, *,
        browsing: BrowsingLike = None, k: Optional[int] = None, amortize: bool = True,
        mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
        reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Inequity of Amortized Attention (Biega et al.; Raj & Ekstrand, SIGIR 2022, eq. 8).

    .. math:: \mathrm{IAA} = \big\| \bar\epsilon - \bar\Upsilon \big\|_1, \qquad
              \bar\epsilon = \frac{1}{L} \sum_{l} G(L_l)^\top \frac{a_{L_l}}{\sum_d a_{L_l}(d)}, \quad
              \bar\Upsilon = \frac{1}{L} \sum_l G(L_l)^\top \frac{y_l}{\sum_d y_l(d)}

    Attention and (estimated) utility ``relevance`` are normalised to sum to 1 in each ranking (Biega et al.) and
    amortised over the sequence of rankings, which is the batch.  Returns, with ``amortize=True`` (default), one
    scalar ``[]`` for the ``B`` lists together (``reduction`` does not apply; multiply by the number of lists for
    Biega et al.'s cumulative sums); with ``amortize=False``, each list alone, ``[B]`` (``[]``) reduced by
    ``reduction``.  With ``return_valid`` the pair ``(value, valid)`` of that shape.  In ``[0, 2]``.  Without
    ``groups`` the comparison is per item, so column ``i`` must be the same item in every list.  Lists with no
    utility or no exposure are skipped (invalid).  Items of unknown group count in the normalisation but in no
    group.  ``browsing`` defaults to ``Geometric(0.5)`` (Raj & Ekstrand, SIGIR 2022, table 1); ``k`` truncates it.

    Example::

        >>> iaa(torch.tensor([[2., 1.], [1., 2.]]), torch.tensor([[1., 1.], [1., 1.]]), browsing="uniform")
        tensor(0.)
    """
    F = cut_browsing(browsing, Geometric(0.5), check_k(k))
    check_bool(amortize, "amortize")
    check_reduction(reduction)
    b, ob = _setup(scores, relevance, groups, mask, num_groups, ordering, validate_args, require_relevance=True)
    e = _exposure(b, ob, F)
    a, va = safe_div(e, e.sum(-1, keepdim=True))
    u, vu = safe_div(b.relevance, b.relevance.sum(-1, keepdim=True))
    valid = (va & vu).squeeze(-1)  # [B]
    if b.membership is not None:
        a, u = _gsum(b.membership, a), _gsum(b.membership, u)
    if not amortize:
        value = torch.where(valid, (a - u).abs().sum(-1), torch.zeros_like(valid, dtype=a.dtype))
        return finish(b, value, valid, reduction, return_valid)
    v = valid.to(a.dtype)[:, None]
    cnt = v.sum(0)
    A, _ = safe_div((a * v).sum(0), cnt)
    U, _ = safe_div((u * v).sum(0), cnt)
    value = (A - U).abs().sum(-1)
    ok = valid.any()
    value = torch.where(ok, value, torch.zeros_like(value))
    return (value, ok) if check_bool(return_valid, "return_valid") else value


# ----------------------------------------------------------------------------------------------------- AWRF
_DISTANCES = ("nd", "rd", "kl")


def _target_distribution(target, b: Batch, name: str = "target") -> Tensor:
    memb = b.membership
    B, _, G = memb.shape
    dt = memb.dtype
    check_target_string(target, ("equal", "list"), name)
    if target is None or (isinstance(target, str) and target == "equal"):
        return torch.full((B, G), 1.0 / G, dtype=dt, device=memb.device)
    if isinstance(target, str) and target == "list":
        p, _ = safe_div(memb.sum(1), memb.sum((1, 2))[:, None])
        return p
    if not isinstance(target, Tensor) or target.shape not in ((G,), (B, G)):
        raise ValueError(f"`{name}` must be None/'equal', 'list', or a tensor of shape [G] = [{G}] or "
                         f"[B, G] = [{B}, {G}] (a distribution over groups); got "
                         f"{tuple(target.shape) if isinstance(target, Tensor) else target!r}")
    p0 = target.to(dt)
    require(lambda: (torch.isfinite(p0) & (p0 >= 0)).all() & ((p0.sum(-1) - 1).abs() <= 1.1e-4).all(),
            f"`{name}` must be a probability distribution over the G groups (non-negative, sums to 1)", p0.device)
    return p0.to(memb.device).expand(B, G)


def _exposure_distribution(b: Batch, ob: OrderedBatch, F: BrowsingModel) -> Tuple[Tensor, Tensor]:
    """``eps [B, G]``: each known group's share of the list's exposure, and its validity ``[B, 1]``."""
    E = _gsum(b.membership, _exposure(b, ob, F))
    return safe_div(E, E.sum(-1, keepdim=True))


def exposure_share(scores: Optional[Tensor], groups: Tensor, *, browsing: BrowsingLike = None,
                   k: Optional[int] = None, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                   ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
                   validate_args: bool = True):
    r"""Each group's share of the exposure of the list (Sapiezynski et al., WWW 2019; Raj & Ekstrand, SIGIR 2022,
    eq. 3, the distribution :math:`\epsilon_L` that AWRF compares with a target).

    .. math:: \epsilon_{L,g} = \frac{\sum_{i \in g} F(\mathrm{pos}_i)}{\sum_{i\ \mathrm{known}} F(\mathrm{pos}_i)}

    Returns ``[B, G]`` (``[G]``), in ``[0, 1]``, summing to 1 over the groups on a valid list; soft membership
    weights each item's exposure by its membership; items of unknown group take positions but are left out.
    ``browsing`` defaults to ``Geometric(0.5)`` as for :func:`awrf`; ``k`` truncates it.  Undefined (no exposure on
    known groups): 0, invalid.

    Example::

        >>> exposure_share(torch.tensor([3., 2., 1.]), torch.tensor([0, 1, 1]), browsing="uniform")
        tensor([0.3333, 0.6667])
    """
    F = cut_browsing(browsing, Geometric(0.5), check_k(k))
    check_reduction(reduction)
    b, ob = _setup(scores, None, groups, mask, num_groups, ordering, validate_args, require_groups=True)
    eps, valid = _exposure_distribution(b, ob, F)
    valid = valid.expand_as(eps)
    value = torch.where(valid, clamp_rounding(eps, 0.0, 1.0), torch.zeros_like(eps))
    return finish(b, value, valid, reduction, return_valid)


def awrf(scores: Optional[Tensor], groups: Tensor, *, target: Union[str, Tensor, None] = None,
         distance: str = "nd", protected: Optional[int] = None, browsing: BrowsingLike = None,
         k: Optional[int] = None, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
         ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
         validate_args: bool = True):
    r"""Attention-Weighted Rank Fairness (Sapiezynski et al.; Raj & Ekstrand, SIGIR 2022, eq. 3 with the distances of
    table 4).

    .. math:: \mathrm{AWRF}_\Delta(L) = \Delta(\epsilon_L, \hat p), \qquad \epsilon_L = G(L)^\top a_L / \textstyle\sum

    ``eps_L`` is the distribution of exposure over the (known) groups and ``hat p`` the ``target``: ``None`` or
    ``"equal"`` (uniform, Raj & Ekstrand's AWRF_equal), ``"list"`` (the group composition of the list), or a tensor
    ``[G]`` / ``[B, G]`` (e.g. the population of providers).  ``distance``:

    * ``"nd"``: ``|eps_g - p_g|`` (table 4's binomial difference) for each group g taken as protected;
    * ``"rd"``: ``|eps_g / (1 - eps_g) - p_g / (1 - p_g)|`` (binomial ratio difference; undefined when a share is 1);
    * ``"kl"``: ``KL(eps || p) = sum_g eps_g log(eps_g / p_g)`` (multinomial; undefined if ``p_g = 0 < eps_g``).

    Returns: ``"nd"``/``"rd"``: ``[B, G]`` (``[G]``), or ``[B]`` (``[]``) for one ``protected`` group id;
    ``"kl"``: ``[B]`` (``[]``), ``protected`` not used.  With ``return_valid`` the pair ``(value, valid)`` of that
    shape.  ``"nd"`` lies in ``[0, 1]``, ``"rd"`` and ``"kl"`` in ``[0, inf)``.  Soft membership and any G are
    allowed.  Items of unknown group (-1) take positions but their exposure is left out of ``eps_L`` (Raj & Ekstrand,
    SIGIR 2022 §2.6).  ``browsing`` defaults to ``Geometric(0.5)`` (Raj & Ekstrand, SIGIR 2022, table 1); ``k``
    truncates it.  Undefined (no exposure on known groups, or the cases above): 0, invalid.  With ``protected``,
    a list holding no item of that group is undefined as well (0, invalid, as in :func:`dp` and
    :func:`~torchfair.metrics.rkl`; the ``[B, G]`` form keeps that group's entry ``|0 - p_g|``); ``protected``
    must lie in ``[0, num_groups)`` (``ValueError``) when ``num_groups`` is given or the membership is soft
    ``[B, N, G]``, and an id beyond the integer groups of the batch is undefined in every list.

    Example::

        >>> awrf(torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="uniform", protected=1)
        tensor(0.)
    """
    check_choice(distance, "distance", _DISTANCES)
    check_target_string(target, ("equal", "list"))
    F = cut_browsing(browsing, Geometric(0.5), check_k(k))
    check_reduction(reduction)
    if protected is not None:
        check_group_id(protected, "protected", num_groups)
    b, ob = _setup(scores, None, groups, mask, num_groups, ordering, validate_args, require_groups=True)
    G = b.membership.shape[-1]
    if protected is not None and protected >= G and distance != "kl":
        if isinstance(groups, Tensor) and groups.is_floating_point():  # soft membership: G is known
            raise ValueError(f"`protected` must be an int group id in [0, {G}) (the groups' last dimension); "
                             f"got {protected!r}")
        # a protected id beyond the batch's groups: absent from every list, undefined there (as dp and rkl); the
        # groups are not padded, which would change the "equal" target 1/G
        zero = torch.zeros(b.mask.shape[0], dtype=b.scores.dtype, device=b.mask.device)
        invalid = torch.zeros_like(zero, dtype=torch.bool)
        return finish(b, torch.where(invalid, b.scores.sum(-1), zero), invalid, reduction, return_valid)
    eps, valid = _exposure_distribution(b, ob, F)  # valid [B, 1]
    p = _target_distribution(target, b)
    if distance == "kl":
        pos = eps > 0
        ok = (~pos | (p > 0)).all(-1, keepdim=True)
        ratio = torch.where(pos & (p > 0), eps / torch.where(p > 0, p, torch.ones_like(p)), torch.ones_like(p))
        value = (eps * torch.log(ratio)).sum(-1, keepdim=True)
        valid = valid & ok
        value = torch.where(valid, value, torch.zeros_like(value))[..., 0]
        return finish(b, value, valid[..., 0], reduction, return_valid)
    if distance == "nd":
        value = clamp_rounding((eps - p).abs(), 0.0, 1.0)
        valid = valid.expand_as(value)
    else:
        re, v1 = safe_div(eps, 1 - eps)
        rp, v2 = safe_div(p, 1 - p)
        value = (re - rp).abs()
        valid = valid & v1 & v2
    value = torch.where(valid, value, torch.zeros_like(value))
    if protected is not None:  # a list without an item of the protected group: undefined (as dp and rkl)
        present = (b.membership[..., protected] * b.mask.to(b.membership.dtype)).sum(-1) > 0
        valid = valid[..., protected] & present
        value = torch.where(valid, value[..., protected], torch.zeros_like(value[..., protected]))
    return finish(b, value, valid, reduction, return_valid)


# ------------------------------------------------------------------------------------------ DP / EUR / RUR
def _ratio(kind: str, log: bool, scores, relevance, groups, protected, reference, browsing, k, amortize, mask,
           num_groups, ordering, reduction, return_valid, validate_args):
    F = cut_browsing(browsing, Logarithmic(), check_k(k))
    check_bool(amortize, "amortize")
    check_reduction(reduction)
    check_group_id(protected, "protected", num_groups)
    if reference is not None:
        check_group_id(reference, "reference", num_groups)
    b, ob = _setup(scores, relevance, groups, mask, num_groups, ordering, validate_args,
                   require_relevance=kind != "dp", require_groups=True)
    check_soft_group_id(protected, "protected", groups, b)
    check_soft_group_id(reference, "reference", groups, b)
    # groups absent from the batch (one group only, or a protected id beyond those seen) make the ratio undefined
    b.membership = pad_groups(b.membership, max(2, protected + 1, (reference or 0) + 1))
    if reference is not None and reference == protected:
        raise ValueError(f"`reference` must be a group id other than `protected`; got {reference!r}")
    memb = b.membership
    mp = memb[..., protected]
    mr = memb[..., reference] if reference is not None else memb.sum(-1) - mp  # known items outside `protected`
    e = _exposure(b, ob, F)
    if kind == "dp":
        y = b.mask.to(e.dtype)
    else:
        # EUR and RUR do not change when the utility is scaled: divide it by its largest value (per list, or
        # over the batch when amortised) so that tiny utilities (1e-30) do not underflow in the products below
        top = b.relevance.amax() if amortize else b.relevance.amax(-1, keepdim=True)
        y = b.relevance / torch.where(top > 0, top, torch.ones_like(top)).detach()
    x = e if kind in ("dp", "eur") else e * y  # DP: mean exposure per group; RUR: exposure times utility
    parts = torch.stack([(x * mp).sum(-1), (y * mp).sum(-1), (x * mr).sum(-1), (y * mr).sum(-1)], -1)  # [B, 4]
    if amortize:
        parts = parts.sum(0, keepdim=True)
    xp, yp, xr, yr = parts.unbind(-1)
    valid = (yp > 0) & (yr > 0) & (xr > 0)
    if log:
        valid = valid & (xp > 0)
        value = (safe_log(xp) - safe_log(xr)) + (safe_log(yr) - safe_log(yp))
    else:
        # (xp / yp) / (xr / yr) as (xp / xr) * (yr / yp): each factor is a ratio of like quantities
        value = safe_div(xp, xr)[0] * safe_div(yr, yp)[0]
    value = torch.where(valid, value, torch.zeros_like(value))
    if amortize:
        value, valid = value[0], valid[0]
        return (value, valid) if check_bool(return_valid, "return_valid") else value
    return finish(b, value, valid, reduction, return_valid)


_RATIO_DOC = r"""

    ``protected`` (default 1) is ``G+``; ``reference`` is ``G-`` (default: every known item outside ``protected``,
    so any number of groups and soft membership work; with soft ``[B, N, G]`` membership both must be ``< G``,
    ``ValueError``).  Returns, with ``amortize=False`` (default), one value per
    list ``[B]`` (``[]`` for one list), reduced by ``reduction``; with ``amortize=True`` the batch is one sequence
    of rankings (Raj & Ekstrand, SIGIR 2022, §2.3, ``eps_pi = E[eps_L]``): the group sums are added over the lists
    before the ratio, giving one scalar ``[]`` (``reduction`` does not apply).  With ``return_valid`` the pair
    ``(value, valid)`` of that shape.  ``browsing`` defaults to ``Logarithmic()`` (Raj & Ekstrand, SIGIR 2022, table
    1); ``k`` truncates it.  Undefined (a zero denominator; for the log version also a zero numerator): 0, invalid."""


def dp(scores: Optional[Tensor], groups: Tensor, *, protected: int = 1, reference: Optional[int] = None,
       browsing: BrowsingLike = None, k: Optional[int] = None, amortize: bool = False,
       mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
       reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Demographic parity ratio (Singh & Joachims, KDD 2018; Raj & Ekstrand, SIGIR 2022, eq. 4).

    .. math:: \mathrm{DP} = \frac{\epsilon(G^+) / |G^+|}{\epsilon(G^-) / |G^-|}

    the ratio of the mean exposure of the protected group's items to the reference group's (Singh & Joachims'
    per-item average exposure; 1 is parity, range ``(0, inf)``).

    {ratio_doc}

    Example::

        >>> dp(torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(0.5000)
    """
    return _ratio("dp", False, scores, None, groups, protected, reference, browsing, k, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


def eur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, *, protected: int = 1,
        reference: Optional[int] = None, browsing: BrowsingLike = None, k: Optional[int] = None,
        amortize: bool = False, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
        validate_args: bool = True):
    r"""Exposed utility ratio (Singh & Joachims' disparate treatment ratio; Raj & Ekstrand, SIGIR 2022, eq. 6).

    .. math:: \mathrm{EUR} = \frac{\epsilon(G^+) / \Upsilon(G^+)}{\epsilon(G^-) / \Upsilon(G^-)},
              \qquad \Upsilon(G) = \sum_{d \in G} y(d)

    (group exposure per unit of utility; Raj & Ekstrand's ``1/|G|`` in ``Upsilon`` cancels when exposure is averaged
    over the group as well, as in Singh & Joachims).  1 is parity, range ``(0, inf)``.

    {ratio_doc}

    Example::

        >>> eur(torch.tensor([2., 1.]), torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(1.)
    """
    return _ratio("eur", False, scores, relevance, groups, protected, reference, browsing, k, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


def rur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, *, protected: int = 1,
        reference: Optional[int] = None, browsing: BrowsingLike = None, k: Optional[int] = None,
        amortize: bool = False, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
        validate_args: bool = True):
    r"""Realized utility ratio (Singh & Joachims' disparate impact ratio; Raj & Ekstrand, SIGIR 2022, eq. 7).

    .. math:: \mathrm{RUR} = \frac{\Gamma(G^+) / \Upsilon(G^+)}{\Gamma(G^-) / \Upsilon(G^-)},
              \qquad \Gamma(G) = \sum_{d \in G} E[a_L(d)]\, y(d)

    1 is parity, range ``(0, inf)``.  Invariant to scaling the utility, so tiny utilities (``1e-30``) are
    fine.

    {ratio_doc}

    Example::

        >>> rur(torch.tensor([2., 1.]), torch.tensor([1., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(0.5000)
    """
    return _ratio("rur", False, scores, relevance, groups, protected, reference, browsing, k, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


for _f in (dp, eur, rur):
    _f.__doc__ = _f.__doc__.replace("\n\n    {ratio_doc}", _RATIO_DOC)


def log_dp(scores: Optional[Tensor], groups: Tensor, *, protected: int = 1, reference: Optional[int] = None,
           browsing: BrowsingLike = None, k: Optional[int] = None, amortize: bool = False,
           mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
           reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""``log(DP)`` (Raj & Ekstrand, SIGIR 2022, table 1's logDP; 0 is parity): the natural log of :func:`dp`.

    .. math:: \log \mathrm{DP} = \log \frac{\epsilon(G^+) / |G^+|}{\epsilon(G^-) / |G^-|}

    Arguments, shapes and validity as :func:`dp`; additionally undefined (0, invalid) when the protected group
    gets no exposure.

    Example::

        >>> log_dp(torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="reciprocal")   # log(1/2)
        tensor(-0.6931)
    """
    return _ratio("dp", True, scores, None, groups, protected, reference, browsing, k, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


def log_eur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, *, protected: int = 1,
            reference: Optional[int] = None, browsing: BrowsingLike = None, k: Optional[int] = None,
            amortize: bool = False, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
            ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
            validate_args: bool = True):
    r"""``log(EUR)`` (Raj & Ekstrand, SIGIR 2022, table 1's logEUR; 0 is parity): the natural log of :func:`eur`.

    .. math:: \log \mathrm{EUR} = \log \frac{\epsilon(G^+) / \Upsilon(G^+)}{\epsilon(G^-) / \Upsilon(G^-)}

    Arguments, shapes and validity as :func:`eur`; additionally undefined (0, invalid) when the protected group
    gets no exposure.

    Example::

        >>> log_eur(torch.tensor([2., 1.]), torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(0.)
    """
    return _ratio("eur", True, scores, relevance, groups, protected, reference, browsing, k, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


def log_rur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, *, protected: int = 1,
            reference: Optional[int] = None, browsing: BrowsingLike = None, k: Optional[int] = None,
            amortize: bool = False, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
            ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
            validate_args: bool = True):
    r"""``log(RUR)`` (Raj & Ekstrand, SIGIR 2022, table 1's logRUR; 0 is parity): the natural log of :func:`rur`.

    .. math:: \log \mathrm{RUR} = \log \frac{\Gamma(G^+) / \Upsilon(G^+)}{\Gamma(G^-) / \Upsilon(G^-)}

    Arguments, shapes and validity as :func:`rur`; additionally undefined (0, invalid) when the protected group
    realises no utility.

    Example::

        >>> log_rur(torch.tensor([2., 1.]), torch.tensor([1., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(-0.6931)
    """
    return _ratio("rur", True, scores, relevance, groups, protected, reference, browsing, k, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


# ---------------------------------------------------------------------------------------------------- expRR
def exp_rr(scores: Optional[Tensor], groups: Tensor, *, browsing: BrowsingLike = None, k: Optional[int] = None,
           mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
           reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Exposure parity ``exp`` (Singh & Joachims, as in Kuhlman et al., AIES 2021, eq. 6-7; expRR with ``v(k) = 1/k``).

    .. math:: \exp_{G_p} = \frac{S}{|G_p|} \sum_{x \in G_p} v(\rho(x)), \qquad \exp = |1 - 2 \exp_{G_p}|

    with ``S`` such that the mean exposures of ``G_p`` and of the rest sum to 1, i.e.
    ``exp_{G_p} = m_p / (m_p + m_rest)``.  Entry g takes g as the protected group and every other
    known item as the rest (items of unknown group are in neither); ``[B, G]`` (``[G]``), in ``[0, 1]``.  0 is
    parity, 1 total advantage of one side.  ``browsing`` defaults to ``ReciprocalRank()`` (``v(k) = 1/k`` for
    1-based ``k``); ``k`` truncates it.  With
    ``ordering=DoublyStochastic(R)`` exposure is ``E[v(rank)]`` (Kuhlman et al., AIES 2021, §3.1 plugs ``E[rank]``
    into ``v``). Undefined (g or the rest absent): 0, invalid.

    Example::

        >>> exp_rr(torch.tensor([2., 1.]), torch.tensor([0, 1]))
        tensor([0.3333, 0.3333])
    """
    F = cut_browsing(browsing, ReciprocalRank(), check_k(k))
    check_reduction(reduction)
    b, ob = _setup(scores, None, groups, mask, num_groups, ordering, validate_args, require_groups=True)
    e = _exposure(b, ob, F)
    memb = b.membership
    known = memb.sum(-1)  # [B, N]
    Eg, Ng = _gsum(memb, e), memb.sum(1)
    Er, Nr = (e * known).sum(-1, keepdim=True) - Eg, known.sum(-1, keepdim=True) - Ng
    mp, v1 = safe_div(Eg, Ng)
    mr, v2 = safe_div(Er, Nr)
    share, v3 = safe_div(mp, mp + mr)
    valid = v1 & v2 & v3
    value = clamp_rounding(torch.where(valid, (1 - 2 * share).abs(), torch.zeros_like(share)), 0.0, 1.0)
    return finish(b, value, valid, reduction, return_valid)
