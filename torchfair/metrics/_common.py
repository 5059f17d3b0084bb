"""Plumbing shared by the measures: resolving orderings, reductions, safe division."""
from __future__ import annotations

from typing import Tuple, Union

import torch
from torch import Tensor

from .._validation import REDUCTIONS, Batch, check_reduction
from ..orderings import Hard, OrderedBatch, Ordering


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


def safe_div(num: Tensor, den: Tensor) -> Tuple[Tensor, Tensor]:
    """``num / den`` where ``den > 0``, else 0; returns (value, valid). No NaN in value or gradient."""
    valid = den > 0
    value = num / torch.where(valid, den, torch.ones_like(den))
    return torch.where(valid, value, torch.zeros_like(value)), valid


def reduce(value: Tensor, valid: Tensor, reduction: str, batched: bool) -> Tensor:
    """Reduce over the batch dimension (dim 0) counting only valid lists.

    ``"mean"`` averages each entry over the lists where it is defined (0 where no list defines it);
    ``"sum"`` sums the defined entries; ``"none"`` returns per-list values.
    """
    check_reduction(reduction)
    if reduction == "none" or not batched:
        return value
    v = valid.to(value.dtype)
    total = (value * v).sum(0)
    if reduction == "sum":
        return total
    return total / v.sum(0).clamp(min=1)


def finish(batch: Batch, value: Tensor, valid: Tensor, reduction: str, return_valid: bool):
    value = reduce(value, valid, reduction, batched=not batch.squeeze)
    if reduction != "none" and not batch.squeeze:
        valid = valid.any(0)
    else:
        value, valid = batch.out(value), batch.out(valid)
    return (value, valid) if return_valid else value
