"""torchfair.evaluation.table: ``evaluate_lists`` -> ``EvaluationTable`` -- ragged and padded input against the
measures list by list, agreement with the metric classes, bootstrap intervals, JSON / CSV / Markdown round trips,
soft membership, errors."""
import math

import numpy as np
import pytest
import torch

from evaluation_lists import direct_mean, make_lists, pad
from torchfair.evaluation import EvaluationTable, evaluate_lists
from torchfair.metrics import DIPS
from torchfair.evaluation.table import bootstrap_interval
from torchfair.metrics import pairwise as pw


def test_evaluate_ragged_matches_direct_per_list():
    lists = make_lists(15, seed=7, max_len=11)
    t = evaluate_lists(lists, ["dips", "igi"], bootstrap=50, batch_size=4, max_batch_elements=20)
    assert t.list_ids == [d["list_id"] for d in lists]
    for i, d in enumerate(lists):
        v, ok = pw.dips(d["scores"], d["relevance"], d["groups"], num_groups=2, return_valid=True)
        got = t["dips_AB"][i]
        if ok[0, 1]:
            assert got == pytest.approx(float(v[0, 1]))
        else:
            assert math.isnan(got)
        v, ok = pw.igi(d["scores"], d["relevance"], d["groups"], num_groups=2, return_valid=True)
        assert (t["igi_BA"][i] == pytest.approx(float(v[1, 0]))) if ok[1, 0] else math.isnan(t["igi_BA"][i])
    mean, n = direct_mean(lists, pw.dips, lambda x: x[0, 1])
    assert t.mean["dips_AB"] == pytest.approx(mean) and t.n_valid["dips_AB"] == n


def test_evaluate_padded_batch_input_equals_ragged():
    lists = make_lists(9, seed=8)
    s, r, g, m = pad(lists)
    t1 = evaluate_lists(lists, ["dips"], bootstrap=0)
    t2 = evaluate_lists({"scores": s, "relevance": r, "groups": g, "mask": m}, ["dips"], bootstrap=0)
    np.testing.assert_allclose(t1.values, t2.values, equal_nan=True)
    assert math.isnan(t1.ci_low["dips_AB"])
    t3 = evaluate_lists([(d["scores"], d["relevance"], d["groups"]) for d in lists], ["dips"], bootstrap=0)
    np.testing.assert_allclose(t1.values, t3.values, equal_nan=True)
    assert t3.list_ids == list(range(9))


def test_evaluate_metric_table_agree():
    lists = make_lists(14, seed=9)
    t = evaluate_lists(lists, ["dips:browsing=uniform"], bootstrap=0)
    m = DIPS(browsing="uniform")
    m.update(*pad(lists))
    for k, v in m.compute().items():
        assert t.mean[k] == pytest.approx(float(v))


def test_bootstrap_reproducible_and_contains_mean():
    lists = make_lists(40, seed=10)
    a = evaluate_lists(lists, ["dips", "kendall_tau"], bootstrap=300, seed=3)
    b = evaluate_lists(lists, ["dips", "kendall_tau"], bootstrap=300, seed=3)
    c = evaluate_lists(lists, ["dips", "kendall_tau"], bootstrap=300, seed=4)
    assert a.ci_low == b.ci_low and a.ci_high == b.ci_high
    assert a.ci_low != c.ci_low
    for col in a.columns:
        assert a.ci_low[col] <= a.mean[col] <= a.ci_high[col]
        assert a.ci_low[col] < a.ci_high[col]


def test_bootstrap_interval_simple():
    x = np.arange(100, dtype=float)[:, None]
    lo, hi = bootstrap_interval(x, 500, seed=0)
    assert lo[0] < 49.5 < hi[0] and hi[0] - lo[0] < 25
    lo, hi = bootstrap_interval(np.full((5, 1), np.nan), 10)
    assert math.isnan(lo[0])


def test_table_json_csv_roundtrip(tmp_path):
    lists = make_lists(7, seed=11)
    t = evaluate_lists(lists, ["dips", "rank_parity"], bootstrap=100)
    assert "rank_parity_A" in t.columns
    t2 = EvaluationTable.from_json(t.to_json(tmp_path / "t.json"))
    t3 = EvaluationTable.from_json(tmp_path / "t.json")
    t4 = EvaluationTable.from_csv(t.to_csv(tmp_path / "t.csv"))
    for u in (t2, t3, t4):
        assert u.columns == t.columns
        np.testing.assert_allclose(u.values, t.values, equal_nan=True)
        for d in ("mean", "ci_low", "ci_high"):
            np.testing.assert_allclose([getattr(u, d)[c] for c in t.columns],
                                       [getattr(t, d)[c] for c in t.columns], equal_nan=True)
        assert u.n_valid == t.n_valid
    assert t2.list_ids == t.list_ids and t4.list_ids == [str(x) for x in t.list_ids]
    md = t.to_markdown()
    assert md.splitlines()[0].startswith("| measure | mean | 95% CI")
    assert len(t.to_markdown(per_list=True).splitlines()) == 2 + len(lists)
    agg_only = t.to_csv(per_list=False).splitlines()
    assert [r.split(",")[0] for r in agg_only[1:]] == ["mean", "ci_low", "ci_high", "n_valid"]


