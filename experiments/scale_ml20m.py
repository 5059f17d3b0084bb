"""ML-20M-sized data on one machine: wall time and peak memory of every stage of the real path.

On synthetic ratings with MovieLens-20M's shape (:func:`torchfair.data.ml20m.generate_ml20m`: 138 493 users,
26 744 items, 20 000 263 ratings, written as ML-20M's ``ratings.csv`` / ``movies.csv``), the stages a user runs:

1. ``generate``: write the files (vectorised, chunked);
2. ``load``: ``load_movielens("ml-20m", root=DIR)`` and ``encode`` (what the data module's ``prepare_data`` does);
3. ``split``: the data module's default split (leave-last-10-out, 5 more for validation);
4. ``groups``: popularity item groups (head = the most-rated items holding half of the training ratings);
5. ``epoch``: one training epoch of the configs' ranker (``configs/ml100k_listnet.yaml``: biased MF, dim 32,
   ListNet, 100 sampled negatives per list, batches of 64 users) through Lightning, validated at the end of the
   epoch on a sample of ``--users`` users (``MovieLensDataModule(eval_users=...)``), checkpoint written;
6. ``eval_sample``: ``torchfair evaluate`` (``evaluate_checkpoints``) of that checkpoint on the full-catalogue test
   lists of a seeded sample of ``--users`` users (``stream=None``, the default: 2 000 x 26 744 entries are more than
   ``STREAM_ENTRIES``, so these are streamed too; a small ``--scale`` is evaluated eagerly);
7. ``eval_full``: the same for every user, streamed (``stream=True``: ``--chunk-users`` lists at a time are scored,
   measured and dropped; only per-list values are kept, so means and bootstrap intervals are exact).

Each stage runs in a fresh subprocess (``--threads`` torch threads): what it needs from earlier stages is rebuilt
first (untimed: e.g. the ``split`` process loads the data), then the peak-RSS mark of the process is reset
(``/proc/self/clear_refs``) and the stage runs.  The table gives the stage's wall time, the process's peak resident
memory during the stage (what it held before included, so it is the memory the stage needs to run) and the RSS it
started from.  The evaluation stages include their own data-module setup (split and groups, from the loaded data).

``--fast`` (or ``--scale 0.002``): a small version (277 users, 1 196 items, 40 001 ratings) for a smoke run.
Results go to ``OUT/scale_ml20m.md`` (+ ``.json``); with ``--results`` also to
``experiments/results/scale_ml20m.md``.  The generated data stays under ``OUT/data`` (never committed; ``runs/`` is
ignored by git); ``--keep-data`` keeps it afterwards, else it is deleted at the end.

Usage: ``nice python experiments/scale_ml20m.py [--scale 1] [--users 2000] [--results]``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RESULTS = os.path.join(ROOT, "experiments", "results", "scale_ml20m.md")
STAGES = ("generate", "load", "split", "groups", "epoch", "eval_sample", "eval_full")
FAST_SCALE = 0.002
AIM_RSS_GB = 6.0
AIM_FULL_EVAL_S = 30 * 60


# ----------------------------------------------------------------------------------------------- memory
def _status(key: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process in MB (0 where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _reset_peak() -> bool:
    """Reset the process's peak-RSS mark (Linux >= 4.0); False when not possible (the mark then counts from the
    process start)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------- stages (child)
def _data_module(cfg: Dict[str, Any]):
    from torchfair.training import MovieLensDataModule

    # the data settings of configs/ml100k_listnet.yaml, on the generated ML-20M-shaped files
    return MovieLensDataModule("ml-20m", root=cfg["data"], split="leave_last_n", n_test=10, n_val=5,
                               groups="popularity", head_share=0.5, num_negatives=100, batch_size=64,
                               eval_batch_size=64, seed=cfg["seed"], download=False, eval_users=cfg["users"],
                               eval_users_seed=cfg["seed"])


def _load(cfg):
    from torchfair.data.movielens import load_movielens
    from torchfair.data.recsys import encode

    ml = load_movielens("ml-20m", root=cfg["data"], download=False, verbose=False)
    return ml, encode(ml)


def _split(enc, cfg):
    from torchfair.data.recsys import split_ratings

    return split_ratings(enc.ratings, "leave_last_n", n_test=10, n_val=5, seed=cfg["seed"])


