"""Agentic nodes, part 2: the candidates a tool sees, the context budget, the candidate tools, and the two ready graphs
(``agents``: parallel agents with an aggregator; ``agg_agent``: samples read by a tool-using aggregator). Scripted
models make the tool calls."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading

import pytest

import graphs
import scaffold as sf
from scaffold._tools import ToolContext, reset_tool_call, set_tool_call
from scaffold.testing import ScriptedBackend
from scaffold.tools import candidate_tools, named_tools


def calls(*pairs: tuple[str, dict]) -> tuple[sf.ToolCall, ...]:
    return tuple(sf.ToolCall(f"c{i}", name, json.dumps(args)) for i, (name, args) in enumerate(pairs))


def tool_results(request: sf.Request) -> list[str]:
    return [m[1] for m in request.messages if m[0] == "tool"]


def counting_solver(texts: list[str]) -> ScriptedBackend:
    """A solver answering ``texts`` in turn (in whatever order the samples arrive)."""
    lock, pending = threading.Lock(), itertools.cycle(texts)

    def script(request: sf.Request) -> str:
        with lock:
            return next(pending)

    return ScriptedBackend(script)


def traces_of(result: sf.RunResult, node: str) -> list[sf.Trace]:
    return sorted((t for t in result.traces if t.node == node and "." not in t.id.rsplit("#", 1)[1]),
                  key=lambda t: t.index)


def with_candidates(tool: sf.Tool, arguments: dict, candidates: tuple[sf.Trace, ...]) -> sf.ToolOutcome:
    async def main() -> sf.ToolOutcome:
        token = set_tool_call(ToolContext("r", "r/x#0.0.0", {}, None, candidates))
        try:
            return await tool.call(arguments)
        finally:
            reset_tool_call(token)

    return asyncio.run(main())


def trace(i: int, text: str, answer: str | None = None) -> sf.Trace:
    return sf.Trace(id=f"r/s#{i}", run_id="r", node="s", index=i, text=text, answer=answer)


# -- the candidate tools ----------------------------------------------------------------------------------
def run_agg_agent(reader, texts: list[str], **params) -> tuple[sf.RunResult, ScriptedBackend]:
    aggregator = ScriptedBackend(reader)
    graph = graphs.agg_agent.build(aggregator="reader", **params)
    result = graph.run_sync({"problem": "3+4"}, models={"solver": counting_solver(texts), "reader": aggregator},
                            store=None, run_id="r")
    return result, aggregator


def test_an_aggregating_agent_reads_its_candidates_through_the_tools():
    """list_candidates and get_solution show the samples the aggregator read, numbered from 1 in their order; cite's
    trace names the cited candidates; the prompt does not inline them; the aggregator's inputs are the samples."""

    def reader(request: sf.Request) -> sf.Completion:
        results = tool_results(request)
        if not results:
            return sf.Completion(text="", tool_calls=calls(("list_candidates", {}), ("get_solution", {"index": 2})))
        if len(results) == 2:
            listed = [line.split(": ", 1) for line in results[0].splitlines()[1:]]
            agreeing = [int(number) for number, rest in listed if rest.startswith("7 ")]
            return sf.Completion(text="", tool_calls=calls(("cite", {"indices": agreeing})))
        return sf.Completion(text=r"\boxed{7}")

    texts = [f"line one\nline two {i}\n\\boxed{{{a}}}" for i, a in enumerate("77578")]
    result, aggregator = run_agg_agent(reader, texts, n=5, max_turns=4)
    assert result.answer == "7"
    samples = traces_of(result, "candidates")
    by_id = {t.id: t for t in result.traces}
    listed, solution, cited = by_id["r/aggregate#0.0.0"], by_id["r/aggregate#0.0.1"], by_id["r/aggregate#0.1.0"]
    assert listed.text.splitlines()[1:] == [f"{i}: {t.answer} ({len(t.text)} chars)"
                                            for i, t in enumerate(samples, 1)]
    assert solution.text.endswith(samples[1].text) and f"final answer {samples[1].answer}" in solution.text
    sevens = [i for i, t in enumerate(samples, 1) if t.answer == "7"]
    assert cited.metadata["cited"] == sevens and len(sevens) == 3
    assert cited.metadata["cited_ids"] == [samples[i - 1].id for i in sevens]
    assert result.output.inputs[:5] == tuple(t.id for t in samples)  # lineage: the candidates first
    prompt = aggregator.requests[0].messages[0][1]
    assert "5 candidate solutions" in prompt and "line two" not in prompt
    assert {spec["function"]["name"] for spec in aggregator.requests[0].tools} == {
        "list_candidates", "get_solution", "get_segment", "search_candidates", "cite"}


