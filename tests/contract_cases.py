"""The contract as data: input cases, orderings, dtype modes, one adapter row per public function, and
the checks.  ``tests/test_contract.py`` turns it into tests; ``python tests/contract_cases.py probe [ROW ...]``
runs a catalogue of degenerate inputs over every row x ordering x dtype and ``python tests/contract_cases.py
explore N [ROW ...]`` N random examples, each printing every distinct violation once with a reproduction (see
:func:`main`).  Run them from the repository root: they import this checkout's torchfair.

The contract, for every public function and every ordering, on CPU in fp32 and fp64, with
fp16 / bf16 inputs and under ``torch.autocast("cpu", ...)``:

* valid input (anything the README allows, degenerate lists included) gives finite values; entries flagged
  invalid are exactly 0; the documented range holds on valid entries; float64 inputs give float64 results and
  everything else float32 ("fp16/bf16 computed in fp32, fp64 stays fp64");
* with a differentiable ordering, ``backward()`` of a weighted sum of the valid values gives finite gradients on
  real items and exactly zero gradient on padded items (whose score slots hold NaN);
* invalid input raises ``ValueError`` whose message names the argument in backticks (```protected```); any other
  exception type, or no exception, is a violation.

A row (:class:`Row`) says how to call one public object: which data it takes (``args``), the options to sweep
(``options``: the first value of each list is the default used by the deterministic sweep), how to read its
result into checked outputs with their documented ranges (``out``), whether gradients must flow (``grad``),
and whether it accepts soft membership.  Rows are grouped in families (``pairwise``, ``exposure``, ``prefix``,
``utility``, ``calibration``, ``losses``, ``orderings``, ``browsing``, ``compat``, ``evaluation``).  The rows of
the declared measures (``torchfair.metrics.MEASURES``) are generated from their declarations (:func:`measure_row`:
data, documented range under the options, soft membership, expectation over rankings, options grid), with what the
harness adds in :data:`MEASURE_HARNESS`; the rows of the other public objects are written out.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import math
import sys
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

if __name__ == "__main__":  # run as a script: import this checkout's torchfair, not an installed one
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch import Tensor

import torchfair
from torchfair import browsing as tb
from torchfair import evaluation as tev
from torchfair import losses as tl
from torchfair import metrics as tm
from torchfair import orderings as to
from torchfair.compat import expeval as cee
from torchfair.compat import fairranktune as frt
from torchfair.metrics.declarations import BROWSING_SPECS, MEASURES, Measure
from torchfair.orderings.hard import HardOrderedBatch
from torchfair.orderings.stochastic import DoublyStochasticOrderedBatch
from tester import declared_range, pieces

NAN = float("nan")
INF = float("inf")

# ============================================================================================== dtype modes
#: how inputs are presented: input dtype, and a context the call runs in
MODES = ("fp32", "fp64", "fp16", "bf16", "autocast-bf16", "autocast-fp16", "fp32-default64")
INPUT_DTYPE = {"fp32": torch.float32, "fp64": torch.float64, "fp16": torch.float16, "bf16": torch.bfloat16,
               "autocast-bf16": torch.float32, "autocast-fp16": torch.float32, "fp32-default64": torch.float32}
MODE_CODE = {"fp32": "torch.float32", "fp64": "torch.float64", "fp16": "torch.float16", "bf16": "torch.bfloat16",
             "autocast-bf16": "torch.float32", "autocast-fp16": "torch.float32",
             "fp32-default64": "torch.float32"}


@contextlib.contextmanager
def mode_context(mode: str):
    """The context a call runs in: autocast for the ``autocast-*`` modes, ``set_default_dtype(float64)`` for
    ``fp32-default64`` (restored afterwards), nothing otherwise."""
    if mode.startswith("autocast-"):
        with torch.autocast("cpu", dtype=torch.bfloat16 if mode.endswith("bf16") else torch.float16):
            yield
    elif mode == "fp32-default64":
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(old)
    else:
        yield


def mode_prefix_code(mode: str) -> Tuple[str, str]:
    """(setup line, indentation) of a reproduction in ``mode``."""
    if mode == "autocast-bf16":
        return "with torch.autocast('cpu', dtype=torch.bfloat16):\n", "    "
    if mode == "autocast-fp16":
        return "with torch.autocast('cpu', dtype=torch.float16):\n", "    "
    if mode == "fp32-default64":
        return "torch.set_default_dtype(torch.float64)\n", ""
    return "", ""


def tolerance(mode: str) -> float:
    """Absolute tolerance of range checks (scaled by the size of the bound): rounding, and the tiny column-sum
    error of the permutation relaxations (NeuralSort's recall reaches 1 + 6e-9 in fp64)."""
    return 1e-6 if mode == "fp64" else 1e-4


# ============================================================================================== cases
@dataclass
class Case:
    """One batch of inputs, held as Python lists (float64 values) so that it prints as a reproduction.

    Padded slots hold NaN scores and arbitrary relevance / group values: the functions must never look at them.
    """

    scores: List[List[float]]
    relevance: List[List[float]]
    groups: list  # [B][N] ints, or [B][N][G] floats (soft membership)
    mask: List[List[bool]]
    G: int  # number of groups the case is built for (ids in [0, G), -1 unknown)
    soft: bool = False
    pass_num_groups: bool = False
    one_dim: bool = False  # give [N] tensors instead of [1, N] (only when B == 1)
    seed: int = 0
    label: str = ""

    @property
    def B(self) -> int:
        return len(self.scores)

    @property
    def N(self) -> int:
        return len(self.scores[0])

    def n_real(self) -> List[int]:
        return [sum(row) for row in self.mask]

    def has_real(self) -> bool:
        return any(any(row) for row in self.mask)

    def known_ids(self) -> set:
        """Group ids of real items (soft: groups with positive membership on a real item)."""
        out = set()
        for b in range(self.B):
            for i in range(self.N):
                if not self.mask[b][i]:
                    continue
                if self.soft:
                    out.update(g for g, w in enumerate(self.groups[b][i]) if w > 0)
                elif self.groups[b][i] >= 0:
                    out.add(self.groups[b][i])
        return out

    def max_relevance(self) -> float:
        vals = [self.relevance[b][i] for b in range(self.B) for i in range(self.N) if self.mask[b][i]]
        return max(vals) if vals else 0.0

    def materialize(self, mode: str, fill_padding: bool = False) -> "X":
        dt = INPUT_DTYPE[mode]
        s = torch.tensor(self.scores, dtype=torch.float64)
        r = torch.tensor(self.relevance, dtype=torch.float64)
        m = torch.tensor(self.mask, dtype=torch.bool)
        if self.soft:
            g = torch.tensor(self.groups, dtype=torch.float64).to(dt)
        else:
            g = torch.tensor(self.groups, dtype=torch.long)
        if fill_padding:  # functions without a mask: every slot is a real item
            s = torch.where(m, s, torch.zeros(()))
            r = torch.where(m, r, torch.zeros(()))
            if self.soft:
                g = torch.where(m[..., None], g, torch.zeros((), dtype=g.dtype))
            else:
                g = torch.where(m, g, torch.zeros((), dtype=g.dtype))
            m = torch.ones_like(m)
        s, r = s.to(dt), r.to(dt)
        if self.one_dim:
            s, r, g, m = s[0], r[0], g[0], m[0]
        return X(s=s, r=r, g=g, m=m, num_groups=self.G if self.pass_num_groups else None, case=self, mode=mode,
                 filled=fill_padding)


@dataclass
class X:
    """Materialized tensors of a case in one mode (``[N]`` or ``[B, N]``)."""

    s: Tensor
    r: Tensor
    g: Tensor
    m: Tensor
    num_groups: Optional[int]
    case: Case
    mode: str
    filled: bool = False

    @property
    def batched(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        if self.s.dim() == 1:
            g = self.g.unsqueeze(0)
            return self.s.unsqueeze(0), self.r.unsqueeze(0), g, self.m.unsqueeze(0)
        return self.s, self.r, self.g, self.m

    @property
    def G(self) -> int:
        return self.case.G


# ----------------------------------------------------------------------------------------- canonical cases
def _list_case(scores, relevance, groups, mask=None, G=2, soft=False, pass_num_groups=True, label="", seed=0):
    B, N = len(scores), len(scores[0])
    if mask is None:
        mask = [[True] * N for _ in range(B)]
    scores = [[s if mask[b][i] else NAN for i, s in enumerate(row)] for b, row in enumerate(scores)]
    relevance = [[r if mask[b][i] else NAN for i, r in enumerate(row)] for b, row in enumerate(relevance)]
    return Case(scores, relevance, groups, mask, G, soft, pass_num_groups, False, seed, label)


def catalogue() -> List[Case]:
    """Degenerate inputs, one failure class each (README conventions and the robustness list)."""
    T, F = True, False
    cs = [
        _list_case([[0.0, 0.0, 0.0, 0.0]], [[2.0, 0.0, 1.0, 3.0]], [[0, 1, 0, 1]], label="tied-zeros"),
        _list_case([[5.0, 5.0, 5.0, 5.0]], [[1.0, 0.0, 1.0, 0.0]], [[0, 1, 1, 0]], label="tied-const5"),
        _list_case([[1.0, 3.0, 2.0, 0.5], [0.0, 0.0, 0.0, 0.0]], [[1.0, 0.0, 2.0, 1.0], [0.0] * 4],
                   [[0, 1, 0, 1], [0, 0, 0, 0]], mask=[[T] * 4, [F] * 4], label="fully-padded-list"),
        _list_case([[1.0, 2.0, 3.0], [0.7, 0.0, 0.0]], [[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]], [[0, 1, 1], [1, 0, 0]],
                   mask=[[T, T, T], [T, F, F]], label="one-real-item"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1.0, 2.0, 0.0, 1.0]], [[0, 0, 0, 0]], G=1, label="one-group"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1.0, 2.0, 0.0, 1.0]], [[0, 0, 0, 0]], G=2, pass_num_groups=False,
                   label="one-group-inferred"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1.0, 2.0, 0.0, 1.0]], [[0, 2, 0, 2]], G=3, label="absent-group"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1.0, 2.0, 0.0, 1.0]], [[0, -1, 1, -1]], label="unknown-group"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1.0, 2.0, 0.0, 1.0]], [[-1, -1, -1, -1]], G=1,
                   pass_num_groups=False, label="all-unknown"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1.0, 2.0, 0.0, 1.0]],
                   [[[1.0, 0.0], [0.5, 0.5], [0.25, 0.5], [0.0, 0.0]]], soft=True, label="soft-partial"),
        _list_case([[1e19, -1e19, 3e19, 2e19]], [[1.0, 2.0, 0.0, 1.0]], [[0, 1, 0, 1]], label="huge-scores"),
        _list_case([[1e19, 1e19, 1e19, 1e19]], [[1.0, 2.0, 0.0, 1.0]], [[0, 1, 0, 1]], label="huge-equal"),
        _list_case([[1e30, 1e30, 1e30, 0.0]], [[1.0, 2.0, 0.0, 1.0]], [[0, 1, 0, 1]], label="huge-ties"),
        _list_case([[100.0, -100.0, 50.0, -20.0]], [[1.0, 0.0, 3.0, 1.0]], [[0, 1, 0, 1]], label="wide-logits"),
        _list_case([[3e-30, 1e-30, 2e-30, 0.0]], [[1.0, 0.0, 3.0, 1.0]], [[0, 1, 0, 1]], label="tiny-scores"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1000.0, 200.0, 0.0, 129.0]], [[0, 1, 0, 1]], label="grades-1000"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[1e-30, 2e-30, 0.0, 1e-30]], [[0, 1, 0, 1]], label="tiny-relevance"),
        _list_case([[2.0, 1.0, 3.0, 0.0]], [[0.0, 0.0, 0.0, 0.0]], [[0, 1, 0, 1]], label="zero-relevance"),
        _list_case([[2.0, 0.0, 3.0, 0.0, 1.0]], [[1.0, 0.0, 2.0, 0.0, 1.0]], [[0, 7, 1, -5, 0]],
                   mask=[[T, F, T, F, T]], label="scattered-padding"),
        _list_case([[0.3, 0.1, 0.2] + [0.0] * 9], [[1.0, 0.0, 2.0] + [0.0] * 9], [[0, 1, 1] + [0] * 9],
                   mask=[[T, T, T] + [F] * 9], label="short-list-long-pad"),
        _list_case([[float(10 - i) for i in range(10)]], [[float(i % 3) for i in range(10)]],
                   [[0, 1, 0, 0, 1, 0, 0, 0, 1, 0]], label="prefix-cutoff-whole-list"),
        _list_case([[float(10 - i) for i in range(10)], [0.0] * 10], [[float(i % 3) for i in range(10)], [0.0] * 10],
                   [[0, 1, 0, 0, 1, 0, 0, 0, 1, 0], [0] * 10], mask=[[T] * 10, [F] * 10],
                   label="fully-padded-list-n10"),
    ]
    return cs


def sweep_batch(soft: bool, mode: str) -> Case:
    """One batch holding most degenerate lists at once (for the fast deterministic sweep); its padded slots hold
    NaN, +inf, -inf and 1e4 scores and out-of-range group ids."""
    T, F = True, False
    big = {"fp16": 6e4, "fp64": 9.4e199}.get(mode, 1e19)  # fp64: beyond float32's range
    scores = [[0.0, 0.0, 0.0, 0.0, 0.0],
              [5.0, 5.0, 5.0, 5.0, 5.0],
              [big, -big, 3.0, 2 * big if mode != "fp16" else 5e4, 0.0],
              [100.0, -100.0, 50.0, -20.0, 0.0],
              [3e-30, 1e-30, 2e-30, 0.0, 1.0],
              [0.0, 0.0, 0.0, 0.0, 0.0],
              [0.7, 0.2, 0.1, 0.0, 0.0]]
    rel = [[2.0, 0.0, 1.0, 3.0, 0.0],
           [1.0, 0.0, 1.0, 0.0, 1.0],
           [1000.0, 200.0, 0.0, 129.0, 5.0],
           [1e-30, 2e-30, 0.0, 1e-30, 0.0],
           [0.0, 0.0, 0.0, 0.0, 0.0],
           [0.0, 0.0, 0.0, 0.0, 0.0],
           [1.0, 0.0, 2.0, 0.0, 0.0]]
    mask = [[T] * 5, [T] * 5, [T] * 5, [T, T, T, T, F], [T, F, T, F, T], [F] * 5, [T, F, F, F, F]]
    if soft:
        q = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.25, 0.5], [0.0, 0.0]]
        groups = [[q[(b + i) % 5] for i in range(5)] for b in range(7)]
        G = 2
    else:
        groups = [[0, 1, 0, 1, 0], [0, 0, 0, 0, 0], [0, 2, -1, 2, 0], [1, 0, 1, 0, 3], [2, 9, 1, -7, 0],
                  [0, 1, 0, 1, 0], [1, 0, 0, 0, 0]]
        G = 3
    case = _list_case(scores, rel, groups, mask, G=G, soft=soft, pass_num_groups=True,
                      label=f"sweep-{'soft' if soft else 'ids'}")
    for b, pad in ((3, INF), (4, -INF), (5, 1e4)):  # padded slots may hold anything (the other lists: NaN)
        case.scores[b] = [v if mask[b][i] else pad for i, v in enumerate(case.scores[b])]
    return case


def invalid_base() -> Case:
    """A plain valid batch that invalid-argument tests mutate."""
    T, F = True, False
    return _list_case([[0.3, 0.1, 0.7, 0.2, 0.5], [0.5, 0.9, 0.4, 0.8, 0.1]],
                      [[1.0, 2.0, 0.0, 3.0, 1.0], [2.0, 0.0, 1.0, 1.0, 0.0]],
                      [[0, 1, 1, 0, 1], [1, 0, 0, 1, 0]], mask=[[T] * 5, [T, T, T, T, F]], G=2,
                      pass_num_groups=False, label="invalid-base")


# ----------------------------------------------------------------------------------------- hypothesis
def _strategies():
    from hypothesis import strategies as st
    return st


def score_values(st, kind: str, n: int):
    if kind == "normal":
        return st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=n, max_size=n)
    if kind == "ints":
        return st.lists(st.integers(-2, 2).map(float), min_size=n, max_size=n)
    if kind == "zeros":
        return st.just([0.0] * n)
    if kind == "const":
        return st.sampled_from([5.0, -3.0, 1e4, 1e19]).map(lambda c: [c] * n)
    if kind == "huge":
        return st.lists(st.sampled_from([1e19, -1e19, 3e19, 1e18, 0.0, 1e30, -5e37]), min_size=n, max_size=n)
    if kind == "wide":
        return st.lists(st.sampled_from([-100.0, -50.0, 0.0, 50.0, 100.0, 89.0, -89.0, 1000.0]), min_size=n,
                        max_size=n)
    if kind == "tiny":
        return st.lists(st.sampled_from([1e-30, -1e-30, 2e-30, 0.0, 1e-38, 1e-45]), min_size=n, max_size=n)
    # mixed
    return st.lists(st.one_of(st.floats(-10, 10, allow_nan=False, width=32),
                              st.sampled_from([0.0, 1e19, -1e19, 1e-30, 100.0, -100.0])), min_size=n, max_size=n)


SCORE_KINDS = ("normal", "ints", "zeros", "const", "huge", "wide", "tiny", "mixed")
REL_KINDS = ("binary", "graded10", "graded1000", "unit", "tiny", "zero", "const")


def relevance_values(st, kind: str, n: int):
    if kind == "binary":
        return st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)
    if kind == "graded10":
        return st.lists(st.integers(0, 10).map(float), min_size=n, max_size=n)
    if kind == "graded1000":
        return st.lists(st.sampled_from([0.0, 1.0, 127.0, 128.0, 129.0, 500.0, 1000.0]), min_size=n, max_size=n)
    if kind == "unit":
        return st.lists(st.floats(0, 1, allow_nan=False, width=32), min_size=n, max_size=n)
    if kind == "tiny":
        return st.lists(st.sampled_from([0.0, 1e-30, 2e-30, 1e-38]), min_size=n, max_size=n)
    if kind == "zero":
        return st.just([0.0] * n)
    return st.just([1.0] * n)


QUARTERS = (0.0, 0.25, 0.5, 0.75, 1.0)


