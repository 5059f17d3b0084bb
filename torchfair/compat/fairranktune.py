r"""FairRankTune 0.0.7's ``Metrics`` module, number for number, in torch; and its two ``Rankers``.

Every metric of FairRankTune (FRT; Cachel & Rundensteiner, https://github.com/KCachel/fairranktune, version
0.0.7 on PyPI) with its seven per-group aggregators, built on torchfair's pieces: the position weights come from
:mod:`torchfair.browsing` (FRT's ``1/log2(rank+1)`` is :class:`~torchfair.browsing.Logarithmic`, its RBP decay
:class:`~torchfair.browsing.RBP`, its attention ``100 * Geometric(p)``).  With the default hard ranking
(``ordering=None`` or ``Hard()``) the rankings are read directly -- the slots in position order, group codes,
per-group sums by ``index_add``, ARP's mixed pairs won by counting, NDKL's prefix distributions by cumulative sums
-- which is as fast as plain vectorised code for the formulas (``experiments/bench_frt.py``, results in
``experiments/results/bench_frt.md``).  Any other ordering (a relaxed one, ``Hard(ties="average")``, a
precomputed :class:`~torchfair.orderings.OrderedBatch`) goes through the ordering machinery: exposure from the
:class:`~torchfair.orderings.OrderedBatch`, ARP from :func:`torchfair.metrics.rank_parity`, NDKL's prefixes from the
ordering's position matrix; a relaxed ordering therefore gives differentiable versions of the same numbers
(tests/compat/test_fairranktune.py checks that both paths agree on hard rankings).

Names and positional arguments follow FRT: ``EXP(rankings, groups, combo)``, ``EXPU(rankings, groups,
relevance, combo)``, ``EXPRU(rankings, groups, relevance, ctr, combo)``, ``AWRF(rankings, groups, p, combo)``,
``ERBE/ERBP(rankings, groups, decay, combo)``, ``ERBR(rankings, groups, relevance, decay, combo)``,
``ARP(rankings, groups, combo)``, ``NDKL(rankings, groups)``, ``IAA(rankings, relevance)``.

Inputs (two forms, chosen by the type of ``rankings``)
------------------------------------------------------
*FRT form* (pandas-free): ``rankings`` is one ranking (a sequence of item ids, best first), a sequence of
rankings (they may differ in length; ``None``/NaN entries are dropped, as FRT drops NaN cells), anything with
``.columns`` (a pandas ``DataFrame`` laid out as FRT expects, one ranking per column), or an integer tensor
``[B, N]``/``[N]`` of item ids (negative = padding).  ``groups`` is FRT's ``item_group_dict`` (item -> group label;
for integer item ids also a sequence/tensor indexed by item id).  ``relevance``/``ctr`` are aligned with the
rankings *by position*, as FRT's ``relevance_df``/``ctr_df`` (same container kinds; NaN dropped per ranking), or
a dict item -> value.  Computed in float64.  Groups are the sorted unique labels of the dict (``np.unique``).

*Tensor form* (torchfair's conventions): ``rankings`` is a floating ``scores [B, N]``/``[N]`` tensor (each row a
list of items, ranked by descending score through ``ordering``), ``groups`` integer ids ``[B, N]`` (or ``[B, N, G]``
soft membership), ``relevance``/``ctr`` ``[B, N]`` aligned with the items, ``mask`` ``[B, N]``.  The rows are the
rankings of one FRT call.  FRT divides by the group sizes of the *dictionary*; pass them as ``group_sizes [G]``
(default: the largest per-list count of each group, which is the dict count when every list ranks the whole item
set).  Group labels are ``0..G-1``.

Errors about the type or shape of the first argument name it ``rankings``, FRT's name for it; the value checks of
a score tensor (NaN, inf) name it ``scores``, as torchfair's measures do.

Results: the group metrics return :class:`FRTResult` ``(value, per_group, labels)`` (``value`` a 0-dim tensor,
``per_group [G]``; ``.to_dict()`` gives FRT's second return value), NDKL and IAA a tensor.

Conventions (FRT's): 1-based ranks, exposure ``1/log2(rank+1)``; per-group quantities are *summed over all
rankings* and divided by the group's item count in the dictionary (not averaged over rankings); ``LTwo`` is the
unsquared L2 norm and ``Variance`` the population variance (``ddof=0``).  Degenerate inputs give IEEE values as
numpy does (``0/0 = nan``, ``x/0 = inf``) instead of torchfair's usual "0 and invalid".

Where FRT 0.0.7 deviates from its documentation, or has a bug (reproduced here, since we promise FRT's numbers)
---------------------------------------------------------------------------------------------------------------
1. Aggregators: the docs give ``LTwo = ||V||_2^2`` and ``Variance = 1/(G-1) sum (V_g - mean)^2``; the code returns
   the *unsquared* norm (``np.linalg.norm``) and the population variance (``np.var``, ``ddof=0``).
   ``strict_docs=True`` switches to the documented formulas.  (The docs' ranges are also off: ``MaxMinDiff`` is
   not bounded by 1 for AWRF (attention is scaled by 100), multi-ranking EXP or ARP.)
2. Multiple rankings: per-group values are sums over the rankings divided by the dictionary group size, so they
   grow with the number of rankings; ARP's "average mixed pairs won" is likewise *summed* over rankings (values
   above 1 for several rankings).
3. Unknown ``combo``: FRT silently returns ``None``; here a ``ValueError`` is raised.
4. ERBE/ERBP/ERBR docs give the RBP exposure as ``gamma ** (1 - rank)``; the code (and Kirnap et al.) use
   ``gamma ** (rank - 1)``.  The docs' ERBR usage example calls ``ERBP``.
5. ERBR: the check that relevance is binary is dead code (``if any((r != 0) | (r != 1)): assert "message"`` asserts
   a non-empty string), so any relevance is accepted and ``|g^rel|`` is really the *sum* of relevance; a group
   without relevance gives ``inf``/``nan``.  Reproduced (no check).
6. IAA: ``return`` sits inside the loop over rankings, so only the *first* ranking is evaluated (the docs describe
   the cumulative, amortized attention vs. relevance over the rankings); the [0, 1] relevance check is dead code
   as in 5; attention and relevance are compared per position without normalisation.  ``strict_docs=True`` gives
   the documented amortized value ``sum_items |sum_rankings attention - sum_rankings relevance|``;
   ``per_ranking=True`` gives the per-ranking values.
7. ARP: each ranking must contain every item of the dictionary (FRT raises ``KeyError``/``IndexError``
   otherwise, because group members are looked up in the dictionary, not in the ranking); here mixed pairs are
   counted within each ranking, which equals FRT wherever FRT runs.  A group that is the only group of a ranking
   adds ``0/0 = nan`` (reproduced); a group absent from a ranking adds 0.
8. NDKL: the reference distribution ``D_X`` is that of the *ranking*, not of the dictionary's item set, and an
   epsilon ``1e-7`` is added to both distributions (unnormalised) inside the KL divergence; FRT refuses more than
   one ranking (``AssertionError``), here several rankings give one value each, ``[B]``.
9. AWRF is not Sapiezynski et al.'s AWRF (attention-weighted group proportions compared with a target
   distribution) but the group average of the attention ``100 p (1 - p) ** (rank - 1)``, as FRT's docs say.
10. EXPU's out-of-range error message names "Exposure Realized Utility"; EXPU/EXPRU raise ``AssertionError``
    for relevance or ctr outside [0, 1] (here :class:`FRTInputError`, a ``ValueError`` and ``AssertionError``).
    EXPRU ("Exposure Realized Utility") uses no exposure: its per-group value is average ctr / average relevance.
11. Relevance and ctr are aligned with rankings by position after dropping NaNs separately from each column,
    so a NaN pattern that differs from the ranking's silently misaligns them (reproduced in the FRT form).

Re-rankers
----------
``DETCONSTSORT(current_ranking_df, item_group_dict, current_ranking_scores_df, distribution, k)`` and
``EPSILONGREEDY(current_ranking_df, item_group_dict, current_ranking_scores_df, epsilon, seed)`` take and return
what FRT's do, and give FRT's outputs exactly (tests/compat/test_fairranktune_rerankers.py runs both on random inputs
against the package): the ranking and the scores are read from column 0 of the two DataFrames (aligned by
position); the result is ``(ranking DataFrame, {item: group}, scores DataFrame)``, one column ``0`` each, the dict's
keys and values numpy scalars (``np.str_``, ``np.int64``) as FRT's ``dict(zip(array, array))`` makes them (a
repeated item keeps one entry).  torchfair's own :func:`torchfair.rerank.det_const_sort` and
:func:`torchfair.rerank.epsilon_greedy` are the paper versions on batched tensors; the differences are listed here.
Per list the compat functions take about half FairRankTune's time (``experiments/results/bench_frt.md``).

12. DETCONSTSORT (Geyik et al. 2019, Algorithm 3).  Runs the compiled walk of :mod:`torchfair.rerank.detconstsort`
    with the settings below (the keywords of :func:`torchfair.rerank.detconstsort.detconstsort_walk`); FRT
    differs from the paper and from :func:`~torchfair.rerank.det_const_sort` in:

    a. the insertion's deadline test is the paper's 1-based ``maxIndices[start-1] >= start`` applied to 0-based
       indices, so an item may move down to one position past its deadline (``deadline_slack=1``), and a prefix
       can miss the minimum count it was built for: with ``k = 2``, a 50/50 target and scores favouring group A,
       FRT's top 2 hold no item of group B;
    b. the walk runs ``while last_empty_indx <= k`` and places every item of a step: it places ``k + 1`` items or
       more (the whole ranking at most) and keeps the first ``k``, so an item placed beyond position ``k`` can move
       up into the top ``k`` (``whole_batches=True``, walk length ``k + 1``); the paper and torchfair stop at ``k``;
    c. minimum counts ``floor(k' p_g)`` in floating point without tolerance: a share ``1 - 0.8 =
       0.19999999999999996`` gives ``floor(5 p) = 0`` (torchfair adds 1e-9: 1);
    d. each group's items are taken in the order of ``current_ranking_df``, not re-sorted by score, while the
       groups of one step and the insertion compare scores: on a ranking that is not sorted by score a group's
       lower-scored item can be placed first (torchfair starts from the scores' order);
    e. ties: the groups of one step are ordered by Python's stable ``sorted(..., reverse=True)`` on their items'
       scores, so equal scores keep the order of the sorted group labels (``np.unique``), and the insertion moves
       an item up only past strictly lower scores (torchfair breaks ties by the starting position).  Here the
       scores become integer keys with the same order and the same ties (``np.unique``'s inverse);
    f. FRT loops forever when the groups with a positive share hold fewer than ``min(k + 1, n)`` items of the
       ranking (a group with share 0 is never placed; nothing else ends the walk): ``ValueError`` here.  FRT raises
       ``KeyError`` for a group of the ranking without a share, for ``k > n`` and for an item without a group:
       ``ValueError`` here.  Checked here, not by FRT (``ValueError`` naming the argument): shares finite, in
       [0, 1], summing to 1 (tolerance 1e-6), a dict naming only groups of ``item_group_dict`` (FRT ignores
       extra keys; a group of the dict absent from this ranking is fine), a list only with integer labels
       ``0..len-1`` (FRT indexes it by label); ``k`` an int in ``[1, n]`` (FRT returns empty frames for ``k <= 0``);
       no NaN score (FRT's comparisons with NaN are arbitrary); as many scores as items (FRT ignores extra scores
       and raises ``IndexError`` for missing ones).

    Returned scores are those of the ``k`` returned items.

13. EPSILONGREEDY (Feng & Shah 2022).  FRT calls ``np.random.seed(seed)`` -- reseeding numpy's *global* random
    state as a side effect -- then draws ``np.random.rand()`` at every position and, when it is ``<= epsilon``
    (not ``<``) and the position is not the last, ``np.random.randint(i + 1, n)``: the number of draws depends on
    their outcomes, so they are made one by one.  Here they come from a private ``np.random.RandomState(seed)``:
    the same legacy Mersenne-Twister stream in the same order, hence FRT's output, and numpy's global state is
    left untouched.  :func:`torchfair.rerank.epsilon_greedy` runs the same swap process batched on tensors with
    a ``torch.Generator`` (``u < epsilon``, ``j = i + 1 + floor(v (n - i - 1))``): the same seed gives other swaps,
    only the distribution over outputs is the same; the compat function is a plain loop of its own for that
    reason.  Scores are looked up per item with ``list.index``, so every copy of a repeated item gets the first
    copy's score (reproduced).  ``epsilon`` must lie in [0, 1] (FRT accepts any number: above 1 always swaps)
    and ``seed`` be something ``RandomState`` accepts (``ValueError`` naming them); an item without a group and
    a scores frame of another length are ``ValueError`` (FRT: ``KeyError`` / ignored or ``IndexError``).

Example (FRT's toy: seven men then three women)::

    >>> r = ["Joe", "Jack", "Nick", "David", "Mark", "Josh", "Dave", "Bella", "Heidi", "Amy"]
    >>> g = {x: "M" if i < 7 else "W" for i, x in enumerate(r)}
    >>> res = EXP(r, g, "MinMaxRatio")
    >>> round(float(res.value), 6), {k: round(v, 6) for k, v in res.to_dict().items()}
    (0.580806, {'M': 0.519714, 'W': 0.301853})
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from numbers import Number
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from .. import _linalg
from .._validation import as_membership, check_number, group_codes, prepare, require
from ..browsing import RBP, BrowsingModel, Geometric, Logarithmic
from ..metrics.common import clamp_rounding, order, safe_div
from ..metrics.pairwise import rank_parity
from ..orderings.base import OrderingLike
from ..orderings import Hard, OrderedBatch, Ordering

__all__ = ["EXP", "EXPU", "EXPRU", "AWRF", "ERBE", "ERBP", "ERBR", "ARP", "NDKL", "IAA",
           "MinMaxRatio", "MaxMinRatio", "MaxMinDiff", "MaxAbsDiff", "MeanAbsDev", "LTwo", "Variance",
           "COMBOS", "aggregate", "FRTResult", "FRTInputError", "NDKL_EPSILON", "DETCONSTSORT", "EPSILONGREEDY"]

#: the ``combo`` names FRT accepts
COMBOS = ("MinMaxRatio", "MaxMinRatio", "MaxMinDiff", "MaxAbsDiff", "MeanAbsDev", "LTwo", "Variance")
#: FRT adds this to both distributions inside NDKL's KL divergence
NDKL_EPSILON = 1e-7



class FRTInputError(ValueError, AssertionError):
    """Raised where FRT raises ``AssertionError`` for bad values: relevance / ctr outside [0, 1] in EXPU and EXPRU
    (deviation 10).  Catching either ``ValueError`` or ``AssertionError`` works."""


class FRTResult(NamedTuple):
    """A group metric: the aggregated ``value`` (0-dim), ``per_group [G]`` and the group ``labels`` (sorted)."""

    value: Tensor
    per_group: Tensor
    labels: List[Any]

    def to_dict(self) -> Dict[Any, float]:
        """FRT's second return value: ``{group label: per-group value}``."""
        return {lab: float(v) for lab, v in zip(self.labels, self.per_group.tolist())}


