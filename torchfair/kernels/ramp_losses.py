"""Compiled (numba) fused passes of the fairness losses on :class:`~torchfair.orderings.RampRank`: one walk per list
for the forward and one for the backward of ``reducer(measure(RampRank(scores)))``, for the DIPS loss
(``gap_abs`` / ``gap_square``), the exposure-misallocation loss (``l1`` / ``l2sq``, targets ``ee`` / ``ea`` /
``ea-dp``) and the pairwise-accuracy-gap loss (``inter`` / ``intra`` / ``both``), with RBP browsing
``F(k) = gamma**k`` where the measure has one.

Arrays in, arrays out; nothing of torchfair above :mod:`torchfair.kernels` is imported.  These are a second
*implementation* of what :mod:`torchfair.orderings.ramp` (the ordering: temperature scale, sort, window bounds,
expected positions, the level-weighted ramp contraction), :mod:`torchfair.metrics` (the measures' group sums,
normalisers, validity and rounding clamp) and :mod:`torchfair.losses.transform` (the list reducers) compute with
torch ops; that torch path is the reference (``tests/kernels/test_ramp_losses.py`` checks values and gradients
equal in float64 to 1e-10, and gradcheck).  The ordering's compiled pieces are the windows family's own
(:func:`torchfair.kernels.windows._level_list`, the scale passes), called from here.

Per list ``b`` (real items only; padded items read nothing and get 0):

* ``fac_b = 1 / (4 tau_b)`` with ``tau_b = temperature * max(std, rel_min_scale * mean|s|, min_scale)`` (or
  ``temperature`` for ``scale="none"``), ``u_i = s_i fac_b`` (float64, clamped to ``+-max/16``), ``off_i = u_i -
  min u``, the real items sorted by score, window bounds ``hi`` / ``lo`` of ``|off_j - off_i| < 1/2``;
* expected positions ``pos_i = sum_{j != i} ramp(u_j - u_i)`` and exposure ``e_i = gamma**pos_i``;
* the measure's sums and the reducer's value; the backward reverses each step (the ramp's slope inside the
  windows, ``d e / d pos = log(gamma) e``, ``d off / d s = fac``; the temperature and the window minimum carry no
  gradient, as in the torch path).
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch
from torch import Tensor

from ._threads import np_view, run as _run
from .sorting import _HASH_SLOTS, _radix, _rank_row, _ukey
from .windows import _level_cols, _level_list, _ordered_bounds_list, _scale_rows, _scale_rows32

__all__ = ["dips_forward", "dips_backward", "misallocation_forward", "misallocation_backward",
           "accuracy_forward", "accuracy_backward", "warmup"]

_BIG = np.finfo(np.float64).max / 16


# ---------------------------------------------------------------------------------------------- the ordering
@numba.njit(cache=True, nogil=True)
def _order_list(s, sbits, swide, m, fac, order, off, hi, lo, ks, keys, k2, idx, i2, cnt):  # pragma: no cover
    """RampRank's window of one list: ``order`` (real items by ascending score, padded last: a stable radix sort of
    the keys of ``s``, whose bits are ``sbits``), ``off``, ``hi``, ``lo``; returns the number of real items.
    ``ks`` ``[N]`` float64, ``keys`` / ``k2`` ``[N]`` uint64, ``idx`` / ``i2`` ``[N]`` int64, ``cnt`` ``[8, 256]``:
    scratch."""
    N = s.shape[0]
    top = np.uint64(0xFFFFFFFFFFFFFFFF) if swide else np.uint64(0xFFFFFFFF)
    n = 0
    for j in range(N):
        if m[j]:
            n += 1
            keys[j] = _ukey(sbits[j], swide)
        else:
            keys[j] = top  # above every finite score: padded items last
        idx[j] = j
    _radix(keys, idx, k2, i2, N, 8 if swide else 4, cnt)
    for k in range(N):
        order[k] = idx[k]
    lo_u = 0.0
    if n > 0:
        lo_u = min(max(np.float64(s[idx[0]]) * fac, -_BIG), _BIG)
    for j in range(N):
        if m[j]:
            u = min(max(np.float64(s[j]) * fac, -_BIG), _BIG)
            off[j] = u - lo_u
        else:
            off[j] = 0.0
    _ordered_bounds_list(off, m, order, hi, lo, ks)
    return n


@numba.njit(cache=True, nogil=True)
def _codes_list(s, m, r, ids, G, validate, codes):  # pragma: no cover - compiled
    """One list's group codes (``codes [N]``: the id of a real item of a known group, clamped to ``G - 1``, else
    -1, as :func:`torchfair._validation.group_codes`) and, when ``validate``, the value checks of
    :func:`torchfair._validation.prepare` on its real items (finite score, finite relevance ``>= 0``, id in
    ``[-1, G)``); returns the number of real items, or -1 when a check fails."""
    n = 0
    bad = False
    for j in range(s.shape[0]):
        if m[j]:
            n += 1
            gid = np.int64(ids[j])
            if validate:
                x = np.float64(s[j])
                v = np.float64(r[j])
                if not (abs(x) < np.inf and v >= 0.0 and v < np.inf and gid >= -1 and gid < G):
                    bad = True
            codes[j] = min(gid, G - 1) if gid >= 0 else -1
        else:
            codes[j] = -1
    return -1 if bad else n


@numba.njit(cache=True, nogil=True)
def _positions_list(m, off, order, hi, lo, pos, wpos, Dx, Du):  # pragma: no cover - compiled
    """Expected positions of one list (``windows._positions_rows``) and the window counts ``wpos``."""
    N = m.shape[0]
    Dx[0] = 0.0
    Du[0] = 0.0
    for k in range(N):
        it = order[k]
        if m[it]:
            Dx[k + 1] = Dx[k] + 1.0
            Du[k + 1] = Du[k] + off[it]
        else:
            Dx[k + 1] = Dx[k]
            Du[k + 1] = Du[k]
    tot = Dx[N]
    for i in range(N):
        if m[i]:
            a = hi[i]
            c = lo[i]
            wv = Dx[a] - Dx[c]
            wpos[i] = wv
            pos[i] = (tot - Dx[a]) + (0.5 - off[i]) * wv + (Du[a] - Du[c]) - 0.5
        else:
            wpos[i] = 0.0
            pos[i] = 0.0


@numba.njit(cache=True, nogil=True)
def _positions_back_list(G, m, order, hi, lo, wpos, dOFF, Dg):  # pragma: no cover - compiled
    """Adds the gradient of the positions (``G [N]``) to ``dOFF`` (``windows._positions_back_rows``)."""
    N = m.shape[0]
    Dg[0] = 0.0
    for k in range(N):
        it = order[k]
        Dg[k + 1] = Dg[k] + (G[it] if m[it] else 0.0)
    for i in range(N):
        if m[i]:
            dOFF[i] += (Dg[hi[i]] - Dg[lo[i]]) - G[i] * wpos[i]


@numba.njit(cache=True, nogil=True)
def _dense_levels(rbits, rwide, mask, b, lvl, keys, k2, idx, i2, cnt, rank, hkey, hslot):  # pragma: no cover
    """Dense ranks of list ``b``'s relevance among its real items (the sorting family's hashed ranks; 0 = the least
    relevant, padded items the top level, whose sums they do not enter); returns the number of levels (>= 1)."""
    L = _rank_row(rbits, rwide, mask, b, keys, idx, k2, i2, cnt, rank, hkey, hslot)
    L = max(L, 1)
    for j in range(rank.shape[0]):
        lvl[j] = min(rank[j], L - 1)
    return L


@numba.njit(cache=True, nogil=True)
def _scale_fac(s, mask, temperature, scaled, min_scale, rel_min_scale, f32, FAC, b0, b1):  # pragma: no cover
    """``FAC[b] = 1 / (4 tau_b)`` for the lists ``[b0, b1)`` (the scale passes of the windows family)."""
    if scaled:
        out = np.empty((s.shape[0], 1))
        if f32:
            _scale_rows32(s, mask, min_scale, rel_min_scale, out, b0, b1)
        else:
            _scale_rows(s, mask, min_scale, rel_min_scale, out, b0, b1)
        for b in range(b0, b1):
            sc = out[b, 0]
            if f32:
                sc = np.float64(np.float32(sc))
                FAC[b] = 0.25 / np.float64(np.float32(temperature * sc))
            else:
                FAC[b] = 0.25 / (temperature * sc)
    else:
        for b in range(b0, b1):
            FAC[b] = 0.25 / temperature


@numba.njit(cache=True, nogil=True)
def _start_rows(s, mask, r, ids, G, validate, temperature, scaled, min_scale, rel_min_scale, f32, CODES, NREAL, FAC,
                b0, b1):  # pragma: no cover - compiled
    """What every forward walk starts from, for the lists ``[b0, b1)``: the group codes and real-item counts of
    :func:`_codes_list` (``NREAL[b] = -1``: a value check failed) and the temperature factors (:func:`_scale_fac`)."""
    for b in range(b0, b1):
        NREAL[b] = _codes_list(s[b], mask[b], r[b], ids[b], G, validate, CODES[b])
    _scale_fac(s, mask, temperature, scaled, min_scale, rel_min_scale, f32, FAC, b0, b1)


@numba.njit(cache=True, nogil=True)
def _ds_list(s, m, fac, dOFF, dS):  # pragma: no cover - compiled
    """``dS = dOFF fac`` on the real items whose ``u`` was not clamped, else 0."""
    for j in range(s.shape[0]):
        if m[j] and abs(np.float64(s[j]) * fac) <= _BIG:
            dS[j] = dOFF[j] * fac
        else:
            dS[j] = 0.0


# ---------------------------------------------------------------------------------------------- DIPS
@numba.njit(cache=True, nogil=True)
def _clamp_round(x, low, high, tol):  # pragma: no cover - compiled
    """``clamp_rounding``: ``x`` clamped to ``[low, high]`` when it is outside by at most ``tol``."""
    if x < low and low - x <= tol:
        return low
    if x > high and x - high <= tol:
        return high
    return x


@numba.njit(cache=True, nogil=True)
def _sort_scratch(N):  # pragma: no cover - compiled
    """One list's scratch of the walks: sort keys and radix buffers, dense-level ranks and their hash table."""
    return (np.empty(N), np.empty(N, np.uint64), np.empty(N, np.uint64), np.empty(N, np.int64),
            np.empty(N, np.int64), np.empty((8, 256), np.int64), np.zeros(N, np.int64),
            np.empty(_HASH_SLOTS, np.uint64), np.empty(_HASH_SLOTS, np.int64))


