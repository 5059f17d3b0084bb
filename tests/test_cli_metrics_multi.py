"""``torchfair metrics`` with several ``--run`` files (runs side by side through the report layer), and the one
markdown / JSON routine of the report layer (``markdown_rows``, ``jsonable``) in the sweep report and the tables."""
import csv
import io
import json
import math

import numpy as np
import pytest
import torch

from torchfair.cli import main
from torchfair.evaluation import EvaluationTable, evaluate_lists, read_trec
from torchfair.evaluation.report import compare, jsonable, markdown_rows, markdown_table, paired_differences

# run A: queries q1 q2 q3; run B: q2 q3 q4 (q1 only in A, q4 only in B) -- pairing is on q2, q3
RUN_A = """\
q1 Q0 d1 1 3.0 a
q1 Q0 d2 2 2.5 a
q1 Q0 d3 3 2.0 a
q1 Q0 d4 4 1.0 a
q2 Q0 d5 1 0.9 a
q2 Q0 d2 2 0.8 a
q2 Q0 d6 3 0.7 a
q2 Q0 d7 4 0.1 a
q3 Q0 d1 1 4.0 a
q3 Q0 d6 2 3.0 a
q3 Q0 d3 3 2.0 a
q3 Q0 d7 4 1.0 a
"""
RUN_B = """\
q3 Q0 d7 1 4.0 b
q3 Q0 d3 2 3.0 b
q3 Q0 d6 3 2.0 b
q3 Q0 d1 4 1.0 b
q2 Q0 d6 1 0.9 b
q2 Q0 d7 2 0.8 b
q2 Q0 d5 3 0.7 b
q2 Q0 d2 4 0.1 b
q4 Q0 d4 1 2.0 b
q4 Q0 d5 2 1.0 b
q4 Q0 d2 3 0.5 b
"""
QRELS = """\
q1 0 d1 0
q1 0 d2 2
q1 0 d3 1
q1 0 d4 2
q2 0 d5 1
q2 0 d2 0
q2 0 d6 2
q2 0 d7 1
q3 0 d1 1
q3 0 d6 0
q3 0 d3 2
q3 0 d7 1
q4 0 d4 1
q4 0 d5 2
q4 0 d2 0
"""
from test_cli import GROUPS  # noqa: E402  (the same document groups as the single-run CLI tests)
MEASURES = ["dips", "ndcg@3", "exposure_share"]


@pytest.fixture(autouse=True)
def columns(monkeypatch):
    """Printed tables fit the terminal (`--width` defaults to its columns): 120, whatever terminal runs the tests."""
    monkeypatch.setenv("COLUMNS", "120")


@pytest.fixture
def trec(tmp_path):
    (tmp_path / "a.txt").write_text(RUN_A)
    (tmp_path / "b.txt").write_text(RUN_B)
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "groups.txt").write_text(GROUPS)
    return tmp_path


def _args(trec, *runs, extra=()):
    out = ["metrics"]
    for r in runs:
        out += ["--run", str(trec / r)]
    return out + ["--qrels", str(trec / "qrels.txt"), "--groups", str(trec / "groups.txt"), "--measures",
                  *MEASURES, "--bootstrap", "200", *extra]


def _alone(trec, run, bootstrap=200):
    data = read_trec(trec / run, trec / "qrels.txt", trec / "groups.txt")
    return evaluate_lists(data.lists, MEASURES, bootstrap=bootstrap, seed=0, group_names=data.group_names)


def test_single_run_output_is_the_table_of_evaluate(trec, capsys):
    t = _alone(trec, "a.txt")
    assert main(_args(trec, "a.txt")) == 0
    assert capsys.readouterr().out == f"groups: A=blog, B=news\nlists: {len(t)}\n{t.to_markdown()}\n"
    assert main(_args(trec, "a.txt", extra=["--format", "json"])) == 0
    assert capsys.readouterr().out == t.to_json() + "\n"
    assert main(_args(trec, "a.txt", extra=["--format", "csv", "--per-list"])) == 0
    assert capsys.readouterr().out == t.to_csv()
    # one --name for one --run is accepted and changes nothing
    assert main(_args(trec, "a.txt", extra=["--names", "x", "--format", "json"])) == 0
    assert capsys.readouterr().out == t.to_json() + "\n"


