"""Plain-Python reference implementations of the pairwise measures, written from the papers' formulas.

Everything here works on a single list of *real* items (padded items removed beforehand), as Python lists of
floats, with explicit loops over positions, items and pairs.  No torch, no vectorisation, so that the library can be
checked against something independent.

Sources (full references in the README's "References" section):
* Fabris et al., WSDM 2023, "Pairwise Fairness in Ranking as a Dissatisfaction Measure": eq. 1 (IGI/REE), eq. 3
  (discordant fraction, tau = 1 - 2M), eq. 6-7 (individual dissatisfaction, browsing weights), eq. 8 (UDP with tie
  weight c_t), eq. 10 (DIPS normaliser), eq. 11 (DIPS), §4.4 (IGI / REE normalisers).
* Raj & Ekstrand, SIGIR 2022, §2.5 eq. 11 (pairwise accuracy).
* Kuhlman et al., AIES 2021, eq. 8-9 (pair metric).

Conventions: positions are 0-based (0 = top).  A ranking ``order`` is a list of item indices by position.
Group membership is a list (one row per item) of G non-negative weights; integer ids are turned into one-hot rows,
id -1 (unknown group) into an all-zero row (the item is ranked but belongs to no group).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, List, Optional, Sequence

# ----------------------------------------------------------------------------------------------- browsing models


class RefBrowsing:
    """F(k) for a ranking: ``position(k)`` is the position part (used by the DIPS normaliser), ``exposure`` the
    weight of every position of a ranked list given the relevance of the items in ranked order."""

    def __init__(self, position: Callable[[int], float], stop: Optional[Callable[[float], float]] = None,
                 name: str = ""):
        self.position = position
        self.stop = stop  # cascade stopping probability phi(r); None for position-based models
        self.name = name

    def exposure(self, rel_sorted: Sequence[float]) -> List[float]:
        out = []
        survive = 1.0
        for k, r in enumerate(rel_sorted):
            out.append(self.position(k) * survive)
            if self.stop is not None:
                cont = 1.0 - self.stop(r)
                cont = min(1.0, max(0.0, cont))
                survive *= cont
        return out

    def cumulative(self, n: float) -> float:
        """sum_{k < floor n} F(k) + (n - floor n) F(floor n)."""
        fl = int(math.floor(n))
        total = 0.0
        for k in range(fl):
            total += self.position(k)
        frac = n - fl
        if frac > 0:
            total += frac * self.position(fl)
        return total

    def __repr__(self):
        return self.name


def ref_rbp(gamma: float) -> RefBrowsing:
    return RefBrowsing(lambda k: gamma ** k, name=f"rbp({gamma})")


def ref_geometric(p: float) -> RefBrowsing:
    return RefBrowsing(lambda k: p * (1 - p) ** k, name=f"geometric({p})")


def ref_logarithmic(flat_top: bool = False) -> RefBrowsing:
    if flat_top:
        return RefBrowsing(lambda k: 1.0 / math.log2(max(k + 1, 2)), name="log_flat")
    return RefBrowsing(lambda k: 1.0 / math.log2(k + 2), name="log")


def ref_reciprocal() -> RefBrowsing:
    return RefBrowsing(lambda k: 1.0 / (k + 1), name="rr")


def ref_uniform() -> RefBrowsing:
    return RefBrowsing(lambda k: 1.0, name="uniform")


def ref_custom(weights: Sequence[float]) -> RefBrowsing:
    w = [float(x) for x in weights]
    return RefBrowsing(lambda k: w[k] if k < len(w) else 0.0, name=f"custom({w})")


def ref_topk(base: RefBrowsing, K: int) -> RefBrowsing:
    return RefBrowsing(lambda k: base.position(k) if k < K else 0.0, stop=base.stop, name=f"top{K}({base})")


def ref_cascade(gamma: float, max_grade: float = 1.0) -> RefBrowsing:
    """002 table 3: F(k) = gamma**k prod_{k'<k} (1 - phi(r_{sigma(k')})), ERR's phi(r) = (2**r - 1) / 2**max_grade."""
    return RefBrowsing(lambda k: gamma ** k, stop=lambda r: (2.0 ** r - 1.0) / (2.0 ** max_grade),
                       name=f"cascade({gamma},{max_grade})")


# ----------------------------------------------------------------------------------------------- rankings


def rank(scores: Sequence[float]) -> List[int]:
    """Items sorted by score descending; equal scores: lower index first (stable)."""
    idx = list(range(len(scores)))
    # insertion sort written out, so that the tie rule is explicit
    order: List[int] = []
    for i in idx:
        pos = len(order)
        while pos > 0 and scores[order[pos - 1]] < scores[i]:
            pos -= 1
        order.insert(pos, i)
    return order


