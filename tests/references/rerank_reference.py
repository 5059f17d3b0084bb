"""Plain-Python references for the re-rankers of :mod:`torchfair.rerank`, written from the papers (no torch).

Everything works on one list of *real* items (padded items removed beforehand): ``scores`` a list of floats,
``groups`` a list of int ids (-1 = unknown group).  A ranking is a list of item indices by 0-based position.

The starting ranking is the scores sorted descending with ties to the lower index (a stable sort); where a paper
compares scores, a tie goes to the item that comes first in that starting ranking (the convention every re-ranker
of torchfair documents).

Sources:
* Zehlike, Bonchi, Castillo, Hajian, Megahed, Baeza-Yates, *FA*IR: A Fair Top-k Ranking Algorithm*, CIKM 2017:
  §4.1 (ranked group fairness test), §4.2 / Table 1 (m-table), §4.3 (multiple-test correction), Algorithm 1.
* Geyik, Ambler, Kenthapadi, *Fairness-Aware Ranking in Search & Recommendation Systems with Application to
  LinkedIn Talent Search*, KDD 2019, Algorithm 3 (DetConstSort), with 1-based positions as printed.
* Feng & Shah, *Has CEO Gender Bias Really Been Fixed?*, AAAI 2022, §5 (epsilon-greedy).
* torchfair's measure-targeted re-ranker (its module docstring: group boosts of standardised scores).
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Callable, List, Optional, Sequence


# ----------------------------------------------------------------------------------------------- common
def start_order(scores: Sequence[float]) -> List[int]:
    """Items by score descending; equal scores: lower index first.  Selection sort written out."""
    left = list(range(len(scores)))
    out = []
    while left:
        best = left[0]
        for i in left[1:]:
            if scores[i] > scores[best]:  # strictly: an equal score keeps the lower index
                best = i
        out.append(best)
        left.remove(best)
    return out


def prefix_counts(ranking: Sequence[int], groups: Sequence[int], g: int) -> List[int]:
    """c[i-1] = number of items of group ``g`` in the top ``i``."""
    out, c = [], 0
    for i in ranking:
        c += groups[i] == g
        out.append(c)
    return out


# ----------------------------------------------------------------------------------------------- FA*IR
def binom_cdf(m: int, i: int, p: float) -> Fraction:
    """P(Binomial(i, p) <= m), exactly (rational arithmetic on the float p): the tests compare it with alpha, and
    at an alpha equal to a CDF value (p = 1/2, alpha = 1/2 ...) any floating-point CDF can land on either side."""
    q = Fraction(p)
    return sum((math.comb(i, j) * q ** j * (1 - q) ** (i - j) for j in range(0, min(m, i) + 1)), Fraction(0))


def mtable(k: int, p: float, alpha: float) -> List[int]:
    """Zehlike et al. §4.2: m(i) = F^{-1}(alpha; i, p), the smallest m with BinomCDF(m; i, p) > alpha (exact)."""
    a = Fraction(alpha)
    out = []
    for i in range(1, k + 1):
        m = 0
        while binom_cdf(m, i, p) <= a:
            m += 1
        out.append(m)
    return out


def fails_some_prefix(seq: Sequence[int], m: Sequence[int]) -> bool:
    """``seq``: 1 = protected, 0 = not, by position; True when some prefix i holds fewer than m(i)."""
    c = 0
    for i, x in enumerate(seq):
        c += x
        if c < m[i]:
            return True
    return False


def failure_probability(m: Sequence[int], p: float) -> float:
    """Zehlike et al. §4.3: the probability that a ranking whose every position is protected independently with
    probability p fails some prefix test of table ``m``; by enumerating all 2^k protected/non-protected sequences."""
    k = len(m)
    tot = 0.0
    for seq in itertools.product((0, 1), repeat=k):
        if fails_some_prefix(seq, m):
            s = sum(seq)
            tot += p ** s * (1 - p) ** (k - s)
    return tot


def next_table_change(k: int, p: float, alpha: float) -> float:
    """The smallest a > alpha at which the m-table of (k, p, a) differs from that of (k, p, alpha): the smallest
    CDF value BinomCDF(m(i); i, p) over i (m(i) increases as soon as alpha reaches it)."""
    m = mtable(k, p, alpha)
    x = min(binom_cdf(m[i - 1], i, p) for i in range(1, k + 1))
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, 1.0)


def fa_ir_test_passes(ranking: Sequence[int], groups: Sequence[int], protected: int, p: float, alpha: float,
                     K: int) -> bool:
    """Zehlike et al. §4.1: every prefix i <= min(K, n) has BinomCDF(tau_p(i); i, p) > alpha."""
    c = prefix_counts(ranking, groups, protected)
    return all(binom_cdf(c[i - 1], i, p) > Fraction(alpha) for i in range(1, min(K, len(ranking)) + 1))


def fa_ir(scores: Sequence[float], groups: Sequence[int], protected: int, m: Sequence[int], K: int) -> List[int]:
    """Zehlike et al., Algorithm 1, position by position: while the top holds fewer protected items than m(i)
    (i the prefix being filled, i <= K), the best remaining protected item is placed; otherwise the better of the
    two queue heads by score (a tie: the protected head, the authors' ``>=``).  An empty queue yields to the other;
    past K (or past len(m)) no prefix is constrained and the merge by score continues."""
    start = start_order(scores)
    P = [i for i in start if groups[i] == protected]  # protected queue, best first
    Q = [i for i in start if groups[i] != protected]  # everyone else (unknown group included)
    out: List[int] = []
    tp = 0
    while P or Q:
        i = len(out) + 1  # the prefix length being filled (1-based)
        needed = i <= K and i <= len(m) and tp < m[i - 1]
        if P and (needed or not Q):
            take_p = True
        elif P and Q:
            a, b = P[0], Q[0]
            take_p = scores[a] >= scores[b]
        else:
            take_p = False
        if take_p:
            out.append(P.pop(0))
            tp += 1
        else:
            out.append(Q.pop(0))
    return out


def satisfies_mtable(ranking: Sequence[int], groups: Sequence[int], protected: int, m: Sequence[int]) -> bool:
    c = prefix_counts(ranking, groups, protected)
    return all(c[i] >= m[i] for i in range(min(len(m), len(ranking))))


# ----------------------------------------------------------------------------------------------- DetConstSort
def det_const_sort(scores: Sequence[float], groups: Sequence[int], p: Sequence[float], k_max: int,
                   floor_eps: float = 1e-9) -> List[int]:
    """Geyik et al., KDD 2019, Algorithm 3, with 1-based arrays as printed.

    ::

        while lastEmpty < k_max:                       (the output holds k_max items: stop)
            k += 1
            tempMinCounts[a] = floor(k p_a)
            changedMins = {a : minCounts[a] < tempMinCounts[a]}   (and a has items left)
            for a in changedMins, by the score of a's next item, best first:
                lastEmpty += 1; rankedList[lastEmpty] = a's next item; maxIndices[lastEmpty] = k
                start = lastEmpty
                while start > 1 and maxIndices[start - 1] >= start and score[start - 1] < score[start]:
                    swap entries start - 1 and start; start -= 1
            minCounts = tempMinCounts

    The walk also stops when no group with p_a > 0 has items left; the items it did not place follow in score
    order.  ``floor_eps`` is added before the floor (the library's documented tolerance for shares such as 0.3).
    Scores are compared through the starting ranking (a tie: the item that came first)."""
    n = len(scores)
    G = len(p)
    start = start_order(scores)
    rank_of = {item: r for r, item in enumerate(start)}

    def better(a, b):  # a's score beats b's
        return rank_of[a] < rank_of[b]

    queues = {g: [i for i in start if groups[i] == g] for g in range(G)}
    min_counts = [0] * G
    ranked = [None]  # 1-based: ranked[1..lastEmpty]
    max_idx = [None]
    last_empty = 0
    k = 0
    limit = min(k_max, n)
    while last_empty < limit:
        if not any(p[g] > 0 and queues[g] for g in range(G)):
            break
        k += 1
        temp = [math.floor(k * p[g] + floor_eps) for g in range(G)]
        changed = [g for g in range(G) if min_counts[g] < temp[g] and queues[g]]
        # by the score of the group's next item, best first (a plain insertion sort)
        ordered: List[int] = []
        for g in changed:
            pos = len(ordered)
            while pos > 0 and better(queues[g][0], queues[ordered[pos - 1]][0]):
                pos -= 1
            ordered.insert(pos, g)
        for g in ordered:
            if last_empty >= limit:
                break
            item = queues[g].pop(0)
            last_empty += 1
            ranked.append(item)
            max_idx.append(k)
            s = last_empty
            while s > 1 and max_idx[s - 1] >= s and better(ranked[s], ranked[s - 1]):
                ranked[s - 1], ranked[s] = ranked[s], ranked[s - 1]
                max_idx[s - 1], max_idx[s] = max_idx[s], max_idx[s - 1]
                s -= 1
        min_counts = [max(min_counts[g], temp[g]) for g in range(G)]
    out = ranked[1:]
    placed = set(out)
    return out + [i for i in start if i not in placed]


def prefix_minimums_hold(ranking: Sequence[int], groups: Sequence[int], p: Sequence[float], k: int,
                         floor_eps: float = 1e-9) -> bool:
    """Every prefix i <= min(k, n) holds min(floor(i p_g), |g|) items of every group g."""
    for g in range(len(p)):
        size = sum(1 for x in groups if x == g)
        c = prefix_counts(ranking, groups, g)
        for i in range(1, min(k, len(ranking)) + 1):
            if c[i - 1] < min(math.floor(i * p[g] + floor_eps), size):
                return False
    return True


# ----------------------------------------------------------------------------------------------- epsilon-greedy
def epsilon_greedy(scores: Sequence[float], epsilon: float, u: Sequence[float], v: Sequence[float]) -> List[int]:
    """Feng & Shah, AAAI 2022, §5: walking down the ranking, at position i (but the last) with probability
    epsilon (the draw u[i] < epsilon) the item there is swapped with the item at a position drawn uniformly from
    i+1 .. n-1 (the draw v[i] in [0, 1): position i + 1 + floor(v[i] (n - i - 1)))."""
    cur = start_order(scores)
    n = len(cur)
    for i in range(n - 1):
        if u[i] < epsilon:
            rest = n - i - 1
            j = i + 1 + min(int(math.floor(v[i] * rest)), rest - 1)
            cur[i], cur[j] = cur[j], cur[i]
    return cur


# ----------------------------------------------------------------------------------------------- targeted
def standardise(scores: Sequence[float]) -> List[float]:
    """(s - mean) / std over the list (population std; a constant list: std 1)."""
    n = len(scores)
    mean = sum(scores) / n
    var = sum((s - mean) ** 2 for s in scores) / n
    std = math.sqrt(var) if var > 0 else 1.0
    return [(s - mean) / std for s in scores]


def boosted(scores: Sequence[float], groups: Sequence[int], c: int, beta: float, keep: int) -> List[int]:
    """The candidate (c, beta) of the targeted re-ranker: the top ``keep`` of the starting ranking stay; the rest
    sorted by z_i + beta 1(g_i = c) descending (beta = inf: all of group c first), ties by starting position."""
    start = start_order(scores)
    z = standardise(scores)
    rest = start[keep:]

    def key(i):
        if math.isinf(beta):
            return (1 if groups[i] == c else 0, z[i])
        return (z[i] + beta * (1 if groups[i] == c else 0),)

    out = list(start[:keep])
    for i in rest:  # insertion: after every item whose key is >= (earlier start positions first on ties)
        pos = len(out)
        while pos > keep and key(out[pos - 1]) < key(i):
            pos -= 1
        out.insert(pos, i)
    return out


def candidates(scores, groups, G: int, boosts: Sequence[float], keep: int):
    """The family in the order the re-ranker tries it: the identity, then each boost (ascending), each group."""
    yield ("identity", None), start_order(scores)
    for beta in sorted(set(boosts)):
        for c in range(G):
            yield (c, beta), boosted(scores, groups, c, beta, keep)


def estimated_utility(ranking: Sequence[int], scores: Sequence[float], k: int) -> float:
    """DCG@k with the gains softmax(scores)."""
    mx = max(scores)
    e = [math.exp(s - mx) for s in scores]
    tot = sum(e)
    return sum(e[i] / tot / math.log2(pos + 2) for pos, i in enumerate(ranking[:k]))


def argmin_candidate(scores, groups, G, boosts, keep, objective: Callable[[List[int]], float],
                     max_utility_loss: Optional[float] = None, utility_k: int = 10, tol: float = 1e-9):
    """The first candidate (in the family's order) of least objective among the identity and the candidates whose
    estimated utility loss is at most ``max_utility_loss``.  Returns (ranking, objective, every (name, ranking,
    objective, allowed))."""
    start = start_order(scores)
    u0 = estimated_utility(start, scores, utility_k)
    rows = []
    for name, r in candidates(scores, groups, G, boosts, keep):
        allowed = True
        if max_utility_loss is not None and name[0] != "identity":
            allowed = 1.0 - estimated_utility(r, scores, utility_k) / u0 <= max_utility_loss + 1e-12
        rows.append((name, r, objective(r), allowed))
    best_r, best_v = None, math.inf
    for name, r, v, allowed in rows:
        if allowed and v < best_v - tol:
            best_r, best_v = r, v
    return best_r, best_v, rows
