"""Pages the docs build writes before Sphinx reads its sources (called from ``conf.py``).

* :func:`write_measure_pages`: ``measures/<name>.md`` for every declaration of ``torchfair.metrics.MEASURES``;
* :func:`write_results_pages`: ``results/``: ``experiments/README.md`` (the experiments index) and every
  ``experiments/results/*.md`` with its figures, links rewritten to the copied pages.
"""
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


def _local_links(text: str, pages: set) -> str:
    """Links to copied result pages and figures stay; links to scripts and configs become plain text."""
    def fix(mo):
        bang, label, target = mo.groups()
        if target.startswith(("http://", "https://", "#")):
            return mo.group(0)
        name = Path(target).name
        if name in pages:
            return f"{bang}[{label}]({name})"
        return label
    return _LINK.sub(fix, text)


def _headings(text: str, stem: str) -> str:
    """A title when the page has none, and no heading more than one level below the one before it."""
    lines, out, fence, prev = text.splitlines(), [], False, 0
    if not lines or not lines[0].startswith("# "):
        lines.insert(0, f"# {stem.replace('_', ' ')}\n")
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            head, rest = line.split(" ", 1)
            prev = min(len(head), prev + 1)
            line = "#" * prev + " " + rest
        out.append(line)
    return "\n".join(out) + "\n"


def write_results_pages(experiments: Path, out: Path) -> None:
    """``out/index.md`` (the experiments index) and a copy of each result page and figure."""
    out.mkdir(exist_ok=True)
    results = experiments / "results"
    files = sorted(p for p in results.iterdir() if p.suffix in (".md", ".png"))
    pages = {p.name for p in files}
    for p in files:
        if p.suffix == ".png":
            if not (out / p.name).exists() or (out / p.name).read_bytes() != p.read_bytes():
                shutil.copyfile(p, out / p.name)
        else:
            _write(out / p.name, _headings(_local_links(p.read_text(), pages), p.stem))
    index = _local_links((experiments / "README.md").read_text(), pages)
    toc = "\n".join(p.stem for p in files if p.suffix == ".md")
    _write(out / "index.md", index + f"\n```{{toctree}}\n:hidden:\n\n{toc}\n```\n")
