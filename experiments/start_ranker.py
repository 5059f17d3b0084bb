"""The headline's start ranker against the usual baselines, on the headline's split (ML-100K, ``leave_random_n``).

Rows, each on the full-catalogue test lists of all 943 users of every seed (each seed its own random split):

* ``start``: ``configs/ml100k_ials.yaml`` -- MF whose factors start from implicit ALS (torchfair's
  :func:`torchfair.training.implicit_als`), then a short ListNet fine-tune -- trained by ``torchfair fit`` as the
  ``split: random`` trials of ``configs/sweep_starts_ials.yaml`` (what ``experiments/loss_tradeoff.py`` fine-tunes);
* ``iALS (torchfair)``: the same implicit ALS without the fine-tune;
* ``MF + ListNet (previous start)``: ``configs/ml100k_tuned.yaml``, the trials of ``configs/sweep_starts_tuned.yaml``;
* ``LensKit iALS``: LensKit's ``ImplicitMFScorer`` (dev-only, a separate environment: ``--lenskit-python``), its
  grid tuned on seed 0's validation lists like ours;
* ``popularity``: training rating counts.

The implicit-ALS grids are chosen on seed 0's *validation* lists (NDCG@10); test is only reported.  Each row is
compared with the start by a paired difference of test NDCG@10 with a two-level bootstrap (seeds resampled, then
lists within each drawn seed), so the interval carries training-seed variance; the per-seed values are in the JSON.

    python experiments/start_ranker.py --results          # ~15 min on 2 CPUs (LensKit included when found)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import _provenance  # noqa: E402
import _sweep  # noqa: E402

STARTS = ROOT / "configs" / "sweep_starts_ials.yaml"
OLD_STARTS = ROOT / "configs" / "sweep_starts_tuned.yaml"
#: implicit ALS grid (dim, alpha, lambda), 15 alternations, confidence 1 + alpha per training rating
IALS_GRID = [(64, a, r) for a in (2.0, 5.0, 10.0) for r in (20.0, 50.0, 100.0)] + [(32, 5.0, 50.0)]
#: LensKit ImplicitMFScorer grid (embedding size, weight, regularization, epochs)
LENSKIT_GRID = [(64, w, r, 10) for w in (5.0, 10.0, 40.0) for r in (0.1, 1.0, 10.0, 50.0)]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (each its own split; the first "
                                                                            "tunes the grids)")
    p.add_argument("--out", default="runs/start_ranker", help="output directory")
    p.add_argument("--workers", type=int, default=2, help="trials at a time")
    p.add_argument("--starts", default="runs/tradeoff/starts",
                   help="where the trials of configs/sweep_starts_ials.yaml run (shared with experiments/"
                        "loss_tradeoff.py --stage starts: a trial finished there is reused)")
    p.add_argument("--lenskit-python", default=str(ROOT.parent / "lkvenv" / "bin" / "python"),
                   help="a Python with lenskit and pandas < 3 (dev-only comparison; skipped when missing)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates of the paired intervals")
    p.add_argument("--results", action="store_true", help="also write experiments/results/start_ranker.*")
    return p


def _dm(seed: int):
    from torchfair.training import MovieLensDataModule

    dm = MovieLensDataModule("ml-100k", split="leave_random_n", n_test=10, n_val=5, seed=seed, groups="popularity")
    dm.setup("fit")
    return dm


def _ndcg(lists) -> np.ndarray:
    from torchfair.evaluation import evaluate_lists

    return np.asarray(evaluate_lists(lists, ["ndcg@10"], num_groups=2, bootstrap=0)["ndcg@10"], dtype=float)


def _ials(dm, dim: int, alpha: float, reg: float):
    from torchfair.training.rankers import MatrixFactorization

    mf = MatrixFactorization(dm.num_users, dm.num_items, dim=dim, init="ials", ials_alpha=alpha, ials_reg=reg)
    mf.initialize(dm, seed=int(dm.seed))
    return mf


def _scored(model, dm, split: str):
    from torchfair.training import score_lists

    return score_lists(model, dm, split)


def _lenskit(py: str, dm, grid, work: Path) -> Optional[List[Dict[str, np.ndarray]]]:
    """LensKit's scores of every config of ``grid`` on ``dm``'s val and test lists: ``[{split: lists}]``, or
    ``None`` when the LensKit Python is missing or fails."""
    if not Path(py).is_file():
        print(f"[lenskit] no Python at {py}: LensKit row skipped", flush=True)
        return None
    train = dm.splits.train
    arrays: Dict[str, Any] = {"train_user": train["user"].to_numpy(), "train_item": train["item"].to_numpy(),
                              "train_rating": train["rating"].to_numpy(), "num_users": dm.num_users,
                              "num_items": dm.num_items, "grid": np.asarray(grid, dtype=float)}
    lists = {}
    for split in ("val", "test"):
        L = _scored(_Zero(), dm, split)
        lists[split] = L
        arrays[f"{split}_user"] = np.asarray([li["list_id"] for li in L], dtype=np.int64)
        arrays[f"{split}_items"] = np.concatenate([li["items"].numpy() for li in L]).astype(np.int64)
        arrays[f"{split}_offsets"] = np.cumsum([0] + [len(li["items"]) for li in L]).astype(np.int64)
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "in.npz", **arrays)
    r = subprocess.run([py, str(ROOT / "experiments" / "lenskit_ials.py"), "--inp", str(work / "in.npz"),
                        "--out", str(work / "out.npz")], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"[lenskit] failed: {r.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    out = np.load(work / "out.npz")
    import torch

    res = []
    for k in range(len(grid)):
        per = {}
        for split in ("val", "test"):
            s = torch.as_tensor(out[f"{split}_scores_{k}"], dtype=torch.float32)
            off = arrays[f"{split}_offsets"]
            per[split] = [{**li, "scores": s[off[i]:off[i + 1]].clone()} for i, li in enumerate(lists[split])]
        res.append(per)
    return res


class _Zero:
    """A ranker scoring 0 everywhere: the lists' items, relevance and groups without a model."""

    uses_item_features = False

    def __call__(self, batch):
        import torch

        return torch.zeros(batch["items"].shape)

    def eval(self):
        return self

    def to(self, *_a, **_k):
        return self


