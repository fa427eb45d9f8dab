"""``agent-tasks serve`` (the HTTP API) and ``agent-tasks keys ...`` (its API keys)."""

from __future__ import annotations

import getpass
import shlex
from typing import TYPE_CHECKING, Annotated

import typer

from agent_tasks.cli.agents import served_tools
from agent_tasks.cli.common import ImportOpt, command_group, console, invoked_as, run

if TYPE_CHECKING:
    from agent_tasks.server.apikeys import ApiKey

REVOKED_WORD_TRIES = 5
"""Attempts to publish a revocation on the broker (each bounded by
``broker.PUBLISH_TIMEOUT_S``) before ``keys revoke`` leaves it to the streams' checks."""

keys_app = command_group("API keys of the HTTP API, each scoped to one project.")
GRACEFUL_TIMEOUT_S = 10
"""``serve``'s ``--graceful-timeout`` unless told (``server.GRACEFUL_TIMEOUT_S``, spelled here
so that its help loads no server; a test holds the two equal)."""


def serve_command(
    host: Annotated[str | None, typer.Option(help="Default AGENT_TASKS_HTTP_HOST.")] = None,
    port: Annotated[int | None, typer.Option(help="Default AGENT_TASKS_HTTP_PORT.")] = None,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--with-worker",
            help="Run a worker in the same process (as `worker`: the demo, and the agents and "
            "tools of the --import modules).",
        ),
    ] = False,
    modules: ImportOpt = None,
    graceful_timeout: Annotated[
        int,
        typer.Option(
            help="Seconds a shutdown waits for requests in flight (open streams end at once)."
        ),
    ] = GRACEFUL_TIMEOUT_S,
) -> None:
    """Serve the HTTP API (uvicorn) until Ctrl-C or SIGTERM; docs at /docs, schema at
    /openapi.json."""
    if modules and not with_worker:
        raise typer.BadParameter(
            "the modules of the worker that --with-worker runs: add --with-worker",
            param_hint="--import",
        )
    tools = served_tools(modules)
    from agent_tasks.server import serve

    run(
        serve(
            host=host,
            port=port,
            with_worker=with_worker,
            graceful_timeout_s=graceful_timeout,
            tools=tools,
            command=invoked_as(),
        )
    )


def page_command(
    project: Annotated[
        str, typer.Option(help="The project whose key signs in (named in the hint).")
    ] = "default",
) -> None:
    """Print the page's address (``AGENT_TASKS_HTTP_HOST``:``AGENT_TASKS_HTTP_PORT``/ui/),
    whether it is served there now, and the command that makes a key of PROJECT to sign in
    with; exit 0 either way."""
    import urllib.request

    from agent_tasks.config import Settings

    settings = Settings()
    host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "::") else settings.http_host
    base = f"http://{host}:{settings.http_port}"
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
            served = answer.status == 200
    except OSError:  # refused, timed out, or an HTTP error (URLError, HTTPError)
        served = False
    command = invoked_as()
    state = "served" if served else f"not served now: {command} serve --with-worker"
    keys = f"{command} keys create --project {shlex.quote(project)} --name page"
    print(f"The page: {base}/ui/ ({state}; sign in with a key of {keys})")


def _row(key: ApiKey) -> str:
    revoked = f"  revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else ""
    made = f"{key.created_at:%Y-%m-%d %H:%M}"
    return f"{key.key_id}  {key.project_id}  {key.name}  held by {key.author}  {made}{revoked}"


def _login() -> str | None:
    """The login name of whoever runs the command, None when the system has none (a
    container's user without a passwd entry: the key is then its own person)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None


@keys_app.command("create")
def keys_create(
    project: Annotated[str, typer.Option(help="The one project the key reads and writes.")],
    name: Annotated[str, typer.Option(help="What the key is for.")] = "",
    person: Annotated[
        str | None,
        typer.Option(
            help="Who holds the key: the author of its writes and one approver however many "
            "keys they hold. Default: the login name of whoever runs this command (none: the "
            "key is its own person)."
        ),
    ] = None,
) -> None:
    """Make an API key for PROJECT held by PERSON and print it once (only its SHA-256 is
    stored). Keys of one person count as one approver of a call that needs several."""
    from agent_tasks.config import Settings
    from agent_tasks.server.apikeys import ApiKeyStore
    from agent_tasks.worker import open_graph

    holder = person if person is not None else _login()

    async def go() -> tuple[ApiKey, str]:
        async with open_graph(Settings()) as graph:
            store = ApiKeyStore(graph)
            await store.init_schema()
            return await store.create(project, name, holder)

    record, key = run(go())
    console.print(
        f"key id {record.key_id} for project {record.project_id}, held by {record.author!r}; "
        "the key (shown once):"
    )
    print(key, flush=True)


@keys_app.command("list")
def keys_list(project: Annotated[str, typer.Option(help="The project.")]) -> None:
    """The project's keys (ids, persons, names, dates; never the keys)."""
    from agent_tasks.config import Settings
    from agent_tasks.server.apikeys import ApiKeyStore
    from agent_tasks.worker import open_graph

    async def go() -> list[ApiKey]:
        async with open_graph(Settings()) as graph:
            return await ApiKeyStore(graph).list(project)

    for record in run(go()):
        print(_row(record))


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id.")]) -> None:
    """Revoke a key: refused (401) from the next request on, and its open streams end (at
    once on the broker's word, else within the streams' check interval: a warning says so).
    Exit 1 when there is no such key."""
    from agent_tasks.broker import Broker, RevokedMessage, key_channel
    from agent_tasks.config import Settings
    from agent_tasks.server.apikeys import ApiKeyStore
    from agent_tasks.server.grants import GRANT_CHECK_S
    from agent_tasks.worker import open_graph

    async def go() -> tuple[ApiKey | None, bool]:
        settings = Settings()
        async with open_graph(settings) as graph:
            record = await ApiKeyStore(graph).revoke(key_id)
        if record is None or not settings.broker_url:
            return record, record is not None
        broker = Broker(settings.broker_url)
        try:
            for _ in range(REVOKED_WORD_TRIES):
                if await broker.publish([key_channel(key_id)], RevokedMessage(key_id=key_id)):
                    return record, True
            return record, False
        finally:
            await broker.close()

    record, said = run(go())
    if record is None:
        console.print(f"[red]no key {key_id}[/red]")
        raise typer.Exit(1)
    if not said:
        console.print(
            f"[yellow]the broker did not take the word: open streams of the key end within "
            f"{GRANT_CHECK_S:g} s, before any event written from now on[/yellow]"
        )
    print(_row(record))
