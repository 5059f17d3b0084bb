"""The benchmark harness every ``experiments/bench_*.py`` script shares: interleaved rounds, medians of per-round
ratios, peak resident memory, markdown tables.

Timing protocol (the project's): the implementations of one comparison run in alternation, round by round, on the
same inputs, after one warm-up call each; a time is the median over rounds, and a ratio is the median over rounds
of the per-round ratio, so a machine that slows down between rounds (other jobs) biases neither side.
"""
from __future__ import annotations

import math
import resource
import statistics
import sys
import time
from typing import Callable, Dict, List, Sequence, Tuple

__all__ = ["interleaved", "ratio", "table", "fmt", "maxrss_bytes"]


def interleaved(fns: Dict[str, Callable[[], object]], rounds: int, min_time: float = 0.0, *,
                alternate: bool = False, warmup: bool = True
                ) -> Tuple[Dict[str, float], Dict[str, List[float]]]:
    """``(median seconds per implementation, per-round seconds)``, timed in alternation after one warm-up call
    each (``warmup=False``: the caller has warmed up); a round repeats a call until ``min_time`` seconds have passed
    and reports the time per call.  ``alternate``: round ``r`` starts with the ``r``-th implementation (a rotation),
    so none always goes first."""
    if warmup:
        for f in fns.values():
            f()
    times: Dict[str, List[float]] = {k: [] for k in fns}
    items = list(fns.items())
    for r in range(rounds):
        shift = r % len(items) if alternate else 0
        for k, f in items[shift:] + items[:shift]:
            reps, t0 = 0, time.perf_counter()
            while True:
                f()
                reps += 1
                el = time.perf_counter() - t0
                if el >= min_time:
                    break
            times[k].append(el / reps)
    return {k: statistics.median(v) for k, v in times.items()}, times


def ratio(times: Dict[str, List[float]], a: str, b: str) -> float:
    """Median over rounds of ``time[a] / time[b]``."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def fmt(x) -> str:
    """Three significant digits for floats (thousands separated above 1000); anything else as ``str``."""
    if isinstance(x, float):
        if x == 0 or not math.isfinite(x):
            return str(x)
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def table(header: Sequence[str], rows: List[Sequence[object]]) -> str:
    """A markdown table (first column left-aligned, the others right-aligned), cells through :func:`fmt`."""
    from torchfair.evaluation._format import markdown_rows

    return markdown_rows(list(header), [[fmt(x) for x in r] for r in rows], align="l" + "r" * (len(header) - 1))


def maxrss_bytes() -> int:
    """The process's peak resident set size so far (a high-water mark), in bytes: Linux's ``VmHWM`` of this
    address space where there is one.  Not ``ru_maxrss`` there: a child started by ``fork`` + ``exec`` keeps its
    parent's resident size at the fork as its own ``ru_maxrss`` floor, so a measuring subprocess of a process holding
    2 GB reported no growth below 2 GB (the scale and loss-memory tables of ``bench_speed.py`` read 0 MB that
    way); ``VmHWM`` starts afresh with the new program."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024  # Linux reports KiB
