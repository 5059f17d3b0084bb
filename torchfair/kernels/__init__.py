"""The compiled (numba) CPU kernels of torchfair, behind one gate.  Arrays in, arrays out: nothing of torchfair
above this package is imported here.

Families (one module each, imported on first use, never by ``import torchfair``):

* :mod:`~torchfair.kernels.sorting` -- the radix sort of :class:`~torchfair.orderings.Hard` and dense ranks;
* :mod:`~torchfair.kernels.pairs` -- the pair sums of a hard ranking (``HardOrderedBatch.contract``);
* :mod:`~torchfair.kernels.windows` -- the prefix-sum passes of :class:`~torchfair.orderings.RampRank`;
* :mod:`~torchfair.kernels.pav` -- the isotonic regression of :class:`~torchfair.orderings.FastSoftRank`;
* :mod:`~torchfair.kernels.detconstsort` -- the walk of :func:`~torchfair.rerank.det_const_sort`;
* :mod:`~torchfair.kernels.fa_ir` -- FA*IR's m-tables and the bisection of their adjusted significance;
* :mod:`~torchfair.kernels.ramp_losses` -- the fused forward and backward walks of the fairness losses on
  :class:`~torchfair.orderings.RampRank` (``torchfair/losses/_fused.py``).

Every ordering, measure and re-ranker that has kernels takes ``backend="auto" | "numba" | "torch"``; the torch code
is the reference and runs on every device.

* ``"torch"``: never the kernels.
* ``"numba"``: the kernels (``ValueError`` when numba cannot be imported or the tensors are not plain float32 /
  float64 CPU tensors without gradients).
* ``"auto"`` follows the environment variable ``TORCHFAIR_KERNELS``: ``torch`` / ``numba`` as above; unset or
  ``auto``: the kernels for plain CPU tensors of at least :data:`MIN_ELEMENTS` ``[family]`` list items (``B * N``;
  FA*IR: the table length ``k``); below that size the torch code, whose extra milliseconds per call would not add
  up to the kernels' one-off compile within a thousand calls (measured: ``experiments/bench_first_call.py
  --crossover``).  If numba cannot be imported: the torch code, with one
  :class:`KernelFallbackWarning` per process.

The path a call takes depends on its input (size, dtype, device) and this gate only, never on the state of a cache
or on the clock, so the same call gives the same bits in every process.

Compilation.  A kernel compiles on its first call in a process, only the signature that call needs (key width,
argument types), synchronously, and numba caches it on disk (``NUMBA_CACHE_DIR``, else ``__pycache__``): later
processes load it in well under a second.  The first compile of each family in a process is reported by one
``WARNING`` of the logger ``torchfair.kernels`` naming its cost (seconds; it happens once per machine while the
disk cache is writable, so the line is rare, and without it a first call looks hung).  :func:`warmup` (or
:func:`torchfair.warmup`, ``torchfair warmup``) compiles every kernel up front, for images and CI.  No process or
thread is ever started to compile.

    >>> import torchfair.kernels as kernels
    >>> kernels.load("sorting", "torch") is None
    True
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import threading
import time
import warnings
from types import ModuleType
from typing import Dict, Iterator, List, Optional, Tuple

__all__ = ["load", "pick", "trace", "mode", "numba_available", "warmup", "KernelFallbackWarning", "BACKENDS",
           "FAMILIES", "MIN_ELEMENTS", "FOLLOW", "ENV"]

#: ``backend=`` of everything that has kernels (the one definition; the orderings, measures and re-rankers import it)
BACKENDS = ("auto", "torch", "numba")
#: the kernel modules
FAMILIES = ("sorting", "pairs", "windows", "pav", "detconstsort", "fa_ir", "ramp_losses")
#: the environment variable that decides what ``backend="auto"`` means
ENV = "TORCHFAIR_KERNELS"

#: under ``"auto"``: the input size (list items ``B * N`` of a call; ``fa_ir``: the table length ``k``) from which a
#: family runs its kernels: the smallest size from which the time the warm kernels save per call, over 1 000 calls,
#: exceeds the family's cold compile (CPU seconds), measured on 2 CPU cores by
#: ``experiments/bench_first_call.py --crossover`` (experiments/results/bench_first_call.md).  ``sorting`` and
#: ``pairs`` (an exact measure runs both) start lower, at 4 096 items, than that rule alone gives (204 800 and
#: 25 600): the path cannot depend on the cache, so below the threshold a list runs the torch code on every call of
#: every process, and between 4 096 and 25 600 items that code costs 3-24x the kernels (up to ~20 ms a call, the
#: table); below 4 096 items it costs at most ~2 ms more a call, and a first small call (4 x 50) never compiles
MIN_ELEMENTS: Dict[str, int] = {"sorting": 4096, "pairs": 4096, "windows": 6400, "pav": 3200, "detconstsort": 400,
                                "fa_ir": 16,
                                # --crossover (the fused DIPS loss, forward + backward): the kernels are 4.3-14x
                                # faster at every size from 50 items, the rule alone gives 51 200 (a 22 CPU s cold
                                # compile); it starts at 6 400 for the reason of sorting / pairs: a training loop
                                # calls the loss every step, and below the threshold every call runs the torch code
                                "ramp_losses": 6400}
#: ``size=`` of a later stage of a call whose first stage runs the kernels (:func:`pick`): the same path
FOLLOW = math.inf

_NUMBA_ERROR: Optional[BaseException] = None
_NUMBA_OK: Optional[bool] = None
_WARNED = False
_LOCAL = threading.local()  # .trace: the list trace() fills; .quiet / .force: a warm-up runs (no log; no size rule)
_LOCK = threading.Lock()
_log = logging.getLogger(__name__)


class KernelFallbackWarning(RuntimeWarning):
    """The compiled kernels cannot be loaded (numba missing or broken): torchfair runs its torch code instead,
    with the same results, several times slower on the CPU.  Warned once per process."""


def mode() -> str:
    """What ``backend="auto"`` means in this process: ``TORCHFAIR_KERNELS`` (``"auto"`` when unset or empty);
    ``ValueError`` naming the variable for any other value than ``auto`` / ``numba`` / ``torch``."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"the environment variable {ENV} must be one of 'auto', 'numba', 'torch'; got "
                         f"{os.environ.get(ENV)!r}")
    return value


