"""The floor plan: every module of ``scaffold/``, ``graphs/`` and ``trainers/`` has a layer, and imports point down.

:data:`FLOOR_PLAN` lists the layers from the ground up. A module may import modules of its own layer and of
the layers below it, never one above; the only upward imports are the named type-only ones
(:data:`TYPE_ONLY`, written under ``if TYPE_CHECKING:``). Besides the floor plan:

* no runtime import cycle (a module-level or function-local import; ``TYPE_CHECKING`` imports do not run);
* no module imports a private (``_``-named) attribute of another module (importing a ``_``-named *module* is fine);
* no ``import_module`` of a computed name, except where user code is loaded by name (:data:`DYNAMIC`).

Every ``.py`` file is parsed with :mod:`ast`; every import counts wherever it is written (module level,
inside functions, under ``TYPE_CHECKING``), relative imports are resolved, and
``importlib.import_module("...")`` with a literal name counts too. To see the edges yourself:
``python -m pytest tests/test_layers.py -q`` prints every one that breaks a rule, with file, line and statement.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scaffold", "graphs", "trainers")


@dataclass(frozen=True)
class Layer:
    """One floor: the modules on it (a dotted name covers a module or a whole package) and what they hold."""

    name: str
    members: tuple[str, ...]
    holds: str


PACKAGE = "scaffold"
"""The ``scaffold`` package's own ``__init__`` (the public namespace): on the plan as itself, not as a prefix."""

FLOOR_PLAN: tuple[Layer, ...] = (
    Layer("leaves", tuple(f"scaffold.{name}" for name in (
        "_types", "_secrets", "_clock", "_context", "_validation", "_errors", "_math_verify", "_answers", "_confidence",
        "_json", "_template", "_result", "_events", "_limits", "_throttle", "_rows", "_selectors", "_values", "_extras",
        "_openai_wire", "_messages", "_clusters", "_external", "answers",
    )), "value types, errors, secrets, clocks, limits, answer extraction and kinds, the OpenAI wire format: "
        "imported by every floor, importing only each other"),
    Layer("backends", ("scaffold.backends",), "requests in, completions out: no graphs, runs or store"),
    Layer("store", ("scaffold.store",), "recording and reading runs, whatever built or executed them"),
    Layer("dsl", tuple(f"scaffold.{name}" for name in (
        "_nodes", "_builder", "_primitives", "_rules", "_judge", "_control", "_data", "_budget", "_sync", "_tools",
        "tools",
    )), "what graphs are made of: nodes, primitives, rules, control flow, datasets, budgets"),
    Layer("calls", ("scaffold._run_context", "scaffold._call", "scaffold._agent", "scaffold._kinds",
                    "scaffold._jobs"),
          "how each node kind runs and how one model call is made, against a narrow run context"),
    Layer("runtime", tuple(f"scaffold.{name}" for name in (
        "_executor", "_graph", "_runner", "_graph_map", "_sizes", "_describe", "_otel", "_graph_tool",
    )), "the executor, the Graph object, runners of its rows, graph descriptions, OpenTelemetry"),
    Layer("evaluation", ("scaffold.evaluation",), "evaluations, reports and comparisons of recorded runs"),
    Layer("pocket", ("scaffold.pocket",), "the pocket model: its task, tokenizer, training and cache"),
    Layer("cluster", ("scaffold.cluster",), "scale-out on Ray: row workers, shared limits, engine pools"),
    Layer("catalogue", ("scaffold.catalogue",), "topologies by name (from plugins) and models by spec"),
    Layer("serve", ("scaffold.serve",), "graphs served as an OpenAI-compatible model"),
    Layer("ui", ("scaffold.ui",), "the local web view of a store"),
    Layer("package", (PACKAGE,), "the public namespace: re-exports the layers below"),
    Layer("testing", ("scaffold.testing",), "fakes, fault-injecting servers and fixtures built on the public API"),
    Layer("cli", ("scaffold.cli", "scaffold.__main__"), "the scaffold command line"),
    Layer("graphs", ("graphs",), "ready-made topologies; reach the command line as a plugin"),
    Layer("trainers", ("trainers",), "credit, updates and training loops; reach the command line as a plugin"),
)
"""The floor plan, from the ground up."""

TYPE_ONLY: Mapping[tuple[str, str], str] = {}
"""Upward imports allowed under ``if TYPE_CHECKING:`` only: (importer, target) -> why. None is needed today: the
narrow run context (:mod:`scaffold._run_context`) removed the last ones (node kinds typed against the executor)."""

