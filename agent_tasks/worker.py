"""The worker and the one bootstrap of the project.

``open_services`` connects to Temporal and opens the Neo4j task graph; ``build_worker`` makes
the worker of ``TaskWorkflow`` and its activities (``AgentTasksWorkerPlugin``, which an app's
own ``Worker`` takes too). The CLI, the tests, the benchmarks and ``run_worker`` all start from
these.

``python worker.py`` and ``agent-tasks worker`` run a worker with the settings from the
environment (``config.Settings``) until SIGINT or SIGTERM, then stop cleanly: the worker stops
polling, lets running activities finish (``graceful_shutdown_timeout``), and closes the driver.

``prepare_namespace`` (``agent-tasks setup``, the compose files' one-shot ``setup`` service)
readies a Temporal server for the tasks: the namespace with its retention and the custom search
attributes of ``TaskWorkflow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.namespace.v1 import NamespaceConfig
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    RegisterNamespaceRequest,
    UpdateNamespaceRequest,
)
from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker, WorkerConfig

from agent_tasks import telemetry
from agent_tasks.activities.branch import BranchActivities
from agent_tasks.activities.children import ChildActivities
from agent_tasks.activities.files import file_tools, files_demo
from agent_tasks.activities.mcp import McpActivities
from agent_tasks.activities.mirror import MirrorActivities
from agent_tasks.activities.model import ModelActivities, Script
from agent_tasks.activities.refusals import RefusalRetries
from agent_tasks.activities.tools import Tool, ToolActivities
from agent_tasks.broker import Broker, open_broker
from agent_tasks.codec import ZlibCodec
from agent_tasks.config import Settings, connect, release_runtime
from agent_tasks.contract.errors import GraphError
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS
from agent_tasks.plugin import PLUGIN_NAME, sandbox_passthrough
from agent_tasks.taskgraph import store
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.workflows.task import TaskWorkflow

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

SCHEMA_TIMEOUT_S = 120.0
"""How long ``open_services`` waits for the graph store to create the schema and warm up
(``GraphStore.ensure_ready``, seconds): on a fresh Neo4j each constraint waits for its index to
come online, processes starting at once wait for each other's schema locks
(``taskgraph.neo4j.schema.init_schema``), and a cold server plans the mirror's statements
slowly; each of its transactions is bounded on its own (``NEO4J_CALL_TIMEOUT_S``)."""
DEFAULT_RETENTION = timedelta(days=30)
"""Retention of closed tasks' histories that ``prepare_namespace`` sets by default: a finished
task stays readable (``get_task``, replay, ``graph rebuild``) this long. The server's default
(one day) would let a rebuild of Neo4j lose yesterday's tasks."""
GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""How long a stopping worker lets running activities (mirror calls, tools) finish."""
DEFAULT_ACTIVITY_SLOTS = 100
"""The activity slots of a worker that does not set ``max_concurrent_activities`` (the SDK's
default). Half of a worker's slots may hold mirror calls that follow their run
(``MirrorActivities``'s ``followers``); the rest stay for tools and the model."""
NAMESPACE_READY_TIMEOUT_S = 60.0
"""How long ``prepare_namespace`` waits for a new namespace to answer (seconds): a cluster
propagates a registration through its namespace cache (10 s by default)."""


@dataclass(frozen=True)
class Services:
    """What the project runs on: the settings, a Temporal client with the pydantic data
    converter, the Neo4j task graph (None when not asked for), and the broker of tokens (None
    when ``AGENT_TASKS_BROKER_URL`` is empty; it connects on first use)."""

    settings: Settings
    client: Client
    graph: GraphStore | None
    broker: Broker | None = None


def build_graph_store(
    kind_or_uri: str | None = None,
    *,
    settings: Settings | None = None,
    tracer: Tracer | None = None,
) -> GraphStore:
    """The graph store the ledger's guide builds (``taskgraph.store.build_graph_store``), not
    connected yet: ``await store.connect()``, then ``await store.close()``.

    Args:
        kind_or_uri: ``"neo4j"``, ``"falkordb"``, a URI (``bolt://``, ``neo4j+s://``,
            ``falkor://``, ``redis://``...), or None: ``AGENT_TASKS_GRAPH``.
        settings: the rest (credentials, database, graph); from the environment when None.
        tracer: an OpenTelemetry tracer for the mirror's write spans.

    Raises:
        ValueError: an unknown kind or scheme.
        Neo4jPasswordMissing: Neo4j chosen, and no password set or generated.
    """
    return store.build_graph_store(kind_or_uri, settings or Settings(), tracer=tracer)


@asynccontextmanager
async def open_graph(settings: Settings, *, schema: bool = False) -> AsyncIterator[GraphStore]:
    """Open the graph store of ``settings`` (``taskgraph.store.build_graph_store``: Neo4j or
    FalkorDB, ``AGENT_TASKS_GRAPH``); close it on exit.

    Args:
        settings: which store and where (``NEO4J_*`` or ``AGENT_TASKS_FALKORDB_*``) and
            whether its writes are traced (``OTEL_TRACES_EXPORTER``).
        schema: create the schema first (idempotent), waiting at most ``SCHEMA_TIMEOUT_S``.

    Raises:
        Neo4jPasswordMissing: Neo4j chosen, and no Neo4j password is set or generated.
        ValueError: traces asked for without the ``otel`` extra.
        contract.errors.GraphError, TimeoutError: ``schema`` was asked and the store
            refused or did not answer.
    """
    tracer = telemetry.setup(settings.exporters()).tracer
    graph = store.build_graph_store(None, settings, tracer=tracer)
    try:
        if schema:
            await asyncio.wait_for(graph.ensure_ready(), SCHEMA_TIMEOUT_S)
        yield graph
    finally:
        await graph.close()


@asynccontextmanager
async def open_services(
    settings: Settings | None = None,
    *,
    client: Client | None = None,
    with_graph: bool = True,
    schema: bool = False,
) -> AsyncIterator[Services]:
    """Connect to Temporal (unless ``client`` is given), open the Neo4j task graph
    (``open_graph``, unless ``with_graph`` is False) and the broker (``Services.broker``); on
    exit close them and wait for
    the Temporal SDK's runtime threads to leave Python (``config.release_runtime``), so a
    process may end right after.

    Args:
        settings: where to connect; from the environment when None.
        client: an existing client to use (for example a test server's).
        with_graph: open the Neo4j task graph (credentials needed: ``Settings.neo4j_auth``).
        schema: create the Neo4j schema first (``open_graph``).

    Raises:
        TaskServiceUnavailable: Temporal cannot be reached.
        RuntimeError, contract.errors.GraphError, TimeoutError: as ``open_graph``.
    """
    settings = settings or Settings()
    client = client or await connect(settings)
    try:
        async with open_broker(settings.broker_url) as broker:
            if not with_graph:
                yield Services(settings, client, None, broker)
                return
            async with open_graph(settings, schema=schema) as graph:
                yield Services(settings, client, graph, broker)
    finally:
        await release_runtime()


async def prepare_namespace(client: Client, retention: timedelta = DEFAULT_RETENTION) -> list[str]:
    """Ready ``client.namespace`` for task workflows; idempotent. Registers the namespace when
    missing, sets its retention when it differs, and adds the custom search attributes of
    ``SEARCH_ATTRIBUTE_KEYS`` that are missing (Keyword).

    On Temporal Cloud namespaces and search attributes are managed with ``tcld`` or the Cloud
    console; create them there first, and this call then changes nothing (or is refused).
    Each call of the service is retried as the SDK's own calls are (``retry=True``), so a
    call sent as its connection is recycled (a GOAWAY) does not fail the worker's start.
    Processes preparing one namespace at once (``agent-tasks setup`` beside ``dev up``, two
    workers' first starts) all succeed: what another registered or added meanwhile
    (``ALREADY_EXISTS``) is taken as done once it reads back as wanted.

    Args:
        client: a client of the namespace to prepare (``config.connect``).
        retention: how long closed workflows' histories are kept (the server's minimum is a
            day).

    Returns:
        what was changed, one line each (empty when nothing was).

    Raises:
        ValueError: a search attribute exists with another type (the message names it).
        temporalio.service.RPCError: the server refused (for example PERMISSION_DENIED).
        TimeoutError: a new namespace did not answer within ``NAMESPACE_READY_TIMEOUT_S``.
    """
    done = await _register(client, retention)
    async with asyncio.timeout(NAMESPACE_READY_TIMEOUT_S):
        while True:
            try:
                listed = await _search_attributes(client)
                break
            except RPCError as err:  # a new namespace is not in every cache yet
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                await asyncio.sleep(0.5)
    if not done:
        done += await _set_retention(client, retention)
    missing = _missing(client.namespace, listed)
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing),
                retry=True,
            )
        except RPCError as err:  # another process added them meanwhile?
            if err.status != RPCStatusCode.ALREADY_EXISTS or _missing(
                client.namespace, await _search_attributes(client)
            ):
                raise
        else:
            done.append(f"search attributes added: {', '.join(sorted(missing))} (Keyword)")
    return done


