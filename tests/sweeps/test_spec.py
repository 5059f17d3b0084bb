"""torchfair.sweeps.spec: the sweep file and its errors, the trial expansion (grid, seeded random draws,
variants), trial ids (the whole resolved config; a widened grid keeps the ids of its points), the repo's sweep
files."""
import json
from pathlib import Path

import pytest

from torchfair.sweeps import Trial, expand_trials, load_sweep, run_sweep

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "ml100k_dips.yaml"


def _ids(path: Path):
    return {json.dumps(t.params, sort_keys=True): t.trial_id for t in expand_trials(load_sweep(path))}


# ------------------------------------------------------------------------------------------------ the file
def test_sweep_file_errors_name_the_field(tmp_path, write_yaml):
    base = str(BASE)
    cases = [({"grid": {"model.lam": [0]}}, "`base`"),
             ({"base": "nope.yaml"}, "`base`"),
             ({"base": base, "grid": {"model.lam": []}}, "`grid`"),
             ({"base": base, "grid": {"--model.lam": [1]}}, "`grid`"),
             ({"base": base, "random": {"model.lam": {"normal": [0, 1]}}}, "`random`"),
             ({"base": base, "random": {"model.lam": {"loguniform": [0, 1]}}}, "loguniform"),
             ({"base": base, "grid": {"model.lam": [1]}, "overrides": {"model.lam": 2}}, "twice"),
             ({"base": base, "samples": 0}, "`samples`"),
             ({"base": base, "lambda": 1}, "unknown fields")]
    for body, match in cases:
        with pytest.raises(ValueError, match=match):
            load_sweep(write_yaml(body))
    with pytest.raises(ValueError, match="`config`"):
        load_sweep(tmp_path / "missing.yaml")


def test_trials_are_the_grid_product_with_seeded_draws(write_yaml):
    path = write_yaml({"base": str(BASE), "grid": {"model.lam": [0.0, 0.5, 1.0], "seed_everything": [0, 1]},
                       "random": {"model.lr": {"loguniform": [1e-3, 1e-1]}, "model.ranker": {"choice": ["mf"]}},
                       "samples": 2, "seed": 7})
    spec = load_sweep(path)
    trials = expand_trials(spec)
    assert len(trials) == 3 * 2 * 2
    assert {(t.params["model.lam"], t.params["seed_everything"]) for t in trials} == \
        {(a, b) for a in (0.0, 0.5, 1.0) for b in (0, 1)}
    assert all(1e-3 <= t.params["model.lr"] <= 1e-1 for t in trials)
    assert [t.params for t in expand_trials(load_sweep(path))] == [t.params for t in trials]  # seeded
    ids = [t.trial_id for t in trials]
    assert len(set(ids)) == len(ids)
    assert Trial({"b": 1, "a": 2}).trial_id == Trial({"a": 2, "b": 1}).trial_id  # order-free identity


# ------------------------------------------------------------------------------------------------ identity
def test_trial_id_is_the_whole_resolved_config(tmp_path, write_yaml):
    grid = {"model.lam": [0.0, 1.0]}
    a = _ids(write_yaml({"base": str(BASE), "overrides": {"trainer.max_epochs": 1}, "grid": grid}, "a.yaml"))
    # another max_epochs: other trials (the old ids hashed the grid values only)
    b = _ids(write_yaml({"base": str(BASE), "overrides": {"trainer.max_epochs": 2}, "grid": grid}, "b.yaml"))
    assert a.keys() == b.keys() and not set(a.values()) & set(b.values())
    # another base config *content* at the same path: other trials
    base = tmp_path / "base.yaml"
    base.write_text(BASE.read_text())
    body = {"base": str(base), "overrides": {"trainer.max_epochs": 1}, "grid": grid}
    c1 = _ids(write_yaml(body, "c.yaml"))
    assert c1 == _ids(write_yaml(body, "c2.yaml"))  # same content, another sweep file: same trials
    base.write_text(BASE.read_text() + "\n# edited\n")
    c2 = _ids(write_yaml(body, "c.yaml"))
    assert not set(c1.values()) & set(c2.values())
    # a variant's bundle is part of the trial
    v1 = _ids(write_yaml({"base": str(BASE), "grid": grid, "variants": {"loss": {"x": {"model.lr": 0.1}}}}, "v.yaml"))
    v2 = _ids(write_yaml({"base": str(BASE), "grid": grid, "variants": {"loss": {"x": {"model.lr": 0.2}}}}, "v.yaml"))
    assert v1.keys() == v2.keys() and not set(v1.values()) & set(v2.values())


