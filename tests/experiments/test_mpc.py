"""Findings of Korevaar et al., "Matched Pair Calibration for Ranking Fairness" (arXiv 2023) §5 / App. B, on the
fast synthetic mode of experiments/mpc_movielens.py, and hand-checked pieces of its pipeline."""
from itertools import product

import numpy as np
import pandas as pd
import pytest
import torch
from experiment_loader import experiment_fixture



exp = experiment_fixture("mpc_movielens")


@pytest.fixture(scope="module")
def res(exp, tmp_path_factory):
    out = tmp_path_factory.mktemp("mpc")
    r = exp.main(["--fast", "--out", str(out)])
    r["out"] = out
    return r


def test_boost_ordering_on_standin(res):
    rows = {r["genre"]: r for r in res["rows"]}
    assert len(rows) == 6
    # the paper's finding (Fig. 2): boosting lowers, demoting raises MPC, for every genre of the stand-in
    for g, r in rows.items():
        assert r["holds"], g
        assert r["boosted"]["mpc"] < r["baseline"]["mpc"] < r["demoted"]["mpc"], g
    # the stand-in's under-rated niche genre is under-valued by the mean-imputed SVD: positive MPC
    doc = rows["Documentary"]["baseline"]
    assert doc["lo"] > 0 and doc["mpc"] > 0.1


def test_calibration_shrinks_mpc_on_standin(res):
    rows = res["rows"]
    base = np.mean([abs(r["baseline"]["mpc"]) for r in rows])
    cal = np.mean([abs(r["calibrated"]["mpc"]) for r in rows])
    assert cal < 0.6 * base
    assert sum(r["cal_shrinks"] for r in rows) >= 4


def test_outputs_written(res):
    md = (res["out"] / "mpc_movielens.md").read_text()
    assert "python experiments/mpc_movielens.py --fast" in md
    assert "| Documentary |" in md and "6 of 6 genres" in md
    assert (res["out"] / "mpc_movielens.png").stat().st_size > 5000


def test_boost_is_a_third_of_the_score_std(exp):
    # independent reference: numpy's sample std of the evaluation scores, recomputed from the pipeline's pieces
    from torchfair.data.recsys import encode, split_ratings
    ml = exp.standin_movielens(n_users=60, n_movies=200, mean_ratings=40, seed=3)
    r = exp.run(ml, genres=["Documentary"], n_boot=5, rank=8)
    enc = encode(ml)
    sp = split_ratings(enc.ratings, "temporal", test_fraction=0.2, val_fraction=0.0)
    sc = exp.svd_scores(sp.train, sp.test, enc.num_users, enc.num_items, 8)
    sc = sc[sc.groupby("user")["item"].transform("size") >= 2]
    assert len(sc) == r["n_eval"]
    assert r["alpha"] == pytest.approx(np.std(sc["score"].to_numpy(), ddof=1) / 3, rel=1e-9)


def test_svd_scores_match_numpy(exp):
    train = pd.DataFrame({"user": [0, 0, 1, 2, 2], "item": [0, 1, 1, 0, 2], "rating": [5.0, 3.0, 4.0, 1.0, 2.0]})
    test = pd.DataFrame({"user": [1, 2, 3], "item": [0, 1, 0], "rating": [3.0, 4.0, 5.0]})
    out = exp.svd_scores(train, test, 4, 3, 1)
    assert out["user"].tolist() == [1, 2]  # user 3 has no training rating: dropped
    M = np.full((4, 3), 3.0)
    M[[0, 0, 1, 2, 2], [0, 1, 1, 0, 2]] = [5, 3, 4, 1, 2]
    U, s, Vt = np.linalg.svd(M)
    R = s[0] * np.outer(U[:, 0], Vt[0])
    assert out["score"].tolist() == pytest.approx([R[1, 0], R[2, 1]])


