"""The suite checks itself: every test can fail.

An AST scan of every ``tests/test_*.py`` file reports

* a test function (``test*``, sync or async, at module level or in a class) that cannot fail: its own body
  has no ``assert``, no ``pytest.raises``/``pytest.warns``/``pytest.deprecated_call`` (as a ``with`` or a call),
  no ``pytest.fail`` and no ``raise AssertionError``, and it calls no function defined in ``tests/`` (in its own
  file, nested in the test, or imported from a helper module such as ``helpers.py``) whose own body does one of
  those (one level deep: a helper that only calls another helper does not count);
* ``contextlib.suppress`` used as a ``with`` inside a test function, where it would hide the failure of the call
  under test. A ``finally:`` block (cleanup) may use it, and so may fixtures and helpers that are not tests.

:func:`check_source` is the checker's core: source text in, findings out (``file:line:function: why``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

RAISES = frozenset({"raises", "warns", "deprecated_call"})
"""pytest's context managers (or calls) that fail the test when the expected exception or warning is missing."""
FAILS = frozenset({"fail"})
"""``pytest.fail(...)``: an explicit failure is an assertion too."""
SUPPRESS = "suppress"

ALLOWED_SUPPRESS = {
    ("tests/test_serve_hardening.py", "test_idle_and_slow_header_connections_are_closed"):
        "the suppress is in the slowloris thread that drips header lines until the server hangs up: its sendall "
        "failing with OSError is the expected end of the drip, not the call under test, which is "
        "receive_until_closed() and is asserted (moving drip() to a module-level helper would make this entry "
        "unnecessary)",
}
"""Genuine false positives of the suppress check: (file, test) -> why the suppressed code is not under test."""

Nested = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef


# -- what one function's own body does --------------------------------------------------------------------------


def own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """Every node of ``function``'s own body: nested functions, lambdas and classes are not entered (they are
    functions of their own, which count only where they are called)."""
    stack: list[ast.AST] = [statement for statement in reversed(function.body) if not isinstance(statement, Nested)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in reversed(list(ast.iter_child_nodes(node))) if not isinstance(child, Nested))


def _pytest_member(func: ast.expr, names: frozenset[str], bare: frozenset[str]) -> bool:
    """``pytest.NAME`` for NAME in ``names``, or a bare NAME imported from pytest (``bare``)."""
    if isinstance(func, ast.Attribute):
        return func.attr in names and isinstance(func.value, ast.Name) and func.value.id == "pytest"
    return isinstance(func, ast.Name) and func.id in names and func.id in bare


def asserts_itself(function: ast.FunctionDef | ast.AsyncFunctionDef, from_pytest: frozenset[str] = frozenset()) \
        -> bool:
    """Whether ``function``'s own body asserts: ``assert``, ``pytest.raises``/``warns``/``deprecated_call`` (with or
    call), ``pytest.fail`` or ``raise AssertionError``."""
    for node in own_nodes(function):
        if isinstance(node, ast.Assert) and not (isinstance(node.test, ast.Constant) and node.test.value):
            return True  # `assert True` (or any true constant) cannot fail
        if isinstance(node, ast.Call) and _pytest_member(node.func, RAISES | FAILS, from_pytest):
            return True
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id == "AssertionError":
                return True
    return False


# -- a module's functions and imports ----------------------------------------------------------------------------


