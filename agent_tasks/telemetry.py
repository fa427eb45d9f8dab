"""OpenTelemetry for workers and apps: traces and the Temporal SDK's runtime metrics.

Nothing is exported unless the settings name an exporter (``OTEL_TRACES_EXPORTER``,
``OTEL_METRICS_EXPORTER``: the table in ``config``), and this module loads no OpenTelemetry
package until then, so a worker without the ``otel`` extra runs untraced at no cost.

**Traces** (``otlp``: OTLP/HTTP, or ``console``; needs the ``otel`` extra): the SDK's
``TracingInterceptor`` (``temporalio.contrib.opentelemetry``) on the client, which every worker
built on that client inherits, and a span around each Neo4j transaction of the mirror
(``taskgraph.neo4j.graph.TaskGraph``, given ``Telemetry.tracer``). One trace runs from the client's
call through the workflow to the mirror's Neo4j transaction: ``StartUpdateWithStartWorkflow``
(``create_task``) -> ``RunWorkflow`` -> ``StartActivity:mirror_task`` ->
``RunActivity:mirror_task`` -> ``neo4j write_task``. A later write's client span
(``StartWorkflowUpdate:record_events``) is the link of its ``HandleUpdate`` span, which lives in
the task's trace; the mirror's span names the seq range it wrote (``agent_tasks.seq.*``).

We use the interceptor rather than the newer ``OpenTelemetryPlugin``: the plugin is marked
experimental and shows a workflow's spans only once the workflow completes, while a task's
workflow may stay open for days; the interceptor's spans appear at once.

**Metrics** (``otlp``: OTLP/HTTP, or ``prometheus``; no Python package needed): Temporal Core
exports the SDK's own metrics (``temporal_request``, ``temporal_workflow_task_*``,
``temporal_activity_*``, poller and slot gauges...) through the client's ``Runtime``, which
workers share. A process has one runtime per configuration (``setup`` caches it), since a
Prometheus endpoint binds its port once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote

from temporalio.client import Interceptor
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    OpenTelemetryConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

SERVICE_NAME = "agent-tasks"
"""``service.name`` of the traces when ``OTEL_SERVICE_NAME`` does not set one."""
TRACER_NAME = "durable-agent-tasks"
"""Instrumentation scope of this project's own spans (the interceptor's and Neo4j's)."""


CORE_LOGGER = "temporalio.core"
"""The Python logger the SDK's core (Rust) logs through in every runtime made here: its
warnings reach stderr (Python's last-resort handler) or wherever the process sends its logs,
never standard output, which is the CLI's output (``--json`` prints JSON only)."""


def core_logging() -> LoggingConfig:
    """The SDK's default log filter (core warnings, errors of the rest), forwarded to the
    Python logger ``CORE_LOGGER`` instead of the SDK's own console writer (standard output)."""
    return LoggingConfig(
        filter=LoggingConfig.default.filter,
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )


def log_core_through_python() -> None:
    """Make the process's default Temporal runtime log through ``core_logging`` (the CLI
    calls it first: a replay's nondeterminism warnings went to standard output before the
    JSON). Clients and workers made before keep the runtime they had."""
    runtime = Runtime(telemetry=TelemetryConfig(logging=core_logging()))
    Runtime.set_default(runtime, error_if_already_set=False)


CORE_LOG_BUFFER_S = 0.05
"""How long the core holds forwarded log records before it hands them to Python (the SDK's
``LogForwardingConfig``: "buffered for a few milliseconds"), with a margin."""


def drain_core_logs() -> None:
    """Wait ``CORE_LOG_BUFFER_S`` so that the core's buffered log records reach ``CORE_LOGGER``
    before a process leaves with ``os._exit`` (the CLI): a replay's nondeterminism warning is
    written to stderr, not lost."""
    time.sleep(CORE_LOG_BUFFER_S)


@dataclass(frozen=True)
class Exporters:
    """Which exporters to run and where they send (from ``config.Settings.telemetry``)."""

    traces: Literal["none", "otlp", "console"] = "none"
    """``none``, ``otlp`` (OTLP/HTTP) or ``console``."""
    metrics: Literal["none", "otlp", "prometheus"] = "none"
    """``none``, ``otlp`` (OTLP/HTTP) or ``prometheus``."""
    otlp_traces_url: str = "http://localhost:4318/v1/traces"
    """Full OTLP/HTTP traces URL."""
    otlp_metrics_url: str = "http://localhost:4318/v1/metrics"
    """Full OTLP/HTTP metrics URL."""
    otlp_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Headers sent with every OTLP export (may hold a token: never shown)."""
    prometheus_bind: str = "localhost:9464"
    """``host:port`` of the Prometheus ``/metrics`` endpoint."""


@dataclass(frozen=True)
class Telemetry:
    """What a client and the task graph get from ``setup``."""

    interceptors: Sequence[Interceptor] = ()
    """Client interceptors (the tracing interceptor when traces are on; workers inherit it)."""
    runtime: Runtime | None = None
    """The runtime exporting the SDK's metrics; None: the SDK's default runtime (no metrics)."""
    tracer: Tracer | None = None
    """Tracer of the Neo4j spans; None when traces are off."""


def parse_headers(text: str) -> tuple[tuple[str, str], ...]:
    """Parse ``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs separated by commas, values
    percent-decoded (the OpenTelemetry specification's format).

    Raises:
        ValueError: a pair without ``=`` (the message gives its position, never its text).
    """
    pairs = []
    for number, item in enumerate(filter(None, (p.strip() for p in text.split(","))), 1):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"OTEL_EXPORTER_OTLP_HEADERS: pair {number} has no '='")
        pairs.append((key.strip(), unquote(value.strip())))
    return tuple(pairs)


@functools.cache
def setup(exporters: Exporters) -> Telemetry:
    """Build (once per process and configuration) the interceptors, runtime and tracer that
    ``exporters`` names.

    With traces on, the tracer provider (``service.name`` from ``OTEL_SERVICE_NAME``, else
    ``SERVICE_NAME``) also becomes the global one unless the process already set one, so the
    app's own spans reach the same exporter.

    Raises:
        ValueError: traces asked for without the ``otel`` extra installed.
    """
    runtime = _runtime(exporters)
    if exporters.traces == "none":
        return Telemetry(runtime=runtime)
    tracer = _tracer(exporters)
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return Telemetry(interceptors=(TracingInterceptor(tracer),), runtime=runtime, tracer=tracer)


def _runtime(exporters: Exporters) -> Runtime | None:
    metrics: OpenTelemetryConfig | PrometheusConfig
    if exporters.metrics == "none":
        return None
    if exporters.metrics == "otlp":
        headers = dict(exporters.otlp_headers)
        metrics = OpenTelemetryConfig(url=exporters.otlp_metrics_url, headers=headers, http=True)
    else:
        metrics = PrometheusConfig(bind_address=exporters.prometheus_bind)
    return Runtime(telemetry=TelemetryConfig(metrics=metrics, logging=core_logging()))


def _tracer(exporters: Exporters) -> Tracer:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError as err:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER={exporters.traces} needs the otel extra "
            "(pip install 'durable-agent-tasks[otel]')"
        ) from err
    processor: SpanProcessor
    if exporters.traces == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(
            endpoint=exporters.otlp_traces_url, headers=dict(exporters.otlp_headers)
        )
        processor = BatchSpanProcessor(exporter)
    else:
        processor = SimpleSpanProcessor(ConsoleSpanExporter())
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    return provider.get_tracer(TRACER_NAME)
