"""Shared test configuration: the hypothesis profiles of the contract harness (tests/test_contract.py).

* ``contract-fast``: what ``python -m pytest -q`` runs.  Derandomized (the same examples on every run, so CI is
  deterministic), no example database, no deadline, no shrinking (a failing example is reported as found; set
  ``TORCHFAIR_CONTRACT_SHRINK=1`` to shrink it to a minimal one).
* ``contract-slow``: the long run, used by the tests marked ``slow`` (``python -m pytest -q -m slow
  tests/test_contract.py``), or for every contract test when ``TORCHFAIR_CONTRACT_PROFILE=slow``.  Random
  (a new seed each run), shrinking on, at least 10 000 examples per family.

Nothing here changes hypothesis' default profile, so the other property tests keep their own settings.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
             HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
_FAST_PHASES = (Phase.explicit, Phase.generate) + ((Phase.shrink,) if os.environ.get("TORCHFAIR_CONTRACT_SHRINK")
                                                  else ())

settings.register_profile("contract-fast", max_examples=10, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_SUPPRESS, phases=_FAST_PHASES, print_blob=False)
settings.register_profile("contract-slow", max_examples=10_000, derandomize=False, deadline=None,
                          suppress_health_check=_SUPPRESS, print_blob=True)


@pytest.fixture
def contract_profile(request) -> str:
    """``"slow"`` for tests marked ``slow`` or when ``TORCHFAIR_CONTRACT_PROFILE=slow``, else ``"fast"``."""
    if os.environ.get("TORCHFAIR_CONTRACT_PROFILE", "").lower() == "slow" or request.node.get_closest_marker("slow"):
        return "slow"
    return "fast"
