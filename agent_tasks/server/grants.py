"""An open stream's right to read: the API key or page session it was opened with
(``Grant``), checked again while the stream is open, so a stream ends when that right ends
(the key revoked, the page's session signed out or expired).

Three checks, each a bound of its own:

- **Before each written thing it sends** (``Gate.allow``): a stream sends an ``update``, an
  end (``done``, ``failed``, ``cancelled``) or an inbox item only after a check of its grant
  (one indexed Neo4j read) that started after it read them. So nothing written after the
  revocation reaches a stream, whatever the broker did. Streams of one grant in a process share
  a check (``GrantChecks``): a wave of streams woken by one write costs one read per grant.
- **At once, on the broker's word** (``broker.RevokedMessage`` on ``broker.key_channel``):
  ``agent-tasks keys revoke`` and the page's sign-out publish it once the store has the
  change, and every open stream of that key (or that session) ends before it sends anything
  more, tokens included.
- **Every ``GRANT_CHECK_S``** without a word: a stream with nothing to send checks its grant,
  so it ends within ``GRANT_CHECK_S`` of a revocation the broker did not carry (no broker, or
  it was down) and of its session's expiry.

A stream that ends so sends ``unauthorized`` last (data: the error, as a refused request's
body), so its client signs in again instead of reconnecting; a reconnect with the same key or
session is refused 401. A check that fails (Neo4j away) ends the stream too, with
``unavailable``: its client resumes with ``Last-Event-ID`` once the store answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from fastapi import Request
from fastapi.sse import ServerSentEvent

from agent_tasks.broker import Message, RevokedMessage, Subscriber, key_channel
from agent_tasks.contract.errors import AgentTasksError
from agent_tasks.server.apikeys import ApiKey, ApiKeyStore, digest
from agent_tasks.server.auth import SESSION_COOKIE, presented_key
from agent_tasks.server.pagesessions import PageSessionStore

GRANT_CHECK_S = 10.0
"""How often a stream with nothing to send checks its key or session (seconds): the bound of
its end after a revocation the broker did not carry, or its session's expiry."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grant:
    """What a request showed: a presented API key, or else the page's session token (never
    logged, never sent anywhere but the store's check).

    Args:
        key: the key's record (as ``auth.authenticate`` found it).
        secret: the presented key, or the session token.
        session: True when ``secret`` is a page session's token.
    """

    key: ApiKey
    secret: str
    session: bool

    @classmethod
    def of(cls, request: Request, key: ApiKey) -> Grant:
        """The grant of an authenticated ``request`` (``auth.authenticate``'s rule: a
        presented key wins over the session cookie)."""
        presented = presented_key(request)
        if presented:
            return cls(key, presented, session=False)
        return cls(key, request.cookies.get(SESSION_COOKIE, ""), session=True)

    def ended_by(self, message: RevokedMessage) -> bool:
        """True when ``message`` ends this grant: its key revoked, or its session ended."""
        if message.key_id != self.key.key_id:
            return False
        return message.session is None or (self.session and message.session == digest(self.secret))


class GrantChecks:
    """The grant checks of one server process: at most one read in flight per grant, shared
    by every stream that needs a check started no earlier than that read.

    Args:
        keys: the key store.
        sessions: the page session store.
    """

    def __init__(self, keys: ApiKeyStore, sessions: PageSessionStore) -> None:
        self.keys = keys
        self.sessions = sessions
        self.running: dict[tuple[bool, str], tuple[float, asyncio.Task[bool]]] = {}
        """The check in flight of each grant (by kind and secret), with when it started."""

    async def valid(self, grant: Grant, since: float) -> bool:
        """True when ``grant`` is still good by a check that started at or after ``since``
        (loop time).

        Raises:
            Exception: the store's error when it cannot be read (Neo4j away).
        """
        loop = asyncio.get_running_loop()
        ident = (grant.session, grant.secret)
        found = self.running.get(ident)
        if found is None or found[0] < since:
            found = (loop.time(), loop.create_task(self._check(grant)))
            self.running[ident] = found
            ran = found
            found[1].add_done_callback(lambda _: self._forget(ident, ran))
        return await asyncio.shield(found[1])

    def _forget(self, ident: tuple[bool, str], ran: tuple[float, asyncio.Task[bool]]) -> None:
        if self.running.get(ident) is ran:
            del self.running[ident]

    async def _check(self, grant: Grant) -> bool:
        if grant.session:
            record = await self.sessions.check(grant.secret)
        else:
            record = await self.keys.check(grant.secret)
        return record is not None and record.key_id == grant.key.key_id


