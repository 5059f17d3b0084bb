"""Synthetic ratings with MovieLens-20M's shape, written as ML-20M's files: scale tests without the real data.

:func:`generate_ml20m` writes ``ratings.csv`` (``userId,movieId,rating,timestamp``) and ``movies.csv``
(``movieId,title,genres``) into a directory, with the headers and formats of the GroupLens ``ml-20m`` archive, so
that ``load_movielens("ml-20m", root=directory)`` and everything after it (split, item groups, training,
evaluation) run on data of the real size: 138 493 users, 26 744 items, 20 000 263 ratings at ``scale=1``
(Harper & Konstan, "The MovieLens Datasets: History and Context", ACM TiiS 2015, Table 1).  No real data is read
or copied: only the shape and coarse statistics are imitated.

What is drawn (all from ``seed``; the files depend only on ``seed`` and the shape, not on how they are written):

* items: ``n_items`` sparse ``movieId`` in ``1..~131 262`` (ML-20M's largest id), a release year in the title
  (``"Synthetic Movie 17 (1995)"``, some as ``"..., The (1995)"`` so that the csv quoting is exercised, a few with no
  year), 1-6 of ML-20M's 19 genres by their frequency there (Drama most common), about 1 % with
  ``(no genres listed)``;
* popularity: log-normal item weights (sigma 3, clipped at 3 sd), so that ratings per item are long-tailed
  (ML-20M: median 18, mean 748, max 67 310); every item is rated at least once;
* activity: ratings per user ``20 + X`` with ``X`` log-normal (sigma 1.38, ML-20M's median 68 / mean 144.4), scaled
  so that the total is exactly ``n_ratings``, capped at 34.6 % of the catalogue (ML-20M's 9 254 of 26 744);
* each user's items: weighted sampling without replacement by popularity (repeated draws rejected; the heaviest
  users by the exponential-key method), in a random order;
* ratings: ``3.27 + user bias + item bias + noise``, item bias slightly larger for popular items, rounded to half
  stars (0.5-5) for 60 % of the users and to whole stars (1-5) for the others;
* timestamps: strictly increasing per user in file order (each user's rows are written in time order), inside
  ML-20M's window 9 January 1995 - 31 March 2015, each user active over a log-normal span (median 30 days) with
  session-like gaps.

``scale`` shrinks it: ``n_users`` and ``n_ratings`` scale by ``scale``, ``n_items`` by ``sqrt(scale)`` (so that the
catalogue stays larger than the heaviest users' profiles); each can also be given directly.

Speed: vectorised numpy on chunks of 4 096 users, each formatted to csv bytes without a Python loop per row and
appended to the file: the full size takes about a minute and a few hundred MB of memory.

Example::

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> stats = generate_ml20m(d, scale=0.001, seed=0)
    >>> stats["n_users"], stats["n_items"], stats["n_ratings"]
    (138, 846, 20000)
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .._validation import check_int

__all__ = ["generate_ml20m", "ml20m_shape", "ML20M_SHAPE", "ML20M_GENRES"]

#: ML-20M's shape: users, items (rated movies), ratings
ML20M_SHAPE = {"n_users": 138_493, "n_items": 26_744, "n_ratings": 20_000_263}
#: ML-20M's genres with the share of movies listing each (rounded; from the published movies.csv counts)
ML20M_GENRES = {"Action": 0.13, "Adventure": 0.09, "Animation": 0.04, "Children": 0.04, "Comedy": 0.31,
                "Crime": 0.11, "Documentary": 0.09, "Drama": 0.49, "Fantasy": 0.05, "Film-Noir": 0.01,
                "Horror": 0.10, "IMAX": 0.007, "Musical": 0.04, "Mystery": 0.06, "Romance": 0.15, "Sci-Fi": 0.07,
                "Thriller": 0.15, "War": 0.04, "Western": 0.03}
_MAX_MOVIE_ID = 131_262
_MIN_RATINGS = 20
_CAP_SHARE = 9254 / 26744          # the heaviest ML-20M user rated 34.6 % of the rated movies
_T0, _T1 = 789_652_009, 1_427_784_002  # ML-20M's first and last timestamps
_CHUNK = 4096                      # users per chunk (fixed: the files must not depend on it)
_HEAVY = 0.05                      # users rating more than this share of the catalogue use exponential keys
_MANIFEST = "synthetic_ml20m.json"


def ml20m_shape(scale: float = 1.0, n_users: Optional[int] = None, n_items: Optional[int] = None,
                n_ratings: Optional[int] = None) -> Dict[str, int]:
    """``{"n_users", "n_items", "n_ratings"}`` for ``scale`` (users and ratings x scale, items x sqrt(scale)),
    explicit values winning; ``ValueError`` when every user cannot get 20 ratings within the per-user cap."""
    ok = isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale) and 0 < scale <= 1
    if not ok:
        raise ValueError(f"`scale` must be in (0, 1]; got {scale!r}")
    U = check_int(n_users, "n_users", 1) if n_users is not None else max(1, round(ML20M_SHAPE["n_users"] * scale))
    I = check_int(n_items, "n_items", 1) if n_items is not None else \
        max(2 * _MIN_RATINGS, round(ML20M_SHAPE["n_items"] * math.sqrt(scale)))
    R = check_int(n_ratings, "n_ratings", 1) if n_ratings is not None else round(ML20M_SHAPE["n_ratings"] * scale)
    cap = _cap(I)
    if R < _MIN_RATINGS * U or R > cap * U or cap < _MIN_RATINGS:
        raise ValueError(f"{R} ratings cannot give {U} users between {_MIN_RATINGS} and {cap} ratings each (the cap "
                         f"is {_CAP_SHARE:.1%} of {I} items); change n_users, n_items or n_ratings")
    if R < I:
        raise ValueError(f"{R} ratings cannot rate each of {I} items at least once")
    return {"n_users": U, "n_items": I, "n_ratings": R}


def _cap(n_items: int) -> int:
    return max(_MIN_RATINGS, int(round(_CAP_SHARE * n_items)))


# ----------------------------------------------------------------------------------------------- drawing

def _profile_sizes(rng: np.random.Generator, U: int, R: int, cap: int) -> np.ndarray:
    """Ratings per user: ``20 + X``, X log-normal, summing exactly to ``R``, each at most ``cap``."""
    extra_total = R - _MIN_RATINGS * U
    room = cap - _MIN_RATINGS
    x = rng.lognormal(0.0, 1.38, U)
    target = np.zeros(U)
    free = np.ones(U, dtype=bool)
    left = float(extra_total)
    for _ in range(100):  # proportional shares, users over the cap pinned to it and the rest re-shared
        share = np.where(free, x, 0.0)
        target[free] = share[free] * (left / share[free].sum()) if free.any() else 0.0
        over = free & (target > room)
        if not over.any():
            break
        target[over] = room
        free &= ~over
        left = extra_total - target[~free].sum()
    base = np.floor(target).astype(np.int64)
    rest = int(extra_total - base.sum())
    if rest > 0:  # largest fractional parts first, among users below the cap
        frac = np.where(base < room, target - base, -1.0)
        base[np.argsort(-frac, kind="stable")[:rest]] += 1
    return base + _MIN_RATINGS


def _item_weights(rng: np.random.Generator, I: int) -> np.ndarray:
    z = np.clip(rng.standard_normal(I), -3.0, 3.0)
    return np.exp(3.0 * z)


def _draw_profiles(rng: np.random.Generator, sizes: np.ndarray, forced: list, weights: np.ndarray,
                   cdf: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Item indices of each user of a chunk (``sizes[k]`` distinct items, user ``k``'s ``forced`` items among
    them) by weighted sampling without replacement; returns ``(user_of_row, item_of_row)`` grouped by user in a
    random order within each user."""
    I = len(weights)
    heavy = sizes > max(_MIN_RATINGS, _HEAVY * I)
    users_out, items_out = [], []
    light = np.flatnonzero(~heavy)
    if len(light):
        sz = sizes[light]
        total = int(sz.sum())
        starts = np.r_[0, np.cumsum(sz)[:-1]]
        user_of = np.repeat(light, sz)
        items = np.searchsorted(cdf, rng.random(total) * cdf[-1], side="right").astype(np.int64)
        items = np.minimum(items, I - 1)
        for j, u in enumerate(light):  # the forced items first: they are the occurrences kept
            f = forced[u]
            if f:
                items[starts[j]:starts[j] + len(f)] = f
        rows = np.arange(total)
        for _ in range(200):
            key = user_of[rows] * I + items[rows]
            order = np.argsort(key, kind="stable")  # stable: the earliest occurrence (a forced item) is kept
            ks = key[order]
            dup = order[1:][ks[1:] == ks[:-1]]
            if len(dup) == 0:
                rows = rows[:0]
                break
            redo = rows[dup]
            items[redo] = np.minimum(np.searchsorted(cdf, rng.random(len(redo)) * cdf[-1], side="right"), I - 1)
            bad_users = np.unique(user_of[redo])
            rows = np.flatnonzero(np.isin(user_of, bad_users))
        if len(rows):  # not reached in practice: exponential keys for whatever is left
            stuck = np.unique(user_of[rows])
            keep = ~np.isin(user_of, stuck)
            user_of, items = user_of[keep], items[keep]
            heavy[stuck] = True
        users_out.append(user_of)
        items_out.append(items)
    logw = np.log(weights)
    for u in np.flatnonzero(heavy):  # exponential keys (Efraimidis & Spirakis 2006): top-k of log w + Gumbel
        key = logw - np.log(-np.log(rng.random(I)))
        if forced[u]:
            key[forced[u]] = np.inf
        k = int(sizes[u])
        top = np.argpartition(-key, k - 1)[:k] if k < I else np.arange(I)
        users_out.append(np.full(k, u, dtype=np.int64))
        items_out.append(top.astype(np.int64))
    user_of = np.concatenate(users_out)
    items = np.concatenate(items_out)
    order = np.lexsort((rng.random(len(items)), user_of))  # grouped by user, random order within
    return user_of[order], items[order]


