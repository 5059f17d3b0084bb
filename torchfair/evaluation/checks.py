"""Measure requests and re-ranker specs checked in full before any work: ``torchfair metrics --measures``,
``torchfair evaluate --measures / --rerank``, ``torchfair fit --model.measures / --model.rerank``.

A spec is checked by running it once on tiny lists (2 items per group, 3 grades; milliseconds, the torch code;
when the number of groups is not known, a spec that fails with 2 groups is tried with 3, 4 and 6: an option may
name a group id or hold a share per group): every check of the measure or the re-ranker (the name, each option's
name and value, a targeted re-ranker's measure and guard) runs as it would on the data, and its error is raised
before any file is read, any checkpoint loaded or any model built, as ``ValueError`` naming ``option`` (the
command-line option) and the spec.

>>> check_measures(["ndcg@10", "dips:tie_weight=0"])
>>> check_rerank("fa_ir:p=0.4")
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch

__all__ = ["check_measures", "check_rerank"]


def _tiny(num_groups: int) -> dict:
    """Two lists of ``2 * num_groups`` items: scores with a tie, grades 0-2, every group twice in each."""
    n = 2 * num_groups
    scores = torch.tensor([[float(n - i) for i in range(n)], [float((3 * i) % n) for i in range(n)]],
                          dtype=torch.float64)
    scores[0, 2] = scores[0, 1]
    relevance = torch.tensor([[float(i % 3) for i in range(n)], [float((i + 1) % 3) for i in range(n)]],
                             dtype=torch.float64)
    groups = torch.tensor([[i % num_groups for i in range(n)], [(i + 1) % num_groups for i in range(n)]])
    return {"scores": scores, "relevance": relevance, "groups": groups}


def _runs(call, num_groups: Optional[int]) -> None:
    """``call(tiny, G)`` succeeds for ``num_groups`` groups, or (unknown) for one of 2, 3, 4, 6 groups (an option
    may name a group id or hold a share per group); else the first error."""
    first: Optional[Exception] = None
    for g in [num_groups] if num_groups else [2, 3, 4, 6]:
        try:
            return call(_tiny(g), g)
        except (ValueError, TypeError) as e:
            first = first or e
    raise first


def check_measures(measures: Union[str, Sequence[str], None], option: str = "--measures",
                   num_groups: Optional[int] = None) -> None:
    """Each request of ``measures`` (``"ndcg@10"``, ``"dips:tie_weight=0"``, a comma-separated string or a list)
    computes on a tiny list (of ``num_groups`` groups when given); else ``ValueError`` ``"<option> '<request>':
    <why>"`` (a misspelt name or option gets a "did you mean").  ``None``: nothing to check."""
    from ..metrics.registry import get_measure, parse_request
    from .files import split_measures
    from .table import evaluate_lists

    if measures is None:
        return
    for request in split_measures(measures):
        try:
            req = parse_request(request)
            spec = get_measure(req.name)
            unknown = [k for k in req.options if k != "label" and not spec.accepts(k)]
            if unknown:
                from .._validation import did_you_mean

                accepts = _names(spec)
                raise ValueError(f"measure {req.name!r} has no option {unknown[0]!r}"
                                 f"{did_you_mean(unknown[0], accepts)}; it accepts {', '.join(accepts)}")
            _runs(lambda tiny, g: evaluate_lists([{k: v[i] for k, v in tiny.items()} for i in range(2)], [request],
                                                 bootstrap=0, num_groups=g), num_groups)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{option} {request!r}: {_first_line(e)}") from None


def check_rerank(spec: Union[str, Sequence[str], None], option: str = "--rerank",
                 num_groups: Optional[int] = None) -> None:
    """The re-ranker spec ``spec`` (or each of a list; ``None``: nothing) re-ranks a tiny list (of ``num_groups``
    groups when given); else ``ValueError`` ``"<option> '<spec>': <why>"`` (an unknown re-ranker, option or measure
    gets a "did you mean")."""
    from ..rerank import get_reranker

    for one in [spec] if isinstance(spec, str) else list(spec or ()):
        try:
            reranker = get_reranker(one)
            _runs(lambda tiny, g: reranker(**tiny, num_groups=g), num_groups)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{option} {one!r}: {_first_line(e)}") from None


def _names(spec) -> List[str]:
    """The options the measure ``spec`` takes (its function's parameters but the data)."""
    import inspect

    try:
        return [p for p in inspect.signature(spec.fn).parameters
                if p not in ("scores", "relevance", "groups", "mask", "validate_args", "return_valid")]
    except (TypeError, ValueError):  # pragma: no cover
        return []


def _first_line(e: BaseException) -> str:
    """The message without the spec's own restatement (``"`spec` 'x': ..."`` -> ``"..."``)."""
    text: Optional[str] = " ".join(str(e).split()) or type(e).__name__
    for head in ("`spec`: ", "`spec` "):
        if text.startswith(head):
            text = text[len(head):]
            if text.startswith("'") and "': " in text:
                text = text.split("': ", 1)[1]
    return text
