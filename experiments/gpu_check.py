"""`make gpu-check` (issue 28): everything that needs a GPU, in one go (<= 8 min), when a GPU machine is at hand.

    python experiments/gpu_check.py [--dry-run] [--out FILE] [--step-timeout 180] [--budget 450]

Without a CUDA device it prints ``no CUDA device: nothing to check`` and exits 0 at once (nothing written);
``--dry-run`` prints every step and its command on any machine and exits 0.  On CUDA it runs these steps, each in
its own subprocess under a timeout, so that a failing or hanging step is reported and the others still run:

1. ``tests``: the suite's device-parametrised tests (``tests/test_linalg.py``'s ``cuda`` cases, collected when CUDA
   is available; ``tests/test_gpu_ready.py``, whose CUDA policy test then runs on the device);
2. ``bench``: the fairness losses (DIPS, exposure misallocation, pairwise accuracy gap; default ordering) forward +
   backward, the same loss on a Plackett-Luce policy, and exact DIPS (``Hard()``), timed on ``cuda`` against the
   same code on the CPU, values compared (this script's ``--case bench``);
3. ``training``: ``bench_training.py --device cuda`` and ``--device cpu`` (the training-step section);
4. ``fit``: ``torchfair fit --config configs/ml100k_tuned.yaml --trainer.accelerator gpu --trainer.max_epochs 2``;
5. ``sweep``: ``torchfair sweep configs/sweep_smoke.yaml`` with one GPU (``CUDA_VISIBLE_DEVICES=0``).

Writes one markdown file of figures (``--out``; '' to only print): each step's status, seconds and output tables.
The file is only written on a CUDA run, so it never holds figures that were not measured.  Exit code: 0 when every
step passed (or nothing to check), 1 when a step failed or timed out.  ML-100K must be in the data cache
(``$TORCHFAIR_DATA``; the GPU machines are offline).
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
NO_CUDA = "no CUDA device: nothing to check"


class Step(NamedTuple):
    name: str
    cmd: List[str]
    env: Dict[str, str] = {}
    cwd: Optional[Path] = None  # None: the repository root


class Outcome(NamedTuple):
    name: str
    cmd: List[str]
    status: str  # "ok", "failed (rc N)", "timed out after N s", "could not start: ..."
    seconds: float
    output: str


def plan(work: Path, quick: bool = False) -> List[Step]:
    """The steps of a GPU check, their commands run from the repository root; ``work``: a scratch folder."""
    py = sys.executable
    cli = [py, "-c", "import sys; from torchfair.cli import main; sys.exit(main())"]  # the `torchfair` command
    me = str(Path(__file__).resolve())
    # the default-ordering (RampRank) losses, PL and the ListNet baseline their share is measured against
    train = [py, "experiments/bench_training.py", "--threads", "1", "--out", "", "--repeats", "3", "--val-batches",
             "1", "--configs", "listnet,dips_ramp,misallocation_ramp,pairwise_gap_ramp,pl_dips"] + \
        (["--quick"] if quick else [])
    return [
        Step("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_linalg.py",
                       "tests/test_gpu_ready.py"]),
        Step("bench", [py, me, "--case", "bench", "--device", "cuda"] + (["--quick"] if quick else [])),
        Step("training (cuda)", train + ["--device", "cuda"]),
        Step("training (cpu)", train + ["--device", "cpu"]),
        # run in the scratch folder: the config's CSVLogger writes under ./runs
        Step("fit", [*cli, "fit", "--config", str(ROOT / "configs/ml100k_tuned.yaml"),
                     "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.max_epochs", "2",
                     "--trainer.enable_progress_bar", "false"],
             {}, work),
        Step("sweep", [*cli, "sweep", str(ROOT / "configs/sweep_smoke.yaml"), "--out",
                       str(work / "sweep")], {"CUDA_VISIBLE_DEVICES": "0"}, work),
    ]


def run_steps(steps: Sequence[Step], timeout: float, budget: float = float("inf"), cwd: Path = ROOT,
              log=sys.stderr) -> List[Outcome]:
    """Run each step in turn (subprocess, at most ``timeout`` seconds each and ``budget`` seconds in all); a failure
    is recorded and the next step runs; steps left when the budget is spent are recorded as skipped."""
    out = []
    end = time.perf_counter() + budget
    for st in steps:
        left = end - time.perf_counter()
        if left < 1:
            out.append(Outcome(st.name, list(st.cmd), "skipped (budget spent)", 0.0, ""))
            continue
        limit = min(timeout, left)
        print(f"[gpu_check] {st.name}: {shlex.join(st.cmd)}", file=log, flush=True)
        t0 = time.perf_counter()
        try:  # its own process group: a timeout kills what the step started too (trials, workers)
            proc = subprocess.Popen(st.cmd, cwd=st.cwd or cwd, env=dict(os.environ, **st.env), text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            out.append(Outcome(st.name, list(st.cmd), f"could not start: {e}", 0.0, ""))
            continue
        try:
            text = proc.communicate(timeout=limit)[0]
            status = "ok" if proc.returncode == 0 else f"failed (rc {proc.returncode})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            text, status = proc.communicate()[0], f"timed out after {limit:.0f} s"
        out.append(Outcome(st.name, list(st.cmd), status, time.perf_counter() - t0, text))
        print(f"[gpu_check] {st.name}: {status} ({out[-1].seconds:.0f} s)", file=log, flush=True)
    return out


def report(outcomes: Sequence[Outcome], device: str, tail: int = 40) -> str:
    """The markdown file: a summary table, then each step's command and its output's last ``tail`` lines."""
    import torch
    lines = ["# GPU check (`make gpu-check`, experiments/gpu_check.py)", "",
             f"Device: {device}; torch {torch.__version__}; host {os.cpu_count()} CPUs ({platform.machine()}); "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             "| step | status | seconds |", "|---|---|---:|"]
    lines += [f"| {o.name} | {o.status} | {o.seconds:.1f} |" for o in outcomes]
    for o in outcomes:
        body = "\n".join(o.output.rstrip().splitlines()[-tail:])
        lines += ["", f"## {o.name}: {o.status}", "", f"`{shlex.join(o.cmd)}`", "", "```", body, "```"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- --case bench
def _median_time(fn, device, rounds: int) -> float:
    import torch
    fn()  # warm-up (kernel compilation, caches)
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def case_bench(device_name: str, quick: bool) -> str:
    """The loss, PL and exact sections on ``device_name`` against the CPU: one markdown table."""
    import torch
    from torchfair.losses import dips_loss, exposure_misallocation_loss, pairwise_accuracy_gap_loss
    from torchfair.metrics import dips
    from torchfair.orderings import Hard, PlackettLuce

    dev, cpu = torch.device(device_name), torch.device("cpu")
    rounds = 2 if quick else 7
    shapes = [(16, 50)] if quick else [(256, 100), (64, 1000)]
    losses = {"dips": dips_loss, "exposure_misallocation": exposure_misallocation_loss,
              "pairwise_accuracy_gap": pairwise_accuracy_gap_loss}
    gen = torch.Generator().manual_seed(0)
    rows = []

    def inputs(B, N):
        return (torch.randn(B, N, generator=gen), torch.randint(0, 5, (B, N), generator=gen).float(),
                torch.randint(0, 2, (B, N), generator=gen))

    def fwd_bwd(fn, s, r, g, d):
        x = s.to(d, copy=True).requires_grad_()
        v = fn(x, r.to(d), g.to(d))
        v.backward()
        return v.detach().cpu().double(), x.grad.cpu().double()

    cases = [(f"loss {n}", f, shape, True) for n, f in losses.items() for shape in shapes]
    pl = PlackettLuce(samples=10 if quick else 100)
    cases.append(("loss dips, PlackettLuce", lambda s, r, g: dips_loss(s, r, g, num_groups=2, ordering=pl),
                  (16, 50) if quick else (64, 100), True))
    cases += [("exact dips (Hard)", lambda s, r, g: dips(s, r, g, num_groups=2, ordering=Hard()), shape, False)
              for shape in ([(32, 100)] if quick else [(1000, 1000)])]
    for label, fn, (B, N), grad in cases:
        f = fn if label.startswith(("exact", "loss dips, P")) else (lambda s, r, g, fn=fn: fn(s, r, g, num_groups=2))
        s, r, g = inputs(B, N)
        if grad:
            (va, ga), (vb, gb) = fwd_bwd(f, s, r, g, cpu), fwd_bwd(f, s, r, g, dev)
            diff = max(float((va - vb).abs().max()), float((ga - gb).abs().max()))
            run = {d: (lambda d=d: f(s.to(d, copy=True).requires_grad_(), r.to(d), g.to(d)).backward())
                   for d in (cpu, dev)}
        else:
            diff = float((f(s, r, g).double() - f(s.to(dev), r.to(dev), g.to(dev)).cpu().double()).abs().max())
            run = {d: (lambda d=d: f(s.to(d), r.to(d), g.to(d))) for d in (cpu, dev)}
        note = " (sampled: different streams)" if "Plackett" in label else ""
        tc, td = _median_time(run[cpu], cpu, rounds), _median_time(run[dev], dev, rounds)
        rows.append(f"| {label} | {B} | {N} | {tc:.4g} | {td:.4g} | {tc / td:.2f} | {diff:.1e}{note} |")
    return "\n".join([f"### Losses, PL and exact DIPS: `{device_name}` against the CPU ({torch.get_num_threads()} "
                      "CPU threads), median of rounds, inputs moved each call", "",
                      f"| case | B | N | cpu s | {device_name} s | cpu / {device_name} | max abs diff |",
                      "|---|---:|---:|---:|---:|---:|---:|", *rows])


# --------------------------------------------------------------------------------------------- driver
def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print every step and its command, run nothing")
    ap.add_argument("--out", default=str(RESULTS / "gpu_check.md"),
                    help="markdown file of figures, written on a CUDA run only ('' to only print)")
    ap.add_argument("--step-timeout", type=float, default=180.0, help="seconds each step may run")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds all steps may run together")
    ap.add_argument("--quick", action="store_true", help="tiny benchmark shapes (a smoke test, not figures)")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case == "bench":
        print(case_bench(args.device, args.quick))
        return 0
    if args.dry_run:
        for st in plan(Path(tempfile.gettempdir()) / "gpu_check_XXXX", args.quick):
            env = " ".join(f"{k}={v}" for k, v in st.env.items())
            print(f"{st.name}: {f'(in {st.cwd}) ' if st.cwd else ''}{env + ' ' if env else ''}{shlex.join(st.cmd)}")
        return 0
    import torch
    if not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    outcomes = run_steps(plan(Path(tempfile.mkdtemp(prefix="gpu_check_")), args.quick), args.step_timeout, args.budget)
    text = report(outcomes, f"cuda ({torch.cuda.get_device_name(0)})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(text)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
