"""RampRank against SoftRank as the ordering of the fairness losses: the fairness / utility trade-off at the same lams.

Question.  :class:`torchfair.orderings.RampRank` (SoftRank's pair relaxation with a piecewise-linear kernel, pair
sums in O(N log N)) may become the losses' default ordering only if its trade-off is at least as good as
SoftRank's; and its fairness term trained lazily, every K-th step only (``--every K``), only if that trade-off
holds too.  The protocol of the issue-11 loss table (ML-100K, leave-last-10-out, full-catalogue test lists of all
943 users), as two sweep files:

* start: ``configs/sweep_starts_listnet.yaml``: biased MF (dim 32) trained with ListNet for 20 epochs per seed
  (``configs/ml100k_listnet.yaml``, early stopping on validation NDCG@10; the last epoch's checkpoint), copied to
  ``<out>/start/seed<S>.ckpt``;
* trials: ``configs/sweep_ramp_tradeoff.yaml``: that start fine-tuned for 3 epochs with ``ListNet + lam * loss``
  (``configs/ml100k_dips.yaml``, constant lam, no validation while fine-tuning), the loss one of DIPSLoss,
  ExposureMisallocationLoss, PairwiseAccuracyGapLoss (``num_groups=2``) on ``SoftRank(0.1)`` (``<loss>_soft``) or on
  ``RampRank(0.1)`` (``<loss>_ramp``; ``<loss>_ramp4``: its term every 4th step, weighted 4 lam), at each loss's
  own lam grid, plus the shared ``lam = 0`` baseline (ListNet fine-tuned alone); each trial validates and tests its
  last checkpoint with the exact measures (DIPS gap ``|M_AB - M_BA|``, misallocation ``||delta||_1`` with the EE
  target, ``|inter|`` pairwise accuracy gap, NDCG@10).  The time per epoch is the sweep's record of each trial
  (``result.json["timing"]``: Lightning's ``Timer``, training stage), over the fine-tune epochs; the trials' wall
  intervals and load averages are in the same record, and the report gives the load each ordering's trials ran
  under.

Read-outs (:func:`curves` / :func:`at_budget`): the share of the baseline's unfairness removed by the best measured
lam whose NDCG@10 cost is at most 1 % and at most 2 %; the same step function at more cost levels
(:func:`share_at_cost`); the paired differences at the same lam (:func:`paired_differences`: NDCG@10 cost and share
removed, RampRank - SoftRank); point dominance between the two orderings' measured points (:func:`dominated`).
Verdict per loss (:func:`verdict`): RampRank is at least as good as SoftRank when, on the loss's own measure, its
share removed within 1 % and within 2 % of NDCG@10 is at least SoftRank's minus ``TOLERANCE`` (one seed: small
differences are noise of the training trajectory, not of the ordering).  Time: the mean seconds per fine-tune epoch
per ordering, and the median ratio of the two trials of each lam (:func:`paired_ratios`).

Usage::

    python experiments/ramp_tradeoff.py [--seeds 0] [--groups popularity] [--workers 2]   # run and report
    python experiments/ramp_tradeoff.py --every 4             # the RampRank arm lazy: ramp_tradeoff_every4.md
    python experiments/ramp_tradeoff.py --report-only                                     # report the finished trials
    python experiments/ramp_tradeoff.py --fast [--losses dips]               # synthetic data, about a minute

Resumable (the sweeps skip finished trials; SoftRank's trials serve every ``--every``).  The committed results
(``experiments/results/ramp_tradeoff*.md``) were measured with the same protocol by the earlier script (commit
2f26eed: seed 0, popularity, 45 trials in 31 min on a shared 2-core machine).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

EXPERIMENTS = Path(__file__).resolve().parent
ROOT = EXPERIMENTS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(EXPERIMENTS))

import _sweep  # noqa: E402 - the shared sweep helpers (experiments/_sweep.py)

SWEEP = ROOT / "configs" / "sweep_ramp_tradeoff.yaml"
STARTS = ROOT / "configs" / "sweep_starts_listnet.yaml"
#: the three losses: (family: the loss variants are <family>_soft / _ramp / _rampK, label, its own measure column)
LOSSES = [("dips", "DIPS", "dips_gap"),
          ("misallocation", "exposure misallocation", "exposure_misallocation_l1"),
          ("pairgap", "pairwise accuracy gap", "pairwise_accuracy_inter")]
ORDERINGS = {"soft": ("SoftRank", "torchfair.orderings.SoftRank"),
             "ramp": ("RampRank", "torchfair.orderings.RampRank")}
TEMPERATURE = 0.1
UTILITY = "ndcg@10"
#: the measures of the tables: (test column, label, read as |value|)
MEASURES = [("dips_gap", "DIPS gap |M_AB - M_BA|", True),
            ("exposure_misallocation_l1", "misallocation ||delta||_1", False),
            ("pairwise_accuracy_inter", "pairwise accuracy gap |inter|", True)]
MEASURE_LABEL = {c: lab for c, lab, _ in MEASURES}
BUDGETS = (0.01, 0.02)
#: cost levels (relative NDCG@10 loss) of the step-function comparison
COST_LEVELS = (0.005, 0.01, 0.015, 0.02, 0.03, 0.05)
#: RampRank passes when its share removed at 1 % and 2 % is >= SoftRank's minus this (absolute share)
TOLERANCE = 0.01
#: ``--every K``: the RampRank arm trains its fairness term on every K-th step only, weighted K lam
#: (``FairRankingModule(fairness_every=K)``, lazy regularisation); its label in the report and the figures
EVERY = 1
RAMP_LABEL = "RampRank"
#: the fast mode's grid: one lam per loss
FAST_LAMS = {"dips": [10.0], "misallocation": [3.0], "pairgap": [3.0]}


# --------------------------------------------------------------------------------------------- the sweeps
def loss_key(family: str, ordering: str) -> str:
    return f"{family}_{ordering}"


def ramp_variant(every: int) -> str:
    """The sweep file's name of the RampRank arm training its term every ``every`` steps (``ramp``, ``ramp4``...)."""
    return "ramp" if every == 1 else f"ramp{every}"


