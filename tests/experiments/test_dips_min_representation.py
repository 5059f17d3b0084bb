"""experiments/dips_min_representation.py (Fabris et al., WSDM 2023, §6.2.1) on its synthetic stand-in."""
import math

import pytest
import torch
from experiment_loader import experiment_fixture



mod = experiment_fixture("dips_min_representation")


def test_intervention_by_hand(mod):
    # merit order: 0 (A) 1 (A) 2 (A) 3 (B) 4 (A) 5 (B)
    merit = torch.tensor([6.0, 5, 4, 3, 2, 1])
    groups = torch.tensor([0, 0, 0, 1, 0, 1])
    assert mod.min_representation(merit, groups, 0).tolist() == [0, 1, 2, 3, 4, 5]
    # prefix 1 needs 1 B, prefix 2 needs 1, prefix 3 needs 2
    assert mod.min_representation(merit, groups, 1).tolist() == [3, 0, 1, 2, 4, 5]
    assert mod.min_representation(merit, groups, 3).tolist() == [3, 0, 5, 1, 2, 4]
    with pytest.raises(ValueError, match="`k_bar`"):
        mod.min_representation(merit, groups, -1)


def test_synthetic_fast(mod):
    merit, groups = mod.synthetic_data(0)
    assert groups.sum().item() == 100 and len(groups) == 1000
    rows = mod.compute(merit, groups, range(31))
    ideal = sorted(range(len(merit)), key=lambda i: (-merit[i].item(), i))
    assert rows[0]["ranking"].tolist() == ideal  # k̄ = 0: identity
    for r in rows:
        rk, k = r["ranking"], r["k"]
        assert sorted(rk.tolist()) == list(range(len(merit)))
        g = groups[rk]
        for j in range(k):  # every prefix up to k̄ holds >= 50 % protected items
            assert g[: j + 1].sum().item() >= math.ceil(0.5 * (j + 1))
        # protected items promoted in merit order, and the rest stays in merit order
        for grp in (0, 1):
            m = merit[rk[g == grp]]
            assert torch.all(m[:-1] >= m[1:])
        for key in ("dips_AB", "dips_BA", "ee_l1"):
            assert math.isfinite(r[key]) and 0 <= r[key] <= 2
        for key in ("dips_gap", "ree_gap", "ee_deltaA"):
            assert math.isfinite(r[key]) and -1 <= r[key] <= 1
        assert abs(r["dips_BA"]) < 1e-9  # only B items are promoted: nothing dissatisfies B
    assert rows[0]["dips_gap"] == pytest.approx(0, abs=1e-9)
    assert rows[0]["ee_l1"] == pytest.approx(0, abs=1e-6)
    # the gap can only grow: each larger k̄ promotes B items further
    gaps = [r["dips_gap"] for r in rows]
    assert all(b >= a - 1e-9 for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] > 0
    f = mod.findings(rows)
    assert f["EE grows with k̄ (minimum at k̄ = 0)"][0] is True
    assert f["DIPS rises sharply for k̄ < 20, flat from ~40"][0] is None


def test_main_synthetic_fast(mod, tmp_path, capsys):
    mod.main(["--synthetic", "--fast", "--out-dir", str(tmp_path)])
    assert "| 30 |" in capsys.readouterr().out
    assert (tmp_path / "dips_min_representation.md").read_text().count("\n| ") == 5
    assert (tmp_path / "dips_min_representation.png").stat().st_size > 0
