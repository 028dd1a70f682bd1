"""``Graph.map(..., cluster=...)``: rows spread over Ray workers, results streamed back as they finish.

The driver reads rows lazily and keeps at most ``concurrency`` of them in flight per worker,
handing the next row to whichever worker has a free place, so fast workers take more (a pull by
free places: nothing is assigned ahead). Each worker (:class:`RowWorker`) runs ``Graph.run`` on
its rows with the async executor, its models rebuilt from the driver's (same backends, same
parameters) and their limits leased from one :class:`~scaffold.cluster._limits.LimitsCoordinator`.

Every row has its run id fixed by the driver before it is sent (``{run_id}-{i}``, or a fresh id).
When a worker dies, its rows go back to the front of the queue and run again *under the same
id*: ``Graph.run`` finds the recorded calls and does not send them again (resume). A replacement
worker is started while ``Cluster.max_restarts`` allows; with no worker left the job fails with
:class:`~scaffold.ClusterError`, its recorded data intact.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scaffold._budget import Budget
from scaffold._errors import ClusterError, GraphError, InputError, StoreError
from scaffold._executor import bind_models
from scaffold._graph_map import _END, _progress, _row_reader
from scaffold._result import RunResult
from scaffold.backends._model import Model
from scaffold.cluster._cluster import Cluster
from scaffold.cluster._limits import LeasedBudget, LeasedPlaces, LeasedRate, LimitsCoordinator, LimitSpec
from scaffold.cluster._store import RemoteStore, StoreWriter, store_plan
from scaffold.store._default import resolve_store

if TYPE_CHECKING:
    from scaffold._graph import Graph

BUDGET_KEY = "budget"


@dataclass
class _ModelRecipe:
    """What a worker needs to rebuild one driver ``Model`` (its limits are keys into the coordinator)."""

    backend: Any
    name: str | None
    params: dict[str, Any]
    timeout: float | None
    retry: Any
    in_flight: tuple[str, int] | None
    rpm: tuple[str, float] | None
    tpm: tuple[str, float] | None

    def build(self, coordinator: Any, worker: int, workers: int) -> Model:
        model = Model(self.backend, self.name, self.params, timeout=self.timeout, retry=self.retry)
        if self.in_flight is not None:
            key, limit = self.in_flight
            model.max_in_flight = limit
            model.limit = LeasedPlaces(coordinator, key, worker, limit, keep=limit // workers)  # type: ignore[assignment]
        for attribute, spec in (("rpm", self.rpm), ("tpm", self.tpm)):
            if spec is not None:
                key, per_minute = spec
                burst = max(1.0, per_minute / 60.0)  # RateLimit's default burst: one second's worth
                setattr(model, attribute, LeasedRate(coordinator, key, per_minute, batch=burst / (2 * workers)))
        model.requests_per_minute = self.rpm[1] if self.rpm else None
        model.tokens_per_minute = self.tpm[1] if self.tpm else None
        return model


@dataclass
class _Job:
    graph: Any
    recipes: dict[str, _ModelRecipe]  # one per distinct driver Model, by the first alias bound to it
    aliases: dict[str, str]  # alias -> recipe key
    budget: tuple[int | None, float | None] | None
    run_kwargs: dict[str, Any]


def _plan_models(models: Mapping[str, Model]) -> tuple[dict[str, _ModelRecipe], dict[str, str], dict[str, LimitSpec]]:
    """One recipe per distinct model (aliases sharing a ``Model`` share its limits), and the limits to share."""
    import cloudpickle

    recipes: dict[str, _ModelRecipe] = {}
    aliases: dict[str, str] = {}
    specs: dict[str, LimitSpec] = {}
    seen: dict[int, str] = {}
    for alias, model in models.items():
        if id(model) in seen:
            aliases[alias] = seen[id(model)]
            continue
        key = seen[id(model)] = aliases[alias] = alias
        try:
            cloudpickle.dumps(model.backend)
        except Exception as exc:
            raise ClusterError(
                f"the backend bound to {alias!r} ({type(model.backend).__name__}) cannot be sent to Ray workers "
                f"({type(exc).__name__}: {exc}); bind a spec string ('openai/...', 'hosted_vllm/...', "
                "'transformers:/path'), an EnginePool, or a backend that pickles") from None
        recipe = _ModelRecipe(model.backend, model.name, dict(model.params), model.timeout, model.retry,
                              None, None, None)
        if model.max_in_flight is not None:
            recipe.in_flight = (f"{key}:in_flight", model.max_in_flight)
            specs[recipe.in_flight[0]] = LimitSpec("in_flight", model.max_in_flight)
        if model.requests_per_minute is not None:
            recipe.rpm = (f"{key}:rpm", model.requests_per_minute)
            specs[recipe.rpm[0]] = LimitSpec("rate", model.requests_per_minute)
        if model.tokens_per_minute is not None:
            recipe.tpm = (f"{key}:tpm", model.tokens_per_minute)
            specs[recipe.tpm[0]] = LimitSpec("rate", model.tokens_per_minute)
        recipes[key] = recipe
    return recipes, aliases, specs


class RowWorker:
    """One worker of a cluster job: runs rows with the async executor (a Ray actor; internal).

    Example:
        >>> RowWorker.__mro__[0].__name__
        'RowWorker'
    """

    def __init__(self, payload: bytes, store: tuple[str, Any], coordinator: Any, worker: int, workers: int) -> None:
        import cloudpickle

        job: _Job = cloudpickle.loads(payload)
        self.graph = job.graph
        built = {key: recipe.build(coordinator, worker, workers) for key, recipe in job.recipes.items()}
        self.models = {alias: built[key] for alias, key in job.aliases.items()}
        self.budget = None if job.budget is None else LeasedBudget(coordinator, BUDGET_KEY, *job.budget, workers)
        kind, target = store
        self.store: Any = None if kind == "none" else RemoteStore(target) if kind == "writer" else resolve_store(target)
        self.run_kwargs = job.run_kwargs
        self.worker = worker

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()

    async def run_row(self, row: Mapping[str, Any], position: int, seed: int | None, run_id: str,
                      dataset: str | None, item: int | None) -> RunResult:
        """Run the graph on one row under the id the driver gave it (resuming what is recorded under it)."""
        try:
            result = await self.graph.run(row, models=self.models, seed=seed, run_id=run_id, dataset=dataset,
                                          item=item, store=self.store, raise_on_error=False, budget=self.budget,
                                          **self.run_kwargs)
        except (InputError, GraphError, StoreError) as exc:
            result = RunResult(run_id=run_id, graph=self.graph.name, inputs=row, seed=seed or 0, status="error",
                               output=None, error=exc)
        result.index = position
        return result

    async def limits(self) -> dict[str, Any]:
        """Per model: the most calls this worker had in flight, and its lease/fetch counts."""
        report: dict[str, Any] = {}
        for alias, model in self.models.items():
            limit = model.limit
            report[alias] = {"peak": getattr(limit, "peak", None), "asks": getattr(limit, "asks", None),
                             "fetches": getattr(model.rpm, "fetches", None)}
        return report

    async def close(self) -> None:
        """Report the budget, write what is queued and let the backends release what they hold."""
        if self.budget is not None:
            await self.budget.flush(final=True)
        if self.store is not None and hasattr(self.store, "flush"):
            await asyncio.to_thread(self.store.flush)
        released: set[int] = set()
        for model in self.models.values():
            release = getattr(model.backend, "release_loop", None)
            if release is not None and id(model.backend) not in released:
                released.add(id(model.backend))
                await release()


@dataclass
class _Row:
    row: Mapping[str, Any]
    position: int
    seed: int | None
    run_id: str


async def map_on_cluster(
    graph: Graph,
    rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
    *,
    cluster: Cluster,
    models: Mapping[str, Any],
    concurrency: int,
    seed: int | None,
    progress: bool,
    run_id: str | None,
    dataset: str | None,
    store: Any,
    items: Sequence[int] | None,
    run_kwargs: dict[str, Any],
) -> AsyncIterator[RunResult]:
    """What ``Graph.map(..., cluster=...)`` yields: one result per row, in completion order."""
    per_worker, budget = _checked(cluster, concurrency, run_kwargs)
    job = _ClusterJob(cluster, budget)
    try:
        await job.start(graph, models, store, run_kwargs)
    except BaseException:
        await job.close()
        raise
    feed = _Feed(rows, items, seed, run_id)
    running: dict[asyncio.Future[Any], tuple[int, _Row]] = {}
    bar = _progress(progress, rows)
    try:
        while True:
            while (slot := job.workers.free_worker(per_worker)) is not None:
                job_row = await feed.next()
                if job_row is None:
                    break
                ref = job.workers.actors[slot].run_row.remote(job_row.row, job_row.position, job_row.seed,
                                                              job_row.run_id, dataset,
                                                              job_row.position if dataset else None)
                running[asyncio.wrap_future(ref.future())] = (slot, job_row)
                job.workers.busy[slot] += 1
            if not running:
                if feed.retry:
                    raise ClusterError("every worker of the job died and no replacement may start; what was "
                                       "recorded is kept: run the job again with the same run_id to resume")
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                slot, job_row = running.pop(future)
                job.workers.busy[slot] -= 1
                try:
                    result = future.result()
                except (job.ray.exceptions.RayActorError, job.ray.exceptions.ActorUnavailableError):
                    feed.retry.append(job_row)  # its recorded calls are reused where it runs next
                    job.workers.lost(slot)
                    continue
                if bar is not None:
                    bar.update(1)
                yield result
    finally:
        for future in running:
            future.cancel()
        await job.close()
        if bar is not None:
            bar.close()


def _checked(cluster: Cluster, concurrency: int, run_kwargs: dict[str, Any]) -> tuple[int, Budget | None]:
    """Rows in flight per worker, and the budget (taken out of ``run_kwargs``: workers lease it)."""
    per_worker = cluster.concurrency or concurrency
    if per_worker < 1:
        raise ValueError(f"concurrency must be at least 1, got {per_worker}")
    budget = run_kwargs.pop("budget", None)
    if budget is not None and not isinstance(budget, Budget):
        raise ClusterError(f"budget must be a scaffold Budget, got {type(budget).__name__}")
    for unsupported in ("subscribers", "on_delta"):
        if run_kwargs.get(unsupported):
            raise ClusterError(f"{unsupported}= runs in the caller's process and cannot go to cluster workers")
    return per_worker, budget


class _Feed:
    """Rows to hand out: those of a dead worker first, then the next ones read, each with its fixed run id."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                 items: Sequence[int] | None, seed: int | None, run_id: str | None) -> None:
        self.read = _row_reader(rows)
        self.numbers = None if items is None else iter(items)
        self.seed, self.run_id = seed, run_id
        self.retry: deque[_Row] = deque()
        self.position = 0
        self.exhausted = False

    async def next(self) -> _Row | None:
        if self.retry:
            return self.retry.popleft()
        if self.exhausted:
            return None
        row = await self.read()
        if row is _END:
            self.exhausted = True
            return None
        if self.numbers is not None:
            given = next(self.numbers, None)
            if given is None:
                raise ValueError("items has fewer positions than there are rows")
            self.position = given
        position = self.position
        self.position += 1
        return _Row(row, position, None if self.seed is None else self.seed + position,
                    f"{self.run_id}-{position}" if self.run_id is not None else uuid.uuid4().hex[:16])


