"""The curated public surface: every exported name imports, and the error families subclass the right built-ins."""

from __future__ import annotations

import importlib
import inspect

import pytest

import scaffold as sf
import scaffold.evaluation
import scaffold.testing


@pytest.mark.parametrize("module", [scaffold, scaffold.testing, scaffold.evaluation], ids=lambda m: m.__name__)
def test_exported_members_import(module):
    """Every name in ``__all__`` is an attribute of the package and ``from … import *`` gives exactly ``__all__``."""
    assert len(module.__all__) == len(set(module.__all__)), "duplicate names in __all__"
    for name in module.__all__:
        assert getattr(module, name, None) is not None, name
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(module.__all__)


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
