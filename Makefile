# The README's commands. `make demo` runs the main job, `make test` the test suite.
# Both install what they need first (torch as the local CPU wheel when no torch is importable).
PYTHON ?= python3

.PHONY: install install-run demo demo-synthetic test test-all test-contract test-contract-slow bench gpu-check docs

# what the demos need: torchfair with training and sweeps (`pip install torchfair` alone is the core: torch, numpy,
# numba), no test stack
install-run:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	@$(PYTHON) -m pip install -q -e ".[sweep]"

# the test stack: every extra but ray (dev pulls train, sweep, parquet, docs)
install: install-run
	@$(PYTHON) -m pip install -q -e ".[dev]"

# the main job: ML-100K, 3 seeds: the tuned ranker and its fine-tunes (the loss and its lambda = 0 control) as the
# trials of configs/sweep_starts_tuned.yaml and configs/sweep_movielens_demo.yaml, then the exact test report of
# each, re-ranked, and popularity (a second run reuses the trials under runs/demo)
demo: install-run
	$(PYTHON) experiments/movielens_demo.py

# the DIPS paper's synthetic study (Fabris et al. 2023, section 6.1); writes runs/dips_synthetic/
# (`python experiments/dips_synthetic.py --results` rewrites the committed experiments/results/ files)
demo-synthetic: install-run
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

# issue 10's speed benchmark: every comparison, interleaved, tables in experiments/results/bench_speed.md
bench: install
	$(PYTHON) experiments/bench_speed.py

# issue 28: everything that needs a GPU in one go (<= 8 min: device tests, loss / PL / exact / training-step
# benchmarks on cuda against the CPU, a 2-epoch GPU fit, the smoke sweep on one GPU); figures in
# experiments/results/gpu_check.md. Without CUDA it prints "no CUDA device: nothing to check" and exits 0.
# ML-100K must be cached ($$TORCHFAIR_DATA): the GPU machines are offline
gpu-check: install
	$(PYTHON) experiments/gpu_check.py

# the docs site (Sphinx + myst, docs/): API reference, one page per declared measure, the guides, the results pages;
# every warning is an error. Output: docs/_build/html/index.html
docs: install-run
	@$(PYTHON) -m pip install -q -e ".[docs]"
	$(PYTHON) -m sphinx -W --keep-going -b html docs docs/_build/html
