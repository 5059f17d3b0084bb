"""Plain-Python reference for Plackett-Luce (PL) policies: enumeration, expectations, finite-difference gradients.

Everything works on one list of *real* items (padded items removed beforehand) given as a Python list of floats
(the logits ``m_i = s_i / temperature``), with explicit loops and ``itertools.permutations``.  No torch.

PL probability of a ranking ``y`` (item indices by 0-based position), by the sequential-choice formula::

    pi(y) = prod_k exp(m_{y_k}) / sum_{k' >= k} exp(m_{y_k'})

Expectations of per-ranking quantities are sums over all ``n!`` rankings weighted by ``pi``.  Gradients of any
function of the logits are central finite differences in double precision (``fd_gradient``): with ``h = 1e-5`` the
error is ~1e-10, far below every tolerance used against them.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Dict, List, Sequence, Tuple

import reference as ref  # the project's plain-Python pairwise measures (per ranking)


# ----------------------------------------------------------------------------------------------- probabilities


def pl_probability(logits: Sequence[float], order: Sequence[int]) -> float:
    """pi(order) by the sequential-choice formula (logits shifted by their max for stability)."""
    shift = max(logits)
    w = [math.exp(x - shift) for x in logits]
    p = 1.0
    remaining = list(order)
    for d in order:
        z = sum(w[x] for x in remaining)
        p *= w[d] / z
        remaining.remove(d)
    return p


def enumerate_pl(logits: Sequence[float]) -> List[Tuple[Tuple[int, ...], float]]:
    """All rankings of the list with their PL probabilities (they sum to 1)."""
    n = len(logits)
    return [(order, pl_probability(logits, order)) for order in itertools.permutations(range(n))]


def ranking_distribution(logits: Sequence[float]) -> Dict[Tuple[int, ...], float]:
    return dict(enumerate_pl(logits))


def positions(order: Sequence[int]) -> List[int]:
    pos = [0] * len(order)
    for k, i in enumerate(order):
        pos[i] = k
    return pos


def expect(logits: Sequence[float], fn: Callable[[Tuple[int, ...]], object]):
    """E_pi[fn(y)] for fn returning a float or (nested) lists of floats."""
    acc = None
    for order, p in enumerate_pl(logits):
        acc = _axpy(acc, p, fn(order))
    return acc


def _axpy(acc, p, x):
    if isinstance(x, (list, tuple)):
        if acc is None:
            acc = [None] * len(x)
        return [_axpy(a, p, xi) for a, xi in zip(acc, x)]
    return (0.0 if acc is None else acc) + p * float(x)


# ----------------------------------------------------------------------------------------------- quantities


def expected_positions(logits):
    return expect(logits, lambda y: [float(k) for k in positions(y)])


def expected_exposure_items(logits, F: Callable[[int], float]):
    """E[F(pos_i)] for every item."""
    return expect(logits, lambda y: [F(k) for k in positions(y)])


def above(logits):
    """above[i][j] = P(j ranked above i) (0 on the diagonal)."""
    def fn(y):
        pos = positions(y)
        n = len(y)
        return [[1.0 if (i != j and pos[j] < pos[i]) else 0.0 for j in range(n)] for i in range(n)]
    return expect(logits, fn)


def joint(logits, F: Callable[[int], float]):
    """joint[i][j] = E[F(pos_j) 1(pos_j < pos_i)]."""
    def fn(y):
        pos = positions(y)
        n = len(y)
        return [[F(pos[j]) if (i != j and pos[j] < pos[i]) else 0.0 for j in range(n)] for i in range(n)]
    return expect(logits, fn)


def position_matrix(logits):
    """R[k][i] = P(item i at position k)."""
    def fn(y):
        n = len(y)
        return [[1.0 if y[k] == i else 0.0 for i in range(n)] for k in range(n)]
    return expect(logits, fn)


def top1(logits):
    n = len(logits)
    return expect(logits, lambda y: [1.0 if y[0] == i else 0.0 for i in range(n)])


# ----------------------------------------------------------------------------------------------- measures
# The pairwise measures are linear in the ranking indicators with ranking-independent normalisers, so their value
# under a policy is the PL-weighted mean of their value on every ranking (the per-ranking values come from
# tests/references/reference.py).  The exposure measures are functions of the expected exposure.


def one_hot(ids: Sequence[int], G: int) -> List[List[float]]:
    return [[1.0 if g == i else 0.0 for g in range(G)] for i in ids]


def exp_dips(logits, rel, ids, G, F: Callable[[int], float], ct: float):
    Fb = ref.RefBrowsing(F)
    return expect(logits, lambda y: ref.dips(list(y), rel, one_hot(ids, G), Fb, ct)[0])


def exp_igi(logits, rel, ids, G: int, ct: float = 0.0):
    return expect(logits, lambda y: ref.igi(list(y), rel, one_hot(ids, G), ct)[0])


def exp_pairwise_accuracy(logits, rel, ids, G):
    """E[A] where the library reports 0 for undefined entries (no pair with r_i > r_j)."""
    return expect(logits, lambda y: ref.pairwise_accuracy(list(y), rel, one_hot(ids, G))[0])


def exp_rank_parity(logits, ids, G):
    """(wins [G][G], per_group [G], pair [G]): wins and per_group are expectations; ``pair = |1 - 2 per_group|``
    is applied to the expected per_group (a function of the expectation, as the library defines it)."""
    wins = expect(logits, lambda y: ref.rank_parity(list(y), one_hot(ids, G))[0])
    per_group = expect(logits, lambda y: ref.rank_parity(list(y), one_hot(ids, G))[2])
    valid = ref.rank_parity(list(range(len(ids))), one_hot(ids, G))[4]
    pair = [abs(1 - 2 * p) if v else 0.0 for p, v in zip(per_group, valid)]
    return wins, per_group, pair


def ideal_targets(rel, F):
    """t_i = mean over j with r_j = r_i of F(ideal position of j) (Fabris et al., WSDM 2023, eq. 15)."""
    n = len(rel)
    ideal = sorted(range(n), key=lambda i: -rel[i])
    pos = {i: k for k, i in enumerate(ideal)}
    out = []
    for i in range(n):
        same = [j for j in range(n) if rel[j] == rel[i]]
        out.append(sum(F(pos[j]) for j in same) / len(same))
    return out


def _gsum(x, ids, G):
    out = [0.0] * G
    for xi, g in zip(x, ids):
        if g >= 0:
            out[g] += xi
    return out


def exp_misallocation(logits, rel, ids, G, F, target="ee"):
    """delta_g = T_g / sum T - E_g / sum E with E from the PL expected exposure (Fabris et al., WSDM 2023, eq. 12)."""
    n = len(logits)
    e = expected_exposure_items(logits, F)
    if target == "ee":
        t = ideal_targets(rel, F)
    elif target == "ea":
        t = list(rel)
    else:
        t = [1.0] * n
    T, E = _gsum(t, ids, G), _gsum(e, ids, G)
    return [T[g] / sum(t) - E[g] / sum(e) for g in range(G)]


def exp_expected_exposure(logits, rel, F):
    """(EE-L, EE-D, EE-R) of the PL expected exposure vector (individual version)."""
    eps = expected_exposure_items(logits, F)
    star = ideal_targets(rel, F)
    loss = sum((a - b) ** 2 for a, b in zip(eps, star))
    disp = sum(a * a for a in eps)
    relv = sum(a * b for a, b in zip(eps, star))
    return loss, disp, relv


# ----------------------------------------------------------------------------------------------- objectives


def obj_weighted_exposure(w, F):
    return lambda m: sum(wi * ei for wi, ei in zip(w, expected_exposure_items(m, F)))


def obj_dips_gap(rel, ids, F, ct=0.5):
    def f(m):
        M = exp_dips(m, rel, ids, 2, F, ct)
        return M[0][1] - M[1][0]
    return f


def obj_misallocation_l1(rel, ids, G, F, target="ee"):
    return lambda m: sum(abs(d) for d in exp_misallocation(m, rel, ids, G, F, target))


def obj_pairwise_accuracy(rel, ids, coef):
    """sum_{g,h} coef[g][h] A[g][h] (e.g. the InterAcc gap A[0][1] - A[1][0])."""
    def f(m):
        A = exp_pairwise_accuracy(m, rel, ids, len(coef))
        return sum(coef[g][h] * A[g][h] for g in range(len(coef)) for h in range(len(coef)))
    return f


def fd_gradient(f: Callable[[List[float]], float], logits: Sequence[float], h: float = 1e-5) -> List[float]:
    """Central finite differences of f at the logits."""
    g = []
    for i in range(len(logits)):
        up, dn = list(logits), list(logits)
        up[i] += h
        dn[i] -= h
        g.append((f(up) - f(dn)) / (2 * h))
    return g


def expected_exposure_browsing(logits, rel, Fb: "ref.RefBrowsing"):
    """E[exposure_i] under a (possibly relevance-dependent, e.g. cascade) reference browsing model."""
    def fn(y):
        expo = Fb.exposure([rel[d] for d in y])
        out = [0.0] * len(y)
        for k, d in enumerate(y):
            out[d] = expo[k]
        return out
    return expect(logits, fn)
