"""A real OTLP/HTTP traces receiver for the tests: POST /v1/traces (protobuf), spans decoded and kept."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OTLPReceiver:
    """Listens on 127.0.0.1 (a free port); ``spans`` are the received spans as dicts, ``headers`` each request's.

    Each span dict has ``name``, ``trace_id``, ``span_id``, ``parent_span_id`` (hex), ``kind``, ``start``/``end``
    (ns), ``status`` (code), ``attributes`` (plain values) and ``links`` (``[(span_id, attributes)]``), plus the
    resource's ``service.name``.
    """

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._take(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _take(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append({
                        "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(), "kind": span.kind,
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "status": span.status.code, "service": resource.get("service.name"),
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "links": [(link.span_id.hex(), {a.key: _value(a.value) for a in link.attributes})
                                  for link in span.links]})


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None
