"""``torchfair evaluate``: exact measures of trained checkpoints on their test lists, as a report to paste.

For each checkpoint (written by ``torchfair fit`` or any :class:`~torchfair.training.FairRankingModule` run) the
ranker and the data settings are read from the checkpoint alone (its hyperparameters and
``datamodule_hyper_parameters``; ``config`` may override the data settings), the test lists are scored, and every
measure the run was validated with (NDCG@10, DIPS with tie weight 0.5 and 0, exposure misallocation, pairwise
accuracy, by default) is computed exactly on every list by :func:`torchfair.evaluation.evaluate_lists`: the mean over
users with a percentile bootstrap interval (users resampled).  Added: each group's exposure share
(:func:`~torchfair.metrics.exposure_share`, RBP(0.9) browsing, as DIPS) and Matched Pair Calibration for the
protected group (Korevaar et al., "Matched Pair Calibration for Ranking Fairness", Definitions 1-3, adjacent pairs,
cluster-robust interval).

With several checkpoints on the same test lists, the report adds each one's difference from the first with a
*paired* bootstrap interval (the same users drawn for both).

Outputs in ``out``: ``report.json`` (everything, machine-readable), ``report.md`` (the table) and
``exposure_by_position.png`` (per position, the share of users whose item there belongs to each group).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..evaluation.report import jsonable, markdown_table

__all__ = ["evaluate_checkpoints", "load_checkpoint", "score_lists", "write_report", "LoadedRun", "rerank_lists",
           "markdown_table"]

#: browsing model of the added exposure-share columns and of MPC's matching (the DIPS default)
REPORT_BROWSING = "rbp:0.9"


@dataclass
class LoadedRun:
    """A checkpoint's ranker (in a :class:`FairRankingModule`), its data module and what the checkpoint records."""

    path: str
    model: Any
    datamodule: Any
    meta: Dict[str, Any]


