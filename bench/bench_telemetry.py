"""What telemetry costs a write, against the local stack (``agent-tasks dev up``).

Runs ``bench_mirror_latency.measure`` (single-event writes: acknowledged, then visible in
Neo4j) with telemetry off, with the SDK's metrics only, and with metrics and traces (the SDK's
tracing interceptor on client and worker, spans around the Neo4j writes), as an operator would
run them: exported over OTLP/HTTP to a receiver on 127.0.0.1 that accepts and drops them.
Rounds alternate between the three so that the machine's noise falls on all alike.

    python -m bench.bench_telemetry [--writes 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent_tasks.config import Settings, connect
from agent_tasks.devstack import free_port
from agent_tasks.worker import open_graph
from bench.bench_mirror_latency import measure


class _Drop(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def main(writes: int, rounds: int) -> None:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Drop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    off = Settings()
    endpoint = f"http://127.0.0.1:{port}"
    variants = {
        "off": off,
        "metrics": off.model_copy(
            update={"otel_metrics_exporter": "otlp", "otel_exporter_otlp_endpoint": endpoint}
        ),
        "metrics+traces": off.model_copy(
            update={
                "otel_traces_exporter": "otlp",
                "otel_metrics_exporter": "otlp",
                "otel_exporter_otlp_endpoint": endpoint,
            }
        ),
    }
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in variants}
    for _ in range(rounds):
        for name, settings in variants.items():
            client = await connect(settings)
            async with open_graph(settings) as graph:
                ack, visible = await measure(client, graph, writes)
            results[name][0].extend(ack)
            results[name][1].extend(visible)
    base = statistics.median(results["off"][0])
    for name, (ack, visible) in results.items():
        print(
            f"telemetry {name:14s}  ack median {statistics.median(ack) * 1000:6.1f} ms "
            f"({statistics.median(ack) / base:.2f}x)  "
            f"visible median {statistics.median(visible) * 1000:6.1f} ms  (n={len(ack)})"
        )
    server.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.writes, args.rounds))
