"""What the fairness term costs a training step at lambda = 0 (warm-up, baselines), by logging policy.

A step is forward + backward of ``FairnessRegularizer(ListNetLoss(), DIPSLoss())`` on a batch of MovieLens-sized
training lists (B lists of N items, random scores that need gradients).  Policies are timed interleaved, round
by round, and reported as the median over rounds of the ratio to a plain ListNet step timed in the same round.

    python experiments/bench_regularizer.py [--batch 64] [--items 500] [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

from torchfair.losses import DIPSLoss, FairnessRegularizer, ListNetLoss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import interleaved, ratio, table  # noqa: E402  (the shared harness)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--batch", type=int, default=64, help="lists per batch (B)")
    ap.add_argument("--items", type=int, default=500, help="items per list (N)")
    ap.add_argument("--rounds", type=int, default=7, help="timing rounds (policies interleaved in each)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    B, N = args.batch, args.items
    relevance = torch.randint(0, 6, (B, N), generator=g).float()
    groups = torch.randint(0, 2, (B, N), generator=g)
    scores0 = torch.randn(B, N, generator=g)

    listnet = ListNetLoss(validate_args=False)
    policies = {
        "listnet only": lambda: listnet,
        "lambda=0, log_fairness_every=0": lambda: FairnessRegularizer(
            ListNetLoss(validate_args=False), DIPSLoss(num_groups=2, validate_args=False), lam=0.0,
            log_fairness_every=0),
        "lambda=0, log_fairness_every=10": lambda: FairnessRegularizer(
            ListNetLoss(validate_args=False), DIPSLoss(num_groups=2, validate_args=False), lam=0.0,
            log_fairness_every=10),
        "lambda=0, log_fairness_every=1": lambda: FairnessRegularizer(
            ListNetLoss(validate_args=False), DIPSLoss(num_groups=2, validate_args=False), lam=0.0),
        "lambda=1 (trains the fairness term)": lambda: FairnessRegularizer(
            ListNetLoss(validate_args=False), DIPSLoss(num_groups=2, validate_args=False), lam=1.0),
    }
    losses = {k: make() for k, make in policies.items()}
    steps = 10

    def run(loss) -> None:
        for _ in range(steps):
            s = scores0.clone().requires_grad_()
            loss(s, relevance, groups, None).backward()

    fns = {k: (lambda loss=loss: run(loss)) for k, loss in losses.items()}
    med, times = interleaved(fns, rounds=args.rounds)
    print(f"B = {B}, N = {N}, {args.threads} threads; ListNet step {med['listnet only'] * 1e3:.2f} ms")
    print(table(["policy", "step time / ListNet step (median over rounds)"],
                [[k, ratio(times, k, "listnet only")] for k in losses]))

if __name__ == "__main__":
    main()
