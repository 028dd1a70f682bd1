"""Training agents: credit per episode (GRPO over parallel agents, SPIRAL over the sets of agents an aggregator
read), every turn credited from the final reward, and multi-turn traces trained on the model's own tokens only.

The runs are real scaffold runs (the agent loop, real tools, a SQLite store where said) of scripted models whose
replies carry token ids, so the traces have exactly the structure the agent loop records; the torch tests train a
real tiny model on them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import scaffold as sf
from scaffold.testing import ScriptedBackend
from trainers.credit import assign_credit
from trainers.episodes import episodes, external_inputs, fold, turn_of
from trainers.rewards import rewards_from
from trainers.types import Credited

PROBLEM = "12+30"
ANSWER = "42"


@sf.tool
def add(expression: str) -> str:
    """Add the numbers of an expression such as "1+2".

    Args:
        expression: Numbers joined by "+".
    """
    return str(sum(int(x) for x in expression.split("+")))


def ids(text: str) -> tuple[int, ...]:
    """Stand-in token ids of a scripted reply (one per character, EOS 2 last), as a model's would be."""
    return (*(3 + ord(c) % 90 for c in text), 2)


def reply(text: str, calls: Sequence[sf.ToolCall] = ()) -> sf.Completion:
    return sf.Completion(text=text, tool_calls=tuple(calls), token_ids=ids(text or json.dumps([c.name for c in calls])),
                         finish_reason="tool_calls" if calls else "stop")


def call_add(expression: str = PROBLEM) -> sf.Completion:
    return reply("", [sf.ToolCall("call_0", "add", json.dumps({"expression": expression}))])


def policy(uses_tool: Any, *, wrong_after_tool: Any = lambda k: False) -> Any:
    """A scripted agent: on its first turn it calls ``add`` when ``uses_tool(k)``, else answers wrongly by hand;
    after a tool result it boxes that result (or a wrong one when ``wrong_after_tool(k)``). ``k`` counts the
    requests of that kind (first turns, turns after a tool) in the order they arrive."""
    arrived = {"first": 0, "after": 0}

    def script(request: sf.Request) -> sf.Completion:
        tool_results = [m for m in request.messages if m[0] == "tool"]
        kind = "after" if tool_results else "first"
        k = arrived[kind] = arrived[kind] + 1
        if not tool_results:
            return call_add() if uses_tool(k) else reply("\\boxed{41}")
        return reply("\\boxed{40}" if wrong_after_tool(k) else f"\\boxed{{{tool_results[-1][1]}}}")

    return script


def alternate(when: Any) -> Any:
    """A script that answers every request with ``when(k)``, ``k`` counting requests with the same number of tool
    results in arrival order."""
    arrived: dict[int, int] = {}

    def script(request: sf.Request) -> Any:
        done = sum(1 for m in request.messages if m[0] == "tool")
        k = arrived[done] = arrived.get(done, 0) + 1
        return when(done, k)

    return script


def run(graph: sf.Graph, script: Any, *, seed: int = 0, store: Any = None, fails: bool = False) -> sf.RunResult:
    """One run of ``graph`` on :data:`PROBLEM`; with ``fails``, a run some of whose agents failed is returned."""
    return graph.run_sync({"problem": PROBLEM}, models={"m": ScriptedBackend(script)}, store=store, seed=seed,
                          raise_on_error=not fails)


@sf.graph
def agents(problem: str, *, n: int = 6, max_turns: int = 3) -> Any:
    return sf.agent("Add {problem}", model="m", tools=[add], n=n, max_turns=max_turns, name="agent")


def by_id(items: Sequence[Credited]) -> dict[str, Credited]:
    return {c.trace.id: c for c in items}


# --- episodes ---------------------------------------------------------------------------------------------


def test_an_agent_run_folds_into_one_decision_per_agent() -> None:
    """Each tool-using agent is one episode: its turn ``B.0`` and its final ``B``; the tool trace ``B.0.0`` is
    left out of credit, and the folded final trace reads only the agent's external inputs."""
    result = run(agents.build(n=4), policy(lambda k: True))
    found = episodes(result.traces)
    assert len(found) == 4
    for base, episode in found.items():
        assert episode.final.id == base and [t.id for t in episode.turns] == [base + ".0"]
        assert turn_of(episode.turns[0]) == (base, 0) and episode.length == 1
        assert any(i.startswith(base + ".0.") for i in episode.final.inputs)  # the tool result it read
        assert external_inputs(episode.final) == tuple(i for i in episode.final.inputs if not i.startswith(base))
    folded, _ = fold(result.traces)
    assert {t.id for t in folded} == {t.id for t in result.traces if t.kind is sf.TraceKind.MODEL and "." not in
                                      t.id.split("#")[1]} | {t.id for t in result.traces
                                                             if t.kind is not sf.TraceKind.MODEL
                                                             and t.kind is not sf.TraceKind.TOOL}
    assert all(t.kind is not sf.TraceKind.TOOL for t in folded)