def numba_available() -> bool:
    """Whether numba imports (tried once per process)."""
    global _NUMBA_OK, _NUMBA_ERROR
    if _NUMBA_OK is None:
        try:
            import numba  # noqa: F401
            _NUMBA_OK = True
        except Exception as exc:  # ImportError, or a numba that fails on import (e.g. a numpy it does not support)
            _NUMBA_OK, _NUMBA_ERROR = False, exc
    return _NUMBA_OK


def _fall_back(reason: str) -> None:
    global _WARNED
    if not _WARNED:
        _WARNED = True
        warnings.warn(f"torchfair's compiled kernels are unavailable ({reason}); running the torch code, several "
                      f"times slower on the CPU. Install numba, or set {ENV}=torch to silence this.",
                      KernelFallbackWarning, stacklevel=3)


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {', '.join(map(repr, BACKENDS))}; got {backend!r}")


def pick(family: str, backend: str, *tensors, size: Optional[float] = None) -> Optional[ModuleType]:
    """The kernel module ``family`` when ``backend`` picks it for this call, else ``None`` (the torch code).

    ``tensors``: the call's tensors (float32 / float64 where floating, plain CPU tensors outside compilation, not
    carrying gradients, for the kernels to take them); ``size``: the input size compared with
    :data:`MIN_ELEMENTS` under ``"auto"`` (default: the list items ``B * N`` of the largest of ``tensors``, the
    product of its first two dimensions; a later stage of a call whose first stage runs kernels passes
    :data:`FOLLOW`, so both stages take the same path).
    ``backend="numba"`` with tensors the kernels cannot take is a ``ValueError``.

    >>> import torch
    >>> pick("sorting", "auto", torch.zeros(2, 3)) is None  # 6 elements: the torch code
    True
    """
    if family not in FAMILIES:
        raise ValueError(f"`family` must be one of {', '.join(map(repr, FAMILIES))}; got {family!r}")
    _check_backend(backend)
    K = _pick(family, backend, tensors, size)
    rec = getattr(_LOCAL, "trace", None)
    if rec is not None:
        n = _size(tensors) if size is None else size
        rec.append((family, "torch" if K is None else "numba", n))
    return K


