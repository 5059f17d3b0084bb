"""Agreement between fairness metrics over recommenders on MovieLens-100K (Raj & Ekstrand, SIGIR 2022, §3).

Raj & Ekstrand compare fair-ranking metrics empirically by scoring several systems with every metric and computing
Kendall's tau between the orderings of the systems that two metrics give, each metric oriented so that "fairer"
ranks first (their Fig. 1, tau-c within each experiment).  This script does the same with torchfair's own training
stack and exact evaluator:

* systems: popularity (training rating counts), random scores, biased MF trained with ListNet, a two-tower model
  (ListNet), and MF trained with ListNet + lambda * DIPS loss and ListNet + lambda * exposure misallocation loss
  (target EE), both on SoftRank(``--temperature``), each for two lambdas; all on 1 CPU thread for a few epochs, the trained ones
  as the trials of the sweep file ``configs/sweep_metric_agreement.yaml`` (``--runs``; a second run reuses them),
  evaluated from their checkpoints;
* data: ML-100K through :class:`~torchfair.training.MovieLensDataModule` (leave-last-10-out, popularity groups:
  head = the most-rated items holding half of the training ratings, tail = the rest, tail = the protected group
  id 1); the test lists are the full-catalogue test lists of all users;
* metrics (:data:`METRICS`): the measures of Raj & Ekstrand's Table 1 that torchfair implements -- PreF_KL, AWRF_ND
  (equal and catalogue targets), FAIR, logDP, logEUR, logRUR, IAA, EEL/EED/EER, PAIR (inter-group pairwise
  accuracy gap) -- plus the DIPS gap and the exposure misallocation ||delta||_1, and NDCG@10 as utility; every
  value comes from :func:`torchfair.evaluation.evaluate_lists` (the evaluator of ``torchfair evaluate``) per list, and the
  system's value is the mean over lists (of ``|value|`` for the signed gaps, of ``|log ratio|`` for the ratios);
* agreement: :func:`kendall_tau` (tau-b, ``scipy.stats.kendalltau``) between the oriented values of every
  pair of metrics.

``--fast`` runs the same pipeline on the synthetic MovieLens variant (60 users, 80 items) for 2 epochs in a few
seconds.  ``python experiments/metric_agreement.py --help``.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _sweep  # noqa: E402 - the shared sweep helpers (experiments/_sweep.py)

ROOT = _sweep.ROOT

#: the top-N cut-off of the prefix metrics (PreF, FAIR), which are given each list's top N items: Raj & Ekstrand
#: score top-N recommendation lists, and on the whole 1672-item lists FAIR costs O(N^2) memory (~45 MB per list)
#: and PreF's exact normaliser ~0.1 s per list
PREFIX_K = 100


@dataclass(frozen=True)
class MetricSpec:
    """One row / column of the agreement matrix.

    ``request``: the measure request given to :func:`torchfair.evaluation.evaluate_lists` (a string, or a builder
    ``f(catalogue_share) -> MeasureRequest`` for options that are tensors); ``column``: the evaluator column read;
    ``transform``: ``"none"``, ``"abs"`` (a signed gap, 0 = fair) or ``"abslog"`` (a ratio, 1 = fair: ``|log|``) or ``"log"`` (signed),
    applied per list before the mean over lists; ``direction``: +1 if larger (after the transform) is fairer /
    better, -1 if smaller is; ``top``: evaluate on each list's top ``top`` items only (by score) instead of the
    whole list.
    """

    key: str
    label: str
    request: Any
    column: str
    transform: str
    direction: int
    family: str
    note: str = ""
    top: Optional[int] = None


def _awrf_catalogue(share):
    from torchfair.evaluation import MeasureRequest

    import torch

    return MeasureRequest("awrf", {"protected": 1, "target": torch.as_tensor(share, dtype=torch.float32)},
                          "awrf_cat")


def _pref_catalogue(share):
    from torchfair.evaluation import MeasureRequest

    import torch

    return MeasureRequest("pref", {"target": torch.as_tensor(share, dtype=torch.float32)}, "pref")


def _fair_catalogue(share):
    from torchfair.evaluation import MeasureRequest

    return MeasureRequest("fair", {"protected": 1, "target": float(share[1])}, "fair")


#: the metrics compared (direction: +1 larger is fairer, -1 smaller is fairer)
METRICS: List[MetricSpec] = [
    MetricSpec("ndcg", "NDCG@10", "ndcg@10", "ndcg@10", "none", +1, "utility", "utility, higher is better"),
    MetricSpec("pref", "PreF_KL", _pref_catalogue, "pref", "none", -1, "prefix",
               f"KL of prefix group shares (cut-offs 10, 20, .. {PREFIX_K}) from the catalogue composition",
               top=PREFIX_K),
    MetricSpec("awrf_eq", "AWRF_equal", "awrf:protected=1,label=awrf_eq", "awrf_eq", "none", -1, "exposure",
               "|tail exposure share - 1/2|, Geometric(0.5) attention"),
    MetricSpec("awrf_cat", "AWRF_catalogue", _awrf_catalogue, "awrf_cat", "none", -1, "exposure",
               "|tail exposure share - tail share of the catalogue|, Geometric(0.5) attention"),
    MetricSpec("fair", "FAIR", _fair_catalogue, "fair", "none", +1, "prefix",
               f"mean binomial CDF of the tail count over prefixes 1..{PREFIX_K}, p = the catalogue's tail share",
               top=PREFIX_K),
    MetricSpec("logdp", "|logDP|", "dp", "dp", "abslog", -1, "ratio",
               "|log| of the tail-over-head mean exposure ratio, logarithmic attention"),
    MetricSpec("logeur", "|logEUR|", "eur", "eur", "abslog", -1, "ratio",
               "|log| of the tail-over-head exposure-per-relevance ratio"),
    MetricSpec("logrur", "|logRUR|", "rur", "rur", "abslog", -1, "ratio",
               "|log| of the tail-over-head realised-utility ratio"),
    MetricSpec("iaa", "IAA", "iaa", "iaa", "none", -1, "exposure-relevance",
               "per list (not amortised): L1 between group attention and group relevance shares"),
    MetricSpec("eel", "EEL", "expected_exposure", "expected_exposure_loss", "none", -1, "exposure-relevance",
               "group expected-exposure loss, RBP(0.9)"),
    MetricSpec("eed", "EED", "expected_exposure", "expected_exposure_disparity", "none", -1, "exposure",
               "group expected-exposure disparity ||eps||^2, RBP(0.9)"),
    MetricSpec("eer", "EER", "expected_exposure", "expected_exposure_relevance", "none", +1, "exposure-relevance",
               "group expected-exposure relevance eps . eps*, RBP(0.9) (higher = fairer)"),
    MetricSpec("pair", "|PAIR|", "pairwise_accuracy", "pairwise_accuracy_inter", "abs", -1, "pairwise",
               "|InterAcc| = |A(head > tail) - A(tail > head)|, whole list"),
    MetricSpec("dips", "|DIPS gap|", "dips", "dips_gap", "abs", -1, "pairwise",
               "|M_AB - M_BA|, tie weight 0.5, default browsing"),
    MetricSpec("misalloc", "misallocation", "exposure_misallocation", "exposure_misallocation_l1", "none", -1,
               "exposure-relevance", "||delta||_1, target: expected exposure of a relevance-sorted policy"),
]


@dataclass
class SystemSpec:
    """A system: ``kind`` is ``"popularity"``, ``"random"`` or ``"trained"`` (``ranker``, ``fairness``, ``lam``)."""

    name: str
    kind: str
    ranker: str = "mf"
    fairness: Optional[str] = None
    lam: float = 0.0
    ranker_args: Dict[str, Any] = field(default_factory=dict)


def default_systems(lams: Sequence[float], dim: int) -> List[SystemSpec]:
    """Popularity, random, MF-ListNet, two-tower, and MF + lambda * (DIPS | misallocation) for each ``lams``."""
    systems = [SystemSpec("Popularity", "popularity"), SystemSpec("Random", "random"),
               SystemSpec("MF ListNet", "trained", "mf", ranker_args={"dim": dim}),
               SystemSpec("Two-tower ListNet", "trained", "two_tower", ranker_args={"dim": dim})]
    for lam in lams:
        systems.append(SystemSpec(f"MF + {lam:g}·DIPS", "trained", "mf", "dips", lam, {"dim": dim}))
    for lam in lams:
        systems.append(SystemSpec(f"MF + {lam:g}·misalloc", "trained", "mf", "misallocation", lam, {"dim": dim}))
    return systems


# ------------------------------------------------------------------------------------------------ Kendall's tau
def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b between two score vectors: ``scipy.stats.kendalltau`` (variant ``"b"``, Kendall 1945),
    after checking the input.

    ``tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2))`` with ``C``/``D`` the concordant / discordant pairs, ``n0 =
    n(n-1)/2``, ``n1``/``n2`` the pairs tied in ``x`` / ``y``.  Without ties it equals tau-a and Raj & Ekstrand's
    tau-c (for ``n`` systems tau-c's ``m = n``).  NaN when either vector is constant.  ``x``, ``y``: 1-D, same
    length >= 2, finite.

    Example::

        >>> kendall_tau([1, 2, 3], [1, 3, 2])
        0.3333333333333333
    """
    from scipy.stats import kendalltau

    xs = [float(v) for v in x]
    ys = [float(v) for v in y]
    if len(xs) != len(ys):
        raise ValueError(f"`x` and `y` must have the same length; got {len(xs)} and {len(ys)}")
    if len(xs) < 2:
        raise ValueError(f"`x` needs at least 2 values; got {len(xs)}")
    if not all(math.isfinite(v) for v in xs + ys):
        raise ValueError("`x` and `y` must be finite")
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return float("nan")
    return float(kendalltau(xs, ys, variant="b").statistic)


