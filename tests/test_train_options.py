"""The options the set-RL field uses: std normalisation (GRPO / Dr. GRPO), mixed-correctness sets (GenSelect-RL),
every subset (Poly-EPO), dynamic sampling (DAPO) and per-role learning rates.

Our own logic runs against fakes (hand-made traces, a scripted engine, a policy without weights); dynamic sampling
and per-role learning rates also take real torch steps on the tiny model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import graphs
import scaffold as sf
from scaffold._types import Request, Trace
from scaffold.testing import ScriptedBackend
from trainers.credit import SCHEMES, assign_credit, register_scheme
from trainers.loop import LoopConfig, batches, credit_runs, refill_problems, train_online, train_step
from trainers.policy import Policy, PolicyConfig
from trainers.recipes import recipe
from trainers.rollouts import LocalRollouts
from trainers.selection import has_signal, mixed_sets
from trainers.types import ROLES, Credited, RewardedRun, StepMetrics


def trace(name: str, *, inputs: tuple[str, ...] = (), run: str = "r", **fields: Any) -> Trace:
    """A trainable model trace ``{run}/{node}#{index}`` reading ``inputs`` (short names, same run)."""
    node, index = name.split("#")
    fields.setdefault("token_ids", (1, 2))
    return Trace(id=f"{run}/{name}", run_id=run, node=node, index=int(index),
                 inputs=tuple(f"{run}/{i}" for i in inputs), **fields)


def spiral_run() -> RewardedRun:
    """Four search traces (right, right, wrong, wrong) and three sets of two, aggregated twice each: {0, 1} all
    right (both aggregations right), {2, 3} all wrong (both wrong), {0, 2} mixed (one right, one wrong)."""
    sets = [("search#0", "search#1"), ("search#2", "search#3"), ("search#0", "search#2")]
    traces = [trace(f"search#{i}") for i in range(4)]
    traces += [trace(f"aggregate#{2 * j + m}", inputs=members) for j, members in enumerate(sets) for m in range(2)]
    rewards = dict(zip([t.id for t in traces], [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]))
    return RewardedRun(traces, rewards, "1")


def by_name(items: Sequence[Credited]) -> dict[str, float]:
    return {c.trace.id.split("/", 1)[1]: c.advantage for c in items}


def scripted_answer(request: sf.Request) -> sf.Completion:
    """Answer by the call's seed, with 5 token ids and logprobs (every trace is trainable)."""
    return sf.Completion(text=f"so \\boxed{{{(request.seed or 0) % 3}}}", token_ids=(1, 2, 3, 4, 5),
                         logprobs=(-0.5,) * 5, usage=sf.Usage(completion_tokens=5))


class RecordingPolicy:
    """A policy without weights that keeps what each step trained on (a ``RolloutPolicy`` by its shape)."""

    def __init__(self, steps_done: int = 0) -> None:
        self.steps_done = steps_done
        self.engine = ScriptedBackend(scripted_answer)
        self.trained: list[list[Credited]] = []

    def step(self, items: Sequence[Credited]) -> StepMetrics:
        self.steps_done += 1
        self.trained.append(list(items))
        return StepMetrics(step=self.steps_done, loss=0.0, reward_mean=None, accuracy=None, advantage_mean=0.0,
                           advantage_std=0.0, advantage_abs_max=0.0, entropy=0.0, kl=None, clip_fraction=0.0,
                           tokens=len(items), tokens_per_s=0.0, extra={"roles": {}})

    def save(self, directory: str) -> None:
        pass

    def backend(self) -> sf.Backend:
        return self.engine

    def refresh(self, backend: sf.Backend) -> None:
        pass


# --- 1. std normalisation ---------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["grpo", "rloo", "spiral"])
def test_scale_by_std_reaches_every_scheme_through_the_loop(scheme: str) -> None:
    """LoopConfig(scale_by_std=True) credits as assign_credit(scale_by_std=True) does; the default does not divide."""
    run = spiral_run()
    scaled = by_name(credit_runs([run], LoopConfig(scheme=scheme, scale_by_std=True)))
    plain = by_name(credit_runs([run], LoopConfig(scheme=scheme)))
    assert scaled == by_name(assign_credit(run.traces, run.rewards, scheme=scheme, scale_by_std=True))
    assert plain == by_name(assign_credit(run.traces, run.rewards, scheme=scheme))
    # the mixed set's aggregations: rewards (1, 0), ±0.5 around their set's mean (RLOO: ±1), std 0.5
    assert plain["aggregate#4"] == pytest.approx(1.0 if scheme == "rloo" else 0.5)
    assert scaled["aggregate#4"] == pytest.approx(plain["aggregate#4"] / 0.5, rel=1e-5)
    if scheme == "spiral":  # set advantages are never divided: the search traces' credit stays
        assert all(scaled[f"search#{i}"] == plain[f"search#{i}"] for i in range(4))


