r"""expeval-compatible expected exposure (Diaz, Mitra, Ekstrand, Biega & Carterette, *Evaluating Stochastic
Rankings with Expected Exposure*, CIKM 2020; reference evaluator https://github.com/diazf/expeval), in torch.

expeval scores a run against qrels with three numbers per query: *disparity* (EE-D), *relevance* (EE-R) and
*difference* (EE-L).  :func:`expeval` reproduces them on top of :class:`torchfair.orderings.Sampled`, the browsing
models :class:`~torchfair.browsing.RBP` / :class:`~torchfair.browsing.Cascade` and
:func:`torchfair.metrics.exposure.ideal_exposure`, with expeval's conventions (read from its source):

* runs give **1-based ranks**; the document at 0-based position ``i`` gets exposure ``p**i`` (``-u rbp``), or
  ``p**i (1 - u)**(number of documents with grade > 0 ranked above)`` (``-u gerr``, **expeval's default**, with
  ``-r u``, default 0.5, and ``-p p``, default 0.5);
* several rankings of a query (``S`` samples of a stochastic run) are averaged: the run's expected exposure;
* the target is the expected exposure of the ideal policy: documents of one grade share the mean of the position
  exposures their grade occupies in the relevance-sorted ranking;
* EE-D ``= ||eps||^2``, **EE-R ``= eps . eps*``** (not doubled, unlike Raj & Ekstrand, SIGIR 2022, eq. 10), EE-L
  ``= ||eps - eps*||^2``;
* **complete judgments** (``-C``, "use this for reranking tasks"; ``complete=True``, the default here): every
  document of the list is judged, the ones of grade 0 included, and gets a target.  Without ``-C``
  (``complete=False``) expeval keeps only the judgments with grade > 0: the other documents have target 0 (their
  run exposure still counts in EE-D and EE-L), and a query without a relevant document is skipped (invalid here);
* **group mode** (``-G``): the vectors are per group, a group's exposure being the sum over its documents that
  expeval keeps: *all* judged documents with ``-C``, the documents with grade > 0 without it.  A document in
  several groups counts in full in each (``[B, N, G]`` 0/1 membership here).  Documents without a group label get
  expeval's group ``-1``, which it treats as **one more group** (``unlabeled_group=True``);
* ``-B`` turns grades > 0 into 1 (``binarize=True``); without ``-U`` expeval prints values normalised between
  per-query bounds (``normalize=True``, below).

Which expeval command line is which call (``qrels`` in expeval's ``QID GID DID REL`` layout, ``run`` a TREC run
whose ranks ``ranks`` holds, ``S`` samples per query in the second run column)::

    expeval.py -C -U qrels run              expeval(ranks, rel)                         # defaults: gerr, p=u=0.5
    expeval.py -C -U -u rbp -p 0.8 ...      expeval(ranks, rel, user_model="rbp", patience=0.8)
    expeval.py -C -U -r 0.3 ...             expeval(ranks, rel, utility=0.3)
    expeval.py -C -U -B ...                 expeval(ranks, rel, binarize=True)
    expeval.py -C -U -G ...                 expeval(ranks, rel, groups)                 # sums over all documents
    expeval.py -U -G ...                    expeval(ranks, rel, groups, complete=False) # relevant documents only
    expeval.py -U ...                       expeval(ranks, rel, complete=False)
    expeval.py qrels run  (all defaults)    expeval(ranks, rel, complete=False, normalize=True)
    expeval.py -C [-G] ...                  expeval(ranks, rel[, groups], normalize=True)

``relevant_only`` (default: ``not complete``, expeval's rule) overrides which documents enter the group sums, a
variant expeval itself does not offer.  ``unlabeled_group=False`` leaves ``-1`` documents out of the group
vectors (torchfair's convention for unknown groups) instead.

**Normalisation** (``normalize=True``, expeval without ``-U``): ``(v - lb) / (ub - lb)``, or a fixed value
(EE-D 0, EE-R 1, EE-L 0) where ``lb == ub``, with expeval's bounds.  ``n`` is the number of judged documents
(infinite without ``-C``), ``r`` the number with grade > 0, ``pp = p`` (rbp) or ``p u`` (gerr, as expeval
writes it), ``S(x, n) = sum_{i<n} x**i``, ``t`` the target sorted ascending:

* documents: EE-D ``ub = S(p^2, n)``, ``lb = S(pp, n)^2 / n`` (0 without ``-C``); EE-R ``ub = ||t||^2``,
  ``lb = sum_i pp**i t_i`` (0 without ``-C``; both 0 when all judged documents share one grade); EE-L ``lb = 0``,
  ``ub = sum_i (pp**i - t_i)^2`` (``||t||^2 + S(pp, inf)`` without ``-C``);
* groups (``k`` groups with a counted document): EE-D ``ub = k S(p, r)^2``, ``lb = k S(pp, r)^2`` (both 0 when
  ``k = 1``); EE-R: expeval's upper bound is 0, so the normalised group EE-R is always 1; EE-L ``lb = 0``,
  ``ub = max(||t||^2, sum_g (S(p, r) - t_g)^2)``.

``target_norm`` (``||eps*||^2``) is never normalised.  Normalisation needs ``patience < 1``.

Check by hand (qrels d1 rel 1, d2 rel 1, d3 rel 0, d4 rel 0; run ``d1 d2 d3 d4``; gerr, ``p = u = 0.5``,
``-C -U``): run exposures ``(1, 0.25, 0.0625, 0.03125)``, targets ``(0.625, 0.625, 0.046875, 0.046875)``, so
EE-D = 1.0673828125, EE-R = 0.78564453125, EE-L = 0.28173828125.  With ``-u rbp``: exposures
``(1, .5, .25, .125)``, targets ``(.75, .75, .1875, .1875)``: EE-D 1.328125, EE-R 1.1953125, EE-L 0.1328125.

Example::

    >>> ee = expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]))
    >>> [float(x) for x in (ee.disparity, ee.relevance, ee.loss)]
    [1.0673828125, 0.78564453125, 0.28173828125]

Not reproduced: queries present in the qrels but absent from the run (expeval scores them with its bounds),
negative grades (``-1``, unjudged) kept as their own grade under ``-C``, and judged documents absent from the
ranking (every document of a ``[B, N]`` list is ranked).
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _linalg
from .._validation import check_choice, check_number, check_reduction
from ..browsing import RBP, Cascade
from ..metrics.common import reduce
from ..metrics.exposure import ExpectedExposureResult, ideal_exposure
from ..orderings.stochastic import Sampled

__all__ = ["expeval", "rankings_from_ranks"]


def rankings_from_ranks(ranks: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Convert 1-based ranks per item (``ranks[..., i]`` = rank of item i, as in a TREC run) into rankings
    (``[..., k]`` = index of the item at 0-based position k).  Ranks of padded items (``mask`` False) are ignored;
    the ranks of the real items of a list must be distinct (their order is what counts)."""
    if not isinstance(ranks, Tensor) or ranks.is_floating_point() or ranks.dtype == torch.bool:
        raise ValueError(f"`ranks` must be an integer tensor of 1-based ranks; got "
                         f"{ranks.dtype if isinstance(ranks, Tensor) else type(ranks).__name__}")
    r = ranks.long()
    if mask is not None:
        r = torch.where(mask.expand_as(r), r, torch.full_like(r, torch.iinfo(torch.long).max))
        real = mask.expand_as(r)
    else:
        real = torch.ones_like(r, dtype=torch.bool)
    if (r[real] < 1).any():
        raise ValueError("`ranks` must be 1-based (>= 1) for real items")
    sr = torch.sort(r, -1).values
    dup = (sr[..., 1:] == sr[..., :-1]) & (sr[..., 1:] != torch.iinfo(torch.long).max)
    if dup.any():
        raise ValueError("`ranks` of the real items of a list must be distinct")
    return torch.argsort(r, dim=-1, stable=True)