@dataclass
class Module:
    """What the checker needs to know of one file."""

    tree: ast.Module
    from_pytest: frozenset[str]
    """Names imported with ``from pytest import ...``."""
    contextlib_names: frozenset[str]
    """Names under which ``contextlib.suppress`` is reachable as a bare name (``from contextlib import suppress``)."""
    asserting: set[str] = field(default_factory=set)
    """Functions and methods defined anywhere in the file (nested ones too) whose own body asserts."""
    asserting_methods: set[str] = field(default_factory=set)
    """The subset of :attr:`asserting` that are methods of a class."""
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Local name -> (module, name) for ``from M import name`` with M a module of ``tests/``."""
    modules: dict[str, str] = field(default_factory=dict)
    """Local name -> module, for ``import M`` with M a module of ``tests/``."""


def parse(source: str, test_modules: frozenset[str] = frozenset()) -> Module:
    """Parse ``source`` and collect its asserting functions and its imports from ``test_modules`` (stems)."""
    tree = ast.parse(source)
    from_pytest: set[str] = set()
    suppress_names: set[str] = set()
    imported: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "pytest":
                    from_pytest.add(local)
                elif node.module == "contextlib" and alias.name == SUPPRESS:
                    suppress_names.add(local)
                elif node.module in test_modules:
                    imported[local] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in test_modules:
                    modules[alias.asname or alias.name] = alias.name
    module = Module(tree, frozenset(from_pytest), frozenset(suppress_names), imported=imported, modules=modules)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and \
                        asserts_itself(member, module.from_pytest):
                    module.asserting_methods.add(member.name)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and asserts_itself(node, module.from_pytest):
            module.asserting.add(node.name)
    return module


# -- the checks -------------------------------------------------------------------------------------------------


def collected_tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions pytest collects as tests: ``test*`` at module level or in a (module-level) class."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and member.name.startswith("test"):
                    yield member


def calls_an_asserting_helper(function: ast.FunctionDef | ast.AsyncFunctionDef, module: Module,
                              shared: Mapping[str, Module]) -> bool:
    """Whether ``function`` calls a function of ``tests/`` whose own body asserts (one level deep)."""
    methods_elsewhere = {name for m in module.modules.values() if m in shared for name in shared[m].asserting_methods}
    for source in {source for source, _ in module.imported.values() if source in shared}:
        methods_elsewhere |= shared[source].asserting_methods
    for node in own_nodes(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in module.asserting:
                return True
            origin = module.imported.get(func.id)
            if origin is not None and origin[0] in shared and origin[1] in shared[origin[0]].asserting:
                return True
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if owner in module.modules and module.modules[owner] in shared and \
                    func.attr in shared[module.modules[owner]].asserting:
                return True
            # a method call (self.check(), receiver.expect(...)): its class is one of tests/
            if owner not in module.modules and func.attr in (module.asserting_methods | methods_elsewhere):
                return True
    return False


def _is_suppress(expr: ast.expr, module: Module) -> bool:
    call = expr.func if isinstance(expr, ast.Call) else expr
    if isinstance(call, ast.Attribute):
        return call.attr == SUPPRESS and isinstance(call.value, ast.Name) and call.value.id == "contextlib"
    return isinstance(call, ast.Name) and (call.id in module.contextlib_names or call.id == SUPPRESS)


def suppressions(function: ast.FunctionDef | ast.AsyncFunctionDef, module: Module) -> Iterator[ast.AST]:
    """The ``with suppress(...)`` statements in ``function`` (nested functions included) outside ``finally:``."""

    def visit(node: ast.AST) -> Iterator[ast.AST]:
        if isinstance(node, ast.With | ast.AsyncWith) and any(_is_suppress(i.context_expr, module)
                                                               for i in node.items):
            yield node
        for name, value in ast.iter_fields(node):
            if name == "finalbody":  # cleanup may swallow what it must
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if isinstance(child, ast.AST):
                    yield from visit(child)

    for statement in function.body:
        yield from visit(statement)


def check_source(source: str, path: str = "<test>", shared: Mapping[str, Module] | None = None,
                 test_modules: frozenset[str] = frozenset(),
                 allowed: Mapping[tuple[str, str], str] = ALLOWED_SUPPRESS) -> list[str]:
    """Findings for one test file's ``source``, each ``path:line:function: why``.

    ``shared`` maps each module of ``tests/`` that a test may import helpers from (``helpers``, ``openai_helpers``...)
    to its :func:`parse`; ``test_modules`` names every module of ``tests/`` (imports from others are not helpers);
    ``allowed`` lists the tests whose suppress is a known false positive (:data:`ALLOWED_SUPPRESS`).
    """
    shared = shared or {}
    module = parse(source, test_modules | frozenset(shared))
    findings = []
    for function in collected_tests(module.tree):
        if not (asserts_itself(function, module.from_pytest) or calls_an_asserting_helper(function, module, shared)):
            findings.append(f"{path}:{function.lineno}:{function.name}: asserts nothing (no assert, no pytest.raises, "
                            "no call to a helper of tests/ that asserts)")
        for statement in suppressions(function, module):
            if (path, function.name) in allowed:
                continue
            findings.append(f"{path}:{statement.lineno}:{function.name}: contextlib.suppress inside a test hides "
                            "whether the call under test failed")
    return findings


def helper_modules(directory: Path = TESTS) -> dict[str, Module]:
    """Every module of ``directory`` that is not a test file, parsed: the helpers tests may call."""
    stems = frozenset(p.stem for p in directory.glob("*.py"))
    return {p.stem: parse(p.read_text(), stems) for p in sorted(directory.glob("*.py"))
            if not p.name.startswith("test_")}


def check_tree(directory: Path = TESTS, allowed: Mapping[tuple[str, str], str] = ALLOWED_SUPPRESS) -> list[str]:
    """Findings over every ``test_*.py`` file of ``directory``."""
    shared = helper_modules(directory)
    stems = frozenset(p.stem for p in directory.glob("*.py"))
    findings = []
    for path in sorted(directory.glob("test_*.py")):
        findings += check_source(path.read_text(), path.relative_to(directory.parent).as_posix(), shared, stems,
                                 allowed)
    return findings


# -- the checker fails where it must ------------------------------------------------------------------------------


HELPERS = {"helpers": parse("def expect_two(x):\n    assert x == 2\n\n\ndef make_two():\n    return 2\n\n\n"
                            "def indirect(x):\n    expect_two(x)\n")}


def check(source: str) -> list[str]:
    return check_source(source, "tests/test_planted.py", HELPERS)


@pytest.mark.parametrize("source", [
    pytest.param("def test_nothing():\n    compute(2)\n", id="no-assert"),
    pytest.param("async def test_nothing():\n    await compute(2)\n", id="async-no-assert"),
    pytest.param("class TestThings:\n    def test_nothing(self):\n        compute(2)\n", id="method-no-assert"),
    pytest.param("def make(x):\n    return x\n\n\ndef test_helper_does_not_assert():\n    make(compute(2))\n",
                 id="local-helper-without-assert"),
    pytest.param("from helpers import make_two\n\n\ndef test_helper_does_not_assert():\n    make_two()\n",
                 id="imported-helper-without-assert"),
    pytest.param("from helpers import indirect\n\n\ndef test_two_levels_down():\n    indirect(2)\n",
                 id="assert-two-levels-down"),
    pytest.param("def test_nested_but_never_called():\n    def check():\n        assert compute(2) == 2\n",
                 id="nested-assert-never-called"),
    pytest.param("def test_approx_only():\n    pytest.approx(compute(2))\n", id="approx-is-not-an-assert"),
    pytest.param("def test_always():\n    compute(2)\n    assert True\n", id="assert-True"),
    pytest.param("def expect_two(x):\n    assert x == 2\n\n\ndef test_named_like_a_helper():\n"
                 "    other.expect_two(2)\n", id="same-name-on-another-object"),
])
def test_the_checker_flags_a_test_that_cannot_fail(source: str) -> None:
    """A test with no assertion of its own and no asserting helper (one level deep) is reported, with its line."""
    (finding,) = check(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if " def test" in f" {text}")
    assert finding.startswith(f"tests/test_planted.py:{line}:test_") and "asserts nothing" in finding


@pytest.mark.parametrize("source", [
    pytest.param("import contextlib\n\n\ndef test_quietly():\n    with contextlib.suppress(ValueError):\n"
                 "        assert compute(2) == 2\n", id="contextlib.suppress"),
    pytest.param("from contextlib import suppress\n\n\nasync def test_quietly():\n    with suppress(Exception):\n"
                 "        await compute(2)\n    assert done\n", id="bare-suppress"),
    pytest.param("from contextlib import suppress as quiet\n\n\ndef test_quietly():\n    try:\n"
                 "        with quiet(OSError):\n            compute(2)\n    except KeyError:\n        pass\n"
                 "    assert done\n", id="aliased-suppress-in-try"),
    pytest.param("import contextlib\n\n\ndef test_quietly():\n    def go():\n"
                 "        with contextlib.suppress(OSError):\n            compute(2)\n    go()\n    assert done\n",
                 id="suppress-in-a-nested-function"),
])
def test_the_checker_flags_suppress_around_the_call_under_test(source: str) -> None:
    """``suppress`` as a ``with`` inside a test is reported at its line, whatever else the test asserts."""
    findings = check(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "with " in text)
    assert [f for f in findings if "suppress" in f] == [
        f"tests/test_planted.py:{line}:test_quietly: contextlib.suppress inside a test hides whether the call "
        "under test failed"]


@pytest.mark.parametrize("source", [
    pytest.param("def test_asserts():\n    assert compute(2) == 2\n", id="assert"),
    pytest.param("async def test_asserts():\n    async with client() as c:\n        assert await c.get() == 2\n",
                 id="async-assert"),
    pytest.param("import pytest\n\n\ndef test_raises():\n    with pytest.raises(ValueError, match='two'):\n"
                 "        compute(2)\n", id="pytest.raises"),
    pytest.param("import pytest\n\n\ndef test_raises():\n    pytest.raises(ValueError, compute, 2)\n",
                 id="pytest.raises-call"),
    pytest.param("from pytest import warns\n\n\ndef test_warns():\n    with warns(UserWarning):\n        compute(2)\n",
                 id="bare-warns"),
    pytest.param("import pytest\n\n\ndef test_fails():\n    if compute(2) != 2:\n        pytest.fail('not two')\n",
                 id="pytest.fail"),
    pytest.param("def test_raises_assertion():\n    if compute(2) != 2:\n        raise AssertionError('not two')\n",
                 id="raise-AssertionError"),
    pytest.param("from helpers import expect_two\n\n\ndef test_helper():\n    expect_two(compute(2))\n",
                 id="imported-asserting-helper"),
    pytest.param("import helpers\n\n\ndef test_helper():\n    helpers.expect_two(compute(2))\n",
                 id="module-asserting-helper"),
    pytest.param("def expect(x):\n    assert x == 2\n\n\ndef test_helper():\n    expect(compute(2))\n",
                 id="local-asserting-helper"),
    pytest.param("def test_nested():\n    async def main():\n        assert await compute(2) == 2\n"
                 "    asyncio.run(main())\n", id="called-nested-function"),
    pytest.param("class TestThings:\n    def check(self, x):\n        assert x == 2\n\n"
                 "    def test_method(self):\n        self.check(compute(2))\n", id="asserting-method"),
    pytest.param("import contextlib\n\n\ndef test_cleanup():\n    try:\n        assert compute(2) == 2\n"
                 "    finally:\n        with contextlib.suppress(OSError):\n            remove()\n",
                 id="suppress-in-finally"),
    pytest.param("import contextlib\nimport pytest\n\n\n@pytest.fixture\ndef server():\n    yield start()\n"
                 "    with contextlib.suppress(OSError):\n        stop()\n\n\ndef test_server(server):\n"
                 "    assert server.up\n", id="suppress-in-a-fixture"),
])
def test_the_checker_passes_a_test_that_can_fail(source: str) -> None:
    """assert, pytest.raises/warns/fail, an asserting helper one level deep, and suppress in cleanup all pass."""
    assert check(source) == []


def test_every_test_in_the_suite_can_fail() -> None:
    """No test file has a test that asserts nothing, or a suppress around the call under test."""
    findings = check_tree()
    assert findings == [], "\n" + "\n".join(findings)


def test_every_allowed_suppress_is_still_there() -> None:
    """Each entry of ALLOWED_SUPPRESS names a test that still has its suppress (a stale entry is removed)."""
    suppressed = set()
    for finding in check_tree(allowed={}):
        path, _line, test, why = finding.split(":", 3)
        if "contextlib.suppress" in why:
            suppressed.add((path, test))
    assert suppressed == set(ALLOWED_SUPPRESS)
