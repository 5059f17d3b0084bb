"""Training end to end: every config under fast_dev_run, config errors, loggers, init_from, checkpoint evaluation
(``torchfair evaluate``), re-rankers in evaluate, popularity; the rankers and the module are in test_rankers.py and
test_module.py."""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from torchfair.cli import main as cli_main  # noqa: E402
from torchfair.training import FairRankingModule, MovieLensDataModule  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("ml100k_*.yaml"))
#: the synthetic stand-in (60 users, 80 items, no network) for every config
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
         "--data.batch_size", "16", "--data.eval_batch_size", "32", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false"]


# ------------------------------------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_config_runs_under_fast_dev_run(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # a multi-process config runs here in one process (DDP's launcher would start this test process again);
    # tests/training/test_cli.py runs it over two processes from the command line
    one = ["--trainer.devices", "1", "--trainer.strategy", "auto"] if config.stem == "ml100k_ddp" else []
    assert cli_main(["fit", "--config", str(config), "--trainer.fast_dev_run", "true"] + SYNTH + one) == 0


def test_fairness_every_from_the_command_line_trains_the_fairness_term_every_kth_step(tmp_path, monkeypatch):
    """``--model.fairness_every 2``: over 4 optimiser steps the DIPS term enters the loss on steps 0 and 2, with
    weight 2 lam (the logged ``train/lambda``), and the regulariser's step count resumes the phase."""
    from pytorch_lightning.callbacks import Callback

    monkeypatch.chdir(tmp_path)
    seen = []

    class Watch(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            last = pl_module.objective.last
            seen.append(("fairness" in last, float(last["lambda"])))

    from torchfair.losses import DIPSLoss

    model = FairRankingModule("mf", {"dim": 4}, fairness_loss=DIPSLoss(num_groups=2), lam=0.5, fairness_every=2,
                              measures=["ndcg@10"])
    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=16)
    trainer = pl.Trainer(max_steps=4, limit_val_batches=0, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Watch()])
    trainer.fit(model, dm)
    assert seen == [(True, 1.0), (False, 0.0), (True, 1.0), (False, 0.0)]
    assert model.objective.current_step == 4
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="`fairness_every`"):
            FairRankingModule("mf", fairness_every=bad)
    # from a config on the command line
    dips = ROOT / "configs" / "ml100k_dips.yaml"
    assert cli_main(["fit", "--config", str(dips), "--trainer.fast_dev_run", "true", "--model.fairness_every", "3"]
                    + SYNTH) == 0


def test_there_are_the_five_shipped_training_configs():
    assert {c.stem for c in CONFIGS} >= {"ml100k_listnet", "ml100k_dips", "ml100k_misallocation",
                                         "ml100k_pairwise_gap", "ml100k_pl_dips"}


def test_a_config_typo_is_a_clear_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "configs" / "ml100k_dips.yaml").read_text().replace("  lam: 0.3", "  lamda: 0.3"))
    assert cli_main(["fit", "--config", str(bad)] + SYNTH) == 2
    err = capsys.readouterr().err
    assert "lamda" in err and "Traceback" not in err
    assert cli_main(["fit", "--config", str(ROOT / "configs" / "ml100k_listnet.yaml"), "--model.lamda", "3"]) == 2


# ------------------------------------------------------------------------------------------------ evaluate
@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    old = os.getcwd()
    os.chdir(d)
    try:
        paths = []
        for cfg, lam in (("ml100k_listnet", None), ("ml100k_dips", "0.5")):
            args = ["fit", "--config", str(ROOT / "configs" / f"{cfg}.yaml"), "--trainer.max_epochs", "2",
                    "--trainer.default_root_dir", str(d), "--trainer.logger", "false",
                    "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.dirpath", str(d / cfg)] + SYNTH
            if lam:
                args += ["--model.lam", lam]
            assert cli_main(args) == 0
            found = sorted((d / cfg).glob("*.ckpt"))
            assert found, list(d.rglob("*"))
            paths.append(found[-1])
        return paths
    finally:
        os.chdir(old)


