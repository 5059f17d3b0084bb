"""Every public measure of torchfair.metrics as a uniform case for the robustness property tests.

Each :class:`Case` calls one public function on a batch ``(scores, relevance, groups, mask)`` with an ordering and
returns the pieces to check: ``(name, value, valid, low, high)`` with the documented range of the valid entries
(``valid=None``: every entry is defined), and the scalar to differentiate.  The cases of the declared measures
(:data:`torchfair.metrics.MEASURES`) are built by :func:`declared` from their declarations (data, range under the
options, soft membership, groups needed); the other functions' cases are written out.  :func:`make_batch` builds the
degenerate and extreme inputs real batches hold (all-tied scores, one group, one item, fully padded lists,
grades up to 1000, relevance 1e-30, soft membership summing to less than 1, half precision).
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from tester import declared_range, pieces
from torchfair import metrics as M
from torchfair.metrics import MEASURES
from torchfair.orderings import Hard, PlackettLuce, SoftRank

INF = math.inf

Piece = Tuple[str, Tensor, Optional[Tensor], float, float]


@dataclass
class Case:
    name: str
    fn: Callable[..., List[Piece]]
    needs_relevance: bool = False
    needs_groups: bool = False
    soft_groups: bool = True  # accepts [B, N, G] soft membership
    min_groups: int = 1  # needs at least this many groups in `num_groups`
    differentiable: bool = True  # a soft ordering gives gradients
    needs_known: bool = False  # raises ValueError unless some item has a known group (documented)
    extra: dict = field(default_factory=dict)


def _vv(out, name, lo, hi):
    value, valid = out
    return [(name, value, valid, lo, hi)]


def _c(name, fn, lo, hi, **kw):
    """A measure returning ``(value, valid)`` with ``return_valid=True``."""
    def call(s, r, g, mask, ordering, G):
        return _vv(fn(s, r, g, mask, ordering, G), name, lo, hi)
    return Case(name, call, **kw)


def declared(name: str, groups: bool = False, rel: Optional[Callable[[Tensor], Tensor]] = None,
             min_groups: Optional[int] = None, **opts) -> Case:
    """The declared measure ``name`` called with ``opts``: the tensors it needs (``groups=True`` also passes its
    optional groups; ``rel`` transforms the relevance), every piece of its result with a declared range
    (:func:`tester.pieces`, :func:`tester.declared_range`), soft membership and the groups its default group ids
    need from the declaration (``min_groups`` overrides it where an option leaves the ids unused)."""
    m = MEASURES[name]
    params = inspect.signature(m.fn).parameters
    takes = [d for d in ("relevance", "groups") if d in m.needs or (d == "groups" and groups)]
    label = name + "".join(f".{k}={v}" for k, v in opts.items())

    def call(s, r, g, mask, o, G):
        r = rel(r) if rel is not None else r
        kw = {d: {"relevance": r, "groups": g}[d] for d in takes}
        kw.update({"num_groups": G} if "groups" in kw else {}, mask=mask, **opts)
        kw.update({"ordering": o} if "ordering" in params else {})
        res = m.fn(s, **kw, **({"return_valid": True} if "return_valid" in params else {}))
        top = float(r[mask].max()) if mask.any() else 0.0
        return [(f"{label}.{p}", v, ok, *declared_range(m, p, opts, top)) for p, (v, ok) in pieces(m, res).items()
                if m.output != "record" or m.field_range(p, opts) is not None]

    ids = [m.default(p) for p in ("protected", "reference", "group") if p not in opts]
    need = max([1] + [d + 1 for d in ids if isinstance(d, int) and not isinstance(d, bool)])
    return Case(label, call, needs_relevance="relevance" in takes, needs_groups="groups" in takes,
                soft_groups=m.accepts_soft(opts), min_groups=need if min_groups is None else min_groups)


def _ind_dis(s, r, g, mask, o, G):
    return [("individual_dissatisfaction", M.individual_dissatisfaction(
        s, r, g, mask=mask, ordering=o, num_groups=G, browsing="rbp:0.9"), None, 0.0, INF),
        ("individual_dissatisfaction.nogroups", M.individual_dissatisfaction(
            s, r, mask=mask, ordering=o, k=3), None, 0.0, INF)]


def _ind_mis(s, r, g, mask, o, G):
    M_, v = M.individual_misallocation(s, r, mask=mask, ordering=o, return_valid=True, browsing="rbp:0.9")
    n = s.shape[-1]
    return [("individual_misallocation", M_, v[..., None].expand_as(M_), -n, n)]


def _pairwise_gap(s, r, g, mask, o, G):
    D, v = M.dips(s, r, g, mask=mask, ordering=o, num_groups=G, return_valid=True)
    gap, gv = M.pairwise_gap(D, valid=v)
    out = [("pairwise_gap", gap, gv, -1.0, 1.0)]
    if G >= 2:
        out += _vv(M.pairwise_gap(D, valid=v, protected=1, reference=0), "pairwise_gap.p", -1.0, 1.0)
    return out


def _accuracy_gaps(s, r, g, mask, o, G):
    A, v = M.pairwise_accuracy(s, r, g, mask=mask, ordering=o, num_groups=G, return_valid=True)
    (inter, vi), (intra, va) = M.accuracy_gaps(A, 1, 0, valid=v)
    return [("accuracy_gaps.inter", inter, vi, -1.0, 1.0), ("accuracy_gaps.intra", intra, va, -1.0, 1.0)]


def _misallocation_norm(s, r, g, mask, o, G):
    d, v = M.exposure_misallocation(s, r, g, mask=mask, ordering=o, num_groups=G, return_valid=True)
    return [("misallocation_norm", M.misallocation_norm(d), v.all(-1), 0.0, 2.0),
            ("misallocation_norm.l2", M.misallocation_norm(d, 2), v.all(-1), 0.0, 2.0)]


def _ideal(s, r, g, mask, o, G):
    return [("ideal_exposure", M.ideal_exposure(r, mask=mask, browsing="geometric:0.5", k=3), None, 0.0, 1.0),
            ("ideal_dcg",) + M.utility.ideal_dcg(r, mask=mask, k=2, return_valid=True) + (0.0, INF),
            ("ideal_ranking", M.utility.ideal_ranking(r, mask=mask).double(), None, 0.0, s.shape[-1] - 1)]


def _mpc(s, r, g, mask, o, G):
    res = M.matched_pair_calibration(s, r, g, group=1 if G >= 2 else 0, eps=0.5, adjacent=True, mask=mask,
                                     ordering=o, num_groups=G, ci="cluster", browsing="rbp:0.9")
    pairs = M.matched_pairs(s, r, g, group=0, quantile=0.5, mask=mask, ordering=o, num_groups=G)
    return [("mpc.estimate", res.estimate, res.valid, -INF, INF), ("mpc.ci_low", res.ci_low, res.valid, -INF, INF),
            ("mpc.ci_high", res.ci_high, res.valid, -INF, INF), ("mpc.std_error", res.std_error, None, 0.0, INF),
            ("mpc.per_query", res.per_query, res.per_query_valid, -INF, INF),
            ("matched_pairs.diff", pairs.diff, None, -INF, INF),
            ("mpc_cluster_variance", M.mpc_cluster_variance(pairs, cluster="query"), None, 0.0, INF)]


def _mono(s, r, g, mask, o, G):
    t = M.monotonicity_test(s, g, protected=0, mask=mask, ordering=o, num_groups=G, k=5)
    return [("monotonicity.probabilities", t.probabilities, t.observed, 0.0, 1.0),
            ("monotonicity.statistic", t.statistic, None, 0.0, INF), ("monotonicity.p_value", t.p_value, None, 0.0, 1.0),
            ("isotonic_regression", M.isotonic_regression(t.probabilities, increasing=False), None, 0.0, 1.0)]


CASES: List[Case] = [
    # ------------------------------------------------------------------ utility
    declared("dcg"), declared("ndcg"), declared("ndcg", k=3, gain="linear"), declared("precision", k=2),
    declared("recall", k=2), declared("mrr"), declared("rbp", rel=lambda r: (r > 0).to(r.dtype), k=4),
    declared("err"),
    Case("ideal", _ideal, needs_relevance=True, differentiable=False),
    # ------------------------------------------------------------------ pairwise
    declared("dips", browsing="rbp:0.9"), declared("dips", k=3), declared("igi", tie_weight=0.5),
    declared("ree", k=2),
    declared("pairwise_accuracy"), declared("discordant_fraction"), declared("kendall_tau"), declared("rank_parity"),
    Case("individual_dissatisfaction", _ind_dis, needs_relevance=True, needs_groups=True),
    Case("pairwise_gap", _pairwise_gap, needs_relevance=True, needs_groups=True),
    Case("accuracy_gaps", _accuracy_gaps, needs_relevance=True, needs_groups=True, min_groups=2),
    # ------------------------------------------------------------------ exposure
    declared("exposure_misallocation"),
    declared("exposure_misallocation", target="ea", k=2, browsing="logarithmic"),
    Case("misallocation_norm", _misallocation_norm, needs_relevance=True, needs_groups=True),
    Case("individual_misallocation", _ind_mis, needs_relevance=True),
    declared("expected_exposure", groups=True, browsing="rbp:0.8"),
    declared("iaa", groups=True), declared("iaa", amortize=False),
    declared("exposure_share"),
    declared("awrf"), declared("awrf", distance="rd", target="list"), declared("awrf", distance="kl", k=3),
    declared("dp"), declared("eur"), declared("rur"), declared("rur", amortize=True),
    _c("log_dp", lambda s, r, g, m, o, G: M.log_dp(s, g, mask=m, ordering=o, num_groups=G, return_valid=True),
       -INF, INF, needs_groups=True, min_groups=2),
    _c("log_eur", lambda s, r, g, m, o, G: M.log_eur(s, r, g, mask=m, ordering=o, num_groups=G, return_valid=True),
       -INF, INF, needs_relevance=True, needs_groups=True, min_groups=2),
    _c("log_rur", lambda s, r, g, m, o, G: M.log_rur(s, r, g, k=3, mask=m, ordering=o, num_groups=G,
                                                      return_valid=True), -INF, INF,
       needs_relevance=True, needs_groups=True, min_groups=2),
    declared("exp_rr"),
    # ------------------------------------------------------------------ prefix
    declared("rnd", step=2, protected=0), declared("rrd", step=1, protected=0), declared("rkl", step=2, protected=0),
    declared("pref", step=1, min_groups=1),  # delta="kl" (the default) leaves `protected` unused
    declared("pref", delta="nd", protected=0, step=1, k=3),
    declared("skew", k=2), declared("ndkl"), declared("ndkl", target="equal", k=3), declared("fair", protected=0),
    # ------------------------------------------------------------------ baselines' disparities
    declared("top1_exposure_gap"), declared("disparate_exposure"),
    # ------------------------------------------------------------------ calibration and the monotonicity test
    Case("mpc", _mpc, needs_relevance=True, needs_groups=True, soft_groups=False, differentiable=False),
    Case("monotonicity", _mono, needs_groups=True, differentiable=False, needs_known=True),
]


def orderings(seed: int = 0):
    """The orderings every case runs under: exact, tie-averaged, relaxed, Plackett-Luce (8 samples)."""
    return {"hard": Hard(), "hard_average": Hard("average"), "softrank": SoftRank(0.1),
            "pl": PlackettLuce(samples=8, generator=torch.Generator().manual_seed(seed))}


# ---------------------------------------------------------------------------------------------------- inputs
SCORE_KINDS = ("random", "tied", "few", "large")
REL_KINDS = ("binary", "grades10", "grades1000", "tiny", "zeros")
GROUP_KINDS = ("ids", "one", "unknown", "soft", "soft_partial")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def make_batch(gen: torch.Generator, B: int, N: int, G: int, score_kind: str, rel_kind: str, group_kind: str,
               dtype: torch.dtype, pad_list: bool, pad_items: bool):
    """A batch ``(scores, relevance, groups, mask)`` of the given kinds; padded entries hold NaN / garbage."""
    if score_kind == "random":
        s = torch.randn(B, N, generator=gen, dtype=torch.float64)
    elif score_kind == "tied":
        s = torch.full((B, N), 0.25, dtype=torch.float64)
    elif score_kind == "few":
        s = torch.randint(0, 2, (B, N), generator=gen).double()
    else:
        s = torch.randn(B, N, generator=gen, dtype=torch.float64) * 3e3
    if rel_kind == "binary":
        r = torch.randint(0, 2, (B, N), generator=gen).double()
    elif rel_kind == "grades10":
        r = torch.randint(0, 11, (B, N), generator=gen).double()
    elif rel_kind == "grades1000":
        r = torch.randint(0, 1001, (B, N), generator=gen).double()
    elif rel_kind == "tiny":
        r = torch.randint(0, 2, (B, N), generator=gen).double() * 1e-30
    else:
        r = torch.zeros(B, N, dtype=torch.float64)
    if group_kind == "ids":
        g = torch.randint(0, G, (B, N), generator=gen)
    elif group_kind == "one":
        g = torch.zeros(B, N, dtype=torch.long)
    elif group_kind == "unknown":
        g = torch.randint(-1, G, (B, N), generator=gen)
    else:
        w = torch.rand(B, N, G, generator=gen, dtype=torch.float64) + 0.05
        g = w / w.sum(-1, keepdim=True)
        if group_kind == "soft_partial":  # rows summing to less than 1: partly unknown group
            g = g * torch.rand(B, N, 1, generator=gen, dtype=torch.float64)
        if dtype in (torch.float16, torch.bfloat16):
            # rows that still sum to at most 1 after rounding to half precision: the membership check allows 1e-4
            # (torchfair/_validation.py), less than bfloat16's rounding of a row of three entries
            g = g * 0.98
    mask = torch.ones(B, N, dtype=torch.bool)
    if pad_items and N > 1:
        mask[:, N - 1] = False
    if pad_list and B > 1:
        mask[B - 1] = False
    s = s.to(dtype)
    r = r.to(dtype)
    if g.is_floating_point():
        g = g.to(dtype)
    # padded slots may hold anything
    s = torch.where(mask, s, torch.full_like(s, float("nan")))
    r = torch.where(mask, r, torch.full_like(r, float("nan")))
    if g.is_floating_point():
        g = torch.where(mask[..., None], g, torch.full_like(g, float("nan")))
    else:
        g = torch.where(mask, g, torch.full_like(g, 7))
    return s, r, g, mask


def check_case(case: Case, oname: str, ordering, s: Tensor, r: Tensor, g: Tensor, mask: Tensor, G: int,
               grad: bool) -> List[str]:
    """Run one case; return the list of contract violations (empty when it holds)."""
    problems = []
    # the leaf is float32 / float64 as a model's parameters are; half-precision inputs are cast from it (autocast)
    leaf = s.detach().to(torch.float64 if s.dtype == torch.float64 else torch.float32).clone().requires_grad_(grad)
    s_in = leaf.to(s.dtype) if s.dtype != leaf.dtype else leaf
    try:
        pieces = case.fn(s_in, r, g, mask, ordering, G)
    except ValueError as e:
        return [f"ValueError on valid input: {e}"]
    total = 0.0
    for name, value, valid, lo, hi in pieces:
        if not isinstance(value, Tensor):
            problems.append(f"{name}: not a tensor")
            continue
        if not torch.isfinite(value).all():
            problems.append(f"{name}: non-finite value {value}")
            continue
        if value.dtype not in (torch.float32, torch.float64) and value.is_floating_point():
            problems.append(f"{name}: result dtype {value.dtype}")
        v = value.detach().double()
        ok = torch.ones_like(v, dtype=torch.bool) if valid is None else valid.expand_as(v)
        if (ok & ((v < lo - 1e-6 * (1 + abs(lo) if lo != -INF else 0)) |
                  (v > hi + 1e-6 * (1 + abs(hi) if hi != INF else 0)))).any():
            problems.append(f"{name}: valid value outside [{lo}, {hi}]: {v[ok]}")
        if valid is not None and (v[~valid.expand_as(v)] != 0).any():
            problems.append(f"{name}: invalid entries not 0: {v}")
        if grad and value.requires_grad:
            total = total + torch.where(ok, value, torch.zeros_like(value)).sum()
    if grad and isinstance(total, Tensor) and total.requires_grad:
        total.backward()
        gr = leaf.grad
        if gr is None:
            problems.append("no gradient reached the scores")
        elif not torch.isfinite(gr).all() and not _beyond_half_range(case, ordering, s, r, g, mask, G):
            problems.append(f"non-finite gradient {gr}")
        elif (gr[~mask] != 0).any():
            problems.append(f"non-zero gradient on padding {gr}")
    return problems


def _beyond_half_range(case: Case, ordering, s: Tensor, r: Tensor, g: Tensor, mask: Tensor, G: int) -> bool:
    """Whether a half-precision input's gradient overflowed only because the true gradient (computed from the same
    values in float32) is beyond the float16 range: a gradient w.r.t. a float16 tensor is float16."""
    if s.dtype not in (torch.float16, torch.bfloat16):
        return False
    leaf = s.detach().float().clone().requires_grad_(True)
    pieces = case.fn(leaf, r.float(), g.float() if g.is_floating_point() else g, mask, ordering, G)
    total = 0.0
    for _, value, valid, _, _ in pieces:
        if isinstance(value, Tensor) and value.requires_grad:
            ok = torch.ones_like(value, dtype=torch.bool) if valid is None else valid.expand_as(value)
            total = total + torch.where(ok, value, torch.zeros_like(value)).sum()
    if not (isinstance(total, Tensor) and total.requires_grad):
        return False
    total.backward()
    return not torch.isfinite(leaf.grad).all() or leaf.grad.abs().max() > 1e4
