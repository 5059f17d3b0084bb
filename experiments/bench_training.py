"""Cost of a training step and of validation for the configs/ml100k_*.yaml models, and which part dominates.

Training: the five configs built in Python as their YAML files build them (biased MF, dim 32, Adam lr 0.01,
``utility + 0.3 * fairness``, two popularity groups): ListNet alone; + ``DIPSLoss(SoftRank(0.1))``;
+ ``ExposureMisallocationLoss(target="ee")``; + ``PairwiseAccuracyGapLoss(which="inter")``;
+ ``DIPSLoss(PlackettLuce(samples=16))``; and the three SoftRank losses on ``RampRank(0.1)`` (``*_ramp``: the
O(N log N) relaxation) and those three trained lazily (``*_every4``: ``FairRankingModule(fairness_every=4)``, the
fairness term on every 4th step weighted 4 lam; each timed batch is taken 4 times in a row, so that a round's mean
step is the cost per step averaged over whole periods).  ``--negatives 1682`` gives full-catalogue training lists.  Data: MovieLens-100K through ``MovieLensDataModule`` (943 training
lists per epoch, each the user's training ratings plus 100 negatives, batches of 64; falls back to the synthetic
stand-in, with a note, when ML-100K is not available).  A step is split into: data (collate the batch's lists and
move them to the device), ranker forward, utility-loss forward, fairness-loss forward, backward, optimiser step.

* Batches: the ``--steps`` batches of epoch 0 whose padded list length N is closest to the epoch's median, the
  same for every config.
* Interleaved: every round runs every config (order rotated each round) on those batches; a first round is a
  warm-up and is excluded (first calls touch fresh buffers and can be slower; its time per step is reported in
  the 'warm-up' column); the tables give the median over ``--repeats`` rounds.
* Fairness share of a step = (fairness forward + the backward time beyond the plain ListNet step's backward in
  the same round) / the whole step, median over rounds; the aim is <= 25 % (<= 50 % with full-catalogue lists, `--negatives` >= the number of items).

Validation: the exact measures of ``FairRankingModule`` (``DEFAULT_MEASURES``: ndcg@10, dips, dips with tie
weight 0, exposure_misallocation, pairwise_accuracy) through the module's own ``FairnessMetric`` objects, updated
on the data module's full-catalogue test lists (eval batches of 64, each list every item the user has not rated in
training or validation: ~1670 items).  After a warm-up batch, ``--val-batches`` batches are timed per measure
(measures interleaved, order rotated per batch) and the full pass is their mean per batch times the number of
batches.

Memory: in a fresh process per config (and one for validation), after loading the data and building the model,
with glibc's ``MALLOC_MMAP_THRESHOLD_=131072`` (a freed tensor leaves the resident set at once): the growth of the
peak resident set (RSS) over the config's training steps on the timed batches, and over one validation batch
(collate, forward, every measure: = a pass, the metric states being a few numbers).  The peak is reset first
(Linux ``/proc/self/clear_refs``), so the growth is what a step holds at its peak; where it cannot be reset, the
growth of ``ru_maxrss`` is reported (a lower bound).  On CUDA also ``torch.cuda.max_memory_allocated`` growth.

Threads: OpenMP threads that spin-wait stall at every barrier when another process wants the cores (a 2-thread
step became up to 130x slower on a shared 2-core machine); the script therefore sets ``OMP_WAIT_POLICY=PASSIVE``
unless the environment sets it, and the report gives the load average before and after, and flags round-to-round
spreads above 2x.

Usage::

    python experiments/bench_training.py                  # ~5 min on 2 cores; writes experiments/results/bench_training.md
    python experiments/bench_training.py --quick          # < 1 min: B = 8, 1 step, 2 rounds, 1 validation batch
    python experiments/bench_training.py --device cuda --threads 4 --out results.md
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import functools
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
#: OpenMP threads that spin while they wait turn every barrier into a stall of a scheduler time slice as soon as
#: another process wants the cores (measured here: a 2-thread exposure-misallocation step 0.1 s -> 13.7 s);
#: passive waiting keeps the timings about the code.  Read when torch loads its OpenMP runtime: override it from
#: the environment (OMP_WAIT_POLICY=ACTIVE python experiments/bench_training.py).
_TORCH_WAS_LOADED = "torch" in sys.modules
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
#: the shared harness's peak-RSS reader; the step is timed per phase inside each round (not a whole call), so the
#: rounds are this script's own (configs rotated per round, as _bench.interleaved(alternate=True) does)
from _bench import maxrss_bytes  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_training.md")
#: the lazy configs' period: ``*_every4`` trains the fairness term on every 4th step, weighted 4 lam
#: (``FairRankingModule(fairness_every=4)``, lazy regularisation)
LAZY = 4
CONFIGS = ("listnet", "dips", "misallocation", "pairwise_gap", "pl_dips", "dips_ramp", "misallocation_ramp",
           "pairwise_gap_ramp", f"dips_ramp_every{LAZY}", f"misallocation_ramp_every{LAZY}",
           f"pairwise_gap_ramp_every{LAZY}")
LABELS = {"listnet": "ListNet (plain)", "dips": "+ DIPS (SoftRank 0.1)",
          "misallocation": "+ exposure misallocation (EE, SoftRank 0.1)",
          "pairwise_gap": "+ pairwise accuracy gap (inter, SoftRank 0.1)",
          "pl_dips": "+ DIPS (Plackett-Luce, 16 samples)", "dips_ramp": "+ DIPS (RampRank 0.1)",
          "misallocation_ramp": "+ exposure misallocation (EE, RampRank 0.1)",
          "pairwise_gap_ramp": "+ pairwise accuracy gap (inter, RampRank 0.1)",
          f"dips_ramp_every{LAZY}": f"+ DIPS (RampRank 0.1, every {LAZY} steps)",
          f"misallocation_ramp_every{LAZY}": f"+ exposure misallocation (EE, RampRank 0.1, every {LAZY} steps)",
          f"pairwise_gap_ramp_every{LAZY}": f"+ pairwise accuracy gap (inter, RampRank 0.1, every {LAZY} steps)"}
#: every try on the fairness share of a step (issue 28), with its figures: included in the report
TRIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "fairness_share_tries.md")
PHASES = ("data", "forward", "utility", "fairness", "backward", "optimizer")
LAM = 0.3
AIM = 0.25
#: the issue 28 aim with full-catalogue training lists (``--negatives`` at least the number of items)
AIM_FULL = 0.5


# ------------------------------------------------------------------------------------------------ models and data
def every_of(name: str) -> int:
    """The lazy period of a config: ``K`` for ``*_everyK``, else 1."""
    head, sep, k = name.rpartition("_every")
    return int(k) if sep and k.isdigit() else 1


def build_fairness(name: str, num_groups: int):
    """The fairness loss of configs/ml100k_<name>.yaml (``None`` for the plain ListNet config)."""
    if every_of(name) > 1:
        name = name.rpartition("_every")[0]
    from torchfair.losses import DIPSLoss, ExposureMisallocationLoss, PairwiseAccuracyGapLoss
    from torchfair.orderings import PlackettLuce, RampRank, SoftRank
    if name == "listnet":
        return None
    ordering = RampRank(temperature=0.1) if name.endswith("_ramp") else SoftRank(temperature=0.1)
    name = name[:-len("_ramp")] if name.endswith("_ramp") else name
    if name == "dips":
        return DIPSLoss(num_groups=num_groups, ordering=ordering)
    if name == "misallocation":
        return ExposureMisallocationLoss(num_groups=num_groups, target="ee", ordering=ordering)
    if name == "pairwise_gap":
        return PairwiseAccuracyGapLoss(num_groups=num_groups, which="inter", ordering=ordering)
    if name == "pl_dips":
        return DIPSLoss(num_groups=num_groups, ordering=PlackettLuce(samples=16))
    raise ValueError(f"`config` must be one of {', '.join(CONFIGS)}; got {name!r}")


def build_model(name: str, info: Dict[str, Any], device: torch.device):
    """``FairRankingModule`` of a config (MF dim 32, ListNet, lam 0.3, Adam lr 0.01; ``*_everyK``: the fairness
    term every K-th step, weighted K lam) and its optimiser."""
    from torchfair.losses import ListNetLoss
    from torchfair.training import FairRankingModule
    torch.manual_seed(0)
    fair = build_fairness(name, int(info["num_groups"]))
    model = FairRankingModule("mf", {"dim": 32}, utility_loss=ListNetLoss(), fairness_loss=fair,
                              lam=LAM if fair is not None else 0.0, lr=0.01, data_info=dict(info),
                              fairness_every=every_of(name)).to(device)
    return model, model.configure_optimizers()


def load_data(args) -> Dict[str, Any]:
    """The data module (ML-100K, else the synthetic stand-in), the collate function and the timed batches."""
    from torch.utils.data import BatchSampler

    from torchfair.data.recsys import collate_lists
    from torchfair.training import MovieLensDataModule
    note = ""
    try:
        dm = MovieLensDataModule(args.variant, num_negatives=args.negatives, batch_size=args.batch_size,
                                 eval_batch_size=args.eval_batch_size, download=args.download)
        dm.setup("fit")
    except Exception as e:  # noqa: BLE001 - any loading problem: fall back, say so
        if args.variant == "synthetic":
            raise
        note = (f"**{args.variant} was not available** ({type(e).__name__}: {e}); these figures are on the "
                f"SYNTHETIC stand-in (60 users, 80 items, n_test=3, n_val=2, 20 negatives) and do not describe "
                f"MovieLens-100K.")
        dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=min(args.negatives, 20),
                                 batch_size=args.batch_size, eval_batch_size=args.eval_batch_size)
        dm.setup("fit")
    collate = functools.partial(collate_lists, item_groups=dm.item_groups, features=dm.features)
    ds = dm.train_dataset
    index_batches = [list(b) for b in BatchSampler(dm.train_dataloader().sampler, dm.batch_size, drop_last=False)]
    lengths = [int(collate([ds[i] for i in b])["items"].shape[1]) for b in index_batches]
    med = statistics.median(lengths)
    order = sorted(range(len(lengths)), key=lambda k: (abs(lengths[k] - med), k))
    chosen = sorted(order[:max(1, min(args.steps, len(lengths)))])
    return {"dm": dm, "collate": collate, "note": note, "batches": [index_batches[k] for k in chosen],
            "lengths": lengths, "chosen_lengths": [lengths[k] for k in chosen]}


def _to(batch: Dict[str, torch.Tensor], device: torch.device) -> Dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=False) for k, v in batch.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, opt, indices, data, device) -> Dict[str, float]:
    """One optimiser step as ``FairRankingModule.training_step`` takes it, timed phase by phase (seconds)."""
    t = [time.perf_counter()]
    batch = _to(data["collate"]([data["dm"].train_dataset[i] for i in indices]), device)
    _sync(device)
    t.append(time.perf_counter())
    scores = model(batch)
    _sync(device)
    t.append(time.perf_counter())
    rel, groups, mask = batch["relevance"], batch["groups"], batch["mask"]
    loss = model.utility_loss(scores, rel, groups, mask)
    _sync(device)
    t.append(time.perf_counter())
    if model.fairness_loss is not None and model.objective.regularizes_now:  # a lazy config: every K-th step
        loss = loss + model.objective.weight * model.fairness_loss(scores, rel, groups, mask)
    _sync(device)
    t.append(time.perf_counter())
    loss.backward()
    _sync(device)
    t.append(time.perf_counter())
    opt.step()
    opt.zero_grad(set_to_none=True)
    if model.fairness_loss is not None:
        model.objective.step()
    _sync(device)
    t.append(time.perf_counter())
    return {p: t[k + 1] - t[k] for k, p in enumerate(PHASES)}


# ------------------------------------------------------------------------------------------------ memory
_LIBC = None


def _trim() -> None:
    """Collect garbage and hand free heap memory back to the system (glibc), so the RSS is what is alive."""
    global _LIBC
    gc.collect()
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def _status_kib(key: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


class PeakMemory:
    """Growth of the peak RSS (MiB) and, on CUDA, of ``max_memory_allocated`` (MiB) over a ``with`` block."""

    def __init__(self, device: torch.device):
        self.device, self.rss_mb, self.cuda_mb = device, None, None

    def __enter__(self):
        _trim()
        self.ok = _reset_peak()
        self.rss0 = _status_kib("VmRSS") if self.ok else None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.cuda0 = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc):
        if self.ok:
            self.rss_mb = max(0, _status_kib("VmHWM") - self.rss0) / 1024
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.cuda_mb = (torch.cuda.max_memory_allocated(self.device) - self.cuda0) / 2 ** 20
        return False


def _maxrss_mb() -> float:
    return maxrss_bytes() / 2 ** 20


def memory_worker(args) -> None:
    """In a fresh process: the peak-RSS growth (MiB) over the training steps of one config on the timed batches, or
    over one validation batch (collate, forward, every measure); prints json."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = load_data(args)
    target = args.memory_worker
    model, opt = build_model("listnet" if target == "validation" else target, data["dm"].info, device)
    if target == "validation":
        model.eval()
        loader = data["dm"].test_dataloader()
    ru0 = _maxrss_mb()
    with PeakMemory(device) as mem:
        if target == "validation":
            validation_batch(model, next(iter(loader)), device, [k for k in model.val_metrics if k != "utility_loss"])
        else:
            for idx in data["batches"]:
                train_step(model, opt, idx, data, device)
    rss = mem.rss_mb if mem.ok else max(0.0, _maxrss_mb() - ru0)
    print(json.dumps({"rss_mb": rss, "cuda_mb": mem.cuda_mb, "method": "VmHWM" if mem.ok else "ru_maxrss"}))


