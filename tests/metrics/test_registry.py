"""torchfair.metrics.registry: named measures returning named per-list columns -- entries and column names, the
columns against the functional measures, request parsing, registering a measure of one's own, per-list checks
(``torchfair.evaluation`` exports the same functions: tests/evaluation/test_registry.py)."""
import pytest
import torch

from evaluation_lists import make_lists, pad
from torchfair.browsing import RBP, Uniform
from torchfair.metrics.registry import (available_measures, compute_columns, get_measure, parse_browsing,
                                        parse_request, register, unregister)
from torchfair.metrics import FairnessMetric
from torchfair.metrics import pairwise as pw


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


def test_measures_of_one_batch_share_one_exact_ordering(monkeypatch):
    """compute_columns sorts a batch once for every measure on the exact ordering (per ties setting), and each
    column equals the measure computed on its own."""
    from torchfair.orderings import hard

    lists = make_lists(6, seed=2)
    s, r, g, m = pad(lists)
    asked = ["ndcg@3", "dips", "dips:tie_weight=0,label=d0", "exposure_misallocation", "pairwise_accuracy",
             "mpc:group=1,adjacent=True,quantile=1.0", "dips:ties=average,label=da"]
    alone = {}
    for req in asked:
        alone.update(compute_columns(s, r, g, m, [req], num_groups=2))
    calls = []
    real = hard.HardOrderedBatch.__init__
    monkeypatch.setattr(hard.HardOrderedBatch, "__init__", lambda self, *a, **k: calls.append(a[2]) or real(self, *a, **k))
    shared = compute_columns(s, r, g, m, asked, num_groups=2)
    assert sorted(calls) == ["average", "first"]  # one sort per ties setting
    assert list(shared) == list(alone)
    for k in alone:
        assert torch.equal(shared[k][1], alone[k][1]), k
        torch.testing.assert_close(shared[k][0], alone[k][0], rtol=0, atol=0, msg=k)


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


@pytest.mark.skipif("iaa" not in available_measures(), reason="exposure module absent")
def test_batch_level_measures_are_per_list_in_registry():
    cols = get_measure("iaa").compute(torch.rand(3, 4), torch.rand(3, 4))
    assert cols["iaa"][0].shape == (3,)
    with pytest.raises(ValueError, match="per list"):
        get_measure("iaa").compute(torch.rand(3, 4), torch.rand(3, 4), amortize=True)


# ------------------------------------------------------------------------------------------------ column builders
def _cross(scores, relevance, groups, *, mask=None, num_groups=None, return_valid=False, shift=0.0):
    """A measure of this file: M[g, h] = (mean score of g) - (mean relevance of h) + shift, valid where both groups
    are present; groups are integer ids."""
    G = num_groups or int(groups.max()) + 1
    m = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    memb = torch.nn.functional.one_hot(groups.clamp(min=0), G).to(scores.dtype) * (m & (groups >= 0))[..., None]
    cnt = memb.sum(1)
    ms = (memb * scores[..., None]).sum(1) / cnt.clamp(min=1)
    mr = (memb * relevance[..., None]).sum(1) / cnt.clamp(min=1)
    M = ms[:, :, None] - mr[:, None, :] + shift
    ok = (cnt > 0)[:, :, None] & (cnt > 0)[:, None, :]
    return (M, ok) if return_valid else M


@pytest.mark.parametrize("G", [2, 3, 27])
def test_pair_columns_are_the_matrix_entries_and_antisymmetric_gaps(G):
    register("cross_test", _cross, description="test measure")
    try:
        gen = torch.Generator().manual_seed(G)
        B, N = 3, 40
        s, r = torch.rand(B, N, generator=gen, dtype=torch.float64), torch.rand(B, N, generator=gen, dtype=torch.float64)
        g = torch.randint(0, G, (B, N), generator=gen)
        g[0, g[0] == 1] = 0  # group 1 absent from list 0: its entries invalid there
        cols = get_measure("cross_test").compute(s, r, g, num_groups=G, shift=0.5)
        M, ok = _cross(s, r, g, num_groups=G, return_valid=True, shift=0.5)

        def name(a, b):
            return f"{chr(65 + a)}{chr(65 + b)}" if G <= 26 else f"g{a}_g{b}"
        assert len(cols) == G * (G - 1) + G * (G - 1) // 2
        for a in range(G):
            for b in range(G):
                if a == b:
                    assert f"cross_test_{name(a, b)}" not in cols
                    continue
                v, valid = cols[f"cross_test_{name(a, b)}"]
                assert torch.equal(valid, ok[:, a, b]) and torch.allclose(v, M[:, a, b])
                if a < b:
                    gap = "cross_test_gap" if G == 2 else f"cross_test_gap_{name(a, b)}"
                    gv, gvalid = cols[gap]
                    both = ok[:, a, b] & ok[:, b, a]
                    assert torch.equal(gvalid, both)
                    want = torch.where(both, M[:, a, b] - M[:, b, a], torch.zeros(()))
                    assert torch.allclose(gv, want)
        assert get_measure("cross_test").description == "test measure"
    finally:
        unregister("cross_test")


