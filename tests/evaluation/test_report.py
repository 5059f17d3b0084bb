"""torchfair/evaluation/report.py: paired differences and the side-by-side report against plain loops, and the
report's tables (markdown, long CSV)."""
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
