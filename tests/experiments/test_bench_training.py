"""experiments/bench_training.py: the configs it builds (the lazy ``*_everyK`` ones train the fairness term on one
step in K, weighted K lam, through the module's own regulariser) and a quick run of the whole script on the
synthetic stand-in."""
import argparse

import pytest
import torch
from experiment_loader import experiment_fixture

mod = experiment_fixture("bench_training")


def test_config_names_and_the_lazy_period(mod):
    assert mod.every_of("dips_ramp_every4") == 4 and mod.every_of("dips_ramp") == 1 and mod.every_of("listnet") == 1
    assert {f"dips_ramp_every{mod.LAZY}", f"pairwise_gap_ramp_every{mod.LAZY}"} <= set(mod.CONFIGS)
    assert set(mod.LABELS) == set(mod.CONFIGS)
    from torchfair.orderings import RampRank
    fair = mod.build_fairness("misallocation_ramp_every4", 2)
    assert type(fair).__name__ == "ExposureMisallocationLoss" and isinstance(fair.kwargs["ordering"], RampRank)


def test_a_lazy_config_trains_the_fairness_term_on_one_step_in_k(mod):
    args = argparse.Namespace(variant="synthetic", negatives=5, batch_size=16, eval_batch_size=16, download=False,
                              steps=2)
    data = mod.load_data(args)
    model, opt = mod.build_model("dips_ramp_every4", data["dm"].info, torch.device("cpu"))
    assert model.objective.fairness_every == 4
    calls = []
    real = model.fairness_loss.forward
    model.fairness_loss.forward = lambda *a, **k: calls.append(model.objective.current_step) or real(*a, **k)
    for _ in range(8):
        phases = mod.train_step(model, opt, data["batches"][0], data, torch.device("cpu"))
        assert set(phases) == set(mod.PHASES)
    assert calls == [0, 4] and model.objective.current_step == 8


@pytest.mark.slow  # two configs, rounds, a memory subprocess per config: ~1 min
def test_quick_run_reports_the_lazy_share(mod, tmp_path):
    out = tmp_path / "b.md"
    assert mod.main(["--variant", "synthetic", "--quick", "--configs", "listnet,dips_ramp_every4", "--out",
                     str(out)]) == 0
    text = out.read_text()
    assert "| + DIPS (RampRank 0.1, every 4 steps) |" in text and "fairness share" in text
