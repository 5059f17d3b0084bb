"""Pages the docs build writes before Sphinx reads its sources (called from ``conf.py``).

* :func:`write_measure_pages`: ``measures/<name>.md`` for every declaration of ``torchfair.metrics.MEASURES``;
* :func:`write_results_pages`: ``results/``: ``experiments/README.md`` (the experiments index) and every
  ``experiments/results/*.md`` with its figures, links rewritten to the copied pages, each page headed by where its
  numbers come from (commit, date, machine, command: read from the result's JSON, "not recorded" where it has none);
* :func:`write_api_pages`: ``api/``: one page per public package, an autosummary table of the names in its
  ``__all__`` (Sphinx's autosummary writes one page per function and class into ``api/generated/``).
"""
import importlib
import inspect
import json
import math
import re
import shutil
from pathlib import Path

from torchfair.metrics import MEASURES

_DIRECTION = {"higher": "higher is better", "lower": "lower is better",
              "zero": "signed (or a vector): closest to 0 / parity is best"}
_OUTPUT = {"list": "one value per list, `[B]`", "group": "one value per group, `[B, G]`",
           "pair": "one value per ordered pair of groups, `[B, G, G]`",
           "record": "a record (NamedTuple) of per-list tensors"}


def _bound(b) -> str:
    if isinstance(b, float) and math.isinf(b):
        return "∞" if b > 0 else "−∞"
    if isinstance(b, (int, float)):
        return f"{b:g}"
    return repr(b)  # RelevanceBound: MAX_RELEVANCE


def _range(r) -> str:
    return "no documented bound" if r is None else f"[{_bound(r[0])}, {_bound(r[1])}]"


def _value(v) -> str:
    return f"`{v!r}`" if not isinstance(v, str) else f'`"{v}"`'


def measure_page(m) -> str:
    """The markdown page of one declaration ``m`` (a :class:`torchfair.metrics.Measure`)."""
    fn = f"{m.fn.__module__}.{m.fn.__qualname__}"
    public = f"torchfair.metrics.{m.fn.__name__}"
    rows = [
        ("function", f"{{py:func}}`{public} <{fn}>`"),
        ("kind", m.kind),
        ("direction", _DIRECTION[m.direction]),
        ("range (default options)", _range(m.value_range)),
    ]
    for opt, table in m.option_ranges.items():
        for v, r in table.items():
            rows.append((f"range with `{opt}={v!r}`", _range(r)))
    for f, r in m.field_ranges.items():
        rows.append((f"range of field `{f}`", _range(r)))
    rows += [
        ("per-list value", _OUTPUT[m.output]),
        ("validity", m.validity),
        ("formula source", m.source),
        ("default loss reducer", f"`{m.loss}`" + (f" on field `{m.loss_field}`" if m.loss_field else "")
         if m.loss else "none (not meant as a loss)"),
        ("needs", ", ".join(f"`{n}`" for n in m.needs) or "the scores only"),
        ("data tensors", ", ".join(f"`{d}`" for d in m.data)),
        ("soft membership `[B, N, G]`", "yes" if m.soft_groups is True else "no" if m.soft_groups is False else
         "under " + ", ".join(f"`{k}` in {tuple(v)!r}" for k, v in m.soft_groups.items())),
        ("expectation over rankings", "yes: a sampled estimate (`Sampled`, `PlackettLuce`) is unbiased"
         if m.expectation else "no"),
    ]
    if m.defaults:
        rows.append(("options the evaluation tools pass", ", ".join(f"`{k}={v!r}`" for k, v in m.defaults.items())))
    if m.options:
        rows.append(("options tested", "; ".join(f"`{k}`: " + ", ".join(_value(x) for x in v)
                                                 for k, v in m.options.items())))
    table = "\n".join(f"| {k} | {v.replace('|', chr(92) + '|')} |" for k, v in rows)
    loss = (f"As a loss: `measure_loss(\"{m.name}\", scores, ...)` or `MeasureLoss(\"{m.name}\")` "
            f"(reducer `{m.loss}` by default; see {{doc}}`/guides/losses`).\n" if m.loss else "")
    return (f"# `{m.name}`\n\n{m.description}\n\n| | |\n|---|---|\n{table}\n\n"
            f"In the evaluation tools: `evaluate_lists(lists, [\"{m.name}\"])`, "
            f"`torchfair metrics --measures {m.name}`.\n{loss}\n"
            f"```{{eval-rst}}\n.. autofunction:: {fn}\n   :no-index:\n```\n")


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:  # unchanged files keep Sphinx's incremental build
        path.write_text(text)