def _ttl(span: timedelta) -> Duration:
    ttl = Duration()
    ttl.FromTimedelta(span)
    return ttl


async def _register(client: Client, retention: timedelta) -> list[str]:
    """Register ``client.namespace`` when it is missing; returns what was changed (nothing when
    it existed, or another process registered it meanwhile)."""
    namespace = client.namespace
    service = client.workflow_service
    try:
        await service.describe_namespace(DescribeNamespaceRequest(namespace=namespace), retry=True)
        return []
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    register = RegisterNamespaceRequest(
        namespace=namespace, workflow_execution_retention_period=_ttl(retention)
    )
    try:
        await service.register_namespace(register, retry=True)
    except RPCError as raced:  # another process registered it meanwhile
        if raced.status != RPCStatusCode.ALREADY_EXISTS:
            raise
        return []
    return [f"namespace {namespace!r} registered, retention {_days(retention)}"]


async def _set_retention(client: Client, retention: timedelta) -> list[str]:
    """Set the namespace's retention when it differs; returns what was changed."""
    namespace = client.namespace
    service = client.workflow_service
    described = await service.describe_namespace(
        DescribeNamespaceRequest(namespace=namespace), retry=True
    )
    current = described.config.workflow_execution_retention_ttl.ToTimedelta()
    if current == retention:
        return []
    config = NamespaceConfig(workflow_execution_retention_ttl=_ttl(retention))
    await service.update_namespace(
        UpdateNamespaceRequest(namespace=namespace, config=config), retry=True
    )
    return [f"namespace {namespace!r} retention {_days(current)} -> {_days(retention)}"]