def paired_seeds(row: List[np.ndarray], ctrl: List[np.ndarray], n_boot: int, seed: int = 0) -> Dict[str, float]:
    """Mean of ``row - ctrl`` (paired lists, pooled over seeds) and a two-level percentile bootstrap interval:
    seeds resampled with replacement, then lists within each drawn seed."""
    d = [r - c for r, c in zip(row, ctrl)]
    point = float(np.mean(np.concatenate(d)))
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        picks = rng.integers(0, len(d), len(d))
        boots.append(np.mean(np.concatenate([d[i][rng.integers(0, len(d[i]), len(d[i]))] for i in picks])))
    return {"mean": point, "lo": float(np.percentile(boots, 2.5)), "hi": float(np.percentile(boots, 97.5)),
            "per_seed": [float(x.mean()) for x in d]}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res: Dict[str, Any] = {"seeds": args.seeds, "ials_grid": [], "lenskit_grid": []}
    # 1. the grids on seed 0's validation lists
    dm0 = _dm(args.seeds[0])
    for dim, a, r in IALS_GRID:
        v = float(np.nanmean(_ndcg(_scored(_ials(dm0, dim, a, r), dm0, "val"))))
        res["ials_grid"].append({"dim": dim, "alpha": a, "reg": r, "val_ndcg@10": v})
        print(f"[ials] dim {dim} alpha {a} reg {r}: val NDCG@10 {v:.4f} ({time.time() - t0:.0f} s)", flush=True)
    best = max(res["ials_grid"], key=lambda x: x["val_ndcg@10"])
    res["ials_chosen"] = best
    lk0 = _lenskit(args.lenskit_python, dm0, LENSKIT_GRID, out / "lenskit" / f"seed{args.seeds[0]}")
    lk_best = None
    if lk0 is not None:
        for (dim, w, r, ep), per in zip(LENSKIT_GRID, lk0):
            v = float(np.nanmean(_ndcg(per["val"])))
            res["lenskit_grid"].append({"dim": dim, "weight": w, "reg": r, "epochs": ep, "val_ndcg@10": v})
        lk_best = max(range(len(LENSKIT_GRID)), key=lambda k: res["lenskit_grid"][k]["val_ndcg@10"])
        res["lenskit_chosen"] = res["lenskit_grid"][lk_best]
        print(f"[lenskit] chosen {res['lenskit_chosen']}", flush=True)
    # 2. the trained starts (torchfair fit through the sweep files), every seed
    keep = {"split": ["random"], "seed": [str(s) for s in args.seeds]}
    dirs = {"starts": Path(args.starts).resolve(), "old_starts": out / "old_starts"}
    for name, sweep in (("starts", STARTS), ("old_starts", OLD_STARTS)):
        path = _sweep.derive(sweep, out / "stages" / f"{name}.yaml", keep=keep)
        _sweep.run(path, dirs[name], workers=args.workers)
    # 3. test NDCG@10 of every row, every seed
    from torchfair.training import Popularity, load_checkpoint

    rows: Dict[str, List[np.ndarray]] = {}
    for s in args.seeds:
        dm = _dm(s)
        for name, d in (("start", "starts"), ("MF + ListNet (previous start)", "old_starts")):
            tr = _sweep.pick(_sweep.finished(dirs[d]), split="random", seed=s)
            run = load_checkpoint(tr["checkpoint"])
            rows.setdefault(name, []).append(_ndcg(_scored(run.model, dm, "test")))
        rows.setdefault("iALS (torchfair, no fine-tune)", []).append(
            _ndcg(_scored(_ials(dm, best["dim"], best["alpha"], best["reg"]), dm, "test")))
        if lk_best is not None:
            lk = _lenskit(args.lenskit_python, dm, [LENSKIT_GRID[lk_best]], out / "lenskit" / f"seed{s}_chosen")
            if lk is not None:
                rows.setdefault("LensKit iALS", []).append(_ndcg(lk[0]["test"]))
        rows.setdefault("popularity", []).append(_ndcg(_scored(Popularity.from_datamodule(dm), dm, "test")))
        print(f"[test] seed {s} ({time.time() - t0:.0f} s)", flush=True)
    res["rows"] = {}
    for name, vals in rows.items():
        if len(vals) != len(args.seeds):
            continue
        res["rows"][name] = {"test_ndcg@10": float(np.mean(np.concatenate(vals))),
                             "per_seed": [float(v.mean()) for v in vals],
                             "vs_start": paired_seeds(vals, rows["start"], args.bootstrap)}
    res["wall_s"] = time.time() - t0
    res["provenance"] = _provenance.provenance(script="experiments/start_ranker.py")
    md = markdown(res)
    (out / "start_ranker.md").write_text(md)
    (out / "start_ranker.json").write_text(json.dumps(res, indent=1))
    if args.results:
        for ext in ("md", "json"):
            (ROOT / "experiments" / "results" / f"start_ranker.{ext}").write_text((out / f"start_ranker.{ext}").read_text())
    print(md)
    return 0