def write_measure_pages(out: Path) -> None:
    """One page per declared measure, and the table of them all (``out/index.md``)."""
    out.mkdir(exist_ok=True)
    for old in out.glob("*.md"):
        if old.stem != "index" and old.stem not in MEASURES:
            old.unlink()
    rows = []
    for name, m in MEASURES.items():
        _write(out / f"{name}.md", measure_page(m))
        rows.append(f"| [`{name}`]({name}.md) | {m.kind} | {_DIRECTION[m.direction].split(':')[0]} | "
                    f"{_range(m.value_range)} | {m.loss or '-'} | {m.source} |")
    toc = "\n".join(MEASURES)
    _write(out / "index.md",
           "# Declared measures\n\nOne page per declaration of `torchfair.metrics.MEASURES`, generated when the docs "
           "are built (`docs/_generate.py`); `torchfair metrics --list_measures` prints the same declarations.\n\n"
           "| measure | kind | direction | range | default loss reducer | source |\n|---|---|---|---|---|---|\n"
           + "\n".join(rows) + f"\n\n```{{toctree}}\n:hidden:\n\n{toc}\n```\n")


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _local_links(text: str, pages: dict) -> str:
    """Links to copied result pages and figures stay (``pages``: file name -> the page that holds it now); links to
    scripts and configs become plain text."""
    def fix(mo):
        bang, label, target = mo.groups()
        if target.startswith(("http://", "https://", "#")):
            return mo.group(0)
        name = Path(target).name
        if name in pages:
            return f"{bang}[{label}]({pages[name]})"
        return label
    return _LINK.sub(fix, text)


def _headings(text: str, stem: str, shift: int = 0) -> str:
    """A title when the page has none, no heading more than one level below the one before it, and every heading
    ``shift`` levels lower (a page included in another)."""
    lines, out, fence, prev = text.splitlines(), [], False, 0
    if not lines or not lines[0].startswith("# "):
        lines.insert(0, f"# {stem.replace('_', ' ')}\n")
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            head, rest = line.split(" ", 1)
            prev = min(len(head), prev + 1)
            line = "#" * min(6, prev + shift) + " " + rest
        out.append(line)
    return "\n".join(out) + "\n"


#: what a result page's header says about where its numbers come from, read from the result's JSON
PROVENANCE = ("commit", "date", "machine", "command")
NOT_RECORDED = "not recorded"

#: result pages measured by a version of their script that no longer exists: gathered on one page, marked historical
HISTORICAL = {
    "ramp_tradeoff": "measured by an earlier version of `experiments/ramp_tradeoff.py` (commit 2f26eed: its own trial "
                     "runner, `--code HEAD`), which no longer exists in that form. The current script runs the same "
                     "trial configs through the sweeps (`configs/sweep_starts_listnet.yaml`, "
                     "`configs/sweep_ramp_tradeoff.yaml`) but has not been rerun, so these numbers are a record of "
                     "that run, not of the current code.",
}
HISTORICAL_PAGE = "historical"


