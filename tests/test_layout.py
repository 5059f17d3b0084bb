"""The layout of tests/: it mirrors torchfair/.

* every module ``torchfair/<pkg>/<mod>.py`` has a test file ``tests/<pkg>/test_<mod>*.py`` and every top-level
  module ``torchfair/<mod>.py`` a ``tests/test_<mod>*.py`` (the leading underscore of a private module dropped:
  ``orderings/_pairsums.py`` -> ``tests/orderings/test_pairsums.py``), except the few modules of ``EXCEPTIONS``, each
  with the test file that covers it and why;
* the split test folders hold the files they are split into (``EXPECTED_SPLITS``);
* no test file and no test is named after an issue number (``issue``, ``bug``, ``gh`` words, or a bare two- or
  three-digit number such as ``_17`` / ``18``): a test is named after what it checks.

``test_layout`` checks every rule over every module and test file and reports every violation at once;
``test_layout_rules_can_fail`` and ``test_the_tracker_number_rule_itself`` check the rules themselves.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "torchfair"
TESTS = ROOT / "tests"

#: module -> (the test file that covers it, why it has none of its own); keep it short
EXCEPTIONS: dict = {}

#: folders being split by module, and the files they are split into
EXPECTED_SPLITS = {
    "tests/sweeps": ("test_spec.py", "test_trial.py", "test_runner.py", "test_tradeoff.py"),
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


def _module_violations():
    out = []
    for module in MODULES:
        if module in EXCEPTIONS:
            covering, why = EXCEPTIONS[module]
            if not (why and (ROOT / covering).is_file()):
                out.append(f"{module}: the covering test file {covering} is missing")
            continue
        folder, pattern = _test_pattern(module)
        if not sorted(folder.glob(pattern)):
            out.append(f"{module} has no test file {folder.relative_to(ROOT).as_posix()}/{pattern}")
    if len(EXCEPTIONS) > 5:
        out.append(f"EXCEPTIONS holds {len(EXCEPTIONS)} modules (at most 5)")
    for module in EXCEPTIONS:
        if module not in MODULES:
            out.append(f"stale exception: {module} is not a module of torchfair")
            continue
        folder, pattern = _test_pattern(module)
        if sorted(folder.glob(pattern)):
            out.append(f"{module} has its own test file now: drop the exception")
    for folder, names in EXPECTED_SPLITS.items():
        out += [f"{folder}/{name} is missing" for name in names if not (ROOT / folder / name).is_file()]
    return out


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


def _name_violations():
    out = []
    for p in _test_files():
        path = p.relative_to(ROOT).as_posix()
        if issue_reference(p.stem) is not None:
            out.append(f"{path}: the file name refers to an issue ({issue_reference(p.stem)!r})")
        bad = {n: issue_reference(n) for n in _test_names(p) if issue_reference(n)}
        if bad:
            out.append(f"{path}: tests named after an issue: {bad}")
    return out


def test_layout():
    """Every layout rule over every module and test file, every violation reported at once."""
    violations = _module_violations() + _name_violations()
    assert not violations, f"{len(violations)} layout violations:\n" + "\n".join(violations)


def test_layout_rules_can_fail():
    """The module rule reports a module without a test file, a stale exception and a missing split file."""
    global MODULES
    saved = (MODULES, dict(EXCEPTIONS), dict(EXPECTED_SPLITS))
    try:
        MODULES = saved[0] + ["torchfair/nowhere/_absent.py"]
        EXCEPTIONS["torchfair/gone.py"] = ("tests/test_layout.py", "stale")
        EXPECTED_SPLITS["tests/nowhere"] = ("test_x.py",)
        got = "\n".join(_module_violations())
    finally:
        MODULES = saved[0]
        EXCEPTIONS.clear()
        EXCEPTIONS.update(saved[1])
        EXPECTED_SPLITS.clear()
        EXPECTED_SPLITS.update(saved[2])
    assert "torchfair/nowhere/_absent.py has no test file tests/nowhere/test_absent*.py" in got
    assert "stale exception: torchfair/gone.py" in got and "tests/nowhere/test_x.py is missing" in got
