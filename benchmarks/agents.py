"""Agents benchmark: what the agent loop adds to each turn, what a tool call costs, and how parallel tool calls overlap.

Protocol (every figure and its baseline measured in this run, on this machine):

- **turn overhead.** The test server (``scaffold.testing.OpenAIServer``, zero latency, in a thread of this
  process) plays a model that calls the tool ``lookup`` ``--turns - 1`` times, one call a turn, then answers.
  The agent (``sf.agent`` over ``OpenAIBackend``, ``store=None``) and a hand-written loop over the raw
  ``openai.AsyncOpenAI`` client (the messages built by hand, the same tool function called directly) run the
  same conversation ``--conversations`` times each, in alternating rounds after a warm-up of each. Figures:
  client wall time per turn for both; ``turn_overhead_ratio`` = agent / hand-written (target <= 1.2), and
  ``turn_overhead_ms`` = their difference per turn.
- **tool dispatch.** ``Tool.call`` on a trivial async tool (``{"x": 1}`` parsed, validated by its pydantic
  model, the function awaited, the result made text), ``--dispatch-calls`` times, minus the same number of
  direct awaits of the function: ``tool_dispatch_us`` per call (target <= 50).
- **parallel tools.** One turn of a scripted model asks for 4 calls of a tool that sleeps 100 ms; the
  agent's wall time for that turn's tools (its tool traces' span, from the first start to the last end)
  against the same 4 calls made one after another: ``parallel_tools_speedup`` (target >= 3.5).
- **long set.** ``--long-problems`` problems of ``PocketTask(digits=3, terms=3)``'s test split (seed 0), each
  with ``--long-candidates`` (64) worked solutions drawn once (``random.Random`` seeded by the problem's number):
  the right one (``task.solution``) with probability 0.35, else one with a slip (``task.slipped_solution``,
  ``slips=1``). One test server plays every model, with a **context window** of ``--context-window`` (2,048)
  prompt tokens (its fake tokenizer: words, punctuation marks and whitespace runs; past it, a 400
  ``context_length_exceeded``, which the backend raises as ``ContextLengthError``). As the sampler it answers
  choice ``i`` of a problem's request with candidate ``i`` (so both graphs read the same candidates in the same
  order). As the aggregator it is a **scripted AggAgent reader**, not a model: it calls ``list_candidates``,
  then ``get_solution`` on candidates 1, 2, ... reading each one's boxed answer from its text, until one answer
  leads the others it has read by 3 ("a majority seen") or the context budget (``--context-budget``, 1,600
  tokens of one turn's conversation) forces the last turn; it then ``cite``s the candidates with the leading
  answer (when not forced) and answers ``\\boxed{}`` with it. ``graphs.agg_agent`` (that reader through the
  candidate tools) and plain aggregation (``sf.aggregate`` of the same 64 samples, prompt inlining them, same
  server) run on the same problems. An aggregation that raised counts as wrong; ``long_set_plain_errors`` counts
  the plain ones that raised, ``long_set_plain_context_errors`` those of them that raised ``ContextLengthError``.

The last line is one JSON object: ``bench``, ``turn_overhead_ratio``, ``turn_overhead_ms``,
``tool_dispatch_us``, ``parallel_tools_speedup``, with the figures beside them and ``targets``/``meets``, and
``long_set_agg_accuracy``, ``long_set_plain_accuracy``, ``long_set_problems``, ``long_set_candidates``,
``long_set_plain_errors``, ``long_set_plain_context_errors`` (with ``long_set_context_window`` and
``long_set_context_budget`` beside them), and the pocket agent's training: ``pocket_agent_before``,
``pocket_agent_after``, ``pocket_agent_ci95`` and ``seeds`` (with ``pocket_agent_runs``, per seed).

- **pocket agent training.** ``benchmarks/agent_training.py``'s experiment (its docstring states the protocol):
  the pocket agent built from scratch per seed, GRPO over 8 parallel calculator agents per problem for 12 steps,
  held-out success on 200 test problems before and after, seeds 0, 1 and 2, a bootstrap interval of the gain.
  ``--quick``: seed 0, 4 steps, 64 problems. ``--no-pocket`` leaves it out.

Usage: python benchmarks/agents.py [--quick] [--turns 4] [--conversations 200] [--dispatch-calls 20000]
       [--long-problems 20] [--long-candidates 64] [--context-window 2048] [--context-budget 1600]
       [--pocket-seeds 0 1 2] [--pocket-steps 12] [--pocket-eval 200] [--no-pocket]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import time
from collections import Counter
from typing import Any

import agent_training  # this directory's: the pocket agent's training experiment

import graphs
import scaffold as sf
from scaffold.pocket import PocketTask
from scaffold.testing import OpenAIServer, ScriptedBackend

TARGETS = {"turn_overhead_ratio": 1.2, "tool_dispatch_us": 50.0, "parallel_tools_speedup": 3.5}


async def lookup(key: str) -> str:
    """Look a key up (instant)."""
    return key.upper()


LOOKUP = sf.tool(lookup)


def conversation(turns: int):
    """The server's model: a tool call a turn until ``turns - 1`` results are in, then an answer."""

    def policy(request: Any) -> Any:
        done = sum(1 for m in request.messages if m[0] == "tool")
        if done >= turns - 1:
            return r"\boxed{done}"
        call = sf.ToolCall(f"call_{done}", "lookup", json.dumps({"key": f"k{done}"}))
        return sf.Completion(text="", tool_calls=(call,))

    return policy


