"""experiments/ramp_tradeoff.py: the sweep file it derives (the orderings differ only in the ordering), the
read-outs and the verdict against hand-computed values on a tiny fake result set, the pairing of trials by their
wall intervals, and the whole pipeline (the starts' sweep, the trials' sweep, the report) on the synthetic
stand-in."""
import json
import math

import pytest
from experiment_loader import experiment_fixture

pd = pytest.importorskip("pandas")
yaml = pytest.importorskip("yaml")

mod = experiment_fixture("ramp_tradeoff")

COLS = ["loss", "lam", "ndcg@10", "dips_gap", "exposure_misallocation_l1", "pairwise_accuracy_inter",
        "seconds_per_epoch"]
# one seed, popularity; baseline NDCG@10 0.10, DIPS gap 0.40, misallocation 1.0, pairwise gap 0.50
ROWS = [("none", 0.0, 0.100, 0.40, 1.00, 0.50, 0.5),
        # DIPS, SoftRank: cost 0.5 % / 1.5 % / 5 %, DIPS gap removed 25 % / 50 % / 75 %
        ("dips_soft", 1.0, 0.0995, 0.30, 1.00, 0.50, 2.0),
        ("dips_soft", 3.0, 0.0985, 0.20, 1.00, 0.50, 2.2),
        ("dips_soft", 10.0, 0.095, 0.10, 1.00, 0.50, 2.4),
        # DIPS, RampRank: cost 0 % / 2.5 % / 6 %, removed 30 % / 55 % / 80 %
        ("dips_ramp", 1.0, 0.100, 0.28, 1.00, 0.50, 1.0),
        ("dips_ramp", 3.0, 0.0975, 0.18, 1.00, 0.50, 1.0),
        ("dips_ramp", 10.0, 0.094, 0.08, 1.00, 0.50, 1.0),
        # pairwise gap: SoftRank removes 40 % at cost 0.8 %, RampRank 39.5 % at 0.9 % (within the 1 pp tolerance)
        ("pairgap_soft", 0.1, 0.0992, 0.40, 1.00, 0.300, 1.6),
        ("pairgap_ramp", 0.1, 0.0991, 0.40, 1.00, 0.3025, 0.8)]


def _frame(rows=ROWS):
    out = []
    for r in rows:
        d = dict(zip(COLS, r))
        fam, _, o = d["loss"].rpartition("_") if d["loss"] != "none" else ("none", "", "none")
        out.append({"groups": "popularity", "seed": "0", "family": fam, "ordering": o, "seconds": 20.0, **d})
    return pd.DataFrame(out)


def _derived(mod, tmp_path, **kw):
    from torchfair.sweeps import expand_trials, load_sweep

    spec = yaml.safe_load(mod.SWEEP.read_text())
    args = dict(groups=["popularity"], seeds=[0], families=[f for f, _, _ in mod.LOSSES], grids=mod.lam_grids(spec),
                every=1, fast=False)
    args.update(kw)
    path = mod.derive_sweep(spec, tmp_path, **args)
    sw = load_sweep(path)
    return sw, expand_trials(sw)


