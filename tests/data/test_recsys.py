"""Recommender data: encoding, splits (worked examples and plain-loop references), item groups (hand examples),
features, ranking lists and the padded batches."""
import numpy as np
import pandas as pd
import pytest
import torch

from torchfair.data.recsys import (AGE_BUCKETS, FeatureTables, ItemGroups, RankingLists, age_bucket,
                                   build_features, collate_lists, encode, evaluation_lists, item_groups,
                                   split_ratings, training_lists)


def synthetic_movielens(**kw):
    # imported when a test runs, not at collection: see the note at the top of tests/data/test_movielens.py
    from torchfair.data.movielens import synthetic_movielens as make
    return make(**kw)


def tiny_movielens():
    """4 items (ids 5, 10, 20, 30; 30 never rated), 3 users (ids 7, 3, 9)."""
    items = pd.DataFrame({"item_id": [10, 20, 5, 30], "title": ["b", "c", "a", "d"],
                          "year": pd.array([1995, None, 1987, 1999], dtype="Int64"),
                          "genres": [["Comedy"], ["Drama", "Comedy"], [], ["Drama"]]})
    users = pd.DataFrame({"user_id": [7, 3, 9], "age": [30, 17, 60], "gender": ["M", "F", "M"],
                          "occupation": ["writer", "artist", "writer"], "zip_code": ["1", "2", "3"]})
    ratings = pd.DataFrame({"user_id": [7, 7, 3, 9, 9, 3], "item_id": [10, 5, 20, 5, 10, 10],
                            "rating": np.array([4, 2, 5, 1, 3, 4], np.float32),
                            "timestamp": [100, 200, 150, 50, 60, 300]})
    from torchfair.data.movielens import MovieLens
    return MovieLens("ml-100k", ratings, items, users, ["Comedy", "Drama"], "hand")


# ----------------------------------------------------------------------------------------------- encode

def test_encode_contiguous_indices():
    enc = encode(tiny_movielens())
    assert enc.item_ids.tolist() == [5, 10, 20, 30] and enc.user_ids.tolist() == [3, 7, 9]
    assert enc.num_items == 4 and enc.num_users == 3
    assert enc.ratings["user"].tolist() == [1, 1, 0, 2, 2, 0]
    assert enc.ratings["item"].tolist() == [1, 0, 2, 0, 1, 1]
    assert (enc.item_ids[enc.ratings["item"]] == enc.ratings["item_id"]).all()
    assert enc.items["title"].tolist() == ["a", "b", "c", "d"]
    bad = tiny_movielens()
    bad.ratings.loc[0, "item_id"] = 99
    with pytest.raises(ValueError, match="item_id 99"):
        encode(bad)


# ----------------------------------------------------------------------------------------------- splits

def test_temporal_split_worked_example():
    df = pd.DataFrame({"user": [0, 1, 2, 0, 1, 2, 0, 1], "timestamp": [5, 1, 3, 3, 9, 7, 2, 8]})
    s = split_ratings(df, "temporal", test_fraction=0.25, val_fraction=1 / 3)
    # sorted [1, 2, 3, 3, 5, 7, 8, 9]: position round(0.75 * 8) = 6 holds 8 -> test {8, 9}
    assert sorted(s.test["timestamp"]) == [8, 9]
    # training part [5, 1, 3, 3, 7, 2] sorted [1, 2, 3, 3, 5, 7]: position round(2/3 * 6) = 4 holds 5 -> val {5, 7}
    assert sorted(s.val["timestamp"]) == [5, 7] and sorted(s.train["timestamp"]) == [1, 2, 3, 3]
    # ties at the cut all go to the later part: [1, 2, 3, 3] with test_fraction 0.25 cuts at 3
    s = split_ratings(pd.DataFrame({"user": [0] * 4, "timestamp": [3, 1, 3, 2]}), "temporal", test_fraction=0.25,
                      val_fraction=0.0)
    assert sorted(s.test["timestamp"]) == [3, 3] and sorted(s.train["timestamp"]) == [1, 2] and len(s.val) == 0


