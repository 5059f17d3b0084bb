"""The pairwise family: DIPS, individual dissatisfaction, IGI, REE, pairwise accuracy, rank parity, Kendall's tau.

Every measure here is written once against an ordering (:mod:`torchfair.orderings`): it only uses
``above[i, j] = P(j above i)`` and ``joint[i, j] = E[F(pos_j) 1(pos_j < pos_i)]``, contracted with relevance pair
weights and group memberships.  With the default ``ordering=Hard()`` the values are exact.

Common arguments
----------------
scores, relevance : ``[B, N]`` or ``[N]`` float. ``relevance >= 0``.
groups : ``[B, N]`` int ids in ``[0, G)`` (``-1`` = unknown: ranked, but in no group) or ``[B, N, G]`` soft
    membership (rows sum to at most 1).  With soft membership every pair term is weighted by the product of
    memberships ``a_ig * a_jh`` and group sizes are ``N_g = sum_i a_ig`` (fractional).
browsing : a :class:`~torchfair.browsing.BrowsingModel` or a spec string (``"rbp:0.9"``, ``"topk:10:rbp:0.8"``,
    read by :func:`torchfair.browsing.get_browsing`).
k : cut-off: the browsing model truncated at ``k`` (:class:`~torchfair.browsing.TopK`), so that only items in the
    top ``k`` positions dissatisfy (DIPS, individual dissatisfaction) or count as the upper item of a discordant
    pair (IGI, REE).  ``None`` (default) = the whole list.  Pairwise accuracy, rank parity, the discordant fraction
    and Kendall's tau compare every pair and have no cut-off.
mask : ``[B, N]`` bool, True for real items (default: all real).
num_groups : G for integer ids (default ``max id + 1``, inferred on the CPU only; required on other devices, where
    inferring it would synchronise with the host).
ordering : an :class:`~torchfair.orderings.Ordering` (default ``Hard()``) or a precomputed ``OrderedBatch``.
reduction : ``"none"`` (per list, default), ``"mean"`` or ``"sum"`` over the lists where the value is defined.
return_valid : also return the boolean validity mask of the (unreduced or reduced) value: ``(value, valid)``.

Shapes: ``[B, ...]`` per list; for a single ``[N]`` list, or with ``reduction="mean"``/``"sum"``, without the
batch dimension.

Sign conventions (the one place they are stated)
------------------------------------------------
* ``M[g, h]`` of :func:`dips`, :func:`igi`, :func:`ree` is the dissatisfaction of the *row* group g caused by the
  column group h (h items ranked above less relevant g items); ``pairwise_gap(M)[g, h] = M[g, h] - M[h, g] > 0``
  means g is disadvantaged against h.  ``pairwise_gap(M, protected=p, reference=r)`` is ``M[p, r] - M[r, p]``:
  positive = the protected group is disadvantaged.  For two groups ``pairwise_gap(M)[..., 0, 1]`` is the DIPS
  unfairness ``M_AB - M_BA`` of the paper (group 0 = A).
* ``A[g, h]`` of :func:`pairwise_accuracy` is the accuracy on pairs whose *more relevant* item is in the row group
  g; :func:`accuracy_gaps` gives ``InterAcc = A[r, p] - A[p, r]``: positive = the protected group's relevant
  items are ordered correctly less often (disadvantaged).
* :func:`rank_parity`'s ``per_group[g]`` is the share of mixed pairs g wins (0.5 = parity, above = advantaged).

Stochastic orderings: every measure here is linear in ``above`` and ``joint`` (its normaliser does not depend on
the ordering), so on a mixture of rankings (``Sampled``, ``PlackettLuce``) the value is the expectation of the
measure over the rankings.  The stated ranges hold exactly for ``Hard``, ``Sampled`` and ``PlackettLuce``;
relaxed orderings (``SoftRank``, ``NeuralSort``, ...) give smooth approximations that can leave them slightly.

Undefined values (a group absent from a list, no pair of the required kind) are returned as 0 and flagged
``False`` in the validity mask; ``reduction="mean"`` excludes them.  Nothing returns NaN.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_group_id, check_number, check_reduction, prepare
from ..browsing import RBP, BrowsingModel, TopK, Uniform
from ..orderings.base import LevelPairWeight, OrderingLike
from .common import check_k, clamp_rounding, cut_browsing, finish, order, reduce, safe_div

__all__ = ["dips", "individual_dissatisfaction", "igi", "ree", "pairwise_gap", "pairwise_accuracy",
           "accuracy_gaps", "rank_parity", "RankParityResult", "discordant_fraction", "kendall_tau"]



def _check_tie_weight(tie_weight) -> float:
    return check_number(tie_weight, "tie_weight", low=0.0, high=1.0)


def _udp_weight(rel: Tensor, tie_weight: float, strict_only: bool = False) -> LevelPairWeight:
    """Relevance part of the unfavourable discordant pair (Fabris et al., WSDM 2023, eq. 8):
    ``w[i, j] = 1(r_i > r_j) + c_t 1(r_i = r_j)`` (diagonal is removed by the ordering's pair quantities)."""
    tie_weight = _check_tie_weight(tie_weight)
    return LevelPairWeight(rel, greater=1.0, equal=0.0 if strict_only else tie_weight)


class _GroupSum(torch.autograd.Function):
    """``memb^T per_item`` per list (one ``bmm``), with a backward that multiplies the thin factors in the order the
    CPU does fastest: ``d per_item = (dS^T memb^T)^T`` (autograd's ``memb dS`` costs about four times as much for a
    few groups and long lists)."""

    @staticmethod
    def forward(ctx, memb: Tensor, per_item: Tensor):
        ctx.save_for_backward(memb, per_item)
        return _linalg.bmm(memb.transpose(1, 2), per_item)

    @staticmethod
    def backward(ctx, dS: Tensor):
        memb, per_item = ctx.saved_tensors
        d_item = d_memb = None
        if ctx.needs_input_grad[1]:
            d_item = _linalg.bmm(dS.transpose(1, 2), memb.transpose(1, 2)).transpose(1, 2)
        if ctx.needs_input_grad[0]:
            d_memb = _linalg.bmm(dS, per_item.transpose(1, 2)).transpose(1, 2)
        return d_memb, d_item


def _group_sum(memb: Tensor, per_item: Tensor) -> Tensor:
    """``S[b, g, h] = sum_i memb[b, i, g] * per_item[b, i, h]``."""
    if memb.dtype != per_item.dtype:
        return _linalg.bmm(memb.transpose(1, 2).to(per_item.dtype), per_item)
    return _GroupSum.apply(memb, per_item)


def individual_dissatisfaction(scores: Tensor, relevance: Tensor, groups: Optional[Tensor] = None, *,
                               browsing: Union[BrowsingModel, str, None] = None, k: Optional[int] = None,
                               tie_weight: float = 0.5, mask: Optional[Tensor] = None,
                               num_groups: Optional[int] = None, ordering: OrderingLike = None,
                               validate_args: bool = True) -> Tensor:
    r"""Individual dissatisfaction (Fabris et al., WSDM 2023, eq. 6-7 with a browsing model, §4.1-4.3).

    .. math:: M_i = \sum_k F(k)\, d_U(i, \sigma(k)), \qquad M_{ih} = \sum_k F(k)\, d_U(i, \sigma(k))\, 1(\sigma(k) \in h)

    with the tie-aware UDP ``d_U(i, j) = 1(pos_j < pos_i) [1(r_i > r_j) + c_t 1(r_i = r_j)]`` (eq. 8).
    Unnormalised, ``>= 0``.  Returns ``[B, N]`` (``[N]``) without ``groups`` and the group-envy version
    ``[B, N, G]`` (``[N, G]``) with them; padded items get 0.  ``browsing`` defaults to ``RBP(0.9)`` (Fabris et al.,
    WSDM 2023 §6.1); ``k`` truncates it.  Identity (Fabris et al., WSDM 2023, §4.1): ``dips(...)[g, h] * C_gh ==
    sum_{i in g} M_ih``.

    Example::

        >>> individual_dissatisfaction(torch.tensor([3., 2., 1.]), torch.tensor([0., 1., 2.]), browsing="uniform",
        ...                            tie_weight=0.0)
        tensor([0., 1., 2.])
    """
    F = cut_browsing(browsing, RBP(0.9), check_k(k))
    _check_tie_weight(tie_weight)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True)
    ob = order(b, ordering)
    right = b.membership if b.membership is not None else b.mask.to(b.scores.dtype).unsqueeze(-1)
    out = ob.contract(right, which="joint", pair_weight=_udp_weight(b.relevance, tie_weight), browsing=F,
                      relevance=b.relevance)
    out = out * b.mask.unsqueeze(-1).to(out.dtype)
    if b.membership is None:
        out = out[..., 0]
    return b.out(out)