def test_evaluate_writes_the_three_files(tiny_checkpoints, tmp_path, capsys):
    out = tmp_path / "rep"
    rc = cli_main(["evaluate", "--ckpts", str(tiny_checkpoints[0]), "--ckpts", str(tiny_checkpoints[1]),
                   "--out", str(out), "--names", "plain", "--names", "fair", "--bootstrap", "50"])
    assert rc == 0, capsys.readouterr().err
    for f in ("report.json", "report.md", "exposure_by_position.png"):
        assert (out / f).stat().st_size > 0, f
    rep = json.loads((out / "report.json").read_text())
    assert rep["order"] == ["plain", "fair"]
    meas = rep["models"]["fair"]["measures"]
    for col in ("ndcg@10", "dips_gap", "dips_t0_gap", "exposure_misallocation_l1", "pairwise_accuracy_inter",
                "exposure_share_A", "exposure_share_B"):
        assert col in meas and {"mean", "ci_low", "ci_high", "n_valid"} <= set(meas[col]), col
        if meas[col]["n_valid"]:
            assert meas[col]["ci_low"] <= meas[col]["mean"] + 1e-9 <= meas[col]["ci_high"] + 2e-9
    assert "fairness_loss" in rep["models"]["fair"]["meta"] and rep["models"]["plain"]["meta"]["fairness_loss"] is None
    diff = rep["differences"]["fair"]
    assert diff["paired"]
    d = diff["columns"]["ndcg@10"]["mean"]
    assert math.isclose(d, meas["ndcg@10"]["mean"] - rep["models"]["plain"]["measures"]["ndcg@10"]["mean"],
                        abs_tol=1e-9)
    share = rep["models"]["plain"]["position_share"]
    assert all(abs(sum(row) - 1) < 1e-9 for row in share)
    assert "| ndcg@10 |" in (out / "report.md").read_text()
    # a second run into the same directory: refused before any work unless --overwrite
    again = ["evaluate", "--ckpts", str(tiny_checkpoints[0]), "--out", str(out), "--bootstrap", "0"]
    assert cli_main(again) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli_main(again + ["--overwrite"]) == 0
    assert json.loads((out / "report.json").read_text())["order"] != ["plain", "fair"]


def test_evaluate_rejects_files_that_are_not_its_checkpoints(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"layer.weight": torch.zeros(2)}, "epoch": 0}, other)
    for path, msg in ((text, "not a PyTorch checkpoint"), (other, "another model"),
                      (tmp_path / "missing.ckpt", "no such file")):
        assert cli_main(["evaluate", "--ckpts", str(path), "--out", str(tmp_path / "o")]) == 2
        assert msg in capsys.readouterr().err


