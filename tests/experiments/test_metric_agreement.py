"""experiments/metric_agreement.py: Kendall's tau (against a hand count and scipy), the tau matrix, and the --fast
pipeline (Raj & Ekstrand, SIGIR 2022, §3): its trained systems are sweep trials, evaluated from their checkpoints."""
import math
from pathlib import Path

import pytest
import torch
from experiment_loader import experiment_fixture



mod = experiment_fixture("metric_agreement")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("metric_agreement_runs")


@pytest.fixture(scope="module")
def fast(mod, runs):
    args = mod._parser().parse_args(["--fast", "--runs", str(runs)])
    return mod.run(args, say=lambda *_: None)


def test_fast_systems_are_sweep_trials(mod, fast, runs):
    # the six trained systems are the trials of configs/sweep_metric_agreement.yaml; the evaluator's NDCG@10 of each
    # checkpoint on the test lists equals the exact test NDCG@10 the trial logged through Lightning
    import json

    assert set(fast["trials"]) == {s.name for s in mod.default_systems([0.3, 1.0], 32) if s.kind == "trained"}
    for name, tid in fast["trials"].items():
        res = json.loads((runs / "trials" / tid / "result.json").read_text())
        assert res["timing"]["train_s"] > 0
        assert fast["values"][name]["ndcg"]["value"] == pytest.approx(res["metrics"]["test/ndcg@10"], abs=1e-5)
    params = {json.loads((runs / "trials" / tid / "trial.json").read_text())["params"]["system"]
              for tid in fast["trials"].values()}
    assert params == {"mf", "two_tower", "mf_dips", "mf_misalloc"}


# ------------------------------------------------------------------------------------------------ tau
def test_tau_hand_counts(mod):
    # C = 2, D = 1 of 3 pairs
    assert mod.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # pairs: (0,1) tied in x, (1,2) tied in y, the other 4 concordant: 4 / sqrt(5 * 5)
    assert mod.kendall_tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)
    assert mod.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(mod.kendall_tau([1, 1, 1], [1, 2, 3]))


def _tau_b_by_pairs(x, y):
    """tau-b by counting pairs (Kendall 1945): the independent reference of the scipy-backed kendall_tau."""
    n = len(x)
    c = d = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])
            tx, ty = tx + (dx == 0), ty + (dy == 0)
            c, d = c + (dx * dy > 0), d + (dx * dy < 0)
    n0 = n * (n - 1) // 2
    return (c - d) / math.sqrt((n0 - tx) * (n0 - ty))


@pytest.mark.parametrize("seed", range(5))
def test_tau_matches_pair_counts(mod, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (9,), generator=g).tolist()  # small range: ties in both
    y = torch.randint(0, 4, (9,), generator=g).tolist()
    assert mod.kendall_tau(x, y) == pytest.approx(_tau_b_by_pairs(x, y), abs=1e-12)
    xs = torch.randperm(8, generator=g).tolist()
    ys = torch.randperm(8, generator=g).tolist()
    assert mod.kendall_tau(xs, ys) == pytest.approx(_tau_b_by_pairs(xs, ys), abs=1e-12)