def test_named_tuple_results_give_one_block_per_floating_field():
    from typing import NamedTuple

    class Out(NamedTuple):
        per_group: torch.Tensor
        total: torch.Tensor
        flags: torch.Tensor
        valid: torch.Tensor

    def rec(scores, groups, *, return_valid=False):
        """A record measure: per-group score sums, the total, a bool field."""
        memb = torch.nn.functional.one_hot(groups, 2).to(scores.dtype)
        per = (memb * scores[..., None]).sum(1)
        return Out(per, scores.sum(-1), scores > 0, memb.sum(1) > 0)

    register("rec_test", rec)
    try:
        s = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        g = torch.tensor([[0, 0, 1], [0, 0, 0]])
        cols = get_measure("rec_test").compute(s, None, g)
        assert list(cols) == ["rec_test_per_group_A", "rec_test_per_group_B", "rec_test_total"]
        assert cols["rec_test_per_group_B"][0].tolist() == [3.0, 0.0]
        assert cols["rec_test_per_group_B"][1].tolist() == [True, False]  # the record's own validity
        assert cols["rec_test_total"][0].tolist() == [6.0, 15.0]
        assert get_measure("rec_test").description == "A record measure: per-group score sums, the total, a bool field."
        assert get_measure("rec_test").needs_groups and not get_measure("rec_test").needs_relevance
    finally:
        unregister("rec_test")


# ------------------------------------------------------------------------------------------------ requests and options
@pytest.mark.parametrize("text, name, options, label", [
    ("ndcg", "ndcg", {}, "ndcg"),
    ("ndcg@5", "ndcg", {"k": 5}, "ndcg@5"),
    ("ndcg@5:gain=linear", "ndcg", {"gain": "linear", "k": 5}, "ndcg@5"),
    ("dips:tie_weight=0.25,browsing=rbp:0.8,label=d", "dips", {"tie_weight": 0.25, "browsing": "rbp:0.8"}, "d"),
    (" awrf:distance = kl , protected=0 ", "awrf", {"distance": "kl", "protected": 0}, "awrf"),
    ("x:a=true,b=False,c=none,d=null,e=1e-3,f=-2", "x", {"a": True, "b": False, "c": None, "d": None, "e": 1e-3,
                                                         "f": -2}, "x"),
])
def test_parse_request_reads_names_options_and_labels(text, name, options, label):
    r = parse_request(text)
    assert (r.name, r.options, r.label) == (name, options, label)
    assert all(type(v) is type(options[k]) for k, v in r.options.items())
    assert parse_request(r) is r
    t = parse_request((name, options))
    assert t.name == name and t.options == options


def test_parse_request_errors():
    with pytest.raises(ValueError, match="key=value"):
        parse_request("dips:tie_weight")
    with pytest.raises(ValueError, match="a measure must be a name"):
        parse_request(3)