@pytest.mark.parametrize("logger", ["CSVLogger", "TensorBoardLogger"])
def test_loggers_checkpoints_and_early_stopping_work_from_the_config(logger, tmp_path, monkeypatch):
    if logger == "TensorBoardLogger":
        pytest.importorskip("tensorboard")
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(ROOT / "configs" / "ml100k_dips.yaml"), "--trainer.max_epochs", "3",
            "--trainer.limit_train_batches", "2", "--trainer.logger", logger,
            "--trainer.logger.save_dir", str(tmp_path / "logs")] + SYNTH
    assert cli_main(args) == 0
    files = [p.name for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    if logger == "CSVLogger":
        assert "metrics.csv" in files
        header = next((tmp_path / "logs").rglob("metrics.csv")).read_text().splitlines()[0]
        for col in ("train/utility_epoch", "train/fairness_epoch", "val/ndcg@10", "val/dips_gap",
                    "val/exposure_misallocation_l1", "val/pairwise_accuracy_inter"):
            assert col in header, col
    else:
        assert any(f.startswith("events.out.tfevents") for f in files), files
    assert "config.yaml" in files  # LightningCLI saved the run's config next to its logs
    ckpts = [p for p in (tmp_path / "logs").rglob("*.ckpt")]
    assert any(p.name == "last.ckpt" for p in ckpts) and any(p.name.startswith("best") for p in ckpts), ckpts
    ck = torch.load(next(p for p in ckpts if p.name == "last.ckpt"), weights_only=False)
    assert ck["hyper_parameters"]["lam"] == 0.3 and ck["hyper_parameters"]["fairness_loss"]["class_path"] \
        .endswith("DIPSLoss")  # the CLI stores the losses' configs
    assert any("EarlyStopping" in k for k in ck["callbacks"])


def test_evaluate_config_overrides_the_data_settings(tiny_checkpoints, tmp_path):
    """--config's data: section replaces the checkpoint's settings: another batching gives the same exact measures,
    fewer test ratings per user (n_test) gives other test lists."""
    from torchfair.training.evaluate import evaluate_checkpoints
    base = evaluate_checkpoints([str(tiny_checkpoints[0])], None, bootstrap=0)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  eval_batch_size: 7\n")
    same = evaluate_checkpoints([str(tiny_checkpoints[0])], None, bootstrap=0, fit_config=str(cfg))
    name = base["order"][0]
    for col, agg in base["models"][name]["measures"].items():
        assert math.isclose(agg["mean"], same["models"][name]["measures"][col]["mean"], rel_tol=1e-6,
                            abs_tol=1e-9) or (math.isnan(agg["mean"]) and math.isnan(
                                same["models"][name]["measures"][col]["mean"])), col
    assert same["models"][name]["meta"]["data"]["eval_batch_size"] == 7
    cfg.write_text("data:\n  n_test: 2\n")
    other = evaluate_checkpoints([str(tiny_checkpoints[0])], None, bootstrap=0, fit_config=str(cfg))
    assert other["models"][name]["meta"]["data"]["n_test"] == 2
    assert other["models"][name]["measures"]["ndcg@10"]["mean"] != base["models"][name]["measures"]["ndcg@10"]["mean"]


def test_init_from_starts_the_fit_from_another_checkpoints_ranker(tmp_path):
    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=16)
    kw = dict(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, default_root_dir=tmp_path, limit_val_batches=0)
    pl.seed_everything(0)
    first = FairRankingModule("mf", {"dim": 8})
    pl.Trainer(**kw).fit(first, dm)
    path = tmp_path / "first.ckpt"
    torch.save({"state_dict": first.state_dict()}, path)
    pl.seed_everything(1)
    second = FairRankingModule("mf", {"dim": 8}, init_from=str(path), lr=1e-12)
    pl.Trainer(**kw).fit(second, dm)  # a vanishing learning rate: the weights stay those of `first`
    for (k, a), b in zip(first.ranker.state_dict().items(), second.ranker.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), k
    fresh = FairRankingModule("mf", {"dim": 8}, lr=1e-12)
    pl.seed_everything(1)
    pl.Trainer(**kw).fit(fresh, dm)
    assert not torch.allclose(fresh.ranker.state_dict()["user_factors.weight"], first.ranker.state_dict()["user_factors.weight"])
    # a missing file, another shape: clear errors naming init_from
    for bad, match in ((str(tmp_path / "nope.ckpt"), "no checkpoint"), (str(path), "does not match")):
        m = FairRankingModule("mf", {"dim": 4}, init_from=bad)
        with pytest.raises(ValueError, match="`init_from`.*" + match):
            pl.Trainer(**kw).fit(m, dm)
    with pytest.raises(ValueError, match="`init_from`"):
        FairRankingModule(init_from=3)


# ------------------------------------------------------------------------------- re-rankers in evaluate / the loop
def test_evaluate_rerank_columns_are_the_measures_of_the_reranked_lists(tiny_checkpoints):
    """Each --rerank spec is a run of its own, paired with the same checkpoint: its NDCG@10 equals NDCG@10
    computed directly (metrics.ndcg) on the re-ranker's output, and its paired difference is the per-list
    difference of the two."""
    from torchfair.metrics import ndcg
    from torchfair.rerank import get_reranker
    from torchfair.training.checkpoint import load_checkpoint, score_lists
    from torchfair.training.evaluate import evaluate_checkpoints

    specs = ["fa_ir:p=0.5,alpha=0.1", "targeted:measure=dips,keep=1"]
    rep = evaluate_checkpoints([str(tiny_checkpoints[0])], None, names=["m"], bootstrap=20, rerank=specs)
    assert rep["order"] == ["m"] + [f"m + {s}" for s in specs]
    run = load_checkpoint(str(tiny_checkpoints[0]))
    lists = score_lists(run.model, run.datamodule, "test")
    G = int(run.meta["data_info"]["num_groups"])
    for spec in specs:
        r = get_reranker(spec)
        mine, base = [], []
        for x in lists:  # one list at a time: independent of the report's batching
            out = r(x["scores"], None, x["groups"], num_groups=G)
            if x["relevance"].max() > 0:
                mine.append(float(ndcg(out.scores, x["relevance"], k=10)))
                base.append(float(ndcg(x["scores"], x["relevance"], k=10)))
        got = rep["models"][f"m + {spec}"]["measures"]["ndcg@10"]["mean"]
        assert math.isclose(got, float(np.mean(mine)), rel_tol=1e-6), spec
        d = rep["differences"][f"m + {spec}"]
        assert d["reference"] == "m" and d["paired"]
        assert math.isclose(d["columns"]["ndcg@10"]["mean"], float(np.mean(mine) - np.mean(base)), abs_tol=1e-9)
        assert rep["models"][f"m + {spec}"]["meta"]["rerank"] == r.spec


