"""Plain-Python references for the exposure family, written from the papers' formulas (one list at a time).

A ranking is a list of item indices by 0-based position; ``F`` is a Python function of the 0-based position;
``groups`` a list of int ids (-1 = unknown).  Several rankings of the same list (a policy) are averaged.
"""
from __future__ import annotations

import math


def rbp(p):
    return lambda k: p ** k


def item_exposure(rankings, n, F):
    """E[F(pos_i)] averaged over the rankings (uniform weights)."""
    e = [0.0] * n
    for r in rankings:
        for k, i in enumerate(r):
            e[i] += F(k) / len(rankings)
    return e


def ideal_targets(rel, F):
    """000 eq. 15: t_i = mean over j with r_j = r_i of F(ideal position of j)."""
    n = len(rel)
    ideal = sorted(range(n), key=lambda i: -rel[i])
    pos = {i: k for k, i in enumerate(ideal)}
    t = []
    for i in range(n):
        same = [j for j in range(n) if rel[j] == rel[i]]
        t.append(sum(F(pos[j]) for j in same) / len(same))
    return t


def group_sum(x, groups, G):
    out = [0.0] * G
    for i, g in enumerate(groups):
        if g >= 0:
            out[g] += x[i]
    return out


def misallocation(rankings, rel, groups, G, F, target):
    """000 eq. 12 with eq. 13-16; totals over all items (unknown included). None if undefined."""
    n = len(groups)
    e = item_exposure(rankings, n, F)
    if target == "ea":
        t = list(rel)
    elif target == "ea-dp":
        t = [1.0] * n
    else:
        t = ideal_targets(rel, F)
    T, E = group_sum(t, groups, G), group_sum(e, groups, G)
    if sum(t) <= 0 or sum(e) <= 0:
        return None
    return [T[g] / sum(t) - E[g] / sum(e) for g in range(G)]


def individual_misallocation_ea(rankings, rel, F):
    """000 §5.2: M_i = c_i sum_i' F(pos_i') - F(pos_i), c_i = r_i / sum r."""
    n = len(rel)
    e = item_exposure(rankings, n, F)
    return [rel[i] / sum(rel) * sum(e) - e[i] for i in range(n)]


def expected_exposure(rankings, rel, F, groups=None, G=None):
    """(EE-L, EE-D, EE-R) of 002 eq. 9, 5, 10 (EE-R = eps . eps*, not doubled)."""
    n = len(rel)
    eps = item_exposure(rankings, n, F)
    star = ideal_targets(rel, F)
    if groups is not None:
        eps, star = group_sum(eps, groups, G), group_sum(star, groups, G)
    loss = sum((a - b) ** 2 for a, b in zip(eps, star))
    disp = sum(a * a for a in eps)
    relv = sum(a * b for a, b in zip(eps, star))
    return loss, disp, relv


def iaa(sequence, F, groups=None, G=None):
    """002 eq. 8 / Biega et al.: per ranking normalise attention and utility, average over the sequence, l1.

    ``sequence``: list of (ranking, utility list, groups list or None)."""
    acc_a, acc_u, count = None, None, 0
    for ranking, util, grp in sequence:
        n = len(util)
        a = item_exposure([ranking], n, F)
        if sum(a) <= 0 or sum(util) <= 0:
            continue
        a = [x / sum(a) for x in a]
        u = [x / sum(util) for x in util]
        if grp is not None:
            a, u = group_sum(a, grp, G), group_sum(u, grp, G)
        acc_a = a if acc_a is None else [x + y for x, y in zip(acc_a, a)]
        acc_u = u if acc_u is None else [x + y for x, y in zip(acc_u, u)]
        count += 1
    if count == 0:
        return None
    return sum(abs(x - y) for x, y in zip(acc_a, acc_u)) / count


def awrf(rankings, groups, G, F, p, distance):
    """002 eq. 3 with table 4: eps = exposure distribution over the known groups."""
    e = item_exposure(rankings, len(groups), F)
    E = group_sum(e, groups, G)
    tot = sum(E)
    if tot <= 0:
        return None
    eps = [x / tot for x in E]
    if distance == "nd":
        return [abs(eps[g] - p[g]) for g in range(G)]
    if distance == "rd":
        return [None if (eps[g] == 1 or p[g] == 1) else abs(eps[g] / (1 - eps[g]) - p[g] / (1 - p[g]))
                for g in range(G)]
    s = 0.0
    for g in range(G):
        if eps[g] > 0:
            if p[g] == 0:
                return None
            s += eps[g] * math.log(eps[g] / p[g])
    return s


def ratio(kind, rankings, rel, groups, F, protected, reference=None):
    """002 eq. 4 (mean exposure per group), 6, 7 for one list. None if undefined."""
    n = len(groups)
    e = item_exposure(rankings, n, F)

    def members(g):
        if g is None:
            return [i for i in range(n) if groups[i] >= 0 and groups[i] != protected]
        return [i for i in range(n) if groups[i] == g]

    P, R = members(protected), members(reference)
    if kind == "dp":
        x = lambda S: sum(e[i] for i in S)  # noqa: E731
        y = lambda S: len(S)  # noqa: E731
    elif kind == "eur":
        x = lambda S: sum(e[i] for i in S)  # noqa: E731
        y = lambda S: sum(rel[i] for i in S)  # noqa: E731
    else:
        x = lambda S: sum(e[i] * rel[i] for i in S)  # noqa: E731
        y = lambda S: sum(rel[i] for i in S)  # noqa: E731
    if y(P) <= 0 or y(R) <= 0 or x(R) <= 0:
        return None
    return (x(P) / y(P)) / (x(R) / y(R))


def exp_rr(rankings, groups, G, F):
    """001 eq. 6-7 for each group g as protected, the other known items as the rest."""
    n = len(groups)
    e = item_exposure(rankings, n, F)
    out = []
    for g in range(G):
        P = [i for i in range(n) if groups[i] == g]
        Rst = [i for i in range(n) if groups[i] >= 0 and groups[i] != g]
        if not P or not Rst:
            out.append(None)
            continue
        mp = sum(e[i] for i in P) / len(P)
        mr = sum(e[i] for i in Rst) / len(Rst)
        out.append(abs(1 - 2 * mp / (mp + mr)))
    return out
