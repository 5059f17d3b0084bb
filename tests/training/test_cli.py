"""torchfair/training/cli.py: `torchfair fit` through LightningCLI, also when DDP's launcher starts the command again
in one process per device (configs/ml100k_ddp.yaml: 2 CPU processes, gloo)."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5"]


def test_ddp_config_trains_over_two_processes(tmp_path):
    """The DDP launcher re-runs `torchfair fit ...` from sys.argv in a second process: both ranks train, validate
    and agree on one checkpoint."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available")
    cmd = [sys.executable, "-m", "torchfair.cli", "fit", "--config", str(ROOT / "configs" / "ml100k_ddp.yaml"),
           *SYNTH, "--trainer.max_epochs", "2", "--trainer.logger", "false", "--trainer.enable_progress_bar",
           "false", "--trainer.default_root_dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "`Trainer.fit` stopped: `max_epochs=2` reached" in proc.stderr
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in proc.stderr  # the second process was started and joined
    # last.ckpt follows the best checkpoint's saves (ModelCheckpoint monitors val/ndcg@10): epoch 0 or 1
    record = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert record["epoch"] in (0, 1) and record["hyper_parameters"]["lam"] == 0.3


def test_run_lightning_restores_sys_argv():
    from torchfair.training.cli import run_lightning

    saved = list(sys.argv)
    assert run_lightning(["fit", "--config", str(ROOT / "configs" / "ml100k_listnet.yaml"), "--model.lamm", "1"]) == 2
    assert sys.argv == saved
