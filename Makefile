# One-command set-up: every target that needs the package installs it first into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run simulate test bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,app]'
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
