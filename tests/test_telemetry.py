"""OpenTelemetry: a write traced from the client's update to the Neo4j transaction (in-memory
exporter), the configured OTLP/HTTP and Prometheus exporters delivering to real local
receivers, and the settings that choose them. Real Temporal and Neo4j throughout."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor

from agent_tasks import telemetry
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.config import Settings, connect
from agent_tasks.devstack import free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker, open_graph
from tests.conftest import eventually, mirrored

# ------------------------------------------------------------------ in-memory exporter


@dataclass
class Traced:
    history: ConversationHistory
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    async def has(self, name: str) -> bool:
        return bool(self.named(name))


@pytest.fixture
async def traced(settings: Settings, graph: TaskGraph, project_id: str) -> AsyncIterator[Traced]:
    """A client and a worker with the SDK's tracing interceptor and a task graph with the same
    tracer, all exporting to one in-memory exporter (a private provider: no global state)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    client = await Client.connect(
        **settings.temporal.connect_config(),
        data_converter=DATA_CONVERTER,
        interceptors=[TracingInterceptor(tracer)],
    )
    traced_graph = TaskGraph(graph.driver, graph.database, tracer)
    queue = f"traced-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, traced_graph, queue):
        history = ConversationHistory(
            client, project_id=project_id, agent_id="a", task_queue=queue, graph=traced_graph
        )
        yield Traced(history, exporter)


