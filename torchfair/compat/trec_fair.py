r"""TREC Fair Ranking 2021 / 2022 Task 1 AWRF, with the tracks' handling of unknown and partly known groups.

The TREC Fair Ranking track (Ekstrand, McDonald, Raj & Johnson, TREC 2021 and 2022; evaluation code at
https://github.com/fair-trec/trec2021-fair-public and .../trec2022-fair-public) scores a ranking of Wikipedia
pages by ``nDCG x AWRF`` with

.. math:: \mathrm{AWRF}(L) = 1 - \mathrm{JSD}(\epsilon_L, \hat p), \qquad
          \epsilon_L \propto \sum_{i} d(\mathrm{rank}_i)\, a_i, \qquad d(r) = 1 / \log_2 \max(r, 2)

where ``a_i`` is page i's alignment (group membership) row, ``hat p`` the query's target distribution over groups
and JSD the Jensen-Shannon divergence with natural logarithms (the square of SciPy's ``jensenshannon`` distance,
which normalises both vectors to sum to 1).  ``d`` is :class:`~torchfair.browsing.Logarithmic` ``(flat_top=True)``
on our 0-based positions (positions 0 and 1 weigh 1).  AWRF lies in ``[1 - ln 2, 1]``; 1 is a perfect match.

The two years differ in how a page whose group is **unknown or only partly known** counts:

* **2021** (``year=2021``): the alignment rows hold the known groups only (the track drops its "Unknown"
  column).  A page of unknown group still takes its position but adds nothing; the exposure distribution is the
  known groups' share (renormalised by the JS step).  A page in several groups counts in full in each (0/1 rows,
  not split), and a list with no exposure on any known group is compared as the uniform distribution, as the
  2021 script does.  This is torchfair's own convention for unknown groups (:func:`torchfair.metrics.awrf`
  renormalises over the known groups too); only the distance and the multi-group counting differ.
* **2022** (``year=2022``): unknown is a **group of its own** ("@UNKNOWN"), in the alignment rows and in the
  target.  A row summing to less than 1 is a partly known page: the missing mass goes to the unknown group.
  Pages absent from the track's page table (``listed=False`` here) take their position but are left out
  entirely.  A list with no listed page is undefined (0, invalid).

``groups``: ``[B, N]`` ids (``-1`` = unknown) or ``[B, N, G]`` alignment rows (2022: non-negative, summing to at
most 1, the rest unknown; 2021: non-negative, 0/1 rows counting in full).  ``target``: ``[G]`` or ``[B, G]`` for
2021, ``[G + 1]`` or ``[B, G + 1]`` for 2022 (the **last** entry is the unknown group), normalised to sum to 1.
The track's intersectional targets (e.g. geography x gender) are a flattened product of dimensions: pass the
flattened rows and target.

Reading partly known groups from files: a group file line ``page Europe=0.7`` (see
:mod:`torchfair.evaluation.io`) gives the row ``[0.7, 0, ...]``, 0.3 of the page being unknown.

Worked example (2022; groups Europe, Asia, then unknown; target ``(0.4, 0.4, 0.2)``): four pages ranked 1-4 with
discounts ``1, 1, 1/log2 3, 1/2``; page 1 Europe, page 2 half Europe and half unknown, page 3 unknown, page 4
not in the page table.  Exposure: Europe ``1 + 0.5 = 1.5``, Asia 0, unknown ``0.5 + 1/log2 3``; ``eps`` is that
over its sum 2.6309; AWRF ``= 1 - JSD(eps, p) = 0.8324``.

Example::

    >>> s = torch.tensor([4., 3., 2., 1.])
    >>> rows = torch.tensor([[1., 0.], [0.5, 0.], [0., 0.], [0., 0.]])
    >>> listed = torch.tensor([True, True, True, False])
    >>> round(float(trec_fair_awrf(s, rows, torch.tensor([0.4, 0.4, 0.2]), listed=listed)), 4)
    0.8324
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_choice, check_reduction, prepare
from ..browsing import BrowsingModel, Logarithmic, get_browsing
from ..metrics.common import finish, order
from ..orderings.base import OrderingLike

__all__ = ["trec_fair_awrf", "trec_discount", "jensen_shannon"]


def trec_discount() -> BrowsingModel:
    """The TREC Fair discount ``1 / log2(max(rank, 2))`` (1-based ranks) as a browsing model on 0-based
    positions: :class:`~torchfair.browsing.Logarithmic` ``(flat_top=True)``."""
    return Logarithmic(flat_top=True)


def jensen_shannon(p: Tensor, q: Tensor) -> Tensor:
    """Jensen-Shannon divergence (natural log) between distributions along the last dimension:
    ``0.5 KL(p || m) + 0.5 KL(q || m)``, ``m = (p + q) / 2``; terms with a zero probability are 0."""
    m = 0.5 * (p + q)

    def kl(a: Tensor) -> Tensor:
        pos = a > 0
        ratio = torch.where(pos, a / torch.where(pos, m, torch.ones_like(m)), torch.ones_like(a))
        return (a * torch.log(ratio)).sum(-1)

    return 0.5 * kl(p) + 0.5 * kl(q)


def trec_fair_awrf(scores: Optional[Tensor], groups: Tensor, target: Tensor, *, year: int = 2022,
                   listed: Optional[Tensor] = None, browsing: Union[BrowsingModel, str, None] = None,
                   mask: Optional[Tensor] = None, num_groups: Optional[int] = None, ordering: OrderingLike = None,
                   reduction: str = "none", return_valid: bool = False, validate_args: bool = True
                   ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """TREC Fair Ranking ``year`` (2021 or 2022) Task 1 AWRF ``1 - JSD(eps, target)`` per list (see the module
    docstring).  ``scores`` ``[B, N]`` / ``[N]`` rank the pages (or ``ordering`` does); ``listed`` ``[B, N]`` bool
    marks the pages present in the track's page table (2022; default all).  ``browsing`` defaults to the track's
    discount :func:`trec_discount`.  Returns ``[B]`` (or a scalar for one list), reduced over the valid lists by
    ``reduction``; with ``return_valid`` also the validity."""
    if year not in (2021, 2022) or isinstance(year, bool):
        raise ValueError(f"`year` must be 2021 or 2022; got {year!r}")
    check_reduction(reduction)
    if scores is None:
        if ordering is None or not hasattr(ordering, "list_shape"):
            raise ValueError("`scores` is required unless `ordering` carries its own rankings")
        scores = torch.zeros(ordering.list_shape, dtype=torch.float64)
    b = prepare(scores, None, None, mask, validate=validate_args)
    B, N = b.mask.shape
    dt = b.scores.dtype
    F = get_browsing(browsing, trec_discount())
    e = order(b, ordering).exposure(F, None) * b.mask.to(dt)  # [B, N]

    if not isinstance(groups, Tensor):
        raise ValueError(f"`groups` must be a torch.Tensor; got {type(groups).__name__}")
    g = groups.unsqueeze(0) if b.squeeze and groups.dim() == (2 if groups.is_floating_point() else 1) else groups
    if g.is_floating_point():
        if g.dim() != 3 or g.shape[:2] != (B, N):
            raise ValueError(f"`groups` rows must have shape [B, N, G] = [{B}, {N}, G]; got {tuple(groups.shape)}")
        A = g.to(dt)
        if validate_args:
            real = A[b.mask]
            if not torch.isfinite(real).all() or (real < 0).any():
                raise ValueError("`groups` rows must be finite and non-negative")
            if year == 2022 and (real.sum(-1) > 1 + 1e-6).any():
                raise ValueError("`groups` rows must sum to at most 1 for year=2022 (the rest is the unknown "
                                 "group)")
    else:
        if g.dtype == torch.bool or g.shape != (B, N):
            raise ValueError(f"`groups` must be int ids [B, N] = [{B}, {N}] (-1 = unknown) or float rows "
                             f"[B, N, G]; got {tuple(groups.shape)} {groups.dtype}")
        ids = g.long()
        G = num_groups if num_groups is not None else max(1, int(ids[b.mask].max()) + 1)
        if validate_args and ((ids[b.mask] < -1).any() or (ids[b.mask] >= G).any()):
            raise ValueError(f"`groups` ids must lie in [0, {G}) or be -1 (unknown)")
        A = torch.nn.functional.one_hot(ids.clamp(0, G - 1), G).to(dt) * (ids >= 0).unsqueeze(-1).to(dt)
    if listed is None:
        keep = b.mask
    else:
        lst = listed.unsqueeze(0) if b.squeeze and listed.dim() == 1 else listed
        if not isinstance(lst, Tensor) or lst.dtype != torch.bool or lst.shape != (B, N):
            raise ValueError(f"`listed` must be a bool tensor shaped like `scores` {tuple(scores.shape)}")
        keep = b.mask & lst
    A = A * keep.unsqueeze(-1).to(dt)
    if year == 2022:
        unknown = (1 - A.sum(-1)).clamp(min=0) * keep.to(dt)
        A = torch.cat([A, unknown.unsqueeze(-1)], -1)
    Gp = A.shape[-1]

    if not isinstance(target, Tensor) or target.shape not in ((Gp,), (B, Gp)):
        extra = " (the last entry: the unknown group)" if year == 2022 else ""
        raise ValueError(f"`target` must have shape [{Gp}] or [{B}, {Gp}]{extra}; got "
                         f"{tuple(target.shape) if isinstance(target, Tensor) else target!r}")
    p = target.to(dt).to(A.device).expand(B, Gp)
    if validate_args and (not torch.isfinite(p).all() or (p < 0).any() or (p.sum(-1) <= 0).any()):
        raise ValueError("`target` must be non-negative and finite with a positive sum")
    p = p / p.sum(-1, keepdim=True)

    E = _linalg.einsum("bn,bng->bg", e, A)
    tot = E.sum(-1, keepdim=True)
    has = tot > 0
    eps = E / torch.where(has, tot, torch.ones_like(tot))
    if year == 2021:  # the 2021 script compares a list without known exposure as the uniform distribution
        eps = torch.where(has, eps, torch.full_like(eps, 1.0 / Gp))
        valid = torch.ones(B, dtype=torch.bool, device=A.device)
    else:
        valid = has[:, 0]
    value = torch.where(valid, 1 - jensen_shannon(eps, p), torch.zeros((), dtype=dt, device=A.device))
    return finish(b, value, valid, reduction, return_valid)