def _dips_normaliser(F: BrowsingModel, sizes: Tensor, n_max: int) -> Tensor:
    """``C_gh = max(N_g * sum_{k<N_h} F(k), N_h * sum_{k<N_g} F(k))`` (Fabris et al., WSDM 2023, eq. 10),
    ``[B, G, G]``."""
    cum = F.cumulative(sizes, n_max)  # [B, G]
    a = sizes[:, :, None] * cum[:, None, :]
    return torch.maximum(a, a.transpose(1, 2))


def dips(scores: Tensor, relevance: Tensor, groups: Tensor, *, browsing: Union[BrowsingModel, str, None] = None,
         k: Optional[int] = None, tie_weight: float = 0.5, mask: Optional[Tensor] = None,
         num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
         return_valid: bool = False, validate_args: bool = True):
    r"""DIPS, Dissatisfaction Induced by Pairwise Swaps (Fabris et al., WSDM 2023, eq. 11 with eq. 8 and eq. 10).

    .. math:: M_{gh} = \frac{1}{C_{gh}} \sum_{i \in g} \sum_{k} F(k)\, d_U(i, \sigma(k))\, 1(\sigma(k) \in h),
              \quad C_{gh} = \max\Big(N_g \sum_{k<N_h} F(k),\; N_h \sum_{k<N_g} F(k)\Big)

    ``M[g, h]`` is the dissatisfaction of group g caused by group h (its items ranked above less relevant
    g items, weighted by how visible they are), shape ``[B, G, G]`` (``[G, G]``), entries in ``[0, 1]``; with
    ``return_valid`` the pair ``(M, valid)`` of that shape.  For two groups ``M[0, 1]`` is ``M_AB``
    and ``M[0, 1] - M[1, 0]`` (see :func:`pairwise_gap`) is the DIPS unfairness, in ``[-1, 1]`` (Fabris et al., WSDM
    2023, §4.4 says the open interval, but the extremes are reached, e.g. every B item above every more relevant A
    item under uniform browsing); positive values mean group 0 is disadvantaged.  ``tie_weight`` is ``c_t`` (eq. 8;
    the paper recommends 0.5). ``browsing`` defaults to ``RBP(0.9)``; ``k`` truncates it
    (:class:`~torchfair.browsing.TopK`, in the dissatisfaction and in the normaliser); for
    :class:`~torchfair.browsing.Cascade` the normaliser uses its position part ``gamma**k``.  Soft group sizes enter
    the normaliser's sums by linear interpolation. Undefined (``C_gh = 0``: g or h absent from the list): 0, flagged
    in ``valid``.

    Example (Fabris et al., WSDM 2023, §4.4 toy with a uniform browsing model: items A0 > B1 > A2 > A3 by relevance,
    ranked A2 B1 A0 A3)::

        >>> M = dips(torch.tensor([2., 3., 4., 1.]), torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 1, 0, 0]),
        ...          browsing="uniform", tie_weight=0.0)
        >>> M * 3   # C_AB = C_BA = max(3 * 1, 1 * 3) = 3, C_AA = 3 * 3
        tensor([[0.3333, 1.0000],
                [1.0000, 0.0000]])
        >>> pairwise_gap(M)[0, 1]   # one UDP against each group: no unfairness (unlike IGI's 1 vs 0.5)
        tensor(0.)
    """
    F = cut_browsing(browsing, RBP(0.9), check_k(k))
    _check_tie_weight(tie_weight)
    check_reduction(reduction)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    ob = order(b, ordering)
    envy = ob.contract(b.membership, which="joint", pair_weight=_udp_weight(b.relevance, tie_weight), browsing=F,
                       relevance=b.relevance)
    S = _group_sum(b.membership, envy)
    C = _dips_normaliser(F, b.membership.sum(1), b.mask.shape[1])
    M, valid = safe_div(S, C)
    return finish(b, clamp_rounding(M, 0.0, 1.0), valid, reduction, return_valid)