def _read(path: str) -> Dict[str, Any]:
    if not os.path.isfile(path):
        raise ValueError(f"`--ckpt` {path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a text file, a truncated file, a pickle of something else
        raise ValueError(f"`--ckpt` {path}: not a PyTorch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(ckpt, Mapping) or "state_dict" not in ckpt:
        raise ValueError(f"`--ckpt` {path}: not a Lightning checkpoint (no `state_dict`)")
    if "torchfair" not in ckpt or not any(k.startswith("ranker.") for k in ckpt["state_dict"]):
        raise ValueError(f"`--ckpt` {path}: a checkpoint of another model; expected one written by `torchfair fit` "
                         f"(a FairRankingModule with its `torchfair` record)")
    return ckpt


def _load_yaml(path: str) -> Dict[str, Any]:
    import yaml  # pyyaml comes with pytorch-lightning

    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    if not isinstance(cfg, Mapping):
        raise ValueError(f"`--config` {path}: expected a YAML mapping with `data:` / `model:` sections")
    return dict(cfg)


def load_checkpoint(path: str, config: Optional[str] = None, device: str = "cpu") -> LoadedRun:
    """Rebuild a checkpoint's ranker and data module through Lightning
    (``FairRankingModule.load_from_checkpoint`` and ``MovieLensDataModule.load_from_checkpoint``: the saved
    hyperparameters, with LightningCLI's class_path configs re-instantiated); ``config`` (a ``torchfair fit`` YAML)
    overrides the data settings (``data:``) and the measures (``model: measures:``)."""
    from .datamodule import MovieLensDataModule
    from .module import FairRankingModule

    ckpt = _read(path)  # one clear error for a missing, foreign or truncated file before Lightning reads it
    record = dict(ckpt["torchfair"])  # what FairRankingModule.on_save_checkpoint stored
    hp = dict(ckpt.get("hyper_parameters") or {})
    data_hp = {k: v for k, v in dict(ckpt.get("datamodule_hyper_parameters") or {}).items() if not k.startswith("_")}
    step = {"epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step")}
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
        raise ValueError(f"`--ckpt` {path}: the checkpoint has no data settings (its data module did not save "
                         f"hyperparameters); give them with `--config` (a YAML with a `data:` section)")
    info = hp.get("data_info") or record.get("data_info")
    if not info:
        raise ValueError(f"`--ckpt` {path}: the checkpoint records no `data_info`, so its ranker cannot be rebuilt")
    model_over["data_info"] = info
    if not isinstance(hp.get("ranker", "mf"), str) or "ranker" not in hp:  # a module passed in Python: not saved
        model_over["ranker"] = (record.get("ranker") or {}).get("class_path", "mf")
    try:
        model = FairRankingModule.load_from_checkpoint(path, map_location="cpu", **model_over)
    except RuntimeError as e:  # load_state_dict: weights of another shape
        raise ValueError(f"`--ckpt` {path}: its weights do not fit the ranker "
                         f"{model_over.get('ranker', hp.get('ranker'))!r}: {e}") from None
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


@torch.no_grad()
def score_lists(model, datamodule, split: str = "test", device: str = "cpu") -> List[Dict[str, Any]]:
    """Score every ``split`` list: ``[{"list_id": user, "scores", "relevance", "groups", "items"}]`` (1-D, real
    items only, on the CPU)."""
    datamodule.setup("test" if split == "test" else "validate")
    loader = datamodule.test_dataloader() if split == "test" else datamodule.val_dataloader()
    out: List[Dict[str, Any]] = []
    for batch in loader:
        batch = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
        s = model(batch).float().cpu()
        mask = batch["mask"].cpu()
        for b in range(s.shape[0]):
            m = mask[b]
            out.append({"list_id": int(batch["user"][b]), "scores": s[b][m], "items": batch["items"][b].cpu()[m],
                        "relevance": batch["relevance"][b].cpu()[m].float(), "groups": batch["groups"][b].cpu()[m]})
    return out


def _position_shares(lists: List[Dict[str, Any]], G: int, top: int) -> np.ndarray:
    """``[top, G]``: at each position, the mean membership of the item placed there (over lists that long)."""
    tot = np.zeros((top, G))
    cnt = np.zeros((top, 1))
    for li in lists:
        order = torch.argsort(li["scores"], descending=True, stable=True)[:top]
        g = li["groups"][order]
        memb = torch.nn.functional.one_hot(g.long(), G).double() if not g.is_floating_point() else g.double()
        n = memb.shape[0]
        tot[:n] += memb.numpy()
        cnt[:n] += 1
    return tot / np.maximum(cnt, 1)


def _mpc(lists: List[Dict[str, Any]], G: int, group: int) -> Dict[str, Any]:
    from ..metrics import matched_pair_calibration

    if G < 2 or any(li["groups"].is_floating_point() for li in lists):
        return {"defined": False, "why": "MPC needs hard groups"}
    from ..evaluation.table import _pad  # the padding used by evaluate_lists()

    s, r, g, m = _pad([(li["scores"], li["relevance"], li["groups"]) for li in lists], False, G, torch.device("cpu"))
    res = matched_pair_calibration(s.double(), r.double(), g, group=group, adjacent=True, quantile=1.0, mask=m,
                                   num_groups=G, ci="cluster")
    return {"defined": bool(res.n_pairs > 0), "group": group, "estimate": float(res.estimate),
            "ci_low": float(res.ci_low), "ci_high": float(res.ci_high), "n_pairs": int(res.n_pairs),
            "pairs": "adjacent items of the two groups, every gap (Korevaar et al., §4.1, adjacent variant)"}


def evaluate_checkpoints(ckpts: Sequence[str], out: Optional[str] = None, *, config: Optional[str] = None,
                         names: Optional[Sequence[str]] = None, bootstrap: int = 1000, seed: int = 0,
                         confidence: float = 0.95, device: str = "cpu", mpc_group: Optional[int] = 1,
                         top: int = 50, split: str = "test", measures: Optional[Sequence[str]] = None,
                         rerank: Sequence[str] = (), popularity: bool = False, overwrite: bool = False
                         ) -> Dict[str, Any]:
    """Evaluate checkpoints on their test lists and (with ``out``) write ``report.json``, ``report.md`` and
    ``exposure_by_position.png`` there; returns the report dict.

    ``out`` is checked before any work: an existing file is an error, and so is a directory that already holds a
    ``report.json`` unless ``overwrite=True``.  Default ``names``: a checkpoint inside a Lightning run
    (``.../ml100k_listnet/version_0/checkpoints/last.ckpt``) is named by its run (``ml100k_listnet/version_0``,
    with ``/last`` added when several checkpoints of one run are compared), any other by its file name without
    the extension (with its directory's name when two files have the same name).

    ``measures`` replaces the measures each run was validated with (e.g.
    :data:`~torchfair.training.module.DEFAULT_MEASURES` for a run validated on NDCG only); ``mpc_group=None``
    skips MPC; ``top`` is the depth of the position plot.  ``rerank``: re-ranker specs
    (:func:`torchfair.rerank.get_reranker`); each adds, for every checkpoint, a run ``"<name> + <spec>"`` on the
    re-ranked test lists, paired with the same checkpoint without re-ranking (the re-ranker sees the scores and
    groups, never the test relevance).  ``popularity=True`` adds a run ``"popularity"``: the first checkpoint's
    lists ranked by the items' training rating counts (:class:`~torchfair.training.Popularity`), paired with that
    checkpoint (the baseline a recommender must beat).  The report layer is :mod:`torchfair.evaluation.report`.

    Example::

        report = evaluate_checkpoints(["plain.ckpt", "dips.ckpt"], "reports/", names=["ListNet", "+DIPS"])
        report["models"]["+DIPS"]["measures"]["dips_gap"]["mean"]
    """
    from ..evaluation import evaluate_lists
    from ..evaluation.report import compare
    from ..rerank import get_reranker

    if not ckpts:
        raise ValueError("`ckpts` is empty: give at least one checkpoint")
    if not isinstance(popularity, bool):
        raise ValueError(f"`popularity` must be a bool; got {popularity!r}")
    if split not in ("test", "val"):
        raise ValueError(f"`split` must be 'test' or 'val'; got {split!r}")
    if names is not None and len(names) != len(ckpts):
        raise ValueError(f"`names` has {len(names)} entries for {len(ckpts)} checkpoints")
    if out is not None:
        check_out(out, overwrite)
    rerankers = [get_reranker(r) for r in rerank]  # a bad spec fails before any work
    names = list(names) if names is not None else _default_names(ckpts)
    runs = [load_checkpoint(p, config, device) for p in ckpts]  # fail on a bad file before any work
    tables, lists_of, extra, reference, same = {}, {}, {}, {}, {}
    for name, run in zip(names, runs):
        lists = score_lists(run.model, run.datamodule, split, device)
        info = run.meta["data_info"]
        G = int(info.get("num_groups") or 2)
        group_names = list(info.get("group_names") or [str(g) for g in range(G)])
        asked = list(measures) if measures is not None else list(run.meta["measures"])
        run.meta["measures"] = asked
        asked = asked + [f"exposure_share:browsing={REPORT_BROWSING}"]
        variants = [(name, None, lists)] + [(f"{name} + {r.spec}", r, rerank_lists(lists, r, G)) for r in rerankers]
        for vname, r, vlists in variants:
            tables[vname] = evaluate_lists(vlists, asked, bootstrap=bootstrap, seed=seed, confidence=confidence,
                                     num_groups=G, batch_size=1024, max_batch_elements=2 ** 21,
                                     validate_args=False, group_names=group_names)
            lists_of[vname] = vlists
            extra[vname] = {
                "meta": {**run.meta, "rerank": None if r is None else r.spec}, "group_names": group_names,
                "position_share": _position_shares(vlists, G, top).tolist(),
                "mpc": _mpc(vlists, G, mpc_group) if mpc_group is not None and mpc_group < G else {"defined": False},
            }
            if r is not None:
                reference[vname] = name
                same[vname] = True
        if name != names[0]:
            reference[name] = names[0]
            same[name] = _same_lists(lists_of[names[0]], lists)
    if popularity:
        from .rankers import Popularity

        if "popularity" in tables:
            raise ValueError("`names`: 'popularity' is the name of the popularity run; call a checkpoint otherwise")
        run = runs[0]
        G = int(run.meta["data_info"].get("num_groups") or 2)
        plists = score_lists(Popularity.from_datamodule(run.datamodule), run.datamodule, split, device)
        first = extra[names[0]]
        tables["popularity"] = evaluate_lists(plists, list(run.meta["measures"]) +
                                        [f"exposure_share:browsing={REPORT_BROWSING}"], bootstrap=bootstrap,
                                        seed=seed, confidence=confidence, num_groups=G, batch_size=1024,
                                        max_batch_elements=2 ** 21, validate_args=False,
                                        group_names=first["group_names"])
        extra["popularity"] = {
            "meta": {"checkpoint": "(none)", "epoch": "-", "ranker": "popularity (training rating counts)",
                     "fairness_loss": None, "lam": None, "rerank": None, "measures": run.meta["measures"]},
            "group_names": first["group_names"], "position_share": _position_shares(plists, G, top).tolist(),
            "mpc": _mpc(plists, G, mpc_group) if mpc_group is not None and mpc_group < G else {"defined": False}}
        reference["popularity"], same["popularity"] = names[0], True
    report = compare(tables, reference=reference, same_lists=same, bootstrap=bootstrap, seed=seed,
                     confidence=confidence, extra=extra)
    report.update(split=split, browsing_of_added_columns=REPORT_BROWSING)
    if out is not None:
        write_report(report, out)
    return report


def rerank_lists(lists: List[Dict[str, Any]], reranker, num_groups: int, batch_size: int = 256
                 ) -> List[Dict[str, Any]]:
    """The lists with their scores replaced by the re-ranked order's (:attr:`Reranking.scores`), re-ranked in
    padded batches of ``batch_size`` lists; relevance, groups and items unchanged."""
    out: List[Dict[str, Any]] = []
    for a in range(0, len(lists), batch_size):
        chunk = lists[a:a + batch_size]
        n = max(int(x["scores"].shape[0]) for x in chunk)
        s = torch.zeros(len(chunk), n)
        g = torch.zeros(len(chunk), n, dtype=torch.long)
        m = torch.zeros(len(chunk), n, dtype=torch.bool)
        for i, x in enumerate(chunk):
            k = x["scores"].shape[0]
            s[i, :k], g[i, :k], m[i, :k] = x["scores"], x["groups"], True
        new = reranker(s, None, g, m, num_groups=num_groups).scores
        for i, x in enumerate(chunk):
            out.append({**x, "scores": new[i, :x["scores"].shape[0]].clone()})
    return out


def check_out(out: str, overwrite: bool = False, option: str = "`out`", hint: str = "overwrite=True") -> None:
    """``out`` can take a report: not an existing file, and not a directory holding a ``report.json`` (unless
    ``overwrite``).  Raises ValueError naming ``option``."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"{option}: {out} is an existing file; give a directory for the report files")
    if not overwrite and os.path.exists(os.path.join(out, "report.json")):
        raise ValueError(f"{option}: {out} already holds a report (report.json); give another directory, or "
                         f"{hint} to replace it")


def _run_name(path: str) -> Optional[str]:
    """``.../ml100k_listnet/version_0/checkpoints/last.ckpt`` -> ``ml100k_listnet/version_0`` (a Lightning run's
    directory, with its logger's name when it is a ``version_N``); None for a checkpoint outside a run."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.basename(parent) != "checkpoints":
        return None
    run = os.path.dirname(parent)
    name = os.path.basename(run)
    if not name:
        return None
    if re.fullmatch(r"version_\d+", name) and os.path.basename(os.path.dirname(run)):
        name = f"{os.path.basename(os.path.dirname(run))}/{name}"
    return name


def _default_names(ckpts: Sequence[str]) -> List[str]:
    """Unique, readable names: the run (``ml100k_listnet/version_0``) for a checkpoint inside a Lightning run,
    ``<run>/<file>`` when one run gives several; else the file name without its extension (``<dir>/<file>`` when
    two files have the same name)."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in ckpts]
    runs = [_run_name(p) for p in ckpts]
    names: List[str] = []
    for p, stem, run in zip(ckpts, stems, runs):
        if run is not None:
            n = run if runs.count(run) == 1 else f"{run}/{stem}"
        else:
            parent = os.path.basename(os.path.dirname(os.path.abspath(p)))
            n = stem if stem not in names and stems.count(stem) == 1 else f"{parent}/{stem}"
        while n in names:
            n += "'"
        names.append(n)
    return names


def _same_lists(a: List[Dict[str, Any]], b: List[Dict[str, Any]]) -> bool:
    return len(a) == len(b) and all(x["list_id"] == y["list_id"] and torch.equal(x["items"], y["items"])
                                    and torch.equal(x["relevance"], y["relevance"]) for x, y in zip(a, b))


def write_report(report: Mapping[str, Any], out: str) -> Tuple[str, str, str]:
    """Write ``report.json``, ``report.md`` and ``exposure_by_position.png`` into ``out``; returns their paths."""
    os.makedirs(out, exist_ok=True)
    pj, pm, pp = (os.path.join(out, f) for f in ("report.json", "report.md", "exposure_by_position.png"))
    with open(pj, "w") as f:
        json.dump(jsonable(report), f, indent=2)
    names = list(report["order"])
    md = [f"# torchfair evaluate: {report['split']} lists", "",
          f"Mean over users with {int(report['confidence'] * 100)}% bootstrap intervals ({report['bootstrap']} "
          f"replicates, seed {report['seed']}); differences are paired (same users).  Columns: DIPS M[g, h] "
          "(`dips_AB`: dissatisfaction of group A caused by B; `_gap` = AB - BA; `dips_t0`: tie weight 0), "
          "exposure misallocation delta_g (`_l1` = ||delta||_1), pairwise accuracy (`_inter`, `_intra`), "
          f"`exposure_share` under {report['browsing_of_added_columns']}.", "", markdown_table(report), ""]
    for n in names:
        m = report["models"][n]
        meta = m["meta"]
        groups = ", ".join(f"{chr(65 + g)} = {gn}" for g, gn in enumerate(m["group_names"])) \
            if len(m["group_names"]) <= 26 else f"{len(m['group_names'])} groups"
        fl = meta.get("fairness_loss") or {}
        md.append(f"- **{n}**: `{meta['checkpoint']}` (epoch {meta['epoch']}); ranker `{meta['ranker']}`; "
                  f"fairness loss {fl.get('repr', 'none')} (lambda {meta.get('lam')}); "
                  f"{'re-ranked by `' + meta['rerank'] + '`; ' if meta.get('rerank') else ''}{m['n_lists']} lists; "
                  f"groups {groups}.")
        mp = m["mpc"]
        if mp.get("defined"):
            md.append(f"  MPC(group {mp['group']}) = {mp['estimate']:+.4f} [{mp['ci_low']:+.4f}, "
                      f"{mp['ci_high']:+.4f}] over {mp['n_pairs']} adjacent pairs (> 0: the group is under-ranked).")
    with open(pm, "w") as f:
        f.write("\n".join(md) + "\n")
    _plot(report, pp)
    return pj, pm, pp


def _plot(report: Mapping[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["order"])
    gnames = report["models"][names[0]]["group_names"]
    G = len(gnames)
    show = range(G) if G <= 6 else range(min(G, 6))
    fig, axes = plt.subplots(1, len(list(show)), figsize=(4.2 * len(list(show)), 3.4), squeeze=False)
    for ax, g in zip(axes[0], show):
        for n in names:
            share = np.asarray(report["models"][n]["position_share"])
            ax.plot(np.arange(1, share.shape[0] + 1), share[:, g], label=n)
        ax.set_title(f"group {gnames[g]}")
        ax.set_xlabel("position (1 = top)")
        ax.set_ylabel("share of users")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Group of the item at each position ({report['split']} lists)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