# --------------------------------------------------------------------------------------------- aggregators
def MinMaxRatio(values: Tensor) -> Tensor:
    """``min_g V / max_g V`` over the last dimension (``0/0 = nan`` and ``x/0 = inf`` as in numpy)."""
    return values.amin(-1) / values.amax(-1)


def MaxMinRatio(values: Tensor) -> Tensor:
    """``max_g V / min_g V`` over the last dimension."""
    return values.amax(-1) / values.amin(-1)


def MaxMinDiff(values: Tensor) -> Tensor:
    """``max_g V - min_g V`` over the last dimension."""
    return values.amax(-1) - values.amin(-1)


def MaxAbsDiff(values: Tensor) -> Tensor:
    """``max_g |V_g - mean(V)|``.  FRT scans with ``if |V_g - mean| > best`` starting from 0, so NaN deviations
    are skipped (all-NaN gives 0); reproduced."""
    dev = (values - values.mean(-1, keepdim=True)).abs()
    dev = torch.where(torch.isnan(dev), torch.zeros_like(dev), dev)
    return dev.amax(-1)


def MeanAbsDev(values: Tensor) -> Tensor:
    """``(1/G) sum_g |V_g - mean(V)|``."""
    return (values - values.mean(-1, keepdim=True)).abs().sum(-1) / values.shape[-1]


def LTwo(values: Tensor, squared: bool = False) -> Tensor:
    """``||V||_2``, *unsquared* as FRT's code (its docs say ``||V||_2^2``: ``squared=True``)."""
    sq = (values * values).sum(-1)
    if squared:
        return sq
    # sqrt's derivative is infinite at 0 (no item of a known group: V = 0): the value stays 0, the gradient 0
    zero = sq == 0
    return torch.where(zero, torch.zeros_like(sq), torch.sqrt(torch.where(zero, torch.ones_like(sq), sq)))


