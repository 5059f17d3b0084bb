"""torchfair.kernels._threads: the slice queue that spreads lists over torch's threads.

* every list is handed out exactly once, on one thread or several; an error in a slice reaches the caller;
* lists split over threads give the same numbers as one thread (the measures);
* the pool is rebuilt after ``fork``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from torchfair.kernels import _threads as T
from torchfair.metrics import dips
from torchfair.orderings import Hard


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_list_is_handed_out_exactly_once(threads, monkeypatch):
    monkeypatch.setattr(T, "PARALLEL_MIN_ELEMENTS", 0)
    seen = np.zeros(37, dtype=np.int64)

    def mark(out, b0, b1):
        out[b0:b1] += 1

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        T.run(mark, (seen,), 37, 5)
    finally:
        torch.set_num_threads(before)
    assert seen.tolist() == [1] * 37


def test_an_error_in_a_slice_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(T, "PARALLEL_MIN_ELEMENTS", 0)

    def fail(b0, b1):
        if b0 <= 20 < b1:
            raise RuntimeError("slice 20")

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with pytest.raises(RuntimeError, match="slice 20"):
            T.run(fail, (), 40, 5)
    finally:
        torch.set_num_threads(before)


def test_lists_split_over_threads_give_the_same_numbers(monkeypatch, kernel_inputs):
    s, r, grp, mask = kernel_inputs(11, 9, 200, torch.float32, "continuous", "ids")
    one = [dips(s, r, grp, mask=mask, num_groups=3, ordering=Hard(t, backend="numba")) for t in ("first", "average")]
    monkeypatch.setattr(T, "PARALLEL_MIN_ELEMENTS", 0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = [dips(s, r, grp, mask=mask, num_groups=3, ordering=Hard(t, backend="numba"))
               for t in ("first", "average")]
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


def test_the_thread_pool_is_rebuilt_after_fork(monkeypatch):
    pool = T._pool(1)
    monkeypatch.setattr(T, "_POOL_KEY", (-1, T._POOL_KEY[1]))  # as seen from a forked child
    assert T._pool(1) is not pool
