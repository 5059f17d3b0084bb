r"""The measure-targeted re-ranker: lower any declared exact fairness measure under a utility constraint.

The algorithm (torchfair's own)
-------------------------------
Candidates are *group boosts* of the ranker's own scores: with ``z`` the scores standardised per list (mean 0,
standard deviation 1 over the real items), the candidate ``(c, beta)`` ranks the items by

.. math:: z_i + \beta \, a_{ic}

(``a_{ic}`` the membership of item ``i`` in group ``c``: 1 / 0 for integer ids, the share for soft membership),
for every group ``c`` and every boost ``beta`` in ``boosts`` (in standard deviations; ``inf``: all of group ``c``
first, each group in score order).  The top ``keep`` positions are fixed, and ties go to the item that ranked
higher.  Each candidate is scored by the *exact* measure through the same transformation the losses use
(:func:`torchfair.losses.measure_loss` with ``ordering=Hard()`` and the measure's declared reducer: DIPS →
``max |M_gh - M_hg|``, exposure misallocation → ``||delta||_1``, pairwise accuracy → the inter-group gap, AWRF →
the distance of the exposure shares from their target...), so nothing here re-states a formula.  Per list, the
identity and the candidates that satisfy the utility constraint compete; the one with the lowest objective wins
(a strictly lower value is needed to move away from a smaller boost, so among equal objectives the least change is
kept).

What it guarantees
------------------
* the top ``keep`` items stay where they were;
* the utility constraint holds: the *estimated* relative utility loss is at most ``max_utility_loss``, where the
  estimate is the DCG@``utility_k`` of the ranking with the ranker's own top-one probabilities ``softmax(scores)``
  as gains (nothing about the true relevance is used);
* the objective never increases (the identity is a candidate), and the output is the exact argmin over the
  candidate family (tested against a brute-force enumeration of the family);
* with integer groups, items of a group keep their relative order (a boost moves a whole group);
* a list already at objective 0, or with fewer than two groups, is returned unchanged.

The share family (``family="interleave"``)
-----------------------------------------
With integer groups, ``family="interleave"`` replaces the boosts by the share interleavings of
:func:`torchfair.rerank.interleave`: for every group ``c`` and every share ``p`` in ``shares``, the candidate keeps
the top ``keep`` and gives group ``c`` the share ``p`` of every prefix below it (each group in the ranker's order).
The family then holds the plain interleaving re-ranker at each of its shares, and the per-list choice (the lowest
objective under the utility bound and the guards) is a continuous strength: a share near the group's own share of
the list changes little, ``p = 1`` is "all of group ``c`` right below the top".  Cost: ``1 + G len(shares)``
evaluations.

It does *not* guarantee the global optimum over all permutations (tests compare with exhaustive search on small
lists, where it is never worse than the input).

Guards: the other fairness measures
-----------------------------------
Lowering one measure can worsen another (on ML-100K popularity groups ``measure=dips,keep=8`` removes 45 % of the
DIPS gap but moves unrated tail items above relevant head items: the inter-group pairwise accuracy gap goes from
0.31 to -0.74).  ``guard`` constrains the other declared fairness measures: a guard ``(measure, tol)`` admits a
candidate on a list only when the guard measure's per-list objective (its declared loss reducer, or the guard's
own, through the same transformation as the objective, ``measure_loss(..., ordering=Hard())``) is at most

.. math:: v_{\text{before}} + \text{tol} \, |v_{\text{before}}| \quad (+\,10^{-12}\max(1, |\cdot|) \text{ float slack}),

``v_before`` the list's value for the input ranking.  The output is then the exact argmin of the objective over
the candidates that satisfy the utility bound *and* every guard (the identity always does, so every list has one).
Specs: ``"pairwise_accuracy:0.1"``, several joined by ``+`` (``"pairwise_gap:0.1+exposure_misallocation:0.1"``),
a sequence of such strings, ``(measure, tol)`` / ``(measure, tol, {"reducer": ..., option: value})`` tuples or
:class:`Guard`; ``pairwise_gap`` is ``pairwise_accuracy`` with its declared ``"inter"`` reducer (the
inter-group accuracy gap ``|A_rp - A_pr|``).  A guard measure takes the targeted measure's ``browsing`` when it has
that option and the guard sets none (the evaluation's shared user model); its other options are its own.

* Guard relevance: guard measures that need relevance see an *estimate*, ``guard_relevance`` (same forms as
  ``relevance``, through :func:`estimate_relevance`), default ``"top:10"``: the ranker's own top 10 are the relevant
  items.  Not ``"zeros"``, the objective's default: with every item equally relevant pairwise accuracy has no
  pair with ``r_i > r_j``, is undefined on every list, and the guard would never bind.  Under ``"top:10"`` the
  input's estimated cross-group accuracies are all 1 (its gap 0), so a pairwise-gap guard admits only candidates
  that keep them equal -- in practice none that moves an item from below the ranker's top 10 above a top-10 item
  of the other group (that lowers one of them only).  The guard is a guarantee on the estimate, not on the test
  labels; pass the labels as ``guard_relevance`` only for an oracle study.
* Undefined guards: a list on which the guard measure is undefined for the input ranking (e.g. pairwise accuracy
  when the estimated relevant items are all of one group; any measure on a list with one group) is not
  constrained by that guard.  Where it is defined for the input, a candidate on which it is undefined is not
  admissible.
* :attr:`Reranking.guard` holds each guard's per-list value before and after (NaN where undefined);
  :attr:`Reranking.met` is recomputed from the chosen ranking's values: the utility bound and every guard hold.

Cost: ``1 + G len(boosts)`` exact evaluations of the measure, 13 for two groups with the default boosts.  Every
candidate is scored in the input ranking's frame, so a candidate is just its keys and its only sort is the one
inside the measure (Hard()'s "first" rule breaks ties by the input ranking); each evaluation is that sort and the
measure's ``O(B N G log N)`` sweep, memory ``O(B N G)``.  On 943 x 1 682 lists (the ML-100K test batch, CPU) that
is about 50x a plain sort with the default boosts and about 12x with ``boosts=inf`` (3 evaluations: "group c
first" for each group; ``make bench``, section ``rerank``).  With ``K`` guards, add one evaluation of each guard
measure for the input and, per candidate, one per guard: at most ``(1 + K)(1 + G len(boosts))`` evaluations in
all (the guards of a candidate that improves no list's objective are skipped), each guard measure costing what
it costs as an objective.  At 943 x 1 682 (random scores, 1 CPU thread, measured once, not ``make bench``):
2.6 s without a guard, 4.7 s with ``pairwise_gap:0.1``, 8 s with ``pairwise_gap:0.1+exposure_misallocation:0.1``
(there every candidate improves some list, so no guard is skipped).

Relevance: the fairness measures that need it (DIPS, misallocation, pairwise accuracy) are evaluated on an
*estimate*: at serving time the true relevance is unknown.  ``relevance="zeros"`` (default) treats every item as
equally relevant (DIPS then counts every pair as tied, with the tie weight: exposure parity between groups);
``"top:m"`` marks the ranker's top ``m`` as relevant; ``"scores"`` uses the scores themselves (then pairwise
measures see no discordant pair: the ranker is fair by its own estimate); or pass a tensor.  Pass the test labels
only for an oracle study.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._validation import Batch, check_group_id, check_int, check_number
from ..metrics.common import precise_dtype
from ..metrics.declarations import get_declaration
from ..orderings.hard import Hard
from ._common import Reranking, finish_rerank, groups_present, prepare_rerank, start_order
from .interleave import interleave_slots

__all__ = ["targeted_rerank", "estimate_relevance", "Guard", "parse_guards", "DEFAULT_BOOSTS", "DEFAULT_SHARES", "MEASURE_ALIASES",
           "DEFAULT_GUARD_RELEVANCE"]

#: boosts (in per-list score standard deviations) the candidates use by default
DEFAULT_BOOSTS = (0.25, 0.5, 1.0, 2.0, 4.0, math.inf)

RelevanceLike = Union[Tensor, str, None]

#: names that stand for a declared measure with a given reducer (in ``guard`` and ``measure``)
MEASURE_ALIASES: Dict[str, Tuple[str, str]] = {"pairwise_gap": ("pairwise_accuracy", "inter")}

#: shares of the interleaving family (``family="interleave"``) by default
DEFAULT_SHARES = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0)

#: the relevance estimate guard measures see by default (module docstring: why not ``"zeros"``)
DEFAULT_GUARD_RELEVANCE = "top:10"


def _relevance_how(how: Any, name: str = "relevance") -> Tuple[str, int]:
    """``(kind, m)`` of a relevance estimate string (``"zeros"``, ``"scores"``, ``"top:m"``); ``ValueError`` naming
    ``name`` otherwise."""
    msg = f"`{name}` must be a tensor or one of 'zeros', 'scores', 'top:m'; got {how!r}"
    if not isinstance(how, str):
        raise ValueError(msg)
    if how in ("zeros", "scores"):
        return how, 0
    if how.startswith("top:"):
        try:
            m = int(how[4:])
        except ValueError:
            m = 0
        if m < 1:
            raise ValueError(f"`{name}` 'top:m' needs an int m >= 1; got {how!r}")
        return "top", m
    raise ValueError(msg)


@dataclass(frozen=True)
class Guard:
    """A constraint of :func:`targeted_rerank` on another fairness measure (module docstring, "Guards"): a candidate
    is admissible on a list only when ``measure``'s per-list objective (``reducer``, default its declared loss
    reducer) is at most ``before + tol * |before|``.  ``options``: the measure's own options (``browsing``,
    ``tie_weight``, ...).  Build one with :func:`parse_guards` (checked; aliases resolved).

    Example::

        >>> parse_guards("pairwise_gap:0.1")[0]
        Guard(measure='pairwise_accuracy', tol=0.1, reducer='inter', options={})
    """

    measure: str
    tol: float
    reducer: Optional[str] = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        """``"measure:tol"``; a reducer other than the declared one, or options, are shown in brackets (the spec
        language of :func:`parse_guards` has no syntax for them: pass a tuple or a :class:`Guard`)."""
        extra = []
        if self.reducer is not None and self.reducer != get_declaration(self.measure).loss:
            extra.append(f"reducer={self.reducer}")
        extra += [f"{k}={v}" for k, v in self.options.items()]
        return f"{self.measure}{'[' + ';'.join(extra) + ']' if extra else ''}:{self.tol!r}"


GuardLike = Union[str, Guard, Tuple[Any, ...], Sequence[Union[str, Guard, Tuple[Any, ...]]], None]


def _guard_error(item: Any, why: str) -> ValueError:
    return ValueError(f"`guard` {item!r}: {why} (a guard is 'measure:tol', several joined by '+', e.g. "
                      f"'pairwise_gap:0.1+exposure_misallocation:0.1'; tol a number >= 0)")


def _make_guard(item: Any, name: Any, tol: Any, reducer: Any = None, options: Any = None) -> Guard:
    from ..losses.transform import REDUCERS  # lazily, as the objective's transformation

    if not isinstance(name, str) or not name.strip():
        raise _guard_error(item, "the measure must be a measure name")
    name = name.strip()
    if name in MEASURE_ALIASES:
        name, alias_reducer = MEASURE_ALIASES[name]
        reducer = alias_reducer if reducer is None else reducer
    try:
        decl = get_declaration(name)
    except ValueError:
        from ..metrics.declarations import MEASURES
        known = sorted([n for n, m in MEASURES.items() if m.kind == "fairness"] + list(MEASURE_ALIASES))
        raise _guard_error(item, f"unknown measure {name!r}; fairness measures: {', '.join(known)}") from None
    if decl.kind != "fairness":
        raise _guard_error(item, f"{name!r} is a {decl.kind} measure, a guard must be a fairness measure")
    if isinstance(tol, str):
        try:
            tol = float(tol.strip())
        except ValueError:
            raise _guard_error(item, f"the tolerance must be a number; got {tol!r}") from None
    if isinstance(tol, Tensor) and tol.numel() == 1:
        tol = tol.item()
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
        raise _guard_error(item, f"the tolerance must be a finite number >= 0; got {tol!r}")
    if reducer is None and decl.loss is None:
        raise _guard_error(item, f"measure {name!r} declares no loss reducer; give one: (measure, tol, "
                                 f"{{'reducer': ...}}) with one of {', '.join(REDUCERS)}")
    if reducer is not None:
        if not isinstance(reducer, str) or reducer not in REDUCERS:
            raise _guard_error(item, f"unknown reducer {reducer!r}; one of {', '.join(REDUCERS)}")
        if decl.output != "record" and REDUCERS[reducer][0] != decl.output:
            raise _guard_error(item, f"reducer {reducer!r} reduces {REDUCERS[reducer][0]} values but {name!r} "
                                     f"gives {decl.output} values")
    options = {} if options is None else options
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise _guard_error(item, f"the options must be a dict of the measure's options; got {options!r}")
    params = inspect.signature(decl.fn).parameters
    bad = [k for k in options if k not in params or k in ("scores", "relevance", "groups", "mask", "num_groups",
                                                            "validate_args", "return_valid", "reduction",
                                                            "ordering")]
    if bad:
        raise _guard_error(item, f"{bad[0]!r} is not an option of measure {name!r}")
    for gid in ("protected", "reference"):  # the guard's own group ids (default: those of the re-rank)
        if gid in options:
            try:
                check_group_id(options[gid], gid)
            except ValueError as e:
                raise _guard_error(item, str(e)) from None
    return Guard(decl.name, float(tol), reducer, dict(options))


def _one_guard(item: Any) -> List[Guard]:
    if isinstance(item, Guard):
        return [_make_guard(item, item.measure, item.tol, item.reducer, item.options)]
    if isinstance(item, str):
        out = []
        for piece in item.split("+"):
            name, sep, tol = piece.strip().partition(":")
            if not sep:
                raise _guard_error(item, f"{piece.strip()!r} must read measure:tol")
            out.append(_make_guard(item, name, tol))
        return out
    if isinstance(item, (tuple, list)) and len(item) in (2, 3) and isinstance(item[0], str):
        opts = dict(item[2]) if len(item) == 3 and isinstance(item[2], Mapping) else item[2] if len(item) == 3 \
            else {}
        reducer = opts.pop("reducer", None) if isinstance(opts, dict) else None
        return [_make_guard(item, item[0], item[1], reducer, opts)]
    raise _guard_error(item, "not a guard")


def parse_guards(guard: GuardLike) -> Tuple[Guard, ...]:
    """The guards of a ``guard`` argument (module docstring, "Guards"), checked: ``None`` / ``""`` / ``"none"``: none;
    ``"measure:tol"`` or several joined by ``+``; a :class:`Guard`; a tuple ``(measure, tol)`` or
    ``(measure, tol, {"reducer": ..., option: value})``; or a sequence of any of these.  ``pairwise_gap`` stands for
    ``pairwise_accuracy`` with the ``"inter"`` reducer.  ``ValueError`` naming ``guard``: an unknown or non-fairness
    measure, a tolerance that is not a finite number >= 0, an unknown reducer or option.

    Example::

        >>> [g.spec for g in parse_guards("pairwise_gap:0.1+exposure_misallocation:0.2")]
        ['pairwise_accuracy:0.1', 'exposure_misallocation:0.2']
    """
    if guard is None or (isinstance(guard, str) and guard.strip().lower() in ("", "none")):
        return ()
    if isinstance(guard, (str, Guard)):
        return tuple(_one_guard(guard))
    if isinstance(guard, (tuple, list)):
        if len(guard) in (2, 3) and isinstance(guard[0], str) and not isinstance(guard[1], (str, Guard, tuple, list)):
            return tuple(_one_guard(guard))  # one (measure, tol[, options]) tuple
        out: List[Guard] = []
        for item in guard:
            out += _one_guard(item)
        return tuple(out)
    raise _guard_error(guard, "must be a string, a (measure, tol) tuple, a Guard, or a sequence of them")


def estimate_relevance(scores: Tensor, how: str = "zeros", *, mask: Optional[Tensor] = None) -> Tensor:
    """A relevance estimate ``[B, N]`` (``[N]``) from the scores alone, for re-rankers and serving-time measures:
    ``"zeros"`` every item equally (ir)relevant; ``"scores"`` the scores shifted to a minimum of 0 over the real
    items; ``"top:m"`` 1 for the list's top ``m`` items by score (ties by list order), 0 otherwise.  Padded items 0.

    Example::

        >>> estimate_relevance(torch.tensor([0.3, 2.0, 1.0]), "top:2")
        tensor([0., 1., 1.])
    """
    b = prepare_rerank(scores, None, mask, None)
    kind, m = _relevance_how(how)
    if kind == "zeros":
        r = torch.zeros_like(b.scores)
    elif kind == "scores":
        lo = torch.where(b.mask, b.scores, torch.full_like(b.scores, float("inf"))).amin(-1, keepdim=True)
        r = torch.where(b.mask, b.scores - lo, torch.zeros_like(b.scores))
    else:
        _, pos = start_order(b)
        r = ((pos < m) & b.mask).to(b.scores.dtype)
    return b.out(r)


def _estimated_utility(gains_sorted: Tensor, perm: Tensor, k: int) -> Tensor:
    """DCG@k of a ranking given as start positions ``perm`` with gains in start order ``[B, N]``."""
    kk = min(k, perm.shape[-1])
    g = gains_sorted.gather(-1, perm[:, :kk])
    disc = 1.0 / torch.log2(torch.arange(kk, device=g.device, dtype=g.dtype) + 2.0)
    return (g * disc).sum(-1)


def _number_set(values: Any, name: str, ok, what: str) -> List[float]:
    """``values`` (one number, as ``boosts=inf`` in a spec, or a sequence) as a sorted list of distinct floats, each
    passing ``ok``; ``ValueError`` naming ``name`` (a string, a bool, NaN or an empty sequence included)."""
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = (values,)
    try:
        if isinstance(values, (str, bytes, Tensor)) or any(isinstance(x, bool) for x in values):
            raise TypeError
        out = sorted(set(float(x) for x in values))
    except (TypeError, ValueError):
        out = []
    if not out or any(not ok(x) for x in out):
        raise ValueError(f"`{name}` must be one of or a non-empty sequence of {what}; got {values!r}")
    return out


def targeted_rerank(scores: Tensor, groups: Tensor, relevance: RelevanceLike = "zeros", *, measure: str = "dips",
                    reducer: Optional[str] = None, keep: int = 0, max_utility_loss: Optional[float] = None,
                    utility_k: int = 10, boosts: Sequence[float] = DEFAULT_BOOSTS, mask: Optional[Tensor] = None,
                    num_groups: Optional[int] = None, protected: Optional[int] = None,
                    reference: Optional[int] = None, guard: GuardLike = None,
                    guard_relevance: RelevanceLike = DEFAULT_GUARD_RELEVANCE, family: str = "boosts",
                    shares: Sequence[float] = DEFAULT_SHARES, validate_args: bool = True,
                    **measure_options: Any) -> Reranking:
    r"""Re-rank each list to lower the exact fairness ``measure`` under a utility constraint (module docstring:
    the algorithm, what it guarantees, its cost).

    ``measure``: a declared fairness measure with a loss reducer (``"dips"``, ``"exposure_misallocation"``,
    ``"pairwise_accuracy"``, ``"awrf"`` for exposure shares against a target, ``"ree"``, ``"igi"``, ...);
    ``reducer``: how its per-list value becomes the objective (default: its declared loss reducer; for ``"awrf"``
    with ``protected`` or ``distance="kl"``, which give one distance per list, ``"abs"``);
    ``measure_options``: the measure's own options (``browsing``, ``tie_weight``, ``target``...).  A measure of
    the score values (no ordering parameter: ``"top1_exposure_gap"``) is refused naming ``measure``: a re-ranker
    changes only the order.  ``protected`` / ``reference``: group ids for the measures and reducers that take
    them; an integer id absent from the batch (``>= G``) makes every list undefined, as in
    :func:`torchfair.losses.measure_loss`: the lists come back unchanged, objective 0 (soft membership declares
    ``G`` by its shape: an id ``>= G`` is a ``ValueError``).
    Constraints: ``keep`` (the top ``keep`` positions fixed; ``0 <= keep <= N``) and ``max_utility_loss`` (the
    largest estimated relative loss of DCG@``utility_k`` with gains ``softmax(scores)``; ``None``: no bound).
    ``relevance``: what the measure takes as relevance (``"zeros"``, ``"scores"``, ``"top:m"`` or a tensor; see the
    module docstring).  ``boosts``: positive boosts in score standard deviations (``inf`` allowed; one number for
    one boost: ``boosts=inf`` costs ``1 + G`` evaluations, the cheapest member of the family).
    ``family``: ``"boosts"`` (default, the group boosts) or ``"interleave"`` (integer groups only: the share
    interleavings of :func:`torchfair.rerank.interleave` below the top ``keep``, one per group and share in
    ``shares``, each in ``[0, 1]``; module docstring).  ``keep`` is clamped to each list's length.
    ``guard``: constraints on other fairness measures, e.g. ``"pairwise_gap:0.1"`` (the inter-group pairwise
    accuracy gap may grow by at most 10 % of its value for the input), several joined by ``+``, tuples
    ``(measure, tol[, {"reducer": ..., option: value}])`` or :class:`Guard` (:func:`parse_guards`); a candidate
    is admissible on a list only when every guard holds there.  ``guard_relevance``: the relevance the guard
    measures see (default ``"top:10"``: the ranker's own top 10; same forms as ``relevance``).  Module docstring,
    "Guards": the rule, undefined lists, the cost (one more evaluation per guard and candidate).

    Returns :class:`~torchfair.rerank.Reranking` with ``objective`` ``[2, B]``: the objective before and after;
    with guards, ``guard`` ``[2, B, K]``: each guard's value before and after (NaN where undefined).

    Example (a list whose group 1 sits at the bottom; DIPS on equally relevant items asks for exposure parity)::

        >>> r = targeted_rerank(torch.tensor([6., 5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1, 1]),
        ...                     keep=1, browsing="uniform")
        >>> r.ranking.tolist(), [round(x, 4) for x in r.objective.tolist()]
        ([0, 3, 4, 1, 5, 2], [0.5, 0.0556])
    """
    from ..losses.transform import per_list_loss, reduce_loss  # the one transformation (measure -> per list)

    if reducer is None and isinstance(measure, str) and measure in MEASURE_ALIASES:
        measure, reducer = MEASURE_ALIASES[measure]
    decl = get_declaration(measure)
    if decl.kind != "fairness":
        raise ValueError(f"`measure` must be a fairness measure; {measure!r} is a {decl.kind} measure")
    if "ordering" not in inspect.signature(decl.fn).parameters:
        raise ValueError(f"`measure` {measure!r} depends on the score values, not on the ranking: a re-ranker "
                         f"changes only the order, so it cannot target it")
    if reducer is None and decl.name == "awrf" and (protected is not None or
                                                    measure_options.get("distance") == "kl"):
        reducer = "abs"  # one distance per list with these options (exposure.awrf): the list-valued reducer
    if reducer is None and decl.loss is None:
        raise ValueError(f"`reducer` must be given: measure {measure!r} declares no loss reducer")
    if not isinstance(groups, Tensor):
        raise ValueError(f"`groups` must be a tensor of group ids [B, N] or soft membership [B, N, G] for "
                         f"targeted_rerank; got {type(groups).__name__}")
    if isinstance(relevance, Tensor):
        rel = relevance
    else:
        rel = estimate_relevance(scores, "zeros" if relevance is None else relevance, mask=mask)
    b = prepare_rerank(scores, groups, mask, num_groups, relevance=rel, validate_args=validate_args)
    B, N = b.mask.shape
    keep = check_int(keep, "keep", low=0)  # clamped to each list's length: a fixed top longer than a list fixes it
    if family not in ("boosts", "interleave"):
        raise ValueError(f"`family` must be 'boosts' or 'interleave'; got {family!r}")
    if family == "interleave":
        if groups.is_floating_point():
            raise ValueError("`family`='interleave' needs integer group ids [B, N] (soft membership assigns no item "
                             "to one group)")
        sl = _number_set(shares, "shares", lambda x: 0.0 <= x <= 1.0, "shares in [0, 1]")
    utility_k = check_int(utility_k, "utility_k", low=1)
    if max_utility_loss is not None:
        max_utility_loss = check_number(max_utility_loss, "max_utility_loss", low=0.0)
    bl = _number_set(boosts, "boosts", lambda x: x > 0, "positive numbers (inf allowed)")
    guards = parse_guards(guard)
    G = b.num_groups
    for name, gid in (("protected", protected), ("reference", reference)):
        if gid is not None:  # soft membership declares G by its shape: an id past it is an error there
            check_group_id(gid, name, G if groups.is_floating_point() else num_groups)
    # the measure's own default group ids count too (rkl's protected = 1): absent from the batch, the measure is
    # undefined on every list, as with the same id given explicitly
    defaults = inspect.signature(decl.fn).parameters
    implied = [gid if gid is not None else getattr(defaults.get(name), "default", None)
               for name, gid in (("protected", protected), ("reference", reference))]
    if any(isinstance(gid, int) and not isinstance(gid, bool) and gid >= G for gid in implied):
        # a group id absent from the batch: the measure is undefined on every list (measure_loss), so every list
        # comes back unchanged, with objective 0 (an undefined list's value) and NaN guards
        order, _ = start_order(b)
        zero = torch.zeros(2, B, dtype=precise_dtype(b.scores.device, torch.float64), device=b.scores.device)
        guard_nan = None if not guards else torch.full((2, B, len(guards)), float("nan"), dtype=zero.dtype,
                                                       device=zero.device)
        return finish_rerank(b, order, order, groups_present(b) < 2, torch.ones(B, dtype=torch.bool,
                                                                                 device=order.device), zero, guard_nan)
    int_groups = not groups.is_floating_point()
    # the objectives are compared with a margin of 1e-12: evaluate them in float64 (where the device has it), so
    # that candidates with mathematically equal objectives tie (float32 rounding would pick among them by the
    # items' order in the batch)
    work = precise_dtype(b.scores.device, torch.float64)

    order, _ = start_order(b)
    dev = b.scores.device
    ar = torch.arange(N, device=dev)
    n = b.mask.sum(-1)
    real_sorted = ar[None, :] < n[:, None]
    # every candidate is scored in the *start frame* (items in the input ranking's order, padding last): a
    # candidate is then its sort keys, and Hard()'s "first" tie rule (earlier in the list ranks higher) breaks
    # ties by the input ranking -- one sort per candidate (inside the measure) instead of two
    frames: Dict[bool, Tuple[Tensor, Optional[int]]] = {}

    def groups_frame(d) -> Tuple[Tensor, Optional[int]]:
        """The groups in the start frame as measure ``d`` takes them, and the ``num_groups`` to pass: the checked
        membership [B, N, G] stands for integer ids too (one-hot rows: the same values), so the candidates skip
        re-coding the groups; the prefix family takes integer ids only."""
        soft = not d.fn.__module__.endswith(".prefix") or not int_groups
        if soft not in frames:
            if soft:
                gw = b.membership.to(work)
                frames[soft] = (gw.gather(1, order[..., None].expand(B, N, gw.shape[-1])), None)
            else:
                gi = groups.unsqueeze(0) if b.squeeze else groups
                frames[soft] = (gi.gather(-1, order), G)
        return frames[soft]

    rel_s = None if b.relevance is None else b.relevance.to(work).gather(-1, order)

    def evaluate(d, red: Optional[str], rel: Optional[Tensor], opts: Mapping[str, Any], keys: Tensor
                 ) -> Tuple[Tensor, Tensor]:
        """``(value [B], defined [B])`` of measure ``d`` reduced by ``red`` on the ranking of ``keys`` (start frame):
        ``measure_loss(..., ordering=Hard(), reduction="none")`` and where it is defined."""
        gs, ng = groups_frame(d)
        opts = dict(opts)
        ids = {"protected": opts.pop("protected", protected), "reference": opts.pop("reference", reference)}
        per, ok = per_list_loss(d, keys.to(work), rel, gs, reducer=red, ordering=Hard(), mask=real_sorted,
                                num_groups=ng, validate_args=False, **ids, **opts)
        return reduce_loss(per.detach(), ok, "none"), ok

    def objective(keys: Tensor) -> Tensor:
        return evaluate(decl, reducer, rel_s, measure_options, keys)[0]

    # the guards: their relevance estimate (never the test labels by default), options, and bounds per list
    gspecs: List[Tuple[Any, Optional[str], Dict[str, Any]]] = []
    grel_s: Optional[Tensor] = None
    if guards:
        if isinstance(guard_relevance, Tensor):
            try:
                grel = prepare_rerank(scores, groups, mask, num_groups, relevance=guard_relevance,
                                      validate_args=validate_args).relevance
            except ValueError as e:
                raise ValueError(f"`guard_relevance`: {e}") from None
        else:
            how = DEFAULT_GUARD_RELEVANCE if guard_relevance is None else guard_relevance
            _relevance_how(how, "guard_relevance")
            grel = estimate_relevance(scores, how, mask=mask)
            grel = grel.unsqueeze(0) if b.squeeze else grel
        grel_s = grel.to(work).gather(-1, order)
        for gd in guards:
            d = get_declaration(gd.measure)
            opts = dict(gd.options)
            if "browsing" in measure_options and "browsing" not in opts and \
                    "browsing" in inspect.signature(d.fn).parameters:
                opts["browsing"] = measure_options["browsing"]  # the objective's user model
            red = gd.reducer
            if red is None and d.name == "awrf" and (opts.get("protected", protected) is not None or
                                                     opts.get("distance") == "kl"):
                red = "abs"  # one distance per list with these options, as for the objective
            gspecs.append((d, red, opts))

    def guard_values(keys: Tensor) -> Tuple[Tensor, Tensor]:
        """``(values [B, K], defined [B, K])`` of every guard on the ranking of ``keys``."""
        vals = [evaluate(d, red, grel_s, opts, keys) for d, red, opts in gspecs]
        return torch.stack([v for v, _ in vals], -1), torch.stack([ok for _, ok in vals], -1)

    s_sorted = b.scores.gather(-1, order).to(torch.float64)
    cnt = n.clamp(min=1).to(torch.float64)
    mean = torch.where(real_sorted, s_sorted, torch.zeros_like(s_sorted)).sum(-1, keepdim=True) / cnt[:, None]
    var = torch.where(real_sorted, (s_sorted - mean) ** 2, torch.zeros_like(s_sorted)).sum(-1, keepdim=True) / \
        cnt[:, None]
    std = var.sqrt()
    std = torch.where(std > 0, std, torch.ones_like(std))
    z = torch.where(real_sorted, (s_sorted - mean) / std, torch.zeros_like(s_sorted))
    memb_sorted = b.membership.to(torch.float64).gather(1, order[..., None].expand(B, N, G))
    fixed = ar[None, :] < keep
    zmax = z.abs().amax(-1, keepdim=True)
    # estimated utility: DCG@utility_k with the ranker's top-one probabilities as gains
    logits = torch.where(real_sorted, s_sorted, torch.full_like(s_sorted, float("-inf")))
    gains = torch.where(real_sorted, torch.softmax(logits, -1), torch.zeros_like(s_sorted))
    ident = ar.expand(B, N)
    u0 = _estimated_utility(gains, ident, utility_k)
    # the identity's keys: strictly decreasing in the start frame (padding is last and masked)
    ident_keys = (N - ar).to(torch.float64).expand(B, N)
    best_keys = ident_keys
    before = objective(ident_keys)
    best = before.clone()
    one_group = groups_present(b) < 2
    if gspecs:
        try:
            g_before, g_defined = guard_values(ident_keys)
        except ValueError as e:  # a reducer or an option the guard measure does not take
            raise ValueError(f"`guard` {', '.join(gd.spec for gd in guards)!r}: {e}") from None
        # at most before + tol |before| (+ float slack); undefined for the input: unconstrained
        tol = torch.tensor([gd.tol for gd in guards], dtype=g_before.dtype, device=dev)
        g_limit = g_before + tol * g_before.abs()
        g_limit = g_limit + 1e-12 * g_limit.abs().clamp(min=1.0)
        g_best, g_best_defined = g_before.clone(), g_defined.clone()

        def admissible(vals: Tensor, defined: Tensor) -> Tensor:
            return (~g_defined | (defined & (vals <= g_limit))).all(-1)
    keep_vec = torch.clamp(n, max=keep)

    def candidates():
        if family == "interleave":  # keys = -(merged slot): distinct, the fixed top first, the padding last
            for p in sl:
                for c in range(G):
                    yield -interleave_slots(memb_sorted[..., c] > 0.5, real_sorted, keep_vec, p)
            return
        for beta in bl:
            for c in range(G):
                mc = memb_sorted[..., c]
                key = z + (mc * (4 * zmax + 4) if math.isinf(beta) else beta * mc)
                lo, hi = key.amin(-1, keepdim=True), key.amax(-1, keepdim=True)
                # finite keys (a measure may compare scores): the fixed top and the padding tie among themselves,
                # and "first" breaks those ties by the input ranking
                yield torch.where(fixed, hi + 1.0, torch.where(real_sorted, key, lo - 1.0))

    for key in candidates():
        ok = ~one_group
        if max_utility_loss is not None:
            top = torch.sort(key, dim=-1, descending=True, stable=True).indices
            loss = 1.0 - _estimated_utility(gains, top, utility_k) / u0.clamp(min=1e-300)
            ok = ok & (loss <= max_utility_loss + 1e-12)
        obj = objective(key)
        better = ok & (obj < best - 1e-12 * best.abs().clamp(min=1.0))
        if gspecs and bool(better.any()):  # a candidate that improves no list needs no guard evaluation
            vals, defined = guard_values(key)
            better = better & admissible(vals, defined)
            g_best = torch.where(better[:, None], vals, g_best)
            g_best_defined = torch.where(better[:, None], defined, g_best_defined)
        best = torch.where(better, obj, best)
        best_keys = torch.where(better[:, None], key, best_keys)
    best_perm = torch.sort(best_keys, dim=-1, descending=True, stable=True).indices
    ranking = order.gather(-1, best_perm)
    # `met`: the constraints, re-checked on the chosen ranking's own values (the identity meets them all, so every
    # list has an admissible candidate; this is the check, not an assumption)
    met = torch.ones(B, dtype=torch.bool, device=dev)
    if max_utility_loss is not None:
        loss = 1.0 - _estimated_utility(gains, best_perm, utility_k) / u0.clamp(min=1e-300)
        met = met & (one_group | (loss <= max_utility_loss + 1e-12))
    guard_out = None
    if gspecs:
        met = met & admissible(g_best, g_best_defined)
        nan = torch.full_like(g_before, float("nan"))
        guard_out = torch.stack([torch.where(g_defined, g_before, nan), torch.where(g_best_defined, g_best, nan)])
    return finish_rerank(b, ranking, order, one_group, met, torch.stack([before, best]), guard_out)
