"""The README's main job (``make demo``): MovieLens-100K, MF trained with ListNet and with ListNet + lambda * DIPS.

What it does, on a fresh machine:

1. fetches ML-100K (GroupLens archive, or the RecBole 1.2.1 wheel from the package index) into the cache;
2. splits every user's ratings leave-last-n-out (the last 10 by time are test, the 5 before validation), so all
   943 users have full-catalogue test lists and the intervals are tight (the global temporal split of Korevaar et
   al. leaves only ~110 users with both training and test ratings on ML-100K);
3. groups items by popularity (head = the most-rated items holding half of the training ratings, tail = the rest);
4. for each seed trains biased MF with ListNet for ``--epochs`` epochs (the shared start), then trains two models
   from it for ``--finetune-epochs`` more epochs each: ListNet alone, and ListNet + lambda * DIPS loss (DIPS,
   Fabris et al., WSDM 2023, eq. 11, on ``SoftRank(0.1)``).  Fine-tuning from a trained start keeps lambda's
   meaning fixed (SoftRank's temperature follows the score spread, and a fresh model's bunched scores make the DIPS
   gradient ~5x larger in the first epochs: experiments/lambda_temperature.py) and costs a fraction of training
   with the pairwise loss from scratch.  lambda is picked on the *validation* lists of the first seed among
   ``--lams``: the one that removes most of the exact DIPS gap while losing at most ``--max-ndcg-loss``
   (relative) NDCG@10 against the ListNet model;
5. evaluates both checkpoints of every seed with ``torchfair evaluate`` (exact measures on the test lists, paired
   bootstrap) and prints the comparison table over seeds.

Outputs under ``--out``: ``seed<S>/`` (checkpoints, the report files of ``torchfair evaluate``), ``summary.md``,
``summary.json`` and ``tradeoff.png`` (validation NDCG@10 against the exact DIPS gap for every lambda tried).

Runs unchanged on a GPU (``--accelerator auto`` picks it).  ``python experiments/movielens_demo.py --help``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

#: the test-report columns of the summary table: (column, label, how the change is read)
SUMMARY_COLUMNS = [
    ("ndcg@10", "NDCG@10", "higher is better"),
    ("dips_gap", "DIPS gap, tie weight 0.5 (AB - BA)", "closer to 0 is fairer"),
    ("dips_t0_gap", "DIPS gap, tie weight 0 (AB - BA)", "closer to 0 is fairer"),
    ("dips_AB", "DIPS M_AB (head dissatisfied by tail)", ""),
    ("dips_BA", "DIPS M_BA (tail dissatisfied by head)", ""),
    ("exposure_misallocation_l1", "exposure misallocation ||delta||_1", "lower is fairer"),
    ("pairwise_accuracy_inter", "inter-group pairwise accuracy gap", "closer to 0 is fairer"),
    ("exposure_share_B", "tail's share of exposure (RBP 0.9)", ""),
]
VAL_MEASURES = ["ndcg@10", "dips", "dips:tie_weight=0,label=dips_t0"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variant", default="ml-100k", help="MovieLens variant (see torchfair.data.load_movielens)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (data split too)")
    p.add_argument("--lams", type=float, nargs="+", default=[0.03, 0.1, 0.3, 1.0, 3.0],
                   help="candidate weights of the DIPS loss, chosen by validation on the first seed")
    p.add_argument("--max-ndcg-loss", type=float, default=0.02,
                   help="largest relative loss of validation NDCG@10 a lambda may cost to be chosen")
    p.add_argument("--epochs", type=int, default=20, help="ListNet epochs of the shared starting model")
    p.add_argument("--finetune-epochs", type=int, default=5,
                   help="epochs each compared model trains from the shared start: ListNet alone, or ListNet + "
                        "lambda * DIPS")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--dim", type=int, default=32, help="MF latent dimension")
    p.add_argument("--temperature", type=float, default=0.1,
                   help="SoftRank temperature of the DIPS loss (relative to each list's score spread)")
    p.add_argument("--num-negatives", type=int, default=100, help="unrated items per training list")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates of the test report")
    p.add_argument("--accelerator", default="auto", help="Lightning accelerator: auto, cpu, gpu")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads on the CPU (on the 2-core machines this was measured on, 2 threads "
                        "made each small op 3-15x slower than 1: OpenMP wake-ups dominate batches of this size)")
    p.add_argument("--out", default="runs/demo", help="output directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _trainer(args, epochs: int, log_dir: str, name: str):
    import pytorch_lightning as pl
    from pytorch_lightning.loggers import CSVLogger

    return pl.Trainer(max_epochs=epochs, accelerator=args.accelerator, devices=1, deterministic=True,
                      logger=CSVLogger(log_dir, name=name), enable_checkpointing=False,
                      enable_progress_bar=not args.quiet, enable_model_summary=False, num_sanity_val_steps=0,
                      check_val_every_n_epoch=epochs, log_every_n_steps=5)


def train_one(args, seed: int, lam: float, epochs: int, out: str, tag: str,
              init: Optional[str] = None) -> Dict[str, Any]:
    """Train MF with ListNet (+ lam * DIPS) for ``epochs`` epochs, from scratch or from the ranker weights of the
    checkpoint ``init``, validate once at the end and save the checkpoint; returns the validation measures, the
    checkpoint path and the time taken."""
    import pytorch_lightning as pl
    import torch

    from torchfair.losses import DIPSLoss, ListNetLoss
    from torchfair.orderings import SoftRank
    from torchfair.training import FairRankingModule, MovieLensDataModule

    pl.seed_everything(seed, workers=True, verbose=False)
    dm = MovieLensDataModule(args.variant, seed=seed, num_negatives=args.num_negatives)
    dm.setup("fit")
    fair = DIPSLoss(num_groups=2, ordering=SoftRank(args.temperature)) if lam > 0 else None
    model = FairRankingModule("mf", {"dim": args.dim}, utility_loss=ListNetLoss(), fairness_loss=fair, lam=lam,
                              lr=args.lr, measures=VAL_MEASURES, data_info=dm.info)
    if init is not None:
        state = torch.load(init, map_location="cpu", weights_only=False)["state_dict"]
        model.ranker.load_state_dict({k[len("ranker."):]: v for k, v in state.items() if k.startswith("ranker.")})
    trainer = _trainer(args, epochs, out, tag)
    t0 = time.time()
    trainer.fit(model, dm)
    seconds = time.time() - t0
    ckpt = os.path.join(out, f"{tag}.ckpt")
    trainer.save_checkpoint(ckpt)
    val = {k[4:]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    return {"seed": seed, "lam": lam, "ckpt": ckpt, "val": val, "seconds": seconds}


def choose_lambda(plain: Dict[str, Any], fair: List[Dict[str, Any]], max_loss: float) -> Dict[str, Any]:
    """The candidate with the smallest validation |DIPS gap| among those within ``max_loss`` relative NDCG@10 of
    the plain model; if none is, the one with the smallest NDCG@10 loss."""
    base = plain["val"]["ndcg@10"]
    ok = [f for f in fair if f["val"]["ndcg@10"] >= (1 - max_loss) * base]
    if ok:
        return min(ok, key=lambda f: abs(f["val"]["dips_gap"]))
    return max(fair, key=lambda f: f["val"]["ndcg@10"])


def _mean_sd(xs: List[float]):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def summarise(reports: Dict[int, Dict[str, Any]], names: List[str], lam: float) -> Dict[str, Any]:
    """Per column: each model's mean over seeds (sd across seeds), the paired difference pooled over seeds, and
    per seed the share of the plain model's gap the fairness model removes."""
    plain, fair = names
    rows = []
    for col, label, reading in SUMMARY_COLUMNS:
        a = [r["models"][plain]["measures"].get(col, {}).get("mean") for r in reports.values()]
        b = [r["models"][fair]["measures"].get(col, {}).get("mean") for r in reports.values()]
        d = [r["differences"][fair]["columns"].get(col, {}) for r in reports.values()]
        rows.append({"column": col, "label": label, "reading": reading, "plain": _mean_sd(a), "fair": _mean_sd(b),
                     "diff": _mean_sd([x.get("mean") for x in d]),
                     "diff_ci_per_seed": [(x.get("ci_low"), x.get("ci_high")) for x in d],
                     "plain_per_seed": a, "fair_per_seed": b})
    by = {r["column"]: r for r in rows}
    removed = [1 - abs(f) / abs(p) if p else float("nan")
               for p, f in zip(by["dips_gap"]["plain_per_seed"], by["dips_gap"]["fair_per_seed"])]
    removed0 = [1 - abs(f) / abs(p) if p else float("nan")
                for p, f in zip(by["dips_t0_gap"]["plain_per_seed"], by["dips_t0_gap"]["fair_per_seed"])]
    ndcg_rel = [f / p - 1 for p, f in zip(by["ndcg@10"]["plain_per_seed"], by["ndcg@10"]["fair_per_seed"])]
    return {"lambda": lam, "rows": rows, "gap_removed_per_seed": removed, "gap_t0_removed_per_seed": removed0,
            "ndcg_relative_change_per_seed": ndcg_rel, "seeds": list(reports)}


