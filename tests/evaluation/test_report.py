"""torchfair/evaluation/report.py: paired differences and the side-by-side report against plain loops, the
report's tables (markdown, long CSV) and its files (JSON, markdown, CSV, the position plot)."""
import csv
import io
import math

import numpy as np
import pytest

from torchfair.evaluation import EvaluationTable, evaluate_lists
from torchfair.evaluation.report import compare, long_csv, markdown_table, paired_differences


def _table(values, ids):
    lists = [([float(v), 0.0], [1.0, 0.0]) for v in values]  # NDCG of [v, 0] on relevance [1, 0] = 1 if v > 0
    return evaluate_lists(lists, ["ndcg", "kendall_tau"], bootstrap=0, list_ids=ids)


def _by_hand(a, b, ia, ib, col):
    """Mean over the paired lists where both values are defined, written as a loop."""
    total, n = 0.0, 0
    for i, j in zip(ia, ib):
        x, y = a[col][i], b[col][j]
        if math.isnan(x) or math.isnan(y):
            continue
        total += y - x
        n += 1
    return total / n, n


def test_paired_differences_by_order_and_by_id_against_a_loop():
    a = _table([1.0, -1.0, 2.0, -3.0], ["q1", "q2", "q3", "q4"])
    b = _table([-1.0, 1.0, 2.0, 5.0], ["q1", "q2", "q3", "q4"])
    d = paired_differences(a, b, bootstrap=200, seed=1)
    for col in ("ndcg", "kendall_tau"):
        mean, n = _by_hand(a, b, range(4), range(4), col)
        assert d["columns"][col]["mean"] == pytest.approx(mean) and d["columns"][col]["n_valid"] == n
        assert d["columns"][col]["ci_low"] <= mean <= d["columns"][col]["ci_high"]
    c = _table([5.0, -1.0, 0.5], ["q4", "q9", "q1"])  # other order, one list not in a
    d = paired_differences(a, c, pair_by="id", bootstrap=0)
    mean, n = _by_hand(a, c, [0, 3], [2, 0], "ndcg")
    assert d["n_lists"] == 2 and d["columns"]["ndcg"]["mean"] == pytest.approx(mean)
    with pytest.raises(ValueError, match="same order"):
        paired_differences(a, c)
    with pytest.raises(ValueError, match="pair_by"):
        paired_differences(a, b, pair_by="nope")


def test_identical_runs_differ_by_exactly_zero():
    a = _table([1.0, -1.0, 2.0], ["a", "b", "c"])
    d = paired_differences(a, a, bootstrap=100)["columns"]["ndcg"]
    assert d["mean"] == d["ci_low"] == d["ci_high"] == 0.0


def test_compare_pairs_every_run_with_its_reference():
    t = {"x": _table([1.0, -1.0], ["a", "b"]), "y": _table([-1.0, 1.0], ["a", "b"]),
         "z": _table([1.0, 1.0], ["a", "b"])}
    rep = compare(t, reference={"y": "x", "z": "y"}, same_lists={"z": True}, bootstrap=0,
                  extra={"x": {"file": "x.txt"}})
    assert rep["order"] == ["x", "y", "z"] and rep["models"]["x"]["file"] == "x.txt"
    assert rep["differences"]["z"]["reference"] == "y"
    want, _ = _by_hand(t["y"], t["z"], [0, 1], [0, 1], "ndcg")
    assert rep["differences"]["z"]["columns"]["ndcg"]["mean"] == pytest.approx(want)
    assert compare(t, same_lists={"y": False}, bootstrap=0)["differences"]["y"]["paired"] is False
    with pytest.raises(ValueError, match="reference"):
        compare(t, reference={"y": "nope"})
    with pytest.raises(ValueError, match="empty"):
        compare({})


def test_markdown_and_long_csv_carry_every_run_and_difference():
    t = {"x": _table([1.0, -1.0, 2.0], ["a", "b", "c"]), "y": _table([-1.0, 1.0, 3.0], ["a", "b", "c"])}
    rep = compare(t, bootstrap=50)
    md = markdown_table(rep)
    assert md.count("\n") >= 3 and "ndcg" in md and "y - x" in md
    rows = list(csv.DictReader(io.StringIO(long_csv(rep))))
    assert {r["run"] for r in rows} == {"x", "y"}
    y_ndcg = next(r for r in rows if r["run"] == "y" and r["measure"] == "ndcg")
    assert float(y_ndcg["mean"]) == pytest.approx(np.nanmean(t["y"]["ndcg"]))
    want, _ = _by_hand(t["x"], t["y"], range(3), range(3), "ndcg")
    assert float(y_ndcg["diff_mean"]) == pytest.approx(want) and y_ndcg["reference"] == "x"


