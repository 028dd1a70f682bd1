"""Distributed online training: rollout workers on Ray, the trainer in this process, weights synced every update.

``train_online(policy, graph, rows, config, cluster=RolloutCluster(workers=2))`` runs the one training
loop (:func:`~trainers.loop.train_online`) with :class:`RayRollouts` as its rollout source
(:mod:`trainers.rollouts`): the rollouts spread over Ray actors (:class:`RolloutWorker`), each holding its own engine
(``"transformers"`` on CPUs, in-process ``"vllm"`` on GPUs, or a factory of your own). One step:

1. the step's problems go to the workers' shared queue (run ``{run_name}-{step}-{i}``, seed
   ``rollout_seed + i``: the same ids and seeds as the local loop), and each worker runs the graph
   on its share with the async executor, recording into the store (PostgreSQL directly; SQLite
   through one writer on this machine);
2. as the step's results arrive, this process rewards them and records the rewards;
3. :func:`~trainers.loop.train_step` credits and updates the policy (in a thread: results keep arriving);
4. the new weights (:func:`~trainers.weights.weight_update`: every weight, or only the LoRA adapter)
   go once into Ray's object store and every worker copies them into its engine, labelled with the
   policy version;
5. log and checkpoint as the local loop does.

**Lag.** With ``max_lag=0`` (the default) a step's rollouts start only after the previous update
reached every engine: the credited batch is the local loop's, trace for trace, given the same
seed and a deterministic engine. With ``max_lag=k`` the rollouts of the next ``k`` steps are
queued before the current update ends, so engines never wait for the trainer; a trace sampled by a
policy more than ``k`` versions older than the one it would update is dropped after credit is
assigned, and the rest are importance-weighted by their recorded sampling logprobs (the clipped
ratio of :func:`~trainers.loss.policy_loss`), as every trace is. Each call records the version that
sampled it (``metadata["weight_versions"]``, :func:`~trainers.weights.rollout_version`).

**Faults.** A worker that dies (its process killed, its machine lost) is replaced, and the new one
starts with the current weights. Its rows run again under the same run ids, so calls it had recorded
are reused and only the missing ones are sampled, with the same seeds: no trace counts twice. A
killed trainer resumes from its checkpoint (``Policy.resume``) under the run name kept there.

Where this departs from verl, OpenRLHF and SkyRL: weights travel through Ray's object store (a
copy on the CPU), also on GPUs; NCCL broadcast and CUDA IPC handles are not used.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import scaffold as sf
from scaffold._errors import BackendError, ClusterError
from scaffold.backends._base import Capabilities
from scaffold.cluster import Cluster
from scaffold.cluster._jobs import ClusterJob, Dispatcher
from scaffold.cluster._worker import RowWorker
from trainers.policy import Policy
from trainers.rollouts import Collected
from trainers.types import RolloutPolicy
from trainers.weights import LoraBase, WeightUpdate, apply_update, rollout_version, weight_update

if TYPE_CHECKING:
    from trainers.loop import LoopConfig

EngineFactory = Callable[..., sf.Backend]
"""``factory(model_dir, **engine_options) -> Backend``: a rollout engine built on a worker."""


@dataclass(frozen=True, kw_only=True)
class RolloutCluster:
    """Where and how the rollouts of a distributed training run (see the module docstring).

    Examples:
        >>> RolloutCluster(workers=2, max_lag=1).engine
        'transformers'
    """

    workers: int = 2
    """Rollout workers (Ray actors), each with its own engine."""
    address: str | None = None
    """The Ray cluster to join (``None``: the connected one, else a new local one; ``"auto"``; ``"ray://..."``)."""
    engine: str | EngineFactory = "transformers"
    """``"transformers"`` (CPU), ``"vllm"`` (in-process vLLM) or a picklable ``factory(model_dir, **options)``."""
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of each worker's engine (``max_batch_size=``, ``enable_lora=``, ``engine_kwargs=``...)."""
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    """GPUs per worker (a fraction shares one GPU between replicas)."""
    concurrency: int | None = None
    """Problems in flight per worker (``None``: ``LoopConfig.concurrency``)."""
    max_lag: int = 0
    """How many versions behind the policy it updates a trained trace may be (0: synchronous, exact)."""
    sync: Literal["auto", "full", "lora"] = "auto"
    """What each update sends: the LoRA adapter of a LoRA policy (``"auto"``), or every weight."""
    max_restarts: int = 4
    """Workers started in place of ones that died, over the whole training."""
    runtime_env: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_lag < 0:
            raise ValueError(f"max_lag cannot be negative, got {self.max_lag}")
        if self.sync not in ("auto", "full", "lora"):
            raise ValueError(f"sync is 'auto', 'full' or 'lora', not {self.sync!r}")
        if not callable(self.engine) and self.engine not in ("transformers", "vllm"):
            raise ValueError(f"engine is 'transformers', 'vllm' or a factory, not {self.engine!r}")
        self.cluster()  # the shared checks (workers, concurrency, CPUs)

    def rollouts(self) -> RayRollouts:
        """The rollout source ``train_online(..., cluster=self)`` trains with."""
        return RayRollouts(self)

    def cluster(self) -> Cluster:
        """The :class:`~scaffold.cluster.Cluster` the workers run on."""
        return Cluster(address=self.address, workers=self.workers, concurrency=self.concurrency,
                       num_cpus=self.num_cpus, max_restarts=self.max_restarts, runtime_env=dict(self.runtime_env))


