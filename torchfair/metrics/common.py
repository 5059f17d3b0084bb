"""Plumbing shared by the measures: orderings, argument checks, cut-offs, reductions, safe arithmetic.

A public module so that the other rooms writing measure arithmetic (the FairRankTune / expeval / TREC Fair
re-implementations in :mod:`torchfair.compat`, the targeted re-ranker) use the same helpers; none of its names is
part of ``torchfair.metrics``' own surface.

Every measure module calls these helpers so that one rule is written once:

* :func:`order` resolves ``ordering=`` (an :class:`~torchfair.orderings.Ordering`, a precomputed
  :class:`~torchfair.orderings.OrderedBatch`, or ``None`` for ``Hard()``);
* :func:`cut_browsing` reads ``browsing=`` through :func:`torchfair.browsing.get_browsing` (the one spec language)
  and applies the cut-off ``k`` as :class:`~torchfair.browsing.TopK`;
* :func:`check_k`, :func:`check_bool` and :func:`check_target_string` validate arguments (with the checks of
  :mod:`torchfair._validation`);
* :func:`expectation_over_rankings` evaluates a measure that is not linear in the ordering on every ranking of
  a mixture ordering (``Sampled``, ``PlackettLuce``) and averages it with the mixture's weights;
* :func:`safe_div`, :func:`safe_log` compute ``num / den`` and ``log x`` with zero value and zero gradient where
  they are undefined (``torch.where`` on both sides, so no NaN leaks into gradients);
* :func:`ideal_sort` is the one sort of the ideal ranking (relevance descending, ties by list index, padding
  last) behind :func:`~torchfair.metrics.exposure.ideal_exposure`, :func:`~torchfair.metrics.utility.ideal_dcg`
  and :func:`~torchfair.metrics.utility.ideal_ranking`;
* :func:`reduce`, :func:`finish` reduce per-list values over the lists where they are defined.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._validation import Batch, check_choice, check_number, check_reduction
from ..browsing import BrowsingModel, TopK, get_browsing
from ..orderings import Hard, OrderedBatch, Ordering
from ..orderings.mixture import MixtureOrderedBatch
from ..orderings.hard import sort_order

__all__ = ["order", "check_k", "check_bool", "cut_browsing", "check_target_string", "expectation_over_rankings",
           "safe_div", "safe_log", "ideal_sort", "reduce", "finish", "out_of_range_tolerance", "precise_dtype",
           "clamp_rounding"]


def check_ordering(ordering) -> None:
    """``ordering`` must be ``None``, an :class:`Ordering` or an :class:`OrderedBatch`."""
    if ordering is not None and not isinstance(ordering, (Ordering, OrderedBatch)):
        raise ValueError(f"`ordering` must be an Ordering (e.g. torchfair.orderings.Hard()); got {ordering!r}")


def order(batch: Batch, ordering: Union[Ordering, OrderedBatch, None]) -> OrderedBatch:
    """The ordering of ``batch``; ``None`` means the exact evaluator ``Hard()``."""
    if ordering is None:
        ordering = Hard()
    if isinstance(ordering, OrderedBatch):
        if tuple(ordering.mask.shape) != tuple(batch.mask.shape):
            raise ValueError(f"`ordering` was computed for shape {tuple(ordering.mask.shape)}, "
                             f"inputs have {tuple(batch.mask.shape)}")
        return ordering
    if not isinstance(ordering, Ordering):
        raise ValueError(f"`ordering` must be an Ordering (e.g. torchfair.orderings.Hard()); got {ordering!r}")
    return ordering(batch.scores, batch.mask)


# ------------------------------------------------------------------------------------------------ arguments
def check_k(k, name: str = "k") -> Optional[int]:
    """The cut-off ``k``: ``None`` (the whole list) or an int ``>= 1``."""
    if k is None:
        return None
    if isinstance(k, float):  # 10.0 is not a cut-off a user means to give as a float
        raise ValueError(f"`{name}` must be a positive int or None; got {k!r}")
    return check_number(k, name, low=1, integer=True)


def check_bool(value, name: str) -> bool:
    """``value`` if it is a bool, else ``ValueError`` naming ``name``."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False; got {value!r}")
    return value


def cut_browsing(browsing: Union[BrowsingModel, str, None], default: BrowsingModel,
                 k: Optional[int]) -> BrowsingModel:
    """``get_browsing(browsing, default)``, truncated to the top ``k`` positions (``TopK(F, k)``) when ``k``."""
    F = get_browsing(browsing, default)
    return F if k is None else TopK(F, k)


def check_target_string(target, choices: Sequence[str], name: str = "target"):
    """A string ``target`` must be one of ``choices`` (``ValueError`` naming ``name`` otherwise)."""
    if isinstance(target, str):
        check_choice(target, name, tuple(choices))
    return target


# ------------------------------------------------------------------------------------------------ arithmetic
def safe_div(num: Tensor, den: Tensor) -> Tuple[Tensor, Tensor]:
    """``num / den`` where ``den > 0``, else 0; returns (value, valid). No NaN in value or gradient."""
    valid = den > 0
    value = num / torch.where(valid, den, torch.ones_like(den))
    return torch.where(valid, value, torch.zeros_like(value)), valid


def safe_log(x: Tensor) -> Tensor:
    """``log x`` where ``x > 0``, else 0, with zero (not NaN) gradient where ``x <= 0``."""
    ok = x > 0
    return torch.where(ok, torch.log(torch.where(ok, x, torch.ones_like(x))), torch.zeros_like(x))


