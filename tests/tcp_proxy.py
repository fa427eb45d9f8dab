"""A TCP proxy of the tests' own (asyncio streams on a free loopback port) in front of a real
server, that can hold the connections it has open: while held, nothing they send reaches the
other side (the bytes wait in the proxy), the way a stalled server or a congested link looks
to the client; new connections pass. ``release()`` lets the held bytes through, late."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class TcpProxy:
    """Forward ``127.0.0.1:port`` to ``target_host:target_port``.

    Args:
        target_host, target_port: the real server.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        """The proxy's port, once started."""
        self._gates: list[asyncio.Event] = []
        self._held: list[asyncio.Event] = []
        self.stall_new = False
        """True while new connections are held too (``hold(new=True)``)."""
        self.connections = 0
        """How many connections it has accepted."""
        self.sent = 0
        """Bytes its clients have sent (held ones too: they are counted as they arrive)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gate: asyncio.Event,
        from_client: bool,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if from_client:
                    self.sent += len(data)
                await gate.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        server_r, server_w = await asyncio.open_connection(*self.target)
        gate = asyncio.Event()
        if self.stall_new:
            self._held.append(gate)
        else:
            gate.set()
            self._gates.append(gate)
        for reader, writer, from_client in (
            (client_r, server_w, True),
            (server_r, client_w, False),
        ):
            task = asyncio.create_task(self._pipe(reader, writer, gate, from_client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def hold(self, *, new: bool = False) -> None:
        """Hold every connection open now (both directions); later connections pass, unless
        ``new``: then they are held too (a server that accepts connections and answers
        nothing, the way a stalled process looks) until ``release``."""
        self.stall_new = new
        for gate in self._gates:
            gate.clear()
        self._held.extend(self._gates)
        self._gates = []

    def release(self) -> None:
        """Let the held connections' bytes through; new connections pass again."""
        self.stall_new = False
        for gate in self._held:
            gate.set()
        self._held = []

    async def drop(self) -> None:
        """Close every connection open now (a link that broke); new connections pass."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[TcpProxy]:
        """Serve until the block ends, then close every connection."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Close every connection and stop listening (a server that is down); again: nothing."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
