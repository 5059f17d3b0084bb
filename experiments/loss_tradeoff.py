"""The headline: a loss, a re-rank, or both? Every recipe judged on every measure, chosen on validation lists.

ML-100K, three seeds; each seed draws its own split (``leave_random_n``: per user 10 random test ratings, 5
validation) and trains its own tuned start (``configs/ml100k_tuned.yaml``).  Two groupings (popularity head / tail;
Drama vs the rest).  Stages (``--stage``; each reuses what the earlier ones left in ``--out``):

1. ``starts``: the tuned start of every seed, the ``split: random`` trials of the sweep file
   ``configs/sweep_starts_tuned.yaml`` (``<out>/starts``, copied to ``<out>/start/seed<S>.ckpt``);
2. ``prune``: the sweep file ``configs/sweep_loss_tradeoff.yaml`` on seed 0: every loss x ordering x utility term x
   lambda, each fine-tuned from the start, plus the protocols warm-up / lazy / from scratch for the DIPS family;
3. ``confirm``: per family (grouping, utility, loss, protocol) the lambdas that seed 0's *validation* lists select
   (the largest removal of the DIPS gap within 1 %, 2 % and 5 % of NDCG@10 under the guard, against the family's
   control), run on seeds 1 and 2 (derived sweep files with the same trial ids);
4. ``report``: re-rankers chosen on seed 0's validation lists the same way (``keep`` of the measure-targeted
   re-ranker, with and without a guard), then every surviving row on the *test* lists of all seeds: NDCG@10 and
   every fairness measure, each with a paired bootstrap interval against the row's own control (a loss row: the
   lambda = 0 fine-tune of the same utility term and protocol; a re-rank row: its input; loss + re-rank: the
   loss's control).  A row is within budget when NDCG@10 falls by at most 2 % and no fairness measure gets worse by
   more than 10 % of its control's value (the guard).  Writes ``<out>/loss_tradeoff.md``/``.json``/``.png``
   (``--results``: also ``experiments/results/``).

``--fast`` runs every stage on the synthetic stand-in with a tiny grid (what the test does).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import _provenance  # noqa: E402 - what a result records of how it was made
import _sweep  # noqa: E402 - the shared sweep helpers (experiments/_sweep.py)

SWEEP = ROOT / "configs" / "sweep_loss_tradeoff.yaml"
#: the tuned starts (split `random`: each seed its own per-user random hold-out)
STARTS = ROOT / "configs" / "sweep_starts_ials.yaml"
#: (column, label, kind): "utility" (NDCG@10, relative change); "guard": a fairness measure read as |value| (0 is
#: fair), judged by the share of its control's |value| removed, and guarded; "report": the same read-out, reported
#: but not guarded; "pp": a descriptive column, its change in points.
#: Not guarded: the intra-group accuracy gap |A_AA - A_BB| (Raj & Ekstrand 2022, section 2.5) compares how well
#: each group's own items are ordered among themselves, not one group against the other, and its start value is
#: near 0 (|-0.05| popularity, |0.001| Drama on validation), where 10 % of it is within the noise of one seed.
#: DIPS with tie weight 0 is left out: ~0.001 on these lists (almost no strictly ordered cross-group pair is
#: dissatisfied).
COLUMNS = [("ndcg@10", "NDCG@10", "utility"), ("dips_gap", "DIPS gap", "guard"),
           ("exposure_misallocation_l1", "‖δ‖₁", "guard"), ("pairwise_accuracy_inter", "pairwise gap", "guard"),
           ("pairwise_accuracy_intra", "intra-group acc. gap", "report"),
           ("exposure_share_B", "group-1 exposure share (pp)", "pp")]
TARGET = "dips_gap"
BUDGETS = (0.01, 0.02, 0.05)  # NDCG@10 costs at which each family's lambda / keep is chosen on validation
NDCG_BUDGET, GUARD = 0.02, 0.10
#: re-ranker families, each a list of specs (its strengths), chosen on validation like lambda, for the protected
#: group ``protected`` (the group the start disadvantages on seed 0's validation lists: the popularity tail, 1; for
#: Drama vs the rest, the rest, 0); the targeted re-rankers pick the group per list themselves
def rerank_families(protected: int = 1) -> Dict[str, List[str]]:
    if FAST:
        return {"interleave": [f"interleave:keep=2,p=0.7,protected={protected}",
                               f"interleave:keep=0,p=1.0,protected={protected}"],
                "targeted dips, guarded": ["targeted:measure=dips,keep=0,guard=pairwise_gap:0.1"]}
    dist = (lambda p: f"{1 - p:g}/{p:g}") if protected == 1 else (lambda p: f"{p:g}/{1 - p:g}")
    return {
        "interleave": [f"interleave:keep={k},p={p},protected={protected}" for k in (10, 9, 8, 7, 5)
                       for p in (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0)],
        "targeted dips, share family": [f"targeted:measure=dips,keep={k},family=interleave" +
                                        (f",max_utility_loss={u}" if u is not None else "")
                                        for k in (10, 9, 8, 7) for u in (None, 0.05, 0.02)],
        "targeted dips, guarded": [f"targeted:measure=dips,keep={k},guard=pairwise_gap:0.1" for k in (10, 9, 8, 6)],
        "FA*IR": [f"fa_ir:p={p},k=100,protected={protected}" for p in (0.3, 0.5, 0.7, 0.9)],
        "DetConstSort": [f"detconstsort:distribution={dist(p)},k=100" for p in (0.3, 0.5, 0.7, 0.9)],
    }


FAST = False
#: loss rows evaluated on test per grouping: at each budget, the families whose chosen lambda removes most of the
#: target on seed 0's validation lists (every family's choice is in selection.json)
TOP_FAMILIES = 3
#: families of the prune stage that also run the other protocols
PROTOCOL_FAMILY = {"groups": "popularity", "utility": "listnet", "loss": "dips_ramp"}
FAST_KEYS = _sweep.FAST_KEYS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--stage", choices=["starts", "prune", "confirm", "report", "table", "all"], default="all",
                   help="report: evaluate (one file per grouping, <out>/report_<grouping>.json: groupings can run "
                        "in parallel processes); table: the table and figure from those files (report does it too)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (the first prunes)")
    p.add_argument("--sweep", default=str(SWEEP), help="the sweep file")
    p.add_argument("--groupings", nargs="+", default=["popularity", "drama"], choices=["popularity", "drama"],
                   help="item groupings: popularity head / tail, Drama vs the rest")
    p.add_argument("--utilities", nargs="+", default=["listnet", "lambdarank10"],
                   help="utility variants of the sweep file (plndcg10: 1 - E_PL[NDCG@10] samples 1 682-item lists, "
                        "~10x a trial's time, not in the default run)")
    p.add_argument("--losses", nargs="+", default=["none", "dips_ramp", "pairgap_ramp", "multi_ramp",
                            "pairgap_below10", "dips_below10", "misalloc_ramp", "dips_served", "pairgap_served"],
                   help="loss variants of the sweep file (the Plackett-Luce ones run for one family only: "
                        "--pl-family)")
    p.add_argument("--pl-family", action=argparse.BooleanOptionalAction, default=False,
                   help="the Plackett-Luce DIPS loss on the popularity / ListNet family, two lambdas (3.5 min a "
                        "trial on 1 682-item lists)")
    p.add_argument("--protocols", nargs="+", default=["finetune"],
                   help="protocols of the prune stage (the others than finetune run for the popularity / ListNet / "
                        "DIPS family only)")
    p.add_argument("--workers", type=int, default=2, help="trials at a time (one torch thread each)")
    p.add_argument("--families", nargs="+",
                   default=["interleave", "targeted dips, guarded", "FA*IR", "DetConstSort"],
                   help="re-rank families of rerank_families() to evaluate; 'targeted dips, share family' is opt-in: "
                        "the costliest, and on popularity groups it picked the plain interleaving's p = 1 on nearly "
                        "every list (the same figures to the printed precision)")
    p.add_argument("--bootstrap", type=int, default=300, help="bootstrap replicates of the paired intervals")
    p.add_argument("--out", default="runs/tradeoff", help="output directory (starts, sweep, reports)")
    p.add_argument("--results", action="store_true", help="also write experiments/results/loss_tradeoff.*")
    p.add_argument("--fast", action="store_true", help="synthetic stand-in, tiny grid (a smoke run)")
    return p


# --------------------------------------------------------------------------------------------- stages 1-3: training
def starts(args, out: Path) -> Dict[str, Path]:
    """The tuned start of every seed: the trials ``split: random`` of ``configs/sweep_starts_tuned.yaml`` (each
    seed its own split), run into ``<out>/starts`` and copied to ``<out>/start/seed<S>.ckpt`` (the sweep file's
    ``model.init_from``)."""
    t0 = time.time()
    path = _sweep.derive(STARTS, out / "stages" / "starts.yaml",
                         keep={"split": ["random"], "seed": [str(s) for s in args.seeds]}, fast=args.fast,
                         overrides={"trainer.max_epochs": 2} if args.fast else None)
    _sweep.run(path, out / "starts", workers=args.workers)
    paths = _sweep.copy_starts(_sweep.finished(out / "starts"), out / "start", {"split": "random"}, args.seeds)
    print(f"[starts] seeds {list(paths)}: {out / 'start'} ({time.time() - t0:.0f} s)", flush=True)
    return paths


def _derived(args, out: Path, name: str, keep: Dict[str, Sequence[str]], lams: Optional[Dict[str, List[float]]] = None
             ) -> Path:
    """A copy of the sweep file with its variant dimensions restricted to ``keep`` (and a loss's lambda grid
    replaced by ``lams``), each seed's start at ``<out>/start/seed<S>.ckpt`` and, in fast mode, the synthetic keys;
    trial ids are unchanged."""
    import yaml

    seeds = yaml.safe_load(Path(args.sweep).read_text())["variants"]["seed"]
    bundles: Dict[str, Dict[str, Dict[str, Any]]] = {
        "seed": {s: {"model.init_from": str(out / "start" / f"seed{s}.ckpt")} for s in seeds}}
    if args.fast:
        bundles["protocol"] = {"scratch": {"trainer.max_epochs": 2}}
    return _sweep.derive(Path(args.sweep), out / "stages" / f"{name}.yaml", keep=keep, bundles=bundles,
                         grids={"loss": {loss: {"model.lam": list(v)} for loss, v in (lams or {}).items()}},
                         overrides={"trainer.max_epochs": 1} if args.fast else None, fast=args.fast)


def _variants(args) -> Dict[str, List[str]]:
    return {"utility": list(args.utilities), "loss": list(args.losses)}


def _run(path: Path, out: Path, workers: int) -> None:
    _sweep.run(path, out / "sweep", workers=workers, threads=1, check=False)


def prune(args, out: Path) -> None:
    v = _variants(args)
    s0 = str(args.seeds[0])
    if args.pl_family and PROTOCOL_FAMILY["groups"] in args.groupings and not args.fast:
        _run(_derived(args, out, "prune_pl", {"groups": [PROTOCOL_FAMILY["groups"]],
                                              "utility": [PROTOCOL_FAMILY["utility"]], "loss": ["none", "dips_pl"],
                                              "seed": [s0], "protocol": ["finetune"]},
                      {"dips_pl": [0.01, 0.03]}), out, args.workers)
    _run(_derived(args, out, "prune", {"groups": args.groupings, "seed": [s0], "protocol": ["finetune"], **v}),
         out, args.workers)
    others = [p for p in args.protocols if p != "finetune"]
    if others and PROTOCOL_FAMILY["groups"] in args.groupings:
        keep = {"groups": [PROTOCOL_FAMILY["groups"]], "utility": [PROTOCOL_FAMILY["utility"]],
                "loss": ["none", PROTOCOL_FAMILY["loss"]] if set(others) - {"scratch"} else [PROTOCOL_FAMILY["loss"]],
                "seed": [s0], "protocol": [p for p in others if p != "scratch"]}
        if keep["protocol"]:
            _run(_derived(args, out, "prune_protocols", keep), out, args.workers)
        if "scratch" in others:  # from scratch: 60 epochs a trial, two lambdas
            lam = {PROTOCOL_FAMILY["loss"]: [0.01, 0.03] if not args.fast else [0.01]}
            _run(_derived(args, out, "prune_scratch", {**keep, "loss": [PROTOCOL_FAMILY["loss"]],
                                                       "protocol": ["scratch"]}, lam), out, args.workers)


def trial_results(out: Path) -> List[Dict[str, Any]]:
    """Every finished trial: its variant names, lambda, checkpoint and validation / test means."""
    rows = []
    for f in sorted((out / "sweep" / "trials").glob("*/result.json")):
        r = json.loads(f.read_text())
        p = r["params"]
        rows.append({"groups": p["groups"], "utility": p["utility"], "loss": p["loss"], "seed": int(p["seed"]),
                     "protocol": p.get("protocol", "finetune"), "lam": float(p.get("model.lam", 0.0)),
                     "checkpoint": r["checkpoint"], "metrics": r["metrics"]})
    return rows


def change(row: Dict[str, float], ctrl: Dict[str, float]) -> Dict[str, float]:
    """Relative NDCG@10 change and, per fairness column, the share of the control's |value| removed
    (``1 - |row| / |control|``; negative: worse)."""
    out = {"ndcg@10": (row["ndcg@10"] - ctrl["ndcg@10"]) / abs(ctrl["ndcg@10"])}
    for c, _, kind in COLUMNS[1:]:
        a, b = row.get(c, float("nan")), ctrl.get(c, float("nan"))
        if kind == "pp":  # a descriptive column: its change
            out[c] = a - b
        else:
            out[c] = 1.0 - abs(a) / abs(b) if b not in (0.0,) and not math.isnan(b) else float("nan")
    return out


#: the guard's absolute floor per guarded measure: a guarded measure may grow by max(GUARD |reference|, floor) in
#: |value|.  Near 0 (Drama's pairwise accuracy gap is ~0.003 at the start) 10 % of the value is far below its noise,
#: while a re-rank that triples it is a real harm.  The floors are *measured* (:func:`guard_floors`): twice the
#: seed-to-seed standard deviation of the start's validation mean, per grouping and measure (set by the report and
#: confirm stages; this default is used only before the starts exist).
GUARD_FLOOR = 0.01
FLOORS: Dict[str, float] = {}


def admissible(ch: Dict[str, float], budget: float = NDCG_BUDGET, ref: Optional[Dict[str, float]] = None) -> bool:
    """Within ``budget`` of NDCG@10 and no guarded measure worse by more than GUARD of its reference value
    (``ref``: the reference's values; then the allowed growth of |value| is ``max(GUARD |ref|, floor)``, the floor
    of :data:`FLOORS`)."""
    def limit(c: str) -> float:
        r = None if ref is None else abs(ref.get(c, float("nan")))
        return GUARD if r is None or math.isnan(r) else max(GUARD, FLOORS.get(c, GUARD_FLOOR) / max(r, 1e-300))

    return ch["ndcg@10"] >= -budget - 1e-12 and all(
        not (ch[c] < -limit(c) - 1e-12) for c, _, kind in COLUMNS[1:] if kind == "guard" and not math.isnan(ch[c]))


def judged(row: Dict[str, float], budget: float, *refs: Optional[Dict[str, float]]) -> bool:
    """``row`` is within ``budget`` and the guard against every reference given (the control, the start)."""
    return all(admissible(change(row, r), budget, r) for r in refs if r is not None)


def _control_of(rows, r):
    """The control of a trial row: lambda 0, same grouping / utility / seed / protocol (scratch: the start)."""
    proto = r["protocol"] if r["protocol"] != "scratch" else "finetune"
    for c in rows:
        if (c["loss"] == "none" and c["groups"] == r["groups"] and c["utility"] == r["utility"]
                and c["seed"] == r["seed"] and c["protocol"] == proto):
            return c
    return None


def _trial(rows, g: str, u: str, loss: str, proto: str, seed: int, lam: float) -> Optional[Dict[str, Any]]:
    """The trial row of one (grouping, utility, loss, protocol, seed, lambda), or ``None``."""
    return next((r for r in rows if (r["groups"], r["utility"], r["loss"], r["protocol"], r["seed"], r["lam"])
                 == (g, u, loss, proto, seed, lam)), None)


def _split_means(metrics: Dict[str, float], split: str) -> Dict[str, float]:
    return {k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith(split + "/")}


def start_val(args, out: Path, g: str, seed: int) -> Dict[str, float]:
    """The start's validation means for grouping ``g`` (the exact measures of its checkpoint on seed ``seed``'s
    validation lists; cached in ``<out>/start/val_<g>_seed<S>.json``)."""
    f = out / "start" / f"val_{g}_seed{seed}.json"
    if not f.is_file():
        from torchfair.training.module import DEFAULT_MEASURES

        tab = _tables(str(out / "start" / f"seed{seed}.ckpt"), _group_cfg(out, g, args.fast), "val", [],
                      list(DEFAULT_MEASURES))[None]
        f.write_text(json.dumps(_means(_cols(tab))))
    return json.loads(f.read_text())


def guard_floors(args, out: Path, g: str) -> Dict[str, float]:
    """The guard's absolute floor per guarded measure of grouping ``g``: twice the seed-to-seed standard deviation
    (ddof 1) of the start's validation mean over ``args.seeds`` (at least 0.002); :data:`GUARD_FLOOR` with one
    seed."""
    vals = [start_val(args, out, g, s) for s in args.seeds]
    floors = {}
    for c, _, kind in COLUMNS:
        if kind == "guard":
            x = np.asarray([v.get(c, float("nan")) for v in vals], dtype=float)
            floors[c] = max(0.002, 2 * float(np.nanstd(x, ddof=1))) if len(x) > 1 else GUARD_FLOOR
    return floors


def select(rows: List[Dict[str, Any]], seed: int, start: Optional[Dict[str, float]] = None
           ) -> Dict[Tuple[str, str, str, str], Dict[float, List[float]]]:
    """Per family (groups, utility, loss, protocol): for each budget the lambda whose *validation* change removes
    most of the target gap within that budget under the guard (seed ``seed``); ``{family: {lam: [budgets]}}``.
    With ``start`` (the start's validation means), the recipe's NDCG@10 must also stay within the budget of the
    start's: a utility term whose own fine-tune loses more than the budget never qualifies, however cheap the
    fairness term is against that control."""
    chosen: Dict[Tuple[str, str, str, str], Dict[float, List[float]]] = {}
    fams: Dict[Tuple[str, str, str, str], List[Dict[str, Any]]] = {}
    for r in rows:
        if r["seed"] == seed and r["loss"] != "none":
            fams.setdefault((r["groups"], r["utility"], r["loss"], r["protocol"]), []).append(r)
    for fam, members in fams.items():
        ctrl = _control_of(rows, members[0])
        if ctrl is None:
            continue
        cv = _split_means(ctrl["metrics"], "val")
        for b in BUDGETS:
            best = None
            for r in members:
                rv = _split_means(r["metrics"], "val")
                ch = change(rv, cv)
                if judged(rv, b, cv, start) and ch[TARGET] > 0 and (best is None or ch[TARGET] > best[0]):
                    best = (ch[TARGET], r["lam"])
            if best is not None:
                chosen.setdefault(fam, {}).setdefault(best[1], []).append(b)
    return chosen


def top_families(rows, chosen, seed: int, top: Optional[int] = None):
    """The part of ``chosen`` (:func:`select`) kept for the test table: at each budget the ``top`` families whose
    chosen lambda removes most of the target on seed ``seed``'s validation lists."""
    top = TOP_FAMILIES if top is None else top
    keep: Dict[Tuple[str, str, str, str], Dict[float, List[float]]] = {}
    for b in BUDGETS:
        scored = []
        for fam, lams in chosen.items():
            for lam, budgets in lams.items():
                if b not in budgets:
                    continue
                r = _trial(rows, fam[0], fam[1], fam[2], fam[3], seed, lam)
                ctrl = _control_of(rows, r) if r else None
                if r and ctrl:
                    v = change(_split_means(r["metrics"], "val"), _split_means(ctrl["metrics"], "val"))[TARGET]
                    scored.append((v, fam, lam))
        for v, fam, lam in sorted(scored, key=lambda x: -x[0])[:top]:
            keep.setdefault(fam, {}).setdefault(lam, []).append(b)
    return keep


def confirm(args, out: Path) -> None:
    rows = trial_results(out)
    every: Dict[Tuple[str, str, str, str], Dict[float, List[float]]] = {}
    chosen = {}
    for g in args.groupings:  # per grouping: its start, its floors; the families the test table shows
        FLOORS.clear()
        FLOORS.update(guard_floors(args, out, g))
        sel = select([r for r in rows if r["groups"] == g], args.seeds[0], start_val(args, out, g, args.seeds[0]))
        every.update(sel)
        chosen.update(top_families(rows, sel, args.seeds[0]))
    (out / "selection.json").write_text(json.dumps({"|".join(k): v for k, v in every.items()}, indent=1))
    rest = [str(s) for s in args.seeds[1:]]
    if not rest:
        return
    by: Dict[Tuple[str, str, str], Dict[str, List[float]]] = {}
    for (g, u, loss, proto), lams in chosen.items():
        by.setdefault((g, u, proto), {})[loss] = sorted(lams)
    for (g, u, proto), losses in by.items():
        controls = ["none"] if proto != "scratch" else []
        # a family's lambdas replace its grid; the control (lambda 0) comes with the `none` loss
        for loss, lams in losses.items():
            keep = {"groups": [g], "utility": [u], "loss": controls + [loss], "seed": rest, "protocol": [proto]}
            _run(_derived(args, out, f"confirm_{g}_{u}_{loss}_{proto}", keep, {loss: lams}), out, args.workers)


# --------------------------------------------------------------------------------------------- stage 4: evaluation
_TABLE_CACHE: Dict[Tuple[str, str, str], Dict[Any, Any]] = {}


def _tables(ckpt: str, config: str, split: str, specs: Sequence[str], measures: List[str]):
    """The per-list columns of a checkpoint on ``split`` and of each re-rank of it; ``{None | spec: columns}``
    (memoised per checkpoint, grouping and split: a spec is evaluated once)."""
    from torchfair.evaluation import evaluate_lists
    from torchfair.rerank import get_reranker, rerank_lists
    from torchfair.training import REPORT_BROWSING, load_checkpoint, score_lists

    key = (ckpt, config, split)
    memo = _TABLE_CACHE.setdefault(key, {})
    todo = [s for s in [None, *specs] if s not in memo]
    if todo:
        run = load_checkpoint(ckpt, config)
        G = int(run.meta["data_info"]["num_groups"])
        lists = score_lists(run.model, run.datamodule, split)
        asked = measures + [f"exposure_share:browsing={REPORT_BROWSING}"]
        for s in todo:
            ranked = lists if s is None else rerank_lists(lists, get_reranker(s), G)
            memo[s] = _cols(evaluate_lists(ranked, asked, num_groups=G, validate_args=False, bootstrap=0))
    return {s: memo[s] for s in [None, *specs]}


def _cols(table) -> Dict[str, np.ndarray]:
    if isinstance(table, dict):
        return table
    return {c: np.asarray(table[c], dtype=float) for c, _, _ in COLUMNS if c in table.columns}


def _means(cols: Dict[str, np.ndarray]) -> Dict[str, float]:
    return {c: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for c, v in cols.items()}


def paired(row: List[Dict[str, np.ndarray]], ctrl: List[Dict[str, np.ndarray]], n_boot: int, seed: int = 0
           ) -> Dict[str, Dict[str, Any]]:
    """Change of ``row`` against ``ctrl`` (:func:`change`) over the lists of every seed pooled (the same lists,
    paired), the change per seed, and a two-level percentile bootstrap interval: seeds resampled with replacement,
    then the lists within each drawn seed, so the interval carries the training-seed variance."""
    cols = list(row[0])
    point = change(_means({c: np.concatenate([r[c] for r in row]) for c in cols}),
                   _means({c: np.concatenate([x[c] for x in ctrl]) for c in cols}))
    per_seed = [change(_means(r), _means(x)) for r, x in zip(row, ctrl)]
    rng = np.random.default_rng(seed)
    boots: Dict[str, List[float]] = {c: [] for c in point}
    for _ in range(n_boot):
        picks = rng.integers(0, len(row), len(row))
        idx = [rng.integers(0, len(next(iter(row[i].values()))), len(next(iter(row[i].values())))) for i in picks]
        R = {c: np.concatenate([row[i][c][j] for i, j in zip(picks, idx)]) for c in cols}
        C = {c: np.concatenate([ctrl[i][c][j] for i, j in zip(picks, idx)]) for c in cols}
        ch = change(_means(R), _means(C))
        for c in point:
            boots[c].append(ch[c])
    return {c: {"mean": point[c], "lo": float(np.nanpercentile(boots[c], 2.5)) if n_boot else float("nan"),
                "hi": float(np.nanpercentile(boots[c], 97.5)) if n_boot else float("nan"),
                "per_seed": [p[c] for p in per_seed]} for c in point}


def guard_held(row: List[Dict[str, np.ndarray]], before: List[Dict[str, np.ndarray]], tol: float = GUARD
               ) -> float:
    """Share of the lists (defined before and after) on which the inter-group pairwise accuracy gap, on the *true*
    test relevance, grew by at most ``tol`` of its value before the re-rank: how often a guard judged on the
    ranker's own estimate held on the labels."""
    a = np.concatenate([r["pairwise_accuracy_inter"] for r in row])
    b = np.concatenate([x["pairwise_accuracy_inter"] for x in before])
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.mean(np.abs(a[ok]) <= (1 + tol) * np.abs(b[ok]) + 1e-12)) if ok.any() else float("nan")


