"""The layout of tests/: it mirrors torchfair/.

* every module ``torchfair/<pkg>/<mod>.py`` has a test file ``tests/<pkg>/test_<mod>*.py`` and every top-level
  module ``torchfair/<mod>.py`` a ``tests/test_<mod>*.py`` (the leading underscore of a private module dropped:
  ``orderings/_sweeps.py`` -> ``tests/orderings/test_sweeps.py``), except the few modules of ``EXCEPTIONS``, each
  with the test file that covers it and why;
* the split test folders hold the files they are split into (``EXPECTED_SPLITS``);
* no test file and no test is named after an issue number (``issue``, ``bug``, ``gh`` words, or a bare two- or
  three-digit number such as ``_17`` / ``18``): a test is named after what it checks.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "torchfair"
TESTS = ROOT / "tests"

#: module -> (the test file that covers it, why it has none of its own); keep it short
EXCEPTIONS = {
    "torchfair/sweep.py": ("tests/sweeps/test_runner.py",
                           "a re-export shim of torchfair.sweeps' public names kept for old imports; its names "
                           "are tested with the modules that define them"),
}

#: folders being split by module, and the files they are split into
EXPECTED_SPLITS = {
    "tests/sweeps": ("test_spec.py", "test_trial.py", "test_runner.py", "test_report.py"),
    "tests/training": ("test_cli.py", "test_datamodule.py", "test_module.py", "test_rankers.py", "test_checkpoint.py",
                       "test_evaluate.py"),
}


def _modules():
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or "__pycache__" in path.parts:
            continue
        out.append(path.relative_to(ROOT).as_posix())
    return out


MODULES = _modules()


def _test_pattern(module: str):
    """(folder, glob) of the test files of ``torchfair/<pkg>/.../<mod>.py``."""
    parts = Path(module).parts[1:]  # without "torchfair"
    stem = Path(parts[-1]).stem.lstrip("_")
    return TESTS.joinpath(*parts[:-1]), f"test_{stem}*.py"


@pytest.mark.parametrize("module", MODULES)
def test_every_module_has_a_test_file(module):
    if module in EXCEPTIONS:
        covering, why = EXCEPTIONS[module]
        assert why and (ROOT / covering).is_file(), f"{module}: the covering test file {covering} is missing"
        return
    folder, pattern = _test_pattern(module)
    found = sorted(folder.glob(pattern))
    assert found, f"{module} has no test file {folder.relative_to(ROOT).as_posix()}/{pattern}"


def test_exceptions_name_existing_modules_and_are_few():
    assert len(EXCEPTIONS) <= 5
    for module in EXCEPTIONS:
        assert module in MODULES, f"stale exception: {module} is not a module of torchfair"
        folder, pattern = _test_pattern(module)
        assert not sorted(folder.glob(pattern)), f"{module} has its own test file now: drop the exception"


@pytest.mark.parametrize("path", [f"{folder}/{name}" for folder, names in EXPECTED_SPLITS.items() for name in names])
def test_split_folders_hold_their_files(path):
    assert (ROOT / path).is_file(), f"{path} is missing"


# ------------------------------------------------------------------------------------------------ names
_ISSUE_WORD = re.compile(r"^(issues?|bugs?|gh|ticket)\d*$", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"^[1-9]\d{1,2}$")  # 10 .. 999; a leading zero reads as a decimal (rbp_09 = 0.9)


def issue_reference(name: str):
    """The token of ``name`` (split on underscores and CamelCase) that reads as an issue number, or None."""
    tokens = [t for t in re.split(r"[_\W]+", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)) if t]
    for t in tokens:
        if _ISSUE_WORD.match(t) or _BARE_NUMBER.match(t):
            return t
    return None


def _test_files():
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _test_names(path: Path):
    """Names of the tests of a file: test functions and methods, Test classes, module-level ``test_x = ...``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.append(node.name)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("test")]
    return names


def test_the_tracker_number_rule_itself():
    for bad in ("test_issue_17", "test_bug18_fix", "test_fixes_18", "test_regression_17_padding", "test_gh12",
                "test_issues", "TestIssue"):
        assert issue_reference(bad) is not None, bad
    for good in ("test_float16_inputs", "test_fa_ir_is_algorithm_1", "test_toy_igi_ree_section_4_4",
                 "test_worked_example_2022", "test_default_browsing_is_rbp_09_and_names", "test_grouplens_100k",
                 "test_logits_spanning_1e4", "test_isotonic_regression", "test_exact_single_list_and_n8"):
        assert issue_reference(good) is None, good


@pytest.mark.parametrize("path", [p.relative_to(ROOT).as_posix() for p in _test_files()])
def test_no_test_file_or_test_carries_a_tracker_number(path):
    p = ROOT / path
    assert issue_reference(p.stem) is None, f"{path}: the file name refers to an issue ({issue_reference(p.stem)!r})"
    bad = {n: issue_reference(n) for n in _test_names(p) if issue_reference(n)}
    assert not bad, f"{path}: tests named after an issue: {bad}"
