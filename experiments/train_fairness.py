"""Do the fairness losses train?  A linear scorer, Adam, ``utility + lam * fairness`` on two synthetic problems.

A published reproduction of a smooth-rank fairness loss failed because the gradient norm of the fairness term
vanished during training.  This script trains ``torch.nn.Linear(8, 1)`` with
``FairnessRegularizer(ListNetLoss, DIPSLoss(SoftRank(0.1)), lam)`` for several ``lam`` (plus the exposure
misallocation and pairwise-accuracy-gap losses and DIPS under ``PlackettLuce(estimator="pl_rank")``) and records

* on a held-out test set, before and after training: the exact DIPS gap (``Hard`` ordering, RBP(0.9) browsing,
  ``tie_weight=0.5``; mean over lists of ``|M_AB - M_BA|``, plus the signed mean ``M_AB - M_BA``) and NDCG@10,
  both against the *unbiased* relevance, and NDCG@10 against the *biased* training labels;
* the fairness loss value (the relaxed one being trained) at the start and the end of training;
* the norm of the gradient of the fairness term alone (w.r.t. the model parameters, before the ``lam``
  weighting) at the first, middle and last step and its minimum over all steps.

Data: both problems have biased training labels for the utility loss (historical judgements that over-rate
group B, i.e. B items are promoted above more relevant A items, as in the DIPS paper's condition 1) while the fairness term and the evaluation use the unbiased relevance (e.g. from an audit): the
utility-only model learns to penalise a group-correlated feature and is clearly unfair by exact DIPS; the model
that ranks by the unbiased relevance is both fair (DIPS gap 0) and available to the linear scorer.

(a) ``dips``: the DIPS paper's synthetic setting (Fabris et al., WSDM 2023, section 6.1) as a learning problem.
    Lists of N = 50 items, 25 of group A with relevance ~ U(0.5, 1) and 25 of group B ~ U(0.2, 0.7)
    (:func:`torchfair.data.synthetic.two_group_relevance`).  Features (8): four noisy views of the relevance
    ``r + N(0, sd)`` with sd = 0.10, 0.15, 0.20, 0.25; a group-B proxy ``1(B) + N(0, 0.3)``; three N(0, 1)
    distractors.  Training labels: ``y = r + 0.3 * 1(B)`` (B over-rated).
(b) ``gauss``: random feature-based lists of variable length (20 to 50 items, padded to 50 with a mask).
    Features x ~ N(0, I_8); group B with probability ``sigmoid(2 x_0)`` (correlated with feature 0); unbiased
    relevance ``t = w . x + N(0, 0.5)`` with ``w_0 = 0`` (feature 0 carries no merit), graded 0..4 by fixed
    thresholds; training labels graded from ``t + 2.0 * 1(B)``.

Usage: ``python experiments/train_fairness.py [--quick] [--seed 0] [--out experiments/results/train_fairness.md]``
(``OMP_NUM_THREADS=1`` recommended).  ``--quick``: fewer lists and steps, lam in {0, 2} only (the smoke test).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from torch import Tensor, nn

from torchfair.data.synthetic import two_group_relevance
from torchfair.losses import (DIPSLoss, ExposureMisallocationLoss, FairnessRegularizer, ListNetLoss,
                              PairwiseAccuracyGapLoss)
from torchfair.metrics import dips, ndcg
from torchfair.orderings import PlackettLuce

N_FEATURES = 8
N_MAX = 50


# ----------------------------------------------------------------------------------------------------- data
@dataclass
class Split:
    x: Tensor        # [L, N, F] features (0 on padding)
    y: Tensor        # [L, N] biased training labels (utility loss)
    r: Tensor        # [L, N] unbiased relevance (fairness loss, evaluation)
    g: Tensor        # [L, N] group ids, 0 = A, 1 = B (0 on padding)
    mask: Tensor     # [L, N] bool

    def batch(self, idx: Tensor) -> "Split":
        return Split(self.x[idx], self.y[idx], self.r[idx], self.g[idx], self.mask[idx])

    def __len__(self) -> int:
        return self.x.shape[0]


def make_dips(lists: int, gen: torch.Generator, n_a: int = 25, n_b: int = 25, boost: float = 0.3) -> Split:
    """(a) The DIPS paper's two-group data with features and historically biased labels."""
    rs, gs = zip(*(two_group_relevance(n_a, n_b, generator=gen) for _ in range(lists)))
    r, g = torch.stack(rs), torch.stack(gs)
    L, N = r.shape
    sd = torch.tensor([0.10, 0.15, 0.20, 0.25])
    views = r[..., None] + sd * torch.randn(L, N, 4, generator=gen)
    proxy = g.float()[..., None] + 0.3 * torch.randn(L, N, 1, generator=gen)
    noise = torch.randn(L, N, 3, generator=gen)
    x = torch.cat([views, proxy, noise], -1)
    y = r + boost * g.float()
    # shuffle items within each list so that the list order carries no group information
    perm = torch.argsort(torch.rand(L, N, generator=gen), -1)
    take = lambda t: t.gather(1, perm) if t.dim() == 2 else t.gather(1, perm[..., None].expand_as(t))
    return Split(take(x), take(y), take(r), take(g), torch.ones(L, N, dtype=torch.bool))


