"""FastSoftRank (torchfair.orderings.fast_soft_rank.soft_rank) against torchsort and a plain NumPy PAV (CPU).

Soft ranks by projection onto the permutahedron (Blondel et al., ICML 2020), quadratic regularisation
``epsilon`` (``--eps``; torchsort's ``regularization_strength``, torchfair's ``temperature`` with
``scale="none"``), by default at two strengths: ``1/N`` (N(0, 1) scores: a mix of pooled and single items, close
to the hard ranking, where the isotonic regression has the most work) and ``1`` (torchsort's default: whole lists
pool).  torchfair returns 0-based descending positions, so it is compared with
``torchsort.soft_rank(-x) - 1``; the NumPy reference (written below: sort, pool-adjacent-violators in a Python
loop per list, unsort; forward only) computes the same numbers.  Implementations:

* ``torchsort``: torchsort's C++ CPU extension (when installed: ``pip install torchsort``; it compiles against the
  local torch, and needs ``--no-build-isolation`` and no ``nvcc`` on the PATH for a CPU-only torch);
* ``torchfair[torch]``: the pure-PyTorch parallel PAV (``backend="torch"``);
* ``torchfair[numba]``: the numba PAV (``backend="numba"``, when numba is installed);
* ``numpy PAV``: the plain reference (forward only; only with ``--numpy``, it is slow).

Every implementation is checked against torchfair[torch] (values, and gradients of ``sum(w * ranks)``), then all
are timed interleaved in one process: ``--rounds`` rounds, each running every implementation once in a rotating
order; the ratio of an implementation to the baseline (torchsort, or numba when torchsort is missing) is the
median over the rounds of the per-round ratio (robust to load from other processes); times are medians.
Forward (no grad) and forward + backward are timed separately.  float32 inputs (torchfair computes the projection
in float64 internally, torchsort in the input dtype).

Writes a Markdown table to ``experiments/results/bench_fastsoftrank.md`` (``--out``) and prints it.
Usage: ``python experiments/bench_fastsoftrank.py [--rounds 15] [--threads 1] [--eps 1/N,1] [--quick]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Callable, Dict, List, Optional, Tuple  # noqa: F401

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import interleaved, ratio  # noqa: E402  (the shared harness)

SHAPES = [(256, 100), (64, 1000), (8, 10_000)]
QUICK_SHAPES = [(4, 20), (2, 200)]


# ------------------------------------------------------------------------------------------ plain NumPy reference
def numpy_soft_rank(x: np.ndarray, eps: float) -> np.ndarray:
    """0-based descending soft positions of each row of ``x`` (Blondel et al. 2020, Prop. 3): sort ``z = -x / eps``
    descending, isotonic (non-increasing) regression of ``z_sorted - w`` with ``w = (n-1, ..., 0)`` by
    pool-adjacent-violators, positions ``z_sorted - v``, unsorted."""
    B, N = x.shape
    out = np.empty(x.shape, dtype=np.float64)
    w = np.arange(N - 1, -1, -1, dtype=np.float64)
    for b in range(B):
        z = -x[b].astype(np.float64) / eps
        order = np.argsort(-z, kind="stable")
        s = z[order]
        sums, counts = [], []
        for v in s - w:
            sums.append(v)
            counts.append(1)
            while len(sums) > 1 and sums[-2] * counts[-1] <= sums[-1] * counts[-2]:  # mean(prev) <= mean(last)
                s_last, c_last = sums.pop(), counts.pop()
                sums[-1] += s_last
                counts[-1] += c_last
        fit = np.repeat(np.array(sums) / np.array(counts), counts)
        out[b, order] = s - fit
    return out


# ------------------------------------------------------------------------------------------ implementations
def parse_eps(spec: str, N: int) -> float:
    """``"0.5"`` -> 0.5; ``"3/N"`` -> 3 / N."""
    spec = spec.strip()
    if spec.endswith("/N"):
        return float(spec[:-2]) / N
    return float(spec)


def implementations(eps: float, with_numpy: bool) -> Dict[str, Callable]:
    """name -> fn(x, w, grad) returning (ranks, grad or None); ranks are 0-based descending positions."""
    from torchfair.orderings.fast_soft_rank import numba_available, soft_rank

    impls: Dict[str, Callable] = {}
    try:
        import torchsort
    except Exception:  # pragma: no cover - depends on the environment
        torchsort = None

    def run(f):
        def call(x, w, grad):
            x = x.clone().requires_grad_(grad)
            r = f(x)
            if not grad:
                return r.detach(), None
            (r * w).sum().backward()
            return r.detach(), x.grad
        return call

    if torchsort is not None:
        impls["torchsort"] = run(lambda x: torchsort.soft_rank(-x, regularization_strength=eps) - 1)
    impls["torchfair[torch]"] = run(lambda x: soft_rank(x, eps, backend="torch", validate_args=False))
    if numba_available():
        impls["torchfair[numba]"] = run(lambda x: soft_rank(x, eps, backend="numba", validate_args=False))
    if with_numpy:
        def np_call(x, w, grad):
            if grad:
                return None
            return torch.from_numpy(numpy_soft_rank(x.numpy(), eps)).to(x.dtype), None
        impls["numpy PAV"] = np_call
    return impls


def check(impls, x, w) -> Dict[str, str]:
    ref_v, ref_g = impls["torchfair[torch]"](x, w, True)
    notes = {}
    for name, f in impls.items():
        out = f(x, w, True)
        if out is None:  # forward only
            out = (f(x, w, False)[0], None)
        v, g = out
        ev = (v.double() - ref_v.double()).abs().max().item() / max(1.0, ref_v.abs().max().item())
        if not ev < 1e-4:
            raise AssertionError(f"{name}: values differ from torchfair[torch] by {ev:.1e} (relative)")
        note = f"values {ev:.0e}"
        if g is not None:
            scale = max(1e-12, ref_g.abs().max().item())
            eg = (g.double() - ref_g.double()).abs().max().item() / scale
            if not eg < 1e-4 and name == "torchsort":
                # torchsort works in the input dtype: in float32 a few near-tied block boundaries of the isotonic
                # regression can fall the other way (a different, equally valid-looking Jacobian there); in float64
                # it must agree with torchfair (which computes the projection in float64)
                frac = ((g.double() - ref_g.double()).abs() > 1e-4 * scale).double().mean().item()
                v64, g64 = f(x.double(), w.double(), True)
                e64 = (g64 - ref_g.double()).abs().max().item() / scale
                if not e64 < 1e-4:
                    raise AssertionError(f"{name}: float64 gradients differ from torchfair[torch] by {e64:.1e}")
                note += f", grads {e64:.0e} in float64 (float32: {frac:.3%} of items differ)"
            elif not eg < 1e-4:
                raise AssertionError(f"{name}: gradients differ from torchfair[torch] by {eg:.1e} (relative)")
            else:
                note += f", grads {eg:.0e}"
        notes[name] = note
    return notes


def time_shape(impls, B: int, N: int, rounds: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, generator=g)
    w = torch.randn(B, N, generator=g)
    notes = check(impls, x, w)
    names = list(impls)
    base = "torchsort" if "torchsort" in impls else ("torchfair[numba]" if "torchfair[numba]" in impls else names[0])
    rows = []
    for grad in (False, True):
        active = [n for n in names if not (grad and n == "numpy PAV")]
        med, times = interleaved({n: (lambda n=n: impls[n](x, w, grad)) for n in active}, rounds, alternate=True,
                                 warmup=False)  # check() warmed every implementation up
        for n in active:
            ratios = [a / b for a, b in zip(times[n], times[base])]
            rows.append({"B": B, "N": N, "mode": "fwd+bwd" if grad else "fwd", "impl": n, "base": base,
                         "time": med[n], "ratio": ratio(times, n, base), "range": (min(ratios), max(ratios)),
                         "check": notes[n]})
    return rows


def table(rows, header: str) -> str:
    lines = [header, "", "| epsilon | B x N | pass | implementation | median s | / baseline (median of rounds) | "
             "min-max | checked against torchfair[torch] |", "|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['eps']} | {r['B']} x {r['N']} | {r['mode']} | {r['impl']} | {r['time']:.5f} | "
                     f"{r['ratio']:.2f} ({r['base']}) | {r['range'][0]:.2f}-{r['range'][1]:.2f} | {r['check']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="FastSoftRank: torchfair (torch and numba PAV) against torchsort and a "
                                             "plain NumPy PAV (same numbers, interleaved timing)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="timing rounds per shape and pass")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (torch.set_num_threads)")
    ap.add_argument("--eps", type=str, default="1/N,1",
                    help="comma-separated regularisation strengths epsilon (score units); 'c/N' means c / N.  With "
                         "N(0, 1) scores, adjacent sorted scores differ by ~2.5 / N: 1/N mixes pooled and single items "
                         "(near the hard ranking), 1 pools whole lists (torchsort's default)")
    ap.add_argument("--numpy", action="store_true", help="also time the plain NumPy PAV (forward only, slow)")
    ap.add_argument("--shapes", type=str, default=None,
                    help="comma-separated BxN shapes (unset: 256x100, 64x1000, 8x10000)")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny shapes, 2 rounds, no file written")
    ap.add_argument("--out", type=str,
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                         "bench_fastsoftrank.md"),
                    help="Markdown file to write (not with --quick)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    try:
        import numba
        numba.set_num_threads(a.threads)
    except Exception:  # pragma: no cover - numba missing
        pass
    shapes = QUICK_SHAPES if a.quick else SHAPES
    if a.shapes:
        shapes = [tuple(int(v) for v in sh.split("x")) for sh in a.shapes.split(",")]
    rounds = 2 if a.quick else a.rounds
    rows = []
    for spec in a.eps.split(","):
        for B, N in shapes:
            eps = parse_eps(spec, N)
            impls = implementations(eps, a.numpy or a.quick)
            for f in impls.values():  # compile numba, page in the kernels
                f(torch.randn(2, 8), torch.randn(2, 8), False)
            for r in time_shape(impls, B, N, rounds):
                r["eps"] = f"{spec} = {eps:.3g}" if spec.endswith("/N") else spec
                rows.append(r)
            print(f"  done eps={spec} {B}x{N}", file=sys.stderr)
    try:
        import torchsort
        from importlib.metadata import version
        ts = f"torchsort {getattr(torchsort, '__version__', None) or version('torchsort')}"
    except Exception:
        ts = "torchsort not installed"
    header = (f"FastSoftRank (experiments/bench_fastsoftrank.py): float32 inputs, N(0, 1) scores; CPU "
              f"({platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}, {ts}, "
              f"{a.threads} thread(s); {rounds} interleaved rounds; ratio = median over the rounds of time / "
              f"baseline time; times are medians.  fwd+bwd: loss sum(w * ranks).")
    text = table(rows, header)
    print(text)
    if not a.quick and a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return rows


if __name__ == "__main__":
    main()