def cases(max_B: int = 4, max_N: int = 12):
    """Hypothesis strategy of :class:`Case`: B in 1..4, N in 1..12, every degenerate kind of the issue."""
    st = _strategies()

    @st.composite
    def build(draw):
        B = draw(st.integers(1, max_B))
        N = draw(st.integers(1, max_N))
        G = draw(st.integers(1, 3))
        soft = draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else False
        mask, scores, rel, groups = [], [], [], []
        group_kind = draw(st.sampled_from(("two", "one", "absent", "unknown", "all_unknown")))
        for b in range(B):
            mk = draw(st.sampled_from(("full", "prefix", "scattered", "empty", "one")))
            if mk == "full":
                row = [True] * N
            elif mk == "prefix":
                n = draw(st.integers(1, N))
                row = [i < n for i in range(N)]
            elif mk == "scattered":
                row = draw(st.lists(st.booleans(), min_size=N, max_size=N))
            elif mk == "empty":
                row = [False] * N
            else:
                j = draw(st.integers(0, N - 1))
                row = [i == j for i in range(N)]
            mask.append(row)
            sk = draw(st.sampled_from(SCORE_KINDS))
            sv = draw(score_values(st, sk, N))
            rk = draw(st.sampled_from(REL_KINDS))
            rv = draw(relevance_values(st, rk, N))
            pad_rel = draw(st.sampled_from((NAN, 0.0, -5.0)))
            scores.append([v if row[i] else NAN for i, v in enumerate(sv)])
            rel.append([v if row[i] else pad_rel for i, v in enumerate(rv)])
            if soft:
                rows = []
                for i in range(N):
                    if not row[i]:
                        rows.append([draw(st.sampled_from((NAN, 5.0, 0.0)))] * G)
                        continue
                    w = draw(st.lists(st.sampled_from(QUARTERS), min_size=G, max_size=G))
                    while sum(w) > 1.0:  # quarter grid: sums are exact in every float dtype
                        k = max(range(G), key=lambda t: w[t])
                        w[k] -= 0.25
                    if group_kind == "one" and draw(st.booleans()):
                        w = [1.0] + [0.0] * (G - 1)
                    rows.append(w)
                groups.append(rows)
            else:
                if group_kind == "one":
                    ids = [0] * N
                elif group_kind == "absent":
                    present = draw(st.lists(st.integers(0, G - 1), min_size=1, max_size=max(1, G - 1), unique=True))
                    ids = draw(st.lists(st.sampled_from(sorted(present)), min_size=N, max_size=N))
                elif group_kind == "unknown":
                    ids = draw(st.lists(st.integers(-1, G - 1), min_size=N, max_size=N))
                elif group_kind == "all_unknown":
                    ids = [-1] * N
                else:
                    ids = draw(st.lists(st.integers(0, G - 1), min_size=N, max_size=N))
                pad_g = draw(st.sampled_from((0, -1, 99, -7)))
                groups.append([v if row[i] else pad_g for i, v in enumerate(ids)])
        if not any(any(r) for r in mask):  # at least one real item in the batch (else `mask` is invalid)
            j = draw(st.integers(0, N - 1))
            mask[0][j] = True
            scores[0][j] = 0.5
            rel[0][j] = 1.0
            if soft:
                groups[0][j] = [1.0] + [0.0] * (G - 1)
            else:
                groups[0][j] = 0
        pass_ng = draw(st.booleans())
        one_dim = B == 1 and draw(st.integers(0, 3)) == 0
        seed = draw(st.integers(0, 2 ** 16))
        return Case(scores, rel, groups, mask, G, soft, pass_ng, one_dim, seed, label="hypothesis")

    return build()


# ============================================================================================== orderings
ORDERINGS = ("Hard", "Hard(average)", "SoftRank", "NeuralSort", "SoftSort", "FastSoftRank", "PlackettLuce",
             "PlackettLuce(score_function)", "PlackettLuce(relaxed)", "PlackettLuce(exact)", "Sampled",
             "DoublyStochastic")
#: orderings that carry gradients to the scores
DIFFERENTIABLE = {"SoftRank", "RampRank", "NeuralSort", "SoftSort", "FastSoftRank", "PlackettLuce",
                  "PlackettLuce(score_function)", "PlackettLuce(relaxed)", "PlackettLuce(exact)"}
#: further configurations swept on their own ordering's row only (code -> constructor): absolute temperatures
#: (no per-list scale), Sinkhorn-normalised NeuralSort, each backend of FastSoftRank
ROW_ORDERINGS: Dict[str, Callable[[], Any]] = {
    "SoftRank(1e-3, scale='none')": lambda: to.SoftRank(1e-3, scale="none"),
    "NeuralSort(0.1, sinkhorn_iters=3)": lambda: to.NeuralSort(0.1, sinkhorn_iters=3),
    "SoftSort(0.01)": lambda: to.SoftSort(0.01),
    "FastSoftRank(1e-3, scale='none', backend='torch')": lambda: to.FastSoftRank(1e-3, scale="none", backend="torch"),
    "FastSoftRank(0.01, backend='torch')": lambda: to.FastSoftRank(0.01, backend="torch"),
    "FastSoftRank(0.01, backend='numba')": lambda: to.FastSoftRank(0.01, backend="numba"),
}
DIFFERENTIABLE |= set(ROW_ORDERINGS)
SOFT_RELAXATIONS = ("SoftRank", "NeuralSort", "SoftSort", "FastSoftRank")
#: ``PlackettLuce(exact=True)`` enumerates N! rankings: only for short lists in the harness
EXACT_MAX_N = 5


def sample_ranking_list(case: Case, S: int = 3) -> list:
    """``[S][B][N]`` rankings: real items of each list in a random order (seeded by the case), then padded ones."""
    gen = torch.Generator().manual_seed(case.seed)
    out = []
    for _ in range(S):
        rows = []
        for b in range(case.B):
            real = [i for i in range(case.N) if case.mask[b][i]]
            pad = [i for i in range(case.N) if not case.mask[b][i]]
            perm = torch.randperm(len(real), generator=gen).tolist() if real else []
            rows.append([real[p] for p in perm] + pad)
        out.append(rows)
    return out


def build_ordering(name: str, case: Case, mode: str):
    """The ordering ``name`` for ``case`` (``None`` for "default": the function's own default)."""
    if name in ("default", "none"):
        return None
    if name == "Hard":
        return to.Hard()
    if name == "Hard(average)":
        return to.Hard("average")
    if name == "SoftRank":
        return to.SoftRank(0.1)
    if name == "RampRank":  # its own row only (not yet in ORDERINGS, which every row sweeps)
        return to.RampRank(0.1)
    if name == "NeuralSort":
        return to.NeuralSort(0.1)
    if name == "SoftSort":
        return to.SoftSort(0.1)
    if name == "FastSoftRank":
        return to.FastSoftRank(0.1)
    if name in ROW_ORDERINGS:
        return ROW_ORDERINGS[name]()
    if name == "PlackettLuce":
        return to.PlackettLuce(samples=4, generator=torch.Generator().manual_seed(0))
    if name == "PlackettLuce(score_function)":
        return to.PlackettLuce(samples=4, estimator="score_function", generator=torch.Generator().manual_seed(0))
    if name == "PlackettLuce(relaxed)":
        return to.PlackettLuce(samples=4, estimator="relaxed", generator=torch.Generator().manual_seed(0))
    if name == "PlackettLuce(exact)":
        return to.PlackettLuce(exact=True)
    rk = torch.tensor(sample_ranking_list(case), dtype=torch.long)
    if case.one_dim:
        rk = rk[:, 0]
    if name == "Sampled":
        return to.Sampled(rk)
    if name == "DoublyStochastic":
        dt = torch.float64 if mode == "fp64" else torch.float32
        R = torch.nn.functional.one_hot(rk, case.N).to(dt).mean(0)  # [B, K, N]: P(item i at position k)
        return to.DoublyStochastic(R)
    raise KeyError(name)


def ordering_code(name: str, case: Case, mode: str) -> str:
    """Python lines that build ordering ``name`` as ``o`` (for reproductions)."""
    if name in ("default", "none"):
        return "o = None\n"
    simple = {"Hard": "Hard()", "Hard(average)": "Hard('average')", "SoftRank": "SoftRank(0.1)",
              "RampRank": "RampRank(0.1)",
              "NeuralSort": "NeuralSort(0.1)", "SoftSort": "SoftSort(0.1)", "FastSoftRank": "FastSoftRank(0.1)",
              "PlackettLuce": "PlackettLuce(samples=4, generator=torch.Generator().manual_seed(0))",
              "PlackettLuce(score_function)": "PlackettLuce(samples=4, estimator='score_function', "
                                              "generator=torch.Generator().manual_seed(0))",
              "PlackettLuce(relaxed)": "PlackettLuce(samples=4, estimator='relaxed', "
                                       "generator=torch.Generator().manual_seed(0))",
              "PlackettLuce(exact)": "PlackettLuce(exact=True)"}
    if name in simple:
        return f"o = {simple[name]}\n"
    if name in ROW_ORDERINGS:
        return f"o = {name}\n"
    rk = sample_ranking_list(case)
    if case.one_dim:
        rk = [s[0] for s in rk]
    code = f"rk = torch.tensor({rk})\n"
    if name == "Sampled":
        return code + "o = Sampled(rk)\n"
    dt = "torch.float64" if mode == "fp64" else "torch.float32"
    return code + f"o = DoublyStochastic(torch.nn.functional.one_hot(rk, {case.N}).to({dt}).mean(0))\n"


# ============================================================================================== rows
class Code(str):
    """An option value given as Python code (a browsing model, an ordering...): evaluated, printed as is."""


_NS: Dict[str, Any] = {"torch": torch}
for _mod in (tb, to):
    _NS.update({n: getattr(_mod, n) for n in _mod.__all__})


def opt_value(v):
    return eval(v, _NS) if isinstance(v, Code) else v


def opt_code(v) -> str:
    return str(v) if isinstance(v, Code) else repr(v)


class _Omit:
    def __repr__(self):
        return "<default>"


OMIT = _Omit()  # option left at the function's default

BROWSINGS = (OMIT,) + BROWSING_SPECS
REDUCTIONS = (OMIT, "mean", "sum", "none")


@dataclass
class Out:
    """One checked output: ``value`` with its validity mask (``None``: every entry valid) and range."""

    label: str
    value: Tensor
    valid: Optional[Tensor] = None
    lo: Any = -INF
    hi: Any = INF
    zero_invalid: bool = True  # entries flagged invalid must be exactly 0
    check_dtype: bool = True
    allow_nonfinite: bool = False  # documented IEEE results (FairRankTune's ratio aggregators on a zero)


@dataclass
class Ctx:
    row: "Row"
    case: Case
    x: X
    ordering: str
    mode: str
    opts: Dict[str, Any]

    @property
    def N(self) -> int:
        return self.case.N

    @property
    def B(self) -> int:
        return self.case.B


