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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tiny random Qwen2 chat model saved with ``save_pretrained`` (built once per test session)."""
    from scaffold.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))
