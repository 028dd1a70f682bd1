"""Runs as OpenTelemetry spans, received by a real OTLP/HTTP endpoint in the test: live, and from the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from otlp_receiver import OTLPReceiver

import graphs
import scaffold as sf
from scaffold.testing import OpenAIServer, ScriptedBackend, sample_store

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-otel-test-0123456789abcdef"


def answer(request: sf.Request) -> str:
    return f"so \\boxed{{{(request.seed or 0) % 3}}}"


def test_a_live_run_arrives_as_a_run_span_and_call_spans_with_genai_attributes_and_lineage_links() -> None:
    """RSA (N=4, K=2, T=2) over real HTTP with the exporter as a subscriber: one run span, a CLIENT span per call
    under it with the GenAI attributes, span links from each aggregation to the traces it read; no prompt text
    and never the API key."""
    graph = graphs.rsa.build(n=4, k=2, steps=2)
    with OpenAIServer(policy=lambda request: f"so \\boxed{{{request.choice % 3}}}", api_key=SECRET) as server, \
            OTLPReceiver() as receiver:
        model = sf.Model(sf.OpenAIBackend("gpt-4o-mini", base_url=server.base_url, api_key=SECRET),
                         params={"temperature": 0.7, "max_tokens": 64})
        exporter = sf.otel_exporter(receiver.url, headers={"x-collector-key": "k1"}, service_name="rsa-test")
        result = graph.run_sync({"problem": "1+1"}, models={"solver": model}, store=None, seed=3,
                                subscribers=[exporter])
        assert exporter.flush()
        exporter.close()
    spans = receiver.spans
    runs = [s for s in spans if s["name"] == "run rsa"]
    assert len(runs) == 1 and runs[0]["attributes"]["scaffold.run_id"] == result.run_id
    calls = [s for s in spans if s["kind"] == 3]  # SPAN_KIND_CLIENT
    model_traces = {t.id: t for t in result.traces if t.kind is sf.TraceKind.MODEL}
    assert len(calls) == len(model_traces) == 4 + 2 * 4
    assert all(s["parent_span_id"] == runs[0]["span_id"] and s["trace_id"] == runs[0]["trace_id"] for s in calls)
    for span in calls:
        attributes = span["attributes"]
        trace = model_traces[attributes["scaffold.trace_id"]]
        assert span["name"] == "chat gpt-4o-mini" and attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.usage.input_tokens"] == trace.usage.prompt_tokens > 0
        assert attributes["gen_ai.usage.output_tokens"] == trace.usage.completion_tokens > 0
        assert attributes["gen_ai.request.temperature"] == 0.7 and attributes["gen_ai.request.max_tokens"] == 64
        assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
        assert attributes["scaffold.answer"] == trace.answer
        assert "gen_ai.input.messages" not in attributes and span["service"] == "rsa-test"
        assert span["end"] >= span["start"] > 0
    by_trace = {s["attributes"]["scaffold.trace_id"]: s for s in spans if "scaffold.trace_id" in s["attributes"]}
    for trace in model_traces.values():
        linked = {link_attributes["scaffold.input_id"]: span_id for span_id, link_attributes in
                  by_trace[trace.id]["links"]}
        assert set(linked) == set(trace.inputs)
        assert all(by_trace[i]["span_id"] == span_id for i, span_id in linked.items())
    assert all(h.get("x-collector-key") == "k1" for h in receiver.headers)
    assert SECRET not in repr(spans) and SECRET not in repr(receiver.headers)


def test_content_is_sent_only_when_asked() -> None:
    """capture_content=True adds the prompt and the output as gen_ai.input/output.messages (JSON)."""
    graph = graphs.single_sample.build()
    with OTLPReceiver() as receiver:
        exporter = sf.otel_exporter(receiver.url, capture_content=True)
        graph.run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(answer)}, store=None,
                       subscribers=[exporter])
        exporter.close()
    call = next(s for s in receiver.spans if s["kind"] == 3)
    assert "2+2" in call["attributes"]["gen_ai.input.messages"]
    assert "boxed" in call["attributes"]["gen_ai.output.messages"]


@pytest.mark.slow
def test_recorded_runs_export_with_rewards_through_the_cli(tmp_path: Path) -> None:
    """`scaffold runs export --format otlp --endpoint URL --graph rsa` sends every recorded rsa run with its calls,
    their rewards and lineage; a missing endpoint is a usage error."""
    sample = sample_store(tmp_path / "runs.db", problems=3, n=4, k=2, steps=2)
    with sf.Store(sample.path) as store:
        runs = store.runs(graph="rsa")
        traces = {run.id: store.traces(run.id) for run in runs}
        rewards = {run.id: store.rewards(run.id) for run in runs}
    with OTLPReceiver() as receiver:
        done = subprocess.run([sys.executable, "-m", "scaffold", "--store", sample.path, "runs", "export", "--format",
                               "otlp", "--endpoint", receiver.url, "--graph", "rsa", "--header", "x-key=$OTEL_KEY"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "OTEL_KEY": "from-env"})
        assert done.returncode == 0, done.stderr[-2000:]
    expected = len(runs) + sum(len(t) for t in traces.values())
    assert f"sent {expected} spans" in done.stdout and len(receiver.spans) == expected
    assert {h.get("x-key") for h in receiver.headers} == {"from-env"}
    spans = {s["attributes"].get("scaffold.trace_id"): s for s in receiver.spans}
    run_spans = {s["attributes"]["scaffold.run_id"]: s for s in receiver.spans if s["name"] == "run rsa"}
    assert set(run_spans) == {run.id for run in runs}
    for run in runs:
        per_call = {r["call_id"]: r["value"] for r in rewards[run.id] if r["call_id"] is not None}
        per_run = [r["value"] for r in rewards[run.id] if r["call_id"] is None]
        # the evaluation scored every model call and the run itself: each span carries exactly its reward
        assert set(per_call) == {t.id for t in traces[run.id] if t.kind is sf.TraceKind.MODEL} and len(per_run) == 1
        assert run_spans[run.id]["attributes"]["scaffold.reward"] == per_run[0]
        for trace in traces[run.id]:
            span = spans[trace.id]
            assert span["attributes"].get("scaffold.reward") == per_call.get(trace.id), trace.id
            assert len(span["links"]) == len(trace.inputs)
            assert trace.started_at > 0  # every recorded trace has its start, so the span keeps it
            assert span["start"] == int(trace.started_at * 1e9)
    missing = subprocess.run([sys.executable, "-m", "scaffold", "--store", sample.path, "runs", "export", "--format",
                              "otlp"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "--endpoint" in missing.stderr


class AcmeBackend(ScriptedBackend):
    """A backend of our own that says who it is."""

    provider = "acme"


def test_the_provider_a_span_reports_is_what_the_backend_declares() -> None:
    """``gen_ai.provider.name`` comes from the backend's ``provider`` attribute (no table of class names), and a
    backend that declares none reports its class name without ``Backend``."""
    graph = graphs.self_consistency.build(n=2)

    class EchoBackend(ScriptedBackend):
        provider = None  # type: ignore[assignment]

    found = {}
    for backend in (AcmeBackend(answer), EchoBackend(answer)):
        with OTLPReceiver() as receiver:
            exporter = sf.otel_exporter(receiver.url)
            graph.run_sync({"problem": "1+1"}, models={"solver": sf.Model(backend, name="m1")}, store=None,
                           subscribers=[exporter])
            assert exporter.flush()
            exporter.close()
        found[type(backend).__name__] = {s["attributes"]["gen_ai.provider.name"] for s in receiver.spans
                                         if s["kind"] == 3}
    assert found == {"AcmeBackend": {"acme"}, "EchoBackend": {"echo"}}


@pytest.mark.parametrize("capture", [False, True])
def test_an_agents_tool_calls_arrive_as_execute_tool_spans(capture: bool) -> None:
    """Each tool call an agent makes is an INTERNAL ``execute_tool {name}`` span with the GenAI tool attributes,
    linked to the turn that asked for it; its arguments and result only when content is captured."""

    @sf.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    def script(request: sf.Request) -> sf.Completion:
        results = [m[1] for m in request.messages if m[0] == "tool"]
        if results:
            return sf.Completion(text=rf"\boxed{{{results[0]}}}")
        return sf.Completion(text="", tool_calls=(sf.ToolCall("call_7", "add", '{"a": 2, "b": 5}'),))

    @sf.graph
    def solve(problem):
        return sf.agent("{problem}", model="m", tools=[add])

    with OTLPReceiver() as receiver:
        exporter = sf.otel_exporter(receiver.url, capture_content=capture)
        result = solve.run_sync({"problem": "2+5"}, models={"m": ScriptedBackend(script)}, store=None,
                                subscribers=[exporter])
        exporter.close()
    tools = [s for s in receiver.spans if s["name"] == "execute_tool add"]
    assert len(tools) == 1 and tools[0]["kind"] == 1  # SPAN_KIND_INTERNAL
    attributes = tools[0]["attributes"]
    assert attributes["gen_ai.operation.name"] == "execute_tool" and attributes["gen_ai.tool.name"] == "add"
    assert attributes["gen_ai.tool.call.id"] == "call_7" and attributes["gen_ai.tool.type"] == "function"
    turn = next(s for s in receiver.spans if s["attributes"].get("scaffold.trace_id") == f"{result.run_id}/agent#0.0")
    assert [link["scaffold.input_id"] for _, link in tools[0]["links"]] == [f"{result.run_id}/agent#0.0"]
    assert tools[0]["links"][0][0] == turn["span_id"]
    if capture:
        assert attributes["gen_ai.tool.call.arguments"] == '{"a": 2, "b": 5}'
        assert attributes["gen_ai.tool.call.result"] == "7"
        assert '"type": "tool_call"' in turn["attributes"]["gen_ai.output.messages"]
    else:
        assert "gen_ai.tool.call.arguments" not in attributes and "gen_ai.tool.call.result" not in attributes
