"""experiments/tune_ranker.py: every candidate is its variant of configs/sweep_tune_ranker.yaml, the tuned one
matches configs/ml100k_tuned.yaml, and the --fast pipeline trains (a sweep), evaluates and writes a report whose
paired differences agree with its means."""
import re
from pathlib import Path

import numpy as np
import pytest
from experiment_loader import experiment_fixture

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
mod = experiment_fixture("tune_ranker")


def _effective(mod, key):
    """The config a candidate's trial trains: the base config, the sweep file's overrides, its bundle."""
    from torchfair.sweeps import expand_trials, load_sweep

    spec = load_sweep(mod.SWEEP)
    cfg = yaml.safe_load(spec.base.read_text())
    trial = next(t for t in expand_trials(spec) if t.params["recipe"] == key)
    for dotted, v in spec.trial_config(trial.params).items():
        *path, last = dotted.split(".")
        d = cfg
        for k in path:
            d = d.setdefault(k, {})
        d[last] = v
    return cfg


def test_every_candidate_is_its_sweep_variant(mod):
    from torchfair.sweeps import load_sweep

    assert list(load_sweep(mod.SWEEP).variants["recipe"]) == [r.key for r in mod.CANDIDATES]
    for r in mod.CANDIDATES:
        cfg = _effective(mod, r.key)
        loss = {"class_path": f"torchfair.losses.{r.loss}", **({"init_args": r.loss_args} if r.loss_args else {})}
        assert cfg["model"]["ranker"] == r.ranker and cfg["model"]["ranker_args"] == r.ranker_args, r.key
        assert cfg["model"]["utility_loss"] == loss and cfg["model"]["lr"] == r.lr, r.key
        assert cfg["model"].get("weight_decay", 0.0) == r.weight_decay, r.key
        assert cfg["trainer"]["max_epochs"] == r.epochs and cfg["data"]["num_negatives"] == r.num_negatives, r.key
        assert cfg["data"]["batch_size"] == r.batch_size and cfg["seed_everything"] == 0, r.key
        assert cfg["model"].get("fairness_loss") is None, r.key


def test_the_tuned_candidate_is_the_yaml_config(mod):
    tuned = yaml.safe_load((ROOT / "configs" / "ml100k_tuned.yaml").read_text())
    cfg = _effective(mod, mod.TUNED_RECIPE.key)
    for k in ("ranker", "ranker_args", "utility_loss", "lr", "weight_decay"):
        assert cfg["model"][k] == tuned["model"][k], k
    for k, v in tuned["data"].items():
        assert cfg["data"][k] == v, k
    assert cfg["trainer"]["max_epochs"] == tuned["trainer"]["max_epochs"]
    # the old default is the demo's former recipe
    assert mod.CANDIDATES[0] == mod.OLD_DEFAULT
    assert (mod.OLD_DEFAULT.epochs, mod.OLD_DEFAULT.num_negatives, mod.OLD_DEFAULT.ranker_args) == (20, 100, {"dim": 32})


def test_paired_difference_is_the_difference_of_means(mod):
    a = np.array([0.5, 0.2, np.nan, 0.1])
    b = np.array([0.1, 0.2, 0.3, 0.4])
    mean, lo, hi = mod.paired(a, b, 500)
    assert mean == pytest.approx(np.mean([0.4, 0.0, -0.3]))
    assert lo <= mean <= hi and lo >= -0.3 - 1e-12 and hi <= 0.4 + 1e-12


def test_fast_pipeline_writes_the_report(mod, tmp_path, capsys):
    assert mod.main(["--fast", "--out", str(tmp_path), "--runs", str(tmp_path / "runs")]) == 0
    assert len(list((tmp_path / "runs" / "trials").glob("*/result.json"))) == 2  # the candidates: sweep trials
    text = (tmp_path / "tune_ranker.md").read_text()
    pop = re.search(r"validation (\d\.\d{4}), test (\d\.\d{4})", text)
    assert pop, text
    pop_val, pop_test = float(pop.group(1)), float(pop.group(2))
    rows = [r for r in text.splitlines() if r.startswith("| ") and "(fast: 2 ep)" in r]
    assert len(rows) == 2 and "old default" in rows[0] and "T=2" in rows[1]
    assert sum("(chosen)" in r for r in rows) == 1
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        val, test = float(cells[1]), float(cells[2])
        dval, dtest = (float(c.split()[0]) for c in cells[3:5])
        assert 0 < val <= 1 and 0 < test <= 1
        # every synthetic list has a relevant item: the paired mean is the difference of the means
        assert dval == pytest.approx(val - pop_val, abs=2e-4)
        assert dtest == pytest.approx(test - pop_test, abs=2e-4)
        lo, hi = (float(x) for x in re.findall(r"[+-]\d\.\d{4}", cells[4])[1:3])
        assert lo <= dtest <= hi
    # the chosen one has the best validation NDCG@10
    chosen = max(rows, key=lambda r: float(r.strip("|").split("|")[1]))
    assert "(chosen)" in chosen
