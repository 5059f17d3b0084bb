"""evaluate_lists / StreamingEvaluation under trec_eval's conventions: against trec_eval itself (pytrec_eval, a
dev dependency) query by query on a synthetic collection written to files, and hand-worked examples of
``undefined="zero"`` and of ``ideal_relevance`` reaching the measures."""
import math

import numpy as np
import pytest
import pytrec_eval
import torch

from torchfair.evaluation import TREC_EVAL, TREC_READ, evaluate_lists, read_trec
from torchfair.evaluation.table import StreamingEvaluation, evaluate_stream
from trec_collection import NAMES, TREC_MEASURES, synthetic_collection, write_trec  # trec_eval's names


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    run, qrels = synthetic_collection(seed=0)
    files = write_trec(run, qrels, tmp_path_factory.mktemp("trec"))
    ref = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    return files, ref


def test_the_collection_holds_every_case(collection):
    (run_path, qrels_path), ref = collection
    data = read_trec(run_path, qrels_path, negative_grades="zero")
    ids = {d["list_id"] for d in data.lists}
    assert len(ids) == 200 and len(ref) < 200  # run queries without qrels
    no_rel = [q for q in ref if ref[q]["map"] == 0 and ref[q]["recip_rank"] == 0]
    assert no_rel  # queries without a relevant retrieved (or judged) document
    assert any(len(set(d["scores"].tolist())) < len(d["scores"]) for d in data.lists)  # ties


def test_per_query_values_equal_trec_evals(collection):
    (run_path, qrels_path), ref = collection
    data = read_trec(run_path, qrels_path, **TREC_READ)
    table = evaluate_lists(data.lists, NAMES, bootstrap=0, **TREC_EVAL)
    assert set(table.list_ids) == set(ref)  # trec_eval's query set
    for name in NAMES:
        col = table[name]
        assert not np.isnan(col).any()
        diff = max(abs(col[i] - ref[q][name]) for i, q in enumerate(table.list_ids))
        assert diff <= 1e-9, (name, diff)
        assert table.mean[name] == pytest.approx(np.mean([ref[q][name] for q in ref]), abs=1e-12)
        assert table.n_valid[name] == len(ref)
    assert table.meta["undefined"] == "zero" and sum(table.meta["zeroed"].values()) > 0


def test_the_comparison_sees_each_convention(collection):
    """Dropping any one convention changes some query's value: the agreement is not an accident."""
    (run_path, qrels_path), ref = collection

    def worst(name, read, options):
        data = read_trec(run_path, qrels_path, **{**TREC_READ, **read})
        t = evaluate_lists(data.lists, [name], bootstrap=0, **{**TREC_EVAL, **options})
        return max(abs(v - ref[q][name]) if q in ref else 1.0 for v, q in zip(np.nan_to_num(t[name], nan=-1),
                                                                               t.list_ids))

    assert worst("recip_rank", {"ties": "score"}, {}) > 1e-3  # ties in rank-column order
    assert worst("recall_100", {"ideal": "run"}, {}) > 1e-3  # recall over the run's documents only
    assert worst("ndcg", {}, {"gain": "exponential"}) > 1e-3
    assert worst("map", {}, {"undefined": "skip"}) > 1e-3  # NaN where trec_eval has 0
    assert worst("P_10", {"queries": "run"}, {}) > 1e-3  # queries trec_eval leaves out


def test_streamed_equals_eager_under_trec_conventions(collection):
    (run_path, qrels_path), _ = collection
    lists = read_trec(run_path, qrels_path, **TREC_READ).lists
    eager = evaluate_lists(lists, NAMES, bootstrap=20, **TREC_EVAL)
    streamed = evaluate_stream((lists[a:a + 37] for a in range(0, len(lists), 37)), NAMES, bootstrap=20,
                               lengths=[len(d["scores"]) for d in lists], **TREC_EVAL)
    np.testing.assert_allclose(streamed.values, eager.values, rtol=0, atol=1e-12)
    assert streamed.mean == pytest.approx(eager.mean) and streamed.n_valid == eager.n_valid
    assert streamed.meta["zeroed"] == eager.meta["zeroed"]