@numba.njit(cache=True, nogil=True)
def _walk_list(b, s, sbits, swide, mask, NREAL, FAC, ORDER, OFF, HI, LO, VAL, OK, scratch):  # pragma: no cover
    """The ordering's window of list ``b`` (:func:`_order_list`), or False (``VAL[b] = 0``, ``OK[b] = False``) when
    its value checks failed (:func:`_start_rows`)."""
    if NREAL[b] < 0:
        VAL[b] = 0.0
        OK[b] = False
        return False
    ks, keys, k2, idx, i2, cnt = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4], scratch[5]
    _order_list(s[b], sbits[b], swide, mask[b], FAC[b], ORDER[b], OFF[b], HI[b], LO[b], ks, keys, k2, idx, i2, cnt)
    return True


@numba.njit(cache=True, nogil=True)
def _positions_scratch(N):  # pragma: no cover - compiled
    """The expected positions ``[N]`` of one list and the prefix sums ``[N + 1]`` they are read from."""
    return np.empty(N), np.empty(N + 1), np.empty(N + 1)


@numba.njit(cache=True, nogil=True)
def _dips_rows(s, sbits, swide, mask, r, rbits, rwide, ids, G, validate, temperature, scaled, min_scale,
               rel_min_scale, f32, cum, log_gamma, tie, square, tol, CODES, NREAL, FAC, ORDER, HI, LO, OFF, LVL, NL,
               WPOS, E, X, WX, M, C, VAL, OK, b0, b1):  # pragma: no cover - compiled
    N = s.shape[1]
    _start_rows(s, mask, r, ids, G, validate, temperature, scaled, min_scale, rel_min_scale, f32, CODES, NREAL, FAC,
                b0, b1)
    codes = CODES
    sc = _sort_scratch(N)
    ks, keys, k2, idx, i2, cnt, rank, hkey, hslot = sc
    pos, Dx, Du = _positions_scratch(N)
    D = np.empty((2, N + 1, 1))
    OUT = np.empty((N, G))
    for b in range(b0, b1):
        m = mask[b]
        if not _walk_list(b, s, sbits, swide, mask, NREAL, FAC, ORDER, OFF, HI, LO, VAL, OK, sc):
            continue
        _positions_list(m, OFF[b], ORDER[b], HI[b], LO[b], pos, WPOS[b], Dx, Du)
        L = _dense_levels(rbits, rwide, mask, b, LVL[b], keys, k2, idx, i2, cnt, rank, hkey, hslot)
        NL[b] = L
        if L > D.shape[2]:
            D = np.empty((2, N + 1, L))
        sizes = np.zeros(G)
        for j in range(N):
            e = math.exp(pos[j] * log_gamma) if m[j] else 0.0
            E[b, j] = e
            cj = codes[b, j]
            for h in range(G):
                X[b, j, h] = e if (m[j] and cj == h) else 0.0
            if m[j] and cj >= 0:
                sizes[cj] += 1.0
        # the other groups' sums of each item only: the gap reducers read M_gh for g != h
        _level_cols(X[b], OFF[b], LVL[b], ORDER[b], HI[b], LO[b], L, False, 1.0, tie, 0.0, D, WX[b], OUT, codes[b], 1)
        S = np.zeros((G, G))
        for i in range(N):
            ci = codes[b, i]
            if m[i] and ci >= 0:
                for h in range(G):
                    S[ci, h] += OUT[i, h] - 0.5 * tie * X[b, i, h]
        for g in range(G):
            for h in range(G):
                a = sizes[g] * cum[int(sizes[h])]
                a2 = sizes[h] * cum[int(sizes[g])]
                c = max(a, a2)
                C[b, g, h] = c
                if c > 0:
                    M[b, g, h] = _clamp_round(S[g, h] / c, 0.0, 1.0, tol)
                else:
                    M[b, g, h] = 0.0
        best = 0.0
        ok = False
        for g in range(G):
            for h in range(G):
                if g != h and C[b, g, h] > 0 and C[b, h, g] > 0:
                    ok = True
                    d = M[b, g, h] - M[b, h, g]
                    v = d * d if square else abs(d)
                    if v > best:
                        best = v
        VAL[b] = best
        OK[b] = ok


