"""Running async work from synchronous code: ``run_sync``, ``map_sync`` and ``evaluate`` share this.

Each sync entry point runs its work on a fresh event loop; before that loop closes, every bound
backend is asked to release what it holds on it (HTTP connections, queues), so no socket outlives
its loop. Called from inside a running loop, the entry points refuse with a message naming the
async call to use there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from scaffold._errors import RunError

if TYPE_CHECKING:
    from scaffold.backends._model import Model

_T = TypeVar("_T")


def no_running_loop(what: str, instead: str) -> None:
    """Raise :class:`RunError` if called inside a running event loop: ``what()`` would block it; use ``instead``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RunError(f"{what}() cannot be called inside a running event loop; use `{instead}` there")


async def then_release(work: Awaitable[_T], models: Mapping[str, Model]) -> _T:
    """Await ``work``, then let each distinct backend of ``models`` release what it holds on this event loop."""
    try:
        return await work
    finally:
        await release_backends(models)


async def release_backends(models: Mapping[str, Model]) -> None:
    """Let each distinct backend of ``models`` release what it holds on the running event loop."""
    released: set[int] = set()
    for model in models.values():
        release = getattr(model.backend, "release_loop", None)
        if release is not None and id(model.backend) not in released:
            released.add(id(model.backend))
            await release()


def run_released(work: Coroutine[Any, Any, _T], models: Mapping[str, Model]) -> _T:
    """Run ``work`` on a fresh event loop and release the backends of ``models`` before the loop closes."""
    return asyncio.run(then_release(work, models))
