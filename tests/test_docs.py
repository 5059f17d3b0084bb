"""The examples in the docstrings, the README, the docs guides and the user's pages (install, quickstart, tasks) run;
the README stays a front door; the guides hold no dated or machine-specific prose; the docs site's generated pages
(one per declared measure, one per public name, the results) carry what they are generated from."""
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


#: the README's sections, in this order: install, quickstart, command line, concepts, the headline, the docs
README_SECTIONS = ("## Install", "## Quickstart", "## Command line", "## Concepts", "## The headline",
                   "## Documentation")


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    order = [next(i for i, h in enumerate(heads) if h.startswith(s)) for s in README_SECTIONS]
    assert order == sorted(order), heads  # every section present, in this order
    section = {s: text.split(s, 1)[1].split("\n## ", 1)[0] for s in README_SECTIONS}
    assert "pip install ." in section["## Install"] and '".[train]"' in section["## Install"]
    assert "make install" in section["## Install"] and "make test" in section["## Install"]
    quick = section["## Quickstart"]  # functional, then DIPS() update / compute, then a loss
    assert quick.index("dips(") < quick.index("DIPS(") < quick.index(".update(") < quick.index(".compute()") \
        < quick.index("Loss(")
    assert "--trec" in section["## Command line"] and "torchfair evaluate" in section["## Command line"]
    assert "torchfair fit" in section["## Command line"] and "make demo" in section["## Command line"]
    assert "`RampRank(τ)`" in section["## Concepts"]  # every loss's default ordering is in the orderings table
    headline = [ln for ln in section["## The headline"].splitlines() if ln.strip()]
    assert "](docs/guides/headline.md)" in " ".join(headline) and len(headline) <= 4 and "|" not in " ".join(headline)
    assert "background" not in text  # kernels compile in the calling process (or up front: torchfair warmup)
    # every local link of the README points at a file of the repository
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


#: the user's pages: each holds python blocks the suite runs, in order, in one namespace
USER_PAGES = [ROOT / "docs" / "install.md", ROOT / "docs" / "quickstart.md",
              *sorted((ROOT / "docs" / "tasks").glob("*.md"))]


def _page_id(page):
    return str(page.relative_to(ROOT / "docs").with_suffix(""))


def test_the_six_tasks_have_pages():
    assert {p.stem for p in (ROOT / "docs" / "tasks").glob("*.md")} >= {
        "ltr_loss", "trec_run", "accumulate", "rerank", "temperature", "ray_sweep"}
    index = (ROOT / "docs" / "index.md").read_text()
    assert all(_page_id(p) in index for p in USER_PAGES)