def test_evaluate_soft_membership_and_groupless_measures():
    g = torch.Generator().manual_seed(12)
    lists = []
    for n in (3, 5, 4):
        memb = torch.rand(n, 2, generator=g)
        lists.append({"scores": torch.rand(n, generator=g), "relevance": torch.randint(0, 3, (n,), generator=g),
                      "groups": memb / memb.sum(-1, keepdim=True)})
    t = evaluate_lists(lists, ["dips", "kendall_tau"], bootstrap=0)
    v, ok = pw.dips(lists[1]["scores"], lists[1]["relevance"].float(), lists[1]["groups"], return_valid=True)
    assert t["dips_AB"][1] == pytest.approx(float(v[0, 1]), rel=1e-5)
    t2 = evaluate_lists([(d["scores"], d["relevance"]) for d in lists], ["kendall_tau"], bootstrap=0)
    np.testing.assert_allclose(t2["kendall_tau"], t["kendall_tau"])


def test_evaluate_errors():
    with pytest.raises(ValueError, match="unknown measure"):
        evaluate_lists(make_lists(2), ["nope"])
    with pytest.raises(ValueError, match="empty"):
        evaluate_lists([], ["dips"])


def test_empty_list_is_invalid_row_and_ties_option():
    from torchfair.orderings import Hard
    lists = [{"scores": torch.zeros(0), "relevance": torch.zeros(0), "groups": torch.zeros(0, dtype=torch.long)},
             {"scores": torch.tensor([1.0, 1.0, 0.5, 0.5]), "relevance": torch.tensor([0.0, 2.0, 1.0, 0.0]),
              "groups": torch.tensor([0, 1, 0, 1])}]
    t = evaluate_lists(lists, ["dips"], bootstrap=0, ties="average")
    assert np.isnan(t.values[0]).all()
    M = pw.dips(lists[1]["scores"], lists[1]["relevance"], lists[1]["groups"], ordering=Hard("average"))
    assert t["dips_AB"][1] == pytest.approx(float(M[0, 1]))


# ------------------------------------------------------------------------------------------------ streaming
def test_padded_width_depends_on_the_length_only_and_pads_little():
    from torchfair.evaluation.table import padded_width

    widths = [padded_width(n) for n in range(1, 5000)]
    assert widths[:16] == list(range(1, 17))  # short lists unpadded
    for n, w in zip(range(1, 5000), widths):
        assert n <= w <= n + n // 8, n
    assert all(a <= b for a, b in zip(widths, widths[1:]))  # monotone
    assert len({padded_width(n) for n in range(1025, 2049)}) == 8  # 8 widths per doubling
    assert padded_width(26744) == 28672 and padded_width(0) == 1  # a worked case: 26 744 -> 14 x 2 ** 11
    for bad in (-1, 2.5, True, "7"):
        with pytest.raises(ValueError, match="`n`"):
            padded_width(bad)


@pytest.mark.parametrize("chunks", [[3, 9, 1, 20], [33], [1] * 33])
def test_streamed_values_equal_the_eager_ones_whatever_the_chunks(chunks):
    """Each list padded by its own length: the per-list values, means and intervals of one eager call up to float32
    rounding, for any chunking, without the lengths up front (long lists of mixed lengths); one chunk holding
    every list gives the eager batches, hence the same bits."""
    from torchfair.evaluation.table import StreamingEvaluation

    g = torch.Generator().manual_seed(4)
    lengths = [0, 1, 5, 17, 30, 200, 211, 1000, 1100] + [int(x) for x in torch.randint(20, 900, (24,), generator=g)]
    lists = [(torch.randn(n, generator=g), torch.randint(0, 4, (n,), generator=g).float(),
              torch.randint(0, 2, (n,), generator=g)) for n in lengths]
    asked = ["ndcg@10", "dips", "exposure_misallocation", "pairwise_accuracy"]
    eager = evaluate_lists(lists, asked, num_groups=2, bootstrap=50, batch_size=4)
    st = StreamingEvaluation(asked, num_groups=2, bootstrap=50, batch_size=4)
    a = 0
    for c in chunks:
        st.add(lists[a:a + c])
        a += c
    got = st.result()
    assert np.array_equal(np.isnan(got.values), np.isnan(eager.values))
    np.testing.assert_allclose(got.values, eager.values, rtol=2e-6, atol=2e-6)
    for k in eager.mean:
        assert math.isclose(got.mean[k], eager.mean[k], rel_tol=1e-6, abs_tol=1e-7), k
        assert math.isclose(got.ci_low[k], eager.ci_low[k], rel_tol=1e-6, abs_tol=1e-7), k
    if chunks == [33]:  # the same batches: the same bits
        assert np.array_equal(got.values, eager.values, equal_nan=True) and got.mean == eager.mean


