"""Recommender data for ranking with fairness measures: indices, splits, item groups, ranking lists, batches.

Pure numpy / pandas (torch only for :func:`collate_lists` and the ``Dataset`` classes); no lightning.

* :func:`encode`: contiguous user / item indices (items over the whole catalogue, sorted by ``item_id``);
* :func:`split_ratings`: ``"leave_last_n"`` (per user), ``"leave_random_n"`` (per user, seeded),``"temporal"`` (global, Korevaar et al., "Matched Pair
  Calibration for Ranking Fairness", §5) or ``"random"``;
* :func:`item_groups`: the item groups a fairness measure compares (popularity head / tail, one genre vs the rest,
  soft genre membership, release decade);
* :func:`build_features`: user demographic codes, item genre multi-hot and decade codes;
* :func:`training_lists` / :func:`evaluation_lists`: one ranking list per user; :func:`collate_lists` pads them to
  a batch of tensors ``[B, N]``.

How many users can be evaluated (ML-100K, 943 users, measured with the defaults): ``leave_last_n`` (``n_test=10``,
``n_val=5``) gives all 943 users 10 test ratings (the smallest profile has 20 ratings); the global ``temporal``
split (``test_fraction=0.2``) cuts on 7 March 1998, after most users' last rating: 301 users have test ratings and
only 102 have both training and test ratings; ``random`` (``test_fraction=0.2``) gives 942 users test ratings.

Example::

    >>> from torchfair.data.movielens import synthetic_movielens
    >>> enc = encode(synthetic_movielens(n_users=8, n_items=30, seed=0))
    >>> split = split_ratings(enc.ratings, "leave_last_n", n_test=3, n_val=2)
    >>> len(split.test), split.test.groupby("user").size().unique().tolist()
    (24, [3])
    >>> groups = item_groups(enc, split.train, "popularity", head_share=0.5)
    >>> groups.names, groups.num_groups
    (['head', 'tail'], 2)
    >>> lists = evaluation_lists(split.train, split.test, enc.num_items, exclude=split.val)
    >>> batch = collate_lists([lists[0], lists[1]], groups, build_features(enc))
    >>> batch["items"].shape == batch["mask"].shape == batch["groups"].shape
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._extras import require

require("torchfair.data.recsys", "train", ("pandas",))

import pandas as pd  # noqa: E402
import torch

from .._validation import check_int

__all__ = ["Encoded", "encode", "Split", "split_ratings", "SPLIT_METHODS", "ItemGroups", "item_groups",
           "GROUP_KINDS", "FeatureTables", "build_features", "age_bucket", "AGE_BUCKETS", "RankingLists",
           "training_lists", "evaluation_lists", "collate_lists", "TrainingListDataset", "EvaluationListDataset"]

SPLIT_METHODS = ("leave_last_n", "leave_random_n", "temporal", "random")
GROUP_KINDS = ("popularity", "genre", "genres", "decade")
#: age buckets of the user features (ML-1M's codes 1, 18, 25, 35, 45, 50, 56 are their lower bounds);
#: code 0 is unknown, bucket k has code k + 1
AGE_BUCKETS = ("<18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+")
_AGE_EDGES = np.array([18, 25, 35, 45, 50, 56])


def _check_fraction(value, name: str, low_open: bool = True, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (0 <= value < 1) if allow_zero else (0 < value < 1)
    if not ok:
        raise ValueError(f"`{name}` must be in {'[0, 1)' if allow_zero else '(0, 1)'}; got {value!r}")
    return float(value)


def _check_frame(df, name: str, columns: Sequence[str]) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"`{name}` must be a pandas DataFrame; got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"`{name}` lacks the column(s) {', '.join(missing)}; has {', '.join(map(str, df.columns))}")
    return df


# ----------------------------------------------------------------------------------------------- encoding

@dataclass(repr=False)
class Encoded:
    """A MovieLens with contiguous indices.

    ``ratings``: columns ``user``, ``item`` (indices, int32: ML-25M has 162 541 users and 62 423 items),
    ``rating`` float32, ``timestamp`` int64, ``user_id``, ``item_id`` (raw, the loaded frame's arrays shared, not
    copied); ``items`` / ``users``: the tables sorted by raw id, row ``k`` = index ``k``; ``item_ids`` /
    ``user_ids``: raw id by index (int64)."""

    variant: str
    ratings: pd.DataFrame
    items: pd.DataFrame
    users: pd.DataFrame
    item_ids: np.ndarray
    user_ids: np.ndarray
    genres: List[str]

    @property
    def num_users(self) -> int:
        return len(self.user_ids)

    @property
    def num_items(self) -> int:
        return len(self.item_ids)

    def __repr__(self) -> str:
        return (f"Encoded(variant={self.variant!r}, num_users={self.num_users}, num_items={self.num_items}, "
                f"ratings={len(self.ratings)})")


def _index_dtype(n: int):
    """int32 for indices below 2**31 (every MovieLens variant), else int64."""
    return np.int32 if n < 2 ** 31 else np.int64


def encode(ml) -> Encoded:
    """Contiguous indices for a :class:`~torchfair.data.movielens.MovieLens`: items ``0..I-1`` over every item of
    the items table sorted by ``item_id`` (never-rated items included), users ``0..U-1`` over the users table
    sorted by ``user_id``.  Ratings of ids not in the tables are a ``ValueError``."""
    for attr in ("ratings", "items", "users", "genres", "variant"):
        if not hasattr(ml, attr):
            raise ValueError(f"`ml` must be a MovieLens (no attribute {attr!r}); got {type(ml).__name__}")
    ratings = _check_frame(ml.ratings, "ml.ratings", ("user_id", "item_id", "rating", "timestamp"))
    items = _check_frame(ml.items, "ml.items", ("item_id", "genres")).sort_values("item_id", kind="stable")
    users = _check_frame(ml.users, "ml.users", ("user_id",)).sort_values("user_id", kind="stable")
    items, users = items.reset_index(drop=True), users.reset_index(drop=True)
    item_ids = items["item_id"].to_numpy(np.int64)
    user_ids = users["user_id"].to_numpy(np.int64)
    if len(item_ids) == 0 or len(user_ids) == 0:
        raise ValueError("`ml` must have at least one item and one user")
    for ids, name in ((item_ids, "item_id"), (user_ids, "user_id")):
        if (np.diff(ids) == 0).any():
            raise ValueError(f"`ml` has a duplicate {name} in its table")
    cols = {}
    for col, ids, out in (("user_id", user_ids, "user"), ("item_id", item_ids, "item")):
        raw = ratings[col].to_numpy(np.int64)
        idx = np.searchsorted(ids, raw)
        idx_c = np.minimum(idx, len(ids) - 1)
        bad = ids[idx_c] != raw
        if bad.any():
            raise ValueError(f"`ml.ratings` has {col} {int(raw[np.flatnonzero(bad)[0]])} not in its table")
        del bad
        cols[out] = idx_c.astype(_index_dtype(len(ids)))
        del idx, idx_c
    # rating, timestamp and the raw ids are the loaded frame's arrays (no copy when their dtypes already fit)
    enc = pd.DataFrame({"user": cols.pop("user"), "item": cols.pop("item"),
                        "rating": ratings["rating"].to_numpy(np.float32),
                        "timestamp": ratings["timestamp"].to_numpy(np.int64),
                        "user_id": ratings["user_id"].to_numpy(np.int64),
                        "item_id": ratings["item_id"].to_numpy(np.int64)}, copy=False)
    return Encoded(variant=str(ml.variant), ratings=enc, items=items, users=users, item_ids=item_ids,
                   user_ids=user_ids, genres=list(ml.genres))


# ----------------------------------------------------------------------------------------------- splits

def _user_time_order(users: np.ndarray, ts: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """``np.lexsort((tie, ts, users))`` (by user, then time, then ``tie``, a permutation of ``0..n-1``) with one
    stable argsort of an int64 ``(user, time)`` key taken in ``tie`` order: the same order, about 3x faster on
    ML-20M's 20M ratings."""
    n = len(users)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    u = users.astype(np.int64, copy=False)
    t = ts.astype(np.int64, copy=False)
    u0, t0 = int(u.min()), int(t.min())
    span = int(t.max()) - t0 + 1
    if (int(u.max()) - u0 + 1) * span >= 2 ** 62:  # the key would overflow
        return np.lexsort((tie, ts, users))
    by_tie = np.empty(n, dtype=np.int64)
    by_tie[tie] = np.arange(n)  # element indices in increasing tie value
    key = (u[by_tie] - u0) * span + (t[by_tie] - t0)
    return by_tie[np.argsort(key, kind="stable")]


