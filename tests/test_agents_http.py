"""Agents against real things: native tool calling over real HTTP (OpenAIBackend and litellm, streamed and not), a
real MCP server process (stdio and streamable HTTP), the text protocol through a real tiny model in transformers,
and the openai SDK's tool round trip against `scaffold serve`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import openai
import pytest

import scaffold as sf
from scaffold.serve import ServeThread, build_app
from scaffold.testing import OpenAIServer, ScriptedBackend
from scaffold.tools import MCPServer
from tests.helpers import wait_until

ROOT = Path(__file__).parent.parent
MCP_SERVER = [sys.executable, str(ROOT / "examples" / "mcp_server.py")]


@sf.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def two_adds(request) -> sf.Completion | str:
    """The upstream model: asks for two additions at once, then answers with their sum."""
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if results:
        return rf"the sums are {' and '.join(results)}, \boxed{{{sum(int(r) for r in results)}}}"
    assert [t["function"]["name"] for t in request.tools] == ["add"]
    return sf.Completion(text="", tool_calls=(sf.ToolCall("call_a", "add", '{"a": 2, "b": 3}'),
                                              sf.ToolCall("call_b", "add", '{"a": 40, "b": 2}')))


@sf.graph
def adder(problem):
    return sf.agent("{problem}", model="m", tools=[add])


@pytest.fixture(scope="module")
def upstream():
    with OpenAIServer(policy=two_adds) as server:
        yield server


@pytest.mark.parametrize("backend", ["openai", "litellm"])
@pytest.mark.parametrize("stream", [False, True])
def test_native_tool_calls_round_trip_over_http(upstream, backend, stream):
    model = (sf.OpenAIBackend("m", base_url=upstream.base_url) if backend == "openai"
             else sf.LiteLLMBackend("openai/m", api_base=upstream.base_url, api_key="not-a-key"))
    before = len(upstream.requests)
    deltas = []
    result = adder.run_sync({"problem": "add them"}, models={"m": model}, store=None,
                            on_delta=(lambda trace_id, delta: deltas.append(delta)) if stream else None)
    assert result.answer == "47" and result.output.text == r"the sums are 5 and 42, \boxed{47}"
    turn = next(t for t in result.traces if t.id.endswith("#0.0"))
    assert turn.metadata["finish_reason"] == "tool_calls"
    assert [c["function"]["arguments"] for c in turn.metadata["tool_calls"]] == ['{"a": 2, "b": 3}',
                                                                               '{"a": 40, "b": 2}']
    sent = [served.request for served in upstream.requests[before:]]
    assert len(sent) == 2 and sent[1].body.get("stream", False) is stream
    assistant = {k: v for k, v in sent[1].body["messages"][1].items() if v is not None}  # litellm drops content: null
    assert assistant == {"role": "assistant", "tool_calls": turn.metadata["tool_calls"]}
    assert sent[1].body["messages"][2:] == [
        {"role": "tool", "content": "5", "tool_call_id": "call_a", "name": "add"},
        {"role": "tool", "content": "42", "tool_call_id": "call_b", "name": "add"}]
    assert sent[0].body["tools"] == [add.spec()]
    if stream:
        assert "".join(d.text for d in deltas).endswith(r"\boxed{47}")


def test_the_guides_react_agent_with_python_parallel_agents_and_an_mcp_tool_over_real_http():
    """The agents guide's three agents, with the model behind real HTTP: a ReAct agent running Python, five agents
    voted, and an agent calling a real MCP server process's tool."""
    from scaffold.tools import python_executor

    def model(request):
        results = [m[1] for m in request.messages if m[0] == "tool"]
        names = [t["function"]["name"] for t in request.tools]
        if results:
            return rf"\boxed{{{results[-1]}}}"
        if "python" in names:
            return sf.Completion(text="", tool_calls=(sf.ToolCall("p", "python", json.dumps(
                {"code": "print(sum(i * i for i in range(10)))"})),))
        return sf.Completion(text="", tool_calls=(sf.ToolCall("w", "word_count", '{"text": "a b c d"}'),))

    mcp_tools = [t for t in MCPServer(MCP_SERVER).tools() if t.name == "word_count"]

    @sf.graph
    def three(problem):
        react = sf.agent("{problem}", model="m", tools=[python_executor(timeout=20)], name="react")
        voted = sf.vote(sf.agent("{problem}", model="m", tools=[python_executor(timeout=20)], n=5, name="many"))
        words = sf.agent("{problem}", model="m", tools=mcp_tools, name="words")
        return {"react": react, "voted": voted, "words": words}

    with OpenAIServer(policy=model) as server:
        result = three.run_sync({"problem": "p"}, models={"m": sf.OpenAIBackend("m", base_url=server.base_url)},
                                store=None)
        assert len(server.requests) == 2 + 10 + 2
    assert {k: v.answer for k, v in result.output.items()} == {"react": "285", "voted": "285", "words": "4"}


