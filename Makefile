# The two commands of the README. Both set everything up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench install

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'

demo: install
	$(BIN)/python examples/quickstart.py

test: install
	bash .ci/test.sh

bench: install
	$(BIN)/python benchmarks/executor.py
