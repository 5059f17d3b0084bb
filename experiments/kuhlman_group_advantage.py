"""Fair ranking metrics against a controlled group advantage (Kuhlman, Gerych, Rundensteiner, "Measuring Group
Advantage: A Comparative Study of Fair Ranking Metrics", AIES 2021, ``001`` §6, Figure 2).

Generation of the rankings (the paper follows Yang & Stoyanovich 2017, its ref. [31]): ``N`` items, of which
``round(share * N)`` are protected (share = 0.2 minority, 0.5 balanced, 0.8 majority).  A ranking is filled from the
top: at every position a protected item is drawn with probability ``alpha`` and a non-protected one otherwise (each
group's items in a uniformly random order); once one group is exhausted the rest of the list is the other group.
So ``alpha`` = the probability that a position holds a protected item while both groups remain: ``alpha = 0`` is a
total disadvantage of the protected group (all of it at the bottom), ``alpha = 1`` a total advantage, and
``alpha = |G_p| / N`` puts protected items at the population rate everywhere (fair in expectation; Assumptions 1-2
of §3.2 hold on either side of it).  Every alpha is averaged over ``--runs`` random rankings (the paper: 10).

Metrics (torchfair.metrics), all in [0, 1] with 0 = fair, as the paper normalises them ("scaling based on the minimum
and maximum possible values given the size of the groups"):

* rND, rRD, rKL: cut-offs 10, 20, ... (``--step``), normalised by their exact maximum over rankings of the same
  composition (torchfair's ``Z``; the paper instead clips rRD's plot at its alpha = 0.9 value).
* pair: ``|1 - 2 pair_{G_p}|`` (eq. 8-9), in [0, 1] already (1 at both extreme rankings).
* expRR: ``|1 - 2 exp_{G_p}|`` with ``v(k) = 1/k`` (eq. 6-7), divided by its maximum for the group sizes (the larger
  of its values on the protected-first and protected-last rankings; exposure is monotone between them).
* skew: skew@k (``--skew-k``, paper silent; default 10) of the protected group, a signed metric (0 = parity) that
  the paper also maps to [0, 1]; we scale it linearly between its smallest and largest possible values for the group
  sizes (the smallest with at least one protected item in the top k, since ln 0 = -inf; a top k without protected
  item counts as that smallest value).  Hence skew is *not* minimal at parity: it increases with alpha.

Reported: for every group size the alpha where each metric's mean is minimal (the paper: a shared minimum at
alpha = |G_p| / N for rND, rRD, rKL, pair, expRR) and pair's values at alpha = 0 and 1 (Theorem 3: its maximum).
Optionally (on by default) the §5 monotonicity test on rankings that satisfy Assumptions 1-2 (the generator above) and
on rankings that do not (protected items concentrated in the middle of the list).

Measured deviations from the paper (see the .md): rRD falls back near 0 at alpha = 1 instead of exploding, because
torchfair takes the ratio of a prefix without non-protected item as 0 (Yang & Stoyanovich's convention), so the
all-protected top cut-offs contribute nothing; with a minority group expRR's minimum can fall one grid step below
|G_p|/N (v(k) = 1/k weighs the first few positions, so 10 runs leave it noisy).

Usage: ``python experiments/kuhlman_group_advantage.py [--fast] [--n 1000] [--runs 10] [--seed 0]``; writes
``experiments/results/kuhlman_group_advantage.{png,md}`` (``--out-dir``).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from torchfair.metrics import exp_rr, monotonicity_test, rank_parity, rkl, rnd, rrd, skew

METRICS = ("rND", "rRD", "rKL", "skew", "pair", "expRR")
SHARES = (0.2, 0.5, 0.8)
FAST = dict(n=100, runs=20, alphas=[i / 10 for i in range(11)])  # --fast (a few seconds)
SHARE_NAMES = {0.2: "minority (20%)", 0.5: "balanced (50%)", 0.8: "majority (80%)"}


def generate_rankings(n: int, n_protected: int, alpha: float, runs: int, generator: torch.Generator) -> torch.Tensor:
    """Item ids (0 .. n_protected-1 protected) in ranked order, ``[runs, n]``: position by position a protected item
    with probability ``alpha`` while both groups remain (Yang & Stoyanovich 2017 generator)."""
    if not 0 <= n_protected <= n:
        raise ValueError(f"`n_protected` must be in [0, n]; got {n_protected}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"`alpha` must be in [0, 1]; got {alpha}")
    out = torch.empty(runs, n, dtype=torch.long)
    coins = torch.rand(runs, n, generator=generator) < alpha
    for r in range(runs):
        prot = torch.randperm(n_protected, generator=generator).tolist()
        rest = (n_protected + torch.randperm(n - n_protected, generator=generator)).tolist()
        ip = ir = 0
        for pos in range(n):
            take_p = ir >= len(rest) or (ip < len(prot) and bool(coins[r, pos]))
            if take_p:
                out[r, pos] = prot[ip]
                ip += 1
            else:
                out[r, pos] = rest[ir]
                ir += 1
    return out


def _scores(order: torch.Tensor) -> torch.Tensor:
    """Scores (higher = better) giving the ranking ``order`` (item ids by position), ``[B, N]``."""
    b, n = order.shape
    s = torch.empty(b, n)
    s.scatter_(1, order, (n - torch.arange(n, dtype=torch.float)).expand(b, n).contiguous())
    return s


def metric_values(order: torch.Tensor, n_protected: int, *, step: int = 10, skew_k: int = 10) -> dict:
    """Per-ranking normalised metrics (``[B]`` each) for rankings ``order`` whose items ``< n_protected`` are
    protected."""
    b, n = order.shape
    groups = (torch.arange(n) < n_protected).long().expand(b, n).contiguous()
    s = _scores(order)
    out = {
        "rND": rnd(s, groups, step=step),
        "rRD": rrd(s, groups, step=step),
        "rKL": rkl(s, groups, step=step),
        "pair": rank_parity(s, groups, num_groups=2).pair[:, 1],
    }
    # expRR normalised by its maximum for these group sizes (protected first or protected last)
    e = exp_rr(s, groups, num_groups=2)[:, 1]
    first = torch.arange(n, dtype=torch.float).flip(0)[None]  # item i gets score n-1-i: protected first
    g1 = groups[:1]
    emax = torch.maximum(exp_rr(first, g1, num_groups=2)[0, 1], exp_rr(-first, g1, num_groups=2)[0, 1])
    out["expRR"] = e / emax
    # skew@k of the protected group, linearly scaled between its smallest and largest possible values
    k = min(skew_k, n)
    q = n_protected / n
    sk, valid = skew(s, groups, k=k, num_groups=2, return_valid=True)
    lo_count = max(1, k - (n - n_protected))
    lo, hi = math.log(lo_count / k / q), math.log(min(k, n_protected) / k / q)
    sk = torch.where(valid[:, 1], sk[:, 1], torch.full((b,), lo))
    out["skew"] = (sk - lo) / (hi - lo)
    return out


def sweep(n: int = 1000, runs: int = 10, alphas=None, shares=SHARES, seed: int = 0, step: int = 10,
          skew_k: int = 10) -> dict:
    """Mean normalised metrics over ``runs`` rankings for every group share and alpha:
    ``{share: {"alphas": [A], metric: tensor [A]}}``."""
    if alphas is None:
        alphas = [i / 20 for i in range(21)]
    if n < 2 or runs < 1:
        raise ValueError(f"`n` must be >= 2 and `runs` >= 1; got {n}, {runs}")
    g = torch.Generator().manual_seed(seed)
    res = {}
    for share in shares:
        n_p = round(share * n)
        rows = {m: [] for m in METRICS}
        for a in alphas:
            vals = metric_values(generate_rankings(n, n_p, a, runs, g), n_p, step=step, skew_k=skew_k)
            for m in METRICS:
                rows[m].append(vals[m].float().mean())
        res[share] = {"alphas": list(alphas), **{m: torch.stack(v) for m, v in rows.items()}}
    return res


def argmins(res: dict) -> dict:
    """``{share: {metric: alpha of the smallest mean}}``."""
    return {s: {m: r["alphas"][int(torch.argmin(r[m]))] for m in METRICS} for s, r in res.items()}


def monotonicity_demo(n: int, runs: int, seed: int = 0) -> list:
    """§5 test on rankings satisfying Assumptions 1-2 (generator, 20% protected, alpha 0.2 / 0.6) and violating
    them (protected items in the middle third, random order within blocks)."""
    g = torch.Generator().manual_seed(seed)
    n_p = round(0.2 * n)
    rows = []
    groups = (torch.arange(n) < n_p).long().expand(runs, n).contiguous()
    for a in (0.2, 0.6):
        t = monotonicity_test(_scores(generate_rankings(n, n_p, a, runs, g)), groups)
        rows.append((f"generator alpha={a} (assumptions hold)", t.direction, int(t.dof), float(t.statistic),
                     float(t.p_value)))
    # violating: the protected group fills the middle of every list
    mid = (n - n_p) // 2
    orders = []
    for _ in range(runs):
        rest = (n_p + torch.randperm(n - n_p, generator=g))
        orders.append(torch.cat([rest[:mid], torch.randperm(n_p, generator=g), rest[mid:]]))
    t = monotonicity_test(_scores(torch.stack(orders)), groups)
    rows.append(("protected in the middle (violated)", t.direction, int(t.dof), float(t.statistic),
                 float(t.p_value)))
    return rows


def _table(res: dict) -> str:
    am = argmins(res)
    lines = ["| group | |G_p|/N | " + " | ".join(f"argmin {m}" for m in METRICS) + " | pair(α=0) | pair(α=1) |",
             "|---" * (len(METRICS) + 4) + "|"]
    for s, r in res.items():
        lines.append(f"| {SHARE_NAMES.get(s, s)} | {s:.2f} | " + " | ".join(f"{am[s][m]:.2f}" for m in METRICS)
                     + f" | {float(r['pair'][0]):.3f} | {float(r['pair'][-1]):.3f} |")
    return "\n".join(lines)


def _curves(res: dict) -> str:
    out = []
    for s, r in res.items():
        out.append(f"\n{SHARE_NAMES.get(s, s)}: mean normalised metric per alpha\n")
        out.append("| α | " + " | ".join(METRICS) + " |")
        out.append("|---" * (len(METRICS) + 1) + "|")
        for i, a in enumerate(r["alphas"]):
            out.append(f"| {a:.2f} | " + " | ".join(f"{float(r[m][i]):.3f}" for m in METRICS) + " |")
    return "\n".join(out)


def _plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(res), figsize=(5 * len(res), 4), sharey=True, squeeze=False)
    for ax, (s, r) in zip(axes[0], res.items()):
        for m in METRICS:
            ax.plot(r["alphas"], r[m].numpy(), marker="o", ms=3, label=m)
        ax.axvline(s, color="grey", ls=":", lw=1)
        ax.set_title(SHARE_NAMES.get(s, str(s)))
        ax.set_xlabel("group advantage α")
    axes[0][0].set_ylabel("normalised metric (0 = fair)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description="Kuhlman et al. (AIES 2021) §6: rND, rRD, rKL, skew, pair and expRR on random rankings with a "
                    "controlled group advantage alpha, for a minority, balanced and majority protected group.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="items per ranking")
    p.add_argument("--runs", type=int, default=10, help="random rankings averaged per alpha (the paper: 10)")
    p.add_argument("--alpha-step", type=float, default=0.05, help="spacing of the alpha grid on [0, 1]")
    p.add_argument("--step", type=int, default=10, help="cut-off spacing of rND / rRD / rKL")
    p.add_argument("--skew-k", type=int, default=10, help="k of skew@k")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--fast", action="store_true", help="N=100, 20 runs, alpha step 0.1 (seconds)")
    p.add_argument("--no-monotonicity", action="store_true", help="skip the §5 monotonicity-test demo")
    p.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                   help="folder for kuhlman_group_advantage.png / .md")
    a = p.parse_args(argv)
    if a.fast:
        a.n, a.runs, a.alpha_step = FAST["n"], FAST["runs"], 0.1
    if not 0 < a.alpha_step <= 1:
        p.error("`--alpha-step` must be in (0, 1]")
    m = round(1 / a.alpha_step)
    alphas = [round(i / m, 6) for i in range(m + 1)]
    res = sweep(a.n, a.runs, alphas, seed=a.seed, step=a.step, skew_k=a.skew_k)
    head = (f"# Kuhlman et al. (AIES 2021) §6: metrics vs group advantage α\n\nN = {a.n}, {a.runs} rankings per α, "
            f"α grid step {a.alpha_step}, cut-off step {a.step}, skew@{a.skew_k}, seed {a.seed}"
            f"{' (--fast)' if a.fast else ''}.\nPaper: rND, rRD, rKL, pair, expRR share their minimum at "
            f"α = |G_p|/N; pair is maximal (1) at α = 0 and 1; skew follows a different pattern.\n\n"
            "α at which each metric's mean is minimal, and pair at the extremes:\n\n")
    text = head + _table(res) + "\n" + _curves(res) + "\n"
    text += ("\nNotes: rRD drops back at α = 1 (torchfair takes the ratio of a prefix with no non-protected item as 0, "
             "so an all-protected top contributes nothing; the paper's rRD explodes there).  expRR (v(k) = 1/k) weighs "
             "the first positions most, so its mean is noisy and its minimum can sit one grid step off |G_p|/N.  "
             "skew (signed, scaled to [0, 1]) rises with α instead of having a minimum at parity.\n")
    if not a.no_monotonicity:
        rows = monotonicity_demo(a.n, 100, a.seed)
        text += ("\n## Monotonicity test (§5), 20% protected, " + "100 rankings\n\n"
                 "| rankings | direction | dof | χ² | p-value |\n|---|---|---|---|---|\n"
                 + "\n".join(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1f} | {r[4]:.3g} |" for r in rows) + "\n")
    print(text)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / "kuhlman_group_advantage.md").write_text(text)
    _plot(res, a.out_dir / "kuhlman_group_advantage.png")
    print(f"wrote {a.out_dir / 'kuhlman_group_advantage.md'} and .png")


if __name__ == "__main__":
    main()
