"""torchfair.rerank.registry: the spec language (``parse_spec``, ``get_reranker``, ``Reranker``) -- round trips,
values, the listing, errors naming the spec; the targeted re-ranker's guards."""
import math

import pytest
import torch

from torchfair.rerank import (RERANKERS, Guard, Reranker, epsilon_greedy, fa_ir, get_reranker, list_rerankers,
                              parse_spec, targeted_rerank)


@pytest.mark.parametrize("spec", [
    "none", "fa_ir", "fa_ir:p=0.4,alpha=0.05", "fa_ir:p=0.5,k=none,adjust=false", "fa*ir:protected=0",
    "detconstsort:distribution=0.3/0.7,k=10", "dcs:k=3", "epsgreedy:epsilon=0.1,seed=2", "epsilon_greedy",
    "targeted:measure=dips,keep=10,relevance=top:10,tie_weight=0.5", "targeted:boosts=1/inf",
    "targeted:measure=exposure_misallocation,max_utility_loss=0.02,relevance=top:10,browsing=rbp:0.8",
    "targeted:measure=dips,guard=pairwise_gap:0.1", "targeted:measure=dips,keep=8,guard=pairwise_gap:0.1",
    "targeted:guard=pairwise_gap:0.1+exposure_misallocation:0.1,guard_relevance=top:5,relevance=top:10",
])
def test_parse_spec_round_trips(spec):
    r = get_reranker(spec)
    assert isinstance(r, Reranker) and get_reranker(r) is r
    again = get_reranker(r.spec)
    assert again.spec == r.spec and again.name == r.name and again.options == r.options
    assert parse_spec(r.spec) == (r.name, r.options)
    assert repr(r) == f"Reranker({r.spec!r})"


def test_parse_spec_values():
    assert parse_spec("targeted:relevance=top:10,keep=3") == ("targeted", {"relevance": "top:10", "keep": 3})
    assert parse_spec("FA_IR: p = 0.5 , adjust = true") == ("fa_ir", {"p": 0.5, "adjust": True})
    assert parse_spec("targeted:boosts=0.5/inf") == ("targeted", {"boosts": [0.5, math.inf]})
    assert parse_spec("identity") == ("none", {})
    # "fair" is R&E's FAIR measure (metrics.fair); the FA*IR re-ranker is "fa_ir" (or "fa*ir"), no other spelling
    assert parse_spec("fa*ir:p=0.5") == ("fa_ir", {"p": 0.5})
    with pytest.raises(ValueError, match="unknown re-ranker 'fair'"):
        parse_spec("fair:p=0.5")
    r = get_reranker("fa_ir:p=0.5,alpha=0.2,k=3")
    s, g = torch.tensor([5., 4., 3., 2., 1.]), torch.tensor([0, 0, 0, 1, 1])
    assert torch.equal(r(s, None, g).ranking, fa_ir(s, g, p=0.5, alpha=0.2, k=3).ranking)


def test_list_rerankers_names_every_entry():
    rows = list_rerankers()
    assert [x[0] for x in rows] == list(RERANKERS)
    for name, desc, src, opts in rows:
        assert desc and isinstance(opts, list)
        for o in opts:
            if not o.startswith("("):  # every listed option is accepted by the spec language
                get_reranker(f"{name}:{o}=none")
    assert "p" in dict((r[0], r[3]) for r in rows)["fa_ir"]


@pytest.mark.parametrize("spec", ["fa_ir:p=0.4,alpha=0.05", "detconstsort:distribution=0.3/0.7,k=10",
                                  "epsgreedy:epsilon=0.1,seed=2",
                                  "targeted:measure=dips,keep=10,relevance=top:10,tie_weight=0.5",
                                  "targeted:boosts=1/inf"])
def test_a_spec_round_trips(spec):
    assert get_reranker(get_reranker(spec).spec).spec == get_reranker(spec).spec


def test_registry_round_trip_and_listing():
    assert parse_spec("targeted:relevance=top:10,keep=3") == ("targeted", {"relevance": "top:10", "keep": 3})
    assert [x[0] for x in list_rerankers()] == list(RERANKERS)


