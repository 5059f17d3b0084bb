"""experiments/scale_ml20m.py in its fast mode: every stage runs in its own process on a small ML-20M-shaped data
set and is reported with a wall time and a peak RSS; the sampled and the streamed full evaluations report what they
evaluated; the generated data is removed afterwards."""
import json

from experiment_loader import experiment_fixture

scale = experiment_fixture("scale_ml20m")


def test_fast_mode_runs_every_stage(scale, tmp_path):
    out = tmp_path / "scale"
    assert scale.main(["--fast", "--scale", "0.0005", "--users", "20", "--bootstrap", "20", "--out", str(out),
                       "--quiet", "--threads", "1"]) == 0
    doc = json.loads((out / "scale_ml20m.json").read_text())
    stages = doc["stages"]
    assert list(stages) == list(scale.STAGES)
    for name, rec in stages.items():
        assert rec["wall_s"] > 0 and rec["peak_rss_mb"] >= rec["rss_before_mb"] * 0.5 > 0, name
    n_users = stages["generate"]["stats"]["n_users"]
    assert stages["load"]["users"] == n_users and stages["load"]["dtypes"]["item"] == "int32"
    assert stages["epoch"]["val_lists"] == 20 and stages["epoch"]["eval_users"]["val"]["users"] == 20
    sample, full = stages["eval_sample"], stages["eval_full"]
    assert sample["n_lists"] == 20 and sample["users"]["sample"] == 20 and sample["users"]["streamed"] == [False]
    assert full["n_lists"] == n_users and full["users"]["sample"] is None and full["users"]["streamed"] == [True]
    assert (out / "report_sample" / "eval_users.txt").read_text().count("\n") == 20
    md = (out / "scale_ml20m.md").read_text()
    for name in scale.STAGES:
        assert f"| {name} |" in md
    assert "peak RSS" in md and not (out / "data").exists()
