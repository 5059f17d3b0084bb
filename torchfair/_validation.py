"""Input checking and normalisation shared by every public function.

Conventions (DEVELOPERS.md):
* ``scores``, ``relevance``: ``[B, N]`` or ``[N]`` floating tensors;
* ``groups``: ``[B, N]`` integer ids (``-1`` = unknown group) or ``[B, N, G]`` soft membership whose rows sum to 1
  (or less, for an item whose group is partly unknown: the missing mass is in no group);
* ``mask``: ``[B, N]`` bool, True for real items.

Everything is converted to a batch ``[B, N]`` and computed in at least float32 (float16 / bfloat16 inputs are
promoted; float64 stays float64 so that ``gradcheck`` works).  Validation raises ``ValueError`` naming the argument
and the expected shape or range.

Checks and devices (no host synchronisation off the CPU)
--------------------------------------------------------
* Shape, dtype and argument checks (everything read from tensor metadata or Python values) run everywhere and raise
  ``ValueError`` naming the argument.
* Checks of tensor *values* (finite scores, ``relevance >= 0``, group ids in ``[-1, G)``, soft-membership rows, a
  mask with a real item) depend on the data; :func:`require` runs them according to the device:

  - CPU (eager): checked, ``ValueError`` naming the argument (reading a CPU tensor costs no synchronisation);
  - CUDA, and any device under ``torch.compile``: ``torch._assert_async`` -- no host synchronisation, no graph
    break; a failing check stops the program at the next synchronisation with a ``RuntimeError`` carrying the
    message (on CUDA a device-side assert, as for an out-of-range index in PyTorch's own kernels: the CUDA
    context cannot be used afterwards);
  - other devices (``meta``, MPS, XLA...): skipped.

  ``validate_args=False`` removes them (and their kernels) everywhere.
* Defaults inferred from the data (``num_groups = max id + 1``) are a host synchronisation: they are inferred for
  CPU tensors only (also under ``torch.compile``, where the read is a graph break); on any other device integer
  ``groups`` need ``num_groups`` (``ValueError`` naming it otherwise).  Losses given ``num_groups`` (and,
  for the measures that have one, ``max_grade``) run forward and backward without any host synchronisation
  (tests/test_gpu_ready.py runs them on the ``meta`` device, where every synchronisation raises).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

__all__ = ["Batch", "prepare", "work_dtype", "as_membership", "check_choice", "check_number", "check_group_id",
           "check_reduction", "pad_groups", "check_int", "check_bool", "REDUCTIONS", "require", "value_check_mode",
           "needs_host_value", "group_codes", "did_you_mean"]


REDUCTIONS = ("none", "mean", "sum")


def value_check_mode(device: torch.device) -> str:
    """How data-dependent checks run for tensors on ``device`` (module docstring): ``"raise"`` (CPU, eager),
    ``"assert"`` (CUDA, or any device while ``torch.compile`` traces) or ``"skip"`` (meta, MPS, ...)."""
    if torch.compiler.is_compiling():
        return "assert"
    kind = torch.device(device).type
    if kind == "cpu":
        return "raise"
    return "assert" if kind == "cuda" else "skip"


def require(ok: Callable[[], Tensor], message: str, device: torch.device,
            detail: Optional[Callable[[], str]] = None) -> None:
    """A data-dependent check without host synchronisation off the CPU (module docstring).

    ``ok()`` returns a 0-dim bool tensor (True when the data is valid), computed only when the check runs.  On the
    CPU a failure raises ``ValueError(message + detail())``; on CUDA and under ``torch.compile`` it becomes
    ``torch._assert_async(ok(), message)``; elsewhere nothing runs."""
    mode = value_check_mode(device)
    if mode == "skip":
        return
    cond = ok()
    if mode == "assert":
        torch._assert_async(cond, message.rstrip("; "))
    elif not bool(cond):
        raise ValueError(message + (detail() if detail is not None else ""))


def needs_host_value(device: torch.device) -> bool:
    """True where a default inferred from the data (``num_groups = max id + 1``) would synchronise with the host:
    every device but the CPU."""
    return torch.device(device).type != "cpu"


def did_you_mean(value, choices) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices`` to a misspelt ``value`` (``difflib``), else ``""``:
    the tail of an error message."""
    import difflib

    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choice(value, name: str, choices) -> str:
    """``value`` if it is one of the strings ``choices``, else ``ValueError`` naming ``name`` and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(repr(c) for c in choices)}; got {value!r}"
                         f"{did_you_mean(value, choices)}")
    return value


def check_reduction(reduction, choices=REDUCTIONS) -> str:
    """``reduction`` must be ``"none"``, ``"mean"`` or ``"sum"`` (or one of ``choices``)."""
    return check_choice(reduction, "reduction", choices)


def check_number(value, name: str, *, low: Optional[float] = None, high: Optional[float] = None,
                 low_open: bool = False, high_open: bool = False, integer: bool = False) -> float:
    """A finite real number (an int when ``integer``) in the given range, else ``ValueError`` naming ``name``.

    Booleans, NaN and infinities are rejected; one-element tensors and numpy scalars are accepted."""
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if hasattr(value, "item") and not isinstance(value, (int, float)):  # numpy scalars
        try:
            value = value.item()
        except Exception:
            pass
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and integer and not (isinstance(value, int) or float(value).is_integer()):
        ok = False
    if ok and not math.isfinite(float(value)):
        ok = False
    if ok and low is not None and (value <= low if low_open else value < low):
        ok = False
    if ok and high is not None and (value >= high if high_open else value > high):
        ok = False
    if not ok:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else (f"< {high}" if high_open else f"<= {high}")
        rng = " and ".join(x for x in (lo, hi) if x)
        kind = "an int" if integer else "a finite number"
        raise ValueError(f"`{name}` must be {kind}{' ' + rng if rng else ''}; got {value!r}")
    return int(value) if integer else float(value)


def pad_groups(membership: Tensor, num_groups: int) -> Tensor:
    """``membership [B, N, G]`` with zero columns appended up to ``num_groups`` (a group id beyond the groups seen
    in a batch is a group absent from it: its values are undefined, not an error)."""
    G = membership.shape[-1]
    if G >= num_groups:
        return membership
    return torch.nn.functional.pad(membership, (0, num_groups - G))


def check_int(value, name: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """An int (not a bool, not a float such as ``2.0``) in ``[low, high]``, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        rng = " and ".join(s for s in ((f">= {low}" if low is not None else ""),
                                       (f"<= {high}" if high is not None else "")) if s)
        raise ValueError(f"`{name}` must be an int{' ' + rng if rng else ''}; got {value!r}")
    return check_number(int(value), name, low=low, high=high, integer=True)