@dataclass
class Row:
    """How to call one public object and what its result must satisfy (see the module docstring)."""

    name: str  # "metrics.dips": module path + name, as in the coverage test
    obj: Any  # the public object
    family: str
    args: Tuple[str, ...] = ("scores", "relevance", "groups")  # positional data arguments
    options: Dict[str, Sequence[Any]] = field(default_factory=dict)  # first value = sweep default
    out: Optional[Callable[[Any, Ctx], List[Out]]] = None
    grad: str = "ordering"  # "ordering": when the ordering is differentiable; "always"; "never"
    soft: Any = True  # accepts soft membership (bool or callable(opts) -> bool)
    call: Optional[Callable[[X, Any, Dict[str, Any]], Any]] = None  # custom invocation
    code: Optional[str] = None  # custom reproduction (format fields: {opts})
    orderings: Optional[Tuple[str, ...]] = None  # None: every ordering if the function takes `ordering`
    pairwise: Any = False  # needs pair probabilities: DoublyStochastic is invalid (bool or callable(opts))
    masked: bool = True  # takes a mask (else padding is filled with real items)
    linear: bool = False  # value under a mixture of rankings = mixture of the values (default options)
    ieee: Optional[Callable[[Ctx], bool]] = None  # documented IEEE (nan/inf) results for this input
    expect: Optional[Callable[[Ctx], Optional[Tuple[str, ...]]]] = None  # row-specific invalid inputs
    params_of: Any = None  # take the parameter list from this function (``**kwargs`` wrappers)
    extra: Optional[Callable[[Any, Ctx], None]] = None  # further consistency checks (raise Violation)
    exempt_invalid: Dict[str, str] = field(default_factory=dict)  # invalid-case label -> documented reason
    invalid_params: Any = None  # option invalid cases: True / a tuple of the params a custom call forwards
    invalid_opts: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # param -> options its invalid cases need
    unused: Optional[Callable[[Dict[str, Any]], set]] = None  # params the function ignores under these options
    validates: bool = True  # validates tensor contents (False: low-level API, non-finite input is undefined)
    sweep_opts: Tuple[Dict[str, Any], ...] = ({},)  # option sets the deterministic sweeps run (over the defaults)
    cascade: bool = False  # always browses by a cascade (err): needs a strict order, no DoublyStochastic

    @property
    def fn(self):
        return self.obj

    @property
    def params(self) -> set:
        target = self.params_of or self.obj
        if inspect.isclass(target) and hasattr(target, "_fn") and target._fn is not None:
            target = target._fn
        elif inspect.isclass(target):
            target = target.__init__
        try:
            return set(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            return set()

    def ordering_names(self, case: Optional[Case] = None) -> Tuple[str, ...]:
        if self.orderings is not None:
            names = self.orderings
        elif "ordering" in self.params:
            names = ORDERINGS + (("default",) if self.family == "losses" else ())
        else:
            names = ("none",)
        if case is not None and case.N > EXACT_MAX_N:
            names = tuple(n for n in names if n != "PlackettLuce(exact)")
        return names

    def __repr__(self) -> str:
        return f"Row({self.name!r})"

    def _repr_pretty_(self, p, cycle) -> None:  # hypothesis' printer
        p.text(repr(self))

    def accepts_soft(self, opts) -> bool:
        return self.soft(opts) if callable(self.soft) else bool(self.soft)

    def differentiable(self, ordering: str) -> bool:
        if self.grad == "always":
            return True
        if self.grad == "never":
            return False
        if ordering == "default":
            return self.family == "losses"
        return ordering in DIFFERENTIABLE


# ----------------------------------------------------------------------------------------- invocation
def _kwargs(row: Row, x: X, ordering, opts: Dict[str, Any]) -> Dict[str, Any]:
    params = row.params
    kw: Dict[str, Any] = {}
    if "mask" in params:
        kw["mask"] = x.m
    if "num_groups" in params and x.num_groups is not None and not x.case.soft:
        kw["num_groups"] = x.num_groups
    if "ordering" in params and ordering is not None:
        kw["ordering"] = ordering
    if "return_valid" in params:
        kw["return_valid"] = True
    for k, v in opts.items():
        if k.startswith("_") or v is OMIT:
            continue
        kw[k] = opt_value(v)
    if opts.get("_groups"):
        kw["groups"] = x.g
    return kw


def invoke(row: Row, x: X, ordering, opts: Dict[str, Any]):
    if row.call is not None:
        return row.call(x, ordering, opts)
    data = {"scores": x.s, "relevance": x.r, "groups": x.g}
    pos = [data[a] for a in row.args]
    kw = _kwargs(row, x, ordering, opts)
    if inspect.isclass(row.obj) and issubclass(row.obj, torch.nn.Module):
        mask = kw.pop("mask", None)
        kw.pop("return_valid", None)
        mod = row.obj(**kw)
        r = x.r
        g = x.g
        return mod(x.s, r, g, mask)
    return row.obj(*pos, **kw)


def _tensor_code(name: str, t: Tensor) -> str:
    vals = t.tolist()
    txt = repr(vals).replace("nan", "nan").replace("inf", "inf")
    if t.dtype == torch.bool:
        return f"{name} = torch.tensor({txt})\n"
    if not t.is_floating_point():
        return f"{name} = torch.tensor({txt})\n"
    return f"{name} = torch.tensor({txt}, dtype={_dtype_code(t.dtype)})\n"


def _dtype_code(dt) -> str:
    return {torch.float32: "torch.float32", torch.float64: "torch.float64", torch.float16: "torch.float16",
            torch.bfloat16: "torch.bfloat16"}[dt]


def repro(row: Row, case: Case, ordering: str, mode: str, opts: Dict[str, Any]) -> str:
    """A few lines of Python that rerun the call (values as given to the function)."""
    x = case.materialize(mode, fill_padding=not row.masked)
    lines = ("import torch\nfrom torchfair.metrics import *\nfrom torchfair.losses import *\n"
             "from torchfair.orderings import *\nfrom torchfair.browsing import *\n")
    mod = row.name.rsplit(".", 1)[0]
    if mod.startswith("compat") or mod == "evaluation":
        lines += f"from torchfair.{mod} import *\n"
    lines += "nan, inf = float('nan'), float('inf')\n"
    used = set(row.args) | ({"groups"} if opts.get("_groups") else set())
    if row.call is not None:
        used = {"scores", "relevance", "groups"}
    src = {"scores": ("s", x.s), "relevance": ("r", x.r), "groups": ("g", x.g)}
    for key in ("scores", "relevance", "groups"):
        if key in used:
            n, t = src[key]
            if n == "g" and t.is_floating_point():
                lines += f"g = torch.tensor({repr(t.tolist())}, dtype={_dtype_code(t.dtype)})\n"
            else:
                lines += _tensor_code(n, t)
    lines += _tensor_code("m", x.m)
    lines += ordering_code(ordering, case, mode)
    optstr = ", ".join(f"{k}={opt_code(v)}" for k, v in opts.items() if not k.startswith("_") and v is not OMIT)
    setup, ind = mode_prefix_code(mode)
    if row.differentiable(ordering):
        lines += "s.requires_grad_(True)\n"
    lines += setup
    hidden = {k: v for k, v in opts.items() if k.startswith("_")}
    if hidden:
        lines += f"# harness options: {hidden}\n"
    if row.code is not None:
        body = row.code.format(opts=optstr, G=x.num_groups if x.num_groups is not None else case.G)
    else:
        names = {"scores": "s", "relevance": "r", "groups": "g"}
        a = [names[k] for k in row.args]
        kw = []
        params = row.params
        if "mask" in params:
            kw.append("mask=m")
        if "num_groups" in params and x.num_groups is not None and not case.soft:
            kw.append(f"num_groups={x.num_groups}")
        if "ordering" in params and ordering not in ("default", "none"):
            kw.append("ordering=o")
        if "return_valid" in params:
            kw.append("return_valid=True")
        if opts.get("_groups"):
            kw.append("groups=g")
        if optstr:
            kw.append(optstr)
        if inspect.isclass(row.obj) and issubclass(row.obj, torch.nn.Module):
            kws = ", ".join(k for k in kw if not k.startswith("mask=") and not k.startswith("return_valid"))
            body = f"out = {row.obj.__name__}({kws})(s, r, g, m)"
        else:
            body = f"out = {row.obj.__name__}({', '.join(a + kw)})"
    lines += "".join(ind + ln + "\n" for ln in body.split("\n"))
    return lines


# ============================================================================================== checks
class Violation(AssertionError):
    """A breach of the contract: ``kind`` (short class) and ``detail``."""

    def __init__(self, kind: str, detail: str = "", code: str = ""):
        self.kind, self.detail, self.code = kind, detail, code
        super().__init__(f"[{kind}] {detail}" + (f"\n--- reproduction ---\n{code}" if code else ""))


def _bound(b, ctx: Ctx):
    return b(ctx) if callable(b) else b


def _expected_dtype(mode: str):
    if mode == "fp64":
        return (torch.float64,)
    if mode == "fp32-default64":
        return (torch.float32, torch.float64)
    return (torch.float32,)


def _fit(valid: Tensor, value: Tensor) -> Tensor:
    """A validity mask shaped like ``value``: same shape, or a leading shape broadcast over trailing dims."""
    valid = valid.to(torch.bool)
    if valid.shape == value.shape:
        return valid
    if valid.dim() < value.dim() and tuple(value.shape[:valid.dim()]) == tuple(valid.shape):
        valid = valid.reshape(tuple(valid.shape) + (1,) * (value.dim() - valid.dim()))
    return valid.expand_as(value)


def check_outputs(outs: List[Out], ctx: Ctx) -> None:
    tol0 = tolerance(ctx.mode)
    reduction = ctx.opts.get("reduction", OMIT)
    for o in outs:
        v = o.value
        if not isinstance(v, Tensor):
            v = torch.as_tensor(v)
        if not v.is_floating_point():
            continue
        if o.check_dtype and v.dtype not in _expected_dtype(ctx.mode):
            raise Violation("dtype", f"{o.label}: result dtype {v.dtype} for {ctx.mode} inputs "
                                     f"(expected {' or '.join(str(d) for d in _expected_dtype(ctx.mode))})")
        vd = v.detach().double()
        if o.allow_nonfinite:
            continue
        if not torch.isfinite(vd).all():
            bad = vd[~torch.isfinite(vd)]
            raise Violation("non-finite value", f"{o.label}: {bad.numel()} non-finite entries "
                                                f"(e.g. {bad.flatten()[0].item()}) in {_short(vd)}")
        valid = o.valid
        if valid is not None:
            valid = _fit(valid, vd)
            if o.zero_invalid and (vd[~valid] != 0).any():
                raise Violation("invalid entry not 0", f"{o.label}: entries flagged invalid hold "
                                                       f"{vd[~valid][vd[~valid] != 0][:4].tolist()}")
            sel = valid
        else:
            sel = torch.ones_like(vd, dtype=torch.bool)
        lo, hi = _bound(o.lo, ctx), _bound(o.hi, ctx)
        lo = lo.double() if isinstance(lo, Tensor) else torch.tensor(float(lo), dtype=torch.float64)
        hi = hi.double() if isinstance(hi, Tensor) else torch.tensor(float(hi), dtype=torch.float64)
        if reduction == "sum":
            lo, hi = lo * ctx.B if lo.numel() == 1 and lo < 0 else lo, hi * ctx.B
        scale = torch.maximum(lo.abs().nan_to_num(0, 0, 0), hi.abs().nan_to_num(0, 0, 0)).clamp(min=1.0)
        tol = tol0 * scale
        lo_b, hi_b, tol_b = (t.expand_as(vd) if t.numel() > 1 else t for t in (lo, hi, tol))
        below = sel & (vd < lo_b - tol_b)
        above = sel & (vd > hi_b + tol_b)
        if below.any() or above.any():
            bad = vd[below | above]
            raise Violation("out of range", f"{o.label}: valid entries {bad[:4].tolist()} outside the documented "
                                            f"range [{_fmt_bound(lo)}, {_fmt_bound(hi)}]")


def _fmt_bound(t: Tensor) -> str:
    return f"{t.item():g}" if t.numel() == 1 else "per-entry bounds"


def _short(t: Tensor) -> str:
    flat = t.flatten()
    s = ", ".join(f"{x:.4g}" for x in flat[:8].tolist())
    return f"[{s}{', ...' if flat.numel() > 8 else ''}] (shape {tuple(t.shape)})"


def _weights(t: Tensor) -> Tensor:
    n = t.numel()
    return torch.linspace(0.5, 1.5, max(n, 1), dtype=torch.float64)[:n].reshape(t.shape)


def check_gradients(outs: List[Out], leaf: Tensor, real: Tensor, ctx: Ctx, total_out: Optional[list] = None):
    total = None
    any_grad = False
    for o in outs:
        v = o.value
        if not isinstance(v, Tensor) or not v.is_floating_point() or not v.requires_grad:
            continue
        any_grad = True
        vd = v.double()
        if o.valid is not None:
            valid = _fit(o.valid, vd)
            vd = torch.where(valid, vd, torch.zeros((), dtype=vd.dtype))
        term = (vd * _weights(vd)).sum()
        total = term if total is None else total + term
    if not any_grad:
        return  # nothing depends on the scores (e.g. uniform browsing): no gradient to check
    try:
        total.backward()
    except Exception as e:  # noqa: BLE001 - a crash in backward breaks the contract too
        tb_last = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{tb_last.filename.split('torchfair/')[-1]}:{tb_last.lineno}"
        raise Violation(f"{type(e).__name__} in backward", f"{type(e).__name__} at {where}: {e}")
    g = leaf.grad
    if g is None:
        g = torch.zeros_like(leaf)
    gd = g.double()
    if total_out is not None:
        total_out.append(gd)
    if not torch.isfinite(gd[real]).all():
        bad = gd[real][~torch.isfinite(gd[real])]
        raise Violation("non-finite gradient", f"{bad.numel()} non-finite gradient entries on real items "
                                               f"(e.g. {bad[0].item()}); grad {_short(gd)}")
    pad = ~real
    if pad.any() and (torch.isnan(gd[pad]).any() or (gd[pad] != 0).any()):
        raise Violation("padding gradient", f"padded items get gradient {gd[pad][:6].tolist()} (must be exactly 0)")


def _message_names(msg: str, names: Sequence[str]) -> bool:
    return any(f"`{n}`" in msg for n in names)


def expected_error(row: Row, ctx: Ctx) -> Optional[Tuple[str, ...]]:
    """Argument names one of which a ``ValueError`` must name, when the input is invalid for ``row`` (the union
    over every rule that applies: any of them may be reported first)."""
    case, x, opts, o = ctx.case, ctx.x, ctx.opts, ctx.ordering
    params = row.params
    unused = row.unused(opts) if row.unused is not None else set()
    names: List[str] = []
    if "scores" in row.args:
        bad = ~torch.isfinite(x.s)
        if not x.filled:
            bad = bad & x.m
        if bad.any():
            names.append("scores")
    if case.soft and ("groups" in row.args or opts.get("_groups")) and not row.accepts_soft(opts):
        names.append("groups")
    explicit_G = case.G if case.pass_num_groups and not case.soft and "num_groups" in params else None
    if case.soft:
        explicit_G = case.G
    sig = inspect.signature(row.params_of or _sig_target(row)).parameters if params else {}
    for p in ("protected", "reference", "group"):
        if p in params and p not in unused:
            v = opts.get(p, OMIT)
            if v is OMIT:
                d = sig.get(p)
                v = d.default if d is not None else None
            if isinstance(v, int) and explicit_G is not None and v >= explicit_G:
                names += [p, "groups", "num_groups"]
    if "reference" in params and "protected" in params and "protected" not in unused:
        pv = opts.get("protected", OMIT)
        rv = opts.get("reference", OMIT)
        pv = sig["protected"].default if pv is OMIT else pv
        rv = sig["reference"].default if rv is OMIT else rv
        if pv is not None and rv is not None and pv == rv:
            names += ["reference", "protected"]
    cascade = _uses_cascade(row, opts)
    if cascade and "relevance" not in row.args and row.call is None:  # no relevance to browse by
        names += ["browsing", "relevance"]
    if cascade and o == "Hard(average)" and row.name != "metrics.err":  # err averages its tie orders exactly
        names += ["ordering", "browsing"]
    pairwise = row.pairwise(opts) if callable(row.pairwise) else row.pairwise
    if o == "DoublyStochastic" and (pairwise or cascade):
        names += ["ordering"]
    if row.expect is not None:
        names += list(row.expect(ctx) or ())
    if not names:
        return None
    return tuple(dict.fromkeys(names))


def _sig_target(row: Row):
    t = row.obj
    if inspect.isclass(t) and hasattr(t, "_fn") and t._fn is not None:
        return t._fn
    if inspect.isclass(t):
        return t.__init__
    return t


def _uses_cascade(row: Row, opts) -> bool:
    b = opts.get("browsing", OMIT)
    if isinstance(b, tb.Cascade) or (isinstance(b, str) and "cascade" in b.lower()):
        return True
    return row.cascade


def run_valid(row: Row, case: Case, ordering: str, mode: str, opts: Dict[str, Any]) -> None:
    """Run ``row`` on ``case`` and check the contract; raises :class:`Violation` (with a reproduction)."""
    try:
        _run_valid(row, case, ordering, mode, opts)
    except Violation as v:
        if not v.code:
            v.code = repro(row, case, ordering, mode, opts)
            v.args = (f"[{v.kind}] {row.name} | ordering={ordering} | mode={mode} | opts="
                      f"{ {k: opt_code(w) for k, w in opts.items() if w is not OMIT} } | case={case.label}\n"
                      f"{v.detail}\n--- reproduction ---\n{v.code}",)
        raise


def _run_valid(row: Row, case: Case, ordering: str, mode: str, opts: Dict[str, Any]) -> None:
    x = case.materialize(mode, fill_padding=not row.masked)
    ctx = Ctx(row, case, x, ordering, mode, opts)
    expect = expected_error(row, ctx)
    if expect and (opts.get("validate_args", True) is False or (not row.validates and expect == ("scores",))):
        return  # the contract for unvalidated invalid input is undefined
    diff = row.differentiable(ordering) and not expect
    if diff:
        x.s.requires_grad_(True)
    ordering_obj = build_ordering(ordering, case, mode)
    try:
        with mode_context(mode):
            result = invoke(row, x, ordering_obj, opts)
            ieee = row.ieee(ctx) if row.ieee is not None else False
            outs = row.out(result, ctx) if (row.out is not None and not expect) else []
    except ValueError as e:
        if expect:
            if not _message_names(str(e), expect):
                raise Violation("ValueError without argument name",
                                f"invalid input ({' or '.join(expect)}) raised ValueError not naming "
                                f"{' or '.join('`%s`' % n for n in expect)}: {e}")
            return
        raise Violation("ValueError on valid input", f"{type(e).__name__}: {e}")
    except Violation:
        raise
    except Exception as e:  # noqa: BLE001 - any other exception breaks the contract
        tb_last = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{tb_last.filename.split('torchfair/')[-1]}:{tb_last.lineno}"
        what = "invalid input" if expect else "valid input"
        raise Violation(f"{type(e).__name__} on {what}", f"{type(e).__name__} at {where}: {e}")
    if expect:
        raise Violation("invalid input accepted", f"expected ValueError naming "
                                                  f"{' or '.join('`%s`' % n for n in expect)}; got a result")
    if ieee:
        return
    check_outputs(outs, ctx)
    if row.extra is not None:
        row.extra(result, ctx)
    if diff:
        leaf = x.s
        real = x.m if not x.filled else torch.ones_like(x.m)
        check_gradients(outs, leaf, real, ctx)


# ============================================================================================== out helpers
def val(lo=-INF, hi=INF, label="value", zero_invalid=True):
    """Result ``value`` or ``(value, valid)``."""

    def f(res, ctx):
        if isinstance(res, tuple) and not hasattr(res, "_fields") and len(res) == 2 and \
                isinstance(res[1], Tensor) and res[1].dtype == torch.bool:
            return [Out(label, res[0], res[1], lo, hi, zero_invalid)]
        return [Out(label, res, None, lo, hi)]

    return f


def declared_out(m: Measure):
    """The checked outputs of a declared measure: its pieces (:func:`tester.pieces`: the value, or the record
    fields that have a range) with their declared range under the call's options, and a ``pair`` matrix's gaps
    ``M - M^T`` (valid both ways)."""

    def f(res, ctx):
        given = {k: v for k, v in ctx.opts.items() if v is not OMIT}
        out = []
        for name, (v, ok) in pieces(m, res).items():
            if m.output == "record" and m.field_range(name, given) is None:
                continue
            lo, hi = declared_range(m, name, given, max_rel(ctx))
            out.append(Out("M" if m.output == "pair" else name, v, ok, lo, hi))
            if m.output == "pair":
                gv = ok & ok.transpose(-1, -2)
                d = v - v.transpose(-1, -2)
                out.append(Out("M - M^T", torch.where(gv, d, torch.zeros_like(d)), gv, lo - hi, hi - lo))
        return out

    return f


def per_item_positions_hi(ctx: Ctx):
    """``n_b - 1`` broadcast over the items of each list."""
    _, _, _, m = ctx.x.batched
    n = m.sum(-1, keepdim=True).to(torch.float64) - 1
    return n.expand(m.shape).clamp(min=0)


def n_max(ctx):
    return float(ctx.N)


def max_rel(ctx):
    return max(ctx.case.max_relevance(), 0.0)


def _opt(opts, name, default):
    v = opts.get(name, OMIT)
    return default if v is OMIT else v


# ============================================================================================== the table
def frt_regular(ctx: Ctx, need_rel: bool = False) -> bool:
    """FairRankTune's numbers are IEEE (nan/inf) on degenerate input, as FRT's: the documented domain where
    values are finite is every list holding every group of ``[0, G)``, no unknown items, hard ids, and (for the
    relevance metrics) positive relevance in every group."""
    case = ctx.case
    if case.soft or case.G < 2:
        return False
    for b in range(case.B):
        ids = [case.groups[b][i] for i in range(case.N) if case.mask[b][i]]
        if not ids:
            continue
        if any(g < 0 for g in ids) or set(ids) != set(range(case.G)):
            return False
        if need_rel:
            for gg in range(case.G):
                if sum(case.relevance[b][i] for i in range(case.N) if case.mask[b][i] and case.groups[b][i] == gg) \
                        <= 1e-20:
                    return False
    if not all(any(r) for r in case.mask):
        return False
    return True


def _frt_out(combo_default="MinMaxRatio"):
    def f(res, ctx):
        combo = _opt(ctx.opts, "combo", combo_default)
        lo, hi = 0.0, INF
        if combo == "MinMaxRatio":
            hi = 1.0
        elif combo == "MaxMinRatio":
            lo = 1.0
        # FRT's ratio aggregators divide by the smallest / largest group value: x / 0 = inf, 0 / 0 = nan (numpy)
        ieee = combo in ("MinMaxRatio", "MaxMinRatio") and bool((res.per_group.detach() == 0).any())
        return [Out("value", res.value, None, lo, hi, allow_nonfinite=ieee),
                Out("per_group", res.per_group, None, 0.0, INF)]

    return f


def _frt_call(fn, extra_pos=()):
    def call(x, ordering, opts):
        kw = {k: opt_value(v) for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
        if ordering is not None and "ordering" not in kw:
            kw["ordering"] = ordering
        if x.num_groups is not None and not x.case.soft:
            kw["num_groups"] = x.num_groups
        pos = []
        for p in extra_pos:
            if p == "relevance":
                pos.append(x.r)
            elif p == "ctr":
                pos.append(_ctr(x))
        return fn(x.s, x.g, *pos, mask=x.m, **kw)

    return call


def _ctr(x: X) -> Tensor:
    return torch.where(x.r > 0, torch.full_like(x.r, 0.5), torch.zeros_like(x.r))


def _frt_rel_expect(ctx: Ctx):
    r, m = ctx.x.r, ctx.x.m
    real = r[m].double()
    if ((real < 0) | (real > 1)).any():
        return ("relevance",)
    return None


def _membership(x: X) -> Tensor:
    s, r, g, m = x.batched
    if g.is_floating_point():
        memb = torch.where(m[..., None], g, torch.zeros((), dtype=g.dtype)).to(s.dtype if s.dtype == torch.float64
                                                                               else torch.float32)
        return memb
    G = max(x.G, 1)
    known = (g >= 0) & (g < G) & m
    safe = torch.where(known, g, torch.zeros_like(g))
    dt = torch.float64 if s.dtype == torch.float64 else torch.float32
    return torch.nn.functional.one_hot(safe, G).to(dt) * known[..., None].to(dt)


#: browsing models every ordering row reads exposures through (position-based; relevance-dependent ones apart)
ORDERING_BROWSINGS = (("RBP(0.8)", lambda: tb.RBP(0.8)), ("Logarithmic()", lambda: tb.Logarithmic()),
                      ("TopK(RBP(0.9), 2)", lambda: tb.TopK(tb.RBP(0.9), 2)))
ORDERING_CASCADES = (("Cascade(0.9, max_grade=4.0)", lambda: tb.Cascade(0.9, max_grade=4.0)),
                     ("TopK(Cascade(0.7), 3)", lambda: tb.TopK(tb.Cascade(0.7), 3)))


def _ordering_call(x: X, ordering, opts):
    """Every quantity of the ordered batch: expected positions, exposures under position-based and cascade browsing
    (the relevance as given: padded slots hold anything), the pair contractions and the position matrix; an
    ordering without a strict order of tied items (``Hard(average)``) or without pair probabilities
    (``DoublyStochastic``) must refuse cascade browsing (``ValueError``)."""
    s, r, g, m = x.batched
    ob = ordering(s, m)
    ones = m.to(torch.float64 if s.dtype == torch.float64 else torch.float32).unsqueeze(-1)
    res = {"positions": ob.expected_positions(), "position_matrix": ob.position_matrix()}
    for label, F in ORDERING_BROWSINGS:
        res[f"exposure({label})"] = ob.exposure(F())
    strict = not (isinstance(ob, HardOrderedBatch) and ob.ties == "average")
    pairs = not isinstance(ob, DoublyStochasticOrderedBatch)
    if pairs:
        res["contract(above)"] = ob.contract(ones, which="above")[..., 0]
        res["contract(joint, RBP(0.8))"] = ob.contract(ones, which="joint", browsing=tb.RBP(0.8))[..., 0]
        if strict:
            res["contract(joint, Cascade(0.8, max_grade=4.0))"] = ob.contract(
                ones, which="joint", browsing=tb.Cascade(0.8, max_grade=4.0), relevance=r)[..., 0]
    for label, F in ORDERING_CASCADES:
        if strict and pairs:
            res[f"exposure({label})"] = ob.exposure(F(), r)
        else:
            try:
                ob.exposure(F(), r)
                res[f"refused {label}"] = False
            except ValueError:
                res[f"refused {label}"] = True
    return res


def _ordering_out(res, ctx):
    s, r, g, m = ctx.x.batched
    nhi = per_item_positions_hi(ctx)
    out = [Out("expected_positions", res["positions"], m, 0.0, nhi, zero_invalid=False),
           Out("position_matrix", res["position_matrix"], None, 0.0, 1.0)]
    for k, v in res.items():
        if k.startswith("exposure("):
            out.append(Out(k, v, m, 0.0, 1.0))
        elif k.startswith("contract("):
            out.append(Out(k, v, m, 0.0, nhi))
    return out


#: orderings whose expected positions are a (soft) permutation of 0..n-1 (NeuralSort's and SoftSort's rows of the
#: relaxed permutation matrix are not doubly stochastic, a few Sinkhorn iterations only nearly: their positions
#: need not sum to n (n - 1) / 2); every configuration of theirs (name prefix)
POSITION_SUM_EXEMPT = ("NeuralSort", "SoftSort")


def _ordering_extra(res, ctx):
    """The positions of the real items sum to ``n (n - 1) / 2``; the position matrix is 0 at padded items and at
    positions beyond the list; cascade browsing is refused where the order of tied items is not strict."""
    _, _, _, m = ctx.x.batched
    n = m.sum(-1).double()
    tol = 1e-3 * max(1, ctx.N)
    if not ctx.ordering.startswith(POSITION_SUM_EXEMPT):
        total = torch.where(m, res["positions"].double(), torch.zeros((), dtype=torch.float64)).sum(-1)
        bad = ~((total - n * (n - 1) / 2).abs() <= tol + 1e-4 * (n * (n - 1) / 2))
        if bad.any():
            raise Violation("positions not a permutation",
                            f"expected positions of the real items sum to {total[bad].tolist()}, not n (n - 1) / 2 = "
                            f"{(n * (n - 1) / 2)[bad].tolist()}")
    R = res["position_matrix"]
    beyond = torch.arange(R.shape[-2])[None, :] >= n[:, None]
    if not bool((R.transpose(1, 2)[~m] == 0).all()) or not bool((R[beyond] == 0).all()):
        raise Violation("position matrix nonzero on padding",
                        "position_matrix is not 0 at a padded item or at a position beyond the list")
    for label, _ in ORDERING_CASCADES:
        if res.get(f"refused {label}") is False:
            raise Violation("cascade accepted without a strict order",
                            f"{ctx.ordering}: exposure({label}, relevance) gave a result; cascade browsing needs a "
                            f"strict order of tied items and pair probabilities (ValueError expected)")


_ORDERING_CODE = """ob = o(s, m)
ones = m.float().unsqueeze(-1)
pos, R = ob.expected_positions(), ob.position_matrix()
e = [ob.exposure(F) for F in (RBP(0.8), Logarithmic(), TopK(RBP(0.9), 2))]
e_cascade = [ob.exposure(F, r) for F in (Cascade(0.9, max_grade=4.0), TopK(Cascade(0.7), 3))]
above = ob.contract(ones, which='above')
joint = [ob.contract(ones, which='joint', browsing=F, relevance=r) for F in (RBP(0.8), Cascade(0.8, max_grade=4.0))]"""


def _browsing_positions(x: X) -> Tensor:
    """Real-valued positions in ``[0, n - 1]`` that depend on the scores (gradients flow)."""
    s, _, _, m = x.batched
    n = m.sum(-1, keepdim=True).to(torch.float32 if s.dtype != torch.float64 else torch.float64)
    sf = torch.where(m, s, torch.zeros((), dtype=s.dtype)).to(n.dtype)
    return torch.sigmoid(sf) * (n - 1).clamp(min=0)


def _browsing_call(cls_code):
    def call(x, ordering, opts):
        kw = {k: opt_value(v) for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
        model = eval(cls_code, _NS)(**kw) if not cls_code.startswith("get_browsing") else \
            tb.get_browsing(opt_value(opts.get("spec", "rbp")))
        s, r, g, m = x.batched
        k = _browsing_positions(x)
        out = {"weight": model.weight(k) * m.to(k.dtype), "weights": model.weights(x.case.N, dtype=k.dtype),
               "cumulative": model.cumulative(m.sum(-1).to(k.dtype), x.case.N)}
        if model.relevance_dependent:
            # relevance of the items in ranked order, made to depend on the scores (soft sorting does this)
            rr = torch.where(m, r, torch.zeros((), dtype=r.dtype)).to(k.dtype)
            rel_sorted = rr * (torch.sigmoid(torch.where(m, s, torch.zeros((), dtype=s.dtype)).to(k.dtype)) + 0.5)
            out["item_exposure"] = model.item_exposure(rel_sorted) * m.to(k.dtype)
            out["model"] = model  # for the extra checks (_cascade_extra)
        return out

    return call


#: grades of every size a cascade must browse by (a float16 input holds up to 6.5e4)
CASCADE_GRADES = (0.0, 0.5, 1.0, 4.0, 10.0, 130.0, 300.0, 1e4, 6e4)


def _cascade_extra(res, ctx):
    """A relevance-dependent model's exposure never exceeds the position-based weights (``gamma ** k`` for a
    cascade: a stop only lowers it) and does not increase along the list, for the case's relevance and for grades
    up to 6e4 in the case's input dtype (finite, with finite gradients)."""
    model = res.get("model")
    if model is None:
        return
    dt = INPUT_DTYPE[ctx.mode]
    grades = torch.tensor([CASCADE_GRADES, CASCADE_GRADES[::-1]], dtype=torch.float64).to(dt).requires_grad_(True)
    e = model.item_exposure(grades)
    (gr,) = torch.autograd.grad(e.double().sum(), grades)
    w = model.weights(len(CASCADE_GRADES), dtype=torch.float64)
    tol = tolerance(ctx.mode)
    for what, v, ok in (("on grades up to 6e4", e.double(), None),
                        ("on the case's relevance", res["item_exposure"].double(), ctx.x.batched[3])):
        if not bool(torch.isfinite(v).all()):
            raise Violation("non-finite value", f"item_exposure {what}: {v.tolist()}")
        wv = w[:v.shape[-1]] if v.shape[-1] <= w.shape[-1] else model.weights(v.shape[-1], dtype=torch.float64)
        if bool((v < -tol).any()) or bool((v > wv + tol).any()):
            raise Violation("out of range", f"item_exposure {what} {v.tolist()} outside [0, weights(n) = "
                                            f"{wv.tolist()}]")
        rising = v[..., 1:] > v[..., :-1] + tol
        if ok is not None:  # along the real items (padded slots are 0)
            rising = rising & ok[..., 1:] & ok[..., :-1]
        if bool(rising.any()):
            raise Violation("exposure increases down the list", f"item_exposure {what}: {v.tolist()}")
    if not bool(torch.isfinite(gr).all()):
        raise Violation("non-finite gradient", f"gradient of item_exposure on grades up to 6e4 ({dt}): {gr.tolist()}")


def _browsing_out(hi_weight=1.0):
    def f(res, ctx):
        out = [Out("weight(k)", res["weight"], None, 0.0, hi_weight),
               Out("weights(n)", res["weights"], None, 0.0, hi_weight),
               Out("cumulative(n)", res["cumulative"], None, 0.0, ctx.N * hi_weight)]
        if "item_exposure" in res:
            out.append(Out("item_exposure", res["item_exposure"], None, 0.0, 1.0))
        return out

    return f


def _groups_needed(measure: str) -> int:
    """How many groups a declared measure needs with its default options (``protected=1`` needs 2; PreF's
    ``protected``, unused at its defaults (:data:`MEASURE_HARNESS`), needs none)."""
    m = MEASURES.get(measure)
    unused = MEASURE_HARNESS.get(measure, {}).get("unused", lambda o: set())({})
    ids = [m.default(p) for p in ("protected", "reference", "group") if p not in unused] if m else []
    return max([1] + [d + 1 for d in ids if isinstance(d, int) and not isinstance(d, bool)])


def _evaluate_measures(case: Case) -> List[str]:
    """Every registered measure that is defined for the case's number of groups and membership kind."""
    names = [n for n in tev.available_measures() if _groups_needed(n) <= case.G]
    if case.soft:
        names = [n for n in names if n not in MEASURES or MEASURES[n].accepts_soft()]
    return names


def _metric_expect(cls):
    def expect(ctx):
        if _groups_needed(cls.measure) > ctx.case.G:  # e.g. DP(num_groups=1): protected=1 absent
            return ("protected", "group", "groups", "num_groups")
        return None

    return expect


def _evaluate_call(x, ordering, opts):
    s, r, g, m = x.batched
    kw = {k: opt_value(v) for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
    measures = _evaluate_measures(x.case)
    if opts.get("ordering") == "average":  # err's cascade needs a strict order (documented ValueError)
        measures = [mm for mm in measures if mm != "err"]
    if "mpc" in measures:
        measures = [mm if mm != "mpc" else "mpc:eps=0.5" for mm in measures]
    return tev.evaluate_lists({"scores": s, "relevance": r, "groups": g, "mask": m}, measures,
                        num_groups=x.G, **kw)


def _evaluate_extra(table, ctx):
    import numpy as np
    vals = np.asarray(table.values, dtype=np.float64)
    if np.isinf(vals).any():
        raise Violation("non-finite value", f"evaluate: infinite per-list values in columns "
                                            f"{[c for c, col in zip(table.columns, vals.T) if np.isinf(col).any()]}")
    for c in table.columns:
        mean, n = table.mean[c], table.n_valid[c]
        lo, hi = table.ci_low[c], table.ci_high[c]
        if n > 0 and ctx.opts.get("bootstrap", 0) and not (lo <= mean + 1e-9 and mean <= hi + 1e-9):
            raise Violation("out of range", f"evaluate: column {c!r}: mean {mean} outside its interval [{lo}, {hi}]")
        if n > 0 and not math.isfinite(mean):
            raise Violation("non-finite value", f"evaluate: mean of column {c!r} is {mean} over {n} valid lists")
        if n == 0 and not (mean is None or (isinstance(mean, float) and math.isnan(mean))):
            raise Violation("invalid entry not 0", f"evaluate: column {c!r} has no valid list but mean {mean}")


def _compute_columns_call(x, ordering, opts):
    s, r, g, m = x.batched
    measures = _evaluate_measures(x.case)
    measures = [mm if mm != "mpc" else "mpc:eps=0.5" for mm in measures]
    return tev.compute_columns(s, r, g, m, measures, num_groups=x.G)


def _columns_out(res, ctx):
    return [Out(name, v, ok, check_dtype=False) for name, (v, ok) in res.items()]


def _metric_call(cls, extra_kw=None):
    def call(x, ordering, opts):
        s, r, g, m = x.batched
        kw = dict(extra_kw or {})
        metric = cls(num_groups=x.G, **kw)
        metric.update(s, r, g, m)
        return metric.compute()

    return call


def _metric_out(res, ctx):
    if isinstance(res, Tensor):
        return [Out("compute()", res, None, check_dtype=False)]
    return [Out(k, v, None, check_dtype=False) for k, v in res.items()]


def _mono_expect(ctx: Ctx):
    if not ctx.case.known_ids():  # nothing to test: no item of known group
        return ("groups", "protected")
    return None


def _err_expect(ctx: Ctx):
    mg = ctx.opts.get("max_grade", OMIT)
    if mg is not OMIT and mg is not None and ctx.case.max_relevance() > mg:
        return ("relevance", "max_grade")
    return None


def _one_sided_expect(ctx: Ctx):
    if ctx.opts.get("mode") == "one_sided" and ctx.opts.get("protected", OMIT) in (OMIT, None):
        return ("protected",)
    return None


#: the pair-selection threshold the MPC rows pass (one is required): ``_thr`` names it
MPC_THRESHOLDS = ("eps", "k", "quantile")


def _mpc_call(fn, pairs_only=False):
    def call(x, ordering, opts):
        kw = {k: opt_value(v) for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
        thr = opts.get("_thr", "eps")
        if not any(k in kw for k in ("eps", "k", "quantile")):
            kw[thr] = {"eps": 0.5, "k": 3, "quantile": 0.5}[thr]
        if fn is tm.matched_pair_calibration and kw.get("ci") == "bootstrap":
            kw["generator"] = torch.Generator().manual_seed(0)
        if fn is tm.matched_pairs:
            kw.pop("ci", None)
        if ordering is not None and "ordering" not in kw:
            kw["ordering"] = ordering
        if x.num_groups is not None and not x.case.soft:
            kw["num_groups"] = x.num_groups
        res = fn(x.s, x.r, x.g, mask=x.m, **kw)
        if pairs_only:
            return tm.mpc_cluster_variance(res, cluster=opts.get("_cluster", "item"))
        return res

    return call


def _pairs_out(res, ctx):
    rng = max_rel(ctx)
    return [Out("gap", res.gap, None, 0.0, INF), Out("diff", res.diff, None, -rng, rng),
            Out("weight", res.weight, None, 0.0, INF)]


def _expeval_call(fn_rankings=False):
    def call(x, ordering, opts):
        s, r, g, m = x.batched
        key = torch.where(m, s.double(), torch.full_like(s.double(), -INF))
        order = torch.sort(key, dim=-1, descending=True, stable=True).indices
        ranks = torch.empty_like(order).scatter_(-1, order, torch.arange(1, s.shape[-1] + 1).expand_as(order))
        if x.s.dim() == 1:
            ranks = ranks[0]
        if fn_rankings:
            return cee.rankings_from_ranks(ranks, x.m)
        kw = {k: opt_value(v) for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
        if opts.get("_groups"):
            kw["groups"] = x.g
            if x.num_groups is not None:
                kw["num_groups"] = x.num_groups
        return cee.expeval(ranks, x.r, mask=x.m, **kw)

    return call


def _expeval_out(res, ctx):
    # expeval computes in float64 on purpose ("expeval computes in Python floats"): no dtype rule
    return [Out(f, getattr(res, f), None, 0.0, INF, check_dtype=False)
            for f in ("loss", "disparity", "relevance", "target_norm")]


def _expeval_expect(ctx):
    if ctx.case.soft and ctx.opts.get("_groups"):
        return ("groups",)
    return None


def _rankings_extra(res, ctx):
    _, _, _, m = ctx.x.batched
    rk = res if res.dim() == 2 else res.unsqueeze(0)
    N = m.shape[-1]
    if not torch.equal(torch.sort(rk, -1).values, torch.arange(N).expand_as(rk)):
        raise Violation("wrong result", f"rankings_from_ranks did not return permutations: {rk.tolist()}")


def _scores_from_ranking_call(x, ordering, opts):
    s, r, g, m = x.batched
    key = torch.where(m, s.double(), torch.full_like(s.double(), -INF))
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices
    out = to.scores_from_ranking(order if x.s.dim() == 2 else order[0])
    return out, order


def _scores_from_ranking_extra(res, ctx):
    out, order = res
    o2 = out if out.dim() == 2 else out.unsqueeze(0)
    back = torch.sort(o2.double(), dim=-1, descending=True, stable=True).indices
    if not torch.equal(back, order):
        raise Violation("wrong result", "scores_from_ranking's scores do not sort back to the ranking")


def _sample_rankings_call(x, ordering, opts):
    s, r, g, m = x.batched
    return to.sample_rankings(s, m, 3, torch.Generator().manual_seed(0))


def _sample_rankings_extra(res, ctx):
    _, _, _, m = ctx.x.batched
    S, B, N = res.shape
    if not torch.equal(torch.sort(res, -1).values, torch.arange(N).expand(S, B, N)):
        raise Violation("wrong result", "sample_rankings rows are not permutations")
    n = m.sum(-1)
    realpos = m.unsqueeze(0).expand(S, B, N).gather(-1, res)
    want = torch.arange(N)[None, None, :] < n[None, :, None]
    if not torch.equal(realpos, want.expand(S, B, N)):
        raise Violation("wrong result", "sample_rankings puts a padded item before a real item")


def _log_probability_call(x, ordering, opts):
    s, r, g, m = x.batched
    rk = to.sample_rankings(s.detach(), m, 3, torch.Generator().manual_seed(0))
    return to.log_probability(s, rk, m)


def _all_rankings_call(x, ordering, opts):
    n = min(x.case.N, 5)
    return to.all_rankings(n)


def _all_rankings_extra(res, ctx):
    n = min(ctx.case.N, 5)
    if res.shape != (math.factorial(n), n) or len({tuple(r) for r in res.tolist()}) != math.factorial(n):
        raise Violation("wrong result", f"all_rankings({n}) has shape {tuple(res.shape)} / duplicates")


def _isotonic_call(x, ordering, opts):
    s, _, _, m = x.batched
    y = s[m][: x.case.N]
    if y.numel() == 0:
        y = torch.zeros(1, dtype=s.dtype)
    kw = {k: v for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
    return tm.isotonic_regression(y, **kw), y


def _isotonic_out(res, ctx):
    fit, y = res
    finite = torch.isfinite(y)
    lo = y[finite].min().item() if finite.any() else -INF
    hi = y[finite].max().item() if finite.any() else INF
    return [Out("fit", fit, None, lo, hi, check_dtype=False)]


def _isotonic_expect(ctx):
    s, _, _, m = ctx.x.batched
    if not torch.isfinite(s[m]).all():
        return ("y",)
    return None


def _prefix_mass_call(x, ordering, opts):
    s, r, g, m = x.batched
    ob = ordering(s, m)
    return tm.prefix_mass(ob, _membership(x))


def _pairwise_gap_call(x, ordering, opts):
    kw = _kwargs(ROW_INDEX["metrics.dips"], x, ordering, {})
    M, valid = tm.dips(x.s, x.r, x.g, **kw)
    return tm.pairwise_gap(M)


def _accuracy_gaps_call(x, ordering, opts):
    kw = _kwargs(ROW_INDEX["metrics.pairwise_accuracy"], x, ordering, {})
    A, valid = tm.pairwise_accuracy(x.s, x.r, x.g, **kw)
    okw = {k: v for k, v in opts.items() if not k.startswith("_") and v is not OMIT}
    return tm.accuracy_gaps(A, **okw)


def _accuracy_gaps_expect(ctx):
    # accuracy_gaps reads a [.., G, G] matrix: ids outside it are invalid (the matrix's G is the batch's)
    G = ctx.case.G if (ctx.case.pass_num_groups or ctx.case.soft) else (max(ctx.case.known_ids(), default=0) + 1)
    p, r = _opt(ctx.opts, "protected", 1), _opt(ctx.opts, "reference", 0)
    if p >= G:
        return ("protected",)
    if r >= G:
        return ("reference",)
    if p == r:
        return ("protected", "reference")
    return None


def _misallocation_norm_call(x, ordering, opts):
    kw = _kwargs(ROW_INDEX["metrics.exposure_misallocation"], x, ordering, {})
    kw["return_valid"] = False
    delta = tm.exposure_misallocation(x.s, x.r, x.g, **kw)
    return tm.misallocation_norm(delta, p=opts.get("p", 1.0) if opts.get("p", OMIT) is not OMIT else 1.0)


def _reduce_loss_call(x, ordering, opts):
    s, r, g, m = x.batched
    per = torch.where(m, s, torch.zeros((), dtype=s.dtype)).sum(-1) / 1e18
    red = opts.get("reduction", OMIT)
    return tl.reduce_loss(per, m.any(-1), "mean" if red is OMIT else red)


def _regularizer_call(x, ordering, opts):
    fair = opts.get("_fairness", "DIPSLoss")
    kw = {}
    if ordering is not None:
        kw["ordering"] = ordering
    if x.num_groups is not None and not x.case.soft:
        kw["num_groups"] = x.num_groups
    fl = getattr(tl, fair)(**kw)
    lam = _opt(opts, "lam", 1.0)
    schedule = _opt(opts, "schedule", "constant")
    reg = tl.FairnessRegularizer(tl.ListNetLoss(), fl, lam=lam, schedule=schedule,
                                 warmup_steps=2 if schedule == "linear" else 0)
    reg.step()
    return reg(x.s, x.r, x.g, x.m)


def _regularizer_expect(ctx: Ctx) -> Optional[Tuple[str, ...]]:
    """The fairness term's own rule: a default ``protected`` / ``reference`` id it uses must be below the number of
    groups the call gives it (``num_groups``, or the soft membership's columns); PairwiseAccuracyGapLoss's
    ``protected=1`` with one group is invalid input, refused naming ``protected``."""
    cls = getattr(tl, ctx.opts.get("_fairness", "DIPSLoss"))
    G = ctx.case.G if (ctx.case.soft or ctx.case.pass_num_groups) else None
    if G is None:
        return None
    sig = inspect.signature(cls.__init__).parameters
    unused = {"protected"} if cls is tl.DIPSLoss else set()  # DIPS reads it in mode="one_sided" only
    ids = [sig[p].default for p in ("protected", "reference") if p in sig and p not in unused]
    if any(isinstance(v, int) and not isinstance(v, bool) and v >= G for v in ids):
        return ("protected", "reference", "groups", "num_groups")
    return None


def _frt_agg_call(fn):
    def call(x, ordering, opts):
        s, r, g, m = x.batched
        vals = torch.where(m, r, torch.zeros((), dtype=r.dtype)).sum(0).to(torch.float64) + 1.0  # [N], > 0
        return fn(vals)

    return call


def _frt_aggregate_call(x, ordering, opts):
    s, r, g, m = x.batched
    vals = torch.where(m, r, torch.zeros((), dtype=r.dtype)).sum(0).to(torch.float64) + 1.0
    return frt.aggregate(vals, opts.get("combo", "MinMaxRatio") if opts.get("combo", OMIT) is not OMIT
                         else "MinMaxRatio")


def _agg_out(lo=0.0, hi=INF):
    return lambda res, ctx: [Out("value", res, None, lo, hi, check_dtype=False)]


#: the functional form of every loss module: the module rows read their parameters from it (modules take
#: ``**kwargs``), so they keep working however the modules are declared
MODULE_FUNCTION = {tl.DIPSLoss: tl.dips_loss, tl.ExposureMisallocationLoss: tl.exposure_misallocation_loss,
                   tl.PairwiseAccuracyGapLoss: tl.pairwise_accuracy_gap_loss, tl.DELTRLoss: tl.deltr_loss,
                   tl.FairPGRankLoss: tl.fair_pg_rank_loss, tl.PairwiseCorrelationLoss: tl.pairwise_correlation_loss,
                   tl.ListNetLoss: tl.listnet_loss, tl.ListMLELoss: tl.listmle_loss,
                   tl.ApproxNDCGLoss: tl.approx_ndcg_loss, tl.NeuralNDCGLoss: tl.neural_ndcg_loss,
                   tl.PLNDCGLoss: tl.pl_ndcg_loss, tl.LambdaNDCGLoss: tl.lambda_ndcg_loss}


# ============================================================================================== declared measures
#: the contract family of each measure module
MODULE_FAMILY = {"pairwise": "pairwise", "exposure": "exposure", "disparity": "exposure", "prefix": "prefix",
                 "utility": "utility", "calibration": "calibration"}


def measure_args(m: Measure) -> Tuple[str, ...]:
    """The positional data of a declared measure: the scores and the tensors it needs."""
    return ("scores",) + tuple(d for d in ("relevance", "groups") if d in m.needs)


def measure_grid(m: Measure) -> Dict[str, Sequence[Any]]:
    """The options a declared measure's row draws: ``_groups`` (passed or not) for optional groups, each declared
    option (the function's default first, then the declared values), and every reduction when it has one."""
    grid: Dict[str, Sequence[Any]] = {"_groups": (False, True)} if "groups" in set(m.data) - set(m.needs) else {}
    grid.update({k: (OMIT,) + tuple(v) for k, v in m.options.items()})
    if "reduction" in inspect.signature(m.fn).parameters:
        grid["reduction"] = REDUCTIONS
    return grid


def _pref_unused(opts):
    return {"protected"} if _opt(opts, "delta", "kl") == "kl" else set()


def _ee_sizes(out):
    """Expected exposure: besides the documented non-negativity, each field is bounded by the list size (every
    position's exposure is at most 1): ``N^2`` (``4 N^2`` for the loss), times ``B`` for a summed batch."""

    def f(res, ctx):
        k = {"loss": 4.0}
        return [replace(o, hi=k.get(o.label, 1.0) * ctx.N ** 2 * ctx.B) for o in out(res, ctx)]

    return f


def _with_ci_width(out):
    return lambda res, ctx: out(res, ctx) + [Out("ci_high - ci_low", res.ci_high - res.ci_low, None, 0.0, INF)]


_STEPS = ({}, {"step": 1}, {"step": 5})  # the default step (10), every prefix, and the whole sweep list (5 items)
#: what the harness adds to the row of a declared measure: the option sets of the deterministic sweep, its own
#: rules for invalid input, a custom call (MPC needs one pair-selection threshold), tighter bounds on the output
MEASURE_HARNESS: Dict[str, Dict[str, Any]] = {
    "rnd": dict(sweep_opts=_STEPS), "rrd": dict(sweep_opts=_STEPS), "rkl": dict(sweep_opts=_STEPS),
    "pref": dict(sweep_opts=_STEPS + ({"delta": "nd", "step": 1},), invalid_opts={"protected": {"delta": "nd"}},
                 unused=_pref_unused),
    "skew": dict(sweep_opts=({}, {"k": 1})),
    "err": dict(expect=_err_expect, cascade=True),
    "expected_exposure": dict(out=_ee_sizes),
    "mpc": dict(call=_mpc_call(tm.matched_pair_calibration), options={"_thr": MPC_THRESHOLDS}, out=_with_ci_width,
                grad="never", invalid_params=("group", "eps", "k", "quantile", "ci", "level", "browsing", "ordering",
                                              "num_groups"),
                code="out = matched_pair_calibration(s, r, g, mask=m, ordering=o, {opts})  # + the _thr threshold"),
}


def measure_row(m: Measure) -> Row:
    """The contract row of a declared measure, from its declaration (data, options, range, soft membership,
    expectation) and :data:`MEASURE_HARNESS`."""
    extra = dict(MEASURE_HARNESS.get(m.name, {}))
    params = inspect.signature(m.fn).parameters
    soft = m.soft_groups if isinstance(m.soft_groups, bool) else \
        (lambda o: m.accepts_soft({k: v for k, v in o.items() if v is not OMIT}))
    out = declared_out(m)
    return Row(f"metrics.{m.fn.__name__}", m.fn, MODULE_FAMILY[m.fn.__module__.rsplit(".", 1)[-1]],
               args=measure_args(m), options={**extra.pop("options", {}), **measure_grid(m)},
               out=extra.pop("out", lambda o: o)(out), soft=soft, linear=m.expectation,
               grad=extra.pop("grad", "ordering" if "ordering" in params else "always"),
               pairwise=m.fn.__module__.endswith(".pairwise"), **extra)


def measure_rows() -> List[Row]:
    return [measure_row(m) for m in MEASURES.values()]


def build_rows() -> List[Row]:
    """Every row: one generated from each declared measure (:func:`measure_rows`), then the hand-written rows of
    the other public functions."""
    rows: List[Row] = measure_rows()
    add = rows.append
    # ------------------------------------------------------------------------------------------- pairwise
    P = "pairwise"
    add(Row("metrics.individual_dissatisfaction", tm.individual_dissatisfaction, P, args=("scores", "relevance"),
            options={"_groups": (False, True), "browsing": BROWSINGS, "tie_weight": (OMIT, 0.0, 1.0)},
            out=val(0.0, n_max), pairwise=True, linear=True))
    add(Row("metrics.pairwise_gap", tm.pairwise_gap, P, call=_pairwise_gap_call, out=val(-1.0, 1.0),
            pairwise=True, orderings=ORDERINGS,
            code="M, valid = dips(s, r, g, mask=m, ordering=o, return_valid=True)\nout = pairwise_gap(M)"))
    add(Row("metrics.accuracy_gaps", tm.accuracy_gaps, P, call=_accuracy_gaps_call, orderings=ORDERINGS,
            options={"protected": (OMIT, 0, 1, 2), "reference": (OMIT, 0, 1)},
            out=lambda res, ctx: [Out("inter", res[0], None, -1.0, 1.0), Out("intra", res[1], None, -1.0, 1.0)],
            pairwise=True, expect=_accuracy_gaps_expect, invalid_params=("protected", "reference"),
            code="A, valid = pairwise_accuracy(s, r, g, mask=m, ordering=o, return_valid=True)\n"
                 "out = accuracy_gaps(A, {opts})"))
    # ------------------------------------------------------------------------------------------- exposure
    E = "exposure"
    add(Row("metrics.misallocation_norm", tm.misallocation_norm, E, call=_misallocation_norm_call,
            orderings=ORDERINGS, options={"p": (OMIT, 2.0)}, out=val(0.0, 2.0), invalid_params=("p",),
            exempt_invalid={"p=1.5": "any norm order p >= 1 is valid"},
            code="delta = exposure_misallocation(s, r, g, mask=m, ordering=o)\n"
                 "out = misallocation_norm(delta, {opts})"))
    add(Row("metrics.individual_misallocation", tm.individual_misallocation, E, args=("scores", "relevance"),
            options={"target": ("ea", "ee", "ea-dp"), "browsing": BROWSINGS},
            out=val(lambda c: -float(c.N), n_max), linear=True))
    add(Row("metrics.ideal_exposure", tm.ideal_exposure, E, args=("relevance",),
            options={"browsing": BROWSINGS}, out=val(0.0, 1.0), grad="never"))
    # the log ratios: the options of the ratios, no range
    for fn, ratio in ((tm.log_dp, "dp"), (tm.log_eur, "eur"), (tm.log_rur, "rur")):
        add(Row(f"metrics.{fn.__name__}", fn, E, args=measure_args(MEASURES[ratio]), options=measure_grid(
            MEASURES[ratio]), out=val(), params_of=MEASURES[ratio].fn))
    # ------------------------------------------------------------------------------------------- prefix
    add(Row("metrics.prefix_mass", tm.prefix_mass, "prefix", call=_prefix_mass_call, validates=False,
            orderings=tuple(o for o in ORDERINGS),
            out=lambda res, ctx: [Out("C", res, None, 0.0, n_max)],
            code="ob = o(s, m)\nmemb = torch.nn.functional.one_hot(g.clamp(min=0), {G}).float() * "
                 "((g >= 0) & m)[..., None]\nout = prefix_mass(ob, memb)"))
    # ------------------------------------------------------------------------------------------- calibration
    C = "calibration"
    mpc_opts = measure_grid(MEASURES["mpc"])
    add(Row("metrics.matched_pairs", tm.matched_pairs, C, call=_mpc_call(tm.matched_pairs),
            options={"_thr": MPC_THRESHOLDS, **{k: v for k, v in mpc_opts.items() if k != "ci"}}, out=_pairs_out,
            grad="never", soft=False,
            invalid_params=("group", "eps", "k", "quantile", "browsing", "ordering", "num_groups"),
            code="out = matched_pairs(s, r, g, mask=m, ordering=o, {opts})  # + eps=0.5 / k=3 / quantile=0.5 (_thr)"))
    add(Row("metrics.mpc_cluster_variance", tm.mpc_cluster_variance, C, call=_mpc_call(tm.matched_pairs, True),
            options={"_thr": MPC_THRESHOLDS, "_cluster": ("item", "query")},
            out=lambda res, ctx: [Out("variance", res, None, 0.0, INF)], grad="never", soft=False,
            params_of=tm.matched_pairs,
            code="out = mpc_cluster_variance(matched_pairs(s, r, g, mask=m, ordering=o, eps=0.5))"))
    add(Row("metrics.monotonicity_test", tm.monotonicity_test, C, args=("scores", "groups"),
            options={"protected": (OMIT, 0), "top": (OMIT, 3)},
            out=lambda res, ctx: [Out("probabilities", res.probabilities, res.observed, 0.0, 1.0),
                                  Out("fitted", res.fitted, None, 0.0, 1.0),
                                  Out("p_value", res.p_value, None, 0.0, 1.0),
                                  Out("statistic", res.statistic, None, 0.0, INF)],
            grad="never", expect=_mono_expect))
    add(Row("metrics.isotonic_regression", tm.isotonic_regression, C, call=_isotonic_call, args=(),
            invalid_params=("increasing",),
            options={"increasing": (OMIT, False)}, out=_isotonic_out, grad="never", orderings=("none",),
            expect=_isotonic_expect, code="out = isotonic_regression(s[m], {opts})"))
    # ------------------------------------------------------------------------------------------- losses
    L = "losses"
    red_l = (OMIT, "sum", "none")
    dips_l = {"mode": (OMIT, "square", "one_sided"), "protected": (OMIT, 0, 1), "browsing": BROWSINGS,
              "tie_weight": (OMIT, 0.0), "reduction": red_l}
    em_l = {"target": (OMIT, "ea", "ea-dp"), "norm": (OMIT, "l2sq", "ee-l"), "browsing": BROWSINGS,
            "reduction": red_l}
    pa_l = {"which": (OMIT, "intra", "both"), "protected": (OMIT, 0), "reference": (OMIT, 1), "reduction": red_l}

    def em_range(res, ctx):
        return val(0.0, INF if _opt(ctx.opts, "norm", "l1") == "ee-l" else 2.0)(res, ctx)

    def pa_range(res, ctx):
        return val(0.0, 2.0 if _opt(ctx.opts, "which", "inter") == "both" else 1.0)(res, ctx)

    for fn, cls in ((tl.dips_loss, tl.DIPSLoss),):
        for obj, nm in ((fn, f"losses.{fn.__name__}"), (cls, f"losses.{cls.__name__}")):
            add(Row(nm, obj, L, options=dips_l, out=val(0.0, 1.0), pairwise=True, expect=_one_sided_expect,
                    invalid_opts={"protected": {"mode": "one_sided"}},
                    unused=lambda o: set() if o.get("mode") == "one_sided" else {"protected"}))
    for obj in (tl.exposure_misallocation_loss, tl.ExposureMisallocationLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, options=em_l, out=em_range))
    for obj in (tl.pairwise_accuracy_gap_loss, tl.PairwiseAccuracyGapLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, options=pa_l, out=pa_range, pairwise=True))
    # several measures on one ordering: the DIPS + pairwise accuracy pair, and DIPS under another browsing model with
    # exposure misallocation (a group-shaped term)
    multi_terms = (["dips", "pairwise_accuracy"],
                   [{"measure": "dips", "weight": 0.5, "browsing": "rbp:0.8"}, "exposure_misallocation:2"])
    for obj in (tl.multi_measure_loss, tl.MultiMeasureLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, options={"terms": multi_terms, "reduction": red_l},
                out=val(0.0, INF), pairwise=True, params_of=tl.multi_measure_loss))
    add(Row("losses.deltr_loss", tl.deltr_loss, L, args=("scores", "groups"),
            options={"protected": (OMIT, 0), "reduction": red_l}, out=val(0.0, 1.0), grad="always"))
    add(Row("losses.DELTRLoss", tl.DELTRLoss, L, options={"protected": (OMIT, 0), "reduction": red_l},
            out=val(0.0, 1.0), grad="always", params_of=tl.deltr_loss,
            exempt_invalid={k: "DELTRLoss ignores relevance (documented)" for k in
                            ("relevance negative", "relevance NaN on a real item", "relevance shape [B, N+1]")}))
    for obj in (tl.fair_pg_rank_loss, tl.FairPGRankLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, options={"protected": (OMIT, 0), "browsing": BROWSINGS,
                                                          "reduction": red_l}, out=val(0.0, INF)))
    for obj in (tl.pairwise_correlation_loss, tl.PairwiseCorrelationLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, options={"protected": (OMIT, 0)}, out=val(0.0, 1.0),
                grad="always"))
    add(Row("losses.reduce_loss", tl.reduce_loss, L, call=_reduce_loss_call, options={"reduction": REDUCTIONS},
            invalid_params=("reduction",), validates=False,
            out=val(), grad="always", orderings=("none",),
            code="per = torch.where(m, s, torch.zeros(())).sum(-1) / 1e18\nout = reduce_loss(per, m.any(-1), {opts})"))
    add(Row("losses.FairnessRegularizer", tl.FairnessRegularizer, L, call=_regularizer_call,
            invalid_params=("lam", "schedule"), expect=_regularizer_expect,
            options={"_fairness": ("DIPSLoss", "ExposureMisallocationLoss", "PairwiseAccuracyGapLoss"),
                     "lam": (OMIT, 0.0), "schedule": (OMIT, "linear")},
            out=val(0.0, INF), grad="always", orderings=ORDERINGS + ("default",),
            pairwise=lambda o: o.get("_fairness", "DIPSLoss") != "ExposureMisallocationLoss",
            code="reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(ordering=o), {opts})\nout = reg(s, r, g, m)"))
    util_opts = {"reduction": red_l}
    for obj in (tl.listnet_loss, tl.ListNetLoss, tl.listmle_loss, tl.ListMLELoss):
        add(Row(f"losses.{obj.__name__}", obj, L, args=("scores", "relevance"), options=util_opts,
                out=val(0.0, INF), grad="always"))
    for obj in (tl.approx_ndcg_loss, tl.ApproxNDCGLoss, tl.neural_ndcg_loss, tl.NeuralNDCGLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, args=("scores", "relevance"),
                options={"temperature": (OMIT, 1.0), "k": (OMIT, 3), "reduction": red_l}, out=val(0.0, 1.0),
                grad="always"))
    # LambdaLoss NDCG@k: no ordering (the pairs are weighted on the hard, detached ranking); the mean over the
    # pairs of non-zero weight (each |Delta NDCG@k| <= 1) of a softplus, unbounded above; k=None and a small block
    # take the blocked all-pairs path, k=3 the top-k one
    for obj in (tl.lambda_ndcg_loss, tl.LambdaNDCGLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, args=("scores", "relevance"),
                options={"k": (OMIT, 3, None), "gain": (OMIT, "linear"), "sigma": (OMIT, 0.5),
                         "block": (OMIT, 2), "reduction": red_l},
                out=val(0.0, INF), grad="always", sweep_opts=({}, {"k": 3}, {"k": None, "block": 2})))
    for obj in (tl.pl_ndcg_loss, tl.PLNDCGLoss):
        add(Row(f"losses.{obj.__name__}", obj, L, args=("scores", "relevance"),
                options={"samples": (4, 2), "k": (OMIT, 3), "reduction": red_l,
                         "generator": (Code("torch.Generator().manual_seed(0)"),)},
                out=val(0.0, 1.0), grad="always"))
    # ------------------------------------------------------------------------------------------- orderings
    O = "orderings"
    for cls, names in ((to.Hard, ("Hard", "Hard(average)")),
                       (to.SoftRank, ("SoftRank", "SoftRank(1e-3, scale='none')")), (to.RampRank, ("RampRank",)),
                       (to.NeuralSort, ("NeuralSort", "NeuralSort(0.1, sinkhorn_iters=3)")),
                       (to.SoftSort, ("SoftSort", "SoftSort(0.01)")),
                       (to.FastSoftRank, ("FastSoftRank", "FastSoftRank(1e-3, scale='none', backend='torch')",
                                          "FastSoftRank(0.01, backend='torch')",
                                          "FastSoftRank(0.01, backend='numba')")),
                       (to.PlackettLuce, ("PlackettLuce", "PlackettLuce(score_function)", "PlackettLuce(relaxed)",
                                          "PlackettLuce(exact)")),
                       (to.Sampled, ("Sampled",)), (to.DoublyStochastic, ("DoublyStochastic",))):
        add(Row(f"orderings.{cls.__name__}", cls, O, call=_ordering_call, out=_ordering_out, orderings=names,
                validates=False, extra=_ordering_extra,
                code=_ORDERING_CODE))
    add(Row("orderings.scores_from_ranking", to.scores_from_ranking, O, call=_scores_from_ranking_call, args=(),
            out=lambda res, ctx: [Out("scores", res[0], None, check_dtype=False)], grad="never",
            orderings=("none",), extra=_scores_from_ranking_extra,
            code="order = torch.sort(torch.where(m, s.double(), -inf), dim=-1, descending=True, stable=True).indices\n"
                 "out = scores_from_ranking(order)"))
    add(Row("orderings.sample_rankings", to.sample_rankings, O, call=_sample_rankings_call, grad="never",
            validates=False,
            orderings=("none",), extra=_sample_rankings_extra,
            code="out = sample_rankings(s, m, 3, torch.Generator().manual_seed(0))"))
    add(Row("orderings.log_probability", to.log_probability, O, call=_log_probability_call, validates=False,
            out=lambda res, ctx: [Out("log_probability", res, None, -INF, 0.0)], grad="always", orderings=("none",),
            code="rk = sample_rankings(s.detach(), m, 3, torch.Generator().manual_seed(0))\n"
                 "out = log_probability(s, rk, m)"))
    add(Row("orderings.all_rankings", to.all_rankings, O, call=_all_rankings_call, grad="never", args=(),
            orderings=("none",), extra=_all_rankings_extra, code="out = all_rankings(5)"))
    add(Row("orderings.pair_probability", to.pair_probability, O, args=("scores",), validates=False,
            options={"temperature": (OMIT, 0.1)}, out=val(0.0, 1.0), grad="always", masked=False))
    add(Row("orderings.top1_probability", to.top1_probability, O, args=("scores",), validates=False,
            options={"temperature": (OMIT, 0.1)}, out=lambda res, ctx: [Out("p", res, ctx.x.m, 0.0, 1.0)],
            grad="always"))
    add(Row("orderings.soft_rank", to.soft_rank, O, args=("scores",),
            options={"temperature": (OMIT, 0.1), "scale": (OMIT, "std")},
            out=lambda res, ctx: [Out("positions", res, ctx.x.m, 0.0,
                                      per_item_positions_hi(ctx).reshape(res.shape))],
            grad="always"))
    # ------------------------------------------------------------------------------------------- browsing
    Bf = "browsing"
    for cls, opts, hi in ((tb.RBP, {"gamma": (OMIT, 0.5, 1.0)}, 1.0), (tb.Geometric, {"p": (OMIT, 1.0, 0.1)}, 1.0),
                          (tb.Logarithmic, {"flat_top": (OMIT, True)}, 1.0), (tb.ReciprocalRank, {}, 1.0),
                          (tb.Uniform, {}, 1.0),
                          (tb.Cascade, {"gamma": (OMIT, 0.5), "max_grade": (OMIT, 4.0, 1000.0)}, 1.0),
                          (tb.TopK, {"base": (OMIT, Code("RBP(0.8)"), Code("Cascade(0.9)")), "k": (OMIT, 1, 3)}, 1.0),
                          (tb.Custom, {"weights": ([1.0, 0.5, 0.25], [0.0])}, 1.0)):
        add(Row(f"browsing.{cls.__name__}", cls, Bf, call=_browsing_call(cls.__name__), options=opts, args=(),
                invalid_params=tuple(opts),
                out=_browsing_out(hi), grad="always", orderings=("none",), extra=_cascade_extra,
                code=f"F = {cls.__name__}({{opts}})\nk = torch.sigmoid(torch.where(m, s, 0.)) * (m.sum(-1, "
                     f"keepdim=True) - 1)\nout = F.weight(k)"))
    add(Row("browsing.get_browsing", tb.get_browsing, Bf, call=_browsing_call("get_browsing"), args=(),
            options={"spec": ("rbp", "rbp:0.8", "topk:3:rbp:0.8", "cascade:0.9", "geometric:0.5", "uniform",
                              "logarithmic", "reciprocal")},
            out=_browsing_out(1.0), grad="always", orderings=("none",), extra=_cascade_extra,
            code="F = get_browsing({opts})\nout = F.weights(5)"))
    # ------------------------------------------------------------------------------------------- compat
    Cm = "compat"
    combos = {"combo": frt.COMBOS, "strict_docs": (OMIT, True)}
    for fn, extra_pos, extra_opts, need_rel in (
            (frt.EXP, (), {}, False), (frt.EXPU, ("relevance",), {}, True),
            (frt.EXPRU, ("relevance", "ctr"), {}, True), (frt.AWRF, (), {"p": (0.5, 0.9)}, False),
            (frt.ERBE, (), {"decay": (0.5, 0.9)}, False), (frt.ERBP, (), {"decay": (0.5, 0.9)}, False),
            (frt.ERBR, ("relevance",), {"decay": (0.5, 0.9)}, True), (frt.ARP, (), {}, False)):
        opts = {**combos, **extra_opts}
        add(Row(f"compat.fairranktune.{fn.__name__}", fn, Cm, call=_frt_call(fn, extra_pos), options=opts,
                invalid_params=("combo", "p", "decay", "ordering"), pairwise=fn is frt.ARP,
                out=_frt_out(), ieee=(lambda need: lambda ctx: not frt_regular(ctx, need))(need_rel),
                expect=_frt_rel_expect if fn in (frt.EXPU, frt.EXPRU) else None,
                code=f"out = {fn.__name__}(s, g, {', '.join(('r' if p == 'relevance' else 'ctr') for p in extra_pos)}"
                     f"{', ' if extra_pos else ''}mask=m, ordering=o, {{opts}})"))
    add(Row("compat.fairranktune.NDKL", frt.NDKL, Cm, call=_frt_call(frt.NDKL), out=val(0.0, INF),
            ieee=lambda ctx: not frt_regular(ctx), code="out = NDKL(s, g, mask=m, ordering=o)"))
    add(Row("compat.fairranktune.IAA", frt.IAA, Cm, call=lambda x, o, opts: frt.IAA(
        x.s, x.r, mask=x.m, ordering=o, **{k: v for k, v in opts.items() if v is not OMIT}),
            options={"per_ranking": (OMIT, True), "strict_docs": (OMIT, True)}, out=val(0.0, INF),
            expect=lambda ctx: ("per_ranking", "strict_docs") if ctx.opts.get("per_ranking") is True and
            ctx.opts.get("strict_docs") is True else None,
            code="out = IAA(s, r, mask=m, ordering=o, {opts})"))
    for fn in (frt.MinMaxRatio, frt.MaxMinRatio, frt.MaxMinDiff, frt.MaxAbsDiff, frt.MeanAbsDev, frt.LTwo,
               frt.Variance):
        lo, hi = (0.0, 1.0) if fn is frt.MinMaxRatio else ((1.0, INF) if fn is frt.MaxMinRatio else (0.0, INF))
        add(Row(f"compat.fairranktune.{fn.__name__}", fn, Cm, call=_frt_agg_call(fn), out=_agg_out(lo, hi), args=(),
                grad="never", orderings=("none",), code=f"out = {fn.__name__}(r.sum(0) + 1.0)"))
    add(Row("compat.fairranktune.aggregate", frt.aggregate, Cm, call=_frt_aggregate_call, args=(),
            invalid_params=("combo",),
            options={"combo": frt.COMBOS}, out=_agg_out(), grad="never", orderings=("none",),
            code="out = aggregate(r.sum(0) + 1.0, {opts})"))
    add(Row("compat.expeval.expeval", cee.expeval, Cm, call=_expeval_call(), args=(),
            invalid_params=("patience", "user_model", "utility"), invalid_opts={"utility": {"user_model": "gerr"}},
            options={"user_model": (OMIT, "gerr"), "patience": (OMIT, 0.9), "relevant_only": (OMIT, False),
                     "_groups": (False, True)},
            out=_expeval_out, grad="never", orderings=("none",), expect=_expeval_expect,
            code="ranks = ...  # 1-based ranks of the items by descending score\n"
                 "out = expeval(ranks, r, mask=m, {opts})"))
    add(Row("compat.expeval.rankings_from_ranks", cee.rankings_from_ranks, Cm, call=_expeval_call(True), args=(),
            grad="never", orderings=("none",), extra=_rankings_extra,
            code="ranks = ...  # 1-based ranks\nout = rankings_from_ranks(ranks, m)"))
    # ------------------------------------------------------------------------------------------- evaluation
    Ev = "evaluation"
    add(Row("evaluation.evaluate_lists", tev.evaluate_lists, Ev, call=_evaluate_call,
            options={"bootstrap": (0, 20), "ordering": (OMIT, "average"), "browsing": (OMIT, "rbp:0.8")},
            grad="never", orderings=("none",), extra=_evaluate_extra,
            code="out = evaluate_lists({{'scores': s, 'relevance': r, 'groups': g, 'mask': m}}, available_measures(), "
                 "num_groups={G}, {opts})"))
    add(Row("evaluation.compute_columns", tev.compute_columns, Ev, call=_compute_columns_call, out=_columns_out,
            grad="never", orderings=("none",),
            code="out = compute_columns(s, r, g, m, available_measures(), num_groups={G})"))
    for name in tm.__all__:  # the torchmetrics classes live beside the functions (torchfair.metrics.DIPS)
        obj = getattr(tm, name)
        if inspect.isclass(obj) and issubclass(obj, tm.FairnessMetric) and obj is not tm.FairnessMetric:
            kw = {"eps": 0.5} if name == "MPC" else {}
            # the class's signature is the measure's: what its defaults leave unused too (PreF's `protected`)
            add(Row(f"metrics.{name}", obj, Ev, call=_metric_call(obj, kw), out=_metric_out, grad="never",
                    expect=_metric_expect(obj), unused=MEASURE_HARNESS.get(obj.measure, {}).get("unused"),
                    orderings=("none",), soft=MEASURES[obj.measure].accepts_soft(),
                    args=("scores", "relevance", "groups"),
                    code=f"metric = {name}(num_groups={{G}}{', eps=0.5' if kw else ''})\nmetric.update(s, r, g, m)\n"
                         f"out = metric.compute()"))
    add(Row("metrics.FairnessMetric", tm.FairnessMetric, Ev,
            call=lambda x, o, opts: _metric_call(lambda **kw: tm.FairnessMetric("dips", **kw))(x, o, opts),
            out=_metric_out, grad="never", orderings=("none",),
            code="metric = FairnessMetric('dips', num_groups={G})\nmetric.update(s, r, g, m)\nout = metric.compute()"))
    return rows


