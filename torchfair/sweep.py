"""``torchfair sweep``: kept importable for existing code; the implementation is the :mod:`torchfair.sweeps`
package (``spec``: the sweep file, trials and their ids; ``trial``: one trial; ``study``: the Optuna study that stores
and hands out the trials; ``runner``: the process pool; ``ray_backend``: Ray Tune; ``report``: results, Pareto
fronts, report).  ``python -m torchfair.sweep _trial DIR`` runs one trial."""
import sys

from .sweeps import *  # noqa: F401,F403 - the public API
from .sweeps import __all__  # noqa: F401
from .sweeps.report import collect_results, pareto_front, write_sweep_report  # noqa: F401
from .sweeps.runner import _Progress, _record_sweep, _start_trial, _warm_context  # noqa: F401
from .sweeps.study import JOURNAL, SweepStudy, _claim, _lock, optuna_space  # noqa: F401
from .sweeps.spec import UTILITY_COLUMN, _goodness, _hash, _objective_direction, column_direction  # noqa: F401
from .sweeps.trial import (_atomic_json, _log_attempt, _log_error, _main, _prepare, _provenance, _status,  # noqa: F401
                           run_trial, trial_args)

if __name__ == "__main__":  # pragma: no cover - the trial subprocess entry point
    sys.exit(_main(sys.argv[1:]))