async def _search_attributes(client: Client) -> dict[str, IndexedValueType.ValueType]:
    """The namespace's custom search attributes and their types."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace), retry=True
    )
    return dict(listed.custom_attributes)


def _missing(
    namespace: str, listed: Mapping[str, IndexedValueType.ValueType]
) -> dict[str, IndexedValueType.ValueType]:
    """The search attributes of ``SEARCH_ATTRIBUTE_KEYS`` that ``listed`` lacks, with their
    types.

    Raises:
        ValueError: one exists with another type (the message names it).
    """
    missing: dict[str, IndexedValueType.ValueType] = {}
    for key in SEARCH_ATTRIBUTE_KEYS:
        wanted = IndexedValueType.ValueType(int(key.indexed_value_type))
        have = listed.get(key.name)
        if have is None:
            missing[key.name] = wanted
        elif have != wanted:
            raise ValueError(
                f"search attribute {key.name} of namespace {namespace!r} has type "
                f"{IndexedValueType.Name(have)}, TaskWorkflow needs {IndexedValueType.Name(wanted)}"
            )
    return missing


def _days(span: timedelta) -> str:
    return f"{span / timedelta(days=1):g} days"


DEMO_SCRIPTS: dict[str, Script] = {"files-demo": files_demo}
"""The scripted models every worker has (``ModelSpec(provider="scripted", model=...)``)."""


HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""Longest wait of the worker before it sends an activity's heartbeat to the server (the SDK
holds them back, by default up to 30 s without a heartbeat timeout and 60 s with one). A cancel
reaches an activity only in the answer to a heartbeat, so this bounds how long a cancelled
model call or tool goes on (``activities.heartbeat.CANCEL_BEAT_S``)."""


