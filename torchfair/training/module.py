"""The LightningModule: a ranker trained with ``utility + lambda * fairness``, validated with the exact measures.

:class:`FairRankingModule` takes a ranker (a name of :data:`~torchfair.training.rankers.RANKERS`, a dotted class
path, or any ``nn.Module`` mapping a batch to ``[B, N]`` scores), a utility loss, an optional fairness loss (any
loss of :mod:`torchfair.losses`, on any ordering) and its weight ``lam`` with a schedule
(:class:`~torchfair.losses.FairnessRegularizer`).  Training logs ``train/loss``, ``train/utility``,
``train/fairness`` (when computed) and ``train/lambda``.  Validation and test compute the *exact* measures
(``measures``, default :data:`DEFAULT_MEASURES`) through the torchmetrics classes of
:mod:`torchfair.evaluation`, so the logged values are corpus-level means over users, exact under any batching and
under DDP.

A ranker given by name is built in :meth:`setup` from the data module's ``info`` (``num_users``, ``num_items``,
feature sizes...), which is then stored in the hyperparameters: a checkpoint alone rebuilds the model
(``FairRankingModule.load_from_checkpoint(path)``).  The losses are stored in the hyperparameters when the model
is built by :class:`~torchfair.training.cli.FairLightningCLI` (the YAML config); a module built in Python with
loss objects stores a description of them in ``checkpoint["torchfair"]`` instead.

Example::

    >>> from torchfair.losses import DIPSLoss, ListNetLoss
    >>> model = FairRankingModule("mf", {"dim": 16}, utility_loss=ListNetLoss(), fairness_loss=DIPSLoss(),
    ...                           lam=0.5, data_info={"num_users": 10, "num_items": 20, "num_groups": 2})
    >>> batch = {"user": torch.tensor([0, 1]), "items": torch.randint(0, 20, (2, 6)),
    ...          "relevance": torch.rand(2, 6), "groups": torch.randint(0, 2, (2, 6)),
    ...          "mask": torch.ones(2, 6, dtype=torch.bool)}
    >>> model.training_step(batch, 0).shape
    torch.Size([])
"""
from __future__ import annotations

import re
import warnings
from typing import Any, Dict, List, Literal, Mapping, Optional, Union

import pytorch_lightning as pl
import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor, nn

from .._validation import check_choice, check_number
from ..evaluation import get_measure, parse_request
from ..metrics import FairnessMetric
from ..losses import FairnessRegularizer, ListNetLoss
from .rankers import _check_ranker_args, build_ranker

__all__ = ["FairRankingModule", "DEFAULT_MEASURES", "describe_loss"]

#: the exact measures of validation and test: ``NDCG@10``, DIPS with tie weight 0.5 and 0 (Fabris et al.,
#: WSDM 2023, eq. 11), exposure misallocation (eq. 12-16; ``_l1`` is ||delta||_1) and pairwise accuracy
#: (Raj & Ekstrand, SIGIR 2022, eq. 11; ``_inter`` / ``_intra``)
DEFAULT_MEASURES = ("ndcg@10", "dips", "dips:tie_weight=0,label=dips_t0", "exposure_misallocation",
                    "pairwise_accuracy")

_SCHEDULES = ("constant", "linear")


def describe_loss(loss: Optional[nn.Module]) -> Optional[Dict[str, Any]]:
    """``{"class_path": ..., "repr": ...}`` for a loss module (``None`` for ``None``), JSON-able."""
    if loss is None:
        return None
    cls = type(loss)
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "repr": repr(loss)}


