"""torchfair.evaluation._format: numbers for tables, JSON values, markdown rows.

``markdown_rows`` is checked by parsing its output back (cells split on unescaped pipes) for arbitrary cells;
``jsonable`` by ``json.dumps`` of arbitrary nests of Python, numpy and torch values and the value expected for
each leaf; ``fmt`` on worked values.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchfair.evaluation._format import fmt, jsonable, markdown_rows, terminal_width

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------------ fmt
def test_fmt():
    assert fmt(None) == "n/a" and fmt(float("nan")) == "n/a"
    assert fmt(0.123456) == "0.1235" and fmt(-2.0, 2) == "-2.00" and fmt(3, 1) == "3.0"
    assert fmt(float("inf")) == "inf" and fmt(np.float32(0.5)) == "0.5000"


# ------------------------------------------------------------------------------------------------ jsonable
def test_jsonable_leaves():
    class Thing:
        def __repr__(self):
            return "Thing()"

    cases = [
        (float("nan"), None), (np.float32("nan"), None), (1.5, 1.5), (np.float64(2.25), 2.25), (np.int64(7), 7),
        (np.bool_(True), True), (True, True), (3, 3), ("x", "x"), (None, None), (Thing(), "Thing()"),
        (torch.tensor(0.5), 0.5), (torch.tensor([1, 2]), [1, 2]), (torch.tensor([float("nan"), 1.0]), [None, 1.0]),
        (np.array([[1.0, np.nan]]), [[1.0, None]]), ((1, 2.0), [1, 2.0]), ({1: "a", (2, 3): [np.int32(4)]},
                                                                          {"1": "a", "(2, 3)": [4]}),
    ]
    for value, want in cases:
        got = jsonable(value)
        assert got == want and type(got) is type(want), (value, got)
        json.dumps(got, allow_nan=False)
    t = torch.ones(2, requires_grad=True) * 2  # tensors with a graph
    assert jsonable({"t": t}) == {"t": [2.0, 2.0]}


_leaves = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6), st.floats(allow_infinity=False),
                    st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False).map(np.float64),
                    st.integers(-100, 100).map(np.int64),
                    st.lists(st.floats(allow_infinity=False), max_size=3).map(lambda x: torch.tensor(x, dtype=torch.float64)))
_nests = st.recursive(_leaves, lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                                                        st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                      max_leaves=10)


def _expect(x):
    """The JSON value of ``x`` written out case by case."""
    if isinstance(x, dict):
        return {k: _expect(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_expect(v) for v in x]
    if isinstance(x, torch.Tensor):
        return [_expect(float(v)) for v in x.tolist()]
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


@SETTINGS
@given(value=_nests)
def test_jsonable_gives_strict_json_of_any_nest(value):
    got = jsonable(value)
    assert got == _expect(value)
    assert json.loads(json.dumps(got, allow_nan=False)) == got


# ------------------------------------------------------------------------------------------------ markdown_rows
def _parse(md):
    """Cells of every line, split on the pipes that are not escaped, escapes undone."""
    out = []
    for line in md.split("\n"):
        assert line.startswith("|") and line.endswith("|")
        cells = re.split(r"(?<!\\)\|", line[1:-1])
        out.append([c.strip().replace("\\|", "|") for c in cells])
    return out


_cell = st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
                                                   blacklist_characters="\\"), max_size=6).map(str.strip),
                  st.integers(-5, 5), st.floats(-10, 10))


@SETTINGS
@given(data=st.data(), ncol=st.integers(1, 4), nrow=st.integers(0, 4))
def test_markdown_rows_parse_back_to_the_cells(data, ncol, nrow):
    header = data.draw(st.lists(_cell, min_size=ncol, max_size=ncol))
    rows = data.draw(st.lists(st.lists(_cell, min_size=ncol, max_size=ncol), min_size=nrow, max_size=nrow))
    align = data.draw(st.one_of(st.none(), st.text(alphabet="lr", min_size=ncol, max_size=ncol)))
    md = markdown_rows(header, rows, align)
    parsed = _parse(md)
    assert len(parsed) == 2 + nrow
    assert parsed[0] == [str(c) for c in header]
    assert parsed[1] == ["---:" if a == "r" else "---" for a in (align or "l" * ncol)]
    assert parsed[2:] == [[str(c) for c in r] for r in rows]


def test_markdown_rows_worked_example_and_errors():
    md = markdown_rows(["run", "a|b"], [["x", 1.5], ["y|z", None]], align="lr")
    assert md == "| run | a\\|b |\n|---|---:|\n| x | 1.5 |\n| y\\|z | None |"
    with pytest.raises(ValueError, match="`align`"):
        markdown_rows(["a", "b"], [], align="l")
    with pytest.raises(ValueError, match="`align`"):
        markdown_rows(["a"], [], align="c")
    with pytest.raises(ValueError, match="row 1 has 1 cells for 2 columns"):
        markdown_rows(["a", "b"], [[1, 2], [3]])


def _blocks(md):
    """The tables of a printed table (blocks separated by an empty line), each parsed into its cells."""
    return [_parse(block) for block in md.split("\n\n")]


@SETTINGS
@given(data=st.data(), ncol=st.integers(1, 12), nrow=st.integers(0, 4), keep=st.integers(0, 2),
       width=st.integers(20, 140))
def test_a_wide_table_is_blocks_of_at_most_width_characters_holding_every_column(data, ncol, nrow, keep, width):
    """Each line at most ``width`` characters (when a label column and any one other fit); each block holds the
    first ``keep`` columns, then the next columns in order, every column in exactly one block with its cells
    unchanged; a table that fits is the one table ``markdown_rows`` gives without ``width``."""
    text = st.text(alphabet="abc0123456789.[], |-+", min_size=1, max_size=24)
    header = data.draw(st.lists(text, min_size=ncol, max_size=ncol))
    rows = data.draw(st.lists(st.lists(text, min_size=ncol, max_size=ncol), min_size=nrow, max_size=nrow))
    align = data.draw(st.text(alphabet="lr", min_size=ncol, max_size=ncol))
    full = markdown_rows(header, rows, align)
    md = markdown_rows(header, rows, align, width=width, keep=keep)
    if max(map(len, full.split("\n"))) <= width:
        assert md == full
    blocks, k, whole = _blocks(md), min(keep, ncol), _parse(full)
    assert [c for b in blocks for c in b[0][k:]] == whole[0][k:]
    at = k
    for text_of_block, b in zip(md.split("\n\n"), blocks):
        n = len(b[0]) - k
        assert n >= 1 or k == ncol
        assert all(line[:k] == whole[i][:k] for i, line in enumerate(b))  # the labels, repeated
        assert all(line[k:] == whole[i][at:at + n] for i, line in enumerate(b))  # the cells, unchanged
        at += n
        # a block of one column beyond the labels may be wider: that column alone does not fit
        assert max(map(len, text_of_block.split("\n"))) <= width or n == 1


def test_a_wide_table_worked_example_and_the_terminal_width(monkeypatch):
    header = ["measure", "run_a", "run_b", "run_b - run_a"]
    rows = [["ndcg@10", "0.3000 [0.2000, 0.4000]", "0.3500 [0.2500, 0.4500]", "+0.0500 [0.0100, 0.0900]"],
            ["dips_gap", "n/a", "0.0100 [0.0000, 0.0200]", "n/a"]]
    full = markdown_rows(header, rows, "lrrr")
    assert max(map(len, full.split("\n"))) == 90 and markdown_rows(header, rows, "lrrr", width=90) == full
    assert markdown_rows(header, rows, "lrrr", width=63) == (
        "| measure | run_a | run_b |\n|---|---:|---:|\n"
        "| ndcg@10 | 0.3000 [0.2000, 0.4000] | 0.3500 [0.2500, 0.4500] |\n"
        "| dips_gap | n/a | 0.0100 [0.0000, 0.0200] |\n\n"
        "| measure | run_b - run_a |\n|---|---:|\n"
        "| ndcg@10 | +0.0500 [0.0100, 0.0900] |\n| dips_gap | n/a |")
    monkeypatch.setenv("COLUMNS", "77")
    assert terminal_width() == 77 and terminal_width(50) == 50 and terminal_width(0) is None
    with pytest.raises(ValueError, match="`width` must be >= 0"):
        terminal_width(-1)
