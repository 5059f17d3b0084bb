"""``torchfair sweep``: kept importable for existing code; the implementation is the :mod:`torchfair.sweeps`
package (``spec``: the sweep file, trials and their ids; ``trial``: one trial; ``runner``: the pool, Optuna, Ray;
``report``: results, Pareto fronts, report).  ``python -m torchfair.sweep _trial DIR`` runs one trial."""
import sys

from .sweeps import *  # noqa: F401,F403 - the public API
from .sweeps import __all__  # noqa: F401
from .sweeps.report import collect_results, pareto_front, write_sweep_report  # noqa: F401
from .sweeps.runner import (_claim, _lock, _log_attempt, OptunaSearch, _prepare, _Progress, _record_sweep,  # noqa: F401
                            _run_ray, _start_trial, _warm_context)
from .sweeps.spec import UTILITY_COLUMN, _goodness, _hash, _objective_direction, column_direction  # noqa: F401
from .sweeps.trial import _atomic_json, _log_error, _main, _provenance, _status, run_trial, trial_args  # noqa: F401

if __name__ == "__main__":  # pragma: no cover - the trial subprocess entry point
    sys.exit(_main(sys.argv[1:]))