def split_variant(loss: str) -> Tuple[str, str, int]:
    """``(family, ordering, every)`` of a loss variant name: ``dips_ramp4`` -> ``("dips", "ramp", 4)``;
    ``none`` -> ``("none", "none", 1)``."""
    if loss == "none":
        return "none", "none", 1
    family, _, arm = loss.rpartition("_")
    if arm.startswith("ramp"):
        return family, "ramp", int(arm[4:] or 1)
    return family, arm, 1


def lam_grids(spec: Dict, override: Optional[Dict[str, List[float]]] = None) -> Dict[str, List[float]]:
    """The lam grid of each loss family: the sweep file's ``<family>_soft`` grid, or ``override``."""
    out = {}
    for family, _, _ in LOSSES:
        grid = spec["variants"]["loss"][f"{family}_soft"]["grid"]["model.lam"]
        out[family] = [float(x) for x in (override or {}).get(family, grid)]
    return out


def derive_sweep(spec: Dict, out: Path, groups: Sequence[str], seeds: Sequence[int], families: Sequence[str],
                 grids: Dict[str, List[float]], every: int, fast: bool) -> Path:
    """The part of ``configs/sweep_ramp_tradeoff.yaml`` this run needs, as ``<out>/stages/trials.yaml``: the
    ``groups`` and ``seeds`` (each from ``<out>/start/seed<S>.ckpt``), the baseline and, per family, SoftRank and the
    RampRank arm of ``every`` (a ``<family>_ramp<K>`` bundle is added for a K the file lacks) at ``grids``."""
    ramp = ramp_variant(every)
    bundles: Dict[str, Dict[str, Dict]] = {"seed": {str(s): {"seed_everything": int(s),
                                                             "model.init_from": str(out / "start" / f"seed{s}.ckpt")}
                                                    for s in seeds}}
    for f in families:
        if loss_key(f, ramp) not in spec["variants"]["loss"]:
            base = {k: v for k, v in spec["variants"]["loss"][loss_key(f, "ramp")].items() if k != "grid"}
            bundles.setdefault("loss", {})[loss_key(f, ramp)] = {**base, "model.fairness_every": every}
    g = {loss_key(f, o): {"model.lam": grids[f]} for f in families for o in ("soft", ramp)}
    keep = {"groups": list(groups), "seed": [str(s) for s in seeds],
            "loss": ["none"] + [loss_key(f, o) for f in families for o in ("soft", ramp)]}
    return _sweep.derive(SWEEP, out / "stages" / "trials.yaml", keep=keep, bundles=bundles, grids={"loss": g},
                         overrides={"trainer.max_epochs": 2} if fast else None, fast=fast)


def starts(out: Path, seeds: Sequence[int], workers: int, threads: int, fast: bool) -> Dict[str, Path]:
    """The ListNet start of every seed (``configs/sweep_starts_listnet.yaml``, ``<out>/starts``), copied to
    ``<out>/start/seed<S>.ckpt``."""
    path = _sweep.derive(STARTS, out / "stages" / "starts.yaml", keep={"seed": [str(s) for s in seeds]}, fast=fast,
                         bundles={"seed": {str(s): {"seed_everything": int(s)} for s in seeds}},
                         overrides={"trainer.max_epochs": 2} if fast else None)
    _sweep.run(path, out / "starts", workers=workers, threads=threads)
    return _sweep.copy_starts(_sweep.finished(out / "starts", path), out / "start", {}, seeds)


# --------------------------------------------------------------------------------------------- analysis
def load_results(out: Path, sweep: Optional[Path] = None):
    """The finished trials of the sweep directory ``out`` (of the sweep file ``sweep``) as a frame: groups, loss
    (``<family>_soft`` / ``<family>_ramp``, the lazy arm's too, or ``none``), seed, lam, family, ordering (``soft`` /
    ``ramp`` / ``none``), every (the RampRank arm's ``fairness_every``), seconds (the whole trial), seconds_per_epoch
    (``timing.train_s`` over the fine-tune epochs), trial_wall, epochs, load1 (the 1-minute load average at the
    trial's start), wall_start / wall_end, NDCG@10 and the measures with ``|.|`` taken."""
    import pandas as pd

    rows = []
    for r in _sweep.finished(out, sweep):
        p, m, t = r["params"], r["metrics"], r["timing"]
        family, ordering, every = split_variant(p["loss"])
        epochs = int(json.loads((r["dir"] / "trial.json").read_text())["config"]["trainer.max_epochs"])
        load = t.get("loadavg_start") or [math.nan]
        row = {"groups": p["groups"], "loss": family if family == "none" else loss_key(family, ordering),
               "seed": str(p["seed"]), "lam": float(p["model.lam"]),
               "family": family, "ordering": ordering, "every": every, "seconds": float(r["seconds"]),
               "seconds_per_epoch": float(t.get("train_s") or math.nan) / epochs, "epochs": epochs,
               "trial_wall": float(t["wall_end"] - t["wall_start"]) if t.get("wall_end") else math.nan,
               "load1": float(load[0]), "wall_start": t.get("wall_start"), "wall_end": t.get("wall_end"),
               UTILITY: float(m[f"test/{UTILITY}"])}
        for col, _, absolute in MEASURES:
            v = float(m[f"test/{col}"])
            row[col] = abs(v) if absolute else v
        rows.append(row)
    return pd.DataFrame(rows)