def _parent(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, span.name
    (parent,) = [s for s in spans if s.context.span_id == span.parent.span_id]
    return parent


async def _mirror_calls_ended(traced: Traced) -> bool:
    """True when the mirror calls that wrote Neo4j so far have ended (their spans are
    exported when they end, and a call that follows its run ends once the run is idle for
    ``MIRROR_FOLLOW_IDLE``): every ``neo4j write_task`` span's ancestors are there."""
    spans = traced.spans()
    by_id = {s.context.span_id: s for s in spans}
    writes = traced.named("neo4j write_task")
    for span in writes:
        while span.parent is not None:
            if span.parent.span_id not in by_id:
                return False
            span = by_id[span.parent.span_id]
    return bool(writes)


def _ancestry(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """Names from ``span`` up to its trace's root."""
    names = [span.name]
    while span.parent is not None:
        span = _parent(span, spans)
        names.append(span.name)
    return names


async def test_create_task_is_one_trace_from_client_update_to_neo4j_transaction(
    traced: Traced,
) -> None:
    history = traced.history
    assert (await history.create_task("t", "goal")).recorded
    await mirrored(history, "t")
    await eventually(lambda: _mirror_calls_ended(traced))
    spans = traced.spans()
    (write,) = traced.named("neo4j write_task")
    assert _ancestry(write, spans) == [
        "neo4j write_task",
        "RunActivity:mirror_task",
        "StartActivity:mirror_task",
        "StartUpdateWithStartWorkflow:TaskWorkflow",
    ]
    root = _parent(_parent(_parent(write, spans), spans), spans)
    assert root.kind == SpanKind.CLIENT and root.parent is None
    assert root.attributes is not None
    assert root.attributes["temporalWorkflowID"] == history.workflow_id("t")
    assert write.kind == SpanKind.CLIENT
    assert write.context.trace_id == root.context.trace_id
    assert dict(write.attributes or {}) == {
        "db.system.name": "neo4j",
        "db.namespace": "neo4j",
        "db.operation.name": "write_task",
        "agent_tasks.workflow_id": history.workflow_id("t"),
        "agent_tasks.project_id": history.project_id,
        "agent_tasks.events": 0,
        "agent_tasks.steps": 0,
    }
    # the update's own handling is in the same trace, under the same client span
    (handled,) = traced.named("HandleUpdate:create_task")
    assert _parent(handled, spans) is root


async def test_a_later_write_is_linked_from_its_handler_and_mirrored_in_the_task_trace(
    traced: Traced,
) -> None:
    history = traced.history
    await history.create_task("t", "goal")
    await mirrored(history, "t")
    written = await history.record_event("t", "message", "hello", role="user")
    assert written.first_seq == 1
    await mirrored(history, "t")
    await eventually(lambda: traced.has("HandleUpdate:record_events"))
    await eventually(lambda: _mirror_calls_ended(traced))
    spans = traced.spans()
    (client_span,) = traced.named("StartWorkflowUpdate:record_events")
    (handled,) = traced.named("HandleUpdate:record_events")
    (root,) = traced.named("StartUpdateWithStartWorkflow:TaskWorkflow")
    # the handler lives in the task's trace and links the writer's own span
    assert handled.context.trace_id == root.context.trace_id
    assert [link.context.span_id for link in handled.links] == [client_span.context.span_id]
    # the mirror call that wrote seq 1 says so, in the task's trace
    (write,) = [
        s
        for s in traced.named("neo4j write_task")
        if (s.attributes or {}).get("agent_tasks.events")
    ]
    assert write.attributes is not None
    assert (
        write.attributes["agent_tasks.seq.first"],
        write.attributes["agent_tasks.seq.last"],
    ) == (1, 1)
    assert _ancestry(write, spans)[-1] == root.name


# ------------------------------------------------------------------ configured exporters


@dataclass
class Receiver:
    """A real OTLP/HTTP endpoint on 127.0.0.1: keeps every request's path, headers and body."""

    port: int
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def traces(self) -> list[ExportTraceServiceRequest]:
        return [
            ExportTraceServiceRequest.FromString(body)
            for path, _, body in self.requests
            if path == "/v1/traces"
        ]

    def metric_names(self) -> set[str]:
        names = set()
        for path, _, body in self.requests:
            if path != "/v1/metrics":
                continue
            request = ExportMetricsServiceRequest.FromString(body)
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    names |= {metric.name for metric in scope.metrics}
        return names

    def span_names(self) -> set[str]:
        return {
            span.name
            for request in self.traces()
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        }


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    """Session-long: the metrics runtime of a configuration lives as long as the process
    (``telemetry.setup`` caches it) and keeps exporting every second."""
    got = Receiver(free_port())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.requests.append((self.path, dict(self.headers.items()), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", got.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield got  # left serving: the exporters still flush at the process's exit


async def test_otlp_exporters_deliver_traces_and_sdk_metrics_from_settings_alone(
    receiver: Receiver, project_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme,authorization=Bearer%20s3cret")
    configured = Settings()
    client = await connect(configured)
    async with open_graph(configured) as graph:
        queue = f"otlp-{uuid.uuid4().hex[:8]}"
        async with build_worker(client, graph, queue):
            history = ConversationHistory(
                client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
            )
            await history.create_task("t", "goal")
            await mirrored(history, "t")

            async def delivered() -> bool:
                spans = receiver.span_names()
                # the mirror call's span is sent once it ends (a follower: its run idle 5 s)
                mirror = {"neo4j write_task", "RunActivity:mirror_task"}
                return mirror <= spans and "temporal_request" in receiver.metric_names()

            await eventually(delivered, within=30)  # the batch processor exports every 5 s
    assert {
        "StartUpdateWithStartWorkflow:TaskWorkflow",
        "RunActivity:mirror_task",
        "neo4j write_task",
    } <= receiver.span_names()
    assert {"temporal_workflow_task_execution_latency", "temporal_activity_execution_latency"} <= (
        receiver.metric_names()
    )
    for _, headers, _ in receiver.requests:
        assert headers["x-tenant"] == "acme"
        assert headers["authorization"] == "Bearer s3cret"
    (resource,) = {
        attr.value.string_value
        for request in receiver.traces()
        for spans in request.resource_spans
        for attr in spans.resource.attributes
        if attr.key == "service.name"
    }
    assert resource == telemetry.SERVICE_NAME


async def test_prometheus_endpoint_serves_the_sdk_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    configured = Settings()
    client = await connect(configured)
    await client.service_client.check_health()
    await client.count_workflows("WorkflowType = 'TaskWorkflow'")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return str(reply.read().decode())

    text = await asyncio.to_thread(scrape)
    requests = [line for line in text.splitlines() if line.startswith("temporal_request{")]
    assert any('operation="CountWorkflowExecutions"' in line for line in requests), text[:2000]


# ------------------------------------------------------------------ settings


def test_exporters_follow_the_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "https://m.example/ingest")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%3D%3D, x-team = blue")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "9100")
    exporters = Settings().exporters()
    assert exporters == telemetry.Exporters(
        traces="otlp",
        metrics="prometheus",
        otlp_traces_url="https://collector.example:4318/v1/traces",
        otlp_metrics_url="https://m.example/ingest",
        otlp_headers=(("api-key", "abc=="), ("x-team", "blue")),
        prometheus_bind="0.0.0.0:9100",
    )
    assert "abc" not in repr(exporters) and "abc" not in repr(Settings())


def test_nothing_is_exported_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert telemetry.setup(Settings().exporters()) == telemetry.Telemetry()


def test_an_unknown_exporter_or_bad_headers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ValidationError, match="otel_traces_exporter"):
        Settings()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "token-without-equals-sign-abcdef")
    with pytest.raises(ValueError, match="has no '='") as refused:
        Settings().exporters()
    assert "abcdef" not in str(refused.value)