@numba.njit(cache=True, nogil=True)
def _dips_back_rows(GL, s, mask, codes, FAC, log_gamma, tie, square, G, ORDER, HI, LO, OFF, LVL, NL, WPOS, E, X,
                    WX, M, C, VAL, DS, b0, b1):  # pragma: no cover - compiled
    N = s.shape[1]
    D = np.empty((2, N + 1, 1))
    GS = np.empty((N, G))
    WG = np.empty((N, G))
    T = np.empty((N, G))
    Dg = np.empty(N + 1)
    dOFF = np.empty(N)
    dpos = np.empty(N)
    for b in range(b0, b1):
        m = mask[b]
        gl = GL[b]
        best = VAL[b]
        if gl == 0.0 or not best > 0.0:  # the amax of |gap| (or gap**2) at 0: zero gradient
            for j in range(N):
                DS[b, j] = 0.0
            continue
        # amax's gradient is shared by the entries equal to the maximum (the reducer's flattened [G, G])
        cnt = 0
        for g in range(G):
            for h in range(G):
                if g != h and C[b, g, h] > 0 and C[b, h, g] > 0:
                    d = M[b, g, h] - M[b, h, g]
                    v = d * d if square else abs(d)
                    if v == best:
                        cnt += 1
        dM = np.zeros((G, G))
        for g in range(G):
            for h in range(G):
                if g != h and C[b, g, h] > 0 and C[b, h, g] > 0:
                    d = M[b, g, h] - M[b, h, g]
                    v = d * d if square else abs(d)
                    if v == best:
                        dd = gl / cnt * (2.0 * d if square else (1.0 if d > 0 else (-1.0 if d < 0 else 0.0)))
                        dM[g, h] += dd
                        dM[h, g] -= dd
        dSgh = np.zeros((G, G))
        for g in range(G):
            for h in range(G):
                if C[b, g, h] > 0:
                    dSgh[g, h] = dM[g, h] / C[b, g, h]
        for i in range(N):
            ci = codes[b, i]
            for h in range(G):
                GS[i, h] = dSgh[ci, h] if (m[i] and ci >= 0) else 0.0
        L = NL[b]
        if L > D.shape[2]:
            D = np.empty((2, N + 1, L))
        # an item's own column only: X_jh and T_jh are read at h = c_j
        _level_cols(GS, OFF[b], LVL[b], ORDER[b], HI[b], LO[b], L, True, 0.0, tie, 1.0, D, WG, T, codes[b], 2)
        for j in range(N):
            acc_e = 0.0
            acc_off = 0.0
            cj = codes[b, j]
            for h in range(G):
                acc_off += X[b, j, h] * WG[j, h] - GS[j, h] * WX[b, j, h]
            if m[j] and cj >= 0:
                acc_e = T[j, cj] - 0.5 * tie * GS[j, cj]
            dOFF[j] = acc_off
            dpos[j] = acc_e * log_gamma * E[b, j] if m[j] else 0.0
        _positions_back_list(dpos, m, ORDER[b], HI[b], LO[b], WPOS[b], dOFF, Dg)
        _ds_list(s[b], m, FAC[b], dOFF, DS[b])