def _metric_key(label: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", label)


class FairRankingModule(pl.LightningModule):
    """Train a ranker with ``utility + lam * fairness``; validate and test with the exact measures.

    Args:
        ranker: ``"mf"``, ``"two_tower"``, a dotted class path (built from the data's ``info`` and
            ``ranker_args``, see :func:`~torchfair.training.rankers.build_ranker`) or an ``nn.Module``.
        ranker_args: constructor arguments of the ranker (``{"dim": 32}``), checked here against a named ranker's
            signature (unknown keys, values out of the declared ranges) before any data is loaded.
        utility_loss: a loss called as ``loss(scores, relevance, groups, mask)``; default
            :class:`~torchfair.losses.ListNetLoss`.
        fairness_loss: ``None`` (utility only) or a fairness loss, e.g. ``DIPSLoss(ordering=SoftRank(0.1))``.
        lam, schedule, warmup_steps, log_fairness_every: the weight and its schedule
            (:class:`~torchfair.losses.FairnessRegularizer`; ``warmup_steps`` counts optimiser steps).
            The numeric arguments declare their ranges in the signature (jsonargparse's ``NonNegativeFloat``,
            ``PositiveInt``...: ``torchfair fit`` refuses a value out of range while parsing); plain Python
            numbers are accepted and checked here (``ValueError`` naming the argument).
        fairness_every: ``k > 1`` trains the fairness term on every ``k``-th step only, weighted ``k * lam``
            (lazy regularisation, :class:`~torchfair.losses.FairnessRegularizer`'s ``every``): ``1/k`` of its
            cost; default 1 (every step).
        measures: requests of the exact validation / test measures (``"ndcg@10"``,
            ``"dips:tie_weight=0,label=dips_t0"``...); default :data:`DEFAULT_MEASURES`.
        lr, weight_decay: of the default Adam optimiser (a LightningCLI ``--optimizer`` replaces it).
        data_info: the data module's ``info``; filled in by :meth:`setup` when not given.
        init_from: a checkpoint of a ranker of the same shape (a ``torchfair fit`` checkpoint, or any file whose
            ``state_dict`` holds ``ranker.*`` entries) whose ranker weights start the fit: fine-tune a trained
            ranker with a fairness loss.  Read once, when a fit starts; a fit resumed with ``ckpt_path`` and
            ``load_from_checkpoint`` restore their own weights and do not read it.  Without it, a ranker with an
            ``initialize(datamodule, seed)`` method (``MatrixFactorization(init="ials")``: implicit ALS on the
            training ratings) is initialised by it when a fit starts (not when one resumes).
        rerank: a re-ranker spec (:func:`torchfair.rerank.get_reranker`, e.g. ``"fa_ir:p=0.3"``,
            ``"targeted:measure=dips,keep=10"``) applied to the scores before the exact validation and test
            measures (training is unchanged): the measures then judge what serving the re-ranked lists would
            give.  ``None`` (default): no re-ranking.  The utility loss of validation stays on the raw scores.
    """

    def __init__(self, ranker: Union[str, nn.Module] = "mf", ranker_args: Optional[Dict[str, Any]] = None,
                 utility_loss: Optional[nn.Module] = None, fairness_loss: Optional[nn.Module] = None,
                 lam: NonNegativeFloat = 0.0, schedule: Literal["constant", "linear"] = "constant",
                 warmup_steps: NonNegativeInt = 0, log_fairness_every: NonNegativeInt = 0,
                 measures: Optional[List[str]] = None, lr: PositiveFloat = 0.01,
                 weight_decay: NonNegativeFloat = 0.0, data_info: Optional[Dict[str, Any]] = None,
                 init_from: Optional[str] = None, rerank: Optional[str] = None, fairness_every: PositiveInt = 1):
        super().__init__()
        from ..rerank import get_reranker

        self.reranker = None if rerank is None else get_reranker(rerank)  # ValueError naming a bad spec
        # the ranges are also declared in the signature (jsonargparse types), so that `torchfair fit` refuses a bad
        # value while parsing; plain numbers from Python are checked here (and stored as plain int / float)
        schedule = str(check_choice(schedule, "schedule", _SCHEDULES))
        lam = check_number(lam, "lam", low=0)
        warmup_steps = int(check_number(warmup_steps, "warmup_steps", low=0, integer=True))
        log_fairness_every = int(check_number(log_fairness_every, "log_fairness_every", low=0, integer=True))
        fairness_every = int(check_number(fairness_every, "fairness_every", low=1, integer=True))
        lr = check_number(lr, "lr", low=0, low_open=True)
        weight_decay = check_number(weight_decay, "weight_decay", low=0)
        if ranker_args is not None and not isinstance(ranker_args, Mapping):
            raise ValueError(f"`ranker_args` must be a dict; got {type(ranker_args).__name__}")
        _check_ranker_args(ranker, ranker_args)  # a named ranker exists and takes these arguments, in range
        if init_from is not None and (not isinstance(init_from, str) or not init_from):
            raise ValueError(f"`init_from` must be a checkpoint path; got {init_from!r}")
        if data_info is not None and not isinstance(data_info, Mapping):
            raise ValueError(f"`data_info` must be a dict (a data module's info); got {type(data_info).__name__}")
        for name, loss in (("utility_loss", utility_loss), ("fairness_loss", fairness_loss)):
            if loss is not None and not callable(loss):
                raise ValueError(f"`{name}` must be a loss module called as loss(scores, relevance, groups, mask)")
        self.measures = [str(m) for m in (DEFAULT_MEASURES if measures is None else measures)]
        for m in self.measures:
            try:
                get_measure(parse_request(m).name)
            except ValueError as e:
                raise ValueError(f"`measures`: {e}") from None
        # objects are not hyperparameters, unless LightningCLI built them: it hands save_hyperparameters their
        # class_path config instead (which load_from_checkpoint re-instantiates), so the losses of a `torchfair fit`
        # run are in its checkpoint.  Which it got is read from what it stored (public API only): when that holds
        # nn.Module objects (built in Python), they are saved again without them
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Attribute '\w+' is an instance of `nn.Module`")
            self.save_hyperparameters()
        objects = [k for k, v in self.hparams.items() if isinstance(v, nn.Module)]
        if objects:
            self.hparams.clear()
            self.save_hyperparameters(ignore=objects)
        self.utility_loss = utility_loss if utility_loss is not None else ListNetLoss()
        self.fairness_loss = fairness_loss
        if fairness_loss is not None:
            self.objective: nn.Module = FairnessRegularizer(self.utility_loss, fairness_loss, lam=lam,
                                                            schedule=schedule, warmup_steps=warmup_steps,
                                                            log_fairness_every=log_fairness_every,
                                                            fairness_every=fairness_every)
        else:
            self.objective = self.utility_loss
        self._ranker_spec = ranker
        self.ranker: Optional[nn.Module] = None
        self.val_metrics: Optional[nn.ModuleDict] = None
        self.test_metrics: Optional[nn.ModuleDict] = None
        if isinstance(ranker, nn.Module) or data_info is not None:
            self._build(dict(data_info) if data_info is not None else {})

    # ------------------------------------------------------------------ building
    def _build(self, info: Dict[str, Any]) -> None:
        if self.ranker is None:
            self.ranker = build_ranker(self._ranker_spec, info, self.hparams.get("ranker_args"))
        if info:
            self.hparams["data_info"] = info
        G = info.get("num_groups")
        self.val_metrics = self._metrics(G)
        self.test_metrics = self._metrics(G)

    def _metrics(self, num_groups: Optional[int]) -> nn.ModuleDict:
        from torchmetrics.aggregation import MeanMetric

        # the utility loss too is a sum / count state, so its mean over lists is exact under DDP (uneven shards)
        out = nn.ModuleDict({"utility_loss": MeanMetric()})
        for m in self.measures:
            req = parse_request(m)
            out[_metric_key(req.label)] = FairnessMetric(req, num_groups=num_groups)
        return out

    def setup(self, stage: str) -> None:
        if self.ranker is None or self.hparams.get("data_info") is None:
            dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
            info = getattr(dm, "info", None)
            if info is None and self.ranker is None:
                raise ValueError("the ranker is built from the data module's `info`: give the Trainer a data module "
                                 "with an `info` dict, or pass `data_info=` / an nn.Module `ranker`")
            self._build(dict(info or {}))
        resumed = self._trainer is not None and getattr(self.trainer, "ckpt_path", None)
        if stage == "fit" and not resumed and not getattr(self, "_initialised", False):
            if self.hparams.get("init_from"):
                self.load_ranker_weights(self.hparams["init_from"])
            elif hasattr(self.ranker, "initialize"):  # a closed-form start (MatrixFactorization(init="ials"))
                dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
                if dm is not None:
                    self.ranker.initialize(dm, seed=int(getattr(dm, "seed", 0) or 0))
                self._initialised = True

    def load_ranker_weights(self, path: str) -> None:
        """Copy the ranker weights of the checkpoint at ``path`` into this model's ranker (``ValueError`` when
        the file is missing or its ranker has other parameters or shapes)."""
        import os

        if self.ranker is None:
            raise RuntimeError("the ranker is not built yet: call setup() first")
        if not os.path.isfile(path):
            raise ValueError(f"`init_from`: no checkpoint at {path!r}")
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, Mapping) else None
        weights = {k[len("ranker."):]: v for k, v in (state or {}).items() if k.startswith("ranker.")}
        own = self.ranker.state_dict()
        bad = sorted(set(own) ^ set(weights)) or \
            [k for k in own if tuple(own[k].shape) != tuple(weights[k].shape)]
        if bad:
            raise ValueError(f"`init_from`: the ranker in {path!r} does not match this model's ranker "
                             f"(parameters differing in name or shape: {bad[:5]})")
        self.ranker.load_state_dict(weights)
        self._initialised = True

    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        checkpoint["torchfair"] = {
            "format": 1, "data_info": self.hparams.get("data_info"), "measures": self.measures,
            "utility_loss": describe_loss(self.utility_loss), "fairness_loss": describe_loss(self.fairness_loss),
            "lam": float(self.hparams.get("lam", 0.0)), "ranker": describe_loss(self.ranker),
            # the global torch RNG (Plackett-Luce samples...), which Lightning does not checkpoint: restored when a
            # fit resumes from this file, so that it draws what the uninterrupted run would have drawn
            "rng": {"torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
        }

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        rng = (checkpoint.get("torchfair") or {}).get("rng")
        if rng is None or self._trainer is None or self.trainer.state.fn != "fit":
            return  # only a resumed fit continues the random stream; load_from_checkpoint leaves it alone
        torch.set_rng_state(rng["torch"].cpu())
        if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])

    # ------------------------------------------------------------------ steps
    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        if self.ranker is None:
            raise RuntimeError("the ranker is not built yet: run through a Trainer with a data module, or pass "
                               "`data_info=`")
        return self.ranker(batch)

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        scores = self(batch)
        rel, groups, mask = batch["relevance"], batch["groups"], batch["mask"]
        loss = self.objective(scores, rel, groups, mask)
        B = scores.shape[0]
        if isinstance(self.objective, FairnessRegularizer):
            logs = {f"train/{k}": v for k, v in self.objective.last.items() if k != "total"}
        else:
            logs = {"train/utility": loss.detach()}
        logs["train/loss"] = loss.detach()
        self.log_dict(logs, prog_bar=False, batch_size=B, on_step=True, on_epoch=True)
        self.log("loss", loss.detach(), prog_bar=True, batch_size=B, logger=False)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if isinstance(self.objective, FairnessRegularizer):
            self.objective.step()

    def on_train_epoch_start(self) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and hasattr(dm, "set_epoch"):
            dm.set_epoch(self.current_epoch)

    def _eval_step(self, batch: Mapping[str, Tensor], metrics: nn.ModuleDict, prefix: str) -> None:
        scores = self(batch)
        rel, groups, mask = batch["relevance"], batch["groups"], batch["mask"]
        ranked = scores
        if self.reranker is not None:
            G = (self.hparams.get("data_info") or {}).get("num_groups")
            ranked = self.reranker(scores.detach().float(), None, groups, mask, num_groups=G).scores
        for key, metric in metrics.items():
            if key == "utility_loss":  # batch mean weighted by its lists: the mean over lists, whatever the batching
                u = self.utility_loss(scores, rel, groups, mask).detach().float()
                metric.update(u, weight=float(scores.shape[0]))
            else:
                metric.update(ranked, rel, groups, mask)

    def _eval_end(self, metrics: nn.ModuleDict, prefix: str) -> None:
        out: Dict[str, Tensor] = {}
        for key, metric in metrics.items():
            value = metric.compute()
            out.update({f"{prefix}/{k}": v.float() for k, v in value.items()} if isinstance(value, dict)
                       else {f"{prefix}/{key}": value.float()})
            metric.reset()
        self.log_dict(out, prog_bar=False)
        main = [k for k in out if k.startswith(f"{prefix}/ndcg")]
        if main:
            self.log(f"{prefix}_ndcg", out[main[0]], prog_bar=True, logger=False)

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.val_metrics, "val")

    def on_validation_epoch_end(self) -> None:
        self._eval_end(self.val_metrics, "val")

    def test_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.test_metrics, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_end(self.test_metrics, "test")

    def predict_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        return self(batch)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
