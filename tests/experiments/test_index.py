"""experiments/README.md, the index of the experiments: one row per ``experiments/*.py`` script (not the private
``_`` modules), and every script, sweep file and result file a row names exists; every sweep file of configs/ is
some experiment's (or the README's example)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
INDEX = EXPERIMENTS / "README.md"
#: sweep files that belong to no experiment: the README's example of `torchfair sweep`
NOT_AN_EXPERIMENT = {"sweep_smoke.yaml"}
LINK = re.compile(r"\[[^\]]*\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _cells(line: str):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse(text: str):
    """The index table's rows as dicts of its header's columns (``script``, ``question``, ``command``, ``time``,
    ``sweep files``, ``result``); ``ValueError`` without such a table."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| script |"):
            head = _cells(line)
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = _cells(row)
                if len(cells) != len(head):
                    raise ValueError(f"row with {len(cells)} cells, the header has {len(head)}: {row}")
                rows.append(dict(zip(head, cells)))
            return rows
    raise ValueError("no table whose header starts with '| script |'")


def links(cell: str):
    """The paths a cell links to (relative to experiments/)."""
    return LINK.findall(cell)


ROWS = parse(INDEX.read_text())
SCRIPTS = sorted(p.name for p in EXPERIMENTS.glob("*.py") if not p.name.startswith("_"))


def test_the_parser_reads_a_table_by_hand():
    text = ("intro\n\n| script | question | command | time | sweep files | result |\n|---|---|---|---|---|---|\n"
            "| [`a.py`](a.py) | Why? | `python experiments/a.py` | 3 s | - | [a.md](results/a.md), [b](../b.md#x) |\n"
            "\nafter\n| not | a row |\n")
    (row,) = parse(text)
    assert row["script"] == "[`a.py`](a.py)" and row["time"] == "3 s"
    assert links(row["result"]) == ["results/a.md", "../b.md"]
    with pytest.raises(ValueError, match="cells"):
        parse(text.replace("| 3 s |", "| 3 s | extra |"))
    with pytest.raises(ValueError, match="no table"):
        parse("| name | x |\n|---|---|\n")


def test_every_script_has_one_row():
    named = [links(r["script"]) for r in ROWS]
    assert all(len(n) == 1 for n in named), [r["script"] for r in ROWS]
    named = [n[0] for n in named]
    assert sorted(named) == SCRIPTS, (f"no row: {sorted(set(SCRIPTS) - set(named))}; "
                                      f"not a script: {sorted(set(named) - set(SCRIPTS))}; "
                                      f"twice: {sorted(n for n in set(named) if named.count(n) > 1)}")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: links(r["script"])[0] if links(r["script"]) else "?")
def test_every_row_names_existing_files_and_says_how_long(row):
    script = links(row["script"])[0]
    assert (EXPERIMENTS / script).is_file()
    assert row["question"] and row["time"] and row["time"] != "-"
    # the command runs this script (or the benchmark that runs it as a section)
    assert f"experiments/{script}" in row["command"] or "experiments/bench_speed.py" in row["command"]
    results = links(row["result"])
    assert results, f"{script}: no result file linked"
    for path in results:
        assert (EXPERIMENTS / path).is_file(), f"{script}: {path} does not exist"
    for path in links(row["sweep files"]):
        assert (EXPERIMENTS / path).is_file(), f"{script}: {path} does not exist"
        assert Path(path).name in (EXPERIMENTS / script).read_text(), f"{script} does not use {path}"


def test_every_sweep_file_belongs_to_an_experiment():
    named = {Path(p).name for r in ROWS for p in links(r["sweep files"])}
    files = {p.name for p in (ROOT / "configs").glob("sweep_*.yaml")}
    assert files - NOT_AN_EXPERIMENT <= named, f"sweep files no experiment names: {sorted(files - named)}"
