"""The README's main job (``make demo``): MovieLens-100K, a ranker worth making fair, and the cheapest way to make it
fairer -- a loss, a re-rank, or both -- judged by the same exact measures on the same test lists.

What it does, on a fresh machine:

1. fetches ML-100K (GroupLens archive, or the RecBole 1.2.1 wheel from the package index) into the cache;
2. splits every user's ratings as the headline does (``leave_random_n``: per seed, 10 random ratings of each user
   are test and 5 more validation), so all 943 users have full-catalogue test lists;
3. groups items by popularity (head = the most-rated items holding half of the training ratings, tail = the rest);
4. trains, as sweep trials (:func:`torchfair.sweeps.run_sweep`, ``--workers`` at a time), for each seed the tuned
   ranker (``configs/sweep_starts_ials.yaml``, split ``random``: ``configs/ml100k_ials.yaml``, MF from implicit ALS
   and a short ListNet fine-tune, on par with LensKit's tuned iALS), then the
   fine-tunes of ``configs/sweep_movielens_demo.yaml`` from it, ``--finetune-epochs`` each: the utility term alone
   (the control) and ``utility + --lam * --loss`` on the losses' default ordering (``RampRank(0.1)``);
5. evaluates the trials' checkpoints with ``torchfair evaluate`` (exact measures, paired bootstrap over users): the
   ranker, the control, the loss, each also re-ranked by ``--rerank`` (which sees the scores and groups only), and
   popularity as a row.

The default recipe is what the headline's validation lists chose on popularity groups
(``experiments/loss_tradeoff.py``, ``experiments/results/loss_tradeoff.md``): the re-rank
``interleave:keep=8,p=1.0,protected=1`` (the model's top 8, then every tail item), and, as the recipe containing a
loss, ListNet + 0.01 x (DIPS gap + inter-group pairwise accuracy gap) for 2 epochs before it.

Outputs under ``--out``: ``starts/`` and ``sweep/`` (the trials: logs, checkpoints, ``result.json`` with their
timing; a second run reuses the finished ones), ``start/seed<S>.ckpt``, ``seed<S>/report/`` (the report files of
``torchfair evaluate``), ``summary.md``, ``summary.json`` and ``tradeoff.png`` (test NDCG@10 against the exact DIPS
gap of every row, means over seeds); ``--results``: also ``experiments/results/movielens_demo.md`` / ``.png``.

Runs unchanged on a GPU (``--accelerator auto`` picks it; with GPUs one trial per GPU).
``python experiments/movielens_demo.py --help``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _sweep  # noqa: E402 - the shared sweep helpers (experiments/_sweep.py)

#: the starts (split `last`) and the fine-tunes of the demo
STARTS = _sweep.CONFIGS / "sweep_starts_ials.yaml"
SWEEP = _sweep.CONFIGS / "sweep_movielens_demo.yaml"
#: the test-report columns of the summary table: (column, label, read as |value| for "removed")
SUMMARY_COLUMNS = [
    ("ndcg@10", "NDCG@10", False),
    ("dips_gap", "DIPS gap (tie weight 0.5)", True),
    ("exposure_misallocation_l1", "||delta||_1", True),
    ("pairwise_accuracy_inter", "pairwise acc. gap", True),
    ("exposure_share_B", "tail exposure share", False),
]
#: the headline's recommendations on popularity groups (experiments/loss_tradeoff.py,
#: experiments/results/loss_tradeoff.md), chosen on validation lists: the re-rank (interleave the tail right below
#: the model's top 8) and the recipe containing a loss (ListNet + 0.01 x (DIPS + pairwise gap) before it)
BEST_RECIPE = {"utility": "listnet", "loss": "multi", "lam": 0.01,
               "rerank": "interleave:keep=8,p=1.0,protected=1"}
BEST_RERANK = BEST_RECIPE["rerank"]


#: the fine-tune's utility term (``--utility``): a bundle of the sweep file's ``utility`` dimension
UTILITIES = {
    "listnet": {"model.utility_loss": {"class_path": "torchfair.losses.ListNetLoss",
                                       "init_args": {"relevance_temperature": 2.0}}},
    "lambdarank10": {"model.utility_loss": {"class_path": "torchfair.losses.LambdaNDCGLoss", "init_args": {"k": 10}}},
}
#: the fine-tune's fairness loss (``--loss``) on the default ordering (``RampRank(0.1)``): a bundle of the sweep
#: file's ``loss`` dimension (``multi``: DIPS gap + inter-group pairwise accuracy gap, one ordering)
LOSSES = {
    "pairgap": {"class_path": "torchfair.losses.PairwiseAccuracyGapLoss", "init_args": {"num_groups": 2}},
    "dips": {"class_path": "torchfair.losses.DIPSLoss", "init_args": {"num_groups": 2}},
    "misalloc": {"class_path": "torchfair.losses.ExposureMisallocationLoss", "init_args": {"num_groups": 2}},
    "multi": {"class_path": "torchfair.losses.MultiMeasureLoss",
              "init_args": {"num_groups": 2, "terms": ["dips", "pairwise_accuracy"]}},
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variant", default="ml-100k", help="MovieLens variant (see torchfair.data.load_movielens)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (data split too)")
    p.add_argument("--epochs", type=int, default=None, help="epochs of the tuned ranker (default: the recipe's, 60)")
    p.add_argument("--lam", type=float, default=BEST_RECIPE["lam"],
                   help="weight of the fairness loss in the fine-tune (0: no loss rows)")
    p.add_argument("--loss", default=BEST_RECIPE["loss"], choices=list(LOSSES),
                   help="the fairness loss (on the default ordering, RampRank(0.1))")
    p.add_argument("--utility", default=BEST_RECIPE["utility"], choices=list(UTILITIES),
                   help="the fine-tune's utility term")
    p.add_argument("--finetune-epochs", type=int, default=2, help="epochs of utility + lam * fairness from the ranker")
    p.add_argument("--rerank", default=BEST_RERANK, help="re-ranker spec (torchfair.rerank; 'none': no re-rank rows)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates of the test report")
    p.add_argument("--accelerator", default="auto", help="Lightning accelerator: auto, cpu, gpu")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads of each trial on the CPU (on the 2-core machines this was measured "
                        "on, 2 threads made each small op 3-15x slower than 1: OpenMP wake-ups dominate batches of "
                        "this size)")
    p.add_argument("--workers", type=int, default=None,
                   help="trials at once (default: one per GPU, else min(2, CPUs): each trial one torch thread)")
    p.add_argument("--out", default="runs/demo", help="output directory (the trials: a second run reuses them)")
    p.add_argument("--results", action="store_true",
                   help="also write experiments/results/movielens_demo.md and .png")
    p.add_argument("--quiet", action="store_true", help="no status line while the trials run")
    return p


def train(args, out: Path) -> Dict[str, Dict[str, str]]:
    """The trials of the demo: each seed's start (``configs/sweep_starts_ials.yaml``, split ``random``) and,
    with ``--lam`` > 0, the fine-tunes of ``configs/sweep_movielens_demo.yaml`` from it (the control and the
    recipe), as derived by the options; ``{seed: {"ranker" | "control" | "loss": checkpoint}}``."""
    seeds = [str(s) for s in args.seeds]
    common = {"data.variant": args.variant, "trainer.accelerator": args.accelerator}
    stream = open(os.devnull, "w") if args.quiet else None
    start_over = dict(common, **({"trainer.max_epochs": args.epochs} if args.epochs is not None else {}))
    seed_keys = {s: {"seed_everything": int(s), "data.seed": int(s)} for s in seeds}  # any seed, not only 0-2
    path = _sweep.derive(STARTS, out / "stages" / "starts.yaml", keep={"split": ["random"], "seed": seeds},
                         bundles={"seed": seed_keys}, overrides=start_over)
    _sweep.run(path, out / "starts", workers=args.workers, threads=args.threads, stream=stream)
    starts = _sweep.copy_starts(_sweep.finished(out / "starts", path), out / "start", {"split": "random"}, seeds)
    ckpts = {s: {"ranker": str(starts[s])} for s in seeds}
    if args.lam > 0:
        path = _sweep.derive(
            SWEEP, out / "stages" / "finetune.yaml", keep={"utility": [args.utility], "loss": ["control", args.loss],
                                                            "seed": seeds},
            bundles={"utility": {args.utility: UTILITIES[args.utility]},
                     "loss": {args.loss: {"model.fairness_loss": LOSSES[args.loss]}},
                     "seed": {s: {**seed_keys[s], "model.init_from": str(starts[s])} for s in seeds}},
            grids={"loss": {args.loss: {"model.lam": [args.lam]}}},
            overrides=dict(common, **{"trainer.max_epochs": args.finetune_epochs}))
        _sweep.run(path, out / "sweep", workers=args.workers, threads=args.threads, stream=stream)
        rows = _sweep.finished(out / "sweep", path)
        for s in seeds:
            for name, loss in (("control", "control"), ("loss", args.loss)):
                ckpts[s][name] = _sweep.pick(rows, loss=loss, seed=s)["checkpoint"]
    return ckpts


def _mean_sd(xs: List[float]):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def summarise(reports: Dict[int, Dict[str, Any]]) -> Dict[str, Any]:
    """Per row (run of the reports) and column: mean ± sd over seeds of the value, of the relative NDCG@10 change
    and of the share of the ranker's |unfairness| removed; per seed the paired NDCG@10 interval against the ranker
    (for runs paired with it)."""
    first = next(iter(reports.values()))
    names = list(first["order"])
    ref = names[0]
    rows = []
    for n in names:
        row = {"name": n, "columns": {}}
        for col, _, absolute in SUMMARY_COLUMNS:
            vals = [r["models"][n]["measures"].get(col, {}).get("mean") for r in reports.values()]
            base = [r["models"][ref]["measures"].get(col, {}).get("mean") for r in reports.values()]
            if col == "ndcg@10":
                change = [v / b - 1 for v, b in zip(vals, base)]
            elif absolute:
                change = [1 - abs(v) / abs(b) if b else float("nan") for v, b in zip(vals, base)]
            else:
                change = [v - b for v, b in zip(vals, base)]
            row["columns"][col] = {"value": _mean_sd(vals), "change": _mean_sd(change), "per_seed": vals}
        d = [r["differences"].get(n) for r in reports.values()]
        row["ndcg_ci_per_seed"] = [None if x is None or not x.get("paired") else
                                   (x["columns"]["ndcg@10"]["ci_low"], x["columns"]["ndcg@10"]["ci_high"],
                                    x["reference"]) for x in d]
        rows.append(row)
    return {"rows": rows, "seeds": list(reports), "reference": ref}


def summary_markdown(summary: Dict[str, Any], n_users: int) -> str:
    lines = [f"| test lists ({n_users} users x {len(summary['seeds'])} seeds) | "
             + " | ".join(lab + (" (removed)" if a else " (change)") for _, lab, a in SUMMARY_COLUMNS) + " |",
             "|---|" + "---:|" * len(SUMMARY_COLUMNS)]
    for r in summary["rows"]:
        cells = []
        for col, _, absolute in SUMMARY_COLUMNS:
            c = r["columns"][col]
            (vm, vs), (cm, cs) = c["value"], c["change"]
            if r["name"] == summary["reference"]:
                cells.append(f"{vm:.4f} ± {vs:.4f}")
            elif col == "ndcg@10" or absolute:
                cells.append(f"{vm:.4f} ({100 * cm:+.1f} %)" if col == "ndcg@10" else f"{vm:+.4f} ({100 * cm:.0f} %)")
            else:
                cells.append(f"{vm:.4f} ({cm:+.4f})")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    lines += ["", "± is the standard deviation over seeds; (…) relative NDCG@10 change, share of the ranker's "
              "|unfairness| removed, or change, against the tuned ranker of the same seed (means over seeds).  "
              "Paired 95 % bootstrap intervals of the NDCG@10 difference (per seed, against the row named):"]
    for r in summary["rows"][1:]:
        cis = [c for c in r["ndcg_ci_per_seed"] if c is not None]
        if cis:
            lines.append(f"- {r['name']} - {cis[0][2]}: " + ", ".join(f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi, _ in cis))
    return "\n".join(lines)


def plot_tradeoff(summary: Dict[str, Any], path: str) -> None:
    """Test NDCG@10 against |DIPS gap| of every row (means over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in summary["rows"]:
        x = abs(r["columns"]["dips_gap"]["value"][0])
        y = r["columns"]["ndcg@10"]["value"][0]
        ax.plot(x, y, "o")
        ax.annotate(r["name"].replace("targeted:measure=", "t:")[:48], (x, y), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel("|exact DIPS gap| (tie weight 0.5), test")
    ax.set_ylabel("NDCG@10, test")
    ax.grid(alpha=0.3)
    ax.set_title(f"ML-100K, popularity groups, means over {len(summary['seeds'])} seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def quiet_lightning() -> None:
    """Silence Lightning's chatter (GPU / TPU availability, the litlogger tip, "weights_only was not set", the
    small-dataset warnings); the progress bars and this script's lines stay.  Lightning sets its loggers to INFO
    when it is imported, so it is imported first."""
    import logging

    import lightning_fabric  # noqa: F401
    import pytorch_lightning  # noqa: F401

    for name in ("pytorch_lightning", "lightning_fabric", "lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for msg in (".*does not have many workers.*", ".*LeafSpec.*", ".*smaller than the logging interval.*",
                ".*weights_only.*", ".*litlogger.*"):
        warnings.filterwarnings("ignore", message=msg)


def environment_line(env: Dict[str, Any]) -> str:
    """What decides the numbers besides the seeds (:func:`torchfair.sweeps.trial.environment` of the trials and of
    the evaluation), as one line of the results page."""
    def one(e: Dict[str, Any]) -> str:
        return (f"{e.get('torch_threads')} torch thread(s), deterministic algorithms {e.get('deterministic')}, "
                f"kernels {e.get('kernels')}")
    trial = env.get("trials") or {}
    versions = ", ".join(f"{name} {trial.get(k)}" for name, k in (("torch", "torch"), ("numpy", "numpy"),
                                                                   ("numba", "numba_version")) if trial.get(k))
    return (f"Numbers decided by (besides the seeds): trials {one(trial)}; evaluation {one(env.get('evaluation', {}))}"
            f" (a call's kernel path follows from its input size, `torchfair.kernels.MIN_ELEMENTS`); {versions}.")


def results_markdown(table: str, command: str, seconds: float, train_seconds: float,
                     load: Optional[List[float]] = None, env: Optional[Dict[str, Any]] = None) -> str:
    """``experiments/results/movielens_demo.md``: the command, the date, the machine, the wall time (of it the
    training: the sweeps), the 1-minute load average at the start and the end, the summary table and what decides
    its numbers besides the seeds (``env``)."""
    when = time.strftime("%Y-%m-%d", time.gmtime())
    cpu = f"{os.cpu_count()}-core {platform.machine()} CPU"
    busy = f", load average {load[0]:.1f} at the start, {load[1]:.1f} at the end" if load else ""
    tail = f"\n{environment_line(env)}\n" if env else ""
    return (f"# make demo (`{command}`), {when}, {cpu}, data cached{busy}: {seconds:.0f} s "
            f"({train_seconds:.0f} s training)\n\n{table}\n{tail}")


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.quiet:
        warnings.filterwarnings("ignore")
    quiet_lightning()
    import torch

    from torchfair.evaluation.report import markdown_table
    from torchfair.rerank import get_reranker
    from torchfair.training import DEFAULT_MEASURES, evaluate_checkpoints

    rerank = [] if args.rerank.strip().lower() == "none" else [get_reranker(args.rerank).spec]  # fail early
    torch.set_num_threads(args.threads)
    if args.workers is None and not torch.cuda.is_available():
        args.workers = max(1, min(2, os.cpu_count() or 1))  # CPU trials of one thread each, side by side
    t_start = time.time()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def say(msg: str) -> None:
        print(f"[{time.time() - t_start:5.0f}s] {msg}", flush=True)

    say(f"training (sweep trials, {args.workers or 'one per GPU, else 1'} at a time): the start of seeds "
        f"{args.seeds} (MF from implicit ALS + ListNet, configs/ml100k_ials.yaml)"
        + (f", then {args.finetune_epochs} epoch(s) of {args.utility} alone and + {args.lam:g}·{args.loss}"
           if args.lam > 0 else ""))
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    ckpts = train(args, out)
    train_seconds = time.time() - t_start
    reports: Dict[int, Dict[str, Any]] = {}
    control_name = f"control: {args.utility} fine-tune ({args.finetune_epochs} ep)"
    loss_name = f"{args.utility} + {args.lam:g}·{args.loss} ({args.finetune_epochs} ep)"
    for seed in args.seeds:
        tr = ckpts[str(seed)]
        names = ["ranker"] + (["control", "loss"] if "loss" in tr else [])
        say(f"seed {seed}: torchfair evaluate (exact measures, test lists; re-rank {rerank or 'none'}, popularity)")
        rep = evaluate_checkpoints([tr[n] for n in names], str(out / f"seed{seed}" / "report"),
                                   names=["start (iALS)", control_name, loss_name][:len(names)], rerank=rerank,
                                   popularity=True, bootstrap=args.bootstrap, seed=seed, measures=DEFAULT_MEASURES,
                                   overwrite=True)
        reports[seed] = rep
    first = reports[args.seeds[0]]
    n_users = first["models"][first["order"][0]]["n_lists"]
    summary = summarise(reports)
    summary["seconds"] = time.time() - t_start
    summary["train_seconds"] = train_seconds
    summary["args"] = vars(args)
    from torchfair.sweeps.trial import environment

    trial_env = next((json.loads(f.read_text()).get("environment") for f in sorted(out.glob("*/trials/*/result.json"))),
                     None)
    summary["environment"] = {"trials": trial_env or {}, "evaluation": environment()}
    table = summary_markdown(summary, n_users)
    plot_tradeoff(summary, str(out / "tradeoff.png"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "summary.md").write_text(table + "\n\nSeed " + str(args.seeds[0]) + " in detail (mean [95% bootstrap "
                                    "interval]):\n\n" + markdown_table(first) + "\n")
    if args.results:
        command = "python experiments/movielens_demo.py " + " ".join(argv if argv is not None else sys.argv[1:])
        res = _sweep.ROOT / "experiments" / "results"
        load = [load0, os.getloadavg()[0]] if load0 is not None else None
        (res / "movielens_demo.md").write_text(results_markdown(table, command.strip(), summary["seconds"],
                                                                train_seconds, load, summary["environment"]))
        import _provenance

        (res / "movielens_demo.json").write_text(json.dumps(
            {**summary, "provenance": _provenance.provenance(argv, script="experiments/movielens_demo.py")},
            indent=1, default=str))
        shutil.copyfile(out / "tradeoff.png", res / "movielens_demo.png")
    print()
    print(table)
    print(f"\nreports: {args.out}/seed*/report/ (report.md, report.json, exposure_by_position.png); "
          f"{args.out}/summary.md; {args.out}/tradeoff.png; the trials: {args.out}/starts, {args.out}/sweep")
    print(f"total time {summary['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