DYNAMIC: Mapping[tuple[str, str], str] = {
    ("graphs.registry", "_user_topology"): "loads the user's own topology module, named on the command line",
    ("scaffold.tools._named", "_named"): "loads a tool named `module:attribute` in a config or on the command line",
}
"""(module, function) -> why it calls ``import_module`` with a computed name."""

DEBT: Mapping[tuple[str, str], str] = {}
"""Edges that break the plan today and are being removed: (importer, target) -> what removes them. The test fails
when one is no longer needed, so the list shrinks to nothing."""

CYCLE_DEBT: Mapping[tuple[str, ...], str] = {}
"""Runtime import cycles being removed (sorted modules) -> what removes them; the test fails when one is gone."""


@dataclass(frozen=True)
class Import:
    """One imported module: where the import is written and what it says."""

    path: str
    line: int
    source: str
    importer: str
    target: str
    type_only: bool = False
    """Written under ``if TYPE_CHECKING:`` (it never runs)."""
    function: str | None = None
    """The function the import is written in (``None``: module level)."""
    private: tuple[str, ...] = ()
    """The ``_``-named attributes it imports from the target (not submodules)."""


COMPUTED = "<computed>"
"""The target of an ``import_module`` whose argument is not a literal."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
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
    if isinstance(node, ast.Call) and node.args:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name in ("import_module", "__import__"):
            first = node.args[0]
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            return [first.value if literal else COMPUTED]  # type: ignore[attr-defined]
    return []


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id.endswith("TYPE_CHECKING")) or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST) -> Iterable[tuple[ast.AST, bool, str | None]]:
    """Every node with whether it sits under ``if TYPE_CHECKING:`` and the outermost function it is in."""
    stack: list[tuple[ast.AST, bool, str | None]] = [(tree, False, None)]
    while stack:
        node, type_only, function = stack.pop()
        yield node, type_only, function
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((child, True, function) for child in node.body)
            stack.extend((child, type_only, function) for child in node.orelse)
            continue
        inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and function is None \
            else function
        stack.extend((child, type_only, inner) for child in ast.iter_child_nodes(node))


def imports_of(path: Path, text: str | None = None) -> list[Import]:
    """Every import in the file at ``path`` (or in ``text``, read as if it were that file)."""
    text = path.read_text() if text is None else text
    module = _module_name(path)
    tree = ast.parse(text, filename=str(path))
    found = []
    for node, type_only, function in _walk(tree):
        for target in dict.fromkeys(_targets(node, module, path.name == "__init__.py")):
            source = ast.get_source_segment(text, node) or ast.unparse(node)
            private: tuple[str, ...] = ()
            if isinstance(node, ast.ImportFrom) and target != module:  # `from target import _name`, not a module
                private = tuple(a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                                and not _is_module(f"{target}.{a.name}") and not target.endswith("." + a.name))
            found.append(Import(str(path.relative_to(ROOT)), getattr(node, "lineno", 0), " ".join(source.split()),
                                module, target, type_only, function, private))
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    """The floor (index into :data:`FLOOR_PLAN`) of ``module``: its longest member prefix; ``None``: not on the plan."""
    best: tuple[int, int] | None = None
    for index, layer in enumerate(FLOOR_PLAN):
        for member in layer.members:
            hit = module == member if member == PACKAGE else _under(module, member)
            if hit and (best is None or len(member) > best[1]):
                best = (index, len(member))
    return None if best is None else best[0]


def _pair(table: Mapping[tuple[str, str], str], importer: str, target: str) -> bool:
    return any(_under(importer, a) and _under(target, b) for a, b in table)


def violations(found: Iterable[Import], debt: Mapping[tuple[str, str], str] = DEBT,
               type_only: Mapping[tuple[str, str], str] = TYPE_ONLY) -> list[str]:
    """One line per import against the rules: ``file:line: `statement` ...: why``. ``debt`` lists the edges
    excused for now, ``type_only`` the upward imports allowed under ``TYPE_CHECKING``."""
    lines = []
    for item in found:
        if item.target == COMPUTED:
            if (item.importer, item.function or "") not in DYNAMIC:
                lines.append(f"{item.path}:{item.line}: `{item.source}` imports a computed name: the floor plan "
                             f"cannot see what it loads (name the module, or list the function in DYNAMIC)")
            continue
        if item.target.split(".")[0] not in PACKAGES or _pair(debt, item.importer, item.target):
            continue
        if item.private and item.target != item.importer:
            lines.append(f"{item.path}:{item.line}: `{item.source}` imports private {', '.join(item.private)} of "
                         f"{item.target}: make it public in its module, or move it where both can reach it")
        low, high = layer_of(item.importer), layer_of(item.target)
        if low is None or high is None or high <= low:
            continue
        if item.type_only and _pair(type_only, item.importer, item.target):
            continue
        lines.append(f"{item.path}:{item.line}: `{item.source}` imports {item.target} "
                     f"({FLOOR_PLAN[high].name}) from {FLOOR_PLAN[low].name}: {FLOOR_PLAN[low].name} holds "
                     f"{FLOOR_PLAN[low].holds}; {FLOOR_PLAN[high].name} is above it")
    return sorted(set(lines))


def cycles(found: Iterable[Import]) -> list[list[str]]:
    """The runtime import cycles among modules (strongly connected components of two or more modules), each
    sorted; ``TYPE_CHECKING`` imports do not run and are left out."""
    edges: dict[str, set[str]] = {}
    for item in found:
        if not item.type_only and item.target != COMPUTED and item.target != item.importer:
            edges.setdefault(item.importer, set()).add(item.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            connect(module)
    return sorted(out)


@functools.cache
def all_imports() -> list[Import]:
    return [item for path in _files() for item in imports_of(path)]


def _files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_every_module_is_on_the_floor_plan():
    """A new module must be given a layer: the plan covers the whole tree, and no member names a missing module."""
    missing = [_module_name(path) for path in _files() if layer_of(_module_name(path)) is None]
    assert not missing, f"modules with no layer in FLOOR_PLAN: {missing}"
    stale = [m for layer in FLOOR_PLAN for m in layer.members if m != "scaffold.__main__" and not _is_module(m)]
    assert not stale, f"FLOOR_PLAN names modules that do not exist: {stale}"


def test_imports_point_down_the_floor_plan():
    """No module imports a layer above it (the named type-only imports aside), a private name of another module,
    or a computed module name."""
    found = all_imports()
    assert not violations(found), "imports against the floor plan:\n" + "\n".join(violations(found))


def test_every_excused_edge_still_exists():
    """Each DEBT entry excuses an import that is still there (remove the entry when the import goes), and each
    TYPE_ONLY and DYNAMIC entry is used."""
    found = all_imports()
    unused = [pair for pair in DEBT if not violations([i for i in found if _pair({pair: ""}, i.importer, i.target)],
                                                      debt={})]
    assert not unused, f"DEBT entries no longer needed: {unused}"
    upward = [i for i in found if i.type_only and violations([i], debt={}, type_only={})]
    assert all(any(_under(i.importer, x) and _under(i.target, y) for i in upward) for x, y in TYPE_ONLY)
    assert set(DYNAMIC) <= {(i.importer, i.function) for i in found if i.target == COMPUTED}


def test_no_runtime_import_cycle():
    """No group of modules imports itself round at run time (function-local imports count; type-only ones don't)."""
    found = all_imports()
    ring = [cycle for cycle in cycles(found) if tuple(cycle) not in CYCLE_DEBT]
    assert not ring, "runtime import cycles:\n" + "\n".join(" -> ".join(c) for c in ring)
    gone = [cycle for cycle in CYCLE_DEBT if list(cycle) not in cycles(found)]
    assert not gone, f"CYCLE_DEBT entries no longer needed: {gone}"


def test_the_scan_sees_the_imports_it_checks():
    """The scan is not vacuous: it reads every package and finds imports known to exist, lazy ones included."""
    found = all_imports()
    files = {item.path for item in found}
    assert len(files) > 100 and all(any(f.startswith(p + "/") for f in files) for p in PACKAGES)
    pairs = {(item.importer, item.target, item.type_only) for item in found}
    assert ("graphs.registry", "scaffold", False) in pairs  # module level, `import scaffold as sf`
    assert ("trainers.cli", "trainers.loop", False) in pairs  # inside a function
    assert ("scaffold._describe", "scaffold._graph", True) in pairs  # under TYPE_CHECKING
    assert ("scaffold.store._export", "scaffold.store._codec", False) in pairs  # `from scaffold.store import _codec`


WRONG_WAY = [
    ("scaffold/_graph.py", "from scaffold.cluster._map import map_on_cluster\n", "scaffold.cluster._map"),
    ("scaffold/serve/_served.py", "def f():\n    from scaffold.cli._options import build\n", "scaffold.cli._options"),
    ("scaffold/backends/_openai.py", "from scaffold.cluster import Cluster\n", "scaffold.cluster"),
    ("scaffold/backends/_openai.py", "from scaffold.serve import serve\n", "scaffold.serve"),
    ("scaffold/store/_store.py", "from scaffold.ui import open_ui\n", "scaffold.ui"),
    ("scaffold/_executor.py", "from scaffold.evaluation import evaluate\n", "scaffold.evaluation"),
    ("scaffold/_kinds/call.py", "def f():\n    import scaffold.cli\n", "scaffold.cli"),
    ("scaffold/_call.py", "from scaffold._executor import Run\n", "scaffold._executor"),
    ("scaffold/backends/_model.py", "from scaffold.testing import ScriptedBackend\n", "scaffold.testing"),
    ("scaffold/backends/_model.py", "from scaffold._graph import Graph\n", "scaffold._graph"),
    ("scaffold/pocket/_tokenizer.py", "from scaffold.testing._tiny_model import SPECIAL_TOKENS\n",
     "scaffold.testing._tiny_model"),
    ("scaffold/_graph.py",
     "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from scaffold.serve import Served\n",
     "scaffold.serve"),
    ("scaffold/__init__.py", "import graphs\n", "graphs"),
    ("graphs/rsa.py", "def f():\n    from trainers.loop import train_online\n", "trainers.loop"),
]
"""Wrong-way imports the plan must refuse (each written into a real module's place)."""


@pytest.mark.parametrize("path, source, target", WRONG_WAY, ids=[f"{p}->{t}" for p, _, t in WRONG_WAY])
def test_each_wrong_way_import_is_refused_with_file_line_and_statement(path, source, target):
    """Fed to the checker as if written in ``path``, each wrong-way import is reported, naming the file, the
    line and the statement, and both layers."""
    found = imports_of(ROOT / path, source)
    assert target in {item.target for item in found}
    (message,) = violations(found, debt={})
    line = source.splitlines()[-1].strip()
    number = len(source.splitlines())
    assert message.startswith(f"{path}:{number}: `{line}` imports {target} (")
    assert f"from {FLOOR_PLAN[layer_of(_module_name(ROOT / path))].name}:" in message  # type: ignore[index]


@pytest.mark.parametrize("source, why", [
    ("import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n", "computed name"),
    ("from scaffold._graph_map import _row_reader\n", "private _row_reader"),
    ("from scaffold._context import _RUN_ID\n", "private _RUN_ID"),
])
def test_computed_imports_and_private_names_are_refused(source, why):
    """An ``import_module`` of a computed name, and a private name of another module, are reported."""
    found = imports_of(ROOT / "scaffold" / "cluster" / "_map.py", source)
    (message,) = violations(found, debt={})
    assert why in message


def test_a_private_module_by_name_and_a_relative_import_are_read_right():
    """``from scaffold.store import _codec`` imports a module (allowed); ``from .. import _graph`` resolves."""
    found = imports_of(ROOT / "scaffold" / "store" / "_export.py", "from scaffold.store import _codec\n")
    assert not violations(found, debt={})
    (item,) = imports_of(ROOT / "scaffold" / "backends" / "_example.py", "from .. import _graph\n")
    assert item.target == "scaffold._graph" and violations([item], debt={})


def test_a_named_type_only_exemption_allows_the_annotation_and_nothing_else():
    """An upward import listed in a type-only table passes under ``TYPE_CHECKING``, and is refused when it runs."""
    allowed = {("scaffold._kinds", "scaffold._executor"): "an annotation"}
    typed = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from scaffold._executor import Run\n"
    found = imports_of(ROOT / "scaffold" / "_kinds" / "map.py", typed)
    assert violations(found, debt={}, type_only=allowed) == []
    assert len(violations(found, debt={}, type_only={})) == 1
    runs = imports_of(ROOT / "scaffold" / "_kinds" / "map.py", "from scaffold._executor import Run\n")
    assert len(violations(runs, debt={}, type_only=allowed)) == 1


def test_cycles_are_found_and_type_only_imports_break_none():
    """A three-module ring is a cycle; the same ring with one edge under TYPE_CHECKING is not."""
    ring = [Import("a.py", 1, "", "pkg.a", "pkg.b"), Import("b.py", 1, "", "pkg.b", "pkg.c"),
            Import("c.py", 1, "", "pkg.c", "pkg.a"), Import("d.py", 1, "", "pkg.d", "pkg.a")]
    assert cycles(ring) == [["pkg.a", "pkg.b", "pkg.c"]]
    ring[2] = Import("c.py", 1, "", "pkg.c", "pkg.a", type_only=True)
    assert cycles(ring) == []
