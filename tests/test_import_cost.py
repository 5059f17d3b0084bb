"""``import torchfair`` stays light: importing loads neither numba nor scipy, and the losses and measures never load
torchmetrics, lightning or pandas (their CPU kernels load numba, and numba scipy, on first use)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torchmetrics", "pytorch_lightning", "lightning", "scipy", "pandas")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_torchfair_loads_no_heavy_dependency():
    # importing loads none of them, nor numba; the first CPU loss call loads the compiled kernels (numba, which
    # imports scipy itself), never torchmetrics, lightning or pandas
    code = ("import sys, torchfair, torchfair.losses, torchfair.metrics, torchfair.orderings, torchfair.rerank\n"
            "import torchfair.losses as L, torch\n"
            f"heavy = [m for m in {HEAVY + ('numba',)!r} if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "L.DIPSLoss()(torch.randn(2, 4, requires_grad=True), torch.rand(2, 4), torch.tensor([[0, 1, 0, 1]] * 2))\n"
            f"heavy = [m for m in {tuple(m for m in HEAVY if m != 'scipy')!r} if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert torchfair.__file__.startswith(" + repr(str(ROOT)) + "), torchfair.__file__\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr


def test_evaluation_loads_on_first_access():
    code = ("import sys, torchfair\n"
            "assert 'torchfair.evaluation' not in sys.modules\n"
            "assert 'evaluation' in dir(torchfair)\n"
            "ev = torchfair.evaluation\n"
            "assert ev is sys.modules['torchfair.evaluation'] and hasattr(ev, 'evaluate_lists')\n"
            "from torchfair import compat\n"
            "assert compat is sys.modules['torchfair.compat']\n"
            "try:\n"
            "    torchfair.no_such_thing\n"
            "except AttributeError as e:\n"
            "    assert 'no_such_thing' in str(e)\n"
            "else:\n"
            "    raise SystemExit('no AttributeError')\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr
