"""The examples in the docstrings, the README and the docs guides run; the README stays a front door; the docs
site's generated pages (one per declared measure, the results) carry what they are generated from."""
import doctest
import importlib
import importlib.util
import math
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import torchfair

MODULES = sorted(m.name for m in pkgutil.walk_packages(torchfair.__path__, "torchfair."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    torch.manual_seed(0)
    res = doctest.testmod(mod, extraglobs={"torch": torch}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0


def test_readme_python_blocks():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


# ------------------------------------------------------------------------------------------------ the docs site
ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "_generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for section in ("## Install", "## Quickstart", "## Training a fair ranker on MovieLens", "## The headline",
                    "## Concepts", "## Documentation"):
        assert section in text, section
    assert "`RampRank(τ)`" in text  # every loss's default ordering is in the orderings table
    assert "--trec" in text and "torchfair fit" in text and "torchfair evaluate" in text and "make demo" in text
    # every local link of the README points at a file of the repository
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_measure_pages_carry_each_declaration(tmp_path):
    from torchfair.metrics import MEASURES
    _generator().write_measure_pages(tmp_path)
    assert {p.stem for p in tmp_path.glob("*.md")} == set(MEASURES) | {"index"}
    index = (tmp_path / "index.md").read_text()
    direction = {True: "higher is better", False: "lower is better", None: "closest to 0"}
    for name, m in MEASURES.items():
        page = (tmp_path / f"{name}.md").read_text()
        assert page.startswith(f"# `{name}`\n") and f"]({name}.md)" in index
        for text in (m.description, m.validity, m.source, direction[m.higher_is_better], m.fn.__qualname__):
            assert text in page, (name, text)
        assert (f"`{m.loss}`" in page) if m.loss else "not meant as a loss" in page
        if m.value_range is not None and all(isinstance(b, float) and math.isfinite(b) for b in m.value_range):
            assert f"[{m.value_range[0]:g}, {m.value_range[1]:g}]" in page, name


def test_results_pages_copy_every_result_with_a_title_and_local_links(tmp_path):
    experiments = ROOT / "experiments"
    _generator().write_results_pages(experiments, tmp_path)
    results = sorted((experiments / "results").glob("*.md"))
    for src in results:
        page = (tmp_path / src.name).read_text()
        assert page.startswith("# "), src.name
        levels = [len(ln.split(" ")[0]) for ln in page.splitlines() if re.match(r"#{1,6} ", ln)]
        assert all(b <= a + 1 for a, b in zip(levels, levels[1:])), src.name  # no skipped heading level
        for target in re.findall(r"\]\(([^)\s#]+)\)", page):
            assert target.startswith("http") or (tmp_path / target).exists(), (src.name, target)
    index = (tmp_path / "index.md").read_text()
    assert all(src.stem in index for src in results)


def test_paths_named_by_the_readme_and_the_guides_exist():
    pattern = r"(?:tests|experiments|configs|torchfair)/[\w/]+\.(?:py|md|png|json|yaml)"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
    missing = [f"{page.name}: {path}" for page in pages for path in set(re.findall(pattern, page.read_text()))
               if not (ROOT / path).exists()]
    assert not missing, missing


def test_guide_python_blocks_run():
    for page in sorted((ROOT / "docs" / "guides").glob("*.md")):
        for code in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            torch.manual_seed(0)
            exec(compile(code, str(page), "exec"), {})


@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"),
                        str(tmp_path / "html")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "html" / "measures" / "dips.html").is_file()