def _head(s: Tensor, mask: Tensor, r: Tensor, groups: Tensor, G: int, validate: bool, ordering):
    """The leading arguments every forward walk takes, ``(s, sbits, swide, mask, r, rbits, rwide, ids, G, validate,
    temperature, scaled, min_scale, rel_min_scale, f32)``, and its float tolerance of the rounding clamp: numpy views
    of the tensors (``r`` in the dtype of ``s``, ``groups`` integer ids ``[B, N]``) without copies where they are
    contiguous already."""
    sv = np_view(s)
    rv = np_view(r)
    wide = sv.dtype == np.float64
    ids = np_view(groups)
    head = (sv, sv.view(np.int64 if wide else np.int32), wide, np_view(mask), rv,
            rv.view(np.int64 if rv.dtype == np.float64 else np.int32), rv.dtype == np.float64, ids, int(G),
            bool(validate)) + tuple(ordering) + (not wide,)
    return head, (1e-9 if wide else 1e-4) * 2.0


def _tail(B: int, N: int):
    """The buffers every forward walk fills: ``CODES``, ``NREAL``, ``FAC``, ``ORDER``, ``HI``, ``LO``, ``OFF``."""
    return (np.empty((B, N), np.int64), np.empty(B, np.int64), np.empty(B), np.empty((B, N), np.int64),
            np.empty((B, N), np.int64), np.empty((B, N), np.int64), np.empty((B, N)))


def _result(NREAL: np.ndarray, validate: bool, VAL: np.ndarray, OK: np.ndarray, saved):
    """``(value, valid, saved)`` of a forward walk, or None when a value check failed (``validate``) or no list
    holds a real item: the caller's torch path then names the error or gives the empty batch's value."""
    if NREAL.max() <= 0 or (validate and NREAL.min() < 0):
        return None
    return torch.from_numpy(VAL), torch.from_numpy(OK), saved


def _f64(GL) -> np.ndarray:
    """An upstream gradient ``[B]`` as a contiguous float64 array (tensor or array)."""
    if isinstance(GL, Tensor):
        GL = GL.detach().to(torch.float64).numpy()
    return np.ascontiguousarray(GL, dtype=np.float64)


