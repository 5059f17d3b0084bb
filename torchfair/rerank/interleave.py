r"""Share interleaving: keep the ranker's top ``keep``, then give the protected group a share ``p`` of every prefix.

Below the fixed top ``keep`` (the ranker's own top, clamped to each list's length) the remaining items are split
into the protected group and the rest (every other group and unknown items, -1), each side in the ranker's order.
They are merged so that every prefix of ``j`` merged slots holds

.. math:: c_j = \lceil p \, j \rceil

protected items while both sides last (the protected item goes first when its share is due, i.e. slot ``j`` is
protected iff ``c_{j-1} < p j``); when one side runs out, the other fills the rest in its own order.  Closed form
(no per-slot loop): the ``i``-th protected item (1-based) lands in merged slot ``floor((i - 1) / p) + 1`` and the
``m``-th other item in slot ``ceil(m / (1 - p))``; one sort of these slot keys is the merge (``p = 1``: every
protected item first; ``p = 0``: every protected item last).

This is the deterministic proportional merge behind DetConstSort's prefix counts (Geyik, Ambler & Kenthapadi, KDD
2019, §4.2: at least ``floor(j p_g)`` of each group in every prefix) applied below a fixed top, with the share as a
continuous strength: ``p`` near the protected group's own share of the list leaves the order nearly as it was, and
``p = 1`` puts the whole protected group right below the top ``keep``.  It reads only the scores' order and the
groups (no relevance, no training).  :func:`torchfair.rerank.targeted_rerank` with ``family="interleave"`` picks
the share per list that lowers an exact fairness measure (the same merge, several shares).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .._validation import check_group_id, check_int, check_number
from ._common import Reranking, finish_rerank, integer_codes, prepare_rerank, start_order

__all__ = ["interleave", "interleave_slots"]


def interleave_slots(protected_sorted: Tensor, real_sorted: Tensor, keep: Tensor, p: float) -> Tensor:
    """The merged position of every item, in the *start frame* (items in the input ranking's order, padding last).

    ``protected_sorted`` ``[B, N]`` bool (the item is in the protected group), ``real_sorted`` ``[B, N]`` bool (real
    item), ``keep`` ``[B]`` long (fixed top, at most each list's length), ``p`` in ``[0, 1]``.  Returns ``[B, N]``
    float64 sort keys, *lower first*: the fixed top keeps its positions, then the merge of the module docstring,
    then the padding.  Ties cannot occur (every item has its own slot), so a stable ascending sort of the keys is
    the re-ranking."""
    B, N = real_sorted.shape
    dev = real_sorted.device
    ar = torch.arange(N, device=dev)
    fixed = ar[None, :] < keep[:, None]
    free = real_sorted & ~fixed
    prot = free & protected_sorted
    other = free & ~protected_sorted
    # 1-based rank of each free item within its side, in start order
    i = torch.cumsum(prot.to(torch.int64), -1).to(torch.float64)
    m = torch.cumsum(other.to(torch.int64), -1).to(torch.float64)
    eps = 1e-9  # float slack on the closed forms: (i - 1) / p and m / (1 - p) at integers
    if p <= 0.0:
        s_prot, s_other = N + i, m  # protected after every other item
    elif p >= 1.0:
        s_prot, s_other = i, N + m  # protected first
    else:
        s_prot = torch.floor((i - 1.0) / p + eps) + 1.0
        s_other = torch.ceil(m / (1.0 - p) - eps)
    # one side exhausted: the slots of the other side keep their order, so the sort still merges correctly; ties
    # between the two sides cannot happen mathematically (each slot is protected or not), float slack aside: the
    # protected item first (+0 against +0.5)
    key = torch.where(prot, s_prot, s_other + 0.5)
    key = torch.where(fixed, ar.to(torch.float64) - 3.0 * N, key)  # the fixed top, in order, before the merge
    return torch.where(real_sorted, key, 4.0 * N + ar.to(torch.float64))  # padding last, in order


def interleave(scores: Tensor, groups: Tensor, *, p: float = 0.5, keep: int = 0, protected: int = 1,
               mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
               validate_args: bool = True) -> Reranking:
    r"""Keep the top ``keep`` and merge the rest so that every prefix of ``j`` merged slots holds
    :math:`\lceil p j \rceil` protected items while both sides last (module docstring: the rule, its closed form).

    ``p`` in ``[0, 1]``: the protected group's share of each next slot; ``keep >= 0``: the fixed top, clamped to
    each list's length (``keep=10`` works on lists of 5 items: they come back unchanged); ``protected``: the
    protected group id (checked against ``num_groups`` when given); every other item, unknown (-1) included, is on
    the other side.  Each side keeps the ranker's order; ties in the scores go by list index.

    Shapes: ``scores`` ``[B, N]`` (or ``[N]``), ``groups`` ``[B, N]`` int ids, ``mask`` ``[B, N]`` bool.  Returns
    :class:`~torchfair.rerank.Reranking`; ``met`` is True where every merged prefix holds at least its
    :math:`\lceil p j \rceil` protected items (False where the protected side ran out first), ``one_group`` flags lists with no protected item or no other item (returned unchanged).

    Example (the protected group 1 sits at the bottom; keep the top item, then one slot in two)::

        >>> interleave(torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1]), p=0.5,
        ...            keep=1).ranking.tolist()
        [0, 3, 1, 4, 2, 5]
    """
    b = prepare_rerank(scores, groups, mask, num_groups, validate_args=validate_args, name="interleave")
    p = check_number(p, "p", low=0.0, high=1.0)
    keep = check_int(keep, "keep", low=0)
    protected = check_group_id(protected, "protected", num_groups)
    codes, G = integer_codes(groups, b, num_groups, "interleave", validate_args)
    order, _ = start_order(b)
    B, N = b.mask.shape
    dev = order.device
    n = b.mask.sum(-1)
    real_sorted = torch.arange(N, device=dev)[None, :] < n[:, None]
    prot_sorted = codes.gather(-1, order) == protected
    prot_sorted = prot_sorted & real_sorted
    kk = torch.clamp(n, max=keep)
    key = interleave_slots(prot_sorted, real_sorted, kk, float(p))
    perm = torch.sort(key, dim=-1, stable=True).indices
    ranking = order.gather(-1, perm)
    n_prot = prot_sorted.sum(-1)
    one_group = (n_prot == 0) | (n_prot == n)
    # met: every merged prefix j holds at least ceil(p j) protected items, i.e. the protected side did not run out
    # before its due slots: with a free protected items and o others, iff a >= ceil(p (a + o))
    free_prot = (prot_sorted & (torch.arange(N, device=dev)[None, :] >= kk[:, None])).sum(-1)
    free = n - kk
    due = torch.ceil(float(p) * free.to(torch.float64) - 1e-9).to(torch.int64)
    met = free_prot >= due
    return finish_rerank(b, ranking, order, one_group, met)