def test_the_derived_sweep_holds_the_baseline_and_both_orderings_at_each_lam(mod, tmp_path):
    spec = yaml.safe_load(mod.SWEEP.read_text())
    grids = mod.lam_grids(spec)
    assert grids["dips"] == [float(x) for x in spec["variants"]["loss"]["dips_soft"]["grid"]["model.lam"]]
    assert grids["pairgap"] == [0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    sw, trials = _derived(mod, tmp_path)
    assert sum(t.params["loss"] == "none" for t in trials) == 1
    for family, _, _ in mod.LOSSES:
        for o in ("soft", "ramp"):
            assert sorted(t.params["model.lam"] for t in trials if t.params["loss"] == f"{family}_{o}") == \
                sorted(grids[family])
    assert len(trials) == 1 + 2 * sum(len(g) for g in grids.values())
    # each seed fine-tunes its own start under <out>/start
    assert {sw.trial_config(t.params)["model.init_from"] for t in trials} == {str(tmp_path / "start" / "seed0.ckpt")}
    only = _derived(mod, tmp_path, families=["dips"], grids={**grids, "dips": [1.0]})[1]
    assert [t.params["loss"] for t in only] == ["none", "dips_soft", "dips_ramp"]


def test_the_orderings_differ_only_in_the_ordering(mod, tmp_path):
    sw, trials = _derived(mod, tmp_path, groups=["drama"])
    pick = lambda loss: sw.trial_config(next(t.params for t in trials if t.params["loss"] == loss  # noqa: E731
                                             and t.params["model.lam"] == 0.3))
    over, soft = pick("pairgap_ramp"), pick("pairgap_soft")
    loss = over["model.fairness_loss"]
    assert loss["class_path"] == "torchfair.losses.PairwiseAccuracyGapLoss"
    assert loss["init_args"]["num_groups"] == 2
    assert loss["init_args"]["ordering"] == {"class_path": "torchfair.orderings.RampRank",
                                             "init_args": {"temperature": 0.1}}
    assert soft["model.fairness_loss"]["init_args"]["ordering"]["class_path"] == "torchfair.orderings.SoftRank"
    assert {k: v for k, v in over.items() if k != "model.fairness_loss"} == \
        {k: v for k, v in soft.items() if k != "model.fairness_loss"}
    assert over["model.lam"] == 0.3 and over["trainer.max_epochs"] == 3 and over["model.schedule"] == "constant"
    assert over["data.groups"] == "genre" and over["data.genre"] == "Drama" and over["seed_everything"] == 0
    assert "model.fairness_every" not in over
    sw, trials = _derived(mod, tmp_path, fast=True)
    base = sw.trial_config(next(t.params for t in trials if t.params["loss"] == "none"))
    assert base["model.fairness_loss"] is None and base["trainer.max_epochs"] == 2
    assert base["data.variant"] == "synthetic"


def test_every_makes_the_ramprank_arm_lazy(mod, tmp_path):
    """``--every 4``: the RampRank trials are the sweep file's ``_ramp4`` (``model.fairness_every=4``), SoftRank's
    the same trials as without it; another K gets its own bundle."""
    grids = {"dips": [1.0], "misallocation": [1.0], "pairgap": [1.0]}
    sw1, t1 = _derived(mod, tmp_path, families=["dips"], grids=grids)
    sw4, t4 = _derived(mod, tmp_path, families=["dips"], grids=grids, every=4)
    assert [t.params["loss"] for t in t4] == ["none", "dips_soft", "dips_ramp4"]
    ramp = sw4.trial_config(t4[2].params)
    assert ramp["model.fairness_every"] == 4
    assert ramp["model.fairness_loss"] == sw1.trial_config(t1[2].params)["model.fairness_loss"]
    assert [t.trial_id for t in t4[:2]] == [t.trial_id for t in t1[:2]]  # the SoftRank trials are shared
    sw3, t3 = _derived(mod, tmp_path, families=["dips"], grids=grids, every=3)
    assert t3[2].params["loss"] == "dips_ramp3" and sw3.trial_config(t3[2].params)["model.fairness_every"] == 3
    assert mod.split_variant("dips_ramp4") == ("dips", "ramp", 4)
    assert mod.split_variant("pairgap_soft") == ("pairgap", "soft", 1)
    assert mod.split_variant("none") == ("none", "none", 1)


def test_pair_overlap_by_hand(mod):
    f = _frame()
    # the DIPS pairs: SoftRank [0, 10], RampRank [5, 10] -> 5 s of the shorter's 5: 1; [0, 10] and [10, 20]: 0;
    # [0, 10] and [8, 12]: 2 of the shorter's 4: 0.5
    walls = {("dips_soft", 1.0): (0, 10), ("dips_ramp", 1.0): (5, 10), ("dips_soft", 3.0): (0, 10),
             ("dips_ramp", 3.0): (10, 20), ("dips_soft", 10.0): (0, 10), ("dips_ramp", 10.0): (8, 12),
             ("pairgap_soft", 0.1): (0, 4), ("pairgap_ramp", 0.1): (0, 4), ("none", 0.0): (0, 1)}
    f["wall_start"] = [walls[(r["loss"], r["lam"])][0] for _, r in f.iterrows()]
    f["wall_end"] = [walls[(r["loss"], r["lam"])][1] for _, r in f.iterrows()]
    assert sorted(mod.pair_overlap(f)) == pytest.approx([0.0, 0.5, 1.0, 1.0])


def test_share_at_cost_and_budget_readouts_by_hand(mod):
    cur = mod.curves(_frame())
    # SoftRank: within 1 % only lam 1 (25 %); within 2 % lam 3 (50 %); within 5 % lam 10 (75 %)
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.01) == pytest.approx((0.25, 1.0))
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.02) == pytest.approx((0.50, 3.0))
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.05) == pytest.approx((0.75, 10.0))
    # RampRank: lam 1 costs nothing (30 %); lam 3 costs 2.5 %: within 3 % only
    assert mod.share_at_cost(cur, "dips_ramp", "dips_gap", 0.02) == pytest.approx((0.30, 1.0))
    assert mod.share_at_cost(cur, "dips_ramp", "dips_gap", 0.03) == pytest.approx((0.55, 3.0))
    # below every lam's cost only the baseline qualifies
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.001) == pytest.approx((0.0, 0.0))
    b = mod.at_budget(cur, 0.02).set_index(["loss", "measure"])
    assert b.loc[("dips_soft", "dips_gap"), "removed"] == pytest.approx(0.5)