def _uniform_pairwise(scores, relevance, groups, mask, num_groups, ordering, tie_weight, k, normaliser, reduction,
                      return_valid, validate_args):
    k = check_k(k)
    _check_tie_weight(tie_weight)
    check_reduction(reduction)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    ob = order(b, ordering)
    w = _udp_weight(b.relevance, tie_weight)
    if k is None:  # with F = 1, E[F(pos_j) 1(pos_j < pos_i)] = P(j above i)
        S = _group_sum(b.membership, ob.contract(b.membership, which="above", pair_weight=w))
    else:  # only pairs whose upper item is in the top k: uniform browsing truncated at k
        S = _group_sum(b.membership, ob.contract(b.membership, which="joint", pair_weight=w,
                                                 browsing=TopK(Uniform(), k), relevance=b.relevance))
    if normaliser == "igi":
        C = _group_sum(b.membership, ob.contract(b.membership, which="one", pair_weight=w))
    else:
        C = _group_sum(b.membership, ob.contract(b.membership, which="one"))
    M, valid = safe_div(S, C)
    return finish(b, clamp_rounding(M, 0.0, 1.0), valid, reduction, return_valid)


def igi(scores: Tensor, relevance: Tensor, groups: Tensor, *, tie_weight: float = 0.0, k: Optional[int] = None,
        mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
        reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Inter-Group Inaccuracy (Beutel et al.; Fabris et al., WSDM 2023, eq. 1 with the IGI normaliser of §4.4).

    .. math:: M_{gh} = \frac{\sum_{i\in g}\sum_{j\in h} d_U(i,j)}{\sum_{i\in g}\sum_{j \in h} [1(r_i>r_j) + c_t 1(r_i=r_j)]}

    Uniform browsing.  ``tie_weight`` (``c_t``, eq. 8) defaults to 0, the original definition; with ``c_t > 0``
    tied pairs count in the numerator and, with the same weight, in the worst-case normaliser.  ``k``: only the
    pairs whose upper item is in the top ``k`` count as discordant (uniform browsing truncated at ``k``; the
    normaliser is unchanged).  Shape ``[B, G, G]`` (``[G, G]``), entries in ``[0, 1]``; with ``return_valid`` the
    pair ``(M, valid)``.  Undefined (no pair with ``r_i > r_j``): 0, flagged in ``valid``.

    Example (Fabris et al., WSDM 2023, §4.4): ``C_AB = 1``, ``C_BA = 2``; ranking A2 B1 A0 A3 gives ``M_AB = 1``,
    ``M_BA = 0.5``::

        >>> igi(torch.tensor([2., 3., 4., 1.]), torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 1, 0, 0]))
        tensor([[0.3333, 1.0000],
                [0.5000, 0.0000]])
    """
    return _uniform_pairwise(scores, relevance, groups, mask, num_groups, ordering, tie_weight, k, "igi",
                             reduction, return_valid, validate_args)


def ree(scores: Tensor, relevance: Tensor, groups: Tensor, *, tie_weight: float = 0.0, k: Optional[int] = None,
        mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
        reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Rank Equality Error (Kuhlman et al. 2019; Fabris et al., WSDM 2023, eq. 1 with the REE normaliser ``C_AB = N_A
    N_B``, §4.4).

    .. math:: M_{gh} = \frac{1}{N_g N_h} \sum_{i\in g}\sum_{j\in h} d_U(i,j)

    (for ``g = h`` the normaliser is the number of ordered pairs ``N_g (N_g - 1)``).  Uniform browsing;
    ``tie_weight`` and ``k`` as in :func:`igi`.  Shape ``[B, G, G]`` (``[G, G]``), entries in ``[0, 1]``; with
    ``return_valid`` the pair ``(M, valid)``.  Undefined when a group is absent.

    Example (Fabris et al., WSDM 2023, §4.4: ``C_AB = C_BA = 3``)::

        >>> ree(torch.tensor([2., 3., 4., 1.]), torch.tensor([4., 3., 2., 1.]), torch.tensor([0, 1, 0, 0]))[0, 1]
        tensor(0.3333)
    """
    return _uniform_pairwise(scores, relevance, groups, mask, num_groups, ordering, tie_weight, k, "ree",
                             reduction, return_valid, validate_args)


