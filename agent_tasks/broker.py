"""The broker of ephemeral messages: model tokens, and the word that a task has new events.

Redis pub/sub (what the published Tasks API's own system uses), through the ``redis``
package's asyncio client, at ``AGENT_TASKS_BROKER_URL`` (``agent-tasks dev up`` starts a
``redis-server`` there). Nothing here is durable, and nothing is meant to be:

- **Tokens** (``TokenMessage``) are what a model streams while it answers: the model activity
  (``activities.tokens``) and ``starter.tasks.TaskEmitter.emit_token`` publish them, the HTTP
  API's streams forward them as SSE ``token`` events. They never enter a workflow history or
  Neo4j: the turn the model returns is recorded whole, as one event, when the call ends. A
  stream that was away misses them.
- **Written** (``WrittenMessage``) says that a task's log grew (the mirror activity publishes
  it for every mirror call, with the newest seq). It carries no event: a stream wakes on it and
  reads the new events from the task itself (``ConversationHistory.list_events``), so a missed
  or late word delays an ``update`` event and never loses one (streams also read the task every
  ``STREAM_POLL_S`` without a word).

- **Pages** (``PageMessage``) are the app's own record of a ``record_events`` write that
  Temporal accepted: its input as sent and the update's result (``PublishedWrite``), on the
  task's mirror channel (``page_channel``), which only the worker whose mirror follows the
  task's run listens to (``activities.follow``). It spares the mirror the long poll of the
  history that would otherwise bring the write. A page is signed (HMAC-SHA256) with a key of
  the writer's key tree (``sealing.keytree.PAGE_LEAF``), which the worker reads from the key
  store: a page signed otherwise, or not following what the mirror holds, is dropped, and the
  mirror's next poll of the history brings the write instead. So a lost, late, repeated or
  forged page delays the mirror and never changes what it writes. A writer's other writes
  (steps, a status, an answer) send a ``PollMessage`` there instead: the follower polls now.

Channels (``channels``): ``agent-tasks:task:{workflow id}`` for one task, and
``agent-tasks:session:{project id}:{session id}`` for every task of a session;
``agent-tasks:project:{project id}`` (``project_channel``) carries the ``written`` words of
every task of a project, for its inbox, and no tokens; ``agent-tasks:key:{key id}``
(``key_channel``) carries a key's revocation and its page sessions' sign-outs
(``RevokedMessage``), which end the HTTP API's open streams of them. A message is JSON, one of
the models below. Redis drops a subscriber that reads too slowly (its output
buffer limit for pub/sub clients), never slowing a publisher.

The ``redis`` package is imported when a ``Broker`` is made, not with this module (it loads
OpenTelemetry's API when that is installed). Publishing never fails its caller: a broker that
does not answer within ``PUBLISH_TIMEOUT_S`` is logged (at most once a minute) and the message
dropped, so a broker outage costs the tokens and the wake-ups, not a model call or a mirror
write.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agent_tasks.contract import RecordEventsInput, WriteOutcome, project_of

if TYPE_CHECKING:  # imported when a broker is used: the package loads OpenTelemetry's API
    from redis.asyncio import Redis

PUBLISH_TIMEOUT_S = 0.5
"""How long one publish may take (seconds) before the message is dropped."""
RECONNECT_PAUSE_S = 1.0
"""Pause of the subscriber between attempts to reach a broker that went away (seconds)."""
_WARN_EVERY_S = 60.0

log = logging.getLogger(__name__)


class TokenMessage(BaseModel):
    """A model token (or any short text an agent streams) of one task."""

    type: Literal["token"] = "token"
    task: str
    """The task's name."""
    text: str
    """The token's text."""
    index: int = Field(ge=0)
    """Its place in its stream (0, 1, 2 ... per model call)."""
    after_seq: int | None = None
    """The seq of the last event the model saw: the token comes after that event and before
    the next in a stream. None: where it arrives."""
    attempt: int = Field(default=1, ge=1)
    """The attempt of the model call the token belongs to (the activity's attempt number: 1,
    2 ...; ``index`` starts at 0 in each). A token of a later attempt than the ones a reader
    holds means the earlier attempt failed and its turn was never recorded: drop its tokens.
    Added later: 1 where a message has none."""


class WrittenMessage(BaseModel):
    """A task's log has events up to ``seq`` (a wake-up: the events are read from the task)."""

    type: Literal["written"] = "written"
    task: str
    """The task's name."""
    seq: int = Field(ge=0)
    """Its newest seq."""
    status: str
    """Its status then (a hint: streams read it from the task)."""


class RevokedMessage(BaseModel):
    """A key was revoked (``session`` None) or one page session of it ended (signed out): the
    HTTP API's open streams of it end (``server.grants``)."""

    type: Literal["revoked"] = "revoked"
    key_id: str
    """The key's id."""
    session: str | None = None
    """The ended page session's digest (``server.apikeys.digest`` of its token); None: the
    key itself, and every session of it."""


