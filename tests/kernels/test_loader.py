"""torchfair.kernels (the loader): one gate for every compiled kernel.

* ``TORCHFAIR_KERNELS`` decides what ``backend="auto"`` means (``torch``: never the kernels; ``numba``: the kernels
  or an error naming the variable); an explicit ``backend=`` wins; any other value is an error naming it;
* a missing numba falls back to the torch code with one ``KernelFallbackWarning`` per process, and the orderings
  still give the torch numbers;
* ``warmup()`` compiles what the measures call: afterwards a measure compiles nothing.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import torchfair.kernels as kernels
from torchfair.metrics import dips
from torchfair.orderings import Hard


@pytest.fixture
def no_numba(monkeypatch):
    """As if numba could not be imported."""
    monkeypatch.setattr(kernels, "_NUMBA_OK", False)
    monkeypatch.setattr(kernels, "_LOADED", {})  # forget what this process has loaded
    monkeypatch.setattr(kernels, "_NUMBA_ERROR", ImportError("No module named 'numba'"))
    monkeypatch.setattr(kernels, "_WARNED", False)


@pytest.fixture
def compiled(monkeypatch):
    """As after the background compile (whatever the state of this machine's disk cache)."""
    monkeypatch.setattr(kernels, "_READY", True)
    monkeypatch.setattr(kernels, "_LOADED", {})  # forget what this process has loaded


def test_numba_is_there(compiled):
    """numba is a core dependency: the kernel tests fail, not skip, without it."""
    assert kernels.numba_available()
    assert kernels.load("pairs").__name__ == "torchfair.kernels.pairs"


@pytest.mark.parametrize("family", kernels.FAMILIES)
def test_load_picks_by_backend_and_environment(family, monkeypatch, compiled):
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
    g = torch.Generator().manual_seed(0)
    s, r, grp = torch.randn(3, 20, generator=g), torch.rand(3, 20, generator=g), torch.randint(0, 2, (3, 20))
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


def test_warmup_compiles_what_a_measure_needs(monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    seconds = kernels.warmup()
    assert isinstance(seconds, float) and seconds > 0
    from torchfair.kernels import pairs, sorting

    dispatchers = [sorting._sort_rows32, sorting._sort_rows64, pairs._sweep_rows32, pairs._sweep_rows64]
    before = [len(d.signatures) for d in dispatchers]
    assert all(before)
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        s = torch.randn(3, 30, generator=g, dtype=dtype)
        dips(s, torch.randint(0, 4, (3, 30), generator=g).to(dtype), torch.randint(0, 3, (3, 30), generator=g))
    assert [len(d.signatures) for d in dispatchers] == before  # nothing left to compile


class _FakeCompile:
    """Stands for the background compile process: running until ``finish()``."""

    def __init__(self, argv, **kwargs):
        self.argv, self.env, self.code = argv, kwargs["env"], None
        _FakeCompile.started.append(self)

    def poll(self):
        return self.code

    def finish(self):
        self.code = 0


def test_a_cold_cache_runs_the_torch_code_while_a_process_compiles(monkeypatch):
    """``auto`` with nothing on disk: the torch code (the same numbers) and one compile process per process,
    which runs warmup() with TORCHFAIR_KERNELS=numba; once it has exited, the kernels."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setattr(kernels, "_READY", False)
    monkeypatch.setattr(kernels, "_LOADED", {})  # forget what this process has loaded
    monkeypatch.setattr(kernels, "_STARTED_PID", None)
    monkeypatch.setattr(kernels, "_CHILD", None)
    monkeypatch.setattr(kernels, "_CACHED", {})
    monkeypatch.setattr(kernels, "_on_disk", lambda module: False)
    _FakeCompile.started = []
    monkeypatch.setattr(kernels.subprocess, "Popen", _FakeCompile)
    assert kernels.load("pairs") is None and kernels.load("sorting") is None
    assert len(_FakeCompile.started) == 1
    child = _FakeCompile.started[0]
    assert "warmup()" in child.argv[-1] and child.env[kernels.ENV] == "numba"
    assert kernels.load("pairs", "numba") is not None  # an explicit backend does not wait
    g = torch.Generator().manual_seed(2)
    s, r, grp = torch.randn(3, 20, generator=g), torch.rand(3, 20, generator=g), torch.randint(0, 2, (3, 20))
    torch.testing.assert_close(dips(s, r, grp), dips(s, r, grp, ordering=Hard(backend="torch")), rtol=0, atol=0)
    child.finish()
    assert kernels.load("pairs").__name__ == "torchfair.kernels.pairs"
    assert len(_FakeCompile.started) == 1