def _pair_index(G: int, protected, reference):
    """``(p, r)`` checked group ids; ``reference`` defaults to the other group when ``G == 2``."""
    p = check_group_id(protected, "protected", G)
    if reference is None:
        if G != 2:
            raise ValueError(f"`reference` is required with {G} groups (it defaults to the other group only for 2)")
        reference = 1 - p
    r = check_group_id(reference, "reference", G)
    if r == p:
        raise ValueError(f"`reference` must be a group other than `protected`; got {reference!r}")
    return p, r


def pairwise_gap(M: Tensor, *, valid: Optional[Tensor] = None, protected: Optional[int] = None,
                 reference: Optional[int] = None):
    r"""The antisymmetric gap of a group-pair matrix: how much more g is dissatisfied by h than h by g (Fabris et al.,
    WSDM 2023 eq. 2).

    .. math:: \Delta_{gh} = M_{gh} - M_{hg}

    ``M`` is ``[..., G, G]`` (from :func:`dips`, :func:`igi`, :func:`ree`, :func:`pairwise_accuracy`...).  Returns,
    by the keyword arguments given:

    * nothing: the matrix ``M - M^T`` ``[..., G, G]`` (for two groups ``[..., 0, 1]`` is ``M_AB - M_BA``);
    * ``valid`` (the ``[..., G, G]`` validity of ``M``): ``(gap, gap_valid)``, both ``[..., G, G]``; an entry is
      valid iff both ``M[g, h]`` and ``M[h, g]`` are, and is 0 where it is not;
    * ``protected`` (and ``reference``, which defaults to the other group when ``G == 2``): the one entry
      ``M[p, r] - M[r, p]``, ``[...]``; with ``valid`` too, ``(gap, gap_valid)`` of shape ``[...]``.

    Sign: for dissatisfaction measures (DIPS, IGI, REE) a positive gap means the ``protected`` (row) group is
    disadvantaged; for :func:`pairwise_accuracy` a positive ``A[p, r] - A[r, p]`` means ``p``'s items are ordered
    correctly against ``r``'s more often than the converse (see the module docstring, "Sign conventions").

    Example::

        >>> M = torch.tensor([[0.0, 0.4], [0.1, 0.0]])
        >>> pairwise_gap(M, protected=0)
        tensor(0.3000)
        >>> pairwise_gap(M, valid=torch.tensor([[True, True], [False, True]]))
        (tensor([[0., 0.],
                [0., 0.]]), tensor([[ True, False],
                [False,  True]]))
    """
    if not isinstance(M, Tensor) or M.dim() < 2 or M.shape[-1] != M.shape[-2]:
        raise ValueError("`M` must be a tensor [..., G, G] of group-pair values; got "
                         f"{tuple(M.shape) if isinstance(M, Tensor) else type(M).__name__}")
    if valid is not None and (not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.shape != M.shape):
        raise ValueError(f"`valid` must be a bool tensor of the shape of `M` {tuple(M.shape)}")
    if protected is None and reference is not None:
        raise ValueError("`reference` needs `protected` (the gap M[protected, reference] - M[reference, protected])")
    if protected is not None:
        p, r = _pair_index(M.shape[-1], protected, reference)
        gap = M[..., p, r] - M[..., r, p]
        if valid is None:
            return gap
        ok = valid[..., p, r] & valid[..., r, p]
        return torch.where(ok, gap, torch.zeros_like(gap)), ok
    gap = M - M.transpose(-1, -2)
    if valid is None:
        return gap
    ok = valid & valid.transpose(-1, -2)
    return torch.where(ok, gap, torch.zeros_like(gap)), ok


