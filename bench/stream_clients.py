"""SSE clients of one task's stream, in a process of their own (``bench.bench_streams`` runs
it): ``N`` readers that parse every event, and one that connects and never reads a byte.

    python -m bench.stream_clients URL KEY TASK N

Prints ``ready N`` once every reader's stream is open (N of them with 200), then one JSON
line when every reader has seen the task's end (or ``--within`` seconds
passed): per reader the updates and tokens seen, the last seq, whether it ended; and, for
events and tokens whose text is a send time (``time.time_ns()``, as the benchmark writes
them), the milliseconds from that time to the first reader's arrival.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import httpx


async def read(
    client: httpx.AsyncClient,
    task: str,
    delays: dict[str, list[float]] | None,
    ready: asyncio.Queue[int],
) -> dict[str, Any]:
    """Read the stream to its end (``ready`` gets the status once the stream's first line, or
    a refusal, came); ``delays`` (the first reader's) gets the latencies."""
    seen = {"updates": 0, "tokens": 0, "last_seq": 0, "ended": False, "status": 0}
    async with client.stream("GET", f"/tasks/{task}/stream") as response:
        seen["status"] = response.status_code
        if response.status_code != 200:
            ready.put_nowait(response.status_code)
            return seen
        event = ""
        async for line in response.aiter_lines():
            if line == ": connected":
                ready.put_nowait(200)
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event:
                data = json.loads(line[5:])
                now = time.time_ns()
                if event == "update":
                    seen["updates"] += 1
                    seen["last_seq"] = data["seq"]
                    text = data["payload"]
                elif event == "token":
                    seen["tokens"] += 1
                    text = data["text"]
                else:
                    seen["ended"] = True
                    return seen
                if delays is not None and text.isdigit():
                    delays[event].append((now - int(text)) / 1e6)
            elif line == "":
                event = ""
    return seen


def stall(url: str, key: str, task: str) -> socket.socket:
    """Connect a stream whose client never reads (a 4 KiB receive buffer, soon full)."""
    address = urlsplit(url)
    sock = socket.create_connection((address.hostname, address.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = (
        f"GET /tasks/{task}/stream HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Authorization: Bearer {key}\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


async def main(url: str, key: str, task: str, readers: int, within: float) -> None:
    delays: dict[str, list[float]] = {"update": [], "token": []}
    stalled = stall(url, key, task)
    limits = httpx.Limits(max_connections=readers + 10, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {key}"}
    ready: asyncio.Queue[int] = asyncio.Queue()
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=httpx.Timeout(within)
    ) as client:
        jobs = [
            asyncio.create_task(read(client, task, delays if n == 0 else None, ready))
            for n in range(readers)
        ]
        statuses = [await asyncio.wait_for(ready.get(), within) for _ in range(readers)]
        print(f"ready {statuses.count(200)}", flush=True)
        results = await asyncio.wait_for(asyncio.gather(*jobs), within)
    stalled.close()
    print(json.dumps({"readers": results, "delays_ms": delays}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("key")
    parser.add_argument("task")
    parser.add_argument("readers", type=int)
    parser.add_argument("--within", type=float, default=600.0)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.key, args.task, args.readers, args.within))
    sys.stdout.flush()