def tau_matrix(values: Dict[str, Sequence[float]], directions: Dict[str, int]) -> Tuple[List[str], List[List[float]]]:
    """``(keys, tau)``: tau-b between every pair of metrics' system orderings, each metric oriented by its
    ``directions`` entry (+1 larger is fairer, -1 smaller is) so that tau > 0 means the two agree on which systems are
    fairer.  ``values[key]``: one value per system (same system order for every key); metrics with a non-finite value
    get NaN rows.  Symmetric, unit diagonal where defined."""
    if not values:
        raise ValueError("`values` is empty")
    keys = list(values)
    lens = {len(v) for v in values.values()}
    if len(lens) != 1:
        raise ValueError(f"`values` must give every metric the same number of systems; got lengths {sorted(lens)}")
    for k in keys:
        if directions.get(k) not in (1, -1):
            raise ValueError(f"`directions` must map {k!r} to +1 or -1; got {directions.get(k)!r}")
    oriented = {k: [directions[k] * float(v) for v in values[k]] for k in keys}
    ok = {k: all(math.isfinite(v) for v in oriented[k]) for k in keys}
    tau = [[float("nan")] * len(keys) for _ in keys]
    for a, ka in enumerate(keys):
        for b in range(a, len(keys)):
            kb = keys[b]
            if ok[ka] and ok[kb]:
                t = kendall_tau(oriented[ka], oriented[kb])
                tau[a][b] = tau[b][a] = t
    return keys, tau