def test_two_runs_means_and_paired_differences(trec, capsys):
    ta, tb = _alone(trec, "a.txt"), _alone(trec, "b.txt")
    out_json, out_csv = trec / "cmp.json", trec / "cmp.csv"
    assert main(_args(trec, "a.txt", "b.txt", extra=["--format", "json", "--out-json", str(out_json),
                                                        "--out-csv", str(out_csv)])) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["order"] == ["a", "b"] and rep["group_names"] == ["blog", "news"]
    for name, t in (("a", ta), ("b", tb)):  # each run's means = the run evaluated alone
        got = rep["models"][name]["measures"]
        assert list(got) == t.columns and rep["models"][name]["n_lists"] == len(t)
        for c in t.columns:
            for k in ("mean", "ci_low", "ci_high"):
                assert (got[c][k] is None) if math.isnan(t.aggregate()[c][k]) else \
                    got[c][k] == pytest.approx(t.aggregate()[c][k])
            assert got[c]["n_valid"] == t.n_valid[c]
    d = rep["differences"]["b"]
    assert d["paired"] and d["reference"] == "a" and d["n_lists"] == 2  # q2 and q3
    shared = [q for q in ta.list_ids if q in tb.list_ids]
    assert shared == ["q2", "q3"]
    for c in ta.columns:
        per = [tb[c][tb.list_ids.index(q)] - ta[c][ta.list_ids.index(q)] for q in shared]
        per = [x for x in per if not math.isnan(x)]
        e = d["columns"][c]
        assert e["n_valid"] == len(per)
        if per:
            assert e["mean"] == pytest.approx(sum(per) / len(per))
            assert e["ci_low"] <= e["mean"] + 1e-12 and e["mean"] <= e["ci_high"] + 1e-12
        else:
            assert e["mean"] is None
    assert any(d["columns"][c]["mean"] not in (None, 0.0) for c in ta.columns)  # the runs differ somewhere
    # --out-json: the report with each run's per-list values; --out-csv: one row per run and measure
    full = json.loads(out_json.read_text())
    assert [r["list_id"] for r in full["models"]["b"]["lists"]] == tb.list_ids
    assert full["differences"] == rep["differences"]
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert [(r["run"], r["measure"]) for r in rows] == [(n, c) for n in ("a", "b") for c in ta.columns]
    for r in rows:
        if r["run"] == "a":
            assert r["reference"] == "" and r["diff_mean"] == ""
        elif d["columns"][r["measure"]]["mean"] is not None:
            assert float(r["diff_mean"]) == pytest.approx(d["columns"][r["measure"]]["mean"])
            assert float(r["mean"]) == pytest.approx(tb.mean[r["measure"]])
    # stdout csv is the same long table
    assert main(_args(trec, "a.txt", "b.txt", extra=["--format", "csv"])) == 0
    assert capsys.readouterr().out == out_csv.read_text()


def test_two_runs_markdown_is_the_report_layers_table(trec, capsys):
    assert main(_args(trec, "a.txt", "b.txt", extra=["--names", "base", "--names", "fair", "--per-list"])) == 0
    out = capsys.readouterr().out
    ta, tb = _alone(trec, "a.txt"), _alone(trec, "b.txt")
    report = compare({"base": ta, "fair": tb}, bootstrap=200, pair_by="id")
    assert markdown_table(report) in out
    assert "| measure | base | fair | fair - base |" in out
    assert "lists: base 3, fair 3" in out and "paired over the 2 queries both runs rank" in out
    assert "per list: base" in out and tb.to_markdown(per_list=True) in out


def _cells(text):
    """{(row label, column): cell} of every markdown table in ``text`` (blocks of one table included)."""
    out, header = {}, None
    for line in text.split("\n"):
        if line.startswith("|-"):  # the separator
            continue
        if not line.startswith("| "):
            header = None
            continue
        cells = [c.strip() for c in line[2:-2].split(" | ")]
        if header is None:
            header = cells
        else:
            out.update({(cells[0], h): c for h, c in zip(header[1:], cells[1:])})
    return out


def test_a_wide_comparison_fits_the_width_with_every_column_and_value(trec, capsys):
    """Four runs and three paired differences: on stdout, tables of at most --width (default: the terminal's)
    characters a line, each with the measure column; every run and difference column in one of them with the
    values of the one wide table (--width 0), which --out_json's report also holds."""
    for name in ("c.txt", "d.txt"):
        (trec / name).write_text(RUN_B)
    runs = ("a.txt", "b.txt", "c.txt", "d.txt")
    assert main(_args(trec, *runs, extra=["--width", "0", "--out_json", str(trec / "r.json")])) == 0
    wide = capsys.readouterr().out
    assert max(map(len, wide.split("\n"))) > 120  # the one table is wider than a terminal
    report = json.loads((trec / "r.json").read_text())
    assert markdown_table(report) in wide
    for width, extra in ((120, []), (80, ["--width", "80"])):
        assert main(_args(trec, *runs, extra=extra)) == 0
        out = capsys.readouterr().out
        tables = [line for line in out.split("\n") if line.startswith("|")]
        assert max(map(len, tables)) <= width and len([t for t in tables if t.startswith("| measure |")]) > 1
        assert _cells(out) == _cells(wide) and len(_cells(out)) == len(report["models"]["a"]["measures"]) * 7
    assert main(_args(trec, *runs, extra=["--width", "-1"])) == 2
    assert "--width" in capsys.readouterr().err


def test_identical_runs_differ_by_zero_with_a_zero_width_interval(trec, capsys):
    (trec / "a_copy.txt").write_text(RUN_A)
    assert main(_args(trec, "a.txt", "a_copy.txt", extra=["--format", "json"])) == 0
    rep = json.loads(capsys.readouterr().out)
    d = rep["differences"]["a_copy"]
    assert d["n_lists"] == 3
    for c, e in d["columns"].items():
        if e["n_valid"]:
            assert e["mean"] == 0.0 and e["ci_low"] == 0.0 and e["ci_high"] == 0.0, c


