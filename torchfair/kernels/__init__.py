"""The compiled (numba) CPU kernels of torchfair, behind one gate.

Families (one module each, imported on first use, never by ``import torchfair``):

* :mod:`~torchfair.kernels.sorting` -- the radix sort of :class:`~torchfair.orderings.Hard` and dense ranks;
* :mod:`~torchfair.kernels.pairs` -- the pair sums of a hard ranking (``HardOrderedBatch.contract``);
* :mod:`~torchfair.kernels.windows` -- the prefix-sum passes of :class:`~torchfair.orderings.RampRank`;
* :mod:`~torchfair.kernels.pav` -- the isotonic regression of :class:`~torchfair.orderings.FastSoftRank`;
* :mod:`~torchfair.kernels.detconstsort` -- the walk of :func:`~torchfair.rerank.det_const_sort`;
* :mod:`~torchfair.kernels.fair` -- FA*IR's m-tables and the bisection of their adjusted significance.

Every ordering and re-ranker that has kernels takes ``backend="auto" | "numba" | "torch"``; the torch code is the
reference and runs on every device.  ``"auto"`` follows the environment variable ``TORCHFAIR_KERNELS``:

* unset or ``auto``: the kernels where they can run (plain CPU tensors); if numba cannot be imported, the torch
  code, with one :class:`KernelFallbackWarning` per process (a broken numba is slow, never silent);
* ``numba``: the kernels, and a ``ValueError`` naming ``TORCHFAIR_KERNELS`` when numba cannot be imported;
* ``torch``: never the kernels.

An explicit ``backend="numba"`` or ``"torch"`` wins over the variable.

Compilation.  Kernels compile on first use, one specialisation per key width (``*32`` / ``*64`` entry points) and
argument types, cached on disk (``NUMBA_CACHE_DIR``, else ``__pycache__``).  Compiling them takes tens of
CPU-seconds, so under ``"auto"`` a process whose disk cache lacks a kernel family does not wait: the call runs the
torch code while a background Python process runs :func:`warmup` (filling the disk cache; it outlives a short
script), and the calls after it has finished load the kernels (the same values up to float64 rounding of the
sums).  With a warm disk cache the kernels load on
the first call, in well under a second.  ``backend="numba"`` (or ``TORCHFAIR_KERNELS=numba``) always waits for the
kernels; :func:`warmup` pays the compile up front.

    >>> import torchfair.kernels as kernels
    >>> kernels.load("sorting", "torch") is None
    True
"""
from __future__ import annotations

import glob
import importlib
import os
import subprocess
import sys
import threading
import time
import warnings
from types import ModuleType
from typing import Optional

__all__ = ["load", "pick", "mode", "numba_available", "warmup", "KernelFallbackWarning", "BACKENDS", "FAMILIES", "ENV"]

#: ``backend=`` of the orderings and re-rankers that have kernels
BACKENDS = ("auto", "torch", "numba")
#: the kernel modules
FAMILIES = ("sorting", "pairs", "windows", "pav", "detconstsort", "fair")
#: the environment variable that decides what ``backend="auto"`` means
ENV = "TORCHFAIR_KERNELS"

_NUMBA_ERROR: Optional[BaseException] = None
_NUMBA_OK: Optional[bool] = None
_WARNED = False
_READY = False  # the background compile (or warmup()) has finished in this process
_STARTED_PID: Optional[int] = None  # the process that started the background compile
_LOCAL = threading.local()  # .force: this thread compiles (warmup): "auto" means "numba"
_CHILD: Optional[subprocess.Popen] = None  # the background compile process


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


def pick(family: str, backend: str, *tensors) -> Optional[ModuleType]:
    """The kernel module ``family`` (:func:`load`) when ``backend`` picks it for ``tensors`` (float32 / float64
    where floating, plain CPU tensors outside compilation, not carrying gradients), else ``None`` (the torch
    code); ``backend="numba"`` with tensors the kernels cannot take is a ``ValueError``."""
    import torch

    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {', '.join(map(repr, BACKENDS))}; got {backend!r}")
    if backend == "torch":
        return None
    if backend == "auto" and (torch.compiler.is_compiling() or not all(t.device.type == "cpu" for t in tensors)):
        return None  # (without importing numba, and without a graph break under torch.compile)
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


def load(family: str, backend: str = "auto") -> Optional[ModuleType]:
    """The kernel module ``family`` (one of :data:`FAMILIES`) when ``backend`` picks the kernels, else ``None``
    (run the torch code).  ``backend`` is ``"auto"`` (:func:`mode` decides), ``"numba"`` (``ValueError`` naming
    ``backend`` when numba cannot be imported) or ``"torch"``.  Whether the kernels can take given tensors (CPU,
    dtype) is the caller's check.

    >>> load("pairs", "torch") is None
    True
    """
    key = (family, backend, os.environ.get(ENV), getattr(_LOCAL, "force", False), os.getpid())
    module = _LOADED.get(key)
    if module is not None:  # loaded before under the same settings (the per-call cost of the kernels' callers)
        return module
    if family not in FAMILIES:
        raise ValueError(f"`family` must be one of {', '.join(map(repr, FAMILIES))}; got {family!r}")
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of 'auto', 'torch', 'numba'; got {backend!r}")
    source = "`backend`"
    auto = backend == "auto" and not getattr(_LOCAL, "force", False)
    if backend == "auto":
        backend, source = mode(), ENV
        auto = auto and backend == "auto"
    if backend == "torch":
        return None
    error = None
    if numba_available():
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except Exception as exc:  # pragma: no cover - a numba that imports but cannot build the kernels
            error = exc
        else:
            if auto and not _READY and not _cached(module):
                _compile_in_background()
                if not _background_done():
                    return None  # the torch code while the kernels compile
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


