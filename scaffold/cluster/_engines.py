"""Replicated local engines on Ray: one backend spec, ``replicas`` copies, one :class:`EnginePool` backend.

An :class:`EnginePool` starts ``replicas`` :class:`EngineReplica` actors, each holding its own backend
built from the same spec (``"transformers:/path/to/model"``, ``"vllm:/path"``), in one placement
group (a bundle of ``num_cpus`` CPUs and ``num_gpus`` GPUs per replica, packed). To a graph it is an
ordinary backend: ``models={"solver": pool}``.

Routing: a request goes to the replica with the fewest requests in flight (counted by the pool),
except that the calls of one run (:func:`scaffold._context.current_run_id`) stay on the replica the
run used last until that replica has :data:`STICKY_SLACK` more in flight than the least busy one;
the run then moves there and sticks to its new replica. One problem's calls thus keep reading the
prefix cache of one engine while the load stays even.

Faults: when a replica's actor dies (its process is killed, its node lost), the requests it held are
sent again to another live replica, and a fresh actor takes the dead one's bundle, at most
``max_restarts`` times per replica; after that the replica is dropped. A request answered after a
fail-over still returns once, so the caller records one trace per request. A
:class:`~scaffold._errors.BackendError` raised inside a replica reaches the caller as itself (same
class, same ``retryable``), never wrapped in Ray's ``RayTaskError``.

Ray is imported when a pool is built, not with this module; it needs the ``cluster`` extra.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaffold._context import current_run_id
from scaffold._errors import BackendError, ConnectionFailed
from scaffold._types import Completion, Request
from scaffold.backends._base import Capabilities

INSTALL_HINT = "pip install 'scaffold-sdk[cluster]'"

STICKY_SLACK = 2
"""How many more requests in flight than the least busy replica a run's replica may have before the run moves."""