def positions(order: Sequence[int]) -> List[int]:
    pos = [0] * len(order)
    for k, i in enumerate(order):
        pos[i] = k
    return pos


def membership_from_ids(ids: Sequence[int], G: int) -> List[List[float]]:
    rows = []
    for g in ids:
        row = [0.0] * G
        if g >= 0:
            row[g] = 1.0
        rows.append(row)
    return rows


def tie_orders(scores: Sequence[float]):
    """Every order of the items consistent with the scores (non-increasing along the ranking)."""
    n = len(scores)
    for perm in itertools.permutations(range(n)):
        if all(scores[perm[k]] >= scores[perm[k + 1]] for k in range(n - 1)):
            yield list(perm)


def average_over_tie_orders(scores: Sequence[float], measure: Callable[[List[int]], object]):
    """Mean of ``measure(order)`` over all score-consistent orders.  ``measure`` returns a float, a (nested) list
    of floats, or a tuple ``(value, valid)`` (``valid`` does not depend on the order and is taken from the first)."""
    values = []
    for order in tie_orders(scores):
        values.append(measure(order))
    assert values

    def mean(vs):
        if isinstance(vs[0], (list, tuple)):
            return [mean([v[t] for v in vs]) for t in range(len(vs[0]))]
        if isinstance(vs[0], bool):
            return vs[0]
        return sum(vs) / len(vs)

    if isinstance(values[0], tuple):
        val = mean([v[0] for v in values])
        return val, values[0][1]
    return mean(values)


# ----------------------------------------------------------------------------------------------- pair primitives


def d_u(i: int, j: int, pos: Sequence[int], rel: Sequence[float], ct: float) -> float:
    """000 eq. 8: 1(pos_i > pos_j, r_i > r_j) + c_t 1(pos_i > pos_j, r_i = r_j)."""
    if pos[i] > pos[j]:
        if rel[i] > rel[j]:
            return 1.0
        if rel[i] == rel[j]:
            return ct
    return 0.0


def _zeros(G: int) -> List[List[float]]:
    return [[0.0] * G for _ in range(G)]


def _div(S, C):
    G = len(S)
    M, V = _zeros(G), [[False] * G for _ in range(G)]
    for g in range(G):
        for h in range(G):
            if C[g][h] > 0:
                M[g][h] = S[g][h] / C[g][h]
                V[g][h] = True
    return M, V


# ----------------------------------------------------------------------------------------------- measures


def individual_dissatisfaction(order, rel, F: RefBrowsing, ct: float, memb=None):
    """000 eq. 6-7 with browsing: M_i = sum_k F(k) d_U(i, sigma(k)) [* a_{sigma(k) h}].

    Returns a list over items (without memb) or a list of rows [M_i0, ..., M_i(G-1)]."""
    n = len(order)
    pos = positions(order)
    expo = F.exposure([rel[order[k]] for k in range(n)])
    if memb is None:
        out = []
        for i in range(n):
            m = 0.0
            for k in range(n):
                m += expo[k] * d_u(i, order[k], pos, rel, ct)
            out.append(m)
        return out
    G = len(memb[0]) if n else 0
    out = []
    for i in range(n):
        row = [0.0] * G
        for h in range(G):
            for k in range(n):
                j = order[k]
                row[h] += expo[k] * d_u(i, j, pos, rel, ct) * memb[j][h]
        out.append(row)
    return out


def dips_normaliser(memb, F: RefBrowsing):
    """000 eq. 10: C_gh = max(N_g sum_{k<N_h} F(k), N_h sum_{k<N_g} F(k)), N_g = sum_i a_ig."""
    G = len(memb[0])
    sizes = [sum(row[g] for row in memb) for g in range(G)]
    C = _zeros(G)
    for g in range(G):
        for h in range(G):
            C[g][h] = max(sizes[g] * F.cumulative(sizes[h]), sizes[h] * F.cumulative(sizes[g]))
    return C


def dips(order, rel, memb, F: RefBrowsing, ct: float):
    """000 eq. 11: M_gh = (1/C_gh) sum_i sum_k F(k) d_U(i, sigma(k)) a_ig a_{sigma(k) h}.  Returns (M, valid)."""
    n = len(order)
    G = len(memb[0])
    pos = positions(order)
    expo = F.exposure([rel[order[k]] for k in range(n)])
    S = _zeros(G)
    for g in range(G):
        for h in range(G):
            for i in range(n):
                for k in range(n):
                    j = order[k]
                    S[g][h] += memb[i][g] * memb[j][h] * expo[k] * d_u(i, j, pos, rel, ct)
    return _div(S, dips_normaliser(memb, F))


