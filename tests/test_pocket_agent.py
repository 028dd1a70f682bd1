"""The pocket agent: its tools-aware chat template, its build, and its calculator calls in-process and through
vLLM's CPU server with vLLM's own Hermes tool parser.

The template tests need no model. The rest use the session's default agent (``pocket_agent_build``, built in the
background from scratch: about two minutes on two cores).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import scaffold as sf
from scaffold.backends._tool_text import native_tools, parse_tool_calls
from scaffold.backends._transformers import encode_prompt
from scaffold.pocket import AGENT_PROMPT, PocketAgentConfig, evaluate_agent, load_report
from scaffold.pocket._agent import agent_tokenizer, episode, tool_call_text
from scaffold.tools import calculator

TASK = PocketAgentConfig().task


def test_the_template_renders_a_call_exactly_as_the_agent_writes_it() -> None:
    """The second turn's prompt is the first turn's prompt, the call the agent wrote, and the tool's result: the
    conversation the agent is trained on is the one the agent loop sends back."""
    tokenizer = agent_tokenizer()
    assert native_tools(tokenizer)
    problem = TASK.problems(1, seed=3, split="train")[0]["problem"]
    (first, call), (second, answer) = episode(TASK, problem, tools=True, use_tool=True)
    one = tokenizer.decode(encode_prompt(tokenizer, first))
    two = tokenizer.decode(encode_prompt(tokenizer, second))
    result = str(sum(TASK.operands(problem)))
    assert one == f"<|im_start|>system\ntools: calculator<|im_end|>\n<|im_start|>user\nAdd {problem}<|im_end|>\n" \
                  "<|im_start|>assistant\n"
    assert two == one + call + f"<|im_end|>\n<|im_start|>tool\n{result}<|im_end|>\n<|im_start|>assistant\n"
    assert call == tool_call_text(problem) and answer == "\\boxed{" + result + "}"
    text, calls = parse_tool_calls(call)
    assert text == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [("calculator",
                                                                                 {"expression": problem})]


def test_the_template_reads_arguments_as_an_object_or_as_json_text() -> None:
    """vLLM's server may hand the template a call's arguments as JSON text, the transformers backend as an object:
    both render the same."""
    tokenizer = agent_tokenizer()
    conversation = [{"role": "user", "content": "Add 1+2"}]
    as_object = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+2"}}}]}
    as_text = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1+2"}'}}]}
    rendered = [tokenizer.apply_chat_template([*conversation, m], tools=[calculator.spec()], tokenize=False)
                for m in (as_object, as_text)]
    assert rendered[0] == rendered[1]
    assert tool_call_text("1+2") in rendered[0]


def test_without_tools_there_is_no_system_line_and_the_answer_comes_in_one_go() -> None:
    tokenizer = agent_tokenizer()
    [(request, answer)] = episode(TASK, "12345+23456+34567+45678", tools=False, use_tool=True)
    assert tokenizer.decode(encode_prompt(tokenizer, request)).startswith("<|im_start|>user\n")
    assert answer == "\\boxed{116046}"


def test_the_build_reports_a_tool_the_agent_needs_and_uses_on_some_problems(
        pocket_agent_build: tuple[Path, Path]) -> None:
    """Held-out figures the build measured at temperature 1: with the calculator it is nearly always right, by
    hand it is mostly wrong (the sums are longer than it learned to add), and it calls the tool on part of the
    problems only: what RL has to shape."""
    _, directory = pocket_agent_build
    report = load_report(directory)
    held_out = report["held_out"]
    assert held_out["problems"] == 100 and held_out["failed"] == 0
    assert held_out["tool_success"] >= 0.8
    assert held_out["direct_success"] <= 0.3
    assert 0.2 <= held_out["tool_use"] <= 0.8
    assert json.loads((directory / "scaffold.json").read_text())["kind"] == "pocket-agent"


def test_the_agent_calls_its_calculator_in_process_and_the_calls_are_recorded(
        pocket_agent_build: tuple[Path, Path], tmp_path: Path) -> None:
    """Sampling at temperature 1 (its build leaves the choice open: greedy, it answers in one go), through
    ``sf.agent`` on the transformers backend, into a real SQLite store: the calls the agent made are recorded as
    ``tool`` traces holding the calculator's answer, and its final answer copies it."""
    _, directory = pocket_agent_build

    @sf.graph
    def solve(problem: str) -> Any:
        return sf.agent(AGENT_PROMPT, model="agent", tools=[calculator], max_turns=3,
                        params={"temperature": 1.0, "max_tokens": 160})

    rows = TASK.problems(24, seed=0, split="test")
    store = sf.Store(tmp_path / "runs.db")
    backend = sf.TransformersBackend(str(directory))
    results = solve.map_sync([{"problem": r["problem"]} for r in rows], models={"agent": backend}, store=store,
                             seed=0)
    assert all(r.ok for r in results)
    called = 0
    for result in results:
        row = rows[result.index or 0]
        tools = [t for t in store.traces(result.run_id) if t.kind is sf.TraceKind.TOOL]
        if not tools:
            continue
        called += 1
        [tool] = tools
        assert tool.metadata["tool"] == "calculator"
        expression = json.loads(tool.metadata["arguments"])["expression"]
        assert tool.text == str(sum(int(x) for x in expression.split("+")))
        if json.loads(tool.metadata["arguments"])["expression"] == row["problem"]:
            assert sf.equivalent(result.output.answer, row["answer"])
    assert called >= 5


@pytest.mark.slow
@pytest.mark.xdist_group("vllm")
def test_the_agent_calls_its_calculator_through_vllms_cpu_server(pocket_agent_build: tuple[Path, Path]) -> None:
    """``VLLMServer(tool_call_parser="hermes")``: vLLM renders the agent's conversation with its template and its
    Hermes parser reads the calls the agent writes. Sampling at temperature 1, it calls the calculator on part of
    the problems and then gets them right, and no call fails; greedy, it answers as it does in-process."""
    pytest.importorskip("vllm")
    from scaffold.backends._vllm_server import VLLMServer

    _, directory = pocket_agent_build
    rows = TASK.problems(32, seed=0, split="test")
    local = evaluate_agent(directory, rows, temperature=0.0)
    with VLLMServer(directory, model_name="pocket-agent", tool_call_parser="hermes") as server:
        backend = sf.OpenAIBackend("pocket-agent", base_url=server.base_url, api_key="none")
        sampled = evaluate_agent(backend, rows, temperature=1.0, seed=1)
        greedy = evaluate_agent(backend, rows, temperature=0.0)
    assert sampled.failed == 0 and greedy.failed == 0, (sampled.errors, greedy.errors)
    assert sampled.tool_use >= 0.2 and sampled.tool_success >= 0.8, sampled
    assert (greedy.tool_use, greedy.per_problem) == (local.tool_use, local.per_problem)


def test_the_cli_finds_the_built_agent_and_prints_its_figures(pocket_agent_build: tuple[Path, Path]) -> None:
    """``scaffold pocket agent --cache-dir CACHE`` finds the session's build (no training: it answers at once) and
    prints where it is, what it scored, and how to serve it with vLLM's Hermes parser."""
    from click.testing import CliRunner

    from scaffold.cli import main

    cache, directory = pocket_agent_build
    done = CliRunner().invoke(main, ["pocket", "agent", "--cache-dir", str(cache)])
    assert done.exit_code == 0, done.output
    held_out = load_report(directory)["held_out"]
    assert f"pocket agent: {directory}" in done.output
    assert f"success {held_out['success']:.2f}, tool_use {held_out['tool_use']:.2f}" in done.output
    assert "--tool-call-parser hermes" in done.output