class EngineRecipe:
    """A rollout engine not built yet: it pickles as its recipe, and a worker unpickling it builds the engine.

    In this process it only declares capabilities; calling it raises.

    Examples:
        >>> EngineRecipe("transformers", "/models/pocket", {}).capabilities.supports_n
        True
    """

    capabilities = Capabilities(supports_n=True, returns_token_ids=True, trainable=True)

    def __init__(self, engine: str | EngineFactory, model_dir: str, options: Mapping[str, Any]) -> None:
        self.engine, self.model_dir, self.options = engine, model_dir, dict(options)

    async def complete(self, request: sf.Request) -> list[sf.Completion]:
        raise BackendError("a rollout engine is built on the cluster's workers, not in the trainer", retryable=False)

    def __reduce__(self) -> tuple[Any, ...]:
        return build_engine, (self.engine, self.model_dir, self.options)


def build_engine(engine: str | EngineFactory, model_dir: str, options: Mapping[str, Any]) -> sf.Backend:
    """The rollout engine of one worker, loaded from the base model's directory."""
    if engine == "transformers":
        from scaffold.backends._transformers import TransformersBackend

        return TransformersBackend(model_dir, **options)
    if engine == "vllm":
        from scaffold.backends._vllm import VLLMBackend

        return VLLMBackend(model_dir, **options)
    if callable(engine):
        return engine(model_dir, **options)
    raise ValueError(f"unknown rollout engine {engine!r}")


class RolloutWorker(RowWorker):
    """A row worker whose engine takes new weights (a Ray actor; internal): :meth:`sync` after each update.

    Examples:
        >>> RolloutWorker.__mro__[1].__name__
        'RowWorker'
    """

    def __init__(self, payload: bytes, store: tuple[str, Any], coordinator: Any, worker: int, workers: int,
                 update: WeightUpdate, model_dir: str) -> None:
        super().__init__(payload, store, coordinator, worker, workers)
        self.engine = next(iter(self.models.values())).backend
        self.base = LoraBase(model_dir)
        self.version = apply_update(self.engine, update, self.base)

    async def sync(self, update: WeightUpdate) -> int:
        """Copy ``update`` into the engine (between its batches) and return the engine's weights version."""
        self.version = await asyncio.to_thread(apply_update, self.engine, update, self.base)
        return self.version

    async def state(self) -> dict[str, Any]:
        """This worker's process id, its engine's weights version and the sum of its engine's weights (checks)."""
        model = getattr(self.engine, "model", None)
        total = None
        if model is not None:
            total = float(sum(float(t.double().sum()) for t in model.state_dict().values()))
        return {"pid": os.getpid(), "version": self.version, "weights_sum": total}