class _ClusterJob:
    """What one cluster job starts and stops: the limits coordinator, the store writer and the workers."""

    def __init__(self, cluster: Cluster, budget: Budget | None) -> None:
        self.cluster, self.budget = cluster, budget
        self.ray = cluster.connect()
        self.coordinator: Any = None
        self.writer: Any = None
        self.workers: _Workers

    async def start(self, graph: Graph, models: Mapping[str, Any], store: Any, run_kwargs: dict[str, Any]) -> None:
        import cloudpickle
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        bound = bind_models(graph, models)
        target = await asyncio.to_thread(resolve_store, store)
        plan = store_plan(target, self.cluster.machines())
        recipes, aliases, specs = _plan_models(bound)
        budget = self.budget
        if budget is not None:
            specs[BUDGET_KEY] = LimitSpec("budget", budget.max_tokens, cost=budget.max_cost)
        job = _Job(graph, recipes, aliases, None if budget is None else (budget.max_tokens, budget.max_cost),
                   run_kwargs)
        try:
            payload = cloudpickle.dumps(job)
        except Exception as exc:
            raise ClusterError(f"the graph or its run options cannot be sent to Ray workers: {exc}") from None
        here = self.ray.get_runtime_context().get_node_id()
        pin = NodeAffinitySchedulingStrategy(node_id=here, soft=False)  # both live on the caller's machine
        self.coordinator = self.ray.remote(LimitsCoordinator).options(num_cpus=0, scheduling_strategy=pin).remote(specs)
        store_arg: tuple[str, Any] = plan
        if plan[0] == "writer":
            if target is not None:
                await asyncio.to_thread(target.flush)  # what the caller queued (datasets) is on disk first
            self.writer = self.ray.remote(StoreWriter).options(num_cpus=0, scheduling_strategy=pin).remote(plan[1])
            store_arg = ("writer", self.writer)
        self.workers = _Workers(self.ray, self.cluster, payload, store_arg, self.coordinator)
        self.workers.start(self.cluster.workers)

    async def close(self) -> None:
        ray = self.ray
        if hasattr(self, "workers"):
            await self.workers.close()
        if self.writer is not None:
            try:
                await self.writer.close.remote()
            finally:
                ray.kill(self.writer)
        if self.coordinator is None:
            return
        if self.budget is not None:
            try:
                totals = (await self.coordinator.report.remote())["budgets"][BUDGET_KEY]
            except Exception:  # noqa: BLE001 - the coordinator is gone: the totals are lost, not the records
                totals = None
            if totals is not None:
                self.budget.tokens += int(totals["tokens"])
                self.budget.cost += totals["cost"]
                self.budget.unpriced_calls += int(totals["unpriced"])
                self.budget.refused += int(totals["refused"])
        ray.kill(self.coordinator)