def dips_forward(s: Tensor, mask: Tensor, r: Tensor, groups: Tensor, G: int, ordering, cum: np.ndarray,
                 gamma: float, tie: float, square: bool, validate: bool = False):
    """The DIPS loss's per-list value (``gap_abs``, or ``gap_square`` when ``square``) on RampRank (``ordering``:
    ``(temperature, scaled, min_scale, rel_min_scale)``) with RBP browsing ``gamma``: ``(value [B] float64,
    valid [B] bool, saved)``, or None (:func:`_result`); ``groups [B, N]`` int64 ids (-1: unknown), ``cum`` the
    cumulative browsing weights ``sum_{k < n} F(k)`` for ``n = 0..N`` (float64); ``saved`` is what
    :func:`dips_backward` reads."""
    B, N = s.shape
    head, tol = _head(s, mask, r, groups, G, validate, ordering)
    tail = _tail(B, N)
    LVL, NL = np.empty((B, N), np.int64), np.empty(B, np.int64)
    WPOS, E = np.empty((B, N)), np.empty((B, N))
    X, WX = np.empty((B, N, G)), np.empty((B, N, G))
    M, C = np.empty((B, G, G)), np.empty((B, G, G))
    VAL, OK = np.empty(B), np.empty(B, np.bool_)
    _run(_dips_rows, head + (cum, math.log(gamma), float(tie), bool(square), tol) + tail + (
        LVL, NL, WPOS, E, X, WX, M, C, VAL, OK), B, N * G)
    CODES, NREAL, FAC, ORDER, HI, LO, OFF = tail
    return _result(NREAL, validate, VAL, OK, (CODES, FAC, ORDER, HI, LO, OFF, LVL, NL, WPOS, E, X, WX, M, C, VAL))


def dips_backward(GL, s: Tensor, mask: Tensor, G: int, gamma: float, tie: float, square: bool, saved) -> Tensor:
    """The gradient of :func:`dips_forward`'s value with respect to the scores for its gradient ``GL [B]``:
    ``[B, N]`` float64."""
    B, N = s.shape
    CODES, FAC, ORDER, HI, LO, OFF, LVL, NL, WPOS, E, X, WX, M, C, VAL = saved
    DS = np.empty((B, N))
    _run(_dips_back_rows, (_f64(GL), np_view(s), np_view(mask), CODES, FAC, math.log(gamma), float(tie),
                           bool(square), G, ORDER, HI, LO, OFF, LVL, NL, WPOS, E, X, WX, M, C, VAL, DS), B, N * G)
    return torch.from_numpy(DS)


def warmup() -> None:
    """Compile (or load from the disk cache) every signature the library calls: float32 and float64 scores and
    relevance, forward and backward."""
    mask = torch.tensor([[True, True, True], [True, True, False]])
    ids = torch.tensor([[0, 1, 0], [1, -1, -1]])
    cum = np.cumsum(np.concatenate([[0.0], 0.9 ** np.arange(3.0)]))
    o = (0.1, True, 0.25, 0.0)
    for dt in (torch.float32, torch.float64):
        s = torch.tensor([[0.3, 1.0, -0.2], [0.5, 0.1, 0.0]], dtype=dt)
        r = torch.tensor([[1.0, 0.0, 2.0], [1.0, 1.0, 0.0]], dtype=dt)
        g = torch.ones(2, dtype=dt)
        for validate in (False, True):
            saved = dips_forward(s, mask, r, ids, 2, o, cum, 0.9, 0.5, False, validate)[2]
            dips_backward(g, s, mask, 2, 0.9, 0.5, False, saved)
            saved = misallocation_forward(s, mask, r, ids, 2, r, o, 0.9, False, validate)[2]
            misallocation_backward(g, s, mask, 2, 0.9, False, saved)
            saved = accuracy_forward(s, mask, r, ids, 2, 1, 0, 0, o, validate)[2]
            accuracy_backward(g, s, mask, 1, 0, 0, saved)


