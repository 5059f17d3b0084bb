"""Plain-Python loop references for the prefix measures, written from the formulas (no torch).

A ranking is given as the list of group ids in ranked order (position 0 first); -1 = unknown group.
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, List, Optional, Sequence


#: a maximum this small is 0 up to the rounding of the float sums (the value is then undefined)
Z_ROUNDING = 1e-12


def disc(i: int) -> float:
    """Cut-off discount 1/log2(i), with log2(max(i, 2)) so that a cut-off at 1 weighs 1."""
    return 1.0 / math.log2(max(i, 2))


def count(prefix: Sequence[int], g: int) -> int:
    return sum(1 for x in prefix if x == g)


def delta_nd(prefix, p_hat, protected):
    return abs(count(prefix, protected) / len(prefix) - p_hat)


def delta_rd(prefix, p_hat, protected):
    pos = count(prefix, protected)
    neg = len(prefix) - pos
    ratio = pos / neg if neg > 0 else 0.0
    return abs(ratio - p_hat / (1 - p_hat))


def kl(P: Sequence[float], Q: Sequence[float]) -> float:
    s = 0.0
    for p, q in zip(P, Q):
        if p > 0:
            s += p * math.log(p / q)
    return s


def distribution(prefix, G) -> Optional[List[float]]:
    known = [x for x in prefix if x >= 0]
    if not known:
        return None
    return [count(known, g) / len(known) for g in range(G)]


def delta_kl_multi(prefix, target, G):
    P = distribution(prefix, G)
    return 0.0 if P is None else kl(P, target)


def delta_kl_binary(prefix, p_hat, protected):
    P = count(prefix, protected) / len(prefix)
    return kl([P, 1 - P], [p_hat, 1 - p_hat])


def pref_raw(ranking, delta, step, *, protected=1, target=None, G=None, k=None):
    """Unnormalised sum_{i = step, 2 step, ... <= min(n, k)} delta(L<=i) / log2(i)."""
    n = len(ranking)
    if delta == "kl":
        G = G if G is not None else max(ranking) + 1
        target = target if target is not None else distribution(ranking, G)
        f = lambda pre: delta_kl_multi(pre, target, G)
    else:
        p_hat = target if target is not None else count(ranking, protected) / n
        fn = {"nd": delta_nd, "rd": delta_rd, "kl2": delta_kl_binary}[delta]
        f = lambda pre: fn(pre, p_hat, protected)
    total = 0.0
    last = n if k is None else min(k, n)
    for i in range(step, last + 1, step):
        total += f(ranking[:i]) * disc(i)
    return total


def arrangements(ranking):
    """All distinct orderings of the multiset of group ids."""
    return set(itertools.permutations(ranking))


def brute_max(ranking, delta, step, **kw):
    return max(pref_raw(list(r), delta, step, **kw) for r in arrangements(ranking))


def pref_ref(ranking, delta, step, **kw):
    Z = brute_max(ranking, delta, step, **kw)
    return pref_raw(ranking, delta, step, **kw) / Z if Z > Z_ROUNDING else 0.0


def skew_ref(ranking, g, k, target=None):
    kk = min(k, len(ranking))
    top = count(ranking[:kk], g)
    q = target if target is not None else count(ranking, g) / len(ranking)
    if top == 0 or q == 0:
        return None
    return math.log((top / kk) / q)


def ndkl_ref(ranking, G, k=None, target=None):
    target = target if target is not None else distribution(ranking, G)
    last = len(ranking) if k is None else min(k, len(ranking))
    num = 0.0
    Z = 0.0
    for i in range(1, last + 1):
        w = 1.0 / math.log2(i + 1)
        num += w * delta_kl_multi(ranking[:i], target, G)
        Z += w
    return num / Z


def binom_cdf(x: int, k: int, p: float) -> float:
    return sum(math.comb(k, j) * p ** j * (1 - p) ** (k - j) for j in range(0, x + 1))


def fair_ref(ranking, protected=1, p=None, k=None):
    n = len(ranking)
    p = p if p is not None else count(ranking, protected) / n
    last = n if k is None else min(k, n)
    return sum(binom_cdf(count(ranking[:j], protected), j, p) for j in range(1, last + 1)) / last