def test_verdict_and_dominance_by_hand(mod):
    cur = mod.curves(_frame())
    v = mod.verdict(cur, "dips", "popularity")
    assert v["budgets"][0.01]["diff"] == pytest.approx(0.30 - 0.25)
    assert v["budgets"][0.02]["diff"] == pytest.approx(0.30 - 0.50)
    assert not v["ok"] and not v["strict"]
    g = mod.verdict(cur, "pairgap", "popularity")  # 39.5 % against 40 %: within the 1 pp tolerance
    assert g["budgets"][0.01]["diff"] == pytest.approx(-0.005)
    assert g["ok"] and not g["strict"]
    assert not mod.verdict(cur, "pairgap", "popularity", tolerance=0.001)["ok"]
    # RampRank lam 1 (0.100, 0.28) dominates SoftRank lam 1 (0.0995, 0.30); lam 3 (0.0975, 0.18) dominates nothing
    # (SoftRank lam 3 has more NDCG), lam 10 (0.094, 0.08) neither: 1 of 3
    assert mod.dominated(cur, "dips_ramp", "dips_soft", "dips_gap", "popularity") == (1, 3)
    # SoftRank lam 3 (0.0985, 0.20) dominates nothing of RampRank's
    assert mod.dominated(cur, "dips_soft", "dips_ramp", "dips_gap", "popularity") == (0, 3)


def test_paired_differences_by_hand(mod):
    cur = mod.curves(_frame())
    d = mod.paired_differences(cur, "dips", "popularity")
    # cost: 0 - 0.5 %, 2.5 - 1.5 %, 6 - 5 %; removed: +5 pp at every lam
    assert d["n"] == 3 and d["ramp_cheaper"] == 1 and d["ramp_fairer"] == 3
    assert d["cost_mean"] == pytest.approx((-0.005 + 0.01 + 0.01) / 3)
    assert d["cost_min"] == pytest.approx(-0.005) and d["cost_max"] == pytest.approx(0.01)
    assert d["removed_mean"] == pytest.approx(0.05) and d["removed_sd"] == pytest.approx(0.0, abs=1e-12)
    g = mod.paired_differences(cur, "pairgap", "popularity")
    assert g["n"] == 1 and math.isnan(g["cost_sd"]) and g["removed_mean"] == pytest.approx(-0.005)


def test_epoch_times(mod):
    t = mod.epoch_times(_frame())
    assert t["dips:soft"]["mean"] == pytest.approx(2.2) and t["dips:soft"]["n"] == 3
    assert t["dips:ramp"]["mean"] == pytest.approx(1.0) and t["dips:ramp"]["sd"] == pytest.approx(0.0)
    assert t["soft"]["mean"] == pytest.approx((2.0 + 2.2 + 2.4 + 1.6) / 4)
    assert t["none"]["n"] == 1 and math.isnan(t["none"]["sd"])
    # the trials of the same lam, side by side: 1 / 2, 1 / 2.2, 1 / 2.4 (DIPS) and 0.8 / 1.6 (pairwise gap)
    assert sorted(mod.paired_ratios(_frame(), "dips")) == pytest.approx([1 / 2.4, 1 / 2.2, 0.5])
    assert sorted(mod.paired_ratios(_frame())) == pytest.approx([1 / 2.4, 1 / 2.2, 0.5, 0.5])
    assert mod.paired_ratios(_frame(), "misallocation") == []