def Variance(values: Tensor, ddof: int = 0) -> Tensor:
    """Population variance (``np.var``, ``ddof=0``) as FRT's code; its docs say ``1/(G-1)``: ``ddof=1``."""
    dev = values - values.mean(-1, keepdim=True)
    return (dev * dev).sum(-1) / (values.shape[-1] - ddof)


_AGG = {"MinMaxRatio": MinMaxRatio, "MaxMinRatio": MaxMinRatio, "MaxMinDiff": MaxMinDiff,
        "MaxAbsDiff": MaxAbsDiff, "MeanAbsDev": MeanAbsDev, "LTwo": LTwo, "Variance": Variance}


def aggregate(values: Tensor, combo: str, *, strict_docs: bool = False) -> Tensor:
    """Apply FRT's ``combo`` aggregator over the last dimension of per-group values ``[..., G]``.

    ``strict_docs=True`` uses the documented ``LTwo`` (squared) and ``Variance`` (``1/(G-1)``) instead of the code's.
    FRT returns ``None`` for an unknown combo; here it is a ``ValueError``.
    """
    if combo not in _AGG:
        raise ValueError(f"`combo` must be one of {COMBOS}; got {combo!r}")
    if strict_docs and combo == "LTwo":
        return LTwo(values, squared=True)
    if strict_docs and combo == "Variance":
        return Variance(values, ddof=1)
    return _AGG[combo](values)


# --------------------------------------------------------------------------------------------- inputs
class _Inputs(NamedTuple):
    scores: Optional[Tensor]  # [B, N] (None in the FRT form: the rankings are given)
    groups: Optional[Tensor]  # [B, N] ids (-1: none) or [B, N, G] soft
    mask: Tensor              # [B, N] bool
    num_groups: Optional[int]
    sizes: Optional[Tensor]   # [G] or None (derive)
    labels: Optional[List[Any]]
    items: Tensor             # [B, N] item index (for amortized IAA)
    relevance: Optional[Tensor]
    ctr: Optional[Tensor]
    squeeze: bool
    frt_form: bool
    dense: Optional[bool] = None  # every slot holds a real item (None: not known yet)
    codes_known: bool = False     # the FRT form's group codes: every real item has one (no -1 but padding)


def _missing(x) -> bool:
    t = type(x)
    if t is int or t is str:
        return False
    if t is float:
        return x != x
    if x is None or t.__name__ in ("NAType", "NaTType"):
        return True
    try:
        return bool(x != x)  # NaN (float, numpy float)
    except Exception:  # pragma: no cover - exotic objects
        return False


def _is_scalar(x) -> bool:
    return isinstance(x, (str, bytes, Number)) or x is None or (hasattr(x, "shape") and getattr(x, "ndim", 1) == 0)


def _columns(x) -> List[List[Any]]:
    """FRT-form container -> list of rankings (or aligned value lists), NaN/None dropped."""
    if hasattr(x, "columns") and not isinstance(x, Tensor):
        cols = [list(x[c]) for c in x.columns]
    elif isinstance(x, Tensor):
        t = x.unsqueeze(0) if x.dim() == 1 else x
        cols = t.tolist()
    else:
        seq = list(x)
        cols = [seq] if (len(seq) == 0 or all(_is_scalar(v) for v in seq)) else [list(s) for s in seq]
    return [[v for v in col if not _missing(v)] for col in cols]


def _sorted_labels(values) -> List[Any]:
    return sorted(set(values))


def _scatter_rows(flat: List[Any], rankings: List[List[Any]], B: int, N: int, fill: Tensor) -> Tensor:
    """``[B, N]`` tensor holding ``flat`` (the rankings' values, ranking after ranking) left-aligned in the rows,
    ``fill`` elsewhere."""
    lens = torch.tensor([len(r) for r in rankings], dtype=torch.long)
    mask = torch.arange(N)[None, :] < lens[:, None]
    out = fill.expand(B, N).clone()
    out[mask] = torch.tensor(flat, dtype=fill.dtype)
    return out


def _aligned(values, rankings: List[List[Any]], B: int, N: int, name: str) -> Tensor:
    """Relevance/ctr for the FRT form: a dict item -> value, or containers aligned with the rankings by position."""
    if isinstance(values, dict):
        flat = [float(values[it]) for r in rankings for it in r]
    else:
        cols = _columns(values)
        if len(cols) < B:
            raise ValueError(f"`{name}` has {len(cols)} columns but there are {B} rankings")
        flat = []
        for b, r in enumerate(rankings):
            c = cols[b][:len(r)]
            if len(c) < len(r):  # FRT would raise IndexError
                raise IndexError(f"`{name}` column {b} has {len(cols[b])} values for a ranking of {len(r)} items")
            flat.extend(float(v) for v in c)
    return _scatter_rows(flat, rankings, B, N, torch.zeros((), dtype=torch.float64))


def _lookup(table: Tensor, ids: Tensor) -> Tensor:
    """``table[ids]`` (``index_select`` on the flattened ids: several times faster than advanced indexing)."""
    return table.index_select(0, ids.reshape(-1)).view(ids.shape)


def _tensor_ranking_inputs(rankings: Tensor, groups, relevance, ctr) -> _Inputs:
    """Integer tensor of item ids ``[B, N]`` (negative = padding): vectorised FRT form."""
    squeeze = rankings.dim() == 1
    r = (rankings.unsqueeze(0) if squeeze else rankings).long()
    if not r.numel():
        lo, hi = 0, -1
    elif groups is None:  # the largest id only matters for the group lookup
        lo, hi = int(r.min()), -1
    else:
        lo, hi = (int(v) for v in torch.aminmax(r))
    dense = lo >= 0  # no padding: the common case skips every masking step
    mask = torch.ones((), dtype=torch.bool, device=r.device).expand(r.shape) if dense else r >= 0
    ids = r if dense else r.clamp(min=0)
    labels = sizes = gid = None
    num_groups = None
    if groups is not None:
        if isinstance(groups, dict):
            keys = torch.tensor([int(k) for k in groups.keys()], dtype=torch.long)
            labels = _sorted_labels(groups.values())
            pos = {lab: i for i, lab in enumerate(labels)}
            code = torch.tensor([pos[v] for v in groups.values()], dtype=torch.long)
            lookup = torch.full((int(keys.max()) + 1 if keys.numel() else 1,), -1, dtype=torch.long)
            lookup[keys] = code
            M = lookup.numel()
        else:
            gt = torch.as_tensor(groups)
            if gt.dim() != 1:
                raise ValueError("with item ids in `rankings`, `groups` must be a dict item -> group or a 1-D "
                                 f"tensor of group labels indexed by item id; got shape {tuple(gt.shape)}")
            uniq, code = torch.unique(gt, sorted=True, return_inverse=True)
            labels = uniq.tolist()
            lookup, M = code.long(), code.numel()
        if hi >= M and bool(((ids >= M) & mask).any()):
            raise KeyError("an item id of `rankings` has no entry in `groups`")
        gid = _lookup(lookup.to(r.device), ids if hi < M else ids.clamp(max=M - 1))
        if bool((lookup < 0).any()) and bool(((gid < 0) & mask).any()):  # ids without a group in the dict
            raise KeyError("an item id of `rankings` has no entry in `groups`")
        if not dense:
            gid = torch.where(mask, gid, torch.full_like(gid, -1))
        num_groups = len(labels)
        valid_codes = lookup[lookup >= 0]
        sizes = torch.bincount(valid_codes, minlength=num_groups).to(torch.float64)

    def vals(x, name):
        if x is None:
            return None
        if isinstance(x, dict):
            lk = torch.zeros(int(ids.max()) + 1, dtype=torch.float64)
            for k, v in x.items():
                if int(k) < lk.numel():
                    lk[int(k)] = float(v)
            t = _lookup(lk, ids)
        else:
            t = torch.as_tensor(x, dtype=torch.float64)
            t = t.unsqueeze(0) if t.dim() == 1 else t
            if t.shape != r.shape:
                raise ValueError(f"`{name}` must have the shape of `rankings` {tuple(r.shape)}; "
                                 f"got {tuple(t.shape)}")
        return t if dense else torch.where(mask, t, torch.zeros((), dtype=torch.float64))

    return _Inputs(None, gid, mask, num_groups, sizes, labels, ids, vals(relevance, "relevance"),
                   vals(ctr, "ctr"), squeeze, True, dense, True)


def _check_rankings_tensor(rankings: Tensor) -> None:
    """The tensor forms: floating scores or integer item ids, ``[B, N]`` or ``[N]`` (``ValueError`` naming
    ``rankings`` for a 0-dim tensor, more dimensions, booleans or complex numbers)."""
    if rankings.dtype == torch.bool or rankings.is_complex():
        raise ValueError(f"`rankings` must be floating scores or integer item ids; got {rankings.dtype}")
    if rankings.dim() not in (1, 2):
        raise ValueError(f"`rankings` must have shape [B, N] or [N]; got {tuple(rankings.shape)}")