# ------------------------------------------------------------------------------------------------ systems
def _popularity_ranker(dm):
    from torchfair.training import Popularity

    return Popularity.from_datamodule(dm)


def _random_ranker(dm, seed: int):
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    table = torch.rand(dm.num_users, dm.num_items, generator=g)  # a fixed random score per (user, item)

    class RandomScores(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", table)

        def forward(self, batch):
            return self.table[batch["user"][:, None], batch["items"]]

    return RandomScores()


#: the sweep file of the trained systems (a system's ``fairness`` is its ``system`` variant: mf_dips, mf_misalloc)
SWEEP = ROOT / "configs" / "sweep_metric_agreement.yaml"


def system_variant(spec: SystemSpec) -> str:
    """The ``system`` variant of the sweep file that trains ``spec``."""
    if spec.fairness is None:
        return spec.ranker
    return f"{spec.ranker}_{'misalloc' if spec.fairness == 'misallocation' else spec.fairness}"


def train_systems(args: argparse.Namespace, systems: Sequence[SystemSpec], out: Path) -> Dict[str, Dict[str, Any]]:
    """Train every ``trained`` system as a trial of ``configs/sweep_metric_agreement.yaml`` (derived from the
    options: epochs, lambdas, learning rate, dimension, temperature, warm-up, seed; ``--fast``: the synthetic
    stand-in) into ``out``; ``{system name: finished trial}``."""
    trained = [s for s in systems if s.kind == "trained"]
    variants = list(dict.fromkeys(system_variant(s) for s in trained))
    fair = {"num_groups": 2, "ordering": {"class_path": "torchfair.orderings.SoftRank",
                                          "init_args": {"temperature": args.temperature}}}
    overrides = {"trainer.max_epochs": min(args.epochs, 2) if args.fast else args.epochs, "model.lr": args.lr,
                 "model.ranker_args": {"dim": args.dim}, "seed_everything": args.seed, "data.seed": args.seed,
                 "data.variant": "synthetic" if args.fast else args.variant}
    if args.fast:
        overrides.update({"data.num_negatives": 20, "data.batch_size": 16})
    lams = {v: {"model.lam": [float(x) for x in args.lams]} for v in ("mf_dips", "mf_misalloc") if v in variants}
    bundles = {"system": {v: {"model.warmup_steps": args.warmup_steps} for v in lams}}
    bundles["system"].setdefault("mf_dips", {})["model.fairness_loss"] = {"class_path": "torchfair.losses.DIPSLoss",
                                                                          "init_args": fair}
    bundles["system"].setdefault("mf_misalloc", {})["model.fairness_loss"] = {
        "class_path": "torchfair.losses.ExposureMisallocationLoss", "init_args": {**fair, "target": "ee"}}
    path = _sweep.derive(SWEEP, out / "stages" / "systems.yaml", keep={"system": variants}, bundles=bundles,
                         grids={"system": lams}, overrides=overrides)
    _sweep.run(path, out, workers=args.workers, threads=args.threads)
    rows = _sweep.finished(out, path)
    return {s.name: _sweep.pick(rows, system=system_variant(s), **{"model.lam": s.lam}) for s in trained}


# ------------------------------------------------------------------------------------------------ evaluation
def system_values(lists: List[Dict[str, Any]], num_groups: int, catalogue_share: Sequence[float],
                  metrics: Sequence[MetricSpec] = tuple(METRICS)) -> Dict[str, Dict[str, float]]:
    """Per metric ``{"value": mean over lists after the transform, "n_valid": lists where defined}`` of one
    system's scored lists (``[{"scores", "relevance", "groups"}]``, as :func:`score_lists` returns)."""
    import numpy as np

    from torchfair.evaluation import evaluate_lists, parse_request

    import torch

    by_top: Dict[Optional[int], List[Any]] = {}
    for m in metrics:
        r = m.request(catalogue_share) if callable(m.request) else parse_request(m.request)
        reqs = by_top.setdefault(m.top, [])
        if r.label not in {q.label for q in reqs}:
            reqs.append(r)
    columns: Dict[Tuple[Optional[int], str], Any] = {}
    for top, reqs in by_top.items():
        data = []
        for li in lists:
            s, r, g = li["scores"], li["relevance"], li["groups"]
            if top is not None:
                keep = torch.argsort(s, descending=True, stable=True)[:top]
                s, r, g = s[keep], r[keep], g[keep]
            data.append((s, r, g))
        table = evaluate_lists(data, reqs, bootstrap=0, num_groups=num_groups, batch_size=1024,
                         max_batch_elements=2 ** 21, validate_args=False)
        for j, c in enumerate(table.columns):
            columns[(top, c)] = table.values[:, j]
    out = {}
    for m in metrics:
        if (m.top, m.column) not in columns:
            raise ValueError(f"`metrics`: column {m.column!r} of {m.key!r} not produced; got "
                             f"{sorted(c for t, c in columns if t == m.top)}")
        v = np.asarray(columns[(m.top, m.column)], dtype=float)
        if m.transform == "abs":
            v = np.abs(v)
        elif m.transform == "abslog":
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.abs(np.log(v))
        elif m.transform == "log":
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.log(v)
        elif m.transform != "none":
            raise ValueError(f"`transform` of {m.key!r} must be 'none', 'abs', 'log' or 'abslog'; "
                             f"got {m.transform!r}")
        v = v[np.isfinite(v)]
        out[m.key] = {"value": float(v.mean()) if v.size else float("nan"), "n_valid": int(v.size)}
    return out


# ------------------------------------------------------------------------------------------------ report
def _md_table(systems: List[str], metrics: Sequence[MetricSpec], vals: Dict[str, Dict[str, Dict[str, float]]],
              n_lists: int) -> str:
    head = "| system | " + " | ".join(f"{m.label} {'↑' if m.direction > 0 else '↓'}" for m in metrics) + " |"
    lines = [head, "|---|" + "---:|" * len(metrics)]
    for s in systems:
        cells = []
        for m in metrics:
            d = vals[s][m.key]
            c = f"{d['value']:.4g}"
            if d["n_valid"] < n_lists:
                c += f" ({d['n_valid']})"
            cells.append(c)
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _md_tau(keys: List[str], labels: Dict[str, str], tau: List[List[float]]) -> str:
    lines = ["| | " + " | ".join(labels[k] for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for a, k in enumerate(keys):
        lines.append(f"| {labels[k]} | " + " | ".join("—" if math.isnan(t) else f"{t:+.2f}" for t in tau[a]) + " |")
    return "\n".join(lines)


def plot_heatmap(keys: List[str], labels: Dict[str, str], tau: List[List[float]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    t = np.array(tau, dtype=float)
    fig, ax = plt.subplots(figsize=(0.55 * len(keys) + 2.5, 0.5 * len(keys) + 1.8))
    im = ax.imshow(t, cmap="RdBu", vmin=-1, vmax=1)
    ax.set_xticks(range(len(keys)), [labels[k] for k in keys], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(keys)), [labels[k] for k in keys], fontsize=8)
    for i in range(len(keys)):
        for j in range(len(keys)):
            if not math.isnan(t[i, j]):
                ax.text(j, i, f"{t[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if abs(t[i, j]) > 0.6 else "black")
    fig.colorbar(im, ax=ax, fraction=0.04, label="Kendall's τ-b (oriented: > 0 = agree on which is fairer)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fast", action="store_true",
                   help="synthetic MovieLens (60 users, 80 items), 2 epochs: a smoke run of a few seconds")
    p.add_argument("--variant", default="ml-100k", help="MovieLens variant (ignored with --fast: synthetic)")
    p.add_argument("--epochs", type=int, default=10, help="training epochs of every trained system")
    p.add_argument("--lams", type=float, nargs="+", default=[0.3, 1.0],
                   help="weights of the fairness losses (one DIPS and one misallocation system per value)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--dim", type=int, default=32, help="latent dimension of MF and the two-tower model")
    p.add_argument("--temperature", type=float, default=0.1,
                   help="SoftRank temperature of the DIPS and the misallocation loss")
    p.add_argument("--warmup-steps", type=int, default=60,
                   help="optimiser steps over which lambda rises linearly to its value (as configs/ml100k_dips.yaml)")
    p.add_argument("--seed", type=int, default=0, help="data split, negatives, initialisation, random system")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (of each trial, and here)")
    p.add_argument("--workers", type=int, default=1, help="trials at once")
    p.add_argument("--runs", default="runs/metric_agreement",
                   help="the sweep directory of the trained systems (a second run reuses its finished trials)")
    p.add_argument("--out", default="experiments/results",
                   help="directory of metric_agreement.md / .png / .json (--fast: nothing is written unless given)")
    return p


def _say(msg: str) -> None:
    print(msg, flush=True)


def run(args: argparse.Namespace, say=_say) -> Dict[str, Any]:
    """Train the systems (a sweep, :func:`train_systems`), build popularity and random scores, evaluate every
    system on the test lists and compute the tau matrix; returns a JSON-able dict."""
    import logging

    import torch

    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from torchfair.training import load_checkpoint, score_lists

    torch.set_num_threads(args.threads)
    t0 = time.time()
    systems = default_systems(args.lams, args.dim)
    trials = train_systems(args, systems, Path(args.runs).resolve())
    say(f"[{time.time() - t0:5.1f}s] trained {len(trials)} systems (sweep trials in {args.runs})")
    dm = load_checkpoint(next(iter(trials.values()))["checkpoint"]).datamodule
    dm.setup("test")
    G = dm.num_groups
    sizes = dm.item_groups.sizes()
    share = [s / sum(sizes) for s in sizes]
    vals: Dict[str, Dict[str, Dict[str, float]]] = {}
    seconds: Dict[str, float] = {}
    n_lists = 0
    for spec in systems:
        t = time.time()
        if spec.kind == "popularity":
            model, data = _popularity_ranker(dm), dm
        elif spec.kind == "random":
            model, data = _random_ranker(dm, args.seed), dm
        else:
            loaded = load_checkpoint(trials[spec.name]["checkpoint"])
            model, data = loaded.model.eval(), loaded.datamodule
        lists = score_lists(model, data, "test")
        n_lists = len(lists)
        vals[spec.name] = system_values(lists, G, share)
        trial_s = float(trials[spec.name]["seconds"]) if spec.name in trials else 0.0
        seconds[spec.name] = trial_s + time.time() - t
        say(f"[{time.time() - t0:5.1f}s] {spec.name}: " + (f"trial {trial_s:.1f} s, " if trial_s else "")
            + f"evaluated in {time.time() - t:.1f} s; NDCG@10 {vals[spec.name]['ndcg']['value']:.4f}")
    names = [s.name for s in systems]
    per_metric = {m.key: [vals[s][m.key]["value"] for s in names] for m in METRICS}
    keys, tau = tau_matrix(per_metric, {m.key: m.direction for m in METRICS})
    epochs = min(args.epochs, 2) if args.fast else args.epochs
    return {"variant": "synthetic" if args.fast else args.variant, "epochs": epochs, "n_lists": n_lists,
            "num_items": dm.num_items, "group_names": list(dm.group_names), "catalogue_share": share,
            "systems": names, "values": vals, "keys": keys, "tau": tau, "seconds_per_system": seconds,
            "trials": {n: r["trial_id"] for n, r in trials.items()}, "seconds": time.time() - t0,
            "args": {k: v for k, v in vars(args).items()}}


def _describe_request(m: MetricSpec) -> str:
    if isinstance(m.request, str):
        return m.request
    r = m.request([0.5, 0.5])
    opts = ",".join(f"{k}=<catalogue share>" if k == "target" else f"{k}={v}" for k, v in r.options.items())
    return f"{r.name}:{opts}"


#: the heading of the hand-written reading of a run in ``metric_agreement.md``, kept when the file is rewritten
READING = "## Reading, and comparison with Raj & Ekstrand"


def write_outputs(res: Dict[str, Any], out: str, command: str) -> Tuple[str, str, str]:
    """Write ``metric_agreement.md``, ``.png`` and ``.json`` under ``out``; returns the paths.  The section of
    ``metric_agreement.md`` from :data:`READING` on (written by hand) is kept."""
    import json

    os.makedirs(out, exist_ok=True)
    labels = {m.key: m.label for m in METRICS}
    md_path = os.path.join(out, "metric_agreement.md")
    png_path = os.path.join(out, "metric_agreement.png")
    js_path = os.path.join(out, "metric_agreement.json")
    title = (f"Kendall's τ-b between metrics' system orderings ({res['variant']}, {len(res['systems'])} systems, "
             f"{res['n_lists']} test lists)")
    plot_heatmap(res["keys"], labels, res["tau"], png_path, title)
    import _provenance

    res = {**res, "provenance": {**_provenance.provenance(script="experiments/metric_agreement.py"),
                                 "command": command}}
    with open(js_path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    metric_lines = "\n".join(f"- **{m.label}** ({'higher' if m.direction > 0 else 'lower'} is "
                             f"{'better' if m.family == 'utility' else 'fairer'}; family: {m.family}): {m.note}; "
                             f"request `{_describe_request(m)}`, column `{m.column}`, per-list transform "
                             f"`{m.transform}`" + (f", top {m.top} of each list" if m.top else "")
                             for m in METRICS)
    text = f"""# Agreement between fairness metrics (Raj & Ekstrand, SIGIR 2022, §3)

Command: `{command}`  
Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; wall time {res['seconds']:.0f} s
({res['args']['threads']} torch thread(s), {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end)  
Data: {res['variant']} via `MovieLensDataModule` (leave-last-10-out), {res['n_lists']} full-catalogue test lists
({res['num_items']} items minus each user's training / validation items), popularity groups
{res['group_names']} (tail = protected, id 1; catalogue share {', '.join(f'{x:.3f}' for x in res['catalogue_share'])}).
Trained systems: {res['epochs']} epochs of `FairRankingModule` (ListNet, Adam lr {res['args']['lr']}, dim
{res['args']['dim']}; fairness losses with lambda warmed up linearly over {res['args']['warmup_steps']} steps), the
trials of `configs/sweep_metric_agreement.yaml`.

## Metrics

Every value is computed per list by `torchfair.evaluation.evaluate_lists` (the evaluator of `torchfair evaluate`), then
transformed (`abs` for signed gaps, `abslog` = |log ratio| for the ratio metrics, whose parity is 1) and averaged
over the lists where it is defined (the count is shown in brackets when some lists are undefined).  The tau matrix
orients every metric by its direction (↑ larger is fairer/better, ↓ smaller is), so τ > 0 means two metrics agree
on which systems are fairer.  τ is tau-b over the pairs of systems (`kendall_tau`: `scipy.stats.kendalltau`; with no ties, as here,
it equals Raj & Ekstrand's tau-c).  PreF and FAIR are given each list's top {PREFIX_K} only (Raj & Ekstrand score
top-N lists; on whole lists FAIR's memory is O(N²) and PreF's exact normaliser slow) and target the catalogue's
composition (the whole list's composition is the catalogue minus the user's ~100 rated items); all other metrics
see the whole list.

{metric_lines}

## Per-system means

{_md_table(res['systems'], METRICS, res['values'], res['n_lists'])}

Seconds per system (the trial: training, validation and test; + the evaluation here): {', '.join(f"{k} {v:.0f}" for k, v in res['seconds_per_system'].items())}.

## Kendall's τ-b between the metrics' system orderings

{_md_tau(res['keys'], labels, res['tau'])}

![tau heatmap](metric_agreement.png)
"""
    if os.path.isfile(md_path):  # the reading written by hand after a run stays (it says which run it read)
        old = Path(md_path).read_text()
        if READING in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index(READING):]
    with open(md_path, "w") as f:
        f.write(text)
    return md_path, png_path, js_path


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    warnings.filterwarnings("ignore")
    res = run(args)
    labels = {m.key: m.label for m in METRICS}
    print()
    print(_md_table(res["systems"], METRICS, res["values"], res["n_lists"]))
    print()
    print(_md_tau(res["keys"], labels, res["tau"]))
    print(f"\ntotal time {res['seconds']:.1f} s")
    out = args.out if not args.fast or "--out" in (argv if argv is not None else sys.argv[1:]) else None
    if out is not None:
        cmd = "python experiments/metric_agreement.py " + " ".join(argv if argv is not None else sys.argv[1:])
        paths = write_outputs(res, out, cmd.strip())
        print("wrote " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
