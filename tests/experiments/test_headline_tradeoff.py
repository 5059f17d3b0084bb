"""experiments/headline_tradeoff.py: the read-outs of the headline table against hand-computed values, and the
whole pipeline (pretrain, sweep, report) on the synthetic stand-in."""
import math

import pytest
from experiment_loader import experiment_fixture

pd = pytest.importorskip("pandas")


mod = experiment_fixture("headline_tradeoff")


def _frame(rows):
    cols = ["groups", "loss", "seed", "lam", "ndcg@10", "dips_gap", "exposure_misallocation_l1",
            "pairwise_accuracy_inter"]
    return pd.DataFrame([dict(zip(cols, r), seconds=30.0) for r in rows])


# two seeds; baseline ndcg 0.10 / 0.20, dips 0.40 / 0.20; loss "a" and "b" at two lams
ROWS = [("pop", "none", "0", 0.0, 0.10, 0.40, 1.0, 0.5), ("pop", "none", "1", 0.0, 0.20, 0.20, 1.0, 0.5),
        ("pop", "a", "0", 1.0, 0.0995, 0.20, 0.9, 0.5), ("pop", "a", "1", 1.0, 0.199, 0.10, 0.9, 0.5),   # cost .5/.5 %
        ("pop", "a", "0", 3.0, 0.097, 0.10, 0.8, 0.4), ("pop", "a", "1", 3.0, 0.194, 0.05, 0.8, 0.4),    # cost 3/3 %
        ("pop", "b", "0", 1.0, 0.0985, 0.30, 1.0, 0.5), ("pop", "b", "1", 1.0, 0.197, 0.15, 1.0, 0.5),   # cost 1.5 %
        ("pop", "b", "0", 3.0, 0.090, 0.30, 0.5, 0.1), ("pop", "b", "1", 3.0, 0.180, 0.15, 0.5, 0.1)]   # cost 10 %


def test_removed_share_and_cost_are_relative_to_the_same_seeds_baseline(mod):
    rel = mod.relative_to_baseline(_frame(ROWS))
    r = rel[(rel["loss"] == "a") & (rel["lam"] == 3.0) & (rel["seed"] == "1")].iloc[0]
    assert r["cost"] == pytest.approx(1 - 0.194 / 0.20)
    assert r["removed:dips_gap"] == pytest.approx(1 - 0.05 / 0.20)
    assert r["removed:exposure_misallocation_l1"] == pytest.approx(0.2)


def test_budget_readout_picks_the_best_lam_within_the_cost(mod):
    cur = mod.curves(_frame(ROWS))
    # every loss's curve starts at the shared baseline
    assert set(cur[cur["lam"] == 0]["loss"]) == {"a", "b"}
    b1 = mod.at_budget(cur, 0.01).set_index(["loss", "measure"])
    b2 = mod.at_budget(cur, 0.02).set_index(["loss", "measure"])
    # a: lam 1 costs 0.5 % and removes 50 % of the DIPS gap; lam 3 costs 3 %: out of both budgets
    assert b1.loc[("a", "dips_gap"), "lam"] == 1.0 and b1.loc[("a", "dips_gap"), "removed"] == pytest.approx(0.5)
    assert b2.loc[("a", "dips_gap"), "removed"] == pytest.approx(0.5)
    # b: lam 1 costs 1.5 %: only the 2 % budget admits it (25 % removed); within 1 % only lam = 0 (0 removed)
    assert b1.loc[("b", "dips_gap"), "lam"] == 0.0 and b1.loc[("b", "dips_gap"), "removed"] == pytest.approx(0.0)
    assert b2.loc[("b", "dips_gap"), "lam"] == 1.0 and b2.loc[("b", "dips_gap"), "removed"] == pytest.approx(0.25)
    assert b2.loc[("a", "dips_gap"), "removed_std"] == pytest.approx(0.0)
    assert not b2.loc[("a", "dips_gap"), "open"]
    assert mod.at_budget(cur, 0.05).set_index(["loss", "measure"]).loc[("a", "dips_gap"), "open"]  # lam 3 fits


def test_dominance_against_a_plain_check(mod):
    cur = mod.curves(_frame(ROWS))
    # DIPS gap: a's points (ndcg .149/.1455, dips .15/.075) dominate b's (.14775/.135, .225/.225)
    assert mod.dominance(cur, "dips_gap", "pop") == {"a": ["b"]}
    # misallocation: b's lam-3 point is the fairest, so neither dominates the other
    assert mod.dominance(cur, "exposure_misallocation_l1", "pop") == {}


def test_joint_front_against_brute_force(mod):
    cur = mod.curves(_frame(ROWS))
    c = cur.drop_duplicates(["lam", "ndcg@10", "dips_gap"])
    pts = list(zip(c["loss"], c["lam"], c["ndcg@10"], c["dips_gap"]))
    want = {("none" if lam == 0 else lo, lam) for lo, lam, u, f in pts
            if not any(u2 >= u and f2 <= f and (u2 > u or f2 < f) for _, _, u2, f2 in pts)}
    got = mod.joint_front(cur, "dips_gap", "pop")
    assert set(got) == want and ("a", 3.0) in got and ("none", 0.0) in got


def test_report_writes_the_tables_and_figures(mod, tmp_path):
    text = mod.report(_frame(ROWS), tmp_path / "h.md", tmp_path, "cmd", 60.0, "toy")
    assert (tmp_path / "headline_pop.png").stat().st_size > 5000
    assert "| a | +50.0 % ± 0.0 (1) | +50.0 % ± 0.0 (1) |" in text  # DIPS gap removed at 1 % and 2 %
    assert "| b | +0.0 % ± 0.0 (0) | +25.0 % ± 0.0 (1) |" in text
    assert (tmp_path / "h.md").read_text() == text


def test_fast_pipeline_pretrains_sweeps_and_reduces_unfairness(mod, tmp_path):
    assert mod.main(["--fast", "--out", str(tmp_path / "run"), "--results", str(tmp_path / "res")]) == 0
    res = mod.load_results(tmp_path / "run" / "sweep")
    assert len(res) == 5 and set(res["loss"]) == {"none", "dips_soft", "misallocation_soft"}
    cur = mod.curves(res)
    # each loss at its largest lam removes part of the baseline's gap on the measure it trains
    for loss, col in (("dips_soft", "dips_gap"), ("misallocation_soft", "exposure_misallocation_l1")):
        top = cur[(cur["loss"] == loss)].sort_values("lam").iloc[-1]
        assert top["removed:" + col] > 0.05, (loss, top["removed:" + col])
    assert (tmp_path / "res" / "headline_popularity.png").is_file()
    assert math.isfinite(cur["ndcg@10"].sum())