async def agent_conversations(graph: sf.Graph, backend: sf.OpenAIBackend, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        result = await graph.run({"problem": f"question {i}"}, models={"m": backend}, store=None, seed=i)
        assert result.answer == "done", result.error
    return time.perf_counter() - started


async def raw_conversations(client: Any, count: int) -> float:
    """The hand-written loop: what a user writes with the openai SDK alone."""
    tools = [LOOKUP.spec()]
    started = time.perf_counter()
    for i in range(count):
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"question {i}"}]
        while True:
            reply = await client.chat.completions.create(model="m", messages=messages, tools=tools, seed=i)
            message = reply.choices[0].message
            if not message.tool_calls:
                assert "done" in (message.content or "")
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = await lookup(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return time.perf_counter() - started


async def turn_overhead(turns: int, conversations: int, rounds: int) -> dict[str, float]:
    import openai

    @sf.graph
    def agent(problem):
        return sf.agent("{problem}", model="m", tools=[LOOKUP], max_turns=turns)

    graph = agent.build()
    with OpenAIServer(policy=conversation(turns)) as server:
        backend = sf.OpenAIBackend("m", base_url=server.base_url)
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        await agent_conversations(graph, backend, max(2, conversations // 10))  # warm-up, both
        await raw_conversations(client, max(2, conversations // 10))
        ours, theirs = [], []
        per_round = max(1, conversations // rounds)
        for _ in range(rounds):
            ours.append(await agent_conversations(graph, backend, per_round) / (per_round * turns))
            theirs.append(await raw_conversations(client, per_round) / (per_round * turns))
        await client.close()
        await backend.release_loop()
    agent_turn, raw_turn = statistics.median(ours), statistics.median(theirs)
    return {"agent_turn_ms": agent_turn * 1e3, "raw_turn_ms": raw_turn * 1e3,
            "turn_overhead_ratio": agent_turn / raw_turn, "turn_overhead_ms": (agent_turn - raw_turn) * 1e3}


async def tool_dispatch(calls: int) -> dict[str, float]:
    @sf.tool
    async def echo(x: int) -> int:
        """Echo."""
        return x

    raw = echo.fn
    for _ in range(200):  # warm-up
        await echo.call('{"x": 1}')
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls // 5):
            await echo.call('{"x": 1}')
        through = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(calls // 5):
            await raw(x=1)
        direct = time.perf_counter() - started
        rounds.append((through - direct) / (calls // 5))
    return {"tool_dispatch_us": statistics.median(rounds) * 1e6,
            "tool_call_us": statistics.median(rounds) * 1e6 + direct / (calls // 5) * 1e6}


async def parallel_tools(seconds: float = 0.1, width: int = 4) -> dict[str, float]:
    @sf.tool
    async def wait(i: int) -> int:
        """Wait a while."""
        await asyncio.sleep(seconds)
        return i

    def script(request: sf.Request) -> Any:
        if any(m[0] == "tool" for m in request.messages):
            return r"\boxed{ok}"
        return sf.Completion(text="", tool_calls=tuple(sf.ToolCall(f"c{i}", "wait", json.dumps({"i": i}))
                                                       for i in range(width)))

    @sf.graph
    def agent(problem):
        return sf.agent("{problem}", model="m", tools=[wait])

    spans = []
    for _ in range(3):
        result = await agent.build().run({"problem": "p"}, models={"m": ScriptedBackend(script)}, store=None)
        tools = [t for t in result.traces if t.kind is sf.TraceKind.TOOL]
        assert len(tools) == width
        spans.append(max(t.started_at + t.latency for t in tools) - min(t.started_at for t in tools))
    started = time.perf_counter()
    for i in range(width):
        await wait.call({"i": i})
    sequential = time.perf_counter() - started
    parallel = statistics.median(spans)
    return {"parallel_tools_s": parallel, "sequential_tools_s": sequential,
            "parallel_tools_speedup": sequential / parallel}


# -- the long set: a tool-using aggregator against plain aggregation past the context window -------------------
LEAD = 3
"""The reader stops reading once one answer leads every other it has read by this many."""

_BOXED = re.compile(r"\\boxed\{([^}]*)\}")


def draw_candidates(task: PocketTask, problem: str, count: int, seed: int) -> list[str]:
    """``count`` worked solutions: right with probability 0.35, else slipped once."""
    rng = random.Random(f"long-set/{seed}")
    return [task.solution(problem) if rng.random() < 0.35 else task.slipped_solution(problem, rng, slips=1)
            for _ in range(count)]


def agg_agent_reader(request: Any) -> Any:
    """The scripted AggAgent reader (see the protocol): its state is the conversation it is sent."""
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if not results:
        return sf.Completion(text="", tool_calls=(sf.ToolCall("c0", "list_candidates", "{}"),))
    total = int(results[0].split()[0])
    seen: Counter[str] = Counter()
    read: dict[int, str] = {}
    cited = False
    for text in results[1:]:
        found = re.match(r"Candidate (\d+):", text)
        boxed = _BOXED.findall(text)
        if found and boxed:
            read[int(found.group(1))] = boxed[-1]
            seen[boxed[-1]] += 1
        cited = cited or text.startswith("cited ")
    ranked = seen.most_common(2) or [("", 0)]
    leader = ranked[0][0]
    lead = ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0)
    if cited or request.body.get("tool_choice") == "none" or (not leader and len(read) >= total):
        return rf"The candidates agree most on \boxed{{{leader}}}"
    if lead >= LEAD or len(read) >= total:
        agreeing = [i for i, answer in read.items() if answer == leader]
        return sf.Completion(text="", tool_calls=(sf.ToolCall("c0", "cite", json.dumps({"indices": agreeing})),))
    following = len(read) + 1
    return sf.Completion(text="", tool_calls=(sf.ToolCall("c0", "get_solution", json.dumps({"index": following})),))


def plain_reader(request: Any) -> str:
    """Plain aggregation's model, had the candidates fit: the most common boxed answer of its prompt."""
    answers = Counter(_BOXED.findall(request.messages[-1][1]))
    return rf"\boxed{{{answers.most_common(1)[0][0] if answers else ''}}}"


async def long_set(problems: int, count: int, context_window: int, context_budget: int) -> dict[str, Any]:
    task = PocketTask(digits=3, terms=3)
    rows = task.problems(problems, seed=0, split="test")
    pools = {row["problem"]: draw_candidates(task, row["problem"], count, seed) for seed, row in enumerate(rows)}

    def policy(request: Any) -> Any:
        if request.tools:
            return agg_agent_reader(request)
        prompt = request.messages[-1][1]
        if "Candidate 1:" in prompt:
            return plain_reader(request)
        problem = next(p for p in pools if p in prompt)
        return pools[problem][request.choice]

    @sf.graph
    def plain(problem):
        candidates = sf.sample(graphs.SOLVE_PROMPT, model="solver", n=count, name="candidates")
        return sf.aggregate(candidates, model="aggregator", name="aggregate")

    agg = graphs.agg_agent.build(n=count, max_turns=count + 3, context_budget=context_budget,
                                 aggregator="aggregator")
    right = {"agg": 0, "plain": 0}
    errors = context_errors = 0
    with OpenAIServer(policy=policy, max_context=context_window) as server:
        backend = sf.OpenAIBackend("m", base_url=server.base_url)
        models = {"solver": backend, "aggregator": backend}
        for seed, row in enumerate(rows):
            result = await agg.run({"problem": row["problem"]}, models=models, store=None, seed=seed)
            right["agg"] += sf.equivalent(result.answer, row["answer"])
            try:
                result = await plain.build().run({"problem": row["problem"]}, models=models, store=None, seed=seed)
                right["plain"] += sf.equivalent(result.answer, row["answer"])
            except sf.CallError as exc:  # fail-fast: the aggregation's failure, its cause the backend's error
                errors += 1
                context_errors += isinstance(exc.__cause__, sf.ContextLengthError)
        await backend.release_loop()
    return {"long_set_agg_accuracy": right["agg"] / len(rows), "long_set_plain_accuracy": right["plain"] / len(rows),
            "long_set_problems": len(rows), "long_set_candidates": count,
            "long_set_plain_errors": errors, "long_set_plain_context_errors": context_errors,
            "long_set_context_window": context_window,
            "long_set_context_budget": context_budget}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dispatch-calls", type=int, default=20_000)
    parser.add_argument("--long-problems", type=int, default=20)
    parser.add_argument("--long-candidates", type=int, default=64)
    parser.add_argument("--context-window", type=int, default=2048)
    parser.add_argument("--context-budget", type=int, default=1600)
    agent_training.add_arguments(parser, prefix="pocket-")
    parser.add_argument("--no-pocket", action="store_true", help="leave out the pocket agent's training")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.rounds, args.dispatch_calls, args.long_problems = 20, 2, 2_000, 4
    figures: dict[str, Any] = {"bench": "agents"}
    figures.update(asyncio.run(turn_overhead(args.turns, args.conversations, args.rounds)))
    print(f"turn: agent {figures['agent_turn_ms']:.2f} ms, hand-written openai loop {figures['raw_turn_ms']:.2f} ms "
          f"-> ratio {figures['turn_overhead_ratio']:.3f} ({figures['turn_overhead_ms']:+.2f} ms)")
    figures.update(asyncio.run(tool_dispatch(args.dispatch_calls)))
    print(f"tool dispatch: {figures['tool_dispatch_us']:.1f} us over a direct await")
    figures.update(asyncio.run(parallel_tools()))
    print(f"4 tools of 100 ms in one turn: {figures['parallel_tools_s']:.3f} s, one after another "
          f"{figures['sequential_tools_s']:.3f} s -> speedup {figures['parallel_tools_speedup']:.2f}x")
    figures.update(asyncio.run(long_set(args.long_problems, args.long_candidates, args.context_window,
                                        args.context_budget)))
    print(f"long set ({figures['long_set_problems']} problems x {figures['long_set_candidates']} candidates, "
          f"context {args.context_window}): agg_agent {figures['long_set_agg_accuracy']:.2f}, plain aggregation "
          f"{figures['long_set_plain_accuracy']:.2f} ({figures['long_set_plain_context_errors']} context errors)")
    if not args.no_pocket:
        figures.update(agent_training.experiment(args))
        print(f"pocket agent (seeds {figures['seeds']}): held-out success {figures['pocket_agent_before']:.3f} -> "
              f"{figures['pocket_agent_after']:.3f}, 95% interval of the gain {figures['pocket_agent_ci95']}")
    meets = {"turn_overhead_ratio": figures["turn_overhead_ratio"] <= TARGETS["turn_overhead_ratio"],
             "tool_dispatch_us": figures["tool_dispatch_us"] <= TARGETS["tool_dispatch_us"],
             "parallel_tools_speedup": figures["parallel_tools_speedup"] >= TARGETS["parallel_tools_speedup"]}
    figures.update(turns=args.turns, conversations=args.conversations, targets=TARGETS, meets=meets,
                   meets_targets=all(meets.values()))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
