"""Registry, torchmetrics accumulation, corpus tables (torchfair.evaluation)."""
import math

import numpy as np
import pytest
import torch

from torchfair.browsing import RBP, Uniform
from torchfair.evaluation import (DIPS, IGI, REE, EvaluationTable, FairnessMetric, KendallTau, PairwiseAccuracy,
                                  available_measures, compute_columns, evaluate_lists, get_measure, parse_browsing,
                                  parse_request, register, unregister)
from torchfair.evaluation.table import bootstrap_interval
from torchfair.metrics import pairwise as pw


def make_lists(n_lists=12, seed=0, max_len=9, G=2):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_lists):
        n = int(torch.randint(1, max_len + 1, (1,), generator=g))
        out.append({"list_id": f"q{i}",
                    "scores": torch.rand(n, generator=g, dtype=torch.float64),
                    "relevance": torch.randint(0, 3, (n,), generator=g).double(),
                    "groups": torch.randint(0, G, (n,), generator=g)})
    return out


def pad(lists, G=None):
    B, N = len(lists), max(len(d["scores"]) for d in lists)
    s = torch.zeros(B, N, dtype=torch.float64)
    r = torch.zeros(B, N, dtype=torch.float64)
    gr = torch.full((B, N), -1, dtype=torch.long)
    m = torch.zeros(B, N, dtype=torch.bool)
    for b, d in enumerate(lists):
        n = len(d["scores"])
        s[b, :n], r[b, :n], gr[b, :n], m[b, :n] = d["scores"], d["relevance"], d["groups"], True
    return s, r, gr, m


def direct_mean(lists, fn, pick, **kw):
    """Independent computation: one list at a time (1-D inputs), mean over the lists where the entry is valid."""
    vals = []
    for d in lists:
        v, ok = fn(d["scores"], d["relevance"], d["groups"], num_groups=2, return_valid=True, **kw)
        if bool(pick(ok)):
            vals.append(float(pick(v)))
    return (sum(vals) / len(vals) if vals else 0.0), len(vals)


# ------------------------------------------------------------------------------------------------ registry
def test_registry_pairwise_entries_and_columns():
    names = available_measures()
    for n in ("dips", "igi", "ree", "pairwise_accuracy", "rank_parity", "kendall_tau", "discordant_fraction"):
        assert n in names
    assert get_measure("dips").column_names(2) == ["dips_AB", "dips_BA", "dips_gap"]
    cols3 = get_measure("dips").column_names(3)
    assert "dips_AC" in cols3 and "dips_gap_BC" in cols3 and "dips_AA" not in cols3
    assert get_measure("kendall_tau").column_names() == ["kendall_tau"]
    with pytest.raises(ValueError, match="unknown measure"):
        get_measure("nope")


def test_registry_columns_match_functional():
    lists = make_lists(6, seed=1)
    s, r, g, m = pad(lists)
    cols = compute_columns(s, r, g, m, ["dips", "igi"], num_groups=2, browsing="uniform", tie_weight=0.0)
    M, ok = pw.dips(s, r, g, mask=m, num_groups=2, browsing=Uniform(), tie_weight=0.0, return_valid=True)
    assert torch.allclose(cols["dips_AB"][0], M[:, 0, 1]) and torch.equal(cols["dips_AB"][1], ok[:, 0, 1])
    assert torch.allclose(cols["dips_BA"][0], M[:, 1, 0])
    gap_ok = ok[:, 0, 1] & ok[:, 1, 0]
    assert torch.equal(cols["dips_gap"][1], gap_ok)
    assert torch.allclose(cols["dips_gap"][0][gap_ok], (M[:, 0, 1] - M[:, 1, 0])[gap_ok])
    I, iok = pw.igi(s, r, g, mask=m, num_groups=2, return_valid=True)  # igi ignores browsing (not accepted)
    assert torch.allclose(cols["igi_BA"][0], I[:, 1, 0]) and torch.equal(cols["igi_BA"][1], iok[:, 1, 0])


def test_registry_options_and_parsing():
    assert parse_request("ndcg@10").options == {"k": 10} and parse_request("ndcg@10").label == "ndcg@10"
    r = parse_request("dips:browsing=rbp:0.8,tie_weight=0,label=d0")
    assert r.name == "dips" and r.options == {"browsing": "rbp:0.8", "tie_weight": 0} and r.label == "d0"
    assert isinstance(parse_browsing("rbp:0.8"), RBP) and parse_browsing("rbp:0.8").gamma == 0.8
    assert parse_browsing("topk:3").k == 3
    with pytest.raises(ValueError, match="no option"):
        get_measure("igi").compute(torch.rand(4), torch.rand(4), torch.tensor([0, 1, 0, 1]), browsing="rbp")
    with pytest.raises(ValueError, match="twice"):
        compute_columns(torch.rand(1, 4), torch.rand(1, 4), torch.tensor([[0, 1, 0, 1]]), None, ["dips", "dips"])


def test_register_one_line():
    register("my_tau", pw.kendall_tau)
    try:
        assert "my_tau" in available_measures()
        m = FairnessMetric("my_tau")
        assert m.columns == ["my_tau"]
    finally:
        unregister("my_tau")


# ------------------------------------------------------------------------------------------------ metrics
@pytest.mark.parametrize("cls,fn,kw", [(DIPS, pw.dips, {"browsing": "uniform", "tie_weight": 0.5}),
                                       (DIPS, pw.dips, {}),
                                       (IGI, pw.igi, {}), (REE, pw.ree, {"tie_weight": 0.5})])
def test_metric_equals_mean_of_direct_per_list(cls, fn, kw):
    lists = make_lists(20, seed=2)
    metric = cls(**kw)
    for start in range(0, 20, 6):  # ragged batches of padded lists
        metric.update(*pad(lists[start:start + 6]))
    out = metric.compute()
    fkw = {"browsing": parse_browsing(kw["browsing"])} if "browsing" in kw else {}
    if "tie_weight" in kw:
        fkw["tie_weight"] = kw["tie_weight"]
    name = metric.request.label
    for col, pick in [("AB", lambda x: x[0, 1]), ("BA", lambda x: x[1, 0])]:
        mean, n = direct_mean(lists, fn, pick, **fkw)
        assert metric.counts[f"{name}_{col}"] == n
        assert float(out[f"{name}_{col}"]) == pytest.approx(mean, abs=1e-10)
    # the gap over lists where both directions are defined
    vals = []
    for d in lists:
        v, ok = fn(d["scores"], d["relevance"], d["groups"], num_groups=2, return_valid=True, **fkw)
        if ok[0, 1] and ok[1, 0]:
            vals.append(float(v[0, 1] - v[1, 0]))
    assert float(out[f"{name}_gap"]) == pytest.approx(sum(vals) / len(vals), abs=1e-10)


def test_metric_invalid_lists_excluded():
    # list 2 has one group only -> every DIPS column invalid there; it must not drag the mean to 0
    lists = make_lists(3, seed=3, max_len=6)
    lists[0]["groups"] = torch.tensor([0, 1] * 3)[:len(lists[0]["scores"])] if len(lists[0]["scores"]) > 1 else \
        lists[0]["groups"]
    one_group = {"scores": torch.tensor([0.3, 0.2, 0.9], dtype=torch.float64),
                 "relevance": torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64), "groups": torch.tensor([0, 0, 0])}
    both = DIPS()
    both.update(*pad(lists + [one_group]))
    only = DIPS()
    only.update(*pad(lists))
    for k, v in only.compute().items():
        assert float(both.compute()[k]) == pytest.approx(float(v))
    assert both.counts == only.counts


def test_metric_single_column_and_named_subclasses():
    lists = make_lists(8, seed=4)
    m = DIPS(column="dips_gap")
    m.update(*pad(lists))
    out = m.compute()
    assert out.dim() == 0
    full = DIPS()
    full.update(*pad(lists))
    assert float(out) == pytest.approx(float(full.compute()["dips_gap"]))
    k = KendallTau()
    k.update(*pad(lists))
    mean, _ = direct_mean(lists, lambda s, r, g, num_groups, return_valid: pw.kendall_tau(s, r, return_valid=True),
                          lambda x: x)
    assert float(k.compute()["kendall_tau"]) == pytest.approx(mean)
    pa = PairwiseAccuracy()
    pa.update(*pad(lists))
    assert "pairwise_accuracy_inter" in pa.compute()
    assert DIPS.full_state_update is False and isinstance(m, FairnessMetric)
    with pytest.raises(ValueError):
        DIPS(column="nope")


def test_metric_ids_beyond_num_groups_raise():
    m = DIPS()  # two groups
    with pytest.raises(ValueError):
        m.update(torch.rand(1, 3), torch.rand(1, 3), torch.tensor([[0, 1, 2]]))


def test_metric_distributed_style_merge():
    lists = make_lists(16, seed=5, G=3)
    a, b, whole = DIPS(num_groups=3), DIPS(num_groups=3), DIPS(num_groups=3)
    a.update(*pad(lists[:9]))
    b.update(*pad(lists[9:]))
    whole.update(*pad(lists))
    # 1) torchmetrics' merge_state (uses each state's dist_reduce_fx = sum)
    merged = DIPS(num_groups=3)
    merged.merge_state(a)
    merged.merge_state(b)
    # 2) summing the states by hand, as an all-reduce would
    summed = DIPS(num_groups=3)
    summed.total = a.total + b.total
    summed.count = a.count + b.count
    summed._update_count = 2  # as after a sync; avoids torchmetrics' compute-before-update warning
    want = whole.compute()
    for m in (merged, summed):
        got = m.compute()
        assert list(got) == list(want)
        for k in want:
            assert float(got[k]) == pytest.approx(float(want[k]), abs=1e-12)
    assert a._reductions["total"] is not None  # declared with a reduction (sum) for sync


def test_optional_metric_classes_exist_only_when_registered():
    import torchfair.evaluation as ev
    for cls_name, measure in [("NDCG", "ndcg"), ("AWRF", "awrf"), ("RND", "rnd")]:
        assert hasattr(ev, cls_name) == (measure in available_measures())


@pytest.mark.skipif("ndcg" not in available_measures(), reason="utility module absent")
def test_ndcg_metric_matches_direct():
    from torchfair.metrics.utility import ndcg
    lists = make_lists(10, seed=6)
    m = FairnessMetric("ndcg@3")
    m.update(*pad(lists))
    vals = []
    for d in lists:
        v, ok = ndcg(d["scores"], d["relevance"], k=3, return_valid=True)
        if ok:
            vals.append(float(v))
    assert float(m.compute()["ndcg@3"]) == pytest.approx(sum(vals) / len(vals))


# ------------------------------------------------------------------------------------------------ tables
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


@pytest.mark.skipif("iaa" not in available_measures(), reason="exposure module absent")
def test_batch_level_measures_are_per_list_in_registry():
    cols = get_measure("iaa").compute(torch.rand(3, 4), torch.rand(3, 4))
    assert cols["iaa"][0].shape == (3,)
    with pytest.raises(ValueError, match="per list"):
        get_measure("iaa").compute(torch.rand(3, 4), torch.rand(3, 4), amortize=True)