def test_a_scheme_without_the_option_is_only_asked_for_it_when_it_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered scheme that takes no scale_by_std trains as before; asking for std scaling reaches it."""
    monkeypatch.setattr("trainers.credit.SCHEMES", dict(SCHEMES))
    register_scheme("plain", lambda traces, rewards: [Credited(t, 1.0) for t in traces if t.id in rewards])
    run = spiral_run()
    assert len(credit_runs([run], LoopConfig(scheme="plain"))) == 10
    with pytest.raises(TypeError, match="scale_by_std"):
        credit_runs([run], LoopConfig(scheme="plain", scale_by_std=True))


def test_recipes_pass_the_loop_options_given_and_keep_their_defaults() -> None:
    """recipe(...) puts scale_by_std, mixed_sets_only and dynamic_sampling in loop_options only when given."""
    assert recipe("grpo").loop_options == {"scheme": "grpo"}
    assert recipe("grpo", scale_by_std=True).loop_options == {"scheme": "grpo", "scale_by_std": True}
    options = recipe("spiral", mixed_sets_only=True, dynamic_sampling=3).loop_options
    assert options == {"scheme": "spiral", "mixed_sets_only": True, "dynamic_sampling": 3}
    assert LoopConfig(**options).dynamic_sampling == 3
    assert recipe("agglm", mixed_sets_only=True).loop_options["roles"] == ("aggregate",)
    with pytest.raises(ValueError, match="extra rollout rounds"):
        LoopConfig(dynamic_sampling=-1)


# --- 2. mixed-correctness sets ----------------------------------------------------------------------


def test_mixed_sets_only_drops_uniform_sets_after_credit_and_counts_them() -> None:
    """Only the aggregations of the mixed set train; the rest keep the advantages they had without the filter."""
    run = spiral_run()
    everything = RecordingPolicy()
    plain, _ = train_step(everything, [run], LoopConfig(scheme="spiral"))
    filtered = RecordingPolicy()
    metrics, items = train_step(filtered, [run], LoopConfig(scheme="spiral", mixed_sets_only=True))
    kept = by_name(items)
    assert sorted(kept) == ["aggregate#4", "aggregate#5", "search#0", "search#1", "search#2", "search#3"]
    assert kept == {name: value for name, value in by_name(everything.trained[0]).items() if name in kept}
    assert metrics.extra["mixed_dropped"] == 4 and "mixed_dropped" not in plain.extra
    assert filtered.trained == [items]


def test_a_candidate_set_is_its_rewarded_external_inputs() -> None:
    """Unrewarded inputs (a vote) and an aggregating agent's own turns are not candidates; other roles pass."""
    rewards = {"r/s#0": 1.0, "r/s#1": 1.0, "r/s#2": 0.0, "r/agg#0.0": 0.0}
    agent = Credited(trace("agg#0", inputs=("s#0", "s#1", "agg#0.0")), 0.5, role="aggregate")
    with_vote = Credited(trace("agg#1", inputs=("s#2", "vote#0")), 0.5, role="aggregate")
    mixed = Credited(trace("agg#2", inputs=("s#0", "s#2")), 0.5, role="aggregate")
    search = Credited(trace("s#0"), 0.0, role="search")
    kept, dropped = mixed_sets([agent, with_vote, mixed, search], rewards)
    assert kept == [mixed, search] and dropped == 2


def test_a_step_with_everything_filtered_out_still_counts(tiny_model_dir: Any) -> None:
    """Policy.step([]) (every trace filtered out) leaves the weights alone and counts the step."""
    policy = Policy(tiny_model_dir, PolicyConfig(lr=1e-3))
    before = weights(policy)
    metrics = policy.step([])
    assert policy.steps_done == 1 and metrics.step == 1 and metrics.tokens == 0
    assert all(value.equal(before[name]) for name, value in weights(policy).items())


