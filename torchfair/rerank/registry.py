"""Re-rankers by name: the spec language shared by ``torchfair evaluate --rerank``, the training loop and sweeps.

A spec is ``name`` or ``name:key=value,key=value`` (values are numbers, ``inf``, ``true``/``false``, ``none``,
lists as ``a/b/c``, or strings)::

    fa_ir:p=0.5,alpha=0.1,protected=1,k=100
    detconstsort:distribution=0.5/0.5,k=100
    epsgreedy:epsilon=0.1,seed=0
    interleave:p=0.8,keep=10,protected=1
    targeted:measure=dips,keep=10,tie_weight=0.5
    targeted:measure=dips,keep=10,family=interleave,shares=0.5/0.7/0.9
    targeted:measure=exposure_misallocation,max_utility_loss=0.02,relevance=top:10
    targeted:measure=dips,keep=8,guard=pairwise_gap:0.1+exposure_misallocation:0.1,guard_relevance=top:10
    none

A ``k`` longer than a list is clamped to that list's length (``fa_ir:p=0.5,k=100`` runs on lists of 30 items:
their whole list is the fair prefix); ``fa_ir`` and ``detconstsort`` without ``k`` use each list's own length.

The targeted re-ranker's ``guard`` joins several guards with ``+`` (``,`` separates options): each
``measure:tol`` lets that fairness measure worsen by at most ``tol`` times its value for the input, judged on the
``guard_relevance`` estimate (default ``top:10``; :mod:`torchfair.rerank.targeted`, "Guards").

:func:`get_reranker` checks the spec (an unknown name or option is a ``ValueError`` naming it; a bad guard names
``guard``) and returns a :class:`Reranker`, a callable ``reranker(scores, relevance=None, groups=None, mask=None)
-> Reranking``.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from torch import Tensor

import torch

from .._validation import did_you_mean
from ._common import Reranking, finish_rerank, prepare_rerank, start_order
from .detconstsort import det_const_sort
from .epsilon_greedy import epsilon_greedy
from .fa_ir import fa_ir
from .interleave import interleave
from .targeted import _relevance_how, parse_guards, targeted_rerank

__all__ = ["Reranker", "get_reranker", "parse_spec", "list_rerankers", "RERANKERS", "rerank_lists"]


def _identity(scores: Tensor, groups: Optional[Tensor] = None, *, mask: Optional[Tensor] = None,
              num_groups: Optional[int] = None, validate_args: bool = True) -> Reranking:
    """No re-ranking: the scores' own ranking (ties by list order)."""
    b = prepare_rerank(scores, groups, mask, num_groups, validate_args=validate_args)
    order, _ = start_order(b)
    flags = torch.zeros(order.shape[0], dtype=torch.bool, device=order.device)
    return finish_rerank(b, order, order, flags, ~flags)


#: name -> (function, one-line description, source)
RERANKERS: Dict[str, Tuple[Callable[..., Reranking], str, str]] = {
    "none": (_identity, "no re-ranking (the ranker's own order)", ""),
    "fa_ir": (fa_ir, "FA*IR: every prefix passes the ranked group fairness test for the protected group",
             "Zehlike et al., CIKM 2017, Algorithm 1"),
    "detconstsort": (det_const_sort, "DetConstSort: minimum counts of a target group distribution in every prefix",
                     "Geyik et al., KDD 2019, Algorithm 3"),
    "interleave": (interleave, "keeps the top `keep`, then gives the protected group a share p of every prefix "
                   "below it (each group in the ranker's order)", "torchfair (torchfair.rerank.interleave)"),
    "epsgreedy": (epsilon_greedy, "epsilon-greedy: random swaps down the ranking (group-blind exploration)",
                  "Feng & Shah, AAAI 2022"),
    "targeted": (targeted_rerank, "lowers an exact fairness measure over group boosts, under a utility constraint "
                 "and optional guards on other fairness measures",
                 "torchfair (torchfair.rerank.targeted)"),
}
_ALIASES = {"fa*ir": "fa_ir", "dcs": "detconstsort", "epsilon_greedy": "epsgreedy",
            "epsilongreedy": "epsgreedy", "identity": "none"}
_DATA = {"scores", "groups", "relevance", "mask", "num_groups", "validate_args"}


def _value(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    if "/" in t:
        return [_value(x) for x in t.split("/")]
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)  # inf, 1e-3 ...
    except ValueError:
        return t


