"""Plain-Python references for the losses of torchfair.losses, written from the papers' formulas.

One list at a time, real items only, Python floats and explicit loops (no torch), so that the vectorised losses
can be checked against something independent.

* ListNet, top-1 version (Cao et al., ICML 2007): cross-entropy ``-sum_i P_y(i) log P_s(i)`` between the top-1
  probabilities ``P_x(i) = exp(x_i) / sum_j exp(x_j)`` of the relevance and of the scores.
* ListMLE (Xia et al., ICML 2008): ``-log P_PL(y* | s) = sum_k [log sum_{m >= k} exp(s_{y*_m}) - s_{y*_k}]`` with
  ``y*`` the relevance-sorted ranking (ties by list index), divided by the list length (torchfair's convention).
* DELTR (Zehlike & Castillo 2020): ``max(0, U(G0) - U(G1))**2``, ``U(G)`` the mean top-1 probability of G's items.
* Fair-PG-Rank (Singh & Joachims 2019): ``max(0, v(G0)/U(G0) - v(G1)/U(G1))``, ``v`` mean exposure, ``U`` mean
  relevance.
* Beutel et al. (KDD 2019) pairwise-correlation regulariser: ``|Pearson(A, B)|`` over the cross-group pairs with
  different relevance, pooled over the lists.
* NDCG with exponential gains ``2**r - 1`` and the discount ``1 / log2(pos + 2)``.
* SoftRank's expected positions ``pos_i = sum_{j != i} sigmoid((s_j - s_i) / tau)``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence


def _logsumexp(xs: Sequence[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def softmax(xs: Sequence[float]) -> List[float]:
    z = _logsumexp(xs)
    return [math.exp(x - z) for x in xs]


def listnet(scores: Sequence[float], rel: Sequence[float]) -> float:
    p_y = softmax(rel)
    z = _logsumexp(scores)
    return -sum(p_y[i] * (scores[i] - z) for i in range(len(scores)))


def ideal_order(rel: Sequence[float]) -> List[int]:
    """Items by decreasing relevance; equal relevance: lower index first (insertion sort, explicit tie rule)."""
    order: List[int] = []
    for i in range(len(rel)):
        pos = len(order)
        while pos > 0 and rel[order[pos - 1]] < rel[i]:
            pos -= 1
        order.insert(pos, i)
    return order


def listmle(scores: Sequence[float], rel: Sequence[float]) -> float:
    y = ideal_order(rel)
    n = len(y)
    nll = 0.0
    for k in range(n):
        rest = [scores[y[m]] for m in range(k, n)]
        nll += _logsumexp(rest) - scores[y[k]]
    return nll / n


def deltr(scores: Sequence[float], ids: Sequence[int], protected: int = 1) -> Optional[float]:
    """None when a side is absent.  Items of unknown group (-1) count in the softmax but in neither side."""
    p = softmax(scores)
    prot = [p[i] for i, g in enumerate(ids) if g == protected]
    other = [p[i] for i, g in enumerate(ids) if g >= 0 and g != protected]
    if not prot or not other:
        return None
    d = sum(other) / len(other) - sum(prot) / len(prot)
    return max(0.0, d) ** 2


def fair_pg_rank(exposure: Sequence[float], rel: Sequence[float], ids: Sequence[int],
                 protected: int = 1) -> Optional[float]:
    """``exposure``: the items' (expected) exposure.  None when a side is absent or has zero merit."""
    sides = []
    for in_side in (lambda g: g >= 0 and g != protected, lambda g: g == protected):
        items = [i for i, g in enumerate(ids) if in_side(g)]
        if not items:
            return None
        v = sum(exposure[i] for i in items) / len(items)
        u = sum(rel[i] for i in items) / len(items)
        if u <= 0:
            return None
        sides.append(v / u)
    return max(0.0, sides[0] - sides[1])


def correlation_pairs(scores: Sequence[float], rel: Sequence[float], ids: Sequence[int], protected: int = 1):
    """The (A, B) values of every cross-group pair (j, j') with r_j > r_j' (each unordered pair once)."""
    out = []
    n = len(scores)
    for j in range(n):
        for k in range(n):
            if rel[j] > rel[k] and ids[j] >= 0 and ids[k] >= 0:
                a_j, a_k = float(ids[j] == protected), float(ids[k] == protected)
                if a_j != a_k:
                    out.append((scores[j] - scores[k], a_j - a_k))
    return out


def pearson_abs(pairs) -> float:
    if len(pairs) < 2:
        return 0.0
    n = len(pairs)
    ma = sum(a for a, _ in pairs) / n
    mb = sum(b for _, b in pairs) / n
    cov = sum((a - ma) * (b - mb) for a, b in pairs)
    va = sum((a - ma) ** 2 for a, _ in pairs)
    vb = sum((b - mb) ** 2 for _, b in pairs)
    if va * vb == 0:
        return 0.0
    return abs(cov / math.sqrt(va * vb))


def hard_positions(scores: Sequence[float]) -> List[int]:
    order = ideal_order(scores)  # same rule: decreasing, ties by index
    pos = [0] * len(scores)
    for k, i in enumerate(order):
        pos[i] = k
    return pos


def softrank_positions(scores: Sequence[float], tau: float) -> List[float]:
    n = len(scores)
    return [sum(1.0 / (1.0 + math.exp(-(scores[j] - scores[i]) / tau)) for j in range(n) if j != i)
            for i in range(n)]


def log_discount(pos: float) -> float:
    return 1.0 / math.log2(pos + 2.0)


def ndcg(scores: Sequence[float], rel: Sequence[float]) -> Optional[float]:
    pos = hard_positions(scores)
    gains = [2.0 ** r - 1.0 for r in rel]
    dcg = sum(gains[i] * log_discount(pos[i]) for i in range(len(rel)))
    ideal = sorted(gains, reverse=True)
    idcg = sum(g * log_discount(k) for k, g in enumerate(ideal))
    if idcg <= 0:
        return None
    return dcg / idcg
