"""The first exact ``dips()`` of a fresh process, cold and warm, and the input sizes from which the compiled kernels
pay (the thresholds of ``backend="auto"``, :data:`torchfair.kernels.MIN_ELEMENTS`).

First call (default).  Each round makes an empty ``NUMBA_CACHE_DIR`` and times, in fresh ``python -c`` processes:

* ``cold``: the first ``dips()`` on 4 x 50 (float32, default ``Hard`` ordering, ``backend="auto"``) on the empty cache;
* ``warm``: the same call in the next process, on whatever the cold process left in the cache;
* ``cold, kernels``: the same call with ``TORCHFAIR_KERNELS=numba`` on another empty cache (what the kernel path's
  synchronous compile costs: the 32-bit sort and pair sums);
* ``large cold`` / ``large warm``: the first ``dips()`` on B x 50 lists, B just large enough for ``auto`` to take
  the sort and pair-sum kernels (:data:`torchfair.kernels.MIN_ELEMENTS`), on an empty cache and then on the cache
  it left.

Each process reports the seconds of its first call (import apart), the bits of the value (sha256 of the tensor's
bytes), the path taken (:func:`torchfair.kernels.trace`), the compile log lines and the number of child processes
alive after the call.  The run fails (exit 1) unless the cold and warm values have the same bits and no process
has a child.

Crossover (``--crossover``).  For each kernel family, the per-call time (best of 5 repeats, warm kernels) of the
torch code and of the kernels at growing input sizes (lists of 50 items; FA*IR: the table length ``k``), and the
smallest size from which the kernels are faster at every larger size measured.

    python experiments/bench_first_call.py --rounds 3 --crossover --out experiments/results/bench_first_call.md
    python experiments/bench_first_call.py --fast     # one round, small cases only: the test's mode
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the measured process: imports, builds a B x 50 batch, times the first dips() and reports what it saw
CHILD = r"""
import hashlib, json, logging, os, sys, time
B = int(sys.argv[1])
t0 = time.perf_counter()
import torch
from torchfair.metrics import dips
import torchfair.kernels as kernels
t1 = time.perf_counter()
lines = []
class _Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("torchfair.kernels").addHandler(_Keep())
g = torch.Generator().manual_seed(0)
s = torch.randn(B, 50, generator=g)
r = torch.randint(0, 4, (B, 50), generator=g).float()
grp = torch.randint(0, 2, (B, 50), generator=g)
t2 = time.perf_counter()
with kernels.trace() as paths:
    v = dips(s, r, grp)
t3 = time.perf_counter()
me = str(os.getpid())
children = 0
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            with open(f"/proc/{d}/stat") as f:
                children += f.read().rsplit(")", 1)[1].split()[1] == me
        except OSError:
            pass
print(json.dumps({"import": t1 - t0, "first": t3 - t2, "value": v.sum().item(),
                  "bits": hashlib.sha256(v.numpy().tobytes()).hexdigest()[:16], "children": children,
                  "paths": sorted({f"{f}:{p}" for f, p, _ in paths}), "log": lines}))
