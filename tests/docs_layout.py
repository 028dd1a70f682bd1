"""The docs' layout page, made from the floor plan (``tests/test_layers.py``) and each module's own docstring.

``docs/layout.md`` lists every module of ``scaffold/``, ``graphs/`` and ``trainers/`` on its floor, with the first
sentence of its docstring, and ends with where to add each kind of thing. ``tests/test_docs.py`` fails when the
committed page differs from what this makes (a module added, moved or re-described), so after such a change run
``python tests/docs_layout.py --write``.
"""

# ruff: noqa: E501  (the where-to-add table is markdown: one row per line)
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "layout.md"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_layers import FLOOR_PLAN, PACKAGES, _module_name, layer_of  # noqa: E402

HEADER = """# Layout

<!-- Made by `python tests/docs_layout.py --write` from the floor plan in tests/test_layers.py and each module's
docstring: edit those, not this page. -->

Every module sits on one floor of the plan below, from the ground up. A module imports modules of its own
floor and of the floors below, never one above; there is no import cycle and no module imports a private
(`_`-named) name of another. `tests/test_layers.py` checks all of it, with every import counted wherever it is
written (module level, inside a function, under `TYPE_CHECKING`). Names starting with `_` are implementation:
each package's public surface is its `__all__` (see the [API reference](reference/scaffold.md)).
"""

WHERE_TO_ADD = """## Where to add things

Every file each one needs, in the order to write them:

| to add | files | what goes there |
|---|---|---|
| a node kind | `scaffold/_nodes.py` | a `Node` subclass: what it reads (`reads`), its output size (`size_given`), its model calls (`calls`) |
| | `scaffold/_kinds/<kind>.py` | a function decorated `@expands(YourNode)` that creates the node's slots and schedules its jobs, typed against `RunContext` (`scaffold/_run_context.py`), never the executor |
| | `scaffold/_kinds/__init__.py` | import the new module, so it registers |
| | `scaffold/_primitives.py`, `scaffold/_rules.py` or `scaffold/_control.py` | the function users call inside `@sf.graph` to add the node |
| | `scaffold/_sizes.py`, `scaffold/_describe.py` | only when its sizes need a check the inputs decide, or its description differs from the default |
| | `scaffold/__init__.py` | export the user-facing function in `__all__`, then `python tests/docs_reference.py --write` |
| a backend | `scaffold/backends/_<name>.py` | a class with `capabilities`, `async complete(request)` (and `stream(request)` when it declares `streams`), `provider` (what OpenTelemetry reports) and `settings` (the registry keys its constructor takes); `from_spec(model, options)` if a model string needs translating |
| | `scaffold/backends/_registry.py` | one line in `BACKENDS`: the kind's name and the class |
| | `scaffold/backends/__init__.py`, `scaffold/__init__.py` | export the class |
| a layer around model calls | `scaffold/_call.py` | a function from a `Send` to a `Send`, added in `sender` |
| a CLI command | `scaffold/cli/_<command>.py` | a click command; errors raise Scaffold's own exceptions (the root group prints them as one line) or click's |
| | `scaffold/cli/_main.py` | `main.add_command(...)` and a line in the module docstring's usage list |
| | `docs/reference/cli.md` | nothing: it is generated from the commands' help |
| a CLI command from another package | that package's `cli.py`, its `pyproject.toml` | a `register(registry)` function calling `registry.add_command(...)`, named in `[project.entry-points."scaffold.cli"]` (`trainers/cli.py` does this) |
| a served endpoint | `scaffold/serve/_wire.py` | the request body's pydantic schema (strict, unknown fields refused) |
| | `scaffold/_openai_wire.py` | the response's shapes, when it speaks OpenAI's wire format (the test server uses them too) |
| | `scaffold/serve/_responses.py` or `scaffold/serve/_stream.py` | building the body (or the event stream) from the runs |
| | `scaffold/serve/_app.py` | the handler and its route in `create_app` |
| | `scaffold/serve/_errors.py` | the status of each new error, if any |
| a topology | `graphs/<name>.py`, `graphs/registry.py` | an `@sf.graph` function with `n` and `k` for its sample and subset sizes; add it to `TOPOLOGIES` |
| a credit scheme | `trainers/credit.py` | `fn(traces, rewards, **options) -> list[Credited]`, registered with `register_scheme(name, fn)` |
| a rollout source | `trainers/<name>.py` | a class with the `RolloutSource` methods (`trainers/rollouts.py`); pass it as `train_online(..., rollouts=...)` |
| a runner (where `Graph.map`'s rows run) | any module above the runtime floor | a class with `map(request: MapRequest)` (`scaffold/_runner.py`); pass it as `graph.map(..., runner=...)` |
| a module anywhere | its file, `tests/test_layers.py` | a docstring whose first sentence says what it holds; a floor in `FLOOR_PLAN` if it is a new top-level module |
"""


def first_sentence(path: Path) -> str:
    """The first sentence of the module's docstring (its first paragraph up to the first period that ends one)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    found = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    text = (found.group(1) if found else paragraph).rstrip(":")
    text = re.sub(r":[a-z]+:`~?(?:[\w.]*\.)?([^`.]+)`", r"`\1`", text)  # :class:`~scaffold.Model` -> `Model`
    text = re.sub(r"``([^`]+)``", r"`\1`", text).replace("|", "\\|")
    return text or "(no docstring)"


def files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def page() -> str:
    """The whole page."""
    by_floor: dict[int, list[Path]] = {}
    for path in files():
        floor = layer_of(_module_name(path))
        if floor is None:
            raise SystemExit(f"{path.relative_to(ROOT)} has no floor in FLOOR_PLAN (tests/test_layers.py)")
        by_floor.setdefault(floor, []).append(path)
    lines = [HEADER, "## The floor plan", "", "| floor | holds | modules |", "|---|---|---|"]
    for index, layer in enumerate(FLOOR_PLAN):
        lines.append(f"| {index} {layer.name} | {layer.holds} | {len(by_floor.get(index, []))} |")
    lines += ["", "## Modules, floor by floor", ""]
    for index, layer in enumerate(FLOOR_PLAN):
        lines += [f"### {index} {layer.name}", "", f"{layer.holds[0].upper()}{layer.holds[1:]}.", "",
                  "| module | what it holds |", "|---|---|"]
        for path in by_floor.get(index, []):
            lines.append(f"| `{path.relative_to(ROOT)}` | {first_sentence(path)} |")
        lines.append("")
    lines.append(WHERE_TO_ADD)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="write docs/layout.md (default: say whether it is stale)")
    args = parser.parse_args()
    made = page()
    if args.write:
        PAGE.write_text(made)
        print(f"wrote {PAGE.relative_to(ROOT)}")
    elif PAGE.read_text() != made:
        raise SystemExit(f"{PAGE.relative_to(ROOT)} is stale: run python tests/docs_layout.py --write")


if __name__ == "__main__":
    main()
