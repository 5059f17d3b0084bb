r"""The prefix family: rND, rRD, rKL, PreF_Delta, skew@k, NDKL and FAIR.

Every measure here looks at the group composition of prefixes (top-i lists) of the ranking.  It is written once
against an ordering (:mod:`torchfair.orderings`): the expected mass of group g among the first i positions is

.. math:: C[b, i, g] = \sum_{k < i} \sum_j R[b, k, j]\, a_{jg}

with ``R = ordering.position_matrix()`` (one-hot for a hard ranking, doubly stochastic for a soft or stochastic
ordering, Kuhlman et al., AIES 2021, eq. 10-13) and ``a`` the group membership.  With the default ``ordering=Hard()``
the values are exact; a relaxed ordering gives the expectation forms of Kuhlman et al., AIES 2021, eq. 12-17 from the
same code.

Stochastic orderings.  On a mixture of rankings (``Sampled``, ``PlackettLuce``) every prefix measure is the measure
of the *expected prefix composition* ``C`` (Kuhlman et al., AIES 2021, eq. 12-17), not the mean of the per-ranking
values: the distances are non-linear in ``C`` (absolute values, KL divergences, logarithms, the binomial CDF).  For the
convex ones (rND, rRD, rKL, PreF, NDKL) it is at most the mean of the per-ranking values, and 0 when every ranking
is fair.  For the mean of per-ranking values evaluate each ranking with ``Hard()`` and average.  The normalised
measures stay in [0, 1] on mixtures of rankings (rRD, whose ratio is not convex in the composition, up to its
continuation at ``|G-| < 1``); relaxed orderings (``SoftRank``'s position matrix is an approximately doubly
stochastic Gaussian fit) give smooth approximations that can leave the range slightly.

Common arguments
----------------
scores : ``[B, N]`` or ``[N]`` float.
groups : ``[B, N]`` int ids in ``[0, G)`` (``-1`` = unknown: it takes a position but belongs to no group) or, where
    the measure allows it (rKL, PreF_KL, NDKL, skew), ``[B, N, G]`` soft membership whose rows sum to at most 1.
protected : the protected group id of the binomial measures (rND, rRD, rKL, PreF_ND/RD, FAIR); every other item,
    unknown ones included, is "non-protected" (Raj & Ekstrand, SIGIR 2022, §2.1: ``G-(L)`` is the remaining documents).
step : cut-offs ``i = step, 2 step, ...  <= n`` (Yang & Stoyanovich use 10, 20, 30, ...).
k : the largest cut-off that counts (top-k evaluation: only prefixes of length ``<= k``; for the normalised measures
    ``Z`` is the maximum of the same truncated sum); ``None`` (default) = the whole list.  skew@k's ``k`` is the
    length of the one prefix it looks at.
target : the group distribution a prefix is compared with: ``None`` or ``"list"`` (the list's own composition, the
    default), ``"equal"`` (every group the same share), or numbers (see each measure).
mask, num_groups, ordering, reduction, return_valid, validate_args : as in :mod:`torchfair.metrics.pairwise`.

Conventions
-----------
* Discount of cut-off ``i``: ``1 / log2(i)`` (Kuhlman et al., AIES 2021, eq. 1, Raj & Ekstrand, SIGIR 2022, eq. 1).
  ``log2(1) = 0``, so a cut-off at 1 (``step=1``) is weighted ``1 / log2(max(i, 2))`` = 1, like Raj & Ekstrand, SIGIR
  2022, table 3's logarithmic model; for ``step >= 2`` this is exactly the published discount.
* Logarithms are natural (Kuhlman et al., AIES 2021, eq. 16-17).
* Normaliser ``Z`` of rND/rRD/rKL/PreF: the exact maximum of the unnormalised sum over *all* rankings of the same
  length and group composition (Raj & Ekstrand, SIGIR 2022, eq. 1), so values lie in [0, 1] and 1 is attained.  It is
  computed by an exact dynamic programme over prefix compositions (longest path through the lattice of count vectors),
  on the CPU, once per distinct composition (cached).  Published implementations approximate ``Z`` instead: from
  generated (simulated) unfair rankings, or, as Raj & Ekstrand, SIGIR 2022, §5 calls "the straightforward way", by
  putting all protected items last.  Neither is exact in general: for rRD the maximum is *not* attained by putting one
  group first or last (e.g. 8 items, 2 protected, step 2: ``P N P N N N N N`` beats both block rankings); for rND and
  rKL a block ranking was maximal in every case we enumerated (N <= 8, step 1-3, and N <= 80 with step 10
  against the DP) but the DP does not rely on it.
  ``normalize=False`` returns the unnormalised sum.  The state space is ``prod_t (n_t + 1)`` over distinct
  membership rows ``t``; above ``MAX_NORMALISER_STATES`` a ``ValueError`` asks for ``normalize=False``.
* Undefined values (no cut-off inside the list, ``Z = 0``, a group absent from the top-k for skew) are 0 and
  flagged ``False`` in the validity mask.  Nothing returns NaN.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _linalg
from .._validation import (Batch, check_choice, check_group_id, check_int, check_number, check_reduction, pad_groups,
                           prepare, require)
from ..orderings.base import OrderingLike
from ..orderings import OrderedBatch
from .common import (check_bool, check_k, check_soft_group_id, check_target_string, clamp_rounding, finish, order,
                      precise_dtype, safe_div, safe_log)

__all__ = ["rnd", "rrd", "rkl", "pref", "skew", "ndkl", "fair", "prefix_mass", "MAX_NORMALISER_STATES", "fa_ir_test",
           "fa_ir_mtable", "fa_ir_adjusted_alpha", "FaIrTest"]

TargetLike = Union[float, Tensor, str, None]

#: largest DP state space (number of prefix count vectors) the exact normaliser accepts
MAX_NORMALISER_STATES = 2 ** 22

_DELTAS = ("nd", "rd", "kl")

#: accepted target strings: ``"list"`` the list's own group composition (the default), ``"equal"`` equal shares
_TARGET_STRINGS = ("list", "equal")

#: a normaliser ``Z <= Z_TOLERANCE * eps * (sum of the cut-off discounts)`` (``eps`` of the working dtype, in which
#: the target is given) is 0 up to rounding: the value is undefined
Z_TOLERANCE = 64.0


# ---------------------------------------------------------------------------------------------------- helpers
def prefix_mass(ordered: OrderedBatch, membership: Tensor) -> Tensor:
    r"""``C[b, i, g]``: expected mass of group g among the first ``i + 1`` positions (Kuhlman et al., AIES 2021,
    eq. 10-13).

    .. math:: C_{b,i,g} = \sum_{k \le i} \sum_j R_{b,k,j}\, a_{b,j,g}

    ``ordered`` an :class:`~torchfair.orderings.OrderedBatch` (``R = ordered.position_matrix()``), ``membership``
    ``[B, N, G]``; returns ``[B, N, G]``, rows ``i >= n_b`` hold the list totals.

    Example::

        >>> from torchfair.orderings import Hard
        >>> ob = Hard()(torch.tensor([[3., 1., 2.]]), torch.ones(1, 3, dtype=torch.bool))
        >>> prefix_mass(ob, torch.tensor([[[1., 0.], [0., 1.], [1., 0.]]]))[0]
        tensor([[1., 0.],
                [2., 0.],
                [2., 1.]])
    """
    if not isinstance(ordered, OrderedBatch):
        raise ValueError(f"`ordered` must be an OrderedBatch (e.g. Hard()(scores, mask)); got {type(ordered).__name__}")
    if not isinstance(membership, Tensor) or membership.dim() != 3 or membership.shape[:2] != ordered.mask.shape:
        raise ValueError(f"`membership` must be a tensor [B, N, G] with [B, N] = {tuple(ordered.mask.shape)}")
    R = ordered.position_matrix().to(membership.dtype)
    return torch.cumsum(_linalg.bmm(R, membership), dim=1)


def _cutoff_discount(lengths: Tensor) -> Tensor:
    """``1 / log2(max(i, 2))`` for cut-off lengths ``i`` (1-based prefix lengths)."""
    return 1.0 / torch.log2(lengths.clamp(min=2.0))


def _binary_columns(b: Batch, protected: int, name: str, validate: bool) -> Tensor:
    """``[B, N, 2]``: (protected, non-protected) membership; unknown items count as non-protected."""
    check_group_id(protected, "protected")  # against the caller's num_groups in the public functions
    p = pad_groups(b.membership, protected + 1)[..., protected]
    rest = b.mask.to(p.dtype) - p
    return torch.stack([p, rest], dim=-1)


def _require_hard(groups: Tensor, measure: str):
    if isinstance(groups, Tensor) and groups.is_floating_point():
        raise ValueError(f"`groups` must be integer group ids [B, N] for {measure} (a binomial measure needs "
                         f"definitive membership, Raj & Ekstrand, SIGIR 2022, §5); soft membership is supported "
                         f"by rkl, pref(delta='kl'), ndkl and skew")


def _binary_target(target: TargetLike, b: Batch, default: Tensor, name: str, open_interval: bool,
                   validate: bool) -> Tensor:
    """Scalar protected-group probability per list, ``[B]``."""
    B = b.mask.shape[0]
    check_target_string(target, _TARGET_STRINGS)
    if target is None or target == "list":
        return default
    if target == "equal":  # the protected group's share when every group is equally represented
        return torch.full((B,), 1.0 / b.num_groups, dtype=b.scores.dtype, device=b.scores.device)
    if not isinstance(target, (Tensor, int, float)) or isinstance(target, bool):
        raise ValueError(f"`{name}` must be a float, a tensor [B] = [{B}] of protected-group probabilities, "
                         f"'list' or 'equal'; got {target!r}")
    # checked where it lives (a Python number on the CPU: no synchronisation), then moved to the scores' device
    t = torch.as_tensor(target, dtype=b.scores.dtype)
    if t.dim() == 0:
        t = t.expand(B)
    elif t.dim() != 1 or t.shape[0] != B:
        raise ValueError(f"`{name}` must be a float or a tensor [B] = [{B}] of protected-group probabilities; "
                         f"got shape {tuple(t.shape)}")
    if validate or not isinstance(target, Tensor):
        rng = "(0, 1)" if open_interval else "[0, 1]"

        def ok() -> Tensor:
            lo_ok = (t > 0) if open_interval else (t >= 0)
            hi_ok = (t < 1) if open_interval else (t <= 1)
            return (torch.isfinite(t) & lo_ok & hi_ok).all()

        require(ok, f"`{name}` must be a probability in {rng}; ", t.device,
                lambda: f"got {target!r}")
    return t.detach().to(b.scores.device)


def _multinomial_target(target: TargetLike, b: Batch, default: Tensor, name: str, validate: bool) -> Tensor:
    """Target distribution over groups per list, ``[B, G]`` (strictly positive where given, sums to 1)."""
    B, G = b.mask.shape[0], default.shape[-1]
    check_target_string(target, _TARGET_STRINGS)
    if target is None or target == "list":
        return default
    if target == "equal":
        return torch.full((B, G), 1.0 / G, dtype=b.scores.dtype, device=b.scores.device)
    if not isinstance(target, Tensor) and not isinstance(target, (list, tuple)):
        raise ValueError(f"`{name}` must be a distribution over the {G} groups ([G] or [B, G]), 'list' or "
                         f"'equal'; got {target!r}")
    t = torch.as_tensor(target, dtype=b.scores.dtype)  # a list stays on the CPU for the check
    if t.dim() == 1 and t.shape[0] == G:
        t = t.expand(B, G)
    elif t.shape != (B, G):
        raise ValueError(f"`{name}` must be a distribution over the {G} groups: shape [G] or [B, G] = [{B}, {G}]; "
                         f"got {tuple(t.shape)}")
    if validate or not isinstance(target, Tensor):
        require(lambda: (torch.isfinite(t) & (t > 0)).all() & ((t.sum(-1) - 1).abs() <= 1.1e-4).all(),
                f"`{name}` must hold strictly positive probabilities summing to 1 (KL to a zero target "
                f"probability is infinite); ", t.device, lambda: f"got {target!r}")
    return t.detach().to(b.scores.device)


# ---------------------------------------------------------------------------------------------------- distances
# Each distance maps prefix masses ``m [..., G']``, prefix lengths ``i [...]`` and a target to ``[...]``.
# The same function scores the ranking and the states of the exact normaliser.

def _delta_nd(m: Tensor, i: Tensor, t: Tensor) -> Tensor:
    """``|G+(L<=i)| / i - p|`` (Raj & Ekstrand, SIGIR 2022, table 4; Kuhlman et al., AIES 2021, eq. 2); column 0
    is the protected mass."""
    return (m[..., 0] / i - t).abs()


def _delta_rd(m: Tensor, i: Tensor, t: Tensor) -> Tensor:
    """``| |G+| / |G-| - p / (1 - p) |`` (Raj & Ekstrand, SIGIR 2022, table 4; Kuhlman et al., AIES 2021, eq. 3);
    ratio := 0 when ``|G-(L<=i)| = 0``.

    For the fractional prefix counts of stochastic and relaxed orderings the ratio is continued linearly between
    ``|G-| = 1`` (ratio ``i - 1``, the largest an integer prefix has) and ``|G-| = 0`` (ratio 0), so that it stays
    continuous and bounded instead of exploding as ``|G-| -> 0``; integer counts are unchanged."""
    neg = i - m[..., 0]
    big = neg >= 1
    ratio = torch.where(big, m[..., 0] / torch.where(big, neg, torch.ones_like(neg)),
                        (i - 1).clamp(min=0) * neg.clamp(min=0))
    odds, _ = safe_div(t, 1 - t)  # t = 1 (no non-protected item) is flagged invalid by the caller
    return (ratio - odds).abs()


def _delta_kl(m: Tensor, i: Tensor, t: Tensor) -> Tensor:
    """``D_KL(p(L<=i) || p)`` with ``p(L<=i) = m / sum(m)`` (Raj & Ekstrand, SIGIR 2022, table 4; Kuhlman et al., AIES
    2021, eq. 5, 17); 0 for no mass."""
    tot = m.sum(-1, keepdim=True)
    P, _ = safe_div(m, tot.expand_as(m))
    t = t.expand_as(P)
    # 0 log 0 = 0 with a zero (not NaN) gradient: both logs see 1 where P = 0 (torch.xlogy's gradient is NaN there)
    pos = P > 0
    one = torch.ones_like(P)
    logratio = torch.log(torch.where(pos, P, one)) - torch.log(torch.where(pos & (t > 0), t, one))
    kl = torch.where(pos, P * logratio, torch.zeros_like(P)).sum(-1)
    return torch.where(tot[..., 0] > 0, kl, torch.zeros_like(kl)).clamp(min=0)


_DELTA_FN: Dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {"nd": _delta_nd, "rd": _delta_rd,
                                                                    "kl": _delta_kl}


# ---------------------------------------------------------------------------------------------------- exact Z
_Z_CACHE: Dict[tuple, float] = {}
_Z_CACHE_SIZE = 4096


def _max_over_rankings(types: Tensor, counts: Tuple[int, ...], step: int, delta: str, target: Tensor,
                       last: Optional[int] = None) -> float:
    """Exact ``max over arrangements of sum_{i = step, 2 step, ... <= last} delta(prefix_i) / log2(max(i, 2))``.

    ``types [T, G']`` are the distinct membership rows of the list (float64, CPU), ``counts`` their multiplicities.
    Dynamic programme over count vectors ``c`` (how many items of each type the prefix holds): a ranking is a
    monotone lattice path from 0 to ``counts`` and the sum only depends on the states at the cut-off layers, so
    ``V(c) = term(c) + max_t V(c - e_t)`` and ``Z = V(counts)``.  Exact, ``O(T prod_t (n_t + 1))``.
    ``last`` (default: the list length) is the largest cut-off that counts (the measures' ``k``).
    """
    shape = [c + 1 for c in counts]
    size = math.prod(shape)
    if size > MAX_NORMALISER_STATES:
        raise ValueError(f"the exact normaliser needs {size} states (> MAX_NORMALISER_STATES = "
                         f"{MAX_NORMALISER_STATES}) for this group composition; pass normalize=False")
    n = sum(counts)
    last = n if last is None else min(last, n)
    fn = _DELTA_FN[delta]
    T = len(counts)
    axes = [torch.arange(s, dtype=torch.int32) for s in shape]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(size, T)  # C order
    strides = [math.prod(shape[t + 1:]) for t in range(T)]
    layer = coords.sum(-1)
    perm = torch.argsort(layer, stable=True)
    bounds = torch.cumsum(torch.bincount(layer.long(), minlength=n + 1), 0).tolist()
    V = torch.full((size,), float("-inf"), dtype=torch.float64)
    V[0] = 0.0
    neg_inf = torch.tensor(float("-inf"), dtype=torch.float64)
    for s in range(1, n + 1):
        idx = perm[bounds[s - 1]:bounds[s]]
        c = coords[idx]
        best = torch.full((idx.numel(),), float("-inf"), dtype=torch.float64)
        for t in range(T):
            ok = c[:, t] >= 1
            prev = torch.where(ok, idx - strides[t], torch.zeros_like(idx))
            best = torch.maximum(best, torch.where(ok, V[prev], neg_inf))
        if s % step == 0 and s <= last:
            m = c.to(torch.float64) @ types
            i = torch.full((idx.numel(),), float(s), dtype=torch.float64)
            best = best + fn(m, i, target) / math.log2(max(s, 2))
        V[idx] = best
    return float(V[size - 1])


def _exact_normaliser(cols: Tensor, mask: Tensor, step: int, delta: str, target: Tensor,
                      need: Optional[Tensor] = None, last: Optional[int] = None) -> Tensor:
    """``Z [B]``: exact maximum over all rankings of each list's items (same length and composition).

    Lists where ``need`` is False (no cut-off inside the list, or a fully padded list) get ``Z = 0``."""
    B = cols.shape[0]
    cols64 = cols.detach().to("cpu", torch.float64)
    mask_c = mask.to("cpu")
    need_c = mask_c.any(-1) if need is None else (need.to("cpu") & mask_c.any(-1))
    tgt = target.detach().to("cpu", torch.float64)
    out = []
    for b in range(B):
        if not bool(need_c[b]):
            out.append(0.0)
            continue
        rows = cols64[b][mask_c[b]]
        types, counts = torch.unique(rows, dim=0, return_counts=True)
        counts_t = tuple(int(c) for c in counts.tolist())
        n_b = sum(counts_t)
        last_b = n_b if last is None else min(last, n_b)
        key = (delta, step, last_b, tuple(types.flatten().tolist()), types.shape[1], counts_t,
               tuple(tgt[b].flatten().tolist()))
        z = _Z_CACHE.get(key)
        if z is None:
            z = _max_over_rankings(types, counts_t, step, delta, tgt[b], last_b)
            if len(_Z_CACHE) >= _Z_CACHE_SIZE:
                _Z_CACHE.pop(next(iter(_Z_CACHE)))
            _Z_CACHE[key] = z
        out.append(z)
    return torch.tensor(out, dtype=precise_dtype(cols.device, cols.dtype), device=cols.device)


# ---------------------------------------------------------------------------------------------------- core
def _prefix_sum(b: Batch, ordering: OrderingLike, cols: Tensor, delta: str, target: Tensor, step: int,
                normalize: bool, k: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """``(1/Z) sum_{i = step, 2 step, ... <= min(n, k)} delta(L<=i, target) / log2(i)`` and its validity, ``[B]``.

    The value is undefined (0, invalid) for a list without a cut-off and, normalised, when ``Z`` is 0 up to
    rounding (``Z <= Z_TOLERANCE * eps * sum of the discounts``: e.g. the only cut-off is the whole list, whose
    composition is the target).  Valid normalised values are in ``[0, 1]``: ``Z`` is the exact maximum, and the
    value of any ordering is at most ``Z`` (a doubly stochastic ordering is a mixture of rankings and every
    distance is convex in the prefix composition), so only rounding is clamped."""
    ob = order(b, ordering)
    B, N = b.mask.shape
    n = b.mask.sum(-1)
    last = n if k is None else n.clamp(max=k)
    J = N // step
    wd = cols.dtype
    if J == 0:
        z = torch.zeros(B, dtype=wd, device=cols.device)
        return z, torch.zeros(B, dtype=torch.bool, device=cols.device)
    # the distances and their sum in float64 (where the device has it): a normaliser can be small, and float32
    # rounding of the prefix sums (~1e-7) would then show in the ratio
    hd = precise_dtype(cols.device, wd)
    C = prefix_mass(ob, cols).to(hd)  # [B, N, G']
    lengths = step * torch.arange(1, J + 1, device=cols.device)
    Cj = C[:, lengths - 1, :]  # [B, J, G']
    lf = lengths.to(hd)
    target = target.to(hd)
    tgt = target[:, None] if target.dim() == 1 else target[:, None, :]
    d = _DELTA_FN[delta](Cj, lf[None, :].expand(B, J), tgt)
    inside = lengths[None, :] <= last[:, None]
    disc = _cutoff_discount(lf)[None, :] * inside.to(d.dtype)
    raw = (d / torch.log2(lf.clamp(min=2.0))[None, :] * inside.to(d.dtype)).sum(-1)  # divided, as in the DP
    has_cut = inside.any(-1)
    if not normalize:
        return torch.where(has_cut, raw, torch.zeros_like(raw)).to(wd), has_cut
    Z = _exact_normaliser(cols, b.mask, step, delta, target, need=has_cut, last=k).to(hd)
    valid = has_cut & (Z > Z_TOLERANCE * torch.finfo(wd).eps * disc.sum(-1))
    value, _ = safe_div(raw, torch.where(valid, Z, torch.zeros_like(Z)))
    value = clamp_rounding(value.to(wd), 0.0, 1.0)
    return torch.where(valid, value, torch.zeros_like(value)), valid


def _precise(x: Tensor) -> Tensor:
    return x.to(precise_dtype(x.device, x.dtype))


def _default_binary_target(cols: Tensor, mask: Tensor) -> Tensor:
    n = mask.sum(-1).to(cols.dtype)
    return cols[..., 0].sum(-1) / n.clamp(min=1)


def _default_multinomial_target(memb: Tensor) -> Tensor:
    tot = memb.sum(1)  # [B, G]
    t, _ = safe_div(tot, tot.sum(-1, keepdim=True).expand_as(tot))
    return t


# ---------------------------------------------------------------------------------------------------- public
def pref(scores: Tensor, groups: Tensor, *, delta: str = "kl", protected: int = 1, target: TargetLike = None,
         step: int = 10, k: Optional[int] = None, normalize: bool = True, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
         return_valid: bool = False, validate_args: bool = True):
    r"""Prefix fairness PreF_Delta (Raj & Ekstrand, SIGIR 2022, eq. 1 with the distances of table 4; Yang &
    Stoyanovich 2017).

    .. math:: \mathrm{PreF}_\Delta(L) = \frac{1}{Z} \sum_{i = 10, 20, 30, \ldots}^{N} \frac{\Delta(L_{\le i}, \hat p)}{\log_2 i},
              \qquad Z = \max_{L'} \mathrm{PreF}'_\Delta(L', \hat p)

    over all ``L'`` with the same length and group composition (exact, see the module docstring).
    ``delta``: ``"nd"`` ``|G+(L<=i)|/i - p|``, ``"rd"`` ``| |G+|/|G-| - p/(1-p) |`` (ratio taken as 0 in a prefix
    without non-protected item) -- both binomial, ``protected`` vs the rest, ``target`` a probability (float or
    ``[B]``) -- or ``"kl"`` ``D_KL(p(L<=i) || p_hat)``, multinomial over all groups, soft membership allowed,
    ``target`` a distribution ``[G]`` or ``[B, G]``; items of unknown group (-1) take positions but are left out of
    the prefix distribution.  ``target`` defaults to the full ranking's composition (``"list"``, Yang &
    Stoyanovich); ``"equal"`` gives every group the same share (``1/G``; for ``"nd"``/``"rd"`` the protected
    group's share ``1/G``).  ``k`` keeps the cut-offs ``<= k`` (in the value and in ``Z``).  Range [0, 1], 0 = fair.
    Shape ``[B]`` (``[]``); with ``return_valid`` the pair ``(value, valid)``.  Undefined (no cut-off inside the
    list: shorter than ``step``, fully padded; or ``Z = 0`` up to rounding: a single group, or the only cut-off is
    the whole list with the default target): 0, flagged in ``valid``.  :func:`rnd`, :func:`rrd` are ``pref`` with
    ``delta="nd"``, ``"rd"``.

    Example (20 items, 5 protected (id 1); cut-offs 10 and 20, where Delta = 0; Z = abs(5/10 - 1/4) / log2 10)::

        >>> g = torch.tensor([1] * 5 + [0] * 15)
        >>> s = -torch.arange(20.)
        >>> pref(s, g, delta="nd")   # all protected first: |5/10 - 1/4| = Z log2 10
        tensor(1.)
        >>> pref(s.flip(0), g, delta="nd")   # all protected last: |0/10 - 1/4|, just as unfair
        tensor(1.)
        >>> pref(s, torch.tensor([1, 0] * 10), delta="nd", step=2)   # alternating groups: every even prefix at 1/2
        tensor(0.)
    """
    check_choice(delta, "delta", _DELTAS)
    step = check_int(step, "step", low=1)
    k = check_k(k)
    check_bool(normalize, "normalize")
    check_reduction(reduction)
    check_target_string(target, _TARGET_STRINGS)
    if delta != "kl":
        check_group_id(protected, "protected", num_groups)
        _require_hard(groups, f"pref(delta={delta!r})")
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    if delta == "kl":
        cols = b.membership
        t = _multinomial_target(target, b, _default_multinomial_target(_precise(cols)), "target", validate_args)
    else:
        cols = _binary_columns(b, protected, "groups", validate_args)
        t = _binary_target(target, b, _default_binary_target(_precise(cols), b.mask), "target", delta == "rd",
                           validate_args)
    value, valid = _prefix_sum(b, ordering, cols, delta, t, step, normalize, k)
    if delta == "rd":  # the full list's p/(1-p) is infinite when no item is non-protected
        valid = valid & (t < 1)
        value = torch.where(valid, value, torch.zeros_like(value))
    return finish(b, value, valid, reduction, return_valid)


def rnd(scores: Tensor, groups: Tensor, *, protected: int = 1, step: int = 10, k: Optional[int] = None,
        normalize: bool = True, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
        validate_args: bool = True):
    r"""Normalised discounted difference rND (Yang & Stoyanovich 2017; Kuhlman et al., AIES 2021, eq. 1-2, Raj &
    Ekstrand, SIGIR 2022, eq. 1 with ND).

    .. math:: \mathrm{rND} = \frac{1}{Z} \sum_{i=10,20,\ldots}^{N} \frac{1}{\log_2 i}
              \left| \frac{|S^+_{1..i}|}{i} - \frac{|S^+|}{N} \right|

    ``S+`` = items of group ``protected``; ``Z`` the exact maximum over rankings of the same composition.
    [0, 1], 0 = fair; ``[B]`` (``[]``), or ``(value, valid)`` with ``return_valid``.  ``k``: cut-offs ``<= k``.
    See :func:`pref` for the conventions.

    Example (10 items, 3 protected (id 1); cut-off 10 is the whole list, so add ``step=5``)::

        >>> g = torch.tensor([1, 0, 1, 0, 0, 0, 0, 1, 0, 0])
        >>> rnd(-torch.arange(10.), g, step=5)   # |2/5 - 3/10| / |3/5 - 3/10|
        tensor(0.3333)
    """
    _require_hard(groups, "rnd")
    return pref(scores, groups, delta="nd", protected=protected, step=step, k=k, normalize=normalize, mask=mask,
                num_groups=num_groups, ordering=ordering, reduction=reduction, return_valid=return_valid,
                validate_args=validate_args)


def rrd(scores: Tensor, groups: Tensor, *, protected: int = 1, step: int = 10, k: Optional[int] = None,
        normalize: bool = True, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
        validate_args: bool = True):
    r"""Normalised discounted ratio rRD (Yang & Stoyanovich 2017; Kuhlman et al., AIES 2021, eq. 1, 3, Raj & Ekstrand,
    SIGIR 2022, eq. 1 with RD).

    .. math:: \mathrm{rRD} = \frac{1}{Z} \sum_{i=10,20,\ldots}^{N} \frac{1}{\log_2 i}
              \left| \frac{|S^+_{1..i}|}{|S^-_{1..i}|} - \frac{|S^+|}{|S^-|} \right|

    The ratio of a prefix with no non-protected item is taken as 0.  ``Z`` is the exact maximum, which for rRD is in
    general *not* the all-protected-first or -last ranking (the module docstring gives an example).  Yang &
    Stoyanovich intend rRD for a minority protected group (Raj & Ekstrand, SIGIR 2022: "does not work when G- is
    small").  Undefined (0, invalid) when every item is protected.  [0, 1]; ``[B]`` (``[]``), or ``(value, valid)`` with
    ``return_valid``.  ``k``: cut-offs ``<= k``.

    Example (the one cut-off at 5 holds 2 protected and 3 others: ``|2/3 - 3/7|``; the maximum, 3 protected in the
    top 5, gives ``|3/2 - 3/7|``)::

        >>> g = torch.tensor([1, 0, 1, 0, 0, 0, 0, 1, 0, 0])
        >>> rrd(-torch.arange(10.), g, step=5)
        tensor(0.2222)
    """
    _require_hard(groups, "rrd")
    return pref(scores, groups, delta="rd", protected=protected, step=step, k=k, normalize=normalize, mask=mask,
                num_groups=num_groups, ordering=ordering, reduction=reduction, return_valid=return_valid,
                validate_args=validate_args)


def rkl(scores: Tensor, groups: Tensor, *, protected: int = 1, step: int = 10, k: Optional[int] = None,
        normalize: bool = True, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
        validate_args: bool = True):
    r"""Normalised discounted KL divergence rKL (Yang & Stoyanovich 2017; Kuhlman et al., AIES 2021, eq. 1, 5, 17).

    .. math:: \mathrm{rKL} = \frac{1}{Z} \sum_{i=10,20,\ldots}^{N} \frac{1}{\log_2 i}\, D_{KL}(P_i \,\|\, Q),
              \quad P_i = \Big(\frac{|S^+_{1..i}|}{i}, \frac{|S^-_{1..i}|}{i}\Big),\ Q = \Big(\frac{|S^+|}{N}, \frac{|S^-|}{N}\Big)

    Binary: ``protected`` against every other item (unknown ones included); natural logarithm.  Kuhlman et al., AIES
    2021, eq. 17 prints the second KL term with a minus sign; the KL divergence (used here) has a plus.  Soft membership
    ``[B, N, G]`` is allowed (column ``protected`` is the protected mass; ``protected >= G`` is a ``ValueError``).
    For the multi-group version use
    :func:`pref` with ``delta="kl"`` (equal to ``rkl`` for two groups and no unknown items).  ``Z`` exact.
    [0, 1]; ``[B]`` (``[]``), or ``(value, valid)`` with ``return_valid``.  ``k``: cut-offs ``<= k``.

    Example::

        >>> g = torch.tensor([1, 1, 0, 0])
        >>> rkl(torch.tensor([4., 3., 2., 1.]), g, step=2)   # the most unfair ranking
        tensor(1.)
        >>> rkl(torch.tensor([4., 2., 3., 1.]), g, step=2)   # a fair one: P_2 = Q
        tensor(0.)
    """
    step = check_int(step, "step", low=1)
    k = check_k(k)
    check_bool(normalize, "normalize")
    check_reduction(reduction)
    check_group_id(protected, "protected", num_groups)
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    check_soft_group_id(protected, "protected", groups, b)
    cols = _binary_columns(b, protected, "groups", validate_args)
    t = _default_binary_target(_precise(cols), b.mask)
    t2 = torch.stack([t, 1 - t], -1)
    value, valid = _prefix_sum(b, ordering, cols, "kl", t2, step, normalize, k)
    return finish(b, value, valid, reduction, return_valid)


def skew(scores: Tensor, groups: Tensor, *, k: int = 10, target: TargetLike = None, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
         return_valid: bool = False, validate_args: bool = True):
    r"""skew@k of every group (Geyik et al. 2019; Kuhlman et al., AIES 2021, eq. 4 and 16).

    .. math:: \mathrm{skew}_g@k = \ln \frac{P(x \in g \mid \rho(x) \le k)}{P(x \in g)}

    ``P(x in g | top k)`` = mass of g in the top ``min(k, n)`` positions / ``min(k, n)`` (a list shorter than k is
    its own top-k); ``P(x in g)`` = ``target`` (``[G]`` or ``[B, G]``, Geyik et al.'s desired proportion) or, by
    default, the group's share of the whole list (Kuhlman et al., AIES 2021).  Items of unknown group count in k and
    n.  Negative: g under-represented, 0: parity, positive: over-represented.  Soft membership allowed.  Shape ``[B,
    G]`` (``[G]``), or ``(value, valid)`` with ``return_valid``;
    undefined where the group is absent from the top-k (log 0) or from the target: 0, flagged in ``valid``.

    Example::

        >>> skew(torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 1, 1, 1]), k=2)   # ln((1/2)/(1/4)), ln((1/2)/(3/4))
        tensor([ 0.6931, -0.4055])
    """
    k = check_int(k, "k", low=1)
    check_reduction(reduction)
    check_target_string(target, _TARGET_STRINGS)
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    ob = order(b, ordering)
    memb = b.membership
    B, N = b.mask.shape
    n = b.mask.sum(-1)
    kk = n.clamp(max=k)
    C = prefix_mass(ob, memb)
    top = C.gather(1, (kk - 1).clamp(min=0)[:, None, None].expand(B, 1, memb.shape[-1]))[:, 0]  # [B, G]
    P = top / kk[:, None].to(top.dtype).clamp(min=1)
    if target is None or target == "list":
        Q = memb.sum(1) / n[:, None].to(top.dtype).clamp(min=1)
    else:
        Q = _multinomial_target(target, b, memb.sum(1), "target", validate_args)
    valid = (top > 0) & (Q > 0) & (kk[:, None] > 0)
    value = torch.where(valid, safe_log(torch.where(valid, P, torch.ones_like(P))) -
                        safe_log(torch.where(valid, Q, torch.ones_like(Q))), torch.zeros_like(P))
    return finish(b, value, valid, reduction, return_valid)


def ndkl(scores: Tensor, groups: Tensor, *, k: Optional[int] = None, target: TargetLike = None,
         mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
         reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Normalised discounted KL divergence NDKL (Geyik et al. 2019; FairRankTune docs, Cachel et al., FairRankTune
    0.0.7: FairRankTune's definition).

    .. math:: \mathrm{NDKL}(\tau) = \frac{1}{Z} \sum_{i=1}^{|\tau|} \frac{1}{\log_2(i+1)}\, d_{KL}(D_{\tau_i} \| D_X),
              \qquad Z = \sum_{i=1}^{|\tau|} \frac{1}{\log_2(i+1)}

    Every prefix length ``i = 1, 2, ...`` (1-based, so the top position weighs ``1/log2 2 = 1``) up to
    ``min(k, n)`` (default: the whole list); ``Z`` sums the same discounts (it is *not* a maximum: NDKL lies in
    ``[0, inf)``, 0 = fair).  ``D_{tau_i}`` is the group distribution of the top i, ``D_X`` the ``target``
    (default: the list's composition), natural logarithm.  Multi-group and soft membership; items of unknown group
    take positions but are left out of the distributions (a prefix without known item contributes 0).
    Shape ``[B]`` (``[]``), in ``[0, inf)``, or ``(value, valid)`` with ``return_valid``; undefined (0, invalid)
    for a list without any known-group item.

    Example (``D_X = (1/2, 1/2)``; the top-1 is ``(1, 0)``: ``ln 2``, the top-2 matches)::

        >>> ndkl(torch.tensor([2., 1.]), torch.tensor([0, 1]))   # ln 2 / (1 + 1/log2 3)
        tensor(0.4250)
    """
    k = check_k(k)
    check_reduction(reduction)
    check_target_string(target, _TARGET_STRINGS)
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    ob = order(b, ordering)
    memb = b.membership
    B, N = b.mask.shape
    n = b.mask.sum(-1)
    Q = _multinomial_target(target, b, _default_multinomial_target(memb), "target", validate_args)
    C = prefix_mass(ob, memb)  # [B, N, G]
    i = torch.arange(1, N + 1, device=memb.device)
    d = _delta_kl(C, i.to(memb.dtype)[None, :].expand(B, N), Q[:, None, :])  # [B, N]
    last = n if k is None else n.clamp(max=k)
    inside = (i[None, :] <= last[:, None]).to(d.dtype)
    w = 1.0 / torch.log2(i.to(d.dtype) + 1.0)
    raw = (d * w * inside).sum(-1)
    Z = (w * inside).sum(-1)
    known = memb.sum((1, 2)) > 0
    value, valid = safe_div(raw, Z)
    valid = valid & known
    value = torch.where(valid, value, torch.zeros_like(value))
    return finish(b, value, valid, reduction, return_valid)


def _binomial_cdf(x: Tensor, p: Tensor, N: int) -> Tensor:
    """``P(Binomial(k, p) <= x[b, k-1])`` for ``k = 1..N``, ``[B, N]``; fractional ``x`` interpolated linearly
    between the neighbouring integers (exact at integers).  Pure torch (``lgamma``), so it runs on any device."""
    dt = x.dtype
    dev = x.device
    kk = torch.arange(1, N + 1, device=dev, dtype=dt)[:, None]  # [N, 1]
    j = torch.arange(0, N + 1, device=dev, dtype=dt)[None, :]  # [1, N+1]
    ok = j <= kk
    kmj = (kk - j).clamp(min=0)
    logc = torch.lgamma(kk + 1) - torch.lgamma(j + 1) - torch.lgamma(kmj + 1)  # [N, N+1]
    pb = p[:, None, None]
    logpmf = logc[None] + torch.xlogy(j[None], pb) + torch.xlogy(kmj[None], 1 - pb)
    pmf = torch.where(ok[None], torch.exp(logpmf), torch.zeros((), dtype=dt, device=dev))
    cdf = torch.cumsum(pmf, dim=-1).clamp(max=1.0)  # [B, N, N+1]
    kmax = kk[:, 0][None, :]
    xc = torch.minimum(x.clamp(min=0), kmax)
    lo = xc.floor()
    hi = torch.minimum(lo + 1, kmax)
    frac = xc - lo
    c_lo = cdf.gather(-1, lo.long()[..., None])[..., 0]
    c_hi = cdf.gather(-1, hi.long()[..., None])[..., 0]
    return c_lo + frac * (c_hi - c_lo)


def fair(scores: Tensor, groups: Tensor, *, protected: int = 1, target: TargetLike = None,
         k: Optional[int] = None, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
         ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
         validate_args: bool = True):
    r"""FAIR: the FA*IR binomial prefix test of Zehlike et al. as a metric (Raj & Ekstrand, SIGIR 2022, eq. 2).

    .. math:: \mathrm{FAIR}(L) = \frac{1}{N} \sum_{k=1}^{N} P_{\mathrm{Binomial}}\big(m \le |G^+(L_{\le k})| \;\big|\; p, k\big)
              = \frac{1}{N} \sum_{k=1}^{N} \sum_{j=0}^{|G^+(L_{\le k})|} \binom{k}{j} p^j (1-p)^{k-j}

    The binomial CDF at the protected count of every prefix (the sum starts at ``j = 0``, as the CDF of the first
    line of eq. 2; the second line's ``j = 1`` would drop the probability of zero protected items).  ``p`` =
    ``target`` (float or ``[B]``) or, by default, the protected share of the whole list.  Range [0, 1], 1 = fair:
    it penalises under-representation of the protected group only.  With a relaxed ordering the expected
    protected count is fractional and the CDF is interpolated linearly between integers.  Binomial: integer ids
    only.  ``k``: prefixes ``k' = 1 .. min(k, N)``, averaged over ``min(k, N)``.  Pure torch (``lgamma``), memory
    ``O(B N^2)``.  Shape ``[B]`` (``[]``), or ``(value, valid)`` with ``return_valid``.

    Example (p = 1/2; prefixes hold 0, 1 protected: CDFs 1/2 and 3/4)::

        >>> fair(torch.tensor([2., 1.]), torch.tensor([0, 1]))
        tensor(0.6250)
    """
    k = check_k(k)
    check_reduction(reduction)
    check_target_string(target, _TARGET_STRINGS)
    check_group_id(protected, "protected", num_groups)
    _require_hard(groups, "fair")
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    cols = _binary_columns(b, protected, "groups", validate_args)
    p = _binary_target(target, b, _default_binary_target(cols, b.mask), "target", False, validate_args)
    ob = order(b, ordering)
    B, N = b.mask.shape
    n = b.mask.sum(-1)
    last = n if k is None else n.clamp(max=k)
    x = prefix_mass(ob, cols[..., :1])[..., 0]  # [B, N] protected mass in the first k positions
    cdf = _binomial_cdf(x, p, N)
    inside = (torch.arange(1, N + 1, device=x.device)[None, :] <= last[:, None]).to(cdf.dtype)
    value, valid = safe_div((cdf * inside).sum(-1), last.to(cdf.dtype))
    value = clamp_rounding(value, 0.0, 1.0)
    return finish(b, value, valid, reduction, return_valid)


# ------------------------------------------------------------------------ FA*IR's ranked group fairness test
# (``fair`` above is Raj & Ekstrand's FAIR measure; FA*IR's test, its m-table and its significance are ``fa_ir_*``)
class FaIrTest(NamedTuple):
    """Result of :func:`fa_ir_test`: ``passed`` ``[B]`` bool, ``p_value`` ``[B]`` the smallest prefix binomial CDF,
    ``alpha`` the significance every prefix was tested at (adjusted or not), ``valid`` ``[B]`` bool."""

    passed: Tensor
    p_value: Tensor
    alpha: float
    valid: Tensor


def _check_fa_ir_args(k, p, alpha) -> Tuple[int, float, float]:
    k = check_int(k, "k", low=1)
    p = check_number(p, "p", low=0.0, high=1.0)
    if not 0.0 < p < 1.0:
        raise ValueError(f"`p` must lie in the open interval (0, 1); got {p!r}")
    alpha = check_number(alpha, "alpha", low=0.0, high=1.0)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"`alpha` must lie in the open interval (0, 1); got {alpha!r}")
    return k, p, alpha


def _kernel(k: int, backend: str):
    """The compiled FA*IR module (:mod:`torchfair.kernels.fa_ir`) when ``backend`` picks it for tables of length
    ``k``, else ``None`` (the numpy code below); ``ValueError`` naming ``backend`` for an unknown value."""
    from ..kernels import BACKENDS, pick

    check_choice(backend, "backend", BACKENDS)
    return pick("fa_ir", backend, size=k)


def _mtable(k: int, p: float, alpha: float) -> "list":
    """Unadjusted m-table: for each prefix length ``i = 1..k`` the smallest ``m`` with ``BinomCDF(m; i, p) > alpha``
    (Zehlike et al., CIKM 2017, §4.2, ``m(i) = F^{-1}(alpha; i, p)``), by the pmf recursion in float64."""
    import numpy as np
    pmf = np.zeros(k + 1)
    pmf[0] = 1.0
    out = []
    for i in range(1, k + 1):
        pmf[1:i + 1] = pmf[1:i + 1] * (1 - p) + pmf[0:i] * p
        pmf[0] *= 1 - p
        cdf = np.cumsum(pmf[:i + 1])
        out.append(int(np.searchsorted(cdf, alpha, side="right")))  # first m with cdf[m] > alpha
    return out


def _success_probability(m: "list", p: float) -> float:
    """P(a ranking whose positions are protected independently with probability ``p`` has at least ``m[i-1]``
    protected items in every prefix ``i``): the dynamic programme over protected counts behind Zehlike et al.,
    CIKM 2017, §4.3 (Algorithm 2 computes the same probability block by block).  Summed left to right
    (``cumsum``), as the compiled sweep does, so both give the same bits."""
    import numpy as np
    k = len(m)
    dist = np.zeros(k + 1)
    dist[0] = 1.0
    for i in range(1, k + 1):
        dist[1:i + 1] = dist[1:i + 1] * (1 - p) + dist[0:i] * p
        dist[0] *= 1 - p
        dist[:m[i - 1]] = 0.0
    return float(np.cumsum(dist)[-1])


_ADJUSTED: Dict[Tuple[int, float, float], float] = {}


def fa_ir_adjusted_alpha(k: int, p: float, alpha: float = 0.1, *, backend: str = "auto") -> float:
    r"""FA*IR's multiple-test correction (Zehlike et al., CIKM 2017, §4.3): the significance ``alpha_c`` at which every
    one of the ``k`` prefix tests is run so that a ranking drawn by the fair Bernoulli(``p``) process fails *some*
    prefix test with probability (at most, closest to) ``alpha``.

    .. math:: \alpha_c = \max\{a \le \alpha : 1 - P(\tau_i \ge m_a(i)\ \forall i \le k) \le \alpha\}

    found by bisection (60 steps) on the exact success probability; cached per ``(k, p, alpha)``.  Cost ``O(k^2)``
    per step.  ``backend``: ``"auto"`` / ``"numba"`` (the compiled sweep of :mod:`torchfair.kernels.fa_ir`) or
    ``"torch"`` (the numpy reference); both give the same bits, so the cached value does not depend on the path.

    Example::

        >>> round(fa_ir_adjusted_alpha(10, 0.5, 0.1), 4) <= 0.1
        True
    """
    k, p, alpha = _check_fa_ir_args(k, p, alpha)
    K = _kernel(k, backend)
    key = (k, p, alpha)
    if key not in _ADJUSTED:
        if K is not None:  # the compiled sweep (the numpy code below is the reference)
            def fails(a: float) -> float:
                return K.fail_probability(k, p, a)

            def table(a: float) -> list:
                return K.mtable(k, p, a).tolist()
        else:
            def fails(a: float) -> float:
                return 1.0 - _success_probability(_mtable(k, p, a), p)

            def table(a: float) -> list:
                return _mtable(k, p, a)
        lo, hi = 0.0, alpha
        if fails(alpha) <= alpha:
            lo = alpha
        else:
            for _ in range(60):
                mid = (lo + hi) / 2
                if fails(mid) <= alpha:
                    lo = mid
                else:
                    hi = mid
        # step off the boundary: the m-table only changes at binomial CDF values, and lo sits on one of them
        # (up to rounding); a value just below it gives the same table and leaves a margin for the test's CDF
        inner = lo * (1 - 1e-7)
        if inner > 0 and table(inner) == table(lo):
            lo = inner
        _ADJUSTED[key] = lo
    return _ADJUSTED[key]


def fa_ir_mtable(k: int, p: float, alpha: float = 0.1, *, adjust: bool = True, backend: str = "auto") -> Tensor:
    r"""FA*IR's m-table (Zehlike et al., CIKM 2017, §4.2, Table 1): ``m[i-1]`` = the minimum number of protected
    items the top ``i`` must hold to pass the ranked group fairness test,
    ``m(i) = min{m : BinomCDF(m; i, p) > alpha_c}``, for ``i = 1..k``; ``alpha_c`` = :func:`fa_ir_adjusted_alpha`
    with ``adjust=True`` (default, the paper's adjusted table), ``alpha`` otherwise.  Returns ``[k]`` int64 (CPU).
    ``backend``: as :func:`fa_ir_adjusted_alpha` (the same table either way).

    Example (Zehlike et al., Table 1, p = 0.5, alpha = 0.1, unadjusted)::

        >>> fa_ir_mtable(10, 0.5, 0.1, adjust=False).tolist()
        [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    """
    k, p, alpha = _check_fa_ir_args(k, p, alpha)
    check_bool(adjust, "adjust")
    K = _kernel(k, backend)
    a = fa_ir_adjusted_alpha(k, p, alpha, backend=backend) if adjust else alpha
    return torch.from_numpy(K.mtable(k, p, a)) if K is not None else torch.tensor(_mtable(k, p, a), dtype=torch.long)


def fa_ir_test(scores: Tensor, groups: Tensor, *, p: float, alpha: float = 0.1, protected: int = 1,
               k: Optional[int] = None, adjust: bool = True, mask: Optional[Tensor] = None,
               num_groups: Optional[int] = None, backend: str = "auto", validate_args: bool = True) -> FaIrTest:
    r"""FA*IR's ranked group fairness test (Zehlike et al., CIKM 2017, §4.1-4.3): a ranking passes when every prefix
    ``i <= min(k, n)`` holds enough protected items,

    .. math:: F(\tau_p(i);\, i, p) > \alpha_c \quad \forall i, \qquad F = \text{binomial CDF}

    with ``tau_p(i)`` the protected count of the top ``i`` and ``alpha_c`` = :func:`fa_ir_adjusted_alpha` ``(K, p,
    alpha)`` for ``K = k`` (default: the padded list length ``N``) with ``adjust=True``, ``alpha`` otherwise.
    The CDF is the one :func:`fair` (Raj & Ekstrand's FAIR) averages (same code); ``passed`` is decided on the
    m-table of :func:`fa_ir_mtable` (every prefix holds at least ``m(i)`` protected items, the same comparison in
    integers), so the test and FA*IR agree even at an ``alpha`` equal to a CDF value.  Items of unknown group (-1)
    count as non-protected.  ``backend``: the m-table's and the significance's (:func:`fa_ir_adjusted_alpha`).
    Returns :class:`FaIrTest` (``[B]`` fields; scalars for 1-D input); ``p_value`` is the smallest prefix CDF.
    Hard orderings only (the scores' stable descending sort).  Always valid for a list with a real item.

    Example::

        >>> fa_ir_test(torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 0, 1, 1]), p=0.5, alpha=0.1).passed
        tensor(True)
    """
    check_group_id(protected, "protected", num_groups)
    _require_hard(groups, "fa_ir_test")
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    B, N = b.mask.shape
    K = N if k is None else k
    K, p, alpha = _check_fa_ir_args(K, p, alpha)
    check_bool(adjust, "adjust")
    L = min(K, N)
    kern = _kernel(L, backend)  # (checks backend)
    a = fa_ir_adjusted_alpha(K, p, alpha, backend=backend) if adjust else alpha
    cols = _binary_columns(b, protected, "groups", validate_args)
    ob = order(b, None)
    x = prefix_mass(ob, cols[..., :1])[..., 0]  # [B, N] protected count of every prefix
    # float64: the adjusted alpha sits just below a binomial CDF value (where the m-table steps), so a prefix at
    # exactly that CDF passes by a margin far below float32's rounding
    x = x.to(precise_dtype(x.device, torch.float64))
    pt = torch.full((B,), p, dtype=x.dtype, device=x.device)
    cdf = _binomial_cdf(x.round(), pt, N)
    n = b.mask.sum(-1)
    inside = torch.arange(1, N + 1, device=x.device)[None, :] <= n.clamp(max=K)[:, None]
    pv = torch.where(inside, cdf, torch.ones_like(cdf)).amin(-1)
    # passed: from the m-table itself (the same code as fa_ir_mtable), not from ``pv > a``: at an alpha that equals
    # a binomial CDF value (p = 1/2, alpha = 1/8 ...) the lgamma CDF can land on either side of it, and the test
    # must agree with the table FA*IR builds on
    need = torch.zeros(N, dtype=x.dtype, device=x.device)
    table = kern.mtable(L, p, a).tolist() if kern is not None else _mtable(L, p, a)
    need[:L] = torch.tensor(table, dtype=x.dtype, device=x.device)
    passed = ((x.round() >= need[None, :]) | ~inside).all(-1)
    valid = n > 0
    return FaIrTest(b.out(passed), b.out(pv), a, b.out(valid))


# ------------------------------------------------------------------------ deprecated names (one release)
def _deprecated(old: str, new: str) -> None:
    import warnings

    warnings.warn(f"torchfair.metrics.{old} is deprecated and will be removed in the next release; use "
                  f"torchfair.metrics.{new} (FA*IR's names are fa_ir_*; `fair` is Raj & Ekstrand's FAIR measure)",
                  FutureWarning, stacklevel=3)


def fair_test(*args, **kwargs) -> FaIrTest:
    """Deprecated name of :func:`fa_ir_test` (``FutureWarning``; removed in the next release)."""
    _deprecated("fair_test", "fa_ir_test")
    return fa_ir_test(*args, **kwargs)


def fair_mtable(*args, **kwargs) -> Tensor:
    """Deprecated name of :func:`fa_ir_mtable` (``FutureWarning``; removed in the next release)."""
    _deprecated("fair_mtable", "fa_ir_mtable")
    return fa_ir_mtable(*args, **kwargs)


def fair_adjusted_alpha(*args, **kwargs) -> float:
    """Deprecated name of :func:`fa_ir_adjusted_alpha` (``FutureWarning``; removed in the next release)."""
    _deprecated("fair_adjusted_alpha", "fa_ir_adjusted_alpha")
    return fa_ir_adjusted_alpha(*args, **kwargs)


#: deprecated names that are not functions, served with a ``FutureWarning`` on access (PEP 562)
DEPRECATED = {"FairTest": "FaIrTest"}


def __getattr__(name: str):
    if name in DEPRECATED:
        _deprecated(name, DEPRECATED[name])
        return globals()[DEPRECATED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