def precise_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """float64 for short intermediate sums that must not carry float32 rounding, where the device has float64
    (not on Apple MPS, which then keeps ``dtype``)."""
    return dtype if torch.device(device).type == "mps" else torch.float64


def out_of_range_tolerance(dtype: torch.dtype) -> float:
    """Rounding slack allowed when a value that is bounded in exact arithmetic is clamped to its range."""
    return 1e-4 if dtype in (torch.float16, torch.bfloat16, torch.float32) else 1e-9


# ------------------------------------------------------------------------------------------------ ideal ranking
def ideal_sort(key: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
    """The ideal ranking of each list: ``key`` descending, ties by list index, padded items last.

    Returns ``(sorted_key, order)``, both ``[B, N]``; ``order[b, k]`` is the item at position ``k`` and
    ``sorted_key`` holds ``-inf`` at padded positions.  The order is :class:`~torchfair.orderings.Hard`'s (the same
    stable order, :func:`~torchfair.orderings.hard.sort_order`: on plain CPU tensors the compiled radix sort)."""
    k = torch.where(mask, key, torch.full_like(key, float("-inf")))
    order_ = sort_order(key.detach(), mask)
    return k.gather(-1, order_), order_


# ------------------------------------------------------------------------------------------------ mixtures
def expectation_over_rankings(ob: OrderedBatch, per_ranking: Callable[[OrderedBatch, int], Tensor]) -> Tensor:
    """``E[measure]`` under a mixture ordering; the measure itself on any other ordering.

    ``per_ranking(inner, S)`` evaluates the measure on an ordered batch of ``S * B`` lists (``S = 1`` for a
    plain ordering; inputs tiled ``S`` times, sample-major, e.g. ``relevance.repeat(S, 1)``) and returns
    ``[S * B, ...]``.  For a :class:`~torchfair.orderings.mixture.MixtureOrderedBatch` (``Sampled``, ``PlackettLuce``)
    it is evaluated on the mixture's ``inner`` rankings and averaged with the mixture's weights ``[S, B]``
    (for Plackett-Luce, the score-function weights when the policy carries them, so that the expectation gets
    the score-function gradient; their value is the plain ``1/S``).  Nested mixtures are expanded recursively.
    """
    if not isinstance(ob, MixtureOrderedBatch):
        return per_ranking(ob, 1)
    S = ob.num_samples
    B = ob.mask.shape[0]
    w = getattr(ob, "sf_weights", None)
    w = ob.weights if w is None else w

    def inner_fn(inner: OrderedBatch, R: int) -> Tensor:
        return per_ranking(inner, R * S)

    v = expectation_over_rankings(ob.inner, inner_fn)  # [S * B, ...]
    v = v.reshape(S, B, *v.shape[1:])
    w = w.to(v.dtype).reshape(S, B, *([1] * (v.dim() - 2)))
    return (w * v).sum(0)


# ------------------------------------------------------------------------------------------------ reductions
def reduce(value: Tensor, valid: Tensor, reduction: str, batched: bool) -> Tensor:
    """Reduce over the batch dimension (dim 0) counting only valid lists.

    ``"mean"`` averages each entry over the lists where it is defined (0 where no list defines it);
    ``"sum"`` sums the defined entries; ``"none"`` returns per-list values.
    """
    check_reduction(reduction)
    if reduction == "none" or not batched:
        return value
    v = valid.to(value.dtype)
    total = torch.where(valid, value, torch.zeros_like(value)).sum(0)
    if reduction == "sum":
        return total
    return total / v.sum(0).clamp(min=1)


def finish(batch: Batch, value: Tensor, valid: Tensor, reduction: str, return_valid: bool):
    """Zero the undefined entries, reduce over the lists, drop the batch dimension of ``[N]`` inputs.

    Returns ``value`` or, when ``return_valid``, ``(value, valid)`` (``valid`` reduced with ``any`` over lists)."""
    value = torch.where(valid, value, torch.zeros_like(value))
    value = reduce(value, valid, reduction, batched=not batch.squeeze)
    if reduction != "none" and not batch.squeeze:
        valid = valid.any(0)
    else:
        value, valid = batch.out(value), batch.out(valid)
    return (value, valid) if check_bool(return_valid, "return_valid") else value


def check_soft_group_id(value, name: str, groups, batch: Batch) -> None:
    """With soft membership ``groups [B, N, G]`` (a floating tensor) the number of groups is declared by the shape:
    a group id ``value >= G`` is a ``ValueError`` naming ``name`` (as :func:`~torchfair.metrics.awrf` and the
    losses).  Integer ids leave an id beyond those seen allowed: a group absent from the batch (undefined there)."""
    if value is not None and isinstance(groups, Tensor) and groups.is_floating_point() and value >= batch.num_groups:
        raise ValueError(f"`{name}` must be an int group id in [0, {batch.num_groups}) (the last dimension of the "
                         f"soft membership `groups`); got {value!r}")


def clamp_rounding(value: Tensor, low: Optional[float] = None, high: Optional[float] = None) -> Tensor:
    """Clamp ``value`` to ``[low, high]`` where it is outside by rounding only (by at most
    :func:`out_of_range_tolerance` times ``1 + |bound|``), keeping the gradient (straight-through).  Larger
    excursions are left as they are, so that a real error stays visible (the property tests check the ranges)."""
    bounds = [abs(x) for x in (low, high) if x is not None]
    tol = out_of_range_tolerance(value.dtype) * (1.0 + (max(bounds) if bounds else 0.0))
    with torch.no_grad():
        excess = value.clamp(min=low, max=high) - value
        shift = torch.where(excess.abs() <= tol, excess, torch.zeros_like(excess))
    return value + shift
