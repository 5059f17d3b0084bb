"""torchfair._version: the one version string, re-exported by the package root and equal to pyproject.toml's."""
import tomllib
from pathlib import Path

import torchfair
from torchfair import _version

ROOT = Path(__file__).resolve().parent.parent


def test_one_version():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert torchfair.__version__ is _version.__version__
    assert _version.__version__ == meta["project"]["version"]