def summary_markdown(summary: Dict[str, Any], names: List[str], n_users: int) -> str:
    plain, fair = names
    lines = [f"| test lists ({n_users} users x {len(summary['seeds'])} seeds) | {plain} | {fair} | "
             f"paired difference |", "|---|---|---|---|"]
    for r in summary["rows"]:
        (pm, ps), (fm, fs), (dm, ds) = r["plain"], r["fair"], r["diff"]
        lines.append(f"| {r['label']} | {pm:.4f} ± {ps:.4f} | {fm:.4f} ± {fs:.4f} | {dm:+.4f} ± {ds:.4f} |")
    rm, rs = _mean_sd(summary["gap_removed_per_seed"])
    r0m, r0s = _mean_sd(summary["gap_t0_removed_per_seed"])
    nm, ns = _mean_sd(summary["ndcg_relative_change_per_seed"])
    lines += ["", f"lambda = {summary['lambda']} (chosen on validation). Share of the plain model's exact DIPS gap "
                  f"removed: {100 * rm:.1f}% ± {100 * rs:.1f}% (tie weight 0.5), {100 * r0m:.1f}% ± {100 * r0s:.1f}% "
                  f"(tie weight 0); NDCG@10 change {100 * nm:+.2f}% ± {100 * ns:.2f}% (relative). "
                  "± is the standard deviation over seeds."]
    return "\n".join(lines)


