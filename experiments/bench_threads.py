"""Does ``OMP_NUM_THREADS=1`` make ``torchfair fit`` faster or slower?  Wall time of a whole fit at 1 and at 2
threads.

Runs ``torchfair fit --config configs/ml100k_listnet.yaml --trainer.max_epochs 2`` as a subprocess (a fresh
process, as a user runs it: data loading, validation with the exact measures, checkpoints) with
``OMP_NUM_THREADS`` (and ``MKL_NUM_THREADS``) set to each thread count, interleaved round by round (round ``r``
starts with the ``r``-th setting, so neither always goes first), ``--rounds`` rounds each, after one untimed
warm-up fit (which also downloads / caches ML-100K).  Logs and checkpoints go to a temporary directory.
Reports each setting's wall times, their median, and the median over rounds of the per-round ratio.

The result depends on the machine's load: note the load average before and after (printed in the table) and
whether other jobs were running.

Writes ``experiments/results/bench_threads.md`` (``--out``) and prints it.
Usage: ``python experiments/bench_threads.py [--rounds 2] [--threads 1 2] [--epochs 2]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def fit_command(config: str, epochs: int) -> List[str]:
    """The timed command: ``torchfair fit`` through ``python -m`` (the console script's entry point)."""
    return [sys.executable, "-c", "import sys; from torchfair.cli import main; sys.exit(main())",
            "fit", "--config", os.path.abspath(config), "--trainer.max_epochs", str(epochs),
            "--trainer.enable_progress_bar", "false"]


def run_fit(cmd: Sequence[str], threads: int, cwd: str) -> float:
    """Seconds of one fit with ``threads`` OpenMP / MKL threads (raises when the fit fails)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.path.abspath(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    res = subprocess.run(list(cmd), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    el = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"fit with {threads} thread(s) failed (exit {res.returncode}):\n{res.stderr[-2000:]}")
    return el


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "ml100k_listnet.yaml"),
                   help="the `torchfair fit` config to time")
    p.add_argument("--epochs", type=int, default=2, help="--trainer.max_epochs of each fit")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts to compare")
    p.add_argument("--rounds", type=int, default=2, help="timed fits per thread count (interleaved)")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed first fit")
    p.add_argument("--note", default="", help="a sentence on the machine's other load, added to the results file")
    p.add_argument("--out", default=os.path.join(ROOT, "experiments", "results", "bench_threads.md"),
                   help="the markdown file to write ('' : print only)")
    args = p.parse_args(argv)
    from _bench import table

    cmd = fit_command(args.config, args.epochs)
    load0 = os.getloadavg()
    times: Dict[int, List[float]] = {t: [] for t in args.threads}
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        if not args.no_warmup:
            print(f"warm-up fit ({args.threads[0]} thread(s))...", flush=True)
            run_fit(cmd, args.threads[0], tmp)
        for r in range(args.rounds):
            shift = r % len(args.threads)
            for t in args.threads[shift:] + args.threads[:shift]:
                el = run_fit(cmd, t, tmp)
                times[t].append(el)
                print(f"round {r + 1}: {t} thread(s): {el:.1f} s (load {os.getloadavg()[0]:.2f})", flush=True)
    load1 = os.getloadavg()
    base = args.threads[0]
    rows = []
    for t in args.threads:
        ratio = statistics.median(x / y for x, y in zip(times[t], times[base]))
        rows.append([f"{t}", ", ".join(f"{x:.1f}" for x in times[t]), statistics.median(times[t]), ratio])
    lines = [
        "# `torchfair fit` wall time by thread count",
        "",
        f"`python experiments/bench_threads.py --rounds {args.rounds} --threads {' '.join(map(str, args.threads))} "
        f"--epochs {args.epochs}`: `torchfair fit --config {os.path.relpath(args.config, ROOT)} "
        f"--trainer.max_epochs {args.epochs}` (a fresh process per fit, progress bar off) with `OMP_NUM_THREADS` = "
        f"`MKL_NUM_THREADS` = each count, interleaved round by round after one untimed warm-up fit.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average (1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load0)} before, "
        f"{', '.join(f'{x:.2f}' for x in load1)} after.",
        "",
        table(["threads", "wall times (s)", "median (s)", f"median ratio to {base} thread(s)"], rows),
        "",
        "The times depend on the machine's load: with other processes using the cores, a second torch thread "
        "waits for a core and slows the fit; on a quiet machine it can speed it up. Run the script on your "
        "machine before choosing." + (f" {args.note}" if args.note else ""),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