"""


def _run(cache, B: int = 4, mode: str = "auto") -> dict:
    """One measured process on the numba cache ``cache`` (``None``: the usual one)."""
    env = dict(os.environ, TORCHFAIR_KERNELS=mode, PYTHONPATH=str(ROOT))
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = cache
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(B)], env=env, capture_output=True, text=True, check=True,
                         cwd=str(ROOT))
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process"] = time.perf_counter() - start  # the whole `python -c`: start, imports, the call, exit
    return res


def large_lists() -> int:
    """Lists of 50 in the large case: enough items for ``auto`` to take the sort and pair-sum kernels."""
    import math

    from torchfair.kernels import MIN_ELEMENTS

    return math.ceil(max(MIN_ELEMENTS["sorting"], MIN_ELEMENTS["pairs"]) / 50)


def one_round(fast: bool) -> dict:
    res = {}
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
        res["cold"] = _run(cache)
        res["warm"] = _run(cache)
    if not fast:
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            res["cold_kernels"] = _run(cache, mode="numba")
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            res["large_cold"] = _run(cache, B=large_lists())
            res["large_warm"] = _run(cache, B=large_lists())
    return res


# ------------------------------------------------------------------------------------------------- crossover
SIZES = (50, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 102400, 204800, 409600)  # B lists of 50
K_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # FA*IR table lengths
DCS_SIZES = (2, 5, 10, 20, 50, 100, 200, 400, 800, 1600, 3200)  # det_const_sort: one list up to 50 items, then B x 50


def _per_call(fn, budget: float = 0.03, repeats: int = 9) -> float:
    """Seconds per call: ``fn`` called in loops of about ``budget`` seconds, best of ``repeats`` loops."""
    fn()
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-7)
    n = max(1, int(budget / one))
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def _cases():
    """``family -> (sizes, make(size, backend) -> a call)``."""
    import torch

    import torchfair.kernels as kernels
    from torchfair.browsing import RBP
    from torchfair.losses import dips_loss
    from torchfair.metrics import dips, exposure, fa_ir_adjusted_alpha
    from torchfair.metrics import prefix as P
    from torchfair.orderings import Hard, RampRank, soft_rank
    from torchfair.orderings.base import LevelPairWeight
    from torchfair.rerank import det_const_sort

    def batch(n, N=50):
        g = torch.Generator().manual_seed(n)
        B = max(1, n // N)
        N = min(N, n)
        return (torch.randn(B, N, generator=g), torch.randint(0, 4, (B, N), generator=g).float(),
                torch.randint(0, 2, (B, N), generator=g), torch.ones(B, N, dtype=torch.bool))

    def sorting(n, backend):
        s, r, _, m = batch(n)
        F = RBP(0.9)

        def call():
            Hard(backend=backend)(s, m)
            before = os.environ.get(kernels.ENV)
            os.environ[kernels.ENV] = backend  # the ideal exposure's backend is the gate
            try:
                exposure._ideal(r, m, F)
            finally:
                os.environ.pop(kernels.ENV) if before is None else os.environ.__setitem__(kernels.ENV, before)
        return call

    def pairs(n, backend):
        s, r, g, m = batch(n)
        ob = Hard(backend=backend)(s, m)
        right = torch.nn.functional.one_hot(g, 2).float()
        pw = LevelPairWeight(r)
        return lambda: ob.contract(right, which="above", pair_weight=pw)

    def windows(n, backend):
        s, r, g, m = batch(n)
        x = s.clone().requires_grad_(True)

        def call():
            dips(x, r, g, ordering=RampRank(0.1, backend=backend)).sum().backward()
        return call

    def pav(n, backend):
        s, _, _, _ = batch(n)
        x = s.clone().requires_grad_(True)
        return lambda: soft_rank(x, 0.1, backend=backend).sum().backward()

    def detconstsort(n, backend):
        s, _, g, _ = batch(n)
        return lambda: det_const_sort(s, g, distribution=[0.5, 0.5], backend=backend)

    def ramp_losses(n, backend):  # the fused DIPS loss (its torch path: the windows family's passes, on torch)
        s, r, g, m = batch(n)
        x = s.clone().requires_grad_(True)
        o = RampRank(0.1, backend=backend)

        def call():
            dips_loss(x, r, g, num_groups=2, ordering=o).backward()
        return call

    def fa_ir(k, backend):
        def call():
            P._ADJUSTED.clear()
            fa_ir_adjusted_alpha(k, 0.5, 0.1, backend=backend)
        return call

    return {"sorting": (SIZES, sorting), "pairs": (SIZES, pairs), "windows": (SIZES, windows), "pav": (SIZES, pav),
            "detconstsort": (DCS_SIZES, detconstsort), "fa_ir": (K_SIZES, fa_ir), "ramp_losses": (SIZES, ramp_losses)}


#: calls over which the kernels must repay their family's cold compile (``threshold``)
HORIZON = 1000

#: a fresh process on an empty cache: the first call of one family's case (compile included) and the second
COMPILE_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import torch
import bench_first_call as b
family, n = sys.argv[1], int(sys.argv[2])
call = b._cases()[family][1](n, "numba")
w, c = time.perf_counter(), time.process_time()
call()
w1, c1 = time.perf_counter() - w, time.process_time() - c
w, c = time.perf_counter(), time.process_time()
call()
print(json.dumps({"wall": w1 - (time.perf_counter() - w), "cpu": c1 - (time.process_time() - c)}))
"""