@dataclass(repr=False)
class Split:
    """``train``, ``val``, ``test`` rating frames (rows in the input's order, fresh index) and the ``method``."""

    train: pd.DataFrame
    val: pd.DataFrame
    test: pd.DataFrame
    method: str

    def summary(self, user_col: str = "user") -> Dict[str, int]:
        """Sizes: ratings per part and users with ratings in each part (and in both train and test)."""
        u = {k: set(np.unique(getattr(self, k)[user_col].to_numpy()).tolist()) for k in ("train", "val", "test")}
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test),
                "users_train": len(u["train"]), "users_val": len(u["val"]), "users_test": len(u["test"]),
                "users_train_and_test": len(u["train"] & u["test"])}

    def __repr__(self) -> str:
        return f"Split(method={self.method!r}, train={len(self.train)}, val={len(self.val)}, test={len(self.test)})"


def _user_column(df: pd.DataFrame, name: str) -> str:
    for c in ("user", "user_id"):
        if c in df.columns:
            return c
    raise ValueError(f"`{name}` must have a `user` (index) or `user_id` column")


def split_ratings(ratings: pd.DataFrame, method: str = "leave_last_n", *, n_test: int = 10, n_val: int = 5,
                  test_fraction: float = 0.2, val_fraction: float = 0.1, min_train: int = 1,
                  seed: int = 0) -> Split:
    """Split ratings into train / validation / test, deterministically given ``seed``.

    * ``"leave_last_n"``: per user, ordered by timestamp (ties in a random order drawn from ``seed``), the last
      ``n_test`` ratings are test and the ``n_val`` before them validation, keeping at least ``min_train`` in
      training (a user with few ratings loses validation first, then test ratings);
    * ``"leave_random_n"``: the same per-user counts, but the held-out ratings are a uniform random draw from
      ``seed`` instead of the latest ones (the per-user random hold-out of most recommender evaluations): each
      seed gives another train / validation / test partition, so a spread over seeds covers the split too;
    * ``"temporal"`` (Korevaar et al. 2023, §5: the earliest 80% of the ratings train): with ``t`` the timestamp
      of the rating at position ``round((1 - test_fraction) n)`` of the ratings sorted by time, ratings before
      ``t`` train and the rest (ties at ``t`` included) test, so nothing in training is later than a test
      rating; validation is the latest ``val_fraction`` of the training part by the same rule;
    * ``"random"``: a seeded shuffle of the ratings, ``test_fraction`` of them test, ``val_fraction`` validation.

    ``ratings`` needs a ``timestamp`` column and ``user`` (or ``user_id``).  Hand example (``"temporal"``,
    ``test_fraction=0.25``): timestamps ``[5, 1, 3, 3, 9, 7, 2, 8]`` sorted ``[1, 2, 3, 3, 5, 7, 8, 9]``,
    position ``round(0.75 * 8) = 6`` holds ``8``: the ratings at 8 and 9 are test.
    """
    method = method if isinstance(method, str) else repr(method)
    if method not in SPLIT_METHODS:
        raise ValueError(f"`method` must be one of {', '.join(repr(m) for m in SPLIT_METHODS)}; got {method!r}")
    _check_frame(ratings, "ratings", ("timestamp",))
    ucol = _user_column(ratings, "ratings")
    n_test, n_val = check_int(n_test, "n_test", 1), check_int(n_val, "n_val", 0)
    min_train, seed = check_int(min_train, "min_train", 0), check_int(seed, "seed", 0)
    test_fraction = _check_fraction(test_fraction, "test_fraction")
    val_fraction = _check_fraction(val_fraction, "val_fraction", allow_zero=True)
    n = len(ratings)
    ts = ratings["timestamp"].to_numpy(np.int64)
    part = np.zeros(n, dtype=np.int8)  # 0 train, 1 val, 2 test
    if method in ("leave_last_n", "leave_random_n"):
        users = ratings[ucol].to_numpy()
        tie = np.random.default_rng([seed, 1]).permutation(n)
        # leave_random_n: the "time" of each rating is a seeded random rank, so the last n are a uniform draw
        key = ts if method == "leave_last_n" else np.random.default_rng([seed, 2]).permutation(n).astype(np.int64)
        order = _user_time_order(users, key, tie)
        del tie
        su = users[order]
        starts = np.flatnonzero(np.r_[True, su[1:] != su[:-1]]) if n else np.zeros(0, np.int64)
        del su
        counts = np.diff(np.r_[starts, n])
        n_te = np.minimum(n_test, np.maximum(0, counts - min_train))
        n_va = np.minimum(n_val, np.maximum(0, counts - min_train - n_te))
        # per user (sorted by time): train, then n_va validation, then the n_te latest as test: steps of a running
        # sum (int8, no per-rating int64 temporaries: ML-20M has 20M ratings)
        end = starts + counts
        step = np.zeros(n + 1, dtype=np.int8)
        np.add.at(step, end - n_te - n_va, np.where(n_va > 0, 1, 0).astype(np.int8))
        np.add.at(step, end - n_te, np.where(n_te > 0, np.where(n_va > 0, 1, 2), 0).astype(np.int8))
        np.add.at(step, end, -np.where(n_te > 0, 2, 0).astype(np.int8))
        part[order] = np.cumsum(step[:n], dtype=np.int8)
        del order, step
    elif method == "temporal":
        def cut(t: np.ndarray, frac: float) -> np.ndarray:
            """True for the later part: timestamps >= the one at position round((1 - frac) len)."""
            k = int(round((1.0 - frac) * len(t)))
            if k >= len(t):
                return np.zeros(len(t), dtype=bool)
            return t >= np.sort(t, kind="stable")[k]
        is_test = cut(ts, test_fraction)
        part[is_test] = 2
        tr = np.flatnonzero(~is_test)
        if val_fraction > 0 and len(tr):
            part[tr[cut(ts[tr], val_fraction)]] = 1
    else:
        if test_fraction + val_fraction >= 1:
            raise ValueError(f"`test_fraction + val_fraction` must be < 1; got {test_fraction + val_fraction}")
        perm = np.random.default_rng([seed, 3]).permutation(n)
        k_te, k_va = int(round(test_fraction * n)), int(round(val_fraction * n))
        part[perm[:k_te]] = 2
        part[perm[k_te:k_te + k_va]] = 1
    take = lambda k: ratings[part == k].reset_index(drop=True)  # noqa: E731
    return Split(train=take(0), val=take(1), test=take(2), method=method)


