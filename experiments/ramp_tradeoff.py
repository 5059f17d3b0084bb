"""RampRank against SoftRank as the ordering of the fairness losses: the fairness / utility trade-off at the same lams.

Question.  :class:`torchfair.orderings.RampRank` (SoftRank's pair relaxation with a piecewise-linear kernel, pair
sums in O(N log N)) may become the losses' default ordering only if its trade-off is at least as good as
SoftRank's.  This script measures both on the protocol of ``experiments/headline_tradeoff.py``:

* start: biased MF (dim 32) trained with ListNet for 20 epochs per seed (``configs/ml100k_listnet.yaml``;
  ``headline_tradeoff.pretrain``);
* trials: fine-tune that start for 3 epochs with ``ListNet + lam * loss`` (``configs/ml100k_dips.yaml`` with the
  overrides of ``configs/sweep_headline.yaml``: constant lam, no validation while fine-tuning), the loss one of
  DIPSLoss, ExposureMisallocationLoss, PairwiseAccuracyGapLoss (``num_groups=2``) on ``SoftRank(0.1)`` or on
  ``RampRank(0.1)``, at the lams of ``configs/sweep_headline.yaml`` (``dips_soft``, ``misallocation_soft``,
  ``pairgap_soft``), plus the shared ``lam = 0`` baseline (ListNet fine-tuned alone);
* each trial is two plain subprocesses, ``python -m torchfair.cli fit ...`` then ``python -m torchfair.cli test
  --ckpt_path <last checkpoint>``: the exact test measures on the full-catalogue test lists of all 943 users
  (DIPS gap ``|M_AB - M_BA|``, misallocation ``||delta||_1`` with the EE target, ``|inter|`` pairwise accuracy gap,
  NDCG@10); the fine-tune time is Lightning's ``Timer`` (training stage, read from the last checkpoint), divided by
  the epochs for the time per epoch;
* the SoftRank and RampRank trials of one loss and lam are queued next to each other (2 workers: they run at the
  same time), so that load from other work on the machine hits both alike.

Read-outs (``headline_tradeoff.curves`` / ``at_budget``): the share of the baseline's unfairness removed by the best
measured lam whose NDCG@10 cost is at most 1 % and at most 2 %; the same step function at more cost levels
(``share_at_cost``); the paired differences at the same lam (``paired_differences``: NDCG@10 cost and share removed,
RampRank - SoftRank); point dominance between the two orderings' measured points (``dominated``).  Verdict per loss
(``verdict``): RampRank is at least as good as SoftRank when, on the loss's own measure, its share removed within 1 %
and within 2 % of NDCG@10 is at least SoftRank's minus ``TOLERANCE`` (one seed: small differences are noise of the
training trajectory, not of the ordering).  Time: the mean seconds per fine-tune epoch per ordering, and the median
ratio of the two trials of each lam (``paired_ratios``), which ran side by side.

Usage::

    python experiments/ramp_tradeoff.py [--seeds 0] [--groups popularity] [--workers 2]   # run and report
    python experiments/ramp_tradeoff.py --code HEAD        # the trials on the last commit's torchfair (git archive)
    python experiments/ramp_tradeoff.py --report-only                                     # report the finished trials
    python experiments/ramp_tradeoff.py --fast [--losses dips]               # synthetic data, about a minute

Resumable: a trial whose ``result.json`` exists is not run again.  The full run (seed 0, popularity, 45 trials) took
31 min on a shared 2-core machine.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

EXPERIMENTS = Path(__file__).resolve().parent
ROOT = EXPERIMENTS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(EXPERIMENTS))

import headline_tradeoff as ht  # noqa: E402 - the protocol's pretraining and read-outs

SWEEP = ROOT / "configs" / "sweep_headline.yaml"
#: the three losses: (key in configs/sweep_headline.yaml without "_soft", label, its own measure column)
LOSSES = [("dips", "DIPS", "dips_gap"),
          ("misallocation", "exposure misallocation", "exposure_misallocation_l1"),
          ("pairgap", "pairwise accuracy gap", "pairwise_accuracy_inter")]
ORDERINGS = {"soft": ("SoftRank", "torchfair.orderings.SoftRank"),
             "ramp": ("RampRank", "torchfair.orderings.RampRank")}
TEMPERATURE = 0.1
UTILITY = ht.UTILITY
MEASURE_LABEL = {c: lab for c, lab, _ in ht.MEASURES}
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


# --------------------------------------------------------------------------------------------- trials
def loss_key(family: str, ordering: str) -> str:
    return f"{family}_{ordering}"


def split_key(key: str) -> Tuple[str, str]:
    family, _, ordering = key.rpartition("_")
    return family, ordering


def lam_grids(spec: Dict, override: Optional[Dict[str, List[float]]] = None) -> Dict[str, List[float]]:
    """The lam grid of each loss family: ``configs/sweep_headline.yaml``'s ``<family>_soft`` grid, or ``override``."""
    out = {}
    for family, _, _ in LOSSES:
        grid = spec["variants"]["loss"][f"{family}_soft"]["grid"]["model.lam"]
        out[family] = [float(x) for x in (override or {}).get(family, grid)]
    return out


