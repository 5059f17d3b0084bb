"""How long does the first exact ``dips()`` of a fresh process take, with a cold and with a warm numba cache?

Each round makes an empty ``NUMBA_CACHE_DIR`` and times, in fresh Python processes:

* ``cold``: the first ``dips()`` on 4 x 50 (``backend="auto"``): the disk cache is empty, so the call runs the torch
  code and starts the background compile process (torchfair.kernels);
* ``compile``: how long that background process takes to fill the cache (``warmup()``: every kernel, float32 and
  float64), measured from the cold process's start until it exits;
* ``warm``: the first ``dips()`` of the next process, on the cache that compile left;
* ``cold, waiting`` (not with ``--fast``): the first call with ``TORCHFAIR_KERNELS=numba``, which waits for the
  kernels it needs to compile, in another empty cache: what every first call cost before the background compile.

Import time is reported apart (``import``); the first-call figures do not include it.

    python experiments/bench_first_call.py --rounds 3 --out experiments/results/bench_first_call.md
    python experiments/bench_first_call.py --fast     # one round, no waiting run: the test's mode
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the measured process: imports, builds a 4 x 50 batch, times the first dips() and reports the background compile
CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
from torchfair.metrics import dips
import torchfair.kernels as kernels
t1 = time.perf_counter()
g = torch.Generator().manual_seed(0)
s = torch.randn(4, 50, generator=g)
r = torch.randint(0, 4, (4, 50), generator=g).float()
grp = torch.randint(0, 2, (4, 50), generator=g)
t2 = time.perf_counter()
v = dips(s, r, grp)
t3 = time.perf_counter()
child = kernels._CHILD
print(json.dumps({"import": t1 - t0, "first": t3 - t2, "value": v.sum().item(),
                  "compile_pid": None if child is None else child.pid}))
"""


def _run(cache, mode: str = "auto", tree: Path = ROOT) -> dict:
    """One measured process of the torchfair in ``tree`` on the numba cache ``cache`` (``None``: the usual one)."""
    env = dict(os.environ, TORCHFAIR_KERNELS=mode, PYTHONPATH=str(tree))
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = cache
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True,
                         cwd=str(tree))  # (python -c puts the working folder first on the path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left to a parent that does not reap counts as done)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def one_round(fast: bool, baseline=None) -> dict:
    res = {}
    if baseline is not None:  # an older tree (its first call compiles what it needs), on the same machine state
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            res["base_cold"] = _run(cache, tree=baseline)["first"]
            res["base_warm"] = _run(cache, tree=baseline)["first"]
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
        start = time.perf_counter()
        cold = _run(cache)
        res.update(cold_first=cold["first"], import_s=cold["import"], value=cold["value"])
        pid = cold["compile_pid"]
        if fast:  # no wait: stop the compile we started (by its pid) and time a warm call on the usual cache
            if pid is not None and _alive(pid):
                os.kill(pid, 15)
            warm = _run(None)
            if warm["compile_pid"] is not None and _alive(warm["compile_pid"]):  # the usual cache was cold too
                os.kill(warm["compile_pid"], 15)
        else:
            while pid is not None and _alive(pid):
                time.sleep(0.2)
            res["compile"] = time.perf_counter() - start
            warm = _run(cache)
        res.update(warm_first=warm["first"], warm_value=warm["value"])
    if not fast:
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            res["cold_waiting"] = _run(cache, "numba")["first"]
    return res


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:  # pragma: no cover
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each a cold and a warm process per tree")
    ap.add_argument("--fast", action="store_true", help="one round, no waiting run (the test's mode)")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a folder holding an older torchfair package (e.g. `git archive HEAD torchfair | tar -x -C "
                         "DIR`), timed in each round beside this one")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    rounds = []
    for i in range(1 if args.fast else args.rounds):
        r = one_round(args.fast, args.baseline)
        r["load"] = _load()
        rounds.append(r)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
    cols = [("cold_first", "cold: first dips()"), ("warm_first", "warm: first dips()"), ("import_s", "import"),
            ("compile", "background compile"), ("cold_waiting", "cold, waiting (numba)"),
            ("base_cold", "baseline: cold"), ("base_warm", "baseline: warm")]
    cols = [(k, name) for k, name in cols if k in rounds[0]]
    lines = ["| round | " + " | ".join(name for _, name in cols) + " | load |",
             "|---|" + "---|" * len(cols) + "---|"]
    for i, r in enumerate(rounds):
        lines.append(f"| {i + 1} | " + " | ".join(f"{r[k]:.2f} s" for k, _ in cols) + f" | {r['load']} |")
    lines.append("| median | " + " | ".join(f"{statistics.median(r[k] for r in rounds):.2f} s" for k, _ in cols)
                 + " | |")
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        args.out.write_text(_report(table, args))
    same = all(abs(r["value"] - r["warm_value"]) <= 1e-6 * max(1.0, abs(r["value"])) for r in rounds)
    return 0 if same else 1


def _report(table: str, args) -> str:
    return f"""# The first exact `dips()` call: cold and warm numba cache

`python experiments/bench_first_call.py --rounds {args.rounds}{' --baseline DIR' if args.baseline else ''}` (4 x 50 lists, float32, default `Hard` ordering;
each figure a fresh Python process; `cold` / `cold, waiting` on an empty `NUMBA_CACHE_DIR`; this project's shared
2-core machine, load average in the last column).

{table}

* **cold**: the cache is empty, so `backend="auto"` runs the torch code for this call and starts one background
  Python process that compiles every kernel (`torchfair.kernels.warmup()`) into the cache.
* **background compile**: until that process has exited (from the cold process's start); calls of the cold
  process made before then run the torch code (the same values up to float64 rounding of the sums).
* **warm**: the next process, on the cache the compile left: the kernels load from disk.
* **cold, waiting**: `TORCHFAIR_KERNELS=numba`, which compiles what the call needs before answering (only the
  32-bit entry points of the sort and of the pair sums).
* **baseline** (with `--baseline DIR`): the torchfair of `DIR` (here the tree before torchfair.kernels:
  `_fenwick.py`, whose first call compiled both key widths of the sort and of the pair sums), cold then warm, in
  the same round.
"""


if __name__ == "__main__":
    sys.exit(main())