# ---------------------------------------------------------------------------------------------- misallocation
@numba.njit(cache=True, nogil=True)
def _misallocation_rows(s, sbits, swide, mask, r, rbits, rwide, ids, G, validate, temperature, scaled, min_scale, rel_min_scale,
                        f32, T, log_gamma, square, tol, CODES, NREAL, FAC, ORDER, HI, LO, OFF, WPOS, E, EG, ES, DELTA,
                        PRES, VAL, OK, b0, b1):  # pragma: no cover - compiled
    """Per list: the ordering (:func:`_order_list`, :func:`_positions_list`), exposure ``e = gamma**pos``, the
    group shares of the targets ``T`` and of the exposure over all real items, ``delta = T_share - E_share``
    (rounding clamp to ``[-1, 1]``; 0 where either total is 0) and the reducer ``sum_g |delta_g|`` (``l1``) or
    ``sum_g delta_g**2`` (``l2sq``) over the groups present; valid when both totals are positive and two groups are
    present."""
    N = s.shape[1]
    _start_rows(s, mask, r, ids, G, validate, temperature, scaled, min_scale, rel_min_scale, f32, CODES, NREAL, FAC,
                b0, b1)
    codes = CODES
    sc = _sort_scratch(N)
    pos, Dx, Du = _positions_scratch(N)
    Tg = np.empty(G)
    for b in range(b0, b1):
        m = mask[b]
        if not _walk_list(b, s, sbits, swide, mask, NREAL, FAC, ORDER, OFF, HI, LO, VAL, OK, sc):
            continue
        _positions_list(m, OFF[b], ORDER[b], HI[b], LO[b], pos, WPOS[b], Dx, Du)
        for g in range(G):
            Tg[g] = 0.0
            EG[b, g] = 0.0
            PRES[b, g] = False
        ttot = 0.0
        etot = 0.0
        for j in range(N):
            if m[j]:
                e = math.exp(pos[j] * log_gamma)
                E[b, j] = e
                t = np.float64(T[b, j])
                ttot += t
                etot += e
                cj = codes[b, j]
                if cj >= 0:
                    Tg[cj] += t
                    EG[b, cj] += e
                    PRES[b, cj] = True
            else:
                E[b, j] = 0.0
        ES[b] = etot
        valid = ttot > 0 and etot > 0
        val = 0.0
        npres = 0
        for g in range(G):
            d = _clamp_round(Tg[g] / ttot - EG[b, g] / etot, -1.0, 1.0, tol) if valid else 0.0
            DELTA[b, g] = d
            if PRES[b, g]:
                npres += 1
                val += d * d if square else abs(d)
        VAL[b] = val
        OK[b] = valid and npres >= 2


@numba.njit(cache=True, nogil=True)
def _misallocation_back_rows(GL, s, mask, codes, FAC, log_gamma, square, G, ORDER, HI, LO, WPOS, E, EG, ES, DELTA,
                             PRES, DS, b0, b1):  # pragma: no cover - compiled
    N = s.shape[1]
    Dg = np.empty(N + 1)
    dOFF = np.empty(N)
    dpos = np.empty(N)
    dEg = np.empty(G)
    for b in range(b0, b1):
        m = mask[b]
        gl = GL[b]
        etot = ES[b]
        if gl == 0.0 or not etot > 0.0:
            for j in range(N):
                DS[b, j] = 0.0
            continue
        # d value / d E_share_g = -(d value / d delta_g); E_share_g = E_g / sum_j e_j
        dtot = 0.0
        for g in range(G):
            d = DELTA[b, g]
            dd = 0.0
            if PRES[b, g]:
                dd = gl * (2.0 * d if square else (1.0 if d > 0 else (-1.0 if d < 0 else 0.0)))
            dEg[g] = -dd / etot
            dtot += dd * EG[b, g] / (etot * etot)
        for j in range(N):
            dOFF[j] = 0.0
            if m[j]:
                cj = codes[b, j]
                de = dtot + (dEg[cj] if cj >= 0 else 0.0)
                dpos[j] = de * log_gamma * E[b, j]
            else:
                dpos[j] = 0.0
        _positions_back_list(dpos, m, ORDER[b], HI[b], LO[b], WPOS[b], dOFF, Dg)
        _ds_list(s[b], m, FAC[b], dOFF, DS[b])


def misallocation_forward(s: Tensor, mask: Tensor, r: Tensor, groups: Tensor, G: int, targets: Tensor, ordering,
                          gamma: float, square: bool, validate: bool = False):
    """The exposure-misallocation loss's per-list value (``l1``, or ``l2sq`` when ``square``) on RampRank with RBP
    browsing ``gamma``: ``(value [B] float64, valid [B] bool, saved)`` or None; ``targets [B, N]`` the per-item
    target quotas (the measure's own: ideal exposure, relevance or the mask), ``r`` the relevance (its checks
    only), the other arguments as in :func:`dips_forward`."""
    B, N = s.shape
    head, tol = _head(s, mask, r, groups, G, validate, ordering)
    tail = _tail(B, N)
    WPOS, E = np.empty((B, N)), np.empty((B, N))
    EG, DELTA, PRES = np.empty((B, G)), np.empty((B, G)), np.empty((B, G), np.bool_)
    ES, VAL, OK = np.empty(B), np.empty(B), np.empty(B, np.bool_)
    T = targets.detach().to(torch.float64).contiguous().numpy()
    _run(_misallocation_rows, head + (T, math.log(gamma), bool(square), tol) + tail + (
        WPOS, E, EG, ES, DELTA, PRES, VAL, OK), B, N)
    CODES, NREAL, FAC, ORDER, HI, LO, OFF = tail
    return _result(NREAL, validate, VAL, OK, (CODES, FAC, ORDER, HI, LO, WPOS, E, EG, ES, DELTA, PRES))