def test_a_chunk_of_similar_lists_is_measured_in_few_batches(monkeypatch):
    """512 full-catalogue-like lists (lengths 26 000 - 26 744) fall into at most two widths: two batch groups, not
    one per length (the previous rule)."""
    from torchfair.evaluation import table

    calls = []
    monkeypatch.setattr(table, "_batch_values", lambda chunk, *a, **k: calls.append(len(chunk)) or
                        (["x"], np.zeros((len(chunk), 1))))
    lengths = torch.randint(26000, 26745, (512,), generator=torch.Generator().manual_seed(0)).tolist()
    widths = {w for _, w in table._plan_batches(lengths, 1024, 2 ** 21)}
    assert len(widths) <= 2 and sum(len(b) for b, _ in table._plan_batches(lengths, 1024, 2 ** 21)) == 512


def test_pad_lists_hand_example():
    from torchfair.evaluation.table import pad_lists

    lists = [(torch.tensor([0.5, 0.1]), torch.tensor([1.0, 0.0]), torch.tensor([1, 0])),
             (torch.tensor([0.3], dtype=torch.float64), torch.tensor([2.0]), torch.tensor([1]))]
    s, r, g, m = pad_lists(lists, width=3)
    assert s.dtype == r.dtype == torch.float64  # one float64 list: the batch in float64
    assert s.tolist() == [[0.5, pytest.approx(0.1), 0.0], [0.3, 0.0, 0.0]] and r.tolist() == [[1, 0, 0], [2, 0, 0]]
    assert g.tolist() == [[1, 0, -1], [1, -1, -1]] and m.tolist() == [[True, True, False], [True, False, False]]
    s, r, g, m = pad_lists([(torch.ones(2), None, torch.tensor([[0.2, 0.8], [1.0, 0.0]]))], soft=True, num_groups=2)
    assert r is None and g.shape == (1, 2, 2) and s.dtype == torch.float32
    for kw, name in (({"soft": True}, "num_groups"), ({"width": 1}, "width")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            pad_lists(lists, **kw)
    with pytest.raises(ValueError, match="`lists`"):
        pad_lists([])


class _Recorder:
    """An accumulator that keeps what it is given."""

    def __init__(self):
        self.batches = []

    def update(self, scores, relevance=None, groups=None, mask=None):
        self.batches.append((scores.clone(), relevance.clone(), groups.clone(), mask.clone()))


def test_accumulators_see_every_padded_batch_the_measures_see():
    lists = make_lists(40, seed=3, max_len=30)
    lists[5] = {**lists[5], "scores": torch.zeros(0), "relevance": torch.zeros(0),
                "groups": torch.zeros(0, dtype=torch.long)}  # an empty list: in no batch
    for run in ("eager", "stream"):
        rec = _Recorder()
        if run == "eager":
            evaluate_lists(lists, ["dips"], num_groups=2, bootstrap=0, batch_size=7, accumulators=[rec])
        else:
            from torchfair.evaluation.table import evaluate_stream
            evaluate_stream([lists[:17], lists[17:]], ["dips"], num_groups=2, bootstrap=0, batch_size=7,
                            accumulators=(rec,))
        seen = []
        for s, r, g, m in rec.batches:
            assert s.shape == r.shape == g.shape == m.shape and s.shape[0] <= 7
            seen += [(s[b][m[b]].tolist(), r[b][m[b]].tolist(), g[b][m[b]].tolist()) for b in range(s.shape[0])]
            assert (g[~m] == -1).all()
        want = [(d["scores"].tolist(), d["relevance"].tolist(), d["groups"].tolist()) for d in lists
                if len(d["scores"])]
        assert sorted(seen) == sorted(want), run  # every non-empty list exactly once
    with pytest.raises(ValueError, match="`accumulators`"):
        evaluate_lists(lists, ["dips"], accumulators=[object()])
    with pytest.raises(ValueError, match="`accumulators`"):
        evaluate_lists(lists, ["dips"], accumulators=_Recorder())