#: public names deliberately without a row, with the reason (the coverage test requires one or the other)
EXEMPT: Dict[str, str] = {
    # the design layer: covered by tests/test_design.py (declarations, transformation, public surface)
    "metrics.MEASURES": "the declaration table (tests/test_design.py)",
    "metrics.fa_ir_test": "FA*IR's ranked group fairness test, a pass/fail per list (tests/metrics/test_prefix_fa_ir.py: "
                          "against the exact binomial loop, every 0/1 sequence at CDF-valued alphas, FA*IR's outputs)",
    "metrics.fa_ir_mtable": "FA*IR's m-table from Python numbers (tests/metrics/test_prefix_fa_ir.py: the paper's table, "
                            "the exact binomial quantile, scipy)",
    "metrics.fa_ir_adjusted_alpha": "a number from Python numbers (tests/metrics/test_prefix_fa_ir.py: enumeration of "
                                    "every 0/1 sequence)",
    "metrics.FaIrTest": "result type of fa_ir_test (tests/metrics/test_prefix_fa_ir.py)",
    "metrics.Measure": "the declaration type (tests/test_design.py)",
    "metrics.get_declaration": "declaration lookup (tests/test_design.py)",
    "losses.measure_loss": "TODO contract row; every declared loss in tests/test_design.py",
    "losses.MeasureLoss": "module form of measure_loss (tests/test_design.py)",
    "losses.LossModule": "base class of the loss modules, each with a row",
    "losses.REDUCERS": "a table of reducers (tests/test_design.py)",
    "losses.default_ordering": "returns RampRank(0.1), which has a row",
    "losses.BelowTopK": "a wrapper that restricts another loss's mask (each wrapped loss has a row); tests/losses/"
                        "test_below.py: against the loss on the physically shortened lists, edge cases, fp16",
    "losses.below_top_k_mask": "a bool mask, no gradient (tests/losses/test_below.py: hand example, ties, padding)",
    "orderings.list_scale": "TODO contract row; tests/orderings/test_soft.py (no overflow at any magnitude, the "
                            "floors) and the scale check of the soft orderings' rows",
    "metrics.ideal_dcg": "TODO contract row; the ideal DCG inside ndcg (rows metrics.ndcg, metrics.dcg)",
    "metrics.ideal_ranking": "TODO contract row; the ideal order inside ndcg and ListMLE (their rows)",
    # result types and constants: checked through the rows of the functions that return them
    "metrics.RankParityResult": "result type of rank_parity",
    "metrics.ExpectedExposureResult": "result type of expected_exposure",
    "metrics.MPCResult": "result type of matched_pair_calibration",
    "metrics.MatchedPairs": "result type of matched_pairs",
    "metrics.MonotonicityTest": "result type of monotonicity_test",
    "orderings.Ordering": "abstract base class; every concrete ordering has a row",
    "orderings.OrderedBatch": "abstract base class; checked through every ordering row",
    "orderings.OrderingLike": "a type alias",
    "orderings.PairBlock": "data class returned by pair_block; checked through contract() in the ordering rows",
    "browsing.BrowsingModel": "abstract base class; every model has a row",
    "compat.fairranktune.COMBOS": "a constant (swept as the `combo` option)",
    "compat.fairranktune.FRTResult": "result type of the FRT group metrics",
    "compat.fairranktune.FRTInputError": "the ValueError subclass FRT rows raise",
    "compat.fairranktune.NDKL_EPSILON": "a constant",
    "compat.fairranktune.DETCONSTSORT": "FRT's re-ranker on pandas DataFrames, not tensors: against FairRankTune "
                                        "and bad input in tests/compat/test_fairranktune_rerankers.py",
    "compat.fairranktune.EPSILONGREEDY": "FRT's re-ranker on pandas DataFrames, not tensors: against FairRankTune "
                                         "and bad input in tests/compat/test_fairranktune_rerankers.py",
    "evaluation.register": "registry plumbing (evaluate and compute_columns run every registered measure)",
    "evaluation.unregister": "registry plumbing",
    "evaluation.get_measure": "registry plumbing",
    "evaluation.available_measures": "registry plumbing (evaluate's rows use every available measure)",
    "evaluation.parse_request": "string parsing of measure requests",
    "evaluation.MeasureSpec": "registry entry type (compute() is what compute_columns runs)",
    "evaluation.MeasureRequest": "registry request type",
    "metrics.metric_class": "factory of the FairnessMetric subclasses, which have rows",
    "evaluation.EvaluationTable": "result type of evaluate",
    "evaluation.bootstrap_interval": "used by evaluate(bootstrap=...) (row evaluation.evaluate_lists)",
    "evaluation.RankedLists": "file reader result (I/O, tested in test_cli / test_evaluation)",
    "evaluation.read_trec": "file reader (I/O)",
    "evaluation.read_run": "file reader (I/O)",
    "evaluation.read_qrels": "file reader (I/O)",
    "evaluation.read_group_file": "file reader (I/O)",
    "evaluation.read_table": "file reader (I/O)",
    "evaluation.terminal_width": "the width of the terminal for printed tables (no tensors; "
                                  "tests/evaluation/test_format.py)",
    "evaluation.TREC_EVAL": "a dict of evaluate_lists options (tests/evaluation/test_trec.py: against pytrec_eval)",
    "evaluation.TREC_READ": "a dict of read_trec options (tests/evaluation/test_trec.py: against pytrec_eval)",
    "evaluation.PositionShares": "an accumulator of the engine: tests/evaluation/test_accumulators.py (a plain loop over "
                                 "the lists, merge_state of two halves, through evaluate_lists and streamed)",
    "evaluation.PooledMPC": "an accumulator of the engine returning a dict: tests/evaluation/test_accumulators.py "
                            "(against matched_pair_calibration on one batch, a hand example, merge_state)",
}

