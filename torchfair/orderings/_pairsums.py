"""Pair sums over items ordered by relevance in ``O(B N H log N)``, without forming pairs.

Shared by :meth:`torchfair.orderings.base.OrderedBatch.contract` (pair counts that do not depend on the ordering,
:func:`contract_all_pairs`) and :class:`torchfair.orderings.hard.HardOrderedBatch`, with the pair weight they read,
:class:`LevelPairWeight`.  A leaf module: it imports nothing from the orderings, so ``base`` and ``hard`` both
import it without an import cycle (``LevelPairWeight`` stays importable from :mod:`torchfair.orderings.base`,
``contract_all_pairs`` from :mod:`torchfair.orderings.hard`)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import kernels as _kernels
from .._validation import check_choice, work_dtype
from ..kernels import BACKENDS

__all__ = ["LevelPairWeight", "contract_all_pairs"]

#: the compiled kernel module ``family`` when ``backend`` picks it for ``tensors`` (:func:`torchfair.kernels.pick`)
kernels = _kernels.pick


class LevelPairWeight:
    """A pair weight that depends only on how the relevance of ``i`` compares with that of ``j``:
    ``w[i, j] = greater 1(r_i > r_j) + equal 1(r_i = r_j) + less 1(r_i < r_j)``.

    Called as ``w(start, stop)`` it gives the dense rows ``[B, stop - start, N]`` that
    :meth:`OrderedBatch.contract` multiplies in; its structure lets an ordering contract without forming pairs
    (:meth:`torchfair.orderings.hard.HardOrderedBatch.contract` sweeps the ranking once per relevance level).
    """

    def __init__(self, relevance: Tensor, greater: float = 1.0, equal: float = 0.0, less: float = 0.0):
        self.relevance, self.greater, self.equal, self.less = relevance, float(greater), float(equal), float(less)

    def __call__(self, start: int, stop: int) -> Tensor:
        rel = self.relevance
        ri, rj = rel[:, start:stop, None], rel[:, None, :]
        g, e, l = (torch.full((), x, dtype=rel.dtype, device=rel.device) for x in (self.greater, self.equal, self.less))
        rest = torch.where(ri < rj, l, e) if self.less != self.equal else e
        return torch.where(ri > rj, g, rest)

    def level_matrix(self, levels: Tensor) -> Tensor:
        """``[L, L]`` weights between sorted distinct relevance ``levels``: entry ``[a, b]`` is ``w`` for
        ``r_i = levels[a]``, ``r_j = levels[b]``."""
        a = torch.arange(levels.shape[0], device=levels.device)
        gt, eq = (a[:, None] > a[None, :]), (a[:, None] == a[None, :])
        lt = ~(gt | eq)
        return self.greater * gt.to(levels.dtype) + self.equal * eq.to(levels.dtype) + self.less * lt.to(levels.dtype)


# ---------------------------------------------------------------------------------------------- sorted sweeps
def contract_all_pairs(right: Tensor, mask: Tensor, pw: Optional[LevelPairWeight], backend: str = "auto"
                       ) -> Tensor:
    """``out[b, i, h] = sum_{j != i real} w[b, i, j] right[b, j, h]`` (``which="one"`` of
    :meth:`OrderedBatch.contract`: pair counts that do not depend on the ordering) in ``O(B N H log N)``.
    ``backend``: see :data:`BACKENDS` (the compiled kernel sums per relevance rank, ``O(B N H)`` after a radix
    sort)."""
    if pw is not None:
        K = kernels("pairs", backend, right, mask, pw.relevance)
        if K is not None:
            return K.all_pairs(right, mask, pw)
    else:
        check_choice(backend, "backend", BACKENDS)
    acc = _accumulation_dtype(right)
    maskf = mask.to(acc)[..., None]
    V = right.to(acc) * maskf
    total = V.sum(1, keepdim=True)
    if pw is None:
        out = total - V
    else:
        rank = _dense_rank(pw.relevance.to(work_dtype(pw.relevance.dtype)), mask)
        seq = torch.sort(rank, dim=-1, stable=True).indices
        Vs = _take(V, seq)
        C = _prefix(Vs)
        st, en = _segments(rank.gather(-1, seq))
        lt = _at(C, st)
        eq = _at(C, en) - lt - Vs
        out = _untake(_combine(pw, lt, eq, total - Vs - lt - eq), seq)
    return (out * maskf).to(right.dtype)


def _combine(pw: LevelPairWeight, less_rel: Tensor, equal_rel: Tensor, more_rel: Tensor) -> Tensor:
    """``w[i, j] = greater 1(r_i > r_j) + equal 1(r_i = r_j) + less 1(r_i < r_j)`` applied to the sums over the
    partners ``j`` less relevant, equally relevant and more relevant than ``i``."""
    out = pw.greater * less_rel
    if pw.equal:
        out = out + pw.equal * equal_rel
    if pw.less:
        out = out + pw.less * more_rel
    return out


def _accumulation_dtype(x: Tensor) -> torch.dtype:
    """float64 for the prefix sums of the sweeps (differences of prefix sums over long lists), except on devices
    without float64 (Apple MPS)."""
    return x.dtype if x.device.type == "mps" else torch.float64


def _take(x: Tensor, idx: Tensor) -> Tensor:
    """``x[b, idx[b, k]]`` for ``x`` ``[B, N, H]`` and ``idx`` ``[B, N]``."""
    return x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))


def _untake(x: Tensor, idx: Tensor) -> Tensor:
    """Inverse of :func:`_take` for a permutation ``idx``."""
    return torch.empty_like(x).scatter_(1, idx[..., None].expand(-1, -1, x.shape[-1]), x)


def _prefix(x: Tensor) -> Tensor:
    """``C[b, k] = sum_{q < k} x[b, q]``, ``[B, N + 1, H]``."""
    return torch.nn.functional.pad(x.cumsum(1), (0, 0, 1, 0))


def _at(C: Tensor, idx: Tensor) -> Tensor:
    """``C[b, idx[b, k]]`` for prefix sums ``C`` ``[B, N + 1, H]`` and indices ``[B, N]`` in ``0..N``."""
    return _take(C, idx)


def _segments(*keys: Tensor):
    """Start and end (exclusive) index of the run of equal ``keys`` each position lies in, ``[B, N]`` each."""
    B, N = keys[0].shape
    ar = torch.arange(N, device=keys[0].device).expand(B, N)
    new = torch.zeros(B, N, dtype=torch.bool, device=ar.device)
    new[:, 0] = True
    for k in keys:
        new[:, 1:] |= k[:, 1:] != k[:, :-1]
    start = torch.where(new, ar, torch.zeros_like(ar)).cummax(-1).values
    last = torch.ones_like(new)
    last[:, :-1] = new[:, 1:]
    end = torch.where(last, ar, torch.full_like(ar, N - 1)).flip(-1).cummin(-1).values.flip(-1) + 1
    return start, end


def _dense_rank(rel: Tensor, mask: Tensor) -> Tensor:
    """``[B, N]`` int64 dense rank of the relevance within each list (0 = least relevant; padded items rank above
    every real item, which never matters: they contribute nothing and are masked)."""
    key = torch.where(mask, rel, torch.full_like(rel, float("inf")))
    srt, idx = torch.sort(key, dim=-1)
    new = torch.ones_like(srt, dtype=torch.long)
    new[:, 0] = 0
    new[:, 1:] = (srt[:, 1:] != srt[:, :-1]).long()
    return torch.empty_like(idx).scatter_(-1, idx, new.cumsum(-1))


def _rank_bits(rank: Tensor, N: int) -> int:
    """Bits of the largest rank: read from the data on the CPU (free there), else (and under ``torch.compile``,
    where the read would break the graph) from ``N`` so that accelerators never wait for the host."""
    read = rank.device.type == "cpu" and rank.numel() and not torch.compiler.is_compiling()
    top = int(rank.max()) if read else N - 1
    return max(1, int(top).bit_length())


def _less_before(rank: Tensor, V: Tensor, nbits: int):
    """For a sequence of items with int ranks ``[B, N]`` and values ``V [B, N, H]``:
    ``less[b, p] = sum_{q < p, rank_q < rank_p} V[b, q]`` and ``equal[b, p] = sum_{q < p, rank_q = rank_p} V[b, q]``.

    A wavelet sweep over the bits of the rank, most significant first: the items are kept ordered by (bits seen
    so far, sequence index); at each bit, an item with bit 1 collects the items of its run with bit 0 that precede
    it, then every run is split stably by the bit (prefix counts, no sort).  ``O(B N H nbits)``."""
    B, N = rank.shape
    H = V.shape[-1]
    dev = rank.device
    ar = torch.arange(N, device=dev).expand(B, N)
    cur = ar  # sequence index of the item in each slot
    r, v = rank, V
    less = torch.zeros_like(V)
    for bit in range(nbits - 1, -1, -1):
        st, en = _segments(r >> (bit + 1))  # runs of equal higher bits
        one = ((r >> bit) & 1).bool()
        zero = ~one
        Cz = _prefix(torch.where(zero[..., None], v, torch.zeros((), dtype=v.dtype, device=dev)))
        got = torch.where(one[..., None], Cz[:, :N] - _at(Cz, st), torch.zeros((), dtype=v.dtype, device=dev))
        less.scatter_add_(1, cur[..., None].expand(B, N, H), got)
        zc = torch.nn.functional.pad(zero.long().cumsum(-1), (1, 0))
        zst = zc.gather(-1, st)
        zb = zc[:, :N] - zst  # zeros before the slot in its run
        dest = torch.where(zero, st + zb, ar + (zc.gather(-1, en) - zst) - zb)
        cur = torch.empty_like(cur).scatter_(-1, dest, cur)
        r, v = rank.gather(-1, cur), _take(V, cur)
    st, _ = _segments(r)
    C = _prefix(v)
    equal = _untake(C[:, :N] - _at(C, st), cur)
    return less, equal
