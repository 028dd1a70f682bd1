"""A cluster job's row worker and what it is built from: the graph and a recipe per model.

The driver turns each distinct ``Model`` bound to a graph into a :class:`ModelRecipe` (its
backend, parameters, timeout, retries and the keys of its shared limits), pickles them with the
graph once per job, and every :class:`RowWorker` (a Ray actor) rebuilds the models from that
payload, leasing their limits from the job's :class:`~scaffold.cluster._limits.LimitsCoordinator`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scaffold._errors import ClusterError, GraphError, InputError, StoreError
from scaffold._result import RunResult
from scaffold.backends._model import Model
from scaffold.cluster._limits import LeasedBudget, LeasedPlaces, LeasedRate, LimitSpec
from scaffold.cluster._store import RemoteStore
from scaffold.store._default import resolve_store

BUDGET_KEY = "budget"


@dataclass
class ModelRecipe:
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
class WorkerPayload:
    """What every worker of a job is built from (pickled once per job)."""

    graph: Any
    recipes: dict[str, ModelRecipe]  # one per distinct driver Model, by the first alias bound to it
    aliases: dict[str, str]  # alias -> recipe key
    budget: tuple[int | None, float | None] | None
    run_kwargs: dict[str, Any]


def plan_models(models: Mapping[str, Model]) -> tuple[dict[str, ModelRecipe], dict[str, str], dict[str, LimitSpec]]:
    """One recipe per distinct model (aliases sharing a ``Model`` share its limits), and the limits to share."""
    import cloudpickle

    recipes: dict[str, ModelRecipe] = {}
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
        recipe = ModelRecipe(model.backend, model.name, dict(model.params), model.timeout, model.retry,
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

    Examples:
        >>> RowWorker.__mro__[0].__name__
        'RowWorker'
    """

    def __init__(self, payload: bytes, store: tuple[str, Any], coordinator: Any, worker: int, workers: int) -> None:
        import cloudpickle

        job: WorkerPayload = cloudpickle.loads(payload)
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
