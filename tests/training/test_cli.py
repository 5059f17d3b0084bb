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
    # checked when the loss is built: the error names the option of the loss's argument
    with pytest.raises(ValueError, match=r"--model\.fairness_loss\.init_args\.terms\[0\].*utility measure"):
        FairLightningCLI(["--config", str(cfg), *SYNTH, "--trainer.logger", "false"], run=False)


# ------------------------------------------------------------------------------------------------ bad inputs
LISTNET = str(ROOT / "configs" / "ml100k_listnet.yaml")
DIPS = str(ROOT / "configs" / "ml100k_dips.yaml")

#: (config, bad arguments, the option the one-line error names, what it says): out-of-range values are refused while
#: parsing (the ranges declared in the signatures), checks across arguments while the classes are built
BAD_INPUTS = [
    (LISTNET, ["--model.lam", "-1"], "--model.lam", "must be a number >= 0 (NonNegativeFloat); got -1"),
    (LISTNET, ["--model.fairness_every", "0"], "--model.fairness_every", "must be an int > 0 (PositiveInt); got 0"),
    (LISTNET, ["--data.n_test", "0"], "--data.n_test", "must be an int > 0 (PositiveInt); got 0"),
    (LISTNET, ["--model.lr", "0"], "--model.lr", "must be a number > 0"),
    (LISTNET, ["--model.weight_decay", "-0.5"], "--model.weight_decay",
     "must be a number >= 0 (NonNegativeFloat); got -0.5"),
    (LISTNET, ["--model.warmup_steps", "-3"], "--model.warmup_steps", "must be an int >= 0"),
    (LISTNET, ["--model.log_fairness_every", "-1"], "--model.log_fairness_every", "must be an int >= 0"),
    (LISTNET, ["--data.n_val", "-1"], "--data.n_val", "must be an int >= 0"),
    (LISTNET, ["--data.test_fraction", "1"], "--data.test_fraction", "must be a number > 0 and < 1"),
    (LISTNET, ["--data.val_fraction", "1"], "--data.val_fraction", "must be a number >= 0 and < 1"),
    (LISTNET, ["--data.head_share", "0"], "--data.head_share", "must be a number > 0 and < 1"),
    (LISTNET, ["--data.num_negatives", "-1"], "--data.num_negatives", "must be an int >= 0"),
    (LISTNET, ["--data.batch_size", "0"], "--data.batch_size", "must be an int > 0"),
    (LISTNET, ["--data.eval_batch_size", "0"], "--data.eval_batch_size", "must be an int > 0"),
    (LISTNET, ["--data.num_workers", "-2"], "--data.num_workers", "must be an int >= 0"),
    (LISTNET, ["--data.seed", "-1"], "--data.seed", "must be an int >= 0"),
    (LISTNET, ["--data.eval_users", "0"], "--data.eval_users", "must be an int > 0 (PositiveInt); got 0"),
    (LISTNET, ["--data.eval_users_seed", "-1"], "--data.eval_users_seed", "must be an int >= 0"),
    (LISTNET, ["--data.n_test", "x"], "--data.n_test", "must be an int > 0"),
    (LISTNET, ["--model.schedule", "cosine"], "--model.schedule", "must be one of 'constant', 'linear'; got cosine"),
    # checks across arguments, or of values no type declares: raised by a constructor, still one line
    (LISTNET, ["--data.split", "random", "--data.test_fraction", "0.6", "--data.val_fraction", "0.5"],
     "--data.test_fraction + --data.val_fraction", "must be < 1 with split='random'; got 0.6 + 0.5"),
    (LISTNET, ["--data.groups", "genre"], "--data.genre", "must name a genre when groups='genre'"),
    (LISTNET, ["--model.measures", "[ndcg@10, nope]"], "--model.measures", "unknown measure 'nope'"),
    (LISTNET, ["--model.ranker", "nope"], "--model.ranker", "must be one of ['mf', 'two_tower']"),
    (LISTNET, ["--model.ranker_args", "{dim: 0}"], "--model.ranker_args.dim",
     "must be an int > 0 (MatrixFactorization); got 0"),
    (LISTNET, ["--model.ranker_args", "{dim: 4, init_std: -1}"], "--model.ranker_args.init_std",
     "must be a number >= 0 (MatrixFactorization); got -1"),
    (LISTNET, ["--model.ranker", "two_tower", "--model.ranker_args", "{hidden: 0}"], "--model.ranker_args.hidden",
     "must be an int > 0 (TwoTower)"),
    (DIPS, ["--model.warmup_steps", "0"], "--model.warmup_steps", "must be >= 1 for the linear schedule"),
    (LISTNET, ["--trainer.max_epochs", "-5"], "--trainer.max_epochs", "must be a non-negative integer or -1"),
    (LISTNET, ["--trainer.devices", "0"], "--trainer.devices", "not a valid input"),
    (LISTNET, ["--model.fairness_loss", "torchfair.losses.MultiMeasureLoss", "--model.fairness_loss.init_args.terms",
               "[ndcg]"], "--model.fairness_loss.init_args.terms", "'ndcg' is a utility measure"),
]