def test_rewards_go_to_final_answers_only() -> None:
    result = run(agents.build(n=4), policy(lambda k: k % 2 == 0))
    rewards = rewards_from(result.traces, ANSWER)
    finals = [t for t in result.traces if t.kind is sf.TraceKind.MODEL and turn_of(t) is None]
    assert set(rewards) == {t.id for t in finals}
    assert sorted(rewards.values()) == sorted(1.0 if t.answer == ANSWER else 0.0 for t in finals)


def test_grpo_centres_parallel_agents_and_every_turn_gets_its_agents_advantage(tmp_path: Path) -> None:
    """Six agents, recorded in a real SQLite store and read back: those that used the tool answer right (one
    model turn and a final), those that worked by hand are wrong (a final only). GRPO centres the six finals; each
    tool-using agent's first turn gets exactly its final's advantage, and no tool trace is credited."""
    store = sf.Store(tmp_path / "runs.db")
    result = run(agents.build(n=6), policy(lambda k: k % 3 != 0), seed=4, store=store)
    traces = store.traces(result.run_id)
    assert sorted(t.id for t in traces) == sorted(t.id for t in result.traces)
    credited = assign_credit(traces, rewards_from(traces, ANSWER), scheme="grpo")
    items = by_id(credited)
    finals = [t for t in traces if t.kind is sf.TraceKind.MODEL and turn_of(t) is None]
    rewards = [1.0 if t.answer == ANSWER else 0.0 for t in finals]
    assert 0 < sum(rewards) < len(rewards), "the seeds should give both kinds of agent"
    mean = sum(rewards) / len(rewards)
    for final, reward in zip(finals, rewards):
        assert items[final.id].advantage == pytest.approx(reward - mean)
        turn = items.get(final.id + ".0")
        if reward:  # a tool user: its first turn shares the final's credit
            assert turn is not None and turn.advantage == pytest.approx(reward - mean) and turn.role == "single"
            assert turn.trace.token_ids and turn.trace.request is not None
        else:
            assert turn is None
    assert not any(c.trace.kind is sf.TraceKind.TOOL for c in credited)
    assert len(credited) == len(finals) + sum(rewards)


def test_turn_discount_scales_earlier_turns() -> None:
    """A three-turn agent (two tool calls, then the answer) credited with ``turn_discount=0.5``: turn 1 gets half
    the final's advantage, turn 0 a quarter."""

    result = run(agents.build(n=4), alternate(lambda done, k: call_add("12+30" if done == 0 else "42+0") if done < 2
                                              else reply("\\boxed{42}" if k % 2 else "\\boxed{0}")), seed=1)
    items = by_id(assign_credit(result.traces, rewards_from(result.traces, ANSWER), scheme="grpo",
                                turn_discount=0.5))
    finals = [t for t in result.traces if t.kind is sf.TraceKind.MODEL and turn_of(t) is None]
    assert {t.answer for t in finals} == {"42", "0"}
    for final in finals:
        a = items[final.id].advantage
        assert a != 0
        assert items[final.id + ".1"].advantage == pytest.approx(a / 2)
        assert items[final.id + ".0"].advantage == pytest.approx(a / 4)
    with pytest.raises(ValueError, match="turn_discount"):
        assign_credit(result.traces, rewards_from(result.traces, ANSWER), scheme="grpo", turn_discount=1.5)


def test_an_agent_that_ran_out_of_turns_is_trained_as_a_wrong_answer() -> None:
    """With ``max_turns=1`` an agent that calls the tool ends in ``AgentLimitError``: its turn is the policy's, so
    it is credited as a reward-0 answer against the agents that answered right away; the error itself (no tokens)
    is not trained."""
    result = run(agents.build(n=6, max_turns=2), alternate(lambda done, k: call_add() if k % 2 or done else
                                                             reply("\\boxed{42}")), seed=2, fails=True)
    failed = [t for t in result.traces if t.status is sf.Status.ERROR]
    assert failed and all((t.error or "").startswith("AgentLimitError") for t in failed)
    items = by_id(assign_credit(result.traces, rewards_from(result.traces, ANSWER), scheme="grpo"))
    right = [t for t in result.traces if t.kind is sf.TraceKind.MODEL and t.answer == "42"]
    share = len(right) / (len(right) + len(failed))
    for t in failed:
        assert t.id not in items
        for turn in (0, 1):
            assert items[f"{t.id}.{turn}"].advantage == pytest.approx(0.0 - share)
    for t in right:
        assert items[t.id].advantage == pytest.approx(1.0 - share)


