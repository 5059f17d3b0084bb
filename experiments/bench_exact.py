"""Time and memory of the exact evaluators (default ``Hard()`` ordering), fp32 on CPU.

Every case (a measure on a ``[B, N]`` batch) runs in fresh subprocesses: build the inputs, one warm-up call, then
``--repeats`` timed calls; the time is the median.  Memory is the growth of the process's peak resident set size
(``VmHWM``, the peak resident set of the process, a high-water mark: ``_bench.maxrss_bytes``) from just before the warm-up (inputs built,
torch, numba and the compiled kernels loaded by a call on a tiny batch) to the end; it counts every temporary of the calls, torch's CPU tensors included, which
``tracemalloc`` does not see.  It is measured twice:

* ``peak live MB``: in a second subprocess run with ``MALLOC_MMAP_THRESHOLD_=131072``, which makes glibc serve
  every large tensor by its own ``mmap`` and unmap it when freed, so the RSS high-water mark is the peak of the
  memory simultaneously alive (the quantity the O(B N G) bound is about).  This run is slower and is not timed.
* ``RSS growth MB``: in the timed run, with glibc's default allocator.  Its dynamic mmap threshold (raised up to
  32 MB after the first large free) lets freed blocks stay in the heap, fragmented, so the process's RSS can grow
  several times beyond the live peak: this is what a user watching the process sees.

Under ``Hard()`` the pairwise measures never form pairs: one sorted sweep in ``O(B N G log N)`` time and
``O(B N G)`` memory (:meth:`torchfair.orderings.hard.HardOrderedBatch.contract`); the table prints the measured
live peak in units of one ``[B, N, G]`` float64 tensor, which should stay constant as N grows.  Time against
plain code is in ``bench_speed.py`` (``make bench``), which runs this script for the memory table.

``--frt`` adds the FairRankTune rows: torchfair's FairRankTune-compatible metrics against FairRankTune 0.0.7 itself
on the same 1000 rankings x 100 items, both timed in one run and their values compared (``bench_frt.py``).

Add a case: append to ``CASES`` (a measure name from ``MEASURES``, ``B``, ``N``, optional keyword arguments).
Usage: ``python experiments/bench_exact.py [--repeats 5] [--threads 1] [--only dips] [--out bench.json] [--frt]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict

import torch

from torchfair.browsing import RBP
from torchfair.metrics import pairwise as pw


def _dips(s, r, g):
    return pw.dips(s, r, g, browsing=RBP(0.9), num_groups=2)


#: name -> call(scores, relevance, groups); every call uses the default ordering Hard()
MEASURES: Dict[str, Callable] = {
    "dips": _dips,
    "igi": lambda s, r, g: pw.igi(s, r, g, num_groups=2),
    "ree": lambda s, r, g: pw.ree(s, r, g, num_groups=2),
    "pairwise_accuracy": lambda s, r, g: pw.pairwise_accuracy(s, r, g, num_groups=2),
    "rank_parity": lambda s, r, g: pw.rank_parity(s, g, num_groups=2),
}


@dataclass
class Case:
    measure: str
    B: int
    N: int
    grades: int = 5  # relevance drawn from {0, .., grades - 1} (ties, as in LTR data)
    groups: int = 2
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.measure}[B={self.B},N={self.N}]"


CASES = [Case(m, B, N) for m in MEASURES for (B, N) in ((1000, 100), (1000, 1000), (1, 100_000))]


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import maxrss_bytes as _maxrss_bytes  # noqa: E402  (the shared harness)


def run_case(case: Case, repeats: int, threads: int, seed: int = 0) -> dict:
    """Run one case in this process; returns its measurements."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(case.B, case.N, generator=g)
    relevance = torch.randint(0, case.grades, (case.B, case.N), generator=g).float()
    groups = torch.randint(0, case.groups, (case.B, case.N), generator=g)
    fn = MEASURES[case.measure]
    # load numba and the compiled kernels on a tiny batch first (~130 MB of code and caches, once per process):
    # the growth below is then what a call on this batch holds
    fn(scores[:2, :8].contiguous(), relevance[:2, :8].contiguous(), groups[:2, :8].contiguous())
    rss0 = _maxrss_bytes()
    fn(scores, relevance, groups)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(scores, relevance, groups)
        times.append(time.perf_counter() - t0)
    rss1 = _maxrss_bytes()
    return {"case": case.name, **asdict(case), "threads": threads, "repeats": repeats,
            "median_s": statistics.median(times), "min_s": min(times),
            "peak_extra_bytes": rss1 - rss0, "pair_entries": case.B * case.N * case.N}


#: glibc: a fixed mmap threshold (disables the dynamic one), so every freed large tensor leaves the RSS at once
LIVE_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _in_subprocess(index: int, repeats: int, threads: int, extra_env=None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **(extra_env or {}))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(index), "--repeats",
                          str(repeats), "--threads", str(threads)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"case {CASES[index].name} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(results) -> str:
    lines = ["| measure | B | N | median s | peak live MB | live / (B N G x 8 bytes) | RSS growth MB (default malloc) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        live, rss = r["peak_live_bytes"], r["peak_extra_bytes"]
        unit = r["B"] * r["N"] * r["groups"] * 8
        lines.append(f"| {r['measure']} | {r['B']} | {r['N']} | {r['median_s']:.4f} | "
                     f"{live / 2 ** 20:.1f} | {live / unit:.1f} | {rss / 2 ** 20:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Benchmark the exact evaluators (Hard ordering), fp32, CPU",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per case (the median is reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--only", type=str, default=None, help="comma-separated measure names (unset: all)")
    ap.add_argument("--out", type=str, default=None, help="write the results to this JSON file")
    ap.add_argument("--frt", action="store_true", help="also compare against FairRankTune 0.0.7 (bench_frt.py)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(run_case(CASES[args.worker], args.repeats, args.threads)))
        return None
    only = None if args.only is None else set(args.only.split(","))
    print(f"Exact evaluators (ordering=Hard(), ties by index), fp32, CPU, torch {torch.__version__}, "
          f"{args.threads} thread(s); median of {args.repeats} calls after one warm-up; inputs: random scores, "
          f"relevance in {{0..4}}, 2 groups.  Memory: growth of the peak RSS (VmHWM) over the calls, fresh "
          f"subprocesses per case; 'peak live' with MALLOC_MMAP_THRESHOLD_=131072 (freed tensors leave the RSS).  The "
          f"sorted sweep of Hard keeps O(B N G) memory: the live peak in units of one [B, N, G] float64 tensor.\n")
    results = []
    for i, case in enumerate(CASES):
        if only is not None and case.measure not in only:
            continue
        res = _in_subprocess(i, args.repeats, args.threads)
        res["peak_live_bytes"] = _in_subprocess(i, 1, args.threads, LIVE_MEMORY_ENV)["peak_extra_bytes"]
        results.append(res)
        print(f"  done {case.name}: {results[-1]['median_s']:.4f} s", file=sys.stderr)
    print(_table(results))
    if args.frt:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_frt

        print("\nFairRankTune-compatible metrics (torchfair.compat.fairranktune) vs FairRankTune itself:\n")
        bench_frt.main([])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
