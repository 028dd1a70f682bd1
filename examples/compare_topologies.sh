#!/usr/bin/env bash
# Budget-matched comparison of topologies on the pocket model (no key, no GPU): the table and plots of the README.
#
#   bash examples/compare_topologies.sh                      # 100 held-out pocket problems, a few minutes on 2 cores
#   PROBLEMS=20 bash examples/compare_topologies.sh          # quicker
#   MODEL=openai/gpt-4o-mini DATA=math500 PROBLEMS=100 bash examples/compare_topologies.sh   # a shipped set
#
# Every evaluation is recorded in $STORE (default out/compare/runs.db); run the script again after a kill and
# finished problems are not sent again. The table, report.json, problems.csv and the PNGs go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
PROBLEMS="${PROBLEMS:-100}"
MODEL="${MODEL:-pocket}"
OUT="${OUT:-out/compare}"
STORE="${STORE:-$OUT/runs.db}"
SCAFFOLD="${SCAFFOLD:-python -m scaffold}"
data=()
if [[ -n "${DATA:-}" ]]; then data=(--data "$DATA"); fi
mkdir -p "$OUT"

eval_one() {  # NAME TOPOLOGY [-p ...]
  local name="$1"; shift
  $SCAFFOLD --store "$STORE" eval "$@" --model "$MODEL" "${data[@]}" --limit "$PROBLEMS" --name "cmp-$name" \
    --no-progress > /dev/null
}

eval_one single single_sample
eval_one sc self_consistency -p n=4,16
eval_one bon best_of_n -p n=16
eval_one agglm agglm -p n=4
eval_one rsa rsa -p n=8 -p k=4 -p steps=1,3
$SCAFFOLD --store "$STORE" compare cmp- --format markdown --out "$OUT"