def check_bool(value, name: str) -> bool:
    """A bool, else ``ValueError`` naming ``name``."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool; got {value!r}")
    return value


def check_group_id(value, name: str, num_groups: Optional[int] = None) -> int:
    """A group id: a non-negative int (``< num_groups`` when given), else ``ValueError`` naming ``name``.

    Negative ids are refused rather than read Python-style (``-1`` is not "the last group")."""
    if num_groups is not None and (isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1):
        raise ValueError(f"`num_groups` must be a positive int; got {num_groups!r}")
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (
            num_groups is not None and value >= num_groups):
        rng = f"in [0, {num_groups})" if num_groups is not None else ">= 0"
        raise ValueError(f"`{name}` must be an int group id {rng}; got {value!r}")
    return value


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The floating dtype computations run in: float32 for half types and integers, float64 stays."""
    if dtype == torch.float64:
        return torch.float64
    return torch.float32


@dataclass
class Batch:
    """Inputs normalised to a batch: ``scores``/``relevance`` ``[B, N]``, ``membership`` ``[B, N, G]``."""

    scores: Tensor
    mask: Tensor
    relevance: Optional[Tensor] = None
    membership: Optional[Tensor] = None
    squeeze: bool = False

    @property
    def num_groups(self) -> int:
        return 0 if self.membership is None else self.membership.shape[-1]

    def out(self, x: Tensor) -> Tensor:
        """Drop the batch dimension again for single-list (1-D) inputs."""
        return x.squeeze(0) if self.squeeze else x


