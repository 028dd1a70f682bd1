"""The README's custom-topology example runs as written and prints what it claims."""

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


def test_readme_rsa_snippet_builds_with_paper_defaults() -> None:
    """The README's RSA snippet builds and counts 16 + 10 * 16 = 176 calls."""
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[1]
    scope: dict[str, object] = {}
    exec(compile("import scaffold as sf\n" + block, str(README), "exec"), scope)
    assert scope["rsa"].build().count_calls() == {"solver": 176}  # type: ignore[attr-defined]


def test_readme_graphs_snippet_prints_what_it_claims() -> None:
    """The README's graphs/ block runs and prints the call count and per-step population sizes it shows."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "graphs.rsa.build" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # recorded into the per-test store of conftest
        exec(compile(block, str(README), "exec"), {})
    claimed = [line.split("# ", 1)[1].strip() for line in block.splitlines() if line.startswith("print(")]
    assert out.getvalue().strip().splitlines() == claimed


def test_readme_serving_snippet_runs_against_a_served_pocket_model(pocket_quick) -> None:
    """The "Serving a graph" client block runs as written against `self_consistency -p n=8 --name pocket-sc`
    (served here on the quick pocket model, at this test's own port): it prints an answer, usage and the
    scaffold extension, then streams progress and the voted text."""
    from scaffold.serve import ServeThread, build_app

    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "pocket-sc" in b)
    directory, _ = pocket_quick
    app = build_app({"served": {"pocket-sc": {"topology": "self_consistency", "params": {"n": 8},
                                              "models": {"solver": f"pocket:{directory}"}}}}, store="none")
    out = io.StringIO()
    with ServeThread(app) as server, contextlib.redirect_stdout(out):
        exec(compile(block.replace("http://127.0.0.1:8000/v1", server.base_url), str(README), "exec"), {})
    printed = out.getvalue()
    assert "prompt_tokens=" in printed and "'calls': 8" in printed and "boxed" in printed
    assert "4/4 calls" in printed  # the streamed request's progress (n=4 for that request)