def test_the_text_protocol_reaches_a_real_model_in_transformers(tiny_model_dir):
    """A tiny random model cannot call tools, but its prompt is the protocol's: the tools' instructions in a system
    message, rendered by the model's own chat template; what it writes is parsed for calls."""
    from scaffold.backends._tool_text import INSTRUCTIONS
    from scaffold.backends._transformers import encode_prompt

    backend = sf.TransformersBackend(str(tiny_model_dir), max_new_tokens=8)
    result = adder.run_sync({"problem": "add 2 and 3"}, models={"m": backend}, store=None, seed=1)
    assert result.ok and result.output.token_ids is not None
    request = result.output.request
    prompt = backend.tokenizer.decode(encode_prompt(backend.tokenizer, request))
    assert prompt.startswith("<|im_start|>system\n" + INSTRUCTIONS)
    assert '"name": "add"' in prompt and "add 2 and 3" in prompt
    later = sf.Request(messages=(("user", "q"), sf.assistant_message("", [sf.ToolCall("c", "add", '{"a": 1}')]),
                                 sf.tool_message("c", "add", "5")), tools=request.tools)
    rendered = backend.tokenizer.decode(encode_prompt(backend.tokenizer, later))
    assert '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>' in rendered
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response>" in rendered


def test_a_chat_template_that_reads_tools_gets_them_natively(tiny_model_dir):
    """A template that reads ``tools`` (as Qwen2.5's does) is given them, and the earlier calls with their arguments
    as objects; nothing of the text protocol is added."""
    from transformers import AutoTokenizer

    from scaffold.backends._tool_text import INSTRUCTIONS, native_tools
    from scaffold.backends._transformers import encode_prompt

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.chat_template = (
        "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}|{% endif %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments.a }}]{% endfor %}|"
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    assert native_tools(tokenizer)
    request = sf.Request(messages=(("user", "q"), sf.assistant_message("", [sf.ToolCall("c", "add", '{"a": 7}')]),
                                   sf.tool_message("c", "add", "9")), tools=(add.spec(),))
    text = tokenizer.decode(encode_prompt(tokenizer, request))
    assert text == "TOOLS:add;|user:q|assistant:[add 7]|tool:9|assistant:"
    assert INSTRUCTIONS not in text


# -- MCP ----------------------------------------------------------------------------------------------------
def converter_script(request) -> sf.Completion:
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if results:
        return sf.Completion(text=f"{results[0]} metres; words: {results[1]}")
    return sf.Completion(text="", tool_calls=(
        sf.ToolCall("c1", "convert_length", '{"value": 2, "from_unit": "km", "to_unit": "m"}'),
        sf.ToolCall("c2", "word_count", '{"text": "one two three"}')))


def test_an_agent_calls_the_tools_of_a_real_mcp_server_process_over_stdio(tmp_path):
    server = MCPServer(MCP_SERVER)
    tools = server.tools()
    assert [t.name for t in tools] == ["convert_length", "word_count"]
    assert tools[0].parameters["required"] == ["value", "from_unit", "to_unit"]

    @sf.graph
    def convert(problem):
        return sf.agent("{problem}", model="m", tools=tools)

    result = convert.run_sync({"problem": "2 km?"}, models={"m": ScriptedBackend(converter_script)},
                              store=sf.Store(tmp_path / "s.db"), run_id="mcp")
    assert result.output.text == "2000.0 metres; words: 3"
    bad = sf.ToolCall("c3", "convert_length", '{"value": 1, "from_unit": "parsec", "to_unit": "m"}')

    def failing(request):
        if any(m[0] == "tool" for m in request.messages):
            return "done"
        return sf.Completion(text="", tool_calls=(bad,))

    failed = convert.run_sync({"problem": "x"}, models={"m": ScriptedBackend(failing)}, store=None)
    tool = next(t for t in failed.traces if t.kind is sf.TraceKind.TOOL)
    assert tool.status is sf.Status.ERROR and tool.error.startswith("ToolFailed: convert_length: the server answered")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_agent_calls_a_real_mcp_server_over_streamable_http():
    port = free_port()
    process = subprocess.Popen([*MCP_SERVER, "--http", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(listening, timeout=60, message="the MCP server never listened")
        tools = MCPServer(url=f"http://127.0.0.1:{port}/mcp", prefix="units_").tools()
        assert [t.name for t in tools] == ["units_convert_length", "units_word_count"]

        def script(request):
            results = [m[1] for m in request.messages if m[0] == "tool"]
            if results:
                return results[0]
            return sf.Completion(text="", tool_calls=(sf.ToolCall("c", "units_word_count", '{"text": "a b"}'),))

        @sf.graph
        def count(problem):
            return sf.agent("{problem}", model="m", tools=tools)

        assert count.run_sync({"problem": "x"}, models={"m": ScriptedBackend(script)}, store=None).output.text == "2"
    finally:
        process.terminate()
        process.wait(timeout=30)


# -- serving ---------------------------------------------------------------------------------------------------
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def weather_agent(request) -> sf.Completion | str:
    """Calls the server's calculator and the client's weather tool in one turn, then answers from both."""
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if results:  # without the server's own call in the conversation, the calculator's answer is "?"
        calculated = results[0] if len(results) > 1 else "?"
        return rf"{results[-1]} and {calculated} degrees, \boxed{{{calculated}}}"
    return sf.Completion(text="Let me look.", tool_calls=(
        sf.ToolCall("u1", "calculator", '{"expression": "6 * 7"}'),
        sf.ToolCall("u2", "get_weather", '{"city": "Paris"}')))


@pytest.fixture
def agent_server(tmp_path):
    with OpenAIServer(policy=weather_agent) as up:
        def start(store: bool):
            cfg = {"models": {"up": {"model": "hosted_vllm/m", "api_base": up.base_url}},
                   "served": {"agent": {"topology": "react", "params": {"tools": ["calculator"]},
                                        "models": {"solver": "up"}, "tools": True}}}
            return ServeThread(build_app(cfg, store=str(tmp_path / "serve.db") if store else "none"))

        yield up, start


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_tool_round_trip_resumes_the_served_agent(agent_server, stream, tmp_path):
    up, start = agent_server
    with start(store=True) as server, openai.OpenAI(base_url=server.base_url, api_key="unused") as client:
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        if stream:
            chunks = list(client.chat.completions.create(model="agent", messages=messages, tools=[WEATHER],
                                                         stream=True))
            pieces = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
            assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
            assert len(pieces) == 1 and pieces[0].function.name == "get_weather"
            call_id, arguments = pieces[0].id, pieces[0].function.arguments
            messages.append({"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]})
        else:
            first = client.chat.completions.create(model="agent", messages=messages, tools=[WEATHER])
            choice = first.choices[0]
            assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
            assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]  # not the server's own
            call_id, arguments = choice.message.tool_calls[0].id, choice.message.tool_calls[0].function.arguments
            messages.append(choice.message.model_dump(exclude_none=True))
        assert json.loads(arguments) == {"city": "Paris"}
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "sunny"})
        sent_before = len(up.requests)
        final = client.chat.completions.create(model="agent", messages=messages, tools=[WEATHER])
        assert final.choices[0].finish_reason == "stop"
        assert final.choices[0].message.content == r"sunny and 42 degrees, \boxed{42}"
        assert len(up.requests) == sent_before + 1  # the first turn came from the store, not the model
        run_id = final.model_extra["scaffold"]["run_ids"][0]
        assert call_id.startswith(f"call_{run_id}_")
        with sf.Store(tmp_path / "serve.db") as store:
            tools = {t.metadata["tool"]: t for t in store.traces(run_id) if t.kind is sf.TraceKind.TOOL}
        assert tools["calculator"].text == "42" and tools["get_weather"].text == "sunny"
        assert tools["get_weather"].metadata["client"] is True


def test_without_a_store_the_round_trip_runs_the_graph_again_from_the_clients_turns(agent_server):
    up, start = agent_server
    with start(store=False) as server, openai.OpenAI(base_url=server.base_url, api_key="unused") as client:
        messages = [{"role": "user", "content": "Weather?"}]
        first = client.chat.completions.create(model="agent", messages=messages, tools=[WEATHER])
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": first.choices[0].message.tool_calls[0].id, "content": "rain"}]
        sent_before = len(up.requests)
        final = client.chat.completions.create(model="agent", messages=messages, tools=[WEATHER])
        # the client's turn stands in for the model's (its server-side calls are not in it): one more model call
        assert len(up.requests) == sent_before + 1
        assert final.choices[0].message.content == r"rain and ? degrees, \boxed{?}"


@pytest.mark.parametrize(("extra", "message"), [
    ([{"role": "tool", "tool_call_id": "nope", "content": "x"}], "a tool message answers no pending call"),
    ([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "a1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}],
     "the last tool calls are not all answered"),
    ([{"role": "assistant", "content": "plain"}], "an agent takes only its tool calls and their answers"),
])
def test_a_malformed_tool_conversation_is_a_400(agent_server, extra, message):
    _, start = agent_server
    with (start(store=True) as server,
          openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client):
        with pytest.raises(openai.BadRequestError, match=message):
            client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "q"}, *extra],
                                           tools=[WEATHER])


def test_a_client_tool_named_like_a_server_tool_is_a_400(agent_server):
    _, start = agent_server
    clash = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
    with (start(store=True) as server,
          openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client):
        with pytest.raises(openai.BadRequestError, match="the server's own tools are named calculator"):
            client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "q"}], tools=[clash])