def misallocation_backward(GL, s: Tensor, mask: Tensor, G: int, gamma: float, square: bool, saved) -> Tensor:
    """The gradient of :func:`misallocation_forward`'s value with respect to the scores: ``[B, N]`` float64."""
    B, N = s.shape
    CODES, FAC, ORDER, HI, LO, WPOS, E, EG, ES, DELTA, PRES = saved
    DS = np.empty((B, N))
    _run(_misallocation_back_rows, (_f64(GL), np_view(s), np_view(mask), CODES, FAC, math.log(gamma), bool(square),
                                    G, ORDER, HI, LO, WPOS, E, EG, ES, DELTA, PRES, DS), B, N)
    return torch.from_numpy(DS)


# ---------------------------------------------------------------------------------------------- pairwise accuracy
@numba.njit(cache=True, nogil=True)
def _accuracy_rows(s, sbits, swide, mask, r, rbits, rwide, ids, G, validate, temperature, scaled, min_scale,
                   rel_min_scale, f32, p, q, which, tol, CODES, NREAL, FAC, ORDER, HI, LO, OFF, LVL, NL, X, WX, A, DEN,
                   VAL, OK, b0, b1):  # pragma: no cover - compiled
    """Per list: the ordering's window, dense relevance levels, the strict-level contraction ``err[g, h] =
    sum_{i in g} sum_{j in h, r_i > r_j} ramp(u_j - u_i)`` for the groups ``g, h`` in ``(p, q)`` (columns 0 / 1:
    protected / reference), the pair counts ``den[g, h]`` (the same pairs, ordering-free), ``A = 1 - err / den``
    (rounding clamp to ``[0, 1]``; 0 where ``den = 0``) and the reducer: ``which`` 0 ``|A_qp - A_pq|`` (inter), 1
    ``|A_qq - A_pp|`` (intra), 2 their sum over the defined ones (both)."""
    N = s.shape[1]
    _start_rows(s, mask, r, ids, G, validate, temperature, scaled, min_scale, rel_min_scale, f32, CODES, NREAL, FAC,
                b0, b1)
    codes = CODES
    sc = _sort_scratch(N)
    ks, keys, k2, idx, i2, cnt, rank, hkey, hslot = sc
    D = np.empty((2, N + 1, 1))
    OUT = np.empty((N, 2))
    col = np.empty(N, np.int64)
    count = np.zeros((N + 1, 2))
    fwd_cols = 1 if which == 0 else (2 if which == 1 else 0)  # inter reads err[g, h] for g != h, intra g == h
    for b in range(b0, b1):
        m = mask[b]
        if not _walk_list(b, s, sbits, swide, mask, NREAL, FAC, ORDER, OFF, HI, LO, VAL, OK, sc):
            continue
        L = _dense_levels(rbits, rwide, mask, b, LVL[b], keys, k2, idx, i2, cnt, rank, hkey, hslot)
        NL[b] = L
        if L > D.shape[2]:
            D = np.empty((2, N + 1, L))
        for l in range(L + 1):
            count[l, 0] = 0.0
            count[l, 1] = 0.0
        for j in range(N):
            cj = codes[b, j]
            x0 = 1.0 if (m[j] and cj == p) else 0.0
            x1 = 1.0 if (m[j] and cj == q) else 0.0
            X[b, j, 0] = x0
            X[b, j, 1] = x1
            col[j] = 0 if x0 > 0 else (1 if x1 > 0 else -1)
            if m[j]:
                count[LVL[b, j] + 1, 0] += x0
                count[LVL[b, j] + 1, 1] += x1
        for l in range(L):  # count[l + 1] = the items of each group at levels <= l
            count[l + 1, 0] += count[l, 0]
            count[l + 1, 1] += count[l, 1]
        # partners of a strictly lower level only (greater 1, equal 0, less 0): no self pair
        _level_cols(X[b], OFF[b], LVL[b], ORDER[b], HI[b], LO[b], L, False, 1.0, 0.0, 0.0, D, WX[b], OUT, col, fwd_cols)
        err = np.zeros((2, 2))
        den = np.zeros((2, 2))
        for i in range(N):
            if m[i]:
                ci = codes[b, i]
                g = 0 if ci == p else (1 if ci == q else -1)
                if g >= 0:
                    li = LVL[b, i]
                    for h in range(2):
                        err[g, h] += OUT[i, h]
                        den[g, h] += count[li, h]
        for g in range(2):
            for h in range(2):
                DEN[b, g, h] = den[g, h]
                if den[g, h] > 0:
                    A[b, g, h] = _clamp_round(1.0 - err[g, h] / den[g, h], 0.0, 1.0, tol)
                else:
                    A[b, g, h] = 0.0
        v_inter = DEN[b, 1, 0] > 0 and DEN[b, 0, 1] > 0
        v_intra = DEN[b, 1, 1] > 0 and DEN[b, 0, 0] > 0
        inter = abs(A[b, 1, 0] - A[b, 0, 1]) if v_inter else 0.0
        intra = abs(A[b, 1, 1] - A[b, 0, 0]) if v_intra else 0.0
        if which == 0:
            VAL[b] = inter
            OK[b] = v_inter
        elif which == 1:
            VAL[b] = intra
            OK[b] = v_intra
        else:
            VAL[b] = inter + intra
            OK[b] = v_inter or v_intra