#: the modules whose public names the harness must cover, as (prefix, module)
SURFACE = (("metrics", tm), ("losses", tl), ("orderings", to), ("browsing", tb), ("compat.fairranktune", frt),
           ("compat.expeval", cee), ("evaluation", tev))

ROWS: List[Row] = build_rows()
for _r in ROWS:
    if _r.obj in MODULE_FUNCTION and _r.params_of is None:
        _r.params_of = MODULE_FUNCTION[_r.obj]
ROW_INDEX: Dict[str, Row] = {r.name: r for r in ROWS}
FAMILIES: Dict[str, List[Row]] = {}
for _r in ROWS:
    FAMILIES.setdefault(_r.family, []).append(_r)


def public_names() -> List[str]:
    out = []
    for prefix, mod in SURFACE:
        for n in getattr(mod, "__all__", []):
            out.append(f"{prefix}.{n}")
    return out


def default_options(row: Row) -> Dict[str, Any]:
    return {k: v[0] for k, v in row.options.items()}


# ============================================================================================== invalid input
@dataclass
class Invalid:
    """An invalid-argument case: ``label``, what it applies to, the mutation, the acceptable argument names."""

    label: str
    names: Tuple[str, ...]
    param: Optional[str] = None  # applies to rows having this parameter: opts[param] = value
    value: Any = None
    data: Optional[str] = None  # applies to rows taking this data argument: mutate X
    mutate: Optional[Callable[[X], X]] = None
    extra_opts: Dict[str, Any] = field(default_factory=dict)


