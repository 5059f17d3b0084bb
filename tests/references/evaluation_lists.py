"""Shared lists of the evaluation tests (tests/evaluation/test_*.py) and the independent per-list computation they
are checked against: each list evaluated on its own (1-D inputs), the mean over the lists where the entry is
defined."""
from __future__ import annotations

import torch


def make_lists(n_lists=12, seed=0, max_len=9, G=2):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_lists):
        n = int(torch.randint(1, max_len + 1, (1,), generator=g))
        out.append({"list_id": f"q{i}",
                    "scores": torch.rand(n, generator=g, dtype=torch.float64),
                    "relevance": torch.randint(0, 3, (n,), generator=g).double(),
                    "groups": torch.randint(0, G, (n,), generator=g)})
    return out


def pad(lists, G=None):
    B, N = len(lists), max(len(d["scores"]) for d in lists)
    s = torch.zeros(B, N, dtype=torch.float64)
    r = torch.zeros(B, N, dtype=torch.float64)
    gr = torch.full((B, N), -1, dtype=torch.long)
    m = torch.zeros(B, N, dtype=torch.bool)
    for b, d in enumerate(lists):
        n = len(d["scores"])
        s[b, :n], r[b, :n], gr[b, :n], m[b, :n] = d["scores"], d["relevance"], d["groups"], True
    return s, r, gr, m


def direct_mean(lists, fn, pick, **kw):
    """Independent computation: one list at a time (1-D inputs), mean over the lists where the entry is valid."""
    vals = []
    for d in lists:
        v, ok = fn(d["scores"], d["relevance"], d["groups"], num_groups=2, return_valid=True, **kw)
        if bool(pick(ok)):
            vals.append(float(pick(v)))
    return (sum(vals) / len(vals) if vals else 0.0), len(vals)