def _series(x: float, n: Tensor) -> Tensor:
    """``sum_{i < n} x**i`` for a tensor of counts ``n`` (``inf`` allowed)."""
    return torch.where(torch.isinf(n), torch.full_like(n, 1.0 / (1.0 - x)), (1.0 - x ** n) / (1.0 - x))


def _normalise(value: Tensor, lb: Tensor, ub: Tensor, default: float) -> Tensor:
    same = lb == ub
    return torch.where(same, torch.full_like(value, default), (value - lb) / torch.where(same, torch.ones_like(ub),
                                                                                          ub - lb))


def _membership(groups: Tensor, rel: Tensor, unlabeled_group: bool, num_groups: Optional[int],
                mask: Optional[Tensor] = None) -> Tensor:
    """``[B, N, G']`` float weights: one-hot ids (``-1``: the extra last group when ``unlabeled_group``) or the
    given multi-hot membership.  Padded slots (``mask`` False) are not read: their ids or rows may hold anything."""
    if groups.is_floating_point():
        if groups.shape[:-1] != rel.shape or groups.dim() != rel.dim() + 1:
            raise ValueError(f"`groups` as float membership must have shape {tuple(rel.shape)} + (G,); got "
                             f"{tuple(groups.shape)}")
        if mask is not None:
            groups = torch.where(mask.unsqueeze(-1), groups, torch.zeros((), dtype=groups.dtype,
                                                                          device=groups.device))
        if not torch.isfinite(groups).all() or (groups < 0).any():
            raise ValueError("`groups` membership must be finite and non-negative (1 = in the group)")
        return groups.to(rel.dtype)
    if groups.dtype == torch.bool or groups.shape != rel.shape:
        raise ValueError(f"`groups` must be integer group ids shaped like `relevance` {tuple(rel.shape)} (-1 = "
                         f"no label) or [..., N, G] 0/1 membership; got {tuple(groups.shape)} {groups.dtype}")
    ids = groups.long()
    if mask is not None:
        ids = torch.where(mask, ids, torch.full_like(ids, -1))  # a padded slot: no label, whatever it holds
    if (ids < -1).any():
        raise ValueError("`groups` ids must be >= 0, or -1 for a document without group label")
    G = int(ids.max()) + 1 if num_groups is None else num_groups
    G = max(G, 1)
    if (ids >= G).any():
        raise ValueError(f"`groups` ids must be < num_groups={G}")
    known = torch.nn.functional.one_hot(ids.clamp(min=0), G).to(rel.dtype) * (ids >= 0).unsqueeze(-1).to(rel.dtype)
    if not unlabeled_group:
        return known
    return torch.cat([known, (ids == -1).unsqueeze(-1).to(rel.dtype)], -1)