def pairwise_accuracy(scores: Tensor, relevance: Tensor, groups: Tensor, *, mask: Optional[Tensor] = None,
                      num_groups: Optional[int] = None, ordering: OrderingLike = None, reduction: str = "none",
                      return_valid: bool = False, validate_args: bool = True):
    r"""Pairwise accuracy ``A_{g>h} = P(i above j | r_i > r_j, i in g, j in h)`` (Raj & Ekstrand, SIGIR 2022, eq. 11).

    .. math:: A_{gh} = \frac{\sum_{i\in g, j\in h} 1(r_i > r_j)\, P(i \text{ above } j)}{\sum_{i\in g, j\in h} 1(r_i > r_j)}

    Shape ``[B, G, G]`` (``[G, G]``; row = group of the more relevant item), entries in ``[0, 1]``; with
    ``return_valid`` the pair ``(A, valid)``.  Tied scores under ``Hard(ties="average")`` count half.  Undefined
    (no pair with ``r_i > r_j``): 0, flagged in ``valid``.  No cut-off: every pair counts.  See
    :func:`accuracy_gaps`.

    Example::

        >>> pairwise_accuracy(torch.tensor([1., 2., 3.]), torch.tensor([2., 1., 0.]), torch.tensor([0, 1, 1]))
        tensor([[0., 0.],
                [0., 0.]])
    """
    check_reduction(reduction)
    b = prepare(scores, relevance, groups, mask, num_groups=num_groups, validate=validate_args,
                require_relevance=True, require_groups=True)
    ob = order(b, ordering)
    w = _udp_weight(b.relevance, 0.0, strict_only=True)
    err = _group_sum(b.membership, ob.contract(b.membership, which="above", pair_weight=w))
    den = _group_sum(b.membership, ob.contract(b.membership, which="one", pair_weight=w))
    wrong, valid = safe_div(err, den)
    A = clamp_rounding(torch.where(valid, 1.0 - wrong, torch.zeros_like(wrong)), 0.0, 1.0)
    return finish(b, A, valid, reduction, return_valid)