def test_report_writes_tables_verdict_and_figure(mod, tmp_path):
    text = mod.report(_frame(), tmp_path / "r.md", tmp_path, "cmd", 60.0, "toy",
                      {"dips": [1.0, 3.0, 10.0], "pairgap": [0.1]})
    assert (tmp_path / "r.png").stat().st_size > 5000  # named after the report
    assert (tmp_path / "r.md").read_text() == text
    # the read-out row of DIPS: 25 % / 30 % within 1 %, 50 % / 30 % within 2 %
    assert "| +25.0 % (1) | +30.0 % (1) | +5.0 pp | +50.0 % (3) | +30.0 % (1) | -20.0 pp | **no** |" in text
    assert "**yes** (within the tolerance)" in text
    assert "| DIPS | 3 | +0.5 pp ± 0.9 (-0.5 pp to +1.0 pp) | +5.0 pp ± 0.0 (+5.0 pp to +5.0 pp) | 1 of 3 | 3 of 3 |" \
        in text
    assert "| DIPS | 2.2 s ± 0.2 s (3) | 1 s ± 0 s (3) | 0.45x | 0.45x (0.42x - 0.50x) |" in text
    assert "- popularity, DIPS: RampRank is worse than SoftRank" in text
    assert "- popularity, pairwise accuracy gap: RampRank is at least as good as SoftRank" in text
    # the per-loss table pairs the orderings at each lam
    assert "| 3 | 0.0985 | +1.5 % | 0.2000 | +50.0 % | 0.0975 | +2.5 % | 0.1800 | +55.0 % | 2.2 s | 1 s |" in text


@pytest.mark.slow  # 4 trials (a start and 3 fine-tunes) on the synthetic stand-in
def test_fast_pipeline_end_to_end(mod, tmp_path):
    out, res = tmp_path / "run", tmp_path / "res"
    assert mod.main(["--fast", "--losses", "dips", "--nice", "0", "--workers", "1", "--out", str(out),
                     "--results", str(res)]) == 0
    assert len(list((out / "starts" / "trials").glob("*/result.json"))) == 1
    frame = mod.load_results(out / "sweep")
    assert sorted(frame["loss"]) == ["dips_ramp", "dips_soft", "none"] and (frame["epochs"] == 2).all()
    assert (frame["seconds_per_epoch"] > 0).all() and frame["ndcg@10"].between(0, 1).all()
    base = frame[frame["loss"] == "none"].iloc[0]
    for o in ("soft", "ramp"):  # the DIPS loss at lam 10 shrinks the DIPS gap on the synthetic data
        assert frame[frame["loss"] == f"dips_{o}"].iloc[0]["dips_gap"] < base["dips_gap"]
    text = (res / "ramp_tradeoff.md").read_text()
    assert "RampRank" in text and "## Verdict" in text and (res / "ramp_tradeoff.png").is_file()
    assert "Machine load" in text and "ran at the same time" in text
    # resumable: a second run finds every trial done and only rewrites the report; --every 4 reuses the SoftRank
    # trial and the baseline, and trains its own RampRank arm
    mtimes = {p: p.stat().st_mtime for p in out.glob("*/trials/*/result.json")}
    assert mod.main(["--fast", "--losses", "dips", "--nice", "0", "--out", str(out), "--results", str(res)]) == 0
    assert {p: p.stat().st_mtime for p in out.glob("*/trials/*/result.json")} == mtimes
    assert mod.main(["--fast", "--losses", "dips", "--nice", "0", "--workers", "1", "--every", "4", "--out",
                     str(out), "--results", str(res)]) == 0
    assert len(list(out.glob("sweep/trials/*/result.json"))) == 4
    assert "every 4 steps" in (res / "ramp_tradeoff_every4.md").read_text()
