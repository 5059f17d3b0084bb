"""experiments/movielens_demo.py (``make demo``): the pipeline end to end on the synthetic stand-in, and the
summary's shares against the per-seed reports by hand."""
import json
import math

from experiment_loader import experiment_fixture

demo = experiment_fixture("movielens_demo")


def test_demo_pipeline_rows_and_shares(demo, tmp_path):
    out = tmp_path / "demo"
    assert demo.main(["--variant", "synthetic", "--seeds", "0", "1", "--epochs", "2", "--bootstrap", "10",
                      "--out", str(out), "--quiet", "--rerank", "targeted:measure=dips,keep=2", "--loss", "dips",
                      "--utility", "listnet", "--lam", "0.03", "--finetune-epochs", "1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    names = [r["name"] for r in summary["rows"]]
    rr = " + targeted:measure=dips,keep=2"
    assert names == ["ListNet (tuned)", "ListNet (tuned)" + rr, "control: listnet fine-tune (1 ep)",
                     "control: listnet fine-tune (1 ep)" + rr, "listnet + 0.03·dips (1 ep)",
                     "listnet + 0.03·dips (1 ep)" + rr, "popularity"]
    reports = {s: json.loads((out / f"seed{s}" / "report" / "report.json").read_text()) for s in (0, 1)}
    for row in summary["rows"][1:]:
        shares, rel = [], []
        for s in (0, 1):
            m = reports[s]["models"]
            b, v = m["ListNet (tuned)"]["measures"], m[row["name"]]["measures"]
            shares.append(1 - abs(v["dips_gap"]["mean"]) / abs(b["dips_gap"]["mean"]))
            rel.append(v["ndcg@10"]["mean"] / b["ndcg@10"]["mean"] - 1)
        assert math.isclose(row["columns"]["dips_gap"]["change"][0], sum(shares) / 2, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(row["columns"]["ndcg@10"]["change"][0], sum(rel) / 2, rel_tol=1e-9, abs_tol=1e-12)
    md = (out / "summary.md").read_text()
    assert "| popularity |" in md and "popularity - ListNet (tuned):" in md
    assert (out / "tradeoff.png").is_file()


def test_demo_without_loss_or_rerank(demo, tmp_path):
    out = tmp_path / "d2"
    assert demo.main(["--variant", "synthetic", "--seeds", "0", "--epochs", "1", "--bootstrap", "0", "--lam", "0",
                      "--rerank", "none", "--out", str(out), "--quiet"]) == 0
    names = [r["name"] for r in json.loads((out / "summary.json").read_text())["rows"]]
    assert names == ["ListNet (tuned)", "popularity"]