def _frame_mb(df) -> float:
    return float(df.memory_usage(index=False, deep=False).sum()) / 2 ** 20


def stage_generate(cfg) -> Dict[str, Any]:
    from torchfair.data.ml20m import generate_ml20m

    stats = generate_ml20m(cfg["data"], scale=cfg["scale"], seed=cfg["seed"], overwrite=True)
    size = os.path.getsize(os.path.join(cfg["data"], "ratings.csv"))
    return {"stats": stats, "ratings_csv_mb": size / 2 ** 20}


def stage_load(cfg) -> Dict[str, Any]:
    ml, enc = _load(cfg)
    return {"ratings": len(ml.ratings), "users": len(ml.users), "items": len(ml.items),
            "dtypes": {c: str(t) for c, t in enc.ratings.dtypes.items()},
            "encoded_frame_mb": _frame_mb(enc.ratings), "loaded_frame_mb": _frame_mb(ml.ratings)}


def stage_split(cfg, ctx) -> Dict[str, Any]:
    sp = _split(ctx["enc"], cfg)
    return {"sizes": {k: int(v) for k, v in sp.summary().items()}}


def stage_groups(cfg, ctx) -> Dict[str, Any]:
    from torchfair.data.recsys import item_groups

    g = item_groups(ctx["enc"], ctx["split"].train, "popularity", head_share=0.5)
    return {"names": g.names, "sizes": [int(x) for x in g.sizes()]}


def stage_epoch(cfg, ctx) -> Dict[str, Any]:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import Callback, ModelCheckpoint

    from torchfair.losses import ListNetLoss
    from torchfair.training import FairRankingModule

    dm = ctx["dm"]
    times: Dict[str, float] = {}

    class Clock(Callback):
        def on_train_epoch_start(self, trainer, module):
            times["train0"] = time.perf_counter()

        def on_validation_start(self, trainer, module):
            times["val0"] = time.perf_counter()
            times.setdefault("train_s", times["val0"] - times.get("train0", times["val0"]))

        def on_validation_end(self, trainer, module):
            times["val_s"] = time.perf_counter() - times["val0"]

    model = FairRankingModule("mf", {"dim": 32}, utility_loss=ListNetLoss(), lr=0.01)  # configs/ml100k_listnet.yaml
    ckdir = os.path.join(cfg["out"], "checkpoints")
    trainer = pl.Trainer(max_epochs=1, deterministic=True, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=cfg["out"],
                         callbacks=[Clock(), ModelCheckpoint(dirpath=ckdir, filename="epoch1", save_last=False)])
    trainer.fit(model, dm)
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    return {"checkpoint": os.path.join(ckdir, "epoch1.ckpt"), "train_s": times.get("train_s"),
            "val_s": times.get("val_s"), "train_lists": len(dm.train_dataset), "val_lists": len(dm.val_dataset),
            "val_ndcg@10": val.get("val/ndcg@10"), "eval_users": dm.info.get("eval_users")}


def _evaluate(cfg, users: Optional[int], out: str, stream: Optional[bool]) -> Dict[str, Any]:
    from torchfair.training.evaluate import evaluate_checkpoints

    rep = evaluate_checkpoints([cfg["checkpoint"]], out, names=["MF ListNet, 1 epoch"], bootstrap=cfg["bootstrap"],
                               seed=cfg["seed"], users=users, users_seed=cfg["seed"], stream=stream,
                               chunk_users=cfg["chunk_users"], overwrite=True)
    m = rep["models"]["MF ListNet, 1 epoch"]
    keep = ("ndcg@10", "dips_gap", "dips_t0_gap", "exposure_misallocation_l1", "pairwise_accuracy_inter",
            "exposure_share_B")
    return {"users": rep["users"], "n_lists": m["n_lists"], "mpc": m["mpc"],
            "measures": {c: m["measures"][c] for c in keep if c in m["measures"]}}


def stage_eval_sample(cfg, ctx) -> Dict[str, Any]:
    return _evaluate(cfg, cfg["users"], os.path.join(cfg["out"], "report_sample"), None)


def stage_eval_full(cfg, ctx) -> Dict[str, Any]:
    return _evaluate(cfg, None, os.path.join(cfg["out"], "report_full"), True)