def loss_config(spec: Dict, family: str, ordering: str) -> Dict:
    """``model.fairness_loss`` of ``<family>_soft`` in the sweep file, with the ordering's class put in."""
    cfg = copy.deepcopy(spec["variants"]["loss"][f"{family}_soft"]["model.fairness_loss"])
    ordr = cfg["init_args"]["ordering"]
    assert ordr["class_path"] == "torchfair.orderings.SoftRank", ordr
    ordr["class_path"] = ORDERINGS[ordering][1]
    ordr["init_args"] = {"temperature": TEMPERATURE}
    return cfg


def plan(spec: Dict, groups: Sequence[str], seeds: Sequence[int], grids: Dict[str, List[float]],
         families: Optional[Sequence[str]] = None) -> List[Dict]:
    """The trials in running order: per groups and seed the baseline, then per loss (``families``: all three when
    None) and lam the SoftRank and the RampRank trial next to each other (which goes first alternates)."""
    trials = []
    for g in groups:
        for s in seeds:
            trials.append({"groups": g, "seed": s, "loss": "none", "family": "none", "ordering": "none", "lam": 0.0})
            k = 0
            for family, _, _ in LOSSES:
                if families is not None and family not in families:
                    continue
                for lam in grids[family]:
                    pair = ["soft", "ramp"] if k % 2 == 0 else ["ramp", "soft"]
                    k += 1
                    for o in pair:
                        trials.append({"groups": g, "seed": s, "loss": loss_key(family, o), "family": family,
                                       "ordering": o, "lam": float(lam), "every": EVERY if o == "ramp" else 1})
    return trials


def trial_name(t: Dict) -> str:
    lam = "0" if t["loss"] == "none" else f"{t['lam']:g}"
    every = f"_every{t['every']}" if t.get("every", 1) > 1 else ""
    return f"{t['groups']}_s{t['seed']}_{t['loss']}{every}_lam{lam}"


def trial_overrides(spec: Dict, t: Dict, start: Path, fast: bool) -> Dict:
    """The dotted keys of a trial on top of the base config: the sweep file's overrides, groups, seed and start,
    the loss (``null`` for the baseline) and lam, and a ``Timer`` callback."""
    over = dict(spec["overrides"])
    if fast:
        over.update({**ht.FAST, "trainer.max_epochs": 2})
    over.update(spec["variants"]["groups"][t["groups"]])
    over.update({"seed_everything": t["seed"], "model.init_from": str(start.resolve())})
    if t["loss"] == "none":
        over["model.fairness_loss"] = None
    else:
        over["model.fairness_loss"] = loss_config(spec, t["family"], t["ordering"])
    over["model.lam"] = t["lam"]
    if t.get("every", 1) > 1:
        over["model.fairness_every"] = int(t["every"])
    # the fine-tune time: Lightning's Timer, whose state (training-stage seconds) goes into the checkpoint
    over["trainer.callbacks"] = list(over["trainer.callbacks"]) + [
        {"class_path": "pytorch_lightning.callbacks.Timer", "init_args": {"interval": "epoch"}}]
    return over


def trial_args(spec: Dict, t: Dict, start: Path, fast: bool, code: Path = ROOT) -> List[str]:
    """The ``torchfair fit`` / ``test`` arguments of a trial: the base config of the sweep file (under ``code``)
    and :func:`trial_overrides`."""
    args = ["--config", str(code / "configs" / spec["base"])]
    for k, v in trial_overrides(spec, t, start, fast).items():
        args += [f"--{k}", v if isinstance(v, str) else json.dumps(v)]
    return args


def _logger(save_dir: Path, name: str) -> str:
    return json.dumps({"class_path": "pytorch_lightning.loggers.CSVLogger",
                       "init_args": {"save_dir": str(save_dir), "name": name, "version": ""}})


