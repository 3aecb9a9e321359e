# One-command set-up: every target installs what it needs into .venv first.
#   make run        the dashboard: the package + the `app` extra only (streamlit, plotly)
#   make test       what the tests need (dev, calibrate, cluster, app, notebooks extras), then lint, then the whole suite
#   make test-fast  the same set-up, then the suite without the slow, notebook, browser and app tests
#   make lint       ruff over the code and mypy over simulator/ (both installed by the dev extra)
# Each set-up has its own stamp, so `make run` after `make test` (or the reverse) installs only what is missing,
# and editing pyproject.toml re-runs both.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check
APP_STAMP := $(VENV)/.installed-app
TEST_STAMP := $(VENV)/.installed-test
TEST_EXTRAS := dev,calibrate,cluster,app,notebooks
LINT_PATHS := simulator calibrate hwprofiles app.py app_pages benchmarks tests

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

.PHONY: install install-app run simulate test test-fast lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(APP_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[app]'
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install --quiet $(TORCH_SOURCE) '$(TORCH)'
	$(PIP) install --quiet $(FIND_LINKS) -e '.[$(TEST_EXTRAS)]'
	touch $@

install: $(TEST_STAMP)

install-app: $(APP_STAMP)

run: $(APP_STAMP)
	$(BIN)/streamlit run app.py

simulate: $(APP_STAMP)
	$(BIN)/llmplan simulate examples/chat-h100.yaml

test: $(TEST_STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy simulator
	$(BIN)/python -m pytest -q

test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow" $(FAST_IGNORE)

lint: $(TEST_STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy simulator

bench: $(APP_STAMP)
	$(BIN)/python benchmarks/bench_simulate.py

clean:
	rm -rf $(VENV) build *.egg-info
