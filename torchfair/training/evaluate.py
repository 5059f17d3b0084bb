"""``torchfair evaluate``: exact measures of trained checkpoints on their test lists, as a report to paste.

Each checkpoint is rebuilt from itself (:func:`~torchfair.training.checkpoint.load_checkpoint`), its lists scored
and measured by the evaluation engine (:class:`~torchfair.evaluation.table.StreamingEvaluation`): every measure the
run was validated with and each group's exposure share (RBP(0.9), as DIPS), the mean over users with a percentile
bootstrap interval; from the same batches its accumulators give the group at each of the ``top`` first positions
(:class:`~torchfair.evaluation.PositionShares`) and Matched Pair Calibration of the protected group
(:class:`~torchfair.evaluation.PooledMPC`: Korevaar et al., Definitions 1-3, adjacent pairs, cluster-robust
interval).  Several checkpoints on the same lists: each one's difference from the first, *paired* (same users).
Files: :func:`torchfair.evaluation.report.write_report`, and ``eval_users.txt`` with a user sample.

Scale: ``users=N`` evaluates a seeded sample of N users (``report["users"]``).  Lists too many to hold
(``stream=None``: more than :data:`STREAM_ENTRIES` entries, e.g. 2 000 of ML-20M's users x 26 744 items) are
scored, measured and dropped ``chunk_users`` at a time: means, intervals and position shares bit-identical to
one pass, MPC equal up to rounding (its sums are added per batch).
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Dict, List, Literal, Optional, Sequence, Union

import numpy as np
from jsonargparse.typing import NonNegativeInt, OpenUnitInterval, PositiveInt

from ..evaluation.accumulators import PooledMPC, PositionShares
from ..evaluation.files import split_measures
from ..evaluation import terminal_width
from ..evaluation.report import compare, markdown_table, write_report
from ..evaluation.table import StreamingEvaluation
from ..rerank import get_reranker, rerank_lists
from .checkpoint import iter_score_lists, load_checkpoint

__all__ = ["evaluate_checkpoints", "report_table", "check_out", "REPORT_BROWSING", "STREAM_ENTRIES", "USERS_FILE"]

#: browsing model of the added exposure-share columns (the DIPS default)
REPORT_BROWSING = "rbp:0.9"
#: ``stream=None`` streams when the lists hold more entries than this (2**24: about 400 MB of list tensors);
#: ML-100K (943 x 1 682) is measured in one chunk, ML-1M and up in chunks
STREAM_ENTRIES = 2 ** 24
#: name of the ids file written next to the report for a user sample
USERS_FILE = "eval_users.txt"
#: what the report's columns are, for report.md
COLUMNS_NOTE = ("Columns: DIPS M[g, h] (`dips_AB`: dissatisfaction of group A caused by B; `_gap` = AB - BA; "
                "`dips_t0`: tie weight 0), exposure misallocation delta_g (`_l1` = ||delta||_1), pairwise accuracy "
                "(`_inter`, `_intra`), `exposure_share` under {}.")


def evaluate_checkpoints(ckpts: List[str], out: Optional[str] = None, *, fit_config: Optional[str] = None,
                         names: Optional[List[str]] = None, bootstrap: NonNegativeInt = 1000, seed: int = 0,
                         confidence: OpenUnitInterval = 0.95, device: str = "cpu", mpc_group: Optional[int] = 1,
                         top: PositiveInt = 50, split: Literal["test", "val"] = "test",
                         measures: Union[str, List[str], None] = None, rerank: List[str] = (),
                         popularity: bool = False, overwrite: bool = False, users: Optional[PositiveInt] = None,
                         users_seed: NonNegativeInt = 0, stream: Optional[bool] = None,
                         chunk_users: PositiveInt = 512) -> Dict[str, Any]:
    """Exact measures of trained checkpoints on their test lists, side by side with paired differences from the
    first, written (with ``out``) as report.json, report.md and exposure_by_position.png; returns the report dict.

    Args:
        ckpts: checkpoints written by ``torchfair fit``.
        out: directory for the report files, checked before any work (:func:`check_out`).
        fit_config: a ``torchfair fit`` YAML whose ``data:`` and ``model: measures:`` override the checkpoints'.
        names: a name per checkpoint (default: its Lightning run, ``ml100k_listnet/version_0``, else its file name).
        bootstrap: bootstrap replicates (users resampled; 0: no interval).
        seed: bootstrap seed.
        confidence: level of the intervals.
        device: where to score the lists (cpu, cuda, cuda:1...).
        mpc_group: the group whose Matched Pair Calibration is reported (None: no MPC).
        top: number of positions of the position shares (the plot's depth).
        split: the lists to score: test or val.
        measures: measures instead of those the runs were validated with (comma separated or a list).
        rerank: re-ranker specs ('fa_ir:p=0.5', 'targeted:measure=dips,keep=10'), each a run of its own on every
            checkpoint's re-ranked lists, paired with the checkpoint (the re-ranker never sees the test relevance).
        popularity: add a run 'popularity': the first checkpoint's lists ranked by training rating counts.
        overwrite: replace the report files of an earlier run in ``out``.
        users: evaluate a seeded sample of this many users (default: all), written to ``out``/eval_users.txt.
        users_seed: seed of the user sample.
        stream: score and measure ``chunk_users`` lists at a time, same numbers (None: beyond 2**24 entries).
        chunk_users: lists per chunk when streaming.

    The report (:func:`torchfair.evaluation.report.compare`) gives each run its ``meta``, ``group_names``,
    ``position_share [top, G]`` and ``mpc``, and records ``split``, ``browsing_of_added_columns`` and ``users``.

    Example::

        report = evaluate_checkpoints(["plain.ckpt", "dips.ckpt"], "reports/", names=["ListNet", "+DIPS"])
        report["models"]["+DIPS"]["measures"]["dips_gap"]["mean"]
    """
    from .._validation import check_int

    if not ckpts:
        raise ValueError("`ckpts` is empty: give at least one checkpoint")
    if not isinstance(popularity, bool):
        raise ValueError(f"`popularity` must be a bool; got {popularity!r}")
    if split not in ("test", "val"):
        raise ValueError(f"`split` must be 'test' or 'val'; got {split!r}")
    if names is not None and len(names) != len(ckpts):
        raise ValueError(f"`names` has {len(names)} entries for {len(ckpts)} checkpoints")
    check_int(bootstrap, "bootstrap", 0)
    if users is not None:
        check_int(users, "users", 1)
    check_int(users_seed, "users_seed", 0)
    check_int(chunk_users, "chunk_users", 1)
    check_int(top, "top", 1)
    if mpc_group is not None:
        check_int(mpc_group, "mpc_group", 0)
    if stream is not None and not isinstance(stream, bool):
        raise ValueError(f"`stream` must be a bool or None; got {stream!r}")
    if out is not None:
        check_out(out, overwrite)
    rerankers = [get_reranker(r) for r in rerank]  # a bad spec fails before any work
    names = list(names) if names is not None else _default_names(ckpts)
    if popularity and "popularity" in names:
        raise ValueError("`names`: 'popularity' is the name of the popularity run; call a checkpoint otherwise")
    sample = {"eval_users": users, "eval_users_seed": users_seed if users is not None else None}
    runs = [load_checkpoint(p, fit_config, device, data_overrides=sample) for p in ckpts]  # bad files fail first
    tables, extra, reference, same, digests, streamed = {}, {}, {}, {}, {}, []
    for k, (name, run) in enumerate(zip(names, runs)):
        info = run.meta["data_info"]
        G = int(info.get("num_groups") or 2)
        group_names = list(info.get("group_names") or [str(g) for g in range(G)])
        run.meta["measures"] = split_measures(measures) if measures is not None else list(run.meta["measures"])
        variants = [(name, None)] + [(f"{name} + {r.spec}", r) for r in rerankers]
        run.datamodule.setup("test" if split == "test" else "validate")
        lengths = (run.datamodule.test_dataset if split == "test" else run.datamodule.val_dataset).lengths()
        if popularity and k == 0:
            from .rankers import Popularity
            variants.append(("popularity", Popularity.from_datamodule(run.datamodule)))
        streamed.append(bool(stream if stream is not None else int(lengths.sum()) > STREAM_ENTRIES))
        mpc_on = mpc_group is not None and 2 <= G and mpc_group < G
        res, digests[name] = _evaluate_run(
            run, variants, run.meta["measures"] + [f"exposure_share:browsing={REPORT_BROWSING}"], G, group_names,
            split, device, lengths, chunk_users if streamed[-1] else None, digest=len(runs) > 1, top=top,
            mpc_group=mpc_group if mpc_on else None, bootstrap=bootstrap, seed=seed, confidence=confidence)
        for vname, r in variants:
            tables[vname], shares, mpc = res[vname]
            if vname == "popularity":
                meta = {"checkpoint": "(none)", "epoch": "-", "ranker": "popularity (training rating counts)",
                        "fairness_loss": None, "lam": None, "rerank": None, "measures": run.meta["measures"]}
            else:
                meta = {**run.meta, "rerank": None if r is None else r.spec}
            extra[vname] = {"meta": meta, "group_names": group_names, "position_share": shares.tolist(), "mpc": mpc}
            if r is not None:
                reference[vname], same[vname] = name, True
        if name != names[0]:
            reference[name], same[name] = names[0], digests[name] == digests[names[0]]
    order = [v for n in names for v in [n] + [f"{n} + {r.spec}" for r in rerankers]] + \
        (["popularity"] if popularity else [])
    report = compare({v: tables[v] for v in order}, reference=reference, same_lists=same, bootstrap=bootstrap,
                     seed=seed, confidence=confidence, extra=extra)
    report.update(split=split, browsing_of_added_columns=REPORT_BROWSING)
    report["users"] = _users_record(runs[0].datamodule, split, users, users_seed, streamed, chunk_users,
                                    USERS_FILE if out is not None and users is not None else None)
    if out is not None:
        write_report(report, out, unit="users", notes=COLUMNS_NOTE.format(REPORT_BROWSING), plot=True)
        if users is not None:
            ids = np.sort(runs[0].datamodule.eval_user_ids(split))
            with open(os.path.join(out, USERS_FILE), "w") as f:
                f.write("".join(f"{int(u)}\n" for u in ids))
    return report


def report_table(report: Dict[str, Any], width: Optional[NonNegativeInt] = None) -> str:
    """What ``torchfair evaluate`` prints: the report's table (:func:`~torchfair.evaluation.report.markdown_table`)
    and the users it covers.

    Args:
        width: the widest line of the printed table (default: the terminal's width, 120 when not a terminal; 0: no
            limit): a wider table is printed as several tables, each with the measure column and as many run /
            difference columns as fit. report.md and report.json hold every column in one table.
    """
    u = report["users"]
    return (f"{markdown_table(report, width=terminal_width(width))}\n\n{u['n_lists']} of {u['of']} users" +
            (f" (sample of {u['sample']}, seed {u['seed']})" if u["sample"] is not None else ""))


def _users_record(dm, split: str, users: Optional[int], users_seed: int, streamed: List[bool], chunk_users: int,
                  ids_file: Optional[str]) -> Dict[str, Any]:
    """What ``report["users"]`` records: which users were evaluated (and how)."""
    from .datamodule import user_ids_sha256

    ids = dm.eval_user_ids(split)
    ds = dm.test_dataset if split == "test" else dm.val_dataset
    return {"sample": users, "seed": users_seed if users is not None else None, "n_lists": int(len(ids)),
            "of": int(len(ds.target.users_with_rows())), "sha256": user_ids_sha256(ids), "ids_file": ids_file,
            "sha256_of": "the users' raw ids in increasing order, one per line (the bytes of the ids file)",
            "streamed": streamed, "chunk_users": chunk_users if any(streamed) else None}


def _evaluate_run(run, variants, asked, G: int, group_names, split: str, device: str, lengths: np.ndarray,
                  chunk: Optional[int], *, digest: bool, top: int, mpc_group: Optional[int], **kw):
    """``({variant: (table, position shares, mpc)}, digest)`` of a run's variants (the run, its re-rankings,
    popularity: a :class:`Popularity` ranker), measured ``chunk`` lists at a time (``None``: all at once) by one
    :class:`StreamingEvaluation` each, with the accumulators; ``digest``: hash the lists (ids, items, relevance) to
    tell whether two checkpoints had the same lists (44 GB of bytes for every ML-20M user: only when compared)."""
    kw.update(num_groups=G, batch_size=1024, max_batch_elements=2 ** 21, validate_args=False,
              group_names=group_names)
    shares = {v: PositionShares(G, top) for v, _ in variants}
    mpcs = {v: PooledMPC(G, mpc_group) for v, _ in variants} if mpc_group is not None else {}
    streams = {v: StreamingEvaluation(asked, lengths=lengths, accumulators=[shares[v]] + ([mpcs[v]] if mpcs else []),
                                      **kw) for v, _ in variants}
    h = hashlib.sha256()
    for lists in iter_score_lists(run.model, run.datamodule, split, device, chunk):
        for li in lists if digest else ():
            h.update(int(li["list_id"]).to_bytes(8, "little", signed=True))
            h.update(li["items"].numpy().tobytes())
            h.update(li["relevance"].numpy().tobytes())
        for vname, r in variants:
            if r is None:
                streams[vname].add(lists)
            elif hasattr(r, "counts"):  # popularity: its training counts gathered at the items
                streams[vname].add([{**li, "scores": r.counts[li["items"]]} for li in lists])
            else:
                streams[vname].add(rerank_lists(lists, r, G))
        del lists
    return {v: (streams[v].result(), shares[v].compute(), mpcs[v].compute() if mpcs else {"defined": False})
            for v, _ in variants}, h.hexdigest()


def check_out(out: str, overwrite: bool = False, option: str = "`out`", hint: str = "overwrite=True") -> None:
    """``out`` can take a report: not an existing file, and not a directory holding a ``report.json`` (unless
    ``overwrite``).  Raises ValueError naming ``option`` (and ``hint``, how to overwrite)."""
    if not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"{option} must be a directory path; got {out!r}")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"{option}: {out} is an existing file; give a directory for the report files")
    if not overwrite and os.path.exists(os.path.join(out, "report.json")):
        raise ValueError(f"{option}: {out} already holds a report (report.json); give another directory, or "
                         f"{hint} to replace it")


def _run_name(path: str) -> Optional[str]:
    """``.../ml100k_listnet/version_0/checkpoints/last.ckpt`` -> ``ml100k_listnet/version_0`` (a Lightning run's
    directory, with its logger's name when it is a ``version_N``); None for a checkpoint outside a run."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.basename(parent) != "checkpoints":
        return None
    run = os.path.dirname(parent)
    name = os.path.basename(run)
    if not name:
        return None
    if re.fullmatch(r"version_\d+", name) and os.path.basename(os.path.dirname(run)):
        name = f"{os.path.basename(os.path.dirname(run))}/{name}"
    return name


def _default_names(ckpts: Sequence[str]) -> List[str]:
    """Unique, readable names: the run (``ml100k_listnet/version_0``) for a checkpoint inside a Lightning run,
    ``<run>/<file>`` when one run gives several; else the file name without its extension (``<dir>/<file>`` when
    two files have the same name)."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in ckpts]
    runs = [_run_name(p) for p in ckpts]
    names: List[str] = []
    for p, stem, run in zip(ckpts, stems, runs):
        if run is not None:
            n = run if runs.count(run) == 1 else f"{run}/{stem}"
        else:
            parent = os.path.basename(os.path.dirname(os.path.abspath(p)))
            n = stem if stem not in names and stems.count(stem) == 1 else f"{parent}/{stem}"
        while n in names:
            n += "'"
        names.append(n)
    return names
