"""Imports point one way: scaffold ← graphs ← trainers ← their command-line plugins; backends and store below the DSL.

Every ``.py`` file of ``scaffold/``, ``graphs/`` and ``trainers/`` is parsed with :mod:`ast`; every
import counts wherever it is written (module level, inside functions, under ``TYPE_CHECKING``),
relative imports are resolved, and ``importlib.import_module("...")`` with a literal name counts too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scaffold", "graphs", "trainers")

DSL = tuple(f"scaffold.{name}" for name in (
    "_graph", "_graph_map", "_builder", "_primitives", "_rules", "_control", "_nodes", "_kinds", "_executor",
    "_call", "_describe", "_selectors", "_sizes",
))
"""The DSL and the executor: what builds and runs graphs."""


@dataclass(frozen=True)
class Rule:
    """Modules under ``importer`` must not import any module under ``forbidden`` (a name or a dotted prefix)."""

    importer: str
    forbidden: tuple[str, ...]
    why: str


RULES = (
    Rule("scaffold", ("graphs", "trainers"),
         "scaffold (its command line included) is below graphs and trainers; they reach the CLI as plugins"),
    Rule("graphs", ("trainers",), "graphs is below trainers"),
    Rule("scaffold.backends", ("scaffold.store", *DSL, "scaffold.cli", "scaffold.evaluation", "scaffold.pocket"),
         "backends turn requests into completions and know nothing of graphs, runs or the store"),
    Rule("scaffold.store", (*DSL, "scaffold.cli", "scaffold.evaluation", "scaffold.pocket"),
         "the store records runs without depending on how graphs are built or executed"),
    Rule("scaffold._secrets", ("scaffold",), "a leaf: every layer imports the credential lists from it"),
    Rule("scaffold._json", ("scaffold.store", "scaffold.backends", *DSL),
         "the one JSON normaliser: only the value types (_types, _template) below it"),
)

BARE_PACKAGE = {"scaffold.backends", "scaffold.store"}
"""Importers that must not import the ``scaffold`` package itself: its namespace re-exports the DSL."""


@dataclass(frozen=True)
class Import:
    """One imported module: where the import is written and what it says."""

    path: str
    line: int
    source: str
    importer: str
    target: str


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The modules an import statement (or an ``import_module("...")`` call) loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[: len(package) - node.level + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        # `from package import name`: the submodule when there is one, else the package's namespace
        return [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def imports_of(path: Path, text: str | None = None) -> list[Import]:
    """Every import in the file at ``path`` (or in ``text``, read as if it were that file)."""
    text = path.read_text() if text is None else text
    module = _module_name(path)
    tree = ast.parse(text, filename=str(path))
    found = []
    for node in ast.walk(tree):
        for target in dict.fromkeys(_targets(node, module, path.name == "__init__.py")):
            source = ast.get_source_segment(text, node) or ast.unparse(node)
            found.append(Import(str(path.relative_to(ROOT)), getattr(node, "lineno", 0), " ".join(source.split()),
                                module, target))
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(found: list[Import]) -> list[str]:
    """One line per forbidden import: ``file:line: `import ...` imports X; why``."""
    lines = []
    for item in found:
        for rule in RULES:
            if not _under(item.importer, rule.importer):
                continue
            hit = next((f for f in rule.forbidden if _under(item.target, f)), None)
            if hit is not None:
                lines.append(f"{item.path}:{item.line}: `{item.source}` imports {item.target}: {rule.why}")
        if item.target == "scaffold" and any(_under(item.importer, p) for p in BARE_PACKAGE):
            lines.append(f"{item.path}:{item.line}: `{item.source}` imports the scaffold package (it re-exports "
                         f"the DSL); import the defining module instead")
    return sorted(set(lines))


def all_imports() -> list[Import]:
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return [item for path in files for item in imports_of(path)]


def test_imports_point_one_way():
    """No module imports a layer above it: scaffold never imports graphs/trainers, graphs never trainers,
    backends and the store never the DSL, executor or each other's upper layers."""
    found = all_imports()
    assert not violations(found), "imports against the layering:\n" + "\n".join(violations(found))


def test_the_scan_sees_the_imports_it_checks():
    """The scan is not vacuous: it reads every package and finds imports known to exist, lazy ones included."""
    found = all_imports()
    files = {item.path for item in found}
    assert len(files) > 100 and all(any(f.startswith(p + "/") for f in files) for p in PACKAGES)
    pairs = {(item.importer, item.target) for item in found}
    assert ("graphs.registry", "scaffold") in pairs  # module level, `import scaffold as sf`
    assert ("trainers.cli", "trainers.loop") in pairs  # inside a function
    assert ("scaffold._describe", "scaffold._graph") in pairs  # under TYPE_CHECKING
    assert ("scaffold.store._export", "scaffold.store._codec") in pairs  # `from scaffold.store import _codec`


@pytest.mark.parametrize("source, line, target", [
    ("import graphs\n", 1, "graphs"),
    ("def f():\n    from trainers.loop import train_online\n", 2, "trainers.loop"),
    ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from graphs.registry import topology\n", 4,
     "graphs.registry"),
    ("import importlib\n\nimportlib.import_module('trainers.cli')\n", 3, "trainers.cli"),
    ("from .. import _graph\n", 1, "scaffold._graph"),
    ("from ..store import _codec\n", 1, "scaffold.store._codec"),
    ("from scaffold import Graph\n", 1, "scaffold"),
])
def test_a_forbidden_import_is_reported_with_file_line_and_statement(source, line, target):
    """Each way of writing a forbidden import is caught, and the message names the file, line and statement."""
    found = imports_of(ROOT / "scaffold" / "backends" / "_example.py", source)
    assert target in {item.target for item in found}
    (message,) = violations(found)
    statement = source.splitlines()[line - 1].strip()
    assert message.startswith(f"scaffold/backends/_example.py:{line}: `{statement}` imports ")