def _check_tensor(x, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    return x


_SIGNED = (torch.int8, torch.int16, torch.int32, torch.int64)


def as_membership(groups: Tensor, mask: Tensor, num_groups: Optional[int], dtype: torch.dtype,
                  validate: bool, name: str = "groups", checked: bool = False) -> Tensor:
    """Turn ``[B, N]`` ids or ``[B, N, G]`` soft membership into float membership ``[B, N, G]``.

    Id ``-1`` marks an item of unknown group: it keeps its position in the ranking (it takes exposure and
    takes part in pairs) but belongs to no group, so its membership row is all zeros (Raj & Ekstrand,
    ``002`` §2.6, "include unlabeled items when computing attention weights but exclude them from further
    analysis").  Padded items get an all-zero row too.  Soft membership rows sum to 1, or to less where an
    item's group is only partly known (TREC Fair 2022's pages with some attributes unknown): the missing mass
    belongs to no group, as a ``-1`` id does.  ``checked``: the integer ids are known to lie in
    ``[-1, num_groups)`` (:func:`prepare`'s quick checks passed), so the rows come from one comparison.
    """
    B, N = mask.shape
    if groups.is_floating_point():
        if groups.dim() != 3 or groups.shape[:2] != (B, N):
            raise ValueError(f"`{name}` with floating dtype is soft membership and must have shape [B, N, G] "
                             f"= [{B}, {N}, G]; got {tuple(groups.shape)}")
        if num_groups is not None and groups.shape[-1] != num_groups:
            raise ValueError(f"`{name}` has {groups.shape[-1]} groups in its last dimension but num_groups={num_groups}")
        memb = groups.to(dtype)
        if validate:
            m3 = mask.unsqueeze(-1)
            require(lambda: (torch.isfinite(memb) & (memb >= 0) | ~m3).all(),
                    f"`{name}` soft membership must be finite and non-negative", memb.device)
            # rows normalised in half precision carry its rounding (bfloat16: ~4e-3 per entry)
            tol = 1e-4 if groups.dtype in (torch.float32, torch.float64) else 4 * torch.finfo(groups.dtype).eps * \
                groups.shape[-1]
            require(lambda: ((memb.sum(-1) <= 1 + tol) | ~mask).all(),
                    f"`{name}` soft membership rows must sum to at most 1 (shape [B, N, G]; a row "
                    f"summing to less than 1 is partly of unknown group)", memb.device)
        return torch.where(mask.unsqueeze(-1), memb, torch.zeros((), dtype=dtype, device=memb.device))
    if checked and type(num_groups) is int and num_groups >= 1 and groups.shape == (B, N) and \
            groups.dtype in _SIGNED:
        # ids in [-1, G): an unknown (-1) or padded item matches no group, so its row is all zeros
        ids = torch.where(mask, groups, torch.full((), -1, dtype=groups.dtype, device=groups.device))
        return (ids.unsqueeze(-1) == torch.arange(num_groups, dtype=ids.dtype, device=ids.device)).to(dtype)
    codes, num_groups = group_codes(groups, mask, num_groups, validate, name)
    # one comparison: an unknown or padded item (code -1) matches no group, so its row is all zeros
    return (codes.unsqueeze(-1) == torch.arange(num_groups, device=codes.device)).to(dtype)


def group_codes(groups: Tensor, mask: Tensor, num_groups: Optional[int], validate: bool, name: str = "groups"):
    """Integer group ids ``[B, N]`` checked and normalised: ``(codes, G)`` with ``codes [B, N]`` long in ``[0, G)``
    for an item of a known group and ``-1`` for an unknown group or a padded item; ``G = num_groups`` (default
    ``max id + 1``, on the CPU only: module docstring).  Without validation, ids ``>= G`` count as ``G - 1`` and
    ids ``< -1`` as unknown (what :func:`as_membership` builds its one-hot rows from)."""
    B, N = mask.shape
    if groups.dtype == torch.bool or groups.is_floating_point() or groups.is_complex() or groups.shape != (B, N):
        raise ValueError(f"`{name}` must be integer group ids of shape [B, N] = [{B}, {N}] "
                         f"(or float [B, N, G] soft membership); got {tuple(groups.shape)} {groups.dtype}")
    ids = groups.long()
    if num_groups is None:
        if needs_host_value(ids.device):
            raise ValueError(f"`num_groups` must be given with integer `{name}` on device {ids.device.type!r}: "
                             f"inferring it (max id + 1) would synchronise with the host")
        # read on the CPU (under torch.compile a graph break): pass num_groups to avoid it
        num_groups = max(int(torch.where(mask, ids, torch.zeros_like(ids)).max().item()) + 1, 1)
    elif isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ValueError(f"`num_groups` must be a positive int, got {num_groups}")
    if validate:
        G = num_groups

        def detail() -> str:
            real = ids[mask]
            return f"got values in [{int(real.min())}, {int(real.max())}]"

        require(lambda: (((ids >= -1) & (ids < G)) | ~mask).all(),
                f"`{name}` ids must lie in [0, {G}) (or -1 for unknown group); ", ids.device, detail)
    known = (ids >= 0) & mask
    return torch.where(known, ids.clamp(max=num_groups - 1), torch.full_like(ids, -1)), num_groups


def _values_ok(s: Tensor, m: Tensor, relevance, groups, num_groups, squeeze: bool, dtype: torch.dtype) -> bool:
    """Whether every value check of :func:`prepare` holds, read from a few reductions on the CPU: the mask has a
    real item, the sums of the (masked) scores and of the relevance are finite (a non-finite entry makes them
    non-finite), the smallest relevance is ``>= 0`` and the integer group ids lie in ``[-1, num_groups)``.  The
    relevance and the ids are read whole, padded entries included (they are usually 0): a padded entry outside
    the ranges only sends the call to the detailed checks.  ``False`` whenever anything is unusual (soft groups, a
    wrong shape, a sum that overflows): the detailed checks then run and name the argument.  It replaces about
    25 small ops and five host reads by about 6 and three."""
    try:
        B, N = s.shape
        sums = [s.detach().sum()]
        if isinstance(relevance, Tensor):
            r = relevance.unsqueeze(0) if (squeeze and relevance.dim() == 1) else relevance
            if r.shape != (B, N) or r.is_complex():
                return False
            r = r.detach().to(dtype)
            sums += [r.sum(), r.amin()]
        ids = None
        if isinstance(groups, Tensor):
            if groups.is_floating_point() or groups.dtype == torch.bool or groups.is_complex():
                return False
            g = groups.unsqueeze(0) if (squeeze and groups.dim() == 1) else groups
            if g.shape != (B, N):
                return False
            ids = g.aminmax()
        if not bool(m.any()):
            return False
        vals = torch.stack(sums).tolist()  # one read: the sums (finite) and the smallest relevance (>= 0)
        if not all(math.isfinite(v) for v in vals[:2]) or (len(vals) > 2 and not vals[2] >= 0):
            return False
        if ids is not None:
            lo, hi = torch.stack(ids).tolist()
            if lo < -1 or (isinstance(num_groups, int) and hi >= num_groups):
                return False
        return True
    except Exception:  # noqa: BLE001 - anything unexpected: the detailed checks decide
        return False


def prepare(scores: Tensor, relevance: Optional[Tensor] = None, groups: Optional[Tensor] = None,
            mask: Optional[Tensor] = None, *, num_groups: Optional[int] = None, validate: bool = True,
            scores_name: str = "scores", require_relevance: bool = False, require_groups: bool = False) -> Batch:
    """Validate and batch the standard inputs of a measure."""
    scores = _check_tensor(scores, scores_name)
    if scores.dim() not in (1, 2):
        raise ValueError(f"`{scores_name}` must have shape [B, N] or [N]; got {tuple(scores.shape)}")
    if not (scores.is_floating_point() or scores.dtype in (torch.int32, torch.int64)):
        raise ValueError(f"`{scores_name}` must be a floating tensor; got {scores.dtype}")
    squeeze = scores.dim() == 1
    s = scores.unsqueeze(0) if squeeze else scores
    B, N = s.shape
    if N == 0 or B == 0:
        raise ValueError(f"`{scores_name}` must hold at least one list with one item; got shape {tuple(scores.shape)}")
    dtype = work_dtype(s.dtype)
    s = s.to(dtype)

    if mask is None:
        m = torch.ones(B, N, dtype=torch.bool, device=s.device)
    else:
        mask = _check_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise ValueError(f"`mask` must be a bool tensor (True = real item); got {mask.dtype}")
        m = mask.unsqueeze(0) if (squeeze and mask.dim() == 1) else mask
        if m.shape != (B, N):
            raise ValueError(f"`mask` must have the shape of `{scores_name}` {tuple(scores.shape)}; got {tuple(mask.shape)}")
    # padded entries may hold anything (NaN included): replace them so they never leak into sums or gradients
    s = torch.where(m, s, torch.zeros((), dtype=dtype, device=s.device))
    checked = validate and value_check_mode(s.device) == "raise" and _values_ok(s, m, relevance, groups, num_groups,
                                                                              squeeze, dtype)
    if checked:
        validate = False  # every value check below holds (they run only to name what failed)
    if validate:
        require(lambda: m.any(), "`mask` has no real item: the batch holds no list with an item to rank", s.device)
        require(lambda: (torch.isfinite(s) | ~m).all(),
                f"`{scores_name}` must be finite (no NaN or inf) on real items", s.device)

    rel = None
    if relevance is not None:
        relevance = _check_tensor(relevance, "relevance")
        if relevance.is_complex():
            raise ValueError(f"`relevance` must be a real (floating, integer or bool) tensor; got {relevance.dtype}")
        r = relevance.unsqueeze(0) if (squeeze and relevance.dim() == 1) else relevance
        if r.shape != (B, N):
            raise ValueError(f"`relevance` must have the shape of `{scores_name}` {tuple(scores.shape)}; "
                             f"got {tuple(relevance.shape)}")
        r = r.to(dtype)
        if validate:
            require(lambda: (torch.isfinite(r) | ~m).all(), "`relevance` must be finite (no NaN or inf) on real items",
                    r.device)
            require(lambda: ((r >= 0) | ~m).all(), "`relevance` must be non-negative", r.device)
        rel = torch.where(m, r, torch.zeros((), dtype=dtype, device=s.device))
    elif require_relevance:
        raise ValueError("`relevance` is required: [B, N] non-negative floats")

    memb = None
    if groups is not None:
        groups = _check_tensor(groups, "groups")
        g = groups
        if squeeze and ((groups.is_floating_point() and groups.dim() == 2) or
                        (not groups.is_floating_point() and groups.dim() == 1)):
            g = groups.unsqueeze(0)
        memb = as_membership(g, m, num_groups, dtype, validate, checked=checked)
    elif require_groups:
        raise ValueError("`groups` is required: [B, N] int ids or [B, N, G] soft membership")
    return Batch(scores=s, mask=m, relevance=rel, membership=memb, squeeze=squeeze)