class GrantEnded(AgentTasksError):
    """The stream's grant ended (``reason``: ``unauthorized`` or ``unavailable``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Gate:
    """One stream's watch over its grant (the module docstring): ``allow`` before written
    things, ``ended`` set on the broker's word or a failed periodic check.

    Args:
        checks: the process's grant checks.
        grant: the stream's grant.
        subscriber: the broker subscription (None: no words, the periodic check only).
        check_s: the periodic check's interval (seconds).
    """

    def __init__(
        self,
        checks: GrantChecks,
        grant: Grant,
        subscriber: Subscriber | None,
        check_s: float = GRANT_CHECK_S,
    ) -> None:
        self.checks = checks
        self.grant = grant
        self.subscriber = subscriber
        self.check_s = check_s
        self.ended = asyncio.Event()
        self.reason = "unauthorized"

    def _message(self, message: Message) -> None:
        if isinstance(message, RevokedMessage) and self.grant.ended_by(message):
            self.ended.set()

    async def allow(self, since: float) -> None:
        """Return when the grant is good by a check started at or after ``since`` (loop
        time: when what is to be sent was read).

        Raises:
            GrantEnded: it is not (or it cannot be checked).
        """
        if self.ended.is_set():
            raise GrantEnded(self.reason)
        try:
            good = await self.checks.valid(self.grant, since)
        except Exception as err:  # the store did not answer: the stream cannot be vouched for
            log.warning("a stream's key could not be checked: %s", err)
            self.reason = "unavailable"
            good = False
        if not good:
            self.ended.set()
            raise GrantEnded(self.reason)

    async def _every(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.ended.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ended.wait(), self.check_s)
                return
            with contextlib.suppress(GrantEnded):
                await self.allow(loop.time())

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Subscribe to the key's channel and check every ``check_s`` while the block runs."""
        channel = key_channel(self.grant.key.key_id)
        if self.subscriber is not None:
            await self.subscriber.add(channel, self._message)
        every = asyncio.create_task(self._every())
        try:
            yield
        finally:
            every.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await every
            if self.subscriber is not None:
                self.subscriber.remove(channel, self._message)

    def last_event(self) -> ServerSentEvent:
        """What the stream sends last: ``unauthorized`` or ``unavailable``, with the error."""
        message = {
            "unauthorized": "the API key was revoked or the page's session ended: sign in again",
            "unavailable": "the key store did not answer: reconnect with Last-Event-ID",
        }[self.reason]
        data = {"error": {"code": self.reason, "message": message, "details": []}}
        return ServerSentEvent(event=self.reason, raw_data=json.dumps(data))


_END = object()


async def guarded(
    events: AsyncGenerator[ServerSentEvent, None], gate: Gate, closing: asyncio.Event
) -> AsyncIterator[ServerSentEvent]:
    """``events`` while ``gate``'s grant holds and the server is not ``closing``: the stream
    ends at once when either ends (the grant's with ``Gate.last_event``; the server's with
    nothing more, its client reconnects with ``Last-Event-ID``)."""
    async with gate.watching():

        async def stopped() -> None:
            waits = [
                asyncio.ensure_future(gate.ended.wait()),
                asyncio.ensure_future(closing.wait()),
            ]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()

        stop = asyncio.ensure_future(stopped())
        step: asyncio.Future[object] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(events, _END))
                await asyncio.wait([step, stop], return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    break
                try:
                    item = step.result()
                except GrantEnded:
                    break
                if item is _END or closing.is_set():
                    return
                if gate.ended.is_set():  # the word came while the item was made
                    break
                assert isinstance(item, ServerSentEvent)
                yield item
            if gate.ended.is_set() and not closing.is_set():
                yield gate.last_event()
        finally:
            for task in (step, stop):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            await events.aclose()
