"""What the fairness term costs on a lean training step: plain PyTorch, pre-built tensors, nothing else in the step.

    python experiments/bench_lean_step.py            # ~1.5 min on 2 cores; writes experiments/results/bench_lean_step.{md,json}
    python experiments/bench_lean_step.py --fast     # tiny sizes, 2 rounds (a smoke test, not figures)

The step: a biased matrix factorisation (dim 32: user and item embeddings, user and item biases, a global bias) in
plain PyTorch scores pre-built ``[B, N]`` lists of item ids (MovieLens-100K's shape: 943 users, 1 682 items, two
item groups, 20 % protected); ``ListNetLoss`` (``torchfair.losses``) + Adam (lr 0.01), one torch thread.  No data
loader, no collation, no Lightning: what is left is the model, the utility loss, the optimiser and, in the other
variants, ``+ lam * fairness`` for ``DIPSLoss``, ``ExposureMisallocationLoss`` and ``PairwiseAccuracyGapLoss`` on
their default ordering (``RampRank(0.1)``; ``num_groups=2``, everything else the losses' defaults, input checks on,
every step).

Shapes: 64 lists x 200 items (a batch of an ML-100K training epoch with 100 negatives is ~64 x 220) and 64 x 1 682
(full-catalogue lists).  Relevance ``dense``: grades uniform in {0..5}; ``sparse``: 6 % of the items graded 1..5
(ML-100K's density), the rest 0.

Timing: each variant has its own model and optimiser (same initialisation); after one warm-up step each, rounds
interleave the variants (order rotated every round), each variant stepping until ``--min-time`` seconds have
passed; a variant's time is the median of its per-step times over the rounds.  Fairness share = (step with the
term - plain step) / step with the term, taken per round (the variant and the plain step timed side by side, so a
drift of the shared machine's speed moves both) and reported as its median and quartiles over the rounds.  The
load average (``os.getloadavg``) is read before and after each
shape: on a shared machine figures with a 1-minute load above the CPU count are not the quiet-machine figures the
aims are stated for.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

USERS, ITEMS, DIM = 943, 1682, 32
LAMBDA = 1.0
SIZES = ((64, 200), (64, 1682))
FAST_SIZES = ((4, 30), (4, 60))
RELEVANCE = ("dense", "sparse")
#: variant -> the fairness loss class name in torchfair.losses (None: the plain step)
VARIANTS = {"plain": None, "dips": "DIPSLoss", "misallocation": "ExposureMisallocationLoss",
            "pairwise_gap": "PairwiseAccuracyGapLoss"}
LABELS = {"plain": "ListNet + Adam (plain step)", "dips": "+ DIPS", "misallocation": "+ exposure misallocation",
          "pairwise_gap": "+ pairwise accuracy gap"}


def build_model(seed: int = 0):
    import torch
    from torch import nn

    class MF(nn.Module):
        def __init__(self):
            super().__init__()
            self.user = nn.Embedding(USERS, DIM)
            self.item = nn.Embedding(ITEMS, DIM)
            self.user_bias = nn.Embedding(USERS, 1)
            self.item_bias = nn.Embedding(ITEMS, 1)
            self.bias = nn.Parameter(torch.zeros(()))
            for e in (self.user, self.item):
                nn.init.normal_(e.weight, std=0.1)
            for e in (self.user_bias, self.item_bias):
                nn.init.zeros_(e.weight)

        def forward(self, users, items):  # users [B], items [B, N] -> scores [B, N]
            dot = (self.user(users)[:, None, :] * self.item(items)).sum(-1)
            return dot + self.user_bias(users) + self.item_bias(items)[..., 0] + self.bias

    torch.manual_seed(seed)
    return MF()


def build_inputs(B: int, N: int, relevance: str, seed: int = 0):
    """``users [B]``, ``items [B, N]`` (distinct items per list; every item when ``N`` is the catalogue),
    ``relevance [B, N]`` float, ``groups [B, N]`` int (the item's group, 20 % protected)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    item_group = (torch.rand(ITEMS, generator=g) < 0.2).long()
    users = torch.randint(0, USERS, (B,), generator=g)
    items = torch.stack([torch.randperm(ITEMS, generator=g)[:N] for _ in range(B)])
    if relevance == "dense":
        rel = torch.randint(0, 6, (B, N), generator=g).float()
    else:
        rel = torch.where(torch.rand(B, N, generator=g) < 0.06, torch.randint(1, 6, (B, N), generator=g).float(),
                          torch.zeros(()))
    return users, items, rel, item_group[items]


def make_step(variant: str, inputs, seed: int = 0):
    import torch
    import torchfair.losses as L

    users, items, rel, groups = inputs
    model = build_model(seed)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    utility = L.ListNetLoss()
    name = VARIANTS[variant]
    fair = getattr(L, name)(num_groups=2) if name else None

    def step():
        opt.zero_grad(set_to_none=True)
        s = model(users, items)
        loss = utility(s, rel)
        if fair is not None:
            loss = loss + LAMBDA * fair(s, rel, groups)
        loss.backward()
        opt.step()
        return loss

    return step


def measure(B: int, N: int, relevance: str, rounds: int, min_time: float,
            variants: Sequence[str] = tuple(VARIANTS)) -> Dict[str, object]:
    """Interleaved rounds of every variant on one shape: median seconds per step and the fairness shares."""
    import torch
    from _bench import interleaved

    inputs = build_inputs(B, N, relevance)
    steps = {v: make_step(v, inputs) for v in variants}
    load_before = os.getloadavg()
    med, times = interleaved(steps, rounds, min_time, alternate=True)
    load_after = os.getloadavg()
    out = {"B": B, "N": N, "relevance": relevance, "rounds": rounds,
           "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
           "median_s": med, "rounds_s": times, "share": {}}
    for v in variants:
        if v != "plain" and "plain" in med:
            # paired by round (the variant and the plain step timed side by side): a drift of the machine's speed
            # over the run moves both; the median over rounds and its quartiles
            shares = sorted(1.0 - p / x for p, x in zip(times["plain"], times[v]))
            out["share"][v] = statistics.median(shares)
            out.setdefault("share_quartiles", {})[v] = _quartiles(shares)
            out.setdefault("added_s", {})[v] = statistics.median(x - p for p, x in zip(times["plain"], times[v]))
    return out


def _quartiles(xs: Sequence[float]) -> List[float]:
    """The first and third quartiles of ``xs`` (sorted), for the spread of the per-round shares."""
    if len(xs) < 2:
        return [xs[0], xs[0]] if xs else []
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return [q[0], q[2]]


def markdown(results: List[Dict[str, object]], meta: Dict[str, object]) -> str:
    from _bench import table

    rows = []
    for r in results:
        for v in r["median_s"]:
            share = r["share"].get(v)
            q = r.get("share_quartiles", {}).get(v)
            rows.append([f"{r['B']} x {r['N']}", r["relevance"], LABELS[v], r["median_s"][v] * 1e3,
                         "-" if share is None else f"{100 * share:.1f} %",
                         "-" if not q else f"{100 * q[0]:.1f} - {100 * q[1]:.1f} %",
                         "{:.2f} / {:.2f}".format(r["load_before"][0], r["load_after"][0])])
    prov = meta["provenance"]
    return "\n".join([
        "# The fairness term on a lean training step", "",
        f"`{prov['command']}` at commit {prov['commit']}, {prov['date']}; {prov['machine']}; torch "
        f"{meta['torch']}, {meta['threads']} thread(s), python {meta['python']}.", "",
        "Biased MF (dim 32) in plain PyTorch on pre-built tensors, `ListNetLoss` + Adam; the fairness variants add "
        f"`{LAMBDA:g} * loss(scores, relevance, groups)` with the loss on its default ordering (`RampRank(0.1)`, "
        "`num_groups=2`), every step.  Median ms per step over interleaved rounds (order rotated per round); "
        "fairness share = (step with the term - plain step) / step with the term, per round (the two timed side "
        "by side), its median and quartiles over the rounds (aims: <= 25 % at 64 x 200, "
        "<= 50 % at 64 x 1682).  Load: the 1-minute load average before / after the shape's rounds "
        f"({os.cpu_count()} CPUs; above that another process held a core).  Script docstring: "
        "`experiments/bench_lean_step.py`.", "",
        table(["B x N", "relevance", "step", "ms / step", "fairness share", "share Q1 - Q3", "load"], rows), ""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--fast", action="store_true", help="tiny sizes, 2 rounds (a smoke test, not figures)")
    ap.add_argument("--rounds", type=int, default=25, help="interleaved rounds per shape")
    ap.add_argument("--min-time", type=float, default=0.15, help="seconds each variant steps for in a round")
    ap.add_argument("--relevance", default=",".join(RELEVANCE), help="comma-separated: dense, sparse")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_lean_step.md",
                    help="markdown report (and a .json beside it)")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    from _provenance import provenance

    torch.set_num_threads(args.threads)
    rels = [r for r in args.relevance.split(",") if r]
    bad = [r for r in rels if r not in RELEVANCE]
    if bad:
        ap.error(f"--relevance: unknown {bad}; choose from {RELEVANCE}")
    sizes = FAST_SIZES if args.fast else SIZES
    rounds, min_time = (2, 0.0) if args.fast else (args.rounds, args.min_time)
    results = []
    for B, N in sizes:
        for rel in rels:
            t0 = time.perf_counter()
            results.append(measure(B, N, rel, rounds, min_time))
            print(f"[bench_lean_step] {B} x {N} {rel}: {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    meta = {"provenance": provenance(argv, "experiments/bench_lean_step.py"), "torch": torch.__version__,
            "threads": args.threads, "python": sys.version.split()[0], "lambda": LAMBDA, "fast": args.fast,
            "min_time": min_time}
    text = markdown(results, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps({"provenance": meta.pop("provenance"), "meta": meta,
                                                         "results": results}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