def _group_cfg(out: Path, g: str, fast: bool) -> str:
    body = {"popularity": "data:\n  groups: popularity\n", "drama": "data:\n  groups: genre\n  genre: Drama\n"}[g]
    path = out / "stages" / f"eval_{g}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return str(path)


def choose_reranks(args, out: Path, g: str, measures: List[str]) -> Dict[str, Dict[str, Any]]:
    """Per re-rank family, the spec chosen on seed 0's validation lists of the start at each budget (the same rule
    as lambda: the largest removal of the DIPS gap within the budget under the guard): ``{family: {"by_budget":
    {budget: spec}, "spec": the spec at the 2 % budget (or the largest budget that has one)}}``."""
    start = str(out / "start" / f"seed{args.seeds[0]}.ckpt")
    cfg = _group_cfg(out, g, args.fast)
    ctrl = _means(_tables(start, cfg, "val", [], measures)[None])
    # DIPS gap M_01 - M_10 < 0: group 1 is the disadvantaged one (Fabris et al. 2023)
    families = rerank_families(1 if not (ctrl.get(TARGET, -1.0) > 0) else 0)
    if getattr(args, "families", None):
        families = {k: v for k, v in families.items() if k in args.families}
    tabs = _tables(start, cfg, "val", [s for fam in families.values() for s in fam], measures)
    chosen: Dict[str, Dict[str, Any]] = {}
    for fam, members in families.items():
        by = {}
        for b in BUDGETS:
            best = None
            for s in members:
                m = _means(tabs[s])
                ch = change(m, ctrl)
                if judged(m, b, ctrl) and ch[TARGET] > 0 and (best is None or ch[TARGET] > best[0]):
                    best = (ch[TARGET], s)
            if best is not None:
                by[b] = best[1]
        if by:
            spec = by.get(NDCG_BUDGET) or by[max(by)]
            chosen[fam] = {"by_budget": by, "spec": spec,
                           "val": {s: change(_means(tabs[s]), ctrl) for s in members}}
    return chosen


