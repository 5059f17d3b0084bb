"""experiments/rerank_tradeoff.py: the read-outs against hand-computed values, and the --fast pipeline end to end."""
import json
import math

import pytest
from experiment_loader import experiment_fixture

mod = experiment_fixture("rerank_tradeoff")
head = experiment_fixture("headline_tradeoff")


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
    # per-seed paired intervals, against each row's own reference, bracket the paired mean
    ci = rows["start + fair:p=0.5"]["_ci"][0]
    assert ci["reference"] == "start"
    assert ci["ndcg@10"][0] - 1e-12 <= rows["start + fair:p=0.5"]["ndcg@10"][0] <= ci["ndcg@10"][1] + 1e-12
    assert rows["DIPS loss lam=3 + fair:p=0.5"]["_ci"][0]["reference"] == "DIPS loss lam=3"
    assert (out / "rerank_tradeoff.md").is_file() and (out / "rerank_tradeoff.png").is_file()


def _res_kinds():
    """Rows of every kind: re-rank (free), loss (-3 %), both (-1.5 %), popularity; one seed."""
    base = {"ndcg@10": [0.10], "dips_gap": [-0.4], "exposure_misallocation_l1": [0.5], "pairwise_accuracy_inter": [0.2]}

    def row(dn, dd):
        return {"ndcg@10": [dn], "dips_gap": [dd], "exposure_misallocation_l1": [0.0], "pairwise_accuracy_inter": [0.0]}

    rows = {"start + a": row(0.0, 0.1), "start + b": row(-0.0015, 0.2), "DIPS loss lam=1": row(-0.003, 0.3),
            "DIPS loss lam=1 + a": row(-0.0015, 0.3), "popularity": row(0.002, -0.4)}
    return {"base": {"popularity": base}, "rows": {"popularity": rows}, "seeds": [0], "rerank": ["a", "b"],
            "lams": [1.0], "wall_s": 1.0, "fast": False}


def test_headline_section_picks_the_best_row_of_each_kind_per_budget(head, tmp_path):
    lines = head.rerank_section(_res_kinds())
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in lines if line.startswith("| ")}
    assert "start + a" in rows[("re-rank", "1 %", "start + a")]  # b costs 1.5 %: out of the 1 % budget
    assert "| 50 % |" in rows[("re-rank", "2 %", "start + b")]  # 0.2 of 0.4 removed
    assert ("loss", "1 %", "none within the budget") in rows  # the loss costs 3 %
    assert ("both", "2 %", "DIPS loss lam=1 + a") in rows and "| 75 % |" in rows[("both", "2 %", "DIPS loss lam=1 + a")]
    assert any(k[0] == "popularity (a ranker)" and "| -100 % |" in v for k, v in rows.items())  # 1 - |-0.8| / |-0.4|
    # the section is replaced, not appended twice
    md = tmp_path / "headline.md"
    md.write_text("# head\n\ntext\n")
    head.insert_rerank_section(md, _res_kinds())
    text = head.insert_rerank_section(md, _res_kinds())
    assert text.count(head.RERANK_BEGIN) == 1 and text.startswith("# head")