def test_tau_validation(mod):
    with pytest.raises(ValueError, match="`x` and `y`"):
        mod.kendall_tau([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="`x`"):
        mod.kendall_tau([1], [1])
    with pytest.raises(ValueError, match="finite"):
        mod.kendall_tau([1, float("nan")], [1, 2])
    with pytest.raises(ValueError, match="`directions`"):
        mod.tau_matrix({"a": [1, 2]}, {"a": 0})
    with pytest.raises(ValueError, match="`values`"):
        mod.tau_matrix({"a": [1, 2], "b": [1, 2, 3]}, {"a": 1, "b": 1})


def test_tau_matrix_orientation(mod):
    # "b" is "a" in the opposite convention (smaller is fairer): oriented, they agree perfectly
    keys, tau = mod.tau_matrix({"a": [0.1, 0.5, 0.3], "b": [-0.1, -0.5, -0.3], "c": [1, 2, 3]},
                               {"a": 1, "b": -1, "c": 1})
    assert keys == ["a", "b", "c"]
    assert tau[0][1] == tau[1][0] == 1.0
    assert tau[0][2] == pytest.approx(1 / 3)
    assert [tau[i][i] for i in range(3)] == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------------------------------------ pipeline
def test_fast_run_tau_matrix(mod, fast):
    keys, tau = fast["keys"], fast["tau"]
    assert keys == [m.key for m in mod.METRICS]
    assert len(fast["systems"]) >= 5
    n = len(keys)
    for i in range(n):
        assert tau[i][i] == pytest.approx(1.0)
        for j in range(n):
            assert tau[i][j] == tau[j][i]
            assert -1.0 <= tau[i][j] <= 1.0
    for s in fast["systems"]:
        for k in keys:
            assert math.isfinite(fast["values"][s][k]["value"]), (s, k)
    # the tau matrix is the pair count of the oriented per-system values
    d = {m.key: m.direction for m in mod.METRICS}
    a, b = keys.index("awrf_cat"), keys.index("fair")
    xa = [d["awrf_cat"] * fast["values"][s]["awrf_cat"]["value"] for s in fast["systems"]]
    xb = [d["fair"] * fast["values"][s]["fair"]["value"] for s in fast["systems"]]
    assert tau[a][b] == pytest.approx(mod.kendall_tau(xa, xb))


def test_fast_popularity_less_fair_than_random(fast):
    # popularity ranks every head item above every tail item: the extreme of the exposure / prefix metrics
    pop, rnd = fast["values"]["Popularity"], fast["values"]["Random"]
    for k in ("pref", "awrf_cat", "logdp", "misalloc", "eel", "dips"):
        assert pop[k]["value"] > rnd[k]["value"], k
    assert pop["fair"]["value"] < rnd["fair"]["value"]
    assert 0 <= rnd["pref"]["value"] < pop["pref"]["value"] <= 1 + 1e-6  # PreF's range [0, 1]
    assert pop["ndcg"]["value"] > rnd["ndcg"]["value"]


def test_sign_convention_agreement(mod):
    # logDP with the tail or the head as the protected group: per list DP_head = 1 / DP_tail, so |log| is the same
    # and the two orderings of systems agree with tau = 1; the signed logDP flips sign and gives tau = -1
    # (oriented as "larger is fairer" both times)
    MetricSpec = mod.MetricSpec
    metrics = [MetricSpec("tail", "tail", "dp", "dp", "abslog", -1, "ratio"),
               MetricSpec("head", "head", "dp:protected=0,reference=1,label=dph", "dph", "abslog", -1, "ratio")]
    g = torch.Generator().manual_seed(0)
    groups = (torch.rand(40, generator=g) < 0.6).long()
    rel = torch.randint(0, 3, (40,), generator=g).float()
    vals = {"tail": [], "head": []}
    signed_t, signed_h = [], []
    for bias in (0.0, 0.5, 1.0, 2.0, -1.0):
        lists = [{"scores": torch.randn(40, generator=g) + bias * groups, "relevance": rel, "groups": groups}
                 for _ in range(6)]
        v = mod.system_values(lists, 2, [0.4, 0.6], metrics)
        vals["tail"].append(v["tail"]["value"])
        vals["head"].append(v["head"]["value"])
        s = mod.system_values(lists, 2, [0.4, 0.6], [MetricSpec("t", "t", "dp", "dp", "log", 1, "ratio"),
                                                     MetricSpec("h", "h", "dp:protected=0,reference=1,label=dph",
                                                                "dph", "log", 1, "ratio")])
        signed_t.append(s["t"]["value"])
        signed_h.append(s["h"]["value"])
    assert vals["tail"] == pytest.approx(vals["head"], rel=1e-5)
    _, tau = mod.tau_matrix(vals, {"tail": -1, "head": -1})
    assert tau[0][1] == pytest.approx(1.0)
    assert signed_t == pytest.approx([-x for x in signed_h], rel=1e-5)
    assert mod.kendall_tau(signed_t, signed_h) == pytest.approx(-1.0)


def test_system_values_bad_column(mod):
    bad = [mod.MetricSpec("x", "x", "dp", "nope", "none", -1, "ratio")]
    lists = [{"scores": torch.randn(5), "relevance": torch.ones(5), "groups": torch.tensor([0, 1, 0, 1, 0])}]
    with pytest.raises(ValueError, match="`metrics`"):
        mod.system_values(lists, 2, [0.5, 0.5], bad)
    with pytest.raises(ValueError, match="`transform`"):
        mod.system_values(lists, 2, [0.5, 0.5], [mod.MetricSpec("x", "x", "dp", "dp", "sqrt", -1, "ratio")])


def test_write_outputs(mod, fast, tmp_path):
    md, png, js = mod.write_outputs(fast, str(tmp_path), "python experiments/metric_agreement.py --fast")
    text = Path(md).read_text()
    assert "Kendall" in text and "| Popularity |" in text and mod.READING not in text
    # a reading written by hand below the tables survives a rewrite; the tables are the new run's
    Path(md).write_text(text.replace("| Popularity |", "| Old |") + "\n" + mod.READING + " (by hand)\n\nwords\n")
    mod.write_outputs(fast, str(tmp_path), "again")
    again = Path(md).read_text()
    assert again.endswith(mod.READING + " (by hand)\n\nwords\n") and "| Old |" not in again
    assert "`again`" in again and again.count(mod.READING) == 1
    assert Path(png).stat().st_size > 0 and Path(js).stat().st_size > 0