def _mut(field_name, fn):
    def m(x: X) -> X:
        x = replace(x)
        setattr(x, field_name, fn(x))
        return x

    return m


def _set_item(t: Tensor, value, b=0, i=0) -> Tensor:
    t = t.clone()
    t[b, i] = value
    return t


INVALID: List[Invalid] = [
    # options
    Invalid("reduction='foo'", ("reduction",), param="reduction", value="foo"),
    Invalid("reduction=None", ("reduction",), param="reduction", value=None),
    Invalid("protected=-1", ("protected",), param="protected", value=-1),
    Invalid("protected=1.5", ("protected",), param="protected", value=1.5),
    Invalid("protected=True", ("protected",), param="protected", value=True),
    Invalid("protected=5 (num_groups=2)", ("protected",), param="protected", value=5,
            extra_opts={"num_groups": 2}),
    Invalid("reference=-1", ("reference",), param="reference", value=-1),
    Invalid("reference=1.5", ("reference",), param="reference", value=1.5),
    Invalid("group=-1", ("group",), param="group", value=-1),
    Invalid("group=True", ("group",), param="group", value=True),
    Invalid("k=0", ("k",), param="k", value=0),
    Invalid("k=-1", ("k",), param="k", value=-1),
    Invalid("k=1.5", ("k",), param="k", value=1.5),
    Invalid("k=True", ("k",), param="k", value=True),
    Invalid("step=0", ("step",), param="step", value=0),
    Invalid("tie_weight=nan", ("tie_weight",), param="tie_weight", value=NAN),
    Invalid("tie_weight=1.5", ("tie_weight",), param="tie_weight", value=1.5),
    Invalid("browsing='foo'", ("browsing",), param="browsing", value="foo"),
    Invalid("browsing=3", ("browsing",), param="browsing", value=3),
    Invalid("browsing='rbp:1.5'", ("browsing",), param="browsing", value="rbp:1.5"),
    Invalid("target='foo'", ("target",), param="target", value="foo"),
    Invalid("num_groups=0", ("num_groups",), param="num_groups", value=0),
    Invalid("num_groups=1.5", ("num_groups",), param="num_groups", value=1.5),
    Invalid("temperature=nan", ("temperature",), param="temperature", value=NAN),
    Invalid("temperature=inf", ("temperature",), param="temperature", value=INF),
    Invalid("temperature=0", ("temperature",), param="temperature", value=0.0),
    Invalid("temperature=-1", ("temperature",), param="temperature", value=-1.0),
    Invalid("samples=0", ("samples",), param="samples", value=0),
    Invalid("mode='foo'", ("mode",), param="mode", value="foo"),
    Invalid("norm='foo'", ("norm",), param="norm", value="foo"),
    Invalid("which='foo'", ("which",), param="which", value="foo"),
    Invalid("distance='foo'", ("distance",), param="distance", value="foo"),
    Invalid("delta='foo'", ("delta",), param="delta", value="foo"),
    Invalid("gain='foo'", ("gain",), param="gain", value="foo"),
    Invalid("p=1.5", ("p",), param="p", value=1.5),
    Invalid("p=nan", ("p",), param="p", value=NAN),
    Invalid("max_grade=nan", ("max_grade",), param="max_grade", value=NAN),
    Invalid("max_grade=0", ("max_grade",), param="max_grade", value=0.0),
    Invalid("threshold=nan", ("threshold",), param="threshold", value=NAN),
    Invalid("patience=1.5", ("patience",), param="patience", value=1.5),
    Invalid("patience=nan", ("patience",), param="patience", value=NAN),
    Invalid("user_model='foo'", ("user_model",), param="user_model", value="foo"),
    Invalid("utility=2", ("utility",), param="utility", value=2.0),
    Invalid("combo='foo'", ("combo",), param="combo", value="foo"),
    Invalid("decay=1.5", ("decay",), param="decay", value=1.5),
    Invalid("decay=nan", ("decay",), param="decay", value=NAN),
    Invalid("ci='foo'", ("ci",), param="ci", value="foo"),
    Invalid("level=1.5", ("level",), param="level", value=1.5),
    Invalid("eps=-1", ("eps",), param="eps", value=-1.0),
    Invalid("quantile=2", ("quantile",), param="quantile", value=2.0),
    Invalid("top=0", ("top",), param="top", value=0),
    Invalid("lam=-1", ("lam",), param="lam", value=-1.0),
    Invalid("lam=nan", ("lam",), param="lam", value=NAN),
    Invalid("schedule='foo'", ("schedule",), param="schedule", value="foo"),
    Invalid("ordering='hard'", ("ordering",), param="ordering", value="hard"),
    # data
    Invalid("scores NaN on a real item", ("scores",), data="scores", mutate=_mut("s", lambda x: _set_item(x.s, NAN))),
    Invalid("scores inf on a real item", ("scores",), data="scores", mutate=_mut("s", lambda x: _set_item(x.s, INF))),
    Invalid("scores [B, N, 1]", ("scores",), data="scores", mutate=_mut("s", lambda x: x.s.unsqueeze(-1))),
    Invalid("scores as a list", ("scores",), data="scores", mutate=_mut("s", lambda x: x.s.tolist())),
    Invalid("relevance negative", ("relevance",), data="relevance",
            mutate=_mut("r", lambda x: _set_item(x.r, -1.0))),
    Invalid("relevance NaN on a real item", ("relevance",), data="relevance",
            mutate=_mut("r", lambda x: _set_item(x.r, NAN))),
    Invalid("relevance shape [B, N+1]", ("relevance",), data="relevance",
            mutate=_mut("r", lambda x: torch.cat([x.r, x.r[:, :1]], 1))),
    Invalid("groups shape [B, N+1]", ("groups",), data="groups",
            mutate=_mut("g", lambda x: torch.cat([x.g, x.g[:, :1]], 1))),
    Invalid("groups id -2", ("groups",), data="groups", mutate=_mut("g", lambda x: _set_item(x.g, -2))),
    Invalid("groups float [B, N]", ("groups",), data="groups", mutate=_mut("g", lambda x: x.g.float())),
    Invalid("groups bool", ("groups",), data="groups", mutate=_mut("g", lambda x: x.g > 0)),
    Invalid("groups id >= num_groups", ("groups",), data="groups", mutate=_mut("g", lambda x: _set_item(x.g, 2)),
            extra_opts={"num_groups": 2}),
    Invalid("soft groups row sum 1.5", ("groups",), data="groups",
            mutate=_mut("g", lambda x: torch.nn.functional.one_hot(x.g.clamp(min=0), 2).float() * 1.5)),
    Invalid("soft groups negative", ("groups",), data="groups",
            mutate=_mut("g", lambda x: torch.nn.functional.one_hot(x.g.clamp(min=0), 2).float() - 0.5)),
    Invalid("mask float", ("mask",), data="mask", mutate=_mut("m", lambda x: x.m.float())),
    Invalid("mask shape [B, N+1]", ("mask",), data="mask", mutate=_mut("m", lambda x: torch.cat([x.m, x.m[:, :1]], 1))),
    Invalid("mask all False", ("mask",), data="mask", mutate=_mut("m", lambda x: torch.zeros_like(x.m))),
]