# --- 3. every subset --------------------------------------------------------------------------------


def test_sets_none_aggregates_every_subset_once() -> None:
    """spiral(sets=None) reads each of the C(n, k) subsets exactly once; too many, or too many sets, is an error."""
    graph = graphs.spiral.build(n=6, k=2, sets=None, aggregations=1)
    assert graph.count_calls() == {"solver": 6 + 15}
    result = graph.run_sync({"problem": "1+1"}, models={"solver": ScriptedBackend(lambda r: "\\boxed{2}")},
                            store=None, seed=3)
    read = [frozenset(t.inputs) for t in result.traces if t.node == "aggregate"]
    assert len(read) == len(set(read)) == 15 and {len(members) for members in read} == {2}
    assert recipe("spiral", sets=None).graph.count_calls() == {"solver": 8 + 70 * 4}
    assert recipe("spiral", sets=70, aggregations=1).graph.count_calls() == {"solver": 8 + 70}
    with pytest.raises(ValueError, match=r"sets=71 .* C\(8, 4\) = 70"):
        graphs.spiral.build(sets=71)
    with pytest.raises(ValueError, match="1001 of them, more than 1000"):
        graphs.spiral.build(n=14, k=4, sets=None)


# --- 4. dynamic sampling ----------------------------------------------------------------------------


def flat_or_parity(trace: Trace, answer: str) -> float:
    """A problem whose answer is "flat" rewards every sample 0 (no signal); any other rewards sample i by i % 2."""
    return 0.0 if answer == "flat" else float(trace.index % 2)


def expected_refills(rows: list[dict[str, str]], config: LoopConfig, step: int,
                     name: str) -> tuple[list[str], int, int]:
    """Dynamic sampling's rule restated: (the run ids with signal it trains on, zero-signal runs, refills)."""
    feed = batches(rows, config.problems_per_step, config.seed)
    first = [next(feed) for _ in range(step + 1)][-1]
    signal = [f"{name}-{step}-{i}" for i, row in enumerate(first) if row["answer"] != "flat"]
    zero, refilled = config.problems_per_step - len(signal), 0
    for round_ in range(1, config.dynamic_sampling + 1):
        missing = config.problems_per_step - len(signal)
        if missing <= 0:
            break
        problems, _ = refill_problems(rows, missing, config, step, round_)
        signal += [f"{name}-{step}-r{round_}-{i}" for i, row in enumerate(problems) if row["answer"] != "flat"]
        refilled += missing
    return signal, zero, refilled


ROWS = [{"problem": f"problem {i}", "answer": "flat" if i % 3 else "ok"} for i in range(12)]
DYNAMIC = LoopConfig(steps=3, problems_per_step=3, scheme="grpo", seed=1, dynamic_sampling=2, run_name="ds")


def test_dynamic_sampling_refills_problems_without_signal_and_logs_it(tmp_path: Path) -> None:
    """Each step trains on problems_per_step runs, those with signal found in up to 2 refill rounds first; the
    refills are recorded as their own runs and their tokens counted."""
    policy = RecordingPolicy()
    store = sf.Store(tmp_path / "runs.db")
    history = train_online(policy, graphs.grpo_group.build(n=2), ROWS, DYNAMIC, reward=flat_or_parity, store=store,
                           progress=False)
    rolled = 0
    for step, (metrics, items) in enumerate(zip(history, policy.trained)):
        signal, zero, refilled = expected_refills(ROWS, DYNAMIC, step, "ds")
        assert metrics.extra["zero_signal_runs"] == zero and metrics.extra["refilled"] == refilled
        trained = {c.trace.run_id for c in items}
        assert len(trained) == DYNAMIC.problems_per_step and set(signal) <= trained
        assert {c.trace.run_id for c in items if abs(c.advantage) > 0} == set(signal)
        rolled += DYNAMIC.problems_per_step + refilled
        assert metrics.extra["sampled_tokens"] == rolled * 2 * 5
    assert sum(m.extra["refilled"] for m in history) >= 2, "no step refilled: the test checked nothing"
    store.flush()
    assert len(store.runs()) == rolled and any("-r2-" in run.id for run in store.runs())
    store.close()


