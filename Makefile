# One-command set-up: every target that needs the package installs it first into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The calibrate extra pins torch==2.13.0; a local wheel folder (the CPU build) wins over PyPI's CUDA build.
# The notebooks extra (plotly, nbclient, ipykernel) is what tests/test_notebooks.py needs to run notebooks/ in CI.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: install run simulate test bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(FIND_LINKS) -e '.[dev,calibrate,cluster,app,notebooks]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/streamlit run app.py

simulate: $(STAMP)
	$(BIN)/llmplan simulate examples/chat-h100.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_simulate.py

clean:
	rm -rf $(VENV) build *.egg-info