def expeval(ranks: Tensor, relevance: Tensor, groups: Optional[Tensor] = None, *, patience: float = 0.5,
            user_model: str = "gerr", utility: float = 0.5, complete: bool = True, binarize: bool = False,
            normalize: bool = False, unlabeled_group: bool = True, relevant_only: Optional[bool] = None,
            num_groups: Optional[int] = None, mask: Optional[Tensor] = None, reduction: str = "none",
            return_valid: bool = False, validate_args: bool = True
            ) -> Union[ExpectedExposureResult, Tuple[ExpectedExposureResult, Tensor]]:
    """expeval's EE-D / EE-R / EE-L (see the module docstring for the conventions and the flag table).

    ``ranks``: 1-based rank of every document, ``[N]`` / ``[B, N]`` (one ranking per query, shaped like
    ``relevance``) or ``[S, N]`` / ``[S, B, N]`` (``S`` sampled rankings per query, averaged).  ``relevance``:
    grades ``[N]`` / ``[B, N]`` (>= 0).  ``groups`` (``-G``): integer ids ``[N]`` / ``[B, N]`` (``-1`` = no
    label: expeval's group ``-1``, an extra group unless ``unlabeled_group=False``) or ``[N, G]`` / ``[B, N, G]``
    0/1 membership (a document counts in full in each of its groups).  ``user_model`` ``"gerr"`` (default, as
    expeval) or ``"rbp"``; ``patience`` is ``-p``, ``utility`` is ``-r``, ``complete`` is ``-C``, ``binarize`` is
    ``-B``, ``normalize`` is the absence of ``-U``.  Returns
    :class:`~torchfair.metrics.exposure.ExpectedExposureResult` ``(loss, disparity, relevance, target_norm)`` per
    query (reduced over the valid queries by ``reduction``), and the validity ``[B]`` with ``return_valid``
    (False where expeval skips the query: no document with grade > 0 when ``complete=False``; values 0 there).
    """
    check_reduction(reduction)
    check_choice(user_model, "user_model", ("gerr", "rbp"))
    p = check_number(patience, "patience", low=0, high=1, low_open=True)
    u = check_number(utility, "utility", low=0, high=1)
    for name, flag in (("complete", complete), ("binarize", binarize), ("normalize", normalize),
                       ("unlabeled_group", unlabeled_group), ("return_valid", return_valid)):
        if not isinstance(flag, bool):
            raise ValueError(f"`{name}` must be a bool; got {flag!r}")
    if relevant_only is not None and not isinstance(relevant_only, bool):
        raise ValueError(f"`relevant_only` must be None or a bool; got {relevant_only!r}")
    if normalize and p >= 1:
        raise ValueError(f"`patience` must be < 1 with normalize=True (expeval's bounds divide by 1 - p); got {p}")
    if not isinstance(relevance, Tensor) or relevance.dim() not in (1, 2):
        raise ValueError("`relevance` must be a tensor [B, N] or [N] of grades")
    if not isinstance(ranks, Tensor):
        raise ValueError(f"`ranks` must be a torch.Tensor; got {type(ranks).__name__}")
    if ranks.dim() == relevance.dim():
        ranks = ranks.unsqueeze(0)
    if ranks.dim() != relevance.dim() + 1 or ranks.shape[1:] != relevance.shape:
        raise ValueError(f"`ranks` must have the shape of `relevance` {tuple(relevance.shape)}, optionally with a "
                         f"leading sample dimension; got {tuple(ranks.shape)}")
    squeeze = relevance.dim() == 1
    rel = relevance.to(torch.float64)  # expeval computes in Python floats
    if squeeze:
        rel, ranks = rel.unsqueeze(0), ranks.unsqueeze(1)
        groups = None if groups is None else groups.unsqueeze(0)
        mask = None if mask is None else mask.unsqueeze(0)
    B, N = rel.shape
    if mask is None:
        mask = torch.ones(B, N, dtype=torch.bool, device=rel.device)
    elif not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != (B, N):
        raise ValueError(f"`mask` must be a bool tensor shaped like `relevance` {tuple(relevance.shape)}")
    if validate_args:
        if not torch.isfinite(rel[mask]).all() or (rel[mask] < 0).any():
            raise ValueError("`relevance` must be finite and >= 0 on real items")
    rel = torch.where(mask, rel, torch.zeros((), dtype=rel.dtype, device=rel.device))
    if binarize:
        rel = (rel > 0).to(rel.dtype)
    F = RBP(p) if user_model == "rbp" else Cascade(p, stop=lambda r: u * (r > 0).to(r.dtype))

    rankings = rankings_from_ranks(ranks, mask.unsqueeze(0))
    eps = Sampled(rankings)(torch.zeros_like(rel), mask).exposure(F, rel) * mask  # run exposure [B, N]
    star = ideal_exposure(rel, browsing=F, mask=mask, validate_args=False)
    relevant = mask & (rel > 0)
    judged = mask if complete else relevant
    star = star * judged  # without -C only the relevant documents have a target
    n_rel = relevant.sum(-1).to(rel.dtype)
    valid = torch.ones(B, dtype=torch.bool, device=rel.device) if complete else n_rel > 0

    if groups is None:
        x, y = eps, star
    else:
        if not isinstance(groups, Tensor):
            raise ValueError(f"`groups` must be a torch.Tensor; got {type(groups).__name__}")
        A = _membership(groups, rel, unlabeled_group, num_groups, mask)
        counted = judged if relevant_only is None else (relevant if relevant_only else mask)
        A = A * counted.unsqueeze(-1).to(rel.dtype)
        x, y = _linalg.einsum("bn,bng->bg", eps, A), _linalg.einsum("bn,bng->bg", star, A)
        present = (A > 0).any(1)  # expeval's group keys
    disparity = (x ** 2).sum(-1)
    relevance_ = (x * y).sum(-1)
    loss = ((x - y) ** 2).sum(-1)
    tnorm = (y ** 2).sum(-1)

    if normalize:
        pp = p if user_model == "rbp" else p * u
        if groups is None:
            n = torch.where(torch.full((B,), complete, device=rel.device), judged.sum(-1).to(rel.dtype),
                            torch.full((B,), float("inf"), dtype=rel.dtype, device=rel.device))
            inf = torch.isinf(n)
            ns = torch.where(inf, torch.ones_like(n), n)
            # targets of the judged documents sorted ascending, padded with +inf at the end
            ts = torch.sort(torch.where(judged, star, torch.full_like(star, float("inf"))), -1).values
            in_t = torch.isfinite(ts)
            ts0 = torch.where(in_t, ts, torch.zeros_like(ts))
            powers = pp ** torch.arange(N, dtype=rel.dtype, device=rel.device)
            d_ub = _series(p * p, n)
            d_lb = torch.where(inf, torch.zeros_like(n), _series(pp, n) ** 2 / ns)
            r_ub = (ts0 ** 2).sum(-1)
            r_lb = torch.where(inf, torch.zeros_like(n), (powers * ts0).sum(-1))
            grades = torch.sort(torch.where(judged, rel, torch.full_like(rel, -1.0)), -1, descending=True).values
            changes = ((grades[:, 1:] != grades[:, :-1]) & (grades[:, 1:] >= 0)).sum(-1)
            one_level = changes == 0
            r_ub, r_lb = torch.where(one_level, 0.0, r_ub), torch.where(one_level, 0.0, r_lb)
            l_ub = torch.where(inf, r_ub.new_zeros(()) + (ts0 ** 2).sum(-1) + 1.0 / (1.0 - pp),
                               (((powers - ts0) ** 2) * in_t).sum(-1))
            l_lb = torch.zeros_like(l_ub)
        else:
            k = present.sum(-1).to(rel.dtype)
            mass = _series(p, n_rel)
            d_ub = torch.where(k == 1, 0.0, k * mass ** 2)
            d_lb = torch.where(k == 1, 0.0, k * _series(pp, n_rel) ** 2)
            r_ub = r_lb = torch.zeros_like(k)  # expeval's group relevance bound is 0: normalised EE-R is 1
            l_ub = torch.maximum(tnorm, (((mass[:, None] - y) ** 2) * present).sum(-1))
            l_lb = torch.zeros_like(l_ub)
        disparity = _normalise(disparity, d_lb, d_ub, 0.0)
        relevance_ = _normalise(relevance_, r_lb, r_ub, 1.0)
        loss = _normalise(loss, l_lb, l_ub, 0.0)

    zero = torch.zeros((), dtype=rel.dtype, device=rel.device)
    out = []
    for v in (loss, disparity, relevance_, tnorm):
        v = torch.where(valid, v, zero)
        v = reduce(v, valid, reduction, batched=not squeeze)
        out.append(v.squeeze(0) if squeeze else v)
    res = ExpectedExposureResult(*out)
    if not return_valid:
        return res
    ok = valid.any() if (reduction != "none" and not squeeze) else (valid.squeeze(0) if squeeze else valid)
    return res, ok