def test_dynamic_sampling_is_reproducible_and_a_resumed_training_draws_the_same_refills() -> None:
    """Two trainings with one seed train on the same runs; one resumed after a step trains on the rest the same."""
    graph = graphs.grpo_group.build(n=2)
    runs: list[list[list[tuple[str, float]]]] = []
    for steps_done in (0, 0, 1):
        policy = RecordingPolicy(steps_done=steps_done)
        train_online(policy, graph, ROWS, DYNAMIC, reward=flat_or_parity, store=None, progress=False)
        runs.append([[(c.trace.id, c.advantage) for c in items] for items in policy.trained])
    assert runs[0] == runs[1] and runs[2] == runs[0][1:]


def test_dynamic_sampling_fills_the_step_with_zero_signal_runs_when_the_rounds_run_out() -> None:
    """With no problem giving signal, both rounds refill every problem, and the step trains on its own first runs."""
    flat = [{"problem": f"p{i}", "answer": "flat"} for i in range(5)]
    policy = RecordingPolicy()
    config = LoopConfig(steps=1, problems_per_step=2, scheme="grpo", dynamic_sampling=2, run_name="flat")
    (metrics,) = train_online(policy, graphs.grpo_group.build(n=2), flat, config, reward=flat_or_parity, store=None,
                              progress=False)
    assert metrics.extra["refilled"] == 4 and metrics.extra["zero_signal_runs"] == 2
    assert {c.trace.run_id for c in policy.trained[0]} == {"flat-0-0", "flat-0-1"}
    assert not has_signal(policy.trained[0]) and metrics.extra["sampled_tokens"] == 6 * 2 * 5


def test_dynamic_sampling_needs_rollouts_that_do_not_run_ahead() -> None:
    """A rollout source with max_lag > 0 has queued the next steps already: dynamic sampling refuses it."""

    class Ahead(LocalRollouts):
        max_lag = 1

    with pytest.raises(ValueError, match="max_lag=0"):
        train_online(RecordingPolicy(), graphs.grpo_group.build(n=2), ROWS, DYNAMIC, rollouts=Ahead(), store=None,
                     progress=False)


class RecordingTorchPolicy(Policy):
    """The real policy, keeping the credited traces of each step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trained: list[list[Credited]] = []

    def step(self, items: Sequence[Credited], *, fill_logprobs: bool = False) -> StepMetrics:
        self.trained.append(list(items))
        return super().step(items, fill_logprobs=fill_logprobs)


def test_dynamic_sampling_on_the_tiny_model(tiny_model_dir: Any, tmp_path: Path) -> None:
    """A real online step of the tiny model: the problem without signal is rolled out again, the refill with signal
    trains in its place, the weights move, and every sampled token (refills too) is counted."""
    rows = [{"problem": f"what is {i} plus {i}?", "answer": "flat" if i % 2 else "ok"} for i in range(6)]
    config = LoopConfig(steps=1, problems_per_step=2, scheme="grpo", seed=2, dynamic_sampling=2, run_name="tiny",
                        sampling={"temperature": 1.0, "max_tokens": 4})
    signal, zero, refilled = expected_refills(rows, config, 0, "tiny")
    assert zero == 1 and refilled >= 1 and len(signal) == 2, "the seed no longer gives one flat problem"
    policy = RecordingTorchPolicy(tiny_model_dir, PolicyConfig(lr=1e-3))
    before = weights(policy)
    store = sf.Store(tmp_path / "runs.db")
    (metrics,) = train_online(policy, graphs.grpo_group.build(n=2), rows, config, reward=flat_or_parity, store=store,
                              progress=False)
    assert metrics.extra["zero_signal_runs"] == 1 and metrics.extra["refilled"] == refilled
    assert {c.trace.run_id for c in policy.trained[0]} == set(signal)
    assert all(abs(c.advantage) == 0.5 for c in policy.trained[0])
    assert any(not value.equal(before[name]) for name, value in weights(policy).items())
    store.flush()
    recorded = [t for run in store.runs() for t in store.traces(run.id) if t.kind is sf.TraceKind.MODEL]
    assert len(store.runs()) == 2 + refilled
    assert metrics.extra["sampled_tokens"] == sum(len(t.token_ids or ()) for t in recorded)
    store.close()


# --- 5. per-role learning rates ---------------------------------------------------------------------


def weights(policy: Policy) -> dict[str, Any]:
    return {name: value.detach().clone() for name, value in policy.model.named_parameters()}


def tiny_items(role: str, count: int = 2, first: int = 0) -> list[Credited]:
    """``count`` traces of ``role`` on their own prompts, credited +1 and -1 in turn, recorded without logprobs."""
    items = []
    for i in range(first, first + count):
        request = Request(messages=(("user", f"question {i}: what is {i} plus {i}?"),))
        tokens = tuple(20 + (37 * i + 11 * j) % 400 for j in range(6))
        item = Trace(id=f"r/{role}#{i}", run_id="r", node=role, index=i, request=request, token_ids=tokens)
        items.append(Credited(item, 1.0 if i % 2 == 0 else -1.0, role=role))
    return items


SEARCH, AGGREGATIONS = tiny_items("search"), tiny_items("aggregate", first=2)


def test_role_lr_is_checked_and_kept_in_the_config_json() -> None:
    """Unknown roles and negative multipliers raise; role_lr survives the checkpoint's JSON."""
    with pytest.raises(ValueError, match="unknown roles \\['critic'\\]"):
        PolicyConfig(role_lr={"critic": 2.0})
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match=">= 0"):
            PolicyConfig(role_lr={"search": bad})
    config = PolicyConfig(role_lr={"aggregate": 3.0, "search": 0.5})
    assert PolicyConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    assert PolicyConfig.from_json({k: v for k, v in PolicyConfig().to_json().items() if k != "role_lr"}).role_lr == {}