@numba.njit(cache=True, nogil=True)
def _accuracy_back_rows(GL, s, mask, codes, FAC, p, q, which, ORDER, HI, LO, OFF, LVL, NL, X, WX, A, DEN, DS,
                        b0, b1):  # pragma: no cover - compiled
    N = s.shape[1]
    D = np.empty((2, N + 1, 1))
    GS = np.empty((N, 2))
    WG = np.empty((N, 2))
    T = np.empty((N, 2))
    dOFF = np.empty(N)
    col = np.empty(N, np.int64)
    for b in range(b0, b1):
        m = mask[b]
        gl = GL[b]
        dA = np.zeros((2, 2))
        if which != 1 and DEN[b, 1, 0] > 0 and DEN[b, 0, 1] > 0:
            d = A[b, 1, 0] - A[b, 0, 1]
            sg = gl * (1.0 if d > 0 else (-1.0 if d < 0 else 0.0))
            dA[1, 0] += sg
            dA[0, 1] -= sg
        if which != 0 and DEN[b, 1, 1] > 0 and DEN[b, 0, 0] > 0:
            d = A[b, 1, 1] - A[b, 0, 0]
            sg = gl * (1.0 if d > 0 else (-1.0 if d < 0 else 0.0))
            dA[1, 1] += sg
            dA[0, 0] -= sg
        derr = np.zeros((2, 2))  # A = 1 - err / den: d err = -dA / den
        nz = False
        for g in range(2):
            for h in range(2):
                if DEN[b, g, h] > 0 and dA[g, h] != 0.0:
                    derr[g, h] = -dA[g, h] / DEN[b, g, h]
                    nz = True
        if not nz:
            for j in range(N):
                DS[b, j] = 0.0
            continue
        for i in range(N):
            ci = codes[b, i]
            g = 0 if (m[i] and ci == p) else (1 if (m[i] and ci == q) else -1)
            col[i] = g
            for h in range(2):
                GS[i, h] = derr[g, h] if g >= 0 else 0.0
        L = NL[b]
        if L > D.shape[2]:
            D = np.empty((2, N + 1, L))
        # the transposed kernel (weights less / equal / greater = 0 / 0 / 1): window sums of the upstream gradient
        # inter / intra read X_jh WG_jh at h = own column and G_jh WX_jh where the forward computed WX
        _level_cols(GS, OFF[b], LVL[b], ORDER[b], HI[b], LO[b], L, True, 0.0, 0.0, 1.0, D, WG, T, col,
                    0 if which == 2 else 2)
        for j in range(N):
            acc = 0.0
            for h in range(2):
                acc += X[b, j, h] * WG[j, h] - GS[j, h] * WX[b, j, h]
            dOFF[j] = acc
        _ds_list(s[b], m, FAC[b], dOFF, DS[b])


def accuracy_forward(s: Tensor, mask: Tensor, r: Tensor, groups: Tensor, G: int, protected: int, reference: int,
                     which: int, ordering, validate: bool = False):
    """The pairwise-accuracy-gap loss's per-list value on RampRank: ``which`` 0 inter, 1 intra, 2 both, for the
    group ids ``protected`` / ``reference``: ``(value [B] float64, valid [B] bool, saved)`` or None; the other
    arguments as in :func:`dips_forward`."""
    B, N = s.shape
    head, tol = _head(s, mask, r, groups, G, validate, ordering)
    tail = _tail(B, N)
    LVL, NL = np.empty((B, N), np.int64), np.empty(B, np.int64)
    X, WX = np.empty((B, N, 2)), np.empty((B, N, 2))
    A, DEN = np.empty((B, 2, 2)), np.empty((B, 2, 2))
    VAL, OK = np.empty(B), np.empty(B, np.bool_)
    _run(_accuracy_rows, head + (int(protected), int(reference), int(which), tol) + tail + (
        LVL, NL, X, WX, A, DEN, VAL, OK), B, N * 2)
    CODES, NREAL, FAC, ORDER, HI, LO, OFF = tail
    return _result(NREAL, validate, VAL, OK, (CODES, FAC, ORDER, HI, LO, OFF, LVL, NL, X, WX, A, DEN))


def accuracy_backward(GL, s: Tensor, mask: Tensor, protected: int, reference: int, which: int, saved) -> Tensor:
    """The gradient of :func:`accuracy_forward`'s value with respect to the scores: ``[B, N]`` float64."""
    B, N = s.shape
    CODES, FAC, ORDER, HI, LO, OFF, LVL, NL, X, WX, A, DEN = saved
    DS = np.empty((B, N))
    _run(_accuracy_back_rows, (_f64(GL), np_view(s), np_view(mask), CODES, FAC, int(protected), int(reference),
                               int(which), ORDER, HI, LO, OFF, LVL, NL, X, WX, A, DEN, DS), B, N * 2)
    return torch.from_numpy(DS)
