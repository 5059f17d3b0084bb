"""torchfair.data.ml20m: ML-20M-shaped synthetic files read back through load_movielens("ml-20m", root=...) with
the shape and statistics asked for; deterministic from the seed; the data path after it (encode, split, lists)."""
import csv
import json

import numpy as np
import pytest

from torchfair.data.ml20m import ML20M_GENRES, ML20M_SHAPE, generate_ml20m, ml20m_shape
from torchfair.data.movielens import load_movielens
from torchfair.data.recsys import EvaluationListDataset, encode, split_ratings

SHAPE = dict(n_users=300, n_items=900, n_ratings=45_000)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    d = tmp_path_factory.mktemp("ml20m")
    stats = generate_ml20m(d, seed=7, **SHAPE)
    return d, stats


def test_files_have_ml20m_headers_and_formats(generated):
    d, _ = generated
    with open(d / "ratings.csv", "rb") as f:
        assert f.readline() == b"userId,movieId,rating,timestamp\n"
        row = f.readline().decode().rstrip("\n").split(",")
    assert row[2] in {f"{k / 2:.1f}" for k in range(1, 11)} and row[3].isdigit()
    with open(d / "movies.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["movieId", "title", "genres"] and len(rows) == SHAPE["n_items"] + 1
    assert any(", The (" in r[1] for r in rows[1:])  # quoted titles with a comma
    genres = {g for r in rows[1:] for g in r[2].split("|")}
    assert genres <= set(ML20M_GENRES) | {"(no genres listed)"}


def test_load_movielens_reads_the_shape_and_statistics(generated):
    d, stats = generated
    ml = load_movielens("ml-20m", root=str(d))
    r = ml.ratings
    assert (len(r), len(ml.users), len(ml.items)) == (SHAPE["n_ratings"], SHAPE["n_users"], SHAPE["n_items"])
    assert (stats["n_users"], stats["n_items"], stats["n_ratings"]) == tuple(SHAPE.values())
    per_user = r.groupby("user_id").size()
    assert per_user.min() >= 20 and per_user.min() == stats["per_user"]["min"]
    assert per_user.max() == stats["per_user"]["max"] <= round(9254 / 26744 * SHAPE["n_items"])
    per_item = r.groupby("item_id").size()
    assert len(per_item) == SHAPE["n_items"] and per_item.max() == stats["per_item"]["max"]  # every item rated
    assert per_item.max() > 20 * per_item.median()  # long-tailed popularity
    assert sorted(np.unique(r["rating"]).tolist()) == [k / 2 for k in range(1, 11)]
    assert abs(float(r["rating"].mean()) - stats["rating_mean"]) < 1e-6
    assert r.groupby("user_id")["timestamp"].apply(lambda t: bool((np.diff(t.to_numpy()) > 0).all())).all()
    assert 789_652_009 <= r["timestamp"].min() and r["timestamp"].max() <= 1_427_784_002
    assert stats["timestamps"]["increasing_per_user"]
    assert set(ml.genres) <= set(ML20M_GENRES) and len(ml.genres) >= 15
    assert sum(len(g) == 0 for g in ml.items["genres"]) < 0.05 * SHAPE["n_items"]
    assert ml.items["year"].notna().mean() > 0.95
    assert json.loads((d / "synthetic_ml20m.json").read_text()) == json.loads(json.dumps(stats))


def test_same_seed_same_bytes_other_seed_other_data(generated, tmp_path):
    d, _ = generated
    generate_ml20m(tmp_path / "again", seed=7, **SHAPE)
    for f in ("ratings.csv", "movies.csv"):
        assert (tmp_path / "again" / f).read_bytes() == (d / f).read_bytes(), f
    generate_ml20m(tmp_path / "other", seed=8, **SHAPE)
    assert (tmp_path / "other" / "ratings.csv").read_bytes() != (d / "ratings.csv").read_bytes()
    with pytest.raises(ValueError, match="exists"):
        generate_ml20m(tmp_path / "again", seed=7, **SHAPE)
    generate_ml20m(tmp_path / "again", seed=7, overwrite=True, **SHAPE)


def test_the_data_path_on_it(generated):
    """encode (int32 indices sharing the loaded arrays), the data module's default split, full-catalogue lists."""
    d, _ = generated
    ml = load_movielens("ml-20m", root=str(d))
    enc = encode(ml)
    assert enc.ratings["user"].dtype == np.int32 and enc.ratings["item"].dtype == np.int32
    assert np.shares_memory(enc.ratings["item_id"].to_numpy(), ml.ratings["item_id"].to_numpy())
    sp = split_ratings(enc.ratings, "leave_last_n", n_test=10, n_val=5)
    assert len(sp.test) == 10 * SHAPE["n_users"] and len(sp.val) == 5 * SHAPE["n_users"]
    ds = EvaluationListDataset(sp.train, sp.test, enc.num_items, exclude=sp.val, num_users=enc.num_users)
    assert len(ds) == SHAPE["n_users"]
    lengths = ds.lengths()
    for k in (0, 17, len(ds) - 1):
        u, items, rel = ds[k]
        assert len(items) == lengths[k] and (rel > 0).sum() == 10
    # the test ratings are each user's latest: none earlier than a training rating of the same user
    last_train = sp.train.groupby("user")["timestamp"].max()
    first_test = sp.test.groupby("user")["timestamp"].min()
    assert (first_test > last_train.loc[first_test.index]).all()


def test_shape_of_a_scale():
    assert ml20m_shape(1.0) == ML20M_SHAPE
    s = ml20m_shape(0.01)
    assert s == {"n_users": 1385, "n_items": 2674, "n_ratings": 200003}
    with pytest.raises(ValueError, match="scale"):
        ml20m_shape(0)
    with pytest.raises(ValueError, match="20"):
        ml20m_shape(1.0, n_users=100, n_ratings=1000)  # 10 ratings per user
    with pytest.raises(ValueError, match="scale"):
        ml20m_shape(2.0)