def _size(tensors) -> int:
    """The list items of a call: the largest ``B * N`` (first two dimensions) of its tensors."""
    return max((math.prod(t.shape[:2]) for t in tensors), default=0)


def _pick(family: str, backend: str, tensors, size) -> Optional[ModuleType]:
    if backend == "torch":
        return None
    import torch

    if backend == "auto":
        if torch.compiler.is_compiling() or not all(t.device.type == "cpu" for t in tensors):
            return None  # (without importing numba, and without a graph break under torch.compile)
        if mode() == "auto" and not getattr(_LOCAL, "force", False) and (
                _size(tensors) if size is None else size) < MIN_ELEMENTS[family]:
            return None  # small: the torch code (without importing numba)
    K = load(family, backend)
    grad = torch.is_grad_enabled()
    ok = K is not None and not torch.compiler.is_compiling() and all(
        type(t) is torch.Tensor and t.device.type == "cpu" for t in tensors) and all(
        t.dtype in (torch.float32, torch.float64) or not t.is_floating_point() for t in tensors) and not any(
        grad and t.requires_grad for t in tensors)
    if not ok and backend == "numba":
        raise ValueError("backend='numba' needs plain float32 / float64 CPU tensors without gradients; "
                         "backend='torch' runs anywhere")
    return K if ok else None


@contextlib.contextmanager
def trace() -> Iterator[List[Tuple[str, str, float]]]:
    """Record the path of every kernel decision made in this thread inside the block: a list of
    ``(family, "numba" | "torch", size)`` in call order (introspection for tests and benchmarks).

    >>> import torch
    >>> with trace() as paths:  # what Hard() asks for a [2, 5] batch
    ...     _ = pick("sorting", "auto", torch.zeros(2, 5), torch.ones(2, 5, dtype=torch.bool))
    >>> paths
    [('sorting', 'torch', 10)]
    """
    previous = getattr(_LOCAL, "trace", None)
    _LOCAL.trace = rec = []
    try:
        yield rec
    finally:
        _LOCAL.trace = previous


def load(family: str, backend: str = "auto") -> Optional[ModuleType]:
    """The kernel module ``family`` (one of :data:`FAMILIES`) when ``backend`` picks the kernels whatever the input
    size, else ``None`` (run the torch code).  ``backend`` is ``"auto"`` (:func:`mode` decides; numba missing: one
    :class:`KernelFallbackWarning`), ``"numba"`` (``ValueError`` naming ``backend`` when numba cannot be imported)
    or ``"torch"``.  The library's calls go through :func:`pick`, which adds the size rule and the tensor checks.

    >>> load("pairs", "torch") is None
    True
    """
    key = (family, backend, os.environ.get(ENV))
    module = _LOADED.get(key)
    if module is not None:  # loaded before under the same settings (the per-call cost of the kernels' callers)
        return module
    if family not in FAMILIES:
        raise ValueError(f"`family` must be one of {', '.join(map(repr, FAMILIES))}; got {family!r}")
    _check_backend(backend)
    source = "`backend`"
    if backend == "auto":
        backend, source = mode(), ENV
    if backend == "torch":
        return None
    error = None
    if numba_available():
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except Exception as exc:  # pragma: no cover - a numba that imports but cannot build the kernels
            error = exc
        else:
            _listen()
            _LOADED[key] = module
            return module
    else:
        error = _NUMBA_ERROR
    if backend == "numba":
        name = f"{ENV}=numba" if source == ENV else "backend='numba'"
        raise ValueError(f"{name} needs numba, which cannot be loaded ({type(error).__name__}: {error}); "
                         f"use backend='torch' or unset {ENV}")
    _fall_back(f"{type(error).__name__}: {error}")
    return None