def parse_spec(spec: str) -> Tuple[str, Dict[str, Any]]:
    """``"name:key=value,..."`` -> ``(name, options)``; ``ValueError`` naming ``spec`` when malformed or unknown."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"`spec` must be a re-ranker spec such as 'fa_ir:p=0.5'; got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    name = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in RERANKERS:
        raise ValueError(f"`spec`: unknown re-ranker {name!r}{did_you_mean(name, list(RERANKERS) + list(_ALIASES))}; "
                         f"known: {', '.join(RERANKERS)}")
    opts: Dict[str, Any] = {}
    if rest.strip():
        # split on commas that start a new key=value (so 'relevance=top:10' and lists survive)
        parts: List[str] = []
        for piece in rest.split(","):
            if "=" in piece or not parts:
                parts.append(piece)
            else:
                parts[-1] += "," + piece
        for part in parts:
            key, eq, val = part.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"`spec`: option {part!r} of {spec!r} must read key=value")
            opts[key.strip()] = _value(val)
    return name, opts


@dataclass
class Reranker:
    """A configured re-ranker: ``Reranker("fa_ir", {"p": 0.4})(scores, relevance, groups, mask)``."""

    name: str
    options: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.name not in RERANKERS:
            raise ValueError(f"`name`: unknown re-ranker {self.name!r}{did_you_mean(self.name, RERANKERS)}; known: "
                             f"{', '.join(RERANKERS)}")
        fn = RERANKERS[self.name][0]
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
        for k in self.options:
            if k == "relevance" and self.name == "targeted":
                continue  # the relevance estimate of the targeted measure ("zeros", "top:10", ...)
            if k in _DATA or (k not in params and not takes_any):
                allowed = [p for p in params if p not in _DATA and params[p].kind == inspect.Parameter.KEYWORD_ONLY]
                raise ValueError(f"`spec`: {k!r} is not an option of re-ranker {self.name!r}"
                                 f"{did_you_mean(k, allowed)}; it takes {', '.join(allowed)}")
        if self.name == "targeted":  # a bad measure or guard fails here, before any work
            from ..metrics import MEASURES
            from .targeted import MEASURE_ALIASES

            measure = self.options.get("measure", "dips")
            known = sorted([n for n, m in MEASURES.items() if m.kind == "fairness"] + list(MEASURE_ALIASES))
            if measure is not None and measure not in known:  # None: the function's default
                raise ValueError(f"`spec` {self.spec!r}: unknown fairness measure {measure!r}"
                                 f"{did_you_mean(measure, known)}; one of {', '.join(known)}")
            # the options that are not the re-ranker's own go to the measure: each must be one of its options
            own = [p for p in params if p not in _DATA and params[p].kind == inspect.Parameter.KEYWORD_ONLY]
            name = MEASURE_ALIASES[measure][0] if measure in MEASURE_ALIASES else (measure or "dips")
            taken = [p for p in inspect.signature(MEASURES[name].fn).parameters
                     if p not in ("scores", "relevance", "groups", "mask", "num_groups", "validate_args",
                                  "return_valid", "reduction", "ordering", "protected", "reference")]
            for k in self.options:
                if k not in own and k not in taken and k != "relevance":
                    raise ValueError(f"`spec` {self.spec!r}: {k!r} is neither an option of re-ranker 'targeted' "
                                     f"nor of measure {name!r}{did_you_mean(k, own + taken)}; the re-ranker takes "
                                     f"{', '.join(own)}; the measure takes {', '.join(taken) or 'no options'}")
            parse_guards(self.options.get("guard"))
            how = self.options.get("guard_relevance")
            if how is not None and not isinstance(how, Tensor):
                _relevance_how(how, "guard_relevance")

    @property
    def spec(self) -> str:
        def fmt(v):
            if isinstance(v, (list, tuple)):
                return "/".join(fmt(x) for x in v)
            if isinstance(v, float) and math.isinf(v):
                return "inf"
            return str(v)

        def fmt_opt(k, v):
            if k == "guard" and self.name == "targeted" and not isinstance(v, str) and v is not None:
                return "+".join(g.spec for g in parse_guards(v))  # tuples / Guard objects: the '+' form
            return fmt(v)
        return self.name + (":" + ",".join(f"{k}={fmt_opt(k, v)}" for k, v in self.options.items())
                            if self.options else "")

    def __call__(self, scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
                 mask: Optional[Tensor] = None, num_groups: Optional[int] = None) -> Reranking:
        fn = RERANKERS[self.name][0]
        kw = dict(self.options)
        if num_groups is not None:
            kw.setdefault("num_groups", num_groups)
        if self.name in ("none", "epsgreedy"):
            return fn(scores, groups, mask=mask, **kw)
        if groups is None:
            raise ValueError(f"`groups` is required by re-ranker {self.name!r}")
        if self.name == "targeted" and "relevance" not in kw:
            kw["relevance"] = "zeros"  # never the evaluation labels by default: a re-ranker serves unseen lists
        return fn(scores, groups, mask=mask, **kw)

    def __repr__(self) -> str:
        return f"Reranker({self.spec!r})"


def get_reranker(spec: "str | Reranker") -> Reranker:
    """The :class:`Reranker` of a spec (module docstring); options are checked against the function's signature.

    Example::

        >>> get_reranker("fa_ir:p=0.4").spec
        'fa_ir:p=0.4'
    """
    if isinstance(spec, Reranker):
        return spec
    name, opts = parse_spec(spec)
    return Reranker(name, opts)


def rerank_lists(lists: Sequence[Mapping[str, Any]], reranker: "str | Reranker", num_groups: int,
                 batch_size: int = 256) -> List[Dict[str, Any]]:
    """Re-rank ragged lists: each dict (``scores [n]``, ``groups [n]`` integer ids, any other keys) comes back
    with ``scores`` replaced by the re-ranked order's (:attr:`Reranking.scores`: any measure of them sees the
    re-ranking) and every other key unchanged.  ``reranker``: a :class:`Reranker` or a spec; lists are re-ranked
    in padded batches of ``batch_size`` (padding masked; the re-ranker never sees ``relevance``).

    Example::

        >>> lists = [{"scores": torch.tensor([0.9, 0.8, 0.7]), "groups": torch.tensor([0, 0, 1])}]
        >>> rerank_lists(lists, "detconstsort:distribution=0.5/0.5", num_groups=2)[0]["scores"].argsort(descending=True)
        tensor([0, 2, 1])
    """
    r = get_reranker(reranker)
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ValueError(f"`num_groups` must be an int >= 1; got {num_groups!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1; got {batch_size!r}")
    for i, x in enumerate(lists):
        if not isinstance(x, Mapping) or not isinstance(x.get("scores"), Tensor) or x["scores"].dim() != 1 \
                or not isinstance(x.get("groups"), Tensor) or x["groups"].shape != x["scores"].shape:
            raise ValueError(f"`lists`[{i}]: expected a dict with 1-D `scores` and `groups` tensors of one length")
    out: List[Dict[str, Any]] = []
    for a in range(0, len(lists), batch_size):
        chunk = lists[a:a + batch_size]
        n = max(int(x["scores"].shape[0]) for x in chunk)
        s = torch.zeros(len(chunk), n)
        g = torch.zeros(len(chunk), n, dtype=torch.long)
        m = torch.zeros(len(chunk), n, dtype=torch.bool)
        for i, x in enumerate(chunk):
            k = x["scores"].shape[0]
            s[i, :k], g[i, :k], m[i, :k] = x["scores"], x["groups"], True
        new = r(s, None, g, m, num_groups=num_groups).scores
        for i, x in enumerate(chunk):
            out.append({**x, "scores": new[i, :x["scores"].shape[0]].clone()})
    return out


def list_rerankers() -> List[Tuple[str, str, str, List[str]]]:
    """``(name, description, source, options)`` of every re-ranker, for ``--list-rerankers``."""
    out = []
    for name, (fn, desc, src) in RERANKERS.items():
        params = inspect.signature(fn).parameters
        opts = [p for p in params if p not in _DATA and params[p].kind == inspect.Parameter.KEYWORD_ONLY]
        if name == "targeted":
            opts = ["relevance"] + opts + [
                "(the measure's own options: browsing, tie_weight, target, ...)",
                "(guard=MEASURE:TOL joined by '+', e.g. guard=pairwise_gap:0.1+exposure_misallocation:0.1: a fairness "
                "measure may worsen by at most TOL x its value for the input ranking, judged on guard_relevance "
                "(default top:10); pairwise_gap = the inter-group pairwise accuracy gap)"]
        out.append((name, desc, src, opts))
    return out