#: invalid ordering / browsing constructions: (label, factory, acceptable names)
CONSTRUCTOR_INVALID: List[Tuple[str, Callable[[], Any], Tuple[str, ...]]] = []
for _cls in (to.SoftRank, to.NeuralSort, to.SoftSort, to.FastSoftRank):
    for _bad in (NAN, INF, 0.0, -1.0, True):
        CONSTRUCTOR_INVALID.append((f"{_cls.__name__}(temperature={_bad!r})",
                                    (lambda c, b: lambda: c(temperature=b))(_cls, _bad), ("temperature",)))
    CONSTRUCTOR_INVALID.append((f"{_cls.__name__}(scale='foo')", (lambda c: lambda: c(0.1, scale="foo"))(_cls),
                                ("scale",)))
    CONSTRUCTOR_INVALID.append((f"{_cls.__name__}(min_scale=nan)",
                                (lambda c: lambda: c(0.1, min_scale=NAN))(_cls), ("min_scale",)))
CONSTRUCTOR_INVALID += [
    ("Hard('foo')", lambda: to.Hard("foo"), ("ties",)),
    ("PlackettLuce(temperature=inf)", lambda: to.PlackettLuce(temperature=INF), ("temperature",)),
    ("PlackettLuce(temperature=nan)", lambda: to.PlackettLuce(temperature=NAN), ("temperature",)),
    ("PlackettLuce(temperature=0)", lambda: to.PlackettLuce(temperature=0.0), ("temperature",)),
    ("PlackettLuce(samples=0)", lambda: to.PlackettLuce(samples=0), ("samples",)),
    ("PlackettLuce(samples=2.5)", lambda: to.PlackettLuce(samples=2.5), ("samples",)),
    ("PlackettLuce(samples=True)", lambda: to.PlackettLuce(samples=True), ("samples",)),
    ("PlackettLuce(estimator='foo')", lambda: to.PlackettLuce(estimator="foo"), ("estimator",)),
    ("PlackettLuce(exact=True) on N=9", lambda: to.PlackettLuce(exact=True)(torch.zeros(1, 9),
                                                                           torch.ones(1, 9, dtype=torch.bool)),
     ("exact", "scores")),
    ("Sampled(rankings not a permutation)", lambda: to.Sampled(torch.tensor([[0, 0, 1]])), ("rankings",)),
    ("Sampled(rankings float)", lambda: to.Sampled(torch.tensor([[0.0, 1.0]])), ("rankings",)),
    ("Sampled(weights negative)", lambda: to.Sampled(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, -1.0])),
     ("weights",)),
    ("DoublyStochastic(R not doubly stochastic)", lambda: to.DoublyStochastic(torch.ones(1, 2, 2))(
        torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)), ("R",)),
    ("RBP(gamma=1.5)", lambda: tb.RBP(1.5), ("gamma",)),
    ("RBP(gamma=nan)", lambda: tb.RBP(NAN), ("gamma",)),
    ("RBP(gamma=0)", lambda: tb.RBP(0.0), ("gamma",)),
    ("RBP(gamma=True)", lambda: tb.RBP(True), ("gamma",)),
    ("Geometric(p=0)", lambda: tb.Geometric(0.0), ("p",)),
    ("Geometric(p=nan)", lambda: tb.Geometric(NAN), ("p",)),
    ("Cascade(max_grade=nan)", lambda: tb.Cascade(0.9, max_grade=NAN), ("max_grade",)),
    ("Cascade(max_grade=inf)", lambda: tb.Cascade(0.9, max_grade=INF), ("max_grade",)),
    ("Cascade(max_grade=0)", lambda: tb.Cascade(0.9, max_grade=0.0), ("max_grade",)),
    ("Cascade(gamma=1.5)", lambda: tb.Cascade(1.5), ("gamma",)),
    ("TopK(k=0)", lambda: tb.TopK(tb.RBP(), 0), ("k",)),
    ("TopK(k=1.5)", lambda: tb.TopK(tb.RBP(), 1.5), ("k",)),
    ("TopK(k=True)", lambda: tb.TopK(tb.RBP(), True), ("k",)),
    ("TopK(base=3)", lambda: tb.TopK(3, 2), ("base",)),
    ("Custom([-1.0])", lambda: tb.Custom([-1.0]), ("weights",)),
    ("Custom([])", lambda: tb.Custom([]), ("weights",)),
    ("Custom([nan])", lambda: tb.Custom([NAN]), ("weights",)),
    ("get_browsing('foo')", lambda: tb.get_browsing("foo"), ("browsing",)),
    ("get_browsing(3)", lambda: tb.get_browsing(3), ("browsing",)),
    ("get_browsing('topk:0')", lambda: tb.get_browsing("topk:0"), ("browsing",)),
    ("soft_rank(regularization='foo')", lambda: to.soft_rank(torch.zeros(3), 1.0, regularization="foo"),
     ("regularization",)),
    ("sample_rankings(samples=0)", lambda: to.sample_rankings(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool),
                                                               0), ("samples",)),
    ("all_rankings(0)", lambda: to.all_rankings(0), ("N",)),
    ("all_rankings(9)", lambda: to.all_rankings(9), ("N",)),
    ("scores_from_ranking(not a permutation)", lambda: to.scores_from_ranking(torch.tensor([0, 0, 1])),
     ("ranking",)),
    ("FairnessRegularizer(schedule='linear', warmup_steps=0)",
     lambda: tl.FairnessRegularizer(tl.ListNetLoss(), tl.DIPSLoss(), schedule="linear", warmup_steps=0),
     ("warmup_steps",)),
    ("FairnessRegularizer(lam=nan)", lambda: tl.FairnessRegularizer(tl.ListNetLoss(), tl.DIPSLoss(), lam=NAN),
     ("lam",)),
    ("FairnessMetric('no_such_measure')", lambda: tm.FairnessMetric("no_such_measure"), ("measure",)),
    ("evaluate(measures=['no_such_measure'])",
     lambda: tev.evaluate_lists([(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))],
                          ["no_such_measure"]), ("measures",)),
    ("evaluate(confidence=2)",
     lambda: tev.evaluate_lists([(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))],
                          ["ndcg"], confidence=2.0, bootstrap=10), ("confidence",)),
    ("expeval(ranks not 1-based)", lambda: cee.expeval(torch.tensor([0, 1, 2]), torch.tensor([1.0, 0.0, 1.0])),
     ("ranks",)),
    ("expeval(ranks float)", lambda: cee.expeval(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0])), ("ranks",)),
    ("isotonic_regression(y with nan)", lambda: tm.isotonic_regression(torch.tensor([1.0, NAN])), ("y",)),
    ("isotonic_regression(weights 0)", lambda: tm.isotonic_regression(torch.tensor([1.0, 2.0]),
                                                                       torch.tensor([1.0, 0.0])), ("weights",)),
    ("mpc_cluster_variance(cluster='foo')", lambda: tm.mpc_cluster_variance(
        tm.matched_pairs(torch.tensor([1.0, 0.9]), torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), eps=0.5),
        cluster="foo"), ("cluster",)),
    # the helpers of the pairwise and exposure measures
    ("pairwise_gap(protected=-1)", lambda: tm.pairwise_gap(torch.rand(2, 2), protected=-1), ("protected",)),
    ("pairwise_gap(protected=1.5)", lambda: tm.pairwise_gap(torch.rand(2, 2), protected=1.5), ("protected",)),
    ("pairwise_gap(protected=0, reference=0)", lambda: tm.pairwise_gap(torch.rand(2, 2), protected=0, reference=0),
     ("reference",)),
    ("pairwise_gap(reference=1)", lambda: tm.pairwise_gap(torch.rand(2, 2), reference=1), ("reference",)),
    ("pairwise_gap(valid 3x3)", lambda: tm.pairwise_gap(torch.rand(2, 2), valid=torch.ones(3, 3, dtype=torch.bool)),
     ("valid",)),
    ("pairwise_gap(3 groups, no reference)", lambda: tm.pairwise_gap(torch.rand(3, 3), protected=0),
     ("reference",)),
    ("accuracy_gaps(protected=-1)", lambda: tm.accuracy_gaps(torch.rand(2, 2), protected=-1), ("protected",)),
    ("accuracy_gaps(protected=1.5)", lambda: tm.accuracy_gaps(torch.rand(2, 2), protected=1.5), ("protected",)),
    ("accuracy_gaps(reference=1)", lambda: tm.accuracy_gaps(torch.rand(2, 2), reference=1), ("reference",)),
    ("accuracy_gaps(valid float)", lambda: tm.accuracy_gaps(torch.rand(2, 2), valid=torch.ones(2, 2)), ("valid",)),
    ("misallocation_norm(p=0.5)", lambda: tm.misallocation_norm(torch.rand(2), p=0.5), ("p",)),
    ("ideal_exposure(k=0)", lambda: tm.ideal_exposure(_R4, k=0), ("k",)),
    ("utility.ideal_dcg(k=1.5)", lambda: tm.utility.ideal_dcg(_R4, k=1.5), ("k",)),
]


def invalid_cases_for(row: Row) -> List[Invalid]:
    params = row.params
    out = []
    for inv in INVALID:
        if inv.param is not None:
            if inv.param not in params:
                continue
            use = row.invalid_params if row.invalid_params is not None else row.call is None
            if isinstance(use, tuple):
                use = inv.param in use
            if not use or (inv.param == "num_groups" and row.call is not None):
                continue
        if inv.data is not None:
            data_args = set(row.args) | {"mask"} | ({"groups"} if "_groups" in row.options else set())
            if row.call is not None or inv.data not in data_args or not row.validates:
                continue
            if inv.data == "mask" and "mask" not in params:
                continue
            if inv.data in ("relevance",) and "relevance" not in row.args:
                continue
        if any(k not in params for k in inv.extra_opts):
            continue
        if inv.label in row.exempt_invalid:
            continue
        out.append(inv)
    return out