def test_mpc_of_a_hand_made_list(exp):
    # one user, five movies; the genre is movies 1 and 3.  With quantile 1 every candidate pair counts:
    # plain loop over (g item i, not-g item j) with s_j >= s_i
    scores = pd.DataFrame({"user": 0, "item": [0, 1, 2, 3, 4], "timestamp": 0,
                           "score": [3.0, 2.9, 2.0, 1.0, 0.5], "rating": [2.0, 4.0, 3.0, 5.0, 1.0]})
    G = np.array([[False], [True], [False], [True], [False]])
    S, Y, ids, memb, mask = exp.to_batch(scores, G)
    in_g = memb[..., 0]
    from torchfair.metrics.calibration import matched_pair_calibration
    diffs = [Y[0, i] - Y[0, j] for i, j in product(range(5), range(5))
             if in_g[0, i] and not in_g[0, j] and S[0, j] >= S[0, i]]
    assert len(diffs) == 3  # (1, 0), (3, 0), (3, 2)
    r = matched_pair_calibration(S, Y, in_g.long(), quantile=1.0, mask=mask, ci="none")
    assert float(r.estimate) == pytest.approx(float(sum(diffs) / 3))  # (2 + 3 + 2) / 3
    # boosting the genre by 1.5 lifts movie 3 above movie 2 and 1 above 0: pairs (3, 0) only -> 3
    r = matched_pair_calibration(S + 1.5 * in_g, Y, in_g.long(), quantile=1.0, mask=mask, ci="none")
    assert float(r.estimate) == pytest.approx(3.0)


def test_calibrate_is_per_group_isotonic(exp):
    S = torch.tensor([[1.0, 2.0, 3.0, 1.5, 2.5]], dtype=torch.float64)
    Y = torch.tensor([[3.0, 1.0, 2.0, 4.0, 5.0]], dtype=torch.float64)
    in_g = torch.tensor([[True, True, True, False, False]])
    mask = torch.ones_like(in_g)
    out = exp.calibrate(S, Y, in_g, mask)
    # group g: ratings 3, 1, 2 by increasing score -> pool-adjacent-violators gives 2, 2, 2; not-g: 4, 5 stays
    assert out.tolist() == [[2.0, 2.0, 2.0, 4.0, 5.0]]


def test_input_errors(exp):
    ml = exp.standin_movielens(n_users=20, n_movies=50, mean_ratings=20)
    with pytest.raises(ValueError, match="`genres`"):
        exp.run(ml, genres=["Western"], n_boot=5)
    with pytest.raises(ValueError, match="`split`"):
        exp.run(ml, split="kfold", n_boot=5)
    with pytest.raises(ValueError, match="`n_users`"):
        exp.standin_movielens(n_users=1)
    with pytest.raises(ValueError, match="`--ratings`"):
        exp.main(["--movies", "m.csv"])


def test_csv_input(exp, tmp_path):
    (tmp_path / "movies.csv").write_text("movieId,title,genres\n1,A (1990),Drama|Comedy\n2,B (1991),Drama\n"
                                         "3,C (1992),(no genres listed)\n")
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.5,10\n1,2,3.0,11\n2,3,1.0,12\n"
                                          "1,9,2.0,13\n")
    ml = exp.csv_movielens(str(tmp_path / "ratings.csv"), str(tmp_path / "movies.csv"))
    assert ml.genres == ["Comedy", "Drama"]
    assert len(ml.ratings) == 3  # movie 9 is unknown
    assert ml.items["genres"].tolist() == [["Drama", "Comedy"], ["Drama"], []]


def _ml100k_cached():
    from torchfair.data.movielens import default_cache_dir
    return (default_cache_dir() / "ml-100k").is_dir()


@pytest.mark.slow
@pytest.mark.skipif(not _ml100k_cached(), reason="ML-100K is not in the torchfair cache")
def test_real_ml100k_runs(exp, tmp_path):
    r = exp.main(["--genres", "Drama,Comedy", "--n-boot", "21", "--no-random-check", "--out", str(tmp_path)])
    assert r["variant"] == "ml-100k" and r["n_ratings"] == 100000
    assert 50 < r["n_lists"] < 200  # the temporal cut leaves about a hundred users with seen movies
