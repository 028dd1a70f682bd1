"""One cluster job: its shared services (limits coordinator, SQLite writer), its workers, and the rows it hands out.

:class:`ClusterJob` starts the services and the workers for a graph and its models, and stops them.
:class:`Dispatcher` hands planned rows (:class:`~scaffold._runner.PlannedRow`) to workers: a free place
takes the next pending row, rows of a worker that died go back to the front of the queue (their run ids
unchanged, so what was recorded is reused), and a replacement worker is started while ``Cluster.max_restarts``
allows. ``Graph.map(..., cluster=...)`` runs one dispatcher over a dataset; a training loop keeps one
job and one dispatcher for all its steps (``trainers.distributed``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from scaffold._budget import Budget
from scaffold._errors import ClusterError
from scaffold._executor import bind_models
from scaffold._result import RunResult
from scaffold._runner import PlannedRow
from scaffold.cluster._limits import LimitsCoordinator, LimitSpec
from scaffold.cluster._store import StoreWriter, store_plan
from scaffold.cluster._worker import BUDGET_KEY, RowWorker, WorkerPayload, plan_models
from scaffold.store._default import resolve_store

if TYPE_CHECKING:
    from scaffold._graph import Graph
    from scaffold.cluster._cluster import Cluster


class ClusterJob:
    """What one cluster job starts and stops: the limits coordinator, the store writer and the workers.

    ``worker_class`` is :class:`~scaffold.cluster._worker.RowWorker` or a subclass; ``worker_args``
    gives the extra constructor arguments of each worker when it starts (a replacement included).
    """

    def __init__(self, cluster: Cluster, budget: Budget | None = None, *, worker_class: type = RowWorker,
                 worker_args: Callable[[], tuple[Any, ...]] = tuple, num_gpus: float = 0) -> None:
        self.cluster, self.budget = cluster, budget
        self.worker_class, self.worker_args, self.num_gpus = worker_class, worker_args, num_gpus
        self.ray = cluster.connect()
        self.coordinator: Any = None
        self.writer: Any = None
        self.workers: Workers

    async def start(self, graph: Graph, models: Mapping[str, Any], store: Any, run_kwargs: dict[str, Any]) -> None:
        """Bind the models, choose how workers record, start the shared actors and the workers."""
        import cloudpickle
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        bound = bind_models(graph, models)
        target = await asyncio.to_thread(resolve_store, store)
        plan = store_plan(target, self.cluster.machines())
        recipes, aliases, specs = plan_models(bound)
        budget = self.budget
        if budget is not None:
            specs[BUDGET_KEY] = LimitSpec("budget", budget.max_tokens, cost=budget.max_cost)
        job = WorkerPayload(graph, recipes, aliases, None if budget is None else (budget.max_tokens, budget.max_cost),
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
        self.workers = Workers(self, payload, store_arg)
        self.workers.start(self.cluster.workers)

    async def close(self) -> None:
        """Let the workers write what they hold, stop every actor, and add the cluster's spending to the budget."""
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


class Workers:
    """A job's workers: started, counted, replaced when one dies, closed at the end."""

    def __init__(self, job: ClusterJob, payload: bytes, store: tuple[str, Any]) -> None:
        self.job, self.ray, self.cluster = job, job.ray, job.cluster
        self.payload, self.store, self.coordinator = payload, store, job.coordinator
        self.actors: list[Any] = []
        self.alive: list[bool] = []
        self.busy: list[int] = []
        self.restarts = 0
        self.remote = self.ray.remote(job.worker_class).options(
            num_cpus=self.cluster.num_cpus, num_gpus=job.num_gpus, max_concurrency=100_000,
            runtime_env=self.cluster.runtime_env or None)

    def start(self, count: int) -> None:
        for _ in range(count):
            self._start_one()

    def _start_one(self) -> None:
        slot = len(self.actors)
        self.actors.append(self.remote.remote(self.payload, self.store, self.coordinator, slot, self.cluster.workers,
                                              *self.job.worker_args()))
        self.alive.append(True)
        self.busy.append(0)

    def live(self) -> list[Any]:
        """The actors of the workers not known to be dead."""
        return [actor for actor, alive in zip(self.actors, self.alive) if alive]

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
        closing = [actor.close.remote() for actor in self.live()]
        for ref in closing:
            try:
                await ref
            except Exception:  # noqa: BLE001 - a worker that died while closing has nothing left to write
                pass
        for actor in self.actors:
            self.ray.kill(actor)


class Dispatcher:
    """Hands a job's rows to its workers, ``per_worker`` at a time, and returns results as they finish.

    :meth:`add` queues rows; :meth:`next` sends what free places allow and returns the next
    finished result (``None`` once nothing is queued or running). A row whose worker died goes
    back to the front of the queue and runs again under its run id.
    """

    def __init__(self, job: ClusterJob, per_worker: int, dataset: str | None) -> None:
        self.job, self.workers, self.per_worker, self.dataset = job, job.workers, per_worker, dataset
        self.pending: deque[PlannedRow] = deque()
        self.running: dict[asyncio.Future[Any], tuple[int, PlannedRow]] = {}
        self.finished: deque[RunResult] = deque()
        self._wake = asyncio.Event()
        exceptions = job.ray.exceptions
        self._dead = (exceptions.RayActorError, exceptions.ActorUnavailableError)

    def add(self, row: PlannedRow) -> None:
        """Queue ``row`` behind the others; it is sent at once when a place is free."""
        self.pending.append(row)
        self._send()
        self._wake.set()

    def has_place(self) -> bool:
        """Whether a live worker has a free place."""
        return self.workers.free_worker(self.per_worker) is not None

    def _send(self) -> None:
        while self.pending and (slot := self.workers.free_worker(self.per_worker)) is not None:
            row = self.pending.popleft()
            ref = self.workers.actors[slot].run_row.remote(row.row, row.position, row.seed, row.run_id, self.dataset,
                                                           row.item)
            self.running[asyncio.wrap_future(ref.future())] = (slot, row)
            self.workers.busy[slot] += 1

    async def next(self) -> RunResult | None:
        """The next finished result; ``None`` when no row is queued or running.

        Raises :class:`~scaffold.ClusterError` when rows wait and no worker is left to run them.
        """
        while not self.finished:
            self._send()
            if not self.running:
                if self.pending:
                    raise ClusterError("every worker of the job died and no replacement may start; what was "
                                       "recorded is kept: run the job again with the same run_id to resume")
                return None
            self._wake.clear()
            wake = asyncio.ensure_future(self._wake.wait())
            try:
                done, _ = await asyncio.wait([*self.running, wake], return_when=asyncio.FIRST_COMPLETED)
            finally:
                wake.cancel()
            for future in done:
                if future is wake:
                    continue
                slot, row = self.running.pop(future)
                self.workers.busy[slot] -= 1
                try:
                    self.finished.append(future.result())
                except self._dead:
                    self.pending.appendleft(row)  # its recorded calls are reused where it runs next
                    self.workers.lost(slot)
        return self.finished.popleft()

    async def wait_for_rows(self) -> None:
        """Return once a row is queued or running (at once if one is)."""
        while not self.pending and not self.running:
            self._wake.clear()
            await self._wake.wait()

    def cancel(self) -> None:
        """Stop waiting for the rows in flight (their workers finish them unobserved)."""
        for future in self.running:
            future.cancel()
        self.running.clear()
        self.pending.clear()