def test_equal_multipliers_take_the_plain_single_optimiser_step(tiny_model_dir: Any) -> None:
    """Every role at 2x lr is the step of a policy at 2 lr, bit for bit, with one optimiser."""
    even = Policy(tiny_model_dir, PolicyConfig(lr=1e-3, role_lr={role: 2.0 for role in ROLES}))
    plain = Policy(tiny_model_dir, PolicyConfig(lr=2e-3))
    assert len(even.optimizers) == 1 and even.optimizer.param_groups[0]["lr"] == 2e-3
    first, second = even.step(SEARCH + AGGREGATIONS, fill_logprobs=True), plain.step(SEARCH + AGGREGATIONS,
                                                                                      fill_logprobs=True)
    assert first.loss == second.loss and first.extra["grad_norm"] == second.extra["grad_norm"]
    assert all(value.equal(weights(plain)[name]) for name, value in weights(even).items())


def test_a_frozen_role_never_moves_the_weights(tiny_model_dir: Any) -> None:
    """With aggregate at 0, a pure-aggregation step moves no weight, and a mixed step is the other role's own step."""
    frozen = Policy(tiny_model_dir, PolicyConfig(lr=1e-3, role_lr={"aggregate": 0.0}))
    before = weights(frozen)
    metrics = frozen.step(AGGREGATIONS, fill_logprobs=True)
    assert all(value.equal(before[name]) for name, value in weights(frozen).items())
    assert frozen.steps_done == 1 and metrics.extra["roles"]["aggregate"]["traces"] == 2 and metrics.entropy > 0
    mixed = Policy(tiny_model_dir, PolicyConfig(lr=1e-3, role_lr={"aggregate": 0.0}))
    mixed.step(SEARCH + AGGREGATIONS, fill_logprobs=True)
    alone = Policy(tiny_model_dir, PolicyConfig(lr=1e-3))
    alone.step(SEARCH, fill_logprobs=True)
    expected = weights(alone)
    assert all(value.allclose(expected[name], atol=1e-7) for name, value in weights(mixed).items())
    assert any(not value.equal(before[name]) for name, value in expected.items())


def test_each_rate_has_its_own_adam_so_a_step_is_the_sum_of_each_roles_own(tiny_model_dir: Any) -> None:
    """Aggregate at 3x: the update is the search traces' own step at lr plus the aggregations' own at 3 lr (each
    its own Adam state and norm clip), not the one-optimiser step on all traces."""
    policy = Policy(tiny_model_dir, PolicyConfig(lr=1e-3, role_lr={"aggregate": 3.0}))
    start = weights(policy)
    metrics = policy.step(SEARCH + AGGREGATIONS, fill_logprobs=True)
    assert sorted(policy.optimizers) == [1.0, 3.0] and set(metrics.extra["grad_norms"]) == {"search", "aggregate"}
    search_alone = Policy(tiny_model_dir, PolicyConfig(lr=1e-3))
    search_alone.step(SEARCH, fill_logprobs=True)
    aggregate_alone = Policy(tiny_model_dir, PolicyConfig(lr=1e-3 * 3.0))
    aggregate_alone.step(AGGREGATIONS, fill_logprobs=True)
    one = Policy(tiny_model_dir, PolicyConfig(lr=1e-3))
    one.step(SEARCH + AGGREGATIONS, fill_logprobs=True)
    after, searched, aggregated, single = weights(policy), weights(search_alone), weights(aggregate_alone), weights(one)
    for name, value in after.items():
        both = start[name] + (searched[name] - start[name]) + (aggregated[name] - start[name])
        assert value.allclose(both, atol=1e-6), name
    assert any(not value.allclose(single[name], atol=1e-5) for name, value in after.items())


