"""The experiments' sweep files (configs/sweep_*.yaml): every variant bundle of each, as the sweep passes it to
``torchfair fit``, trains under ``fast_dev_run`` on the synthetic stand-in (without the starts its fine-tunes
name); each experiment that trains is a sweep file and its analysis (experiments/README.md).  The bundles of
configs/sweep_loss_tradeoff.yaml are tested in tests/sweeps/test_trial.py."""
from pathlib import Path

import pytest

from torchfair.cli import main as cli_main
from torchfair.sweeps import expand_trials, load_sweep
from torchfair.sweeps.trial import trial_args

ROOT = Path(__file__).resolve().parents[2]
FILES = [p for p in sorted((ROOT / "configs").glob("sweep_*.yaml")) if p.name != "sweep_loss_tradeoff.yaml"]
SYNTH = {"data.variant": "synthetic", "data.n_test": 3, "data.n_val": 2, "data.batch_size": 16,
         "data.eval_batch_size": 32, "trainer.enable_progress_bar": False, "trainer.enable_model_summary": False}


def _cases():
    """(file, dimension, bundle) for every bundle of every variant dimension (the other dimensions at their first
    bundle; of a ``seed`` dimension only the first: seeds differ in their seed keys alone), one per distinct trial."""
    out, seen = [], set()
    for path in FILES:
        spec = load_sweep(path)
        trials = expand_trials(spec)
        picks = [("-", "-", trials[0])]
        for dim, bundles in spec.variants.items():
            for name in list(bundles)[:1] if dim == "seed" else bundles:
                picks.append((dim, name, next(t for t in trials if t.params[dim] == name)))
        for dim, name, t in picks:
            if (path.name, t.trial_id) not in seen:
                seen.add((path.name, t.trial_id))
                out.append(pytest.param(path, t.params, id=f"{path.stem}:{dim}={name}"))
    return out


@pytest.mark.parametrize("path, params", _cases())
def test_every_bundle_trains_under_fast_dev_run(path, params, tmp_path, monkeypatch):
    spec = load_sweep(path)
    cfg = spec.trial_config(params)
    if "model.init_from" in cfg:
        cfg["model.init_from"] = None
    cfg.update(SYNTH)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["fit"] + trial_args(spec.base, cfg, tmp_path) + ["--trainer.fast_dev_run", "true"]) == 0
