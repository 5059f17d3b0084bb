"""experiments/gpu_check.py (``make gpu-check``): the no-CUDA path (one line, exit 0, nothing written), the plan
(``--dry-run``: every step of issue 28 with its command), and the step runner on stubbed steps (a failing, a
crashing and a hanging step are each reported, and the steps after them still run; the budget skips the rest)."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from experiment_loader import EXPERIMENTS, experiment_fixture

mod = experiment_fixture("gpu_check")
SCRIPT = EXPERIMENTS / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA path")
def test_without_cuda_it_exits_at_once_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "gpu_check.md"
    res = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                         timeout=120, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines() == ["no CUDA device: nothing to check"]  # no step ran
    assert not out.exists()


def test_without_cuda_main_runs_no_step(mod, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(mod, "run_steps", lambda *a, **k: pytest.fail("a step ran without CUDA"))
    assert mod.main(["--out", str(tmp_path / "x.md")]) == 0
    assert capsys.readouterr().out.strip() == mod.NO_CUDA
    assert not (tmp_path / "x.md").exists()


def test_dry_run_lists_every_step_and_its_command(mod, capsys):
    assert mod.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = [ln.split(":", 1)[0] for ln in lines]
    assert names == ["tests", "bench", "training (cuda)", "training (cpu)", "fit", "sweep"]
    text = dict(zip(names, lines))
    assert "tests/test_linalg.py" in text["tests"] and "tests/test_gpu_ready.py" in text["tests"]
    assert "--case bench --device cuda" in text["bench"]
    assert "bench_training.py" in text["training (cuda)"] and "--device cuda" in text["training (cuda)"]
    assert "--device cpu" in text["training (cpu)"]
    assert "configs/ml100k_tuned.yaml --trainer.accelerator gpu" in text["fit"]
    assert "--trainer.max_epochs 2" in text["fit"]
    assert "CUDA_VISIBLE_DEVICES=0" in text["sweep"] and "configs/sweep_smoke.yaml" in text["sweep"]


def test_the_planned_files_exist(mod, tmp_path):
    root = EXPERIMENTS.parent
    for st in mod.plan(tmp_path):
        for arg in st.cmd:
            if arg.endswith((".py", ".yaml")) and not arg.startswith("import"):
                assert (root / arg).is_file() or Path(arg).is_file(), (st.name, arg)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _step(mod, name, code, **kw):
    return mod.Step(name, [sys.executable, "-c", code], **kw)


def test_each_failure_is_reported_and_the_rest_still_run(mod, tmp_path):
    steps = [_step(mod, "fails", "import sys; print('bad figure'); sys.exit(3)"),
             _step(mod, "raises", "raise RuntimeError('CUDA error: boom')"),
             # a hung step that started a child of its own: the timeout kills both (were the child left, its
             # open output would keep run_steps waiting for an hour)
             _step(mod, "hangs", "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
                                 "'import time; time.sleep(3600)']); print('started', p.pid, flush=True); "
                                 "time.sleep(3600)"),
             _step(mod, "missing", "x", cwd=tmp_path / "absent"),
             _step(mod, "works", "import os; print('| a | 1 |', os.environ['GPU_CHECK_T'])", env={"GPU_CHECK_T": "7"})]
    out = mod.run_steps(steps, timeout=3, log=open("/dev/null", "w"))
    got = {o.name: o for o in out}
    assert [o.name for o in out] == [s.name for s in steps]
    assert got["fails"].status == "failed (rc 3)" and "bad figure" in got["fails"].output
    assert got["raises"].status == "failed (rc 1)" and "CUDA error: boom" in got["raises"].output
    assert got["hangs"].status == "timed out after 3 s" and "started" in got["hangs"].output
    assert got["hangs"].seconds >= 3  # it ran until the timeout
    child = int(got["hangs"].output.split("started", 1)[1].split()[0])
    assert not _alive(child), "the hung step's child outlived the timeout"
    assert got["missing"].status.startswith("could not start")
    assert got["works"].status == "ok" and got["works"].output.strip() == "| a | 1 | 7"
    text = mod.report(out, "cuda (stub)")
    assert "| fails | failed (rc 3) |" in text and "| works | ok |" in text
    assert "| hangs | timed out after 3 s |" in text
    assert "CUDA error: boom" in text and "Device: cuda (stub)" in text


def test_the_budget_skips_the_steps_left(mod):
    steps = [_step(mod, "slow", "import time; time.sleep(30)"), _step(mod, "next", "print(1)")]
    out = mod.run_steps(steps, timeout=60, budget=2, log=open("/dev/null", "w"))
    assert out[0].status == "timed out after 2 s"
    assert out[1].status == "skipped (budget spent)"


def test_a_cuda_run_writes_the_file_and_fails_when_a_step_failed(mod, monkeypatch, tmp_path, capsys):
    ran = []

    def stub(steps, timeout, budget):
        ran.extend(s.name for s in steps)
        return [mod.Outcome(s.name, s.cmd, "ok" if s.name != "fit" else "failed (rc 1)", 1.0, "figures")
                for s in steps]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Stub GPU")
    monkeypatch.setattr(mod, "run_steps", stub)
    out = tmp_path / "gpu_check.md"
    assert mod.main(["--out", str(out)]) == 1
    assert ran == ["tests", "bench", "training (cuda)", "training (cpu)", "fit", "sweep"]
    text = out.read_text()
    assert "cuda (Stub GPU)" in text and "| fit | failed (rc 1) |" in text and "| sweep | ok |" in text


def test_bench_case_runs_on_cpu_against_cpu_with_equal_values(mod):
    text = mod.case_bench("cpu", quick=True)
    rows = [r for r in text.splitlines() if r.startswith("| loss") or r.startswith("| exact")]
    assert len(rows) == 5
    for r in rows:
        if "Plackett" not in r:  # the same code on the same device: identical values and gradients
            assert r.rstrip(" |").endswith("0.0e+00"), r


def test_the_committed_file_holds_figures_of_a_cuda_run_or_says_there_are_none():
    text = (EXPERIMENTS / "results" / "gpu_check.md").read_text()
    assert ("Not yet run on a GPU: no figures here." in text) != ("\nDevice: cuda (" in text)
