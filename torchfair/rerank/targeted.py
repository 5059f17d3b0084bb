r"""The measure-targeted re-ranker: lower any declared exact fairness measure under a utility constraint.

The algorithm (torchfair's own)
-------------------------------
Candidates are *group boosts* of the ranker's own scores: with ``z`` the scores standardised per list (mean 0,
standard deviation 1 over the real items), the candidate ``(c, beta)`` ranks the items by

.. math:: z_i + \beta \, a_{ic}

(``a_{ic}`` the membership of item ``i`` in group ``c``: 1 / 0 for integer ids, the share for soft membership),
for every group ``c`` and every boost ``beta`` in ``boosts`` (in standard deviations; ``inf``: all of group ``c``
first, each group in score order).  The top ``keep`` positions are fixed, and ties go to the item that ranked
higher.  Each candidate is scored by the *exact* measure through the same transformation the losses use
(:func:`torchfair.losses.measure_loss` with ``ordering=Hard()`` and the measure's declared reducer: DIPS →
``max |M_gh - M_hg|``, exposure misallocation → ``||delta||_1``, pairwise accuracy → the inter-group gap, AWRF →
the distance of the exposure shares from their target...), so nothing here re-states a formula.  Per list, the
identity and the candidates that satisfy the utility constraint compete; the one with the lowest objective wins
(a strictly lower value is needed to move away from a smaller boost, so among equal objectives the least change is
kept).

What it guarantees
------------------
* the top ``keep`` items stay where they were;
* the utility constraint holds: the *estimated* relative utility loss is at most ``max_utility_loss``, where the
  estimate is the DCG@``utility_k`` of the ranking with the ranker's own top-one probabilities ``softmax(scores)``
  as gains (nothing about the true relevance is used);
* the objective never increases (the identity is a candidate), and the output is the exact argmin over the
  candidate family (tested against a brute-force enumeration of the family);
* with integer groups, items of a group keep their relative order (a boost moves a whole group);
* a list already at objective 0, or with fewer than two groups, is returned unchanged.

It does *not* guarantee the global optimum over all permutations (tests compare with exhaustive search on small
lists, where it is never worse than the input).

Cost: ``1 + G len(boosts)`` exact evaluations of the measure, 13 for two groups with the default boosts.  Every
candidate is scored in the input ranking's frame, so a candidate is just its keys and its only sort is the one
inside the measure (Hard()'s "first" rule breaks ties by the input ranking); each evaluation is that sort and the
measure's ``O(B N G log N)`` sweep, memory ``O(B N G)``.  On 943 x 1 682 lists (the ML-100K test batch, CPU) that
is about 50x a plain sort with the default boosts and about 12x with ``boosts=inf`` (3 evaluations: "group c
first" for each group; ``make bench``, section ``rerank``).

Relevance: the fairness measures that need it (DIPS, misallocation, pairwise accuracy) are evaluated on an
*estimate*: at serving time the true relevance is unknown.  ``relevance="zeros"`` (default) treats every item as
equally relevant (DIPS then counts every pair as tied, with the tie weight: exposure parity between groups);
``"top:m"`` marks the ranker's top ``m`` as relevant; ``"scores"`` uses the scores themselves (then pairwise
measures see no discordant pair: the ranker is fair by its own estimate); or pass a tensor.  Pass the test labels
only for an oracle study.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from .._validation import Batch, check_int, check_number
from ..metrics._common import precise_dtype
from ..metrics.declarations import get_declaration
from ..orderings.hard import Hard
from ._common import Reranking, finish_rerank, groups_present, prepare_rerank, start_order

__all__ = ["targeted_rerank", "estimate_relevance", "DEFAULT_BOOSTS"]

#: boosts (in per-list score standard deviations) the candidates use by default
DEFAULT_BOOSTS = (0.25, 0.5, 1.0, 2.0, 4.0, math.inf)

RelevanceLike = Union[Tensor, str, None]


def estimate_relevance(scores: Tensor, how: str = "zeros", *, mask: Optional[Tensor] = None) -> Tensor:
    """A relevance estimate ``[B, N]`` (``[N]``) from the scores alone, for re-rankers and serving-time measures:
    ``"zeros"`` every item equally (ir)relevant; ``"scores"`` the scores shifted to a minimum of 0 over the real
    items; ``"top:m"`` 1 for the list's top ``m`` items by score (ties by list order), 0 otherwise.  Padded items 0.

    Example::

        >>> estimate_relevance(torch.tensor([0.3, 2.0, 1.0]), "top:2")
        tensor([0., 1., 1.])
    """
    b = prepare_rerank(scores, None, mask, None)
    if not isinstance(how, str):
        raise ValueError(f"`relevance` must be a tensor or one of 'zeros', 'scores', 'top:m'; got {how!r}")
    if how == "zeros":
        r = torch.zeros_like(b.scores)
    elif how == "scores":
        lo = torch.where(b.mask, b.scores, torch.full_like(b.scores, float("inf"))).amin(-1, keepdim=True)
        r = torch.where(b.mask, b.scores - lo, torch.zeros_like(b.scores))
    elif how.startswith("top:"):
        try:
            m = int(how[4:])
        except ValueError:
            raise ValueError(f"`relevance` 'top:m' needs an int m >= 1; got {how!r}") from None
        if m < 1:
            raise ValueError(f"`relevance` 'top:m' needs an int m >= 1; got {how!r}")
        _, pos = start_order(b)
        r = ((pos < m) & b.mask).to(b.scores.dtype)
    else:
        raise ValueError(f"`relevance` must be a tensor or one of 'zeros', 'scores', 'top:m'; got {how!r}")
    return b.out(r)


def _estimated_utility(gains_sorted: Tensor, perm: Tensor, k: int) -> Tensor:
    """DCG@k of a ranking given as start positions ``perm`` with gains in start order ``[B, N]``."""
    kk = min(k, perm.shape[-1])
    g = gains_sorted.gather(-1, perm[:, :kk])
    disc = 1.0 / torch.log2(torch.arange(kk, device=g.device, dtype=g.dtype) + 2.0)
    return (g * disc).sum(-1)


def targeted_rerank(scores: Tensor, groups: Tensor, relevance: RelevanceLike = "zeros", *, measure: str = "dips",
                    reducer: Optional[str] = None, keep: int = 0, max_utility_loss: Optional[float] = None,
                    utility_k: int = 10, boosts: Sequence[float] = DEFAULT_BOOSTS, mask: Optional[Tensor] = None,
                    num_groups: Optional[int] = None, protected: Optional[int] = None,
                    reference: Optional[int] = None, validate_args: bool = True, **measure_options: Any
                    ) -> Reranking:
    r"""Re-rank each list to lower the exact fairness ``measure`` under a utility constraint (module docstring:
    the algorithm, what it guarantees, its cost).

    ``measure``: a declared fairness measure with a loss reducer (``"dips"``, ``"exposure_misallocation"``,
    ``"pairwise_accuracy"``, ``"awrf"`` for exposure shares against a target, ``"ree"``, ``"igi"``, ...);
    ``reducer``: how its per-list value becomes the objective (default: its declared loss reducer);
    ``measure_options``: the measure's own options (``browsing``, ``tie_weight``, ``target``...).
    Constraints: ``keep`` (the top ``keep`` positions fixed; ``0 <= keep <= N``) and ``max_utility_loss`` (the
    largest estimated relative loss of DCG@``utility_k`` with gains ``softmax(scores)``; ``None``: no bound).
    ``relevance``: what the measure takes as relevance (``"zeros"``, ``"scores"``, ``"top:m"`` or a tensor; see the
    module docstring).  ``boosts``: positive boosts in score standard deviations (``inf`` allowed; one number for
    one boost: ``boosts=inf`` costs ``1 + G`` evaluations, the cheapest member of the family).

    Returns :class:`~torchfair.rerank.Reranking` with ``objective`` ``[2, B]``: the objective before and after.

    Example (a list whose group 1 sits at the bottom; DIPS on equally relevant items asks for exposure parity)::

        >>> r = targeted_rerank(torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1]),
        ...                     keep=1, browsing="uniform")
        >>> r.ranking.tolist(), [round(x, 4) for x in r.objective.tolist()]
        ([0, 3, 4, 1, 5, 2], [0.5, 0.0556])
    """
    from ..losses.transform import measure_loss  # the one transformation (measure -> per-list objective)

    decl = get_declaration(measure)
    if decl.kind != "fairness":
        raise ValueError(f"`measure` must be a fairness measure; {measure!r} is a {decl.kind} measure")
    if reducer is None and decl.loss is None:
        raise ValueError(f"`reducer` must be given: measure {measure!r} declares no loss reducer")
    if isinstance(relevance, Tensor):
        rel = relevance
    else:
        rel = estimate_relevance(scores, "zeros" if relevance is None else relevance, mask=mask)
    b = prepare_rerank(scores, groups, mask, num_groups, relevance=rel, validate_args=validate_args)
    B, N = b.mask.shape
    keep = check_int(keep, "keep", low=0, high=N)
    utility_k = check_int(utility_k, "utility_k", low=1)
    if max_utility_loss is not None:
        max_utility_loss = check_number(max_utility_loss, "max_utility_loss", low=0.0)
    if isinstance(boosts, (int, float)):  # one boost ("boosts=inf" in a spec)
        boosts = (boosts,)
    try:
        if isinstance(boosts, (str, bytes, Tensor)) or any(isinstance(x, bool) for x in boosts):
            raise TypeError
        bl = sorted(set(float(x) for x in boosts))
    except (TypeError, ValueError):
        raise ValueError(f"`boosts` must be a positive number or a sequence of them (inf allowed); got "
                         f"{boosts!r}") from None
    if not bl or any(not (x > 0) for x in bl):
        raise ValueError(f"`boosts` must be a non-empty sequence of positive numbers (inf allowed); got {boosts!r}")
    G = b.num_groups
    int_groups = not groups.is_floating_point()
    # the checked membership [B, N, G] stands for integer ids too (one-hot rows: the same values), so the
    # candidates skip re-coding the groups; the prefix family takes integer ids only
    soft_ok = not decl.fn.__module__.endswith(".prefix")
    groups_b = b.membership if (soft_ok or not int_groups) else (groups.unsqueeze(0) if b.squeeze else groups)
    # the objectives are compared with a margin of 1e-12: evaluate them in float64 (where the device has it), so
    # that candidates with mathematically equal objectives tie (float32 rounding would pick among them by the
    # items' order in the batch)
    work = precise_dtype(b.scores.device, torch.float64)
    soft_b = groups_b is b.membership
    groups_w = groups_b.to(work) if soft_b else groups_b
    rel_w = None if b.relevance is None else b.relevance.to(work)

    order, _ = start_order(b)
    dev = b.scores.device
    ar = torch.arange(N, device=dev)
    n = b.mask.sum(-1)
    real_sorted = ar[None, :] < n[:, None]
    # every candidate is scored in the *start frame* (items in the input ranking's order, padding last): a
    # candidate is then its sort keys, and Hard()'s "first" tie rule (earlier in the list ranks higher) breaks
    # ties by the input ranking -- one sort per candidate (inside the measure) instead of two
    if soft_b or groups_w.dim() == 3:
        groups_s = groups_w.gather(1, order[..., None].expand(B, N, groups_w.shape[-1]))
    else:
        groups_s = groups_w.gather(-1, order)
    rel_s = None if rel_w is None else rel_w.gather(-1, order)

    def objective(keys: Tensor) -> Tensor:
        return measure_loss(decl, keys.to(work), rel_s, groups_s, reducer=reducer, ordering=Hard(),
                            mask=real_sorted, num_groups=G if not soft_b else None, protected=protected,
                            reference=reference, reduction="none", validate_args=False, **measure_options).detach()

    s_sorted = b.scores.gather(-1, order).to(torch.float64)
    cnt = n.clamp(min=1).to(torch.float64)
    mean = torch.where(real_sorted, s_sorted, torch.zeros_like(s_sorted)).sum(-1, keepdim=True) / cnt[:, None]
    var = torch.where(real_sorted, (s_sorted - mean) ** 2, torch.zeros_like(s_sorted)).sum(-1, keepdim=True) / \
        cnt[:, None]
    std = var.sqrt()
    std = torch.where(std > 0, std, torch.ones_like(std))
    z = torch.where(real_sorted, (s_sorted - mean) / std, torch.zeros_like(s_sorted))
    memb_sorted = b.membership.to(torch.float64).gather(1, order[..., None].expand(B, N, G))
    fixed = ar[None, :] < keep
    zmax = z.abs().amax(-1, keepdim=True)
    # estimated utility: DCG@utility_k with the ranker's top-one probabilities as gains
    logits = torch.where(real_sorted, s_sorted, torch.full_like(s_sorted, float("-inf")))
    gains = torch.where(real_sorted, torch.softmax(logits, -1), torch.zeros_like(s_sorted))
    ident = ar.expand(B, N)
    u0 = _estimated_utility(gains, ident, utility_k)
    # the identity's keys: strictly decreasing in the start frame (padding is last and masked)
    ident_keys = (N - ar).to(torch.float64).expand(B, N)
    best_keys = ident_keys
    before = objective(ident_keys)
    best = before.clone()
    one_group = groups_present(b) < 2
    for beta in bl:
        for c in range(G):
            mc = memb_sorted[..., c]
            key = z + (mc * (4 * zmax + 4) if math.isinf(beta) else beta * mc)
            lo, hi = key.amin(-1, keepdim=True), key.amax(-1, keepdim=True)
            # finite keys (a measure may compare scores): the fixed top and the padding tie among themselves,
            # and "first" breaks those ties by the input ranking
            key = torch.where(fixed, hi + 1.0, torch.where(real_sorted, key, lo - 1.0))
            ok = ~one_group
            if max_utility_loss is not None:
                top = torch.sort(key, dim=-1, descending=True, stable=True).indices
                loss = 1.0 - _estimated_utility(gains, top, utility_k) / u0.clamp(min=1e-300)
                ok = ok & (loss <= max_utility_loss + 1e-12)
            obj = objective(key)
            better = ok & (obj < best - 1e-12 * best.abs().clamp(min=1.0))
            best = torch.where(better, obj, best)
            best_keys = torch.where(better[:, None], key, best_keys)
    best_perm = torch.sort(best_keys, dim=-1, descending=True, stable=True).indices
    ranking = order.gather(-1, best_perm)
    met = torch.ones(B, dtype=torch.bool, device=dev)
    return finish_rerank(b, ranking, order, one_group, met, torch.stack([before, best]))
