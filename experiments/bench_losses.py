"""Speed and peak memory of the differentiable losses (forward + backward), fp32, CPU.

* DIPS loss (``torchfair.losses.dips_loss``, default ``SoftRank(0.1)`` ordering, RBP(0.9)) at
  (B, N) = (256, 100), (64, 1000), (8, 4096): median time of forward+backward and peak memory.  The pair
  quantities are contracted in row blocks and each block is recomputed in backward (activation checkpointing),
  so no ``[B, N, N]`` tensor is kept alive for backward.
* Plackett-Luce: time to draw 100 rankings and estimate expected exposure for B = 256, N = 100, and the same
  with the gradient (PL-Rank-2 backward).

Memory: each case runs in a fresh subprocess; peak memory is the growth of ``ru_maxrss`` over the timed calls
after one warm-up call on the same shape, with ``MALLOC_MMAP_THRESHOLD_=131072`` so that glibc returns freed
tensors to the system and the resident-set high-water mark follows the memory simultaneously alive.

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


def _run(name: str, B: int, N: int, repeats: int) -> dict:
    from torchfair.browsing import RBP
    from torchfair.losses import dips_loss
    from torchfair.orderings import PlackettLuce

    gen = torch.Generator().manual_seed(0)
    s = torch.randn(B, N, generator=gen)
    r = torch.randint(0, 5, (B, N), generator=gen).float()
    g = torch.randint(0, 2, (B, N), generator=gen)
    mask = torch.ones(B, N, dtype=torch.bool)

    def call():
        x = s.clone().requires_grad_(name != "pl_exposure")
        if name == "dips_loss":
            loss = dips_loss(x, r, g, num_groups=2, validate_args=False)
            loss.backward()
        elif name == "pl_exposure":
            PlackettLuce(samples=100, generator=gen)(x, mask).exposure(RBP(0.9))
        else:
            e = PlackettLuce(samples=100, estimator="pl_rank", generator=gen)(x, mask).exposure(RBP(0.9))
            (e * r).sum().backward()

    call()  # warm-up: kernels paged in, allocator settled
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    return {"case": name, "B": B, "N": N, "median_s": statistics.median(times), "peak_extra_bytes": peak}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=str, default=None)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.worker is not None:
        name, B, N = CASES[a.worker]
        print(json.dumps(_run(name, B, N, a.repeats)))
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    rows = []
    for i in range(len(CASES)):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(i), "--repeats",
                              str(a.repeats), "--threads", str(a.threads)], env=env, capture_output=True, text=True,
                             check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"  done {rows[-1]['case']} {rows[-1]['B']}x{rows[-1]['N']}", file=sys.stderr)
    print(f"fp32, CPU, torch {torch.__version__}, {a.threads} thread(s), median of {a.repeats} after a warm-up\n")
    print("| case | B x N | median s (fwd+bwd) | peak extra MB |")
    print("|---|---|---:|---:|")
    labels = {"dips_loss": "DIPS loss, SoftRank(0.1), fwd+bwd", "pl_exposure": "PL: 100 samples + expected exposure",
              "pl_exposure_grad": "PL: 100 samples + exposure + PL-Rank backward"}
    for r in rows:
        print(f"| {labels[r['case']]} | {r['B']} x {r['N']} | {r['median_s']:.4f} | {r['peak_extra_bytes'] / 2**20:.0f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
