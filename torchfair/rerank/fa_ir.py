r"""FA*IR: a top-k ranking that passes the ranked group fairness test (Zehlike et al., CIKM 2017).

Zehlike, Bonchi, Castillo, Hajian, Megahed, Baeza-Yates. *FA*IR: A Fair Top-k Ranking Algorithm*. CIKM 2017,
Algorithm 1 with the adjusted m-table of §4.3 (:func:`torchfair.metrics.fa_ir_mtable`).

Algorithm 1 fills positions one by one: if the top ``i`` holds fewer protected items than ``m(i)``, the best
remaining protected item is placed; otherwise the better of the best remaining protected and non-protected items,
the protected one at equal scores (the authors' rule, and fairsearchcore's).  Both queues are in score order, so the ``j``-th protected item lands at ``min(o_j, d_j)``, where ``o_j`` is its
position in the score order and ``d_j = min{i : m(i) >= j}`` the first prefix that requires ``j`` protected items
(``m`` grows by at most 1 per position, so both sequences and their minimum are strictly increasing); the
non-protected items fill the remaining positions in score order.  That closed form is what runs here: one sort, a
``searchsorted`` and scatters, ``O(B N log N)``, batched on any device (the m-table is computed once on the CPU).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .._validation import check_bool, check_group_id
from ..metrics.prefix import fa_ir_mtable
from ._common import Reranking, finish_rerank, integer_codes, prepare_rerank

__all__ = ["fa_ir"]


def fa_ir(scores: Tensor, groups: Tensor, *, protected: int = 1, p: float = 0.5, alpha: float = 0.1,
          k: Optional[int] = None, adjust: bool = True, mask: Optional[Tensor] = None,
          num_groups: Optional[int] = None, backend: str = "auto", validate_args: bool = True) -> Reranking:
    r"""FA*IR re-ranking (Zehlike et al., CIKM 2017, Algorithm 1): the best ranking (by the scores) whose every
    prefix ``i <= k`` holds at least ``m(i)`` protected items,

    .. math:: m(i) = \min\{m : \mathrm{BinomCDF}(m;\, i, p) > \alpha_c\}

    with the adjusted significance ``alpha_c`` (§4.3; ``adjust=False``: ``alpha``).  ``protected``: the protected
    group id (checked against ``num_groups`` when given; a batch without it is a batch of one-group lists); every
    other item (unknown group -1 included) is non-protected.  ``k >= 1``: the length of the fair prefix, the
    m-table and its adjustment computed for that length; a list shorter than ``k`` uses its first ``n`` entries
    (``k`` is clamped to each list's length, so ``fa_ir:p=0.5,k=100`` runs on lists of any length).  Default:
    each list's own length ``n`` (not the padded width, so a list re-ranks the same alone or in any batch; with
    ``adjust`` the adjusted table is computed once per distinct length, ``O(n^2)`` per bisection step, cached).
    Below ``k`` the merge by score continues.  ``p`` in (0, 1): the
    target protected proportion.  When a list runs out of protected items the constraint cannot hold: the rest is
    filled by score and ``met`` is False for it.  The output passes :func:`torchfair.metrics.fa_ir_test` with the
    same ``p``, ``alpha`` and ``k`` (``k = n`` for the default) whenever ``met``, given alone (no padding).

    Ties: at equal scores the protected item comes first, as in the authors' Algorithm 1 (the protected candidate
    wins when its score is not below the non-protected one's) and in fairsearchcore, so that outputs match theirs
    on tied scores; ties within a group keep index order.  A tie costs no utility, so the rule only ever helps the
    protected group.  ``met`` and the m-table do not depend on it.

    ``backend``: how the m-tables are computed (:func:`torchfair.metrics.fa_ir_mtable`: ``"auto"``, ``"numba"``,
    ``"torch"``); the same tables, so the same ranking, either way.

    Shapes: ``scores`` ``[B, N]`` (or ``[N]``), ``groups`` ``[B, N]`` int ids, ``mask`` ``[B, N]`` bool.  Returns
    :class:`~torchfair.rerank.Reranking`.  Two groups here are "protected" and "not protected", unknown (-1)
    items counting as not protected: a list with no protected item, or only protected items, is returned
    unchanged (``one_group``); a list of protected and unknown items is re-ranked like any other.

    Example (protected items 2 and 3 ranked last; p = 0.5, alpha = 0.1 unadjusted: m = 0, 0, 0, 1)::

        >>> fa_ir(torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 0, 1, 1]), k=4, adjust=False).ranking
        tensor([0, 1, 2, 3])
        >>> fa_ir(torch.tensor([5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 0, 1]), k=5, adjust=False).ranking
        tensor([0, 1, 2, 4, 3])

    The tie rule, minimal example (two items, equal scores, item 1 protected; no prefix requires it, m = 0, 0)::

        >>> fa_ir(torch.tensor([1., 1.]), torch.tensor([0, 1]), adjust=False).ranking
        tensor([1, 0])
    """
    check_group_id(protected, "protected", num_groups)
    check_bool(adjust, "adjust")
    b = prepare_rerank(scores, groups, mask, num_groups, validate_args=validate_args, name="fa_ir")
    codes, G = integer_codes(groups, b, num_groups, "fa_ir", validate_args)
    B, N = b.mask.shape
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"`k` must be an int >= 1 (the length of the fair prefix; clamped to each list's length); "
                         f"got {k!r}")
    fa_ir_mtable(1, p, alpha, adjust=False, backend=backend)  # checks p, alpha and backend (ValueError naming them)
    n = b.mask.sum(-1)
    # per list, the m-table over its fair prefix, padded with N + 1 (never reached): with `k`, the table of length
    # k (a shorter list uses its first n entries); without, the table of the list's own length n, so a list
    # re-ranks the same in any batch width
    big_m = N + 1
    if k is not None:
        t = fa_ir_mtable(k, p, alpha, adjust=adjust, backend=backend)[:N]
        m = torch.full((N,), big_m, dtype=torch.long)
        m[:t.numel()] = t
        m = m.to(b.scores.device).expand(B, N).contiguous()
        kb = n.clamp(max=k)
    else:
        m = torch.full((B, N), big_m, dtype=torch.long)
        n_cpu = n.cpu()
        for length in sorted(set(n_cpu.tolist())):
            if length >= 1:
                m[n_cpu == length, :length] = fa_ir_mtable(length, p, alpha, adjust=adjust, backend=backend)
        m = m.to(b.scores.device)
        kb = n
    dev = b.scores.device
    is_p = (codes == protected) & b.mask
    order = _protected_first_order(b, is_p)
    p_sorted = is_p.gather(-1, order)  # [B, N]: is the item at start position k protected
    ar = torch.arange(N, device=dev)
    j = torch.cumsum(p_sorted.long(), -1)  # 1-based rank among protected items (at protected positions)
    # d_j = first prefix length i with m(i) >= j, as a 0-based position (K + N: never forced)
    d = torch.searchsorted(m, j.clamp(min=1), right=False)
    d = torch.where(d < kb[:, None], d, torch.full_like(d, 2 * N))
    big = torch.full_like(ar.expand(B, N), 2 * N)
    qpos = torch.where(p_sorted, torch.minimum(ar.expand(B, N), d), big)  # new position of protected items
    # free positions for the others, in order: sort the occupied flags
    occupied = torch.zeros(B, N + 1, dtype=torch.bool, device=dev).scatter_(
        -1, qpos.clamp(max=N), torch.ones_like(p_sorted))[:, :N]
    free_pos = torch.sort(torch.where(occupied, big, ar.expand(B, N)), dim=-1, stable=True).values
    rank_np = torch.cumsum((~p_sorted).long(), -1) - 1  # 0-based rank among the others (padded included, last)
    other_pos = free_pos.gather(-1, rank_np.clamp(min=0, max=N - 1))
    new_pos = torch.where(p_sorted, qpos, other_pos)  # position of the item at start position k
    ranking = torch.empty_like(order).scatter_(-1, new_pos, order)
    # met: every prefix i <= min(k, n) holds m(i) protected items
    cnt = torch.cumsum(is_p.gather(-1, ranking).long(), -1)
    inside = ar[None, :] < kb[:, None]
    met = ((cnt >= m) | ~inside).all(-1)
    # a one-group list comes back unchanged (the closed form gives its start order anyway); its met is computed
    # like any other's: a list without protected items fails every prefix that requires one
    one_group = ~(is_p.any(-1) & (~is_p & b.mask).any(-1))
    return finish_rerank(b, ranking, order, one_group, met)


def _protected_first_order(b, is_p: Tensor) -> Tensor:
    """The start order of FA*IR: descending scores, at equal scores the protected items first (then index order),
    padded items last: the authors' tie rule (Algorithm 1 takes the protected candidate when its score is not
    below the other's; fairsearchcore 1.0.4 does the same)."""
    pre = torch.sort(is_p.to(torch.uint8), dim=-1, descending=True, stable=True).indices  # protected first
    key = torch.where(b.mask, b.scores, torch.full_like(b.scores, float("-inf"))).gather(-1, pre)
    return pre.gather(-1, torch.sort(key, dim=-1, descending=True, stable=True).indices)
