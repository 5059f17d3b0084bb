"""Resuming a fit from a mid-run checkpoint reproduces the uninterrupted run exactly (weights, optimiser state,
the lambda warm-up, the per-epoch negatives, the Plackett-Luce samples, the validation measures), through the
Python API and through ``torchfair fit --ckpt_path``; validation under DDP (2 CPU processes, gloo) gives the
corpus-level measures of one process, and the lists DistributedSampler repeats to even out the ranks are counted
twice (checked against a one-process run on the padded list set)."""
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from pytorch_lightning.callbacks import Callback, ModelCheckpoint  # noqa: E402
from torch.utils.data import DataLoader, Subset  # noqa: E402

from torchfair.cli import main as cli_main  # noqa: E402
from torchfair.data.recsys import collate_lists  # noqa: E402
from torchfair.losses import DIPSLoss, ListNetLoss  # noqa: E402
from torchfair.orderings import PlackettLuce, SoftRank  # noqa: E402
from torchfair.training import FairRankingModule, MovieLensDataModule  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: the synthetic stand-in: 60 users / 80 items; 60 / 16 -> 4 optimiser steps per epoch
SYNTH_DM = dict(n_test=3, n_val=2, num_negatives=5, batch_size=16)
STEPS_PER_EPOCH = 4
#: the linear warm-up of lambda is still running at the resume point (step 8 of 16)
WARMUP = 10
QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False)


