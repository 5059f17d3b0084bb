"""``evaluate_files`` (what ``torchfair metrics`` runs): the Python API and the command line give the same numbers,
and bad inputs fail before any work, naming the argument."""
import json

import numpy as np
import pytest

from torchfair.cli import main
from torchfair.evaluation import evaluate_lists, read_trec
from torchfair.evaluation.files import check_output_file, evaluate_files, show_files, split_measures

RUN = "q1 Q0 a 1 3 s\nq1 Q0 b 2 2 s\nq1 Q0 c 3 1 s\nq2 Q0 a 1 1 s\nq2 Q0 d 2 0 s\n"
QRELS = "q1 0 a 1\nq1 0 c 2\nq1 0 z 1\nq2 0 d 1\nq2 0 y 3\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "run.txt").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    return str(tmp_path / "run.txt"), str(tmp_path / "qrels.txt")


def test_api_equals_evaluate_lists_and_the_command_line(files, capsys):
    run, qrels = files
    res = evaluate_files(run, qrels, measures="ndcg@10,recall@10", bootstrap=0)
    direct = evaluate_lists(read_trec(run, qrels).lists, ["ndcg@10", "recall@10"], bootstrap=0)
    np.testing.assert_array_equal(res.tables["run"].values, direct.values)
    assert main(["metrics", "--run", run, "--qrels", qrels, "--measures", "ndcg@10", "recall@10", "--bootstrap", "0",
                 "--format", "json", "--per_list"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["aggregate"]["ndcg@10"]["mean"] == pytest.approx(res.tables["run"].mean["ndcg@10"], abs=1e-12)


def test_ideal_and_recall_from_the_qrels_by_hand(files):
    """q1 ranks a (1), b (unjudged), c (2); the qrels also judge z (1), unranked.  Linear gain:
    DCG = 1 + 2/log2(4) = 2; ideal over every judged document (2, 1, 1) = 2 + 1/log2(3) + 1/2.
    recall@10 = 2 relevant retrieved / 3 judged relevant."""
    run, qrels = files
    res = evaluate_files(run, qrels, measures=["ndcg@10:gain=linear", "recall@10"], bootstrap=0)
    t = res.tables["run"]
    i = list(t.list_ids).index("q1")
    assert t["ndcg@10"][i] == pytest.approx(2 / (2 + 1 / np.log2(3) + 0.5), abs=1e-12)
    assert t["recall@10"][i] == pytest.approx(2 / 3, abs=1e-12)
    run_only = evaluate_files(run, qrels, measures=["ndcg@10:gain=linear"], ideal="run", bootstrap=0)
    assert run_only.tables["run"]["ndcg@10"][i] == pytest.approx(2 / (2 + 1 / np.log2(3)), abs=1e-12)


def test_split_measures():
    assert split_measures(["dips,ndcg@10", "igi:tie_weight=0.5,browsing=rbp:0.8,label=i"]) == \
        ["dips", "ndcg@10", "igi:tie_weight=0.5,browsing=rbp:0.8,label=i"]
    assert split_measures("map") == ["map"]


@pytest.mark.parametrize("kw, name", [
    (dict(measures="ndgc@10"), "ndgc"),  # misspelt measure: before reading the files
    (dict(measures=""), "measures"),
    (dict(names=["a", "b"]), "names"),
])
def test_bad_arguments_name_themselves(files, kw, name):
    run, qrels = files
    with pytest.raises(ValueError, match=name):
        evaluate_files(run, qrels, **kw)


def test_missing_files_and_outputs(files, tmp_path):
    run, qrels = files
    with pytest.raises(ValueError, match="`qrels`: no such file"):
        evaluate_files(run, str(tmp_path / "nope.txt"))
    with pytest.raises(ValueError, match="`run`: no input"):
        evaluate_files()
    with pytest.raises(ValueError, match="does not exist"):
        check_output_file(str(tmp_path / "missing" / "x.json"), "out_json")
    with pytest.raises(ValueError, match="is a directory"):
        check_output_file(str(tmp_path), "out_json")
    check_output_file(str(tmp_path / "x.json"), "out_json")


@pytest.mark.parametrize("argv, option", [
    (["--k", "0"], "--k"), (["--bootstrap", "-1"], "--bootstrap"), (["--confidence", "1"], "--confidence"),
    (["--format", "xml"], "--format"), (["--out_json", "/nonexistent-dir/x.json"], "--out_json"),
    (["--measures", "dipz"], "dipz"),
])
def test_command_line_errors_are_one_line(files, capsys, argv, option):
    run, qrels = files
    assert main(["metrics", "--run", run, "--qrels", qrels, "--measures", "ndcg"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0], err


def test_show_files_writes_what_it_prints(files, tmp_path, capsys):
    run, qrels = files
    res = evaluate_files([run, run], qrels, names=["a", "b"], measures="ndcg", bootstrap=0)
    show_files(res, out_json=str(tmp_path / "r.json"), out_csv=str(tmp_path / "r.csv"))
    out = capsys.readouterr().out
    assert "b - a" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["differences"]["b"]["columns"]["ndcg"]["mean"] == 0.0
    assert (tmp_path / "r.csv").read_text().count("\n") >= 2


def test_trec_preset_of_the_command_line_equals_trec_eval_per_query(tmp_path, capsys):
    """`torchfair metrics --trec` with trec_eval's measure names gives trec_eval's (pytrec_eval's) value for every
    query, the same query set and the same means; the Python API gives the same table."""
    import pytrec_eval
    from trec_collection import NAMES, TREC_MEASURES, synthetic_collection, write_trec

    run, qrels = synthetic_collection(seed=1, n_queries=120)
    run_path, qrels_path = write_trec(run, qrels, tmp_path)
    ref = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    assert main(["metrics", "--run", str(run_path), "--qrels", str(qrels_path), "--measures", *NAMES, "--trec",
                 "--bootstrap", "0", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {x["list_id"] for x in doc["lists"]} == set(ref)
    for j, name in enumerate(doc["columns"]):
        assert name == NAMES[j]
        assert max(abs(x["values"][j] - ref[x["list_id"]][name]) for x in doc["lists"]) <= 1e-9, name
        assert doc["aggregate"][name]["mean"] == pytest.approx(np.mean([ref[q][name] for q in ref]), abs=1e-12)
    api = evaluate_files(str(run_path), str(qrels_path), measures=NAMES, trec=True, bootstrap=0)
    assert [api.tables["run"].mean[n] for n in NAMES] == [doc["aggregate"][n]["mean"] for n in NAMES]