def _grade(t: Tensor) -> Tensor:
    return torch.bucketize(t, torch.tensor([-0.5, 0.5, 1.5, 2.5])).float()  # 0..4


def make_gauss(lists: int, gen: torch.Generator, n_min: int = 20, n_max: int = N_MAX, boost: float = 2.0) -> Split:
    """(b) Gaussian features, linear graded relevance, group correlated with feature 0, variable lengths."""
    L, N = lists, n_max
    x = torch.randn(L, N, N_FEATURES, generator=gen)
    g = (torch.rand(L, N, generator=gen) < torch.sigmoid(2.0 * x[..., 0])).long()
    w = torch.tensor([0.0, 1.0, 0.8, 0.6, 0.4, 0.3, 0.0, 0.0])
    t = x @ w + 0.5 * torch.randn(L, N, generator=gen)
    r, y = _grade(t), _grade(t + boost * g.float())
    n = torch.randint(n_min, n_max + 1, (L,), generator=gen)
    mask = torch.arange(N)[None, :] < n[:, None]
    zero = lambda v: torch.where(mask if v.dim() == 2 else mask[..., None], v, torch.zeros_like(v))
    return Split(zero(x), zero(y), zero(r), zero(g), mask)


DATASETS = {"dips": make_dips, "gauss": make_gauss}


# ---------------------------------------------------------------------------------------------- objectives
class Labels(nn.Module):
    """Feed a loss one of the two label sets packed in ``relevance[..., 2]`` (0: biased, 1: unbiased)."""

    def __init__(self, loss: nn.Module, which: int, scale: float = 1.0):
        super().__init__()
        self.loss, self.which, self.scale = loss, which, scale

    def forward(self, scores, relevance, groups, mask=None):
        return self.loss(scores, self.scale * relevance[..., self.which], groups, mask)


def make_fairness(name: str, seed: int) -> nn.Module:
    if name == "dips":
        return DIPSLoss(num_groups=2)
    if name == "dips_pl":
        return DIPSLoss(num_groups=2, ordering=PlackettLuce(samples=32, estimator="pl_rank",
                                                            generator=torch.Generator().manual_seed(seed)))
    if name == "exposure":
        return ExposureMisallocationLoss(num_groups=2)
    if name == "pair_acc":
        return PairwiseAccuracyGapLoss(num_groups=2)
    raise ValueError(name)


# (fairness loss, lam) per run
FULL_RUNS = [("dips", 0.0), ("dips", 0.5), ("dips", 1.0), ("dips", 2.0), ("dips", 5.0),
             ("exposure", 2.0), ("pair_acc", 2.0), ("dips_pl", 2.0)]
QUICK_RUNS = [("dips", 0.0), ("dips", 2.0)]
# ListNet target temperature: labels are multiplied by this before softmax
LABEL_SCALE = {"dips": 10.0, "gauss": 1.0}


# ------------------------------------------------------------------------------------------------ evaluation
@torch.no_grad()
def evaluate(model: nn.Module, data: Split) -> Dict[str, float]:
    s = model(data.x).squeeze(-1)
    M, valid = dips(s, data.r, data.g, num_groups=2, mask=data.mask, return_valid=True)  # exact: Hard()
    gap = (M[:, 0, 1] - M[:, 1, 0])
    ok = valid[:, 0, 1] & valid[:, 1, 0]
    return {"gap": gap[ok].abs().mean().item(), "signed": gap[ok].mean().item(),
            "ndcg": ndcg(s, data.r, k=10, mask=data.mask, reduction="mean").item(),
            "ndcg_biased": ndcg(s, data.y, k=10, mask=data.mask, reduction="mean").item()}