def relative_to_baseline(res):
    """Adds per-trial ``cost`` (relative NDCG@10 loss) and ``removed:<measure>`` (share of the baseline's
    unfairness removed), against the ``loss == "none"`` trial of the same groups and seed."""
    base = res[res["loss"] == "none"].set_index(["groups", "seed"])
    res = res.copy()
    key = list(zip(res["groups"], res["seed"]))
    b_u = base[UTILITY].reindex(key).to_numpy()
    res["cost"] = 1.0 - res[UTILITY].to_numpy() / b_u
    for col, _, _ in MEASURES:
        b = base[col].reindex(key).to_numpy()
        res[f"removed:{col}"] = 1.0 - res[col].to_numpy() / b
    return res


def curves(res):
    """Mean and standard deviation over seeds per (groups, loss, lam); the baseline is every loss's lam = 0."""
    import pandas as pd

    rel = relative_to_baseline(res)
    cols = [UTILITY, "cost"] + [c for c, _, _ in MEASURES] + [f"removed:{c}" for c, _, _ in MEASURES]
    g = rel.groupby(["groups", "loss", "lam"])[cols]
    mean, std, n = g.mean(), g.std(ddof=1), g.size()
    out = mean.join(std.add_suffix(":std")).join(n.rename("seeds")).reset_index()
    base = out[out["loss"] == "none"]
    extra = []
    for loss in sorted(set(out["loss"]) - {"none"}):
        for _, row in base.iterrows():
            r = row.copy()
            r["loss"] = loss
            extra.append(r)
    if extra:
        out = pd.concat([out[out["loss"] != "none"], pd.DataFrame(extra)], ignore_index=True)
    return out.sort_values(["groups", "loss", "lam"]).reset_index(drop=True)


def at_budget(cur, budget: float):
    """Per (groups, loss, measure): the largest mean share removed among the lams whose mean NDCG@10 cost is
    at most ``budget`` (lam = 0 always qualifies, removing 0), with that lam, its seed spread and ``open`` (the
    loss's largest lam is that one: the budget was not reached)."""
    import pandas as pd

    rows = []
    for (groups, loss), c in cur.groupby(["groups", "loss"]):
        ok = c[c["cost"] <= budget + 1e-12]
        for col, _, _ in MEASURES:
            best = ok.loc[ok[f"removed:{col}"].idxmax()] if len(ok) else None
            rows.append({"groups": groups, "loss": loss, "measure": col, "budget": budget,
                         "removed": float(best[f"removed:{col}"]) if best is not None else math.nan,
                         "removed_std": float(best.get(f"removed:{col}:std", math.nan)) if best is not None
                         else math.nan,
                         "lam": float(best["lam"]) if best is not None else math.nan,
                         "open": bool(best is not None and best["lam"] == c["lam"].max() and best["lam"] > 0),
                         "cost": float(best["cost"]) if best is not None else math.nan})
    return pd.DataFrame(rows)


def share_at_cost(cur, loss: str, measure: str, level: float, groups: Optional[str] = None) -> Tuple[float, float]:
    """``(share removed, lam)``: the best measured share of ``measure`` removed among ``loss``'s lams (the
    baseline, removing 0, included) whose mean NDCG@10 cost is at most ``level`` (:func:`at_budget`'s rule for one
    loss and measure)."""
    c = cur[(cur["loss"] == loss) & (cur["cost"] <= level + 1e-12)]
    if groups is not None:
        c = c[c["groups"] == groups]
    if not len(c):
        return math.nan, math.nan
    best = c.loc[c[f"removed:{measure}"].idxmax()]
    return float(best[f"removed:{measure}"]), float(best["lam"])


def dominated(cur, a: str, b: str, measure: str, groups: str) -> Tuple[int, int]:
    """``(k, n)``: ``k`` of ``b``'s ``n`` measured points (lam > 0) are weakly dominated by a point of ``a``
    (NDCG@10 at least as high and ``measure`` at most as high, one of them strictly)."""
    c = cur[(cur["groups"] == groups) & (cur["lam"] > 0)]
    pa = list(zip(c[c["loss"] == a][UTILITY], c[c["loss"] == a][measure]))
    pb = list(zip(c[c["loss"] == b][UTILITY], c[c["loss"] == b][measure]))
    k = sum(any(ua >= ub and fa <= fb and (ua > ub or fa < fb) for ua, fa in pa) for ub, fb in pb)
    return k, len(pb)


