"""experiments/rerank_tradeoff.py: the read-outs against hand-computed values, and the --fast pipeline end to end."""
import json
import math

import pytest
from experiment_loader import experiment_fixture

mod = experiment_fixture("rerank_tradeoff")


def _res():
    return {"base": {"popularity": {"ndcg@10": [0.10, 0.20], "dips_gap": [-0.2, -0.4],
                                    "exposure_misallocation_l1": [0.5, 0.5], "pairwise_accuracy_inter": [0.4, 0.2]}},
            "rows": {"popularity": {"r": {"ndcg@10": [-0.001, -0.004], "dips_gap": [0.1, 0.1],
                                          "exposure_misallocation_l1": [-0.25, -0.5],
                                          "pairwise_accuracy_inter": [-0.8, 0.0]}}},
            "seeds": [0, 1], "rerank": [], "lams": [], "wall_s": 60.0, "fast": False}



def test_shares_by_hand(mod):
    sh = mod.shares(_res(), "popularity", "r")
    assert math.isclose(sh["ndcg_rel"], (-0.01 - 0.02) / 2)  # -1 % and -2 %
    assert math.isclose(sh["dips_gap"], (0.5 + 0.25) / 2)  # |-0.1| of 0.2 left, |-0.3| of 0.4 left
    assert math.isclose(sh["exposure_misallocation_l1"], (0.5 + 1.0) / 2)
    assert math.isclose(sh["pairwise_accuracy_inter"], (0.0 + 0.0) / 2)  # 0.4 -> -0.4: nothing removed


def test_report_marks_the_2_percent_budget(mod):
    md = mod.report(_res(), "cmd")
    row = next(line for line in md.splitlines() if line.startswith("| r |"))
    assert row.endswith("| yes |") and ("| 37 % |" in row or "| 38 % |" in row)  # 37.5 % of the DIPS gap


def test_fast_pipeline(mod, tmp_path):
    out = tmp_path / "rr"
    assert mod.main(["--fast", "--seeds", "0", "--out", str(out), "--lams", "3",
                     "--rerank", "fair:p=0.5", "targeted:measure=dips,keep=2"]) == 0
    res = json.loads((out / "rerank_tradeoff.json").read_text())
    rows = res["rows"]["popularity"]
    assert set(rows) == {"start + fair:p=0.5", "start + targeted:measure=dips,keep=2", "DIPS loss lam=3",
                         "DIPS loss lam=3 + fair:p=0.5", "DIPS loss lam=3 + targeted:measure=dips,keep=2",
                         "popularity"}
    # the targeted re-ranker lowers the exact DIPS gap of the start (what it targets, on estimated relevance)
    base = abs(res["base"]["popularity"]["dips_gap"][0])
    assert abs(res["base"]["popularity"]["dips_gap"][0] + rows["start + targeted:measure=dips,keep=2"]["dips_gap"][0]) \
        < base
    assert (out / "rerank_tradeoff.md").is_file() and (out / "rerank_tradeoff.png").is_file()
