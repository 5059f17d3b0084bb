"""The thread pool of the compiled kernels: lists in parallel on ``torch.get_num_threads()`` threads.

The kernels release the GIL (``nogil``) and :func:`run` hands out slices of the batch.  Not numba's ``prange``: its
OpenMP layer is a second OpenMP runtime beside torch's (launching it set torch's thread count to numba's in the
project's environment), and its fork-join waits for every thread, where a slice queue lets the calling thread
finish the work of a helper that the machine runs late; the pool is safe to use from several threads and is
rebuilt after ``fork``.  No numba here.

    >>> import numpy as np
    >>> seen = np.zeros(4, dtype=np.int64)
    >>> def mark(out, b0, b1):
    ...     out[b0:b1] += 1
    >>> run(mark, (seen,), 4, 10)
    >>> seen.tolist()
    [1, 1, 1, 1]
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import torch

__all__ = ["run", "np_view"]

#: lists x items below which a call runs on the calling thread only (thread hand-off costs ~50 us)
PARALLEL_MIN_ELEMENTS = 1 << 15


_POOL: Optional[ThreadPoolExecutor] = None

_CPUS = os.cpu_count() or 1


_POOL_KEY = None


_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The module's thread pool, rebuilt after a ``fork`` (a child inherits no worker thread) or when more
    workers are asked for."""
    global _POOL, _POOL_KEY
    with _POOL_LOCK:
        if _POOL is None or _POOL_KEY[0] != os.getpid() or _POOL_KEY[1] < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="torchfair-kernels")
            _POOL_KEY = (os.getpid(), workers)
        return _POOL


def run(kernel, args, B: int, N: int) -> None:
    """``kernel(*args, b0, b1)`` over the lists ``[0, B)`` on ``torch.get_num_threads()`` threads (the calling
    one included), which take slices of about ``B / (16 threads)`` lists in turn until none is left.  The call
    returns when every slice is done, without waiting for a helper thread that took none: on shared cores a thread
    the machine runs late delays the call by the slice it holds, not by a scheduler slice per call (the
    OpenMP-style fork-join of torch's parallel ops waits for every thread)."""
    threads = min(torch.get_num_threads(), B, _CPUS)
    if threads <= 1 or B * N < PARALLEL_MIN_ELEMENTS:
        kernel(*args, 0, B)
        return
    chunks = min(B, 16 * threads)  # small slices: a late helper holds back little
    bounds = [B * t // chunks for t in range(chunks + 1)]
    state = {"next": 0, "done": 0, "error": None}
    cond = threading.Condition()

    def work():
        while True:
            with cond:
                c = state["next"]
                if c >= chunks:
                    return
                state["next"] = c + 1
            try:
                kernel(*args, bounds[c], bounds[c + 1])
            except BaseException as exc:  # pragma: no cover - re-raised by the calling thread
                state["error"] = exc
            with cond:
                state["done"] += 1
                cond.notify_all()

    pool = _pool(threads - 1)
    for _ in range(threads - 1):
        pool.submit(work)
    work()
    with cond:
        while state["done"] < chunks:
            cond.wait()
    if state["error"] is not None:
        raise state["error"]


def np_view(t: "torch.Tensor"):
    """The numpy view of a CPU tensor for a kernel: detached only when it carries a gradient (a ``detach`` is an
    op of its own, and the kernels' callers pass a dozen tensors a call), made contiguous only when it is not."""
    if t.requires_grad:
        t = t.detach()
    return t.contiguous().numpy()
