"""Fabris et al. (WSDM 2023) §6.1.1 / §6.1.2 findings on the fast mode of experiments/dips_synthetic.py."""

import pytest
import torch

from torchfair.browsing import Uniform
from experiment_loader import experiment_fixture



exp = experiment_fixture("dips_synthetic")


@pytest.fixture(scope="module")
def rows(exp):
    return exp.condition1(0, ks=exp.FAST["ks"]), exp.condition2(0, reps=exp.FAST["reps"])


def test_fast_run_writes_figures_and_report(exp, tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        exp.main(["--fast", "--out-dir", str(tmp_path / "res")])
    finally:
        torch.set_num_threads(threads)  # main() sets 1 thread
    out = tmp_path / "res"
    for name in ("dips_synthetic_61_1.png", "dips_synthetic_61_2.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
    md = (out / "dips_synthetic.md").read_text()
    assert "Command: `python experiments/dips_synthetic.py --fast --out-dir" in md and "wall time" in md
    assert md.count(": holds") >= 15 and ": DOES NOT HOLD" not in md
    assert ": DOES NOT HOLD" not in capsys.readouterr().out


def test_condition1_paper_findings(exp, rows):
    rows1, _ = rows
    f = exp.findings(rows1, [])
    assert f and all(f.values()), [k for k, v in f.items() if not v]
    assert [r["k"] for r in rows1][:3] == [0, 3, 6] and rows1[-1]["k"] == 99
    # explicitly, the headline numbers of §6.1.1: M_AB(k=0) > 0.5 while REE << 0.1; M_BA = 0 everywhere
    assert rows1[0]["dips_AB"] > 0.5 and rows1[0]["ree_AB"] < 0.05
    assert all(r["dips_BA"] == 0 for r in rows1)
    # RBP(0.9): per-rank decay of M_AB close to gamma
    assert exp.decay_factor(rows1) == pytest.approx(0.9, abs=0.02)


def test_condition2_paper_findings(exp, rows):
    _, rows2 = rows
    f = exp.findings([], rows2)
    assert f and all(f.values()), [k for k, v in f.items() if not v]
    assert [r["p_A"] for r in rows2] == [i / 10 for i in range(11)]
    # p_A = 0 / 1 are deterministic: every relevant A item sits below (above) all n relevant B items; with c_t = 1
    # each such A-B tie is an unfavourable pair, so by hand REE = n * 500 / (500 * 500) for A (resp. B)
    n = rows2[0]["n_B_relevant"]
    assert 150 < n < 250
    assert rows2[0]["ree1_gap"] == pytest.approx(n / 500, abs=1e-6)
    assert rows2[-1]["ree1_gap"] == pytest.approx(-n / 500, abs=1e-6)
    # not symmetric around p_A = 0.5: far fewer B items than A items are tied, so |gap(0)| > |gap(1)| for DIPS
    assert rows2[0]["dips1_gap"] > abs(rows2[-1]["dips1_gap"]) + 0.3


def test_findings_can_fail(exp, rows):
    """Negative controls: a wrong browsing model (uniform instead of RBP 0.9) breaks the §6.1.1 claims on DIPS, and
    a tie-breaking policy that favours the wrong group (p_A read as p_B) breaks those of §6.1.2."""
    rows1_uniform = exp.condition1(0, ks=exp.FAST["ks"], browsing=Uniform())
    f = exp.findings(rows1_uniform, [])
    assert not f["6.1.1 DIPS M_AB(k=0) > 0.5"]
    assert not f["6.1.1 DIPS decay is exponential, factor ~0.9 per rank (0.85..0.95)"]
    assert not f["6.1.1 delta_A ee decays in k (non-increasing)"] or not f[
        "6.1.1 REE mostly flat (range < 10% of DIPS's range)"]
    _, rows2 = rows
    swapped = [dict(r, p_A=round(1 - r["p_A"], 1)) for r in rows2][::-1]
    f = exp.findings([], swapped)
    for m in ("DIPS", "REE"):
        assert not f[f"6.1.2 c_t = 1: {m} gap decreases with p_A (Spearman < -0.9)"]
        assert not f[f"6.1.2 c_t = 1: {m} gap spans a wide range (> 0 at p_A = 0, < 0 at p_A = 1, range > 0.5)"]
    # c_t = 0 read from the tie-aware columns: no longer flat at zero
    tie_aware_as_zero = [dict(r, dips0_AB=r["dips1_AB"]) for r in rows2]
    assert not exp.findings([], tie_aware_as_zero)["6.1.2 c_t = 0: DIPS and REE flat at 0"]