def _leave_last_reference(df, n_test, n_val, min_train):
    """Plain loop (no ties in timestamps): per user the last n_test test, the n_val before validation."""
    part = {}
    for u, g in df.groupby("user"):
        order = g.sort_values("timestamp").index.tolist()
        k = len(order)
        te = min(n_test, max(0, k - min_train))
        va = min(n_val, max(0, k - min_train - te))
        for pos, idx in enumerate(order):
            from_end = k - 1 - pos
            part[idx] = "test" if from_end < te else "val" if from_end < te + va else "train"
    return part


@pytest.mark.parametrize("n_test, n_val, min_train", [(2, 1, 1), (3, 2, 2), (1, 0, 0), (10, 5, 1)])
def test_leave_last_n_matches_plain_loop(n_test, n_val, min_train):
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame({"user": rng.integers(0, 12, n), "item": np.arange(n), "timestamp": rng.permutation(n) * 10})
    ref = _leave_last_reference(df, n_test, n_val, min_train)
    s = split_ratings(df, "leave_last_n", n_test=n_test, n_val=n_val, min_train=min_train)
    for name in ("train", "val", "test"):
        assert sorted(getattr(s, name)["item"]) == sorted(i for i, p in ref.items() if p == name)


def test_leave_last_n_small_profiles_ties_and_no_leakage():
    df = pd.DataFrame({"user": [0, 0, 0, 1, 2, 2, 2, 2], "item": [0, 1, 2, 0, 0, 1, 2, 3],
                       "timestamp": [1, 2, 3, 5, 7, 7, 7, 7]})
    s = split_ratings(df, "leave_last_n", n_test=2, n_val=2, min_train=1)
    assert s.test.groupby("user").size().to_dict() == {0: 2, 2: 2}
    assert s.val.groupby("user").size().to_dict() == {2: 1}  # user 0 keeps 1 in train, user 1 has only 1
    assert sorted(s.test[s.test.user == 0]["item"]) == [1, 2] and s.train.user.tolist().count(1) == 1
    # ties (user 2: all at t = 7) are broken by the seed: same seed same split, some seed another one
    picks = {tuple(sorted(split_ratings(df, n_test=2, n_val=1, seed=k).test.query("user == 2")["item"]))
             for k in range(20)}
    assert len(picks) > 1
    a, b = split_ratings(df, n_test=2, n_val=1, seed=5), split_ratings(df, n_test=2, n_val=1, seed=5)
    assert a.test.equals(b.test) and a.val.equals(b.val) and a.train.equals(b.train)
    # no (user, item) pair in two parts, and nothing in training is later than a test rating of the same user
    enc = encode(synthetic_movielens(seed=1))
    s = split_ratings(enc.ratings, n_test=5, n_val=3)
    keys = [set(zip(p.user, p.item)) for p in (s.train, s.val, s.test)]
    assert not (keys[0] & keys[2]) and not (keys[0] & keys[1]) and not (keys[1] & keys[2])
    assert sum(map(len, keys)) == len(enc.ratings)
    last_train = s.train.groupby("user")["timestamp"].max()
    first_test = s.test.groupby("user")["timestamp"].min()
    assert (last_train <= first_test.reindex(last_train.index)).all()


def test_random_split():
    df = pd.DataFrame({"user": np.arange(100) % 7, "item": np.arange(100), "timestamp": np.arange(100)})
    s = split_ratings(df, "random", test_fraction=0.2, val_fraction=0.15, seed=3)
    assert (len(s.train), len(s.val), len(s.test)) == (65, 15, 20)
    assert sorted(pd.concat([s.train, s.val, s.test])["item"]) == list(range(100))
    assert split_ratings(df, "random", seed=3).test.equals(split_ratings(df, "random", seed=3).test)
    assert not split_ratings(df, "random", seed=3).test.equals(split_ratings(df, "random", seed=4).test)


def test_split_validation():
    df = pd.DataFrame({"user": [0], "timestamp": [1]})
    with pytest.raises(ValueError, match="`method`"):
        split_ratings(df, "by_user")
    with pytest.raises(ValueError, match="`n_test`"):
        split_ratings(df, n_test=0)
    with pytest.raises(ValueError, match="`test_fraction`"):
        split_ratings(df, "temporal", test_fraction=1.0)
    with pytest.raises(ValueError, match="`test_fraction \\+ val_fraction`"):
        split_ratings(df, "random", test_fraction=0.6, val_fraction=0.4)
    with pytest.raises(ValueError, match="timestamp"):
        split_ratings(pd.DataFrame({"user": [0]}))


