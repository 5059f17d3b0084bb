"""torchfair.warmup (torchfair/_warmup.py): the public warm-up above the measures.  Compiling the kernels is what
tests/kernels/test_loader.py checks (against a fresh numba cache); here: the gate it obeys and the measure pass it
makes, without compiling."""
import pytest

import torchfair
import torchfair.kernels as kernels
from torchfair import _warmup


def test_torchfair_warmup_is_the_warmup_above_the_measures():
    assert torchfair.warmup is _warmup.warmup


def test_with_the_torch_code_forced_it_compiles_nothing_and_takes_no_time(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "torch")
    called = []
    monkeypatch.setattr(kernels, "warmup", lambda: called.append(True))
    assert torchfair.warmup() == 0.0 and not called


def test_without_numba_it_returns_zero(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "auto")
    monkeypatch.setattr(kernels, "load", lambda family, backend="auto": None)  # numba missing: load gives None
    called = []
    monkeypatch.setattr(kernels, "warmup", lambda: called.append(True))
    assert torchfair.warmup() == 0.0 and not called


def test_the_measure_pass_runs_every_path_on_the_torch_code(monkeypatch):
    # the same calls the warm-up makes with the kernels forced, here on the torch code: every one of them runs
    monkeypatch.setenv(kernels.ENV, "torch")
    with kernels.trace() as seen:
        _warmup._measure_calls()
    assert all(path == "torch" for _, path, _ in seen) and seen


def test_a_bad_gate_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "gpu")
    with pytest.raises(ValueError, match=kernels.ENV):
        torchfair.warmup()