class AgentTasksWorkerPlugin(SimplePlugin):
    """The worker plugin: ``TaskWorkflow``, its sandbox passthroughs
    (``plugin.sandbox_passthrough``) and its activities (the mirror, the model call, the
    agent tasks' tools, the read of a recorded result, a resumed parent's look at its
    children, a branch's copy of its source), on a worker whose client carries the
    product's data converter (``plugin.AgentTasksPlugin`` or ``config.connect``); its
    workflow tasks apply each activation's jobs as one batch (``apply_jobs_as_one_batch``).
    A deployment may run workflows and activities on separate workers (a fleet of activity
    workers for heavy tools, say): ``activities=False`` polls workflow tasks only,
    ``workflows=False`` activity tasks only, both on the same task queue::

        Worker(client, task_queue="agent-tasks", plugins=[AgentTasksWorkerPlugin(graph)])

    Args:
        graph: the Neo4j task graph the mirror writes to (it creates the schema before its
            first write if nobody did).
        tools: the tools this worker runs (``activities.tools.tool``); default: the demo's
            read-only file tools over the current folder.
        scripts: the scripted models by name, besides ``DEMO_SCRIPTS``.
        workflows: run ``TaskWorkflow`` (poll workflow tasks).
        activities: run the activities (poll activity tasks).
        broker: where model tokens and the mirror's word of new events go (``broker``; None:
            nowhere, and streams find new events by reading the tasks).
        mcp_headers: HTTP header sets by name for MCP servers (``McpServer.headers``: an
            agent's spec names a set, never its values).

    Raises:
        ValueError: neither ``workflows`` nor ``activities``.

    Raises (when the worker is built):
        ValueError: the worker's client lacks the payload codec (the SDK gives a worker its
            client's data converter, which a worker plugin cannot change).
    """

    def __init__(
        self,
        graph: GraphStore,
        *,
        tools: Sequence[Tool] | None = None,
        scripts: Mapping[str, Script] | None = None,
        workflows: bool = True,
        activities: bool = True,
        broker: Broker | None = None,
        mcp_headers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        if not (workflows or activities):
            raise ValueError("a worker polls workflows, activities or both")
        super().__init__(
            f"{PLUGIN_NAME}.worker",
            workflows=[TaskWorkflow] if workflows else [],
            workflow_runner=sandbox_passthrough,
        )
        self.run_workflows, self.run_activities = workflows, activities
        self.graph = graph
        self.broker = broker
        self.tools = file_tools(Path.cwd()) if tools is None else list(tools)
        self.scripts = {**DEMO_SCRIPTS, **(scripts or {})}
        self.mcp_headers = mcp_headers
        self.mcp: McpActivities | None = None
        """The worker's MCP activities (set when its activities are configured)."""
        self.mirror: MirrorActivities | None = None
        """The worker's mirror activity (set when its activities are configured)."""

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the workflow, the runner's passthroughs and the activities, built for the
        worker's client; send heartbeats at least every ``HEARTBEAT_THROTTLE`` (a worker
        configured to send them sooner keeps its own)."""
        client = config["client"]
        if not isinstance(client.data_converter.payload_codec, ZlibCodec):
            raise ValueError(
                "the worker's client lacks the product's data converter: connect it with "
                "plugins=[AgentTasksPlugin()] (or config.connect)"
            )
        default = config.get("default_heartbeat_throttle_interval") or HEARTBEAT_THROTTLE
        config["default_heartbeat_throttle_interval"] = min(default, HEARTBEAT_THROTTLE)
        longest = config.get("max_heartbeat_throttle_interval") or HEARTBEAT_THROTTLE
        config["max_heartbeat_throttle_interval"] = min(longest, HEARTBEAT_THROTTLE)
        if self.run_activities:
            slots = config.get("max_concurrent_activities") or DEFAULT_ACTIVITY_SLOTS
            followers = max(1, slots // 2)
            mirror = MirrorActivities(client, self.graph, self.broker, followers=followers)
            self.mirror = mirror
            steps = ToolActivities(client, self.graph, self.tools)
            specs = [t.spec for t in steps.tools]
            model = ModelActivities(client, self.graph, self.scripts, specs, self.broker)
            children = ChildActivities(client)
            branch = BranchActivities(client, self.graph)
            mine: list[Callable[..., Any]] = [mirror.mirror_task, model.model_turn]
            mine += [children.child_ends, branch.branch_events, branch.branch_reuse]
            mine += steps.activities()
            self.mcp = McpActivities(steps.arguments, self.mcp_headers)
            mine += self.mcp.activities()
            config["activities"] = [*config.get("activities", ()), *mine]
        return super().configure_worker(config)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run ``worker`` with its workflow tasks applying each activation as one batch; a
        worker of activities listens for its followed runs' published pages
        (``MirrorActivities.listening``), retries the tasks whose mirror the graph store
        refused (``RefusalRetries.running``) and runs beside it a worker on its own stateful
        MCP sessions' task queue (``McpActivities.session_queue``), closing the sessions it
        holds when it stops."""
        if self.run_workflows:
            apply_jobs_as_one_batch(worker)
        listening = self.mirror.listening() if self.mirror else contextlib.nullcontext()
        retrying: contextlib.AbstractAsyncContextManager[None] = contextlib.nullcontext()
        if self.run_activities:
            retrying = RefusalRetries(worker.client, self.graph).running()
        async with listening, retrying:
            await self._run_with_sessions(worker, next)

    async def _run_with_sessions(
        self, worker: Worker, next: Callable[[Worker], Awaitable[None]]
    ) -> None:
        if self.mcp is None:
            await next(worker)
            return
        sessions = Worker(
            worker.client,
            task_queue=self.mcp.session_queue,
            activities=self.mcp.session_activities(),
            graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
            default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        )
        try:
            async with sessions:
                await next(worker)
        finally:
            await self.mcp.close_sessions()