class PublishedWrite(BaseModel):
    """A ``record_events`` write Temporal accepted, as its writer knows it: what a
    ``PageMessage`` carries."""

    workflow_id: str
    """The task's workflow id."""
    run_id: str
    """The run that took the write."""
    input: RecordEventsInput
    """The update's input as sent (its event text sealed)."""
    outcome: WriteOutcome
    """The update's result (its seqs, workflow time and write counter)."""


class PageMessage(BaseModel):
    """A signed ``PublishedWrite`` (``sign_page``, ``open_page``)."""

    type: Literal["page"] = "page"
    key_id: str
    """The signing key's id (``sealing.keytree.PAGE_LEAF`` of the writer's key tree)."""
    body: str
    """The ``PublishedWrite`` as JSON: the signed bytes."""
    mac: str
    """HMAC-SHA256 of ``body`` under the key, in hex."""


class PollMessage(BaseModel):
    """On a task's mirror channel: the run took a write no page carries (a step, a status, an
    answer), so its follower polls the history now rather than at its gap
    (``activities.follow``). Not signed: a forged one costs a poll, at the follower's cadence
    at most."""

    type: Literal["poll"] = "poll"


def sign_page(write: PublishedWrite, key_id: str, key: bytes) -> PageMessage:
    """``write`` signed with ``key`` (named ``key_id``)."""
    body = write.model_dump_json()
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    return PageMessage(key_id=key_id, body=body, mac=mac)


def open_page(message: PageMessage, key: bytes | None) -> PublishedWrite | None:
    """The write ``message`` carries when ``key`` (its ``key_id``'s key; None: unknown or
    destroyed) signed it; None otherwise, or when its body is no ``PublishedWrite``."""
    if key is None:
        return None
    mac = hmac.new(key, message.body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, message.mac):
        return None
    try:
        return PublishedWrite.model_validate_json(message.body)
    except ValidationError:
        return None


Message = TokenMessage | WrittenMessage | RevokedMessage | PageMessage | PollMessage
BrokerMessage = Annotated[Message, Field(discriminator="type")]
"""What travels on a channel."""
_MESSAGE: TypeAdapter[Message] = TypeAdapter(BrokerMessage)


def task_channel(workflow_id: str) -> str:
    """The channel of one task (by its workflow id)."""
    return f"agent-tasks:task:{workflow_id}"


def session_channel(project_id: str, session_id: str) -> str:
    """The channel of every task of one session of a project."""
    return f"agent-tasks:session:{project_id}:{session_id}"


def project_channel(project_id: str) -> str:
    """The channel of every task of one project: the mirror's ``written`` words only (what the
    inbox of a project follows), never tokens."""
    return f"agent-tasks:project:{project_id}"


def page_channel(workflow_id: str) -> str:
    """The channel of one task's published pages (``PageMessage``), for its mirror only."""
    return f"agent-tasks:pages:{workflow_id}"


def key_channel(key_id: str) -> str:
    """The channel of one API key of the HTTP API: its revocation and its sessions' ends."""
    return f"agent-tasks:key:{key_id}"


def channels(workflow_id: str, session_id: str | None) -> list[str]:
    """Where a task's messages go: its own channel and, with a session, the session's."""
    found = [task_channel(workflow_id)]
    if session_id is not None:
        found.append(session_channel(project_of(workflow_id), session_id))
    return found


class Broker:
    """A connection pool to the broker (``redis.asyncio.Redis``), for publishing and for one
    ``Subscriber`` per process.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS); see the ``redis`` package.
    """

    def __init__(self, url: str) -> None:
        from redis.asyncio import Redis

        self.redis: Redis = Redis.from_url(
            url, socket_connect_timeout=PUBLISH_TIMEOUT_S, health_check_interval=0
        )
        self._warned_at = -_WARN_EVERY_S
        self._failed_at = -RECONNECT_PAUSE_S

    async def close(self) -> None:
        """Close the connections."""
        await self.redis.aclose()

    async def publish(self, targets: Sequence[str], message: Message) -> bool:
        """Publish ``message`` on every channel of ``targets`` in one round trip; True when
        the broker took it, False when it was dropped (logged, at most once a minute). For
        ``RECONNECT_PAUSE_S`` after a publish failed, messages are dropped without trying, so
        that a broker that hangs holds a publisher once a pause, not once a message."""
        from redis.exceptions import RedisError

        if time.monotonic() - self._failed_at < RECONNECT_PAUSE_S:
            return False

        data = message.model_dump_json()
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                async with self.redis.pipeline(transaction=False) as pipe:
                    for channel in targets:
                        pipe.publish(channel, data)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError) as err:
            now = self._failed_at = time.monotonic()
            if now - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = now
                log.warning("broker unavailable, messages dropped: %s", err)
            return False
        return True