@pytest.mark.parametrize("config,bad,option,says", BAD_INPUTS, ids=[" ".join(b[1]) for b in BAD_INPUTS])
def test_a_bad_input_is_one_line_naming_the_option_before_anything_trains(config, bad, option, says, tmp_path,
                                                                         monkeypatch, capsys):
    from torchfair.training.cli import run_lightning

    monkeypatch.chdir(tmp_path)
    rc = run_lightning(["fit", "--config", config, *SYNTH, "--trainer.default_root_dir", str(tmp_path), *bad])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith("torchfair fit: error: ") and option in lines[0] and says in lines[0], lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert list(tmp_path.iterdir()) == []  # no log folder, no config.yaml, no checkpoint: nothing started


def test_a_good_value_at_the_edge_of_its_range_is_accepted(tmp_path, monkeypatch):
    """The bounds are the documented ones: lam = 0, val_fraction = 0, n_val = 0, eval_users_seed = 0 parse and build
    (run=False: nothing trains)."""
    from torchfair.training.cli import FairLightningCLI

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["torchfair"])
    cli = FairLightningCLI([*SYNTH[:4], "--data.n_val", "0", "--data.split", "random", "--data.val_fraction", "0",
                            "--data.test_fraction", "0.999", "--data.eval_users", "1", "--data.eval_users_seed", "0",
                            "--model.lam", "0", "--model.lr", "1e-9", "--trainer.logger", "false"], run=False)
    assert (cli.model.hparams.lam, cli.model.hparams.lr) == (0.0, 1e-9)
    assert (cli.datamodule.val_fraction, cli.datamodule.n_val, cli.datamodule.eval_users) == (0.0, 0, 1)
    # the values reach the classes as plain numbers, not jsonargparse's types (which a checkpoint could not load)
    assert type(cli.datamodule.val_fraction) is float and type(cli.datamodule.eval_users) is int
    assert type(cli.model.hparams.lam) is float and type(cli.model.hparams.lr) is float


def test_the_seed_line_waits_for_the_classes_to_be_built(tmp_path, monkeypatch, request):
    """LightningCLI logs "Seed set to 0" before it builds the classes; it is held back until they are built, so
    that a config error is the only line printed, and then logged once."""
    import logging

    import pytorch_lightning as pl_

    from torchfair.training.cli import FairLightningCLI, run_lightning

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger(pl_.seed_everything.__module__)
    monkeypatch.setattr(logger, "disabled", False)  # earlier tests (the demo's quiet mode) may have muted it
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: it clears logging's cached effective levels
    request.addfinalizer(lambda: logger.setLevel(level))
    handler = Keep()
    logger.addHandler(handler)
    try:
        monkeypatch.chdir(tmp_path)
        assert run_lightning(["fit", "--config", LISTNET, *SYNTH, "--data.groups", "genre"]) == 2
        assert not [r for r in records if "Seed set" in r]
        monkeypatch.setattr(sys, "argv", ["torchfair"])
        FairLightningCLI(["--config", LISTNET, *SYNTH, "--trainer.logger", "false"], run=False)
        assert [r for r in records if "Seed set" in r] == ["Seed set to 0"]
    finally:
        logger.removeHandler(handler)


