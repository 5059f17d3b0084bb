# The README's commands. `make demo` runs the main job, `make test` the test suite.
# Both install what they need first (torch as the local CPU wheel when no torch is importable).
PYTHON ?= python3

.PHONY: install demo test test-all test-contract test-contract-slow bench

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	@$(PYTHON) -m pip install -q -e ".[dev]"

demo: install
	$(PYTHON) experiments/dips_synthetic.py

test: install
	$(PYTHON) -m pytest -q

test-all: install
	$(PYTHON) -m pytest -q -m ""

# the contract of issue 8: fast profile (part of `make test`), and the long run (>= 10 000 examples per family)
test-contract: install
	$(PYTHON) -m pytest -q tests/test_contract.py

test-contract-slow: install
	$(PYTHON) -m pytest -q -m slow tests/test_contract.py

bench: install
	$(PYTHON) experiments/bench_exact.py --frt