def test_global_options_reach_only_the_measures_that_accept_them():
    """``compute_columns``: a global ``browsing`` goes to DIPS and not to IGI (which takes none); per-request options
    win; a global ``k`` never reaches MPC (its ``k`` is a number of pairs); ``ties`` becomes Hard(ties)."""
    lists = make_lists(6, seed=5)
    s, r, g, m = pad(lists)
    cols = compute_columns(s, r, g, m, ["dips", "igi", "dips:browsing=uniform,label=du"], num_groups=2,
                           browsing="rbp:0.5", ties="average")
    from torchfair.orderings import Hard
    M = pw.dips(s, r, g, mask=m, num_groups=2, browsing=RBP(0.5), ordering=Hard("average"))
    U = pw.dips(s, r, g, mask=m, num_groups=2, browsing=Uniform(), ordering=Hard("average"))
    I = pw.igi(s, r, g, mask=m, num_groups=2, ordering=Hard("average"))
    assert torch.allclose(cols["dips_AB"][0], M[:, 0, 1]) and torch.allclose(cols["du_AB"][0], U[:, 0, 1])
    assert torch.allclose(cols["igi_AB"][0], I[:, 0, 1])
    # a global cut-off k reaches NDCG; MPC ignores it (with eps given, a k would be a second, conflicting threshold)
    both = compute_columns(s, r, g, m, ["ndcg", "mpc:eps=0.5"], num_groups=2, k=1)
    from torchfair.metrics import ndcg
    assert torch.allclose(both["ndcg"][0], ndcg(s, r, mask=m, k=1)) and "mpc" in both
    spec = get_measure("igi")
    assert spec.options_for({"browsing": 1, "tie_weight": 0}) == {"tie_weight": 0}
    with pytest.raises(ValueError, match="has no option 'browsing'"):
        spec.options_for({"browsing": 1}, strict=True)


def test_register_checks_and_needs():
    with pytest.raises(ValueError, match="`name`"):
        register("", pw.igi)
    with pytest.raises(ValueError, match="`fn`"):
        register("x_test", 3)
    with pytest.raises(ValueError, match="already registered"):
        register("dips", pw.dips, overwrite=False)
    with pytest.raises(ValueError, match="needs relevance"):
        get_measure("ndcg").compute(torch.rand(2, 3))
    with pytest.raises(ValueError, match="needs group labels"):
        get_measure("dips").compute(torch.rand(2, 3), torch.rand(2, 3))
    assert "x_test" not in available_measures()
    # a 1-D list is a batch of one
    cols = get_measure("dips").compute(torch.tensor([0.3, 0.2, 0.9]), torch.tensor([1.0, 2.0, 0.0]),
                                       torch.tensor([0, 1, 1]))
    assert all(v.shape == (1,) for v, _ in cols.values())


def test_parse_request_strips_spaces_around_names_and_cut_offs():
    from torchfair.evaluation import parse_request

    assert parse_request("awrf : distance=kl").name == "awrf"
    r = parse_request(" ndcg @ 5 ")
    assert (r.name, r.options["k"]) == ("ndcg", 5)
    with pytest.raises(ValueError, match="cut-off"):
        parse_request("ndcg@ten")


def test_trec_eval_measure_names():
    """trec_eval's printed names map to the measure, its cut-off and its conventions, labelled as trec_eval
    prints them; torchfair's own names (``ndcg``, ``recall``) are not rewritten."""
    want = {"ndcg_cut_5": ("ndcg", {"gain": "linear", "k": 5}), "P_10": ("precision", {"k": 10}),
            "recall_100": ("recall", {"k": 100}), "recip_rank": ("mrr", {}), "map": ("average_precision", {}),
            "map_cut_20": ("average_precision", {"k": 20}), "Rprec": ("r_precision", {}),
            "ndcg": ("ndcg", {}), "recall": ("recall", {})}
    for name, (measure, opts) in want.items():
        r = parse_request(name)
        assert (r.name, r.options, r.label) == (measure, opts, name)
    r = parse_request("P_10:threshold=1,label=p10")
    assert (r.name, r.options, r.label) == ("precision", {"k": 10, "threshold": 1}, "p10")
    assert parse_request("map@5").options == {"k": 5} and parse_request("map@5").label == "map@5"
    with pytest.raises(ValueError, match="cut-off"):
        parse_request("P_10@5")
    with pytest.raises(ValueError, match="cut-off"):
        parse_request("P_0")
    with pytest.raises(ValueError, match="P_x"):  # not a trec_eval name: an unknown measure
        get_measure(parse_request("P_x").name)
    # a registered name wins over the trec_eval reading
    register("map", lambda scores, relevance, mask=None: scores.sum(-1))
    try:
        assert parse_request("map").name == "map"
    finally:
        unregister("map")