def chosen_specs(rr: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    """Every spec some family chose at some budget (its strength at 1 %, 2 % and 5 %), with its family: each is a
    re-rank row, and every loss is evaluated on top of each (a loss may afford only a weaker re-rank)."""
    return {spec: fam for fam, c in rr.items() for spec in c["by_budget"].values()}


def report_stage(args, out: Path) -> Dict[str, Any]:
    from torchfair.training.module import DEFAULT_MEASURES

    measures = list(DEFAULT_MEASURES)
    t0 = time.time()
    rows = trial_results(out)
    res: Dict[str, Any] = {"groupings": {}, "seeds": list(args.seeds), "fast": bool(args.fast)}
    for g in args.groupings:
        cfg = _group_cfg(out, g, args.fast)
        FLOORS.clear()
        FLOORS.update(guard_floors(args, out, g))
        rr = choose_reranks(args, out, g, measures)
        R = chosen_specs(rr)
        print(f"[report] {g}: floors {FLOORS}; re-rankers chosen on validation: {R} ({time.time() - t0:.0f} s)",
              flush=True)
        s0 = args.seeds[0]
        sel = select([r for r in rows if r["groups"] == g], s0, start_val(args, out, g, s0))
        fams = top_families(rows, sel, s0)
        entries: Dict[str, Dict[str, Any]] = {}

        def add(name, kind, tab, ctrl, start=None, **meta):
            e = entries.setdefault(name, {"kind": kind, "rows": [], "ctrl": [], "start": [], **meta})
            e["rows"].append(tab)
            e["ctrl"].append(ctrl)
            e["start"].append(start if start is not None else ctrl)

        specs = sorted(R)
        for seed in args.seeds:
            st = _tables(str(out / "start" / f"seed{seed}.ckpt"), cfg, "test", specs, measures)
            add("start", "start", st[None], st[None])
            for spec, fam in R.items():
                add(f"re-rank: {spec}", "re-rank", st[spec], st[None], family=fam,
                    budgets=[b for b, x in rr[fam]["by_budget"].items() if x == spec])
            for (gg, u, loss, proto), lams in fams.items():
                ctrl_row = _control_of(rows, {"groups": g, "utility": u, "seed": seed, "protocol": proto})
                if ctrl_row is None:
                    continue
                ct = _tables(ctrl_row["checkpoint"], cfg, "test", specs, measures)
                cname = f"control: {u}"
                if len(entries.get(cname, {"rows": []})["rows"]) < args.seeds.index(seed) + 1:
                    add(cname, "control", ct[None], st[None])
                    for spec, fam in R.items():
                        add(f"{cname} + {spec}", "control + re-rank", ct[spec], st[None], family=fam)
                for lam, budgets in lams.items():
                    tr = _trial(rows, g, u, loss, proto, seed, lam)
                    if tr is None:
                        continue
                    lt = _tables(tr["checkpoint"], cfg, "test", specs, measures)
                    name = f"loss: {loss} λ={lam:g}, {u}"
                    add(name, "loss", lt[None], ct[None], st[None], budgets=budgets, loss=(u, loss, lam))
                    for spec, fam in R.items():
                        add(f"{name} + {spec}", "both", lt[spec], ct[spec], st[None], budgets=budgets, family=fam,
                            loss=(u, loss, lam))
            print(f"[report] {g}: seed {seed} evaluated ({time.time() - t0:.0f} s)", flush=True)
        out_rows: Dict[str, Any] = {}
        for name, e in entries.items():
            if len(e["rows"]) != len(args.seeds):
                continue  # a family not trained on every seed
            ch = paired(e["rows"], e["ctrl"], args.bootstrap)
            full = paired(e["rows"], e["start"], args.bootstrap)
            pooled = lambda tabs: _means({c: np.concatenate([t[c] for t in tabs]) for c in tabs[0]})  # noqa: E731
            means, start_means = pooled(e["rows"]), pooled(e["start"])
            within = judged(means, NDCG_BUDGET, pooled(e["ctrl"]), start_means)
            held = guard_held(e["rows"], e["ctrl"]) if e["kind"] in ("re-rank", "both", "control + re-rank") \
                else float("nan")
            out_rows[name] = {"kind": e["kind"], "budgets": e.get("budgets", []), "family": e.get("family"),
                              "loss": e.get("loss"), "change": ch, "vs_start": full, "means": means,
                              "start_means": start_means, "guard_held_true": held,
                              "ndcg_vs_start": full["ndcg@10"], "target_vs_start": full[TARGET],
                              "within": within and e["kind"] not in ("control", "start")}
        rec = recommend(args, out, g, cfg, measures, rr, fams, rows)
        res["groupings"][g] = {"rows": out_rows, "reranks_chosen": rr, "floors": dict(FLOORS),
                               "recommended": rec, "wall_s": time.time() - t0}
        (out / f"report_{g}.json").write_text(json.dumps(res["groupings"][g], indent=1, default=float))
    res["wall_s_report"] = time.time() - t0
    return res


def recommend(args, out: Path, g: str, cfg: str, measures: List[str], rr, fams, rows) -> Dict[str, Any]:
    """The recommended recipes, chosen on seed 0's *validation* lists (never on test): every candidate (each
    family's chosen re-rank of the start, the control + it, each chosen loss, the loss + each re-rank) judged
    within the 2 % budget under the guard against its control and the start; the one that removes most of the
    start's DIPS gap, overall and among those containing the loss.  ``{"any": name, "with_loss": name,
    "val": {name: change vs start}}``."""
    s0 = args.seeds[0]
    R = chosen_specs(rr)
    specs = sorted(R)
    st = _tables(str(out / "start" / f"seed{s0}.ckpt"), cfg, "val", specs, measures)
    cands: Dict[str, Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray], bool]] = {}
    for spec in R:
        cands[f"re-rank: {spec}"] = (st[spec], st[None], False)
    for (gg, u, loss, proto), lams in fams.items():
        ctrl_row = _control_of(rows, {"groups": g, "utility": u, "seed": s0, "protocol": proto})
        if ctrl_row is None:
            continue
        ct = _tables(ctrl_row["checkpoint"], cfg, "val", specs, measures)
        for spec in R:
            cands[f"control: {u} + {spec}"] = (ct[spec], st[None], False)
        for lam in lams:
            tr = _trial(rows, g, u, loss, proto, s0, lam)
            if tr is None:
                continue
            lt = _tables(tr["checkpoint"], cfg, "val", specs, measures)
            name = f"loss: {loss} λ={lam:g}, {u}"
            cands[name] = (lt[None], ct[None], True)
            for spec in R:
                cands[f"{name} + {spec}"] = (lt[spec], ct[spec], True)
    sm = _means(st[None])
    val: Dict[str, Dict[str, float]] = {}
    ok: Dict[str, bool] = {}
    for name, (tab, ctrl, _) in cands.items():
        m = _means(tab)
        val[name] = change(m, sm)
        ok[name] = judged(m, NDCG_BUDGET, _means(ctrl), sm)
    pick = lambda names: max((n for n in names if ok[n] and val[n][TARGET] > 0),  # noqa: E731
                             key=lambda n: val[n][TARGET], default=None)
    return {"any": pick(list(cands)), "with_loss": pick([n for n in cands if cands[n][2]]), "val": val,
            "judged": ok}


