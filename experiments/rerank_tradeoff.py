"""Loss, re-rank, or both? Re-rankers and loss + re-rank on ML-100K, judged by the same exact measures.

The protocol of the headline table (``experiments/headline_tradeoff.py``): ML-100K, leave-last-10-out, the
full-catalogue test lists of all 943 users, for each seed the tuned MF + ListNet start (``--config``, default
``configs/ml100k_tuned.yaml``: it beats popularity, see ``experiments/results/tune_ranker.md``), two item groupings (popularity head / tail; Drama vs the rest).  For each seed and grouping:

* rows "re-rank": the start's test scores re-ranked by every ``--rerank`` spec (:mod:`torchfair.rerank`; the
  re-rankers see scores and groups only, never the test relevance), each paired with the start on the same users;
* rows "loss": the start fine-tuned for ``--finetune-epochs`` with ListNet + lam * DIPS loss (SoftRank(0.1)) for
  each ``--lams`` (``init_from``), then the same re-rankers on top of it ("loss + re-rank");
* a row "popularity": items ranked by their training rating count.

Every row reports NDCG@10, the exact DIPS gap (tie weight 0.5, RBP 0.9), ||delta||_1 (EE target) and the
inter-group pairwise accuracy gap, as means over the seeds of the paired change against the same seed's start
(and its spread over seeds); the share of each unfairness removed; and which rows stay within 2 % of NDCG@10.
Writes ``<out>/rerank_tradeoff.md``/``.json``/``.png`` and, with ``--results``, the same in
``experiments/results/`` (the headline's "loss, re-rank, or both?" section reads that json:
``python experiments/headline_tradeoff.py --rerank-section-only``).  ``--fast`` runs the pipeline on the synthetic stand-in in well under a minute (what the test does).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

#: (report column, label, how the share removed is computed: on |value|)
COLUMNS = [("ndcg@10", "NDCG@10"), ("dips_gap", "DIPS gap"), ("exposure_misallocation_l1", "||delta||_1"),
           ("pairwise_accuracy_inter", "pairwise gap")]
GROUPINGS = {"popularity": "data:\n  groups: popularity\n",
             "drama": "data:\n  groups: genre\n  genre: Drama\n"}
DEFAULT_RERANK = ["fair:p=0.5,k=100", "detconstsort:k=100", "epsgreedy:epsilon=0.05,seed=0",
                  "targeted:measure=dips,keep=10", "targeted:measure=dips,keep=9", "targeted:measure=dips,keep=8",
                  "targeted:measure=dips,max_utility_loss=0.02",
                  "targeted:measure=exposure_misallocation,keep=10,relevance=top:10",
                  "epsgreedy:epsilon=1,seed=0"]  # the last: (nearly) random order, a reference row


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    p.add_argument("--config", default=str(ROOT / "configs" / "ml100k_tuned.yaml"), help="the start's fit config")
    p.add_argument("--epochs", type=int, default=None, help="epochs of each seed's start (default: the config's)")
    p.add_argument("--finetune-epochs", type=int, default=3, help="epochs of ListNet + lam * DIPS from the start")
    p.add_argument("--lams", type=float, nargs="*", default=[0.03], help="DIPS loss weights of the 'loss' rows")
    p.add_argument("--rerank", nargs="+", default=DEFAULT_RERANK, help="re-ranker specs (torchfair.rerank)")
    p.add_argument("--groupings", nargs="+", default=list(GROUPINGS), choices=list(GROUPINGS),
                   help="item groupings")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap replicates of the per-seed reports")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", default="runs/rerank", help="output directory (checkpoints, reports)")
    p.add_argument("--results", action="store_true", help="also write experiments/results/rerank_tradeoff.*")
    p.add_argument("--fast", action="store_true", help="synthetic stand-in, tiny model (a smoke run)")
    return p


def _fit(out: Path, seed: int, epochs: Optional[int], threads: int, fast: bool, extra: Sequence[str] = (),
         config: str = str(ROOT / "configs" / "ml100k_tuned.yaml")) -> Path:
    """``torchfair fit --config config`` (+ ``extra``) into ``out``; returns its last checkpoint."""
    from headline_tradeoff import FAST

    dest = out.parent / (out.name + ".ckpt")  # not with_suffix: "dips0.3_..." has a dot
    if dest.is_file():
        return dest
    logger = {"class_path": "pytorch_lightning.loggers.CSVLogger",
              "init_args": {"save_dir": str(out), "name": "logs", "version": ""}}
    cmd = [sys.executable, "-m", "torchfair.cli", "fit", "--config", config, "--seed_everything", str(seed),
           *(["--trainer.max_epochs", str(epochs)] if epochs is not None else []),
           "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
           "--trainer.default_root_dir", str(out), "--trainer.logger", json.dumps(logger), *extra]
    for k, v in (FAST.items() if fast else ()):
        cmd += [f"--{k}", v if isinstance(v, str) else json.dumps(v)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.copyfile(out / "logs" / "checkpoints" / "last.ckpt", dest)
    return dest


def popularity_table(ckpt: Path, config: str, measures: List[str], bootstrap: int):
    """The popularity ranker's test table on the lists of ``ckpt`` under ``config``'s grouping."""
    import torch
    from metric_agreement import _popularity_ranker
    from torchfair.evaluation import evaluate_lists
    from torchfair.training.report import REPORT_BROWSING, load_checkpoint, score_lists

    run = load_checkpoint(str(ckpt), config)
    dm = run.datamodule
    dm.setup("test")
    lists = score_lists(_popularity_ranker(dm), dm, "test")
    G = int(run.meta["data_info"]["num_groups"])
    return evaluate_lists(lists, measures + [f"exposure_share:browsing={REPORT_BROWSING}"], bootstrap=bootstrap,
                    num_groups=G, validate_args=False), lists


def run(args: argparse.Namespace) -> Dict[str, Any]:
    import torch
    from torchfair.evaluation.report import paired_differences
    from torchfair.training.module import DEFAULT_MEASURES
    from torchfair.training.report import evaluate_checkpoints

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    (out / "ckpt").mkdir(parents=True, exist_ok=True)
    measures = list(DEFAULT_MEASURES)
    rows: Dict[str, Dict[str, Dict[str, List[float]]]] = {}  # grouping -> row -> column -> per-seed change
    base: Dict[str, Dict[str, List[float]]] = {}  # grouping -> column -> per-seed start value
    t0 = time.time()
    for seed in args.seeds:
        start = _fit(out / "ckpt" / f"start{seed}", seed, args.epochs, args.threads, args.fast, config=args.config)
        print(f"[seed {seed}] start trained ({time.time() - t0:.0f} s)", flush=True)
        models = {"start": start}
        for lam in args.lams:
            for gname in args.groupings:
                cfg = out / f"{gname}.yaml"
                cfg.write_text(GROUPINGS[gname])
                extra = ["--model.init_from", str(start), "--model.lam", str(lam), "--model.fairness_loss",
                         json.dumps({"class_path": "torchfair.losses.DIPSLoss", "init_args": {
                             "num_groups": 2, "ordering": {"class_path": "torchfair.orderings.SoftRank",
                                                           "init_args": {"temperature": 0.1}}}}),
                         "--config", str(cfg)]
                models[f"DIPS loss lam={lam:g} [{gname}]"] = _fit(out / "ckpt" / f"dips{lam:g}_{gname}_{seed}", seed,
                                                                  args.finetune_epochs, args.threads, args.fast,
                                                                  extra, config=args.config)
        for gname in args.groupings:
            cfg = out / f"{gname}.yaml"
            cfg.write_text(GROUPINGS[gname] if not args.fast else GROUPINGS[gname].replace("Drama", "Drama"))
            g_rows = rows.setdefault(gname, {})
            names = [n for n in models if n == "start" or n.endswith(f"[{gname}]")]
            rep = evaluate_checkpoints([str(models[n]) for n in names], None, config=str(cfg), names=names,
                                       bootstrap=args.bootstrap, rerank=args.rerank, measures=measures)
            start_m = rep["models"]["start"]["measures"]
            for c, _ in COLUMNS:
                base.setdefault(gname, {}).setdefault(c, []).append(start_m[c]["mean"])
            for n in rep["order"][1:]:
                d = rep["differences"][n]
                ref = d["reference"]
                label = n.replace(f" [{gname}]", "")
                if ref != "start":  # loss + re-rank: change against the start = loss's change + re-rank's change
                    dl = rep["differences"][ref]["columns"]
                    ch = {c: dl[c]["mean"] + d["columns"][c]["mean"] for c, _ in COLUMNS}
                else:
                    ch = {c: d["columns"][c]["mean"] for c, _ in COLUMNS}
                for c, _ in COLUMNS:
                    g_rows.setdefault(label, {}).setdefault(c, []).append(ch[c])
                # the paired 95 % intervals of this seed, against the row's own reference (the start, or the
                # fine-tuned model for "loss + re-rank")
                g_rows[label].setdefault("_ci", []).append(
                    {"reference": "start" if ref == "start" else ref.replace(f" [{gname}]", ""),
                     **{c: [d["columns"][c]["ci_low"], d["columns"][c]["ci_high"]] for c, _ in COLUMNS}})
            pop, _ = popularity_table(start, str(cfg), measures, args.bootstrap)
            start_tab = _start_table(start, str(cfg), measures, args.bootstrap)
            d = paired_differences(start_tab, pop, bootstrap=args.bootstrap)["columns"]
            for c, _ in COLUMNS:
                g_rows.setdefault("popularity", {}).setdefault(c, []).append(d[c]["mean"])
            g_rows.setdefault("popularity", {}).setdefault("_ndcg_ci", []).append(
                (d["ndcg@10"]["ci_low"], d["ndcg@10"]["ci_high"]))
            print(f"[seed {seed}] {gname}: evaluated ({time.time() - t0:.0f} s)", flush=True)
        partial = {"rows": rows, "base": base, "seeds": list(args.seeds[:args.seeds.index(seed) + 1]),
                   "rerank": list(args.rerank), "lams": list(args.lams), "wall_s": time.time() - t0,
                   "fast": bool(args.fast)}
        (out / "partial.md").write_text(report(partial, "(partial: seeds so far)"))
    return {"rows": rows, "base": base, "seeds": list(args.seeds), "rerank": list(args.rerank),
            "lams": list(args.lams), "wall_s": time.time() - t0, "fast": bool(args.fast)}


def _start_table(ckpt: Path, config: str, measures: List[str], bootstrap: int):
    from torchfair.evaluation import evaluate_lists
    from torchfair.training.report import REPORT_BROWSING, load_checkpoint, score_lists

    r = load_checkpoint(str(ckpt), config)
    lists = score_lists(r.model, r.datamodule, "test")
    return evaluate_lists(lists, measures + [f"exposure_share:browsing={REPORT_BROWSING}"], bootstrap=bootstrap,
                    num_groups=int(r.meta["data_info"]["num_groups"]), validate_args=False)


def _ms(xs: List[float]) -> str:
    a = np.asarray(xs, dtype=float)
    return f"{a.mean():+.4f} ± {a.std():.4f}" if a.size > 1 else f"{a.mean():+.4f}"


def shares(res: Dict[str, Any], gname: str, row: str) -> Dict[str, float]:
    """Mean over seeds of the relative NDCG@10 change and the share of each |unfairness| removed."""
    b = res["base"][gname]
    ch = res["rows"][gname][row]
    out = {"ndcg_rel": float(np.mean([c / v for c, v in zip(ch["ndcg@10"], b["ndcg@10"])]))}
    for c, _ in COLUMNS[1:]:
        out[c] = float(np.mean([1 - abs(v + d) / abs(v) if v else 0.0 for v, d in zip(b[c], ch[c])]))
    return out


def report(res: Dict[str, Any], command: str) -> str:
    md = ["# Loss, re-rank, or both? (ML-100K, exact measures)", "",
          f"Command: `{command}`; seeds {res['seeds']}; wall time {res['wall_s'] / 60:.1f} min"
          f"{' (fast mode: synthetic stand-in)' if res['fast'] else ''}.  Changes are paired with the same seed's "
          "ListNet start on the same users (mean ± sd over seeds); shares removed are of |value| (DIPS gap with "
          "tie weight 0.5, RBP 0.9; ||delta||_1 EE target; inter-group pairwise accuracy gap).  Re-rankers see "
          "scores and groups only.", ""]
    for gname, g_rows in res["rows"].items():
        b = res["base"][gname]
        md += [f"## {gname} groups", "",
               "start (ListNet): " + ", ".join(f"{lab} {np.mean(b[c]):.4f}" for c, lab in COLUMNS), "",
               "| row | NDCG@10 change | relative | DIPS gap removed | ||delta||_1 removed | pairwise gap removed "
               "| within 2 % |", "|---|---:|---:|---:|---:|---:|---|"]
        for row in g_rows:
            sh = shares(res, gname, row)
            md.append(f"| {row} | {_ms(g_rows[row]['ndcg@10'])} | {100 * sh['ndcg_rel']:+.1f} % | "
                      f"{100 * sh['dips_gap']:.0f} % | {100 * sh['exposure_misallocation_l1']:.0f} % | "
                      f"{100 * sh['pairwise_accuracy_inter']:.0f} % | {'yes' if sh['ndcg_rel'] >= -0.02 else ''} |")
        pop = g_rows.get("popularity", {}).get("_ndcg_ci")
        if pop:
            md += ["", "Popularity - start, NDCG@10 paired 95 % intervals per seed: " +
                   ", ".join(f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi in pop) + " (> 0: popularity ranks better)."]
        best = max((r for r in g_rows if r != "popularity" and shares(res, gname, r)["ndcg_rel"] >= -0.02
                    and shares(res, gname, r)["dips_gap" if gname == "popularity" else "exposure_misallocation_l1"] > 0),
                   key=lambda r: shares(res, gname, r)["dips_gap" if gname == "popularity"
                                                        else "exposure_misallocation_l1"], default=None)
        target = "dips_gap" if gname == "popularity" else "exposure_misallocation_l1"
        cis = [(r, g_rows[r]["_ci"]) for r in g_rows if g_rows[r].get("_ci")
               and shares(res, gname, r)["ndcg_rel"] >= -0.02 and not r.endswith("seed=0") and
               shares(res, gname, r)[target] >= 0.3]
        if cis:
            md += ["", f"Paired 95 % bootstrap intervals per seed (NDCG@10; {dict(COLUMNS)[target]}) of the rows "
                       "within 2 % removing at least 30 %, against each row's reference:", ""]
            for r, ci in cis:
                md.append(f"- {r} - {ci[0]['reference']}: NDCG@10 " +
                          ", ".join(f"[{x['ndcg@10'][0]:+.4f}, {x['ndcg@10'][1]:+.4f}]" for x in ci) + "; " +
                          ", ".join(f"[{x[target][0]:+.4f}, {x[target][1]:+.4f}]" for x in ci))
        if best:
            sh = shares(res, gname, best)
            md += ["", f"Best within 2 % of NDCG@10 on the {'DIPS gap' if gname == 'popularity' else '||delta||_1'}: "
                       f"**{best}** ({100 * sh['dips_gap']:.0f} % of the DIPS gap, "
                       f"{100 * sh['exposure_misallocation_l1']:.0f} % of ||delta||_1 removed, NDCG@10 "
                       f"{100 * sh['ndcg_rel']:+.1f} %)."]
        md.append("")
    return "\n".join(md)


def _short(row: str) -> str:
    """A plot label: 'start + ' dropped, 'targeted:measure=' -> 't:', 'DIPS loss lam=' -> 'L'."""
    return (row.replace("start + ", "").replace("targeted:measure=", "t:").replace("DIPS loss lam=", "L")
            .replace("exposure_misallocation", "misalloc").replace(",seed=0", "").replace("relevance=", ""))


def figure(res: Dict[str, Any], path: str, xmin: float = -35.0) -> None:
    """Share removed against the NDCG@10 change, one panel per grouping; rows cheaper than ``xmin`` % are drawn
    at the left edge (open marker) with their cost in the label."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gs = list(res["rows"])
    fig, axes = plt.subplots(1, len(gs), figsize=(6.5 * len(gs), 5), squeeze=False)
    for ax, gname in zip(axes[0], gs):
        key = "dips_gap" if gname == "popularity" else "exposure_misallocation_l1"
        for row in res["rows"][gname]:
            sh = shares(res, gname, row)
            x, y = 100 * sh["ndcg_rel"], 100 * sh[key]
            loss = row.startswith("DIPS loss")
            mk = "^" if loss and " + " in row else ("s" if loss else ("D" if row == "popularity" else "o"))
            label = _short(row)
            if x < xmin:
                label += f" ({x:.0f} %)"
                x = xmin
            ax.scatter(x, y, marker=mk, facecolors="none" if x == xmin else None)
            ax.annotate(label[:40], (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.axvline(-2, color="grey", ls="--", lw=0.8)
        ax.axhline(50, color="grey", ls=":", lw=0.8)
        ax.set_xlim(xmin - 2, 4)
        ax.set_xlabel("NDCG@10 change vs the tuned start (%)")
        ax.set_ylabel(f"share of the {'DIPS gap' if key == 'dips_gap' else '||delta||_1'} removed (%)")
        ax.set_title(f"{gname} groups (o re-rank, s loss, ^ loss + re-rank, D popularity; "
                     f"{len(res['seeds'])} seeds)", fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.fast:
        args.epochs, args.finetune_epochs, args.bootstrap = min(args.epochs or 2, 2), 1, min(args.bootstrap, 20)
        args.groupings = ["popularity"]
    res = run(args)
    command = "python experiments/rerank_tradeoff.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = report(res, command.strip())
    out = Path(args.out)
    (out / "rerank_tradeoff.md").write_text(md)
    (out / "rerank_tradeoff.json").write_text(json.dumps(res, indent=1, default=float))
    figure(res, str(out / "rerank_tradeoff.png"))
    if args.results and not args.fast:
        res_dir = ROOT / "experiments" / "results"
        (res_dir / "rerank_tradeoff.md").write_text(md)
        (res_dir / "rerank_tradeoff.json").write_text(json.dumps(res, indent=1, default=float))
        shutil.copyfile(out / "rerank_tradeoff.png", res_dir / "rerank_tradeoff.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