_LOADED: Dict[tuple, ModuleType] = {}  # (family, backend, TORCHFAIR_KERNELS) -> the module load() returned

# ------------------------------------------------------------------------------------------ the compile log
_LOGGED: set = set()  # the families whose first compile in this process was logged
_LISTENING = False


def _listen() -> None:
    """Register (once per process) a listener of numba's public event API (``numba.core.event``, kind
    ``"numba:compile"``: real compilations only, not loads from the disk cache) that logs the first compile of
    each family."""
    global _LISTENING
    if _LISTENING:
        return
    with _LOCK:
        if _LISTENING:
            return
        try:
            from numba.core import event

            class _CompileLog(event.Listener):
                def on_start(self, ev):
                    stack = _LOCAL.__dict__.setdefault("compiling", [])
                    stack.append(time.perf_counter())

                def on_end(self, ev):
                    stack = _LOCAL.__dict__.setdefault("compiling", [])
                    start = stack.pop() if stack else time.perf_counter()
                    if not stack:  # the outermost compile (its callees compile inside it)
                        _compiled(ev.data.get("dispatcher") if isinstance(ev.data, dict) else None,
                                  time.perf_counter() - start)

            event.register("numba:compile", _CompileLog())
        except Exception:  # pragma: no cover - numba without the event API: no log line
            pass
        _LISTENING = True


def _compiled(dispatcher, seconds: float) -> None:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    prefix = __name__ + "."
    if not module.startswith(prefix) or getattr(_LOCAL, "quiet", False):
        return
    family = module[len(prefix):]
    if family in _LOGGED:
        return
    _LOGGED.add(family)
    try:
        where = f" in {dispatcher.stats.cache_path}"
    except Exception:  # pragma: no cover
        where = ""
    _log.warning("torchfair.kernels: compiled the %r kernels for this call in %.1f s (first compile of the family "
                 "in this process; cached on disk%s, later processes load them in well under a second; "
                 "`torchfair warmup` compiles every kernel up front)", family, seconds, where)


# -------------------------------------------------------------------------------------------------- warm-up
def warmup() -> float:
    """Compile every kernel the library calls, for float32 and float64 inputs, now (or load them from the disk
    cache) and return the seconds it took: each family's own ``warmup()`` on small arrays.  0.0 when :func:`mode`
    is ``"torch"`` or numba is missing (warned once).  ``ValueError`` naming ``TORCHFAIR_KERNELS`` when it asks for
    numba and numba cannot be loaded.  :func:`torchfair.warmup` also runs the measures once.

    >>> seconds = warmup()  # doctest: +SKIP
    """
    if mode() == "torch":
        return 0.0
    if load("sorting") is None:  # numba missing (warned once, or the ValueError of TORCHFAIR_KERNELS=numba)
        return 0.0
    start = time.perf_counter()
    with _quiet():
        for family in FAMILIES:
            load(family, "numba").warmup()
    return time.perf_counter() - start


@contextlib.contextmanager
def _quiet(force: bool = False):
    """No compile log in this thread (an explicit warm-up reports its own time); ``force``: ``"auto"`` takes the
    kernels whatever the input size in this thread (:func:`torchfair.warmup`'s measure pass, on small inputs)."""
    previous = getattr(_LOCAL, "quiet", False), getattr(_LOCAL, "force", False)
    _LOCAL.quiet, _LOCAL.force = True, force or previous[1]
    try:
        yield
    finally:
        _LOCAL.quiet, _LOCAL.force = previous