def run_invalid(row: Row, inv: Invalid) -> None:
    """Call ``row`` on :func:`invalid_base` mutated by ``inv``: must raise ValueError naming ``inv.names``."""
    case = invalid_base()
    x = case.materialize("fp32", fill_padding=not row.masked)
    if inv.mutate is not None:
        x = inv.mutate(x)
    opts = {k: v for k, v in default_options(row).items() if v is not OMIT}  # e.g. required `p`, `samples`
    if "_groups" in opts:
        opts["_groups"] = True
    if inv.param is not None:
        opts.update(row.invalid_opts.get(inv.param, {}))
        opts[inv.param] = inv.value
    opts.update(inv.extra_opts)
    names = row.ordering_names(case)
    ordering = "Hard" if "Hard" in names else names[0]
    if row.family == "losses" and "SoftRank" in names:
        ordering = "SoftRank"
    ordering_obj = build_ordering(ordering, case, "fp32")
    try:
        invoke(row, x, ordering_obj, opts)
    except ValueError as e:
        if not _message_names(str(e), inv.names):
            raise Violation("ValueError without argument name",
                            f"{row.name} with {inv.label}: ValueError does not name "
                            f"{' or '.join('`%s`' % n for n in inv.names)}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        tb_last = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{tb_last.filename.split('torchfair/')[-1]}:{tb_last.lineno}"
        raise Violation(f"{type(e).__name__} instead of ValueError",
                        f"{row.name} with {inv.label}: {type(e).__name__} at {where}: {e}")
    raise Violation("invalid input accepted", f"{row.name} with {inv.label}: no ValueError")


def run_constructor_invalid(label: str, factory: Callable[[], Any], names: Tuple[str, ...]) -> None:
    try:
        factory()
    except ValueError as e:
        if not _message_names(str(e), names):
            raise Violation("ValueError without argument name",
                            f"{label}: ValueError does not name {' or '.join('`%s`' % n for n in names)}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        raise Violation(f"{type(e).__name__} instead of ValueError", f"{label}: {type(e).__name__}: {e}")
    raise Violation("invalid input accepted", f"{label}: no ValueError")


# ============================================================================================== properties
#: rows whose value under a mixture of rankings (Sampled) must equal the mean of their values on each ranking
LINEAR_ROWS = [r for r in ROWS if r.linear]


def mixture_linearity(row: Row, case: Case) -> None:
    """``f(Sampled(rankings)) == mean_s f(ranking_s)`` (the measure is an expectation over the rankings)."""
    rk_list = sample_ranking_list(case)
    rk = torch.tensor(rk_list, dtype=torch.long)
    x = case.materialize("fp64")
    opts: Dict[str, Any] = {}
    res = invoke(row, x, to.Sampled(rk if not case.one_dim else rk[:, 0]), opts)
    outs = row.out(res, Ctx(row, case, x, "Sampled", "fp64", opts))
    per = []
    for s in range(rk.shape[0]):
        r1 = rk[s:s + 1]
        res_s = invoke(row, x, to.Sampled(r1 if not case.one_dim else r1[:, 0]), opts)
        per.append(row.out(res_s, Ctx(row, case, x, "Sampled", "fp64", opts)))
    for j, o in enumerate(outs):
        vals = torch.stack([p[j].value.double() for p in per])
        mean = vals.mean(0)
        got = o.value.double()
        if o.valid is not None:  # compare where every ranking defines the value
            allv = torch.stack([_fit(p[j].valid, p[j].value) for p in per]).all(0) & _fit(o.valid, o.value)
            got, mean = got[allv], mean[allv]
        if not torch.allclose(got, mean, atol=1e-9, rtol=1e-9):
            diff = (got - mean).abs()
            k = int(diff.argmax())
            raise Violation("not the expectation over rankings",
                            f"{row.name} ({o.label}) under Sampled(rankings) = {got.flatten()[k].item():.6g}, but the "
                            f"mean over its {rk.shape[0]} rankings is {mean.flatten()[k].item():.6g}",
                            repro(row, case, "Sampled", "fp64", opts))


#: the soft relaxations (``scale="std"`` by default), row -> (label, factory(temperature) of the ordering, the
#: working temperature of the equivariance check)
SCALE_ROWS: Dict[str, Tuple[Tuple[str, Callable[[float], Any], float], ...]] = {
    "orderings.SoftRank": (("SoftRank", lambda t: to.SoftRank(t), 0.1),),
    "orderings.NeuralSort": (("NeuralSort", lambda t: to.NeuralSort(t), 0.1),
                             ("NeuralSort(sinkhorn_iters=3)", lambda t: to.NeuralSort(t, sinkhorn_iters=3), 0.1)),
    "orderings.SoftSort": (("SoftSort", lambda t: to.SoftSort(t), 0.01),),
    "orderings.FastSoftRank": (("FastSoftRank(backend='torch')", lambda t: to.FastSoftRank(t, backend="torch"), 0.01),
                               ("FastSoftRank(backend='numba')", lambda t: to.FastSoftRank(t, backend="numba"), 0.01)),
}
#: magnitudes the scores are scaled to
SCALES = (1.0, 1e3, 1e10, 1e19, 1e30)


def scale_invariance(label: str, make: Callable[[float], Any], scale: float, N: int = 6) -> None:
    """With ``scale='std'`` a soft ordering means the same for any score range: distinct, evenly spaced scores
    times ``scale`` give (nearly) hard positions at ``temperature=1e-3`` whatever ``scale`` is (fp32)."""
    base = torch.tensor([[3.0, -1.0, 2.0, 0.0, -2.0, 1.0][:N]])
    s = base * scale
    m = torch.ones_like(s, dtype=torch.bool)
    pos = make(1e-3)(s, m).expected_positions()
    want = to.Hard()(base, m).expected_positions()
    if not torch.isfinite(pos).all() or (pos - want).abs().max() > 0.05:
        raise Violation("temperature not scale invariant",
                        f"{label} at temperature 1e-3 on scores {base.tolist()} x {scale:g}: positions {pos.tolist()}, "
                        f"hard positions {want.tolist()}")


def scale_equivariance(label: str, make: Callable[[float], Any], temperature: float, scale: float,
                       dtype: torch.dtype, ties: bool, seed: int, n: int = 6) -> None:
    """At its working ``temperature`` a soft ordering gives ``scale * s`` the positions of ``s`` (a list whose
    std is above the floor), in fp32 and fp64, with and without tied scores: a per-list scale that overflows
    collapses every position to ``(n - 1) / 2``."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(1, n, generator=gen, dtype=torch.float64) * 2
    if ties:
        s = s.round()
    if s.std(unbiased=False) < 0.5:
        s[0, 0] = s[0, 0] + 3.0
    m = torch.ones(1, n, dtype=torch.bool)
    o = make(temperature)
    p1 = o(s.to(dtype), m).expected_positions().double()
    pc = o((s * scale).to(dtype), m).expected_positions().double()
    if not torch.isfinite(pc).all() or (pc - p1).abs().max() > 1e-3:
        raise Violation("positions not scale equivariant",
                        f"{label} at temperature {temperature:g} ({dtype}): positions of s {p1.tolist()}, of "
                        f"s x {scale:g} {pc.tolist()} (s = {s.tolist()})")


#: gradients of "ordinary size" for tied scores (~1e6 in fp32 today)
TIED_GRAD_BOUND = 1e3


def tied_gradient_size(row: Row, ordering: str, value: float, mode: str = "fp32") -> None:
    """A zero-initialised (or constant-bias) model: all scores tied.  Gradients must be finite and at most
    :data:`TIED_GRAD_BOUND` in absolute value."""
    case = _list_case([[value] * 6, [value] * 6], [[2.0, 0.0, 1.0, 3.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0, 2.0, 0.0]],
                      [[0, 1, 0, 1, 1, 0], [1, 0, 1, 0, 0, 1]], G=2, label=f"tied-{value:g}")
    opts = default_options(row)
    x = case.materialize(mode)
    x.s.requires_grad_(True)
    ctx = Ctx(row, case, x, ordering, mode, opts)
    res = invoke(row, x, build_ordering(ordering, case, mode), opts)
    outs = row.out(res, ctx)
    got: list = []
    try:
        check_gradients(outs, x.s, x.m, ctx, got)
    except Violation as v:
        v.code = repro(row, case, ordering, mode, opts)
        raise
    g = got[0] if got else torch.zeros(1)
    if g.abs().max() > TIED_GRAD_BOUND:
        raise Violation("huge gradient on tied scores",
                        f"{row.name} with {ordering} on all-tied scores ({value:g}): max |grad| = "
                        f"{g.abs().max().item():.3g} (> {TIED_GRAD_BOUND:g})",
                        repro(row, case, ordering, mode, opts))


#: rows whose all-tied scores must get gradients of ordinary size (the losses taking an ordering, the relaxed measures)
TIED_ROWS = [r.name for r in ROWS if r.family == "losses" and "ordering" in r.params] + \
    ["metrics.dips", "metrics.exposure_misallocation", "metrics.ndcg", "metrics.pairwise_accuracy",
     "metrics.kendall_tau"]

@dataclass(frozen=True)
class Known:
    """A violation the library still commits: a violation of this entry's kind (its key) whose text matches the
    regular expression ``match``, and the ``defect`` (what is wrong, where)."""

    match: str
    defect: str


class KnownViolation(Exception):
    """Raised by a contract item whose every violation is a known one (the item is a strict expected failure with
    ``raises=KnownViolation``: any other failure, or a pass, fails it)."""


#: contract violations still open, ``(row, check of tester.ContractTester, Violation.kind) -> Known``: strict expected
#: failures of that (row, check) item, limited to that kind and message (other violations of the same check still
#: fail it; an entry whose violation no longer occurs fails it too, so that the entry gets removed)
KNOWN_VIOLATIONS: Dict[Tuple[str, str, str], Known] = {}


def known_violation(row: str, check: str, kind: str, text: str) -> Optional[Tuple[str, str, str]]:
    """The key of the :data:`KNOWN_VIOLATIONS` entry a violation is (``None``: not a known one)."""
    import re
    key = (row, check, kind)
    k = KNOWN_VIOLATIONS.get(key)
    return key if k is not None and re.search(k.match, text) else None


# ============================================================================================== argument table
_S4 = torch.tensor([[0.3, 0.2, 0.1, 0.0]])
_R4 = torch.tensor([[2.0, 0.0, 1.0, 1.0]])
_G4 = torch.tensor([[0, 1, 0, 1]])
_SRG, _SR, _SG = (_S4, _R4, _G4), (_S4, _R4), (_S4, _G4)


def _argument_table() -> List[Tuple[Callable, tuple, Dict[str, Any], str]]:
    """(function, inputs, keyword arguments that must be refused, the argument the message names): the option
    values of the measures that :data:`INVALID` does not draw (every ``k`` / ``tie_weight`` / ``protected`` /
    ``target`` / ``step`` spelling)."""
    M = tm
    bad = []
    for fn, inputs in [(M.dcg, _SR), (M.ndcg, _SR), (M.precision, _SR), (M.recall, _SR), (M.mrr, _SR),
                       (M.rbp, _SR), (M.err, _SR), (M.dips, _SRG), (M.igi, _SRG), (M.ree, _SRG),
                       (M.pairwise_accuracy, _SRG), (M.discordant_fraction, _SR), (M.kendall_tau, _SR),
                       (M.rank_parity, _SG), (M.exposure_misallocation, _SRG), (M.expected_exposure, _SRG),
                       (M.iaa, _SRG), (M.awrf, _SG), (M.dp, _SG), (M.eur, _SRG), (M.rur, _SRG), (M.log_dp, _SG),
                       (M.log_eur, _SRG), (M.log_rur, _SRG), (M.exp_rr, _SG), (M.rnd, _SG), (M.rrd, _SG),
                       (M.rkl, _SG), (M.pref, _SG), (M.skew, _SG), (M.ndkl, _SG), (M.fair, _SG)]:
        bad.append((fn, inputs, dict(reduction="foo"), "reduction"))
        bad.append((fn, inputs, dict(reduction=None), "reduction"))
        if fn not in (M.pairwise_accuracy, M.discordant_fraction, M.kendall_tau, M.rank_parity, M.rbp):
            for k in (0, -1, 1.5, 2.0, True, "3"):
                bad.append((fn, inputs, dict(k=k), "k"))
    for fn, inputs in [(M.dips, _SRG), (M.exposure_misallocation, _SRG), (M.expected_exposure, _SRG),
                       (M.iaa, _SRG), (M.awrf, _SG), (M.dp, _SG), (M.exp_rr, _SG),
                       (M.individual_dissatisfaction, _SRG), (M.individual_misallocation, _SR)]:
        bad.append((fn, inputs, dict(browsing="nope"), "browsing"))
        bad.append((fn, inputs, dict(browsing=0.9), "browsing"))
    for fn, inputs in [(M.dips, _SRG), (M.igi, _SRG), (M.ree, _SRG), (M.individual_dissatisfaction, _SRG)]:
        for tw in (NAN, 1.5, -0.1, "a", None):
            bad.append((fn, inputs, dict(tie_weight=tw), "tie_weight"))
    for fn, inputs in [(M.rnd, _SG), (M.rrd, _SG), (M.rkl, _SG), (M.fair, _SG), (M.dp, _SG), (M.eur, _SRG),
                       (M.rur, _SRG), (M.log_dp, _SG), (M.awrf, _SG), (M.monotonicity_test, _SG)]:
        for p in (-1, 1.5, True, "1"):
            bad.append((fn, inputs, dict(protected=p), "protected"))
        # beyond the groups the caller declares: an error (beyond the groups a batch happens to hold: absent)
        bad.append((fn, inputs, dict(protected=5, num_groups=2), "protected"))
    for fn, inputs in [(M.dp, _SG), (M.eur, _SRG), (M.rur, _SRG)]:
        for p in (-1, 1.5, True, 1):
            bad.append((fn, inputs, dict(reference=p), "reference"))
    for fn, inputs in [(M.skew, _SG), (M.ndkl, _SG), (M.pref, _SG), (M.fair, _SG), (M.awrf, _SG)]:
        for t in ("uniform", "proportional", 3 + 0j):
            bad.append((fn, inputs, dict(target=t), "target"))
    for fn, inputs in [(M.rnd, _SG), (M.rrd, _SG), (M.rkl, _SG), (M.pref, _SG)]:
        for st_ in (0, 1.5, 2.0, None):
            bad.append((fn, inputs, dict(step=st_), "step"))
        bad.append((fn, inputs, dict(normalize="yes"), "normalize"))
    bad += [
        (M.pref, _SG, dict(delta="js"), "delta"),
        (M.awrf, _SG, dict(distance="l2"), "distance"),
        (M.exposure_misallocation, _SRG, dict(target="uniform"), "target"),
        (M.individual_misallocation, _SR, dict(target=None), "target"),
        (M.iaa, _SRG, dict(amortize="yes"), "amortize"),
        (M.dp, _SG, dict(amortize=1), "amortize"),
        (M.precision, _SR, dict(adaptive_k="no"), "adaptive_k"),
        (M.precision, _SR, dict(threshold=INF), "threshold"),
        (M.rbp, _SR, dict(p=NAN), "p"),
        (M.rbp, _SR, dict(k=0), "k"),
        (M.err, _SR, dict(max_grade=INF), "max_grade"),
        (M.ndcg, _SR, dict(gain="cubic"), "gain"),
        (M.monotonicity_test, _SG, dict(k=0), "k"),
        (M.ndcg, _SR, dict(return_valid="yes"), "return_valid"),
        (M.dips, _SRG, dict(return_valid=1), "return_valid"),
        (M.iaa, _SRG, dict(return_valid=1), "return_valid"),
        (M.rur, _SRG, dict(amortize=True, return_valid=1), "return_valid"),
        (M.individual_misallocation, _SR, dict(return_valid=None), "return_valid"),
    ]
    return bad


ARGUMENT_INVALID = _argument_table()


def argument_invalid_for(row: Row) -> List[Tuple[str, Callable[[], Any], Tuple[str, ...]]]:
    """The entries of :data:`ARGUMENT_INVALID` of ``row``'s function, as (label, call, names)."""
    return [(", ".join(f"{k}={v!r}" for k, v in kw.items()), functools.partial(fn, *inputs, **kw), (name,))
            for fn, inputs, kw, name in ARGUMENT_INVALID if fn is row.obj]


# ============================================================================================== probe
def _probe_calls(rows: Sequence[Row], full: bool):
    for row in rows:
        for case in catalogue():
            names = row.ordering_names(case)
            combos = [(o, "fp32") for o in names]
            diff_o = next((o for o in names if o in DIFFERENTIABLE), names[0])
            for mode in MODES[1:]:
                combos.append((diff_o, mode))
                if "Hard" in names and diff_o != "Hard":
                    combos.append(("Hard", mode))
            if full:
                combos = [(o, md) for o in names for md in MODES]
            yield row, case, combos


def explore(rows: Sequence[Row], examples: int, seed: int = 0) -> Dict[tuple, list]:
    """Random hypothesis examples (row, case, ordering, mode, options drawn as in the tests) that never stop at a
    failure: every violation is recorded, keyed by (row, kind, message head)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    seen: Dict[tuple, list] = {}

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        row = data.draw(st.sampled_from(list(rows)))
        case = data.draw(cases())
        ordering = data.draw(st.sampled_from(row.ordering_names(case)))
        mode = data.draw(st.sampled_from(MODES))
        opts = {k: data.draw(st.sampled_from(list(v))) for k, v in row.options.items()}
        try:
            run_valid(row, case, ordering, mode, opts)
        except Violation as v:
            first = v.detail.split("\n")[0]
            msg = first.split(":")[0] if v.kind in ("out of range", "non-finite value") else first[:140]
            seen.setdefault((row.name, v.kind, msg), []).append((case.label, ordering, mode, str(v)))

    run()
    return seen


def main(argv: Sequence[str]) -> int:
    """``python tests/contract_cases.py probe [--full] [ROW-SUBSTRING ...]``: run the degenerate catalogue over the
    rows (every ordering in fp32, every dtype mode with one differentiable ordering and Hard; ``--full`` every
    ordering x mode) and print each distinct violation once, with the first reproduction.

    ``python tests/contract_cases.py explore N [--seed S] [ROW-SUBSTRING ...]``: N random examples as the tests
    draw them, without stopping at failures; prints each distinct violation once."""
    import collections
    import time
    args = list(argv)
    if args and args[0] == "explore":
        n = int(args[1])
        sd = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
        pats = [a for a in args[2:] if not a.startswith("--") and not a.isdigit()]
        rows = [r for r in ROWS if not pats or any(p in r.name for p in pats)]
        torch.set_num_threads(1)
        t0 = time.time()
        seen = explore(rows, n, sd)
        print(f"# {n} random examples, {time.time() - t0:.1f} s, {len(seen)} distinct violations\n")
        for (rname, kind, msg), hits in sorted(seen.items()):
            print(f"## {rname} | {kind} | {msg}\n   {len(hits)} hits; orderings: "
                  f"{', '.join(sorted({h[1] for h in hits}))}; modes: {', '.join(sorted({h[2] for h in hits}))}\n")
            print("   " + min(hits, key=lambda h: len(h[3]))[3].replace("\n", "\n   ") + "\n")
        return 0
    if not args or args[0] != "probe":
        print(main.__doc__)
        return 2
    full = "--full" in args
    pats = [a for a in args[1:] if not a.startswith("--")]
    rows = [r for r in ROWS if not pats or any(p in r.name for p in pats)]
    torch.set_num_threads(1)
    seen: Dict[tuple, list] = collections.OrderedDict()
    t0 = time.time()
    calls = 0
    for row, case, combos in _probe_calls(rows, full):
        for o, mode in combos:
            calls += 1
            try:
                for so in row.sweep_opts:
                    run_valid(row, case, o, mode, {**default_options(row), **so})
            except Exception as v:  # noqa: BLE001 - harness errors are reported too
                if not isinstance(v, Violation):
                    v = Violation("HARNESS ERROR", f"{type(v).__name__}: {v}\n{traceback.format_exc()}")
                first = v.detail.split("\n")[0]
                msg = first.split(":")[0] if v.kind in ("out of range", "non-finite value") else first[:140]
                key = (row.name, v.kind, msg)
                seen.setdefault(key, []).append((case.label, o, mode, str(v)))
    for row in rows:
        for inv in invalid_cases_for(row):
            calls += 1
            try:
                run_invalid(row, inv)
            except Violation as v:
                key = (row.name, v.kind, inv.label)
                seen.setdefault(key, []).append(("invalid-base", "-", "fp32", str(v)))
    if not pats:
        for label, factory, names in CONSTRUCTOR_INVALID:
            try:
                run_constructor_invalid(label, factory, names)
            except Violation as v:
                seen.setdefault(("constructor", v.kind, label), []).append(("-", "-", "-", str(v)))
    print(f"# {calls} calls, {time.time() - t0:.1f} s, {len(seen)} distinct violations\n")
    for (rname, kind, msg), hits in seen.items():
        labels = sorted({h[0] for h in hits})
        ords = sorted({h[1] for h in hits})
        modes = sorted({h[2] for h in hits})
        print(f"## {rname} | {kind} | {msg}\n   cases: {', '.join(labels)}\n   orderings: {', '.join(ords)}\n"
              f"   modes: {', '.join(modes)}\n")
        print("   " + hits[0][3].replace("\n", "\n   ") + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