def build_worker(
    client: Client,
    graph: GraphStore,
    task_queue: str,
    *,
    tools: Sequence[Tool] | None = None,
    scripts: Mapping[str, Script] | None = None,
    workflows: bool = True,
    activities: bool = True,
    broker: Broker | None = None,
    mcp_headers: Mapping[str, Mapping[str, str]] | None = None,
) -> Worker:
    """A worker for ``TaskWorkflow`` and its activities on ``task_queue``
    (``AgentTasksWorkerPlugin`` with ``graph``, ``tools``, ``scripts``, ``workflows`` and
    ``activities``), stopping within ``GRACEFUL_SHUTDOWN`` of a shutdown (running mirror
    calls finish).

    Args:
        client: a connected client with the product's data converter (``config.connect``).
        graph, tools, scripts, workflows, activities, mcp_headers: as
            ``AgentTasksWorkerPlugin``.
        task_queue: the task queue to poll.
        broker: where model tokens and the mirror's word of new events go (``broker``; None:
            nowhere, and streams find new events by reading the tasks).
    """
    plugin = AgentTasksWorkerPlugin(
        graph,
        tools=tools,
        scripts=scripts,
        workflows=workflows,
        activities=activities,
        broker=broker,
        mcp_headers=mcp_headers,
    )
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
    )


