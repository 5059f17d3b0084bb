"""experiments/movielens_demo.py (``make demo``): the pipeline end to end on the synthetic stand-in (its fits are
sweep trials, reused by a second run), and the summary's shares against the per-seed reports by hand."""
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
    assert names == ["start (iALS)", "start (iALS)" + rr, "control: listnet fine-tune (1 ep)",
                     "control: listnet fine-tune (1 ep)" + rr, "listnet + 0.03·dips (1 ep)",
                     "listnet + 0.03·dips (1 ep)" + rr, "popularity"]
    reports = {s: json.loads((out / f"seed{s}" / "report" / "report.json").read_text()) for s in (0, 1)}
    for row in summary["rows"][1:]:
        shares, rel = [], []
        for s in (0, 1):
            m = reports[s]["models"]
            b, v = m["start (iALS)"]["measures"], m[row["name"]]["measures"]
            shares.append(1 - abs(v["dips_gap"]["mean"]) / abs(b["dips_gap"]["mean"]))
            rel.append(v["ndcg@10"]["mean"] / b["ndcg@10"]["mean"] - 1)
        assert math.isclose(row["columns"]["dips_gap"]["change"][0], sum(shares) / 2, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(row["columns"]["ndcg@10"]["change"][0], sum(rel) / 2, rel_tol=1e-9, abs_tol=1e-12)
    md = (out / "summary.md").read_text()
    assert "| popularity |" in md and "popularity - start (iALS):" in md
    assert (out / "tradeoff.png").is_file()
    # every fit is a sweep trial: the starts (split `random`, the headline's) and the fine-tunes, each with its timing
    starts = [json.loads(p.read_text()) for p in (out / "starts" / "trials").glob("*/result.json")]
    tunes = [json.loads(p.read_text()) for p in (out / "sweep" / "trials").glob("*/result.json")]
    assert sorted((r["params"]["split"], r["params"]["seed"]) for r in starts) == [("random", "0"), ("random", "1")]
    assert sorted((r["params"]["loss"], r["params"]["seed"]) for r in tunes) == \
        [("control", "0"), ("control", "1"), ("dips", "0"), ("dips", "1")]
    assert all(r["timing"]["train_s"] > 0 for r in starts + tunes)


def test_demo_reuses_its_trials_and_writes_the_results_file(demo, tmp_path, monkeypatch):
    out = tmp_path / "demo"
    argv = ["--variant", "synthetic", "--seeds", "5", "--epochs", "1", "--bootstrap", "0", "--out", str(out),
            "--quiet", "--rerank", "none", "--finetune-epochs", "1"]
    assert demo.main(argv) == 0
    done = {p: p.stat().st_mtime for p in out.glob("*/trials/*/result.json")}
    assert len(done) == 3  # the start, the control, the loss (seed 5: not a seed of the sweep files)
    assert all(json.loads(p.read_text())["params"]["seed"] == "5" for p in done)
    (tmp_path / "repo" / "experiments" / "results").mkdir(parents=True)
    monkeypatch.setattr(demo._sweep, "ROOT", tmp_path / "repo")
    assert demo.main(argv + ["--results"]) == 0
    assert {p: p.stat().st_mtime for p in out.glob("*/trials/*/result.json")} == done  # nothing trained again
    text = (tmp_path / "repo" / "experiments" / "results" / "movielens_demo.md").read_text()
    assert text.startswith("# make demo (`python experiments/movielens_demo.py --variant synthetic")
    table = (out / "summary.md").read_text().split("\n\nSeed 5 in detail")[0]
    assert table in text and (tmp_path / "repo" / "experiments" / "results" / "movielens_demo.png").is_file()


def test_demo_without_loss_or_rerank(demo, tmp_path):
    out = tmp_path / "d2"
    assert demo.main(["--variant", "synthetic", "--seeds", "0", "--epochs", "1", "--bootstrap", "0", "--lam", "0",
                      "--rerank", "none", "--out", str(out), "--quiet"]) == 0
    names = [r["name"] for r in json.loads((out / "summary.json").read_text())["rows"]]
    assert names == ["start (iALS)", "popularity"]