#: glibc: a fixed mmap threshold (no dynamic one), so a freed tensor leaves the RSS at once and the peak RSS
#: follows the memory alive at the same time
LIVE_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def memory_in_subprocess(target: str, argv: List[str]) -> Dict[str, Any]:
    """Run :func:`memory_worker` for ``target`` (a config or ``"validation"``) in a fresh process."""
    env = dict(os.environ, **LIVE_MEMORY_ENV)
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--memory-worker", target]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(f"memory worker {target} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return {"rss_mb": None, "cuda_mb": None, "method": "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ validation
def validation_batch(model, batch, device, order: List[str]) -> Dict[str, float]:
    """Forward, utility loss and every measure's ``FairnessMetric.update`` on one evaluation batch (seconds)."""
    out = {}
    t0 = time.perf_counter()
    batch = _to(batch, device)
    _sync(device)
    t1 = time.perf_counter()
    out["data"] = t1 - t0
    with torch.no_grad():
        scores = model(batch)
        _sync(device)
        t2 = time.perf_counter()
        out["forward"] = t2 - t1
        rel, groups, mask = batch["relevance"], batch["groups"], batch["mask"]
        model.utility_loss(scores, rel, groups, mask)
        _sync(device)
        t3 = time.perf_counter()
        out["utility loss"] = t3 - t2
        for key in order:
            t = time.perf_counter()
            model.val_metrics[key].update(scores, rel, groups, mask)
            _sync(device)
            out[key] = time.perf_counter() - t
    return out


def run_validation(args, data, device) -> Dict[str, Any]:
    dm = data["dm"]
    model, _ = build_model("listnet", dm.info, device)
    model.eval()
    keys = [k for k in model.val_metrics if k != "utility_loss"]  # the utility loss is timed on its own
    requests = dict(zip(keys, model.measures))
    loader = dm.test_dataloader()
    n_batches = len(loader)
    it = iter(loader)
    res: Dict[str, Any] = {"n_batches": n_batches, "requests": requests, "keys": keys}
    t = time.perf_counter()
    first = next(it)
    collate_first = time.perf_counter() - t
    warm = validation_batch(model, first, device, keys)
    warm["data"] += collate_first
    res["warmup"] = warm
    res["N"] = int(first["items"].shape[1])
    del first
    per_batch: List[Dict[str, float]] = []
    for b in range(min(args.val_batches, n_batches - 1)):
        t = time.perf_counter()
        batch = next(it)
        collate_s = time.perf_counter() - t
        r = b % len(keys)
        times = validation_batch(model, batch, device, keys[r:] + keys[:r])
        times["data"] += collate_s
        per_batch.append(times)
    if not per_batch:  # a single batch: report the warm-up one
        per_batch = [warm]
    for key in keys:
        t = time.perf_counter()
        model.val_metrics[key].compute()
        per_batch[-1][key] += (time.perf_counter() - t)  # compute() once per pass: counted once
        model.val_metrics[key].reset()
    parts = ["data", "forward", "utility loss"] + keys
    res["timed_batches"] = len(per_batch)
    res["per_batch"] = {p: statistics.mean(b[p] for b in per_batch) for p in parts}
    res["per_pass"] = {p: v * n_batches for p, v in res["per_batch"].items()}
    res["parts"] = parts
    return res


# ------------------------------------------------------------------------------------------------ training
def run_training(args, data, device, names: List[str], argv: List[str]) -> Dict[str, Any]:
    dm = data["dm"]
    runs = {n: build_model(n, dm.info, device) for n in names}
    for model, _ in runs.values():
        model.train()
    res: Dict[str, Any] = {n: {"rounds": [], "warmup_s": 0.0} for n in names}

    def one_round(r: int, warm: bool) -> None:
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            model, opt = runs[n]
            steps = []
            # a lazy config takes each batch K times in a row: one of the K steps trains the fairness term, and the
            # mean over a round is the cost per step averaged over whole periods
            batches = [idx for idx in data["batches"] for _ in range(every_of(n))]
            if warm:
                t = time.perf_counter()
                for idx in batches:
                    steps.append(train_step(model, opt, idx, data, device))
                res[n]["warmup_s"] = (time.perf_counter() - t) / len(batches)
                continue
            for idx in batches:
                steps.append(train_step(model, opt, idx, data, device))
            res[n]["rounds"].append({p: statistics.mean(s[p] for s in steps) for p in PHASES})
            if args.verbose:
                tot = sum(res[n]["rounds"][-1].values())
                print(f"  round {r}: {n}: {tot:.3f} s/step", file=sys.stderr, flush=True)

    one_round(0, warm=True)
    for r in range(args.repeats):
        one_round(r + 1, warm=False)
    print("memory (a fresh process per config) ...", file=sys.stderr, flush=True)
    for n in names:
        res[n]["memory"] = memory_in_subprocess(n, argv)
    plain = "listnet" if "listnet" in names else None
    for n in names:
        rounds = res[n]["rounds"]
        res[n]["median"] = {p: statistics.median(rd[p] for rd in rounds) for p in PHASES}
        res[n]["step"] = statistics.median(sum(rd.values()) for rd in rounds)
        if plain is not None and n != plain:
            shares, slow = [], []
            for rd, base in zip(rounds, res[plain]["rounds"]):
                extra_bwd = max(0.0, rd["backward"] - base["backward"])
                shares.append((rd["fairness"] + extra_bwd) / sum(rd.values()))
                slow.append(sum(rd.values()) / sum(base.values()))
            res[n]["share"] = statistics.median(shares)
            res[n]["share_range"] = (min(shares), max(shares))
            res[n]["slowdown"] = statistics.median(slow)
    return res


# ------------------------------------------------------------------------------------------------ report
def _fmt_s(x: float) -> str:
    """Seconds with 3 significant digits, in ms below 1 s."""
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def _fmt_mb(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def report(args, argv, data, device, train, val, started, wall, load0, load1) -> str:
    dm = data["dm"]
    info = dm.info
    aim = AIM_FULL if args.negatives >= int(info["num_items"]) else AIM
    cuda = device.type == "cuda"
    lines = ["# Training-step and validation cost of the ml100k configs", ""]
    cmd = "python experiments/bench_training.py" + ("" if not argv else " " + shlex.join(argv))
    dev = torch.cuda.get_device_name(device) if cuda else (platform.processor() or platform.machine())
    lines += [f"Command: `{cmd}`  ", f"Date: {started:%Y-%m-%d %H:%M} UTC; wall time {wall / 60:.1f} min  ",
              f"Machine: {os.cpu_count()} CPUs ({platform.machine()}), device `{device}` ({dev}), torch "
              f"{torch.__version__}, {torch.get_num_threads()} torch threads, OMP_WAIT_POLICY="
              f"{os.environ.get('OMP_WAIT_POLICY')}{' (torch was loaded before: may not apply)' if _TORCH_WAS_LOADED else ''}; load average "
              f"{load0:.2f} before / {load1:.2f} after (> threads: other processes shared the cores)  ",
              f"Data: {info['variant']} ({info['num_users']} users, {info['num_items']} items, "
              f"{info['num_groups']} popularity groups), batch {dm.batch_size}, {dm.num_negatives} negatives per list"]
    if data["note"]:
        lines += ["", data["note"]]
    if args.quick:
        lines += ["", "**Quick mode** (smaller batches, fewer rounds): not the configs' settings; for a smoke run."]
    ls = data["lengths"]
    lines += ["", "## Training step", "",
              f"Median over {args.repeats} interleaved rounds (configs rotated each round) of the mean over "
              f"{len(data['batches'])} batch(es) of epoch 0 with padded length N = "
              f"{', '.join(map(str, data['chosen_lengths']))} (the epoch's N: min {min(ls)}, median "
              f"{statistics.median(ls):g}, max {max(ls)}; {len(ls)} batches per epoch), time per step.  A first, "
              f"warm-up round is excluded (its time per step is the 'warm-up' column).  Fairness share = (fairness "
              f"forward + backward beyond the plain step's backward, same round) / step; aim <= {aim:.0%}.  Peak "
              f"memory: growth of the peak RSS over a step" + (" / of torch.cuda.max_memory_allocated" if cuda
                                                               else "") + ", MiB, in a fresh process per config "
              f"(freed tensors leave the RSS at once).", ""]
    head = ["config"] + list(PHASES) + ["step", "rounds min-max", "x plain", "fairness share", "share min-max", "aim met", "warm-up", "peak RSS MB"]
    if cuda:
        head.append("peak CUDA MB")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    for n, r in train.items():
        m = r["median"]
        row = [LABELS[n]] + [_fmt_s(m[p]) if (p != "fairness" or n != "listnet") else "-" for p in PHASES]
        tots = [sum(rd.values()) for rd in r["rounds"]]
        row += [_fmt_s(r["step"]), f"{_fmt_s(min(tots))} - {_fmt_s(max(tots))}", f"{r['slowdown']:.1f}x" if "slowdown" in r else ("1x" if n == "listnet" else "-"),
                f"{r['share']:.1%}" if "share" in r else "-",
                f"{r['share_range'][0]:.0%} - {r['share_range'][1]:.0%}" if "share" in r else "-",
                ("yes" if r["share"] <= aim else "**no**") if "share" in r else "-",
                _fmt_s(r["warmup_s"]), _fmt_mb(r["memory"]["rss_mb"])]
        if cuda:
            row.append(_fmt_mb(r["memory"]["cuda_mb"]))
        lines.append("| " + " | ".join(row) + " |")
    spread = max((max(t) / min(t) for t in ([sum(rd.values()) for rd in r["rounds"]] for r in train.values())
                  if min(t) > 0), default=1.0)
    if spread > 2:
        lines += ["", f"**Unstable timings**: a config's step time varied {spread:.1f}x between rounds: other "
                      f"processes were using the cores (see the load average), so the medians are less reliable; "
                      f"rerun on an idle machine (and keep OMP_WAIT_POLICY=PASSIVE, see the script's docstring)."]
    if any(r["memory"]["method"] == "ru_maxrss" for r in train.values()):
        lines += ["", "Peak RSS: growth of ru_maxrss in a fresh process per config (the peak RSS could not be reset "
                      "here): a lower bound."]
    # which part dominates
    fair = {n: r for n, r in train.items() if "share" in r}
    lines += [""]
    if fair:
        worst = max(fair, key=lambda n: fair[n]["share"])
        best = min(fair, key=lambda n: fair[n]["share"])
        dom = []
        for n, r in train.items():
            m = r["median"]
            top = max(PHASES, key=lambda p: m[p])
            dom.append(f"{LABELS[n]}: {top} ({m[top] / r['step']:.0%})")
        met = [LABELS[n] for n in fair if fair[n]["share"] <= aim]
        lines += [f"**Which part dominates.** Largest phase per config: {'; '.join(dom)}.  The fairness part takes "
                  f"{fair[best]['share']:.0%} ({LABELS[best]}) to {fair[worst]['share']:.0%} ({LABELS[worst]}) of "
                  f"a step; the {aim:.0%} aim is met by "
                  f"{', '.join(met) if met else 'none of the fairness configs'}."]
    if not args.append and os.path.exists(TRIES):  # the record of what was tried on the fairness share
        with open(TRIES) as f:
            lines += ["", f.read().strip()]
    # validation
    v = val
    keys, parts = v["keys"], v["parts"]
    total = sum(v["per_pass"].values())
    lines += ["", "## Validation (full-catalogue test lists)", "",
              f"{dm.info['split_sizes']['test_lists']} test lists of N = {v['N']} items (every item the user has not "
              f"rated in training or validation), {v['n_batches']} batches of {dm.eval_batch_size}; "
              f"`FairnessMetric.update` of each measure of `FairRankingModule.DEFAULT_MEASURES` (and `compute` once), "
              f"timed on {v['timed_batches']} batch(es) after a warm-up batch, measures interleaved; a pass = mean "
              f"per batch x {v['n_batches']}.  Peak memory over one batch (= a pass: the metric states are a few "
              f"numbers): {_fmt_mb(v['memory']['rss_mb'])} MiB peak-RSS growth"
              + (f" ({v['memory']['method']})" if v['memory']['method'] != "VmHWM" else "")
              + (f", {_fmt_mb(v['memory']['cuda_mb'])} MiB CUDA" if cuda else "") + ".", "",
              "| part | per batch | per pass | share of the pass | warm-up batch |",
              "|---|---:|---:|---:|---:|"]
    for p in parts:
        name = v["requests"].get(p, p)
        lines.append(f"| {name} | {_fmt_s(v['per_batch'][p])} | {_fmt_s(v['per_pass'][p])} | "
                     f"{v['per_pass'][p] / total:.1%} | {_fmt_s(v['warmup'][p])} |")
    lines.append(f"| **total** | {_fmt_s(total / v['n_batches'])} | {_fmt_s(total)} | 100% | "
                 f"{_fmt_s(sum(v['warmup'].values()))} |")
    topv = max(parts, key=lambda p: v["per_pass"][p])
    lines += ["", f"**Which part dominates.** {v['requests'].get(topv, topv)}: {v['per_pass'][topv] / total:.0%} of "
                  f"a validation pass ({_fmt_s(v['per_pass'][topv])} of {_fmt_s(total)}).  The first "
                  f"batch of a process (warm-up) took {_fmt_s(sum(v['warmup'].values()))}, "
                  f"{sum(v['warmup'].values()) / (total / v['n_batches']):.0f}x a later batch."]
    if "listnet" in train:
        lines += [f"One validation pass costs as much as {total / train['listnet']['step']:.0f} plain training steps "
                  f"({len(data['lengths'])} steps per epoch)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Time per training step (data, forward, utility loss, fairness loss, backward, optimiser) of "
                    "the configs/ml100k_*.yaml models on MovieLens-100K, the fairness loss's share of a step, the "
                    "validation time of the exact measures on the full-catalogue test lists, and peak memory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=3,
                    help="training batches per config per round (the epoch's batches closest to its median length)")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds after the warm-up round (median reported)")
    ap.add_argument("--val-batches", type=int, default=3,
                    help="evaluation batches timed per measure after a warm-up batch (the pass is extrapolated)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="torch device (cuda when available, else cpu)")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated configs to run (listnet is needed for the fairness share)")
    ap.add_argument("--variant", default="ml-100k", help="MovieLens variant ('synthetic': the offline stand-in)")
    ap.add_argument("--download", action="store_true", help="allow downloading the variant when not cached")
    ap.add_argument("--batch-size", type=int, default=64, help="training lists per batch (the configs' 64)")
    ap.add_argument("--eval-batch-size", type=int, default=64, help="evaluation lists per batch (the configs' 64)")
    ap.add_argument("--negatives", type=int, default=100, help="negatives per training list (the configs' 100)")
    ap.add_argument("--quick", action="store_true",
                    help="under a minute: batch 8, eval batch 8, 1 step, 2 rounds, 1 validation batch")
    ap.add_argument("--out", default=RESULTS, help="markdown file to write ('' to only print)")
    ap.add_argument("--append", action="store_true", help="append to --out instead of overwriting it")
    ap.add_argument("--verbose", action="store_true", help="print each round's step times to stderr")
    ap.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.batch_size, args.eval_batch_size, args.steps, args.repeats, args.val_batches = 8, 8, 1, 2, 1
    for name in ("steps", "repeats", "threads", "batch_size", "eval_batch_size"):
        if getattr(args, name) < 1:
            ap.error(f"`--{name.replace('_', '-')}` must be >= 1; got {getattr(args, name)}")
    if args.val_batches < 0 or args.negatives < 0:
        ap.error("`--val-batches` and `--negatives` must be >= 0")
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in names if c not in CONFIGS]
    if bad or not names:
        ap.error(f"`--configs` must name some of {', '.join(CONFIGS)}; got {args.configs!r}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("`--device cuda`: CUDA is not available")
    if args.memory_worker is not None:
        memory_worker(args)
        return 0
    torch.set_num_threads(args.threads)
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    t0 = time.perf_counter()
    data = load_data(args)
    names = [c for c in CONFIGS if c in names]
    print(f"data: {data['dm'].info['variant']}; timed batch lengths {data['chosen_lengths']}; training ...",
          file=sys.stderr, flush=True)
    worker_argv = [a for a in argv if a not in ("--append", "--verbose")]
    train = run_training(args, data, device, names, worker_argv)
    print("validation ...", file=sys.stderr, flush=True)
    val = run_validation(args, data, device)
    val["memory"] = memory_in_subprocess("validation", worker_argv)
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = report(args, argv, data, device, train, val, started, wall, load0, load1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "a" if args.append else "w") as f:
            f.write(("\n" if args.append else "") + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