class _RecordBatches(Callback):
    """Keeps (epoch, users, items) of every training batch: the shuffle and the negatives each epoch drew."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append((trainer.current_epoch, batch["user"].clone(), batch["items"].clone()))


def _make(ordering: str):
    """``ordering``: "softrank", "plackett_luce", or "softrank_every3" (lazy: the fairness term on every third
    step; the resume point, step 8, is in the middle of a period)."""
    dm = MovieLensDataModule("synthetic", **SYNTH_DM)
    order = SoftRank(temperature=0.1) if ordering.startswith("softrank") else PlackettLuce(samples=4)
    model = FairRankingModule("mf", {"dim": 8}, utility_loss=ListNetLoss(),
                              fairness_loss=DIPSLoss(num_groups=2, ordering=order), lam=0.5, schedule="linear",
                              warmup_steps=WARMUP, measures=["ndcg@10", "dips", "exposure_misallocation"],
                              fairness_every=3 if ordering.endswith("every3") else 1)
    return model, dm


def _fit(root: Path, max_epochs: int, ordering: str, callbacks=(), ckpt_path=None):
    pl.seed_everything(0, verbose=False)
    model, dm = _make(ordering)
    trainer = pl.Trainer(max_epochs=max_epochs, deterministic=True, callbacks=list(callbacks), default_root_dir=root,
                         num_sanity_val_steps=0, **QUIET)
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    val = {k: v.clone() for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    return model, dm, trainer, val


def _assert_same_run(a, b):
    (ma, dma, ta, va), (mb, dmb, tb, vb) = a, b
    assert ta.global_step == tb.global_step == 4 * STEPS_PER_EPOCH
    assert ma.objective.current_step == mb.objective.current_step == 4 * STEPS_PER_EPOCH
    assert dma.epoch == dmb.epoch == 3
    assert set(va) == set(vb) and {"val/ndcg@10", "val/dips_gap", "val/exposure_misallocation_l1"} <= set(va)
    for k in va:
        assert torch.allclose(va[k], vb[k], rtol=0, atol=1e-6), (k, float(va[k]), float(vb[k]))
    sa, sb = ma.ranker.state_dict(), mb.ranker.state_dict()
    for k in sa:
        assert torch.allclose(sa[k], sb[k], rtol=0, atol=1e-6), k
    oa, ob = ta.optimizers[0].state_dict()["state"], tb.optimizers[0].state_dict()["state"]
    for i in oa:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.allclose(oa[i][k], ob[i][k], rtol=0, atol=1e-6), (i, k)


@pytest.mark.parametrize("ordering", ["softrank", "plackett_luce", "softrank_every3"])
def test_resuming_from_a_mid_run_checkpoint_gives_the_uninterrupted_run(ordering, tmp_path):
    rec_full = _RecordBatches()
    every = ModelCheckpoint(dirpath=tmp_path / "full_ckpt", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
    full = _fit(tmp_path / "full", 4, ordering, [every, rec_full])
    _, _, short_trainer, _ = _fit(tmp_path / "short", 2, ordering,
                                  [ModelCheckpoint(dirpath=tmp_path / "short_ckpt", save_last=True)])
    assert short_trainer.global_step == 2 * STEPS_PER_EPOCH
    # the checkpoint of the 2-epoch run, and the one written after epoch 2 by the 4-epoch run
    for ckpt in (tmp_path / "short_ckpt" / "last.ckpt", tmp_path / "full_ckpt" / "epoch=1.ckpt"):
        saved = torch.load(ckpt, weights_only=False)
        assert saved["state_dict"]["objective._extra_state"] == {"current_step": 2 * STEPS_PER_EPOCH,
                                                                  "calls": 2 * STEPS_PER_EPOCH}
        assert 0 < 2 * STEPS_PER_EPOCH < WARMUP  # lambda is still warming up there
        rec = _RecordBatches()
        resumed = _fit(tmp_path / f"resumed_{ckpt.stem}", 4, ordering, [rec], ckpt_path=ckpt)
        _assert_same_run(full, resumed)
        # the resumed run saw the batches of epochs 3 and 4 of the uninterrupted run: same shuffle, same negatives
        late = [b for b in rec_full.seen if b[0] >= 2]
        assert len(rec.seen) == len(late) == 2 * STEPS_PER_EPOCH
        for (ea, ua, ia), (eb, ub, ib) in zip(late, rec.seen):
            assert ea == eb and torch.equal(ua, ub) and torch.equal(ia, ib)
    # the negatives really are re-drawn per epoch (else the comparison above would not test set_epoch)
    by_epoch = {}
    for e, u, items in rec_full.seen:
        for uu, row in zip(u.tolist(), items):
            by_epoch.setdefault(e, {})[uu] = set(row.tolist())
    assert by_epoch[2] != by_epoch[3]


def _tampered(src: Path, dst: Path, *, step=None, drop_rng=False) -> Path:
    ckpt = torch.load(src, weights_only=False)
    if step is not None:
        ckpt["state_dict"]["objective._extra_state"] = {"current_step": step}
    if drop_rng:
        del ckpt["torchfair"]["rng"]
    torch.save(ckpt, dst)
    return dst


def test_the_resume_comparison_notices_a_lost_warm_up_step_or_random_state(tmp_path):
    """The same comparison fails when the regulariser's step counter or the random state is not restored."""
    for ordering, kw in (("softrank", {"step": 0}), ("plackett_luce", {"drop_rng": True})):
        every = ModelCheckpoint(dirpath=tmp_path / ordering, every_n_epochs=1, save_top_k=-1, filename="{epoch}")
        full = _fit(tmp_path / f"full_{ordering}", 4, ordering, [every])
        bad = _tampered(tmp_path / ordering / "epoch=1.ckpt", tmp_path / f"bad_{ordering}.ckpt", **kw)
        resumed = _fit(tmp_path / f"resumed_{ordering}", 4, ordering, ckpt_path=bad)
        with pytest.raises(AssertionError):
            _assert_same_run(full, resumed)
        assert not torch.allclose(full[0].ranker.item_factors.weight, resumed[0].ranker.item_factors.weight,
                                  rtol=0, atol=1e-6)