def test_an_agent_stopped_by_its_backend_is_not_trained() -> None:
    """An agent whose second turn failed in the backend (not the policy's doing): neither its turn nor its final
    is credited; the other agents are centred among themselves."""

    script = alternate(lambda done, k: call_add() if not done else
                       sf.BackendError("boom", retryable=False) if k % 2 else reply("\\boxed{42}"))
    result = run(agents.build(n=6), script, seed=3, fails=True)
    failed = [t for t in result.traces if t.status is sf.Status.ERROR]
    assert failed
    items = by_id(assign_credit(result.traces, rewards_from(result.traces, ANSWER), scheme="grpo"))
    for t in failed:
        assert t.id not in items and t.id + ".0" not in items


@sf.graph
def agents_then_sets(problem: str, *, n: int = 4) -> Any:
    found = sf.agent("Add {problem}", model="m", tools=[add], n=n, max_turns=3, name="agent")
    return sf.aggregate(found, model="m", select=sf.RandomSubsets(2, 3, distinct=True), samples=2,
                        prompt="Add {problem}\n\n{candidates}", name="aggregate")


def test_spiral_credits_agents_by_the_sets_an_aggregator_read_and_passes_it_to_their_turns() -> None:
    """Four multi-turn agents, three distinct sets of two read by two aggregations each. SPIRAL's search
    advantage of an agent is the mean advantage of the sets holding it (sets scored by their aggregations), and
    the agent's turn gets the same; the aggregations are centred on their set."""

    def script(request: sf.Request) -> sf.Completion:
        text = request.messages[-1][1] or ""
        if "Candidate" in text:  # an aggregation: right when it read a right agent
            return reply("\\boxed{42}" if "\\boxed{42}" in text else "\\boxed{7}")
        return agent_policy(request)

    agent_policy = policy(lambda k: True, wrong_after_tool=lambda k: k % 2 == 0)
    result = run(agents_then_sets.build(), script, seed=5)
    traces = result.traces
    rewards = rewards_from(traces, ANSWER)
    items = by_id(assign_credit(traces, rewards, scheme="spiral"))
    aggregations = [t for t in traces if t.node == "aggregate" and t.kind is sf.TraceKind.MODEL]
    sets: dict[frozenset[str], list[float]] = {}
    for t in aggregations:
        sets.setdefault(frozenset(t.inputs), []).append(rewards[t.id])
    assert len(sets) == 3
    values = {s: sum(r) / len(r) for s, r in sets.items()}
    baseline = sum(values.values()) / len(values)
    agents_found = episodes(traces)
    assert len(agents_found) == 4
    for base in agents_found:
        holding = [values[s] - baseline for s in sets if base in s]
        if not holding:
            assert base not in items and base + ".0" not in items
            continue
        expected = sum(holding) / len(holding)
        assert items[base].role == "search" and items[base].advantage == pytest.approx(expected)
        assert items[base + ".0"].advantage == pytest.approx(expected) and items[base + ".0"].role == "search"
    for t in aggregations:
        group = sets[frozenset(t.inputs)]
        assert items[t.id].role == "aggregate"
        assert items[t.id].advantage == pytest.approx(rewards[t.id] - sum(group) / len(group))


@sf.graph
def tool_aggregator(problem: str, *, n: int = 4, aggregations: int = 4) -> Any:
    drafts = sf.sample("Add {problem}", model="m", n=n, name="drafts")
    return sf.aggregate(drafts, model="m", prompt="Add {problem}\n\n{candidates}", tools=[add], samples=aggregations,
                        max_turns=3, name="aggregate")


def test_a_tool_using_aggregator_is_credited_as_an_aggregation_over_its_candidates() -> None:
    """An aggregating agent reads the drafts and calls ``add``: folded, its final reads the drafts only, so it is
    centred among the aggregations of that set, its turn gets the same credit with the aggregate role, and the
    drafts get the set's (here zero) search advantage."""

    def script(request: sf.Request) -> sf.Completion:
        text = request.messages[0][1] or ""
        if "Candidate" not in text:
            return reply("\\boxed{41}")
        return aggregator_policy(request)

    aggregator_policy = policy(lambda k: True, wrong_after_tool=lambda k: k % 2 == 0)
    result = run(tool_aggregator.build(), script, seed=6)
    rewards = rewards_from(result.traces, ANSWER)
    items = by_id(assign_credit(result.traces, rewards, scheme="spiral"))
    found = episodes(result.traces)
    assert len(found) == 4
    finals = [e.final for e in found.values()]
    mean = sum(rewards[t.id] for t in finals) / len(finals)
    assert 0 < mean < 1
    for episode in found.values():
        drafts = external_inputs(episode.final)
        assert len(drafts) == 4 and all("/drafts#" in i for i in drafts)
        a = rewards[episode.final.id] - mean
        assert items[episode.final.id].advantage == pytest.approx(a) and items[episode.final.id].role == "aggregate"
        turn = items[episode.turns[0].id]
        assert turn.advantage == pytest.approx(a) and turn.role == "aggregate"
    drafts = [t for t in result.traces if t.node == "drafts"]
    assert all(items[t.id].role == "search" and items[t.id].advantage == pytest.approx(0.0) for t in drafts)


