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
``exposure_by_position.png`` (per position, the share of users whose item there belongs to each group), and with a
user sample ``eval_users.txt`` (the sampled users' raw ids, one per line).

Scale: ``users=N`` evaluates a seeded sample of N users (the data module's ``eval_users``), recorded in
``report["users"]`` (size, seed, how many users it was drawn from, SHA-256 of the ids file).  When the lists are
too many to hold (``stream=None``: more than 2**24 list entries in all, e.g. 2 000 of ML-20M's users x 26 744 items),
they are scored, measured and dropped chunk by chunk (:class:`~torchfair.evaluation.table.StreamingEvaluation`):
only the per-list values, the position counts and MPC's sums are kept, and the means, bootstrap intervals and
position shares are bit-identical to the eager path's (MPC equal up to rounding: its cluster-robust variance is
summed per chunk).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..evaluation.report import jsonable, markdown_table

__all__ = ["evaluate_checkpoints", "load_checkpoint", "score_lists", "iter_score_lists", "write_report", "LoadedRun",
           "rerank_lists", "markdown_table"]

#: browsing model of the added exposure-share columns and of MPC's matching (the DIPS default)
REPORT_BROWSING = "rbp:0.9"
#: ``stream=None`` streams when the lists hold more entries than this (2**24: about 400 MB of list tensors, and
#: the eager MPC pads them all at once in float64); ML-100K (943 x 1 682) stays eager, ML-1M and up stream
STREAM_ENTRIES = 2 ** 24
#: name of the ids file written next to the report for a user sample
USERS_FILE = "eval_users.txt"


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
        raise ValueError(f"`--ckpt` {path}: the checkpoint has no data settings (its data module did not save "
                         f"hyperparameters); give them with `--config` (a YAML with a `data:` section)")
    if data_overrides:
        data_over.update(data_overrides)
    info = hp.get("data_info") or record.get("data_info")
    if not info:
        raise ValueError(f"`--ckpt` {path}: the checkpoint records no `data_info`, so its ranker cannot be rebuilt")
    model_over["data_info"] = info
    if not isinstance(hp.get("ranker", "mf"), str) or "ranker" not in hp:  # a module passed in Python: not saved
        model_over["ranker"] = (record.get("ranker") or {}).get("class_path", "mf")
    try:
        # not strict: a loss passed as a Python object is not a hyperparameter, so the rebuilt module lacks the
        # loss's own state (e.g. the regulariser's schedule); the ranker's weights are checked below
        model = FairRankingModule.load_from_checkpoint(path, map_location="cpu", strict=False, **model_over)
    except RuntimeError as e:  # load_state_dict: weights of another shape
        raise ValueError(f"`--ckpt` {path}: its weights do not fit the ranker "
                         f"{model_over.get('ranker', hp.get('ranker'))!r}: {e}") from None
    if {f"ranker.{k}" for k in model.ranker.state_dict()} != ranker_keys:
        raise ValueError(f"`--ckpt` {path}: its weights do not fit the ranker "
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


def score_lists(model, datamodule, split: str = "test", device: str = "cpu") -> List[Dict[str, Any]]:
    """Score every ``split`` list: ``[{"list_id": user, "scores", "relevance", "groups", "items"}]`` (1-D, real
    items only, on the CPU)."""
    return [li for chunk in iter_score_lists(model, datamodule, split, device, chunk_users=None) for li in chunk]


@torch.no_grad()
def iter_score_lists(model, datamodule, split: str = "test", device: str = "cpu",
                     chunk_users: Optional[int] = 1024) -> Iterator[List[Dict[str, Any]]]:
    """The lists of :func:`score_lists` in chunks of whole loader batches (at least ``chunk_users`` lists each,
    the last one smaller; ``None``: one chunk), scored batch by batch exactly as :func:`score_lists` scores them."""
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


def _top_order(scores: Tensor, top: int) -> Tensor:
    """``torch.argsort(scores, descending=True, stable=True)[:top]`` without sorting a whole full-catalogue list:
    the items above the ``top``-th largest score, then the earliest of those equal to it, ordered by score with
    ties by index (the stable sort's order)."""
    n = scores.shape[0]
    if n <= 4 * top or bool(torch.isnan(scores).any()):
        return torch.argsort(scores, descending=True, stable=True)[:top]
    v = torch.topk(scores, top).values[-1]
    above = torch.nonzero(scores > v).squeeze(1)
    tied = torch.nonzero(scores == v).squeeze(1)[:top - above.numel()]
    cand = torch.cat([above, tied]).sort().values  # index order, so the stable sort below breaks ties by index
    return cand[torch.argsort(scores[cand], descending=True, stable=True)]


class _PositionShares:
    """Running sums of :func:`_position_shares` (the same additions in the same order, chunk after chunk)."""

    def __init__(self, G: int, top: int):
        self.G, self.tot, self.cnt = G, np.zeros((top, G)), np.zeros((top, 1))

    def add(self, lists: List[Dict[str, Any]]) -> None:
        top = self.tot.shape[0]
        for li in lists:
            order = _top_order(li["scores"], top)
            g = li["groups"][order]
            memb = torch.nn.functional.one_hot(g.long(), self.G).double() if not g.is_floating_point() else g.double()
            n = memb.shape[0]
            self.tot[:n] += memb.numpy()
            self.cnt[:n] += 1

    def value(self) -> np.ndarray:
        return self.tot / np.maximum(self.cnt, 1)


def _position_shares(lists: List[Dict[str, Any]], G: int, top: int) -> np.ndarray:
    """``[top, G]``: at each position, the mean membership of the item placed there (over lists that long)."""
    acc = _PositionShares(G, top)
    acc.add(lists)
    return acc.value()


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


def _adjacent_pairs(s: Tensor, y: Tensor, g: Tensor, m: Tensor, group: int, G: int):
    """``(query, item_g, item_other, diff)`` of the matched pairs :func:`_mpc` takes (``matched_pairs(...,
    adjacent=True, quantile=1.0)`` under the hard order: the adjacent candidates, every gap kept), from the
    candidates' own function, without the validation and the position pass matched_pairs adds."""
    from ..metrics.calibration import _adjacent_candidates

    from ..orderings import Hard

    known = m & (g >= 0) & (g < G)
    in_g = known & (g == group)
    # float32 scores: the same order and ties; the order from Hard()'s compiled sort where it runs
    q, i, j, gap = _adjacent_candidates(s, m, in_g, known & ~in_g, Hard()(s, m).order)
    if gap.numel():  # quantile 1: the threshold is the largest gap, which keeps every pair but NaN gaps
        keep = gap <= torch.sort(gap).values[-1]
        q, i, j = q[keep], i[keep], j[keep]
    return q, i, j, y[q, i].double() - y[q, j].double()  # the outcome differences in float64, as _mpc has them


class _MPCStream:
    """:func:`_mpc` from lists seen chunk by chunk.  Its clusters (the items of one list, Korevaar et al. §4.1.4,
    :func:`~torchfair.metrics.mpc_cluster_variance` without global item ids) never span two lists, so the pooled
    estimate and the sandwich variance follow from sums kept per chunk: with ``A_a``, ``B_a`` the sums of ``w d``
    and ``w`` over the pairs holding item ``a`` and ``theta`` the estimate,
    ``sum_a (A_a - theta B_a)^2 - sum_p w_p^2 (d_p - theta)^2`` (each matched pair is its own dyad).  Equal to the
    one-batch value up to rounding."""

    def __init__(self, G: int, group: int, batch: int = 128):
        self.G, self.group, self.batch = G, group, batch
        self.sums = np.zeros(8)  # SW, SWD, SAA, SAB, SBB, PAA, PAB, PBB
        self.n_pairs = 0
        self.soft = False

    def add(self, lists: List[Dict[str, Any]]) -> None:
        from ..evaluation.table import _pad

        if self.G < 2 or any(li["groups"].is_floating_point() for li in lists):
            self.soft = True
            return
        for a in range(0, len(lists), self.batch):
            part = lists[a:a + self.batch]
            s, r, g, m = _pad([(li["scores"], li["relevance"], li["groups"]) for li in part], False, self.G,
                              torch.device("cpu"))
            q, i, j, d = _adjacent_pairs(s, r, g, m, self.group, self.G)
            if d.numel() == 0:
                continue
            w = torch.ones_like(d)  # matched_pairs' weight without a browsing model
            wd = w * d
            N = s.shape[1]
            sums = [w.sum(), wd.sum()]
            saa = sab = sbb = torch.zeros((), dtype=torch.float64)
            for side in (i, j):  # an item is on one side of its pairs only
                _, inv = torch.unique(q * N + side, return_inverse=True)
                A = torch.zeros(int(inv.max()) + 1, dtype=torch.float64).index_add_(0, inv, wd)
                B = torch.zeros(int(inv.max()) + 1, dtype=torch.float64).index_add_(0, inv, w)
                saa, sab, sbb = saa + (A * A).sum(), sab + (A * B).sum(), sbb + (B * B).sum()
            sums += [saa, sab, sbb, (wd * wd).sum(), (w * wd).sum(), (w * w).sum()]
            self.sums += np.array([float(x) for x in sums])
            self.n_pairs += int(d.numel())

    def value(self) -> Dict[str, Any]:
        if self.soft:
            return {"defined": False, "why": "MPC needs hard groups"}
        SW, SWD, SAA, SAB, SBB, PAA, PAB, PBB = self.sums.tolist()
        if not SW > 0:
            return {"defined": False, "group": self.group, "estimate": 0.0, "ci_low": 0.0, "ci_high": 0.0,
                    "n_pairs": self.n_pairs}
        theta = SWD / SW
        meat = (SAA - 2 * theta * SAB + theta ** 2 * SBB) - (PAA - 2 * theta * PAB + theta ** 2 * PBB)
        se = math.sqrt(max(meat, 0.0) / (SW * SW))
        z = math.sqrt(2.0) * float(torch.erfinv(torch.tensor(0.95, dtype=torch.float64)))
        return {"defined": bool(self.n_pairs > 0), "group": self.group, "estimate": theta, "ci_low": theta - z * se,
                "ci_high": theta + z * se, "n_pairs": self.n_pairs,
                "pairs": "adjacent items of the two groups, every gap (Korevaar et al., §4.1, adjacent variant)",
                "streamed": "pooled from per-chunk sums (equal to the one-batch value up to rounding)"}


def evaluate_checkpoints(ckpts: Sequence[str], out: Optional[str] = None, *, config: Optional[str] = None,
                         names: Optional[Sequence[str]] = None, bootstrap: int = 1000, seed: int = 0,
                         confidence: float = 0.95, device: str = "cpu", mpc_group: Optional[int] = 1,
                         top: int = 50, split: str = "test", measures: Optional[Sequence[str]] = None,
                         rerank: Sequence[str] = (), popularity: bool = False, overwrite: bool = False,
                         users: Optional[int] = None, users_seed: int = 0, stream: Optional[bool] = None,
                         chunk_users: int = 512) -> Dict[str, Any]:
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

    ``users``: evaluate a sample of this many users (of those with ``split`` lists), drawn with ``users_seed``
    (:func:`~torchfair.training.datamodule.sample_users`; ``None``: every user, whatever sample the run was
    validated on); recorded in ``report["users"]`` and, with ``out``, as the ids file ``eval_users.txt``.
    ``stream``: score and measure the lists ``chunk_users`` at a time, keeping only per-list values (``None``: when
    the lists hold more than :data:`STREAM_ENTRIES` entries); the numbers are those of the eager path (module doc).

    Example::

        report = evaluate_checkpoints(["plain.ckpt", "dips.ckpt"], "reports/", names=["ListNet", "+DIPS"])
        report["models"]["+DIPS"]["measures"]["dips_gap"]["mean"]
    """
    from ..evaluation.report import compare
    from ..rerank import get_reranker
    from .._validation import check_int

    if not ckpts:
        raise ValueError("`ckpts` is empty: give at least one checkpoint")
    if not isinstance(popularity, bool):
        raise ValueError(f"`popularity` must be a bool; got {popularity!r}")
    if split not in ("test", "val"):
        raise ValueError(f"`split` must be 'test' or 'val'; got {split!r}")
    if names is not None and len(names) != len(ckpts):
        raise ValueError(f"`names` has {len(names)} entries for {len(ckpts)} checkpoints")
    if users is not None:
        check_int(users, "users", 1)
    check_int(users_seed, "users_seed", 0)
    check_int(chunk_users, "chunk_users", 1)
    if stream is not None and not isinstance(stream, bool):
        raise ValueError(f"`stream` must be a bool or None; got {stream!r}")
    if out is not None:
        check_out(out, overwrite)
    rerankers = [get_reranker(r) for r in rerank]  # a bad spec fails before any work
    names = list(names) if names is not None else _default_names(ckpts)
    if popularity and "popularity" in names:
        raise ValueError("`names`: 'popularity' is the name of the popularity run; call a checkpoint otherwise")
    sample = {"eval_users": users, "eval_users_seed": users_seed if users is not None else None}
    runs = [load_checkpoint(p, config, device, data_overrides=sample) for p in ckpts]  # bad files fail first
    tables, extra, reference, same, digests = {}, {}, {}, {}, {}
    streamed = []
    for k, (name, run) in enumerate(zip(names, runs)):
        info = run.meta["data_info"]
        G = int(info.get("num_groups") or 2)
        group_names = list(info.get("group_names") or [str(g) for g in range(G)])
        asked = list(measures) if measures is not None else list(run.meta["measures"])
        run.meta["measures"] = asked
        asked = asked + [f"exposure_share:browsing={REPORT_BROWSING}"]
        variants = [(name, None)] + [(f"{name} + {r.spec}", r) for r in rerankers]
        if popularity and k == 0:
            variants.append(("popularity", "popularity"))
        dm = run.datamodule
        dm.setup("test" if split == "test" else "validate")
        ds = dm.test_dataset if split == "test" else dm.val_dataset
        lengths = ds.lengths()
        on = stream if stream is not None else int(lengths.sum()) > STREAM_ENTRIES
        streamed.append(bool(on))
        pop = None
        if popularity and k == 0:
            from .rankers import Popularity
            pop = Popularity.from_datamodule(dm)
        mpc_on = mpc_group is not None and mpc_group < G
        res = _evaluate_run(run, variants, asked, G, group_names, split, device, pop, lengths if on else None,
                            chunk_users, bootstrap=bootstrap, seed=seed, confidence=confidence, top=top,
                            mpc_group=mpc_group if mpc_on else None, digest=len(runs) > 1)
        for vname, r in variants:
            table, shares, mpc = res["variants"][vname]
            tables[vname] = table
            if r == "popularity":
                meta = {"checkpoint": "(none)", "epoch": "-", "ranker": "popularity (training rating counts)",
                        "fairness_loss": None, "lam": None, "rerank": None, "measures": run.meta["measures"]}
            else:
                meta = {**run.meta, "rerank": None if r is None else r.spec}
            extra[vname] = {"meta": meta, "group_names": group_names, "position_share": shares.tolist(),
                            "mpc": mpc if mpc_on else {"defined": False}}
            if r is not None:
                reference[vname], same[vname] = name, True
        digests[name] = res["digest"]
        if name != names[0]:
            reference[name] = names[0]
            same[name] = digests[name] == digests[names[0]]
    order = [v for n, run in zip(names, runs) for v in [n] + [f"{n} + {r.spec}" for r in rerankers]] + \
        (["popularity"] if popularity else [])
    tables = {v: tables[v] for v in order}
    report = compare(tables, reference=reference, same_lists=same, bootstrap=bootstrap, seed=seed,
                     confidence=confidence, extra=extra)
    report.update(split=split, browsing_of_added_columns=REPORT_BROWSING)
    report["users"] = _users_record(runs[0].datamodule, split, users, users_seed, streamed, chunk_users,
                                    USERS_FILE if out is not None and users is not None else None)
    if out is not None:
        write_report(report, out)
        if users is not None:
            ids = np.sort(runs[0].datamodule.eval_user_ids(split))
            with open(os.path.join(out, USERS_FILE), "w") as f:
                f.write("".join(f"{int(u)}\n" for u in ids))
    return report


def _users_record(dm, split: str, users: Optional[int], users_seed: int, streamed: List[bool], chunk_users: int,
                  ids_file: Optional[str]) -> Dict[str, Any]:
    """What ``report["users"]`` records: which users were evaluated (and how)."""
    from .datamodule import user_ids_sha256

    ids = dm.eval_user_ids(split)
    ds = dm.test_dataset if split == "test" else dm.val_dataset
    rec = {"sample": users, "seed": users_seed if users is not None else None, "n_lists": int(len(ids)),
           "of": int(len(ds.target.users_with_rows())), "sha256": user_ids_sha256(ids), "ids_file": ids_file,
           "sha256_of": "the users' raw ids in increasing order, one per line (the bytes of the ids file)",
           "streamed": streamed, "chunk_users": chunk_users if any(streamed) else None}
    return rec


def _lists_digest(h, lists: List[Dict[str, Any]]) -> None:
    for li in lists:
        h.update(int(li["list_id"]).to_bytes(8, "little", signed=True))
        h.update(li["items"].numpy().tobytes())
        h.update(li["relevance"].numpy().tobytes())


def _evaluate_run(run, variants, asked, G: int, group_names, split: str, device: str, pop,
                  lengths: Optional[np.ndarray], chunk_users: int, *, bootstrap: int, seed: int, confidence: float,
                  top: int, mpc_group: Optional[int], digest: bool = True) -> Dict[str, Any]:
    """Tables, position shares and MPC of a run's variants (the run itself, its re-rankings, popularity): eagerly
    (``lengths`` None: every list held, :func:`evaluate_lists`) or streamed chunk by chunk; ``digest``: hash the
    lists (ids, items, relevance) to tell whether two checkpoints were evaluated on the same lists (44 GB of bytes
    for every ML-20M user: only done when there is another checkpoint to compare with)."""
    from ..evaluation import evaluate_lists
    from ..evaluation.table import StreamingEvaluation

    kw = dict(bootstrap=bootstrap, seed=seed, confidence=confidence, num_groups=G, batch_size=1024,
              max_batch_elements=2 ** 21, validate_args=False, group_names=group_names)
    h = hashlib.sha256()
    out: Dict[str, Any] = {}

    def variant_lists(lists, r):
        if r is None:
            return lists
        if r == "popularity":  # the popularity ranker's scores: its training counts gathered at the items
            return [{**li, "scores": pop.counts[li["items"]]} for li in lists]
        return rerank_lists(lists, r, G)

    if lengths is None:
        lists = score_lists(run.model, run.datamodule, split, device)
        if digest:
            _lists_digest(h, lists)
        for vname, r in variants:
            vl = variant_lists(lists, r)
            table = evaluate_lists(vl, asked, **kw)
            mpc = _mpc(vl, G, mpc_group) if mpc_group is not None else {"defined": False}
            out[vname] = (table, _position_shares(vl, G, top), mpc)
        return {"variants": out, "digest": h.hexdigest()}
    streams = {v: StreamingEvaluation(asked, lengths=lengths, **kw) for v, _ in variants}
    shares = {v: _PositionShares(G, top) for v, _ in variants}
    mpcs = {v: _MPCStream(G, mpc_group) for v, _ in variants} if mpc_group is not None else {}
    for lists in iter_score_lists(run.model, run.datamodule, split, device, chunk_users):
        if digest:
            _lists_digest(h, lists)
        for vname, r in variants:
            vl = variant_lists(lists, r)
            streams[vname].add(vl)
            shares[vname].add(vl)
            if vname in mpcs:
                mpcs[vname].add(vl)
            del vl
        del lists
    for vname, _ in variants:
        out[vname] = (streams[vname].result(), shares[vname].value(),
                      mpcs[vname].value() if vname in mpcs else {"defined": False})
    return {"variants": out, "digest": h.hexdigest()}


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
