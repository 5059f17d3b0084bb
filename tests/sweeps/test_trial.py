"""torchfair.sweeps.trial: a trial's ``torchfair fit`` arguments (every headline trial trains), the check of every
key before a sweep starts, the trial directory, and the real error line of a failing trial."""
import json
from pathlib import Path

import pytest

from torchfair.cli import main as cli_main
from torchfair.sweeps import expand_trials, load_sweep, run_sweep, run_trial, trial_args
from torchfair.sweeps.trial import _log_error, _prepare, _status

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "ml100k_dips.yaml"


def test_a_misspelt_key_is_refused_before_any_trial_starts(tmp_path, write_yaml, synth):
    cfg = write_yaml({"base": str(BASE), "overrides": synth, "grid": {"model.lamm": [0.0, 1.0]}})
    with pytest.raises(ValueError, match=r"`grid`: 'model.lamm'.*unrecognized"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)
    assert not (tmp_path / "out" / "trials").exists()
    cfg = write_yaml({"base": str(BASE), "overrides": {**synth, "model.fairnes_loss": None},
                      "grid": {"model.lam": [0.0]}})
    with pytest.raises(ValueError, match=r"`overrides`: 'model.fairnes_loss'"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)
    cfg = write_yaml({"base": str(BASE), "overrides": synth, "grid": {"model.lam": [0.0]},
                      "variants": {"loss": {"ok": {}, "bad": {"model.nope": 1}}}})
    with pytest.raises(ValueError, match=r"`variants.loss.bad`: 'model.nope'"):
        run_sweep(cfg, tmp_path / "out", workers=1, threads=1, report=False)


def test_a_failing_trial_records_its_real_error_line(tmp_path, synth):
    tdir = tmp_path / "t"
    tdir.mkdir()
    (tdir / "trial.json").write_text(json.dumps({"trial_id": "x", "params": {}, "base": str(BASE),
                                                 "config": {**synth, "model.lamm": 0.5}}))
    assert run_trial(tdir) == 1
    err = json.loads((tdir / "error.json").read_text())["error"]
    assert "model.lamm" in err and "SystemExit" not in err
    # a trial killed by its parser's exit: the line of its log, not `SystemExit: 2`
    (tdir / "trial.log").write_text("Seed set to 0\nusage: torchfair [-h]\ntorchfair: error: Key 'model.x' is "
                                    "not expected\n")
    assert _log_error(tdir) == "torchfair: error: Key 'model.x' is not expected"


def test_the_trial_directory_is_reset_unless_finished(tmp_path, sweep_file):
    spec = load_sweep(sweep_file({"model.lam": [0.0]}))
    t = expand_trials(spec)[0]
    tdir = _prepare(tmp_path, spec, t, {"torchfair": "x"})
    desc = json.loads((tdir / "trial.json").read_text())
    assert tdir.name == t.trial_id and desc["params"] == t.params and desc["sweep"] == spec.label
    assert desc["config"] == spec.trial_config(t.params) and len(desc["base_sha256"]) == 64
    (tdir / "error.json").write_text("{}")
    (tdir / "logs").mkdir()
    assert _status(tdir) == "failed"
    _prepare(tmp_path, spec, t)  # a failed attempt starts afresh
    assert sorted(p.name for p in tdir.iterdir()) == ["trial.json"] and _status(tdir) == "pending"
    (tdir / "result.json").write_text("{}")
    _prepare(tmp_path, spec, t)  # a finished one is kept
    assert _status(tdir) == "done"


@pytest.mark.parametrize("loss", ["none", "dips_soft", "dips_pl", "misallocation_soft", "misallocation_pl",
                                  "pairgap_soft", "pairgap_pl", "deltr", "fair_pg_rank_soft", "fair_pg_rank_pl",
                                  "beutel"])
def test_every_headline_trial_config_trains_under_fast_dev_run(loss, tmp_path, monkeypatch, synth):
    # the trial arguments the sweep passes to `torchfair fit`, on the synthetic stand-in, without the pretrained start
    spec = load_sweep(ROOT / "configs" / "sweep_headline.yaml")
    trial = next(t for t in expand_trials(spec) if t.params["loss"] == loss and t.params["groups"] == "drama")
    cfg = spec.trial_config(trial.params)
    cfg.pop("model.init_from")
    cfg.update({k: v for k, v in synth.items() if k not in ("trainer.max_epochs",)})
    monkeypatch.chdir(tmp_path)
    assert cli_main(["fit"] + trial_args(spec.base, cfg, tmp_path)[:] + ["--trainer.fast_dev_run", "true"]) == 0


_LOSS_TRADEOFF = load_sweep(ROOT / "configs" / "sweep_loss_tradeoff.yaml")


@pytest.mark.parametrize("dims", [{"loss": name} for name in _LOSS_TRADEOFF.variants["loss"]]
                         + [{"utility": name, "loss": "dips_ramp"} for name in _LOSS_TRADEOFF.variants["utility"]]
                         + [{"protocol": name, "loss": "dips_ramp"} for name in _LOSS_TRADEOFF.variants["protocol"]])
def test_every_loss_tradeoff_variant_trains_under_fast_dev_run(dims, tmp_path, monkeypatch, synth):
    # each loss / utility term / protocol of the headline sweep (configs/sweep_loss_tradeoff.yaml), as the sweep
    # passes it to `torchfair fit`, on the synthetic stand-in without the pretrained start
    spec = _LOSS_TRADEOFF
    want = {"groups": "popularity", "utility": "listnet", "protocol": "finetune", "seed": "0", **dims}
    trial = next(t for t in expand_trials(spec) if all(t.params[k] == v for k, v in want.items()))
    cfg = spec.trial_config(trial.params)
    cfg["model.init_from"] = None
    cfg.update({k: v for k, v in synth.items() if k not in ("trainer.max_epochs",)})
    monkeypatch.chdir(tmp_path)
    assert cli_main(["fit"] + trial_args(spec.base, cfg, tmp_path)[:] + ["--trainer.fast_dev_run", "true"]) == 0
