"""The checkpoint the evaluation tests read: one `torchfair fit` (ListNet config, synthetic MovieLens, 1 epoch) per
test session."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.logger", "false", "--trainer.max_epochs", "1"]


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    pytest.importorskip("pytorch_lightning")
    from torchfair.cli import main as cli_main

    d = tmp_path_factory.mktemp("runs")
    old = os.getcwd()
    os.chdir(d)
    try:
        args = ["fit", "--config", str(ROOT / "configs" / "ml100k_listnet.yaml"), "--trainer.default_root_dir", str(d),
                "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.dirpath", str(d / "ck")] + SYNTH
        assert cli_main(args) == 0
        return str(sorted((d / "ck").glob("*.ckpt"))[-1])
    finally:
        os.chdir(old)
