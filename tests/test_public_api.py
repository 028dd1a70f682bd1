"""The curated public surface: every exported name imports, and the error families subclass the right built-ins."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import scaffold as sf
import scaffold.evaluation
import scaffold.serve
import scaffold.testing


@pytest.mark.parametrize("module", [scaffold, scaffold.testing, scaffold.evaluation, scaffold.serve],
                         ids=lambda m: m.__name__)
def test_exported_members_import(module):
    """Every name in ``__all__`` is an attribute of the package and ``from … import *`` gives exactly ``__all__``."""
    assert len(module.__all__) == len(set(module.__all__)), "duplicate names in __all__"
    for name in module.__all__:
        assert getattr(module, name, None) is not None, name
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(module.__all__)


PUBLIC_PACKAGES = {
    "scaffold": {"answers", "backends", "catalogue", "cli", "cluster", "evaluation", "pocket", "serve", "store",
                 "testing", "tools", "ui"},
    "scaffold.answers": set(),
    "scaffold.catalogue": set(),
    "scaffold.cluster": set(),
    "scaffold.backends": set(),
    "scaffold.cli": set(),
    "scaffold.evaluation": set(),
    "scaffold.pocket": set(),
    "scaffold.serve": set(),
    "scaffold.store": set(),
    "scaffold.testing": set(),
    "scaffold.tools": set(),
    "scaffold.ui": set(),
}
"""Each public package and the public subpackages it may show besides its ``__all__``."""


def _import_everything() -> list[str]:
    """Import every module under ``scaffold`` (so each one's submodules become package attributes)."""
    names = []
    for info in pkgutil.walk_packages(scaffold.__path__, "scaffold."):
        if info.name == "scaffold.__main__":
            continue
        importlib.import_module(info.name)
        names.append(info.name)
    return names


@pytest.mark.parametrize("name", sorted(PUBLIC_PACKAGES))
def test_every_public_attribute_is_exported_on_purpose(name):
    """The reverse rule: with every module imported, each attribute without a leading underscore is in ``__all__``
    (or is a public subpackage), so an implementation module or a stray import can never leak into the API."""
    modules = _import_everything()
    assert len(modules) > 60
    module = importlib.import_module(name)
    public = {attribute for attribute in dir(module) if not attribute.startswith("_")}
    # names a module loads lazily (its __getattr__) are not in dir(): test_exported_members_import checks them
    assert public - set(module.__all__) == PUBLIC_PACKAGES[name]  # no stray name, and each listed subpackage shown
    for subpackage in PUBLIC_PACKAGES[name]:
        assert getattr(module, subpackage) is importlib.import_module(f"{name}.{subpackage}"), subpackage


def test_every_public_package_is_listed():
    """PUBLIC_PACKAGES names every package under ``scaffold`` whose dotted path has no private part, and only
    those, so the reverse rule above covers each of them."""
    packages = {info.name for info in pkgutil.walk_packages(scaffold.__path__, "scaffold.") if info.ispkg}
    public = {name for name in packages | {"scaffold"} if not any(p.startswith("_") for p in name.split("."))}
    assert public == set(PUBLIC_PACKAGES)
    for name, subpackages in PUBLIC_PACKAGES.items():
        assert subpackages == {p.removeprefix(f"{name}.") for p in public if p.rpartition(".")[0] == name}, name


def test_implementation_modules_are_private():
    """Every module under a public package is private (``_name``) unless it is itself a public package."""
    for name in _import_everything():
        parts = name.split(".")
        if ".".join(parts[:-1]) in PUBLIC_PACKAGES and name not in PUBLIC_PACKAGES:
            assert parts[-1].startswith("_"), name


def test_graph_decorator_is_not_shadowed_by_a_module():
    """``sf.graph`` is the decorator, whatever has been imported."""
    _import_everything()
    assert callable(sf.graph) and inspect.isfunction(sf.graph)


def test_error_tree_names_every_error():
    """Every error class scaffold defines is exported, documented in the tree and under ``ScaffoldError``."""
    from scaffold import _errors

    defined = {name for name, obj in vars(_errors).items() if inspect.isclass(obj) and issubclass(obj, Exception)}
    assert defined <= set(sf.__all__)
    for name in defined:
        assert issubclass(getattr(sf, name), sf.ScaffoldError), name
        assert f" {name} " in _errors.__doc__ or f"{name}\n" in _errors.__doc__, name


def test_exported_members_are_defined_in_scaffold():
    """Exported classes and functions come from scaffold's own modules, not re-exported third-party objects."""
    checked = 0
    for name in sf.__all__:
        obj = getattr(sf, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):  # type aliases (Event, Subscriber) are exempt
            assert obj.__module__.startswith("scaffold."), (name, obj.__module__)
            assert getattr(importlib.import_module(obj.__module__), obj.__name__) is obj
            checked += 1
    assert checked > 40


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (sf.GraphError, (sf.ScaffoldError, ValueError)),
        (sf.RateLimitError, (sf.BackendError,)),
        (sf.BudgetExceeded, (sf.RunError,)),
        (sf.ServerError, (sf.BackendError,)),
        (sf.ConnectionFailed, (sf.BackendError,)),
        (sf.RequestTimeout, (sf.BackendError, TimeoutError)),
        (sf.AuthenticationError, (sf.BackendError,)),
        (sf.ContextLengthError, (sf.BadRequestError, sf.BackendError)),
        (sf.SubsetSizeError, (sf.GraphError,)),
        (sf.EmptySetError, (sf.GraphError,)),
        (sf.TemplateError, (sf.GraphError,)),
        (sf.ModelAliasError, (sf.GraphError,)),
        (sf.GraphDefinitionError, (sf.GraphError,)),
        (sf.InputError, (sf.ScaffoldError, ValueError)),
        (sf.DatasetError, (sf.ScaffoldError, ValueError)),
        (sf.EvaluationError, (sf.ScaffoldError, ValueError)),
        (sf.StoreError, (sf.ScaffoldError, RuntimeError)),
        (sf.SchemaVersionError, (sf.StoreError,)),
        (sf.ResumeError, (sf.StoreError,)),
        (sf.RunError, (sf.ScaffoldError, RuntimeError)),
        (sf.CallError, (sf.RunError,)),
        (sf.QuorumError, (sf.RunError,)),
        (sf.EmptyInputError, (sf.RunError,)),
        (sf.BackendError, (sf.RunError,)),
        (sf.CallTimeout, (sf.RunError, TimeoutError)),
        (sf.RunTimeout, (sf.RunError, TimeoutError)),
    ],
)
def test_error_hierarchy(error, bases):
    """Each error sits in its family and subclasses the matching built-in (ValueError, RuntimeError, TimeoutError)."""
    for base in bases:
        assert issubclass(error, base)


def test_build_and_run_families_are_disjoint():
    """Build-time errors are never run-time errors and vice versa, so callers can catch one family."""
    assert not issubclass(sf.GraphError, sf.RunError)
    assert not issubclass(sf.RunError, sf.GraphError)
    assert not issubclass(sf.InputError, (sf.GraphError, sf.RunError))


def test_backend_error_carries_retry_information():
    """BackendError records whether a retry may help and the HTTP status code."""
    exc = sf.BackendError("rate limited", retryable=True, status_code=429)
    assert exc.retryable is True
    assert exc.status_code == 429
    assert sf.BackendError("bad request").retryable is False


def test_import_scaffold_loads_no_heavy_dependency():
    """``import scaffold`` stays light: pydantic (a registry's schema), SQLAlchemy (the store), torch, litellm,
    Ray, click and FastAPI load when the feature that needs them is first used, not with the package."""
    import subprocess
    import sys

    code = ("import sys, scaffold; heavy = ['pydantic', 'sqlalchemy', 'torch', 'litellm', 'ray', 'click', "
            "'fastapi', 'transformers', 'vllm']; print(','.join(m for m in heavy if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
