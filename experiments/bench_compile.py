"""Is ``torch.compile`` a faster route to a cheap fairness term on the CPU?  (Issue 28, the tries of the fairness
share of a training step.)

One ML-100K training batch of the configs (batch 64, 100 negatives; the synthetic stand-in without ML-100K), the
scores of the MF ranker of ``bench_training.py``, and ``DIPSLoss`` (``RampRank(0.1)``), forward + backward per
call, 1 thread, interleaved rounds, median:

* ``eager, compiled kernels``: the default path (numba kernels on the CPU, fused contraction);
* ``eager, torch backend``: ``RampRank(backend="torch")``, the pure-torch reference;
* ``torch.compile, torch backend``: the same loss under ``torch.compile`` (inductor, C++ on the CPU).  The kernels
  are opaque to dynamo, so the compiled variant needs the torch backend; data-dependent host reads (the number of
  relevance levels) still break the graph.  The first call's compile time is reported.

    python experiments/bench_compile.py              # ~1 min, writes experiments/results/bench_compile.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_compile.md")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds (median reported)")
    ap.add_argument("--calls", type=int, default=10, help="calls per variant per round")
    ap.add_argument("--out", default=RESULTS, help="markdown file to write ('' to only print)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import bench_training as bt
    from torchfair.losses import DIPSLoss
    from torchfair.orderings import RampRank

    data = bt.load_data(types.SimpleNamespace(variant="ml-100k", negatives=100, batch_size=64, eval_batch_size=64,
                                              download=False, steps=1))
    batch = bt._to(data["collate"]([data["dm"].train_dataset[i] for i in data["batches"][0]]), torch.device("cpu"))
    rel, groups, mask = batch["relevance"], batch["groups"], batch["mask"]
    model, _ = bt.build_model("dips_ramp", data["dm"].info, torch.device("cpu"))
    scores = model(batch).detach().requires_grad_(True)
    G = int(data["dm"].info["num_groups"])
    eager = DIPSLoss(num_groups=G)
    torch_backend = DIPSLoss(num_groups=G, ordering=RampRank(0.1, backend="torch"))
    compiled_fn = torch.compile(lambda s: torch_backend(s, rel, groups, mask))
    variants = {"eager, compiled kernels (default)": lambda s: eager(s, rel, groups, mask),
                "eager, torch backend": lambda s: torch_backend(s, rel, groups, mask),
                "torch.compile, torch backend": compiled_fn}
    values = {}
    t0 = time.perf_counter()
    values["torch.compile, torch backend"] = float(compiled_fn(scores))
    compile_s = time.perf_counter() - t0
    for name, fn in variants.items():
        for _ in range(2):
            fn(scores).backward()
        values[name] = float(fn(scores).detach())
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            for _ in range(args.calls):
                fn(scores).backward()
            times[name].append((time.perf_counter() - t) / args.calls)
    med = {n: statistics.median(v) for n, v in times.items()}
    base = med["eager, compiled kernels (default)"]
    lines = ["# torch.compile against the eager loss (DIPS, RampRank 0.1)", "",
             f"Command: `python experiments/bench_compile.py`; torch {torch.__version__}, 1 thread; one training batch "
             f"{tuple(scores.shape)} ({data['dm'].info['variant']}); median of {args.rounds} interleaved rounds of "
             f"{args.calls} calls, forward + backward.", "",
             "| variant | per call | x default | loss value |", "|---|---:|---:|---:|"]
    for name in variants:
        lines.append(f"| {name} | {med[name] * 1e3:.2f} ms | {med[name] / base:.2f}x | {values[name]:.6f} |")
    lines += ["", f"First call of the compiled variant (tracing + inductor): {compile_s:.1f} s.  The compiled kernels "
              "are opaque to dynamo (graph breaks at each of them), so compiling needs the torch backend, whose "
              "sorts, searches and prefix sums cost more than the whole eager loss on the kernels: not the route "
              "on the CPU."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