def _prerequisites(stage: str, cfg) -> Dict[str, Any]:
    """What ``stage`` needs from earlier stages, rebuilt in this process (untimed)."""
    ctx: Dict[str, Any] = {}
    if stage in ("split", "groups"):
        ctx["ml"], ctx["enc"] = _load(cfg)
    if stage == "groups":
        ctx["split"] = _split(ctx["enc"], cfg)
    if stage == "epoch":
        dm = _data_module(cfg)
        dm.prepare_data()
        dm.setup("fit")
        ctx["dm"] = dm
    if stage in ("eval_sample", "eval_full"):
        _data_module(cfg).prepare_data()  # the files parsed once (kept in-process), as in the epoch stage
    return ctx


def run_stage(stage: str, cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Run one stage in this process: prerequisites, reset the peak mark, the timed stage."""
    import torch

    torch.set_num_threads(cfg["threads"])
    t = time.perf_counter()
    ctx = _prerequisites(stage, cfg)
    pre_s = time.perf_counter() - t
    rss0 = _status("VmRSS")
    exact = _reset_peak()
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpu0 = os.times()
    t = time.perf_counter()
    fn = globals()[f"stage_{stage}"]
    extra = fn(cfg) if stage in ("generate", "load") else fn(cfg, ctx)
    wall = time.perf_counter() - t
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"stage": stage, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _status("VmHWM"), "rss_before_mb": rss0,
            "peak_since_stage_start": exact, "prerequisites_s": pre_s, "load_avg_start": load0,
            "load_avg_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None, **extra}


# ----------------------------------------------------------------------------------------------- parent
def _spawn(stage: str, cfg: Dict[str, Any], nice: int) -> Dict[str, Any]:
    out = os.path.join(cfg["out"], f"stage_{stage}.json")
    if os.path.exists(out):
        os.remove(out)
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg["threads"]), MKL_NUM_THREADS=str(cfg["threads"]),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, os.path.abspath(__file__), "--_stage", stage, "--_config", json.dumps(cfg),
           "--_stage-out", out]
    t = time.perf_counter()
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=(lambda: os.nice(nice)) if nice else None)
    if res.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"stage {stage} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    with open(out) as f:
        rec = json.load(f)
    rec["process_s"] = time.perf_counter() - t
    return rec


def _code_revision() -> str:
    """``$TORCHFAIR_CODE_REV`` (set it when running a snapshot without .git), else the checkout's commit."""
    rev = os.environ.get("TORCHFAIR_CODE_REV")
    if rev:
        return rev
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return out.stdout.strip() + (" with local changes" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _fmt_s(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    return f"{int(s // 60)} min {s - 60 * (s // 60):02.0f} s"


def _gb(mb: float) -> str:
    return f"{mb / 1024:.2f} GB"


def _ci(m: Dict[str, Any]) -> str:
    return f"{m['mean']:.4f} [{m['ci_low']:.4f}, {m['ci_high']:.4f}]"


def render(recs: Dict[str, Dict[str, Any]], cfg: Dict[str, Any], command: str, machine: Dict[str, Any]) -> str:
    gen = recs.get("generate", {}).get("stats") or {}
    lines = ["# ML-20M-sized data on one machine (`experiments/scale_ml20m.py`)", "",
             f"Command: `{command}`  ", f"Date: {machine['date']}; {machine['cpus']} CPUs, {machine['ram_gb']:.0f} GB "
             f"RAM, torch {machine['torch']} ({cfg['threads']} threads per stage), Python {machine['python']}; "
             f"load average {machine['load_before']:.1f} before the run, {machine['load_after']:.1f} after "
             "(the machine was shared with other jobs)." if machine.get("load_before") is not None else "",
             f"Code: {machine.get('code', 'unknown')}.", ""]
    if gen:
        lines += [f"Data (generated, seed {cfg['seed']}, scale {cfg['scale']}): {gen['n_users']:,} users, "
                  f"{gen['n_items']:,} items, {gen['n_ratings']:,} ratings "
                  f"(`ratings.csv` {recs['generate']['ratings_csv_mb']:.0f} MB); ratings per user min "
                  f"{gen['per_user']['min']}, median {gen['per_user']['median']:.0f}, mean "
                  f"{gen['per_user']['mean']:.1f}, max {gen['per_user']['max']}; per item median "
                  f"{gen['per_item']['median']:.0f}, max {gen['per_item']['max']:,}, "
                  f"{gen['per_item']['items_holding_half_the_ratings']} items hold half the ratings; mean rating "
                  f"{gen['rating_mean']:.2f}.", ""]
    lines += ["Each stage in a fresh process; *peak RSS* is the process's high-water mark during the stage (reset at "
              "its start through `/proc/self/clear_refs`, so it includes what the process held before the stage: "
              "the memory the stage needs to run); *RSS before* is what it held at the start; *CPU* is the "
              f"process's user + system time during the stage (at most {cfg['threads']} x the wall time; less when "
              "it waited for a core or for I/O).", "",
              "| stage | wall time | CPU | peak RSS | RSS before | what it did |", "|---|---:|---:|---:|---:|---|"]
    for st in STAGES:
        r = recs.get(st)
        if r is None:
            continue
        lines.append(f"| {st} | {_fmt_s(r['wall_s'])} | {_fmt_s(r.get('cpu_s'))} | {_gb(r['peak_rss_mb'])} | "
                     f"{_gb(r['rss_before_mb'])} | {_describe(st, r, cfg)} |")
    worst = max((r["peak_rss_mb"] for r in recs.values()), default=0.0)
    lines += ["", f"Largest peak: {_gb(worst)} (aim: every stage under {AIM_RSS_GB:g} GB: "
                  f"{'met' if worst < AIM_RSS_GB * 1024 else 'NOT met'})."]
    full = recs.get("eval_full")
    if full:
        ok = full["wall_s"] <= AIM_FULL_EVAL_S
        lines.append(f"Full-user evaluation: {_fmt_s(full['wall_s'])} for {full['n_lists']:,} lists "
                     f"({1000 * full['wall_s'] / max(full['n_lists'], 1):.1f} ms per list; aim: within 30 min: "
                     f"{'met' if ok else 'NOT met'}).")
    samp = recs.get("eval_sample")
    if samp and full:
        lines += ["", "Test measures (mean over users, 95 % bootstrap interval over users, "
                      f"{cfg['bootstrap']} replicates):", "",
                  f"| measure | sample of {samp['n_lists']:,} users | all {full['n_lists']:,} users (streamed) |",
                  "|---|---:|---:|"]
        for c in samp["measures"]:
            if c in full["measures"]:
                lines.append(f"| {c} | {_ci(samp['measures'][c])} | {_ci(full['measures'][c])} |")
        mp = [r["mpc"] for r in (samp, full)]
        if all(m.get("defined") for m in mp):
            lines.append("| MPC(tail) (pairs) | " + " | ".join(
                f"{m['estimate']:+.4f} [{m['ci_low']:+.4f}, {m['ci_high']:+.4f}] ({m['n_pairs']:,})" for m in mp) + " |")
        u = samp["users"]
        lines += ["", f"The sample: {u['n_lists']} of {u['of']:,} users, seed {u['seed']}, SHA-256 of the ids file "
                      f"`{u['sha256']}`."]
    return "\n".join(lines) + "\n"


def _describe(st: str, r: Dict[str, Any], cfg) -> str:
    if st == "generate":
        return "ratings.csv + movies.csv, vectorised, 4 096 users per chunk"
    if st == "load":
        return (f"parse + encode: {r['ratings']:,} ratings; encoded frame {r['encoded_frame_mb']:.0f} MB "
                f"(user/item int32, rating float32; raw ids shared with the loaded frame)")
    if st == "split":
        s = r["sizes"]
        return f"leave-last-10-out: train {s['train']:,}, val {s['val']:,}, test {s['test']:,} ratings"
    if st == "groups":
        return f"popularity: head {r['sizes'][0]:,} items, tail {r['sizes'][1]:,}"
    if st == "epoch":
        return (f"{r['train_lists']:,} training lists (100 negatives each): training {_fmt_s(r['train_s'])}, "
                f"validation of {r['val_lists']:,} sampled users {_fmt_s(r['val_s'])}; val NDCG@10 "
                f"{r['val_ndcg@10']:.4f}")
    if st == "eval_sample":
        how = f"streamed {cfg['chunk_users']} lists at a time" if r["users"]["streamed"][0] else "eager (lists held)"
        return (f"{r['n_lists']:,} sampled users x full catalogue, {how}, {cfg['bootstrap']} bootstrap "
                f"replicates; includes the data module's split and groups")
    if st == "eval_full":
        return (f"{r['n_lists']:,} users x full catalogue, streamed {cfg['chunk_users']} lists at a time; "
                f"includes the data module's split and groups")
    return ""


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0,
                   help="data size: users and ratings x scale, items x sqrt(scale) (1 = ML-20M's shape)")
    p.add_argument("--fast", action="store_true", help=f"a small run: --scale {FAST_SCALE}, --users 50, "
                                                       "--bootstrap 50 (unless given)")
    p.add_argument("--users", type=int, default=None, help="users of the sampled evaluation and validation "
                                                           "(default 2000; 50 with --fast)")
    p.add_argument("--bootstrap", type=int, default=None, help="bootstrap replicates (default 1000; 50 with --fast)")
    p.add_argument("--chunk-users", type=int, default=512, help="lists per chunk of the streamed evaluation")
    p.add_argument("--threads", type=int, default=2, help="torch threads per stage")
    p.add_argument("--seed", type=int, default=0, help="data, split, negatives, user sample and bootstrap seed")
    p.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                   help="stages to run (later ones need the data / checkpoint of earlier ones in --out)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "scale_ml20m"),
                   help="output directory (data under OUT/data, reports, checkpoint, scale_ml20m.md)")
    p.add_argument("--nice", type=int, default=0, help="niceness added to every stage's process")
    p.add_argument("--keep-data", action="store_true", help="keep the generated files in OUT/data at the end")
    p.add_argument("--results", action="store_true", help=f"also write {os.path.relpath(RESULTS, ROOT)}")
    p.add_argument("--quiet", action="store_true", help="print only the path of the result file")
    p.add_argument("--_stage", help=argparse.SUPPRESS)
    p.add_argument("--_config", help=argparse.SUPPRESS)
    p.add_argument("--_stage-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._stage:  # a child: one stage
        rec = run_stage(args._stage, json.loads(args._config))
        with open(args._stage_out, "w") as f:
            json.dump(rec, f, indent=1, default=str)
        return 0
    scale = FAST_SCALE if args.fast and args.scale == 1.0 else args.scale
    users = args.users if args.users is not None else (50 if args.fast else 2000)
    boot = args.bootstrap if args.bootstrap is not None else (50 if args.fast else 1000)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    cfg = {"scale": scale, "users": users, "bootstrap": boot, "chunk_users": args.chunk_users,
           "threads": args.threads, "seed": args.seed, "out": out, "data": os.path.join(out, "data"),
           "checkpoint": os.path.join(out, "checkpoints", "epoch1.ckpt")}
    import torch

    machine = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "torch": torch.__version__,
               "ram_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30,
               "load_before": os.getloadavg()[0], "code": _code_revision()}
    recs: Dict[str, Dict[str, Any]] = {}
    for st in args.stages:
        if not args.quiet:
            print(f"[scale_ml20m] {st} ...", flush=True)
        recs[st] = _spawn(st, cfg, args.nice)
        if not args.quiet:
            r = recs[st]
            print(f"[scale_ml20m] {st}: {_fmt_s(r['wall_s'])}, peak RSS {_gb(r['peak_rss_mb'])}", flush=True)
    machine["load_after"] = os.getloadavg()[0]
    command = "python experiments/scale_ml20m.py" + ("" if argv is None else " " + " ".join(argv))
    if argv is None:
        command = "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    text = render(recs, cfg, command, machine)
    with open(os.path.join(out, "scale_ml20m.json"), "w") as f:
        json.dump({"config": cfg, "machine": machine, "stages": recs}, f, indent=1, default=str)
    path = os.path.join(out, "scale_ml20m.md")
    with open(path, "w") as f:
        f.write(text)
    if args.results:
        with open(RESULTS, "w") as f:
            f.write(text)
    if not args.keep_data and os.path.isdir(cfg["data"]):
        shutil.rmtree(cfg["data"])
    print(path if args.quiet else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