_LOADED = {}  # (family, backend, TORCHFAIR_KERNELS, forced, pid) -> the module load() returned for them

_CACHED = {}  # family -> whether the disk cache held its kernels when first asked (asked once per process)


def _cached(module: ModuleType) -> bool:
    """Whether the disk cache holds compiled kernels of ``module`` (an index file of one of its kernels), read once
    per process: a family found cold waits for the whole background compile, never half of it."""
    key = (module.__name__, os.getpid())
    if key not in _CACHED:
        _CACHED[key] = _on_disk(module)
    return _CACHED[key]


def _on_disk(module: ModuleType) -> bool:
    try:
        for value in vars(module).values():
            cache = getattr(value, "_cache", None)
            path = getattr(cache, "_cache_path", None)
            if path is not None and hasattr(value, "py_func"):
                stem = module.__name__.rsplit(".", 1)[-1]
                return bool(glob.glob(os.path.join(glob.escape(path), f"{stem}.*.nbi")))
    except Exception:  # pragma: no cover - numba internals changed: compile in the background
        return False
    return False


def _compile_in_background() -> None:
    """Start (once per process) a separate Python process that runs :func:`warmup` and so fills the disk cache.
    A process, not a thread: it outlives a short script (which would otherwise abort at exit inside LLVM, or wait
    for it), and the next process starts warm."""
    global _STARTED_PID, _CHILD
    with _LOCK:
        if _STARTED_PID == os.getpid():
            return
        _STARTED_PID = os.getpid()
        env = dict(os.environ, **{ENV: "numba"})
        try:
            _CHILD = subprocess.Popen([sys.executable, "-c", "import torchfair.kernels as k; k.warmup()"], env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        except Exception:  # pragma: no cover - no subprocess here: compile in this process, on first use
            _CHILD = None


def _background_done() -> bool:
    """Whether the compile process has exited (the disk cache is then read again)."""
    global _READY
    if _CHILD is None or _CHILD.poll() is not None:
        _READY = True
        return True
    return False


_LOCK = threading.Lock()


def warmup() -> float:
    """Compile the kernels the library calls, for float32 and float64 inputs, now (or load them from the disk
    cache) and return the seconds it took; 0.0 when :func:`mode` is ``"torch"`` or numba is missing.  The first exact measure on the
    CPU then starts without compiling.  ``ValueError`` naming ``TORCHFAIR_KERNELS`` when it asks for numba and numba
    cannot be loaded.

    >>> seconds = warmup()  # doctest: +SKIP
    """
    global _READY
    if mode() == "torch":
        return 0.0
    _LOCAL.force = True  # "auto" waits for the kernels in this thread
    try:
        if load("sorting") is None:  # numba missing (warned once)
            return 0.0
    finally:
        _LOCAL.force = False
    import torch

    from ..metrics import dips, igi, individual_dissatisfaction, kendall_tau, pairwise_accuracy
    from ..orderings import FastSoftRank, Hard, RampRank
    from ..rerank import det_const_sort

    start = time.perf_counter()
    _LOCAL.force = True
    try:
        _warm_calls(torch, dips, igi, individual_dissatisfaction, kendall_tau, pairwise_accuracy, FastSoftRank, Hard,
                    RampRank, det_const_sort)
    finally:
        _LOCAL.force = False
    _READY = True
    return time.perf_counter() - start


def _warm_calls(torch, dips, igi, individual_dissatisfaction, kendall_tau, pairwise_accuracy, FastSoftRank, Hard,
                RampRank, det_const_sort) -> None:
    """The calls :func:`warmup` makes: every measure path that reaches a kernel, float32 and float64."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        s = torch.randn(2, 8, generator=g, dtype=dtype)
        r = torch.randint(0, 3, (2, 8), generator=g).to(dtype)
        grp = torch.randint(0, 2, (2, 8), generator=g)
        soft = torch.softmax(torch.randn(2, 8, 2, generator=g, dtype=dtype), -1)
        for ties in ("first", "average"):
            hard = Hard(ties)
            for groups in (grp, soft):
                dips(s, r, groups, ordering=hard)
                igi(s, r, groups, ordering=hard)
            individual_dissatisfaction(s, r, grp, ordering=hard)
            pairwise_accuracy(s, r, grp, ordering=hard)
            kendall_tau(s, r, ordering=hard)
        for ordering in (RampRank(0.1), FastSoftRank(0.1)):
            x = s.clone().requires_grad_(True)
            dips(x, r, grp, ordering=ordering).sum().backward()
    det_const_sort(torch.randn(2, 8, generator=g), torch.randint(0, 2, (2, 8), generator=g))
    fair = load("fair")
    fair.mtable(4, 0.5, 0.1)
    fair.fail_probability(4, 0.5, 0.1)
