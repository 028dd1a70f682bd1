"""The server's Prometheus metrics (``GET /metrics``), one registry per app.

=======================================  ==========  ==============================================
name                                     type        labels
=======================================  ==========  ==============================================
``scaffold_requests_total``              counter     model, endpoint, status (HTTP status code)
``scaffold_requests_in_flight``          gauge       model (requests running their graph)
``scaffold_requests_queued``             gauge       (waiting for a place: ``max_concurrent_requests``)
``scaffold_model_calls_total``           counter     model, alias, status (ok, error, cancelled)
``scaffold_tokens_total``                counter     model, kind (prompt, completion)
``scaffold_cost_dollars_total``          counter     model (calls with a known price)
``scaffold_request_seconds``             histogram   model, endpoint
``scaffold_time_to_first_token_seconds`` histogram   model (streams: request received -> first content)
=======================================  ==========  ==============================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaffold._events import TraceFinished
from scaffold._types import TraceKind

if TYPE_CHECKING:
    from scaffold._events import Event, Subscriber

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    """Counters, gauges and histograms of one server (see the module docstring)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("scaffold_requests", "Requests answered", ["model", "endpoint", "status"], registry=r)
        self.in_flight = Gauge("scaffold_requests_in_flight", "Requests running their graph", ["model"], registry=r)
        self.queued = Gauge("scaffold_requests_queued", "Requests waiting for a place", registry=r)
        self.calls = Counter("scaffold_model_calls", "Model calls made by served graphs",
                             ["model", "alias", "status"], registry=r)
        self.tokens = Counter("scaffold_tokens", "Tokens over every internal model call", ["model", "kind"],
                              registry=r)
        self.cost = Counter("scaffold_cost_dollars", "Dollars spent by calls with a known price", ["model"],
                            registry=r)
        self.latency = Histogram("scaffold_request_seconds", "Request latency", ["model", "endpoint"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.ttft = Histogram("scaffold_time_to_first_token_seconds", "Streams: request received to first content",
                              ["model"], buckets=_LATENCY_BUCKETS, registry=r)

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached (``labels`` takes a lock and builds a key on every call)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def calls_counter(self, model: str) -> Subscriber:
        """A run subscriber counting each model call of served model ``model`` as it finishes (its status,
        tokens and cost): calls cancelled when a client goes away are counted too."""
        def count(event: Event) -> None:
            if type(event) is not TraceFinished:
                return
            trace = event.trace
            if trace.kind is not TraceKind.MODEL:
                return
            self.child(self.calls, model, trace.model or "", str(trace.status)).inc()
            usage = trace.usage
            if usage.prompt_tokens:
                self.child(self.tokens, model, "prompt").inc(usage.prompt_tokens)
            if usage.completion_tokens:
                self.child(self.tokens, model, "completion").inc(usage.completion_tokens)
            if trace.cost:
                self.child(self.cost, model).inc(trace.cost)

        count.__name__ = "metrics"
        count.events = (TraceFinished,)  # type: ignore[attr-defined]  # no other event is built for it
        return count

    def render(self) -> bytes:
        """The text exposition format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
