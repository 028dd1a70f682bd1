"""The runner behind the session's pocket builds (started here or by ``.ci/test.sh``, waited for by anyone), and the
session's pytest-xdist rules."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from background_builds import Build


def test_a_build_started_elsewhere_is_attached_to_and_its_status_read(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('built'); print('warned', file=sys.stderr); sys.exit(3)"]
    first = Build(command, 0, tmp_path / "logs")
    first.start()
    again = Build(["false-command-never-run"], 0, tmp_path / "logs")  # the second waiter attaches, starts nothing
    assert again.started
    assert again.result(timeout=60) == (3, "built\n", "warned\n")
    assert first.result(timeout=60) == (3, "built\n", "warned\n")


def test_a_stopped_build_reports_that_it_ended_without_a_status(tmp_path: Path) -> None:
    build = Build([sys.executable, "-c", "import time; time.sleep(60)"], 0, tmp_path / "logs")
    build.start()
    build.stop()
    returncode, _, err = build.result(timeout=30)
    assert returncode == -1 and "without an exit status" in err


def test_two_processes_asking_at_once_start_one_build(tmp_path: Path) -> None:
    # pytest-xdist's workers attach to one directory: whoever claims a build starts it, the other waits for it
    marker = tmp_path / "runs"
    command = [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(marker)!r}); "
               "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); print('built')"]
    builds = [Build(command, 0, tmp_path / "logs") for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda build: build.result(timeout=60), builds))
    assert results == [(0, "built\n", "")] * 4
    assert marker.read_text() == "x"
    assert sum(build.process is not None for build in builds) == 1


def test_a_test_grouped_for_xdist_draws_the_seed_of_its_plain_node_id() -> None:
    # pytest-xdist's loadgroup renames a grouped test ``ID@GROUP``; its seed must not depend on the worker count
    from conftest import XDIST_GROUPS, seed_of

    plain = "tests/test_backend_vllm.py::test_x[1]"
    assert all(seed_of(f"{plain}@{group}") == seed_of(plain) for group in XDIST_GROUPS)
    assert seed_of(f"{plain}@elsewhere") != seed_of(plain)