# ------------------------------------------------------------------------------------------- by hand
def _lists():
    """q1 ranks a relevant item second and misses a judged relevant one; q2 ranks nothing relevant and nothing
    relevant is judged for it (undefined NDCG, recall, AP); groups for a fairness column."""
    return [{"list_id": "q1", "scores": torch.tensor([2.0, 1.0]), "relevance": torch.tensor([0.0, 1.0]),
             "groups": torch.tensor([0, 1]), "ideal_relevance": torch.tensor([0.0, 1.0, 2.0])},
            {"list_id": "q2", "scores": torch.tensor([2.0, 1.0, 0.5]), "relevance": torch.zeros(3),
             "groups": torch.tensor([0, 0, 1]), "ideal_relevance": torch.tensor([0.0])}]


def test_ideal_relevance_reaches_the_measures_and_undefined_zero_counts_zero():
    # q1, linear gain: DCG = 1/log2(3); ideal 2, 1 -> 2 + 1/log2(3); recall@2 = 1/2 (the grade-2 item is missed);
    # AP = (1/2) / 2; RR = 1/2
    q1 = {"ndcg": (1 / math.log2(3)) / (2 + 1 / math.log2(3)), "recall@2": 0.5, "map": 0.25, "recip_rank": 0.5}
    skip = evaluate_lists(_lists(), ["ndcg", "recall@2", "map", "recip_rank", "dips"], bootstrap=0, gain="linear")
    for c, v in q1.items():
        assert skip[c][0] == pytest.approx(v) and math.isnan(skip[c][1])
        assert skip.mean[c] == pytest.approx(v) and skip.n_valid[c] == 1
    assert skip.meta["undefined"] == "skip" and "zeroed" not in skip.meta
    zero = evaluate_lists(_lists(), ["ndcg", "recall@2", "map", "recip_rank", "dips"], bootstrap=0, gain="linear",
                          undefined="zero")
    for c, v in q1.items():
        assert zero[c].tolist() == pytest.approx([v, 0.0])
        assert zero.mean[c] == pytest.approx(v / 2) and zero.n_valid[c] == 2
        assert zero.meta["zeroed"][c] == 1
    # a fairness column keeps its undefined values (0 is parity there, not "no result")
    for c in ("dips_AB", "dips_BA", "dips_gap"):
        assert c not in zero.meta["zeroed"]
        np.testing.assert_array_equal(np.isnan(zero[c]), np.isnan(skip[c]))
    # without ideal_relevance the same lists are measured on their own items (q1: NDCG 1/log2(3), recall 1)
    own = evaluate_lists([{k: v for k, v in d.items() if k != "ideal_relevance"} for d in _lists()],
                         ["ndcg", "recall@2"], bootstrap=0, gain="linear")
    assert own["ndcg"][0] == pytest.approx(1 / math.log2(3)) and own["recall@2"][0] == 1.0


def test_ideal_relevance_of_a_padded_batch_dict():
    batch = {"scores": torch.tensor([[2.0, 1.0], [1.0, 2.0]]), "relevance": torch.tensor([[0.0, 1.0], [1.0, 0.0]]),
             "ideal_relevance": torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])}
    t = evaluate_lists(batch, ["recall@2", "map"], bootstrap=0)
    assert t["recall@2"].tolist() == [0.5, 1.0] and t["map"].tolist() == pytest.approx([0.25, 0.5])


def test_errors_name_the_argument():
    lists = _lists()
    lists[1].pop("ideal_relevance")
    with pytest.raises(ValueError, match="`ideal_relevance`"):
        evaluate_lists(lists, ["ndcg"], bootstrap=0)
    with pytest.raises(ValueError, match="`undefined`"):
        evaluate_lists(_lists(), ["ndcg"], bootstrap=0, undefined="nan")
    with pytest.raises(ValueError, match="`undefined`"):
        StreamingEvaluation(["ndcg"], undefined=0)
    stream = StreamingEvaluation(["ndcg"], num_groups=2)
    stream.add(_lists()[:1])
    with pytest.raises(ValueError, match="`ideal_relevance`"):
        stream.add(lists[1:])
    bad = _lists()
    bad[0]["ideal_relevance"] = torch.tensor([[1.0, 2.0]])
    with pytest.raises(ValueError, match="`ideal_relevance`"):
        evaluate_lists(bad, ["ndcg"], bootstrap=0)


