"""An OTLP/HTTP collector stand-in on 127.0.0.1: receives `POST /v1/traces` (protobuf,
gzip or not), decodes it with opentelemetry-proto and keeps the spans.

    collector = OtlpCollector()
    tracing.install_otlp(collector.url, service_name="test")
    ...
    tracing.uninstall()  # flushes the batch processor
    collector.spans       # [CollectedSpan(name, attributes, ...)]
    collector.close()
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class CollectedSpan:
    name: str
    kind: int
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    resource: dict[str, Any]


def _value(any_value) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(items) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpCollector:
    def __init__(self) -> None:
        self.spans: list[CollectedSpan] = []
        self.bodies: list[bytes] = []  # the raw requests, decompressed
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                collector.paths.append(self.path)
                collector.bodies.append(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector._keep(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(  # polling every 0.05 s: close() waits one poll
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        CollectedSpan(
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id,
                            span_id=span.span_id,
                            parent_span_id=span.parent_span_id,
                            attributes=_attributes(span.attributes),
                            status_code=span.status.code,
                            resource=resource,
                        )
                    )

    def named(self, name: str) -> list[CollectedSpan]:
        return [s for s in self.spans if s.name == name]

    def wait_for(self, name: str, count: int = 1, timeout_s: float = 15) -> list[CollectedSpan]:
        """The spans called `name` once there are `count` of them (another process exports
        them on its own schedule: set its OTEL_BSP_SCHEDULE_DELAY low)."""
        deadline = time.monotonic() + timeout_s
        while len(self.named(name)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {count} spans {name!r}: {[s.name for s in self.spans]}")
            time.sleep(0.05)
        return self.named(name)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