# ----------------------------------------------------------------------------------------------- groups

def _train_from_counts(counts):
    return pd.DataFrame({"item": np.repeat(np.arange(len(counts)), counts)})


def test_popularity_head_share_hand_example():
    items = pd.DataFrame({"genres": [[]] * 5})
    train = _train_from_counts([5, 3, 1, 1, 0])
    g = item_groups(items, train, "popularity", head_share=0.5)
    assert g.ids.tolist() == [0, 1, 1, 1, 1] and g.names == ["head", "tail"] and g.membership is None
    assert item_groups(items, train, head_share=0.6).ids.tolist() == [0, 0, 1, 1, 1]
    assert item_groups(items, train, head_share=0.95).ids.tolist() == [0, 0, 0, 0, 1]  # never-rated stays tail
    # ties by item index: counts [1, 3, 3, 1] with 0.25 -> item 1 (3 >= 2), not item 2
    assert item_groups(items.iloc[:4], _train_from_counts([1, 3, 3, 1]), head_share=0.25).ids.tolist() == [1, 0, 1, 1]
    with pytest.raises(ValueError, match="`head_share`"):
        item_groups(items, train, head_share=1.5)


def test_genre_genres_decade_groups():
    enc = encode(tiny_movielens())  # items by index: 5 [] 1987, 10 [Comedy] 1995, 20 [Drama, Comedy] NA, 30 [Drama] 1999
    g = item_groups(enc, None, "genre", genre="Drama")
    assert g.ids.tolist() == [0, 0, 1, 1] and g.names == ["not Drama", "Drama"]
    with pytest.raises(ValueError, match="`genre`"):
        item_groups(enc, None, "genre", genre="Western")
    s = item_groups(enc, None, "genres")
    assert s.ids is None and s.names == ["Comedy", "Drama"] and s.soft and s.num_groups == 2
    np.testing.assert_allclose(s.membership, [[0, 0], [1, 0], [0.5, 0.5], [0, 1]])
    rows = item_groups(encode(synthetic_movielens()), None, "genres").membership.sum(1)
    assert np.all(np.isclose(rows, 1) | (rows == 0)) and (rows == 0).any()
    d = item_groups(enc, None, "decade")
    assert d.names == ["1980s", "1990s", "unknown"] and d.ids.tolist() == [0, 1, 2, 1]
    with pytest.raises(ValueError, match="`kind`"):
        item_groups(enc, None, "studio")


# ----------------------------------------------------------------------------------------------- features