def dominated_by(gr: Dict[str, Any], name: str) -> List[str]:
    """The re-rank-only rows that dominate row ``name`` on the test lists: NDCG@10 against the start at least as
    high and every guarded measure's share of the start's value removed at least as large, one strictly."""
    r = gr["rows"].get(name)
    if r is None:
        return []
    keys = ["ndcg@10"] + [c for c, _, kind in COLUMNS if kind == "guard"]
    mine = [r["vs_start"][k]["mean"] for k in keys]
    out = []
    for n, x in gr["rows"].items():
        if x["kind"] != "re-rank" or n == name:
            continue
        theirs = [x["vs_start"][k]["mean"] for k in keys]
        if all(t >= m - 1e-12 for t, m in zip(theirs, mine)) and any(t > m + 1e-12 for t, m in zip(theirs, mine)):
            out.append(n)
    return out


# --------------------------------------------------------------------------------------------- the table, the figure
def _pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:+.1f}"


def _signed(r: Dict[str, Any], c: str) -> str:
    """``start → row`` signed means of a gap; ``⇄`` marks a sign reversal."""
    a, b = r["start_means"].get(c, float("nan")), r["means"].get(c, float("nan"))
    flip = " ⇄" if a * b < 0 else ""
    return f"{a:+.3f} → {b:+.3f}{flip}"