def test_names_are_checked(trec, capsys):
    assert main(_args(trec, "a.txt", "b.txt", extra=["--names", "x"])) == 2
    assert "--names" in capsys.readouterr().err
    assert main(_args(trec, "a.txt", "b.txt", extra=["--names", "x", "--names", "x"])) == 2
    err = capsys.readouterr().err
    assert "names" in err and "'x'" in err
    (trec / "sub").mkdir()
    (trec / "sub" / "a.txt").write_text(RUN_B)
    assert main(_args(trec, "a.txt", "sub/a.txt")) == 2  # same file stem: name them
    assert "--names" in capsys.readouterr().err
    assert main(["metrics", "--table", str(trec / "a.txt"), "--names", "x"]) == 2
    assert "--names" in capsys.readouterr().err


def test_runs_without_a_shared_query_are_an_error_naming_run(trec, capsys):
    (trec / "c.txt").write_text("q9 Q0 d1 1 1.0 c\nq9 Q0 d2 2 0.5 c\n")
    (trec / "qrels9.txt").write_text(QRELS + "q9 0 d1 1\n")
    args = _args(trec, "a.txt", "c.txt")
    args[args.index("--qrels") + 1] = str(trec / "qrels9.txt")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--run" in err and "no query in common" in err
    with pytest.raises(ValueError, match="no list id in common"):
        paired_differences(_alone(trec, "a.txt", 0), evaluate_lists([([1.0, 0.5], [1.0, 0.0])], ["ndcg"], list_ids=["z"],
                                                              bootstrap=0), pair_by="id")


def test_runs_ranking_other_groups_share_group_ids(trec, capsys):
    # run n ranks news documents only: read alone, 'news' would be group A; side by side it stays B
    (trec / "n.txt").write_text("q1 Q0 d1 1 2.0 n\nq1 Q0 d3 2 1.0 n\nq2 Q0 d5 1 1.0 n\n")
    assert main(_args(trec, "a.txt", "n.txt", extra=["--format", "json", "--bootstrap", "0"])) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["group_names"] == ["blog", "news"]
    m = rep["models"]["n"]["measures"]
    assert m["exposure_share_B"]["mean"] == pytest.approx(1.0) and m["exposure_share_A"]["mean"] == pytest.approx(0.0)


def test_per_list_csv_with_several_runs_is_an_error(trec, capsys):
    assert main(_args(trec, "a.txt", "b.txt", extra=["--format", "csv", "--per-list"])) == 2
    assert "--per_list" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ the shared routines
def test_markdown_rows_and_jsonable():
    assert markdown_rows(["a", "b"], [[1, "x|y"]], align="lr") == "| a | b |\n|---|---:|\n| 1 | x\\|y |"
    with pytest.raises(ValueError, match="align"):
        markdown_rows(["a"], [], align="c")
    with pytest.raises(ValueError, match="cells"):
        markdown_rows(["a", "b"], [[1]])
    assert jsonable({"t": torch.tensor([1.0, float("nan")]), "n": np.float32(0.5), "i": np.int64(3),
                     "x": (float("nan"), True)}) == {"t": [1.0, None], "n": 0.5, "i": 3, "x": [None, True]}


def test_evaluation_table_meta_goes_through_jsonable():
    t = evaluate_lists([([1.0, 0.5], [1.0, 0.0])], ["ndcg"], bootstrap=0)
    t.meta["extra"] = {"t": torch.tensor([1.0]), "nan": float("nan")}
    doc = json.loads(t.to_json())
    assert doc["meta"]["extra"] == {"t": [1.0], "nan": None}
    assert EvaluationTable.from_json(t.to_json()).columns == t.columns


def test_sweep_report_table_goes_through_markdown_rows(tmp_path):
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    from torchfair.sweeps import write_sweep_report

    points = [("t1", 0.0, 0.6, 0.3), ("t2", 0.5, 0.55, -0.1), ("t3", 1.0, 0.5, 0.4)]
    for tid, lam, ndcg, gap in points:
        d = tmp_path / "trials" / tid
        d.mkdir(parents=True)
        (d / "trial.json").write_text(json.dumps({"trial_id": tid, "params": {"model.lam": lam}}))
        (d / "result.json").write_text(json.dumps({"metrics": {"test/ndcg@10": ndcg, "test/dips_gap": gap},
                                                   "checkpoint": None, "seconds": 1.0}))
    text = write_sweep_report(tmp_path).read_text()
    table = markdown_rows(["trial", "model.lam", "test/dips_gap", "test/ndcg@10"],
                          [["t2", 0.5, "-0.1000", "0.5500"], ["t1", 0.0, "0.3000", "0.6000"]], align="llrr")
    assert "## Pareto front: test/dips_gap against test/ndcg@10" in text
    assert "| trial | model.lam | test/dips_gap | test/ndcg@10 |\n|---|---|---:|---:|" in text
    assert table in text
