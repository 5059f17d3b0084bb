"""How big is lambda * fairness next to the utility loss, epoch by epoch?  SoftRank's scaled vs fixed temperature.

``SoftRank(t)`` (the default ordering of the fairness losses) scales its temperature by each list's score spread:
``tau = t * max(std(s), 0.25)``.  A fresh MF model scores every item near 0, so early lists sit on the 0.25 floor
and ``tau`` is small; as training spreads the scores ``tau`` grows, and the fairness gradient (which scales like
``1 / tau``) shrinks.  A fixed weight lambda therefore means something else in the first epoch than later.

This script trains biased MF with ListNet on ML-100K (leave-last-n split, popularity groups) and, after every
epoch, measures on ``--batches`` training batches the gradient norms (over the model parameters) of ListNet and of
the DIPS loss on three orderings: ``SoftRank(0.1)`` (scaled), ``SoftRank(tau, scale="none")`` (fixed temperature
``tau`` in score units) and the scaled one under a linear lambda warm-up.  It prints the ratio
``|grad DIPS| / |grad ListNet|`` per epoch: the lambda at which both terms pull equally hard is its inverse.

``python experiments/lambda_temperature.py --epochs 20``
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variant", default="ml-100k", help="MovieLens variant ('synthetic' needs no download)")
    p.add_argument("--epochs", type=int, default=20, help="ListNet training epochs")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--batches", type=int, default=4, help="training batches the gradients are measured on")
    p.add_argument("--temperature", type=float, default=0.1, help="relative temperature of SoftRank (scaled)")
    p.add_argument("--fixed-temperature", type=float, default=0.3,
                   help="absolute temperature of the fixed SoftRank (score units)")
    p.add_argument("--seed", type=int, default=0, help="seed")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--out", default=None, help="also write the table to this markdown file")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    warnings.filterwarnings("ignore")
    import torch

    from torchfair.losses import DIPSLoss, ListNetLoss
    from torchfair.orderings import SoftRank
    from torchfair.orderings.soft import list_scale
    from torchfair.training import MatrixFactorization, MovieLensDataModule

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dm = MovieLensDataModule(args.variant, seed=args.seed)
    dm.setup("fit")
    info = dm.info
    model = MatrixFactorization(info["num_users"], info["num_items"], dim=32)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    util = ListNetLoss()
    fair = {"scaled": DIPSLoss(num_groups=2, ordering=SoftRank(args.temperature)),
            "fixed": DIPSLoss(num_groups=2, ordering=SoftRank(args.fixed_temperature, scale="none"))}
    params = list(model.parameters())

    def gnorm(loss) -> float:
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        return float(torch.sqrt(sum((g ** 2).sum() for g in grads if g is not None)))

    def measure(epoch: int):
        dm.set_epoch(10_000 + epoch)  # fixed probe batches, apart from the training draws
        it = iter(dm.train_dataloader())
        rows = {"utility": 0.0, "scaled": 0.0, "fixed": 0.0, "std": 0.0}
        for _ in range(args.batches):
            b = next(it)
            s = model(b)
            rows["utility"] += gnorm(util(s, b["relevance"], b["groups"], b["mask"]))
            for k, f in fair.items():
                rows[k] += gnorm(f(model(b), b["relevance"], b["groups"], b["mask"]))
            rows["std"] += float(list_scale(s.detach(), b["mask"], min_scale=1e-12).mean())
        return {k: v / args.batches for k, v in rows.items()}

    lines = ["| epoch | mean list std of scores | |∇ ListNet| | |∇ DIPS| scaled τ | ratio scaled | |∇ DIPS| fixed τ "
             "| ratio fixed |", "|---:|---:|---:|---:|---:|---:|---:|"]
    t0 = time.time()
    for epoch in range(args.epochs + 1):
        m = measure(epoch)
        lines.append(f"| {epoch} | {m['std']:.3f} | {m['utility']:.4f} | {m['scaled']:.4f} | "
                     f"{m['scaled'] / m['utility']:.2f} | {m['fixed']:.4f} | {m['fixed'] / m['utility']:.2f} |")
        print(lines[-1], flush=True)
        if epoch == args.epochs:
            break
        dm.set_epoch(epoch)
        for b in dm.train_dataloader():
            s = model(b)
            loss = util(s, b["relevance"], b["groups"], b["mask"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    table = "\n".join(lines)
    print(f"\n{table}\n\n({time.time() - t0:.0f} s; scaled: SoftRank({args.temperature}), fixed: "
          f"SoftRank({args.fixed_temperature}, scale='none'))")
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"`python experiments/lambda_temperature.py {' '.join(argv or sys.argv[1:])}`\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
