"""Forward + backward time of soft ranks: torchfair's fast soft ranks vs torchsort and the pairwise sigmoid.

    python experiments/bench_relax.py [--shapes 256x100,64x1000,8x10000] [--repeats 7] [--tau 0.001]

Every method gets the same float32 scores ``[B, N]`` (standard normal, seed 0) and a mask whose lists have
random lengths in ``[N/2, N]`` (padded tail), and the same loss ``(ranks * weights).sum()`` with random weights;
the time is the median over ``--repeats`` runs of forward + backward (after one warm-up run, which also
compiles the numba kernel).  Columns:

* ``fsr-numba`` / ``fsr-torch``: :func:`torchfair.orderings.fast_soft_rank.soft_rank` with ``scale="std"``
  (``epsilon = tau * std``), masks honoured, numba and pure-torch isotonic solvers;
* ``torchsort``: ``torchsort.soft_rank(-scores, regularization_strength=epsilon)`` (l2) on the same lists;
  torchsort has no masks, so padded entries are set to ``-inf``-like low scores (they rank last; their ranks
  are ignored).  Skipped if torchsort is not importable;
* ``pairwise``: expected positions ``sum_j sigmoid((s_j - s_i) / epsilon)`` over real pairs, computed in row
  chunks of at most 2**22 pair entries, with autograd (so the chunks' intermediates are kept for backward).

``--tau`` is relative (times the list std); ``--taus`` runs several.  Prints a markdown table (milliseconds) and
the ratio fsr / torchsort.  Then (unless ``--no-losses``) the loss rows of ``bench_losses.py``: DIPS loss
forward+backward time and peak memory at (256, 100), (64, 1000), (8, 4096), and Plackett-Luce sampling.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from torchfair.orderings.fast_soft_rank import numba_available, soft_rank

try:
    import torchsort
except Exception:  # pragma: no cover - optional
    torchsort = None


def timed(fn, repeats):
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def pairwise_positions(s, mask, eps, chunk=2 ** 22):
    B, N = s.shape
    rows = max(1, chunk // (B * N))
    mf = mask.to(s.dtype)
    out = []
    for a in range(0, N, rows):
        b = min(N, a + rows)
        x = torch.sigmoid((s[:, None, :] - s[:, a:b, None]) / eps[:, :, None])
        off = (torch.arange(a, b)[:, None] != torch.arange(N)[None, :]).to(s.dtype)
        out.append((x * mf[:, None, :] * mf[:, a:b, None] * off).sum(-1))
    return torch.cat(out, 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Time the soft-rank relaxations (FastSoftRank numba / torch backends, "
                                             "torchsort, pairwise sigmoid) and the losses",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--shapes", default="256x100,64x1000,8x10000",
                    help="comma-separated batch shapes BxN (B lists of up to N items)")
    ap.add_argument("--repeats", type=int, default=7, help="timed forward + backward passes per case (median)")
    ap.add_argument("--taus", default="0.001", help="comma-separated temperatures tau (relative to each list's "
                                                    "score standard deviation)")
    ap.add_argument("--skip-pairwise-above", type=int, default=10 ** 9,
                    help="skip the pairwise relaxation when B*N*N exceeds this")
    ap.add_argument("--no-losses", action="store_true", help="skip the loss rows (bench_losses.py)")
    args = ap.parse_args(argv)
    print(f"threads={torch.get_num_threads()} numba={numba_available()} torchsort={torchsort is not None}")
    print("| B x N | tau | fsr-numba | fsr-torch | torchsort | pairwise | numba/torchsort | torch/torchsort |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        B, N = (int(v) for v in shape.split("x"))
        g = torch.Generator().manual_seed(0)
        scores = torch.randn(B, N, generator=g)
        lengths = torch.randint(N // 2, N + 1, (B,), generator=g)
        mask = torch.arange(N)[None, :] < lengths[:, None]
        weights = torch.randn(B, N, generator=g)
        mf = mask.float()
        with torch.no_grad():
            m = (scores * mf).sum(1, keepdim=True) / mf.sum(1, keepdim=True)
            std = ((((scores - m) * mf) ** 2).sum(1, keepdim=True) / mf.sum(1, keepdim=True)).sqrt()
        for tau in (float(t) for t in args.taus.split(",")):
            eps = tau * std
            res = {}

            def fsr(backend):
                x = scores.clone().requires_grad_()
                r = soft_rank(x, tau, mask, scale="std", backend=backend)
                (r * weights).sum().backward()

            if numba_available():
                res["numba"] = timed(lambda: fsr("numba"), args.repeats)
            res["torch"] = timed(lambda: fsr("torch"), args.repeats)
            if torchsort is not None:
                # one regularization strength per call in torchsort: divide the scores by each list's epsilon
                def ts():
                    x = scores.clone().requires_grad_()
                    z = torch.where(mask, -x / eps, torch.full_like(x, 1e30))
                    r = torchsort.soft_rank(z, regularization_strength=1.0) - 1
                    (r * weights * mf).sum().backward()
                res["torchsort"] = timed(ts, args.repeats)
            if B * N * N <= args.skip_pairwise_above:
                def pw():
                    x = scores.clone().requires_grad_()
                    (pairwise_positions(x, mask, eps) * weights).sum().backward()
                res["pairwise"] = timed(pw, max(1, min(args.repeats, 3 if N >= 10000 else args.repeats)))
            f = lambda k: f"{res[k]:.2f}" if k in res else "-"
            rat = lambda k: f"{res[k] / res['torchsort']:.2f}" if k in res and "torchsort" in res else "-"
            print(f"| {B} x {N} | {tau:g} | {f('numba')} | {f('torch')} | {f('torchsort')} | {f('pairwise')} | "
                  f"{rat('numba')} | {rat('torch')} |", flush=True)
    if not args.no_losses:
        import os
        import sys

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_losses

        print("\nLosses (bench_losses.py):\n", flush=True)
        bench_losses.main([])


if __name__ == "__main__":
    main()
