"""torchfair.evaluation.io: read_trec's trec_eval conventions -- ties by document id, the query set, the grades of
every judged document (``ideal_relevance``) -- on files small enough to check by hand."""
import pytest
import torch

from torchfair.evaluation import TREC_READ, read_trec

RUN = ("q1 Q0 a10 1 2.0 r\n"
       "q1 Q0 a9 2 2.0 r\n"
       "q1 Q0 b 3 2.0 r\n"
       "q1 Q0 z 4 3.0 r\n"
       "q2 Q0 x 1 1.0 r\n"
       "q3 Q0 y 1 1.0 r\n")
QRELS = ("q1 0 a10 1\n"
         "q1 0 b 2\n"
         "q1 0 gone 3\n"     # judged, not retrieved
         "q1 0 junk -1\n"    # a negative grade (junk)
         "q2 0 x 0\n"
         "q2 0 w 0\n")       # q3: no judgment at all


@pytest.fixture
def files(tmp_path):
    (tmp_path / "run.txt").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    return tmp_path / "run.txt", tmp_path / "qrels.txt"


def _by_id(data):
    return {d["list_id"]: d for d in data.lists}


def test_ties_by_docno_are_trec_evals_order_and_strict(files):
    run, qrels = files
    q1 = _by_id(read_trec(run, qrels, ties="docno", negative_grades="zero"))["q1"]
    # score 3 first; the three at score 2 by docno descending as strcmp compares: "b" > "a9" > "a10"
    assert q1["item_ids"] == ["z", "b", "a9", "a10"]
    assert q1["scores"].tolist() == [4.0, 3.0, 2.0, 1.0]  # strictly decreasing: no measure sees a tie
    assert q1["raw_scores"].tolist() == [3.0, 2.0, 2.0, 2.0]
    assert q1["relevance"].tolist() == [0.0, 2.0, 0.0, 1.0]
    # today's order (ties="score", the default): equal scores in rank-column order, scores kept
    q1 = _by_id(read_trec(run, qrels, negative_grades="zero"))["q1"]
    assert q1["item_ids"] == ["z", "a10", "a9", "b"] and q1["scores"].tolist() == [3.0, 2.0, 2.0, 2.0]
    assert "raw_scores" not in q1


def test_ideal_relevance_holds_every_judged_grade(files):
    run, qrels = files
    data = _by_id(read_trec(run, qrels, negative_grades="zero"))
    # q1: a10 (1), b (2), gone (3, not retrieved), junk (-1 read as 0); in qrels order
    assert data["q1"]["ideal_relevance"].tolist() == [1.0, 2.0, 3.0, 0.0]
    assert data["q1"]["ideal_relevance"].dtype == torch.float64
    assert data["q2"]["ideal_relevance"].tolist() == [0.0, 0.0]
    assert data["q3"]["ideal_relevance"].tolist() == []  # no judgment: nothing relevant
    with pytest.raises(ValueError, match="negative"):  # the same negative-grade policy as the rest
        read_trec(run, qrels)
    assert all("ideal_relevance" not in d for d in read_trec(run, qrels, negative_grades="zero",
                                                             ideal="run").lists)
    assert all("ideal_relevance" not in d for d in read_trec(run).lists)  # no qrels


def test_queries_qrels_is_trec_evals_query_set(files):
    run, qrels = files
    assert [d["list_id"] for d in read_trec(run, qrels, negative_grades="zero").lists] == ["q1", "q2", "q3"]
    data = read_trec(run, qrels, negative_grades="zero", queries="qrels")
    assert [d["list_id"] for d in data.lists] == ["q1", "q2"]
    assert any("left out" in n and "'q3'" in n for n in data.notes)
    with pytest.raises(ValueError, match="`queries`"):
        read_trec(run, queries="qrels")


def test_trec_read_preset(files):
    run, qrels = files
    data = read_trec(run, qrels, **TREC_READ)
    assert [d["list_id"] for d in data.lists] == ["q1", "q2"]
    assert data.lists[0]["item_ids"] == ["z", "b", "a9", "a10"]
    assert data.warnings  # the negative grade read as 0, with a warning
    assert TREC_READ == {"ties": "docno", "queries": "qrels", "negative_grades": "zero", "ideal": "qrels",
                         "repeated_qrels": "error"}


@pytest.mark.parametrize("kw, name", [({"ties": "first"}, "`ties`"), ({"queries": "all"}, "`queries`"),
                                      ({"ideal": "judged"}, "`ideal`")])
def test_bad_choices_name_the_argument(files, kw, name):
    run, qrels = files
    with pytest.raises(ValueError, match=name):
        read_trec(run, qrels, negative_grades="zero", **kw)