def test_resume_keeps_every_optimisers_state(tiny_model_dir: Any, tmp_path: Path) -> None:
    """A step, save, resume, a step with three rates gives the weights of 2 uninterrupted steps (Adam's second step
    reads each optimiser's first moments: a lost or swapped state shows)."""
    config = PolicyConfig(lr=1e-3, role_lr={"aggregate": 3.0, "search": 0.5})
    items = SEARCH + AGGREGATIONS + tiny_items("single", count=1, first=4)
    straight = Policy(tiny_model_dir, config)
    for _ in range(2):
        straight.step(items, fill_logprobs=True)
    first = Policy(tiny_model_dir, config)
    first.step(items, fill_logprobs=True)
    first.save(tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("optimizer*.pt")) == [
        "optimizer-x0.5.pt", "optimizer-x1.0.pt", "optimizer-x3.0.pt"]
    resumed = Policy.resume(tmp_path / "ckpt")
    assert resumed.config == config and resumed.steps_done == 1
    resumed.step(items, fill_logprobs=True)
    expected = weights(straight)
    assert all(value.allclose(expected[name], atol=1e-6) for name, value in weights(resumed).items())


# --- the command line -------------------------------------------------------------------------------


def scaffold_train(*args: str) -> Any:
    from scaffold.cli import main

    return CliRunner().invoke(main, ["train", *args])


@pytest.mark.parametrize(("args", "message"), [
    (["--role-lr", "critic=2"], "must be one of single, search, aggregate"),
    (["--role-lr", "search=fast"], "is not a number"),
    (["--role-lr", "search=-1"], ">= 0"),
    (["--sets", "0"], "at least 1 set"),
    (["--sets", "many"], "neither a number nor 'all'"),
    (["--sets", "3", "--topology", "grpo"], "--sets chooses the subsets of --topology spiral"),
    (["--dynamic-sampling", "1", "--offline"], "online, with --max-lag 0"),
], ids=["role", "multiplier", "negative", "sets-zero", "sets-word", "sets-grpo", "dynamic-offline"])
def test_scaffold_train_rejects_bad_option_values(args: list[str], message: str) -> None:
    """Each new option's bad values stop `scaffold train` before anything loads, naming the problem."""
    done = scaffold_train(*args)
    assert done.exit_code == 2 and message in done.output, done.output


def test_scaffold_train_passes_the_options_to_the_recipe_loop_and_policy(
        tiny_model_dir: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--sets all --scale-by-std --mixed-sets-only --dynamic-sampling 2 --role-lr ... reach the graph, LoopConfig and
    PolicyConfig that train_online gets."""
    seen: dict[str, Any] = {}

    def fake_train_online(policy: Policy, graph: sf.Graph, rows: Any, loop: LoopConfig, **_: Any) -> list[Any]:
        seen.update(policy=policy, graph=graph, loop=loop)
        return []

    monkeypatch.setattr("trainers.loop.train_online", fake_train_online)
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n')
    done = scaffold_train("--model", str(tiny_model_dir), "--data", str(data), "--prompts", "generic", "--sets", "all",
                          "--scale-by-std", "--mixed-sets-only", "--dynamic-sampling", "2", "--role-lr",
                          "aggregate=3", "--role-lr", "search=0.5", "--out", str(tmp_path / "out"))
    assert done.exit_code == 0, done.output
    loop, policy = seen["loop"], seen["policy"]
    assert (loop.scale_by_std, loop.mixed_sets_only, loop.dynamic_sampling, loop.scheme) == (True, True, 2, "spiral")
    assert seen["graph"].count_calls() == {"solver": 8 + 70 * 4}
    assert policy.config.role_lr == {"aggregate": 3.0, "search": 0.5} and len(policy.optimizers) == 3