def _inputs(rankings, groups, relevance=None, ctr=None, mask=None, num_groups=None, group_sizes=None) -> _Inputs:
    if isinstance(rankings, Tensor):
        _check_rankings_tensor(rankings)
    if isinstance(rankings, Tensor) and rankings.is_floating_point():
        # tensor form: scores of a batch of lists
        squeeze = rankings.dim() == 1
        if groups is not None and not isinstance(groups, Tensor):
            raise ValueError("with `scores` as a floating tensor, `groups` must be a tensor of ids [B, N] "
                             "(or soft membership [B, N, G]); use item ids in `rankings` for a dict")
        N = rankings.shape[-1]
        items = torch.arange(N, device=rankings.device)
        items = items.expand(1 if squeeze else rankings.shape[0], N)
        sizes = None if group_sizes is None else torch.as_tensor(group_sizes, dtype=torch.float64)
        return _Inputs(rankings, groups, mask, num_groups, sizes, None, items, relevance, ctr, squeeze, False)
    if isinstance(rankings, Tensor):
        return _tensor_ranking_inputs(rankings, groups, relevance, ctr)
    cols = _columns(rankings)
    B, N = len(cols), max((len(c) for c in cols), default=0)
    if B == 0 or N == 0:
        raise ValueError("`rankings` holds no item")
    gid = labels = sizes = None
    item_index: Dict[Any, int] = {}
    flat = [it for col in cols for it in col]
    if groups is not None:
        if not isinstance(groups, dict):
            raise ValueError("`groups` must be a dict item -> group label (FRT's item_group_dict)")
        labels = _sorted_labels(groups.values())
        pos = {lab: i for i, lab in enumerate(labels)}
        item_group = {it: pos[g] for it, g in groups.items()}
        cnt = Counter(item_group.values())
        sizes = torch.tensor([float(cnt[i]) for i in range(len(labels))], dtype=torch.float64)
        gid = _scatter_rows([item_group[it] for it in flat], cols, B, N,  # KeyError as FRT
                            torch.full((), -1, dtype=torch.long))
        item_index = {it: i for i, it in enumerate(groups)}
    items = _scatter_rows([item_index.setdefault(it, len(item_index)) for it in flat], cols, B, N,
                          torch.zeros((), dtype=torch.long))
    mask = torch.arange(N)[None, :] < torch.tensor([len(c) for c in cols])[:, None]
    rel = None if relevance is None else _aligned(relevance, cols, B, N, "relevance")
    ct = None if ctr is None else _aligned(ctr, cols, B, N, "ctr")
    return _Inputs(None, gid, mask, None if labels is None else len(labels), sizes, labels, items, rel, ct,
                   False, True, None, True)


class _View:
    """What the metrics read from a batch of rankings: ``exposure(F)`` of every slot ``[B, N]``, ``group_total(x)``
    (``sum_b sum_{i in g} x[b, i]``, ``[G]``), ``relevance`` / ``ctr`` ``[B, N]`` in the same slots, the group
    ``sizes [G]`` and ``labels``.  Two layouts: :class:`_Ranked` (a hard ranking: slots are positions, no
    ordering machinery) and :class:`_Ordered` (any ordering: slots are the list's items)."""

    dtype: torch.dtype
    mask: Tensor                  # [B, N] bool: a real item in the slot
    sizes: Optional[Tensor]       # [G]
    labels: Optional[List[Any]]
    relevance: Optional[Tensor]   # [B, N], 0 in padded slots
    ctr: Optional[Tensor]
    items: Tensor                 # [B, N] item index of the slot (for amortized IAA)
    squeeze: bool


_WEIGHTS: Dict[Any, Tensor] = {}


def _position_weights(F: BrowsingModel, N: int, dtype: torch.dtype, device) -> Tensor:
    """``F.weights(N)``, remembered for the position-based models of this module (their repr names every
    parameter); read-only."""
    if type(F) not in (Logarithmic, Geometric, RBP):
        return F.weights(N, dtype=dtype, device=device)
    key = (repr(F), N, dtype, str(device))
    w = _WEIGHTS.get(key)
    if w is None:
        if len(_WEIGHTS) > 256:
            _WEIGHTS.clear()
        w = _WEIGHTS[key] = F.weights(N, dtype=dtype, device=device)
    return w


class _Ranked(_View):
    """A hard ranking (FRT's rankings, or scores sorted with ties by list index): slot ``k`` of row ``b`` is position
    ``k``, the real items fill positions ``0..n_b-1``; ``codes [B, N]`` the group of each position (-1: unknown or
    padded) or ``memb [B, N, G]`` soft membership in position order.  Every quantity is a direct formula."""

    def __init__(self, dtype, mask, codes, memb, G, sizes, labels, relevance, ctr, items, squeeze, dense,
                 codes_known=False):
        self.dtype, self.mask, self.codes, self.memb, self.G = dtype, mask, codes, memb, G
        self.sizes, self.labels, self.relevance, self.ctr, self.items = sizes, labels, relevance, ctr, items
        self.squeeze, self.dense = squeeze, dense  # dense: no padded slot
        self._idx: Optional[Tensor] = None
        # codes >= 0 in every slot: no padded slot and no item of unknown group
        self._all_known = dense and codes_known

    def _maskf(self) -> Tensor:
        return self.mask.to(self.dtype)

    def exposure(self, F: BrowsingModel) -> Tensor:
        w = _position_weights(F, self.mask.shape[1], self.dtype, self.mask.device)
        return w.expand(self.mask.shape) if self.dense else w * self._maskf()

    def _index(self) -> Tensor:
        """Group codes with the unknown / padded slots in an extra bin ``G``."""
        if self._idx is None:
            self._idx = self.codes if self._all_known else \
                torch.where(self.codes >= 0, self.codes, torch.full_like(self.codes, self.G))
        return self._idx

    def group_total(self, per_slot: Tensor) -> Tensor:
        if self.memb is not None:
            return _member_total(per_slot, self.memb)
        out = torch.zeros(self.G + 1, dtype=per_slot.dtype, device=per_slot.device)
        return out.index_add(0, self._index().reshape(-1), per_slot.expand(self.codes.shape).reshape(-1))[:self.G]

    def counts(self) -> Tensor:
        """``[B, G]`` items of each group per ranking."""
        if self.memb is not None:
            return self.memb.sum(1)
        B = self.codes.shape[0]
        ones = torch.ones((), dtype=self.dtype, device=self.codes.device).expand(self.codes.shape)
        return torch.zeros(B, self.G + 1, dtype=self.dtype, device=self.codes.device).scatter_add_(
            1, self._index(), ones)[:, :self.G]

    def onehot(self) -> Tensor:
        """``[B, N, G]`` membership of each position."""
        if self.memb is not None:
            return self.memb
        return torch.nn.functional.one_hot(self._index(), self.G + 1)[..., :self.G].to(self.dtype)


class _Ordered(_View):
    """Any ordering (a relaxed one, ``Hard(ties="average")``, a precomputed ``OrderedBatch``): slots are the list's
    items, quantities come from the :class:`~torchfair.orderings.OrderedBatch`."""

    def __init__(self, ob, memb, mask, sizes, labels, relevance, ctr, items, squeeze, dtype):
        self.ob, self.memb, self.mask, self.sizes, self.labels = ob, memb, mask, sizes, labels
        self.relevance, self.ctr, self.items, self.squeeze, self.dtype = relevance, ctr, items, squeeze, dtype

    def exposure(self, F: BrowsingModel) -> Tensor:
        return self.ob.exposure(F)

    def group_total(self, per_item: Tensor) -> Tensor:
        return _member_total(per_item, self.memb)  # padded items have all-zero membership rows


