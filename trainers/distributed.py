"""Distributed online training: rollout workers on Ray, the trainer in this process, weights synced every update.

``train_online(policy, graph, rows, config, cluster=RolloutCluster(workers=2))`` runs the local loop's
steps with the rollouts spread over Ray actors (:class:`RolloutWorker`), each holding its own engine
(``"transformers"`` on CPUs, in-process ``"vllm"`` on GPUs, or a factory of your own). One step:

1. the step's problems go to the workers' shared queue (run ``{run_name}-{step}-{i}``, seed
   ``rollout_seed + i``: the same ids and seeds as the local loop), and each worker runs the graph
   on its share with the async executor, recording into the store (PostgreSQL directly; SQLite
   through one writer on this machine);
2. as the step's results arrive, this process rewards them and records the rewards;
3. :func:`~trainers.loop.train_step` credits and updates the policy (the local loop's function);
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
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import scaffold as sf
from scaffold._errors import BackendError, ClusterError
from scaffold.backends._base import Capabilities
from scaffold.cluster import Cluster
from scaffold.cluster._jobs import ClusterJob, Dispatcher, JobRow
from scaffold.cluster._worker import RowWorker
from scaffold.store import DEFAULT, resolve_store
from trainers.loop import (
    LoopConfig,
    Reward,
    _Journal,
    _rewarded,
    _with,
    _with_rollouts,
    batches,
    rollout_seed,
    run_name,
    train_step,
)
from trainers.policy import Policy
from trainers.rewards import math_reward
from trainers.types import RolloutPolicy, StepMetrics
from trainers.weights import LoraBase, WeightUpdate, apply_update, rollout_version, weight_update

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


class _Rollouts:
    """The steps' rows on the workers: queued by step, results gathered by step as they arrive."""

    def __init__(self, dispatch: Dispatcher) -> None:
        self.dispatch = dispatch
        self.step_of: dict[str, int] = {}
        self.expected: dict[int, int] = {}
        self.arrived: dict[int, list[sf.RunResult]] = {}
        self.queued_at: dict[int, float] = {}
        self.changed = asyncio.Event()
        self.pump = asyncio.ensure_future(self._pump())

    def submit(self, step: int, problems: Sequence[Mapping[str, Any]], name: str, seed: int) -> None:
        self.expected[step], self.arrived[step] = len(problems), []
        self.queued_at[step] = time.perf_counter()
        for i, row in enumerate(problems):
            run_id = f"{name}-{step}-{i}"
            self.step_of[run_id] = step
            self.dispatch.add(JobRow({"problem": row["problem"]}, i, seed + i, run_id, i))

    async def _pump(self) -> None:
        while True:
            result = await self.dispatch.next()
            if result is None:
                await self.dispatch.wait_for_rows()
                continue
            self.arrived[self.step_of.pop(result.run_id)].append(result)
            self.changed.set()

    async def collect(self, step: int) -> list[sf.RunResult]:
        """Every result of ``step``, in row order (raises what stopped the workers)."""
        while len(self.arrived[step]) < self.expected[step]:
            self.changed.clear()
            waiting = asyncio.ensure_future(self.changed.wait())
            await asyncio.wait([self.pump, waiting], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if self.pump.done():
                self.pump.result()  # raises the pump's error
        del self.expected[step]
        return sorted(self.arrived.pop(step), key=lambda r: r.index or 0)

    async def close(self) -> None:
        self.pump.cancel()
        try:
            await self.pump
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - its error was raised by collect already
            pass
        self.dispatch.cancel()


def train_on_cluster(
    policy: RolloutPolicy,
    graph: sf.Graph,
    rows: Sequence[Mapping[str, Any]],
    config: LoopConfig,
    cluster: RolloutCluster,
    *,
    reward: Reward = math_reward,
    store: Any = DEFAULT,
    progress: bool = True,
    on_step: Callable[[StepMetrics], None] | None = None,
    until: Callable[[Sequence[StepMetrics]], bool] | None = None,
) -> list[StepMetrics]:
    """What ``train_online(..., cluster=...)`` runs (see the module docstring)."""
    if not isinstance(policy, Policy):
        raise TypeError(f"training on a cluster needs a trainers.Policy (its weights go to the workers' engines), "
                        f"not a {type(policy).__name__}")
    return asyncio.run(_train(policy, graph, rows, config, cluster, reward=reward, store=store, progress=progress,
                              on_step=on_step, until=until))


async def _train(policy: Policy, graph: sf.Graph, rows: Sequence[Mapping[str, Any]], config: LoopConfig,
                 cluster: RolloutCluster, *, reward: Reward, store: Any, progress: bool,
                 on_step: Callable[[StepMetrics], None] | None,
                 until: Callable[[Sequence[StepMetrics]], bool] | None) -> list[StepMetrics]:
    recorder = await asyncio.to_thread(resolve_store, store)
    engine = EngineRecipe(cluster.engine, str(policy.model_dir), cluster.engine_options)
    model = sf.Model(engine, params=dict(config.sampling))
    start = policy.steps_done
    sync = Sync(policy, cluster.sync)
    job = ClusterJob(cluster.cluster(), worker_class=RolloutWorker, num_gpus=cluster.num_gpus,
                     worker_args=lambda: (sync.current, str(policy.model_dir)))
    try:
        await sync.put(job.ray)
        await job.start(graph, {alias: model for alias in graph.aliases}, recorder, {})
        await _started(job)
        rollouts = _Rollouts(Dispatcher(job, cluster.concurrency or config.concurrency, config.dataset))
    except BaseException:
        await job.close()
        raise
    rng = random.Random(config.seed)
    feed = batches(rows, config.problems_per_step, config.seed)
    for _ in range(start):  # a resumed run continues with the batches it had not seen
        next(feed)
    name = run_name(config, start)
    journal = _Journal(policy, config, start=start, progress=progress, on_step=on_step, run_name=name)
    answers: dict[int, list[str]] = {}
    queued, sampled = start, 0
    try:
        for step in range(start, config.steps):
            if config.token_budget is not None and sampled >= config.token_budget:
                break
            # 1) queue this step's problems, and those of the next max_lag steps
            while queued < config.steps and queued <= step + cluster.max_lag:
                batch = next(feed)
                answers[queued] = [str(row["answer"]) for row in batch]
                rollouts.submit(queued, batch, name, rollout_seed(config, queued))
                queued += 1
            waited = time.perf_counter()
            results = await rollouts.collect(step)
            rollout_s = time.perf_counter() - rollouts.queued_at.pop(step)
            wait_s = time.perf_counter() - waited
            sampled += sum(r.usage.completion_tokens for r in results)
            # 2) rewards, recorded
            step_answers = answers.pop(step)
            runs = [_rewarded(result, step_answers[result.index or 0], reward, recorder) for result in results]
            # 3) credit and update (in a thread: the workers' results keep arriving meanwhile)
            min_version = policy.steps_done - cluster.max_lag if cluster.max_lag else None
            metrics, items = await asyncio.to_thread(train_step, policy, runs, config, rng=rng,
                                                     min_version=min_version)
            # 4) the new weights to every engine
            sync_s = await sync.push(job)
            # 5) log, checkpoint
            versions = [v for run in runs for t in run.traces if (v := rollout_version(t)) is not None]
            metrics = _with_rollouts(metrics, items, results, runs, rollout_s=rollout_s, sampled=sampled)
            metrics = _with(metrics, extra={
                **dict(metrics.extra), "rollout_wait_s": round(wait_s, 3), "sync_s": round(sync_s, 4),
                "sync_bytes": sync.nbytes, "rollout_versions": [min(versions), max(versions)] if versions else None,
                "workers_replaced": job.workers.restarts})
            history = journal.record(metrics, step)
            if until is not None and until(history):
                break
    finally:
        await rollouts.close()
        await job.close()
    return journal.close()


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
