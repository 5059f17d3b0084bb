"""Packaging: license, type marker, metadata, no developer paths; a non-editable wheel carries every module."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None


def test_license_typed_marker_changelog():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "Copyright (c) 2026 the torchfair authors" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "torchfair" / "py.typed").is_file()
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text and "## [0.1.0]" in text


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    proj = meta["project"]
    assert proj["license"] == "MIT" and proj["license-files"] == ["LICENSE"]
    assert proj["authors"] and proj["keywords"] and "Typing :: Typed" in proj["classifiers"]
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["torchfair"]
    assert proj["scripts"]["torchfair"] == "torchfair.cli:main"
    import torchfair
    assert proj["version"] == torchfair.__version__


def test_no_developer_paths_in_sources():
    bad = ("/work/", "/home/", "/root/", "/Users/")
    hits = [f"{p.relative_to(ROOT)}: {b}" for p in list((ROOT / "tests").glob("*.py")) + list(
        (ROOT / "torchfair").rglob("*.py")) for b in bad if b in p.read_text() and p.name != "test_packaging.py"]
    assert not hits


@pytest.mark.slow
def test_wheel_contains_every_module(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "-w", str(tmp_path), "--no-deps",
                        "--no-build-isolation", "-q"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (whl,) = tmp_path.glob("torchfair-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    want = {str(p.relative_to(ROOT)) for p in (ROOT / "torchfair").rglob("*.py")} | {"torchfair/py.typed"}
    assert want <= names, sorted(want - names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
