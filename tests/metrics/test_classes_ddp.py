"""torchfair.metrics.classes across processes: every metric class, its lists split over two workers, computes
what one process computes on all the lists.

* ``test_merge_state_of_every_metric_class``: torchmetrics' ``merge_state`` of two halves (the states summed, as
  the sync does) against one metric updated with every list;
* ``test_ddp_sync_of_every_metric_class``: two processes (``torch.distributed`` with gloo on CPU), each updating
  half the lists (one of them in two batches); ``compute()`` syncs the states (``dist_reduce_fx="sum"``) and must
  give, on both ranks, the values of one process updated with all the lists.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchfair import metrics as tm

pytest.importorskip("torchmetrics")

#: options a class cannot run without, needs to be batch-independent (ERR infers max_grade from the batch) or
#: to define a value on lists of 4..6 items (the prefix measures step by 10 by default)
OPTIONS = {"MPC": {"eps": 0.5}, "ERR": {"max_grade": 2.0}, "PreF": {"step": 1}, "RKL": {"step": 2}, "RND": {"step": 2},
           "RRD": {"step": 2}}
CLASSES = sorted(n for n in tm.__all__ if isinstance(getattr(tm, n), type)
                 and issubclass(getattr(tm, n), tm.FairnessMetric) and n != "FairnessMetric")
ROOT = Path(__file__).resolve().parents[2]


def lists(seed: int = 0, B: int = 8, N: int = 7):
    """``B`` padded lists ``(scores, relevance, groups, mask)``: distinct scores, grades 0..2 (a grade 2 in every
    list), two groups both present, 1..3 padded slots at the end (NaN scores, garbage relevance and ids)."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, generator=gen, dtype=torch.float64)
    r = torch.randint(0, 3, (B, N), generator=gen).double()
    g = torch.randint(0, 2, (B, N), generator=gen)
    g[:, 0], g[:, 1], r[:, 2] = 0, 1, 2.0
    real = N - torch.randint(1, 4, (B,), generator=gen)
    m = torch.arange(N)[None, :] < real[:, None]
    return torch.where(m, s, float("nan")), torch.where(m, r, 7.0), torch.where(m, g, 5), m


def _metric(name):
    return getattr(tm, name)(**OPTIONS.get(name, {}))


def _values(metric):
    return {k: float(v) for k, v in metric.compute().items()}


def _whole(name, batch):
    m = _metric(name)
    m.update(*batch)
    return _values(m)


def _assert_same(got, want, what):
    assert list(got) == list(want), f"{what}: columns {list(got)} != {list(want)}"
    bad = {k: (got[k], want[k]) for k in want if got[k] != pytest.approx(want[k], rel=1e-9, abs=1e-12)}
    assert not bad, f"{what}: (got, one process) {bad}"


def test_merge_state_of_every_metric_class():
    batch = lists()
    assert len(CLASSES) >= 30
    for name in CLASSES:
        a, b, merged = _metric(name), _metric(name), _metric(name)
        a.update(*(t[:4] for t in batch))
        b.update(*(t[4:6] for t in batch))
        b.update(*(t[6:] for t in batch))
        merged.merge_state(a)
        merged.merge_state(b)
        want = _whole(name, batch)
        assert sum(merged.counts.values()) > 0, f"{name}: no valid list, nothing compared"
        _assert_same(_values(merged), want, f"{name} merge_state")


_WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
sys.path.insert(0, sys.argv[4])
import test_classes_ddp as t

rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
batch = t.lists()
res = {}
for name in t.CLASSES:
    m = t._metric(name)
    if rank == 0:
        m.update(*(x[:4] for x in batch))
    else:
        m.update(*(x[4:6] for x in batch))
        m.update(*(x[6:] for x in batch))
    res[name] = t._values(m)  # compute() syncs the states over both ranks
dist.destroy_process_group()
json.dump(res, open(out, "w"))
"""


@pytest.mark.slow
def test_ddp_sync_of_every_metric_class(tmp_path):
    init = (tmp_path / "rendezvous").as_uri()
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(r), init, str(outs[r]), str(Path(__file__).parent)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    batch = lists()
    for r, out in enumerate(outs):
        got = json.loads(out.read_text())
        assert sorted(got) == CLASSES
        for name in CLASSES:
            _assert_same(got[name], _whole(name, batch), f"{name} synced on rank {r}")