_S, _G = torch.randn(5), torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("call, arg", [
    (lambda: get_reranker("nope"), "spec"),
    (lambda: get_reranker("fa_ir:q=1"), "spec"),
    (lambda: get_reranker("fa_ir:p"), "spec"),
    (lambda: get_reranker(""), "spec"),
    (lambda: get_reranker("fa_ir:mask=1"), "spec"),
    (lambda: Reranker("nope"), "name"),
    (lambda: get_reranker("fa_ir")(_S), "groups"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


def test_reranker_call_routes_the_inputs():
    """``Reranker(...)(scores, relevance, groups, mask)``: "none" is the scores' own order; the targeted re-ranker
    never sees the evaluation labels (its relevance estimate defaults to "zeros"); ``num_groups`` is passed on."""
    gen = torch.Generator().manual_seed(3)
    s = torch.randn(3, 8, generator=gen)
    rel = torch.randint(0, 3, (3, 8), generator=gen).float()
    g = torch.randint(0, 2, (3, 8), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    mask = torch.rand(3, 8, generator=gen) < 0.9
    mask[:, :2] = True
    none = get_reranker("none")(s, rel, g, mask)
    start = torch.sort(torch.where(mask, s, torch.tensor(-1e9)), dim=-1, descending=True, stable=True).indices
    assert torch.equal(none.ranking, start) and bool(none.met.all()) and not bool(none.one_group.any())
    spec = get_reranker("targeted:measure=dips,browsing=uniform")
    got = spec(s, rel, g, mask)
    assert torch.equal(got.ranking, targeted_rerank(s, g, "zeros", measure="dips", browsing="uniform", mask=mask).ranking)
    oracle = get_reranker("targeted:measure=dips,browsing=uniform,relevance=top:3")(s, rel, g, mask)
    assert torch.equal(oracle.ranking, targeted_rerank(s, g, "top:3", measure="dips", browsing="uniform",
                                                       mask=mask).ranking)
    with pytest.raises(ValueError, match="`protected`"):  # num_groups reaches FA*IR's own check
        get_reranker("fa_ir:protected=2")(s, None, g, mask, num_groups=2)
    assert torch.equal(get_reranker("epsgreedy:epsilon=0.5,seed=3")(s, None, None, mask).ranking,
                       epsilon_greedy(s, epsilon=0.5, seed=3, mask=mask).ranking)  # group-blind: no groups needed


@pytest.mark.parametrize("spec, why", [("fa_ir:relevance=top:3", "relevance"), ("detconstsort:seed=1", "seed"),
                                        ("epsgreedy:groups=1", "groups"), ("targeted:num_groups=2", "num_groups")])
def test_options_are_checked_against_the_function(spec, why):
    """Only the keyword options of the function (and the targeted re-ranker's relevance estimate) are accepted;
    data arguments are never options."""
    with pytest.raises(ValueError, match=f"'{why}' is not an option"):
        get_reranker(spec)


def test_spec_formats_values_back_to_the_language():
    r = Reranker("targeted", {"boosts": [0.5, math.inf], "keep": 2, "relevance": "top:4", "max_utility_loss": None})
    assert r.spec == "targeted:boosts=0.5/inf,keep=2,relevance=top:4,max_utility_loss=None"
    assert parse_spec(r.spec) == ("targeted", r.options)
    assert Reranker("none").spec == "none" and get_reranker("FA*IR").name == "fa_ir"


def test_targeted_guard_specs():
    """``guard=`` joins guards with ``+`` (``,`` separates options) and round-trips; ``guard_relevance`` is an
    option; the spec runs the function with the same guards; a guard given as tuples / :class:`Guard` formats back to
    the ``+`` form; ``--list-rerankers`` names the options and explains the guard."""
    assert parse_spec("targeted:measure=dips,guard=pairwise_gap:0.1") == (
        "targeted", {"measure": "dips", "guard": "pairwise_gap:0.1"})
    assert parse_spec("targeted:guard=pairwise_gap:0.1+exposure_misallocation:0.2,guard_relevance=top:5,keep=2") == (
        "targeted", {"guard": "pairwise_gap:0.1+exposure_misallocation:0.2", "guard_relevance": "top:5", "keep": 2})
    gen = torch.Generator().manual_seed(0)
    s, g = torch.randn(4, 12, generator=gen), torch.randint(0, 2, (4, 12), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    rel = torch.randint(0, 3, (4, 12), generator=gen).float()
    spec = get_reranker("targeted:measure=dips,keep=1,guard=pairwise_gap:0.1+exposure_misallocation:0.2,"
                        "guard_relevance=top:4")
    got = spec(s, rel, g)  # the evaluation labels reach neither the objective nor the guards
    want = targeted_rerank(s, g, "zeros", measure="dips", keep=1, guard="pairwise_gap:0.1+exposure_misallocation:0.2",
                           guard_relevance="top:4")
    assert torch.equal(got.ranking, want.ranking) and torch.equal(got.guard, want.guard)
    r = Reranker("targeted", {"guard": [("pairwise_gap", 0.1), Guard("exposure_misallocation", 0.2)]})
    assert r.spec == "targeted:guard=pairwise_accuracy:0.1+exposure_misallocation:0.2"
    assert torch.equal(get_reranker(r.spec)(s, None, g).ranking, r(s, None, g).ranking)
    assert get_reranker("targeted:guard=none").options == {"guard": None}
    rows = {x[0]: x[3] for x in list_rerankers()}
    assert "guard" in rows["targeted"] and "guard_relevance" in rows["targeted"]
    assert any("pairwise_gap" in o and "guard_relevance" in o for o in rows["targeted"] if o.startswith("("))


@pytest.mark.parametrize("spec, arg", [
    ("targeted:guard=nope:0.1", "guard"), ("targeted:guard=pairwise_gap:-1", "guard"),
    ("targeted:guard=pairwise_gap:x", "guard"), ("targeted:guard=ndcg:0.1", "guard"),
    ("targeted:guard=pairwise_gap", "guard"), ("targeted:guard=0.1", "guard"),
    ("targeted:guard=pairwise_gap:0.1,guard_relevance=top:0", "guard_relevance"),
])
def test_bad_guard_specs_fail_at_construction(spec, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        get_reranker(spec)


@pytest.mark.parametrize("spec", ["targeted:measure=dipz", "targeted:measure=ndcg,keep=9"])
def test_targeted_measure_is_checked_when_the_spec_is_read(spec):
    """A misspelt or non-fairness measure fails when the spec is read (before `torchfair evaluate` scores any list),
    naming the measure; the declared fairness measures and their aliases are accepted."""
    name = spec.split("=")[1].split(",")[0]
    with pytest.raises(ValueError, match=f"unknown fairness measure '{name}'"):
        get_reranker(spec)
    for ok in ("targeted:measure=pairwise_gap", "targeted:measure=awrf", "targeted"):
        get_reranker(ok)


def test_rerank_lists_equals_the_reranker_on_each_list_alone():
    """Ragged lists re-ranked in padded batches get the ranking of each list re-ranked alone, the other keys
    unchanged.  (FA*IR's default ``k`` is the padded width, so a list's FA*IR ranking depends on the longest list
    of its batch: checked on lists of one length; ε-greedy's draws depend on the batch's shape.)"""
    from torchfair.rerank import rerank_lists

    g = torch.Generator().manual_seed(0)
    ragged, same = [], []
    for b in range(23):
        n = int(torch.randint(1, 15, (1,), generator=g))
        for out, m in ((ragged, n), (same, 9)):
            out.append({"list_id": b, "scores": torch.randn(m, generator=g), "relevance": torch.rand(m, generator=g),
                        "groups": torch.randint(0, 2, (m,), generator=g)})
    for spec, lists in (("none", ragged), ("detconstsort:distribution=0.5/0.5", ragged),
                        ("fa_ir:p=0.6,alpha=0.1", same), ("detconstsort:distribution=0.3/0.7", same)):
        r = get_reranker(spec)
        out = rerank_lists(lists, spec, num_groups=2, batch_size=5)
        assert len(out) == len(lists)
        moved = 0
        for x, y in zip(lists, out):
            alone = r(x["scores"][None], None, x["groups"][None], num_groups=2).ranking[0]
            assert torch.equal(torch.argsort(y["scores"], descending=True, stable=True), alone), spec
            assert y["list_id"] == x["list_id"] and y["relevance"] is x["relevance"] and y["groups"] is x["groups"]
            moved += not torch.equal(alone, torch.argsort(x["scores"], descending=True, stable=True))
        assert spec == "none" or moved > 0, spec  # the re-ranker did something
    for bad, name in (({"num_groups": 0}, "num_groups"), ({"batch_size": 0}, "batch_size")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            rerank_lists(ragged, "fa_ir", **{"num_groups": 2, **bad})
    with pytest.raises(ValueError, match="`lists`"):
        rerank_lists([{"scores": torch.ones(2)}], "fa_ir", num_groups=2)
    with pytest.raises(ValueError, match="`spec`"):
        rerank_lists(ragged, "nope", num_groups=2)


# ------------------------------------------------------------------------ near misses: "did you mean"
@pytest.mark.parametrize("spec, hint", [
    ("interleav:p=1", "unknown re-ranker 'interleav' (did you mean 'interleave'?)"),
    ("interleave:pp=1", "'pp' is not an option of re-ranker 'interleave' (did you mean 'p'?)"),
    ("targeted:measure=dps", "unknown fairness measure 'dps' (did you mean 'dips'?)"),
    ("targeted:measure=dips,kep=9", "'kep' is neither an option of re-ranker 'targeted' nor of measure 'dips' "
                                    "(did you mean 'keep'?)"),
], ids=["re-ranker", "option", "targeted-measure", "targeted-option"])
def test_a_near_miss_is_named_with_its_closest_spelling(spec, hint):
    with pytest.raises(ValueError) as e:
        get_reranker(spec)
    assert hint in str(e.value)


def test_a_targeted_spec_takes_the_measures_own_options():
    assert get_reranker("targeted:measure=dips,keep=9,browsing=rbp:0.9").options["browsing"] == "rbp:0.9"


def test_a_far_miss_gets_no_suggestion():
    with pytest.raises(ValueError) as e:
        get_reranker("zzzzzz")
    assert "did you mean" not in str(e.value)