# ----------------------------------------------------------------------------------------------- item groups

@dataclass(repr=False)
class ItemGroups:
    """Item groups for the fairness measures: ``ids`` ``[I]`` int64 (hard) or ``membership`` ``[I, G]`` float32
    (soft; a zero row = unknown group), ``names`` (one per group), ``kind``."""

    kind: str
    names: List[str]
    ids: Optional[np.ndarray] = None
    membership: Optional[np.ndarray] = None

    @property
    def num_groups(self) -> int:
        return len(self.names)

    @property
    def soft(self) -> bool:
        return self.membership is not None

    @property
    def num_items(self) -> int:
        return len(self.ids) if self.ids is not None else len(self.membership)

    def sizes(self) -> List[float]:
        """Items per group (membership mass for soft groups)."""
        if self.ids is not None:
            return np.bincount(self.ids, minlength=self.num_groups).astype(float).tolist()
        return self.membership.sum(0).astype(float).tolist()

    def __repr__(self) -> str:
        return f"ItemGroups(kind={self.kind!r}, names={self.names!r}, num_items={self.num_items})"


def _items_table(items) -> Tuple[pd.DataFrame, List[str]]:
    if isinstance(items, Encoded):
        return items.items, list(items.genres)
    if isinstance(items, pd.DataFrame):
        _check_frame(items, "items", ("genres",))
        return items.reset_index(drop=True), sorted({g for gs in items["genres"] for g in gs})
    raise ValueError(f"`items` must be an Encoded or an items DataFrame; got {type(items).__name__}")