def igi(order, rel, memb, ct: float = 0.0):
    """000 eq. 1 with C^IGI_gh = sum_{i in g, j in h} [1(r_i > r_j) + c_t 1(r_i = r_j)] (§4.4)."""
    n = len(order)
    G = len(memb[0])
    pos = positions(order)
    S, C = _zeros(G), _zeros(G)
    for g in range(G):
        for h in range(G):
            for i in range(n):
                for j in range(n):
                    if i == j:
                        continue
                    a = memb[i][g] * memb[j][h]
                    S[g][h] += a * d_u(i, j, pos, rel, ct)
                    if rel[i] > rel[j]:
                        C[g][h] += a
                    elif rel[i] == rel[j]:
                        C[g][h] += a * ct
    return _div(S, C)


def ree(order, rel, memb, ct: float = 0.0):
    """000 eq. 1 with C^REE_gh = number of (i in g, j in h) pairs, i != j (= N_g N_h for g != h)."""
    n = len(order)
    G = len(memb[0])
    pos = positions(order)
    S, C = _zeros(G), _zeros(G)
    for g in range(G):
        for h in range(G):
            for i in range(n):
                for j in range(n):
                    if i == j:
                        continue
                    a = memb[i][g] * memb[j][h]
                    S[g][h] += a * d_u(i, j, pos, rel, ct)
                    C[g][h] += a
    return _div(S, C)


def pairwise_accuracy(order, rel, memb):
    """002 eq. 11: A_{g>h} = P(i above j | r_i > r_j, i in g, j in h)."""
    n = len(order)
    G = len(memb[0])
    pos = positions(order)
    num, den = _zeros(G), _zeros(G)
    for g in range(G):
        for h in range(G):
            for i in range(n):
                for j in range(n):
                    if i != j and rel[i] > rel[j]:
                        a = memb[i][g] * memb[j][h]
                        den[g][h] += a
                        if pos[i] < pos[j]:
                            num[g][h] += a
    return _div(num, den)


def rank_parity(order, memb):
    """001 eq. 8-9.  Returns (wins [G][G], valid_wins, per_group [G], pair [G], valid [G]).

    wins[g][h]: fraction of the (i in g, j in h) pairs with i ranked above j;
    per_group[g] = pair_{G_p = g}: mixed pairs won by g / mixed pairs (partner in another *known* group);
    pair[g] = |1 - 2 per_group[g]|."""
    n = len(order)
    G = len(memb[0])
    pos = positions(order)
    won, tot = _zeros(G), _zeros(G)
    for g in range(G):
        for h in range(G):
            for i in range(n):
                for j in range(n):
                    if i == j:
                        continue
                    a = memb[i][g] * memb[j][h]
                    tot[g][h] += a
                    if pos[i] < pos[j]:
                        won[g][h] += a
    wins, vw = _div(won, tot)
    per_group, pair, valid = [0.0] * G, [0.0] * G, [False] * G
    for g in range(G):
        w = sum(won[g][h] for h in range(G) if h != g)
        t = sum(tot[g][h] for h in range(G) if h != g)
        if t > 0:
            per_group[g] = w / t
            pair[g] = abs(1 - 2 * per_group[g])
            valid[g] = True
    return wins, vw, per_group, pair, valid


def kuhlman_pair_literal(order, ids, protected):
    """001 eq. 8 literally, for hard ids: 1/(|G_p| (|X| - |G_p|)) sum_{i in G_p} sum_{j not in G_p} 1(rho_i < rho_j),
    X = the items of known group."""
    pos = positions(order)
    X = [i for i in range(len(order)) if ids[i] >= 0]
    Gp = [i for i in X if ids[i] == protected]
    rest = [j for j in X if ids[j] != protected]
    if not Gp or not rest:
        return None
    s = sum(1 for i in Gp for j in rest if pos[i] < pos[j])
    return s / (len(Gp) * len(rest))


def discordant_fraction(order, rel):
    """000 eq. 3 (discordant pairs over C = n(n-1)/2).  Returns (M, valid)."""
    n = len(order)
    pos = positions(order)
    D = 0.0
    for i in range(n):
        for j in range(n):
            if pos[j] < pos[i] and rel[i] > rel[j]:
                D += 1.0
    C = n * (n - 1) / 2
    if C <= 0:
        return 0.0, False
    return D / C, True


def kendall_tau(order, rel):
    M, valid = discordant_fraction(order, rel)
    return (1 - 2 * M if valid else 0.0), valid


def kendall_tau_a(order, rel):
    """Textbook tau-a (concordant - discordant) / (n(n-1)/2) between ranking and relevance; pairs tied in
    relevance count as concordant here (000's convention), which equals tau-a without relevance ties."""
    n = len(order)
    pos = positions(order)
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            if rel[i] == rel[j]:
                conc += 1
            elif (pos[i] - pos[j]) * (rel[j] - rel[i]) > 0:
                conc += 1
            else:
                disc += 1
    return (conc - disc) / (n * (n - 1) / 2)
