#!/usr/bin/env bash
# Runs the whole test suite in the project's virtual environment (made by `make install`).
# pytest's exit code 5 ("no tests collected") is a failure here: a suite that ran nothing proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# Bytecode: where the environment says not to write it (PYTHONDONTWRITEBYTECODE, set on these machines), each of
# the suite's few hundred Python processes (CLI runs, examples, docs pages, Ray workers, servers) compiled every
# module of the project it imported from source again, and pytest rewrote every test module in each worker. The
# project's modules are compiled once here, and the suite's processes may write what else they compile.
unset PYTHONDONTWRITEBYTECODE
"$BIN/python" -m compileall -q -j 0 scaffold graphs trainers tests benchmarks examples > /dev/null || exit 1
# The whole suite needs both pocket builds: start them now, so they train while lint and mypy run and
# the test session attaches to them (tests/background_builds.py). A chosen subset starts what it needs.
if [ "$#" -eq 0 ]; then
  SCAFFOLD_TEST_BUILDS=$(mktemp -d -t scaffold-test-pockets-XXXXXX)
  export SCAFFOLD_TEST_BUILDS
  trap '"$BIN/python" tests/background_builds.py stop "$SCAFFOLD_TEST_BUILDS"; rm -rf "$SCAFFOLD_TEST_BUILDS"' EXIT
  "$BIN/python" tests/background_builds.py start "$SCAFFOLD_TEST_BUILDS" || exit 1
fi
"$BIN/ruff" check scaffold graphs trainers tests benchmarks examples || exit 1
"$BIN/mypy" || exit 1
bash .ci/postgres.sh || exit 1
bash .ci/chromium.sh || exit 1
# -rs: every skip prints its reason (only GPU and platform skips are expected; with CI=true a test skipped for
# a package that does not import fails instead: tests/conftest.py)
# -n: pytest-xdist workers (two by default: most tests wait on servers, subprocesses and sockets, so one process
# keeps two cores three-quarters idle); the tests that share the session's Ray cluster run on one worker
# (loadgroup). OpenMP threads sleep at barriers instead of spinning, as the workers share the cores.
export OMP_WAIT_POLICY=PASSIVE
"$BIN/python" -m pytest -n "${SCAFFOLD_TEST_WORKERS:-2}" --dist loadgroup --durations=40 -rs "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
