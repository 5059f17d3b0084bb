"""Matched Pair Calibration (MPC), a marginal outcome test for score-based rankings (Korevaar et al., arXiv 2023).

Within each query (list), MPC pairs an item ``i_g`` of group g with an item ``i_¬g`` of another group that is
scored just above it, ``0 <= s(i_¬g) - s(i_g) <= eps`` (Korevaar et al., arXiv 2023, Definition 1, eq. 2), and
averages the outcome differences ``y(i_g) - y(i_¬g)`` over the pairs (Definition 2 per query, Definition 3 pooled over
queries). The ranker is nearly indifferent between the two orders of such a "marginal" pair, so an unbiased ranker has
MPC ~ 0.  **MPC > 0 means g is under-valued** (its items, ranked just below other items, turn out better: the
ranker should move g up; Theorem 1 links ``E[MPC] > 0`` to a gain from boosting g); MPC < 0 means g is over-valued.

Implementation choices (Korevaar et al., arXiv 2023, §4.1):

* threshold (§4.1.1): a fixed ``eps``; or the ``closest`` candidate pairs with the smallest score gap (pooled over all
  queries, the paper's recommendation); or ``quantile=q``: ``eps`` is the empirical q-quantile of the candidate
  gaps (the MovieLens study of Korevaar et al., arXiv 2023, §5 uses the first percentile, ``q = 0.01``);
* adjacency (§4.1.3, App. B.4): ``adjacent=True`` keeps only pairs in neighbouring positions of the ordering;
* position re-weighting (§4.1.2): ``browsing=F`` weights each pair by the attention at the pair's place,
  ``F(min(pos_i, pos_j))`` (``position_weight="top"``) or by the value of swapping the two items,
  ``|F(pos_i) - F(pos_j)|`` (``"swap"``, the weight ``w_k^+ - w_k^-`` of the proof of Theorem 1);
  the estimate becomes the weighted mean ``sum_p w_p d_p / sum_p w_p``;
* inference (§4.1.4): the pairs share items, so their differences are dependent.  ``ci="cluster"`` uses the
  dyadic cluster-robust sandwich of Aronow, Samii & Assenova (2017), where two pairs are correlated when they
  share an item; ``ci="query"`` clusters by query; ``ci="bootstrap"`` resamples queries with replacement
  (percentile interval, the method of the paper's tables).

Undefined values (no matched pair) are 0 and flagged invalid; nothing returns NaN.  MPC is a statistic of hard
selections and is not differentiable.
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_choice, check_group_id, check_number, prepare
from ..browsing import BrowsingModel, get_browsing
from ..orderings.base import OrderingLike
from ..orderings import Hard
from ..orderings.base import row_blocks
from ..orderings.hard import HardOrderedBatch
from .common import check_bool, check_ordering, order

__all__ = ["MatchedPairs", "MPCResult", "matched_pairs", "matched_pair_calibration", "mpc_cluster_variance",
           "adjacent_candidates"]

CI_METHODS = ("cluster", "query", "bootstrap", "none")


class MatchedPairs(NamedTuple):
    """The matched pair set ``MP(g, Q)`` as flat ``[P]`` tensors (one entry per pair)."""

    #: query (list) index ``b`` of the pair
    query: Tensor
    #: index in the list of the group-g item ``i_g``
    item_g: Tensor
    #: index in the list of the other-group item ``i_¬g`` (scored at least as high as ``i_g``)
    item_other: Tensor
    #: score gap ``s(i_¬g) - s(i_g) >= 0``
    gap: Tensor
    #: outcome difference ``y(i_g) - y(i_¬g)``
    diff: Tensor
    #: pair weight (1 unless position re-weighting is used)
    weight: Tensor
    #: the threshold in force: ``eps``, or the largest selected gap for ``closest`` / ``quantile`` (0 without pairs)
    eps: Tensor


class MPCResult(NamedTuple):
    """Result of :func:`matched_pair_calibration`."""

    #: pooled MPC over all queries (Korevaar et al., arXiv 2023, Definition 3), a scalar; 0 when there is no pair
    estimate: Tensor
    #: lower end of the confidence interval (0 when undefined or ``ci="none"``)
    ci_low: Tensor
    #: upper end of the confidence interval
    ci_high: Tensor
    #: standard error: sandwich (``cluster``/``query``) or bootstrap standard deviation (``bootstrap``)
    std_error: Tensor
    #: number of matched pairs
    n_pairs: Tensor
    #: ``[B]`` MPC of every query (Definition 2), 0 where the query has no pair
    per_query: Tensor
    #: ``[B]`` True where the query has at least one pair (with positive total weight)
    per_query_valid: Tensor
    #: ``[B]`` number of pairs of every query
    per_query_pairs: Tensor
    #: the threshold in force (see :class:`MatchedPairs`)
    eps: Tensor
    #: whether the pooled estimate is defined
    valid: Tensor


def _closest_alias(closest, k):
    """``closest``, or the deprecated ``k`` (a number of pairs, not the package's top-k cut-off)."""
    if k is None:
        return closest
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` (deprecated name of `closest`) must be an int >= 1; got {k!r}")
    if closest is not None:
        raise ValueError("give `closest` only (`k` is its deprecated name)")
    warnings.warn("`k` of matched_pairs / matched_pair_calibration (the number of closest pairs) is renamed "
                  "`closest`; `k` means a top-k cut-off everywhere else in torchfair", FutureWarning, stacklevel=3)
    return k


def _check_options(eps, closest, quantile, adjacent, position_weight):
    given = [x is not None for x in (eps, closest, quantile)]
    if sum(given) != 1:
        raise ValueError("give exactly one of `eps` (score threshold), `closest` (number of closest pairs) or "
                         f"`quantile` (threshold as a quantile of the gaps); got eps={eps}, closest={closest}, "
                         f"quantile={quantile}")
    if eps is not None:
        check_number(eps, "eps", low=0.0)
    if closest is not None:
        if isinstance(closest, float):
            raise ValueError(f"`closest` must be a positive int; got {closest!r}")
        check_number(closest, "closest", low=1, integer=True)
    if quantile is not None:
        check_number(quantile, "quantile", low=0.0, high=1.0, low_open=True)
    check_bool(adjacent, "adjacent")
    check_choice(position_weight, "position_weight", ("top", "swap"))


def adjacent_candidates(scores: Tensor, mask: Tensor, in_group: Tensor, other: Tensor,
                        order: Optional[Tensor] = None):
    """Candidate matched pairs of *adjacent* items under the hard order (Korevaar et al., arXiv 2023, §4.1.3,
    App. B.4; ties broken by index, as ``Hard()``), in O(B N log N): for consecutive positions (a directly above
    b) the pair ``(i=b, j=a)`` when b is in the group and a is not, and ``(i=a, j=b)`` when a is in the group, b
    is not and their scores tie -- so ``s(j) >= s(i)`` either way.

    Args: ``scores [B, N]`` (floating), ``mask``, ``in_group``, ``other`` ``[B, N]`` bool (real items; items of
    group g; items of a known group other than g -- padded and unknown items in neither); ``order`` ``[B, N]``
    (the item at each position, padded items last) where it is already computed, default ``Hard()(scores,
    mask).order``.  Returns flat ``(query, i, j, gap)`` tensors in (query, i, j) order with ``gap = s(j) - s(i)``
    -- the adjacent candidates :func:`matched_pairs` (``adjacent=True``) selects from before its threshold.

    Example::

        >>> s, m = torch.tensor([[3.0, 2.0, 1.0]]), torch.ones(1, 3, dtype=torch.bool)
        >>> g = torch.tensor([[0, 1, 0]])
        >>> adjacent_candidates(s, m, g == 1, (g == 0) & m)   # item 1 (group 1) right below item 0
        (tensor([0]), tensor([1]), tensor([0]), tensor([1.]))
    """
    if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        raise ValueError(f"`scores` must be a floating tensor [B, N]; got "
                         f"{tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__}")
    for name, x in (("mask", mask), ("in_group", in_group), ("other", other)):
        if not isinstance(x, Tensor) or x.dtype != torch.bool or x.shape != scores.shape:
            raise ValueError(f"`{name}` must be a bool tensor of the shape of `scores` {tuple(scores.shape)}; got "
                             f"{(x.dtype, tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__}")
    if order is not None and (not isinstance(order, Tensor) or order.shape != scores.shape
                              or order.is_floating_point()):
        raise ValueError(f"`order` must be an integer tensor of the shape of `scores` {tuple(scores.shape)}")
    s, m = scores, mask
    B, N = s.shape
    if order is None:
        order = Hard()(s, m).order
    a, b = order[:, :-1], order[:, 1:]
    both = m.gather(-1, a) & m.gather(-1, b)
    sa, sb = s.gather(-1, a), s.gather(-1, b)
    ga, gb = in_group.gather(-1, a), in_group.gather(-1, b)
    oa, ob = other.gather(-1, a), other.gather(-1, b)
    down = both & gb & oa                      # g item directly below a non-g item
    tie = both & ga & ob & (sb >= sa)          # g item above a tied non-g item
    qd, kd = down.nonzero(as_tuple=True)
    qt, kt = tie.nonzero(as_tuple=True)
    q = torch.cat([qd, qt])
    i = torch.cat([b[qd, kd], a[qt, kt]])
    j = torch.cat([a[qd, kd], b[qt, kt]])
    srt = torch.argsort((q * N + i) * N + j)
    q, i, j = q[srt], i[srt], j[srt]
    return q, i, j, s[q, j] - s[q, i]


def matched_pairs(scores: Tensor, relevance: Tensor, groups: Tensor, *, group: int = 1,
                  eps: Optional[float] = None, closest: Optional[int] = None, quantile: Optional[float] = None,
                  adjacent: bool = False, browsing: Union[BrowsingModel, str, None] = None,
                  position_weight: str = "top", mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                  ordering: OrderingLike = None, validate_args: bool = True, k: Optional[int] = None) -> MatchedPairs:
    r"""The matched pair set about group g (Korevaar et al., arXiv 2023, Definition 1, eq. 2, with the options of
    §4.1.1-4.1.3).

    .. math:: MP_\epsilon(g) = \{(i_g, i_{\neg g}) : 0 \le s(i_{\neg g}) - s(i_g) \le \epsilon,\;
              g(i_g) = g,\; g(i_{\neg g}) \ne g\}

    taken within each query.  Items of unknown group (id -1) and padded items take part in no pair.  Candidate
    pairs are first filtered by the group condition, ``s(i_¬g) >= s(i_g)`` and (``adjacent=True``)
    ``|pos(i_g) - pos(i_¬g)| <= 1`` in the ordering's expected positions; then the threshold is applied:

    * ``eps``: keep gaps ``<= eps``;
    * ``closest``: keep the ``closest`` smallest gaps over all queries (Korevaar et al., arXiv 2023, §4.1.1's K
      closest pairs; ties at the last kept gap are broken by query, then item index; fewer candidates keeps them all).
      ``k`` is its deprecated name (it warns): everywhere else in the package ``k`` is a top-k cut-off;
    * ``quantile=q``: ``eps`` = the smallest candidate gap such that a fraction ``>= q`` of candidates is at or
      below it; keep gaps ``<= eps``.

    ``groups`` must be integer ids ``[B, N]`` (the pairs need a hard group membership).  The ordering (default
    ``Hard()``) is used only for adjacency and position weights; adjacency is exact for ``Hard()`` (ties="first"),
    with ``Hard(ties="average")`` tied items count as adjacent.  Returns a :class:`MatchedPairs` (pairs in
    (query, item_g, item_other) order for ``eps``/``quantile``, by increasing gap for ``closest``).  On a
    stochastic ordering adjacency and position weights use the expected positions.

    Example::

        >>> p = matched_pairs(torch.tensor([3.0, 2.9, 1.0]), torch.tensor([1.0, 2.0, 0.0]),
        ...                   torch.tensor([0, 1, 1]), group=1, eps=0.5)
        >>> p.item_g, p.item_other, p.diff
        (tensor([1]), tensor([0]), tensor([1.]))
    """
    check_ordering(ordering)
    closest = _closest_alias(closest, k)
    _check_options(eps, closest, quantile, adjacent, position_weight)
    if isinstance(groups, Tensor) and groups.is_floating_point():
        raise ValueError("`groups` must be integer group ids [B, N] for matched pairs (soft membership is not "
                         "supported)")
    check_group_id(group, "group", num_groups)
    F = None if browsing is None else get_browsing(browsing)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    s, y, m = b.scores, b.relevance, b.mask
    B, N = s.shape
    memb = b.membership
    G = memb.shape[-1]
    in_g = (memb[..., group] > 0) if group < G else torch.zeros_like(m)
    other = (memb.sum(-1) > 0) & ~in_g  # known group, not g (padded and unknown rows are all zero)
    need_pos = adjacent or browsing is not None
    ob = order(b, ordering) if need_pos else None
    pos = ob.expected_positions().to(s.dtype) if need_pos else None
    dev = s.device

    qs, ii, jj, gaps = [], [], [], []
    hard_first = isinstance(ob, HardOrderedBatch) and ob.ties == "first"  # e.g. a shared Hard()(s, m)
    if adjacent and (ordering is None or (isinstance(ordering, Hard) and ordering.ties == "first") or hard_first):
        q, i, j, gap = adjacent_candidates(s, m, in_g, other, ob.order if hard_first else None)
        qs, ii, jj, gaps = [q], [i], [j], [gap]
        if eps is not None:
            keep = gap <= eps
            qs, ii, jj, gaps = [q[keep]], [i[keep]], [j[keep]], [gap[keep]]
    for start, stop in ([] if qs else row_blocks(B, N)):
        gi = s[:, start:stop, None]
        gap = s[:, None, :] - gi  # s(j) - s(i), rows i are the g candidates
        cand = in_g[:, start:stop, None] & other[:, None, :] & (gap >= 0)
        if adjacent:
            cand = cand & ((pos[:, None, :] - pos[:, start:stop, None]).abs() <= 1 + 1e-6)
        if eps is not None:
            cand = cand & (gap <= eps)
        bb, i, j = cand.nonzero(as_tuple=True)
        qs.append(bb)
        ii.append(i + start)
        jj.append(j)
        gaps.append(gap[bb, i, j])
    q = torch.cat(qs)
    i = torch.cat(ii)
    j = torch.cat(jj)
    gap = torch.cat(gaps)

    if closest is not None and gap.numel() > closest:
        sel = torch.sort(gap, stable=True).indices[:closest]
        q, i, j, gap = q[sel], i[sel], j[sel], gap[sel]
    elif closest is not None:
        sel = torch.sort(gap, stable=True).indices
        q, i, j, gap = q[sel], i[sel], j[sel], gap[sel]
    elif quantile is not None and gap.numel() > 0:
        srt = torch.sort(gap).values
        idx = max(int(math.ceil(quantile * gap.numel())) - 1, 0)
        thr = srt[idx]
        keep = gap <= thr
        q, i, j, gap = q[keep], i[keep], j[keep], gap[keep]

    if eps is not None:
        eps_used = torch.tensor(float(eps), dtype=s.dtype, device=dev)
    else:
        eps_used = gap.max() if gap.numel() else torch.zeros((), dtype=s.dtype, device=dev)

    diff = y[q, i] - y[q, j]
    if F is None:
        w = torch.ones_like(diff)
    else:
        if F.relevance_dependent:
            raise ValueError(f"`browsing` must be position-based for pair weights; got {F!r}")
        pi, pj = pos[q, i], pos[q, j]
        if position_weight == "top":
            w = F.weight(torch.minimum(pi, pj))
        else:
            w = (F.weight(pi) - F.weight(pj)).abs()
    return MatchedPairs(query=q, item_g=i, item_other=j, gap=gap, diff=diff, weight=w.to(diff.dtype), eps=eps_used)


def mpc_cluster_variance(pairs: MatchedPairs, *, cluster: str = "item", item_ids: Optional[Tensor] = None) -> Tensor:
    r"""Cluster-robust (sandwich) variance of the pooled, weighted MPC ``theta = sum_p w_p d_p / sum_p w_p``.

    .. math:: \hat V = \frac{1}{(\sum_p w_p)^2} \sum_{p, p'} 1(p \sim p')\, w_p e_p\, w_{p'} e_{p'},
              \qquad e_p = d_p - \hat\theta

    ``cluster="item"`` (Korevaar et al., arXiv 2023, §4.1.4; the dyadic estimator of Aronow, Samii & Assenova 2017):
    ``p ~ p'`` when the two pairs share an item (``p = p'`` included).  Computed in O(P) as
    ``sum_a U_a^2 - sum_{dyads {a, c}} U_{ac}^2`` with ``U_a`` the sum of ``w e`` over the pairs containing item
    a (each item appears on one side only) and ``U_ac`` over the pairs made of exactly the items a and c.
    An item is ``(query, index)`` unless ``item_ids [B, N]`` gives global ids (e.g. a movie recommended to
    several users is then one item in every list; an id must not belong to both sides of a pair).
    ``cluster="query"``: ``p ~ p'`` when they come from the same query.  No small-sample correction (HC0-type).
    Returns a scalar (0 without pairs).

    Example (two pairs sharing item 0 of query 0: one cluster)::

        >>> p = matched_pairs(torch.tensor([3.0, 2.9, 2.8]), torch.tensor([1.0, 2.0, 0.0]),
        ...                   torch.tensor([0, 1, 1]), group=1, eps=0.5)
        >>> mpc_cluster_variance(p)   # d = (1, -1), theta = 0: (1 - 1)^2 / 2^2
        tensor(0.)
    """
    if not isinstance(pairs, MatchedPairs):
        raise ValueError(f"`pairs` must be a MatchedPairs (from matched_pairs); got {type(pairs).__name__}")
    check_choice(cluster, "cluster", ("item", "query"))
    w, d = pairs.weight, pairs.diff
    dt = d.dtype
    W = w.sum()
    if d.numel() == 0 or not W > 0:
        return torch.zeros((), dtype=dt, device=d.device)
    theta = (w * d).sum() / W
    u = w * (d - theta)
    if cluster == "query":
        _, inv = torch.unique(pairs.query, return_inverse=True)
        U = torch.zeros(int(inv.max()) + 1, dtype=dt, device=d.device).index_add_(0, inv, u)
        return (U * U).sum() / (W * W)
    if item_ids is None:
        # items are (query, index); every list is a separate namespace
        span = int(max(int(pairs.item_g.max()), int(pairs.item_other.max()))) + 1
        a = pairs.query * span + pairs.item_g
        c = pairs.query * span + pairs.item_other
    else:
        if not isinstance(item_ids, Tensor) or item_ids.is_floating_point() or item_ids.dim() not in (1, 2):
            raise ValueError("`item_ids` must be an integer tensor [B, N] (or [N])")
        ids = item_ids.unsqueeze(0) if item_ids.dim() == 1 else item_ids
        ids = ids.to(d.device).long()
        a = ids[pairs.query, pairs.item_g]
        c = ids[pairs.query, pairs.item_other]
        if (a == c).any():
            raise ValueError("`item_ids` puts the same item on both sides of a matched pair")
    units, inv = torch.unique(torch.cat([a, c]), return_inverse=True)
    U = torch.zeros(units.numel(), dtype=dt, device=d.device).index_add_(0, inv, torch.cat([u, u]))
    dyad = torch.stack([torch.minimum(a, c), torch.maximum(a, c)], dim=1)
    _, dinv = torch.unique(dyad, dim=0, return_inverse=True)
    Ud = torch.zeros(int(dinv.max()) + 1, dtype=dt, device=d.device).index_add_(0, dinv, u)
    meat = (U * U).sum() - (Ud * Ud).sum()
    return meat.clamp(min=0) / (W * W)


def matched_pair_calibration(scores: Tensor, relevance: Tensor, groups: Tensor, *, group: int = 1,
                             eps: Optional[float] = None, closest: Optional[int] = None,
                             quantile: Optional[float] = None,
                             adjacent: bool = False, browsing: Union[BrowsingModel, str, None] = None,
                             position_weight: str = "top", ci: str = "cluster", level: float = 0.95,
                             n_boot: int = 200, generator: Optional[torch.Generator] = None,
                             item_ids: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                             num_groups: Optional[int] = None, ordering: OrderingLike = None,
                             validate_args: bool = True, k: Optional[int] = None) -> MPCResult:
    r"""Matched Pair Calibration for group g, per query and pooled over queries (Korevaar et al., arXiv 2023,
    Definitions 1-3).

    .. math:: MPC_\epsilon(g, \mathcal{Q}) = \frac{1}{|MP_\epsilon(g, \mathcal{Q})|}
              \sum_{(i_g, i_{\neg g}) \in MP_\epsilon(g, \mathcal{Q})} y(i_g) - y(i_{\neg g})

    (weighted mean ``sum w d / sum w`` with position re-weighting).  ``relevance`` holds the observed outcomes
    ``y`` (non-negative; MPC only uses differences, so shift outcomes that can be negative).  Pair selection
    options (``eps`` / ``closest`` / ``quantile``, ``adjacent``, ``browsing`` + ``position_weight``) are those of
    :func:`matched_pairs`; exactly one of ``eps``, ``closest``, ``quantile`` is required (``k`` is the deprecated
    name of ``closest``).

    Confidence interval at ``level`` (``ci``):

    * ``"cluster"`` (default): ``estimate ± z * se`` with the item-sharing cluster-robust variance of
      :func:`mpc_cluster_variance` (Korevaar et al., arXiv 2023, §4.1.4); ``item_ids`` optionally gives global item
      identities;
    * ``"query"``: the same with queries as clusters;
    * ``"bootstrap"``: percentile interval of ``n_boot`` replicates resampling the queries that have pairs
      with replacement (the matched pair set is held fixed), reproducible through ``generator``;
    * ``"none"``: no interval (``ci_low = ci_high = estimate``, ``std_error = 0``).

    Reading the result: ``estimate > 0`` (interval above 0) means g is under-valued by the scores, ``< 0``
    over-valued.  Shapes: scalars except ``per_query*`` ``[B]`` (scalars for a single ``[N]`` list).

    Example (one query; pairs (1, 0) with gap 0.1 and (2, 3) with gap 0.05, group 1 better by 1 and by 2)::

        >>> r = matched_pair_calibration(torch.tensor([3.0, 2.9, 1.0, 1.05]), torch.tensor([1.0, 2.0, 3.0, 1.0]),
        ...                              torch.tensor([0, 1, 1, 0]), group=1, eps=0.2, ci="none")
        >>> r.estimate, r.n_pairs
        (tensor(1.5000), tensor(2))
    """
    closest = _closest_alias(closest, k)
    check_choice(ci, "ci", CI_METHODS)
    if not isinstance(level, float):
        raise ValueError(f"`level` must be a float in (0, 1); got {level!r}")
    check_number(level, "level", low=0.0, high=1.0, low_open=True, high_open=True)
    if ci == "bootstrap" and (isinstance(n_boot, float) or check_number(n_boot, "n_boot", low=2, integer=True) < 2):
        raise ValueError(f"`n_boot` must be an int >= 2; got {n_boot!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"`generator` must be a torch.Generator; got {type(generator).__name__}")
    pairs = matched_pairs(scores, relevance, groups, group=group, eps=eps, closest=closest, quantile=quantile,
                          adjacent=adjacent, browsing=browsing, position_weight=position_weight, mask=mask,
                          num_groups=num_groups, ordering=ordering, validate_args=validate_args)
    dt = pairs.diff.dtype
    dev = pairs.diff.device
    squeeze = scores.dim() == 1
    B = 1 if squeeze else scores.shape[0]
    zero = torch.zeros((), dtype=dt, device=dev)

    S = torch.zeros(B, dtype=dt, device=dev).index_add_(0, pairs.query, pairs.weight * pairs.diff)
    W = torch.zeros(B, dtype=dt, device=dev).index_add_(0, pairs.query, pairs.weight)
    cnt = torch.zeros(B, dtype=torch.long, device=dev).index_add_(
        0, pairs.query, torch.ones_like(pairs.query))
    q_valid = W > 0
    per_query = torch.where(q_valid, S / torch.where(q_valid, W, torch.ones_like(W)), torch.zeros_like(S))
    Wt = W.sum()
    valid = Wt > 0
    est = S.sum() / Wt if bool(valid) else zero

    lo = hi = est
    se = zero
    if bool(valid) and ci in ("cluster", "query"):
        var = mpc_cluster_variance(pairs, cluster="item" if ci == "cluster" else "query", item_ids=item_ids)
        se = var.sqrt()
        z = math.sqrt(2.0) * float(torch.erfinv(torch.tensor(level, dtype=torch.float64)))
        lo, hi = est - z * se, est + z * se
    elif bool(valid) and ci == "bootstrap":
        clusters = q_valid.nonzero(as_tuple=True)[0]
        Sc, Wc = S[clusters].double().cpu(), W[clusters].double().cpu()
        C = clusters.numel()
        draws = torch.randint(0, C, (n_boot, C), generator=generator)
        counts = torch.zeros(n_boot, C, dtype=torch.float64).scatter_add_(
            1, draws, torch.ones(n_boot, C, dtype=torch.float64))
        reps = _linalg.matmul(counts, Sc) / _linalg.matmul(counts, Wc)  # every cluster has W > 0, so the denominator is positive
        alpha = 1.0 - level
        qs = torch.quantile(reps, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64))
        lo, hi = qs[0].to(dt).to(dev), qs[1].to(dt).to(dev)
        se = reps.std().to(dt).to(dev)
    if not bool(valid):
        lo = hi = se = zero

    out = (lambda x: x.squeeze(0)) if squeeze else (lambda x: x)
    return MPCResult(estimate=est, ci_low=lo, ci_high=hi, std_error=se,
                     n_pairs=torch.tensor(pairs.diff.numel(), device=dev), per_query=out(per_query),
                     per_query_valid=out(q_valid), per_query_pairs=out(cnt), eps=pairs.eps,
                     valid=torch.as_tensor(bool(valid), device=dev))
