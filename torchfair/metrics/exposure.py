r"""The exposure family: misallocation (EE / EA / EA-dp targets), expected exposure (EE-L, EE-D, EE-R), IAA, AWRF,
DP / EUR / RUR and their logs, expRR.

Every measure is written once against an ordering (:mod:`torchfair.orderings`): it only uses the expected exposure
``e_i = E[F(pos_i)]`` of every item, summed into groups.  ``ordering=Hard()`` (default) evaluates the ranking given
by ``scores``; ``ordering=Sampled(rankings)`` averages over several rankings per list (a stochastic policy or a
sequence of rankings, Raj & Ekstrand ``002`` §2.3: ``eps(q) = E_pi[eps_L]``); ``ordering=DoublyStochastic(R)``
uses a doubly stochastic position matrix (Kuhlman et al. ``001`` eq. 10).  With these two orderings ``scores`` may
be ``None`` (the ranking comes from the ordering).

Common arguments
----------------
scores : ``[B, N]`` or ``[N]`` float, or ``None`` with :class:`~torchfair.orderings.Sampled` /
    :class:`~torchfair.orderings.DoublyStochastic`.
relevance : ``[B, N]`` or ``[N]``, ``>= 0`` (graded or binary; for IAA the system's estimated utility).
groups : ``[B, N]`` int ids in ``[0, G)`` or ``[B, N, G]`` soft membership (rows sum to 1; ``002`` §2.1's
    alignment matrix).  Group sums are ``sum_i a_ig x_i``; group sizes ``N_g = sum_i a_ig``.
browsing : a :class:`~torchfair.browsing.BrowsingModel` or name; defaults follow ``002`` table 1 (see each measure).
mask, num_groups, ordering, reduction, return_valid, validate_args : as in :mod:`torchfair.metrics.pairwise`.

Unknown group (id ``-1``): the item is ranked (it takes a position and pushes the others down) and its exposure is
counted in the list's *total* exposure, but it belongs to no group (``002`` §2.6: "include unlabeled items when
computing attention weights but exclude them from further analysis").  Hence in :func:`exposure_misallocation` the
group shares of the total need not sum to 1, while measures that compare *distributions over groups* (AWRF) use the
exposure of the known groups only.  To treat "unknown" as a group of its own (as ``002`` §3.2 does for IAA and EE),
map ``-1`` to an extra id.

Undefined values (a zero denominator, an absent group) are 0 and flagged ``False`` in the validity mask; nothing
returns NaN.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from .._validation import Batch, prepare
from ..browsing import RBP, BrowsingModel, Geometric, Logarithmic, ReciprocalRank, get_browsing
from ..orderings.base import OrderingLike
from ..orderings import OrderedBatch, Ordering
from ._common import finish, order, safe_div

__all__ = ["exposure_misallocation", "misallocation_norm", "individual_misallocation", "ideal_exposure",
           "expected_exposure", "ExpectedExposure", "iaa", "awrf", "dp", "eur", "rur", "log_dp", "log_eur",
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
    return torch.einsum("bn,bng->bg", x, memb)


def ideal_exposure(relevance: Tensor, *, browsing: BrowsingLike = None, mask: Optional[Tensor] = None,
                   validate_args: bool = True) -> Tensor:
    r"""Target exposure of every item under the ideal policy (``000`` eq. 15, ``002`` §2.4's ``eps*``).

    .. math:: t_i = \operatorname{mean}_{j: r_j = r_i} F(\sigma^{*-1}(j))

    the exposure each item gets in the ranking by decreasing relevance, averaged over items of equal relevance
    (= the expected exposure under the policy that plays every relevance-sorted ranking with equal probability,
    Diaz et al.).  For :class:`~torchfair.browsing.Cascade` the exposure of each ideal position is computed along
    the relevance-sorted list (the same for every order of ties).  ``[..., N]``; padded items get 0.
    ``browsing`` defaults to ``RBP(0.9)``.

    Example::

        >>> ideal_exposure(torch.tensor([1., 0., 1., 0.]), browsing=RBP(0.5))
        tensor([0.7500, 0.1875, 0.7500, 0.1875])
    """
    b = prepare(relevance, None, None, mask, validate=validate_args, scores_name="relevance")
    if validate_args and (b.scores[b.mask] < 0).any():
        raise ValueError("`relevance` must be non-negative")
    return b.out(_ideal(b.scores, b.mask, get_browsing(browsing, RBP(0.9))))


def _ideal(rel: Tensor, mask: Tensor, F: BrowsingModel) -> Tensor:
    B, N = rel.shape
    dt = rel.dtype
    key = torch.where(mask, rel, torch.full_like(rel, float("-inf")))
    srel, order_ = torch.sort(key, dim=-1, descending=True, stable=True)
    n = mask.sum(-1)
    sreal = torch.arange(N, device=rel.device)[None, :] < n[:, None]
    if F.position_based:
        f = F.weights(N, dtype=dt, device=rel.device).expand(B, N)
    else:
        f = F.item_exposure(torch.where(sreal, srel, torch.zeros_like(srel)))
    f = f * sreal.to(dt)
    new = torch.ones_like(sreal)
    new[:, 1:] = srel[:, 1:] != srel[:, :-1]
    block = torch.cumsum(new.long(), -1) - 1
    tot = torch.zeros_like(f).scatter_add_(-1, block, f)
    cnt = torch.zeros_like(f).scatter_add_(-1, block, sreal.to(dt))
    per_pos = (tot / cnt.clamp(min=1)).gather(-1, block)
    t = torch.empty_like(per_pos).scatter_(-1, order_, per_pos)
    return t * mask.to(dt)


_TARGETS = ("ee", "ea", "ea-dp")


def _item_targets(b: Batch, F: BrowsingModel, target: str) -> Tensor:
    """Per-item target quota (unnormalised) of ``000`` eq. 13-16."""
    if target not in _TARGETS:
        raise ValueError(f"`target` must be one of {_TARGETS}; got {target!r}")
    if target == "ea-dp":
        return b.mask.to(b.scores.dtype)
    if b.relevance is None:
        raise ValueError(f"`relevance` is required for target={target!r}: [B, N] non-negative floats")
    if target == "ea":
        return b.relevance
    return _ideal(b.relevance, b.mask, F)


# ------------------------------------------------------------------------------------------- misallocation
def exposure_misallocation(scores: Optional[Tensor], relevance: Optional[Tensor], groups: Tensor, *,
                           target: str = "ee", browsing: BrowsingLike = None, mask: Optional[Tensor] = None,
                           num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
                           return_valid: bool = False, validate_args: bool = True):
    r"""Normalised group exposure misallocation ``delta`` (``000`` eq. 12, generalised to G groups).

    .. math:: \delta_g = \frac{T_g}{\sum_h T_h} - \frac{E_g}{\sum_h E_h}, \qquad E_g = \sum_{i \in g} F(\sigma^{-1}(i))

    with the targets ``T_g`` of ``000``: ``"ee"`` expected exposure, ``T_g = sum_{i in g} t_i`` with ``t_i`` the
    ideal-ranking exposure averaged over relevance ties (eq. 15-16, :func:`ideal_exposure`); ``"ea"`` equity of
    attention, ``T_g = sum_{i in g} r_i`` (eq. 13); ``"ea-dp"`` demographic parity, ``T_g = N_g`` (eq. 14).
    Positive ``delta_g``: g is under-exposed.  ``[..., G]``; the unfairness of ``000`` §6 is the l1 norm
    :func:`misallocation_norm` ``= delta.abs().sum(-1)``.  The sums ``sum_h`` run over *all* real items (items
    of unknown group, id -1, included), so with unknown items the shares of the groups sum to less than 1.
    ``relevance`` may be ``None`` for ``"ea-dp"``.  ``browsing`` defaults to ``RBP(0.9)`` (``000`` §6.1).
    Undefined (no exposure, or zero total target e.g. all relevance 0 under ``"ea"``): 0, invalid.

    Example (two groups, best items of group 0 ranked last)::

        >>> exposure_misallocation(torch.tensor([1., 2., 3., 4.]), torch.tensor([1., 1., 0., 0.]),
        ...                        torch.tensor([0, 0, 1, 1]), target="ea", browsing="uniform")
        tensor([ 0.5000, -0.5000])
    """
    F = get_browsing(browsing, RBP(0.9))
    b, ob = _setup(scores, relevance, groups, mask, num_groups, ordering, validate_args, require_groups=True)
    e = _exposure(b, ob, F)
    t = _item_targets(b, F, target)
    T_share, vt = safe_div(_gsum(b.membership, t), t.sum(-1, keepdim=True))
    E_share, ve = safe_div(_gsum(b.membership, e), e.sum(-1, keepdim=True))
    valid = vt & ve
    delta = torch.where(valid, T_share - E_share, torch.zeros_like(T_share))
    return finish(b, delta, valid.expand_as(delta), reduction, return_valid)


def misallocation_norm(delta: Tensor, p: float = 1.0) -> Tensor:
    """The ``p``-norm of the misallocation vector over its last dimension (``000`` §6 reports ``p = 1``)."""
    if p == 1:
        return delta.abs().sum(-1)
    return torch.linalg.vector_norm(delta, ord=p, dim=-1)


def individual_misallocation(scores: Optional[Tensor], relevance: Optional[Tensor], *, target: str = "ea",
                             browsing: BrowsingLike = None, mask: Optional[Tensor] = None,
                             ordering: OrderingLike = None, return_valid: bool = False, validate_args: bool = True):
    r"""Individual exposure misallocation (``000`` §5.2).

    .. math:: M_i^{EA} = c_i \sum_{i'} F(\sigma^{-1}(i')) - F(\sigma^{-1}(i)), \qquad c_i = r_i / \sum_{i'} r_{i'}

    the item's target share of the list's total exposure minus its exposure (positive: under-exposed).
    ``target="ea"`` (default) is ``000``'s ``M_i^EA``; ``"ee"`` and ``"ea-dp"`` use the quotas of eq. 15 and
    eq. 14 instead of ``r_i`` (``c_i = t_i / sum t`` and ``1 / n``).  Summing over a group gives the unnormalised
    group misallocation.  ``[..., N]``; padded items 0; undefined lists (zero total target): 0, invalid.
    ``browsing`` defaults to ``RBP(0.9)``.

    Example::

        >>> individual_misallocation(torch.tensor([2., 1.]), torch.tensor([0., 1.]), browsing="uniform")
        tensor([-1.,  1.])
    """
    F = get_browsing(browsing, RBP(0.9))
    b, ob = _setup(scores, relevance, None, mask, None, ordering, validate_args)
    e = _exposure(b, ob, F)
    t = _item_targets(b, F, target)
    c, valid = safe_div(t, t.sum(-1, keepdim=True))
    M = torch.where(valid, c * e.sum(-1, keepdim=True) - e, torch.zeros_like(e)) * b.mask.to(e.dtype)
    valid = valid.squeeze(-1)
    M, valid = b.out(M), b.out(valid)
    return (M, valid) if return_valid else M


# ----------------------------------------------------------------------------------------- expected exposure
class ExpectedExposure(NamedTuple):
    """Result of :func:`expected_exposure`, each ``[...]`` (per list, or reduced)."""

    #: EE-L ``||eps - eps*||^2`` (``002`` eq. 9): 0 is ideal
    loss: Tensor
    #: EE-D ``||eps||^2`` (``002`` eq. 5): inequality of exposure, lower is more equal
    disparity: Tensor
    #: EE-R ``eps . eps*`` (Diaz et al. / expeval convention; ``002`` eq. 10 doubles it): higher is better
    relevance: Tensor
    #: ``||eps*||^2``, so that ``loss == disparity - 2 * relevance + target_norm``
    target_norm: Tensor


def expected_exposure(scores: Optional[Tensor], relevance: Tensor, groups: Optional[Tensor] = None, *,
                      browsing: BrowsingLike = None, mask: Optional[Tensor] = None,
                      num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
                      validate_args: bool = True) -> ExpectedExposure:
    r"""Expected exposure metrics (Diaz et al.; ``002`` eq. 5, 9, 10).

    .. math:: \mathrm{EE\text{-}L} = \|\epsilon - \epsilon^*\|_2^2, \quad \mathrm{EE\text{-}D} = \|\epsilon\|_2^2,
              \quad \mathrm{EE\text{-}R} = \epsilon^\top \epsilon^*, \quad
              \mathrm{EE\text{-}L} = \mathrm{EE\text{-}D} - 2\,\mathrm{EE\text{-}R} + \|\epsilon^*\|_2^2

    ``eps`` is the expected exposure of the ordering (use ``ordering=Sampled(rankings)`` for a stochastic policy,
    ``002`` §2.3) and ``eps*`` the expected exposure under the ideal policy (all relevance-sorted rankings equally
    likely, :func:`ideal_exposure`).  Without ``groups`` both are item vectors (Diaz et al.'s individual
    version); with ``groups`` they are group vectors ``G(L)^T a_L`` (``002`` §2.3-2.4; items of unknown group
    are ranked but in no group).  Exposure is not normalised.  **EE-R convention**: ``eps . eps*`` as in Diaz et
    al. and expeval; Raj & Ekstrand (``002`` eq. 10 and their code) report ``2 eps . eps*``.  ``browsing``
    defaults to ``RBP(0.9)`` (``002`` table 1: RBP or cascade).  All values are always defined.

    Example (expeval's convention, see :mod:`torchfair.compat.expeval`)::

        >>> ee = expected_exposure(torch.tensor([4., 3., 2., 1.]), torch.tensor([1., 1., 0., 0.]), browsing=RBP(0.5))
        >>> ee.disparity, ee.relevance, ee.loss
        (tensor(1.3281), tensor(1.1953), tensor(0.1328))
    """
    F = get_browsing(browsing, RBP(0.9))
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
    return ExpectedExposure(*out)


# ------------------------------------------------------------------------------------------------------ IAA
def iaa(scores: Optional[Tensor], relevance: Tensor, groups: Optional[Tensor] = None, *,
        browsing: BrowsingLike = None, amortize: bool = True, mask: Optional[Tensor] = None,
        num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
        return_valid: bool = False, validate_args: bool = True):
    r"""Inequity of Amortized Attention (Biega et al.; ``002`` eq. 8).

    .. math:: \mathrm{IAA} = \big\| \bar\epsilon - \bar\Upsilon \big\|_1, \qquad
              \bar\epsilon = \frac{1}{L} \sum_{l} G(L_l)^\top \frac{a_{L_l}}{\sum_d a_{L_l}(d)}, \quad
              \bar\Upsilon = \frac{1}{L} \sum_l G(L_l)^\top \frac{y_l}{\sum_d y_l(d)}

    Attention and (estimated) utility ``relevance`` are normalised to sum to 1 in each ranking (Biega et al.) and
    amortised over the sequence of rankings, which is the batch: the ``B`` lists (``amortize=True``, default,
    returns a scalar; multiply by the number of lists for Biega et al.'s cumulative sums) — or each list alone
    (``amortize=False``, ``[...]``, reduced by ``reduction``).  Without ``groups`` the comparison is per item, so
    column ``i`` must be the same item in every list.  Lists with no utility or no exposure are skipped (invalid).
    Items of unknown group count in the normalisation but in no group.  ``browsing`` defaults to
    ``Geometric(0.5)`` (``002`` table 1).

    Example::

        >>> iaa(torch.tensor([[2., 1.], [1., 2.]]), torch.tensor([[1., 1.], [1., 1.]]), browsing="uniform")
        tensor(0.)
    """
    F = get_browsing(browsing, Geometric(0.5))
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
    return (value, ok) if return_valid else value


# ----------------------------------------------------------------------------------------------------- AWRF
_DISTANCES = ("nd", "rd", "kl")


def _target_distribution(target, b: Batch, name: str = "target") -> Tensor:
    memb = b.membership
    B, _, G = memb.shape
    dt = memb.dtype
    if target is None or (isinstance(target, str) and target == "equal"):
        return torch.full((B, G), 1.0 / G, dtype=dt, device=memb.device)
    if isinstance(target, str) and target == "list":
        p, _ = safe_div(memb.sum(1), memb.sum((1, 2))[:, None])
        return p
    if not isinstance(target, Tensor) or target.shape not in ((G,), (B, G)):
        raise ValueError(f"`{name}` must be None/'equal', 'list', or a tensor of shape [G] = [{G}] or "
                         f"[B, G] = [{B}, {G}] (a distribution over groups); got "
                         f"{tuple(target.shape) if isinstance(target, Tensor) else target!r}")
    p = target.to(dt).to(memb.device).expand(B, G)
    if not torch.isfinite(p).all() or (p < 0).any() or not torch.allclose(p.sum(-1), torch.ones((), dtype=dt),
                                                                         atol=1e-4):
        raise ValueError(f"`{name}` must be a probability distribution over the G groups (non-negative, sums to 1)")
    return p


def awrf(scores: Optional[Tensor], groups: Tensor, *, target: Union[str, Tensor, None] = None,
         distance: str = "nd", protected: Optional[int] = None, browsing: BrowsingLike = None,
         mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
         reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Attention-Weighted Rank Fairness (Sapiezynski et al.; ``002`` eq. 3 with the distances of table 4).

    .. math:: \mathrm{AWRF}_\Delta(L) = \Delta(\epsilon_L, \hat p), \qquad \epsilon_L = G(L)^\top a_L / \textstyle\sum

    ``eps_L`` is the distribution of exposure over the (known) groups and ``hat p`` the ``target``: ``None`` or
    ``"equal"`` (uniform, ``002``'s AWRF_equal), ``"list"`` (the group composition of the list), or a tensor
    ``[G]`` / ``[B, G]`` (e.g. the population of providers).  ``distance``:

    * ``"nd"``: ``|eps_g - p_g|`` (table 4's binomial difference) for each group g taken as protected;
    * ``"rd"``: ``|eps_g / (1 - eps_g) - p_g / (1 - p_g)|`` (binomial ratio difference; undefined when a share is 1);
    * ``"kl"``: ``KL(eps || p) = sum_g eps_g log(eps_g / p_g)`` (multinomial; undefined if ``p_g = 0 < eps_g``).

    ``"nd"``/``"rd"`` return ``[..., G]``, or ``[...]`` for one ``protected`` group id; ``"kl"`` returns ``[...]``.
    Soft membership and any G are allowed.  Items of unknown group (-1) take positions but their exposure is left
    out of ``eps_L`` (``002`` §2.6).  ``browsing`` defaults to ``Geometric(0.5)`` (``002`` table 1).
    Undefined (no exposure on known groups, or the cases above): 0, invalid.

    Example::

        >>> awrf(torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="uniform", protected=1)
        tensor(0.)
    """
    if distance not in _DISTANCES:
        raise ValueError(f"`distance` must be one of {_DISTANCES}; got {distance!r}")
    F = get_browsing(browsing, Geometric(0.5))
    b, ob = _setup(scores, None, groups, mask, num_groups, ordering, validate_args, require_groups=True)
    G = b.num_groups
    if protected is not None and (not isinstance(protected, int) or not 0 <= protected < G):
        raise ValueError(f"`protected` must be a group id in [0, {G}); got {protected!r}")
    E = _gsum(b.membership, _exposure(b, ob, F))
    eps, valid = safe_div(E, E.sum(-1, keepdim=True))  # valid [B, 1]
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
        value = (eps - p).abs()
        valid = valid.expand_as(value)
    else:
        re, v1 = safe_div(eps, 1 - eps)
        rp, v2 = safe_div(p, 1 - p)
        value = (re - rp).abs()
        valid = valid & v1 & v2
    value = torch.where(valid, value, torch.zeros_like(value))
    if protected is not None:
        value, valid = value[..., protected], valid[..., protected]
    return finish(b, value, valid, reduction, return_valid)


# ------------------------------------------------------------------------------------------ DP / EUR / RUR
def _ratio(kind: str, log: bool, scores, relevance, groups, protected, reference, browsing, amortize, mask,
           num_groups, ordering, reduction, return_valid, validate_args):
    F = get_browsing(browsing, Logarithmic())
    b, ob = _setup(scores, relevance, groups, mask, num_groups, ordering, validate_args,
                   require_relevance=kind != "dp", require_groups=True)
    G = b.num_groups
    if G < 2:
        raise ValueError(f"`groups` must have at least 2 groups for {kind}; got {G}")
    if not isinstance(protected, int) or not 0 <= protected < G:
        raise ValueError(f"`protected` must be a group id in [0, {G}); got {protected!r}")
    if reference is not None and (not isinstance(reference, int) or not 0 <= reference < G or reference == protected):
        raise ValueError(f"`reference` must be a group id in [0, {G}) other than `protected`; got {reference!r}")
    memb = b.membership
    mp = memb[..., protected]
    mr = memb[..., reference] if reference is not None else memb.sum(-1) - mp  # known items outside `protected`
    e = _exposure(b, ob, F)
    if kind == "dp":
        x, y = e, b.mask.to(e.dtype)  # mean exposure per group
    elif kind == "eur":
        x, y = e, b.relevance
    else:
        x, y = e * b.relevance, b.relevance
    parts = torch.stack([(x * mp).sum(-1), (y * mp).sum(-1), (x * mr).sum(-1), (y * mr).sum(-1)], -1)  # [B, 4]
    if amortize:
        parts = parts.sum(0, keepdim=True)
    xp, yp, xr, yr = parts.unbind(-1)
    valid = (yp > 0) & (yr > 0) & (xr > 0)
    if log:
        valid = valid & (xp > 0)
        one = torch.ones_like(xp)
        lg = lambda t: torch.log(torch.where(valid, t, one))  # noqa: E731
        value = lg(xp) - lg(yp) - lg(xr) + lg(yr)
    else:
        one = torch.ones_like(xp)
        value = (xp * torch.where(valid, yr, one)) / torch.where(valid, yp * xr, one)
    value = torch.where(valid, value, torch.zeros_like(value))
    if amortize:
        value, valid = value[0], valid[0]
        return (value, valid) if return_valid else value
    return finish(b, value, valid, reduction, return_valid)


_RATIO_DOC = r"""

    ``protected`` (default 1) is ``G+``; ``reference`` is ``G-`` (default: every known item outside ``protected``,
    so any number of groups and soft membership work).  ``amortize=False`` (default): per list, ``[...]``,
    reduced by ``reduction``; ``amortize=True``: the batch is one sequence of rankings (``002`` §2.3,
    ``eps_pi = E[eps_L]``): the group sums are added over the lists before the ratio, giving a scalar.
    ``browsing`` defaults to ``Logarithmic()`` (``002`` table 1).  Undefined (a zero denominator; for the log
    version also a zero numerator): 0, invalid."""


def dp(scores: Optional[Tensor], groups: Tensor, *, protected: int = 1, reference: Optional[int] = None,
       browsing: BrowsingLike = None, amortize: bool = False, mask: Optional[Tensor] = None,
       num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
       return_valid: bool = False, validate_args: bool = True):
    r"""Demographic parity ratio (Singh & Joachims; ``002`` eq. 4).

    .. math:: \mathrm{DP} = \frac{\epsilon(G^+) / |G^+|}{\epsilon(G^-) / |G^-|}

    the ratio of the mean exposure of the protected group's items to the reference group's (Singh & Joachims'
    per-item average exposure; 1 is parity).""" + _RATIO_DOC + r"""

    Example::

        >>> dp(torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(0.5000)
    """
    return _ratio("dp", False, scores, None, groups, protected, reference, browsing, amortize, mask, num_groups,
                  ordering, reduction, return_valid, validate_args)


def eur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, *, protected: int = 1,
        reference: Optional[int] = None, browsing: BrowsingLike = None, amortize: bool = False,
        mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
        reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Exposed utility ratio (Singh & Joachims' disparate treatment ratio; ``002`` eq. 6).

    .. math:: \mathrm{EUR} = \frac{\epsilon(G^+) / \Upsilon(G^+)}{\epsilon(G^-) / \Upsilon(G^-)},
              \qquad \Upsilon(G) = \sum_{d \in G} y(d)

    (group exposure per unit of utility; ``002``'s ``1/|G|`` in ``Upsilon`` cancels when exposure is averaged over
    the group as well, as in Singh & Joachims).  1 is parity.""" + _RATIO_DOC + r"""

    Example::

        >>> eur(torch.tensor([2., 1.]), torch.tensor([2., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(1.)
    """
    return _ratio("eur", False, scores, relevance, groups, protected, reference, browsing, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


def rur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, *, protected: int = 1,
        reference: Optional[int] = None, browsing: BrowsingLike = None, amortize: bool = False,
        mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
        reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Realized utility ratio (Singh & Joachims' disparate impact ratio; ``002`` eq. 7).

    .. math:: \mathrm{RUR} = \frac{\Gamma(G^+) / \Upsilon(G^+)}{\Gamma(G^-) / \Upsilon(G^-)},
              \qquad \Gamma(G) = \sum_{d \in G} E[a_L(d)]\, y(d)

    1 is parity.""" + _RATIO_DOC + r"""

    Example::

        >>> rur(torch.tensor([2., 1.]), torch.tensor([1., 1.]), torch.tensor([0, 1]), browsing="reciprocal")
        tensor(0.5000)
    """
    return _ratio("rur", False, scores, relevance, groups, protected, reference, browsing, amortize, mask,
                  num_groups, ordering, reduction, return_valid, validate_args)


def log_dp(scores: Optional[Tensor], groups: Tensor, **kwargs):
    """``log(DP)`` (``002`` table 1's logDP; 0 is parity). Arguments as :func:`dp`."""
    return _ratio("dp", True, scores, None, groups, *_ratio_kwargs(kwargs))


def log_eur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, **kwargs):
    """``log(EUR)`` (``002`` table 1's logEUR; 0 is parity). Arguments as :func:`eur`."""
    return _ratio("eur", True, scores, relevance, groups, *_ratio_kwargs(kwargs))


def log_rur(scores: Optional[Tensor], relevance: Tensor, groups: Tensor, **kwargs):
    """``log(RUR)`` (``002`` table 1's logRUR; 0 is parity). Arguments as :func:`rur`."""
    return _ratio("rur", True, scores, relevance, groups, *_ratio_kwargs(kwargs))


_RATIO_DEFAULTS = dict(protected=1, reference=None, browsing=None, amortize=False, mask=None, num_groups=None,
                       ordering=None, reduction="none", return_valid=False, validate_args=True)


def _ratio_kwargs(kwargs):
    unknown = set(kwargs) - set(_RATIO_DEFAULTS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    merged = {**_RATIO_DEFAULTS, **kwargs}
    return [merged[k] for k in _RATIO_DEFAULTS]


# ---------------------------------------------------------------------------------------------------- expRR
def exp_rr(scores: Optional[Tensor], groups: Tensor, *, browsing: BrowsingLike = None,
           mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
           reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Exposure parity ``exp`` (Singh & Joachims, as in Kuhlman et al. ``001`` eq. 6-7; expRR with ``v(k) = 1/k``).

    .. math:: \exp_{G_p} = \frac{S}{|G_p|} \sum_{x \in G_p} v(\rho(x)), \qquad \exp = |1 - 2 \exp_{G_p}|

    with ``S`` such that the mean exposures of ``G_p`` and of the rest sum to 1, i.e.
    ``exp_{G_p} = m_p / (m_p + m_rest)``.  ``[..., G]``: entry g takes g as the protected group and every other
    known item as the rest (items of unknown group are in neither).  0 is parity, 1 total advantage of one side.
    ``browsing`` defaults to ``ReciprocalRank()`` (``v(k) = 1/k`` for 1-based ``k``).  With
    ``ordering=DoublyStochastic(R)`` exposure is ``E[v(rank)]`` (``001`` §3.1 plugs ``E[rank]`` into ``v``).
    Undefined (g or the rest absent): 0, invalid.

    Example::

        >>> exp_rr(torch.tensor([2., 1.]), torch.tensor([0, 1]))
        tensor([0.3333, 0.3333])
    """
    F = get_browsing(browsing, ReciprocalRank())
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
    value = torch.where(valid, (1 - 2 * share).abs(), torch.zeros_like(share))
    return finish(b, value, valid, reduction, return_valid)