# --- the update: masks, per-turn sequences, a falling loss on a real tiny model ---------------------------


def tiny_episode_items(tokenizer: Any) -> list[Credited]:
    """Credited traces of a GRPO-credited agent run whose token ids are the tiny tokenizer's ids of each reply (as
    if the tiny model had sampled them)."""
    result = run(agents.build(n=4), policy(lambda k: k % 2 == 0), seed=7)
    items = assign_credit(result.traces, rewards_from(result.traces, ANSWER), scheme="grpo")
    out = []
    for item in items:
        trace = item.trace
        text = trace.text if not trace.metadata.get("tool_calls") else "".join(
            f'<tool_call>{{"name": "{c["function"]["name"]}", "arguments": {c["function"]["arguments"]}}}'
            "</tool_call>" for c in trace.metadata["tool_calls"])
        token_ids = (*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)
        out.append(dataclasses.replace(item, trace=dataclasses.replace(trace, token_ids=token_ids, logprobs=None)))
    return out


def test_a_turns_sequence_trains_on_its_own_tokens_only(tiny_model_dir: Any) -> None:
    """Collated, the second turn of an agent is its whole conversation so far (the problem, the first turn's call,
    the tool's result) followed by its own answer; only the answer's tokens are in the loss mask."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.batch import collate, prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    items = tiny_episode_items(tokenizer)
    finals_after_tool = [i for i in items if turn_of(i.trace) is None and any(
        m[0] == "tool" for m in i.trace.request.messages)]
    assert finals_after_tool
    item = finals_after_tool[0]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # supplies the logprobs the script did not record
    batch = collate([item], tokenizer, pad_id=tokenizer.pad_token_id or 0, model=model)
    prompt = prompt_ids(tokenizer, item.trace.request)
    mask = batch.completion_mask_BT[0]
    assert int(mask.sum()) == len(item.trace.token_ids)
    assert mask[: len(prompt)].sum() == 0 and mask[len(prompt): len(prompt) + len(item.trace.token_ids)].all()
    text = tokenizer.decode(batch.input_ids_BT[0, : len(prompt)])
    assert PROBLEM in text and "42" in text  # the tool's result sits in the masked prompt
    assert tokenizer.decode(batch.input_ids_BT[0, len(prompt):len(prompt) + len(item.trace.token_ids)],
                            skip_special_tokens=True) == item.trace.text


def test_updates_on_agent_turns_give_a_finite_loss_that_falls(tiny_model_dir: Any) -> None:
    """Real torch steps of the tiny model on every credited turn of an agent run: the loss is finite, the
    log-probability of the positively credited turns' tokens rises and that of the negative ones falls."""
    import math

    import torch
    from transformers import AutoTokenizer

    from trainers.batch import collate
    from trainers.loss import token_logprobs
    from trainers.policy import Policy, PolicyConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    items = tiny_episode_items(tokenizer)
    assert any(turn_of(i.trace) for i in items) and {i.advantage > 0 for i in items} == {True, False}
    policy = Policy(tiny_model_dir, PolicyConfig(lr=1e-3, seed=0))

    def mean_logprob(chosen: list[Credited]) -> float:
        batch = collate(chosen, policy.tokenizer, pad_id=policy.pad_id, model=policy.model)
        with torch.no_grad():
            logprobs, _ = token_logprobs(policy.model, batch)
        return float((logprobs * batch.completion_mask_BT).sum() / batch.completion_mask_BT.sum())

    batch = collate(items, policy.tokenizer, pad_id=policy.pad_id, model=policy.model)  # sampling logprobs
    items = [dataclasses.replace(item, trace=dataclasses.replace(item.trace, logprobs=tuple(
        float(v) for v, m in zip(batch.old_logprobs_BT[i], batch.completion_mask_BT[i]) if m)))
        for i, item in enumerate(items)]
    good = [i for i in items if i.advantage > 0]
    bad = [i for i in items if i.advantage < 0]
    before = mean_logprob(good), mean_logprob(bad)
    losses = [policy.step(items).loss for _ in range(4)]
    after = mean_logprob(good), mean_logprob(bad)
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert after[0] > before[0] and after[1] < before[1]