def grad_norm(loss: Tensor, params: List[Tensor]) -> float:
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return math.sqrt(sum(float((g ** 2).sum()) for g in grads if g is not None))


@dataclass
class RunResult:
    dataset: str
    fairness: str
    lam: float
    before: Dict[str, float]
    after: Dict[str, float]
    fair_loss: List[float] = field(default_factory=list)
    fair_grad: List[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def grad_summary(self):
        g = self.fair_grad
        return g[0], g[len(g) // 2], g[-1], min(g)


def train_run(dataset: str, fairness: str, lam: float, train: Split, test: Split, *, steps: int,
              batch_size: int, lr: float, seed: int) -> RunResult:
    torch.manual_seed(seed)
    model = nn.Linear(N_FEATURES, 1)
    params = list(model.parameters())
    reg = FairnessRegularizer(Labels(ListNetLoss(), 0, LABEL_SCALE[dataset]),
                              Labels(make_fairness(fairness, seed), 1), lam=lam)
    opt = torch.optim.Adam(params, lr=lr)
    before = evaluate(model, test)
    res = RunResult(dataset, fairness, lam, before, {})
    gen = torch.Generator().manual_seed(seed + 1)
    t0 = time.perf_counter()
    for _ in range(steps):
        b = train.batch(torch.randint(0, len(train), (batch_size,), generator=gen))
        s = model(b.x).squeeze(-1)
        labels = torch.stack([b.y, b.r], -1)
        total = reg(s, labels, b.g, b.mask)
        # the fairness term alone, with a graph (FairnessRegularizer skips the graph when lam = 0)
        # (for PL a fresh set of samples: an independent estimate of the same term)
        f = reg.fairness(s, labels, b.g, b.mask)
        res.fair_loss.append(float(f.detach()))
        res.fair_grad.append(grad_norm(f, params))
        opt.zero_grad()
        total.backward()
        opt.step()
        reg.step()
    res.seconds = time.perf_counter() - t0
    res.after = evaluate(model, test)
    return res


# ------------------------------------------------------------------------------------------------------ main
def run_all(quick: bool = False, seed: int = 0, datasets=("dips", "gauss"), runs=None, log=print):
    cfg = dict(steps=150, batch_size=32, lr=0.05) if quick else dict(steps=400, batch_size=32, lr=0.05)
    n_train, n_test = (256, 128) if quick else (1024, 512)
    runs = (QUICK_RUNS if quick else FULL_RUNS) if runs is None else runs
    results = []
    for d in datasets:
        gen = torch.Generator().manual_seed(1000 * seed + 7)
        train, test = DATASETS[d](n_train, gen), DATASETS[d](n_test, gen)
        for fairness, lam in runs:
            r = train_run(d, fairness, lam, train, test, seed=seed, **cfg)
            results.append(r)
            if log:
                log(f"  {d:5s} {fairness:8s} lam={lam:<4g} gap {r.before['gap']:.4f} -> {r.after['gap']:.4f}  "
                    f"ndcg {r.before['ndcg']:.4f} -> {r.after['ndcg']:.4f}  grad(last) {r.fair_grad[-1]:.3g}  "
                    f"[{r.seconds:.1f}s]", file=sys.stderr)
    return results, cfg, (n_train, n_test)


FAIR_NAMES = {"dips": "DIPS (SoftRank 0.1)", "dips_pl": "DIPS (PL, pl_rank, 32 samples)",
              "exposure": "exposure misalloc. L1 (SoftRank)", "pair_acc": "pairwise acc. gap (SoftRank)"}


def table(results: List[RunResult]) -> str:
    head = ("| data | fairness loss | lam | DIPS gap before | DIPS gap after | signed gap after | NDCG@10 before "
            "| NDCG@10 after | NDCG@10 after (biased labels) | fair. loss first | fair. loss last "
            "| grad first | grad mid | grad last | grad min |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        g0, gm, gl, gmin = r.grad_summary
        fl0 = sum(r.fair_loss[:10]) / len(r.fair_loss[:10])
        fl1 = sum(r.fair_loss[-10:]) / len(r.fair_loss[-10:])
        lines.append(f"| {r.dataset} | {FAIR_NAMES[r.fairness]} | {r.lam:g} | {r.before['gap']:.4f} "
                     f"| {r.after['gap']:.4f} | {r.after['signed']:+.4f} | {r.before['ndcg']:.4f} "
                     f"| {r.after['ndcg']:.4f} | {r.after['ndcg_biased']:.4f} | {fl0:.4f} | {fl1:.4f} "
                     f"| {g0:.3g} | {gm:.3g} | {gl:.3g} | {gmin:.3g} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smaller run (150 steps, 256 training lists, fewer configurations) for a smoke test")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and of the model initialisation")
    p.add_argument("--out", default=None, help="write the markdown report here")
    a = p.parse_args(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    t0 = time.perf_counter()
    results, cfg, sizes = run_all(a.quick, a.seed)
    elapsed = time.perf_counter() - t0
    cmd = "OMP_NUM_THREADS=1 python experiments/train_fairness.py" + (" --quick" if a.quick else "") + \
          (f" --seed {a.seed}" if a.seed else "") + (f" --out {a.out}" if a.out else "")
    text = table(results)
    print(text)
    print(f"\n{cfg['steps']} steps x {cfg['batch_size']} lists, Adam lr {cfg['lr']}, {sizes[0]} train / {sizes[1]} "
          f"test lists, {elapsed:.0f} s total.")
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(REPORT.format(cmd=cmd, table=text, steps=cfg["steps"], bs=cfg["batch_size"], lr=cfg["lr"],
                                   ntr=sizes[0], nte=sizes[1], elapsed=elapsed, torch=torch.__version__))
    return results


REPORT = """# Training with fairness losses: gap reduction, NDCG cost, gradient norm

Reproduce: `{cmd}` ({elapsed:.0f} s; torch {torch}, CPU).

{table}

Setup: see the docstring of `experiments/train_fairness.py`.  `torch.nn.Linear(8, 1)`, Adam lr {lr}, {steps} steps
of {bs} lists, {ntr} training / {nte} held-out test lists, seed 0.  Objective
`FairnessRegularizer(ListNet(biased labels), fairness(unbiased relevance), lam)`.

* DIPS gap: exact (`Hard` ordering, RBP(0.9), tie weight 0.5) mean over test lists of `|M_AB - M_BA|`; signed
  gap `M_AB - M_BA` (positive: group A disadvantaged).  NDCG@10 (exponential gain) on the test set against the
  unbiased relevance; the "biased labels" column is NDCG@10 against the training labels (the utility objective).
* fair. loss first/last: the relaxed fairness loss being trained (mean of the first / last 10 steps' batches).
* grad: `||d fairness / d params||_2` of the fairness term alone (not multiplied by lam), at the first, middle and
  last step, and its minimum over all steps.  For lam = 0 it is measured but not followed.

Observations (seed 0 above; the quick mode was checked on seeds 0-4, see `tests/experiments/test_train_fairness.py`):

* The utility-only model (lam = 0) learns the label bias and is clearly unfair by exact DIPS (group A
  disadvantaged); the DIPS loss reduces the exact gap monotonically in lam (DIPS data: 0.205 -> 0.021 at lam = 2,
  -90%; Gaussian data: 0.087 -> 0.026, -70%).  On the Gaussian data `|gap|` levels off near 0.025 while the signed
  gap goes to ~0: that floor is per-list noise of the exact gap on short lists with random group sizes.
* Utility cost: NDCG@10 against the biased training labels drops by at most about 0.05 (0.021 on the DIPS data, 0.051 on the Gaussian data, lam <= 5); against the unbiased
  relevance it rises, since the fair model undoes the label bias.
* The fairness gradient norm never collapses: it decreases only as the exact gap itself goes to ~0 (the
  smallest values, ~0.01, are at lam = 5 where the exact gap is already < 0.01), and at lam = 0, where the exact
  gap stays large, it stays at ~0.3 throughout.
* Exposure misallocation and the pairwise accuracy gap, trained at lam = 2, also reduce the exact DIPS gap;
  DIPS under `PlackettLuce(pl_rank)` trains too (a stochastic policy: its loss is the expected DIPS of sampled
  rankings, so it stays higher), at about 10x the cost per step of SoftRank.
"""

if __name__ == "__main__":
    main()
