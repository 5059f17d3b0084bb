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


def test_multi_measure_fairness_loss_is_built_from_the_yaml_config(tmp_path, monkeypatch):
    """``model.fairness_loss: {class_path: torchfair.losses.MultiMeasureLoss, init_args: {terms: [...], ordering:
    {class_path: ...}}}``: LightningCLI builds the loss with its terms and its one ordering, and a short fit logs
    each term as ``train/fairness/<name>``."""
    from torchfair.losses import MultiMeasureLoss
    from torchfair.orderings import RampRank
    from torchfair.training.cli import FairLightningCLI

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["torchfair"])  # the arguments are given to LightningCLI, not read from here
    cfg = tmp_path / "multi.yaml"
    cfg.write_text(
        "model:\n"
        "  ranker_args: {dim: 4}\n"
        "  lam: 0.5\n"
        "  measures: [ndcg@10]\n"
        "  fairness_loss:\n"
        "    class_path: torchfair.losses.MultiMeasureLoss\n"
        "    init_args:\n"
        "      terms: [{measure: dips, weight: 1.0}, {measure: pairwise_accuracy, weight: 0.5, reducer: both}]\n"
        "      num_groups: 2\n"
        "      ordering: {class_path: torchfair.orderings.RampRank, init_args: {temperature: 0.2}}\n")
    cli = FairLightningCLI(["--config", str(cfg), *SYNTH, "--trainer.max_steps", "2", "--trainer.limit_val_batches",
                            "0", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"],
                           run=False)
    loss = cli.model.fairness_loss
    assert isinstance(loss, MultiMeasureLoss) and isinstance(loss.ordering, RampRank)
    assert loss.ordering.temperature == 0.2 and loss.num_groups == 2
    assert [(t.name, t.weight, t.reducer) for t in loss.terms] == [("dips", 1.0, "gap_abs"),
                                                                  ("pairwise_accuracy", 0.5, "both")]
    assert cli.model.hparams["fairness_loss"]["class_path"] == "torchfair.losses.MultiMeasureLoss"
    cli.trainer.fit(cli.model, cli.datamodule)
    logged = cli.trainer.callback_metrics
    for key in ("train/fairness", "train/fairness/dips", "train/fairness/pairwise_accuracy"):
        assert key in logged and torch.isfinite(logged[key]), key
    bad = cfg.read_text().replace("measure: dips,", "measure: ndcg,")
    cfg.write_text(bad)
    with pytest.raises(ValueError, match=r"`terms`\[0\].*utility measure"):  # checked when the loss is built
        FairLightningCLI(["--config", str(cfg), *SYNTH, "--trainer.logger", "false"], run=False)
