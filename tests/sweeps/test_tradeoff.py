"""torchfair.sweeps.tradeoff: the Pareto front against brute force, a directory without a sweep refused, and the
report's measure columns and directions read from the measure declarations (a newly declared measure gets its
front), trials of other sweeps marked."""
import json
import random
from pathlib import Path

import pytest

from torchfair.metrics import declarations
from torchfair.sweeps import collect_results, column_direction, pareto_front, write_sweep_report


def test_pareto_front_against_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 12)
        u = [rng.choice([0.1, 0.2, 0.3, rng.random()]) for _ in range(n)]
        f = [rng.choice([0.0, 0.5, rng.random()]) for _ in range(n)]
        want = {i for i in range(n) if not any(u[j] >= u[i] and f[j] <= f[i] and (u[j] > u[i] or f[j] < f[i])
                                               for j in range(n))}
        got = pareto_front(u, f)
        assert set(got) == want
        assert [f[i] for i in got] == sorted(f[i] for i in got)
    assert pareto_front([1.0, float("nan")], [0.5, 0.1]) == [0]


def test_a_directory_without_trials_is_refused(tmp_path):
    with pytest.raises(ValueError, match="`out`"):
        write_sweep_report(tmp_path / "nothing")


def _fake_trial(out: Path, tid: str, label: str, metrics: dict, lam: float) -> None:
    tdir = out / "trials" / tid
    tdir.mkdir(parents=True)
    (tdir / "trial.json").write_text(json.dumps({"trial_id": tid, "params": {"model.lam": lam}, "sweep": label}))
    (tdir / "result.json").write_text(json.dumps({"trial_id": tid, "params": {"model.lam": lam},
                                                  "metrics": metrics, "checkpoint": None, "seconds": 1.0}))


def test_measure_columns_and_directions_come_from_the_declarations(tmp_path, monkeypatch):
    assert column_direction("val/ndcg@10") == ("utility", "higher")
    assert column_direction("test/dips_t0_gap") == ("fairness", "abs")
    assert column_direction("test/exposure_misallocation_l1") == ("fairness", "lower")
    assert column_direction("test/pairwise_accuracy_inter") == ("fairness", "abs")
    assert column_direction("test/discordant_fraction") == ("utility", "lower")
    assert column_direction("test/dips_AB") is None and column_direction("seconds") is None
    # a newly declared measure shows up in the report without editing the sweep module
    new = declarations.Measure("my_unfairness", lambda s: s, "fairness", False, (), "list", "-", "-", "-")
    monkeypatch.setitem(declarations.MEASURES, "my_unfairness", new)
    out = tmp_path / "out"
    _fake_trial(out, "a", "s-1", {"test/ndcg@10": 0.5, "test/my_unfairness": 0.1, "test/dips_gap": -0.2}, 0.0)
    _fake_trial(out, "b", "s-1", {"test/ndcg@10": 0.6, "test/my_unfairness": 0.3, "test/dips_gap": 0.1}, 1.0)
    _fake_trial(out, "c", "old-2", {"test/ndcg@10": 0.9, "test/my_unfairness": 0.0, "test/dips_gap": 0.0}, 2.0)
    (out / "sweep.json").write_text(json.dumps({"sweep": "s-1", "config": "s.yaml", "trials": ["a", "b"],
                                                "objective": "val/ndcg@10"}))
    text = write_sweep_report(out).read_text()
    assert "## Pareto front: test/my_unfairness against test/ndcg@10" in text
    assert (out / "pareto_my_unfairness.png").is_file()
    # trial c (another sweep) dominates everything but is left out of the fronts, and the report says so
    assert "trials of other sweeps** (old-2)" in text and "| c " not in text and "| a " in text
    df = collect_results(out)
    assert dict(zip(df["trial_id"], df["sweep"])) == {"a": "s-1", "b": "s-1", "c": "old-2"}
    assert "sweep" in open(out / "results.csv").readline().split(",")
    assert "| trial | sweep | model.lam |" in text  # the tables name each trial's sweep when they mix
    assert "| c | old-2 |" in write_sweep_report(out, only_current=False).read_text()


def test_collect_results_has_a_column_per_timing_entry(tmp_path):
    out = tmp_path / "out"
    _fake_trial(out, "a", "s-1", {"test/ndcg@10": 0.5}, 0.0)
    res = json.loads((out / "trials" / "a" / "result.json").read_text())
    res["timing"] = {"train_s": 1.5, "wall_start": 100.0, "loadavg_start": [0.5, 0.25, 0.125], "slot": 1}
    (out / "trials" / "a" / "result.json").write_text(json.dumps(res))
    _fake_trial(out, "b", "s-1", {"test/ndcg@10": 0.6}, 1.0)  # an older trial without timing
    df = collect_results(out).set_index("trial_id")
    assert df.loc["a", "timing:train_s"] == 1.5 and df.loc["a", "timing:slot"] == 1
    assert json.loads(df.loc["a", "timing:loadavg_start"]) == [0.5, 0.25, 0.125]
    assert df["timing:wall_start"].isna().tolist() == [False, True]