STICKY_RUNS = 10_000
"""How many runs' replica choices the pool remembers (the least recently used is forgotten first)."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"EnginePool needs Ray: {INSTALL_HINT}") from exc
    return ray


def pick_replica(in_flight: Sequence[int | None], served: Sequence[int], sticky: int | None = None,
                 slack: int = STICKY_SLACK) -> int:
    """The replica a request goes to: ``sticky`` (the run's last replica) unless it has at least ``slack``
    more requests in flight than the least busy one, else the least busy (ties: fewest served, then lowest index).

    ``in_flight[i]`` is ``None`` for a replica that may not take the request (dropped, or already failed it).

    Examples:
        >>> pick_replica([3, 2], [0, 0], sticky=0)  # one more in flight than replica 1: stay
        0
        >>> pick_replica([4, 2], [0, 0], sticky=0)  # two more: move
        1
        >>> pick_replica([1, 1, None], [5, 2, 0])  # no preference: least busy, then least served
        1
    """
    candidates = [i for i, load in enumerate(in_flight) if load is not None]
    if not candidates:
        raise ValueError("no replica can take the request")
    least = min(candidates, key=lambda i: (in_flight[i], served[i], i))
    if sticky is not None and in_flight[sticky] is not None:
        if in_flight[sticky] - in_flight[least] < slack:  # type: ignore[operator]
            return sticky
    return least


class EngineReplica:
    """One engine of a pool: the backend ``backend_from_spec(spec, **options)`` built in a Ray actor.

    The pool runs it as an async Ray actor; in-process it is a thin async wrapper of the backend.

    Examples:
        >>> import asyncio
        >>> replica = EngineReplica("hosted_vllm/tiny", {"api_base": "http://127.0.0.1:8000/v1"})
        >>> asyncio.run(replica.capabilities()).supports_n
        True
    """

    def __init__(self, spec: str, options: Mapping[str, Any]) -> None:
        from scaffold.backends._registry import backend_from_spec

        self.backend = backend_from_spec(spec, **options)

    async def capabilities(self) -> Capabilities:
        """What the backend declares."""
        return self.backend.capabilities

    async def complete(self, request: Request) -> list[Completion]:
        """The backend's answer to ``request``."""
        return list(await self.backend.complete(request))

    async def pid(self) -> int:
        """The id of the process this replica runs in."""
        return os.getpid()


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """What one replica of a pool has done, as this pool object counted it.

    Examples:
        >>> ReplicaStats(index=0, alive=True, served=12, in_flight=1, restarts=1, failed_over=2).served
        12
    """

    index: int
    """Position of the replica (and of its bundle in the placement group)."""
    alive: bool
    """False once the replica died more than ``max_restarts`` times and was dropped."""
    served: int
    """Requests it answered (with every actor it held)."""
    in_flight: int
    """Requests sent to it and not answered yet."""
    restarts: int
    """Times its actor died and a fresh one took its bundle."""
    failed_over: int
    """Requests it held when its actor died, sent again to another replica."""


@dataclass(slots=True)
class _Slot:
    """One replica's place in the pool: its current actor and counters (under the pool's lock)."""

    index: int
    actor: Any
    """The live actor handle; ``None`` once dropped."""
    generation: int = 0
    """How many actors held this slot before the current one (names the actor)."""
    restarts: int = 0
    served: int = 0
    in_flight: int = 0
    failed_over: int = 0


class EnginePool:
    """``replicas`` copies of one backend in Ray actors, used as one backend (see the module docstring).

    ``spec`` and ``backend_kwargs`` are what each replica passes to
    :func:`~scaffold.backends.backend_from_spec`. Each replica reserves ``num_cpus`` CPUs and ``num_gpus``
    GPUs in one placement group (``PACK``); ``name`` labels the placement group and the actors. The pool
    waits until every replica is up (at most :attr:`start_timeout` seconds).

    ``capabilities`` are the first replica's backend's, with ``streams`` and ``trainable`` off: the pool
    answers with ``complete`` only (``Model.stream`` falls back to it), and its weights live in other
    processes, out of a trainer's reach.

    Raises :class:`~scaffold._errors.BackendError` (not retryable) when Ray is not initialised
    (``ray.init()`` first), when the cluster cannot place the bundles, or when a replica fails to start.
    With every replica dropped, ``complete`` raises :class:`~scaffold._errors.ConnectionFailed` (retryable).

    The pool pickles as its actor handles, placement group and spec, so it can be handed to Ray
    workers; each copy counts its own requests (routing, ``stats``), and copies that replace the same dead
    actor share one replacement (actors are named by replica and generation). ``close()`` on any copy
    ends every replica.

    Examples:
        >>> import ray, scaffold as sf
        >>> ray.init()  # doctest: +SKIP
        >>> with EnginePool("transformers:/models/pocket", replicas=2) as pool:  # doctest: +SKIP
        ...     graph.run_sync({"problem": "2+2"}, models={"solver": pool})
        ...     print([s.served for s in pool.stats()])
    """

    start_timeout: float = 600.0
    """Seconds the pool waits for its placement group and for its replicas to start."""

    capabilities: Capabilities

    provider = "vllm"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry): replicated engines are vLLM's in production."""

    def __init__(
        self,
        spec: str,
        replicas: int,
        *,
        num_cpus: float = 1,
        num_gpus: float = 0,
        name: str | None = None,
        max_restarts: int = 3,
        **backend_kwargs: Any,
    ) -> None:
        if replicas < 1 or max_restarts < 0 or num_cpus < 0 or num_gpus < 0 or not (num_cpus or num_gpus):
            raise ValueError("an EnginePool needs replicas >= 1, max_restarts >= 0 and some CPUs or GPUs per replica")
        ray = _import_ray()
        if not ray.is_initialized():
            raise BackendError("EnginePool needs a running Ray: call ray.init() (or ray.init(address=...)) first",
                               retryable=False)
        self.spec, self.replicas, self.name, self.max_restarts = spec, replicas, name, max_restarts
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.backend_kwargs = dict(backend_kwargs)
        self._label = f"{name or 'engines'}-{uuid.uuid4().hex[:8]}"
        self._closed = False
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, int] = OrderedDict()
        bundle = {key: float(value) for key, value in (("CPU", num_cpus), ("GPU", num_gpus)) if value}
        self._group = ray.util.placement_group([bundle] * replicas, strategy="PACK", name=self._label)
        self._slots: list[_Slot] = []
        try:
            if not self._group.wait(self.start_timeout):
                raise BackendError(f"the Ray cluster could not place {replicas} bundle(s) of {bundle} within "
                                   f"{self.start_timeout:g}s", retryable=False)
            self._slots = [_Slot(i, self._start(i, 0)) for i in range(replicas)]
            try:
                declared = ray.get([slot.actor.capabilities.remote() for slot in self._slots],
                                   timeout=self.start_timeout)
            except Exception as exc:
                raise BackendError(f"a replica of {spec!r} did not start: {exc}", retryable=False) from None
        except BaseException:
            self.close()
            raise
        self.capabilities = dataclasses.replace(declared[0], streams=False, trainable=False)

    def __repr__(self) -> str:
        return f"EnginePool({self.spec!r}, replicas={self.replicas}, name={self.name!r})"

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- answering -------------------------------------------------------------------------------
    async def complete(self, request: Request) -> list[Completion]:
        """Answer ``request`` on one replica (see the module docstring for which), failing over if it dies.

        Each completion's ``metadata["replica"]`` is the index of the replica that answered.
        """
        from ray.exceptions import RayActorError  # ActorDiedError and ActorUnavailableError are subclasses

        run_id = current_run_id()
        failed: set[int] = set()
        while True:
            slot, actor, generation = self._take(run_id, failed)
            try:
                completions = await self._send(actor, request)
            except RayActorError:
                self._lost(slot, generation)
                failed.add(slot.index)
                continue
            finally:
                with self._lock:
                    slot.in_flight -= 1
            with self._lock:
                slot.served += 1
            return [dataclasses.replace(c, metadata={**c.metadata, "replica": slot.index}) for c in completions]

    @staticmethod
    async def _send(actor: Any, request: Request) -> list[Completion]:
        """One attempt on one actor; an error the backend raised comes back as itself."""
        from ray.exceptions import RayTaskError

        ref = actor.complete.remote(request)
        try:
            return await ref  # type: ignore[no-any-return]
        except RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, RayTaskError):
                raise cause from None
            raise
        except asyncio.CancelledError:
            _cancel(ref)
            raise

    def _take(self, run_id: str | None, failed: set[int]) -> tuple[_Slot, Any, int]:
        """Choose the replica for one attempt and count it in flight there."""
        with self._lock:
            if self._closed:
                raise BackendError(f"{self!r} is closed", retryable=False)
            live = [slot for slot in self._slots if slot.actor is not None]
            if not live:
                raise ConnectionFailed(f"every replica of {self!r} died more than {self.max_restarts} times")
            fresh = [slot for slot in live if slot.index not in failed] or live  # all failed it once: any live
            allowed = {slot.index for slot in fresh}
            in_flight = [slot.in_flight if slot.index in allowed else None for slot in self._slots]
            sticky = self._runs.get(run_id) if run_id is not None else None
            slot = self._slots[pick_replica(in_flight, [s.served for s in self._slots], sticky)]
            if run_id is not None:
                self._runs[run_id] = slot.index
                self._runs.move_to_end(run_id)
                if len(self._runs) > STICKY_RUNS:
                    self._runs.popitem(last=False)
            slot.in_flight += 1
            return slot, slot.actor, slot.generation

    def _lost(self, slot: _Slot, generation: int) -> None:
        """The actor of ``slot`` died under a request sent to ``generation``: replace it once, or drop it."""
        with self._lock:
            slot.failed_over += 1
            if slot.generation != generation or slot.actor is None:
                return  # another request already saw this actor die
            dead = slot.actor
            if slot.restarts >= self.max_restarts or self._closed:
                slot.actor = None
            else:
                slot.restarts += 1
                slot.generation += 1
                slot.actor = self._start(slot.index, slot.generation)
        _kill(dead)

    def _start(self, index: int, generation: int) -> Any:
        """A new replica actor on bundle ``index`` (or the one another pool copy already started there)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return _remote_replica().options(
            num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_restarts=0, max_task_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=index),
            name=f"{self._label}-{index}.{generation}", get_if_exists=True, lifetime="detached",
        ).remote(self.spec, self.backend_kwargs)

    # -- looking and ending ----------------------------------------------------------------------
    @property
    def actors(self) -> tuple[Any, ...]:
        """The current actor handle of each replica (``None`` for a dropped one)."""
        with self._lock:
            return tuple(slot.actor for slot in self._slots)

    def stats(self) -> tuple[ReplicaStats, ...]:
        """What each replica has done, as this pool object counted it."""
        with self._lock:
            return tuple(ReplicaStats(slot.index, slot.actor is not None, slot.served, slot.in_flight, slot.restarts,
                                      slot.failed_over) for slot in self._slots)

    def close(self) -> None:
        """End every replica and remove the placement group; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            actors = [slot.actor for slot in self._slots if slot.actor is not None]
            for slot in self._slots:
                slot.actor = None
        for actor in actors:
            _kill(actor)
        try:
            import ray

            ray.util.remove_placement_group(self._group)  # also ends any actor a pool copy started on it
        except Exception:  # Ray already shut down, or the group already removed
            pass

    # -- pickling ----------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = {key: value for key, value in self.__dict__.items() if key not in ("_lock", "_runs", "_slots")}
        with self._lock:
            state["_slots"] = [(slot.actor, slot.generation, slot.restarts) for slot in self._slots]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        slots = state.pop("_slots")
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._runs = OrderedDict()
        self._slots = [_Slot(i, actor, generation, restarts) for i, (actor, generation, restarts) in enumerate(slots)]


_REMOTE_REPLICA: Any = None


def _remote_replica() -> Any:
    """:class:`EngineReplica` as a Ray actor class (made once, on first use)."""
    global _REMOTE_REPLICA
    if _REMOTE_REPLICA is None:
        _REMOTE_REPLICA = _import_ray().remote(EngineReplica)
    return _REMOTE_REPLICA


def _kill(actor: Any) -> None:
    try:
        import ray

        ray.kill(actor, no_restart=True)
    except Exception:  # already dead, or Ray shut down
        pass


def _cancel(ref: Any) -> None:
    try:
        import ray

        ray.cancel(ref)
    except Exception:  # the task already finished or its actor died
        pass
