"""Speed and peak memory of the differentiable losses (forward + backward), fp32, CPU.

* DIPS loss (``torchfair.losses.dips_loss``, default ``SoftRank(0.1)`` ordering, RBP(0.9)) at
  (B, N) = (256, 100), (64, 1000), (8, 4096): median time of forward+backward and peak memory.  The pair
  quantities are contracted in row blocks and each block is recomputed in backward (activation checkpointing),
  so no ``[B, N, N]`` tensor is kept alive for backward.
* Plackett-Luce: time to draw 100 rankings and estimate expected exposure for B = 256, N = 100, and the same
  with the gradient (PL-Rank-2 backward).

Each case runs in fresh subprocesses.  Time: median of ``--repeats`` calls after a warm-up call on the same
shape, default allocator.  Memory: in a second subprocess with ``MALLOC_MMAP_THRESHOLD_=131072`` (glibc then
returns freed tensors to the system, so the resident-set high-water mark follows the memory simultaneously
alive), the growth of ``ru_maxrss`` during one call on the case's shape, after a warm-up call on a tiny shape that
pages in the kernels.  Reported twice: ``peak live`` (with that setting) and ``RSS growth`` (glibc's default
allocator, which keeps freed blocks in its heap: what a user watching the process sees).

Usage: ``python experiments/bench_losses.py [--repeats 3] [--threads 2] [--out results.json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

CASES = [
    ("dips_loss", 256, 100),
    ("dips_loss", 64, 1000),
    ("dips_loss", 8, 4096),
    ("pl_exposure", 256, 100),
    ("pl_exposure_grad", 256, 100),
]


def _run(name: str, B: int, N: int, repeats: int, memory: bool) -> dict:
    from torchfair.browsing import RBP
    from torchfair.losses import dips_loss
    from torchfair.orderings import PlackettLuce

    gen = torch.Generator().manual_seed(0)
    s = torch.randn(B, N, generator=gen)
    r = torch.randint(0, 5, (B, N), generator=gen).float()
    g = torch.randint(0, 2, (B, N), generator=gen)
    mask = torch.ones(B, N, dtype=torch.bool)
    full = (s, r, g, mask)

    def call():
        x = s.clone().requires_grad_(name != "pl_exposure")
        if name == "dips_loss":
            loss = dips_loss(x, r, g, num_groups=2, validate_args=False)
            loss.backward()
        elif name == "pl_exposure":
            PlackettLuce(samples=100, generator=gen)(x, mask).exposure(RBP(0.9))
        elif name == "pl_exposure_grad":
            e = PlackettLuce(samples=100, estimator="pl_rank", generator=gen)(x, mask).exposure(RBP(0.9))
            (e * r).sum().backward()

    if memory:
        small = (s[:2, :64], r[:2, :64], g[:2, :64], mask[:2, :64])
        s, r, g, mask = small
        call()  # warm-up on a tiny shape: kernels paged in
        s, r, g, mask = full
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        call()
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
        return {"case": name, "B": B, "N": N, "peak_extra_bytes": peak}
    call()  # warm-up on the same shape
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return {"case": name, "B": B, "N": N, "median_s": statistics.median(times)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="timed forward + backward passes per case (median)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--out", type=str, default=None, help="write the results to this JSON file")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.worker is not None:
        name, B, N = CASES[a.worker]
        print(json.dumps(_run(name, B, N, a.repeats, a.memory)))
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")

    def worker(i, memory, live=False):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(i), "--repeats", str(a.repeats),
               "--threads", str(a.threads)] + (["--memory"] if memory else [])
        out = subprocess.run(cmd, env=env if live else None, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    rows = []
    for i in range(len(CASES)):
        row = worker(i, False)
        row["peak_live_bytes"] = worker(i, True, live=True)["peak_extra_bytes"]
        row["rss_growth_bytes"] = worker(i, True, live=False)["peak_extra_bytes"]
        rows.append(row)
        print(f"  done {row['case']} {row['B']}x{row['N']}", file=sys.stderr)
    print(f"fp32, CPU, torch {torch.__version__}, {a.threads} thread(s), median of {a.repeats} after a warm-up\n")
    print("| case | B x N | median s | peak live MB | RSS growth MB (default malloc) |")
    print("|---|---|---:|---:|---:|")
    labels = {"dips_loss": "DIPS loss, SoftRank(0.1), fwd+bwd", "pl_exposure": "PL: 100 samples + expected exposure",
              "pl_exposure_grad": "PL: 100 samples + exposure + PL-Rank backward"}
    for r in rows:
        print(f"| {labels[r['case']]} | {r['B']} x {r['N']} | {r['median_s']:.4f} | "
              f"{r['peak_live_bytes'] / 2**20:.0f} | {r['rss_growth_bytes'] / 2**20:.0f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
