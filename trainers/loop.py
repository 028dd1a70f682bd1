"""The training loops: online (roll out with the current policy, reward, credit, update, repeat) and offline.

Both loops share :func:`train_step` (credit → update → the step's mean reward) and the bookkeeping
after it (log line, ``on_step``, progress bar, checkpoints). One step of :func:`train_online` reads
top to bottom:

1. take the next ``problems_per_step`` training rows (a seeded shuffle, epoch after epoch);
2. roll out the graph on them with the current policy as every model alias (recorded in the store),
   wherever the rollout source runs them (:mod:`trainers.rollouts`: this process, or Ray workers);
3. reward every model trace against the row's answer (math-verify by default) and record the rewards;
   with ``dynamic_sampling`` (DAPO), roll fresh problems out, for up to that many rounds, in place of
   those whose runs carry no signal (every credited advantage 0);
4. assign credit (``scheme``: ``"spiral"``, ``"grpo"``, ``"rloo"``; ``scale_by_std`` divides by each group's
   std), keep the trained roles and, for the AggLM recipe, only the aggregations of hard sets and a share of
   easy ones; with ``mixed_sets_only``, only the aggregations of sets of mixed correctness;
5. update the policy (one optimiser step, gradient accumulation inside);
6. refresh the rollout engines (nothing to do when one shares the policy's weights);
7. log the step (console and JSONL) and checkpoint. Besides the update's figures, each step logs per
   role (``single``, ``search``, ``aggregate``): traces, the share with advantage 0 (no signal),
   mean |advantage|, token entropy, KL to the start (with ``PolicyConfig(measure_kl=True)``) and
   the share of trained traces with an extracted answer (does a role's format drift?).

:func:`train_offline` runs steps 3–5 and 7 over runs already in a store, selected by graph, dataset,
model and time, with the rewards recorded there or computed from given answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import scaffold as sf
from scaffold._sync import no_running_loop
from scaffold.store import DEFAULT, resolve_store
from trainers.credit import agglm_select, assign_credit, trainable
from trainers.episodes import external_inputs
from trainers.journal import LOOP_FILE, Journal
from trainers.rewards import math_reward, rewards_from
from trainers.rollouts import LocalRollouts, RolloutSource
from trainers.selection import has_signal, mixed_sets
from trainers.types import ROLES, Credited, RewardedRun, RolloutPolicy, StepMetrics, TrainablePolicy
from trainers.weights import rollout_version

if TYPE_CHECKING:
    from trainers.distributed import RolloutCluster

Reward = Callable[[sf.Trace, str], float]
"""``reward(trace, reference_answer) -> float``."""
_Row = TypeVar("_Row")


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """How a training loop samples, credits and logs (the optimiser's settings live in the policy's config).

    Examples:
        >>> LoopConfig(steps=10, scheme="grpo").problems_per_step
        8
    """

    steps: int = 20
    problems_per_step: int = 8
    scheme: str = "spiral"
    """Credit assignment scheme (see :data:`trainers.credit.SCHEMES`)."""
    turn_discount: float = 1.0
    """An agent's turn ``t`` of ``T`` gets its episode's advantage times this to the power ``T - t``
    (see :mod:`trainers.episodes`; 1: every turn shares the final reward's credit)."""
    roles: tuple[str, ...] = ROLES
    """Which roles are trained: ``("aggregate",)`` trains the aggregator only."""
    easy_fraction: float | None = None
    """AggLM selection: train the aggregations of every hard set and this share of easy ones (``None``: all)."""
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 1.0})
    """Sampling parameters of every rollout call."""
    seed: int = 0
    concurrency: int = 32
    """Problems rolled out at once."""
    log_path: str | None = None
    """A JSONL file that gets one line of :class:`StepMetrics` per step."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    """Save the policy every this many steps (0: only at the end, when ``checkpoint_dir`` is set)."""
    dataset: str = "train"
    """The dataset name rollouts are recorded under."""
    token_budget: int | None = None
    """Stop once the rollouts have sampled this many completion tokens (methods compared at equal budget)."""
    run_name: str | None = None
    """Rollouts of step ``s`` are recorded as runs ``{run_name}-{s}-{i}``. ``None``: a fresh name per training,
    kept in the checkpoint, so a resumed training reuses the recorded calls of a step it had not finished."""
    scale_by_std: bool = False
    """Divide each group's advantages by the std of its rewards, as GRPO's paper does (SPIRAL: the aggregation and
    single groups; its set advantages are not divided). Off by default, following Dr. GRPO: dividing up-weights the
    groups that are nearly all right or all wrong (a small std), a bias by each problem's difficulty, and with binary
    rewards and small groups it amplifies noise. A scheme registered without a ``scale_by_std`` option is only
    called with it when this is on."""
    mixed_sets_only: bool = False
    """Train an aggregation only when the candidates it read were neither all right nor all wrong (GenSelect-RL's
    mixed-correctness filter, :func:`trainers.selection.mixed_sets`); other roles pass. Applied after credit, so
    every set still shapes the baselines; ``extra["mixed_dropped"]`` counts the aggregations dropped per step."""
    dynamic_sampling: int = 0
    """DAPO's dynamic sampling, online: at most this many extra rollout rounds per step. A run whose credited
    traces all have advantage 0 carries no signal; each round rolls out as many fresh problems as the step lacks
    runs with signal, drawn from a generator seeded by (``seed``, step, round), so a resumed training draws the
    same. The step then trains on ``problems_per_step`` runs: those with signal, topped up, if the rounds ran out,
    with runs without (they add nothing to the gradient). Logs ``extra["refilled"]`` (problems rolled out again)
    and ``extra["zero_signal_runs"]`` (runs of the step's first round without signal). Needs a rollout source with
    ``max_lag`` 0. 0: off."""

    def __post_init__(self) -> None:
        if self.dynamic_sampling < 0:
            raise ValueError(f"dynamic_sampling counts extra rollout rounds (0: off), got {self.dynamic_sampling}")


def batches(rows: Sequence[_Row], size: int, seed: int) -> Iterator[list[_Row]]:
    """Endless batches of ``size`` rows: a seeded shuffle, then the next shuffle when it runs out.

    Examples:
        >>> it = batches([{"i": i} for i in range(3)], 2, seed=0)
        >>> [len(next(it)) for _ in range(3)]
        [2, 2, 2]
    """
    if not rows:
        raise ValueError("no training rows")
    rng, order = random.Random(seed), list(range(len(rows)))
    position = len(order)
    while True:
        batch: list[_Row] = []
        while len(batch) < size:
            if position == len(order):
                rng.shuffle(order)
                position = 0
            batch.append(rows[order[position]])
            position += 1
        yield batch


def rollout_seed(config: LoopConfig, step: int) -> int:
    """The seed of step ``step``'s rollouts (row ``i`` of the step runs with this plus ``i``).

    Examples:
        >>> rollout_seed(LoopConfig(seed=1), 2)
        1000005
    """
    return config.seed * 1_000_003 + step


def run_name(config: LoopConfig, steps_done: int) -> str:
    """The name a training records its rollouts under: ``config.run_name``; for a resumed policy, the one kept in
    its checkpoint (``config.checkpoint_dir``); else a fresh one."""
    if config.run_name:
        return config.run_name
    if config.checkpoint_dir and steps_done > 0:
        kept = Path(config.checkpoint_dir) / LOOP_FILE
        if kept.exists():
            return str(json.loads(kept.read_text())["run_name"])
    return f"train-{uuid.uuid4().hex[:12]}"


def credit_runs(
    runs: Sequence[tuple[Sequence[sf.Trace], Mapping[str, float], str | None]],
    config: LoopConfig,
    *,
    rng: random.Random | None = None,
) -> list[Credited]:
    """Step 4 over a :class:`~trainers.types.RewardedRun` (or plain tuple) per run: credit, roles, AggLM selection.

    Each run's credited traces are ordered by node and index, whatever order its calls finished in, so
    an update does not depend on timing. The reference answer is only read by the AggLM selection
    (``config.easy_fraction``), which needs it to tell hard sets from easy ones.
    """
    items: list[Credited] = []
    for traces, rewards, answer in runs:
        credited = _credit(traces, rewards, config)
        if config.easy_fraction is not None:
            if answer is None:
                raise ValueError("the AggLM selection (easy_fraction) needs each run's reference answer")
            credited = _agglm_filter(traces, answer, credited, config.easy_fraction, rng or random.Random(0))
        items.extend(credited)
    return items


def _credit(traces: Sequence[sf.Trace], rewards: Mapping[str, float], config: LoopConfig) -> list[Credited]:
    """One run's credit by ``config.scheme``, its trained roles only, ordered by node and index."""
    options = {"scale_by_std": True} if config.scale_by_std else {}  # a registered scheme may not take the option
    credited = [c for c in assign_credit(traces, rewards, scheme=config.scheme, turn_discount=config.turn_discount,
                                         **options) if c.role in config.roles]
    # a run's traces arrive in the order its calls finished (or were reused on resume): fix one order
    credited.sort(key=lambda c: (c.trace.node, c.trace.index))
    return credited


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _agglm_filter(traces: Sequence[sf.Trace], answer: str, credited: list[Credited], easy_fraction: float,
                  rng: random.Random) -> list[Credited]:
    """Keep credited aggregations whose set was chosen by :func:`agglm_select`; other roles pass."""
    by_id = {t.id: t for t in traces}
    sets: list[tuple[str, ...]] = []
    for item in credited:
        key = tuple(sorted(external_inputs(item.trace)))
        if item.role == "aggregate" and key not in sets:
            sets.append(key)
    answers = [[by_id[i].answer for i in key if i in by_id] for key in sets]
    keep = {sets[i] for i in agglm_select(answers, answer, easy_fraction=easy_fraction, rng=rng)}
    return [c for c in credited if c.role != "aggregate" or tuple(sorted(external_inputs(c.trace))) in keep]


def train_step(
    policy: TrainablePolicy, runs: Sequence[RewardedRun], config: LoopConfig, *, rng: random.Random | None = None,
    min_version: int | None = None,
) -> tuple[StepMetrics, list[Credited]]:
    """Steps 4–5 of every loop: credit the rewarded runs, then update the policy once.

    Returns the update's metrics, ``reward_mean`` set to the mean of every reward of the runs, and
    the credited traces it trained on. ``rng`` drives the AggLM selection (``config.easy_fraction``);
    the loops pass one generator, seeded with ``config.seed``, to every step. With ``min_version``
    (asynchronous rollouts), credited traces sampled by an older policy version
    (:func:`~trainers.weights.rollout_version`) are dropped after credit is assigned: their runs'
    rewards still shape the others' advantages, but they are too stale to train on
    (``extra["stale_dropped"]`` counts them). With ``config.mixed_sets_only`` the aggregations of uniform sets
    are dropped after credit too (:func:`~trainers.selection.mixed_sets`; ``extra["mixed_dropped"]``).

    Examples:
        >>> metrics, items = train_step(policy, [RewardedRun(traces, rewards, "4")], LoopConfig())  # doctest: +SKIP
    """
    items = credit_runs(runs, config, rng=rng)
    extra: dict[str, Any] = {}
    if config.mixed_sets_only:
        items, extra["mixed_dropped"] = mixed_sets(items, {key: value for run in runs for key, value in
                                                           run.rewards.items()})
    if min_version is not None:
        fresh = [c for c in items if (version := rollout_version(c.trace)) is None or version >= min_version]
        extra["stale_dropped"], items = len(items) - len(fresh), fresh
    metrics = policy.step(items)
    metrics = _with(metrics, reward_mean=_mean([value for run in runs for value in run.rewards.values()]))
    if extra:
        metrics = _with(metrics, extra={**dict(metrics.extra), **extra})
    return metrics, items


def train_online(
    policy: RolloutPolicy,
    graph: sf.Graph,
    rows: Sequence[Mapping[str, Any]],
    config: LoopConfig | None = None,
    *,
    reward: Reward = math_reward,
    engine: sf.Backend | None = None,
    store: Any = DEFAULT,
    progress: bool = True,
    on_step: Callable[[StepMetrics], None] | None = None,
    until: Callable[[Sequence[StepMetrics]], bool] | None = None,
    rollouts: RolloutSource | None = None,
    cluster: RolloutCluster | None = None,
) -> list[StepMetrics]:
    """Train ``policy`` on its own rollouts of ``graph`` over ``rows`` (dicts with ``problem`` and ``answer``).

    ``rollouts`` is where the rollouts run (a :class:`~trainers.rollouts.RolloutSource`): by default this
    process, with ``engine`` as the rollout backend (default: ``policy.backend()``, which shares the live
    weights; a separate engine such as :class:`~scaffold.VLLMBackend` is refreshed after every update).
    Every rollout is recorded in ``store`` with its rewards, and each of its calls with the policy version
    that sampled it. ``on_step`` sees each step's metrics; ``until(history)`` returning true ends training
    after that step (besides ``config.steps`` and ``config.token_budget``). Returns the step metrics.

    With ``cluster`` (a :class:`~trainers.distributed.RolloutCluster`, short for
    ``rollouts=cluster.rollouts()``) the rollouts run on Ray workers, each with its own engine that gets
    the new weights after every update, optionally up to ``cluster.max_lag`` steps ahead (see
    :mod:`trainers.distributed`); the steps are the same.

    Examples:
        >>> from trainers import Policy, train_online  # doctest: +SKIP
        >>> policy = Policy("path/to/pocket")  # doctest: +SKIP
        >>> train_online(policy, graphs.spiral.build(), rows, LoopConfig(steps=20))  # doctest: +SKIP
        >>> train_online(policy, graph, rows, config, cluster=RolloutCluster(workers=2))  # doctest: +SKIP
    """
    config = config or LoopConfig()
    if cluster is not None:
        if engine is not None:
            raise ValueError("engine= is the rollout backend of local training; on a cluster each worker builds "
                             "its own (RolloutCluster.engine)")
        if rollouts is not None:
            raise ValueError("give rollouts= or cluster= (short for rollouts=cluster.rollouts()), not both")
        rollouts = cluster.rollouts()
    elif rollouts is not None and engine is not None:
        raise ValueError("engine= is the local rollout backend; a rollout source brings its own")
    source = rollouts if rollouts is not None else LocalRollouts(engine)
    if not isinstance(source, RolloutSource):
        raise TypeError(f"rollouts must be a RolloutSource, not a {type(source).__name__}")
    if config.dynamic_sampling and source.max_lag:
        raise ValueError(f"dynamic_sampling rolls a step's problems out again after its rollouts are rewarded; a "
                         f"rollout source that runs ahead (max_lag={source.max_lag}) has queued the next steps "
                         f"already: use max_lag=0")
    no_running_loop("train_online", "a thread: train_online runs its own event loop")
    return asyncio.run(_train(policy, graph, rows, config, source, reward=reward, store=store, progress=progress,
                              on_step=on_step, until=until))


async def _train(policy: RolloutPolicy, graph: sf.Graph, rows: Sequence[Mapping[str, Any]], config: LoopConfig,
                 source: RolloutSource, *, reward: Reward, store: Any, progress: bool,
                 on_step: Callable[[StepMetrics], None] | None,
                 until: Callable[[Sequence[StepMetrics]], bool] | None) -> list[StepMetrics]:
    """One loop for every rollout source (the module docstring's steps 1–7)."""
    recorder = await asyncio.to_thread(resolve_store, store)
    try:
        await source.start(policy, graph, config, recorder)
        rng = random.Random(config.seed)
        feed = batches(rows, config.problems_per_step, config.seed)
        start = policy.steps_done
        for _ in range(start):  # a resumed run continues with the batches it had not seen
            next(feed)
        name = run_name(config, start)
        journal = Journal(policy, config, start=start, progress=progress, on_step=on_step, run_name=name)
        answers: dict[int, list[str]] = {}
        queued, sampled = start, 0
        for step in range(start, config.steps):
            if config.token_budget is not None and sampled >= config.token_budget:
                break
            # 1) problems: this step's, and those of the next max_lag steps
            while queued < config.steps and queued <= step + source.max_lag:
                batch = next(feed)
                answers[queued] = [str(row["answer"]) for row in batch]
                source.submit(queued, batch, f"{name}-{queued}", rollout_seed(config, queued))
                queued += 1
            # 2) rollouts with the current policy; 3) rewards, recorded
            rolled = await _roll_out(source, step, answers.pop(step), reward, recorder)
            if config.dynamic_sampling:  # 3b) fresh problems in place of runs without signal
                rolled = await _refill(rolled, source, rows, config, step, name, reward=reward, recorder=recorder)
            results, runs = rolled.results, rolled.runs
            sampled += rolled.tokens
            # 4) credit; 5) update (stale traces dropped when rollouts may lag)
            min_version = policy.steps_done - source.max_lag if source.max_lag else None
            if source.update_in_thread:  # the source's results keep arriving meanwhile
                metrics, items = await asyncio.to_thread(train_step, policy, runs, config, rng=rng,
                                                         min_version=min_version)
            else:
                metrics, items = train_step(policy, runs, config, rng=rng, min_version=min_version)
            # 6) the new weights to the rollout engines
            refreshed = await source.refresh(policy)
            # 7) log, checkpoint
            metrics = with_rollouts(metrics, items, results, runs, rollout_s=rolled.rollout_s, sampled=sampled)
            metrics = _with(metrics, extra={**dict(metrics.extra), **rolled.extra, **refreshed})
            history = journal.record(metrics, step)
            if until is not None and until(history):
                break
    finally:
        await source.close()
    return journal.close()


@dataclass
class _Rollouts:
    """Steps 2–3 of one online step: the results and their rewarded runs in row order, the seconds and completion
    tokens they took, and figures for the step's metrics (the source's, dynamic sampling's)."""

    results: list[sf.RunResult]
    runs: list[RewardedRun]
    rollout_s: float
    tokens: int
    extra: dict[str, Any]


async def _roll_out(source: RolloutSource, step: int, answers: Sequence[str], reward: Reward,
                    recorder: sf.Store | None) -> _Rollouts:
    """Collect the rows submitted as step ``step`` and reward each against its answer (row ``i``: ``answers[i]``)."""
    collected = await source.collect(step)
    runs = [rewarded(result, answers[result.index or 0], reward, recorder) for result in collected.results]
    return _Rollouts(collected.results, runs, collected.rollout_s,
                     sum(r.usage.completion_tokens for r in collected.results), dict(collected.extra))


def refill_problems(rows: Sequence[_Row], count: int, config: LoopConfig, step: int,
                    round_: int) -> tuple[list[_Row], int]:
    """Dynamic sampling's round ``round_`` of step ``step``: ``count`` rows and the seed of their rollouts.

    Drawn from a generator seeded by (``config.seed``, step, round), not from the training feed, so a resumed
    training (which skips the feed's first batches) draws the same refills. Without replacement while the rows
    last.

    Examples:
        >>> rows = [{"i": i} for i in range(10)]
        >>> refill_problems(rows, 3, LoopConfig(), 2, 1) == refill_problems(rows, 3, LoopConfig(), 2, 1)
        True
        >>> refill_problems(rows, 3, LoopConfig(), 2, 1) != refill_problems(rows, 3, LoopConfig(), 2, 2)
        True
    """
    rng = random.Random(f"refill/{config.seed}/{step}/{round_}")
    chosen = rng.sample(list(rows), count) if count <= len(rows) else rng.choices(list(rows), k=count)
    return chosen, rng.randrange(2**31)


async def _refill(first: _Rollouts, source: RolloutSource, rows: Sequence[Mapping[str, Any]], config: LoopConfig,
                  step: int, name: str, *, reward: Reward, recorder: sf.Store | None) -> _Rollouts:
    """Step 3b, dynamic sampling (DAPO): roll out fresh problems while the step lacks runs with signal.

    Round ``r`` runs its rows as ``{name}-{step}-r{r}-{i}`` (no clash with the step's own ``{name}-{step}-{i}``).
    Returns ``problems_per_step`` runs: those with signal first, then, if the rounds ran out, runs without.
    """
    with_signal: list[tuple[sf.RunResult, RewardedRun]] = []
    without: list[tuple[sf.RunResult, RewardedRun]] = []

    def sort(rolled: _Rollouts) -> None:
        for pair in zip(rolled.results, rolled.runs):
            signal = has_signal(_credit(pair[1].traces, pair[1].rewards, config))
            (with_signal if signal else without).append(pair)

    sort(first)
    zero_signal, refilled, rollout_s, tokens = len(without), 0, first.rollout_s, first.tokens
    for round_ in range(1, config.dynamic_sampling + 1):
        missing = config.problems_per_step - len(with_signal)
        if missing <= 0:
            break
        problems, seed = refill_problems(rows, missing, config, step, round_)
        source.submit(step, problems, f"{name}-{step}-r{round_}", seed)
        more = await _roll_out(source, step, [str(row["answer"]) for row in problems], reward, recorder)
        sort(more)
        refilled, rollout_s, tokens = refilled + missing, rollout_s + more.rollout_s, tokens + more.tokens
    chosen = with_signal + without[:max(config.problems_per_step - len(with_signal), 0)]
    return _Rollouts([result for result, _ in chosen], [run for _, run in chosen], rollout_s, tokens,
                     {**first.extra, "refilled": refilled, "zero_signal_runs": zero_signal})


def train_offline(
    policy: TrainablePolicy,
    store: sf.Store | str | os.PathLike[str],
    config: LoopConfig | None = None,
    *,
    answers: Mapping[str, str] | None = None,
    reward: Reward = math_reward,
    graph: str | None = None,
    dataset: str | None = None,
    model: str | None = None,
    since: float | None = None,
    until: float | None = None,
    progress: bool = True,
) -> list[StepMetrics]:
    """Train ``policy`` on runs already recorded in ``store`` (a :class:`~scaffold.Store` or a URL).

    Runs are selected by ``graph``, ``dataset``, ``model`` and time; each run's reference answer is
    ``answers[run.inputs["problem"]]``, or, without ``answers``, rewards recorded in the store
    (``store.add_reward``) are used as they are. ``config.steps`` optimiser steps are taken over
    batches of ``problems_per_step`` runs (each one :func:`train_step`). Traces must carry token
    ids and logprobs (record them with ``logprobs=True`` on the nodes to train).

    Examples:
        >>> train_offline(policy, "runs.db", LoopConfig(steps=5), answers=answers, graph="spiral")  # doctest: +SKIP
    """
    config = config or LoopConfig()
    opened = store if isinstance(store, sf.Store) else sf.Store(store)
    infos = opened.runs(graph=graph, dataset=dataset, model=model, since=since, until=until, status="ok",
                        newest_first=False)
    if not infos:
        raise ValueError("no recorded runs match the filters")
    rng = random.Random(config.seed)
    feed = batches(infos, config.problems_per_step, config.seed)
    journal = Journal(policy, config, start=0, progress=progress)
    for step in range(config.steps):
        runs = [_recorded(opened, info, answers, reward) for info in next(feed)]
        metrics, _ = train_step(policy, runs, config, rng=rng)
        journal.record(metrics, step)
    history = journal.close()
    if opened is not store:
        opened.close()
    return history


def rewarded(result: sf.RunResult, answer: str, reward: Reward, recorder: sf.Store | None) -> RewardedRun:
    """Step 3 online: reward the rollout's model traces against ``answer`` and record each reward in the store."""
    given = rewards_from(result.traces, answer, reward)
    if recorder is not None:
        for trace_id, value in given.items():
            recorder.add_reward(value, run_id=result.run_id, call_id=trace_id, source="trainer")
    return RewardedRun(result.traces, given, answer)


def _recorded(store: sf.Store, info: sf.RunInfo, answers: Mapping[str, str] | None, reward: Reward) -> RewardedRun:
    """Step 3 offline: a stored run rewarded against its problem's answer, or with the rewards recorded for it.
    A run of outputs collected elsewhere (imported, or given as candidates) with no model call of its own is
    refused: its outputs carry no policy token ids or sampling logprobs to take a policy-gradient step on."""
    traces = store.traces(info.id)
    if not any(trainable(t) for t in traces) and any(t.kind is sf.TraceKind.EXTERNAL for t in traces):
        raise sf.InputError(
            f"run {info.id} holds only outputs collected elsewhere ({info.graph}): they have no policy token ids or "
            "sampling logprobs, so policy-gradient training cannot use them. Fine-tune on them with supervised "
            "learning instead (their right answers, or the aggregations a run made over them), or record runs "
            "of your own model to train on.")
    if answers is None:
        return RewardedRun(traces, {r["call_id"]: float(r["value"]) for r in store.rewards(info.id)
                                    if r["call_id"] is not None})
    problem = str(info.inputs.get("problem", ""))
    if problem not in answers:
        raise KeyError(f"run {info.id} has no reference answer for its problem")
    return RewardedRun(traces, rewards_from(traces, answers[problem], reward), answers[problem])


def with_rollouts(metrics: StepMetrics, items: Sequence[Credited], results: Sequence[sf.RunResult],
                   runs: Sequence[RewardedRun], *, rollout_s: float, sampled: int) -> StepMetrics:
    """The online step's metrics: the share of runs whose final answer is right, the rollouts' figures, per role
    the share of answered traces (``reward_mean`` is 0.0 rather than ``None`` when nothing was rewarded)."""
    right = sum(sf.equivalent(result.answer, run.answer) for result, run in zip(results, runs))
    return _with(metrics, reward_mean=metrics.reward_mean or 0.0, accuracy=right / max(len(results), 1),
                 extra={**dict(metrics.extra), "rollout_s": round(rollout_s, 3), "sampled_tokens": sampled,
                        "trained_traces": len(items), "rollout_traces": sum(len(run.rewards) for run in runs),
                        "roles": _with_answers(metrics.extra.get("roles", {}), items)})


def _with_answers(roles: Mapping[str, Mapping[str, Any]], items: Sequence[Credited]) -> dict[str, dict[str, Any]]:
    """Per-role metrics plus the share of trained traces with an extracted answer (does a role's format drift?)."""
    out = {role: dict(values) for role, values in roles.items()}
    for role, values in out.items():
        members = [item for item in items if item.role == role]
        values["answered"] = sum(item.trace.answer is not None for item in members) / max(len(members), 1)
    return out


def _with(metrics: StepMetrics, **changes: Any) -> StepMetrics:
    values = asdict(metrics)
    values.update(changes)
    return StepMetrics(**values)
