"""Time torchfair.compat.fairranktune against FairRankTune 0.0.7 and against a direct vectorised implementation of
the same formulas, and check that all three give the same numbers.

    python experiments/bench_frt.py [--rankings 1000] [--items 100] [--groups 3] [--rounds 7] [--threads 1]
                                    [--rerank-lists 20] [--rerank-items 200]
                                    [--out experiments/results/bench_frt.md]

Inputs: ``B`` random rankings of the same ``N`` items (``G`` groups, every group non-empty), relevance and ctr in
[0, 1] aligned with the rankings by position.  FairRankTune gets a pandas DataFrame (one ranking per column) and
its item_group_dict; torchfair the equivalent tensors (item ids ``[B, N]``, item -> group ``[N]``, relevance
``[B, N]``: "tensors") and the Python lists + dict ("lists"); the direct implementation (``direct_*`` below:
straightforward torch code written for this benchmark from FairRankTune's formulas, no torchfair) the tensors.
Everything in float64 on the CPU.  NDKL and IAA take a single ranking in FairRankTune (IAA evaluates only the
first ranking), so FairRankTune is called once per ranking and torchfair once, batched (``NDKL`` over
``[B, N]``, ``IAA(per_ranking=True)``).

Re-rankers (second table): FairRankTune's ``DETCONSTSORT`` / ``EPSILONGREEDY`` against
``torchfair.compat.fairranktune``'s (identical outputs, checked) on ``--rerank-lists`` lists of ``--rerank-items``
items, both called once per list (they take one DataFrame each), and torchfair's batched
``torchfair.rerank.det_const_sort`` / ``epsilon_greedy`` on the same lists as one ``[L, N]`` tensor (the papers'
versions: not FRT's numbers, see the module docstring of ``torchfair.compat.fairranktune``).

Timing: the implementations are interleaved in one process, round after round (``--rounds``; FairRankTune once per
round, the fast ones ``--inner`` calls per round, their mean); each ratio is the median over the rounds of the
per-round ratios, which cancels most of the drift of a shared machine.  ``--threads 1`` (default) because on a
2-core machine two torch threads make these small ops slower when the cores are shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import numpy as np
import torch

from torchfair.compat import fairranktune as ft

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import interleaved, ratio  # noqa: E402  (the shared harness)


# ------------------------------------------------------------------------------------------ direct implementation
# FairRankTune's formulas written directly on the tensors (rank k = 1..N, exposure 1/log2(k+1)), for a batch of
# B full rankings ``ranks [B, N]`` of item ids, ``item_groups [N]`` group of each item (0..G-1), relevance / ctr
# ``[B, N]`` aligned by position.  Per-group quantities are summed over the rankings and divided by the group's
# item count, as FairRankTune does; MinMaxRatio aggregates.
def _dgroup(ranks, item_groups, G):
    return item_groups[ranks]  # [B, N] group of the item at each position


def _dsum(g, x, G):
    return torch.zeros(G, dtype=torch.float64).index_add_(0, g.reshape(-1), x.expand(g.shape).reshape(-1))


def _dminmax(v):
    return v.min() / v.max()


def _dranks(N):
    return torch.arange(1, N + 1, dtype=torch.float64)


def direct_exp(ranks, item_groups, G):
    g, N = _dgroup(ranks, item_groups, G), ranks.shape[1]
    v = _dsum(g, 1.0 / torch.log2(_dranks(N) + 1), G) / torch.bincount(item_groups, minlength=G)
    return _dminmax(v), v


def direct_expu(ranks, item_groups, rel, G):
    g, N = _dgroup(ranks, item_groups, G), ranks.shape[1]
    size = torch.bincount(item_groups, minlength=G)
    v = (_dsum(g, 1.0 / torch.log2(_dranks(N) + 1), G) / size) / (_dsum(g, rel, G) / size)
    return _dminmax(v), v


def direct_expru(ranks, item_groups, rel, ctr, G):
    g = _dgroup(ranks, item_groups, G)
    size = torch.bincount(item_groups, minlength=G)
    v = (_dsum(g, ctr, G) / size) / (_dsum(g, rel, G) / size)
    return _dminmax(v), v


def direct_awrf(ranks, item_groups, p, G):
    g, N = _dgroup(ranks, item_groups, G), ranks.shape[1]
    v = _dsum(g, 100 * p * (1 - p) ** (_dranks(N) - 1), G) / torch.bincount(item_groups, minlength=G)
    return _dminmax(v), v


def _drbp(ranks, item_groups, decay, G):
    g, N = _dgroup(ranks, item_groups, G), ranks.shape[1]
    return g, (1 - decay) * _dsum(g, decay ** (_dranks(N) - 1), G)


def direct_erbe(ranks, item_groups, decay, G):
    v = _drbp(ranks, item_groups, decay, G)[1]
    return _dminmax(v), v


def direct_erbp(ranks, item_groups, decay, G):
    v = _drbp(ranks, item_groups, decay, G)[1] / torch.bincount(item_groups, minlength=G)
    return _dminmax(v), v


def direct_erbr(ranks, item_groups, rel, decay, G):
    g, e = _drbp(ranks, item_groups, decay, G)
    v = e / _dsum(g, rel, G)
    return _dminmax(v), v


def direct_arp(ranks, item_groups, G):
    """Mixed pairs won by g / mixed pairs of g, per ranking, summed over the rankings: an item of g at position k
    wins against every item of another group below it."""
    g = _dgroup(ranks, item_groups, G)
    onehot = torch.nn.functional.one_hot(g, G).to(torch.float64)            # [B, N, G]
    below = onehot.flip(1).cumsum(1).flip(1) - onehot                       # [B, N, G] items of h below k
    others_below = below.sum(-1, keepdim=True) - below                      # items of other groups below k
    won = (onehot * others_below).sum(1)                                    # [B, G]
    n = onehot.sum(1)
    v = (won / (n * (ranks.shape[1] - n))).sum(0)
    return _dminmax(v), v


def direct_ndkl(ranks, item_groups, G, eps=1e-7):
    """Per ranking: sum_k Z_k KL(prefix_k + eps || whole + eps) / sum_k Z_k with Z_k = 1/log2(k+1)."""
    g = _dgroup(ranks, item_groups, G)
    N = ranks.shape[1]
    onehot = torch.nn.functional.one_hot(g, G).to(torch.float64)
    P = onehot.cumsum(1) / _dranks(N)[None, :, None] + eps
    Q = onehot.sum(1, keepdim=True) / N + eps
    kl = (P * torch.log(P / Q)).sum(-1)
    Z = 1.0 / torch.log2(_dranks(N) + 1)
    return (kl * Z).sum(-1) / Z.sum()


def direct_iaa(ranks, rel):
    """Per ranking: sum_k |1/log2(k+1) - relevance_k| (FairRankTune's IAA of one ranking)."""
    return (1.0 / torch.log2(_dranks(ranks.shape[1]) + 1) - rel).abs().sum(-1)


# ------------------------------------------------------------------------------------------ comparison helpers
def _group_values(res):
    """(value, per-group values in label order) of an FRT return, an FRTResult or a direct (value, per_group)."""
    if isinstance(res, ft.FRTResult):
        return float(res.value), [float(v) for v in res.per_group]
    value, per = res
    if isinstance(per, dict):
        return float(value), [float(per[k]) for k in sorted(per)]
    return float(value), [float(v) for v in per]


def max_diff(a, b):
    if isinstance(a, np.ndarray) or isinstance(a, torch.Tensor):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        return float(np.abs(a - b).max())
    va, pa = _group_values(a)
    vb, pb = _group_values(b)
    if len(pa) != len(pb):
        return float("inf")
    return max(abs(va - vb), *(abs(x - y) for x, y in zip(pa, pb)))


def per_call(fns, rounds):
    """Per-round seconds per call of each function (``fns``: name -> (callable, calls per round)), interleaved by
    the shared harness (every function has been called before: no warm-up)."""
    _, times = interleaved({k: (lambda f=f, n=n: [f() for _ in range(n)]) for k, (f, n) in fns.items()}, rounds,
                           warmup=False)
    return {k: [t / fns[k][1] for t in v] for k, v in times.items()}


def bench_rerankers(L, N, G, rounds, seed, only=None):
    """FairRankTune's re-rankers vs torchfair.compat.fairranktune's (per list) vs torchfair.rerank's (batched) on
    ``L`` lists of ``N`` items, scores sorted descending.  Returns the Markdown lines of the second table."""
    import pandas as pd
    import FairRankTune as frt
    from torchfair.rerank import det_const_sort, epsilon_greedy

    g = torch.Generator().manual_seed(seed + 1)
    scores = torch.rand(L, N, generator=g, dtype=torch.float64).sort(-1, descending=True).values
    groups = torch.randint(0, G, (L, N), generator=g)
    groups[:, :G] = torch.arange(G)
    items = [[f"q{b}_i{i}" for i in range(N)] for b in range(L)]
    grp = {it: int(groups[b, i]) for b in range(L) for i, it in enumerate(items[b])}
    frames = [(pd.DataFrame(items[b]), pd.DataFrame(scores[b].numpy())) for b in range(L)]
    dist = {gr: 1.0 / G for gr in range(G)}
    k = N // 2

    cases = {
        "DETCONSTSORT": (lambda: [frt.DETCONSTSORT(R, grp, S, dist, k) for R, S in frames],
                         lambda: [ft.DETCONSTSORT(R, grp, S, dist, k) for R, S in frames],
                         lambda: det_const_sort(scores, groups, distribution=[1.0 / G] * G, k=k)),
        "EPSILONGREEDY": (lambda: [frt.EPSILONGREEDY(R, grp, S, 0.3, b) for b, (R, S) in enumerate(frames)],
                          lambda: [ft.EPSILONGREEDY(R, grp, S, 0.3, b) for b, (R, S) in enumerate(frames)],
                          lambda: epsilon_greedy(scores, groups, epsilon=0.3, seed=0)),
    }
    if only:
        cases = {k_: v for k_, v in cases.items() if k_ in only}
    lines = []
    state = np.random.get_state()
    for name, (f_frt, f_compat, f_batched) in cases.items():
        want, got = f_frt(), f_compat()
        same = all(r1.equals(r2) and s1.equals(s2) and list(d1.items()) == list(d2.items())
                   for (r1, d1, s1), (r2, d2, s2) in zip(want, got))
        f_batched()  # compile / warm up
        times = per_call({"frt": (f_frt, 1), "compat": (f_compat, 1), "batched": (f_batched, 5)}, rounds)
        med = {k_: statistics.median(v) for k_, v in times.items()}
        lines.append(f"| {name} | {med['frt'] * 1e3:.1f} | {med['compat'] * 1e3:.1f} | "
                     f"{ratio(times, 'frt', 'compat'):.1f}x | {med['batched'] * 1e3:.2f} | "
                     f"{ratio(times, 'frt', 'batched'):.0f}x | {'yes' if same else 'NO'} |")
        print(f"{name}: frt {med['frt'] * 1e3:.1f} ms, compat {med['compat'] * 1e3:.1f} ms, batched "
              f"{med['batched'] * 1e3:.2f} ms, identical: {same}", file=sys.stderr)
    np.random.set_state(state)  # FairRankTune's EPSILONGREEDY reseeds numpy's global state
    if not lines:
        return []
    return ["", f"## Re-rankers: {L} lists x {N} items, {G} groups", "",
            f"DETCONSTSORT: uniform target, k = {k}; EPSILONGREEDY: epsilon = 0.3, seed = list index. FairRankTune "
            f"and compat: one call per list (DataFrames); batched: torchfair.rerank on one [{L}, {N}] tensor "
            f"(the papers' versions, not FairRankTune's numbers). Identical: compat's frames and dicts equal "
            f"FairRankTune's for every list.", "",
            "| re-ranker | FairRankTune (ms) | compat (ms) | FairRankTune / compat | batched (ms) "
            "| FairRankTune / batched | identical |",
            "|---|---:|---:|---:|---:|---:|---|"] + lines


# ------------------------------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description="torchfair.compat.fairranktune vs FairRankTune 0.0.7 vs direct code",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rankings", type=int, default=1000, help="number of random rankings (lists)")
    ap.add_argument("--items", type=int, default=100, help="items per ranking")
    ap.add_argument("--groups", type=int, default=3, help="number of item groups")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (medians over rounds)")
    ap.add_argument("--inner", type=int, default=20, help="calls of the fast implementations per round")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (torch.set_num_threads)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random rankings and groups")
    ap.add_argument("--only", default=None, help="comma-separated metrics / re-rankers to run (default: all)")
    ap.add_argument("--rerank-lists", type=int, default=20, help="lists of the re-ranker table (0: skip it)")
    ap.add_argument("--rerank-items", type=int, default=200, help="items per list of the re-ranker table")
    ap.add_argument("--out", default=None, help="also write the Markdown table to this file")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
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
    cols = [R[[c]] for c in R.columns]
    rcols = [REL[[c]] for c in REL.columns]

    # name -> (FairRankTune, torchfair tensors, torchfair lists, direct)
    cases = {
        "EXP": (lambda: M.EXP(R, grp, combo), lambda: ft.EXP(ranks, item_groups, combo),
                lambda: ft.EXP(rank_lists, grp, combo), lambda: direct_exp(ranks, item_groups, G)),
        "EXPU": (lambda: M.EXPU(R, grp, REL, combo), lambda: ft.EXPU(ranks, item_groups, rel, combo),
                 lambda: ft.EXPU(rank_lists, grp, rel_lists, combo), lambda: direct_expu(ranks, item_groups, rel, G)),
        "EXPRU": (lambda: M.EXPRU(R, grp, REL, CTR, combo), lambda: ft.EXPRU(ranks, item_groups, rel, ctr, combo),
                  lambda: ft.EXPRU(rank_lists, grp, rel_lists, ctr_lists, combo),
                  lambda: direct_expru(ranks, item_groups, rel, ctr, G)),
        "AWRF": (lambda: M.AWRF(R, grp, 0.1, combo), lambda: ft.AWRF(ranks, item_groups, 0.1, combo),
                 lambda: ft.AWRF(rank_lists, grp, 0.1, combo), lambda: direct_awrf(ranks, item_groups, 0.1, G)),
        "ERBE": (lambda: M.ERBE(R, grp, 0.9, combo), lambda: ft.ERBE(ranks, item_groups, 0.9, combo),
                 lambda: ft.ERBE(rank_lists, grp, 0.9, combo), lambda: direct_erbe(ranks, item_groups, 0.9, G)),
        "ERBP": (lambda: M.ERBP(R, grp, 0.9, combo), lambda: ft.ERBP(ranks, item_groups, 0.9, combo),
                 lambda: ft.ERBP(rank_lists, grp, 0.9, combo), lambda: direct_erbp(ranks, item_groups, 0.9, G)),
        "ERBR": (lambda: M.ERBR(R, grp, REL, 0.9, combo), lambda: ft.ERBR(ranks, item_groups, rel, 0.9, combo),
                 lambda: ft.ERBR(rank_lists, grp, rel_lists, 0.9, combo),
                 lambda: direct_erbr(ranks, item_groups, rel, 0.9, G)),
        "ARP": (lambda: M.ARP(R, grp, combo), lambda: ft.ARP(ranks, item_groups, combo),
                lambda: ft.ARP(rank_lists, grp, combo), lambda: direct_arp(ranks, item_groups, G)),
        "NDKL (per ranking)": (lambda: np.array([M.NDKL(c, grp) for c in cols]),
                               lambda: ft.NDKL(ranks, item_groups), lambda: ft.NDKL(rank_lists, grp),
                               lambda: direct_ndkl(ranks, item_groups, G)),
        "IAA (per ranking)": (lambda: np.array([M.IAA(c, r) for c, r in zip(cols, rcols)]),
                              lambda: ft.IAA(ranks, rel, per_ranking=True),
                              lambda: ft.IAA(rank_lists, rel_lists, per_ranking=True),
                              lambda: direct_iaa(ranks, rel)),
    }
    keep = None
    if a.only:
        keep = {x.strip().upper() for x in a.only.split(",")}
        cases = {k: v for k, v in cases.items() if k.split()[0].upper() in keep}
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (f_frt, f_t, f_l, f_d) in cases.items():
            want, got_t, got_l, got_d = f_frt(), f_t(), f_l(), f_d()
            diff = max(max_diff(got_t, want), max_diff(got_l, want), max_diff(got_d, want))
            times = per_call({"frt": (f_frt, 1), "tensors": (f_t, a.inner), "lists": (f_l, max(1, a.inner // 10)),
                                 "direct": (f_d, a.inner)}, a.rounds)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append((name, med, ratio(times, "tensors", "direct"),
                         ratio(times, "frt", "tensors"), diff))
            print(f"{name}: frt {med['frt'] * 1e3:.1f} ms, tensors {med['tensors'] * 1e3:.2f} ms, direct "
                  f"{med['direct'] * 1e3:.2f} ms, tensors/direct {rows[-1][2]:.2f}, frt/tensors {rows[-1][3]:.0f}",
                  file=sys.stderr)

    lines = [f"# torchfair.compat.fairranktune vs FairRankTune 0.0.7 vs a direct implementation", "",
             f"`python experiments/bench_frt.py --rankings {B} --items {N} --groups {G} --rounds {a.rounds} "
             f"--threads {a.threads}`: {B} rankings x {N} items, {G} groups, combo={combo}, float64, CPU "
             f"({os.cpu_count()} cores), {a.threads} torch thread(s), torch {torch.__version__}.", "",
             "Implementations interleaved in one process; times are medians over the rounds (ms), ratios the "
             "medians of the per-round ratios. \"direct\" is straightforward torch code for the same formulas "
             "(`direct_*` in the script); \"lists\" includes the conversion from Python lists + dict. Max abs diff: "
             "over the aggregated value and every per-group (or per-ranking) value, of torchfair (both forms) and "
             "of the direct code against FairRankTune.", "",
             "| metric | FairRankTune (ms) | torchfair, tensors (ms) | torchfair, lists (ms) | direct (ms) "
             "| tensors / direct | FairRankTune / tensors | max abs diff |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, med, r_td, r_ft, d in rows:
        lines.append(f"| {name} | {med['frt'] * 1e3:.1f} | {med['tensors'] * 1e3:.2f} | {med['lists'] * 1e3:.1f} | "
                     f"{med['direct'] * 1e3:.2f} | {r_td:.2f}x | {r_ft:.0f}x | {d:.1e} |")
    if a.rerank_lists > 0:
        lines += bench_rerankers(a.rerank_lists, a.rerank_items, G, a.rounds, a.seed, keep)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
    return rows


if __name__ == "__main__":
    main()