def compile_cost(family: str) -> dict:
    """Seconds (wall, CPU) the first kernel call of ``family``'s case costs more than the second, in a fresh
    process on an empty numba cache: its compile (numba's import included)."""
    n = 16 if family == "fa_ir" else 200
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", COMPILE_CHILD, family, str(n), str(ROOT / "experiments")],
                             env=env, capture_output=True, text=True, check=True, cwd=str(ROOT))
    return json.loads(out.stdout.strip().splitlines()[-1])


def _from(sizes, ok):
    """The smallest size from which ``ok`` holds at every larger size measured (``None`` if not at the largest)."""
    first = None
    for i in range(len(sizes) - 1, -1, -1):
        if not ok[i]:
            break
        first = sizes[i]
    return first


def crossover(families=None, runs: int = 1) -> dict:
    """``family -> {"sizes", "torch", "numba", "compile", "faster_from", "threshold"}``: seconds per call of the
    torch code and of the warm kernels; the family's cold compile (:func:`compile_cost`); ``faster_from``: the
    smallest size from which the kernels are faster at every larger size measured; ``threshold``: the smallest
    size from which the time they save in :data:`HORIZON` calls exceeds their cold compile (CPU seconds), at every
    larger size measured (``None``: never in the sizes measured).  With ``runs > 1`` every figure is the least over
    the runs (the best estimate of a time on a shared machine)."""
    import torch

    import torchfair.kernels as kernels

    torch.manual_seed(0)
    kernels.warmup()
    out = {}
    for family, (sizes, make) in _cases().items():
        if families and family not in families:
            continue
        costs = [compile_cost(family) for _ in range(runs)]
        rows = {"sizes": list(sizes), "compile": {k: min(c[k] for c in costs) for k in costs[0]}}
        for backend in ("torch", "numba"):
            rows[backend] = [float("inf")] * len(sizes)
        for _ in range(runs):
            for i, n in enumerate(sizes):
                for backend in ("torch", "numba"):
                    rows[backend][i] = min(rows[backend][i], _per_call(make(n, backend)))
        saving = [t - k for t, k in zip(rows["torch"], rows["numba"])]
        rows["faster_from"] = _from(sizes, [d > 0 for d in saving])
        rows["threshold"] = _from(sizes, [d * HORIZON >= rows["compile"]["cpu"] for d in saving])
        out[family] = rows
        print(json.dumps({family: {"faster_from": rows["faster_from"], "threshold": rows["threshold"],
                                   "compile": {k: round(v, 2) for k, v in rows["compile"].items()},
                                   "ratio torch/numba": [round(t / k, 2) for t, k in
                                                         zip(rows["torch"], rows["numba"])]}}), flush=True)
    return out


# ---------------------------------------------------------------------------------------------------- report
def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:  # pragma: no cover
        return "?"


COLS = [("cold", "cold: first dips()"), ("warm", "warm: first dips()"), ("cold_kernels", "cold, kernels (numba)"),
        ("large_cold", "large cold"), ("large_warm", "large warm")]


def _table(rounds) -> str:
    cols = [(k, name) for k, name in COLS if k in rounds[0]]
    lines = ["| round | " + " | ".join(name for _, name in cols) + " | import (cold) | `python -c` cold / warm | load |",
             "|---|" + "---|" * len(cols) + "---|---|---|"]
    for i, r in enumerate(rounds):
        lines.append(f"| {i + 1} | " + " | ".join(f"{r[k]['first']:.2f} s" for k, _ in cols)
                     + f" | {r['cold']['import']:.2f} s | {r['cold']['process']:.2f} s / {r['warm']['process']:.2f} s"
                       f" | {r['load']} |")
    med = lambda key, field: statistics.median(r[key][field] for r in rounds)  # noqa: E731
    lines.append("| median | " + " | ".join(f"{med(k, 'first'):.2f} s" for k, _ in cols)
                 + f" | {med('cold', 'import'):.2f} s | {med('cold', 'process'):.2f} s / {med('warm', 'process'):.2f} s"
                   " | |")
    return "\n".join(lines)


