"""torchfair/evaluation/checks.py: measure requests and re-ranker specs checked in full (a dry run on tiny lists)
before any work, each error naming the command-line option, with a "did you mean" for near misses."""
import pytest

from torchfair.evaluation.checks import check_measures, check_rerank


@pytest.mark.parametrize("measures", [None, "dips", "ndcg@10,dips", ["P_5", "map", "ndcg_cut_10"], "dips:label=d0",
                                      "mpc:eps=0.1", "awrf:protected=2", "exposure_misallocation:k=5"])
def test_good_requests_pass(measures):
    check_measures(measures)


@pytest.mark.parametrize("measures, says", [
    ("dipz", "--measures 'dipz': unknown measure 'dipz' (did you mean 'dips'?); available: "),
    ("dips:tie_weght=0", "--measures 'dips:tie_weght=0': measure 'dips' has no option 'tie_weght' (did you mean "
                         "'tie_weight'?); it accepts "),
    ("dips:tie_weight=x", "--measures 'dips:tie_weight=x': `tie_weight` must be a finite number"),
    ("ndcg@x", "--measures 'ndcg@x': cannot parse the cut-off 'x'"),
    (["ndcg@10", "mpc"], "--measures 'mpc': give exactly one of `eps`"),
])
def test_bad_requests_name_the_option_and_the_request(measures, says):
    with pytest.raises(ValueError) as e:
        check_measures(measures)
    assert str(e.value).startswith(says) and "\n" not in str(e.value), str(e.value)


def test_the_option_and_the_number_of_groups():
    with pytest.raises(ValueError, match=r"^--model\.measures 'dipz'"):
        check_measures(["dipz"], "--model.measures")
    check_measures("awrf:protected=2")  # fine with 3 groups or more
    with pytest.raises(ValueError, match="protected"):
        check_measures("awrf:protected=2", num_groups=2)  # not when the data has 2


@pytest.mark.parametrize("spec", [None, [], "none", "fa_ir:p=0.4", "fa_ir:p=0.4,protected=1", "detconstsort",
                                  "interleave:p=0.3", "epsgreedy:epsilon=0.1",
                                  "targeted:measure=dips,keep=9,guard=pairwise_gap:0.1", ["fa_ir", "targeted"]])
def test_good_specs_pass(spec):
    check_rerank(spec)


@pytest.mark.parametrize("spec, says", [
    ("targetd", "--rerank 'targetd': unknown re-ranker 'targetd' (did you mean 'targeted'?); known: "),
    ("fair:p=0.5", "--rerank 'fair:p=0.5': unknown re-ranker 'fair' (did you mean 'fa_ir'?)"),
    ("targeted:measure=dips,kep=9", "--rerank 'targeted:measure=dips,kep=9': 'kep' is neither an option of "
                                    "re-ranker 'targeted' nor of measure 'dips' (did you mean 'keep'?)"),
    ("targeted:measure=dipz", "--rerank 'targeted:measure=dipz': unknown fairness measure 'dipz' (did you mean "
                              "'dips'?)"),
    ("fa_ir:p=2", "--rerank 'fa_ir:p=2': `p` must be a finite number >= 0.0 and <= 1.0; got 2"),
    (["fa_ir", "epsgreedy:eps=0.1"], "--rerank 'epsgreedy:eps=0.1': 'eps' is not an option of re-ranker "
                                     "'epsgreedy' (did you mean 'epsilon'?)"),
])
def test_bad_specs_name_the_option_and_the_spec(spec, says):
    with pytest.raises(ValueError) as e:
        check_rerank(spec)
    assert str(e.value).startswith(says) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(ValueError, match=r"^--model\.rerank "):
        check_rerank(spec, "--model.rerank")
