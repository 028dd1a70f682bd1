"""Shared fixtures: scripted backends for the real executor (see ``helpers`` for plain functions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers import boxed, numbered_script

from scaffold.testing import ScriptedBackend


@pytest.fixture
def constant() -> Callable[..., ScriptedBackend]:
    """Factory: a backend answering ``\\boxed{answer}`` to everything (extra kwargs go to ScriptedBackend)."""

    def make(answer: object = 7, **kwargs: Any) -> ScriptedBackend:
        return ScriptedBackend(lambda request: boxed(answer), **kwargs)

    return make


@pytest.fixture
def numbered() -> Callable[..., ScriptedBackend]:
    """Factory: a backend whose replies are all different (``draft i``), so lineage can be read from prompts."""

    def make(**kwargs: Any) -> ScriptedBackend:
        return ScriptedBackend(numbered_script(), **kwargs)

    return make
