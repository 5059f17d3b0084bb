"""experiments/tune_ranker.py: the tuned recipe matches its YAML config, and the --fast pipeline trains, evaluates
and writes a report whose paired differences agree with its means."""
import re
from pathlib import Path

import numpy as np
import pytest
from experiment_loader import experiment_fixture

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
mod = experiment_fixture("tune_ranker")


def test_tuned_recipe_is_the_yaml_config(mod):
    cfg = yaml.safe_load((ROOT / "configs" / "ml100k_tuned.yaml").read_text())
    t = mod.TUNED
    assert cfg["model"]["ranker"] == t["model"]["ranker"]
    assert cfg["model"]["ranker_args"] == t["model"]["ranker_args"]
    assert cfg["model"]["utility_loss"] == t["model"]["utility_loss"]
    assert cfg["model"]["lr"] == t["model"]["lr"] and cfg["model"]["weight_decay"] == t["model"]["weight_decay"]
    for k, v in t["data"].items():
        assert cfg["data"][k] == v, k
    assert cfg["trainer"]["max_epochs"] == t["trainer"]["max_epochs"]
    # the tuned recipe is one of the candidates, and the old default is the demo's
    assert mod.TUNED_RECIPE in mod.CANDIDATES and mod.CANDIDATES[0] == mod.OLD_DEFAULT
    assert (mod.OLD_DEFAULT.epochs, mod.OLD_DEFAULT.num_negatives, mod.OLD_DEFAULT.ranker_args) == (20, 100, {"dim": 32})


def test_build_tuned_gives_a_trainable_module(mod):
    model, dm, trainer = mod.build_tuned("synthetic", seed=1, logger=False, enable_checkpointing=False,
                                         enable_progress_bar=False, max_epochs=1, limit_val_batches=0)
    assert model.utility_loss.kwargs == {"relevance_temperature": 2.0}
    assert model.ranker.user_factors.weight.shape[1] == 32
    assert model.hparams.weight_decay == 1e-6
    assert dm.num_negatives == mod.ML100K_ITEMS and dm.seed == 1
    before = model.ranker.item_factors.weight.detach().clone()
    trainer.fit(model, dm)
    assert not np.allclose(before.numpy(), model.ranker.item_factors.weight.detach().numpy())


def test_paired_difference_is_the_difference_of_means(mod):
    a = np.array([0.5, 0.2, np.nan, 0.1])
    b = np.array([0.1, 0.2, 0.3, 0.4])
    mean, lo, hi = mod.paired(a, b, 500)
    assert mean == pytest.approx(np.mean([0.4, 0.0, -0.3]))
    assert lo <= mean <= hi and lo >= -0.3 - 1e-12 and hi <= 0.4 + 1e-12


def test_fast_pipeline_writes_the_report(mod, tmp_path, capsys):
    assert mod.main(["--fast", "--out", str(tmp_path)]) == 0
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