def plot_tradeoff(points: List[Dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, col, title in ((axes[0], "dips_gap", "tie weight 0.5"), (axes[1], "dips_t0_gap", "tie weight 0")):
        xs = [abs(p["val"][col]) for p in points]
        ys = [p["val"]["ndcg@10"] for p in points]
        ax.plot(xs, ys, "o")
        for p, x, y in zip(points, xs, ys):
            ax.annotate(f"λ={p['lam']:g}", (x, y), fontsize=8, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"|exact DIPS gap| ({title}), validation")
        ax.set_ylabel("NDCG@10, validation")
        ax.grid(alpha=0.3)
    fig.suptitle("ListNet + λ·DIPS on ML-100K (first seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.quiet:
        warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    from torchfair.training.module import DEFAULT_MEASURES
    from torchfair.training.report import evaluate_checkpoints, markdown_table

    import torch

    torch.set_num_threads(args.threads)
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    names = ["ListNet", "ListNet + λ·DIPS"]
    runs: Dict[int, Dict[str, Any]] = {}
    tried: List[Dict[str, Any]] = []
    lam = None

    def say(msg: str) -> None:
        print(f"[{time.time() - t_start:5.0f}s] {msg}", flush=True)
    E, F = args.epochs, args.finetune_epochs
    for i, seed in enumerate(args.seeds):
        out = os.path.join(args.out, f"seed{seed}")
        say(f"seed {seed}: training MF with ListNet ({E} epochs)")
        base = train_one(args, seed, 0.0, E, out, "base")
        say(f"seed {seed}: {F} more epochs of ListNet ({names[0]})")
        plain = train_one(args, seed, 0.0, F, out, "listnet", init=base["ckpt"])
        if i == 0:
            tried.append(plain)
            cands = []
            for cand in args.lams:
                say(f"seed {seed}: {F} epochs of ListNet + {cand:g}·DIPS from the same start (lambda candidate)")
                cands.append(train_one(args, seed, cand, F, out, f"dips_lam{cand:g}", init=base["ckpt"]))
            tried += cands
            best = choose_lambda(plain, cands, args.max_ndcg_loss)
            lam = best["lam"]
            say("validation: " + "; ".join(
                f"λ={c['lam']:g}: NDCG@10 {c['val']['ndcg@10']:.4f}, DIPS gap {c['val']['dips_gap']:+.4f}"
                for c in tried) + f"  ->  λ = {lam:g}")
            fair = best
        else:
            say(f"seed {seed}: {F} epochs of ListNet + {lam:g}·DIPS")
            fair = train_one(args, seed, lam, F, out, f"dips_lam{lam:g}", init=base["ckpt"])
        runs[seed] = {"plain": plain, "fair": fair}
    names[1] = f"ListNet + {lam:g}·DIPS"
    reports = {}
    for seed, r in runs.items():
        say(f"seed {seed}: torchfair evaluate (exact measures, test lists)")
        reports[seed] = evaluate_checkpoints([r["plain"]["ckpt"], r["fair"]["ckpt"]],
                                             os.path.join(args.out, f"seed{seed}", "report"), names=names,
                                             bootstrap=args.bootstrap, seed=seed, measures=DEFAULT_MEASURES)
    first = reports[args.seeds[0]]
    n_users = first["models"][names[0]]["n_lists"]
    summary = summarise(reports, names, lam)
    summary["validation"] = [{"lam": t["lam"], **t["val"]} for t in tried]
    summary["seconds"] = time.time() - t_start
    summary["args"] = vars(args)
    table = summary_markdown(summary, names, n_users)
    plot_tradeoff(tried, os.path.join(args.out, "tradeoff.png"))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(table + "\n\nSeed " + str(args.seeds[0]) + " in detail (mean [95% bootstrap interval]):\n\n"
                + markdown_table(first) + "\n")
    print()
    print(table)
    print(f"\nper seed: gap removed {['%.1f%%' % (100 * x) for x in summary['gap_removed_per_seed']]}, NDCG@10 "
          f"change {['%+.2f%%' % (100 * x) for x in summary['ndcg_relative_change_per_seed']]}")
    print(f"reports: {args.out}/seed*/report/ (report.md, report.json, exposure_by_position.png); "
          f"{args.out}/summary.md; {args.out}/tradeoff.png")
    print(f"total time {summary['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
