"""Checkpoints of ``torchfair fit`` back as rankers, and their scored lists.

:func:`load_checkpoint` rebuilds a checkpoint's ranker and data module through Lightning's
``load_from_checkpoint`` from the checkpoint alone (its hyperparameters and ``datamodule_hyper_parameters``; a
``torchfair fit`` YAML may override the data settings); :func:`score_lists` / :func:`iter_score_lists` score its
test (or validation) lists into the ragged list dicts the evaluation engine takes
(:func:`torchfair.evaluation.evaluate_lists`, :class:`~torchfair.evaluation.table.StreamingEvaluation`)::

    run = load_checkpoint("runs/ml100k_listnet/version_0/checkpoints/last.ckpt")
    lists = score_lists(run.model, run.datamodule, "test")   # [{"list_id", "scores", "relevance", "groups", "items"}]
    table = evaluate_lists(lists, run.meta["measures"], num_groups=run.meta["data_info"]["num_groups"])
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional

import torch
from torch import Tensor

__all__ = ["LoadedRun", "load_checkpoint", "score_lists", "iter_score_lists"]


@dataclass
class LoadedRun:
    """A checkpoint's ranker (in a :class:`FairRankingModule`), its data module and what the checkpoint records."""

    path: str
    model: Any
    datamodule: Any
    meta: Dict[str, Any]


