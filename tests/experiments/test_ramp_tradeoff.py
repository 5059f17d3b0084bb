"""experiments/ramp_tradeoff.py: the trial plan and configs, the read-outs and the verdict against hand-computed
values on a tiny fake result set, and the whole pipeline (pretrain, fit + test subprocesses, report) on the
synthetic stand-in."""
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


def test_plan_puts_the_two_orderings_of_each_lam_next_to_each_other(mod):
    spec = yaml.safe_load(mod.SWEEP.read_text())
    grids = mod.lam_grids(spec)
    assert grids["dips"] == [float(x) for x in spec["variants"]["loss"]["dips_soft"]["grid"]["model.lam"]]
    assert grids["pairgap"] == [0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    trials = mod.plan(spec, ["popularity"], [0], grids)
    assert trials[0]["loss"] == "none" and trials[0]["lam"] == 0.0
    rest = trials[1:]
    assert len(rest) == 2 * sum(len(g) for g in grids.values())
    for a, b in zip(rest[::2], rest[1::2]):
        assert a["family"] == b["family"] and a["lam"] == b["lam"]
        assert {a["ordering"], b["ordering"]} == {"soft", "ramp"}
    assert rest[0]["ordering"] == "soft" and rest[2]["ordering"] == "ramp"  # who goes first alternates
    only = mod.plan(spec, ["popularity"], [0], {**grids, "dips": [1.0]}, ["dips"])
    assert [t["loss"] for t in only] == ["none", "dips_soft", "dips_ramp"]
    assert len({mod.trial_name(t) for t in trials}) == len(trials)


def test_trial_overrides_swap_only_the_ordering(mod, tmp_path):
    spec = yaml.safe_load(mod.SWEEP.read_text())
    start = tmp_path / "seed0.ckpt"
    t = {"groups": "drama", "seed": 0, "loss": "pairgap_ramp", "family": "pairgap", "ordering": "ramp", "lam": 0.3}
    over = mod.trial_overrides(spec, t, start, fast=False)
    soft = mod.trial_overrides(spec, {**t, "loss": "pairgap_soft", "ordering": "soft"}, start, fast=False)
    loss = over["model.fairness_loss"]
    assert loss["class_path"] == "torchfair.losses.PairwiseAccuracyGapLoss"
    assert loss["init_args"]["num_groups"] == 2
    assert loss["init_args"]["ordering"] == {"class_path": "torchfair.orderings.RampRank",
                                             "init_args": {"temperature": 0.1}}
    assert soft["model.fairness_loss"]["init_args"]["ordering"]["class_path"] == "torchfair.orderings.SoftRank"
    assert {k: v for k, v in over.items() if k != "model.fairness_loss"} == \
        {k: v for k, v in soft.items() if k != "model.fairness_loss"}
    assert over["model.lam"] == 0.3 and over["trainer.max_epochs"] == 3 and over["model.schedule"] == "constant"
    assert over["data.groups"] == "genre" and over["data.genre"] == "Drama"
    assert over["model.init_from"] == str(start.resolve()) and over["seed_everything"] == 0
    assert over["trainer.callbacks"][-1]["class_path"] == "pytorch_lightning.callbacks.Timer"
    base = mod.trial_overrides(spec, {**t, "loss": "none", "family": "none", "ordering": "none", "lam": 0.0},
                               start, fast=True)
    assert base["model.fairness_loss"] is None and base["trainer.max_epochs"] == 2
    assert base["data.variant"] == "synthetic"
    args = mod.trial_args(spec, t, start, fast=False)
    assert args[:2] == ["--config", str(mod.ROOT / "configs" / "ml100k_dips.yaml")]
    assert json.loads(args[args.index("--model.fairness_loss") + 1]) == loss


def test_every_makes_the_ramprank_arm_lazy(mod, monkeypatch):
    """``--every 4``: the RampRank trials get ``model.fairness_every=4`` and their own names; SoftRank's do not."""
    spec = yaml.safe_load(mod.SWEEP.read_text())
    monkeypatch.setattr(mod, "EVERY", 4)
    trials = mod.plan(spec, ["popularity"], [0], {**mod.lam_grids(spec), "dips": [1.0]}, ["dips"])
    ramp = next(t for t in trials if t["ordering"] == "ramp")
    soft = next(t for t in trials if t["ordering"] == "soft")
    assert mod.trial_name(ramp) == "popularity_s0_dips_ramp_every4_lam1"
    assert mod.trial_name(soft) == "popularity_s0_dips_soft_lam1"
    assert mod.trial_overrides(spec, ramp, mod.ROOT, fast=False)["model.fairness_every"] == 4
    assert "model.fairness_every" not in mod.trial_overrides(spec, soft, mod.ROOT, fast=False)


def test_share_at_cost_and_budget_readouts_by_hand(mod):
    cur = mod.ht.curves(_frame())
    # SoftRank: within 1 % only lam 1 (25 %); within 2 % lam 3 (50 %); within 5 % lam 10 (75 %)
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.01) == pytest.approx((0.25, 1.0))
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.02) == pytest.approx((0.50, 3.0))
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.05) == pytest.approx((0.75, 10.0))
    # RampRank: lam 1 costs nothing (30 %); lam 3 costs 2.5 %: within 3 % only
    assert mod.share_at_cost(cur, "dips_ramp", "dips_gap", 0.02) == pytest.approx((0.30, 1.0))
    assert mod.share_at_cost(cur, "dips_ramp", "dips_gap", 0.03) == pytest.approx((0.55, 3.0))
    # below every lam's cost only the baseline qualifies
    assert mod.share_at_cost(cur, "dips_soft", "dips_gap", 0.001) == pytest.approx((0.0, 0.0))
    b = mod.ht.at_budget(cur, 0.02).set_index(["loss", "measure"])
    assert b.loc[("dips_soft", "dips_gap"), "removed"] == pytest.approx(0.5)