class _Workers:
    """The job's row workers: started, counted, replaced when one dies, closed at the end."""

    def __init__(self, ray: Any, cluster: Cluster, payload: bytes, store: tuple[str, Any], coordinator: Any) -> None:
        self.ray, self.cluster, self.payload, self.store, self.coordinator = ray, cluster, payload, store, coordinator
        self.actors: list[Any] = []
        self.alive: list[bool] = []
        self.busy: list[int] = []
        self.restarts = 0
        self.remote = ray.remote(RowWorker).options(num_cpus=cluster.num_cpus, max_concurrency=100_000,
                                                    runtime_env=cluster.runtime_env or None)

    def start(self, count: int) -> None:
        for _ in range(count):
            self._start_one()

    def _start_one(self) -> None:
        slot = len(self.actors)
        self.actors.append(self.remote.remote(self.payload, self.store, self.coordinator, slot, self.cluster.workers))
        self.alive.append(True)
        self.busy.append(0)

    def free_worker(self, per_worker: int) -> int | None:
        """The live worker with the most free places (``None``: all are full)."""
        best = None
        for slot, alive in enumerate(self.alive):
            if alive and self.busy[slot] < per_worker and (best is None or self.busy[slot] < self.busy[best]):
                best = slot
        return best

    def lost(self, slot: int) -> None:
        """Worker ``slot`` died: free its leased places and start another while restarts remain."""
        if not self.alive[slot]:
            return
        self.alive[slot] = False
        self.coordinator.forget.remote(slot)
        if self.restarts < self.cluster.max_restarts:
            self.restarts += 1
            self._start_one()

    async def close(self) -> None:
        closing = [actor.close.remote() for actor, alive in zip(self.actors, self.alive) if alive]
        for ref in closing:
            try:
                await ref
            except Exception:  # noqa: BLE001 - a worker that died while closing has nothing left to write
                pass
        for actor in self.actors:
            self.ray.kill(actor)