def markdown(res: Dict[str, Any]) -> str:
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    c = res["ials_chosen"]
    md = ["# The start ranker against iALS and popularity (ML-100K, leave_random_n)", "",
          f"Command: `python experiments/start_ranker.py --results`; seeds {res['seeds']} (each its own random "
          f"split: per user 10 test, 5 validation ratings); wall time {res['wall_s'] / 60:.0f} min on 2 CPUs, "
          f"1 torch thread per process, load average {load:.1f} at the end.", "",
          "Test NDCG@10 (exact, exponential gain, full-catalogue lists of all 943 users, mean over lists and seeds). "
          "Difference against the start: paired per list, two-level bootstrap (seeds, then lists within a seed), "
          "95 %; per-seed means in brackets after it.", "",
          "| ranker | test NDCG@10 | per seed | − start [95 % CI] | per seed |", "|---|---:|---|---:|---|"]
    for name, r in res["rows"].items():
        d = r["vs_start"]
        md.append(f"| {name} | {r['test_ndcg@10']:.4f} | {' / '.join(f'{x:.4f}' for x in r['per_seed'])} | "
                  f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] | "
                  f"{' / '.join(f'{x:+.4f}' for x in d['per_seed'])} |")
    md += ["", f"torchfair's implicit ALS chosen on seed {res['seeds'][0]}'s validation lists: dim {c['dim']}, "
               f"alpha {c['alpha']}, lambda {c['reg']} (val NDCG@10 {c['val_ndcg@10']:.4f}); grid:", "",
           "| dim | alpha | lambda | val NDCG@10 |", "|---:|---:|---:|---:|"]
    md += [f"| {g['dim']} | {g['alpha']:g} | {g['reg']:g} | {g['val_ndcg@10']:.4f} |" for g in res["ials_grid"]]
    if res.get("lenskit_grid"):
        lc = res["lenskit_chosen"]
        md += ["", f"LensKit `ImplicitMFScorer` (dev-only, its own environment) chosen on the same validation lists: "
                   f"embedding size {lc['dim']}, weight {lc['weight']:g}, regularization {lc['reg']:g}, "
                   f"{lc['epochs']} epochs; grid:", "", "| size | weight | regularization | val NDCG@10 |",
               "|---:|---:|---:|---:|"]
        md += [f"| {g['dim']} | {g['weight']:g} | {g['reg']:g} | {g['val_ndcg@10']:.4f} |" for g in res["lenskit_grid"]]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