def _format(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_format(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def provenance(results: Path, stem: str) -> dict:
    """``{commit, date, machine, command}`` of the result ``stem``: from ``results/<stem>.json``, under the key
    ``provenance`` or at its top level; a field the JSON does not hold (or a result without a JSON) is
    ``None``."""
    path = results / f"{stem}.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data = data if isinstance(data, dict) else {}
    nested = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    return {k: nested.get(k, data.get(k)) for k in PROVENANCE}


def provenance_header(results: Path, stem: str) -> str:
    """The table a result page starts with, below its title."""
    fields = provenance(results, stem)
    source = (f"`experiments/results/{stem}.json`" if (results / f"{stem}.json").is_file()
              else f"`experiments/results/{stem}.md` (no JSON beside it)")
    rows = [("numbers from", source)]
    for k in PROVENANCE:
        v = fields[k]
        rows.append((k, NOT_RECORDED if v in (None, "", {}, []) else
                     (f"`{_format(v)}`" if k in ("commit", "command") else _format(v).replace("|", "\\|"))))
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n"


def _historical(stem: str):
    return next((why for prefix, why in HISTORICAL.items() if stem.startswith(prefix)), None)


def _with_header(page: str, header: str) -> str:
    title, _, rest = page.partition("\n")
    return f"{title}\n\n{header}\n{rest.lstrip(chr(10))}"


def write_results_pages(experiments: Path, out: Path) -> None:
    """``out/index.md`` (the experiments index) and a copy of each result page and figure, each page headed by
    :func:`provenance_header`; the pages of :data:`HISTORICAL` are gathered on ``out/historical.md``."""
    out.mkdir(exist_ok=True)
    results = experiments / "results"
    files = sorted(p for p in results.iterdir() if p.suffix in (".md", ".png"))
    md = [p for p in files if p.suffix == ".md"]
    old = [p for p in md if _historical(p.stem)]
    pages = {p.name: p.name for p in files}
    pages.update({p.name: f"{HISTORICAL_PAGE}.md" for p in old})
    for p in files:
        if p.suffix == ".png":
            if not (out / p.name).exists() or (out / p.name).read_bytes() != p.read_bytes():
                shutil.copyfile(p, out / p.name)
        elif p not in old:
            page = _headings(_local_links(p.read_text(), pages), p.stem)
            _write(out / p.name, _with_header(page, provenance_header(results, p.stem)))
    for p in old:  # a copy from an earlier build
        if (out / p.name).exists():
            (out / p.name).unlink()
    toc = [p.stem for p in md if p not in old]
    if old:
        why = {_historical(p.stem) for p in old}
        text = ("# Historical results\n\nThe results on this page were " + " ".join(sorted(why)) + "\n\n"
                + "".join(_with_header(_headings(_local_links(p.read_text(), pages), p.stem, shift=1),
                                       provenance_header(results, p.stem)) + "\n" for p in old))
        _write(out / f"{HISTORICAL_PAGE}.md", text)
        toc.append(HISTORICAL_PAGE)
    index = _local_links((experiments / "README.md").read_text(), pages)
    _write(out / "index.md", index + "\n```{toctree}\n:hidden:\n\n" + "\n".join(toc) + "\n```\n")


# ------------------------------------------------------------------------------------------------------ API pages
#: the public packages, in the order of the API index; a package without ``__all__`` lists its submodules' instead
API_PACKAGES = (
    ("torchfair", "the top level"),
    ("torchfair.metrics", "every measure, its declaration and its torchmetrics class"),
    ("torchfair.orderings", "how a measure sees a ranking: exact, sampled, soft, Plackett-Luce"),
    ("torchfair.losses", "measures as losses, utility losses, the regulariser"),
    ("torchfair.browsing", "position-weight models F(k)"),
    ("torchfair.rerank", "re-rankers of a trained ranker's scores"),
    ("torchfair.evaluation", "the evaluation engine, TREC readers, accumulators"),
    ("torchfair.compat", "FairRankTune, expeval and TREC Fair conventions"),
    ("torchfair.kernels", "the compiled CPU kernels and their gate"),
    ("torchfair.data", "synthetic lists, MovieLens, splits, groups, batches"),
    ("torchfair.training", "rankers, the LightningModule and DataModule, checkpoint reports (extra ``[train]``)"),
    ("torchfair.sweeps", "sweep files, trials, the Optuna study, reports (extra ``[sweep]``)"),
)


def _public(module) -> list:
    """``(name, kind)`` for each public name of ``module``: kind ``"object"`` (a function or class: a page of its
    own) or ``"data"`` (a constant, documented on the package page); submodules and dunder names are left out."""
    out = []
    for name in getattr(module, "__all__", ()):
        if name.startswith("__"):
            continue
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            continue
        out.append((name, "object" if inspect.isclass(obj) or inspect.isroutine(obj) else "data"))
    return out


def _attr_doc(modname: str, name: str) -> str:
    """The ``#:`` comment of the constant ``name`` (in ``modname`` or the submodule that defines it), else ""."""
    import sys

    from sphinx.pycode import ModuleAnalyzer
    for mod in [modname] + sorted(m for m in list(sys.modules) if m.startswith(modname + ".")):
        try:
            docs = ModuleAnalyzer.for_module(mod).find_attr_docs()
        except Exception:  # noqa: BLE001 - a module without source (a mock, a compiled extension)
            continue
        if ("", name) in docs:
            return "\n".join(docs[("", name)]).strip()
    return ""


def _api_section(modname: str) -> tuple:
    """The markdown of one module's names, and the autosummary stub names it asks for."""
    module = importlib.import_module(modname)
    names = _public(module)
    objects = [n for n, kind in names if kind == "object"]
    data = [n for n, kind in names if kind == "data"]
    text = ""
    if objects:
        rows = "\n".join(f"   {n}" for n in objects)
        text += (f"```{{eval-rst}}\n.. currentmodule:: {modname}\n\n.. autosummary::\n   :toctree: generated\n"
                 f"   :nosignatures:\n\n{rows}\n```\n\n")
    if data:
        text += "Constants:\n\n```{eval-rst}\n"
        for n in data:
            doc = _attr_doc(modname, n)
            text += f".. py:data:: {modname}.{n}\n\n" + "".join(f"   {ln}\n" if ln else "\n"
                                                                 for ln in doc.splitlines()) + "\n"
        text += "```\n\n"
    return text, [f"{modname}.{n}" for n in objects]


def write_api_pages(out: Path) -> None:
    """``out/<package>.md`` for each of :data:`API_PACKAGES` (its docstring, then an autosummary table of its
    ``__all__``; the stubs go to ``out/generated/``) and ``out/index.md``; stubs of names no longer public are
    deleted (they would be pages outside every table of contents)."""
    out.mkdir(exist_ok=True)
    stubs, rows = set(), []
    for modname, blurb in API_PACKAGES:
        module = importlib.import_module(modname)
        page = f"# `{modname}`\n\n```{{eval-rst}}\n.. automodule:: {modname}\n   :no-members:\n```\n\n"
        if hasattr(module, "__all__"):
            section, names = _api_section(modname)
            page += section
            stubs.update(names)
        else:  # torchfair.compat: its submodules are imported explicitly
            import pkgutil
            for sub in sorted(m.name for m in pkgutil.iter_modules(module.__path__) if not m.name.startswith("_")):
                section, names = _api_section(f"{modname}.{sub}")
                page += f"## `{modname}.{sub}`\n\n" + section
                stubs.update(names)
        _write(out / f"{modname}.md", page.rstrip() + "\n")
        rows.append(f"| [`{modname}`]({modname}.md) | {blurb} |")
    for old in out.glob("*.md"):
        if old.stem != "index" and old.stem not in {m for m, _ in API_PACKAGES}:
            old.unlink()
    generated = out / "generated"
    if generated.is_dir():
        for old in generated.glob("*.rst"):
            if old.stem not in stubs:
                old.unlink()
    toc = "\n".join(m for m, _ in API_PACKAGES)
    _write(out / "index.md",
           "# API reference\n\nOne page per public name (the `__all__` of each package), generated from the docstrings "
           "when the docs are built (`docs/_generate.py`); each docstring gives the formula, its source, the shapes "
           "and an example.\n\n| package | holds |\n|---|---|\n" + "\n".join(rows)
           + f"\n\n```{{toctree}}\n:hidden:\n\n{toc}\n```\n")
