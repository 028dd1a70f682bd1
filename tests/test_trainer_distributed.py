"""Distributed training on a real local Ray cluster: rollout workers, weight sync, lag, faults, resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import started_processes
from helpers import ScriptedEngine, no_weights_engine

import scaffold as sf
from scaffold._types import Request
from scaffold.backends._transformers import TransformersBackend
from trainers.distributed import RolloutCluster
from trainers.loop import LoopConfig, train_online, train_step
from trainers.policy import LoraSettings, Policy, PolicyConfig
from trainers.recipes import recipe
from trainers.types import Credited, RewardedRun, StepMetrics
from trainers.weights import LoraBase, apply_update, rollout_version, weight_update

ROWS = [{"problem": f"problem {i}", "answer": str(i % 3)} for i in range(9)]
SPIRAL = recipe("spiral")
EXACT = LoopConfig(steps=3, problems_per_step=3, seed=2, run_name="exact", dataset="d", **SPIRAL.loop_options)


class RecordingPolicy(Policy):
    """A Policy that keeps, per step, what it trained on: trace id, token ids, role and advantage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trained: list[list[tuple[str, tuple[int, ...] | None, str, float]]] = []

    def step(self, items: Sequence[Credited], **kwargs: Any) -> StepMetrics:
        self.trained.append([(c.trace.id, c.trace.token_ids, c.role, round(c.advantage, 9)) for c in items])
        return super().step(items, **kwargs)


def weights_sum(policy: Policy) -> float:
    return round(sum(float(t.double().sum()) for t in policy.merged_weights().values()), 6)


def recorded(store_url: str | Path, config: LoopConfig) -> dict[int, list[sf.Trace]]:
    """Model traces of each step's runs (``{run_name}-{step}-{i}``), read back from the store."""
    with sf.Store(store_url) as store:
        return {step: [t for i in range(config.problems_per_step) for t in store.traces(f"{config.run_name}-{step}-{i}")
                       if t.kind is sf.TraceKind.MODEL] for step in range(config.steps)}


def kill_a_worker_during(store_url: Path, step: int, outcome: list[int | str], timeout: float = 300) -> None:
    """Once the store holds a model call of step ``step`` (0-based: runs ``NAME-{step}-{i}``), SIGKILL one of this
    session's rollout workers (Ray titles them ``ray::RolloutWorker``; the session started the cluster, so they are
    among its descendants: never another program's process). Appends its pid to ``outcome``, or why it could not."""
    deadline = time.monotonic() + timeout
    with sf.Store(store_url) as store:
        while not any(t.kind is sf.TraceKind.MODEL for run in store.runs(limit=None)
                      if run.id.rsplit("-", 2)[1:2] == [str(step)] for t in store.traces(run.id)):
            if time.monotonic() > deadline:
                outcome.append(f"no call of step {step} was recorded within {timeout} s")
                return
            time.sleep(0.05)
    victims = started_processes("RolloutWorker")
    if not victims:
        outcome.append("no rollout worker of this session's cluster was running")
        return
    os.kill(victims[0].pid, signal.SIGKILL)
    outcome.append(victims[0].pid)


