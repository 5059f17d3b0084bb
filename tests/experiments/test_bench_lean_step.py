"""experiments/bench_lean_step.py: the lean step it times (plain PyTorch MF + ListNet + Adam, and the step with each
fairness loss) and the structure of its report, at tiny sizes (no timing bounds)."""
import json
import statistics

import pytest
import torch
from experiment_loader import experiment_fixture

mod = experiment_fixture("bench_lean_step")


def test_each_variant_steps_and_moves_the_model(mod):
    inputs = mod.build_inputs(3, 12, "sparse")
    users, items, rel, groups = inputs
    assert items.shape == rel.shape == groups.shape == (3, 12) and users.shape == (3,)
    assert all(len(set(row.tolist())) == 12 for row in items)  # distinct items per list
    for variant in mod.VARIANTS:
        loss = mod.make_step(variant, inputs)()
        assert torch.isfinite(loss) and loss.dim() == 0


def test_fast_run_writes_the_report_and_its_json(mod, tmp_path):
    out = tmp_path / "lean.md"
    assert mod.main(["--fast", "--relevance", "dense", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| B x N | relevance | step | ms / step | fairness share | share Q1 - Q3 | load |" in text
    for label in mod.LABELS.values():
        assert f"| {label} |" in text
    data = json.loads(out.with_suffix(".json").read_text())
    assert set(data["provenance"]) == {"commit", "date", "machine", "command"}
    assert "--fast" in data["provenance"]["command"]
    assert [(r["B"], r["N"], r["relevance"]) for r in data["results"]] == [(B, N, "dense") for B, N in mod.FAST_SIZES]
    for r in data["results"]:
        assert set(r["median_s"]) == set(mod.VARIANTS) and set(r["share"]) == set(mod.VARIANTS) - {"plain"}
        assert all(len(v) == r["rounds"] == 2 for v in r["rounds_s"].values())
        for v, share in r["share"].items():  # paired by round: the median of 1 - plain / variant over the rounds
            per_round = [1 - p / x for p, x in zip(r["rounds_s"]["plain"], r["rounds_s"][v])]
            assert share == pytest.approx(statistics.median(per_round), rel=1e-12)
            q1, q3 = r["share_quartiles"][v]
            assert min(per_round) - 1e-12 <= q1 <= share <= q3 <= max(per_round) + 1e-12
            added = [x - p for p, x in zip(r["rounds_s"]["plain"], r["rounds_s"][v])]
            assert r["added_s"][v] == pytest.approx(statistics.median(added), rel=1e-12)
        assert len(r["load_before"]) == len(r["load_after"]) == 3