def test_age_buckets_and_features():
    assert age_bucket([0, 17, 18, 24, 25, 34, 35, 44, 45, 49, 50, 55, 56, 90]).tolist() == \
        [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert age_bucket([1, 18, 25, 35, 45, 50, 56]).tolist() == [1, 2, 3, 4, 5, 6, 7]  # the ML-1M codes
    assert age_bucket(pd.array([None, 30], dtype="Int64")).tolist() == [0, 3] and len(AGE_BUCKETS) == 7
    f = build_features(encode(tiny_movielens()))  # users by index: 3 (17 F artist), 7 (30 M writer), 9 (60 M writer)
    assert f.user_feature_names == ["age", "gender", "occupation"]
    assert f.user_codes.tolist() == [[1, 1, 1], [3, 2, 2], [7, 2, 2]]
    assert f.user_cardinalities == [8, 3, 3] and f.user_categories[2] == ["unknown", "artist", "writer"]
    assert f.item_genres.tolist() == [[0, 0], [1, 0], [1, 1], [0, 1]]
    assert f.item_decade.tolist() == [1, 2, 0, 2] and f.decade_names == ["unknown", "1980s", "1990s"]
    csv_like = tiny_movielens()
    csv_like.users = csv_like.users[["user_id"]]
    assert build_features(encode(csv_like)).user_codes.shape == (3, 0)


# ----------------------------------------------------------------------------------------------- lists

def test_training_lists():
    enc = encode(synthetic_movielens(seed=2))
    train = split_ratings(enc.ratings, n_test=5, n_val=2).train
    a = training_lists(train, enc.num_users, enc.num_items, num_negatives=7, seed=1, epoch=0)
    assert isinstance(a, RankingLists) and a.users.tolist() == sorted(set(train.user))
    for u, items, rel in (a[k] for k in range(len(a))):
        mine = train[train.user == u]
        rated = dict(zip(mine.item, mine.rating))
        assert len(items) == len(rated) + 7 and len(set(items.tolist())) == len(items)
        assert items.dtype == np.int64 and rel.dtype == np.float32
        for i, r in zip(items.tolist(), rel.tolist()):
            assert r == rated.get(i, 0.0)
        assert sum(i not in rated for i in items.tolist()) == 7
    b = training_lists(train, enc.num_users, enc.num_items, num_negatives=7, seed=1, epoch=0)
    c = training_lists(train, enc.num_users, enc.num_items, num_negatives=7, seed=1, epoch=1)
    assert all(np.array_equal(x, y) for x, y in zip(a.items, b.items))
    assert not all(np.array_equal(np.sort(x), np.sort(y)) for x, y in zip(a.items, c.items))
    # fewer unrated items than asked for: all of them
    small = pd.DataFrame({"user": [0, 0], "item": [0, 2], "rating": [3.0, 4.0]})
    (u, items, rel), = [training_lists(small, 1, 4, num_negatives=10)[0]]
    assert sorted(items.tolist()) == [0, 1, 2, 3] and sorted(rel.tolist()) == [0, 0, 3, 4]


@pytest.mark.parametrize("num_items, rated", [(60, 5), (12, 4)])  # rejection sampling / explicit pool
def test_negatives_are_uniform_over_unrated_items(num_items, rated):
    train = pd.DataFrame({"user": [0] * rated, "item": np.arange(rated) * 2, "rating": [1.0] * rated})
    counts = np.zeros(num_items)
    draws = 1500
    for epoch in range(draws):
        _, items, rel = training_lists(train, 1, num_items, num_negatives=3, epoch=epoch)[0]
        counts[items[rel == 0]] += 1
    free = num_items - rated
    assert counts[np.arange(rated) * 2].sum() == 0
    expected = draws * 3 / free
    unrated = np.setdiff1d(np.arange(num_items), np.arange(rated) * 2)
    assert np.all(np.abs(counts[unrated] - expected) < 5 * np.sqrt(expected))


def test_evaluation_lists_hand_example():
    train = pd.DataFrame({"user": [0, 0, 1], "item": [0, 3, 1], "rating": [5.0, 4.0, 2.0]})
    test = pd.DataFrame({"user": [0, 2], "item": [2, 4], "rating": [3.0, 5.0]})
    val = pd.DataFrame({"user": [0], "item": [4], "rating": [1.0]})
    lists = evaluation_lists(train, test, 5, exclude=val, num_users=3)
    assert lists.users.tolist() == [0, 2]  # user 1 has no test rating
    assert lists.items[0].tolist() == [1, 2] and lists.relevance[0].tolist() == [0.0, 3.0]
    assert lists.items[1].tolist() == [0, 1, 2, 3, 4] and lists.relevance[1].tolist() == [0, 0, 0, 0, 5]
    no_val = evaluation_lists(train, test, 5, num_users=3)
    assert no_val.items[0].tolist() == [1, 2, 4]


def test_collate_lists_keys_shapes_padding():
    enc = encode(tiny_movielens())
    f = build_features(enc)
    hard = ItemGroups(kind="x", names=["a", "b", "c"], ids=np.array([2, 1, 0, 1]))
    samples = [(1, np.array([3, 0]), np.array([4.0, 0.0], np.float32)),
               (0, np.array([2, 1, 0]), np.array([0.0, 5.0, 1.0], np.float32))]
    b = collate_lists(samples, hard, f)
    assert list(b) == ["user", "items", "relevance", "mask", "groups", "user_features", "item_genres", "item_decade"]
    assert b["user"].tolist() == [1, 0] and b["user"].dtype == torch.long
    assert b["items"].tolist() == [[3, 0, 0], [2, 1, 0]] and b["items"].dtype == torch.long
    assert b["relevance"].tolist() == [[4, 0, 0], [0, 5, 1]] and b["relevance"].dtype == torch.float32
    assert b["mask"].tolist() == [[True, True, False], [True, True, True]] and b["mask"].dtype == torch.bool
    assert b["groups"].tolist() == [[1, 2, 0], [0, 1, 2]] and b["groups"].dtype == torch.long
    assert b["user_features"].tolist() == [[3, 2, 2], [1, 1, 1]] and b["user_features"].dtype == torch.long
    assert b["item_genres"].shape == (2, 3, 2) and b["item_genres"].dtype == torch.float32
    assert b["item_genres"][0].tolist() == [[0, 1], [0, 0], [0, 0]] and b["item_genres"][1, 0].tolist() == [1, 1]
    assert b["item_decade"].tolist() == [[2, 1, 0], [0, 2, 1]] and b["item_decade"].dtype == torch.long
    soft = item_groups(enc, None, "genres")
    g = collate_lists(samples, soft, f)["groups"]
    assert g.shape == (2, 3, 2) and g.dtype == torch.float32
    assert g[0].tolist() == [[0, 1], [0, 0], [0, 0]] and g[1].tolist() == [[0.5, 0.5], [1, 0], [0, 0]]
    assert isinstance(f, FeatureTables)
    ids_only = collate_lists(samples, hard, f, item_features=False)  # for rankers of ids only
    assert list(ids_only) == ["user", "items", "relevance", "mask", "groups", "user_features"]
    assert all(torch.equal(ids_only[k], b[k]) for k in ids_only)
    with pytest.raises(ValueError, match="`item_features`"):
        collate_lists(samples, hard, f, item_features="no")
    with pytest.raises(ValueError, match="`samples`"):
        collate_lists([], hard, f)


def test_leave_random_n_counts_seeds_and_uniformity():
    """leave_random_n: the per-user counts of leave_last_n (same plain-loop reference for the counts), a partition,
    another draw per seed, the same draw for the same seed, and every rating held out about equally often."""
    rng = np.random.default_rng(3)
    n = 150
    df = pd.DataFrame({"user": rng.integers(0, 10, n), "item": np.arange(n), "timestamp": rng.permutation(n)})
    ref = _leave_last_reference(df, 3, 2, 1)
    counts = {name: pd.Series([df.user[i] for i, p in ref.items() if p == name]).value_counts().sort_index()
              for name in ("val", "test")}
    held = np.zeros(n)
    tests = set()
    for seed in range(200):
        s = split_ratings(df, "leave_random_n", n_test=3, n_val=2, min_train=1, seed=seed)
        assert s.test.groupby("user").size().sort_index().tolist() == counts["test"].tolist()
        assert s.val.groupby("user").size().sort_index().tolist() == counts["val"].tolist()
        assert len(s.train) + len(s.val) + len(s.test) == n
        assert not set(s.train.item) & set(s.test.item) and not set(s.val.item) & set(s.test.item)
        held[s.test.item.to_numpy()] += 1
        tests.add(tuple(sorted(s.test.item)))
    assert len(tests) == 200  # every seed another partition
    a = split_ratings(df, "leave_random_n", n_test=3, n_val=2, seed=7)
    b = split_ratings(df, "leave_random_n", n_test=3, n_val=2, seed=7)
    assert a.test.equals(b.test) and a.val.equals(b.val)
    # uniform draw: each rating of a user is test with probability n_test / count
    sizes = df.user.map(df.user.value_counts()).to_numpy()
    expect = 200 * np.minimum(3, np.maximum(0, sizes - 1)) / sizes
    assert np.abs(held - expect).max() < 5 * np.sqrt(expect).max()
    # it is not leave_last_n: the held-out ratings are not always the latest
    last = split_ratings(df, "leave_last_n", n_test=3, n_val=2, min_train=1)
    assert sum(tuple(sorted(last.test.item)) == t for t in tests) <= 1