def test_a_bad_number_is_an_arguments_error_and_no_candidates_a_tool_error():
    """A candidate number out of range: ToolArgumentsError naming the range; outside an aggregating agent (none, or a
    plain sf.agent): a ToolError saying so, recorded on the tool trace, never raised into the run."""
    tools = {t.name: t for t in candidate_tools()}
    two = (trace(0, "a\n\\boxed{1}", "1"), trace(1, "b\n\\boxed{2}", "2"))
    bad = with_candidates(tools["get_solution"], {"index": 3}, two)
    assert isinstance(bad.error, sf.ToolArgumentsError) and "the candidates are 1 to 2" in bad.text
    assert isinstance(with_candidates(tools["cite"], {"indices": [0]}, two).error, sf.ToolArgumentsError)
    outside = asyncio.run(tools["list_candidates"].call("{}"))
    assert type(outside.error) is sf.ToolError and "aggregating agent" in outside.text

    def script(request: sf.Request) -> sf.Completion:
        if tool_results(request):
            return sf.Completion(text=r"\boxed{0}")
        return sf.Completion(text="", tool_calls=calls(("list_candidates", {})))

    @sf.graph
    def plain(problem):
        return sf.agent("{problem}", model="m", tools=candidate_tools())

    result = plain.run_sync({"problem": "p"}, models={"m": ScriptedBackend(script)}, store=None, run_id="r")
    failed = next(t for t in result.traces if t.kind is sf.TraceKind.TOOL)
    assert failed.status is sf.Status.ERROR and failed.error.startswith("ToolError: list_candidates reads")
    assert result.answer == "0"


def test_segments_and_searches_show_numbered_lines_capped_at_max_chars():
    """get_segment shows lines start..end numbered from 1; search_candidates names the candidates holding a string
    and their lines; both are cut at max_chars with a note."""
    tools = {t.name: t for t in candidate_tools(max_chars=60)}
    long = "\n".join(f"step {n}: carry {n % 2}" for n in range(1, 40))
    pool = (trace(0, long, None), trace(1, "nothing here\n\\boxed{3}", "3"))
    segment = with_candidates(tools["get_segment"], {"index": 1, "start": 2, "end": 3}, pool)
    assert segment.text == "2| step 2: carry 0\n3| step 3: carry 1"
    cut = with_candidates(tools["get_segment"], {"index": 1, "start": 1, "end": 39}, pool)
    numbered = "\n".join(f"{n}| {line}" for n, line in enumerate(long.splitlines(), 1))
    assert cut.ok and cut.text == numbered[:60] + f"\n[cut: {len(numbered)} characters, the first 60 shown]"
    assert isinstance(with_candidates(tools["get_segment"], {"index": 2, "start": 5, "end": 9}, pool).error,
                      sf.ToolArgumentsError)
    found = with_candidates(tools["search_candidates"], {"query": "BOXED"}, pool)
    assert found.text == "1 of 2 candidates contain 'BOXED': 2\n2:2| \\boxed{3}"
    assert with_candidates(tools["search_candidates"], {"query": "zebra"}, pool).text.startswith("0 of 2")
    listed = with_candidates(tools["list_candidates"], {}, pool)
    assert listed.text.splitlines()[1] == f"1: (none) ({len(long)} chars)"
    assert [t.name for t in named_tools(["candidates"])] == list(tools)


# -- the context budget ------------------------------------------------------------------------------------
def growing(request: sf.Request) -> sf.Completion:
    """A model whose conversation grows 150 tokens a turn, calling a tool until it may not."""
    turn = sum(1 for m in request.messages if m[0] == "assistant")
    if request.tool_choice == "none":
        return sf.Completion(text=r"\boxed{done}", usage=sf.Usage(150 * (turn + 1), 10))
    return sf.Completion(text="", tool_calls=calls(("echo", {"x": turn})), usage=sf.Usage(150 * (turn + 1), 10))


