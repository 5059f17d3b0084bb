"""``torchfair.sweep``: kept importable for existing code; the implementation is the :mod:`torchfair.sweeps`
package (``spec``: the sweep file, trials and their ids; ``trial``: one trial; ``study``: the Optuna study that stores
and hands out the trials; ``runner``: the process pool; ``ray_backend``: Ray Tune; ``report``: results, Pareto
fronts, report).  ``python -m torchfair.sweeps _trial DIR`` runs one trial."""
from .sweeps import *  # noqa: F401,F403 - the public API
from .sweeps import __all__  # noqa: F401
from .sweeps.report import collect_results, pareto_front, write_sweep_report  # noqa: F401
from .sweeps.spec import UTILITY_COLUMN, column_direction  # noqa: F401
from .sweeps.study import JOURNAL, SweepStudy, optuna_space  # noqa: F401
from .sweeps.trial import run_trial, trial_args  # noqa: F401
