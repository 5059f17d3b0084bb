"""The synthetic experiment of the DIPS paper (Fabris et al., WSDM 2023, ``000`` §6.1), with torchfair.

Data: N = 1000 items, N_A = N_B = 500, relevance r_A ~ U(0.5, 1), r_B ~ U(0.2, 0.7); browsing model
F(k) = 0.9**k (RBP(0.9)) for DIPS and the exposure measures; REE uses uniform browsing.

* Condition 1 (§6.1.1, systematic group advantage): the 20 most relevant B items are promoted to positions
  k .. k+19 of the ideal ranking (others keep their relative order), k = 0 .. 99.
* Condition 2 (§6.1.2, relevance ties): relevance rounded to {0, 1}; rankings of maximum utility whose ties between
  A and B are broken in favour of A with probability p_A; measures averaged over the repetitions (one data draw,
  ``--reps`` tie-breaking draws per p_A, each evaluated as a hard ranking).

Writes ``dips_synthetic_61_1.png`` (Figure 1a: relevance, DIPS / REE gap, |delta|_1 and delta_A against the promotion
rank k), ``dips_synthetic_61_2.png`` (Figure 1b: the same against p_A) and ``dips_synthetic.md`` (tables, wall time,
the paper's findings checked) to ``--out-dir`` (default ``runs/dips_synthetic``; ``--results`` writes the
committed ``experiments/results`` instead).  ``--fast``: k step 3 and 20 tie-breaking draws (seconds).

Usage: ``python experiments/dips_synthetic.py [--fast] [--seed 0] [--reps 100] [--out-dir DIR | --results]
[--out rows.json]``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from torchfair.browsing import RBP
from torchfair.data.synthetic import ideal_ranking, promote, tie_breaking_rankings, two_group_relevance
from torchfair.metrics.pairwise import dips, pairwise_gap, ree
from torchfair.orderings import scores_from_ranking

try:  # written by another part of the project; columns are skipped when absent
    from torchfair.metrics.exposure import exposure_misallocation
except ImportError:  # pragma: no cover
    exposure_misallocation = None

TARGETS = ("ee", "ea", "ea-dp")
SHOW_K = (0, 1, 2, 5, 10, 20, 40, 60, 80, 99)
BROWSING = RBP(0.9)
RESULTS = Path(__file__).resolve().parent / "results"
#: where a plain run writes (not the tracked experiments/results)
DEFAULT_OUT = Path("runs") / "dips_synthetic"
FAST = dict(ks=list(range(0, 100, 3)) + [99], reps=20)  # --fast (a few seconds)

HEADER = """\
DIPS synthetic experiment (Fabris et al., WSDM 2023, section 6.1)
N = 1000 items: 500 of group A with relevance ~ U(0.5, 1), 500 of group B with relevance ~ U(0.2, 0.7).
DIPS and the exposure measures use the RBP browsing model F(k) = 0.9^k (0-based positions k); REE is uniform.
M_AB = dissatisfaction of A caused by B (B items ranked above more relevant A items); gap = M_AB - M_BA.
delta_A > 0: group A under-exposed w.r.t. the target (EE: expected exposure, EA: equity of attention, EA-dp:
demographic parity); |delta|_1 = 2 |delta_A| for two groups."""

COND1 = """
Condition 1 (section 6.1.1): the 20 most relevant B items are promoted to positions k..k+19 of the ideal ranking.
Paper's expectations: DIPS M_AB decays (exponentially) as k grows; M_BA = 0 (nothing is promoted in favour of A);
at k = 0, DIPS M_AB > 0.5 (strong dissatisfaction) while REE M_AB - M_BA << 0.1 and is nearly flat in k;
delta_A (all three targets) decays with k like DIPS."""

COND2 = """
Condition 2 (section 6.1.2): relevance rounded to {0, 1}; ties between A and B broken in favour of A with
probability p_A (every ranking has maximum utility).  c_t = 0: tie-indifferent, c_t = 1: tie-aware (eq. 8).
Paper's expectations: with c_t = 0 DIPS and REE are flat at 0 (no proper unfavourable pair); with c_t = 1 they
span a wide range, positive (A dissatisfied) for small p_A and negative for large p_A; EE and EA follow the
profile of tie-aware DIPS."""


def _fmt_table(columns, rows):
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(columns), sep] + [line(r) for r in rows])


def _exposure_columns(scores, rel, groups, ordering=None, browsing=BROWSING):
    """{target: (l1 [B], delta_A [B])}, or {} when torchfair.metrics.exposure is not available."""
    if exposure_misallocation is None:
        return {}
    out = {}
    for t in TARGETS:
        delta = exposure_misallocation(scores, rel, groups, target=t, browsing=browsing, num_groups=2,
                                       ordering=ordering)
        out[t] = (delta.abs().sum(-1), delta[..., 0])
    return out


def condition1(seed: int, n_a: int = 500, n_b: int = 500, count: int = 20, ks=range(100), browsing=BROWSING):
    """All promotion ranks ``ks`` evaluated as one batch. Returns a list of per-k dicts (``browsing``: the model of
    DIPS and the exposure measures; the paper's RBP(0.9) unless a test swaps it)."""
    g = torch.Generator().manual_seed(seed)
    rel, groups = two_group_relevance(n_a, n_b, generator=g)
    ideal = ideal_ranking(rel)
    rankings = torch.stack([promote(ideal, groups, group=1, count=count, k=k) for k in ks])
    B = rankings.shape[0]
    scores = scores_from_ranking(rankings)
    R, G = rel.expand(B, -1), groups.expand(B, -1)
    M_dips = dips(scores, R, G, browsing=browsing, num_groups=2)
    M_ree = ree(scores, R, G, num_groups=2)
    expo = _exposure_columns(scores, R, G, browsing=browsing)
    rows = []
    for b, k in enumerate(ks):
        row = {"k": k, "dips_AB": M_dips[b, 0, 1].item(), "dips_BA": M_dips[b, 1, 0].item(),
               "dips_gap": pairwise_gap(M_dips)[b, 0, 1].item(), "ree_AB": M_ree[b, 0, 1].item(),
               "ree_gap": pairwise_gap(M_ree)[b, 0, 1].item()}
        for t, (l1, dA) in expo.items():
            row[f"l1_{t}"], row[f"deltaA_{t}"] = l1[b].item(), dA[b].item()
        rows.append(row)
    return rows


def condition2(seed: int, reps: int = 100, n_a: int = 500, n_b: int = 500, p_values=None, chunk: int = 110,
               browsing=BROWSING):
    """Binary relevance, tie-breaking policy p_A; measures averaged over ``reps`` tie-breaking draws."""
    p_values = [round(0.1 * i, 1) for i in range(11)] if p_values is None else list(p_values)
    g = torch.Generator().manual_seed(seed + 1)
    rel, groups = two_group_relevance(n_a, n_b, generator=g)
    relq = torch.round(rel)
    P, N = len(p_values), rel.numel()
    samples = torch.stack([tie_breaking_rankings(relq, groups, p, reps, generator=g) for p in p_values], 1)
    # every draw evaluated as a hard ranking, in chunks of lists (about 100 lists of 1000 items is the sweet spot
    # of the row-blocked pair contraction on a CPU); rows of `flat` are (draw, p_A) pairs
    flat = samples.reshape(reps * P, N)
    per_draw = {f"{m}{int(ct)}": [] for m in ("dips", "ree") for ct in (0.0, 1.0)}
    expo_chunks = []
    for c0 in range(0, flat.shape[0], chunk):
        rk = flat[c0:c0 + chunk]
        B = rk.shape[0]
        sc, R, G = scores_from_ranking(rk), relq.expand(B, N), groups.expand(B, N)
        for ct in (0.0, 1.0):
            per_draw[f"dips{int(ct)}"].append(dips(sc, R, G, browsing=browsing, tie_weight=ct, num_groups=2,
                                                   validate_args=False))
            per_draw[f"ree{int(ct)}"].append(ree(sc, R, G, tie_weight=ct, num_groups=2, validate_args=False))
        expo_chunks.append(_exposure_columns(sc, R, G, browsing=browsing))
    # mean over the draws of each p_A ([reps * P, 2, 2] -> [reps, P, 2, 2] -> [P, 2, 2])
    res = {key: torch.cat(v).reshape(reps, P, 2, 2).mean(0) for key, v in per_draw.items()}
    expo = {t: tuple(torch.cat([c[t][j] for c in expo_chunks]) for j in (0, 1)) for t in expo_chunks[0]}
    rows = []
    for i, p in enumerate(p_values):
        row = {"p_A": p, "n_B_relevant": int(((relq == 1) & (groups == 1)).sum())}
        for key, M in res.items():
            row[f"{key}_AB"], row[f"{key}_BA"] = M[i, 0, 1].item(), M[i, 1, 0].item()
            row[f"{key}_gap"] = pairwise_gap(M)[i, 0, 1].item()
        for t, (l1, dA) in expo.items():
            row[f"l1_{t}"] = l1.reshape(reps, P)[:, i].mean().item()
            row[f"deltaA_{t}"] = dA.reshape(reps, P)[:, i].mean().item()
        rows.append(row)
    return rows


def _corr(x, y):
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def _ranks(x):
    order = sorted(range(len(x)), key=lambda i: x[i])
    r = [0.0] * len(x)
    for pos, i in enumerate(order):
        r[i] = float(pos)
    return r


def decay_factor(rows, lo: int = 20, hi: int = 80) -> float:
    """Per-step factor of DIPS M_AB in k, exp of the least-squares slope of log M_AB over ``lo <= k <= hi``."""
    pts = [(r["k"], math.log(r["dips_AB"])) for r in rows if lo <= r["k"] <= hi and r["dips_AB"] > 0]
    if len(pts) < 2:
        return float("nan")
    ks, ys = zip(*pts)
    mk, my = sum(ks) / len(ks), sum(ys) / len(ys)
    slope = sum((k - mk) * (y - my) for k, y in pts) / sum((k - mk) ** 2 for k in ks)
    return math.exp(slope)


def findings(rows1, rows2) -> dict:
    """The paper's statements on Figure 1a / 1b (000 §6.1.1, §6.1.2), each checked on the rows: {statement: bool}."""
    out = {}
    if rows1:
        ab = [r["dips_AB"] for r in rows1]
        ree_gap = [r["ree_gap"] for r in rows1]
        out["6.1.1 M_BA = 0 for every k (DIPS)"] = all(r["dips_BA"] == 0 for r in rows1)
        out["6.1.1 DIPS M_AB(k=0) > 0.5"] = rows1[0]["k"] == 0 and ab[0] > 0.5
        out["6.1.1 REE M_AB - M_BA << 0.1 for every k (< 0.1)"] = all(abs(g) < 0.1 for g in ree_gap)
        out["6.1.1 DIPS M_AB(k=0) > 10 x REE M_AB(k=0)"] = ab[0] > 10 * rows1[0]["ree_AB"]
        out["6.1.1 DIPS decays in k (non-increasing)"] = all(b <= a + 1e-6 for a, b in zip(ab, ab[1:]))
        out["6.1.1 DIPS decay is exponential, factor ~0.9 per rank (0.85..0.95)"] = (
            0.85 < decay_factor(rows1) < 0.95)
        dips_range = max(ab) - min(ab)
        out["6.1.1 REE mostly flat (range < 10% of DIPS's range)"] = max(ree_gap) - min(ree_gap) < 0.1 * dips_range
        if "deltaA_ee" in rows1[0]:
            for t in TARGETS:
                d = [r[f"deltaA_{t}"] for r in rows1]
                out[f"6.1.1 delta_A {t} decays in k (non-increasing)"] = all(b <= a + 1e-5 for a, b in zip(d, d[1:]))
            for t in ("ea", "ea-dp"):
                diff = [r["deltaA_ee"] - r[f"deltaA_{t}"] for r in rows1]
                out[f"6.1.1 delta_A ee and {t} equal up to a constant"] = max(diff) - min(diff) < 1e-4
            out["6.1.1 |delta|_1 = 2 |delta_A|"] = all(abs(r[f"l1_{t}"] - 2 * abs(r[f"deltaA_{t}"])) < 1e-4
                                                       for r in rows1 for t in TARGETS)
    if rows2:
        ps = [r["p_A"] for r in rows2]
        d1 = [r["dips1_gap"] for r in rows2]
        out["6.1.2 c_t = 0: DIPS and REE flat at 0"] = all(
            r[f"{m}0_{s}"] == 0 for r in rows2 for m in ("dips", "ree") for s in ("AB", "BA"))
        for m in ("dips", "ree"):
            g = [r[f"{m}1_gap"] for r in rows2]
            out[f"6.1.2 c_t = 1: {m.upper()} gap spans a wide range (> 0 at p_A = 0, < 0 at p_A = 1, range > 0.5)"] = (
                ps[0] == 0.0 and ps[-1] == 1.0 and g[0] > 0 > g[-1] and g[0] - g[-1] > 0.5)
            out[f"6.1.2 c_t = 1: {m.upper()} gap decreases with p_A (Spearman < -0.9)"] = (
                _corr(_ranks(ps), _ranks(g)) < -0.9)
        if "deltaA_ee" in rows2[0]:
            out["6.1.2 EE and EA indistinguishable (|delta_A EE - EA| < 0.01)"] = all(
                abs(r["deltaA_ee"] - r["deltaA_ea"]) < 0.01 for r in rows2)
            for t in ("ee", "ea"):
                out[f"6.1.2 {t.upper()} delta_A has the profile of tie-aware DIPS (Pearson > 0.95)"] = (
                    _corr([r[f"deltaA_{t}"] for r in rows2], d1) > 0.95)
    return out


def compare_to_paper(rows1, rows2) -> list:
    """A few markdown lines: what 000 §6.1 reports next to what was measured here."""
    r0, r9 = rows1[0], rows1[-1]
    p0, p5, p1 = rows2[0], rows2[len(rows2) // 2], rows2[-1]
    f = findings(rows1, rows2)
    bad = [k for k, v in f.items() if not v]
    out = ["## Compared with the paper", "",
           f"- §6.1.1: paper: DIPS M_AB > 0.5 at k = 0, exponential decay, M_BA = 0; REE M_AB << 0.1, mostly flat. "
           f"Measured: DIPS M_AB = {r0['dips_AB']:.3f} at k = 0, {r9['dips_AB']:.2e} at k = {r9['k']} "
           f"(decay factor {decay_factor(rows1):.3f} per rank, RBP gamma 0.9); M_BA = 0 at every k; REE M_AB = "
           f"{r0['ree_AB']:.4f} at k = 0 and {r9['ree_AB']:.4f} at k = {r9['k']}."]
    if "deltaA_ee" in r0:
        out.append(f"- §6.1.1: paper: delta_A of EE / EA / EA-dp decay like DIPS and are equal up to a constant, "
                   f"|delta|_1 = 2|delta_A|. Measured delta_A at k = 0 / {r9['k']}: EE {r0['deltaA_ee']:+.3f} / "
                   f"{r9['deltaA_ee']:+.3f}, EA {r0['deltaA_ea']:+.3f} / {r9['deltaA_ea']:+.3f}, EA-dp "
                   f"{r0['deltaA_ea-dp']:+.3f} / {r9['deltaA_ea-dp']:+.3f} (constant offsets). Because EA and "
                   f"EA-dp's delta_A cross zero, their |delta|_1 is not monotone in k (V shape, panel 3).")
    out.append(f"- §6.1.2: paper: c_t = 0 flat at 0; c_t = 1 spans a wide range. Measured: c_t = 0 exactly 0; "
               f"c_t = 1 DIPS gap {p0['dips1_gap']:+.3f} / {p5['dips1_gap']:+.3f} / {p1['dips1_gap']:+.3f} and REE gap "
               f"{p0['ree1_gap']:+.3f} / {p5['ree1_gap']:+.3f} / {p1['ree1_gap']:+.3f} at p_A = 0 / 0.5 / 1. Not "
               f"symmetric around p_A = 0.5: only {p0['n_B_relevant']} B items (vs 500 A items) round to 1, so A is "
               f"more dissatisfied at p_A = 0 than B at p_A = 1; the DIPS gap first turns negative at p_A = "
               f"{next((r['p_A'] for r in rows2 if r['dips1_gap'] < 0), float('nan')):.1f}.")
    if "deltaA_ee" in p0:
        corr = _corr([r["deltaA_ee"] for r in rows2], [r["dips1_gap"] for r in rows2])
        out.append(f"- §6.1.2: paper: EE and EA indistinguishable, same profile as tie-aware DIPS. Measured: max "
                   f"|delta_A EE - EA| = {max(abs(r['deltaA_ee'] - r['deltaA_ea']) for r in rows2):.1e}; Pearson "
                   f"(delta_A EE, DIPS c_t = 1 gap) = {corr:.3f}.")
    out.append(f"- {len(f) - len(bad)} of {len(f)} checked statements hold"
               + (f"; not holding: {', '.join(bad)}." if bad else "."))
    return out


def _relevance(seed: int, cond: int):
    """The data draw of condition ``cond`` (the same generator seeding as condition1 / condition2)."""
    g = torch.Generator().manual_seed(seed if cond == 1 else seed + 1)
    rel, groups = two_group_relevance(500, 500, generator=g)
    return (rel if cond == 1 else torch.round(rel)), groups


def _plot(x, xlabel, rel, groups, rows, curves2, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(16, 3.6))
    bins = [i / 20 for i in range(21)]
    ax[0].hist([rel[groups == 0].tolist(), rel[groups == 1].tolist()], bins=bins, label=["A", "B"],
               color=["C0", "C1"], alpha=0.8)
    ax[0].set_xlabel("relevance r_i")
    ax[0].set_ylabel("items")
    ax[0].set_title("(1) relevance", fontsize=9)
    for key, label, style in curves2:
        ax[1].plot(x, [r[key] for r in rows], style, label=label, markersize=3)
    ax[1].set_title("(2) pairwise: M_AB - M_BA", fontsize=9)
    names = {"ee": "EE", "ea": "EA", "ea-dp": "EA-dp"}
    if "l1_ee" in rows[0]:
        for t, st in zip(TARGETS, ("-", "--", ":")):
            ax[2].plot(x, [r[f"l1_{t}"] for r in rows], st, label=names[t])
            ax[3].plot(x, [r[f"deltaA_{t}"] for r in rows], st, label=names[t])
    ax[2].set_title("(3) exposure: |delta|_1", fontsize=9)
    ax[3].set_title("(4) exposure: delta_A (> 0: A under-exposed)", fontsize=9)
    for a in ax[1:]:
        a.set_xlabel(xlabel)
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plots(rows1, rows2, seed: int, out_dir: Path):
    """Figure 1a / 1b of 000 as ``dips_synthetic_61_1.png`` / ``dips_synthetic_61_2.png`` in ``out_dir``."""
    out_dir = Path(out_dir)
    rel, groups = _relevance(seed, 1)
    _plot([r["k"] for r in rows1], "promotion rank k of the 20 best B items", rel, groups, rows1,
          [("dips_gap", "DIPS (RBP 0.9)", "-"), ("ree_gap", "REE", "--"), ("dips_BA", "DIPS M_BA", ":")],
          out_dir / "dips_synthetic_61_1.png", "Fabris et al. 2023 §6.1.1 / Fig. 1a: systematic group advantage")
    rel, groups = _relevance(seed, 2)
    _plot([r["p_A"] for r in rows2], "p_A (ties broken in favour of A)", rel, groups, rows2,
          [("dips1_gap", "DIPS c_t=1", "o-"), ("ree1_gap", "REE c_t=1", "s--"),
           ("dips0_gap", "DIPS c_t=0", "^-"), ("ree0_gap", "REE c_t=0", "v:")],
          out_dir / "dips_synthetic_61_2.png", "Fabris et al. 2023 §6.1.2 / Fig. 1b: relevance ties")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic relevance and the tie breaking")
    ap.add_argument("--reps", type=int, default=100, help="tie-breaking repetitions of condition 2 (paper: 100)")
    ap.add_argument("--fast", action="store_true",
                    help=f"k step 3 and {FAST['reps']} tie-breaking draws (seconds); overrides --reps")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help=f"folder for dips_synthetic_61_1.png, dips_synthetic_61_2.png and dips_synthetic.md "
                         f"(default: {DEFAULT_OUT}; with --results: experiments/results)")
    ap.add_argument("--results", action="store_true",
                    help="write into experiments/results (the committed results) instead of runs/dips_synthetic")
    ap.add_argument("--out", type=str, default=None,
                    help="write every row (all k) to this JSON file")
    args = ap.parse_args(argv)
    if args.results and args.out_dir is not None:
        ap.error("give --out-dir or --results, not both")
    if args.out_dir is None:
        args.out_dir = RESULTS if args.results else DEFAULT_OUT
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    ks = FAST["ks"] if args.fast else list(range(100))
    reps = FAST["reps"] if args.fast else args.reps
    t0 = time.perf_counter()
    lines = []
    say = lambda s="": (print(s), lines.append(s))

    say(HEADER)
    if exposure_misallocation is None:
        say("(torchfair.metrics.exposure not available: exposure columns skipped)")
    has_expo = exposure_misallocation is not None
    tnames = {"ee": "EE", "ea": "EA", "ea-dp": "EA-dp"}

    rows1 = condition1(args.seed, ks=ks)
    say(COND1)
    cols = ["k", "DIPS M_AB", "DIPS M_BA", "DIPS gap", "REE M_AB-M_BA"]
    if has_expo:
        cols += [f"|delta|_1 {tnames[t]}" for t in TARGETS] + [f"delta_A {tnames[t]}" for t in TARGETS]
    table = []
    show = set(SHOW_K) if not args.fast else {ks[i] for i in range(0, len(ks), 3)} | {ks[-1]}
    for r in rows1:
        if r["k"] not in show:
            continue
        cells = [str(r["k"]), f"{r['dips_AB']:.4f}", f"{r['dips_BA']:.4f}", f"{r['dips_gap']:.4f}",
                 f"{r['ree_gap']:.4f}"]
        if has_expo:
            cells += [f"{r[f'l1_{t}']:.4f}" for t in TARGETS] + [f"{r[f'deltaA_{t}']:+.4f}" for t in TARGETS]
        table.append(cells)
    say()
    say(_fmt_table(cols, table))

    rows2 = condition2(args.seed, reps)
    say(COND2)
    say(f"(one data draw: {rows2[0]['n_B_relevant']} B items round to relevance 1, all 500 A items do; "
        f"{reps} tie-breaking draws per p_A)")
    cols = ["p_A", "DIPS gap c_t=0", "DIPS gap c_t=1", "DIPS M_AB c_t=1", "DIPS M_BA c_t=1", "REE gap c_t=0",
            "REE gap c_t=1"]
    if has_expo:
        cols += [f"|delta|_1 {tnames[t]}" for t in TARGETS] + [f"delta_A {tnames[t]}" for t in TARGETS]
    table = []
    for r in rows2:
        cells = [f"{r['p_A']:.1f}", f"{r['dips0_gap']:.4f}", f"{r['dips1_gap']:+.4f}", f"{r['dips1_AB']:.4f}",
                 f"{r['dips1_BA']:.4f}", f"{r['ree0_gap']:.4f}", f"{r['ree1_gap']:+.4f}"]
        if has_expo:
            cells += [f"{r[f'l1_{t}']:.4f}" for t in TARGETS] + [f"{r[f'deltaA_{t}']:+.4f}" for t in TARGETS]
        table.append(cells)
    say()
    say(_fmt_table(cols, table))

    checks = findings(rows1, rows2)
    say("\nThe paper's statements, checked on these numbers (each: holds or DOES NOT HOLD):\n")
    for name, ok in checks.items():
        say(f"- {name}: {'holds' if ok else 'DOES NOT HOLD'}")
    say(f"- (measured) DIPS M_AB decay factor per rank, k in 20..80: {decay_factor(rows1):.4f} (RBP gamma = 0.9)")
    elapsed = time.perf_counter() - t0
    say(f"\n(seed {args.seed}, {elapsed:.1f} s)")

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots(rows1, rows2, args.seed, out_dir)
    total = time.perf_counter() - t0
    cmd = "python experiments/dips_synthetic.py " + " ".join(sys.argv[1:] if argv is None else argv)
    md = [f"# DIPS synthetic experiment (Fabris et al., WSDM 2023, §6.1)", "",
          f"Command: `{cmd.strip()}` — wall time {total:.1f} s in main() "
          f"(measures {elapsed:.1f} s, the rest plotting; {args.threads} torch thread(s)).", "",
          "Figures: `dips_synthetic_61_1.png` (Fig. 1a, against k), `dips_synthetic_61_2.png` (Fig. 1b, against "
          "p_A).", "", *compare_to_paper(rows1, rows2), "", "Full output:", "", "```", *lines, "```", ""]
    (out_dir / "dips_synthetic.md").write_text("\n".join(md))
    print(f"wrote {out_dir / 'dips_synthetic.md'}, dips_synthetic_61_1.png, dips_synthetic_61_2.png")

    if args.out:
        with open(args.out, "w") as f:
            json.dump({"seed": args.seed, "reps": reps, "browsing": repr(BROWSING), "checks": checks,
                       "condition1": rows1, "condition2": rows2, "seconds": elapsed}, f, indent=1)
        print(f"wrote {args.out}")
    return rows1, rows2


if __name__ == "__main__":
    main()