def verdict(cur, family: str, groups: str, tolerance: float = TOLERANCE) -> Dict:
    """RampRank against SoftRank for one loss family on its own measure: the shares removed within each budget,
    their difference (ramp - soft), and ``ok``: RampRank's is >= SoftRank's - ``tolerance`` at every budget."""
    measure = dict((f, m) for f, _, m in LOSSES)[family]
    out = {"family": family, "measure": measure, "budgets": {}}
    for b in BUDGETS:
        soft = share_at_cost(cur, loss_key(family, "soft"), measure, b, groups)
        ramp = share_at_cost(cur, loss_key(family, "ramp"), measure, b, groups)
        out["budgets"][b] = {"soft": soft, "ramp": ramp, "diff": ramp[0] - soft[0]}
    out["ok"] = all(v["diff"] >= -tolerance for v in out["budgets"].values())
    out["strict"] = all(v["diff"] >= 0 for v in out["budgets"].values())
    return out


def paired_differences(cur, family: str, groups: str) -> Dict[str, float]:
    """RampRank - SoftRank at the same lam (> 0) for one loss family on its own measure: the NDCG@10 cost
    difference and the difference of the share removed (mean, sd, min, max over the lams), and in how many lams
    RampRank costs less / removes more."""
    import numpy as np

    measure = dict((f, m) for f, _, m in LOSSES)[family]
    c = cur[(cur["groups"] == groups) & (cur["lam"] > 0)]
    a = c[c["loss"] == loss_key(family, "soft")].set_index("lam")
    b = c[c["loss"] == loss_key(family, "ramp")].set_index("lam")
    lams = sorted(set(a.index) & set(b.index))
    dc = np.array([b.loc[x, "cost"] - a.loc[x, "cost"] for x in lams], dtype=float)
    dr = np.array([b.loc[x, f"removed:{measure}"] - a.loc[x, f"removed:{measure}"] for x in lams], dtype=float)
    out: Dict[str, float] = {"n": len(lams), "ramp_cheaper": int((dc < 0).sum()), "ramp_fairer": int((dr > 0).sum())}
    for name, v in (("cost", dc), ("removed", dr)):
        out.update({f"{name}_mean": float(v.mean()) if len(v) else math.nan,
                    f"{name}_sd": float(v.std(ddof=1)) if len(v) > 1 else math.nan,
                    f"{name}_min": float(v.min()) if len(v) else math.nan,
                    f"{name}_max": float(v.max()) if len(v) else math.nan})
    return out


def epoch_times(res) -> Dict[str, Dict[str, float]]:
    """Mean (and sd, n) of the fine-tune seconds per epoch per ordering (``none``: the baseline), overall and per
    loss family."""
    def stats(d) -> Dict[str, float]:
        wall = float(d["trial_wall"].mean()) if "trial_wall" in d else math.nan
        load = float(d["load1"].mean()) if "load1" in d else math.nan
        return {"mean": float(d["seconds_per_epoch"].mean()),
                "sd": float(d["seconds_per_epoch"].std(ddof=1)) if len(d) > 1 else math.nan, "n": int(len(d)),
                "trial_wall": wall, "load1": load}

    out: Dict[str, Dict[str, float]] = {}
    for (fam, o), d in res.groupby(["family", "ordering"]):
        out[f"{fam}:{o}"] = stats(d)
    for o, d in res.groupby("ordering"):
        out[o] = stats(d)
    return out


def paired_ratios(res, family: Optional[str] = None) -> List[float]:
    """RampRank's seconds per epoch over SoftRank's in the same groups, seed, loss and lam, one per pair, for one
    loss family or all (:func:`pair_overlap`: how much of each pair ran at the same time)."""
    d = res[res["ordering"].isin(list(ORDERINGS))]
    if family is not None:
        d = d[d["family"] == family]
    t = d.pivot_table(index=["groups", "seed", "family", "lam"], columns="ordering", values="seconds_per_epoch")
    if not set(ORDERINGS) <= set(t.columns):
        return []
    return [float(x) for x in (t["ramp"] / t["soft"]).dropna()]


def pair_overlap(res) -> List[float]:
    """For each RampRank trial and the SoftRank trial of the same groups, seed, family and lam: the share of the
    shorter of the two that ran while the other ran (:func:`_sweep.overlap` of their wall intervals; 1: side by
    side, 0: one after the other)."""
    d = res[res["ordering"].isin(list(ORDERINGS))]
    out = []
    for _, g in d.groupby(["groups", "seed", "family", "lam"]):
        if set(g["ordering"]) != set(ORDERINGS):
            continue
        a, b = (g[g["ordering"] == o].iloc[0] for o in ORDERINGS)
        shorter = min(a["wall_end"] - a["wall_start"], b["wall_end"] - b["wall_start"])
        out.append(_sweep.overlap(a, b) / shorter if shorter > 0 else 0.0)
    return out