def _cross_table(cross: dict) -> str:
    lines = []
    for family, rows in cross.items():
        unit = "k" if family == "fa_ir" else "items"
        c = rows["compile"]
        lines.append(f"\n**{family}**: cold compile {c['cpu']:.1f} CPU s ({c['wall']:.1f} s wall); kernels faster from "
                     f"{rows['faster_from']} {unit}; threshold {rows['threshold']} {unit}\n")
        lines.append(f"| {unit} | " + " | ".join(str(n) for n in rows["sizes"]) + " |")
        lines.append("|---|" + "---|" * len(rows["sizes"]))
        for backend in ("torch", "numba"):
            lines.append(f"| {backend} | " + " | ".join(f"{1e3 * t:.3g}" for t in rows[backend]) + " |")
        lines.append("| torch / numba | " + " | ".join(f"{t / k:.2f}" for t, k in zip(rows["torch"], rows["numba"]))
                     + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of fresh processes (first-call figures)")
    ap.add_argument("--fast", action="store_true", help="one round, the 4 x 50 cases only (the test's mode)")
    ap.add_argument("--crossover", action="store_true", help="also measure the per-family thresholds")
    ap.add_argument("--families", nargs="*", default=None, help="with --crossover: only these families")
    ap.add_argument("--crossover-runs", type=int, default=2, help="with --crossover: runs (least time kept)")
    ap.add_argument("--crossover-json", type=Path, default=None,
                    help="take the crossover of this earlier result JSON (with --crossover: re-measure --families only)")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here (and a .json beside it)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    rounds = []
    for _ in range(1 if args.fast else args.rounds):
        r = one_round(args.fast)
        r["load"] = _load()
        rounds.append(r)
        print(json.dumps({k: ({"first": round(v["first"], 3), "bits": v["bits"], "paths": v["paths"],
                                "children": v["children"], "log": len(v["log"])} if isinstance(v, dict) else v)
                          for k, v in r.items()}), flush=True)
    table = _table(rounds)
    print(table)
    cross, cross_meta = None, None
    if args.crossover_json is not None:
        earlier = json.loads(args.crossover_json.read_text())
        cross, cross_meta = earlier["crossover"], earlier.get("crossover_meta") or earlier["meta"]
    if args.crossover:
        fresh = crossover(args.families, args.crossover_runs)
        if args.families and cross_meta is not None:  # the earlier crossover, some families measured again
            cross_meta = {**cross_meta, "remeasured": f"{', '.join(args.families)} measured again by `python "
                          f"experiments/bench_first_call.py {' '.join(map(str, argv or sys.argv[1:]))}` "
                          f"({datetime.now(timezone.utc).strftime('%Y-%m-%d')}, commit {_commit()})"}
        else:
            cross_meta = None
        cross = {**(cross or {}), **fresh} if args.families else fresh
    same = all(r["cold"]["bits"] == r["warm"]["bits"] for r in rounds)
    childless = all(v["children"] == 0 for r in rounds for v in r.values() if isinstance(v, dict))
    if args.out is not None:
        import torch

        import torchfair.kernels as kernels

        meta = {"command": "python experiments/bench_first_call.py " + " ".join(map(str, argv or sys.argv[1:])),
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "commit": _commit(),
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}",
                "python": platform.python_version(), "torch": torch.__version__, "numba": _numba_version(),
                "min_elements": dict(kernels.MIN_ELEMENTS), "large_lists": large_lists()}
        cross_meta = cross_meta or {k: meta[k] for k in ("command", "date", "commit", "machine")}
        args.out.write_text(_report(table, cross, rounds, same, childless, meta, cross_meta))
        args.out.with_suffix(".json").write_text(json.dumps(
            {"meta": meta, "rounds": rounds, "crossover": cross, "crossover_meta": cross_meta if cross else None,
             "same_bits": same, "no_child": childless}, indent=1))
    return 0 if same and childless else 1


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # pragma: no cover
        return "?"