def test_evaluate_popularity_run_ranks_by_training_counts(tiny_checkpoints, tmp_path):
    """--popularity: a run on the first checkpoint's lists ordered by training rating counts, paired with it; its
    NDCG@10 equals ndcg of the counts computed by hand from the training split."""
    from torchfair.metrics import ndcg
    from torchfair.training.checkpoint import load_checkpoint, score_lists
    from torchfair.training.evaluate import evaluate_checkpoints

    run = load_checkpoint(str(tiny_checkpoints[0]))
    dm = run.datamodule
    dm.setup("fit")
    counts = np.bincount(dm.splits.train["item"].to_numpy(), minlength=dm.num_items)
    vals = [float(ndcg(torch.as_tensor(counts[x["items"].numpy()], dtype=torch.float32), x["relevance"], k=10))
            for x in score_lists(run.model, dm, "test") if x["relevance"].max() > 0]
    rep = evaluate_checkpoints([str(tiny_checkpoints[0])], str(tmp_path / "rep"), names=["m"], bootstrap=10,
                               popularity=True)
    assert rep["order"] == ["m", "popularity"]
    assert math.isclose(rep["models"]["popularity"]["measures"]["ndcg@10"]["mean"], float(np.mean(vals)),
                        rel_tol=1e-6)
    assert rep["differences"]["popularity"]["reference"] == "m" and rep["differences"]["popularity"]["paired"]
    assert "popularity (training rating counts)" in (tmp_path / "rep" / "report.md").read_text()
    assert cli_main(["evaluate", "--ckpts", str(tiny_checkpoints[0]), "--out", str(tmp_path / "r2"),
                     "--bootstrap", "5", "--popularity"]) == 0
    with pytest.raises(ValueError, match="`names`"):
        evaluate_checkpoints([str(tiny_checkpoints[0])], None, names=["popularity"], bootstrap=0, popularity=True)
    with pytest.raises(ValueError, match="`popularity`"):
        evaluate_checkpoints([str(tiny_checkpoints[0])], None, bootstrap=0, popularity="yes")


def test_evaluate_cli_rerank_and_list_rerankers(tiny_checkpoints, tmp_path, capsys):
    assert cli_main(["evaluate", "--list-rerankers"]) == 0
    listed = capsys.readouterr().out
    for name in ("fa_ir", "detconstsort", "epsgreedy", "targeted"):
        assert f"\n{name} " in "\n" + listed
    out = tmp_path / "rep"
    rc = cli_main(["evaluate", "--ckpts", str(tiny_checkpoints[0]), "--out", str(out), "--bootstrap", "10",
                   "--rerank", "detconstsort", "--rerank", "epsgreedy:epsilon=0.2,seed=3"])
    assert rc == 0
    md = (out / "report.md").read_text()
    assert "+ detconstsort" in md and "+ epsgreedy:epsilon=0.2,seed=3" in md and "re-ranked by" in md
    assert cli_main(["evaluate", "--ckpts", str(tiny_checkpoints[0]), "--out", str(tmp_path / "rep2"), "--rerank",
                     "nope"]) == 2
    assert "unknown re-ranker 'nope'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ popularity
def test_popularity_scores_are_the_training_rating_counts():
    from torchfair.training import Popularity

    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=8)
    pop = Popularity.from_datamodule(dm)
    train = dm.splits.train
    item = int(train["item"].value_counts().index[0])  # the most-rated training item
    assert pop.counts[item] == (train["item"] == item).sum() == pop.counts.max()
    assert pop.counts.sum() == len(train)  # validation and test ratings are not counted
    batch = next(iter(dm.test_dataloader()))
    torch.testing.assert_close(pop(batch), pop.counts[batch["items"]])
    assert not list(pop.parameters())  # nothing to train
    with pytest.raises(ValueError, match="counts"):
        Popularity(torch.zeros(2, 3))
