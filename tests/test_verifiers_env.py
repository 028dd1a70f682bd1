"""A Scaffold graph as a ``verifiers`` environment: the real ``verifiers`` package runs rollouts against the local
OpenAI-compatible test server over real HTTP, with the real ``openai`` client, and records into a real SQLite file.
The steps' advantages are checked against credit computed independently from the recorded traces."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

import graphs
import scaffold as sf
from scaffold.testing import Fault, OpenAIServer
from trainers.credit import assign_credit
from trainers.rewards import math_reward, rewards_from
from trainers.verifiers_env import verifiers_environment

vf = pytest.importorskip("verifiers", reason="the export extra installs verifiers")  # installed by `make install`
openai = pytest.importorskip("openai")

ROWS = [{"problem": "2+2?", "answer": "4"}, {"problem": "3+1?", "answer": "4"}]
WITH_IDS = {"logprobs": True, "extra_body": {"return_token_ids": True}, "temperature": 0.7}


def right_then_wrong() -> Any:
    """Every third choice is wrong: sets and aggregations of mixed correctness (non-zero set credit)."""
    counter = itertools.count()
    return lambda request: "so \\boxed{5}" if next(counter) % 3 == 0 else "so \\boxed{4}"


def evaluate(env: Any, server: OpenAIServer, *, rollouts: int = 2, args: Any = WITH_IDS, **kwargs: Any) -> list[Any]:
    async def run() -> Any:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0,
                                      timeout=120) as client:  # a loaded CI machine is slow to connect
            return await env.evaluate(client=client, model="policy", sampling_args=dict(args),
                                      rollouts_per_example=rollouts, state_columns=["scaffold", "trajectory"],
                                      **kwargs)

    return list(asyncio.run(run())["outputs"])


def test_spiral_rollouts_carry_scaffolds_set_credit_on_every_step(tmp_path):
    store = sf.Store(tmp_path / "runs.db")
    env = verifiers_environment(graphs.spiral.build(n=4, k=2), ROWS, store=store)
    with OpenAIServer(policy=right_then_wrong()) as server:
        outputs = evaluate(env, server)
    assert len(outputs) == 4 and {o["example_id"] for o in outputs} == {0, 1}
    for output in outputs:
        run = output["scaffold"]["run_id"]
        traces = store.traces(run)  # read back from the file, then credited here, independently of the env
        model = [t for t in traces if t.kind is sf.TraceKind.MODEL]
        steps = output["trajectory"]
        assert len(steps) == len(model) == 4 + 16  # 4 search samples, 4 sets x 4 aggregations
        rewards = rewards_from(traces, "4", math_reward)
        expected = {c.trace.id: c.advantage for c in assign_credit(traces, rewards, scheme="spiral")}
        by_id = {t.id: t for t in model}
        for step in steps:
            trace = by_id[step["extras"]["trace_id"]]
            assert step["advantage"] == pytest.approx(expected[trace.id])
            assert step["reward"] == rewards[trace.id]
            assert step["extras"]["role"] in ("search", "aggregate")
            assert step["completion"][0]["content"] == trace.text
            assert step["tokens"]["completion_ids"] == list(trace.token_ids)  # the ids the server sampled
            assert len(step["tokens"]["completion_logprobs"]) == len(trace.token_ids)
            assert step["tokens"]["prompt_ids"]  # the server's prompt ids: nothing re-tokenised
        assert any(s["advantage"] > 0 for s in steps) and any(s["advantage"] < 0 for s in steps)
        final = store.run(run)
        assert output["reward"] == float(final.answer == "4")  # the rollout's reward: the final answer's
        assert output["completion"][0]["content"] in {"so \\boxed{4}", "so \\boxed{5}"}
        assert output["is_completed"] and output["stop_condition"] == "graph_finished"
        assert output["timing"]["generation_ms"] > 0


def test_a_nodes_own_parameters_win_over_the_trainers_sampling_arguments():
    @sf.graph
    def capped(problem):
        return sf.sample("{problem}", model="policy", n=2, params={"max_tokens": 11})

    env = verifiers_environment(capped.build(), ROWS[:1])
    with OpenAIServer(policy="\\boxed{4}") as server:
        outputs = evaluate(env, server, rollouts=1, args={"temperature": 0.3, "max_tokens": 99})
        bodies = [r.request.body for r in server.requests if r.request is not None]
    assert len(bodies) == 2 and all(b.get("n", 1) == 1 for b in bodies)  # one choice per call: one step each
    assert all(b["temperature"] == 0.3 for b in bodies)  # the trainer's
    assert all(b.get("max_completion_tokens", b.get("max_tokens")) == 11 for b in bodies)  # the node's own
    assert len(outputs[0]["trajectory"]) == 2 and outputs[0]["reward"] == 0.0  # a list output: no final answer
    assert outputs[0]["error"] is not None


def test_a_failing_server_gives_a_failed_rollout_and_keeps_the_record(tmp_path):
    store = sf.Store(tmp_path / "runs.db")
    env = verifiers_environment(graphs.self_consistency.build(n=3), ROWS[:1], store=store)
    with OpenAIServer(policy="\\boxed{4}", faults=lambda request, number: Fault.server_error(400)) as server:
        [output] = evaluate(env, server, rollouts=1)
    assert output["reward"] == 0.0 and output["error"] is not None
    assert "ModelError" in json.dumps(output["error"])  # verifiers' own error type for a model failure
    assert output["stop_condition"] == "has_error"
    [info] = store.runs()
    assert info.status == "error" and store.traces(info.id)  # the failed calls are recorded


def test_rows_without_an_input_or_answer_are_refused_by_position():
    with pytest.raises(sf.InputError, match=r"row 1 has no 'answer'"):
        verifiers_environment(graphs.self_consistency.build(n=2), [ROWS[0], {"problem": "1+1?"}])
    with pytest.raises(sf.InputError, match="no rows"):
        verifiers_environment(graphs.self_consistency.build(n=2), [])


def test_verifiers_loads_it_by_id_from_a_problems_file(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    env = vf.load_environment("trainers.verifiers_env", topology="self_consistency", data=str(path), n=3)
    assert isinstance(env, vf.Environment)
    assert len(env.get_dataset()) == 2 and env.env_id == "scaffold-self_consistency"
    with OpenAIServer(policy=right_then_wrong()) as server:
        outputs = evaluate(env, server, rollouts=2)
    for output in outputs:
        steps = output["trajectory"]
        assert len(steps) == 3 and all(s["extras"]["node"] == "samples" for s in steps)
        right = ["boxed{4}" in s["completion"][0]["content"] for s in steps]
        assert [s["reward"] for s in steps] == [float(r) for r in right]
        advantages = [s["advantage"] for s in steps]
        assert sum(advantages) == pytest.approx(0.0)  # the samples' credit is centred in their group
        assert output["reward"] == float(sum(right) >= 2)  # the vote's answer is the rollout's


@sf.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def adding_agent(request: Any) -> Any:
    """Asks the tool for 2 + 2, then answers with what it said."""
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if results:
        return rf"the tool says {results[-1]}, so \boxed{{{results[-1]}}}"
    return sf.Completion(text="", tool_calls=(sf.ToolCall("call_1", "add", '{"a": 2, "b": 2}'),))


def test_an_agents_turns_are_steps_with_its_tool_calls_and_one_episode_credit():
    @sf.graph
    def solver(problem):
        return sf.agent("{problem}", model="policy", tools=[add], max_turns=4)

    env = verifiers_environment(solver.build(), ROWS[:1], scheme="grpo")
    with OpenAIServer(policy=adding_agent) as server:
        outputs = evaluate(env, server, rollouts=2)
        tools_sent = [r.request.body.get("tools") for r in server.requests if r.request is not None]
    assert all(t and t[0]["function"]["name"] == "add" for t in tools_sent)  # the tools reach the trainer's server
    for output in outputs:
        first, last = output["trajectory"]  # the turn that called the tool, then the answer after its result
        assert first["completion"][0]["tool_calls"][0]["function"]["name"] == "add"
        assert any(m["role"] == "tool" and m["content"] == "4" for m in last["prompt"])
        assert output["reward"] == 1.0 and output["scaffold"]["answer"] == "4"
        assert first["advantage"] == last["advantage"]  # one episode: every turn gets the agent's advantage
