"""The rooms of the package and what may import what (../shared/ARCHITECTURE.md, DEVELOPERS.md):

* no private import across packages: a module imports another subpackage's private names (``_pad``) or private
  modules (``metrics._common``) only inside its own subpackage (the modules directly in ``torchfair/``, the root
  ``__init__`` among them, are one package: the root imports ``torchfair._warmup``); the package-wide internals
  ``torchfair._validation``, ``torchfair._linalg``, ``torchfair._extras`` (the optional dependencies) and
  ``torchfair._version`` are shared by design;
* the command line only wires functions to options: ``torchfair/cli.py`` has at most 250 lines and imports no
  measure, ordering or loss;
* training code calls the evaluation engine and never an ordering: ``torchfair/training`` imports nothing from
  ``torchfair.orderings``; checkpoint evaluation is not a second report module (``training/report.py`` is gone).

The layers themselves (no import circle, no module importing a layer above its own, lazy imports included) are
checked on the whole import graph by ``tests/test_import_graph.py``.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "torchfair"
SHARED_INTERNALS = {"torchfair._validation", "torchfair._linalg", "torchfair._extras", "torchfair._version"}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> Iterator[Tuple[int, str, str]]:
    """``(line, absolute module, imported name)`` of every ``from ... import`` in ``path`` (also inside functions);
    ``import x.y`` gives ``(line, "x.y", "")``."""
    me = _module_name(path, root)
    base = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            for alias in node.names:
                yield node.lineno, target, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ""


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _subpackage(module: str, package: Path) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (package / parts[1]).is_dir()) else ""


def private_imports_across_packages(root: Path = ROOT) -> List[str]:
    found = []
    package = root / "torchfair"
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        me = _module_name(path, root)
        sub = _subpackage(me, package)
        for line, target, name in _imports(path, root):
            if not target.startswith("torchfair") or target in SHARED_INTERNALS:
                continue
            full = f"{target}.{name}" if name else target
            if full in SHARED_INTERNALS:
                continue
            private = any(_private(p) for p in target.split(".")[1:]) or _private(name)
            if private and _subpackage(target, package) != sub:
                found.append(f"{path.relative_to(root)}:{line}: from {target} import {name}")
    return found


def test_no_private_import_across_packages():
    found = private_imports_across_packages()
    assert not found, "private names / modules imported from another package (make them public there):\n" + \
        "\n".join(found)


def test_the_scanner_finds_a_private_import(tmp_path):
    """The check above can fail: a planted module importing another package's private helper is found, one
    importing its own package's is not."""
    pkg = tmp_path / "torchfair"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    for f in ("__init__.py", "a/__init__.py", "b/__init__.py", "b/m.py"):
        (pkg / f).write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from ..b.m import _helper\n    from ..b import m\n")
    (pkg / "b" / "y.py").write_text("from .m import _helper\n")
    assert private_imports_across_packages(tmp_path) == ["torchfair/a/x.py:2: from torchfair.b.m import _helper"]


def test_cli_only_wires_functions():
    path = PACKAGE / "cli.py"
    assert len(path.read_text().splitlines()) <= 250
    bad = [f"{line}: {target} {name}" for line, target, name in _imports(path)
           if any(f"torchfair.{room}" in f"{target}.{name}" for room in ("metrics", "orderings", "losses"))]
    assert not bad, f"torchfair/cli.py imports a measure, ordering or loss: {bad}"


def test_training_imports_no_ordering():
    bad = [f"{p.relative_to(ROOT)}:{line}: {target} {name}" for p in sorted((PACKAGE / "training").glob("*.py"))
           for line, target, name in _imports(p) if f"{target}.{name}".startswith("torchfair.orderings")]
    assert not bad, bad
    report = PACKAGE / "training" / "report.py"
    assert not report.exists() or len(report.read_text().splitlines()) <= 250


@pytest.mark.parametrize("module", ["cli", "training.evaluate", "training.checkpoint", "evaluation.files"])
def test_application_modules_stay_small(module):
    path = PACKAGE.joinpath(*module.split(".")).with_suffix(".py")
    if path.exists():
        assert len(path.read_text().splitlines()) <= 400, f"{path} grew past 400 lines"
