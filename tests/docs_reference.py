"""The API reference pages of the docs site, made from each public package's ``__all__``.

``docs/reference/*.md`` hold one ``::: package.name`` line per public name (mkdocstrings renders its
docstring), grouped by the module that defines it. ``tests/test_docs.py`` fails when a committed page
differs from what this makes, so a new public name cannot miss the reference; after adding one, run
``python tests/docs_reference.py --write``.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"

PACKAGES = {
    "scaffold": ("scaffold", "The core: the graph DSL, models, the store, events and errors "
                             "(`import scaffold as sf`)."),
    "answers": ("scaffold.answers", "Answer kinds: how answers are read and compared (math, integer, multiple "
                                    "choice, free text, JSON), and multiple-choice rows."),
    "backends": ("scaffold.backends", "Backends, the `Model` that wraps them with limits and retries, "
                                      "and the model registry."),
    "store": ("scaffold.store", "The trajectory store: SQLite or PostgreSQL."),
    "evaluation": ("scaffold.evaluation", "Recorded, resumable evaluations; metrics, comparisons and plots."),
    "serve": ("scaffold.serve", "`scaffold serve`: any graph as an OpenAI-compatible model."),
    "cluster": ("scaffold.cluster", "Scale-out on Ray: clusters and replicated local engines."),
    "testing": ("scaffold.testing", "Test doubles that ship with the package: scripted backends, a real test "
                                    "server, faults, virtual time."),
    "tools": ("scaffold.tools", "Ready tools for agents: a calculator, a sandboxed Python executor, MCP servers' "
                                "tools, and tools by name."),
    "catalogue": ("scaffold.catalogue", "Topologies by name and models by spec, shared by the command line and "
                                        "the server."),
    "pocket": ("scaffold.pocket", "The pocket model: a tiny local reasoning model trained on the CPU."),
    "ui": ("scaffold.ui", "`scaffold ui`: the local web viewer's app and its pages' data."),
    "cli": ("scaffold.cli", "The `scaffold` command's entry point and the plugin types packages use to extend it."),
    "graphs": ("graphs", "Ready-made topologies: self-consistency, best-of-N, RSA, MoA, evolve, AggLM, "
                         "and the training graphs."),
    "trainers": ("trainers", "Set-RL training: rewards, credit schemes, the policy update and the loops."),
}
"""Page name -> (package, one-line description)."""

SECTIONS = {
    "_graph": "Graphs", "_builder": "Graphs", "_primitives": "Primitives", "_nodes": "Nodes",
    "_template": "Templates", "_rules": "Rules and set operations", "_judge": "Rules and set operations",
    "_control": "Loops",
    "_selectors": "Subset selectors", "_answers": "Answers", "_data": "Datasets", "_budget": "Budgets",
    "_limits": "Limits and time", "_clock": "Limits and time", "_throttle": "Limits and time",
    "_types": "Traces, requests and completions", "_result": "Traces, requests and completions",
    "_events": "Events", "_otel": "OpenTelemetry", "_errors": "Errors", "_tools": "Agents and tools",
    "_messages": "Traces, requests and completions",
}
"""For the big ``scaffold`` page: the defining module's last part -> its section (backends and store have their own)."""


def section_of(package: str, name: str) -> str:
    """The heading a public name goes under on its package's page."""
    value = getattr(importlib.import_module(package), name)
    module = getattr(value, "__module__", None) if callable(value) or isinstance(value, type) else None
    if package != "scaffold":
        return ""
    if module is None or not module.startswith("scaffold"):
        return "Events" if name in {"Event", "Subscriber"} else "Constants"
    if module.startswith("scaffold.backends"):
        return "Models and backends"
    if module.startswith("scaffold.store"):
        return "Store"
    return SECTIONS.get(module.rsplit(".", 1)[-1], "Other")


def page(name: str) -> str:
    """The Markdown of one reference page."""
    package, summary = PACKAGES[name]
    names = list(importlib.import_module(package).__all__)
    lines = [f"# `{package}`", "", summary, "",
             f"Every public name of `{package}` (its `__all__`), from its docstring.", ""]
    sections: dict[str, list[str]] = {}
    for public in names:
        sections.setdefault(section_of(package, public), []).append(public)
    for title, members in sections.items():
        if title:
            lines += [f"## {title}", ""]
        for public in members:
            lines += [f"::: {package}.{public}", ""]
    return "\n".join(lines).rstrip() + "\n"


def pages() -> dict[Path, str]:
    """Every reference page, by its path."""
    return {REFERENCE / f"{name}.md": page(name) for name in PACKAGES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the pages (default: list the stale ones)")
    stale = [path for path, text in pages().items() if not path.is_file() or path.read_text() != text]
    if parser.parse_args().write:
        REFERENCE.mkdir(parents=True, exist_ok=True)
        for path, text in pages().items():
            path.write_text(text)
    else:
        for path in stale:
            print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
