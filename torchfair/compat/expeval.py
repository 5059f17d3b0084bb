r"""expeval-compatible expected exposure (Diaz et al., https://github.com/diazf/expeval), in torch.

expeval scores a run against qrels with three numbers per query: *disparity* (EE-D), *relevance* (EE-R) and
*difference* (EE-L).  Its conventions, reproduced here on top of :func:`torchfair.metrics.exposure.expected_exposure`
and :class:`torchfair.orderings.Sampled`:

* runs give **1-based ranks**; the document at 0-based position ``i`` gets exposure ``p**i`` (RBP with patience
  ``p``, no leading factor), i.e. :class:`~torchfair.browsing.RBP` ``(p)`` on our 0-based positions.  ``"gerr"``
  multiplies by ``(1 - u)`` per relevant (grade > 0) document ranked above
  (:class:`~torchfair.browsing.Cascade` with ``stop(r) = u * 1(r > 0)``).
* several rankings of a query (sampled from a stochastic run) are averaged: the run's expected exposure;
* the target is the expected exposure of the ideal policy: documents of the same grade share the mean of the
  ``p**i`` over the positions their grade occupies in the relevance-sorted ranking;
* EE-D ``= ||eps||^2``, **EE-R ``= eps . eps*``** (not doubled, unlike Raj & Ekstrand's ``002`` eq. 10), EE-L
  ``= ||eps - eps*||^2``, so ``EE-L = EE-D - 2 EE-R + ||eps*||^2``;
* complete judgments (the reranking setting): every ranked document is judged and all the judged documents are
  ranked, which is what a ``[B, N]`` tensor layout expresses (an unjudged document is a document of relevance 0).

**Level.**  Without ``groups`` the vectors are per *document* (expeval's default mode, each document its own
"group"); this is the mode that gives expeval's numbers for the check below.  With ``groups`` the vectors are
group exposures following expeval's group mode (``-g``): a group's exposure is the sum over its documents *with
grade > 0* (``relevant_only=True``; non-relevant documents are left out of the group sums, both in the run and in
the target), or over all its documents (``relevant_only=False``).

Check (qrels d1: group 0, rel 1; d2: group 1, rel 1; d3: group 0, rel 0; d4: group 1, rel 0; ``p = 0.5``,
complete judgments): the run ``d1 d2 d3 d4`` gives EE-D 1.328125, EE-R 1.195312, EE-L 0.132812; ``d3 d4 d1 d2``
gives EE-D 1.328125, EE-R 0.5625, EE-L 1.398438 (document level: item exposures ``(1, .5, .25, .125)``, targets
``(.75, .75, .1875, .1875)``).  Summing into the two groups instead gives other numbers (EE-D 1.953125 over all
documents, 1.25 over the relevant ones), so these reference values are document-level ones.

Example::

    >>> ee = expeval(torch.tensor([1, 2, 3, 4]), torch.tensor([1., 1., 0., 0.]), patience=0.5)
    >>> [round(float(x), 6) for x in (ee.disparity, ee.relevance, ee.loss)]
    [1.328125, 1.195312, 0.132812]

Not reproduced: expeval's normalised output (``-n``, bounds per query) and its handling of unjudged documents in
the retrieval (incomplete-judgment) setting.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..browsing import RBP, Cascade
from ..metrics.exposure import ExpectedExposure, expected_exposure
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


def expeval(ranks: Tensor, relevance: Tensor, groups: Optional[Tensor] = None, *, patience: float = 0.5,
            user_model: str = "rbp", utility: float = 0.5, relevant_only: bool = True,
            num_groups: Optional[int] = None, mask: Optional[Tensor] = None, reduction: str = "none",
            validate_args: bool = True) -> ExpectedExposure:
    """expeval's EE-D / EE-R / EE-L (see the module docstring for the conventions).

    ``ranks``: 1-based rank of every document, ``[N]`` / ``[B, N]`` (one ranking per query, shaped like
    ``relevance``) or ``[S, N]`` / ``[S, B, N]`` (``S`` sampled rankings per query, averaged).  ``relevance``:
    grades ``[N]`` / ``[B, N]`` (complete judgments).  ``groups``: optional integer group ids (``[N]`` / ``[B, N]``,
    ``-1`` = no group) for expeval's group mode (one group per document; expeval's documents in several groups,
    each counted in full, are not covered).  ``user_model``: ``"rbp"`` (``p**i``) or
    ``"gerr"`` (``p**i (1 - u)**(#relevant above)``, ``u = utility``).  Returns
    :class:`~torchfair.metrics.exposure.ExpectedExposure` ``(loss, disparity, relevance, target_norm)`` per query.
    """
    if not isinstance(relevance, Tensor) or relevance.dim() not in (1, 2):
        raise ValueError("`relevance` must be a tensor [B, N] or [N] of grades")
    if not isinstance(ranks, Tensor):
        raise ValueError(f"`ranks` must be a torch.Tensor; got {type(ranks).__name__}")
    if ranks.dim() == relevance.dim():
        ranks = ranks.unsqueeze(0)
    if ranks.dim() != relevance.dim() + 1 or ranks.shape[1:] != relevance.shape:
        raise ValueError(f"`ranks` must have the shape of `relevance` {tuple(relevance.shape)}, optionally with a "
                         f"leading sample dimension; got {tuple(ranks.shape)}")
    if user_model == "rbp":
        F = RBP(patience)
    elif user_model == "gerr":
        u = float(utility)
        if not 0 <= u <= 1:
            raise ValueError(f"`utility` must lie in [0, 1]; got {utility}")
        F = Cascade(patience, stop=lambda r: u * (r > 0).to(r.dtype))
    else:
        raise ValueError(f"`user_model` must be 'rbp' or 'gerr'; got {user_model!r}")
    m = None if mask is None else (mask.unsqueeze(0) if mask.dim() == relevance.dim() else mask)
    rankings = rankings_from_ranks(ranks, m)
    rel = relevance.to(torch.float64)  # expeval computes in Python floats
    if groups is not None:
        if not isinstance(groups, Tensor) or groups.is_floating_point() or groups.shape != relevance.shape:
            raise ValueError(f"`groups` must be integer group ids shaped like `relevance` {tuple(relevance.shape)} "
                             "(-1 = no group)")
        if num_groups is None:
            num_groups = max(1, int(groups.max()) + 1)
        if relevant_only:
            groups = torch.where(rel > 0, groups, torch.full_like(groups, -1))
    return expected_exposure(None, rel, groups, browsing=F, mask=mask, num_groups=num_groups,
                             ordering=Sampled(rankings), reduction=reduction, validate_args=validate_args)