def test_verdict_and_dominance_by_hand(mod):
    cur = mod.ht.curves(_frame())
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
    cur = mod.ht.curves(_frame())
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


@pytest.mark.slow  # 7 torchfair subprocesses: about a minute on 2 cores
def test_fast_pipeline_end_to_end(mod, tmp_path):
    out, res = tmp_path / "run", tmp_path / "res"
    assert mod.main(["--fast", "--losses", "dips", "--nice", "0", "--retries", "0", "--out", str(out),
                     "--results", str(res)]) == 0
    done = sorted(p.parent.name for p in (out / "trials").glob("*/result.json"))
    assert done == ["popularity_s0_dips_ramp_lam10", "popularity_s0_dips_soft_lam10", "popularity_s0_none_lam0"]
    r = json.loads((out / "trials" / "popularity_s0_dips_ramp_lam10" / "result.json").read_text())
    assert r["epochs"] == 2 and r["seconds_per_epoch"] > 0
    assert 0 < r["metrics"]["test/ndcg@10"] <= 1
    frame = mod.load_results(out / "trials")
    base = frame[frame["loss"] == "none"].iloc[0]
    for o in ("soft", "ramp"):  # the DIPS loss at lam 10 shrinks the DIPS gap on the synthetic data
        assert frame[frame["loss"] == f"dips_{o}"].iloc[0]["dips_gap"] < base["dips_gap"]
    text = (res / "ramp_tradeoff.md").read_text()
    assert "RampRank" in text and "## Verdict" in text and (res / "ramp_tradeoff.png").is_file()
    # resumable: a second run finds every trial done and only rewrites the report
    mtime = (out / "trials" / "popularity_s0_none_lam0" / "result.json").stat().st_mtime
    assert mod.main(["--fast", "--losses", "dips", "--nice", "0", "--out", str(out), "--results", str(res)]) == 0
    assert (out / "trials" / "popularity_s0_none_lam0" / "result.json").stat().st_mtime == mtime