def accuracy_gaps(A: Tensor, protected: int = 1, reference: int = 0, *, valid: Optional[Tensor] = None):
    r"""InterAcc and IntraAcc (Raj & Ekstrand, SIGIR 2022, §2.5) from a pairwise-accuracy matrix ``A [..., G, G]``.

    .. math:: \mathrm{InterAcc} = A_{-,+} - A_{+,-}, \qquad \mathrm{IntraAcc} = A_{-,-} - A_{+,+}

    with ``+`` = ``protected`` and ``-`` = ``reference``; 0 means parity.  A positive InterAcc means pairs whose
    more relevant item is in the reference group are ordered correctly more often than pairs whose more relevant
    item is protected (the protected group is disadvantaged).  Returns ``(inter, intra)``, each ``[...]``; with
    ``valid`` (the ``[..., G, G]`` validity of ``A``, from ``pairwise_accuracy(..., return_valid=True)``)
    ``((inter, inter_valid), (intra, intra_valid))``, a gap being valid iff both its entries are (0 where not).

    Example::

        >>> A = torch.tensor([[0.9, 0.5], [0.8, 0.7]])
        >>> accuracy_gaps(A)   # inter = A[0, 1] - A[1, 0], intra = A[0, 0] - A[1, 1]
        (tensor(-0.3000), tensor(0.2000))
    """
    if not isinstance(A, Tensor) or A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError("`A` must be a tensor [..., G, G] of pairwise accuracies")
    G = A.shape[-1]
    p, r = _pair_index(G, protected, reference)
    inter, intra = A[..., r, p] - A[..., p, r], A[..., r, r] - A[..., p, p]
    if valid is None:
        return inter, intra
    if not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.shape != A.shape:
        raise ValueError(f"`valid` must be a bool tensor of the shape of `A` {tuple(A.shape)}")
    v_inter = valid[..., r, p] & valid[..., p, r]
    v_intra = valid[..., r, r] & valid[..., p, p]
    zero = torch.zeros_like(inter)
    return (torch.where(v_inter, inter, zero), v_inter), (torch.where(v_intra, intra, zero), v_intra)


