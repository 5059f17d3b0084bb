"""Shared cases of the re-ranker tests (tests/rerank/test_*.py): random batches with ties, unknown groups and
padding, the real items of a list, the padding check every re-ranker's output must pass."""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, settings

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _batch(gen, B, N, G, *, ties=True, unknown=True, pad=True):
    """Random scores (with ties when asked), group ids in [-1, G) or [0, G), a mask with at least one real item."""
    s = torch.randint(0, 5, (B, N), generator=gen).double() if ties else torch.randn(B, N, generator=gen).double()
    g = torch.randint(-1 if unknown else 0, G, (B, N), generator=gen)
    mask = torch.rand(B, N, generator=gen) < (0.8 if pad else 2.0)
    mask[:, 0] = True
    return s, g, mask


def _real(b, s, g, mask):
    """The real items of list b: (index list, scores, groups) as Python lists."""
    idx = [i for i in range(s.shape[-1]) if bool(mask[b, i])]
    return idx, [float(s[b, i]) for i in idx], [int(g[b, i]) for i in idx]


def _check_padding(out, mask):
    """Real items at positions < n (a permutation of them), padded items after them in index order."""
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        assert sorted(out.ranking[b, :n].tolist()) == torch.nonzero(mask[b]).flatten().tolist()
        assert out.ranking[b, n:].tolist() == torch.nonzero(~mask[b]).flatten().tolist()


def _is_one_group(gb):
    return len({x for x in gb if x >= 0}) < 2
