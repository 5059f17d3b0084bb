"""Time torchfair.compat.fairranktune against FairRankTune 0.0.7 on the same rankings and compare the values.

    OMP_NUM_THREADS=1 python experiments/bench_frt.py [--rankings 1000] [--items 100] [--groups 3] [--repeats 3]

Both sides get the same 1000 rankings x 100 items (3 groups, positional relevance and ctr in [0, 1]): FairRankTune
a pandas DataFrame (one ranking per column) and its item_group_dict, torchfair the equivalent tensors (item ids
``[B, N]``, item -> group ``[M]``, relevance ``[B, N]``), float64, CPU.  "torchfair (lists)" also includes the
conversion from Python lists + dict.  NDKL and IAA are single-ranking in FairRankTune (IAA evaluates only the
first ranking), so FairRankTune is called once per ranking and torchfair once, batched (``NDKL`` over ``[B, N]``,
``IAA(per_ranking=True)``).  Prints a markdown table: median seconds over the repeats, speed-up, max abs
difference over the aggregated value and every per-group (or per-ranking) value.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch

from torchfair.compat import fairranktune as ft


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def diff_group(ours, theirs):
    tv, td = theirs
    vals = [abs(float(ours.value) - float(tv))]
    od = ours.to_dict()
    vals += [abs(od[k.item() if hasattr(k, "item") else k] - float(v)) for k, v in td.items()]
    return max(vals)


def main(argv=None):
    ap = argparse.ArgumentParser(description="torchfair.compat.fairranktune vs FairRankTune 0.0.7",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rankings", type=int, default=1000, help="number of random rankings (lists)")
    ap.add_argument("--items", type=int, default=100, help="items per ranking")
    ap.add_argument("--groups", type=int, default=3, help="number of item groups")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per measure (the best is reported)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random rankings and groups")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    import pandas as pd
    import FairRankTune as frt

    M = frt.Metrics
    g = torch.Generator().manual_seed(a.seed)
    B, N, G = a.rankings, a.items, a.groups
    ranks = torch.stack([torch.randperm(N, generator=g) for _ in range(B)])
    item_groups = torch.randint(0, G, (N,), generator=g)
    item_groups[:G] = torch.arange(G)
    rel = torch.rand(B, N, generator=g, dtype=torch.float64)
    ctr = torch.rand(B, N, generator=g, dtype=torch.float64)
    grp = {i: int(item_groups[i]) for i in range(N)}
    rank_lists, rel_lists, ctr_lists = ranks.tolist(), rel.tolist(), ctr.tolist()
    R = pd.DataFrame(np.asarray(rank_lists).T)
    REL = pd.DataFrame(np.asarray(rel_lists).T)
    CTR = pd.DataFrame(np.asarray(ctr_lists).T)
    combo = "MinMaxRatio"

    cases = {
        "EXP": (lambda: M.EXP(R, grp, combo), lambda: ft.EXP(ranks, item_groups, combo),
                lambda: ft.EXP(rank_lists, grp, combo)),
        "EXPU": (lambda: M.EXPU(R, grp, REL, combo), lambda: ft.EXPU(ranks, item_groups, rel, combo),
                 lambda: ft.EXPU(rank_lists, grp, rel_lists, combo)),
        "EXPRU": (lambda: M.EXPRU(R, grp, REL, CTR, combo), lambda: ft.EXPRU(ranks, item_groups, rel, ctr, combo),
                  lambda: ft.EXPRU(rank_lists, grp, rel_lists, ctr_lists, combo)),
        "AWRF": (lambda: M.AWRF(R, grp, 0.1, combo), lambda: ft.AWRF(ranks, item_groups, 0.1, combo),
                 lambda: ft.AWRF(rank_lists, grp, 0.1, combo)),
        "ERBE": (lambda: M.ERBE(R, grp, 0.9, combo), lambda: ft.ERBE(ranks, item_groups, 0.9, combo),
                 lambda: ft.ERBE(rank_lists, grp, 0.9, combo)),
        "ERBP": (lambda: M.ERBP(R, grp, 0.9, combo), lambda: ft.ERBP(ranks, item_groups, 0.9, combo),
                 lambda: ft.ERBP(rank_lists, grp, 0.9, combo)),
        "ERBR": (lambda: M.ERBR(R, grp, REL, 0.9, combo), lambda: ft.ERBR(ranks, item_groups, rel, 0.9, combo),
                 lambda: ft.ERBR(rank_lists, grp, rel_lists, 0.9, combo)),
        "ARP": (lambda: M.ARP(R, grp, combo), lambda: ft.ARP(ranks, item_groups, combo),
                lambda: ft.ARP(rank_lists, grp, combo)),
    }
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (f_frt, f_t, f_l) in cases.items():
            t_frt, want = timed(f_frt, a.repeats)
            t_t, got = timed(f_t, a.repeats)
            t_l, got_l = timed(f_l, a.repeats)
            rows.append((name, t_frt, t_t, t_l, max(diff_group(got, want), diff_group(got_l, want))))
        # single-ranking metrics: FRT once per ranking, torchfair batched
        cols = [R[[c]] for c in R.columns]
        rcols = [REL[[c]] for c in REL.columns]
        t_frt, want = timed(lambda: np.array([M.NDKL(c, grp) for c in cols]), a.repeats)
        t_t, got = timed(lambda: ft.NDKL(ranks, item_groups), a.repeats)
        t_l, got_l = timed(lambda: ft.NDKL(rank_lists, grp), a.repeats)
        rows.append(("NDKL (per ranking)", t_frt, t_t, t_l,
                     max(np.abs(got.numpy() - want).max(), np.abs(got_l.numpy() - want).max())))
        t_frt, want = timed(lambda: np.array([M.IAA(c, r) for c, r in zip(cols, rcols)]), a.repeats)
        t_t, got = timed(lambda: ft.IAA(ranks, rel, per_ranking=True), a.repeats)
        t_l, got_l = timed(lambda: ft.IAA(rank_lists, rel_lists, per_ranking=True), a.repeats)
        rows.append(("IAA (per ranking)", t_frt, t_t, t_l,
                     max(np.abs(got.numpy() - want).max(), np.abs(got_l.numpy() - want).max())))

    print(f"{B} rankings x {N} items, {G} groups, combo={combo}, float64 CPU, 1 thread, "
          f"median of {a.repeats}; torch {torch.__version__}\n")
    print("| metric | FairRankTune 0.0.7 (s) | torchfair, tensors (s) | torchfair, lists+dict (s) | speed-up (tensors) "
          "| max abs diff |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, t_frt, t_t, t_l, d in rows:
        print(f"| {name} | {t_frt:.3f} | {t_t:.4f} | {t_l:.4f} | {t_frt / t_t:.0f}x | {d:.2e} |")


if __name__ == "__main__":
    main()
