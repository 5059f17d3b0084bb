"""`make bench`'s driver runs end to end on tiny shapes (a smoke test, not a timing: figures come from the full run).

The plain reference implementations in the script must compute the same numbers as torchfair's losses (the script
checks it and prints the difference): a wrong reference would make every ratio meaningless."""
import sys

import pytest
import torch
from experiment_loader import EXPERIMENTS, experiment_fixture



bench = experiment_fixture("bench_speed")


@pytest.mark.parametrize("name", ["dips", "pairwise_accuracy_gap", "misallocation"])
def test_plain_references_equal_the_losses(bench, name):
    s, r, g = bench._loss_inputs(6, 40)
    ours, plain = bench._loss_fns(name)
    xa, xb = s.clone().requires_grad_(), s.clone().requires_grad_()
    va, vb = ours(xa, r, g), plain(xb, r, g)
    va.backward()
    vb.backward()
    assert float(va) > 0
    assert torch.allclose(va, vb, atol=1e-6) and torch.allclose(xa.grad, xb.grad, atol=1e-6)


@pytest.mark.slow
def test_bench_speed_quick_runs(tmp_path):
    import subprocess
    res = subprocess.run([sys.executable, str(EXPERIMENTS / "bench_speed.py"), "--quick", "--only", "exact,losses,import"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    assert "failed" not in res.stdout and "| dips |" in res.stdout and "import torchfair" in res.stdout