def _atomic_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _last_checkpoint(tdir: Path) -> Path:
    ckpts = sorted((tdir / "fit" / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not ckpts:
        raise RuntimeError(f"no checkpoint under {tdir / 'fit' / 'checkpoints'}")
    return ckpts[-1]


def _test_metrics(path: Path) -> Dict[str, float]:
    import csv

    out: Dict[str, float] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            out.update({k: float(v) for k, v in row.items() if k.startswith("test/") and v not in ("", None)})
    return out


def run_trial(spec: Dict, t: Dict, start: Path, out: Path, threads: int, fast: bool, code: Path = ROOT,
              code_id: str = "worktree") -> Dict:
    """Fit and test one trial in two ``python -m torchfair.cli`` subprocesses (run in ``code``: the torchfair they
    import; ``threads`` torch threads); writes and returns ``out/<name>/result.json`` (kept: the trial is skipped
    next time)."""
    tdir = out / trial_name(t)
    done = tdir / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    if tdir.exists():
        shutil.rmtree(tdir)  # a trial interrupted before its result: start it afresh
    tdir.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    base = [sys.executable, "-m", "torchfair.cli"]
    args = trial_args(spec, t, start, fast, code)
    epochs = int(trial_overrides(spec, t, start, fast)["trainer.max_epochs"])  # no early stopping when fine-tuning
    log = open(tdir / "trial.log", "w")
    try:
        t0 = time.time()
        subprocess.run(base + ["fit"] + args + ["--trainer.default_root_dir", str(tdir),
                                               "--trainer.logger", _logger(tdir, "fit")],
                       check=True, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=code)
        fit_wall = time.time() - t0
        ckpt = _last_checkpoint(tdir)
        import torch

        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        timer = [v for k, v in state.get("callbacks", {}).items() if k.startswith("Timer")]
        train_s = float(timer[0]["time_elapsed"]["train"]) if timer else math.nan
        del state
        t1 = time.time()
        subprocess.run(base + ["test"] + args + ["--ckpt_path", str(ckpt), "--trainer.default_root_dir", str(tdir),
                                                "--trainer.logger", _logger(tdir, "test")],
                       check=True, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=code)
        metrics = _test_metrics(tdir / "test" / "metrics.csv")
    finally:
        log.close()
    res = {**t, "metrics": metrics, "fit_train_seconds": train_s, "epochs": epochs,
           "seconds_per_epoch": train_s / epochs if epochs > 0 else math.nan, "fit_wall_seconds": fit_wall,
           "test_wall_seconds": time.time() - t1, "checkpoint": str(ckpt), "code": code_id}
    _atomic_json(done, res)
    return res


def run_all(spec: Dict, trials: List[Dict], starts: Dict[int, Path], out: Path, workers: int, threads: int,
            fast: bool, code: Path = ROOT, retries: int = 2, wait: float = 30.0,
            code_id: str = "worktree") -> List[str]:
    """Run the trials in order, ``workers`` at a time, a failed trial again up to ``retries`` times after ``wait``
    seconds; returns the names of those that still failed (their log kept)."""
    lock = threading.Lock()
    failed: List[str] = []
    count = [0]

    def one(t: Dict) -> None:
        name = trial_name(t)
        for attempt in range(retries + 1):
            try:
                r = run_trial(spec, t, starts[t["seed"]], out, threads, fast, code, code_id)
                msg = (f"{name}: NDCG@10 {r['metrics'].get('test/' + UTILITY, math.nan):.4f}, "
                       f"{r['seconds_per_epoch']:.2f} s/epoch")
                break
            except Exception as e:  # noqa: BLE001 - retried, then recorded; the others go on; a rerun retries it
                msg = f"{name}: FAILED ({type(e).__name__}: {e}); log: {out / name / 'trial.log'}"
                if attempt < retries:
                    print(f"[retry] {msg}", flush=True)
                    time.sleep(wait)
        else:
            with lock:
                failed.append(name)
        with lock:
            count[0] += 1
            print(f"[{count[0]}/{len(trials)}] {msg}", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(one, trials))
    return failed


def snapshot(rev: str, out: Path) -> Tuple[Path, str]:
    """``git archive REV`` (torchfair/ and configs/) extracted once under ``out/code-<sha>``: the trials import that
    torchfair, not the working tree's (other people's uncommitted edits).  Returns the folder and the commit."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    dest = out / f"code-{sha[:12]}"
    if not (dest / ".complete").is_file():
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha, "torchfair", "configs"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        (dest / ".complete").write_text(sha + "\n")
    return dest.resolve(), sha


def pretrain_in(code: Path, out: Path, seeds: Sequence[int], epochs: int, threads: int, fast: bool):
    """``headline_tradeoff.pretrain`` with ``code`` as the working directory (the torchfair it imports)."""
    here, out = Path.cwd(), out.resolve()
    os.chdir(code)
    try:
        return ht.pretrain(out, seeds, epochs, threads, fast=fast)
    finally:
        os.chdir(here)


# --------------------------------------------------------------------------------------------- analysis
def load_results(out: Path):
    """The finished trials (``out/*/result.json``) as a frame in ``headline_tradeoff``'s layout (groups, loss, seed,
    lam, seconds, NDCG@10, the measures with ``|.|`` taken) plus family, ordering and the timings."""
    import pandas as pd

    rows = []
    for path in sorted(out.glob("*/result.json")):
        r = json.loads(path.read_text())
        m = r["metrics"]
        row = {"groups": r["groups"], "loss": r["loss"], "seed": str(r["seed"]), "lam": float(r["lam"]),
               "family": r["family"], "ordering": r["ordering"],
               "seconds": float(r["fit_wall_seconds"]) + float(r["test_wall_seconds"]),
               "seconds_per_epoch": float(r["seconds_per_epoch"]), "fit_wall": float(r["fit_wall_seconds"]),
               "epochs": int(r["epochs"]), "code": r.get("code", "worktree"), UTILITY: float(m[f"test/{UTILITY}"])}
        for col, _, absolute in ht.MEASURES:
            v = float(m[f"test/{col}"])
            row[col] = abs(v) if absolute else v
        rows.append(row)
    return pd.DataFrame(rows)


def share_at_cost(cur, loss: str, measure: str, level: float, groups: Optional[str] = None) -> Tuple[float, float]:
    """``(share removed, lam)``: the best measured share of ``measure`` removed among ``loss``'s lams (the
    baseline, removing 0, included) whose mean NDCG@10 cost is at most ``level`` (``headline_tradeoff.at_budget``'s
    rule for one loss and measure)."""
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
        wall = float(d["fit_wall"].mean()) if "fit_wall" in d else math.nan
        return {"mean": float(d["seconds_per_epoch"].mean()),
                "sd": float(d["seconds_per_epoch"].std(ddof=1)) if len(d) > 1 else math.nan, "n": int(len(d)),
                "fit_wall": wall}

    out: Dict[str, Dict[str, float]] = {}
    for (fam, o), d in res.groupby(["family", "ordering"]):
        out[f"{fam}:{o}"] = stats(d)
    for o, d in res.groupby("ordering"):
        out[o] = stats(d)
    return out


def paired_ratios(res, family: Optional[str] = None) -> List[float]:
    """RampRank's seconds per epoch over SoftRank's in the same groups, seed, loss and lam (the two trials that ran
    side by side), one per pair, for one loss family or all."""
    d = res[res["ordering"].isin(list(ORDERINGS))]
    if family is not None:
        d = d[d["family"] == family]
    t = d.pivot_table(index=["groups", "seed", "family", "lam"], columns="ordering", values="seconds_per_epoch")
    if not set(ORDERINGS) <= set(t.columns):
        return []
    return [float(x) for x in (t["ramp"] / t["soft"]).dropna()]


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
           grids: Optional[Dict[str, List[float]]] = None, failed: Sequence[str] = ()) -> str:
    cur = ht.curves(res)
    codes = sorted(set(res["code"])) if "code" in res else []
    code = ("the trials ran torchfair at " + ", ".join("the working tree" if c == "worktree" else f"commit {c[:12]}"
                                                      for c in codes)) if codes else ""
    epochs = f"{int(res['epochs'].max())} fine-tune epochs" if "epochs" in res else "the fine-tune epochs"
    seeds = sorted(set(res["seed"]))
    times = epoch_times(res)
    many = len(set(cur["groups"])) > 1
    lines = [f"# RampRank vs SoftRank as the fairness losses' ordering: the trade-off on {data}", "",
             f"Reproduce: `{command}`" + (f" ({wall / 60:.0f} min of wall time on a shared 2-core CPU machine, 2 "
                                          "trials at once, 1 torch thread each, under `nice`; no GPU)" if wall else "")
             + ".",
             f"Trials: {len(res)} finished (seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}), "
             f"{res['seconds'].sum() / 60:.0f} trial-minutes (fit + test subprocesses, pretraining not included)"
             + (f"; {len(failed)} failed: {', '.join(failed)}" if failed else "") + ".  Protocol: the docstring of "
f"`experiments/ramp_tradeoff.py` (that of `experiments/headline_tradeoff.py`: {epochs} from the "
             "ListNet start, exact test measures of the last checkpoint); both orderings at "
             f"temperature {TEMPERATURE:g}." + (f"  Code: {code}." if code else ""), ""]
    if grids:
        lines += ["Lams: " + "; ".join(f"{lab} {', '.join(f'{x:g}' for x in grids[f])}"
                                      for f, lab, _ in LOSSES if f in grids)
                  + " (`configs/sweep_headline.yaml`'s grids of the SoftRank losses).", ""]
    lines += ["Time per fine-tune epoch (Lightning's `Timer`, training stage, over the trials; mean ± sd, n trials; "
              "two trials ran at once, the SoftRank and RampRank trial of the same lam side by side):", "",
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
    if s and r and math.isfinite(s["fit_wall"]):
        lines += ["", f"Wall time of a whole `torchfair fit` subprocess (imports, data, {epochs}, checkpoint), mean: "
                  f"SoftRank {_s(s['fit_wall'])}, RampRank {_s(r['fit_wall'])}"
                  + (f", ListNet alone {_s(times['none']['fit_wall'])}" if "none" in times else "") + "."]
    lines.append("")
    verdicts = {}
    for groups in sorted(set(cur["groups"])):
        c = cur[cur["groups"] == groups]
        png = f"{out_md.stem}_{groups}.png" if many else f"{out_md.stem}.png"
        figure(cur, groups, fig_dir / png, data)
        base = c[c["lam"] == 0].iloc[0]
        lines += [f"## {groups} groups", "", f"![trade-off]({png})", "",
                  f"Baseline (ListNet fine-tuned alone, lam = 0): NDCG@10 {base[UTILITY]:.4f}, "
                  + ", ".join(f"{lab} {base[col]:.4f}" for col, lab, _ in ht.MEASURES) + ".", ""]
        # read-outs
        lines += ["### Read-outs: share of the baseline's unfairness removed within 1 % / 2 % of NDCG@10", "",
                  "Best measured lam within the budget (lam in brackets; lam = 0 removes 0; ≥: the largest lam tried "
                  "is within the budget), on the loss's own measure; diff = RampRank - SoftRank, in percentage "
                  f"points.  Verdict: RampRank is at least as good when diff ≥ -{100 * TOLERANCE:g} pp at both "
                  "budgets (one seed: a tolerance for the noise of the training trajectory).", "",
                  "| loss (own measure) | SoftRank 1 % | RampRank 1 % | diff | SoftRank 2 % | RampRank 2 % | diff "
                  "| RampRank ≥ SoftRank? |", "|---|---:|---:|---:|---:|---:|---:|---|"]
        b = {x: ht.at_budget(c, x).set_index(["loss", "measure"]) for x in BUDGETS}

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
                  "| loss | " + " | ".join(f"{lab}: 1 % | 2 %" for _, lab, _ in ht.MEASURES) + " |",
                  "|---|" + "---:|---:|" * len(ht.MEASURES)]
        for family, label, _ in LOSSES:
            if loss_key(family, "soft") not in set(c["loss"]):
                continue
            cells = []
            for col, _, _ in ht.MEASURES:
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
                  "| loss | lam | NDCG@10 | " + " | ".join(lab for _, lab, _ in ht.MEASURES) + " |",
                  "|---|---:|---:|" + "---:|" * len(ht.MEASURES)]
        for family, label, _ in LOSSES:
            soft, ramp = loss_key(family, "soft"), loss_key(family, "ramp")
            for lam in sorted(set(c[c["loss"].isin([soft, ramp]) & (c["lam"] > 0)]["lam"])):
                rows = [c[(c["loss"] == k) & (c["lam"] == lam)] for k in (soft, ramp)]

                def both(col: str) -> str:
                    return " / ".join(f"{r.iloc[0][col]:.4f}" if len(r) else "-" for r in rows)

                lines.append(f"| {label} | {lam:g} | {both(UTILITY)} | "
                             + " | ".join(both(col) for col, _, _ in ht.MEASURES) + " |")
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
            f"(`FairnessRegularizer(every={EVERY})`: the fairness term on the steps with step % {EVERY} = 0, "
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
    p.add_argument("--out", default=None,
                   help="pretrained starts, trials (one folder each); default runs/ramp_tradeoff[_everyK]")
    p.add_argument("--every", type=int, default=1, metavar="K",
                   help="the RampRank arm trains its fairness term every K-th step only, weighted K lam (lazy "
                        "regularisation, `model.fairness_every`); the report is ramp_tradeoff_everyK.md")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of the starts and the trials")
    p.add_argument("--groups", nargs="+", default=["popularity"], choices=["popularity", "drama"],
                   help="provider-group definitions")
    p.add_argument("--workers", type=int, default=2, help="trials at once")
    p.add_argument("--threads", type=int, default=1, help="torch threads per trial")
    p.add_argument("--pretrain-epochs", type=int, default=20, help="ListNet epochs of each pretrained start")
    p.add_argument("--losses", nargs="+", default=[f for f, _, _ in LOSSES], choices=[f for f, _, _ in LOSSES],
                   help="loss families to run and report")
    p.add_argument("--code", default="worktree",
                   help="the torchfair the trials run: 'worktree' (this checkout) or a git revision, extracted with "
                        "git archive under OUT/code-<sha> (keeps other people's uncommitted edits out of the trials)")
    p.add_argument("--nice", type=int, default=10, help="niceness added to this process and its trials")
    p.add_argument("--retries", type=int, default=2, help="runs more of a failed trial (after 30 s)")
    p.add_argument("--lams", nargs="+", default=[], metavar="FAMILY=V,V",
                   help="replace a loss family's lam grid (dips, misallocation, pairgap); default: "
                        "configs/sweep_headline.yaml's grid of the SoftRank loss")
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
    if args.out is None:
        args.out = f"runs/{stem}"
    import yaml

    spec = yaml.safe_load(SWEEP.read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = Path(args.results) if args.results else (out if args.fast else ROOT / "experiments" / "results")
    results.mkdir(parents=True, exist_ok=True)
    try:
        override = _parse_lams(args.lams)
    except ValueError as e:
        p.error(str(e))
    grids = lam_grids(spec, {**FAST_LAMS, **override} if args.fast else override)
    seeds = args.seeds[:1] if args.fast else args.seeds
    t0 = time.time()
    failed: List[str] = []
    code, code_id = ROOT, "worktree"
    if args.code != "worktree" and not args.report_only:
        code, code_id = snapshot(args.code, out)
    if not args.report_only:
        if args.nice:
            os.nice(args.nice)
        starts = pretrain_in(code, out / "pretrain", seeds, 2 if args.fast else args.pretrain_epochs, args.threads,
                             args.fast)
        trials = plan(spec, args.groups, seeds, grids, args.losses)
        print(f"[ramp_tradeoff] {len(trials)} trials, {args.workers} at a time, torchfair from {code}", flush=True)
        failed = run_all(spec, trials, starts, (out / "trials").resolve(), args.workers, args.threads, args.fast,
                         code, args.retries, code_id=code_id)
        _atomic_json(out / "run.json", {"wall_seconds": time.time() - t0, "failed": failed})
    elif (out / "run.json").is_file():  # the wall time and failures of the run that made the trials
        last = json.loads((out / "run.json").read_text())
        failed = list(last.get("failed", []))
    res = load_results(out / "trials")
    if not len(res):
        print("no finished trials", file=sys.stderr)
        return 1
    want = set(args.groups)
    res = res[res["groups"].isin(want) & res["seed"].isin({str(s) for s in seeds})
              & (res.apply(lambda r: r["loss"] == "none" or (r["family"] in args.losses
                                                             and r["lam"] in grids[r["family"]]), axis=1))]
    res = res.reset_index(drop=True)
    cmd = "python experiments/ramp_tradeoff.py" + (" --fast" if args.fast else "") + \
        (f" --seeds {' '.join(map(str, seeds))}" if list(seeds) != [0] else "") + \
        (f" --groups {' '.join(args.groups)}" if args.groups != ["popularity"] else "") + \
        (f" --losses {' '.join(args.losses)}" if len(args.losses) < len(LOSSES) else "") + \
        (f" --code {args.code}" if args.code != "worktree" else "") + \
        (f" --lams {' '.join(args.lams)}" if args.lams else "") + (f" --every {EVERY}" if EVERY > 1 else "")
    wall = json.loads((out / "run.json").read_text())["wall_seconds"] if (out / "run.json").is_file() else None
    text = report(res, results / f"{stem}.md", results, cmd, wall,
                  "synthetic MovieLens stand-in (--fast)" if args.fast else "ML-100K",
                  {f: g for f, g in grids.items() if f in args.losses}, failed)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
