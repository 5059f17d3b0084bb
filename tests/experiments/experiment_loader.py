"""Load a script of ``experiments/`` as a module for the tests (the scripts are not a package)."""
import importlib.util
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def experiment_fixture(script: str):
    """A module-scoped fixture yielding ``experiments/<script>.py`` imported as a module."""

    @pytest.fixture(scope="module")
    def _fixture():
        spec = importlib.util.spec_from_file_location(f"_experiment_{script}", EXPERIMENTS / f"{script}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses and pickling look the module up by name
        spec.loader.exec_module(mod)
        yield mod
        sys.modules.pop(spec.name, None)

    return _fixture