def _file_report():
    t = {"plain": _table([1.0, -1.0, 2.0], ["a", "b", "c"]), "fair": _table([-1.0, 1.0, 3.0], ["a", "b", "c"])}
    meta = {"checkpoint": "/runs/p.ckpt", "epoch": 3, "ranker": "mf", "fairness_loss": {"repr": "DIPSLoss()"},
            "lam": 0.5, "rerank": None}
    extra = {"plain": {"meta": meta, "group_names": ["M", "F"], "position_share": [[0.25, 0.75], [1.0, 0.0]],
                       "mpc": {"defined": True, "group": 1, "estimate": 0.5, "ci_low": -0.25, "ci_high": 1.25,
                               "n_pairs": 7}},
             "fair": {"meta": {**meta, "rerank": "fa_ir:p=0.5"}, "group_names": ["M", "F"],
                      "position_share": [[0.5, 0.5], [0.5, 0.5]], "mpc": {"defined": False}}}
    rep = compare(t, bootstrap=20, seed=3, extra=extra)
    rep["split"] = "test"
    return rep


def test_write_report_writes_json_markdown_csv_and_the_plot(tmp_path):
    import json

    from torchfair.evaluation.report import jsonable, write_report

    rep = _file_report()
    paths = write_report(rep, tmp_path / "r", csv=True, unit="users", notes="Columns: ndcg.")
    assert sorted(paths) == ["csv", "json", "md", "png"]
    assert json.loads((tmp_path / "r" / "report.json").read_text()) == jsonable(rep)
    assert (tmp_path / "r" / "report.csv").read_text() == long_csv(rep)
    assert (tmp_path / "r" / "exposure_by_position.png").read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "r" / "report.md").read_text().splitlines()
    assert md[0] == "# torchfair evaluate: test lists" and md[-1].startswith("- **fair**")
    assert md[2] == ("Mean over users with 95% bootstrap intervals (20 replicates, seed 3); differences are paired "
                     "(same users).  Columns: ndcg.")
    assert markdown_table(rep) in "\n".join(md)
    assert ("- **plain**: `/runs/p.ckpt` (epoch 3); ranker `mf`; fairness loss DIPSLoss() (lambda 0.5); 3 lists; "
            "groups A = M, B = F.") in md
    assert "  MPC(group 1) = +0.5000 [-0.2500, +1.2500] over 7 adjacent pairs (> 0: the group is under-ranked)." in md
    assert "re-ranked by `fa_ir:p=0.5`; 3 lists" in md[-1] and sum("MPC(" in ln for ln in md) == 1
    # without position shares: no plot; a run without a checkpoint: its number of lists
    plain = compare({"x": _table([1.0, 2.0], ["a", "b"])}, bootstrap=0)
    paths = write_report(plain, tmp_path / "p", title="runs")
    assert sorted(paths) == ["json", "md"] and not (tmp_path / "p" / "exposure_by_position.png").exists()
    text = (tmp_path / "p" / "report.md").read_text()
    assert text.startswith("# runs\n") and "- **x**: 2 lists." in text and text.endswith("\n")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="`out`"):
        write_report(plain, tmp_path / "f")
    with pytest.raises(ValueError, match="`report`"):
        write_report({"order": []}, tmp_path / "q")
    assert not (tmp_path / "q").exists()  # a malformed report writes nothing


def test_markdown_and_figure_primitives(tmp_path):
    from torchfair.evaluation.report import plot_position_shares, pyplot, save_figure, write_markdown

    assert write_markdown(tmp_path / "a.md", ["# t", "", "x"]) == str(tmp_path / "a.md")
    assert (tmp_path / "a.md").read_text() == "# t\n\nx\n"
    with pytest.raises(ValueError, match="`lines`"):
        write_markdown(tmp_path / "b.md", "# t")
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and not plt.get_fignums()
    rep = _file_report()
    plot_position_shares(rep, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_a_report_names_a_checkpoint_under_the_working_directory_relatively_and_a_run_without_a_loss(tmp_path,
                                                                                                      monkeypatch):
    from torchfair.evaluation.report import report_markdown

    monkeypatch.chdir(tmp_path)
    rep = _file_report()
    inside = str(tmp_path / "runs" / "x" / "last.ckpt")  # absolute, under the working directory
    rep["models"]["plain"]["meta"] = {"checkpoint": inside, "epoch": 1, "ranker": "mf", "fairness_loss": None,
                                      "lam": None, "rerank": None}
    md = report_markdown(rep).splitlines()
    line = next(ln for ln in md if ln.startswith("- **plain**"))
    assert line.startswith("- **plain**: `runs/x/last.ckpt` (epoch 1); ranker `mf`; no fairness loss; 3 lists")
    assert str(tmp_path) not in "\n".join(md) and "None" not in line
