# cardgen: `make demo` and `make test` work on a fresh machine (they install first).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NO_MKDOCS_2_WARNING := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export MPLBACKEND := Agg

.PHONY: install demo test test-fast test-engine lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip >/dev/null
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

demo: install
	$(BIN)/cardgen build CodeLlama-7b --gpu A100-80GB --suite quick
	$(BIN)/cardgen site

lint: install
	$(BIN)/ruff check cardgen tests

test: install lint
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not engine and not browser"

test-engine: install
	$(BIN)/python -m pytest -q -m engine

bench: install
	$(BIN)/python tests/bench

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache
