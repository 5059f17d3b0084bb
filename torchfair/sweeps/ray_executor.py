"""``--executor ray``: a thin Ray Tune adapter.  Tune gets the sweep's parameters (:func:`param_space`); each Tune
trial computes its trial id from them, runs the trial in a subprocess into ``DIR/trials/<id>/`` as the local
executor does, and reports its measures.  An interrupted run is resumed with ``Tuner.restore`` from
``DIR/ray/<sweep id>``; a trial whose ``result.json`` exists is not run again."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .spec import SweepSpec, Trial
from .trial import _atomic_json, _log_attempt, _prepare, _status, _trial_process

__all__ = ["param_space", "trial_params", "run_ray"]

#: the key of the points when a sweep is not a product of its keys' values (variants with their own grid values,
#: random draws): Tune then grids over the points themselves
POINT = "trial_params"
#: written into the Tune experiment's directory once every trial of it ended (a later run starts a new one)
_ENDED = "torchfair-ended"


def _unique(values: Sequence[Any]) -> List[Any]:
    seen, out = set(), []
    for v in values:
        key = json.dumps(v, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def param_space(trials: Sequence[Trial]) -> Dict[str, Any]:
    """Tune's ``param_space`` for ``trials``: one ``tune.grid_search`` per parameter when the trials are the product
    of their parameters' values, else one ``tune.grid_search`` over the points (under :data:`POINT`).  Built
    without Ray (``tune.grid_search(v)`` is ``{"grid_search": v}``)."""
    keys = list(trials[0].params) if trials else []
    values = {k: _unique([t.params[k] for t in trials]) for k in keys}
    if POINT not in keys and all(set(t.params) == set(keys) for t in trials) \
            and math.prod(len(v) for v in values.values()) == len(trials):
        return {k: {"grid_search": v} for k, v in values.items()}
    return {POINT: {"grid_search": [dict(t.params) for t in trials]}}


def trial_params(config: Mapping[str, Any]) -> Dict[str, Any]:
    """A Tune trial's parameters from its config (the inverse of :func:`param_space`)."""
    return dict(config[POINT]) if POINT in config else dict(config)


def _trainable(config: Dict[str, Any], spec: SweepSpec, out: str, threads: int,
               provenance: dict) -> None:  # pragma: no cover - runs inside Ray workers
    """A Tune function trainable: the trial of ``config``'s parameters, in a subprocess; reports its measures."""
    from ray import tune

    t = spec.make_trial(trial_params(config))
    tdir = _prepare(Path(out), spec, t, provenance)
    code = 0
    if _status(tdir) != "done":
        _log_attempt(Path(out), t.trial_id)
        code = _trial_process(tdir, threads).wait()
    if _status(tdir) == "done":
        metrics = json.loads((tdir / "result.json").read_text())["metrics"]
        tune.report({"trial_failed": 0, **{k.replace("/", "_"): v for k, v in metrics.items()}})
    else:
        if _status(tdir) != "failed":
            _atomic_json(tdir / "error.json", {"trial_id": t.trial_id, "params": t.params,
                                               "error": f"trial process exited with {code}"})
        tune.report({"trial_failed": 1})


def run_ray(out: Path, spec: SweepSpec, todo: Sequence[Trial], workers: int, threads: int, gpus_per_trial: float,
            address: Optional[str], provenance: dict) -> None:
    """Run ``todo`` through Ray Tune on the cluster at ``address`` (default: a local Ray instance), each a Tune
    trial with ``threads`` CPUs and ``gpus_per_trial`` GPUs, at most ``workers`` at once; or resume this sweep's
    interrupted Tune run.  ``KeyboardInterrupt`` when Tune stopped before every trial ended.  On a multi-node
    cluster ``out`` must be on storage every node sees."""
    try:
        import ray
        from ray import tune
    except ImportError:
        raise ValueError("`executor`: ray is not installed (`pip install torchfair[ray]`)") from None
    path = (out / "ray" / spec.sweep_id).resolve()
    restore = path.is_dir() and not (path / _ENDED).is_file() and tune.Tuner.can_restore(str(path))
    if not todo and not restore:
        return
    if path.is_dir() and not restore:  # an ended run: its trials' results are in trials/
        shutil.rmtree(path)
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        trainable = tune.with_resources(
            tune.with_parameters(_trainable, spec=spec, out=str(out.resolve()), threads=threads,
                                 provenance=provenance), {"cpu": threads, "gpu": gpus_per_trial})
        if restore:
            tuner = tune.Tuner.restore(str(path), trainable, resume_unfinished=True, resume_errored=True)
        else:
            tuner = tune.Tuner(trainable, param_space=param_space(todo),
                               tune_config=tune.TuneConfig(max_concurrent_trials=workers),
                               run_config=tune.RunConfig(storage_path=str(path.parent), name=path.name, verbose=1))
        grid = tuner.fit()
        if any(r.metrics is None or "trial_failed" not in r.metrics for r in grid):
            raise KeyboardInterrupt("the Ray Tune run stopped before every trial ended; run again to resume it")
        (path / _ENDED).touch()
    finally:
        if started:
            ray.shutdown()