class RankParityResult(NamedTuple):
    """Result of :func:`rank_parity`."""

    #: ``[..., G, G]`` fraction of the (g, h) pairs in which the g item is ranked above the h item
    wins: Tensor
    #: ``[..., G]`` ARP's per-group score: mixed pairs won by g / mixed pairs involving g (FairRankTune docs; Cachel
    #: et al., FairRankTune 0.0.7)
    per_group: Tensor
    #: ``[..., G]`` Kuhlman et al.'s ``pair`` with g as the protected group: ``|1 - 2 per_group[g]|`` (Kuhlman et al.,
    #: AIES 2021, eq. 9)
    pair: Tensor
    #: ``[..., G]`` whether g has at least one mixed pair in the list
    valid: Tensor


def rank_parity(scores: Tensor, groups: Tensor, *, mask: Optional[Tensor] = None, num_groups: Optional[int] = None,
                ordering: OrderingLike = None, reduction: str = "none", validate_args: bool = True) -> RankParityResult:
    r"""Pairwise statistical parity, relevance-free: Kuhlman et al.'s ``pair`` (Kuhlman et al., AIES 2021, eq. 8-9)
    and ARP (FairRankTune docs; Cachel et al., FairRankTune 0.0.7).

    .. math:: \mathrm{pair}_{G_p} = \frac{1}{|G_p| (N - |G_p|)} \sum_{i \in G_p} \sum_{j \notin G_p} 1(\rho(i) < \rho(j)),
              \qquad \mathrm{pair} = |1 - 2\, \mathrm{pair}_{G_p}|

    ``per_group[g]`` is ``pair_g`` (= ARP's "avgpairs": mixed pairs won / mixed pairs, FairRankTune docs (Cachel et
    al., FairRankTune 0.0.7)), ``pair[g]`` the ``pair`` metric with g protected, ``wins[g, h]`` the fraction of (g, h)
    pairs won by g.  Items of unknown group (id -1) take part in no mixed pair.  With one group in a list nothing is
    defined (``valid`` False, value 0). Returns a :class:`RankParityResult` of ``[B, G, G]`` / ``[B, G]`` tensors (``[G,
    G]`` / ``[G]`` for one list or a reduced batch), values in ``[0, 1]``.  No cut-off: every mixed pair counts.

    Example::

        >>> rank_parity(torch.tensor([3., 2., 1.]), torch.tensor([0, 1, 0])).per_group
        tensor([0.5000, 0.5000])
    """
    check_reduction(reduction)
    b = prepare(scores, None, groups, mask, num_groups=num_groups, validate=validate_args, require_groups=True)
    ob = order(b, ordering)
    lost = _group_sum(b.membership, ob.contract(b.membership, which="above"))  # sum_{i in g, j in h} P(j above i)
    pairs = _group_sum(b.membership, ob.contract(b.membership, which="one"))
    wins_frac, valid_pairs = safe_div(pairs - lost, pairs)
    wins_frac = clamp_rounding(wins_frac, 0.0, 1.0)
    G = pairs.shape[-1]
    off = 1.0 - torch.eye(G, dtype=pairs.dtype, device=pairs.device)
    per_group, valid = safe_div(((pairs - lost) * off).sum(-1), (pairs * off).sum(-1))
    per_group = clamp_rounding(per_group, 0.0, 1.0)
    pair = clamp_rounding(torch.where(valid, (1 - 2 * per_group).abs(), torch.zeros_like(per_group)), 0.0, 1.0)
    wins = finish(b, wins_frac, valid_pairs, reduction, False)
    pg = finish(b, per_group, valid, reduction, False)
    pr = finish(b, pair, valid, reduction, False)
    v = valid.any(0) if (reduction != "none" and not b.squeeze) else b.out(valid)
    return RankParityResult(wins=wins, per_group=pg, pair=pr, valid=v)