@pytest.mark.parametrize("page", USER_PAGES, ids=_page_id)
def test_user_page_python_blocks_run(page, tmp_path, monkeypatch):
    """A block whose first line is ``# needs: MODULE`` is skipped when MODULE is not installed; the blocks before
    it still run, and the test is then reported as skipped with the reason."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert blocks, f"{page.name}: no python block"
    monkeypatch.chdir(tmp_path)  # a page that writes files writes them here
    torch.manual_seed(0)
    namespace, skipped = {"__name__": f"docs_{page.stem}"}, []
    for code in blocks:
        need = re.match(r"# needs: ([\w.]+)", code)
        if need and importlib.util.find_spec(need.group(1)) is None:
            skipped.append(need.group(1))
            continue
        exec(compile(code, str(page), "exec"), namespace)
    if skipped:
        pytest.skip(f"{page.name}: ran {len(blocks) - len(skipped)} of {len(blocks)} blocks; the one that needs "
                    f"{', '.join(skipped)} did not run ({', '.join(skipped)} is not installed: pip install "
                    f"'torchfair[{skipped[0]}]')")


#: what a guide does not say: dates, this project's machines, lab-notebook verdicts (figures belong on the results
#: pages, which say where and when they were measured)
DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b|this project|2-core|2 cores|on 2 CPUs|2-CPU|\baims?\b.*\b(met|missed)\b|"
                   r"GPU was (lent|available)|on this machine|the machine of|the same machine|this session|"
                   r"\bissue[- ]\d+|\blast run\b|\bload average\b", re.I)


def test_guides_hold_no_dated_prose():
    pages = [*sorted((ROOT / "docs" / "guides").glob("*.md")), *USER_PAGES, ROOT / "docs" / "index.md"]
    found = [f"{p.name}:{i}: {ln.strip()}" for p in pages for i, ln in enumerate(p.read_text().splitlines(), 1)
             if DATED.search(ln)]
    assert not found, found


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
    gen = _generator()
    gen.write_results_pages(experiments, tmp_path)
    results = sorted((experiments / "results").glob("*.md"))
    historical = [src for src in results if gen._historical(src.stem)]
    assert historical and not any((tmp_path / src.name).exists() for src in historical)
    pages = [tmp_path / src.name for src in results if src not in historical] + [tmp_path / "historical.md"]
    for page in pages:
        text = page.read_text()
        assert text.startswith("# "), page.name
        levels = [len(ln.split(" ")[0]) for ln in text.splitlines() if re.match(r"#{1,6} ", ln)]
        assert all(b <= a + 1 for a, b in zip(levels, levels[1:])), page.name  # no skipped heading level
        for target in re.findall(r"\]\(([^)\s#]+)\)", text):
            assert target.startswith("http") or (tmp_path / target).exists(), (page.name, target)
        for field in ("numbers from", *gen.PROVENANCE):
            assert f"| {field} |" in text, (page.name, field)
    old = (tmp_path / "historical.md").read_text()
    assert old.startswith("# Historical results\n") and all(src.read_text().splitlines()[0][2:] in old
                                                            for src in historical)
    index = (tmp_path / "index.md").read_text()
    assert all(src.stem in index for src in results) and "\nhistorical\n" in index


def test_results_header_reads_the_json_and_invents_nothing(tmp_path):
    import json
    gen = _generator()
    (tmp_path / "a.json").write_text(json.dumps({"provenance": {"commit": "abc123", "date": "2030-01-02",
                                                                "machine": {"cpus": 4}, "command": "python x.py"}}))
    (tmp_path / "b.json").write_text(json.dumps({"commit": "def456", "rows": []}))
    a = gen.provenance_header(tmp_path, "a")
    assert "`abc123`" in a and "2030-01-02" in a and "cpus: 4" in a and "`python x.py`" in a
    assert gen.NOT_RECORDED not in a
    b = gen.provenance_header(tmp_path, "b")
    assert "`def456`" in b and b.count(gen.NOT_RECORDED) == 3
    c = gen.provenance_header(tmp_path, "c")  # no JSON at all
    assert c.count(gen.NOT_RECORDED) == 4 and "no JSON" in c


def test_api_pages_list_every_public_name(tmp_path):
    pytest.importorskip("sphinx")
    gen = _generator()
    gen.write_api_pages(tmp_path)
    (tmp_path / "generated").mkdir(exist_ok=True)
    (tmp_path / "generated" / "torchfair.metrics.gone.rst").write_text("a stub of a name no longer public\n")
    gen.write_api_pages(tmp_path)
    assert not (tmp_path / "generated" / "torchfair.metrics.gone.rst").exists()
    for modname, _ in gen.API_PACKAGES:
        page = (tmp_path / f"{modname}.md").read_text()
        mod = importlib.import_module(modname)
        subs = [mod] if hasattr(mod, "__all__") else [importlib.import_module(f"{modname}.{m.name}")
                                                      for m in pkgutil.iter_modules(mod.__path__)]
        for sub in subs:
            for name, kind in gen._public(sub):
                assert (f"   {name}\n" if kind == "object" else f".. py:data:: {sub.__name__}.{name}\n") in page, \
                    (modname, name)
    public = [m.name for m in pkgutil.iter_modules(torchfair.__path__) if not m.name.startswith("_")
              and m.ispkg]
    assert {f"torchfair.{m}" for m in public} <= {m for m, _ in gen.API_PACKAGES}  # every public package has a page


def test_paths_named_by_the_readme_and_the_guides_exist():
    pattern = r"(?:tests|experiments|configs|torchfair)/[\w/]+\.(?:py|md|png|json|yaml)"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md")), *USER_PAGES]
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