def _ratings(rng: np.random.Generator, user_bias: np.ndarray, half: np.ndarray, item_bias: np.ndarray,
             user_of: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Ratings x 2 (integers 1..10): half stars for ``half`` users, whole stars for the others."""
    r = 3.27 + user_bias[user_of] + item_bias[items] + rng.normal(0.0, 0.8, len(items))
    twice_half = np.clip(np.rint(2 * r), 1, 10)
    twice_whole = 2 * np.clip(np.rint(r), 1, 5)
    return np.where(half[user_of], twice_half, twice_whole).astype(np.int64)


def _timestamps(rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
    """Strictly increasing timestamps per user (rows grouped by user, ``sizes`` rows each)."""
    n = len(sizes)
    window = _T1 - _T0
    span = np.exp(rng.normal(math.log(30 * 86400), 2.0, n))
    span = np.clip(span, 2.0 * sizes, window - 1).astype(np.float64)
    start = _T0 + np.floor(rng.random(n) * (window - span)).astype(np.int64)
    total = int(sizes.sum())
    e = rng.exponential(1.0, total) * np.where(rng.random(total) < 0.05, 50.0, 1.0)  # sessions and breaks
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    esum = np.add.reduceat(e, starts) if total else np.zeros(0)
    seg = np.repeat(np.arange(n), sizes)
    room = span - sizes  # gaps of at least 1 s, the rest shared by the exponential weights
    gaps = 1 + np.floor(e / esum[seg] * room[seg]).astype(np.int64)
    gaps[starts] = 0
    csum = np.cumsum(gaps)
    return start[seg] + csum - np.repeat(csum[starts], sizes)


# ----------------------------------------------------------------------------------------------- writing

_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _digits(a: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(bytes [n, w] right-aligned ASCII digits, mask [n, w] of the digits to keep)`` of non-negative ints."""
    a = a.astype(np.int64)
    w = max(1, len(str(int(a.max())))) if len(a) else 1
    nd = np.ones(len(a), dtype=np.int64)
    for k in range(1, w):
        nd += a >= _POW10[k]
    pw = _POW10[:w][::-1]
    out = ((a[:, None] // pw) % 10).astype(np.uint8) + 48
    keep = np.arange(w)[None, :] >= (w - nd)[:, None]
    return out, keep


def _csv_bytes(user_ids: np.ndarray, movie_ids: np.ndarray, twice_rating: np.ndarray, ts: np.ndarray) -> bytes:
    """``userId,movieId,rating,timestamp`` rows (rating as ``d.d``) as bytes, without a Python loop per row."""
    n = len(user_ids)
    if n == 0:
        return b""
    parts, masks = [], []
    ones = np.ones((n, 1), dtype=bool)

    def sep(ch: str):
        parts.append(np.full((n, 1), ord(ch), dtype=np.uint8))
        masks.append(ones)

    for col in (user_ids, movie_ids):
        d, m = _digits(col)
        parts.append(d)
        masks.append(m)
        sep(",")
    r = np.empty((n, 3), dtype=np.uint8)
    r[:, 0] = 48 + twice_rating // 2
    r[:, 1] = ord(".")
    r[:, 2] = np.where(twice_rating % 2 == 1, ord("5"), ord("0"))
    parts.append(r)
    masks.append(np.ones((n, 3), dtype=bool))
    sep(",")
    d, m = _digits(ts)
    parts.append(d)
    masks.append(m)
    sep("\n")
    mat = np.concatenate(parts, axis=1)
    keep = np.concatenate(masks, axis=1)
    return mat[keep].tobytes()


def _movies_csv(movie_ids: np.ndarray, years: np.ndarray, the: np.ndarray, genres: list) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["movieId", "title", "genres"])
    for mid, y, t, g in zip(movie_ids.tolist(), years.tolist(), the.tolist(), genres):
        title = f"Synthetic Movie {mid}, The" if t else f"Synthetic Movie {mid}"
        if y > 0:
            title += f" ({y})"
        w.writerow([mid, title, "|".join(g) if g else "(no genres listed)"])
    return buf.getvalue().encode("utf-8")


def _items(rng: np.random.Generator, I: int, max_id: int):
    movie_ids = np.sort(rng.choice(max_id, size=I, replace=False) + 1).astype(np.int64)
    years = np.clip(2015 - np.floor(rng.exponential(18.0, I)).astype(np.int64), 1891, 2015)
    years[rng.random(I) < 0.002] = 0  # no year in the title
    the = rng.random(I) < 0.05
    names = sorted(ML20M_GENRES)
    p = np.array([ML20M_GENRES[g] for g in names])
    k = np.minimum(1 + rng.poisson(1.0, I), 6)
    keys = np.log(p)[None, :] - np.log(-np.log(rng.random((I, len(names)))))
    ranked = np.argsort(-keys, axis=1)
    none = rng.random(I) < 0.009
    genres = [[] if none[i] else sorted(names[j] for j in ranked[i, :k[i]]) for i in range(I)]
    return movie_ids, years, the, genres


def generate_ml20m(directory, *, scale: float = 1.0, seed: int = 0, n_users: Optional[int] = None,
                   n_items: Optional[int] = None, n_ratings: Optional[int] = None,
                   overwrite: bool = False) -> Dict[str, Any]:
    """Write ``ratings.csv`` and ``movies.csv`` with ML-20M's shape into ``directory`` (module doc); returns the
    shape and statistics (also written to ``synthetic_ml20m.json`` there).

    ``scale`` in (0, 1]: users and ratings x scale, items x sqrt(scale) (:func:`ml20m_shape`; ``n_users``,
    ``n_items``, ``n_ratings`` override).  ``seed``: everything drawn.  An existing ``ratings.csv`` is an error
    unless ``overwrite``; the files are written under temporary names and renamed when complete."""
    shape = ml20m_shape(scale, n_users, n_items, n_ratings)
    seed = check_int(seed, "seed", 0)
    if not isinstance(overwrite, bool):
        raise ValueError(f"`overwrite` must be a bool; got {overwrite!r}")
    U, I, R = shape["n_users"], shape["n_items"], shape["n_ratings"]
    out = Path(os.path.expanduser(os.fspath(directory)))
    out.mkdir(parents=True, exist_ok=True)
    if (out / "ratings.csv").exists() and not overwrite:
        raise ValueError(f"{out / 'ratings.csv'} exists; pass overwrite=True to replace it")
    max_id = max(I, int(round(_MAX_MOVIE_ID * I / ML20M_SHAPE["n_items"])))
    cap = _cap(I)
    movie_ids, years, the, genres = _items(np.random.default_rng([seed, 1]), I, max_id)
    rng = np.random.default_rng([seed, 2])
    sizes = _profile_sizes(rng, U, R, cap)
    weights = _item_weights(rng, I)
    cdf = np.cumsum(weights)
    z_pop = (np.log(weights) - np.log(weights).mean()) / max(np.log(weights).std(), 1e-12)
    item_bias = rng.normal(0.0, 0.45, I) + 0.15 * z_pop
    user_bias = rng.normal(0.0, 0.45, U)
    half = rng.random(U) < 0.6
    # every item is rated at least once: each item goes into one user's profile, chosen by profile size
    owner = np.minimum(np.searchsorted(np.cumsum(sizes), rng.random(I) * sizes.sum(), side="right"), U - 1)
    over = np.bincount(owner, minlength=U) - sizes
    for u in np.flatnonzero(over > 0):  # (tiny catalogues only) a profile cannot hold all its items: move some
        for i in np.flatnonzero(owner == u)[:over[u]]:
            room = np.flatnonzero(np.bincount(owner, minlength=U) < sizes)
            owner[i] = room[rng.integers(len(room))]
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(U + 1))
    tmp_r, tmp_m = out / f"ratings.csv.part{os.getpid()}", out / f"movies.csv.part{os.getpid()}"
    counts = np.zeros(I, dtype=np.int64)
    hist = np.zeros(11, dtype=np.int64)
    ts_min, ts_max, monotone = None, None, True
    with open(tmp_r, "wb") as f:
        f.write(b"userId,movieId,rating,timestamp\n")
        for c, a in enumerate(range(0, U, _CHUNK)):
            b = min(U, a + _CHUNK)
            crng = np.random.default_rng([seed, 3, c])
            forced = [order[bounds[u]:bounds[u + 1]].tolist() for u in range(a, b)]
            local_u, items = _draw_profiles(crng, sizes[a:b], forced, weights, cdf)
            user_of = local_u + a
            twice = _ratings(crng, user_bias, half, item_bias, user_of, items)
            ts = _timestamps(crng, sizes[a:b])
            f.write(_csv_bytes(user_of + 1, movie_ids[items], twice, ts))
            counts += np.bincount(items, minlength=I)
            hist += np.bincount(twice, minlength=11)
            ts_min = int(ts.min()) if ts_min is None else min(ts_min, int(ts.min()))
            ts_max = int(ts.max()) if ts_max is None else max(ts_max, int(ts.max()))
            same_user = user_of[1:] == user_of[:-1]
            monotone &= bool((ts[1:][same_user] > ts[:-1][same_user]).all())
    tmp_m.write_bytes(_movies_csv(movie_ids, years, the, genres))
    os.replace(tmp_m, out / "movies.csv")
    os.replace(tmp_r, out / "ratings.csv")
    twice_mean = float((hist * np.arange(11)).sum() / max(hist.sum(), 1)) / 2
    head = int(np.searchsorted(np.cumsum(np.sort(counts)[::-1]), 0.5 * R) + 1)
    stats = {
        "generator": "torchfair.data.ml20m.generate_ml20m", "seed": seed, "scale": scale, **shape,
        "per_user": {"min": int(sizes.min()), "median": float(np.median(sizes)), "mean": float(sizes.mean()),
                     "max": int(sizes.max())},
        "per_item": {"min": int(counts.min()), "median": float(np.median(counts)), "mean": float(counts.mean()),
                     "max": int(counts.max()), "items_holding_half_the_ratings": head},
        "ratings": {f"{k / 2:.1f}": int(hist[k]) for k in range(1, 11)}, "rating_mean": twice_mean,
        "timestamps": {"min": ts_min, "max": ts_max, "increasing_per_user": monotone},
        "genres": sorted(ML20M_GENRES), "files": ["ratings.csv", "movies.csv"],
    }
    (out / _MANIFEST).write_text(json.dumps(stats, indent=1) + "\n")
    return stats
