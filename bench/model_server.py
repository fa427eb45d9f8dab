"""An OpenAI-compatible chat-completions server of the tests' and the bench's own: a real HTTP
server on a free loopback port (stdlib ``http.server`` in a thread) that answers each
``POST /v1/chat/completions`` with the next ``Reply`` of its script, and keeps every request
it got (so a test reads the messages the model was shown).

A reply is a recorded response (a chat completion as the API returns it, JSON), an error status
with the API's error body, or a stream of chunks as Server-Sent Events (``stream=True``, sent
with chunked transfer encoding); it may wait first (``delay_s``) and between chunks
(``chunk_delay_s``), which is how a test holds a model call open while it cancels the task. A
stream may end as servers really end them: with ``data: [DONE]`` or without it (``done``), or
cut: the connection dropped after some chunks (``drop_after``), before a complete body.

The server notes, for each request, whether the client closed its connection before the reply
was complete (``Exchange.closed_early``) and how many chunks it had sent by then: so a test
sees that a cancelled call really closed its HTTP request (the model stops generating, and
nothing more is paid for). The ``openai`` client reaches it with ``base_url=server.url``.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One answer of the server."""

    body: dict[str, Any] | None = None
    """The JSON body (a chat completion, or an error body with ``status``)."""
    status: int = 200
    """The HTTP status."""
    chunks: Sequence[dict[str, Any]] = ()
    """With these, the answer is a stream of SSE ``data:`` lines, then ``data: [DONE]``."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra headers (``retry-after``)."""
    delay_s: float = 0.0
    """Seconds to wait before answering (the connection stays open meanwhile)."""
    chunk_delay_s: float = 0.0
    """Seconds to wait before each chunk of a stream."""
    done: bool = True
    """End a stream with ``data: [DONE]`` (False: the body ends without it, cleanly)."""
    drop_after: int | None = None
    """Drop the connection after this many chunks of a stream, mid-body (no end of the
    chunked body: the client sees the connection lost)."""
    raw: Sequence[str] = ()
    """Lines of a stream's body sent as they are, after the chunks (odd servers)."""


@dataclass
class Exchange:
    """What happened to one request."""

    started_at: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` when the request arrived."""
    sent: int = 0
    """Chunks of the stream sent."""
    closed_early: bool = False
    """The client closed the connection before the reply was complete."""
    closed_at: float | None = None
    """``time.monotonic()`` when the server saw that close."""


def completion(
    content: str = "",
    tool_calls: Sequence[dict[str, Any]] = (),
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> dict[str, Any]:
    """A chat completion as the API returns it (one choice), with ``tool_calls`` as given
    (each ``{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}``)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def chunk(
    *calls: dict[str, Any],
    content: str | None = None,
    finish: str | None = None,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` of one choice whose delta has ``content`` and the tool-call
    deltas ``calls`` (each ``{"index": ..., "id": ..., "function": {...}}`` as a server sends
    it), with ``finish`` as its ``finish_reason``; with ``usage`` (prompt, completion tokens)
    the final usage chunk instead (no choice)."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls:
        delta["tool_calls"] = list(calls)
    body: dict[str, Any] = {
        "id": "chatcmpl-7",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["choices"] = []
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    return body


def error(status: int, message: str, **headers: str) -> Reply:
    """An error answer with the API's error body."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Reply(body=body, status=status, headers=headers)


class ModelServer:
    """The server; ``replies`` is its script (the last reply again past the end) or a function
    of the request's JSON body.

    Args:
        replies: what to answer, in order, or a function ``request -> Reply``.
    """

    def __init__(self, replies: Sequence[Reply] | Callable[[dict[str, Any]], Reply]) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        """The JSON bodies received, in order."""
        self.exchanges: list[Exchange] = []
        """What happened to each request, in order (``Exchange``)."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a kept-alive client must not hold the close
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        """The base URL to give the ``openai`` client."""

    def _next(self, request: dict[str, Any]) -> tuple[Reply, Exchange]:
        with self._lock:
            self.requests.append(request)
            exchange = Exchange()
            self.exchanges.append(exchange)
            if callable(self.replies):
                return self.replies(request), exchange
            index = min(len(self.requests), len(self.replies)) - 1
            return self.replies[index], exchange

    # Long: one request handler class, its methods the steps of an answer
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read ``requests``."""

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                reply, exchange = server._next(request)
                try:
                    if not self._wait(reply.delay_s):
                        raise ConnectionResetError
                    if reply.chunks or reply.raw or not reply.done:
                        self._stream(reply, exchange)
                    else:
                        self._json(reply)
                except (BrokenPipeError, ConnectionResetError):
                    exchange.closed_early = True  # the client gave up (cancelled, timed out)
                    exchange.closed_at = time.monotonic()
                    self.close_connection = True

            def _wait(self, seconds: float) -> bool:
                """Wait ``seconds``; False as soon as the client closes the connection."""
                end = time.monotonic() + seconds
                while (left := end - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.02))
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        return False
                return True

            def _json(self, reply: Reply) -> None:
                data = json.dumps(reply.body or {}).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, reply: Reply, exchange: Exchange) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.flush()
                for chunk in reply.chunks:
                    if reply.drop_after is not None and exchange.sent >= reply.drop_after:
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    if not self._wait(reply.chunk_delay_s):
                        raise ConnectionResetError
                    self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    exchange.sent += 1
                for line in reply.raw:
                    self._chunk(line.encode() + b"\n")
                if reply.done:
                    self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler

    @contextmanager
    def running(self) -> Iterator[ModelServer]:
        """Serve in a thread until the block ends."""
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(5)
