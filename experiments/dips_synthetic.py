"""The synthetic experiment of the DIPS paper (Fabris et al., WSDM 2023, ``000`` §6.1), with torchfair.

Data: N = 1000 items, N_A = N_B = 500, relevance r_A ~ U(0.5, 1), r_B ~ U(0.2, 0.7); browsing model
F(k) = 0.9**k (RBP(0.9)) for DIPS and the exposure measures; REE uses uniform browsing.

* Condition 1 (§6.1.1, systematic group advantage): the 20 most relevant B items are promoted to positions
  k .. k+19 of the ideal ranking (others keep their relative order), k = 0 .. 99.
* Condition 2 (§6.1.2, relevance ties): relevance rounded to {0, 1}; rankings of maximum utility whose ties between
  A and B are broken in favour of A with probability p_A; measures averaged over the repetitions (one data draw,
  ``--reps`` tie-breaking draws per p_A, each evaluated as a hard ranking).

Usage: ``python experiments/dips_synthetic.py [--seed 0] [--reps 100] [--out results.json]``.
"""
from __future__ import annotations

import argparse
import json
import time

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


def _exposure_columns(scores, rel, groups, ordering=None):
    """{target: (l1 [B], delta_A [B])}, or {} when torchfair.metrics.exposure is not available."""
    if exposure_misallocation is None:
        return {}
    out = {}
    for t in TARGETS:
        delta = exposure_misallocation(scores, rel, groups, target=t, browsing=BROWSING, num_groups=2,
                                       ordering=ordering)
        out[t] = (delta.abs().sum(-1), delta[..., 0])
    return out


def condition1(seed: int, n_a: int = 500, n_b: int = 500, count: int = 20, ks=range(100)):
    """All promotion ranks ``ks`` evaluated as one batch. Returns a list of per-k dicts."""
    g = torch.Generator().manual_seed(seed)
    rel, groups = two_group_relevance(n_a, n_b, generator=g)
    ideal = ideal_ranking(rel)
    rankings = torch.stack([promote(ideal, groups, group=1, count=count, k=k) for k in ks])
    B = rankings.shape[0]
    scores = scores_from_ranking(rankings)
    R, G = rel.expand(B, -1), groups.expand(B, -1)
    M_dips = dips(scores, R, G, browsing=BROWSING, num_groups=2)
    M_ree = ree(scores, R, G, num_groups=2)
    expo = _exposure_columns(scores, R, G)
    rows = []
    for b, k in enumerate(ks):
        row = {"k": k, "dips_AB": M_dips[b, 0, 1].item(), "dips_BA": M_dips[b, 1, 0].item(),
               "dips_gap": pairwise_gap(M_dips)[b, 0, 1].item(), "ree_AB": M_ree[b, 0, 1].item(),
               "ree_gap": pairwise_gap(M_ree)[b, 0, 1].item()}
        for t, (l1, dA) in expo.items():
            row[f"l1_{t}"], row[f"deltaA_{t}"] = l1[b].item(), dA[b].item()
        rows.append(row)
    return rows


def condition2(seed: int, reps: int = 100, n_a: int = 500, n_b: int = 500, p_values=None, chunk: int = 110):
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
            per_draw[f"dips{int(ct)}"].append(dips(sc, R, G, browsing=BROWSING, tie_weight=ct, num_groups=2,
                                                   validate_args=False))
            per_draw[f"ree{int(ct)}"].append(ree(sc, R, G, tie_weight=ct, num_groups=2, validate_args=False))
        expo_chunks.append(_exposure_columns(sc, R, G))
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic relevance and the tie breaking")
    ap.add_argument("--reps", type=int, default=100, help="tie-breaking repetitions of condition 2 (paper: 100)")
    ap.add_argument("--out", type=str, default=None,
                    help="write every row (all k) to this JSON file")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()

    print(HEADER)
    if exposure_misallocation is None:
        print("(torchfair.metrics.exposure not available: exposure columns skipped)")
    has_expo = exposure_misallocation is not None
    tnames = {"ee": "EE", "ea": "EA", "ea-dp": "EA-dp"}

    rows1 = condition1(args.seed)
    print(COND1)
    cols = ["k", "DIPS M_AB", "DIPS M_BA", "DIPS gap", "REE M_AB-M_BA"]
    if has_expo:
        cols += [f"|delta|_1 {tnames[t]}" for t in TARGETS] + [f"delta_A {tnames[t]}" for t in TARGETS]
    table = []
    for r in rows1:
        if r["k"] not in SHOW_K:
            continue
        cells = [str(r["k"]), f"{r['dips_AB']:.4f}", f"{r['dips_BA']:.4f}", f"{r['dips_gap']:.4f}",
                 f"{r['ree_gap']:.4f}"]
        if has_expo:
            cells += [f"{r[f'l1_{t}']:.4f}" for t in TARGETS] + [f"{r[f'deltaA_{t}']:+.4f}" for t in TARGETS]
        table.append(cells)
    print(_fmt_table(cols, table))
    ab = [r["dips_AB"] for r in rows1]
    checks = {"M_AB non-increasing in k": all(b <= a + 1e-6 for a, b in zip(ab, ab[1:])),
              "M_BA == 0 for every k": all(r["dips_BA"] == 0 for r in rows1),
              "DIPS M_AB(k=0) > 0.5": rows1[0]["dips_AB"] > 0.5,
              "REE gap < 0.1 for every k": all(abs(r["ree_gap"]) < 0.1 for r in rows1)}
    print("checks: " + "; ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in checks.items()))

    rows2 = condition2(args.seed, args.reps)
    print(COND2)
    print(f"(one data draw: {rows2[0]['n_B_relevant']} B items round to relevance 1, all 500 A items do; "
          f"{args.reps} tie-breaking draws per p_A)")
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
    print(_fmt_table(cols, table))
    elapsed = time.perf_counter() - t0
    print(f"\n(seed {args.seed}, {elapsed:.1f} s)")

    if args.out:
        with open(args.out, "w") as f:
            json.dump({"seed": args.seed, "reps": args.reps, "browsing": repr(BROWSING), "checks": checks,
                       "condition1": rows1, "condition2": rows2, "seconds": elapsed}, f, indent=1)
        print(f"wrote {args.out}")
    return rows1, rows2


if __name__ == "__main__":
    main()