# ------------------------------------------------------------- scores that differ below float32 resolution
def _near_tie_collection(kind, n_queries=40, n_docs=30, seed=0):
    """Runs whose scores are distinct in float64 but not all in float32 (trec_eval stores a run's scores as C
    ``float``): ``"tiny"`` steps of 1e-13 around a few levels, ``"large"`` scores 1e6 + 0.01 k."""
    rng = np.random.default_rng(seed)
    run, qrels = {}, {}
    for q in range(n_queries):
        docs = [f"d{q}_{j:02d}" for j in rng.permutation(n_docs)]
        if kind == "tiny":
            scores = rng.integers(0, 4, n_docs) + 1e-13 * rng.permutation(n_docs)
        else:
            scores = 1e6 + 0.01 * rng.permutation(n_docs)
        run[str(q)] = {d: float(s) for d, s in zip(docs, scores)}
        qrels[str(q)] = {d: int(rng.integers(0, 3)) for d in docs[: n_docs // 2]}
    return run, qrels


@pytest.mark.parametrize("kind", ["tiny", "large"])
def test_scores_that_tie_in_float32_go_by_docno_as_in_trec_eval(kind, tmp_path):
    run, qrels = _near_tie_collection(kind)
    # the float64 values are distinct in every query, their float32 roundings are not
    assert all(len(set(d.values())) == len(d) for d in run.values())
    assert all(len(set(np.float32(list(d.values())).tolist())) < len(d) for d in run.values())
    run_path, qrels_path = write_trec(run, qrels, str(tmp_path))
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "ndcg_cut", "P"}).evaluate(run)
    data = read_trec(run_path, qrels_path, **TREC_READ)
    table = evaluate_lists(data.lists, ["recip_rank", "ndcg_cut_10", "P_10"], bootstrap=0, **TREC_EVAL)
    for name in ("recip_rank", "ndcg_cut_10", "P_10"):
        diff = max(abs(table[name][i] - ref[q][name]) for i, q in enumerate(table.list_ids))
        assert diff <= 1e-9, (name, diff)


def test_comparing_float64_scores_would_differ_from_trec_eval_on_near_ties(tmp_path):
    # the control: ordering by the float64 values (then docno) disagrees with trec_eval on some query
    run, qrels = _near_tie_collection("tiny")
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    differs = 0
    for q, docs in run.items():
        order = sorted(docs, key=lambda d: (docs[d], d), reverse=True)
        rr = next((1.0 / (i + 1) for i, d in enumerate(order) if qrels[q].get(d, 0) > 0), 0.0)
        differs += abs(rr - ref[q]["recip_rank"]) > 1e-9
    assert differs > 0


def test_a_repeated_qrels_line_is_refused_under_trec_conventions_and_read_once_otherwise(tmp_path):
    (tmp_path / "run.txt").write_text("q1 Q0 a 1 2.0 r\nq1 Q0 b 2 1.0 r\n")
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\nq1 0 b 0\nq1 0 a 1\n")
    with pytest.raises(ValueError, match=r"qrels.txt:3: .*judged again \(first at line 1\).*repeated_qrels"):
        read_trec(tmp_path / "run.txt", tmp_path / "qrels.txt", **TREC_READ)
    data = read_trec(tmp_path / "run.txt", tmp_path / "qrels.txt")
    assert data.lists[0]["relevance"].tolist() == [1.0, 0.0]
    assert any("1 repeated identical qrels lines read once" in n for n in data.notes)
    with pytest.raises(ValueError, match="`repeated_qrels`"):
        read_trec(tmp_path / "run.txt", tmp_path / "qrels.txt", repeated_qrels="twice")
