"""Issue 10's speed benchmark: torchfair against the plain code it must not be slower than, in one run.

    python experiments/bench_speed.py [--only exact,losses,...] [--quick] [--threads 1]

Each section runs in its own subprocess (``--case NAME``) so that sections do not share allocator state; inside a
section the implementations are *interleaved*: every round times each implementation once, in turn, on the same
inputs, and the reported ratio is the median over rounds of the per-round ratio (robust to the machine slowing
down during the run).  Values are checked equal before anything is timed.  Sections:

* ``exact``: exact DIPS (``ordering=Hard()``) against an independent compiled O(N log N) DIPS (Fenwick trees,
  ``experiments/fenwick_reference.py``) and a stable sort of the same scores at 1000 x 1000 and 1 x 100 000
  (graded relevance in {0..4} and continuous relevance), with 1 and 2 threads; the torch code of ``Hard`` on the
  same inputs; its growth exponent over N for one list; every other exact pairwise measure at 1000 x 1000; the
  default validation measures on full-catalogue ML-100K-shaped test lists (943 x 1682).
* ``losses``: each fairness loss (DIPS, pairwise accuracy gap, exposure misallocation; default ``SoftRank(0.1)``)
  forward + backward against a naive dense ``[B, N, N]`` implementation of the same formula written here in plain
  PyTorch, at (256, 100), (64, 1000), (8, 4096); resident-memory growth of the process (default glibc allocator)
  and live peak (``MALLOC_MMAP_THRESHOLD_``) per loss in separate subprocesses.
* ``load``: exact DIPS at 1 x 10 000 and 1000 x 1000 on a quiet machine and with another busy process on one
  core, with 1 and 2 torch threads (shared CPUs, as on every GPU node's host side).
* ``exact_memory``: ``bench_exact.py``, time and live / resident memory of the exact pairwise measures.
* ``import``: ``import torchfair`` beyond ``import torch`` (fresh interpreters, median of 5).
* ``pl``, ``fastsoftrank``, ``frt``, ``training``: run ``bench_pl.py``, ``bench_fastsoftrank.py``, ``bench_frt.py``
  and ``bench_training.py`` (each writes its own table) and include their tables; ``training`` runs
  ``bench_training.py`` a second time on full-catalogue training lists (1 682 items; ``--append``).
* ``lean_step``: runs ``bench_lean_step.py`` (``experiments/results/bench_lean_step.md``): the fairness share of a
  lean step (plain PyTorch MF on pre-built tensors, ListNet + Adam, 64 x 200 and 64 x 1 682), beside
  ``training``'s share of the step of the training configs (which includes collating the batch).
* ``scale``: the full-catalogue evaluation of ML-20M-shaped lists (2 000 users x 26 744 items, the default user
  sample of ``torchfair evaluate --users``): streamed in chunks of 512 lists (``StreamingEvaluation``) against the
  eager ``evaluate_lists`` of every list at once, interleaved, values checked identical; peak resident memory of
  each in a fresh process; and the table of the last full scale run (``python experiments/scale_ml20m.py``, its
  own command: ~30 min) from ``experiments/results/scale_ml20m.md``.

Writes ``experiments/results/bench_speed.md`` (all tables) and prints it.  ``--threads 1`` (default): on the 2-core
machines of this project two torch threads make small ops 3-15x slower (OpenMP wake-ups), see the README.
Timings are only meaningful on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SECTIONS = ("exact", "exact_memory", "load", "losses", "import", "pl", "fastsoftrank", "frt", "training", "lean_step",
            "rerank", "scale")


# --------------------------------------------------------------------------------------------- timing helpers
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _bench import fmt as _fmt, interleaved, ratio, table  # noqa: E402  (the shared harness)


# --------------------------------------------------------------------------------------------- exact
def case_exact(args) -> str:
    import numba
    import torch
    from fenwick_reference import dips_fenwick
    from torchfair.metrics import (dips, igi, ree, pairwise_accuracy, rank_parity, individual_dissatisfaction,
                                   kendall_tau)
    from torchfair.orderings import Hard

    load0 = os.getloadavg()[0]
    g = torch.Generator().manual_seed(0)
    rounds = 3 if args.quick else 7
    lines = ["### Exact pairwise measures (`ordering=Hard()`), float32, against a compiled O(N log N) peer and a "
             "stable sort", "",
             "torchfair = `dips(scores, relevance, groups, num_groups=2)` (RBP(0.9), `tie_weight=0.5`, input checks "
             "on), whose `Hard()` runs its compiled kernels on CPU tensors; peer = "
             "`experiments/fenwick_reference.py`, an independent DIPS compiled with numba (stable argsort of the "
             "scores, relevance ranks, one Fenwick tree per group; lists in parallel with `prange` when 2 threads), "
             "checked equal to torchfair before timing; sort = `torch.sort(scores, dim=-1, descending=True, "
             "stable=True)`.  Interleaved rounds, medians; ratios are medians of per-round ratios.  Threads: torch's "
             "(`torch.set_num_threads`), numba's for the peer.  Graded relevance in {0..4} (the peer uses the "
             "grades as ranks, no sort), continuous relevance uniform in [0, 1).", ""]
    rows = []
    shapes = [(1000, 1000), (1, 100_000)] if not args.quick else [(100, 300), (1, 20_000)]
    inputs = {}
    for B, N in shapes:
        s = torch.randn(B, N, generator=g)
        grp = torch.randint(0, 2, (B, N), generator=g)
        for kind in ("graded", "continuous"):
            r = torch.randint(0, 5, (B, N), generator=g).float() if kind == "graded" else torch.rand(B, N, generator=g)
            inputs[(B, N, kind)] = (s, r, grp)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            # numba first: launching its OpenMP layer resets torch's thread count (they share the runtime)
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            torch.set_num_threads(threads)
            for (B, N, kind), (s, r, grp) in inputs.items():
                sn, rn, gn = s.numpy(), r.numpy(), grp.numpy()
                ours = dips(s, r, grp, num_groups=2)
                peer = dips_fenwick(sn, rn, gn, 2, parallel=threads > 1)
                diff = float((torch.from_numpy(peer) - ours.double()).abs().max())
                assert diff < 1e-4, f"the peer disagrees with torchfair by {diff}"
                assert torch.get_num_threads() == threads
                med, times = interleaved({
                    "sort": lambda: torch.sort(s, dim=-1, descending=True, stable=True),
                    "dips": lambda: dips(s, r, grp, num_groups=2),
                    "peer": lambda: dips_fenwick(sn, rn, gn, 2, parallel=threads > 1),
                }, rounds, alternate=True)
                rows.append([kind, B, N, threads, med["dips"], med["peer"], med["sort"], ratio(times, "dips", "peer"),
                             ratio(times, "dips", "sort"), f"{diff:.0e}"])
        # the torch code of Hard (the reference, every device) on the same inputs, one thread
        torch.set_num_threads(1)
        ref_rows = []
        for (B, N, kind), (s, r, grp) in inputs.items():
            med, times = interleaved({
                "sort": lambda: torch.sort(s, dim=-1, descending=True, stable=True),
                "dips": lambda: dips(s, r, grp, num_groups=2),
                "torch": lambda: dips(s, r, grp, num_groups=2, ordering=Hard(backend="torch")),
            }, 3 if args.quick else 5, alternate=True)
            ref_rows.append([kind, B, N, med["torch"], med["dips"], ratio(times, "torch", "dips"),
                             ratio(times, "torch", "sort")])
    finally:
        torch.set_num_threads(before)
    lines.append(table(["DIPS relevance", "B", "N", "threads", "torchfair s", "peer s", "stable sort s",
                        "x peer (aim <= 2)", "x sort (aim <= 10)", "max abs diff"], rows))
    lines += ["", f"Machine load (1-minute average, {os.cpu_count()} CPUs) at the start of the section: "
              f"{load0:.2f}, after the table above: {os.getloadavg()[0]:.2f}.  Above 1, another process holds a "
              "core: torch's two-thread ops then wait for it at every fork-join (see 'Exact DIPS under load')."]
    lines += ["", "The torch code of `Hard` (`Hard(backend='torch')`: the reference, and what runs off the CPU), one "
              "thread, on the same inputs:", "",
              table(["DIPS relevance", "B", "N", "torch code s", "kernels s", "torch / kernels", "torch / sort"],
                    ref_rows), ""]
    # growth over N for one list
    Ns = [1000, 4000, 16000, 64000] if not args.quick else [1000, 4000]
    ts = []
    for N in Ns:
        s, r = torch.randn(1, N, generator=g), torch.rand(1, N, generator=g)
        grp = torch.randint(0, 2, (1, N), generator=g)
        med, _ = interleaved({"dips": lambda: dips(s, r, grp, num_groups=2)}, rounds, min_time=0.05)
        ts.append(med["dips"])
    slope = statistics.linear_regression([math.log(n) for n in Ns], [math.log(t) for t in ts])[0]
    lines += ["", f"Growth of exact DIPS (one list, continuous relevance) over N = {Ns}: seconds "
              f"{[round(t, 4) for t in ts]}, exponent **{slope:.2f}** (log-log least squares; 1 = linear).", ""]
    # every pairwise measure at one shape
    B, N = (1000, 1000) if not args.quick else (100, 300)
    s = torch.randn(B, N, generator=g)
    r = torch.randint(0, 5, (B, N), generator=g).float()
    grp = torch.randint(0, 2, (B, N), generator=g)
    fns = {
        "sort": lambda: torch.sort(s, dim=-1, descending=True, stable=True),
        "dips": lambda: dips(s, r, grp, num_groups=2),
        "individual_dissatisfaction": lambda: individual_dissatisfaction(s, r, grp, num_groups=2),
        "igi": lambda: igi(s, r, grp, num_groups=2),
        "ree": lambda: ree(s, r, grp, num_groups=2),
        "pairwise_accuracy": lambda: pairwise_accuracy(s, r, grp, num_groups=2),
        "rank_parity": lambda: rank_parity(s, grp, num_groups=2),
        "kendall_tau": lambda: kendall_tau(s, r),
        "dips, ties='average'": lambda: dips(s.round(decimals=1), r, grp, num_groups=2,
                                             ordering=Hard("average")),
    }
    med, times = interleaved(fns, rounds)
    rows = [[k, med[k], ratio(times, k, "sort")] for k in fns if k != "sort"]
    lines += [f"Every exact pairwise measure at B = {B}, N = {N} (graded relevance, 2 groups), one thread:", "",
              table(["measure", "seconds", "x stable sort"], rows), ""]
    # corpus-scale evaluation: the default validation measures on ML-100K-shaped full-catalogue lists
    lines += [_corpus_eval(args, g)]
    return "\n".join(lines)


def _corpus_eval(args, g) -> str:
    import torch
    from torchfair.evaluation.registry import compute_columns
    from torchfair.training.module import DEFAULT_MEASURES

    B, N = (943, 1682) if not args.quick else (100, 400)
    s = torch.randn(B, N, generator=g)
    rel = (torch.rand(B, N, generator=g) < 0.01).float() * torch.randint(1, 6, (B, N), generator=g).float()
    grp = (torch.rand(B, N, generator=g) < 0.2).long()
    def run():
        return compute_columns(s, rel, grp, None, DEFAULT_MEASURES, num_groups=2)

    med, _ = interleaved({"all": run}, 1 if args.quick else 3)
    return (f"Corpus-scale evaluation: the training loop's default validation measures {list(DEFAULT_MEASURES)} on "
            f"{B} full-catalogue lists x {N} items (the ML-100K test lists' shape; ~1% relevant, 20% in the "
            f"protected group): **{med['all']:.2f} s** in total.\n")


# --------------------------------------------------------------------------------------------- losses
def _plain_softrank(s, tau_rel=0.1, min_scale=0.25):
    """Plain dense SoftRank: P[b, i, j] = sigmoid((s_j - s_i) / tau_b), 0 on the diagonal; expected positions."""
    import torch
    tau = (tau_rel * s.detach().std(-1, unbiased=False, keepdim=True).clamp(min=min_scale))[..., None]
    P = torch.sigmoid((s[:, None, :] - s[:, :, None]) / tau)
    P = P * (1 - torch.eye(s.shape[1], dtype=s.dtype, device=s.device))
    return P, P.sum(-1)


def plain_dips_loss(s, r, g, gamma=0.9, tie=0.5):
    """Naive dense DIPS loss (|M_01 - M_10|, mean over lists), Fabris et al. 2023 eq. 8, 10, 11 on SoftRank."""
    import torch
    B, N = s.shape
    P, pos = _plain_softrank(s)
    e = gamma ** pos
    W = (r[:, :, None] > r[:, None, :]).to(s.dtype) + tie * (r[:, :, None] == r[:, None, :]).to(s.dtype)
    A = torch.nn.functional.one_hot(g, 2).to(s.dtype)
    envy = (W * P * e[:, None, :]) @ A
    S = A.transpose(1, 2) @ envy
    n = A.sum(1)  # [B, 2]
    cum = (1 - gamma ** n) / (1 - gamma)  # sum_{k < n} gamma^k
    C = torch.maximum(n[:, :, None] * cum[:, None, :], n[:, None, :] * cum[:, :, None])
    M = S / C
    return (M[:, 0, 1] - M[:, 1, 0]).abs().mean()


def plain_pairwise_accuracy_gap_loss(s, r, g):
    """Naive dense inter-group pairwise accuracy gap |A_10 - A_01| (Raj & Ekstrand 2022 §2.5) on SoftRank."""
    import torch
    P, _ = _plain_softrank(s)
    W = (r[:, :, None] > r[:, None, :]).to(s.dtype)
    A = torch.nn.functional.one_hot(g, 2).to(s.dtype)
    err = A.transpose(1, 2) @ ((W * P) @ A)
    den = A.transpose(1, 2) @ (W @ A)
    acc = 1 - err / den
    return (acc[:, 1, 0] - acc[:, 0, 1]).abs().mean()


def plain_misallocation_loss(s, r, g, gamma=0.9):
    """Naive exposure misallocation ||delta||_1 with the EE target (Fabris et al. 2023 eq. 12-16) on SoftRank."""
    import torch
    B, N = s.shape
    _, pos = _plain_softrank(s)
    e = gamma ** pos
    A = torch.nn.functional.one_hot(g, 2).to(s.dtype)
    # EE target: expected exposure under the random order of tied relevance (ideal ranking, ties averaged)
    srt = torch.sort(r, dim=-1, descending=True, stable=True).values
    f = gamma ** torch.arange(N, dtype=s.dtype)
    blk_new = torch.ones_like(srt, dtype=torch.long)
    blk_new[:, 1:] = (srt[:, 1:] != srt[:, :-1]).long()
    blk = blk_new.cumsum(-1) - 1
    mean_f = torch.zeros(B, N, dtype=s.dtype).scatter_add_(1, blk, f.expand(B, N)) / \
        torch.zeros(B, N, dtype=s.dtype).scatter_add_(1, blk, torch.ones(B, N, dtype=s.dtype)).clamp(min=1)
    target = torch.zeros(B, N, dtype=s.dtype)
    target = mean_f.gather(1, blk)  # per rank position, then back to items
    order = torch.sort(r, dim=-1, descending=True, stable=True).indices
    t_item = torch.empty_like(target).scatter_(1, order, target)
    share = (A * e[..., None]).sum(1) / e.sum(-1, keepdim=True)
    t_share = (A * t_item[..., None]).sum(1) / t_item.sum(-1, keepdim=True)
    return (share - t_share).abs().sum(-1).mean()


def _loss_fns(name):
    from torchfair.losses import dips_loss, exposure_misallocation_loss, pairwise_accuracy_gap_loss
    from torchfair.orderings import SoftRank
    soft = SoftRank(0.1)  # the plain references are the pairwise sigmoid (the losses' default is RampRank)
    if name == "dips":
        return (lambda s, r, g: dips_loss(s, r, g, num_groups=2, browsing="rbp:0.9", ordering=soft,
                                          validate_args=False), plain_dips_loss)
    if name == "pairwise_accuracy_gap":
        return (lambda s, r, g: pairwise_accuracy_gap_loss(s, r, g, num_groups=2, ordering=soft,
                                                           validate_args=False), plain_pairwise_accuracy_gap_loss)
    return (lambda s, r, g: exposure_misallocation_loss(s, r, g, num_groups=2, browsing="rbp:0.9", ordering=soft,
                                                        validate_args=False), plain_misallocation_loss)


LOSSES = ("dips", "pairwise_accuracy_gap", "misallocation")
LOSS_SHAPES = [(256, 100), (64, 1000), (8, 4096)]


def _loss_inputs(B, N):
    import torch
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, N, generator=g), torch.randint(0, 5, (B, N), generator=g).float(),
            torch.randint(0, 2, (B, N), generator=g))


def case_loss_time(args) -> str:
    """One loss, one shape: torchfair vs plain, interleaved; prints one Markdown row."""
    import torch
    name, B, N = args.loss, args.B, args.N
    s, r, g = _loss_inputs(B, N)
    ours, plain = _loss_fns(name)

    def fb(fn):
        def run():
            x = s.clone().requires_grad_()
            fn(x, r, g).backward()
            return x.grad
        return run

    xa, xb = s.clone().requires_grad_(), s.clone().requires_grad_()
    va, vb = ours(xa, r, g), plain(xb, r, g)
    va.backward(), vb.backward()
    diff = max(abs(float(va.detach()) - float(vb.detach())), float((xa.grad - xb.grad).abs().max()))
    rounds = 3 if (args.quick or B * N * N > 3e7) else 7
    med, times = interleaved({"torchfair": fb(ours), "plain": fb(plain)}, rounds)
    return f"| {name} | {B} | {N} | {med['torchfair']:.4g} | {med['plain']:.4g} | " \
           f"{ratio(times, 'torchfair', 'plain'):.2f} | {diff:.1e} |"


def case_loss_memory(args) -> str:
    """One loss, one shape, one implementation: RSS growth over 3 forward+backward calls (prints MB)."""
    import torch
    name, B, N = args.loss, args.B, args.N
    s, r, g = _loss_inputs(B, N)
    fn = _loss_fns(name)[0 if args.impl == "torchfair" else 1]
    xs = torch.randn(4, 16).requires_grad_()  # page in the kernels on a tiny batch
    fn(xs, torch.randint(0, 5, (4, 16)).float(), torch.randint(0, 2, (4, 16))).backward()

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    from _bench import maxrss_bytes
    r0 = maxrss_bytes() / 2 ** 20
    for _ in range(3):
        x = s.clone().requires_grad_()
        fn(x, r, g).backward()
    peak = maxrss_bytes() / 2 ** 20
    return f"{peak - r0:.0f} / {peak:.0f}"


def case_losses(args) -> str:
    shapes = LOSS_SHAPES if not args.quick else [(16, 50), (4, 300)]
    rows = []
    for name in LOSSES:
        for B, N in shapes:
            rows.append(_sub(["--case", "loss_time", "--loss", name, "--B", str(B), "--N", str(N)], args))
    mem = []
    for name in LOSSES:
        for B, N in shapes:
            cells = [name, B, N]
            for impl in ("torchfair", "plain"):
                for live in (False, True):
                    env = {"MALLOC_MMAP_THRESHOLD_": "131072"} if live else {}
                    if impl == "plain" and B * N * N > 2e8 and not live:
                        pass
                    cells.append(_sub(["--case", "loss_memory", "--loss", name, "--B", str(B), "--N", str(N),
                                       "--impl", impl], args, env=env))
            mem.append(cells)
    return "\n".join([
        "### Fairness losses, forward + backward, against naive dense `[B, N, N]` plain PyTorch", "",
        "Ordering `SoftRank(0.1)`, the pairwise sigmoid the plain code writes (the losses' default is RampRank, see `bench_training.py`; dense below `DENSE_PAIR_ELEMENTS` = 2^22 pairs, row blocks recomputed "
        "in backward above), RBP(0.9), graded relevance {0..4}, 2 groups, float32; plain = the same formula "
        "written directly (functions `plain_*` in this script).  Ratio = median over rounds of torchfair / plain "
        "(aim <= 1); max |diff| over the loss value and the gradient.", "",
        "| loss | B | N | torchfair s | plain s | ratio | max abs diff |", "|---|---:|---:|---:|---:|---:|---:|",
        *rows, "",
        "Memory (MB): 'growth / peak' of the process's peak resident set (`VmHWM`) over 3 forward+backward calls "
        "after the inputs are built, in a fresh process per cell (growth 0: the calls stayed below the peak "
        "reached while importing and building the inputs); 'default' = glibc's default allocator (what a user "
        "watching the process sees; aim: peak < 2048 at B = 8, N = 4096), 'live' = with "
        "`MALLOC_MMAP_THRESHOLD_=131072` (freed tensors leave the RSS).", "",
        table(["loss", "B", "N", "torchfair default", "torchfair live", "plain default", "plain live"], mem), ""])


# --------------------------------------------------------------------------------------------- import
def case_import(args) -> str:
    code = ("import time; t=time.perf_counter(); import torch; a=time.perf_counter(); import torchfair; "
            "b=time.perf_counter(); print(a-t, b-a)")
    runs = []
    for _ in range(3 if args.quick else 5):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        runs.append(tuple(float(x) for x in out.split()))
    t_torch = statistics.median(r[0] for r in runs)
    t_tf = statistics.median(r[1] for r in runs)
    return (f"### Import\n\n`import torchfair` after `import torch`: **{t_tf:.3f} s** (aim <= 0.2 s; `import torch` "
            f"itself {t_torch:.2f} s), median of {len(runs)} fresh interpreters.\n")


# --------------------------------------------------------------------------------------------- other scripts
def _script(name: str, extra: List[str], out: str, args, quick: Sequence[str] = ("--quick",)) -> str:
    cmd = [sys.executable, str(HERE / name), *extra]
    if args.quick:
        cmd += list(quick)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return f"### {name}\n\nfailed (exit {res.returncode}):\n\n```\n{res.stderr[-2000:]}\n```\n"
    path = RESULTS / out
    body = path.read_text() if path.exists() and not args.quick else res.stdout
    return f"### `{name}` (`experiments/results/{out}`)\n\n{body}\n"


def case_load(args) -> str:
    import torch
    from torchfair.metrics import dips

    g = torch.Generator().manual_seed(0)
    shapes = [(1, 10_000), (1000, 1000)] if not args.quick else [(1, 2000), (50, 200)]
    inputs = {}
    for B, N in shapes:
        inputs[(B, N)] = (torch.randn(B, N, generator=g), torch.randint(0, 5, (B, N), generator=g).float(),
                          torch.randint(0, 2, (B, N), generator=g))
    rows = []
    for loaded in (False, True):
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loaded else None
        try:
            for (B, N), (s, r, grp) in inputs.items():
                cells = [("busy core" if loaded else "quiet"), B, N]
                for th in (1, 2):
                    torch.set_num_threads(th)
                    med, _ = interleaved({"dips": lambda: dips(s, r, grp, num_groups=2)}, 3 if args.quick else 5)
                    cells.append(med["dips"])
                rows.append(cells)
        finally:
            torch.set_num_threads(args.threads)
            if hog is not None:
                hog.kill()
                hog.wait()
    return "\n".join(["### Exact DIPS under load", "",
                      "Median seconds; 'busy core': another process spins on one of the CPUs meanwhile.", "",
                      table(["machine", "B", "N", "1 thread s", "2 threads s"], rows), ""])


def case_dips_live(args) -> str:
    """Live memory of exact DIPS on one shape, in a process whose kernels are already loaded: prints
    'growth_MB first_call_MB' (peak-RSS growth over 3 calls after a warm-up on a tiny batch, and what that
    warm-up, the first call in the process, added)."""
    import torch
    from _bench import maxrss_bytes
    from torchfair.metrics import dips

    def rss():
        return maxrss_bytes() / 2 ** 20

    r0 = rss()
    dips(torch.randn(2, 5), torch.rand(2, 5), torch.randint(0, 2, (2, 5)), num_groups=2)  # numba, the kernels
    r1 = rss()
    g = torch.Generator().manual_seed(0)
    B, N = args.B, args.N
    s = torch.randn(B, N, generator=g)
    r = torch.randint(0, 5, (B, N), generator=g).float() if args.impl == "graded" else torch.rand(B, N, generator=g)
    grp = torch.randint(0, 2, (B, N), generator=g)
    dips(s[:2, :50], r[:2, :50], grp[:2, :50], num_groups=2)
    base = rss()
    for _ in range(3):
        dips(s, r, grp, num_groups=2)
    return f"{rss() - base:.1f} {r1 - r0:.1f}"


def case_exact_memory(args) -> str:
    extra = ["--threads", str(args.threads)] + (["--only", "dips", "--repeats", "1"] if args.quick else [])
    res = subprocess.run([sys.executable, str(HERE / "bench_exact.py"), *extra], capture_output=True, text=True)
    if res.returncode != 0:
        return f"### bench_exact.py\n\nfailed:\n```\n{res.stderr[-2000:]}\n```\n"
    if not args.quick:
        (RESULTS / "bench_exact.md").write_text(res.stdout)
    rows, first = [], set()
    shapes = [(1000, 100), (1000, 1000), (1, 100_000)] if not args.quick else [(50, 100)]
    for B, N in shapes:
        for kind in ("graded", "continuous"):
            out = _sub(["--case", "dips_live", "--B", str(B), "--N", str(N), "--impl", kind], args,
                       env={"MALLOC_MMAP_THRESHOLD_": "131072"})
            try:
                live, load = (float(x) for x in out.split())
            except ValueError:
                rows.append([kind, B, N, out, "", ""])
                continue
            first.add(round(load))
            rows.append([kind, B, N, live, live * 2 ** 20 / (B * N * 2 * 8), live * 2 ** 20 / (B * N * 4)])
    return "\n".join([
        "### Exact evaluators: memory (`bench_exact.py`, `experiments/results/bench_exact.md`)", "", res.stdout,
        "Exact DIPS's live peak once the process has loaded numba and the compiled kernels (fresh process per "
        "row, `MALLOC_MMAP_THRESHOLD_=131072`, growth of the peak RSS (`VmHWM`) over 3 calls after a warm-up on a tiny "
        "batch; inputs built before): what the O(B N G) bound is about.  The first exact evaluation in a process "
        f"loads numba and the kernels once: +{min(first, default=0)}-{max(first, default=0)} MB of resident memory "
        "(in the table above, where it is counted).", "",
        table(["relevance", "B", "N", "live peak MB", "/ (B N G x 8 bytes)", "/ one float32 [B, N]"], rows), ""])


def case_pl(args) -> str:
    return _script("bench_pl.py", ["--threads", str(args.threads)], "bench_pl.md", args)


def case_fastsoftrank(args) -> str:
    return _script("bench_fastsoftrank.py", ["--threads", str(args.threads)], "bench_fastsoftrank.md", args)


def case_frt(args) -> str:
    extra = ["--threads", str(args.threads)] + ([] if args.quick else ["--out", str(RESULTS / "bench_frt.md")])
    return _script("bench_frt.py", extra, "bench_frt.md", args, quick=("--rankings", "50", "--rounds", "2"))


def case_training(args) -> str:
    """``bench_training.py`` twice into ``bench_training.md``: the configs' lists (100 negatives) and full-catalogue
    training lists (1 682 items) for ListNet and the three SoftRank losses on SoftRank and on RampRank."""
    first = _script("bench_training.py", ["--threads", str(args.threads)], "bench_training.md", args)
    if args.quick or first.startswith("### bench_training.py\n\nfailed"):
        return first
    configs = ("listnet,dips,misallocation,pairwise_gap,dips_ramp,misallocation_ramp,pairwise_gap_ramp,dips_ramp_every4,"
               "misallocation_ramp_every4,pairwise_gap_ramp_every4")
    return _script("bench_training.py", ["--threads", str(args.threads), "--negatives", "1682", "--steps", "2",
                                         "--repeats", "3", "--val-batches", "0", "--configs", configs, "--append"],
                   "bench_training.md", args)


def case_lean_step(args) -> str:
    """``bench_lean_step.py``: the fairness share of a lean step (plain PyTorch MF, pre-built tensors)."""
    return _script("bench_lean_step.py", ["--threads", str(args.threads)], "bench_lean_step.md", args,
                   quick=("--fast", "--out", str(Path(tempfile.gettempdir()) / "bench_lean_step_quick.md")))


# --------------------------------------------------------------------------------------------- re-rankers
#: the re-rankers timed by ``case_rerank`` (specs of torchfair.rerank.get_reranker)
RERANK_SPECS = ("fa_ir:p=0.5", "fa_ir:p=0.5,k=100", "detconstsort", "detconstsort:k=100", "epsgreedy:epsilon=0.1",
                "targeted:measure=dips,keep=10", "targeted:measure=dips,keep=10,boosts=inf",
                "targeted:measure=exposure_misallocation,keep=10",
                "targeted:measure=exposure_misallocation,keep=10,boosts=inf", "targeted:measure=awrf,keep=10")


def case_rerank(args) -> str:
    """Each re-ranker on the ML-100K test batch shape (943 x 1682; popularity-like groups, 13 % group 1) against a
    plain stable sort of the same scores, interleaved, ratio = median of per-round ratios."""
    import torch
    from torchfair.rerank import get_reranker

    B, N = (20, 200) if args.quick else (943, 1682)
    g = torch.Generator().manual_seed(0)
    s = torch.randn(B, N, generator=g)
    grp = (torch.rand(B, N, generator=g) < 0.13).long()
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[:, N - 40:] = torch.rand(B, 40, generator=g) < 0.5  # ragged lists, as the test lists are
    rerankers = {spec: get_reranker(spec) for spec in RERANK_SPECS}
    from torchfair.metrics import prefix as _prefix

    first = {}
    for spec, r in rerankers.items():  # warm caches (FA*IR's adjusted alpha, numba compilation) outside the timing
        _prefix._ADJUSTED.clear()  # each FA*IR spec's first call builds its own m-tables (one per list length)
        t0 = time.perf_counter()
        r(s, None, grp, mask, num_groups=2)
        first[spec] = time.perf_counter() - t0
    fns = {"sort": lambda: torch.sort(s, dim=-1, descending=True, stable=True)}
    for spec, r in rerankers.items():
        fns[spec] = (lambda r=r: r(s, None, grp, mask, num_groups=2))
    med, times = interleaved(fns, rounds=2 if args.quick else 3)
    rows = [[spec, med[spec], ratio(times, spec, "sort"),
             "yes" if ratio(times, spec, "sort") <= 20 else "no", first[spec]] for spec in RERANK_SPECS]
    lengths = len(set(mask.sum(-1).tolist()))
    return (f"## Re-rankers ({B} x {N}, 2 groups, against a stable sort of the same scores: "
            f"{med['sort'] * 1e3:.1f} ms)\n\n" +
            table(["re-ranker", "seconds", "x sort", "<= 20x", "first call (s)"], rows) +
            "\n\nThe targeted re-ranker costs 1 + G len(boosts) exact evaluations of its measure: 13 with the "
            "default boosts, 3 with `boosts=inf` (each group first in turn).  'first call': the call that fills "
            f"the caches; FA*IR without `k` builds an adjusted m-table per distinct list length ({lengths} here; "
            "issue 28: compiled, about 0.07 s per table at 1 682 items, 1.3 s with the numpy reference).\n")


# --------------------------------------------------------------------------------------------- scale
#: the measures of ``torchfair evaluate`` (FairRankingModule.DEFAULT_MEASURES + the exposure shares of the report)
SCALE_MEASURES = ("ndcg@10", "dips", "dips:tie_weight=0,label=dips_t0", "exposure_misallocation",
                  "pairwise_accuracy", "exposure_share:browsing=dcg")


def _scale_lists(args, start: int = 0, stop: Optional[int] = None):
    """ML-20M-shaped full-catalogue test lists of users ``[start, stop)`` (each user seeded on its own, so a chunk
    is generated alone): every item not rated in training (26 744 minus a long-tailed number of ratings), float32
    scores, 10 held-out ratings graded 1-5, popularity groups (20 % head)."""
    import numpy as np
    import torch

    U, I = _scale_shape(args)
    head = torch.from_numpy(np.random.default_rng(0).random(I) < 0.2).long()
    out = []
    for u in range(start, U if stop is None else min(stop, U)):
        rng = np.random.default_rng([1, u])
        n = I - int(min(rng.pareto(1.2) * 40 + 10, I // 2))
        items = torch.from_numpy(np.sort(rng.choice(I, n, replace=False)))
        rel = torch.zeros(n)
        rel[torch.from_numpy(rng.choice(n, 10, replace=False))] = torch.from_numpy(rng.integers(1, 6, 10)).float()
        out.append((torch.from_numpy(rng.standard_normal(n).astype(np.float32)), rel, head[items]))
    return out


def _scale_shape(args):
    return (60, 3000) if args.quick else (2000, 26744)


def _scale_eval(lists, mode: str, chunk: int = 512):
    """``evaluate_lists`` of every list (eager) or the lists streamed ``chunk`` at a time (``lists`` may then be a
    function of ``(start, stop)`` giving each chunk, so that no more than a chunk is ever held)."""
    from torchfair.evaluation import evaluate_lists
    from torchfair.evaluation.table import StreamingEvaluation

    kw = dict(bootstrap=200, seed=0, num_groups=2, batch_size=1024, max_batch_elements=2 ** 21, validate_args=False)
    if mode == "eager":
        return evaluate_lists(lists, list(SCALE_MEASURES), **kw)
    get = lists if callable(lists) else (lambda a, b: lists[a:b])
    lengths = [] if callable(lists) else [len(x[0]) for x in lists]
    if callable(lists):  # the lengths first (a scorer knows them from the data: every unrated item)
        U = _SCALE_USERS[0]
        for a in range(0, U, chunk):
            lengths += [len(x[0]) for x in get(a, a + chunk)]
    st = StreamingEvaluation(list(SCALE_MEASURES), lengths=lengths, **kw)
    for a in range(0, len(lengths), chunk):
        part = get(a, a + chunk)
        st.add(part, list_ids=list(range(a, a + len(part))))
        del part
    return st.result()


_SCALE_USERS = [0]


def case_scale_rss(args) -> str:
    """One evaluation (``--impl eager|streamed``) in this fresh process: peak RSS above the RSS after the imports,
    the lists included (eager: every list held; streamed: one chunk generated at a time)."""
    from _bench import maxrss_bytes
    import torchfair.evaluation  # noqa: F401  (imports outside the measured growth)

    _scale_eval(_scale_lists(args, 0, 2), "eager")  # warm the kernels
    base = maxrss_bytes()
    if args.impl == "streamed":
        _SCALE_USERS[0] = _scale_shape(args)[0]
        _scale_eval(lambda a, b: _scale_lists(args, a, b), "streamed")
    else:
        _scale_eval(_scale_lists(args), "eager")
    return f"{(maxrss_bytes() - base) / 2 ** 20:.0f}"


def case_scale(args) -> str:
    import numpy as np

    lists = _scale_lists(args)
    e, s = _scale_eval(lists, "eager"), _scale_eval(lists, "streamed")
    same = np.array_equal(e.values, s.values, equal_nan=True) and e.mean == s.mean
    med, times = interleaved({"eager": lambda: _scale_eval(lists, "eager"),
                              "streamed": lambda: _scale_eval(lists, "streamed")},
                             rounds=2 if args.quick else 3, warmup=False)
    rss = {impl: _sub(["--case", "scale_rss", "--impl", impl], args) for impl in ("eager", "streamed")}
    U, N = len(lists), max(len(x[0]) for x in lists)
    rows = [["eager (`evaluate_lists`, every list held)", med["eager"], 1.0, rss["eager"]],
            ["streamed (`StreamingEvaluation`, 512 lists a chunk)", med["streamed"],
             ratio(times, "streamed", "eager"), rss["streamed"]]]
    body = (f"## Scale: full-catalogue evaluation of ML-20M-shaped lists ({U} users x up to {N} items)\n\n"
            f"Measures: {', '.join(SCALE_MEASURES)}; bootstrap 200. Per-list values identical: "
            f"{'yes' if same else '**no**'}. Time: interleaved rounds on the same lists, held in memory. Memory: "
            f"peak-RSS growth in a fresh process each, the lists included (eager: every list held; streamed: each "
            f"chunk of 512 lists generated, measured and dropped, as `torchfair evaluate --stream` scores, "
            f"measures and drops them).\n\n"
            + table(["evaluation", "seconds", "x eager", "peak RSS growth MB"], rows) + "\n")
    res = RESULTS / "scale_ml20m.md"
    if res.exists() and not args.quick:
        body += ("\n### The full scale run (`python experiments/scale_ml20m.py --results`: its own command, "
                 "~30 min; table from `experiments/results/scale_ml20m.md`)\n\n"
                 + res.read_text().split("\n", 1)[1] + "\n")
    return body


# --------------------------------------------------------------------------------------------- driver
def _sub(extra: List[str], args, env=None) -> str:
    cmd = [sys.executable, __file__, "--threads", str(args.threads), *extra] + (["--quick"] if args.quick else [])
    e = dict(os.environ, OMP_NUM_THREADS=str(args.threads), **(env or {}))
    res = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if res.returncode != 0:
        return f"failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}"
    return res.stdout.strip().splitlines()[-1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, few rounds (a smoke test, not figures)")
    ap.add_argument("--out", default=str(RESULTS / "bench_speed.md"), help="Markdown output")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--loss", default="dips", help=argparse.SUPPRESS)
    ap.add_argument("--B", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--N", type=int, default=100, help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="torchfair", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    torch.set_num_threads(args.threads)
    if args.case:
        print(globals()["case_" + args.case](args))
        return
    sections = [s for s in args.only.split(",") if s]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error(f"--only: unknown sections {bad}; choose from {SECTIONS}")
    head = (f"# torchfair speed benchmark\n\ntorch {torch.__version__}, {args.threads} thread(s), "
            f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}; `python experiments/bench_speed.py"
            f"{' --quick' if args.quick else ''}`.\n")
    parts = [head]
    for sec in sections:
        t0 = time.perf_counter()
        print(f"[bench_speed] {sec} ...", file=sys.stderr, flush=True)
        if sec != "exact":
            body = globals()["case_" + sec](args)
        else:
            res = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--case", "exact"] +
                                 (["--quick"] if args.quick else []), capture_output=True, text=True,
                                 env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
            body = res.stdout if res.returncode == 0 else f"failed:\n```\n{res.stderr[-2000:]}\n```"
        parts.append(body)
        print(f"[bench_speed] {sec} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    text = "\n".join(parts)
    if not args.quick:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