class RayRollouts:
    """The :class:`~trainers.rollouts.RolloutSource` of a :class:`RolloutCluster`: the steps' rows on Ray workers,
    queued by step and gathered by step as they arrive; after each update the new weights go to every worker.

    Examples:
        >>> RayRollouts(RolloutCluster(workers=2, max_lag=1)).max_lag
        1
    """

    update_in_thread = True

    def __init__(self, cluster: RolloutCluster) -> None:
        self.cluster = cluster
        self.max_lag = cluster.max_lag
        self.job: ClusterJob | None = None
        self.sync: Sync | None = None
        self.dispatch: Dispatcher | None = None
        self.pump: asyncio.Future[Any] | None = None
        self.step_of: dict[str, int] = {}
        self.expected: dict[int, int] = {}
        self.arrived: dict[int, list[sf.RunResult]] = {}
        self.queued_at: dict[int, float] = {}
        self.changed = asyncio.Event()

    async def start(self, policy: RolloutPolicy, graph: sf.Graph, config: LoopConfig, store: Any) -> None:
        """Start the workers, each building its engine from the base model and taking the current weights."""
        if not isinstance(policy, Policy):
            raise TypeError(f"training on a cluster needs a trainers.Policy (its weights go to the workers' engines), "
                            f"not a {type(policy).__name__}")
        cluster = self.cluster
        engine = EngineRecipe(cluster.engine, str(policy.model_dir), cluster.engine_options)
        model = sf.Model(engine, params=dict(config.sampling))
        sync = self.sync = Sync(policy, cluster.sync)
        job = self.job = ClusterJob(cluster.cluster(), worker_class=RolloutWorker, num_gpus=cluster.num_gpus,
                                    worker_args=lambda: (sync.current, str(policy.model_dir)))
        await sync.put(job.ray)
        await job.start(graph, {alias: model for alias in graph.aliases}, store, {})
        await _started(job)
        self.dispatch = Dispatcher(job, cluster.concurrency or config.concurrency, config.dataset)
        self.pump = asyncio.ensure_future(self._pump())

    def submit(self, step: int, problems: Sequence[Mapping[str, Any]], run_id: str, seed: int) -> None:
        assert self.dispatch is not None, "start() first"
        self.expected[step], self.arrived[step] = len(problems), []
        self.queued_at[step] = time.perf_counter()
        for i, row in enumerate(problems):
            planned = sf.plan_row({"problem": row["problem"]}, i, seed=seed, run_id=run_id, recorded=True)
            self.step_of[str(planned.run_id)] = step
            self.dispatch.add(planned)

    async def _pump(self) -> None:
        assert self.dispatch is not None
        while True:
            result = await self.dispatch.next()
            if result is None:
                await self.dispatch.wait_for_rows()
                continue
            self.arrived[self.step_of.pop(result.run_id)].append(result)
            self.changed.set()

    async def collect(self, step: int) -> Collected:
        assert self.pump is not None and self.job is not None, "start() first"
        waited = time.perf_counter()
        while len(self.arrived[step]) < self.expected[step]:
            self.changed.clear()
            waiting = asyncio.ensure_future(self.changed.wait())
            await asyncio.wait([self.pump, waiting], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if self.pump.done():
                self.pump.result()  # raises the pump's error
        del self.expected[step]
        results = sorted(self.arrived.pop(step), key=lambda r: r.index or 0)
        now = time.perf_counter()
        versions = [v for r in results for t in r.traces if (v := rollout_version(t)) is not None]
        return Collected(results, now - self.queued_at.pop(step), {
            "rollout_wait_s": round(now - waited, 3),
            "rollout_versions": [min(versions), max(versions)] if versions else None})

    async def refresh(self, policy: RolloutPolicy) -> dict[str, Any]:
        assert self.sync is not None and self.job is not None, "start() first"
        sync_s = await self.sync.push(self.job)
        return {"sync_s": round(sync_s, 4), "sync_bytes": self.sync.nbytes,
                "workers_replaced": self.job.workers.restarts}

    async def close(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
            try:
                await self.pump
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - its error was raised by collect already
                pass
        if self.dispatch is not None:
            self.dispatch.cancel()
        if self.job is not None:
            await self.job.close()


async def _started(job: ClusterJob) -> None:
    """Wait until every worker has built its engine and taken the weights; a worker that could not raises."""
    try:
        await asyncio.gather(*(actor.pid.remote() for actor in job.workers.live()))
    except Exception as exc:  # noqa: BLE001 - Ray's error names the constructor's own
        raise ClusterError(f"a rollout worker did not start: {exc}") from None


class Sync:
    """The policy's latest weights in Ray's object store, and their trip to every live worker.

    Examples:
        >>> Sync.__name__
        'Sync'
    """

    def __init__(self, policy: Policy, kind: Literal["auto", "full", "lora"]) -> None:
        self.policy, self.kind = policy, kind
        self.current: Any = None
        """The object ref of the latest :class:`~trainers.weights.WeightUpdate` (what a new worker starts with)."""
        self.nbytes = 0

    async def put(self, ray: Any) -> None:
        update = await asyncio.to_thread(weight_update, self.policy, self.kind)
        self.nbytes = update.nbytes
        self.current = ray.put(update)

    async def push(self, job: ClusterJob) -> float:
        """Send the current weights to every live worker and wait until each has them; returns the seconds taken."""
        started = time.perf_counter()
        await self.put(job.ray)
        dead = (job.ray.exceptions.RayActorError, job.ray.exceptions.ActorUnavailableError)
        for ack in [actor.sync.remote(self.current) for actor in job.workers.live()]:
            try:
                await ack
            except dead:  # its rows fail too; the dispatcher replaces it, and the new one starts from `current`
                pass
        return time.perf_counter() - started