@pytest.fixture(scope="module")
def local_reference(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The local loop on EXACT with a scripted engine: what it trained on, its losses, weights sums, store."""
    path = tmp_path_factory.mktemp("local") / "runs.db"
    policy = RecordingPolicy(tiny_model_dir, PolicyConfig(lr=1e-3, seed=0))
    sums: list[float] = [weights_sum(policy)]
    history = train_online(policy, SPIRAL.graph, ROWS, EXACT, engine=ScriptedEngine(), store=path, progress=False,
                           on_step=lambda m: sums.append(weights_sum(policy)))
    return {"policy": policy, "history": history, "sums": sums, "store": path}


def test_full_and_lora_updates_bring_an_engine_to_the_policys_weights(tiny_model_dir: Path) -> None:
    """Every weight, or only the LoRA adapter merged on arrival: the engine ends with the policy's merged weights,
    labelled with its version, and the adapter is a small fraction of the full update."""
    import torch

    sizes = {}
    for lora in (None, LoraSettings(rank=4)):
        policy = Policy(tiny_model_dir, PolicyConfig(lora=lora))
        with torch.no_grad():  # LoRA's B starts at zero: move every trained weight so the merge matters
            for parameter in policy.model.parameters():
                if parameter.requires_grad:
                    parameter.add_(torch.randn_like(parameter) * 0.02)
        policy.steps_done = 3
        update = weight_update(policy)
        sizes[update.kind] = update.nbytes
        engine = TransformersBackend(tiny_model_dir)
        try:
            assert apply_update(engine, update, LoraBase(tiny_model_dir)) == 3 == engine.weights_version
            state = engine.model.state_dict()
            for name, tensor in policy.merged_weights().items():
                torch.testing.assert_close(state[name], tensor, atol=1e-6, rtol=1e-5)
            request = Request(messages=(("user", "hi"),), params={"max_tokens": 3, "temperature": 0})
            completion = asyncio.run(engine.complete(request))[0]
            assert completion.metadata["weight_versions"] == (("3", 0, len(completion.token_ids)),)
        finally:
            engine.close()
    assert set(sizes) == {"full", "lora"} and sizes["lora"] * 10 < sizes["full"]
    with pytest.raises(ValueError, match="needs a policy trained with LoRA"):
        weight_update(Policy(tiny_model_dir), "lora")


def test_stale_traces_are_dropped_after_credit_and_counted() -> None:
    """With min_version, traces sampled by older versions are not trained on; unversioned ones are kept."""
    def trace(i: int, version: str | None, answer: str) -> sf.Trace:
        meta = {"weight_versions": [[version, 0, 2]]} if version is not None else {}
        return sf.Trace(id=f"r/s#{i}", run_id="r", node="s", index=i, answer=answer, token_ids=(1, 2),
                        logprobs=(-1.0, -1.0), metadata=meta)

    traces = [trace(0, "4", "1"), trace(1, "2", "2"), trace(2, None, "3"), trace(3, "3", "1")]
    run = RewardedRun(traces, {t.id: float(t.answer == "1") for t in traces}, "1")
    trained: list[Sequence[Credited]] = []

    class Keeping:
        def step(self, items: Sequence[Credited]) -> StepMetrics:
            trained.append(items)
            return StepMetrics(step=1, loss=0.0, reward_mean=None, accuracy=None, advantage_mean=0.0,
                               advantage_std=0.0, advantage_abs_max=0.0, entropy=0.0, kl=None, clip_fraction=0.0,
                               tokens=0, tokens_per_s=0.0)

        def save(self, directory: str) -> None:
            pass

    metrics, items = train_step(Keeping(), [run], LoopConfig(scheme="grpo"), min_version=3)
    assert [c.trace.index for c in items] == [0, 2, 3] and metrics.extra["stale_dropped"] == 1
    assert [rollout_version(t) for t in traces] == [4, 2, None, 3]
    _, everything = train_step(Keeping(), [run], LoopConfig(scheme="grpo"))
    assert [c.advantage for c in everything if c.trace.index != 1] == [c.advantage for c in items]


@pytest.mark.slow
def test_lag_zero_on_two_workers_trains_exactly_as_the_local_loop(
        ray_local: str, tiny_model_dir: Path, local_reference: dict[str, Any], tmp_path: Path) -> None:
    """Same seed, scripted engine: the credited batch of every step is the local loop's trace for trace, the
    update equals it, every recorded call carries its step's version, and the workers saw the local weights."""
    import torch

    policy = RecordingPolicy(tiny_model_dir, PolicyConfig(lr=1e-3, seed=0))
    history = train_online(policy, SPIRAL.graph, ROWS, EXACT, store=tmp_path / "runs.db", progress=False,
                           cluster=RolloutCluster(workers=2, engine=ScriptedEngine, num_cpus=0.5))
    local = local_reference["policy"]
    assert policy.trained == local.trained and all(policy.trained)
    assert [m.loss for m in history] == pytest.approx([m.loss for m in local_reference["history"]], abs=1e-7)
    for name, tensor in local.merged_weights().items():
        torch.testing.assert_close(policy.merged_weights()[name], tensor, atol=1e-7, rtol=0)
    spread, here = recorded(tmp_path / "runs.db", EXACT), recorded(local_reference["store"], EXACT)
    for step in range(EXACT.steps):
        assert len(spread[step]) == len(here[step]) == 3 * 24
        assert {rollout_version(t) for t in spread[step]} == {step}
        assert {t.metadata["weights_sum"] for t in spread[step]} == {local_reference["sums"][step]}
    assert [m.extra["rollout_versions"] for m in history] == [[0, 0], [1, 1], [2, 2]]
    assert all(m.extra["sync_s"] > 0 and m.extra["sync_bytes"] > 0 for m in history)


@pytest.mark.slow
def test_a_worker_killed_mid_step_is_replaced_and_the_step_counts_each_trace_once(
        ray_local: str, tiny_model_dir: Path, local_reference: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL a rollout worker while step 2's rows run (once one of their calls is recorded; 0.2 s a call): a new
    worker takes the current weights, the rows finish from their recorded calls plus re-sampled ones, and the
    training equals the local loop's."""
    policy = RecordingPolicy(tiny_model_dir, PolicyConfig(lr=1e-3, seed=0))
    killed: list[int | str] = []

    def kill_soon(metrics: StepMetrics) -> None:
        if metrics.step == 1:
            threading.Thread(target=kill_a_worker_during, args=(tmp_path / "runs.db", 1, killed), daemon=True).start()

    history = train_online(policy, SPIRAL.graph, ROWS, EXACT, store=tmp_path / "runs.db", progress=False,
                           on_step=kill_soon,
                           cluster=RolloutCluster(workers=2, engine=ScriptedEngine, engine_options={"delay": 0.2},
                                                  num_cpus=0.5))
    assert len(killed) == 1 and isinstance(killed[0], int), killed
    assert history[-1].extra["workers_replaced"] == 1
    assert policy.trained == local_reference["policy"].trained
    traces = recorded(tmp_path / "runs.db", EXACT)
    for step in range(EXACT.steps):
        assert len(traces[step]) == len({t.id for t in traces[step]}) == 3 * 24
        assert {rollout_version(t) for t in traces[step]} == {step}


@pytest.mark.slow
def test_bounded_lag_samples_ahead_and_never_trains_past_the_bound(
        ray_local: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """max_lag=1: the next step's rollouts start before the update ends (some traces are one version behind),
    and no trained trace is more than one version older than the policy it updates."""
    policy = RecordingPolicy(tiny_model_dir, PolicyConfig(lr=1e-3, seed=0))
    config = LoopConfig(**{**EXACT.__dict__, "steps": 4, "run_name": "lagged"})
    history = train_online(policy, SPIRAL.graph, ROWS, config, store=tmp_path / "runs.db", progress=False,
                           cluster=RolloutCluster(workers=2, engine=ScriptedEngine, engine_options={"delay": 0.05},
                                                  num_cpus=0.5, max_lag=1))
    assert [m.step for m in history] == [1, 2, 3, 4]
    lags = []
    traces = recorded(tmp_path / "runs.db", config)
    for step in range(config.steps):
        versions = {rollout_version(t) for t in traces[step]}
        assert versions <= {step - 1, step}, (step, versions)
        lags.extend(step - v for v in versions if v is not None)
    assert max(lags) == 1  # the workers sampled ahead with the previous weights
    assert all(m.extra["stale_dropped"] == 0 for m in history)


@pytest.mark.slow
def test_a_resumed_trainer_continues_under_its_run_name(ray_local: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two steps with a checkpoint, then Policy.resume: step 3 runs on the cluster under the same run name, its
    workers start from the resumed weights (version 2)."""
    config = LoopConfig(steps=2, problems_per_step=2, seed=1, scheme="grpo", dataset="d",
                        checkpoint_dir=str(tmp_path / "ckpt"))
    graph = recipe("grpo").graph
    cluster = RolloutCluster(workers=2, engine=ScriptedEngine, num_cpus=0.5)
    train_online(Policy(tiny_model_dir, PolicyConfig(lr=1e-3)), graph, ROWS, config, store=tmp_path / "runs.db",
                 progress=False, cluster=cluster)
    resumed = Policy.resume(tmp_path / "ckpt")
    more = train_online(resumed, graph, ROWS, LoopConfig(**{**config.__dict__, "steps": 3}),
                        store=tmp_path / "runs.db", progress=False, cluster=cluster)
    assert [m.step for m in more] == [3] and resumed.steps_done == 3
    with sf.Store(tmp_path / "runs.db") as store:
        runs = store.runs(dataset="d", limit=None)
        names = {run.id.rsplit("-", 2)[0] for run in runs}
        assert len(runs) == 3 * 2 and len(names) == 1
        name = names.pop()
        assert {rollout_version(t) for i in range(2) for t in store.traces(f"{name}-2-{i}")
                if t.kind is sf.TraceKind.MODEL} == {2}


@pytest.mark.slow
def test_a_worker_that_cannot_start_names_its_error(ray_local: str, tiny_model_dir: Path) -> None:
    """An engine that cannot take weights fails the training at start with a ClusterError naming the reason."""
    with pytest.raises(sf.ClusterError, match="update_weights"):
        train_online(Policy(tiny_model_dir), recipe("grpo").graph, ROWS, LoopConfig(steps=1, problems_per_step=2),
                     store=None, progress=False,
                     cluster=RolloutCluster(workers=1, engine=no_weights_engine, num_cpus=0.5, max_restarts=0))


@pytest.mark.slow
def test_two_workers_learn_as_the_local_loop_and_survive_a_killed_worker(
        ray_local: str, pocket_quick: tuple[Path, Any], grpo_learning: dict[str, Any], tmp_path: Path) -> None:
    """Acceptance: the CI learning run (20 GRPO steps, quick pocket model) on 2 rollout workers + the trainer.
    It learns by the local test's margin; until a worker is SIGKILLed (after step 8) each step's reward equals the
    local loop's; the replaced worker resumes its rows; every recorded call names the version that sampled it."""
    from helpers import grpo_learning_run

    path, _ = pocket_quick
    killed: list[int | str] = []

    def kill_soon(metrics: StepMetrics) -> None:
        if metrics.step == 8:  # during step 9, once one of its calls is recorded
            threading.Thread(target=kill_a_worker_during, args=(tmp_path / "runs.db", 8, killed), daemon=True).start()

    spread = grpo_learning_run(path, store=tmp_path / "runs.db", on_step=kill_soon,
                               cluster=RolloutCluster(workers=2, num_cpus=1))
    local = grpo_learning["history"]
    rewards = [m.reward_mean for m in spread["history"]]
    assert len(killed) == 1 and isinstance(killed[0], int), killed
    assert spread["history"][-1].extra["workers_replaced"] == 1
    assert rewards[:8] == [m.reward_mean for m in local[:8]]
    assert spread["after"] >= spread["before"] + 0.04, (spread["before"], spread["after"], rewards)
    with sf.Store(tmp_path / "runs.db") as store:
        runs = store.runs(dataset="train", limit=None)
        assert len(runs) == 20 * 16
        for run in runs:
            step = int(run.id.rsplit("-", 2)[1])
            traces = [t for t in store.traces(run.id) if t.kind is sf.TraceKind.MODEL]
            assert len(traces) == 8 and {rollout_version(t) for t in traces} == {step}


@pytest.mark.slow
def test_scaffold_train_with_ray_rolls_out_on_the_cluster(ray_local: str, pocket_quick: tuple[Path, Any],
                                                          tmp_path: Path) -> None:
    """`scaffold train --ray ADDRESS --workers 2`: two steps, a log line each, rollouts recorded with their version;
    --ray with --offline is refused."""
    import subprocess
    import sys

    path, _ = pocket_quick
    root = Path(__file__).resolve().parent.parent
    out, database = tmp_path / "out", tmp_path / "runs.db"
    command = [sys.executable, "-m", "scaffold", "--store", str(database), "train", "--model", str(path),
               "--prompts", "pocket", "--topology", "grpo", "--steps", "2", "--problems-per-step", "2", "--lr", "1e-4",
               "--out", str(out), "--ray", ray_local, "--workers", "2"]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+{i}", "answer": str(2 * i)}) + "\n" for i in range(4)))
    # a deadline against a hang, not a speed bound: 20 s alone on 2 cores; over 300 s in a suite run beside a pocket
    # build (load average 12 on 2 cores), where 300 s timed out while the workers were still loading the model
    done = subprocess.run([*command, "--data", str(data)], cwd=root, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (out / "log.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all('"sync_s"' in line for line in lines)
    with sf.Store(database) as store:
        runs = store.runs(limit=None)
        assert len(runs) == 2 * 2
        for run in runs:
            step = int(run.id.rsplit("-", 2)[1])
            assert {rollout_version(t) for t in store.traces(run.id) if t.kind is sf.TraceKind.MODEL} == {step}
    refused = subprocess.run([sys.executable, "-m", "scaffold", "train", "--offline", "--ray"], cwd=root,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--offline" in refused.stderr
