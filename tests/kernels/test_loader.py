"""torchfair.kernels (the loader): one gate for every compiled kernel.

* ``TORCHFAIR_KERNELS`` decides what ``backend="auto"`` means (``torch``: never the kernels; ``numba``: the kernels
  or an error naming the variable); an explicit ``backend=`` wins; any other value is an error naming it;
* a missing numba falls back to the torch code with one ``KernelFallbackWarning`` per process, and the orderings
  still give the torch numbers;
* the path of a call depends on its input and this gate only: under ``auto`` the torch code below
  ``MIN_ELEMENTS[family]`` elements, the kernels from there on, whatever the disk cache holds; no process is started;
* the first compile of a family in a process is logged once (logger ``torchfair.kernels``);
* ``torchfair.kernels.warmup()`` (each family's own, arrays only) and ``torchfair.warmup()`` compile what the measures
  call: afterwards a measure compiles nothing.
"""
from __future__ import annotations

import importlib
import logging
import math
import subprocess
import warnings

import numba
import pytest
import torch

import torchfair
import torchfair.kernels as kernels
from torchfair.metrics import dips, fa_ir_adjusted_alpha, fa_ir_mtable, fa_ir_test
from torchfair.metrics import prefix as P
from torchfair.orderings import FastSoftRank, Hard, RampRank
from torchfair.rerank import det_const_sort, fa_ir


@pytest.fixture
def no_numba(monkeypatch):
    """As if numba could not be imported."""
    monkeypatch.setattr(kernels, "_NUMBA_OK", False)
    monkeypatch.setattr(kernels, "_LOADED", {})  # forget what this process has loaded
    monkeypatch.setattr(kernels, "_NUMBA_ERROR", ImportError("No module named 'numba'"))
    monkeypatch.setattr(kernels, "_WARNED", False)


def test_numba_is_there():
    """numba is a core dependency: the kernel tests fail, not skip, without it."""
    assert kernels.numba_available()
    assert kernels.load("pairs").__name__ == "torchfair.kernels.pairs"


