"""The README: at most 200 lines opening with what Scaffold is and its two commands, links that resolve, the
custom-topology example printing what it claims, and the serving client against a served graph."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_custom_topology_runs_and_prints_what_it_claims() -> None:
    """The first Python block of the README runs, and its printed lines match its comments."""
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    assert len(block.strip().splitlines()) < 20
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(README), "exec"), {})
    claimed = [line.split("# ", 1)[1].strip() for line in block.splitlines() if line.startswith("print(")]
    assert out.getvalue().strip().splitlines() == claimed


def test_readme_is_short_and_opens_with_what_scaffold_is_and_the_two_commands() -> None:
    """A newcomer reads it in five minutes: at most 200 lines, and the first 25 say what Scaffold is and show
    ``make demo`` and ``make test``."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:25])
    assert "Scaffold is a Python SDK" in head
    assert re.search(r"^make demo ", head, re.M) and re.search(r"^make test ", head, re.M)


def test_every_link_of_the_readme_points_into_the_repository() -> None:
    """Relative links name files that exist (anchors are checked by the docs build for docs pages)."""
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local, "the README links into the docs"
    assert [t for t in local if not (README.parent / t).exists()] == []


def test_readme_serving_snippet_runs_against_a_served_pocket_model(pocket_quick) -> None:
    """The "Serving in three lines" client block runs as written against `self_consistency -p n=8 --name pocket-sc`
    (served here on the quick pocket model, at this test's own port): it prints the voted text and the
    scaffold extension with its 8 calls."""
    from scaffold.serve import ServeThread, build_app

    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "pocket-sc" in b)
    directory, _ = pocket_quick
    app = build_app({"served": {"pocket-sc": {"topology": "self_consistency", "params": {"n": 8},
                                              "models": {"solver": f"pocket:{directory}"}}}}, store="none")
    out, namespace = io.StringIO(), {}
    with ServeThread(app) as server, contextlib.redirect_stdout(out):
        exec(compile(block.replace("http://127.0.0.1:8000/v1", server.base_url), str(README), "exec"), namespace)
    namespace["client"].close()  # what the snippet opened is closed here, in the test that opened it
    printed = out.getvalue()
    assert "boxed" in printed and "'calls': 8" in printed
