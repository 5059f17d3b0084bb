"""torchfair/training/module.py: FairRankingModule's arguments, training, reloading and re-ranked validation."""
import math
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from torchfair.losses import DIPSLoss, ListNetLoss  # noqa: E402
from torchfair.training import FairRankingModule, MovieLensDataModule  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("ml100k_*.yaml"))
#: the synthetic stand-in (60 users, 80 items, no network) for every config
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
         "--data.batch_size", "16", "--data.eval_batch_size", "32", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false"]


# ------------------------------------------------------------------------------------------------ module
def test_module_validates_its_arguments():
    for kw, name in (({"lam": -1.0}, "lam"), ({"schedule": "cosine"}, "schedule"), ({"lr": 0.0}, "lr"),
                     ({"measures": ["nope"]}, "measure"), ({"ranker_args": [1]}, "ranker_args"),
                     ({"utility_loss": 3}, "utility_loss")):
        with pytest.raises(ValueError, match=name):
            FairRankingModule(**kw)


def _range(annotation):
    """The jsonargparse range type of an annotation (inside Optional[...]), else None."""
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    tp = args[0] if typing.get_origin(annotation) is typing.Union and len(args) == 1 else annotation
    return tp if hasattr(tp, "_expression") else None


#: every numeric argument of FairRankingModule: values its documented range accepts and refuses
MODULE_RANGES = {"lam": ([0, 0.0, 2.5], [-1e-9, -1]), "warmup_steps": ([0, 7], [-1]),
                 "log_fairness_every": ([0, 3], [-1]), "lr": ([1e-9, 0.5], [0, -0.1]),
                 "weight_decay": ([0, 0.1], [-0.1]), "fairness_every": ([1, 4], [0, -2])}


def test_module_ranges_are_declared_in_the_signature_and_checked_for_python_callers():
    """Each numeric argument is annotated with a jsonargparse range type (what `torchfair fit` checks while
    parsing), which refuses exactly the values the constructor refuses for a Python caller (ValueError naming the
    argument); plain Python numbers are accepted and stored as plain int / float."""
    import inspect
    import typing

    params = inspect.signature(FairRankingModule).parameters
    numeric = {k for k, p in params.items() if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)}
    assert numeric == set(MODULE_RANGES)
    hints = typing.get_type_hints(FairRankingModule.__init__)
    for name, (good, bad) in MODULE_RANGES.items():
        tp = _range(hints[name])
        assert tp is not None, name
        for v in good:
            tp(v)
            model = FairRankingModule("mf", **{name: v})
            assert model.hparams[name] == v and type(model.hparams[name]) is type(params[name].default), name
        for v in bad:
            with pytest.raises(ValueError):
                tp(v)
            with pytest.raises(ValueError, match=f"`{name}`"):
                FairRankingModule("mf", **{name: v})


def test_ranker_args_are_checked_against_the_ranker_signature_before_any_data():
    """A named ranker is resolved and its ``ranker_args`` checked when the module is built (not when a fit sets
    it up): unknown keys, and values outside the ranges the ranker's signature declares."""
    from torchfair.training import MatrixFactorization, TwoTower

    for cls, ranges in ((MatrixFactorization, {"num_users": ([1], [0]), "num_items": ([3], [0]), "dim": ([1], [0]),
                                               "init_std": ([0.0], [-0.1])}),
                        (TwoTower, {"num_users": ([1], [0]), "num_genres": ([0], [-1]), "num_decades": ([0], [-1]),
                                    "dim": ([2], [0]), "hidden": ([1], [0]), "user_cardinalities": ([[1, 2]],
                                                                                                   [[2, 0]])})):
        name = {MatrixFactorization: "mf", TwoTower: "two_tower"}[cls]
        for arg, (good, bad) in ranges.items():
            for v in good:
                FairRankingModule(name, {arg: v})
            for v in bad:
                with pytest.raises(ValueError, match=rf"`ranker_args\.{arg}(\[1\])?` must be .*{cls.__name__}"):
                    FairRankingModule(name, {arg: v})
                with pytest.raises(ValueError):  # the ranker itself refuses it too
                    cls(**{"num_users": 2, "num_items": 3, arg: v})
    with pytest.raises(ValueError, match=r"`ranker_args` \['dimm'\] are not arguments of MatrixFactorization"):
        FairRankingModule("mf", {"dimm": 4})
    with pytest.raises(ValueError, match="`ranker` must be one of"):
        FairRankingModule("nope")
    with pytest.raises(ValueError, match="cannot be imported"):
        FairRankingModule("torchfair.training.rankers.Nope")
    assert FairRankingModule("mf", {"dim": 3}, data_info={"num_users": 2, "num_items": 4}).ranker.user_factors \
        .weight.shape == (2, 3)