def discordant_fraction(scores: Tensor, relevance: Tensor, *, mask: Optional[Tensor] = None,
                        ordering: OrderingLike = None, reduction: str = "none", return_valid: bool = False,
                        validate_args: bool = True):
    r"""Fraction of discordant pairs (Fabris et al., WSDM 2023, eq. 3-4): the pairs ranked against strictly ordered
    relevance.

    .. math:: M = \frac{1}{C} \sum_{k} \sum_{k' < k} d(\sigma(k), \sigma(k')), \qquad C = \frac{n (n - 1)}{2}

    Shape ``[B]`` (``[]``), in ``[0, 1]``; with ``return_valid`` the pair ``(M, valid)``.  Undefined (0, invalid)
    for lists of fewer than 2 items.  No cut-off: every pair counts.

    Example::

        >>> discordant_fraction(torch.tensor([3., 2., 1.]), torch.tensor([0., 1., 2.]))
        tensor(1.)
    """
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    ob = order(b, ordering)
    ones = b.mask.to(b.scores.dtype).unsqueeze(-1)
    D = ob.contract(ones, which="above", pair_weight=_udp_weight(b.relevance, 0.0, strict_only=True))
    D = (D[..., 0] * b.mask).sum(-1)
    n = b.mask.sum(-1).to(D.dtype)
    M, valid = safe_div(D, n * (n - 1) / 2)
    return finish(b, clamp_rounding(M, 0.0, 1.0), valid, reduction, return_valid)


def kendall_tau(scores: Tensor, relevance: Tensor, *, mask: Optional[Tensor] = None, ordering: OrderingLike = None,
                reduction: str = "none", return_valid: bool = False, validate_args: bool = True):
    r"""Kendall's tau between the ranking and the ideal ranking (Fabris et al., WSDM 2023, §3.1, with ``M`` from
    :func:`discordant_fraction`).

    .. math:: \tau = 1 - 2 M

    Equals Kendall's tau-a when relevance has no ties (a pair tied in relevance counts as concordant).  Shape
    ``[B]`` (``[]``), in ``[-1, 1]``; with ``return_valid`` the pair ``(tau, valid)``.  Undefined (0, invalid)
    for lists of fewer than 2 items.

    Example::

        >>> kendall_tau(torch.tensor([3., 2., 1.]), torch.tensor([2., 1., 0.]))
        tensor(1.)
    """
    check_reduction(reduction)
    b = prepare(scores, relevance, None, mask, validate=validate_args, require_relevance=True)
    M, valid = discordant_fraction(scores, relevance, mask=mask, ordering=ordering, reduction="none",
                                   return_valid=True, validate_args=False)
    if b.squeeze:
        M, valid = M[None], valid[None]
    tau = torch.where(valid, 1 - 2 * M, torch.zeros_like(M))
    return finish(b, tau, valid, reduction, return_valid)