def apply_jobs_as_one_batch(worker: Worker) -> None:
    """Make ``worker`` apply every job of a workflow activation (signals, updates, activity
    and timer results, a cancel request) before any workflow code goes on: the SDK's logic
    flag ``PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH``, which temporalio ships off by
    default until more SDK releases know it. Without it the SDK runs workflow code between the
    signals of an activation and the rest: an answer and the end of a running step that came
    in one workflow task woke the agent's ``ask`` before the step's result was recorded, and
    agent code saw the step still in progress. The flag is recorded in each workflow task it
    is used in, so histories from before replay as they ran (and the ``Replayer`` needs
    nothing). The SDK exposes the switch on ``Worker`` only privately; a later SDK that drops
    it (having made it the default, or renamed it) makes this raise, so an upgrade is noticed.

    Raises:
        RuntimeError: the SDK has no such flag or switch.
    """
    from temporalio.worker import _workflow_instance  # the flag's enum lives here only

    flag = getattr(
        _workflow_instance._WorkflowLogicFlag,
        "PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH",
        None,
    )
    switch = getattr(worker, "_set_default_workflow_logic_flag", None)
    if flag is None or switch is None:
        raise RuntimeError(
            "this temporalio has no single-batch activation flag: check its release notes "
            "(worker.py, apply_jobs_as_one_batch)"
        )
    switch(flag, enabled=True)


def with_file_tools(root: Path, tools: Sequence[Tool] = ()) -> list[Tool]:
    """``tools``, then the demo agent's file tools over ``root`` (``activities.files``) whose
    names none of ``tools`` takes: what a worker of the demo and an app's own agents runs."""
    taken = {tool.spec.name for tool in tools}
    return [*tools, *(tool for tool in file_tools(root) if tool.spec.name not in taken)]


async def run_worker(settings: Settings | None = None, *, tools: Sequence[Tool] = ()) -> None:
    """Run a worker until SIGINT or SIGTERM, with ``tools`` and the demo's file tools over
    ``AGENT_TASKS_FILES_ROOT`` (``with_file_tools``). Creates the Neo4j schema (idempotent)
    when Neo4j answers; when it does not, the worker starts anyway (writes are accepted during
    an outage) and the mirror creates the schema before its first write.

    Raises:
        TaskServiceUnavailable: Temporal cannot be reached.
        Neo4jPasswordMissing: no Neo4j password is set or generated (``Settings.neo4j_auth``).
        ValueError: ``AGENT_TASKS_MCP_HEADERS`` cannot be read (``Settings.mcp_header_sets``).
    """
    settings = settings or Settings()
    mcp_headers = settings.mcp_header_sets()  # a bad value stops the worker before it connects
    async with open_services(settings) as services:
        assert services.graph is not None
        try:
            await asyncio.wait_for(services.graph.ensure_ready(), SCHEMA_TIMEOUT_S)
        except (TimeoutError, GraphError) as err:
            print(f"graph schema not created yet ({err!r}); the mirror will create it", flush=True)
        queue = services.settings.temporal_task_queue
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with build_worker(
            services.client,
            services.graph,
            queue,
            tools=with_file_tools(services.settings.files_root, tools),
            broker=services.broker,
            mcp_headers=mcp_headers,
        ):
            print(f"worker polling task queue {queue!r}", flush=True)
            await stop.wait()
        print("worker stopped", flush=True)


def main() -> None:
    """Entry point of ``python worker.py``."""
    asyncio.run(run_worker())


if __name__ == "__main__":
    main()