def _decades(items: pd.DataFrame) -> np.ndarray:
    """Release decade per item (e.g. 1990), -1 where the year is unknown."""
    if "year" not in items.columns:
        return np.full(len(items), -1, dtype=np.int64)
    y = pd.array(items["year"], dtype="Int64")
    return np.where(y.isna(), -1, (y.fillna(0).to_numpy(np.int64) // 10) * 10)


def item_groups(items, train: Optional[pd.DataFrame] = None, kind: str = "popularity", *, head_share: float = 0.5,
                genre: Optional[str] = None) -> ItemGroups:
    """Group every item of the catalogue for a fairness measure.

    ``items``: an :class:`Encoded` (or its ``items`` frame, row ``k`` = item index ``k``); ``train``: the training
    ratings with an ``item`` index column (needed for ``"popularity"``).  Kinds:

    * ``"popularity"``: group 0 ``"head"`` = the most-rated items in ``train`` (ties by item index) that together
      hold ``head_share`` of the training ratings (the fewest items reaching it), group 1 ``"tail"`` = the rest,
      never-rated items included;
    * ``"genre"``: group 1 = the movies of ``genre``, group 0 = the rest (named ``"not <genre>"``);
    * ``"genres"``: soft membership ``[I, G]``, a movie's genres with weight ``1 / #genres`` each; a movie
      without a genre has a zero row (unknown group);
    * ``"decade"``: the release decade (``"1990s"``...), in increasing order, then ``"unknown"`` for movies
      without a year (only if there are any).

    Hand example: training counts per item ``[5, 3, 1, 1, 0]``, ``head_share=0.5`` -> head ``{0}`` (5 of 10
    ratings); ``head_share=0.6`` -> head ``{0, 1}``.
    """
    table, genre_names = _items_table(items)
    kind = kind if isinstance(kind, str) else repr(kind)
    if kind not in GROUP_KINDS:
        raise ValueError(f"`kind` must be one of {', '.join(repr(k) for k in GROUP_KINDS)}; got {kind!r}")
    n_items = len(table)
    if kind == "popularity":
        head_share = _check_fraction(head_share, "head_share")
        if train is None:
            raise ValueError("`train` is required for kind='popularity'")
        _check_frame(train, "train", ("item",))
        it = train["item"].to_numpy(np.int64)
        if len(it) == 0:
            raise ValueError("`train` has no ratings")
        if it.min() < 0 or it.max() >= n_items:
            raise ValueError(f"`train` has item indices outside [0, {n_items})")
        counts = np.bincount(it, minlength=n_items)
        order = np.lexsort((np.arange(n_items), -counts))
        csum = np.cumsum(counts[order])
        need = head_share * csum[-1]
        m = int(np.searchsorted(csum, need - 1e-9 * csum[-1], side="left")) + 1
        ids = np.ones(n_items, dtype=np.int64)
        ids[order[:m]] = 0
        return ItemGroups(kind=kind, names=["head", "tail"], ids=ids)
    if kind == "genre":
        if not isinstance(genre, str) or genre not in genre_names:
            raise ValueError(f"`genre` must be one of {', '.join(repr(g) for g in genre_names)}; got {genre!r}")
        ids = np.array([1 if genre in gs else 0 for gs in table["genres"]], dtype=np.int64)
        return ItemGroups(kind=kind, names=[f"not {genre}", genre], ids=ids)
    if kind == "genres":
        if not genre_names:
            raise ValueError("`items` has no genres")
        col = {g: k for k, g in enumerate(genre_names)}
        mem = np.zeros((n_items, len(genre_names)), dtype=np.float32)
        for i, gs in enumerate(table["genres"]):
            if gs:
                mem[i, [col[g] for g in gs]] = 1.0 / len(gs)
        return ItemGroups(kind=kind, names=list(genre_names), membership=mem)
    dec = _decades(table)
    known = sorted(set(dec[dec >= 0].tolist()))
    names = [f"{d}s" for d in known] + (["unknown"] if (dec < 0).any() else [])
    lookup = {d: k for k, d in enumerate(known)}
    ids = np.array([lookup[d] if d >= 0 else len(known) for d in dec.tolist()], dtype=np.int64)
    return ItemGroups(kind=kind, names=names, ids=ids)


# ----------------------------------------------------------------------------------------------- features

def age_bucket(age) -> np.ndarray:
    """Age bucket codes: 0 unknown (NA or negative), 1 ``<18``, 2 ``18-24``, 3 ``25-34``, 4 ``35-44``, 5 ``45-49``,
    6 ``50-55``, 7 ``56+`` (:data:`AGE_BUCKETS`).  ML-1M's age codes (1, 18, 25, ...) map to their own bucket.

    >>> age_bucket([7, 18, 24, 25, 49, 50, 56, 73]).tolist()
    [1, 2, 2, 3, 5, 6, 7, 7]
    """
    a = pd.array(np.asarray(age) if not isinstance(age, pd.Series) else age, dtype="Int64")
    known = ~a.isna()
    vals = a.fillna(-1).to_numpy(np.int64)
    codes = np.searchsorted(_AGE_EDGES, vals, side="right") + 1
    return np.where(known & (vals >= 0), codes, 0).astype(np.int64)


@dataclass(repr=False)
class FeatureTables:
    """Per-user and per-item features for the models.

    ``user_codes`` ``[U, Fu]`` int64 categorical codes (0 = unknown), ``user_feature_names`` (``Fu``),
    ``user_categories`` (per feature the category names, index 0 ``"unknown"``), ``user_cardinalities`` (their
    lengths); ``item_genres`` ``[I, num_genres]`` float32 multi-hot, ``genre_names``; ``item_decade`` ``[I]`` int64
    decade code (0 = unknown, ``k`` = ``decade_names[k]``)."""

    user_codes: np.ndarray
    user_feature_names: List[str]
    user_categories: List[List[str]]
    item_genres: np.ndarray
    genre_names: List[str]
    item_decade: np.ndarray
    decade_names: List[str]

    @property
    def user_cardinalities(self) -> List[int]:
        return [len(c) for c in self.user_categories]

    @property
    def num_genres(self) -> int:
        return len(self.genre_names)

    @property
    def num_decades(self) -> int:
        """Cardinality of the decade codes, 0 = unknown included."""
        return len(self.decade_names)


def build_features(enc: Encoded) -> FeatureTables:
    """Feature tables of an :class:`Encoded`: user ``age`` (bucketed, :func:`age_bucket`), ``gender``,
    ``occupation`` where the users table has them (categories sorted, code = 1 + rank), item genres multi-hot and
    release decade."""
    if not isinstance(enc, Encoded):
        raise ValueError(f"`enc` must be an Encoded; got {type(enc).__name__}")
    users = enc.users
    codes, names, cats = [], [], []
    if "age" in users.columns:
        codes.append(age_bucket(users["age"]))
        names.append("age")
        cats.append(["unknown", *AGE_BUCKETS])
    for col in ("gender", "occupation"):
        if col in users.columns:
            s = users[col]
            known = s.notna().to_numpy()
            values = sorted({str(v) for v in s[known]})
            lookup = {v: k + 1 for k, v in enumerate(values)}
            codes.append(np.array([lookup[str(v)] if ok else 0 for v, ok in zip(s, known)], dtype=np.int64))
            names.append(col)
            cats.append(["unknown", *values])
    user_codes = np.stack(codes, 1) if codes else np.zeros((enc.num_users, 0), dtype=np.int64)
    genre_names = list(enc.genres)
    col = {g: k for k, g in enumerate(genre_names)}
    multi = np.zeros((enc.num_items, len(genre_names)), dtype=np.float32)
    for i, gs in enumerate(enc.items["genres"]):
        for g in gs:
            multi[i, col[g]] = 1.0
    dec = _decades(enc.items)
    known = sorted(set(dec[dec >= 0].tolist()))
    lookup = {d: k + 1 for k, d in enumerate(known)}
    item_decade = np.array([lookup.get(d, 0) for d in dec.tolist()], dtype=np.int64)
    return FeatureTables(user_codes=user_codes.astype(np.int64), user_feature_names=names, user_categories=cats,
                         item_genres=multi, genre_names=genre_names, item_decade=item_decade,
                         decade_names=["unknown"] + [f"{d}s" for d in known])


# ----------------------------------------------------------------------------------------------- lists

@dataclass(repr=False)
class RankingLists:
    """One candidate list per user: ``users`` ``[L]`` int64, ``items[k]`` int64 array, ``relevance[k]`` float32
    array (the rating, 0 for an unrated item).  ``lists[k]`` is ``(user, items, relevance)``."""

    users: np.ndarray
    items: List[np.ndarray]
    relevance: List[np.ndarray]

    def __len__(self) -> int:
        return len(self.users)

    def __getitem__(self, k: int) -> Tuple[int, np.ndarray, np.ndarray]:
        return int(self.users[k]), self.items[k], self.relevance[k]

    def __repr__(self) -> str:
        sizes = [len(x) for x in self.items]
        return f"RankingLists(lists={len(self)}, items={sum(sizes)}, longest={max(sizes, default=0)})"


class _ByUser:
    """CSR view of a rating frame: the items (sorted; int32 below 2**31 items) and ratings of each user index."""

    def __init__(self, df: Optional[pd.DataFrame], num_users: int, name: str):
        if df is None or len(df) == 0:
            self.indptr = np.zeros(num_users + 1, dtype=np.int64)
            self.items = np.zeros(0, dtype=np.int64)
            self.ratings = np.zeros(0, dtype=np.float32)
            return
        _check_frame(df, name, ("user", "item"))
        u = df["user"].to_numpy()
        i = df["item"].to_numpy()
        if not (np.issubdtype(u.dtype, np.integer) and np.issubdtype(i.dtype, np.integer)):
            u, i = u.astype(np.int64), i.astype(np.int64)
        if u.min() < 0 or u.max() >= num_users:
            raise ValueError(f"`{name}` has user indices outside [0, {num_users})")
        if i.min() < 0:
            raise ValueError(f"`{name}` has negative item indices")
        r = df["rating"].to_numpy(np.float32) if "rating" in df.columns else np.ones(len(df), np.float32)
        order = np.lexsort((i, u))
        self.items = i[order].astype(_index_dtype(int(i.max()) + 1), copy=False)
        self.ratings = r[order]
        del order
        self.indptr = np.r_[0, np.cumsum(np.bincount(u, minlength=num_users))].astype(np.int64)

    @property
    def num_users(self) -> int:
        return len(self.indptr) - 1

    @classmethod
    def of(cls, df, num_users: int, name: str) -> "_ByUser":
        """``df`` itself when it is already a view (one CSR copy of the training ratings shared by the datasets of
        a data module), else the view of the frame ``df``."""
        if isinstance(df, cls):
            if df.num_users != num_users:
                raise ValueError(f"`{name}` is a view over {df.num_users} users; expected {num_users}")
            return df
        return cls(df, num_users, name)

    def row(self, u: int) -> Tuple[np.ndarray, np.ndarray]:
        a, b = self.indptr[u], self.indptr[u + 1]
        return self.items[a:b], self.ratings[a:b]

    def users_with_rows(self) -> np.ndarray:
        return np.flatnonzero(np.diff(self.indptr) > 0).astype(np.int64)


def _sample_negatives(rng: np.random.Generator, rated: np.ndarray, num_items: int, k: int) -> np.ndarray:
    """``k`` items drawn uniformly without replacement among ``0..num_items-1`` minus the sorted ``rated``."""
    free = num_items - len(rated)
    k = min(k, free)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if free <= 4 * k:
        pool = np.setdiff1d(np.arange(num_items, dtype=np.int64), rated, assume_unique=True)
        return rng.choice(pool, size=k, replace=False).astype(np.int64)
    out = np.zeros(0, dtype=np.int64)
    while len(out) < k:  # rejection sampling keeps the draw uniform over the unrated items
        cand = rng.integers(0, num_items, size=2 * k + 8)
        cand = cand[~np.isin(cand, rated)]
        allc = np.concatenate([out, cand])
        _, first = np.unique(allc, return_index=True)
        out = allc[np.sort(first)]
    return out[:k].astype(np.int64)


class TrainingListDataset(torch.utils.data.Dataset):
    """Training lists built on access: item ``k`` is user ``users[k]``'s training items (relevance = rating) and
    ``num_negatives`` unrated items (relevance 0), shuffled, drawn with ``np.random.default_rng([seed, epoch,
    user])``.  Set ``epoch`` (or call :meth:`set_epoch`) to re-draw the negatives."""

    def __init__(self, train: pd.DataFrame, num_users: int, num_items: int, *, num_negatives: int = 100,
                 seed: int = 0, epoch: int = 0):  # train: a frame, or the CSR view of another dataset
        self.num_users = check_int(num_users, "num_users", 1)
        self.num_items = check_int(num_items, "num_items", 1)
        self.num_negatives = check_int(num_negatives, "num_negatives", 0)
        self.seed = check_int(seed, "seed", 0)
        self.epoch = check_int(epoch, "epoch", 0)
        self.by_user = _ByUser.of(train, self.num_users, "train")
        if len(self.by_user.items) and self.by_user.items.max() >= self.num_items:
            raise ValueError(f"`train` has item indices outside [0, {self.num_items})")
        self.users = self.by_user.users_with_rows()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_int(epoch, "epoch", 0)

    def lengths(self) -> np.ndarray:
        """``[len]`` length of every list: the user's training items plus the negatives they can get."""
        counts = np.diff(self.by_user.indptr)[self.users]
        return counts + np.minimum(self.num_negatives, self.num_items - counts)

    def __len__(self) -> int:
        return len(self.users)

    def __getitem__(self, k: int) -> Tuple[int, np.ndarray, np.ndarray]:
        u = int(self.users[k])
        pos, rel = self.by_user.row(u)
        rng = np.random.default_rng([self.seed, self.epoch, u])
        neg = _sample_negatives(rng, pos, self.num_items, self.num_negatives)
        items = np.concatenate([pos, neg])
        relevance = np.concatenate([rel, np.zeros(len(neg), dtype=np.float32)])
        perm = rng.permutation(len(items))  # no position carries the relevance
        return u, items[perm], relevance[perm]


class EvaluationListDataset(torch.utils.data.Dataset):
    """Evaluation lists built on access (see :func:`evaluation_lists`); ``users``: keep only these user indices
    (a sample), still in index order.  ``train`` (and ``target``, ``exclude``) may also be the CSR view another
    dataset built (``dataset.seen``), so that a data module holds the training ratings once."""

    def __init__(self, train: pd.DataFrame, target: pd.DataFrame, num_items: int, *,
                 exclude: Optional[pd.DataFrame] = None, num_users: Optional[int] = None,
                 users: Optional[Sequence[int]] = None):
        self.num_items = check_int(num_items, "num_items", 1)
        frames = [f for f in (train, target, exclude) if isinstance(f, pd.DataFrame) and len(f)]
        for f, name in ((train, "train"), (target, "target"), (exclude, "exclude")):
            if f is not None and not isinstance(f, _ByUser):
                _check_frame(f, name, ("user", "item"))
        if num_users is None:
            views = [f.num_users for f in (train, target, exclude) if isinstance(f, _ByUser)]
            num_users = views[0] if views else 1 + max((int(f["user"].max()) for f in frames), default=0)
        self.num_users = check_int(num_users, "num_users", 1)
        self.seen = _ByUser.of(train, self.num_users, "train")
        self.target = _ByUser.of(target, self.num_users, "target")
        self.exclude = _ByUser.of(exclude, self.num_users, "exclude")
        for b, name in ((self.seen, "train"), (self.target, "target"), (self.exclude, "exclude")):
            if len(b.items) and (b.items.min() < 0 or b.items.max() >= self.num_items):
                raise ValueError(f"`{name}` has item indices outside [0, {self.num_items})")
        self.users = self.target.users_with_rows()
        if users is not None:
            want = np.asarray(users)
            if want.ndim != 1 or (len(want) and not np.issubdtype(want.dtype, np.integer)):
                raise ValueError(f"`users` must be a 1-D sequence of user indices; got {users!r}")
            self.users = self.users[np.isin(self.users, want)]
        self._all = np.arange(self.num_items, dtype=np.int64)

    def lengths(self) -> np.ndarray:
        """``[len]`` the length of every list (the catalogue minus the user's ``train`` and ``exclude`` items),
        known without building the lists: what a streamed evaluation needs up front."""
        dropped = np.zeros(self.num_users, dtype=np.int64)
        keys = []
        for b in (self.seen, self.exclude):
            counts = np.diff(b.indptr)
            user = np.repeat(np.arange(self.num_users, dtype=np.int64), counts)
            k = user * self.num_items + b.items  # ascending: users in order, items sorted within a user
            first = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, dtype=bool)
            dropped += np.bincount(user[first], minlength=self.num_users)  # an item listed twice drops once
            keys.append(k[first])
        if len(keys[0]) and len(keys[1]):  # an item both seen and excluded drops once
            pos = np.minimum(np.searchsorted(keys[0], keys[1]), len(keys[0]) - 1)
            both = keys[0][pos] == keys[1]
            dropped -= np.bincount(keys[1][both] // self.num_items, minlength=self.num_users)
        return (self.num_items - dropped)[self.users].astype(np.int64)

    def __len__(self) -> int:
        return len(self.users)

    def __getitem__(self, k: int) -> Tuple[int, np.ndarray, np.ndarray]:
        u = int(self.users[k])
        drop = np.concatenate([self.seen.row(u)[0], self.exclude.row(u)[0]])
        keep = np.ones(self.num_items, dtype=bool)
        keep[drop] = False
        items = self._all[keep]
        relevance = np.zeros(len(items), dtype=np.float32)
        t_items, t_rel = self.target.row(u)
        pos = np.searchsorted(items, t_items)
        ok = (pos < len(items)) & (items[np.minimum(pos, len(items) - 1)] == t_items) if len(items) else \
            np.zeros(len(t_items), dtype=bool)
        relevance[pos[ok]] = t_rel[ok]
        return u, items, relevance


def _materialise(ds) -> RankingLists:
    rows = [ds[k] for k in range(len(ds))]
    return RankingLists(users=np.array([r[0] for r in rows], dtype=np.int64), items=[r[1] for r in rows],
                        relevance=[r[2] for r in rows])


def training_lists(train: pd.DataFrame, num_users: int, num_items: int, *, num_negatives: int = 100,
                   seed: int = 0, epoch: int = 0) -> RankingLists:
    """Per user with training ratings (index order): the user's training items with relevance = rating plus
    ``num_negatives`` items the user did not rate in ``train`` (uniform without replacement, from
    ``np.random.default_rng([seed, epoch, user])``; all of them if fewer) at relevance 0, in a shuffled order."""
    return _materialise(TrainingListDataset(train, num_users, num_items, num_negatives=num_negatives, seed=seed,
                                            epoch=epoch))


def evaluation_lists(train: pd.DataFrame, target: pd.DataFrame, num_items: int, *,
                     exclude: Optional[pd.DataFrame] = None, num_users: Optional[int] = None) -> RankingLists:
    """Per user with at least one ``target`` rating (index order): every catalogue item (increasing index) except
    the user's ``train`` items and ``exclude`` items (for test lists: the validation ratings), relevance = the
    target rating, 0 for the others.  Lists have ``num_items`` minus the excluded entries, so this is meant for
    catalogues of thousands of items (ML-100K: 1682)."""
    return _materialise(EvaluationListDataset(train, target, num_items, exclude=exclude, num_users=num_users))


def collate_lists(samples: Sequence[Tuple[int, np.ndarray, np.ndarray]], item_groups: ItemGroups,
                  features: FeatureTables, item_features: bool = True) -> Dict[str, torch.Tensor]:
    """Pad ``(user, items, relevance)`` lists to a batch ``[B, N]`` (``N`` = the longest list).

    Keys: ``user`` long ``[B]``; ``items`` long ``[B, N]`` (0 at padding); ``relevance`` float32 ``[B, N]`` (0 at
    padding); ``mask`` bool ``[B, N]`` (True = real item); ``groups`` long ``[B, N]`` for hard groups (0 at padding)
    or float32 ``[B, N, G]`` soft membership (zero rows at padding); ``user_features`` long ``[B, Fu]``;
    ``item_genres`` float32 ``[B, N, num_genres]``; ``item_decade`` long ``[B, N]`` (0 = unknown or padding); the
    last two only with ``item_features`` (a ranker of ids only does not need them: full-catalogue ML-20M batches
    spend most of their collation on the ``[64, 26 744, 20]`` genre tensor)."""
    if not isinstance(item_groups, ItemGroups):
        raise ValueError(f"`item_groups` must be an ItemGroups; got {type(item_groups).__name__}")
    if not isinstance(features, FeatureTables):
        raise ValueError(f"`features` must be a FeatureTables; got {type(features).__name__}")
    if len(samples) == 0:
        raise ValueError("`samples` must not be empty")
    if not isinstance(item_features, bool):
        raise ValueError(f"`item_features` must be a bool; got {item_features!r}")
    B = len(samples)
    N = max(len(s[1]) for s in samples)
    items = np.zeros((B, N), dtype=np.int64)
    rel = np.zeros((B, N), dtype=np.float32)
    mask = np.zeros((B, N), dtype=bool)
    users = np.zeros(B, dtype=np.int64)
    for b, (u, it, r) in enumerate(samples):
        if len(it) != len(r):
            raise ValueError(f"`samples[{b}]` has {len(it)} items but {len(r)} relevance values")
        users[b] = u
        items[b, :len(it)] = it
        rel[b, :len(r)] = r
        mask[b, :len(it)] = True
    pad = ~mask
    any_pad = bool(pad.any())

    def per_item(table: np.ndarray, dtype) -> np.ndarray:
        """``table[items]`` with 0 at padding: one gather, padding zeroed in place (full-catalogue lists of
        ML-20M make [64, 26 744, 19] genre tensors: no second full-size pass)."""
        out = np.take(table, items, axis=0)
        if any_pad:
            out[pad] = 0
        return out.astype(dtype, copy=False)

    if item_groups.soft:
        groups_t = torch.from_numpy(per_item(item_groups.membership, np.float32))
    else:
        groups_t = torch.from_numpy(per_item(item_groups.ids, np.int64))
    out = {"user": torch.from_numpy(users), "items": torch.from_numpy(items), "relevance": torch.from_numpy(rel),
           "mask": torch.from_numpy(mask), "groups": groups_t,
           "user_features": torch.from_numpy(np.ascontiguousarray(features.user_codes[users]))}
    if item_features:
        out["item_genres"] = torch.from_numpy(per_item(features.item_genres, np.float32))
        out["item_decade"] = torch.from_numpy(per_item(features.item_decade, np.int64))
    return out
