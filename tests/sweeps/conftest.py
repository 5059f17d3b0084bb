"""Shared by the sweep tests: overrides that train a trial in seconds on the synthetic stand-in, and sweep files
written under ``tmp_path``."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "ml100k_dips.yaml"
_SYNTH = {"data.variant": "synthetic", "data.n_test": 3, "data.n_val": 2, "data.num_negatives": 5,
          "data.batch_size": 16, "data.eval_batch_size": 32, "trainer.max_epochs": 1,
          "trainer.enable_progress_bar": False, "trainer.enable_model_summary": False, "model.schedule": "constant"}


@pytest.fixture
def synth() -> dict:
    """``torchfair fit`` overrides for a trial of a few seconds on the synthetic stand-in."""
    return dict(_SYNTH)


@pytest.fixture
def write_yaml(tmp_path):
    """``write_yaml(body, name="sweep.yaml")``: ``body`` as YAML at ``tmp_path / name``."""
    import yaml

    def write(body: dict, name: str = "sweep.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(body))
        return path
    return write


@pytest.fixture
def sweep_file(write_yaml, synth):
    """``sweep_file(grid, name="sweep.yaml", **fields)``: a sweep of ``configs/ml100k_dips.yaml`` on the synthetic
    stand-in."""
    def make(grid: dict, name: str = "sweep.yaml", **fields) -> Path:
        return write_yaml({"base": str(BASE), "overrides": synth, "grid": grid, **fields}, name)
    return make