def _ci(d: Dict[str, Any]) -> str:
    return f"{_pct(d['mean'])} [{_pct(d['lo'])}, {_pct(d['hi'])}]"


def markdown(res: Dict[str, Any], command: str, wall: Optional[float] = None) -> str:
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    md = ["# A loss, a re-rank, or both? (ML-100K, exact test measures, chosen on validation)", "",
          f"Command: `{command}`; seeds {res['seeds']} (each its own split and start: `configs/ml100k_ials.yaml`, "
          "MF from implicit ALS)" + (f"; wall time {wall / 60:.0f} min" if wall else "") +
          f"; load average {load:.1f} when written" + (" (fast mode: synthetic stand-in)" if res["fast"] else "")
          + ".", "",
          "Each cell is a change against a reference, over the test lists of every seed pooled, with a 95 % interval "
          "from a two-level bootstrap (seeds resampled, then lists within each seed: training-seed variance "
          "included); per-seed values are in the JSON. NDCG@10: relative change (%). A fairness measure: the share "
          "of the reference's |value| removed (%; negative: worse). **vs start** columns: the whole recipe against "
          "the start. **vs control** columns: against the row's own control -- a loss row: its λ = 0 fine-tune; "
          "loss + re-rank R: the λ = 0 fine-tune + the same R (the loss's own worth on top of R); a re-rank row and "
          "a control row: the start. *start → row*: the signed means (⇄: the sign reversed, the other group is now "
          "the disadvantaged one). *guard held*: the share of lists on which the inter-group pairwise gap, on the "
          "true test relevance, grew by at most 10 % against the row's input (the guarded re-ranker judges it on "
          "the ranker's own top-10 estimate). λ, each re-ranker's strength and the recommended recipe were chosen "
          "on seed 0's validation lists, never on test. **Within budget**: NDCG@10 ≥ −"
          f"{100 * NDCG_BUDGET:.0f} % against both the control and the start, and none of the DIPS gap, ‖δ‖₁ and "
          f"the pairwise gap worse by more than {100 * GUARD:.0f} % of its value for the control or the start, or "
          "by its absolute floor near 0 (twice the seed-to-seed standard deviation of the start's validation mean, "
          "listed per grouping).", ""]
    for g, gr in res["groupings"].items():
        fl = ", ".join(f"{lab} {gr['floors'].get(c, float('nan')):.4f}" for c, lab, kind in COLUMNS
                       if kind == "guard")
        rec = gr.get("recommended") or {}
        md += [f"## {g} groups", "", f"Guard floors (measured): {fl}.", "",
               "| row | kind | NDCG@10 vs start | DIPS gap removed vs start (per seed) | NDCG@10 vs control | "
               "DIPS gap vs control | ‖δ‖₁ vs control | pairwise gap vs control | DIPS gap start → row | "
               "pairwise gap start → row | guard held | within budget |",
               "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
        for name, r in gr["rows"].items():
            if name == "start":
                continue
            ps = "/".join(f"{100 * x:.0f}" for x in r["vs_start"][TARGET]["per_seed"])
            mark = " **(recommended)**" if name == rec.get("any") else (
                " **(recommended with the loss)**" if name == rec.get("with_loss") else "")
            held = "" if math.isnan(r["guard_held_true"]) else f"{100 * r['guard_held_true']:.0f} %"
            md.append(f"| {name}{mark} | {r['kind']} | {_ci(r['vs_start']['ndcg@10'])} | "
                      f"{_ci(r['vs_start'][TARGET])} ({ps}) | {_ci(r['change']['ndcg@10'])} | "
                      f"{_ci(r['change'][TARGET])} | {_ci(r['change']['exposure_misallocation_l1'])} | "
                      f"{_ci(r['change']['pairwise_accuracy_inter'])} | {_signed(r, TARGET)} | "
                      f"{_signed(r, 'pairwise_accuracy_inter')} | {held} | {'**yes**' if r['within'] else ''} |")
        start = gr["rows"].get("start")
        if start:
            md += ["", "start (test, mean over seeds' lists): " + ", ".join(
                f"{lab} {start['means'].get(c, float('nan')):+.4f}" for c, lab, _ in COLUMNS)]
        md += ["", "Re-rankers chosen on validation (family: spec at 1 / 2 / 5 % of NDCG@10): " + "; ".join(
            f"{fam}: " + ", ".join(f"{100 * float(b):.0f} % {s}" for b, s in c["by_budget"].items())
            for fam, c in gr["reranks_chosen"].items()) + "."]
        for key, label in (("any", "Recommended recipe"), ("with_loss", "Recommended recipe containing the loss")):
            n = rec.get(key)
            if n is None:
                md.append(f"- {label} (chosen on validation): none within budget.")
                continue
            r = gr["rows"].get(n)
            dom = dominated_by(gr, n)
            md.append(f"- {label} (chosen on validation): **{n}**" + (
                f"; on test: NDCG@10 {_ci(r['vs_start']['ndcg@10'])} % vs start, {_ci(r['change']['ndcg@10'])} % vs "
                f"its control; DIPS gap removed {_ci(r['vs_start'][TARGET])} % vs start; "
                f"{'within budget' if r['within'] else 'NOT within budget'}; "
                + (f"dominated by {', '.join(dom)}" if dom else "not dominated by any re-rank-only row")
                if r else " (not evaluated on every seed)") + ".")
        md.append("")
    return "\n".join(md)


def best_row(gr: Dict[str, Any], kinds: Sequence[str] = ("loss", "re-rank", "both")):
    """The row within budget that removes most of the start's DIPS gap on *test* (descriptive only: the
    recommendation is :func:`recommend`'s, on validation)."""
    key = lambda r: r["vs_start"][TARGET]["mean"]  # noqa: E731
    cands = [(n, r) for n, r in gr["rows"].items() if r["kind"] in kinds and r["within"] and key(r) > 0]
    return max(cands, key=lambda x: key(x[1]), default=None)


def figure(res: Dict[str, Any], path: str) -> None:
    """NDCG@10 change against each fairness measure's share removed; filled: within budget (guard held)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gs = list(res["groupings"])
    fair = [(c, lab) for c, lab, kind in COLUMNS if kind in ("guard", "report")]
    fig, axes = plt.subplots(len(gs), len(fair), figsize=(3.6 * len(fair), 3.4 * len(gs)), squeeze=False)
    style = {"loss": ("s", "C0"), "re-rank": ("o", "C1"), "both": ("^", "C2"), "control": ("x", "grey"),
             "control + re-rank": ("D", "C3")}
    for i, g in enumerate(gs):
        for j, (c, lab) in enumerate(fair):
            ax = axes[i][j]
            for name, r in res["groupings"][g]["rows"].items():
                if r["kind"] not in style:
                    continue
                mk, col = style[r["kind"]]
                # every panel: the whole recipe against the start (the table has each row against its control)
                x, y = 100 * r["vs_start"]["ndcg@10"]["mean"], 100 * r["vs_start"][c]["mean"]
                if math.isnan(y):
                    continue
                x, y = max(x, -15), max(min(y, 100), -150)
                ax.scatter(x, y, marker=mk, color=col, facecolors=col if r["within"] or r["kind"] == "control" else "none",
                           s=22)
            ax.axvline(-100 * NDCG_BUDGET, color="grey", ls="--", lw=0.7)
            ax.axhline(-100 * GUARD, color="red", ls=":", lw=0.7)
            ax.axhline(0, color="black", lw=0.5)
            ax.set_title(f"{g}: {lab} (recipe vs the start)", fontsize=8)
            ax.set_xlabel("NDCG@10 change (%)", fontsize=7)
            ax.set_ylabel("share removed (%)", fontsize=7)
            ax.tick_params(labelsize=6)
            ax.grid(alpha=0.3)
    fig.suptitle("■ loss  ● re-rank  ▲ loss + re-rank  ◆ control + re-rank  × control; filled: within budget under "
                 "the guard",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.fast:
        args.utilities = [u for u in args.utilities if u != "approx10"]
        args.losses = [x for x in args.losses if x in ("none", "dips_ramp", "multi_ramp")]
        args.bootstrap = min(args.bootstrap, 30)
        args.groupings = ["popularity"]
        global FAST
        FAST = True
    t0 = time.time()
    stages = ["starts", "prune", "confirm", "report"] if args.stage == "all" else [args.stage]
    if "starts" in stages:
        starts(args, out)
    if "prune" in stages:
        prune(args, out)
    if "confirm" in stages:
        confirm(args, out)
    if "report" in stages:
        report_stage(args, out)
    if "report" in stages or args.stage == "table":
        res = {"groupings": {g: json.loads((out / f"report_{g}.json").read_text()) for g in args.groupings
                             if (out / f"report_{g}.json").is_file()},
               "seeds": list(args.seeds), "fast": bool(args.fast),
               "provenance": _provenance.provenance(argv, script="experiments/loss_tradeoff.py")}
        wall = time.time() - t0 if args.stage == "all" else None
        command = "python experiments/loss_tradeoff.py " + " ".join(argv if argv is not None else sys.argv[1:])
        md = markdown(res, command.strip(), wall)
        (out / "loss_tradeoff.md").write_text(md)
        (out / "loss_tradeoff.json").write_text(json.dumps(res, indent=1, default=float))
        figure(res, str(out / "loss_tradeoff.png"))
        if args.results and not args.fast:
            import shutil
            rd = ROOT / "experiments" / "results"
            for ext in ("md", "json", "png"):
                shutil.copyfile(out / f"loss_tradeoff.{ext}", rd / f"loss_tradeoff.{ext}")
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
