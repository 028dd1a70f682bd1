"""The suite's pytest-xdist groups hold: tests marked ``xdist_group`` run on one worker.

``.ci/test.sh`` runs the suite with ``--dist loadgroup``, and the modules whose fixtures start something costly (the
session's Ray cluster, a vLLM engine and server, a parts build) mark themselves ``xdist_group`` so that one worker
starts it once. pytest 9.2 stores a node's id where pytest-xdist 3.8 cannot rename it to ``ID@GROUP``, so every
group silently spread over both workers and each started its own cluster and servers (the suite took minutes
longer; ``pyproject.toml`` keeps pytest below 9.2). This runs a real pytest-xdist session on a small file and
fails if the grouping is lost again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = '''
import json, os
import pytest

def record(request, name):
    with open(os.path.join(os.path.dirname(__file__), "ran.jsonl"), "a") as f:
        f.write(json.dumps({"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                            "nodeid": request.node.nodeid}) + "\\n")

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("i", range(6))
def test_grouped(request, i):
    record(request, f"grouped{i}")

@pytest.mark.parametrize("i", range(6))
def test_loose(request, i):
    record(request, f"loose{i}")
'''


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own root: neither this suite's conftest nor its options
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p",
                           "no:cacheprovider", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [json.loads(line) for line in (tmp_path / "ran.jsonl").read_text().splitlines()]
    grouped = [r for r in ran if r["test"].startswith("grouped")]
    assert len(grouped) == 6 and len(ran) == 12
    assert all(r["nodeid"].endswith("@together") for r in grouped), [r["nodeid"] for r in grouped]
    assert len({r["worker"] for r in grouped}) == 1, grouped
    assert {r["worker"] for r in ran} == {"gw0", "gw1"}  # two workers did run: the group is not one by chance


def test_every_group_the_suite_marks_is_known_to_the_seeds() -> None:
    """A grouped test's node id ends in ``@GROUP``; its seed (``conftest.seed_of``) strips the groups of
    ``XDIST_GROUPS``, so a group missing there would change its tests' seeds with the worker count."""
    import re

    from conftest import XDIST_GROUPS

    tests = Path(__file__).parent
    named = {m.group(1) for path in tests.glob("*.py") if path.name != Path(__file__).name
             for m in re.finditer(r"xdist_group\(\s*\"([^\"]+)\"", path.read_text())}
    assert named and named <= set(XDIST_GROUPS), named - set(XDIST_GROUPS)