@sf.tool
def echo(x: int) -> int:
    """Echo x."""
    return x


def one_agent(**options):
    @sf.graph
    def solve(problem):
        return sf.agent("Solve {problem}", model="m", tools=[echo], **options)

    return solve


def test_a_context_budget_makes_the_turn_after_a_full_conversation_the_last():
    """Turn 2's conversation (310 tokens) reaches context_budget=300: turn 3 is sent with tool_choice="none" and
    answers; a model that still calls a tool then fails with AgentLimitError naming the context budget."""
    backend = ScriptedBackend(growing)
    result = one_agent(context_budget=300, max_turns=10).run_sync({"problem": "p"}, models={"m": backend}, store=None)
    assert [r.tool_choice for r in backend.requests] == [None, None, "none"]
    assert result.answer == "done" and result.output.metadata["turn"] == 2

    stubborn = ScriptedBackend(lambda r: sf.Completion(text="", tool_calls=calls(("echo", {"x": 1})),
                                                       usage=sf.Usage(400, 10)))
    failed = one_agent(context_budget=300, on_error="drop").run_sync({"problem": "p"}, models={"m": stubborn},
                                                                      store=None)
    agent = next(t for t in failed.traces if t.id.endswith("/agent#0"))
    assert [r.tool_choice for r in stubborn.requests] == [None, "none"]
    assert agent.error.startswith("AgentLimitError: ")
    assert "its context budget of 300: the conversation reached 410 tokens" in agent.error


def test_a_context_budget_is_validated_and_described():
    """context_budget must be a positive integer (sf.agent and sf.aggregate(tools=...)); the graph spec shows it."""
    for bad in (0, -5, 2.5, True):
        with pytest.raises(sf.GraphDefinitionError, match="context_budget must be a positive integer"):
            one_agent(context_budget=bad).build()
    spec = graphs.agg_agent.build(n=2, context_budget=900).spec()
    aggregate = next(node for node in spec["nodes"] if node["name"] == "aggregate")
    assert aggregate["context_budget"] == 900 and aggregate["tools"][0] == "list_candidates"


# -- parallel agents with an aggregator -------------------------------------------------------------------
def test_parallel_agents_are_aggregated_by_a_model_or_by_an_agent_with_candidate_tools():
    """``agents``: n agents use their tools, then one aggregation reads their final turns (not their tool calls);
    with aggregator_tools=("candidates",) the aggregator's tools list those same final answers."""

    def agent_script(request: sf.Request) -> sf.Completion:
        results = tool_results(request)
        if request.tools and request.tools[0]["function"]["name"] == "list_candidates":
            if results:
                return sf.Completion(text=r"\boxed{12}")
            return sf.Completion(text="", tool_calls=calls(("list_candidates", {})))
        if "candidate" in request.messages[0][1].lower():
            return sf.Completion(text=r"\boxed{12}")
        if results:
            return sf.Completion(text=rf"so \boxed{{{results[-1]}}}")
        return sf.Completion(text="", tool_calls=calls(("calculator", {"expression": "3*4"})))

    for tools in ((), ("candidates",)):
        backend = ScriptedBackend(agent_script)
        graph = graphs.parallel_agents.build(n=3, aggregator_tools=tools)
        result = graph.run_sync({"problem": "3*4"}, models={"solver": backend}, store=None, run_id="r")
        agents = traces_of(result, "agents")
        assert [t.answer for t in agents] == ["12", "12", "12"] and result.answer == "12"
        assert result.output.inputs[:3] == tuple(t.id for t in agents)
        if tools:
            listed = next(t for t in result.traces if t.id == "r/aggregate#0.0.0")
            assert listed.text.splitlines()[1:] == [f"{i}: 12 ({len(t.text)} chars)"
                                                    for i, t in enumerate(agents, 1)]
    assert "agents" in graphs.TOPOLOGIES and "agg_agent" in graphs.TOPOLOGIES