# --------------------------------------------------------------------------------------------- report
def figure(cur, groups: str, path: Path, data: str, zoom: float = 0.05) -> None:
    """One column per loss: its own measure (x) against the NDCG@10 change vs lam = 0 (y), SoftRank and RampRank
    through their lams (lam written next to each point), the baseline as a star, the 1 % / 2 % budgets dashed; the
    top row shows every lam, the bottom row the points within ``zoom`` of NDCG@10 (the budgets' region)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = cur[cur["groups"] == groups]
    fig, axes = plt.subplots(2, len(LOSSES), figsize=(5.4 * len(LOSSES), 8.6), squeeze=False)
    for row in (0, 1):
        for ax, (family, label, measure) in zip(axes[row], LOSSES):
            for i, o in enumerate(ORDERINGS):
                d = c[c["loss"] == loss_key(family, o)].sort_values("lam")
                if row == 1:
                    d = d[d["cost"] <= zoom + 1e-12]
                if not len(d):
                    continue
                ax.plot(d[measure], -100 * d["cost"], marker="os"[i], ms=4, lw=1, color=f"C{i}",
                        label=f"{ORDERINGS[o][0]}({TEMPERATURE:g})" + (f", every {EVERY} steps"
                                                                       if o == "ramp" and EVERY > 1 else ""))
                for _, r in d[d["lam"] > 0].iterrows():
                    ax.annotate(f"{r['lam']:g}", (r[measure], -100 * r["cost"]), fontsize=6, color=f"C{i}",
                                xytext=(3, 3 if i == 0 else -8), textcoords="offset points")
            base = c[c["lam"] == 0]
            if len(base):
                ax.plot(base[measure].iloc[:1], [0.0], marker="*", ms=10, color="k", ls="", label="lam = 0")
            for b in BUDGETS:
                ax.axhline(-100 * b, color="0.5", lw=0.8, ls="--")
            if row == 1:
                ax.set_ylim(-100 * zoom - 0.2, max(0.6, ax.get_ylim()[1]))
            ax.set_xlabel(f"{MEASURE_LABEL[measure]} (test; lower is fairer)")
            ax.set_ylabel("NDCG@10 change vs lam = 0 (%)")
            ax.set_title(f"ListNet + lam * {label} loss" + ("" if row == 0 else
                                                            f": points within {100 * zoom:g} % of NDCG@10"),
                         fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"{data}, {groups} groups: SoftRank vs {RAMP_LABEL} at the same lams (dashed: -1 %, -2 % NDCG@10)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.1f} %"


def _pp(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.1f} pp"


def _s(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.3g} s"


def report(res, out_md: Path, fig_dir: Path, command: str, wall: Optional[float], data: str = "ML-100K",
           grids: Optional[Dict[str, List[float]]] = None, failed: Sequence[str] = (), workers: int = 2) -> str:
    cur = curves(res)
    epochs = f"{int(res['epochs'].max())} fine-tune epochs" if "epochs" in res else "the fine-tune epochs"
    seeds = sorted(set(res["seed"]))
    times = epoch_times(res)
    many = len(set(cur["groups"])) > 1
    lines = [f"# RampRank vs SoftRank as the fairness losses' ordering: the trade-off on {data}", "",
             f"Reproduce: `{command}`" + (f" ({wall / 60:.0f} min of wall time, {workers} trial(s) at once, 1 torch "
                                          "thread each)" if wall else "") + ".",
             f"Trials: {len(res)} finished (seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}), "
             f"{res['seconds'].sum() / 60:.0f} trial-minutes (each trial's fit, validation and test, the starts not "
             "included)" + (f"; {len(failed)} failed: {', '.join(failed)}" if failed else "") + ".  Protocol: the "
             f"docstring of `experiments/ramp_tradeoff.py` ({epochs} from the ListNet start, exact test measures of "
             f"the last checkpoint); both orderings at temperature {TEMPERATURE:g}.", ""]
    if grids:
        lines += ["Lams: " + "; ".join(f"{lab} {', '.join(f'{x:g}' for x in grids[f])}"
                                      for f, lab, _ in LOSSES if f in grids)
                  + " (`configs/sweep_ramp_tradeoff.yaml`'s grids).", ""]
    lines += ["Time per fine-tune epoch (Lightning's `Timer`, training stage, as the sweep records it; mean ± sd, n "
              f"trials; {workers} trial(s) at once, in the sweep file's order; paired ratio: the RampRank and the "
              "SoftRank trial of the same lam):", "",
              "| loss | SoftRank | RampRank | ratio of the means | paired ratio: median (min - max) |",
              "|---|---:|---:|---:|---:|"]

    def cell(k: str) -> str:
        v = times.get(k)
        return "-" if v is None else f"{_s(v['mean'])} ± {_s(v['sd'])} ({v['n']})"

    def paired(family: Optional[str]) -> str:
        x = sorted(paired_ratios(res, family))
        if not x:
            return "-"
        med = x[len(x) // 2] if len(x) % 2 else (x[len(x) // 2 - 1] + x[len(x) // 2]) / 2
        return f"{med:.2f}x ({x[0]:.2f}x - {x[-1]:.2f}x)"

    for family, label, _ in LOSSES:
        s, r = times.get(f"{family}:soft"), times.get(f"{family}:ramp")
        if not (s or r):
            continue
        ratio = f"{r['mean'] / s['mean']:.2f}x" if s and r else "-"
        lines.append(f"| {label} | {cell(family + ':soft')} | {cell(family + ':ramp')} | {ratio} | "
                     f"{paired(family)} |")
    s, r = times.get("soft"), times.get("ramp")
    lines.append(f"| **all three** | {cell('soft')} | {cell('ramp')} | "
                 + (f"{r['mean'] / s['mean']:.2f}x" if s and r else "-") + f" | {paired(None)} |")
    if "none" in times:
        lines.append(f"| (ListNet alone, lam = 0) | {cell('none')} | | | |")
    ov = pair_overlap(res) if {"wall_start", "wall_end"} <= set(res.columns) else []
    if ov:
        lines += ["", f"The two trials of a pair ran at the same time for {100 * sum(ov) / len(ov):.0f} % of the "
                  f"shorter one on average ({sum(x > 0.5 for x in ov)} of {len(ov)} pairs more than half)."]
    if s and r and math.isfinite(s["trial_wall"]):
        lines += ["", f"Wall time of a whole trial (data, {epochs}, validation and test of the checkpoint), mean: "
                  f"SoftRank {_s(s['trial_wall'])}, RampRank {_s(r['trial_wall'])}"
                  + (f", ListNet alone {_s(times['none']['trial_wall'])}" if "none" in times else "")
                  + ".  Machine load (1-minute load average at each trial's start), mean: "
                  f"SoftRank trials {s['load1']:.2f}, RampRank trials {r['load1']:.2f}."]
    lines.append("")
    verdicts = {}
    for groups in sorted(set(cur["groups"])):
        c = cur[cur["groups"] == groups]
        png = f"{out_md.stem}_{groups}.png" if many else f"{out_md.stem}.png"
        figure(cur, groups, fig_dir / png, data)
        base = c[c["lam"] == 0].iloc[0]
        lines += [f"## {groups} groups", "", f"![trade-off]({png})", "",
                  f"Baseline (ListNet fine-tuned alone, lam = 0): NDCG@10 {base[UTILITY]:.4f}, "
                  + ", ".join(f"{lab} {base[col]:.4f}" for col, lab, _ in MEASURES) + ".", ""]
        # read-outs
        lines += ["### Read-outs: share of the baseline's unfairness removed within 1 % / 2 % of NDCG@10", "",
                  "Best measured lam within the budget (lam in brackets; lam = 0 removes 0; ≥: the largest lam tried "
                  "is within the budget), on the loss's own measure; diff = RampRank - SoftRank, in percentage "
                  f"points.  Verdict: RampRank is at least as good when diff ≥ -{100 * TOLERANCE:g} pp at both "
                  "budgets (one seed: a tolerance for the noise of the training trajectory).", "",
                  "| loss (own measure) | SoftRank 1 % | RampRank 1 % | diff | SoftRank 2 % | RampRank 2 % | diff "
                  "| RampRank ≥ SoftRank? |", "|---|---:|---:|---:|---:|---:|---:|---|"]
        b = {x: at_budget(c, x).set_index(["loss", "measure"]) for x in BUDGETS}

        def readout(loss: str, measure: str, budget: float) -> str:
            r = b[budget].loc[(loss, measure)]
            return ("≥ " if r["open"] else "") + f"{_pct(r['removed'])} ({r['lam']:g})"

        for family, label, measure in LOSSES:
            if loss_key(family, "soft") not in set(c["loss"]) or loss_key(family, "ramp") not in set(c["loss"]):
                continue
            v = verdict(c, family, groups)
            verdicts[(groups, family)] = v
            cells = []
            for x in BUDGETS:
                cells += [readout(loss_key(family, "soft"), measure, x), readout(loss_key(family, "ramp"), measure, x),
                          _pp(v["budgets"][x]["diff"])]
            word = ("**yes**" + ("" if v["strict"] else " (within the tolerance)")) if v["ok"] else "**no**"
            lines.append(f"| {label} ({MEASURE_LABEL[measure]}) | " + " | ".join(cells) + f" | {word} |")
        lines += ["", "The same read-out on every measure (SoftRank / RampRank, within 1 % | within 2 %):", "",
                  "| loss | " + " | ".join(f"{lab}: 1 % | 2 %" for _, lab, _ in MEASURES) + " |",
                  "|---|" + "---:|---:|" * len(MEASURES)]
        for family, label, _ in LOSSES:
            if loss_key(family, "soft") not in set(c["loss"]):
                continue
            cells = []
            for col, _, _ in MEASURES:
                for x in BUDGETS:
                    cells.append(" / ".join(_pct(b[x].loc[(loss_key(family, o), col)]["removed"]) for o in ORDERINGS))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines += ["", "Share of the own measure removed at more NDCG@10 cost levels (best measured lam with cost ≤ "
                  "the level; SoftRank / RampRank), and point dominance (how many of one ordering's lam > 0 points a "
                  "point of the other dominates: NDCG@10 ≥ and measure ≤, one strictly):", "",
                  "| loss | " + " | ".join(f"≤ {100 * x:g} %" for x in COST_LEVELS)
                  + " | SoftRank points dominated by RampRank | RampRank points dominated by SoftRank |",
                  "|---|" + "---:|" * len(COST_LEVELS) + "---:|---:|"]
        for family, label, measure in LOSSES:
            soft, ramp = loss_key(family, "soft"), loss_key(family, "ramp")
            if soft not in set(c["loss"]):
                continue
            cells = [" / ".join(_pct(share_at_cost(c, k, measure, x)[0]) for k in (soft, ramp)) for x in COST_LEVELS]
            ks, ns = dominated(c, ramp, soft, measure, groups)
            kr, nr = dominated(c, soft, ramp, measure, groups)
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {ks} of {ns} | {kr} of {nr} |")
        lines += ["", "Paired at the same lam (lam > 0), RampRank - SoftRank on the loss's own measure: the NDCG@10 "
                  "cost difference (positive: RampRank loses more NDCG@10) and the difference of the share removed "
                  "(positive: RampRank removes more); mean ± sd (min to max) over the lams:", "",
                  "| loss | lams | cost: RampRank - SoftRank | share removed: RampRank - SoftRank | RampRank cheaper "
                  "| RampRank fairer |", "|---|---:|---:|---:|---:|---:|"]
        for family, label, measure in LOSSES:
            if loss_key(family, "soft") not in set(c["loss"]) or loss_key(family, "ramp") not in set(c["loss"]):
                continue
            d = paired_differences(c, family, groups)
            lines.append(f"| {label} | {d['n']} | {_pp(d['cost_mean'])} ± {100 * d['cost_sd']:.1f} "
                         f"({_pp(d['cost_min'])} to {_pp(d['cost_max'])}) | {_pp(d['removed_mean'])} ± "
                         f"{100 * d['removed_sd']:.1f} ({_pp(d['removed_min'])} to {_pp(d['removed_max'])}) | "
                         f"{d['ramp_cheaper']} of {d['n']} | {d['ramp_fairer']} of {d['n']} |")
        # per-loss tables
        for family, label, measure in LOSSES:
            soft, ramp = loss_key(family, "soft"), loss_key(family, "ramp")
            if soft not in set(c["loss"]):
                continue
            lab = MEASURE_LABEL[measure]
            lines += ["", f"### {label} loss: ListNet + lam * {label} (own measure: {lab})", "",
                      "Test, last checkpoint; cost = relative NDCG@10 loss vs lam = 0; removed = share of the "
                      "baseline's value removed (negative: more unfair than the baseline).", "",
                      f"| lam | SoftRank NDCG@10 | cost | {lab} | removed | RampRank NDCG@10 | cost | {lab} | removed "
                      "| s/epoch SoftRank | s/epoch RampRank |", "|---:|" + "---:|" * 10]
            raw = res[res["groups"] == groups]
            for lam in sorted(set(c[c["loss"].isin([soft, ramp])]["lam"])):
                cells = []
                for k in (soft, ramp):
                    r = c[(c["loss"] == k) & (c["lam"] == lam)]
                    if not len(r):
                        cells += ["-"] * 4
                        continue
                    r = r.iloc[0]
                    cells += [f"{r[UTILITY]:.4f}", _pct(r["cost"]), f"{r[measure]:.4f}", _pct(r[f"removed:{measure}"])]
                for k in (soft, ramp):
                    r = raw[(raw["loss"] == (k if lam > 0 else "none")) & (raw["lam"] == lam)]
                    cells.append(_s(float(r["seconds_per_epoch"].mean())) if len(r) else "-")
                lines.append(f"| {lam:g} | " + " | ".join(cells) + " |")
        lines += ["", "All measures of every point (test; SoftRank / RampRank):", "",
                  "| loss | lam | NDCG@10 | " + " | ".join(lab for _, lab, _ in MEASURES) + " |",
                  "|---|---:|---:|" + "---:|" * len(MEASURES)]
        for family, label, _ in LOSSES:
            soft, ramp = loss_key(family, "soft"), loss_key(family, "ramp")
            for lam in sorted(set(c[c["loss"].isin([soft, ramp]) & (c["lam"] > 0)]["lam"])):
                rows = [c[(c["loss"] == k) & (c["lam"] == lam)] for k in (soft, ramp)]

                def both(col: str) -> str:
                    return " / ".join(f"{r.iloc[0][col]:.4f}" if len(r) else "-" for r in rows)

                lines.append(f"| {label} | {lam:g} | {both(UTILITY)} | "
                             + " | ".join(both(col) for col, _, _ in MEASURES) + " |")
        lines.append("")
    if verdicts:
        lines += ["## Verdict", "", f"By the read-outs (share removed within 1 % and 2 % of NDCG@10, tolerance "
                  f"{100 * TOLERANCE:g} pp), with the paired differences at the same lams and the point dominance as "
                  "context:", ""]
        for (groups, family), v in verdicts.items():
            label, measure = [(lab, m) for f, lab, m in LOSSES if f == family][0]
            c = cur[cur["groups"] == groups]
            parts = [f"within {100 * x:g} %: SoftRank {_pct(d['soft'][0])}, RampRank {_pct(d['ramp'][0])} "
                     f"({_pp(d['diff'])})" for x, d in v["budgets"].items()]
            p = paired_differences(c, family, groups)
            ks, ns = dominated(c, loss_key(family, "ramp"), loss_key(family, "soft"), measure, groups)
            kr, nr = dominated(c, loss_key(family, "soft"), loss_key(family, "ramp"), measure, groups)
            lines.append(f"- {groups}, {label}: RampRank is {'at least as good as' if v['ok'] else 'worse than'} "
                         f"SoftRank ({'; '.join(parts)}).  At the same lams RampRank costs {_pp(p['cost_mean'])} "
                         f"of NDCG@10 and removes {_pp(p['removed_mean'])} of the {MEASURE_LABEL[measure]} on "
                         f"average ({p['n']} lams); {ks} of SoftRank's {ns} points are dominated by a RampRank "
                         f"point, {kr} of RampRank's {nr} by a SoftRank point.")
        lines.append("")
    text = "\n".join(lines)
    if EVERY > 1:  # the lazy arm: every label names it, the title and protocol say what it is
        text = text.replace("RampRank", RAMP_LABEL).replace(
            f"# {RAMP_LABEL} vs SoftRank as the fairness losses' ordering",
            f"# Lazy regularisation: RampRank with its fairness term every {EVERY} steps (weighted {EVERY} lam) vs "
            f"SoftRank every step", 1).replace(
            "both orderings at temperature", f"the {RAMP_LABEL} trials with `model.fairness_every={EVERY}` "
            f"(`FairnessRegularizer(fairness_every={EVERY})`: the fairness term on the steps with step % {EVERY} = 0, "
            f"weighted {EVERY} lam there, Karras et al. 2020's lazy regularisation); both orderings at temperature")
    out_md.write_text(text)
    return text


# --------------------------------------------------------------------------------------------- main
def _parse_lams(items: Sequence[str]) -> Dict[str, List[float]]:
    out = {}
    for it in items:
        family, _, vals = it.partition("=")
        if family not in {f for f, _, _ in LOSSES} or not vals:
            raise ValueError(f"--lams: expected FAMILY=v1,v2,... with FAMILY in dips, misallocation, pairgap; "
                             f"got {it!r}")
        out[family] = [float(v) for v in vals.split(",")]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/ramp_tradeoff",
                   help="the starts and the trials (two sweep directories: starts/, sweep/); every --every shares it")
    p.add_argument("--every", type=int, default=1, metavar="K",
                   help="the RampRank arm trains its fairness term every K-th step only, weighted K lam (lazy "
                        "regularisation, `model.fairness_every`); the report is ramp_tradeoff_everyK.md")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of the starts and the trials")
    p.add_argument("--groups", nargs="+", default=["popularity"], choices=["popularity", "drama"],
                   help="provider-group definitions")
    p.add_argument("--workers", type=int, default=2, help="trials at once")
    p.add_argument("--threads", type=int, default=1, help="torch threads per trial")
    p.add_argument("--losses", nargs="+", default=[f for f, _, _ in LOSSES], choices=[f for f, _, _ in LOSSES],
                   help="loss families to run and report")
    p.add_argument("--nice", type=int, default=10, help="niceness added to this process and its trials")
    p.add_argument("--lams", nargs="+", default=[], metavar="FAMILY=V,V",
                   help="replace a loss family's lam grid (dips, misallocation, pairgap); default: "
                        "configs/sweep_ramp_tradeoff.yaml's grid of the family")
    p.add_argument("--results", default=None,
                   help="where ramp_tradeoff.md and the figure go (default: experiments/results, or OUT with --fast)")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from the finished trials")
    p.add_argument("--fast", action="store_true",
                   help="synthetic data, 2 epochs, one lam per loss: the pipeline in about a minute (with --losses dips)")
    args = p.parse_args(argv)
    if args.every < 1:
        p.error(f"--every must be >= 1; got {args.every}")
    global EVERY, RAMP_LABEL
    EVERY = args.every
    RAMP_LABEL = "RampRank" if EVERY == 1 else f"RampRank every {EVERY} steps"
    stem = "ramp_tradeoff" if EVERY == 1 else f"ramp_tradeoff_every{EVERY}"
    import yaml

    spec = yaml.safe_load(SWEEP.read_text())
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = Path(args.results) if args.results else (out if args.fast else ROOT / "experiments" / "results")
    results.mkdir(parents=True, exist_ok=True)
    try:
        override = _parse_lams(args.lams)
    except ValueError as e:
        p.error(str(e))
    grids = lam_grids(spec, {**FAST_LAMS, **override} if args.fast else override)
    seeds = args.seeds[:1] if args.fast else args.seeds
    path = derive_sweep(spec, out, args.groups, seeds, args.losses, grids, EVERY, args.fast)
    t0 = time.time()
    failed: List[str] = []
    if not args.report_only:
        if args.nice:
            os.nice(args.nice)
        starts(out, seeds, args.workers, args.threads, args.fast)
        res = _sweep.run(path, out / "sweep", workers=args.workers, threads=args.threads, check=False)
        if res["failed"]:
            from torchfair.sweeps import expand_trials, load_sweep

            failed = [t.trial_id for t in expand_trials(load_sweep(path))
                      if (out / "sweep" / "trials" / t.trial_id / "error.json").is_file()]
        (out / f"{stem}.run.json").write_text(json.dumps({"wall_seconds": time.time() - t0, "failed": failed,
                                                          "workers": args.workers}))
    elif (out / f"{stem}.run.json").is_file():  # the wall time and failures of the run that made the trials
        failed = list(json.loads((out / f"{stem}.run.json").read_text()).get("failed", []))
    res = load_results(out / "sweep", path)
    if not len(res):
        print("no finished trials", file=sys.stderr)
        return 1
    cmd = "python experiments/ramp_tradeoff.py" + (" --fast" if args.fast else "") + \
        (f" --seeds {' '.join(map(str, seeds))}" if list(seeds) != [0] else "") + \
        (f" --groups {' '.join(args.groups)}" if args.groups != ["popularity"] else "") + \
        (f" --losses {' '.join(args.losses)}" if len(args.losses) < len(LOSSES) else "") + \
        (f" --lams {' '.join(args.lams)}" if args.lams else "") + (f" --every {EVERY}" if EVERY > 1 else "")
    run = json.loads((out / f"{stem}.run.json").read_text()) if (out / f"{stem}.run.json").is_file() else {}
    text = report(res, results / f"{stem}.md", results, cmd, run.get("wall_seconds"),
                  "synthetic MovieLens stand-in (--fast)" if args.fast else "ML-100K",
                  {f: g for f, g in grids.items() if f in args.losses}, failed, run.get("workers", args.workers))
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