def test_module_measures_are_the_evaluation_engine_metrics():
    """Validation and test measure through torchfair.evaluation's FairnessMetric (built from the registry's
    requests), one per requested measure, plus the mean utility loss."""
    from torchmetrics.aggregation import MeanMetric

    from torchfair.metrics import FairnessMetric

    model = FairRankingModule("mf", measures=["ndcg@5", "dips:tie_weight=0,label=d0"],
                              data_info={"num_users": 3, "num_items": 6, "num_groups": 2})
    for metrics in (model.val_metrics, model.test_metrics):
        assert sorted(metrics) == ["d0", "ndcg_5", "utility_loss"]
        assert isinstance(metrics["utility_loss"], MeanMetric)
        assert all(isinstance(metrics[k], FairnessMetric) for k in ("d0", "ndcg_5"))


def test_module_trains_validates_and_reloads_from_the_checkpoint_alone(tmp_path):
    pl.seed_everything(0)
    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=16)
    model = FairRankingModule("mf", {"dim": 8}, utility_loss=ListNetLoss(), fairness_loss=DIPSLoss(num_groups=2),
                              lam=0.5, measures=["ndcg@10", "dips"])
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model, dm)
    m = trainer.callback_metrics
    for k in ("train/utility", "train/fairness", "train/lambda", "val/ndcg@10", "val/dips_gap"):
        assert k in m and torch.isfinite(m[k]), k
    assert model.objective.current_step == trainer.global_step  # the lambda schedule advanced once per step
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["torchfair"]["data_info"]["num_users"] == dm.num_users
    assert ckpt["datamodule_hyper_parameters"]["variant"] == "synthetic"
    back = FairRankingModule.load_from_checkpoint(path, fairness_loss=DIPSLoss(num_groups=2))
    batch = next(iter(dm.test_dataloader()))
    model.eval()
    back.eval()
    with torch.no_grad():
        assert torch.equal(model(batch), back(batch))


def test_module_trains_with_a_multi_measure_loss_logs_its_terms_and_checkpoints_its_scales():
    from torchfair.losses import MultiMeasureLoss

    loss = MultiMeasureLoss(["dips", "pairwise_accuracy"], num_groups=2, normalize="start")
    model = FairRankingModule("mf", {"dim": 4}, fairness_loss=loss, lam=0.5,
                              data_info={"num_users": 5, "num_items": 12, "num_groups": 2})
    gen = torch.Generator().manual_seed(0)
    batch = {"user": torch.tensor([0, 1, 2]), "items": torch.randint(0, 12, (3, 6), generator=gen),
             "relevance": torch.randint(0, 3, (3, 6), generator=gen).float(),
             "groups": torch.tensor([[0, 1, 0, 1, 0, 1]] * 3), "mask": torch.ones(3, 6, dtype=torch.bool)}
    out = model.training_step(batch, 0)
    out.backward()
    assert torch.isfinite(out) and {"fairness/dips", "fairness/pairwise_accuracy"} <= set(model.objective.last)
    state = model.state_dict()
    assert (state["fairness_loss.start_scale"] > 0).all()  # the scales resume with the checkpoint
    back = FairRankingModule("mf", {"dim": 4}, fairness_loss=MultiMeasureLoss(["dips", "pairwise_accuracy"],
                                                                              num_groups=2, normalize="start"),
                             lam=0.5, data_info={"num_users": 5, "num_items": 12, "num_groups": 2})
    back.load_state_dict(state)
    assert torch.equal(back.fairness_loss.start_scale, state["fairness_loss.start_scale"])


def test_module_rerank_validates_the_reranked_scores():
    """FairRankingModule(rerank=...) computes its exact validation measures on the re-ranked lists: equal to the
    measures of a plain model's scores re-ranked by hand."""
    from torchfair.metrics import NDCG
    from torchfair.rerank import get_reranker

    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=16)
    kw = dict(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_train_batches=2)
    pl.seed_everything(0)
    plain = FairRankingModule("mf", {"dim": 8}, measures=["ndcg@10"])
    trainer = pl.Trainer(**kw)
    trainer.fit(plain, dm)
    spec = "targeted:measure=exposure_misallocation,keep=1"
    with pytest.raises(ValueError, match="unknown re-ranker"):
        FairRankingModule("mf", {"dim": 8}, rerank="nope")
    reranked = FairRankingModule("mf", {"dim": 8}, measures=["ndcg@10"], rerank=spec)
    reranked._build(dict(plain.hparams["data_info"]))
    reranked.ranker.load_state_dict(plain.ranker.state_dict())
    got = pl.Trainer(**kw).validate(reranked, dm, verbose=False)[0]["val/ndcg@10"]
    metric = NDCG(k=10)
    r = get_reranker(spec)
    dm.setup("validate")
    with torch.no_grad():
        for batch in dm.val_dataloader():
            s = plain(batch)
            metric.update(r(s, None, batch["groups"], batch["mask"], num_groups=2).scores, batch["relevance"],
                          batch["groups"], batch["mask"])
    value = metric.compute()
    value = next(iter(value.values())) if isinstance(value, dict) else value
    assert math.isclose(got, float(value), rel_tol=1e-5)
    raw = pl.Trainer(**kw).validate(plain, dm, verbose=False)[0]["val/ndcg@10"]
    assert not math.isclose(got, raw, rel_tol=1e-9)  # the re-ranker changed something