def test_widening_the_grid_keeps_the_ids_of_unchanged_points(tmp_path, write_yaml):
    body = {"base": str(BASE), "overrides": {"trainer.max_epochs": 1},
            "grid": {"model.lam": [0.0, 1.0], "seed_everything": [0]}}
    narrow = _ids(write_yaml(body, "s.yaml"))
    body["grid"]["model.lam"].append(10.0)
    body["grid"]["seed_everything"].append(1)
    wide = _ids(write_yaml(body, "s.yaml"))
    assert len(wide) == 6 and all(wide[k] == v for k, v in narrow.items())
    assert load_sweep(tmp_path / "s.yaml").sweep_id != "" and \
        load_sweep(tmp_path / "s.yaml").label.startswith("s-")


# ------------------------------------------------------------------------------------------------ variants
def test_variants_are_named_bundles_crossed_with_the_grid(write_yaml):
    loss = {"class_path": "torchfair.losses.DELTRLoss"}
    path = write_yaml({"base": str(BASE), "overrides": {"trainer.max_epochs": 1},
                       "grid": {"model.lam": [0.0], "seed_everything": [0, 1]},
                       "variants": {"loss": {"none": {"model.fairness_loss": None},
                                             "deltr": {"model.fairness_loss": loss,
                                                       "grid": {"model.lam": [1.0, 10.0]}}},
                                    "groups": {"pop": {"data.groups": "popularity"},
                                               "drama": {"data.groups": "genre", "data.genre": "Drama",
                                                         "trainer.max_epochs": 2}}}})
    spec = load_sweep(path)
    trials = expand_trials(spec)
    # none: lam 0 only; deltr: its own lams; x 2 groups x 2 seeds
    want = {(lo, g, lam, s) for g in ("pop", "drama") for s in (0, 1)
            for lo, lam in (("none", 0.0), ("deltr", 1.0), ("deltr", 10.0))}
    got = {(t.params["loss"], t.params["groups"], t.params["model.lam"], t.params["seed_everything"]) for t in trials}
    assert got == want and len(trials) == len(want)
    t = next(t for t in trials if t.params["loss"] == "deltr" and t.params["groups"] == "drama")
    cfg = spec.trial_config(t.params)
    assert cfg["model.fairness_loss"] == loss and cfg["data.genre"] == "Drama" and "grid" not in cfg
    assert cfg["trainer.max_epochs"] == 2  # a bundle overrides `overrides`
    assert "loss" not in cfg and "groups" not in cfg  # the labels are columns, not config keys
    t0 = next(t for t in trials if t.params["loss"] == "none" and t.params["groups"] == "pop")
    assert spec.trial_config(t0.params)["model.fairness_loss"] is None
    assert spec.trial_config(t0.params)["trainer.max_epochs"] == 1


def test_variant_errors_name_the_field(tmp_path, write_yaml, synth):
    base = str(BASE)
    cases = [({"variants": [1]}, "`variants`"),
             ({"variants": {"loss": {}}}, "`variants`"),
             ({"variants": {"loss": {"a": 3}}}, "mapping"),
             ({"grid": {"model.lam": [0]}, "variants": {"model.lam": {"a": {}}}}, "also a grid"),
             ({"grid": {"model.lam": [0]}, "variants": {"loss": {"a": {"model.lam": 1}}}}, "varies"),
             ({"grid": {"model.lam": [0]}, "variants": {"loss": {"a": {"grid": {"model.lr": [1]}}}}}, "replace"),
             ({"grid": {"model.lam": [0]}, "variants": {"loss": {"a": {"grid": {"model.lam": []}}}}}, "at least one"),
             ({"variants": {"loss": {"a": {"-x": 1}}}}, "dotted")]
    for body, match in cases:
        with pytest.raises(ValueError, match=match):
            load_sweep(write_yaml({"base": base, **body}))
    # optuna searches one space: a bundle with its own grid values is refused
    cfg = write_yaml({"base": base, "overrides": synth, "grid": {"model.lam": [0.0]},
                      "variants": {"loss": {"a": {"grid": {"model.lam": [1.0]}}}}})
    pytest.importorskip("optuna")
    with pytest.raises(ValueError, match="`search`"):
        run_sweep(cfg, tmp_path / "out", search="optuna", n_trials=2)


# ------------------------------------------------------------------------------------------------ the repo's files
def test_sweep_config_smoke_file_is_valid():
    spec = load_sweep(ROOT / "configs" / "sweep_smoke.yaml")
    assert len(expand_trials(spec)) >= 4


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("sweep_*.yaml")), ids=lambda p: p.name)
def test_every_sweep_file_of_the_repo_is_valid(path):
    # the sweep files of the README and the experiments: valid, every trial its own id
    trials = expand_trials(load_sweep(path))
    assert trials and len({t.trial_id for t in trials}) == len(trials)