def _member_total(per_item: Tensor, memb: Tensor) -> Tensor:
    """``sum_b sum_i memb[b, i, g] per_item[b, i]``, ``[G]``, where an item adds nothing to a group it is not in
    (as FRT's per-group loop): an infinite or NaN value (FRT accepts them, ERBR) stays in its own groups, where a
    product ``0 * inf`` would spread NaN to the others."""
    x = per_item.unsqueeze(-1) * memb
    return torch.where(memb != 0, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum((0, 1))


def _direct(ordering) -> bool:
    """The ranking is read directly (no ordering machinery) for the default ``Hard()`` with ties by list index."""
    return ordering is None or (type(ordering) is Hard and ordering.ties == "first")


def _values(v, name: str, m: Tensor, dt: torch.dtype, check_unit, dense: bool = False) -> Optional[Tensor]:
    """Relevance / ctr ``[B, N]`` in the dtype of the computation, 0 in padded slots (FRT's [0, 1] check for
    EXPU / EXPRU, deviation 10)."""
    if v is None:
        return None
    if not isinstance(v, Tensor):
        raise ValueError(f"`{name}` must be a tensor [B, N] in the tensor form")
    if v.is_complex():
        raise ValueError(f"`{name}` must be a real tensor; got {v.dtype}")
    t = v.unsqueeze(0) if v.dim() == 1 else v
    if t.shape != m.shape:
        raise ValueError(f"`{name}` must have shape {tuple(m.shape)}; got {tuple(v.shape)}")
    t = t.to(dt)
    if not dense:
        t = torch.where(m, t, torch.zeros((), dtype=dt, device=t.device))
    if check_unit is not None and name in check_unit and t.numel() and _outside_unit(t):
        what = "relevance score" if name == "relevance" else "click through rate"
        raise FRTInputError(f"{check_unit[name]} requires that {what} be between 0 and 1 (`{name}`)")
    return t


def _outside_unit(t: Tensor) -> bool:
    """Some value of ``t`` below 0 or above 1 (NaN values are not checked, as FRT's comparisons skip them)."""
    lo, hi = (float(v) for v in torch.aminmax(t))
    if lo != lo or hi != hi:  # a NaN: compare elementwise
        return bool(((t < 0) | (t > 1)).any())
    return lo < 0 or hi > 1


def _sizes(x: _Inputs, G: int, counts, dt: torch.dtype, device) -> Tensor:
    """The group sizes ``[G]``: the dictionary's (FRT form), ``group_sizes``, or the largest per-list count of
    each group (``counts()`` ``[B, G]``, computed only then)."""
    if x.sizes is None:
        return counts().amax(0)
    sizes = x.sizes.to(device=device, dtype=dt)
    if sizes.shape != (G,):
        raise ValueError(f"`group_sizes` must have shape [{G}]; got {tuple(sizes.shape)}")
    return sizes


def _prepare(rankings, groups, relevance=None, ctr=None, *, mask=None, num_groups=None, group_sizes=None,
             ordering=None, validate=True, check_unit=None) -> _View:
    x = _inputs(rankings, groups, relevance, ctr, mask, num_groups, group_sizes)
    if _direct(ordering):
        return _ranked(x, validate, check_unit)
    scores = x.scores
    if scores is None:  # FRT form: scores that rank the slots in their order
        B, N = x.mask.shape
        scores = (N - torch.arange(N, dtype=torch.float64, device=x.mask.device)).expand(B, N)
    b = prepare(scores, None, x.groups, x.mask, num_groups=x.num_groups, validate=validate)
    dt = b.scores.dtype
    ob = order(b, ordering)
    m = b.mask
    sizes = None if b.membership is None else _sizes(x, b.membership.shape[-1], lambda: b.membership.sum(1), dt,
                                                     m.device)
    labels = x.labels
    if labels is None and b.membership is not None:
        labels = list(range(b.membership.shape[-1]))
    return _Ordered(ob, b.membership, m, sizes, labels, _values(x.relevance, "relevance", m, dt, check_unit),
                    _values(x.ctr, "ctr", m, dt, check_unit), x.items.to(m.device), x.squeeze and not x.frt_form, dt)


def _ranked(x: _Inputs, validate: bool, check_unit) -> _Ranked:
    """The hard ranking read directly: slots put in position order (a no-op for FRT's rankings, whose items come in
    rank order already), group codes instead of one-hot membership."""
    memb = None
    if x.frt_form:  # item ids in rank order; the real items of a row are its non-padded slots, in order
        m, dt = x.mask, torch.float64
        dense = bool(m.all()) if x.dense is None else x.dense
        if validate and not dense:
            require(lambda: m.any(), "`mask` has no real item: the batch holds no list with an item to rank",
                    m.device)
        codes, G = x.groups, x.num_groups
        order = None if dense or bool((m[:, 1:] <= m[:, :-1]).all()) else \
            torch.sort((~m).to(torch.uint8), dim=-1, stable=True).indices  # real slots first, in order
    else:  # scores: rank them (descending, ties by list index, padded items last), as Hard() does
        b = prepare(x.scores, None, None, x.mask, validate=validate)
        m, dt = b.mask, b.scores.dtype
        codes, G = None, None
        g = x.groups
        if g is not None:
            g = _check_groups(g, b.squeeze)
            if g.is_floating_point():
                memb = as_membership(g, m, x.num_groups, dt, validate)
                G = memb.shape[-1]
            else:
                codes, G = group_codes(g, m, x.num_groups, validate)
        dense = bool(m.all())
        key = b.scores if dense else torch.where(m, b.scores, torch.full((), float("-inf"), dtype=dt,
                                                                          device=m.device))
        order = torch.sort(key, dim=-1, descending=True, stable=True).indices
    rel = _values(x.relevance, "relevance", m, dt, check_unit, dense)
    ctr = _values(x.ctr, "ctr", m, dt, check_unit, dense)
    items = x.items.to(m.device)
    if order is not None:
        def take(t):
            return None if t is None else t.gather(1, order)
        codes, rel, ctr, m = take(codes), take(rel), take(ctr), take(m)
        items = items.expand(m.shape).gather(1, order)
        if memb is not None:
            memb = memb.gather(1, order.unsqueeze(-1).expand(memb.shape))
    view = _Ranked(dt, m, codes, memb, G, None, None, rel, ctr, items, x.squeeze and not x.frt_form, dense,
                   x.frt_form and x.codes_known)
    if G is not None:
        view.sizes = _sizes(x, G, view.counts, dt, m.device)
        view.labels = x.labels if x.labels is not None else list(range(G))
    return view


def _check_groups(g, squeeze: bool) -> Tensor:
    """``groups`` of the tensor form as :func:`~torchfair._validation.prepare` takes them (a single list's ids
    ``[N]`` or soft membership ``[N, G]`` gets its batch dimension)."""
    if not isinstance(g, Tensor):
        raise ValueError(f"`groups` must be a torch.Tensor, got {type(g).__name__}")
    if squeeze and ((g.is_floating_point() and g.dim() == 2) or (not g.is_floating_point() and g.dim() == 1)):
        g = g.unsqueeze(0)
    return g


def _group_total(p: _View, per_item: Tensor) -> Tensor:
    """``sum_b sum_{i in g} per_item[b, i]``: per-group sums over all rankings, ``[G]``."""
    return p.group_total(per_item)


def _result(p: _View, per_group: Tensor, combo: str, strict_docs: bool) -> FRTResult:
    return FRTResult(aggregate(per_group, combo, strict_docs=strict_docs), per_group, p.labels)


_COMMON = """
    Common arguments: ``rankings``/``groups`` in the FRT form or the tensor form (module docstring); ``combo`` one
    of :data:`COMBOS`; ``mask``, ``num_groups``, ``group_sizes`` (dictionary group sizes ``[G]``) for the tensor
    form; ``ordering`` (default ``Hard()``; a relaxed ordering gives a differentiable value); ``strict_docs``:
    documented ``LTwo``/``Variance`` instead of the code's (deviation 1); ``validate_args``.
    Returns :class:`FRTResult`.  FRT deviations: 1-3 of the module docstring"""


def _doc(f):
    f.__doc__ = f.__doc__.replace("    {common}", _COMMON)
    return f


def _check_combo(combo):
    if combo not in _AGG:
        raise ValueError(f"`combo` must be one of {COMBOS}; got {combo!r}")


# --------------------------------------------------------------------------------------------- exposure family
@_doc
def EXP(rankings, groups, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
        num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
        strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Group exposure EXP (Singh & Joachims 2018): ``V_g = sum_rankings sum_{i in g} 1/log2(rank_i + 1) / |g|``.
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, mask=mask, num_groups=num_groups, group_sizes=group_sizes, ordering=ordering,
                 validate=validate_args)
    e = p.exposure(Logarithmic())
    return _result(p, _group_total(p, e) / p.sizes, combo, strict_docs)


@_doc
def EXPU(rankings, groups, relevance, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
         strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Exposure utility EXPU (Singh & Joachims' "disparate treatment"): ``V_g = avgexp_g / avgutil_g`` with both
    averages summed over rankings and divided by the dictionary size ``|g|``.  ``relevance`` must lie in [0, 1]
    (:class:`FRTInputError` otherwise, FRT's ``AssertionError``, deviation 10); a group with zero relevance gives
    ``inf``/``nan``.
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, relevance, mask=mask, num_groups=num_groups, group_sizes=group_sizes,
                 ordering=ordering, validate=validate_args, check_unit={"relevance": "Exposure Realized Utility"})
    e = p.exposure(Logarithmic())
    avg_exp = _group_total(p, e) / p.sizes
    avg_util = _group_total(p, p.relevance) / p.sizes
    return _result(p, avg_exp / avg_util, combo, strict_docs)


@_doc
def EXPRU(rankings, groups, relevance, ctr, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
          num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
          strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Exposure realized utility EXPRU (Singh & Joachims' "disparate impact"): ``V_g = avgctr_g / avgutil_g``.
    Uses no exposure (the ranking only decides which items count); ``relevance`` and ``ctr`` must lie in [0, 1]
    (deviation 10).
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, relevance, ctr, mask=mask, num_groups=num_groups, group_sizes=group_sizes,
                 ordering=ordering, validate=validate_args,
                 check_unit={"relevance": "Exposure Realized Utility", "ctr": "Exposure Realized Utility"})
    avg_ctr = _group_total(p, p.ctr) / p.sizes
    avg_util = _group_total(p, p.relevance) / p.sizes
    return _result(p, avg_ctr / avg_util, combo, strict_docs)


@_doc
def AWRF(rankings, groups, p: float, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
         strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""FRT's AWRF: group average attention ``V_g = sum_rankings sum_{i in g} 100 p (1-p)^(rank_i - 1) / |g|``
    (:class:`~torchfair.browsing.Geometric` times 100).  Not Sapiezynski et al.'s AWRF (deviation 9).
    {common}.
    """
    _check_combo(combo)
    pr = _prepare(rankings, groups, mask=mask, num_groups=num_groups, group_sizes=group_sizes, ordering=ordering,
                  validate=validate_args)
    e = 100.0 * pr.exposure(Geometric(p))
    return _result(pr, _group_total(pr, e) / pr.sizes, combo, strict_docs)


def _rbp_total(p: _View, decay: float) -> Tensor:
    """``(1 - decay) sum_rankings sum_{i in g} decay^(rank_i - 1)`` (Kirnap et al. eq. 2), ``[G]``."""
    decay = check_number(decay, "decay", low=0, high=1, low_open=True)
    return (1 - decay) * _group_total(p, p.exposure(RBP(decay)))


@_doc
def ERBE(rankings, groups, decay: float, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
         strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Exposure RBP equality (Kirnap et al. 2021): ``V_g = (1 - decay) sum_rankings sum_{i in g}
    decay^(rank_i - 1)`` (not divided by the group size).  The docs' ``gamma^(1 - rank)`` is a typo (deviation 4).
    ``decay`` in (0, 1] (:class:`~torchfair.browsing.RBP`).
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, mask=mask, num_groups=num_groups, group_sizes=group_sizes, ordering=ordering,
                 validate=validate_args)
    return _result(p, _rbp_total(p, decay), combo, strict_docs)


@_doc
def ERBP(rankings, groups, decay: float, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
         strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Exposure RBP proportionality: ERBE's group exposure divided by the dictionary group size ``|g|``
    (deviation 4 applies).
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, mask=mask, num_groups=num_groups, group_sizes=group_sizes, ordering=ordering,
                 validate=validate_args)
    return _result(p, _rbp_total(p, decay) / p.sizes, combo, strict_docs)


@_doc
def ERBR(rankings, groups, relevance, decay: float, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
         strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Exposure RBP proportional to relevance: ERBE's group exposure divided by the group's relevance summed over
    the rankings.  FRT's binary-relevance check is dead code (deviation 5), so any relevance is accepted and
    ``|g^rel|`` is the relevance sum; a group without relevance gives ``inf``/``nan`` (deviations 4, 5 apply).
    As in FRT 0.0.7, and unlike torchfair's own measures, relevance is not validated: a negative value counts with
    its sign (a negative or zero sum, a negative or infinite ``V_g``), an infinite one makes its group's sum
    infinite (``V_g = 0`` for ``+inf``, ``-0`` for ``-inf``), each only in its own group.  A NaN cell of the FRT
    form is dropped, as FRT drops it, which misaligns the column (deviation 11) or leaves too few values
    (``IndexError``, as FRT); a NaN in a tensor form (FRT has no equivalent) makes its group's ``V_g`` NaN
    (tests/compat/test_fairranktune.py compares these inputs with FRT).
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, relevance, mask=mask, num_groups=num_groups, group_sizes=group_sizes,
                 ordering=ordering, validate=validate_args)
    return _result(p, _rbp_total(p, decay) / _group_total(p, p.relevance), combo, strict_docs)


# --------------------------------------------------------------------------------------------- ARP, NDKL, IAA
@_doc
def ARP(rankings, groups, combo: str = "MinMaxRatio", *, mask: Optional[Tensor] = None,
        num_groups: Optional[int] = None, group_sizes=None, ordering: OrderingLike = None,
        strict_docs: bool = False, validate_args: bool = True) -> FRTResult:
    r"""Attribute rank parity (Cachel et al. 2022): ``V_g = sum_rankings mixed pairs won by g / mixed pairs of g``
    (FRT's "FPR"), from :func:`torchfair.metrics.rank_parity`.  Summed, not averaged, over rankings
    (deviation 2); a group that is alone in a ranking adds ``nan``; FRT needs every ranking to hold every
    dictionary item (deviation 7).  ``group_sizes`` is unused (accepted for a uniform signature).
    {common}.
    """
    _check_combo(combo)
    p = _prepare(rankings, groups, mask=mask, num_groups=num_groups, group_sizes=group_sizes, ordering=ordering,
                 validate=validate_args)
    if isinstance(p, _Ranked):
        per_group, valid, present = _mixed_pairs_won(p)
    else:
        rp = rank_parity(p.ob.scores, p.memb, mask=p.mask, ordering=p.ob, validate_args=False)
        per_group, valid, present = rp.per_group, rp.valid, p.memb.sum(1) > 0
    nan = torch.full_like(per_group, float("nan"))
    per_ranking = torch.where(valid, per_group, torch.where(present, nan, torch.zeros_like(nan)))
    return _result(p, per_ranking.sum(0), combo, strict_docs)


def _mixed_pairs_won(p: _Ranked):
    """ARP's ``mixed pairs won by g / mixed pairs of g`` per ranking (:func:`torchfair.metrics.rank_parity`'s
    ``per_group`` on a strict ranking), by counting: an item of g at position k wins against the known items of
    other groups below it.  With group codes, ``sum_{i in g} (known items below i) - n_g (n_g - 1) / 2`` (the pairs
    inside g); with soft membership ``a``, ``sum_i a_ig sum_{j below i} (known_j - a_jg)``.  Mixed pairs of g:
    ``sum_{i != j} a_ig (known_j - a_jg)`` (``n_g (K - n_g)`` for codes).  Returns ``(per_group, valid, present)``,
    each ``[B, G]``."""
    dt = p.dtype
    if p.memb is None:
        known = (p.codes >= 0).to(dt)
        K = known.sum(-1, keepdim=True)
        below = K - known.cumsum(-1)                               # known items strictly below position k
        idx = p._index()
        B = idx.shape[0]
        S = torch.zeros(B, p.G + 1, dtype=dt, device=idx.device).scatter_add_(1, idx, below)[:, :p.G]
        n = p.counts()
        won, mixed = S - n * (n - 1) / 2, n * (K - n)
    else:
        a = p.memb
        known = a.sum(-1)                                          # [B, N]
        K = known.sum(-1, keepdim=True)
        A = a.sum(1)                                               # [B, G]
        below_known = K - known.cumsum(-1)
        below_a = A[:, None, :] - a.cumsum(1)
        won = (a * (below_known[..., None] - below_a)).sum(1)
        mixed = (a * ((K - known)[..., None] - (A[:, None, :] - a))).sum(1)
        n = A
    per_group, valid = safe_div(won, mixed)
    return clamp_rounding(per_group, 0.0, 1.0), valid, n > 0


def NDKL(rankings, groups, *, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
         ordering: OrderingLike = None, validate_args: bool = True) -> Tensor:
    r"""Normalized discounted KL divergence (Geyik et al. 2019), one value per ranking.

    .. math:: \mathrm{NDKL}(\tau) = \frac{1}{Z} \sum_{k=1}^{n} \frac{1}{\log_2(k+1)}
              d_{KL}(D_{\tau_{1..k}} + \epsilon \,\|\, D_\tau + \epsilon), \qquad Z = \sum_{k=1}^{n} \frac{1}{\log_2(k+1)}

    with FRT's ``epsilon = 1e-7`` (:data:`NDKL_EPSILON`) added to both group distributions, and ``D_tau`` the
    distribution of the *ranking* (deviation 8).  Prefix group counts come from the ordering's position matrix,
    so a relaxed ordering gives expected prefix counts.  Returns a 0-dim tensor for one ranking and ``[B]`` for
    several (FRT raises ``AssertionError`` for more than one ranking).
    """
    p = _prepare(rankings, groups, mask=mask, num_groups=num_groups, ordering=ordering, validate=validate_args)
    dt = p.dtype
    B, N = p.mask.shape
    n = p.mask.sum(-1).to(dt)                                  # [B]
    k1 = torch.arange(1, N + 1, dtype=dt, device=p.mask.device)
    if isinstance(p, _Ranked) and p.memb is None and N * (N + 1) <= _NDKL_TABLE:
        kl = _ndkl_by_counts(p, n, k1)
    else:
        if isinstance(p, _Ranked):  # membership in position order: prefix counts are a cumulative sum
            prefix, counts = torch.cumsum(p.onehot(), dim=1), p.counts()
        else:
            R = p.ob.position_matrix().to(dt)                  # [B, N(k), N(i)]
            prefix = torch.cumsum(_linalg.bmm(R, p.memb), dim=1)  # [B, N, G] group counts among positions <= k
            counts = p.memb.sum(1)
        P = prefix / k1[None, :, None] + NDKL_EPSILON
        Q = (counts / n.clamp(min=1)[:, None] + NDKL_EPSILON)[:, None, :]
        kl = (P * torch.log(P / Q)).sum(-1)                    # [B, N]
    real = (torch.arange(N, device=p.mask.device)[None, :] < n[:, None]).to(dt)
    Z = Logarithmic().weights(N, dtype=dt, device=p.mask.device)[None, :] * real
    out = (Z * kl).sum(-1) / Z.sum(-1)
    return out[0] if (B == 1) else out


#: largest ``N (N + 1)`` for which NDKL looks ``P log P`` up in a table over (prefix length, count)
_NDKL_TABLE = 2 ** 22


def _ndkl_by_counts(p: _Ranked, n: Tensor, k1: Tensor) -> Tensor:
    """``KL(P_k || Q)`` of every prefix ``k`` ``[B, N]`` for group codes, without a logarithm per (prefix, group):
    ``P_g = c_g / k + eps`` takes at most ``N (N + 1)`` values, so ``sum_g P_g log P_g`` is looked up in a table
    ``T[k, c]``, and ``sum_g P_g log Q_g = (sum_{j <= k} log Q_{g(j)}) / k + eps sum_g log Q_g`` is a cumulative sum
    along the ranking (positions of unknown group add 0)."""
    dt, G = p.dtype, p.G
    B, N = p.mask.shape
    idx = p._index()                                           # [B, N], G for unknown / padded
    onehot = torch.zeros(B, G + 1, N, dtype=torch.long, device=idx.device).scatter_(
        1, idx[:, None, :], 1)[:, :G]                          # [B, G, N] (positions contiguous)
    c = onehot.cumsum(-1)                                      # prefix counts
    cc = torch.arange(N + 1, dtype=dt, device=idx.device)
    Pt = cc[None, :] / k1[:, None] + NDKL_EPSILON               # [N, N + 1]: P for prefix length k, count c
    T = (Pt * torch.log(Pt)).reshape(-1)
    rows = (torch.arange(N, device=idx.device) * (N + 1))[None, None, :]
    plogp = T.index_select(0, (c + rows).reshape(-1)).view(B, G, N).sum(1)
    logQ = torch.log(c[:, :, -1].to(dt) / n.clamp(min=1)[:, None] + NDKL_EPSILON)  # [B, G]
    lq = torch.nn.functional.pad(logQ, (0, 1)).gather(1, idx).cumsum(1)    # sum_{j <= k} log Q_{g(j)}
    return plogp - (lq / k1[None, :] + NDKL_EPSILON * logQ.sum(-1, keepdim=True))


def IAA(rankings, relevance, *, mask: Optional[Tensor] = None, ordering: OrderingLike = None,
        per_ranking: bool = False, strict_docs: bool = False, validate_args: bool = True) -> Tensor:
    r"""Inequity of amortized attention (Biega et al. 2018) as FRT computes it:
    ``sum_positions |1/log2(rank + 1) - relevance|`` of the **first ranking only** (FRT returns inside its loop,
    deviation 6), no normalisation, no range check on relevance.

    ``per_ranking=True``: the same value for every ranking, ``[B]``.  ``strict_docs=True``: the documented
    amortized value ``sum_items |sum_rankings attention_i - sum_rankings relevance_i|`` (items identified by id in
    the FRT form and by list index in the tensor form).  Returns a 0-dim tensor otherwise.
    """
    if per_ranking and strict_docs:
        raise ValueError("`per_ranking` and `strict_docs` are exclusive")
    p = _prepare(rankings, None, relevance, mask=mask, ordering=ordering, validate=validate_args)
    att = p.exposure(Logarithmic())
    if per_ranking and getattr(p, "dense", False):  # no padded slot: nothing to mask
        return (att - p.relevance).abs().sum(-1)
    m = p.mask.to(att.dtype)
    if strict_docs:  # padded slots add 0 (their attention and relevance are 0)
        M = int(p.items.max()) + 1
        idx = p.items.expand(m.shape).reshape(-1)
        A = torch.zeros(M, dtype=att.dtype, device=att.device).index_add_(0, idx, (att * m).reshape(-1))
        Rl = torch.zeros(M, dtype=att.dtype, device=att.device).index_add_(0, idx, (p.relevance * m).reshape(-1))
        return (A - Rl).abs().sum()
    if not per_ranking:  # FRT evaluates the first ranking only (deviation 6)
        return ((att[:1] - p.relevance[:1]).abs() * m[:1]).sum()
    return ((att - p.relevance).abs() * m).sum(-1)


# --------------------------------------------------------------------------------------------- re-rankers
def _frt_column(frame, name: str):
    """Column ``0`` of one of FRT's frames as a numpy array (FRT reads ``frame[0].to_numpy()``)."""
    try:
        col = frame[0]
        return col.to_numpy()
    except Exception:
        raise ValueError(f"`{name}` must be a pandas DataFrame with the list in column 0 (FRT's layout: one "
                         f"ranking per column, the first one re-ranked); got {type(frame).__name__}") from None


def _rerank_inputs(current_ranking_df, item_group_dict, current_ranking_scores_df):
    """``(items, groups, scores)`` numpy arrays in the ranking's order; ``groups`` is numpy's array of the items'
    labels (as FRT builds it, so labels of mixed types are coerced the same way)."""
    items = _frt_column(current_ranking_df, "current_ranking_df")
    scores = _frt_column(current_ranking_scores_df, "current_ranking_scores_df")
    if not isinstance(item_group_dict, Mapping):
        raise ValueError(f"`item_group_dict` must be a dict item -> group; got {type(item_group_dict).__name__}")
    if len(scores) != len(items):
        raise ValueError(f"`current_ranking_scores_df` must hold one score per item of `current_ranking_df` "
                         f"({len(items)}); got {len(scores)}")
    try:
        labels = [item_group_dict[it] for it in items]
    except (KeyError, TypeError):  # FRT: KeyError
        missing = next((it for it in items if not _has_key(item_group_dict, it)), None)
        raise ValueError(f"`item_group_dict` has no group for item {missing!r} of `current_ranking_df`") from None
    return items, np.asarray(labels), scores


def _has_key(d, key) -> bool:
    try:
        return key in d
    except TypeError:  # unhashable item
        return False


def _rerank_result(items, groups, scores, sel, score_sel=None):
    """FRT's three return values for the items at positions ``sel`` of the input: a one-column DataFrame of the
    items, the dict item -> group (numpy scalars, as FRT's ``dict(zip(...))``) and a one-column DataFrame of the
    scores at ``score_sel`` (default ``sel``).  ``np.asarray`` of the selected elements infers the dtypes as FRT's
    ``np.asarray(list)`` does."""
    import pandas as pd

    ranking = np.asarray(list(items[sel]))
    group_ids = np.asarray(list(groups[sel]))
    sc = np.asarray(list(scores[sel if score_sel is None else score_sel]))
    return pd.DataFrame(ranking), dict(zip(ranking, group_ids)), pd.DataFrame(sc)


def _shares(distribution, labels, item_group_dict) -> np.ndarray:
    """FRT's ``distribution[label]`` for the ranking's group ``labels`` as float64 ``[G]``, after the checks FRT
    does not make (deviation 12f)."""
    if isinstance(distribution, Mapping):
        entries = list(distribution.items())
    elif isinstance(distribution, (Sequence, np.ndarray)) and not isinstance(distribution, (str, bytes)):
        entries = list(enumerate(distribution))  # FRT indexes it by the (integer) group label
    else:
        raise ValueError(f"`distribution` must be a dict group -> share (or a sequence indexed by integer group "
                         f"labels); got {type(distribution).__name__}")
    try:
        vals = np.array([float(v) for _, v in entries], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("`distribution` shares must be real numbers") from None
    if not np.isfinite(vals).all() or (vals < 0).any() or (vals > 1).any():
        raise ValueError(f"`distribution` shares must be finite and in [0, 1]; got {[v for _, v in entries]}")
    if abs(vals.sum() - 1.0) > 1e-6:
        raise ValueError(f"`distribution` shares must sum to 1; got {vals.sum():.6g}")
    mapping = isinstance(distribution, Mapping)
    named = [g for (g, v) in entries if mapping or v > 0]
    in_ranking = set(labels.tolist())
    absent = [g for g in named if not _has_key(in_ranking, g)]
    if absent:  # groups not in this ranking must still be groups of the dict (one pass over it, only then)
        try:
            known = set(item_group_dict.values())
        except TypeError:
            raise ValueError("`item_group_dict`'s group labels must be hashable") from None
        absent = [g for g in absent if not _has_key(known, g)]
    if absent:
        raise ValueError(f"`distribution` names group {absent[0]!r}, which is no group of `item_group_dict`")
    p = np.empty(len(labels), dtype=np.float64)
    for i, lab in enumerate(labels):
        try:
            if not mapping and (isinstance(lab, (bool, np.bool_)) or not isinstance(lab, (int, np.integer))
                                or not 0 <= lab < len(distribution)):
                raise KeyError(lab)
            p[i] = float(distribution[lab])
        except (KeyError, IndexError, TypeError):
            shown = lab.item() if isinstance(lab, np.generic) else lab
            raise ValueError(f"`distribution` has no share for group {shown!r} of `current_ranking_df` (FRT raises "
                             f"KeyError)") from None
    return p


def DETCONSTSORT(current_ranking_df, item_group_dict, current_ranking_scores_df, distribution, k):
    r"""FairRankTune 0.0.7's ``Rankers.DETCONSTSORT`` (Geyik et al., KDD 2019, Algorithm 3), number for number.

    ``current_ranking_df``: DataFrame whose column 0 holds the ranking (item ids, best first);
    ``item_group_dict``: item -> group label; ``current_ranking_scores_df``: DataFrame whose column 0 holds the
    items' scores, aligned by position; ``distribution``: group label -> target share (a sequence indexed by
    integer labels works too, as in FRT); ``k``: the length of the returned ranking, ``1 <= k <= n``.

    Returns FRT's triple: a one-column DataFrame of the ``k`` first re-ranked items, the dict item -> group of
    those items (numpy scalar keys and values, as FRT), a one-column DataFrame of their scores.

    Runs :mod:`torchfair.rerank.detconstsort`'s compiled walk with FRT's settings (deviation 12 of the module
    docstring): deadline one position late, exact floor of ``k' p_g``, each group's items in the ranking's order,
    scores compared with FRT's tie rules, every item of a step placed, ``k + 1`` items walked.  ``ValueError``
    where FRT would loop forever (the groups with a positive share hold fewer than ``min(k + 1, n)`` items) and for
    the bad inputs listed in 12f.

    Example::

        >>> import pandas as pd
        >>> r = pd.DataFrame(["a", "b", "c", "d", "e", "f"])
        >>> s = pd.DataFrame([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
        >>> g = {"a": "X", "b": "X", "c": "X", "d": "Y", "e": "Y", "f": "Y"}
        >>> ranking, groups, scores = DETCONSTSORT(r, g, s, {"X": 0.5, "Y": 0.5}, 4)
        >>> list(ranking[0]), list(scores[0])
        (['a', 'b', 'd', 'c'], [6.0, 5.0, 3.0, 4.0])
    """
    from ..rerank.detconstsort import detconstsort_walk

    items, groups, scores = _rerank_inputs(current_ranking_df, item_group_dict, current_ranking_scores_df)
    n = len(items)
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValueError(f"`k` must be an int in [1, {n}] (the number of items of `current_ranking_df`; FRT raises "
                         f"KeyError above it and returns empty frames below 1); got {k!r}")
    k = int(k)
    try:
        labels, codes = np.unique(groups, return_inverse=True)  # FRT's group order: np.unique's
        uniq, inv = np.unique(scores, return_inverse=True)
    except TypeError:
        raise ValueError("the group labels of `item_group_dict` and the scores of `current_ranking_scores_df` must "
                         "each be mutually comparable (FRT sorts them)") from None
    if bool((uniq != uniq).any()):
        raise ValueError("`current_ranking_scores_df` holds NaN scores (FRT's comparisons with NaN are arbitrary)")
    p = _shares(distribution, labels, item_group_dict)
    counts = np.bincount(codes.reshape(-1), minlength=len(labels))
    if int(counts[p > 0].sum()) < min(k + 1, n):
        zero = [lab for lab, share in zip(labels.tolist(), p) if share == 0]
        raise ValueError(f"`distribution` gives share 0 to group(s) {zero} and the other groups hold "
                         f"{int(counts[p > 0].sum())} items: FRT 0.0.7 loops forever here (it fills positions from "
                         f"groups with a positive share only, until it has placed min(k + 1, n) = {min(k + 1, n)})")
    key = (len(uniq) - 1 - inv.reshape(-1)).astype(np.int64)  # lower = higher score, equal scores equal keys
    sel = detconstsort_walk(codes.reshape(1, -1).astype(np.int64), np.array([n], dtype=np.int64),
                            p.reshape(1, -1), k + 1, key=key.reshape(1, -1), deadline_slack=1, floor_eps=0.0,
                            whole_batches=True)[0, :k]
    return _rerank_result(items, groups, scores, sel)


def EPSILONGREEDY(current_ranking_df, item_group_dict, current_ranking_scores_df, epsilon, seed):
    r"""FairRankTune 0.0.7's ``Rankers.EPSILONGREEDY`` (Feng & Shah, AAAI 2022), number for number.

    Walking down the ranking, at every position ``i`` but the last a uniform draw ``<= epsilon`` swaps the item
    there with one drawn uniformly from positions ``i+1 .. n-1`` of the current ranking.  The draws come from
    ``np.random.RandomState(seed)`` in FRT's order (``rand()`` per position, ``randint(i + 1, n)`` on a swap), so
    the output is FRT's for the same seed; unlike FRT, numpy's global random state is left untouched
    (deviation 13).  ``epsilon`` in [0, 1]; ``seed``: anything ``np.random.seed`` accepts (``None``: fresh
    entropy).

    Returns FRT's triple: a one-column DataFrame of all the re-ranked items, the dict item -> group, a one-column
    DataFrame of their scores (each item's first score in the input, deviation 13).

    Example::

        >>> import pandas as pd
        >>> r = pd.DataFrame(["a", "b", "c", "d"])
        >>> s = pd.DataFrame([4.0, 3.0, 2.0, 1.0])
        >>> ranking, groups, scores = EPSILONGREEDY(r, {"a": 0, "b": 0, "c": 1, "d": 1}, s, 0.0, 1)
        >>> list(ranking[0])
        ['a', 'b', 'c', 'd']
    """
    items, groups, scores = _rerank_inputs(current_ranking_df, item_group_dict, current_ranking_scores_df)
    epsilon = check_number(epsilon, "epsilon", low=0.0, high=1.0)
    try:
        rs = np.random.RandomState(seed)
    except (TypeError, ValueError) as e:
        raise ValueError(f"`seed` must be a seed numpy's RandomState accepts (an int in [0, 2**32 - 1], an array "
                         f"of them, or None); got {seed!r}: {e}") from None
    n = len(items)
    perm = list(range(n))
    draw, pick = rs.random_sample, rs.randint
    for i in range(n - 1):  # FRT's last draw (position n - 1) cannot swap and changes nothing after it
        if draw() <= epsilon:
            j = int(pick(i + 1, n))
            perm[i], perm[j] = perm[j], perm[i]
    sel = np.asarray(perm, dtype=np.int64)
    keys = list(items)
    score_sel = None
    if len(set(keys)) < n:  # FRT looks scores up with list.index: a repeated item gets its first copy's score
        first: Dict[Any, int] = {}
        for q, it in enumerate(keys):
            first.setdefault(it, q)
        score_sel = np.asarray([first[keys[q]] for q in perm], dtype=np.int64)
    return _rerank_result(items, groups, scores, sel, score_sel)