def test_load_from_checkpoint_leaves_the_global_random_state_alone(tmp_path):
    """Only a resumed fit restores the saved random state; loading a model draws its initial weights as usual."""
    every = ModelCheckpoint(dirpath=tmp_path / "c", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
    model, dm, _, _ = _fit(tmp_path / "run", 1, "plackett_luce", [every])
    path = tmp_path / "c" / "epoch=0.ckpt"
    saved = torch.load(path, weights_only=False)["torchfair"]["rng"]["torch"]
    loss = DIPSLoss(num_groups=2, ordering=PlackettLuce(samples=4))
    torch.manual_seed(123)
    FairRankingModule("mf", {"dim": 8}, fairness_loss=loss, data_info=dm.info)
    want = torch.get_rng_state()
    torch.manual_seed(123)
    back = FairRankingModule.load_from_checkpoint(path, fairness_loss=loss)
    assert torch.equal(torch.get_rng_state(), want) and not torch.equal(want, saved)
    assert torch.equal(back.ranker.item_factors.weight, model.ranker.item_factors.weight)


# ------------------------------------------------------------------------------------------------ the CLI
SYNTH_CLI = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
             "--data.batch_size", "16", "--data.eval_batch_size", "32", "--trainer.enable_progress_bar", "false",
             "--trainer.enable_model_summary", "false", "--trainer.logger", "false",
             "--model.schedule", "linear", "--model.warmup_steps", str(WARMUP)]


def test_cli_fit_resumes_from_ckpt_path(tmp_path, monkeypatch):
    """``torchfair fit --config ... --ckpt_path last.ckpt``: 2 epochs + 1 resumed = 3 epochs uninterrupted."""
    monkeypatch.chdir(tmp_path)
    cfg = str(ROOT / "configs" / "ml100k_pl_dips.yaml")

    def fit(name, epochs, *extra):
        args = ["fit", "--config", cfg, "--trainer.max_epochs", str(epochs),
                "--trainer.default_root_dir", str(tmp_path / name)] + SYNTH_CLI + list(extra)
        assert cli_main(args) == 0
        return tmp_path / name / "checkpoints" / "last.ckpt"

    first = fit("first", 2)
    resumed = torch.load(fit("resumed", 3, "--ckpt_path", str(first)), weights_only=False)
    whole = torch.load(fit("whole", 3), weights_only=False)
    assert resumed["epoch"] == whole["epoch"] == 2 and resumed["global_step"] == whole["global_step"] == 12
    assert resumed["state_dict"]["objective._extra_state"] == {"current_step": 12, "calls": 12}
    for k, v in whole["state_dict"].items():
        if isinstance(v, torch.Tensor):
            assert torch.allclose(resumed["state_dict"][k], v, rtol=0, atol=1e-6), k


# ------------------------------------------------------------------------------------------------ DDP
_DDP_SCRIPT = textwrap.dedent('''
    """Validate a saved FairRankingModule on DDP (2 CPU processes); every rank writes a json."""
    import functools, json, sys
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import Callback
    from torch.utils.data import DataLoader, Subset
    from torchfair.data.recsys import collate_lists
    from torchfair.training import FairRankingModule, MovieLensDataModule


    class Count(Callback):
        def __init__(self):
            self.users = []

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            self.users += batch["user"].tolist()


    def main(out, state, *sizes):
        dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=16)
        dm.setup("fit")
        model = FairRankingModule("mf", {"dim": 8}, data_info=dm.info)
        model.load_state_dict(torch.load(state))
        collate = functools.partial(collate_lists, item_groups=dm.item_groups, features=dm.features)
        count = Count()
        trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", callbacks=[count], logger=False,
                             enable_progress_bar=False, enable_model_summary=False)
        res = {}
        for n in sizes:
            count.users = []
            loader = DataLoader(Subset(dm.val_dataset, range(int(n))), batch_size=8, collate_fn=collate)
            (metrics,) = trainer.validate(model, dataloaders=loader, verbose=False)
            res[n] = {"metrics": metrics, "users": count.users}
        class Odd(MovieLensDataModule):  # the data module's own loader, on 59 lists (uneven over 2 processes)
            def val_dataloader(self):
                return self._eval_loader(Subset(self.val_dataset, range(59)))

        odd = Odd("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=16, eval_batch_size=8)
        count.users = []
        (metrics,) = trainer.validate(model, datamodule=odd, verbose=False)
        res["datamodule59"] = {"metrics": metrics, "users": count.users}
        with open(f"{out}.rank{trainer.global_rank}.json", "w") as f:
            json.dump({"world_size": trainer.world_size, "results": res}, f)


    if __name__ == "__main__":
        main(*sys.argv[1:])
''')