def _read(path: str) -> Dict[str, Any]:
    if not os.path.isfile(path):
        raise ValueError(f"`--ckpts` {path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a text file, a truncated file, a pickle of something else
        raise ValueError(f"`--ckpts` {path}: not a PyTorch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(ckpt, Mapping) or "state_dict" not in ckpt:
        raise ValueError(f"`--ckpts` {path}: not a Lightning checkpoint (no `state_dict`)")
    if "torchfair" not in ckpt or not any(k.startswith("ranker.") for k in ckpt["state_dict"]):
        raise ValueError(f"`--ckpts` {path}: a checkpoint of another model; expected one written by `torchfair fit` "
                         f"(a FairRankingModule with its `torchfair` record)")
    return ckpt


def _load_yaml(path: str) -> Dict[str, Any]:
    import yaml  # pyyaml comes with pytorch-lightning

    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    if not isinstance(cfg, Mapping):
        raise ValueError(f"`--config` {path}: expected a YAML mapping with `data:` / `model:` sections")
    return dict(cfg)


def load_checkpoint(path: str, config: Optional[str] = None, device: str = "cpu",
                    data_overrides: Optional[Mapping[str, Any]] = None) -> LoadedRun:
    """Rebuild a checkpoint's ranker and data module through Lightning
    (``FairRankingModule.load_from_checkpoint`` and ``MovieLensDataModule.load_from_checkpoint``: the saved
    hyperparameters, with LightningCLI's class_path configs re-instantiated); ``config`` (a ``torchfair fit`` YAML)
    overrides the data settings (``data:``) and the measures (``model: measures:``); ``data_overrides`` (a dict of
    data module arguments, e.g. ``{"eval_users": 2000}``) overrides both."""
    from .datamodule import MovieLensDataModule
    from .module import FairRankingModule

    ckpt = _read(path)  # one clear error for a missing, foreign or truncated file before Lightning reads it
    record = dict(ckpt["torchfair"])  # what FairRankingModule.on_save_checkpoint stored
    hp = dict(ckpt.get("hyper_parameters") or {})
    data_hp = {k: v for k, v in dict(ckpt.get("datamodule_hyper_parameters") or {}).items() if not k.startswith("_")}
    step = {"epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step")}
    ranker_keys = {k for k in ckpt["state_dict"] if k.startswith("ranker.")}
    del ckpt
    model_over: Dict[str, Any] = {"init_from": None}  # the checkpoint's own weights, not those it started from
    data_over: Dict[str, Any] = {}
    if config is not None:
        cfg = _load_yaml(config)
        data_cfg = dict(cfg.get("data") or {})
        data_over = dict(data_cfg.get("init_args", data_cfg))
        model_cfg = dict(cfg.get("model") or {})
        if "measures" in model_cfg:
            model_over["measures"] = model_cfg["measures"]
    if not data_hp and not data_over:
        raise ValueError(f"`--ckpts` {path}: the checkpoint has no data settings (its data module did not save "
                         f"hyperparameters); give them with `--config` (a YAML with a `data:` section)")
    if data_overrides:
        data_over.update(data_overrides)
    info = hp.get("data_info") or record.get("data_info")
    if not info:
        raise ValueError(f"`--ckpts` {path}: the checkpoint records no `data_info`, so its ranker cannot be rebuilt")
    model_over["data_info"] = info
    if not isinstance(hp.get("ranker", "mf"), str) or "ranker" not in hp:  # a module passed in Python: not saved
        model_over["ranker"] = (record.get("ranker") or {}).get("class_path", "mf")
    try:
        # not strict: a loss passed as a Python object is not a hyperparameter, so the rebuilt module lacks the
        # loss's own state (e.g. the regulariser's schedule); the ranker's weights are checked below
        model = FairRankingModule.load_from_checkpoint(path, map_location="cpu", strict=False, **model_over)
    except RuntimeError as e:  # load_state_dict: weights of another shape
        raise ValueError(f"`--ckpts` {path}: its weights do not fit the ranker "
                         f"{model_over.get('ranker', hp.get('ranker'))!r}: {e}") from None
    if {f"ranker.{k}" for k in model.ranker.state_dict()} != ranker_keys:
        raise ValueError(f"`--ckpts` {path}: its weights do not fit the ranker "
                         f"{model_over.get('ranker', hp.get('ranker'))!r} (other parameter names)")
    model.eval().to(device)
    if data_hp:
        dm = MovieLensDataModule.load_from_checkpoint(path, **data_over)
    else:
        dm = MovieLensDataModule(**data_over)
    ranker = model_over.get("ranker", hp.get("ranker"))
    meta = {"checkpoint": os.path.abspath(path), **step,
            "data": {**data_hp, **data_over}, "data_info": info, "ranker": ranker, "ranker_args": hp.get("ranker_args"),
            "utility_loss": record.get("utility_loss"), "fairness_loss": record.get("fairness_loss"),
            "lam": record.get("lam"), "measures": list(model.measures)}
    return LoadedRun(path, model, dm, meta)



def _check_split(split: str, chunk_users: Optional[int] = None) -> None:
    if split not in ("test", "val"):
        raise ValueError(f"`split` must be 'test' or 'val'; got {split!r}")
    if chunk_users is not None and (isinstance(chunk_users, bool) or not isinstance(chunk_users, int)
                                    or chunk_users < 1):
        raise ValueError(f"`chunk_users` must be an int >= 1 or None; got {chunk_users!r}")


def score_lists(model, datamodule, split: str = "test", device: str = "cpu") -> List[Dict[str, Any]]:
    """Score every ``split`` list (``"test"`` or ``"val"``) with ``model`` (a :class:`FairRankingModule` or a ranker)
    on ``device``: ``[{"list_id": user, "scores", "relevance", "groups", "items"}]`` (1-D, real items only, on the
    CPU), in the data module's order."""
    return [li for chunk in iter_score_lists(model, datamodule, split, device, chunk_users=None) for li in chunk]


def iter_score_lists(model, datamodule, split: str = "test", device: str = "cpu",
                     chunk_users: Optional[int] = 1024) -> Iterator[List[Dict[str, Any]]]:
    """The lists of :func:`score_lists` in chunks of whole loader batches (at least ``chunk_users`` lists each,
    the last one smaller; ``None``: one chunk), scored batch by batch exactly as :func:`score_lists` scores them."""
    _check_split(split, chunk_users)
    return _scored(model, datamodule, split, device, chunk_users)


@torch.no_grad()
def _scored(model, datamodule, split: str, device: str, chunk_users: Optional[int]) -> Iterator[List[Dict[str, Any]]]:
    datamodule.setup("test" if split == "test" else "validate")
    ranker = getattr(model, "ranker", model)
    keep = getattr(datamodule, "item_features", None)
    if keep is not None and not getattr(ranker, "uses_item_features", True):
        datamodule.item_features = False  # a ranker of ids only: no [B, N, genres] tensors to build
    try:
        loader = datamodule.test_dataloader() if split == "test" else datamodule.val_dataloader()
    finally:
        if keep is not None:
            datamodule.item_features = keep
    out: List[Dict[str, Any]] = []
    for batch in loader:
        batch = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
        s = model(batch).float().cpu()
        mask = batch["mask"].cpu()
        items, rel, groups = batch["items"].cpu(), batch["relevance"].cpu().float(), batch["groups"].cpu()
        sizes = mask.sum(1).tolist()
        prefix = bool(all(not mask[b, n:].any() for b, n in enumerate(sizes)))  # the data module's padding
        for b, n in enumerate(sizes):
            if prefix:  # views of the batch (the same values as boolean indexing, without 4 copies per list)
                out.append({"list_id": int(batch["user"][b]), "scores": s[b, :n], "items": items[b, :n],
                            "relevance": rel[b, :n], "groups": groups[b, :n]})
            else:
                m = mask[b]
                out.append({"list_id": int(batch["user"][b]), "scores": s[b][m], "items": items[b][m],
                            "relevance": rel[b][m], "groups": groups[b][m]})
        if chunk_users is not None and len(out) >= chunk_users:
            yield out
            out = []
    if out:
        yield out

