"""``torchfair sweep`` (:mod:`torchfair.sweeps`): grids and random searches over training configs, resumable,
with a trade-off report.

A sweep file (YAML) names a base training config (``configs/ml100k_*.yaml``, read by ``torchfair fit``) and the
keys to vary, in the dotted syntax of the command line::

    base: ml100k_dips.yaml            # relative to the sweep file
    overrides:                        # applied to every trial
      trainer.max_epochs: 3
    grid:                             # every combination
      model.lam: [0.0, 0.1, 1.0]
      seed_everything: [0, 1, 2]
    random:                           # optional: `samples` draws on top of each grid point
      model.fairness_loss.init_args.ordering.init_args.temperature: {loguniform: [0.01, 1.0]}
    samples: 4
    variants:                         # optional: named bundles of keys, each dimension crossed with the grid
      loss:                           # a column `loss` holds the bundle's name
        dips_soft: {model.fairness_loss: {class_path: torchfair.losses.DIPSLoss}}
        deltr:
          model.fairness_loss: {class_path: torchfair.losses.DELTRLoss}
          grid: {model.lam: [1.0, 10.0]}   # a bundle may replace the values of grid keys for its trials
        none: {model.fairness_loss: null, grid: {model.lam: [0.0]}}
    seed: 0                           # seed of the random draws
    objective: val/ndcg@10            # "best so far" and the study's target, in its declared direction

``torchfair sweep FILE --out DIR [--workers K] [--search optuna --trials T]`` runs the trials (every trial of the
file, or ``T`` trials that Optuna's TPE sampler asks in the same space, optimising ``objective`` in its declared
direction), ``K`` at a time, each in its own process (one GPU each when there are GPUs, ``CUDA_VISIBLE_DEVICES``),
and shows trials done / running / failed and the best so far.  The sweep's Optuna study lives in
``DIR/study.journal`` (Optuna's journal file storage): the grid's points are enqueued trials, each tagged with its
trial id.  A finished trial writes ``DIR/trials/<trial id>/result.json`` atomically (its parameters, every exact
validation and test measure, its checkpoint) and is told to the study; running the same command again reads the
study, skips finished trials and reruns the others (also those a killed process left running); a failing trial
writes ``error.json`` (its real error line) and the others go on.  A second sweep on the same ``DIR`` is refused
while the first holds its lock (a ``filelock``), unless both run with ``--share``: then they (on one machine or
several sharing ``DIR``) work on one study, every trial run once.  Every key the file sets is parsed against the
base config before any trial starts.  The trial id is a hash of the trial's whole resolved config (the base config
file's content, the overrides, its variant bundles and grid / random values), so a changed base config or override
trains new trials, while adding values to a grid keeps the finished trials of the other points.

Outputs: ``DIR/results.csv`` (and ``results.parquet`` when pyarrow is installed: ``pip install torchfair[parquet]``)
with one row per trial (``trial_id``, ``status``, ``sweep``: the ``<sweep file>-<spec hash>`` that ran it,
``current``, the parameters, every measure), ``DIR/pareto_<measure>.png`` and ``DIR/report.md`` (the Pareto front
of every fairness column against the objective's measure, over the current sweep's trials, as figures and tables;
kinds and directions from the measure declarations).
``torchfair sweep-report DIR`` rebuilds them from a finished or partial sweep.  ``--executor ray [--address ...]``
runs the trials through Ray Tune (the grid as Tune's ``param_space``, one Tune trial per trial, GPUs as resources,
an interrupted run resumed with ``Tuner.restore``) into the same ``DIR``.
"""
from .._extras import require

require("torchfair.sweeps", "sweep")

from .tradeoff import collect_results, pareto_front, write_sweep_report
from .runner import run_sweep
from .study import SweepLockedError
from .spec import UTILITY_COLUMN, SweepSpec, Trial, column_direction, expand_trials, load_sweep

__all__ = ["SweepSpec", "Trial", "load_sweep", "expand_trials", "run_sweep", "collect_results", "pareto_front",
           "write_sweep_report", "SweepLockedError", "column_direction", "UTILITY_COLUMN"]
