#!/usr/bin/env bash
# Runs the whole test suite in the project's virtual environment (made by `make install`).
# pytest's exit code 5 ("no tests collected") is a failure here: a suite that ran nothing proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
"$BIN/ruff" check scaffold graphs trainers tests benchmarks examples || exit 1
"$BIN/mypy" || exit 1
bash .ci/postgres.sh || exit 1
bash .ci/chromium.sh || exit 1
"$BIN/python" -m pytest --durations=40 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