Handler = Callable[[Message], None]
"""Takes a message on the subscriber's task; must not block (it queues and returns)."""


class Subscriber:
    """One pub/sub connection shared by every stream of a process: channels are subscribed
    while some handler wants them. The connection is read by one task (``run``), which also
    sends the subscribe and unsubscribe commands, so no two coroutines use it at once.

    Args:
        broker: the broker to subscribe to.
        poll_s: how long a read waits for a message before the task looks at its queue of
            subscription changes (seconds): at most this long before a new subscription holds.
    """

    def __init__(self, broker: Broker, poll_s: float = 0.05) -> None:
        self.pubsub = broker.redis.pubsub()
        self.poll_s = poll_s
        self.handlers: dict[str, set[Handler]] = {}
        self._changes: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()
        self._confirmed: dict[str, list[asyncio.Future[None]]] = {}
        """Callers of ``add`` waiting for the broker's confirmation of their subscription."""

    async def add(self, channel: str, handler: Handler) -> None:
        """Call ``handler`` with every message of ``channel`` from now on; returns once the
        broker has the subscription (or at once when the channel is held already). Cancelled
        while it waits, it leaves nothing subscribed."""
        wanted = self.handlers.setdefault(channel, set())
        wanted.add(handler)
        if len(wanted) == 1 or channel in self._confirmed:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._confirmed.setdefault(channel, []).append(done)
            if len(wanted) == 1:
                self._changes.put_nowait((channel, True))
            try:
                await done
            except BaseException:  # cancelled (its stream's client left): hold nothing
                waiting = self._confirmed.get(channel, [])
                if done in waiting:
                    waiting.remove(done)
                if not waiting:
                    self._confirmed.pop(channel, None)
                self.remove(channel, handler)
                raise

    def remove(self, channel: str, handler: Handler) -> None:
        """Stop calling ``handler`` for ``channel`` (the channel is unsubscribed when no
        handler is left)."""
        wanted = self.handlers.get(channel)
        if wanted is None:
            return
        wanted.discard(handler)
        if not wanted:
            del self.handlers[channel]
            self._changes.put_nowait((channel, False))

    async def run(self) -> None:
        """Read and dispatch messages until cancelled; a lost broker is reached again every
        ``RECONNECT_PAUSE_S`` (the client subscribes the held channels again on reconnect,
        and their confirmations release callers of ``add`` still waiting)."""
        from redis.exceptions import RedisError

        while True:
            try:
                await self._apply_changes()
                message = None
                if self.pubsub.subscribed:
                    message = await self.pubsub.get_message(timeout=self.poll_s)
                else:
                    await asyncio.sleep(self.poll_s)
                if message is not None:
                    self._take(message)
            except (RedisError, OSError) as err:
                log.warning("broker subscription lost (%s); trying again", err)
                await asyncio.sleep(RECONNECT_PAUSE_S)

    async def _apply_changes(self) -> None:
        """Send the subscription changes asked for; one the broker did not take (it is down)
        is asked again on the next try, once it is back (redis-py keeps only the channels a
        subscribe reached, and subscribes those again on reconnect)."""
        while not self._changes.empty():
            channel, subscribe = self._changes.get_nowait()
            try:
                if subscribe and channel in self.handlers:
                    await self.pubsub.subscribe(channel)
                elif not subscribe and channel not in self.handlers:
                    await self.pubsub.unsubscribe(channel)
            except BaseException:
                self._changes.put_nowait((channel, subscribe))
                raise

    def _take(self, message: dict[str, Any]) -> None:
        channel = message["channel"].decode()
        if message["type"] == "subscribe":
            for done in self._confirmed.pop(channel, []):
                if not done.done():
                    done.set_result(None)
            return
        if message["type"] != "message":
            return
        try:
            taken = _MESSAGE.validate_json(message["data"])
        except ValidationError:
            log.warning("broker: a message on %s that is not ours was ignored", channel)
            return
        for handler in list(self.handlers.get(channel, ())):
            handler(taken)

    async def close(self) -> None:
        """Close the pub/sub connection."""
        await self.pubsub.aclose()  # type: ignore[no-untyped-call]


@asynccontextmanager
async def open_broker(url: str) -> AsyncIterator[Broker | None]:
    """The broker at ``url`` (``AGENT_TASKS_BROKER_URL``, ``Settings.broker_url``), closed on
    exit; None when ``url`` is empty (no broker: no tokens, and streams read the tasks every
    ``STREAM_POLL_S``). Connects lazily: an unreachable broker fails nothing here, a publish
    to it is dropped (``Broker.publish``).

    Usage, for a worker of one's own whose page and streams should hear of new events at once::

        async with open_broker(settings.broker_url) as broker:
            plugin = AgentTasksWorkerPlugin(graph, broker=broker)
    """
    broker = Broker(url) if url else None
    try:
        yield broker
    finally:
        if broker is not None:
            await broker.close()