@pytest.mark.parametrize("family", kernels.FAMILIES)
def test_load_picks_by_backend_and_environment(family, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    assert kernels.load(family).__name__ == f"torchfair.kernels.{family}"
    assert kernels.load(family, "torch") is None
    monkeypatch.setenv(kernels.ENV, "torch")
    assert kernels.load(family) is None
    assert kernels.load(family, "numba") is not None  # an explicit backend wins
    monkeypatch.setenv(kernels.ENV, "NUMBA")
    assert kernels.load(family) is not None


def test_bad_values_name_what_is_wrong(monkeypatch):
    with pytest.raises(ValueError, match="`family`"):
        kernels.load("fenwick")
    with pytest.raises(ValueError, match="`backend`"):
        kernels.load("pairs", "cuda")
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(ValueError, match="TORCHFAIR_KERNELS"):
        kernels.load("pairs")
    with pytest.raises(ValueError, match="TORCHFAIR_KERNELS"):
        dips(torch.randn(2, 4), torch.rand(2, 4), torch.randint(0, 2, (2, 4)))


def test_missing_numba_warns_once_and_runs_the_torch_code(no_numba, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    s, r, grp = _large("pairs")  # (below the size the torch code runs without asking for numba)
    with pytest.warns(kernels.KernelFallbackWarning, match="numba"):
        got = dips(s, r, grp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second fallback is silent
        assert kernels.load("sorting") is None
        dips(s, r, grp)
    torch.testing.assert_close(got, dips(s, r, grp, ordering=Hard(backend="torch")), rtol=0, atol=0)


def test_missing_numba_is_an_error_when_asked_for(no_numba, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    with pytest.raises(ValueError, match="backend='numba'"):
        kernels.load("pairs", "numba")
    monkeypatch.setenv(kernels.ENV, "numba")
    with pytest.raises(ValueError, match="TORCHFAIR_KERNELS=numba"):
        kernels.load("pairs")
    with pytest.raises(ValueError, match="TORCHFAIR_KERNELS=numba"):
        kernels.warmup()
    monkeypatch.setenv(kernels.ENV, "torch")
    assert kernels.warmup() == 0.0


def _batch(B, N, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, N, generator=g, dtype=dtype), torch.randint(0, 4, (B, N), generator=g).to(dtype),
            torch.randint(0, 2, (B, N), generator=g))


def _large(family):
    """A ``[B, 50]`` batch with at least ``MIN_ELEMENTS[family]`` elements."""
    return _batch(max(1, math.ceil(kernels.MIN_ELEMENTS[family] / 50)), 50)


@pytest.mark.parametrize("ordering", [Hard(), RampRank(0.1), FastSoftRank(0.1)], ids=repr)
def test_auto_takes_the_torch_code_below_the_size_and_the_kernels_above(ordering, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    with kernels.trace() as small:
        dips(*_batch(2, 5), ordering=ordering)
    assert small and all(path == "torch" for _, path, _ in small), small
    with kernels.trace() as large:  # above every threshold the ordering's families have
        dips(*_batch(math.ceil(max(kernels.MIN_ELEMENTS[f] for f in ("sorting", "pairs", "windows", "pav")) / 50),
                     50), ordering=ordering)
    for family, path, size in large:
        assert path == ("numba" if size >= kernels.MIN_ELEMENTS[family] else "torch"), large
    assert any(path == "numba" for _, path, _ in large), large


def test_the_gate_overrides_the_size(monkeypatch):
    small = _batch(2, 5)
    monkeypatch.setenv(kernels.ENV, "numba")
    with kernels.trace() as paths:
        dips(*small)
    assert {path for _, path, _ in paths} == {"numba"}
    monkeypatch.setenv(kernels.ENV, "torch")
    with kernels.trace() as paths:
        dips(*_large("pairs"))
    assert {path for _, path, _ in paths} == {"torch"}
    monkeypatch.delenv(kernels.ENV)
    with kernels.trace() as paths:
        dips(*small, ordering=Hard(backend="numba"))
    assert {path for _, path, _ in paths} == {"numba"}


def test_the_same_call_gives_the_same_bits(monkeypatch):
    """The path does not depend on what ran before in the process (no cache state, no clock)."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    for args in (_batch(4, 50), _large("pairs")):
        first = dips(*args)
        kernels.warmup()
        assert torch.equal(first, dips(*args))


def test_no_process_is_started(monkeypatch):
    """Neither a cold nor a warm call starts a process (the kernels compile synchronously, in this one)."""
    def refuse(*args, **kwargs):
        raise AssertionError("torchfair started a process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(kernels, "_LOADED", {})
    monkeypatch.delenv(kernels.ENV, raising=False)
    for args in (_batch(4, 50), _large("pairs")):
        dips(*args)
        dips(*args, ordering=RampRank(0.1))
    fa_ir_adjusted_alpha(40, 0.4, 0.05)
    assert not hasattr(kernels, "subprocess")


def test_pick_checks_its_arguments():
    with pytest.raises(ValueError, match="`family`"):
        kernels.pick("fenwick", "auto")
    with pytest.raises(ValueError, match="`backend`"):
        kernels.pick("pairs", "gpu")
    assert kernels.pick("pairs", "auto", torch.zeros(3)) is None  # 3 elements
    assert kernels.pick("pairs", "auto", torch.zeros(3), size=kernels.FOLLOW) is not None
    assert kernels.pick("pairs", "torch", torch.zeros(10 ** 6)) is None


def test_the_first_compile_of_a_family_is_logged_once(monkeypatch, caplog):
    """numba's compile event (not a disk-cache load) of a kernel of a family logs one line naming its seconds."""
    monkeypatch.setattr(kernels, "_LOGGED", set())
    kernels.load("sorting")  # (registers the listener)

    def twice(x):  # pragma: no cover - compiled
        return 2 * x

    twice.__module__ = "torchfair.kernels.sorting"  # as if it were a kernel of that family
    jitted = numba.njit(twice)  # not cached: compiles on every new signature
    with caplog.at_level(logging.INFO, logger="torchfair.kernels"):
        jitted(1)
        jitted(1.5)
    lines = [r for r in caplog.records if r.name == "torchfair.kernels"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "'sorting'" in lines[0].getMessage() and " s (" in lines[0].getMessage()


# ---------------------------------------------------------------------------------------------------- FA*IR
@pytest.mark.parametrize("k, p, alpha", [(25, 0.5, 0.1), (200, 0.3, 0.1), (600, 0.6, 0.05), (7, 0.9, 0.2)])
def test_fa_ir_values_are_the_same_bits_on_both_paths(k, p, alpha, monkeypatch):
    """The cached adjusted significance is the same whichever path computed it first."""
    got = {}
    for backend in ("numba", "torch"):
        monkeypatch.setattr(P, "_ADJUSTED", {})
        got[backend] = (fa_ir_adjusted_alpha(k, p, alpha, backend=backend),
                        fa_ir_mtable(k, p, alpha, backend=backend).tolist())
    assert got["numba"] == got["torch"]


@pytest.mark.parametrize("call", [
    lambda b: fa_ir_adjusted_alpha(10, 0.5, 0.1, backend=b),
    lambda b: fa_ir_mtable(10, 0.5, 0.1, backend=b),
    lambda b: fa_ir_test(torch.tensor([3., 2., 1.]), torch.tensor([0, 1, 0]), p=0.5, backend=b),
    lambda b: fa_ir(torch.tensor([3., 2., 1.]), torch.tensor([0, 1, 0]), backend=b),
], ids=["fa_ir_adjusted_alpha", "fa_ir_mtable", "fa_ir_test", "fa_ir"])
def test_fa_ir_takes_a_backend(call):
    for backend in kernels.BACKENDS:
        call(backend)
    with pytest.raises(ValueError, match="`backend`"):
        call("cuda")


# --------------------------------------------------------------------------------------------------- warm-up
def _signatures():
    out = {}
    for family in kernels.FAMILIES:
        module = importlib.import_module(f"torchfair.kernels.{family}")
        for name, value in vars(module).items():
            if hasattr(value, "py_func") and hasattr(value, "signatures"):
                out[f"{family}.{name}"] = list(value.signatures)
    return out


def test_warmup_compiles_what_the_measures_call(monkeypatch):
    """``kernels.warmup()`` (each family on small arrays) leaves nothing for the measures to compile: the measure
    pass of ``torchfair.warmup()`` adds no signature."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    seconds = kernels.warmup()
    assert isinstance(seconds, float) and seconds > 0
    before = _signatures()
    monkeypatch.setenv(kernels.ENV, "numba")  # every path a kernel, whatever the size
    from torchfair import _warmup

    _warmup._measure_calls()
    det_const_sort(*_batch(3, 9)[::2], distribution=[0.5, 0.5], k=5)
    assert _signatures() == before  # nothing left to compile
    monkeypatch.delenv(kernels.ENV)
    assert torchfair.warmup() > 0