def _one_process(model, dm, indices):
    collate = functools.partial(collate_lists, item_groups=dm.item_groups, features=dm.features)
    loader = DataLoader(Subset(dm.val_dataset, indices), batch_size=8, collate_fn=collate)
    trainer = pl.Trainer(accelerator="cpu", devices=1, enable_checkpointing=False, **QUIET)
    (metrics,) = trainer.validate(model, dataloaders=loader, verbose=False)
    return metrics


def _close(a, b):
    return set(a) == set(b) and all(abs(a[k] - b[k]) <= 1e-6 + 1e-5 * abs(b[k]) for k in a)


def test_ddp_validation_gives_the_one_process_measures(tmp_path):
    dist = torch.distributed
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available")
    dm = MovieLensDataModule("synthetic", **SYNTH_DM)
    dm.setup("fit")
    n = len(dm.val_dataset)
    assert n == 60
    torch.manual_seed(0)
    model = FairRankingModule("mf", {"dim": 8}, data_info=dm.info)  # the default measures
    torch.save(model.state_dict(), tmp_path / "model.pt")
    script = tmp_path / "ddp_validate.py"
    script.write_text(_DDP_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), str(tmp_path / "model.pt"),
                           str(n), str(n - 1)], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"out.rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    ddp = ranks[0]["results"]
    val_keys = {"val/ndcg@10", "val/dips_gap", "val/dips_t0_gap", "val/exposure_misallocation_l1",
                "val/pairwise_accuracy_inter"}

    # 60 lists: 30 per rank, each list once; the measures are those of one process
    users = sorted(ranks[0]["results"][str(n)]["users"] + ranks[1]["results"][str(n)]["users"])
    assert len(ranks[0]["results"][str(n)]["users"]) == 30
    assert users == sorted(int(dm.val_dataset.users[i]) for i in range(n))
    single = _one_process(model, dm, list(range(n)))
    assert val_keys <= set(single)
    assert _close(ddp[str(n)]["metrics"], single), (ddp[str(n)]["metrics"], single)

    # 59 lists: DistributedSampler pads to 60 by repeating the first list, which then counts twice
    users = ranks[0]["results"][str(n - 1)]["users"] + ranks[1]["results"][str(n - 1)]["users"]
    first = int(dm.val_dataset.users[0])
    assert len(users) == n and users.count(first) == 2
    single = _one_process(model, dm, list(range(n - 1)))
    padded = _one_process(model, dm, list(range(n - 1)) + [0])
    assert _close(ddp[str(n - 1)]["metrics"], padded), (ddp[str(n - 1)]["metrics"], padded)
    assert not _close(ddp[str(n - 1)]["metrics"], single)  # the duplicate changes the corpus means

    # the data module's own evaluation loader shards without repeats: 59 lists, each once, the one-process measures
    users = ranks[0]["results"]["datamodule59"]["users"] + ranks[1]["results"]["datamodule59"]["users"]
    assert sorted(users) == sorted(int(dm.val_dataset.users[i]) for i in range(n - 1))
    got = ddp["datamodule59"]["metrics"]
    assert set(got) == set(single)
    bad = {k: (got[k], single[k]) for k in got if not _close({k: got[k]}, {k: single[k]})}
    assert not bad, bad


def test_the_module_can_be_pickled_for_ddp_spawn():
    import pickle
    model = FairRankingModule("mf", {"dim": 4}, data_info={"num_users": 3, "num_items": 5, "num_groups": 2})
    back = pickle.loads(pickle.dumps(model))
    assert list(back.val_metrics) == list(model.val_metrics)