def _numba_version() -> str:
    try:
        import numba
        return numba.__version__
    except Exception:  # pragma: no cover
        return "missing"


def _report(table: str, cross, rounds, same: bool, childless: bool, meta: dict, cross_meta: dict) -> str:
    r0 = rounds[0]
    paths = {k: ", ".join(v["paths"]) for k, v in r0.items() if isinstance(v, dict)}
    logs = {k: v["log"][0] for k, v in r0.items() if isinstance(v, dict) and v["log"]}
    large = meta.get("large_lists")
    text = f"""# The first exact `dips()` call, and where the compiled kernels pay

`{meta['command']}` (commit {meta['commit']}, {meta['date']}; {meta['machine']}; Python {meta['python']}, torch
{meta['torch']}, numba {meta['numba']}; load average in the table).  Each figure is a fresh Python process's first
`dips()` (import apart); `cold` on an empty `NUMBA_CACHE_DIR`.

{table}

* Same bits cold and warm: **{'yes' if same else 'NO'}** (sha256 of the value's bytes, every round); child
  processes after any first call: **{'none' if childless else 'SOME'}**.
* Paths (round 1, from `torchfair.kernels.trace()`): """ + "; ".join(f"{k}: {v}" for k, v in paths.items()) + f""".
* `cold` / `warm` (4 x 50 = 200 items) are below every threshold, so `backend="auto"` runs the torch code in both:
  no compile, the same bits.  `MIN_ELEMENTS` in force: `{meta['min_elements']}`.
"""
    if "cold_kernels" in r0:
        text += """* `cold, kernels` forces the kernels (`TORCHFAIR_KERNELS=numba`): the synchronous compile of the 32-bit sort
  and pair sums that a call above the thresholds pays once per machine (then cached on disk).
"""
    if "large_cold" in r0:
        text += f"""* `large` ({large} x 50 = {large * 50} items, just above the `sorting` and `pairs` thresholds): the
  kernels; cold it compiles what it needs in the calling process and logs one line per family (logger
  `torchfair.kernels`), warm it loads them from the disk cache.
"""
    if logs:
        text += "\nThe log line (round 1): `" + next(iter(logs.values())) + "`\n"
    if cross:
        measured = (f"Measured by `{cross_meta['command']}` (commit {cross_meta['commit']}, {cross_meta['date']}; "
                    f"{cross_meta['machine']})")
        if cross_meta.get("remeasured"):
            measured += f"; {cross_meta['remeasured']}"
        text += "\n## Thresholds: torch code against the warm kernels\n\n" + measured + """.
Milliseconds per call (best of 9 loops of about 30 ms; the kernels warm), lists of 50 items (`items` = B x 50; fewer
items: one list).  `faster from`: the smallest size from which the warm kernels are faster at every larger size
measured.  `cold compile`: what the family's first kernel call costs more than its second in a fresh process on an
empty cache (numba's import included).  `threshold`: the smallest size from which the time the kernels save per
call, over 1 000 calls, exceeds that cold compile (CPU seconds), at every larger size measured: below it a first
call on a cold machine would wait longer for the compile than the kernels give back in a thousand calls (a
training run's steps), so `backend="auto"` keeps the torch code there.  `torchfair.kernels.MIN_ELEMENTS` holds
these thresholds.  Cases
(`sorting`: building `Hard()`'s ordered batch and the ideal exposure
(`metrics.exposure`); `pairs`: its `contract` as
`dips` calls it; `windows`: `dips` on `RampRank(0.1)`, forward and backward, its sort included; `pav`:
`soft_rank(0.1)` forward and backward; `detconstsort`: `det_const_sort`, the torch path a Python loop;
`fa_ir`: `fa_ir_adjusted_alpha(k, 0.5, 0.1)` uncached, the torch path numpy).
""" + _cross_table(cross) + "\n"
    return text


if __name__ == "__main__":
    sys.exit(main())
