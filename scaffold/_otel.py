"""Runs as OpenTelemetry traces: live (a run subscriber) or from the store, over OTLP/HTTP.

One span per run (``run {graph}``, kind INTERNAL) and, inside it, one span per call (kind CLIENT,
``{operation} {model}``, timed by the call's own start and latency) and per rule aggregation
(``rule {node}``), and one per tool call an agent made (``execute_tool {tool}``, kind INTERNAL, with
``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and
``gen_ai.tool.type``; its arguments and result as ``gen_ai.tool.call.arguments`` / ``.result`` only
with ``capture_content``). Model calls carry the GenAI semantic-convention attributes (``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.request.temperature`` / ``top_p`` /
``max_tokens`` / ``seed``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
``gen_ai.response.finish_reasons``); every span carries ``scaffold.*`` attributes (run and trace ids,
node, index, answer, status, attempt, cost). **Lineage is span links**: a call that read traces links
to their spans (``scaffold.input_id`` on each link), so a backend can follow which candidates an
aggregation read. Rewards are attributes (``scaffold.reward``) when the store has them (the live
exporter sees a run before any reward exists). Failed calls have an error status and ``error.type``.

Prompts and outputs are *not* sent unless ``capture_content=True`` (``gen_ai.input.messages`` and
``gen_ai.output.messages``, JSON), as the conventions ask: they may hold personal data. Nothing
else from a request is sent (no parameters beyond the sampling ones above, never a credential).

Needs the ``otel`` extra (``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._events import Event, RunFinished, RunStarted, TraceFinished
from scaffold._types import Status, Trace, TraceKind
from scaffold.backends._base import provider_of_class

if TYPE_CHECKING:
    from scaffold.store._query import RunInfo
    from scaffold.store._store import Store

INSTALL_HINT = "pip install 'scaffold-sdk[otel]'"
TRACES_PATH = "/v1/traces"
_SAMPLING = (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("max_tokens", "max_tokens"),
             ("seed", "seed"), ("frequency_penalty", "frequency_penalty"), ("presence_penalty", "presence_penalty"))


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector: ``endpoint`` itself when it names ``/v1/traces``, else with it added.

    Examples:
        >>> traces_url("http://127.0.0.1:4318")
        'http://127.0.0.1:4318/v1/traces'
    """
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


class OTelExporter:
    """Sends runs to an OTLP/HTTP collector as spans; a run subscriber (see the module docstring).

    ``endpoint`` is the collector (``http://host:4318``, or its ``/v1/traces`` URL); ``headers`` go with
    every export (an API key of the collector's: never logged). Spans are batched and sent from a
    background thread; :meth:`flush` waits until everything so far is sent, :meth:`close` also stops.

    Example (a stand-in collector on a free port that takes every export):
        >>> import threading
        >>> from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        >>> import scaffold as sf
        >>> from scaffold.testing import ScriptedBackend
        >>> class Collector(BaseHTTPRequestHandler):
        ...     def do_POST(self):
        ...         self.rfile.read(int(self.headers["content-length"]))
        ...         self.send_response(200)
        ...         self.end_headers()
        ...     def log_message(self, *args):
        ...         pass
        >>> collector = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
        >>> threading.Thread(target=collector.serve_forever, daemon=True).start()
        >>> @sf.graph
        ... def solve(problem):
        ...     return sf.generate("{problem}", model="m")
        >>> exporter = OTelExporter(f"http://127.0.0.1:{collector.server_port}")
        >>> solve.build().run_sync({"problem": "2+2"}, models={"m": ScriptedBackend(lambda request: "4")},
        ...                        store=None, subscribers=[exporter]).ok
        True
        >>> exporter.flush()
        True
        >>> exporter.close()
        >>> collector.shutdown()
        >>> collector.server_close()
    """

    def __init__(self, endpoint: str, *, headers: Mapping[str, str] | None = None, service_name: str = "scaffold",
                 capture_content: bool = False, timeout: float = 10.0) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ImportError(f"exporting OpenTelemetry traces needs the OpenTelemetry SDK: {INSTALL_HINT}") from exc
        self.endpoint = traces_url(endpoint)
        self.capture_content = capture_content
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=self.endpoint, headers=dict(headers or {}), timeout=timeout)))
        self.tracer = self.provider.get_tracer("scaffold")
        self._runs: dict[str, _RunSpans] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OTelExporter({self.endpoint!r})"

    def __call__(self, event: Event) -> None:
        """The subscriber: a run's span opens at its start, a call's when it finishes, the run's closes at its end."""
        if isinstance(event, RunStarted):
            with self._lock:
                self._runs[event.run_id] = _RunSpans(self, event.run_id, event.graph, event.models,
                                                     inputs=event.inputs, seed=event.seed)
        elif isinstance(event, TraceFinished):
            spans = self._runs.get(event.trace.run_id)
            if spans is not None:
                spans.call(event.trace)
        elif isinstance(event, RunFinished):
            with self._lock:
                spans = self._runs.pop(event.result.run_id, None)
            if spans is not None:
                result = event.result
                spans.end(status=result.status, answer=result.answer,
                          error=None if result.error is None else f"{type(result.error).__name__}: {result.error}")

    def export_run(self, info: RunInfo, traces: Sequence[Trace], rewards: Sequence[Mapping[str, Any]] = ()) -> int:
        """Send one recorded run (its summary, traces and rewards) as spans; returns how many."""
        by_trace = {r["call_id"]: float(r["value"]) for r in rewards if r.get("call_id") is not None}
        run_rewards = [float(r["value"]) for r in rewards if r.get("call_id") is None]
        spans = _RunSpans(self, info.id, info.graph, info.models, inputs=info.inputs, seed=info.seed,
                          start=info.started_at)
        for trace in sorted(traces, key=lambda t: t.started_at):
            spans.call(trace, reward=by_trace.get(trace.id))
        spans.end(status=info.status, answer=info.answer, error=info.error,
                  reward=run_rewards[-1] if run_rewards else None,
                  end=info.finished_at if info.finished_at is not None else info.started_at)
        return spans.count

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every span so far is exported (or ``timeout`` seconds); True when all were."""
        return bool(self.provider.force_flush(int(timeout * 1000)))

    def close(self) -> None:
        """Export what is left and stop the background thread."""
        self.provider.shutdown()


def otel_exporter(endpoint: str, **options: Any) -> OTelExporter:
    """A run subscriber sending every run to the OTLP/HTTP collector at ``endpoint`` (:class:`OTelExporter`).

    Examples:
        >>> import scaffold as sf
        >>> result = graph.run_sync(inputs, models=models,  # doctest: +SKIP
        ...                         subscribers=[sf.otel_exporter("http://127.0.0.1:4318")])
    """
    return OTelExporter(endpoint, **options)


def export_otlp(store: Store, endpoint: str, *, run_ids: Iterable[str] | None = None, headers: Mapping[str, str]
                | None = None, capture_content: bool = False, limit: int | None = None, **filters: Any) -> int:
    """Send recorded runs (``run_ids``, or those the filters select, as :meth:`Store.runs`) to a collector.

    Returns the number of spans sent; raises :class:`RuntimeError` when the collector did not take them all.
    """
    exporter = OTelExporter(endpoint, headers=headers, capture_content=capture_content)
    sent = 0
    try:
        infos = ([store.run(run_id) for run_id in run_ids] if run_ids is not None
                 else store.runs(limit=limit, newest_first=False, **filters))
        for info in infos:
            sent += exporter.export_run(info, store.traces(info.id), store.rewards(info.id))
        if not exporter.flush():
            raise RuntimeError(f"the collector at {exporter.endpoint} did not take every span in time")
    finally:
        exporter.close()
    return sent


class _RunSpans:
    """The spans of one run: the run's own, and a call's each; keeps each trace's span context for links."""

    def __init__(self, exporter: OTelExporter, run_id: str, graph: str, models: Mapping[str, Any], *,
                 inputs: Mapping[str, Any], seed: int, start: float | None = None) -> None:
        from opentelemetry.trace import SpanKind

        self.exporter, self.models = exporter, models
        attributes: dict[str, Any] = {"scaffold.run_id": run_id, "scaffold.graph": graph, "scaffold.seed": seed,
                                      "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": graph}
        if exporter.capture_content and inputs:
            attributes["scaffold.inputs"] = json.dumps(dict(inputs), default=str)
        self.span = exporter.tracer.start_span(f"run {graph}", kind=SpanKind.INTERNAL, attributes=attributes,
                                               start_time=None if start is None else _ns(start))
        self.contexts: dict[str, Any] = {}
        self.count = 1

    def call(self, trace: Trace, *, reward: float | None = None) -> None:
        """One finished trace as a child span (external inputs too, so lineage links have a target)."""
        from opentelemetry import trace as otel
        from opentelemetry.trace import Link, SpanKind, StatusCode

        links = [Link(self.contexts[i], {"scaffold.input_id": i}) for i in trace.inputs if i in self.contexts]
        attributes = self._attributes(trace, reward)
        if trace.kind is TraceKind.MODEL:
            name, kind = f"{attributes['gen_ai.operation.name']} {attributes.get('gen_ai.request.model', '')}", \
                SpanKind.CLIENT
        elif trace.kind is TraceKind.TOOL:
            name, kind = f"execute_tool {attributes['gen_ai.tool.name']}", SpanKind.INTERNAL
        else:
            name, kind = f"{trace.kind.value} {trace.node}", SpanKind.INTERNAL
        start = trace.started_at or None
        span = self.exporter.tracer.start_span(name.strip(), context=otel.set_span_in_context(self.span), kind=kind,
                                               links=links, attributes=attributes,
                                               start_time=None if start is None else _ns(start))
        if trace.status is not Status.OK:
            span.set_status(StatusCode.ERROR, trace.error or trace.status.value)
        span.end(end_time=None if start is None else _ns(start + trace.latency))
        self.contexts[trace.id] = span.get_span_context()
        self.count += 1

    def end(self, *, status: str, answer: str | None, error: str | None, reward: float | None = None,
            end: float | None = None) -> None:
        from opentelemetry.trace import StatusCode

        self.span.set_attribute("scaffold.status", status)
        if answer is not None:
            self.span.set_attribute("scaffold.answer", answer)
        if reward is not None:
            self.span.set_attribute("scaffold.reward", reward)
        if status not in ("ok", "running"):
            self.span.set_status(StatusCode.ERROR, error or status)
        self.span.end(end_time=None if end is None else _ns(end))

    def _attributes(self, trace: Trace, reward: float | None) -> dict[str, Any]:
        out: dict[str, Any] = {"scaffold.run_id": trace.run_id, "scaffold.trace_id": trace.id,
                               "scaffold.node": trace.node, "scaffold.index": trace.index,
                               "scaffold.kind": trace.kind.value, "scaffold.status": trace.status.value,
                               "scaffold.attempt": trace.attempt, "scaffold.inputs": list(trace.inputs)}
        if trace.answer is not None:
            out["scaffold.answer"] = trace.answer
        if reward is not None:
            out["scaffold.reward"] = reward
        if trace.error:
            out["error.type"] = trace.error.split(":", 1)[0]
        if trace.kind is TraceKind.TOOL:
            return self._tool_attributes(trace, out)
        if trace.kind is not TraceKind.MODEL:
            return out
        bound = self.models.get(trace.model or "", {}) or {}
        model = str(bound.get("model") or trace.model or "")
        request = trace.request
        out.update({"gen_ai.operation.name": "text_completion" if request is not None and request.prompt is not None
                    else "chat", "gen_ai.provider.name": _provider(model, bound),
                    "gen_ai.request.model": model, "gen_ai.usage.input_tokens": trace.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": trace.usage.completion_tokens, "scaffold.alias": trace.model or "",
                    "scaffold.latency_s": trace.latency})
        if trace.cost is not None:
            out["scaffold.cost_usd"] = trace.cost
        finish = trace.metadata.get("finish_reason") if trace.metadata else None
        if finish is not None:
            out["gen_ai.response.finish_reasons"] = [str(finish)]
        if request is not None:
            for key, name in _SAMPLING:
                value = request.params.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"gen_ai.request.{name}"] = value
            if request.seed is not None and "gen_ai.request.seed" not in out:
                out["gen_ai.request.seed"] = request.seed
            if self.exporter.capture_content:
                messages = ([{"role": "user", "parts": [{"type": "text", "content": request.prompt}]}]
                            if request.prompt is not None else
                            [{"role": m[0], "parts": [{"type": "text", "content": m[1]}]} for m in request.messages])
                out["gen_ai.input.messages"] = json.dumps(messages)
                parts: list[dict[str, Any]] = [{"type": "text", "content": trace.text}]
                for call in (trace.metadata.get("tool_calls") or ()) if trace.metadata else ():
                    function = call.get("function") or {}
                    parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                                  "arguments": function.get("arguments")})
                out["gen_ai.output.messages"] = json.dumps([{"role": "assistant", "parts": parts}])
        return out

    def _tool_attributes(self, trace: Trace, out: dict[str, Any]) -> dict[str, Any]:
        """A tool call's GenAI attributes: ``execute_tool``, the tool's name and call id; its arguments and result
        only with ``capture_content`` (they may hold personal data)."""
        metadata = trace.metadata or {}
        out.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": str(metadata.get("tool", "")),
                    "gen_ai.tool.type": "function", "scaffold.latency_s": trace.latency})
        if metadata.get("call_id"):
            out["gen_ai.tool.call.id"] = str(metadata["call_id"])
        if metadata.get("client"):
            out["scaffold.tool.client"] = True
        if self.exporter.capture_content:
            out["gen_ai.tool.call.arguments"] = str(metadata.get("arguments", ""))
            out["gen_ai.tool.call.result"] = trace.text
        return out


def _provider(model: str, bound: Mapping[str, Any]) -> str:
    """``openai`` for ``openai/gpt-4o-mini``; else what the backend declares (its ``provider``, in the run's start
    event); for a run read back from a store, from the backend's class name; else the model's own name."""
    if "/" in model:
        return model.split("/", 1)[0]
    if bound.get("provider"):
        return str(bound["provider"])
    if bound.get("backend"):
        return provider_of_class(str(bound["backend"]))
    return (model or "unknown").lower()


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