# ------------------------------------------------------------------------------------------------ end of fit
def test_fit_prints_its_checkpoints_and_the_last_validation_metrics(tmp_path, monkeypatch, capsys):
    """At the end of `fit`: the best and the last checkpoint (files that exist) and the metrics of the last
    epoch's validation, checked against the CSV logger's rows of each epoch."""
    import csv
    import math
    import re

    from torchfair.training.cli import run_lightning

    monkeypatch.chdir(tmp_path)
    rc = run_lightning(["fit", "--config", LISTNET, *SYNTH, "--data.batch_size", "16", "--model.lr", "0.2",
                        "--model.measures", "[ndcg@10, dips]", "--trainer.max_epochs", "2",
                        "--trainer.limit_train_batches", "2", "--trainer.enable_progress_bar", "false",
                        "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    ckpts = dict((kind, (path, score)) for kind, path, score in
                 re.findall(r"^checkpoint (best|last): (\S+?)(?:  \(val/ndcg@10 = ([-\d.]+)\))?$", out, re.M))
    assert set(ckpts) == {"best", "last"}, out
    for path, _ in ckpts.values():
        assert Path(path).is_file() and Path(path).is_absolute() and tmp_path in Path(path).parents
    assert Path(ckpts["last"][0]).name == "last.ckpt"
    printed = {k: float(v) for k, v in re.findall(r"^  (val/\S+)\s+(-?\d+\.\d+|nan)$", out, re.M)}
    assert "validation metrics after 2 epoch(s)" in out
    # the CSV logger's rows (runs/ml100k_listnet/version_0/metrics.csv): one validation row per epoch
    rows = list(csv.DictReader(open(next(tmp_path.glob("runs/*/version_0/metrics.csv")))))
    val = {int(r["epoch"]): {k: float(v) for k, v in r.items() if k.startswith("val/") and v != ""}
           for r in rows if r.get("val/ndcg@10")}
    assert sorted(val) == [0, 1] and set(printed) == set(val[1]) >= {"val/ndcg@10", "val/dips_gap",
                                                                     "val/utility_loss"}
    for k, v in printed.items():
        assert math.isclose(v, val[1][k], abs_tol=5.1e-5), k  # printed to 4 decimals
    assert any(abs(val[0][k] - val[1][k]) > 1e-3 for k in val[1])  # epoch 0's values would be told apart
    best_epoch = max(val, key=lambda e: val[e]["val/ndcg@10"])
    assert Path(ckpts["best"][0]).name == f"best-epoch={best_epoch}.ckpt"
    assert math.isclose(float(ckpts["best"][1]), val[best_epoch]["val/ndcg@10"], abs_tol=5.1e-5)


def test_fit_summary_without_checkpoint_or_validation():
    """fast_dev_run saves no checkpoint and a fit without validation logs no metric: both are said."""
    from types import SimpleNamespace

    from torchfair.training.cli import _fit_summary

    trainer = SimpleNamespace(checkpoint_callbacks=[SimpleNamespace(best_model_path="", last_model_path="")],
                              callback_metrics={"train/loss": torch.tensor(1.0)}, current_epoch=1, global_step=1)
    assert _fit_summary(trainer) == ["no checkpoint saved (checkpointing disabled, fast_dev_run, or no epoch "
                                     "completed)", "no validation metrics logged"]


# ------------------------------------------------------------------------------------- the last epoch validated
def test_a_fit_shorter_than_its_validation_cadence_validates_its_last_epoch(tmp_path, monkeypatch, capsys):
    """`--trainer.max_epochs 2` on a config validating every 10 epochs: the last epoch (only) is validated, so the
    fit ends with validation metrics and a best checkpoint monitored on val/ndcg@10; the cadence is put back."""
    import csv
    import re

    from torchfair.training.cli import FairLightningCLI, ValidateLastEpoch, run_lightning

    monkeypatch.chdir(tmp_path)
    rc = run_lightning(["fit", "--config", LISTNET, *SYNTH, "--trainer.max_epochs", "2",
                        "--trainer.check_val_every_n_epoch", "10", "--trainer.limit_train_batches", "1",
                        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "validation metrics after 2 epoch(s)" in out and re.search(r"^  val/ndcg@10\s+\d", out, re.M), out
    best = re.search(r"^checkpoint best: (\S+)  \(val/ndcg@10 = [-\d.]+\)$", out, re.M)
    assert best and Path(best.group(1)).name == "best-epoch=1.ckpt" and Path(best.group(1)).is_file(), out
    rows = list(csv.DictReader(open(next(tmp_path.glob("runs/*/version_0/metrics.csv")))))
    assert sorted({int(r["epoch"]) for r in rows if r.get("val/ndcg@10")}) == [1]  # epoch 0 was not validated
    # the callback on its own: the cadence replaced for the last epoch only, and put back after the fit
    monkeypatch.setattr(sys, "argv", ["torchfair"])
    cli = FairLightningCLI(["--config", LISTNET, *SYNTH, "--trainer.max_epochs", "1", "--trainer.logger", "false",
                            "--trainer.check_val_every_n_epoch", "4", "--trainer.enable_checkpointing", "false",
                            "--trainer.callbacks", "[]", "--trainer.limit_train_batches", "1",
                            "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0"], run=False)
    assert sum(isinstance(c, ValidateLastEpoch) for c in cli.trainer.callbacks) == 1
    cli.trainer.fit(cli.model, cli.datamodule)
    assert "val/ndcg@10" in cli.trainer.callback_metrics and cli.trainer.check_val_every_n_epoch == 4


def test_a_sweep_trial_validates_after_its_fit_not_at_its_last_epoch(tmp_path, monkeypatch):
    """A sweep's trial leaves ValidateLastEpoch out: its config may turn validation off while training
    (check_val_every_n_epoch: 1000) and run_trial validates after the fit."""
    from torchfair.sweeps.trial import _trial_cli
    from torchfair.training.cli import ValidateLastEpoch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["torchfair"])
    cli = _trial_cli()(["--config", LISTNET, *SYNTH, "--trainer.logger", "false"], run=False,
                       parser_kwargs={"prog": "torchfair", "exit_on_error": False})
    assert not [c for c in cli.trainer.callbacks if isinstance(c, ValidateLastEpoch)]


# ------------------------------------------------------------------------------------------ Lightning's output
def test_fit_is_quiet_by_default(tmp_path):
    """`torchfair fit` prints no accelerator banner, no tip, no model summary and no deprecation warning of
    Lightning's own calls (warnings shown as Python shows them with -W default), and still its own summary."""
    cmd = [sys.executable, "-W", "default", "-m", "torchfair.cli", "fit", "--config",
           str(ROOT / "configs" / "ml100k_ials.yaml"), *SYNTH, "--trainer.fast_dev_run", "true",
           "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    both = proc.stdout + proc.stderr
    assert proc.returncode == 0, both[-3000:]
    for noise in ("GPU available", "TPU available", "Tip:", "| Name", "Trainable params", "DeprecationWarning",
                  "is deprecated", "was deprecated", "LeafSpec"):
        assert noise not in both, (noise, both[-3000:])
    assert "validation metrics after" in proc.stdout


def test_verbose_brings_lightnings_banner_and_model_summary_back(tmp_path, monkeypatch, request):
    import logging

    from torchfair.training.cli import run_lightning

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    loggers = [logging.getLogger(n) for n in ("pytorch_lightning.utilities.rank_zero",
                                              "pytorch_lightning.callbacks.model_summary")]
    for logger in loggers:
        monkeypatch.setattr(logger, "disabled", False)  # earlier tests (the demo's quiet mode) may have muted it
        level = logger.level
        logger.setLevel(logging.INFO)
        request.addfinalizer(lambda logger=logger, level=level: logger.setLevel(level))
        logger.addHandler(handler := Keep())
        request.addfinalizer(lambda logger=logger, handler=handler: logger.removeHandler(handler))
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", LISTNET, *SYNTH, "--trainer.fast_dev_run", "true", "--trainer.enable_progress_bar",
            "false", "--trainer.default_root_dir"]
    assert run_lightning(args + [str(tmp_path / "quiet")]) == 0
    assert not [r for r in records if "GPU available" in r or "Tip:" in r or "Trainable params" in r], records
    assert run_lightning(args + [str(tmp_path / "verbose"), "--verbose"]) == 0
    assert [r for r in records if r.startswith("GPU available")], records
    assert [r for r in records if "Trainable params" in r], records
