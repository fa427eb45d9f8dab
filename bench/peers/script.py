"""The model every runtime talks to: ``bench.model_server`` with a script that reads the task
from the prompt (``prompt``) and, by the tool results the request already holds, asks for the
read tool ``lookup`` until the last turn, then for ``charge`` (not idempotent), then answers.

A task of ``turns`` turns makes ``turns`` tool calls and ``turns + 1`` model calls. The bench
may hold one model call of a task (``Script.hold``): the server keeps that request open until
its client closes it (a killed worker, a cancel), and notes when (``Exchange.closed_at``).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from bench.model_server import Exchange, ModelServer, Reply, completion

HOLD_S = 300.0
"""How long a held model call stays open at most (seconds)."""
APPROVAL_AMOUNT = 100
"""Every runtime's agent asks a person before a charge of this amount or more."""
_PROMPT = re.compile(r"task (\S+) turns (\d+) amount (\d+):")


def prompt(task: str, turns: int, amount: int = 5) -> str:
    """The task's goal as every runtime sends it (``turns`` tool calls, ``charge`` last)."""
    return f"task {task} turns {turns} amount {amount}: pay order {task}."


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def parse(request: dict[str, Any]) -> tuple[str, int, int, int]:
    """``(task, turns, amount, tool results so far)`` of a chat completions request."""
    messages = request.get("messages", [])
    for message in messages:
        found = _PROMPT.search(_text(message.get("content")))
        if message.get("role") == "user" and found:
            done = sum(1 for m in messages if m.get("role") == "tool")
            return found[1], int(found[2]), int(found[3]), done
    raise ValueError("no task in the request")


def answer(task: str, turns: int, amount: int, done: int) -> dict[str, Any]:
    """The chat completion the model answers after ``done`` tool results."""
    args: dict[str, Any]
    if done < turns - 1:
        name, args = "lookup", {"item": done}
    elif done == turns - 1:
        name, args = "charge", {"order": task, "amount": amount}
    else:
        return completion(f"paid order {task}")
    call = {
        "id": f"call_{done}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return completion(tool_calls=[call])


@dataclass
class Script:
    """The script, its holds and its server."""

    holds: dict[str, int] = field(default_factory=dict)
    """Task -> the model call (by tool results before it) to hold open, once."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ModelServer = field(init=False)
    _by_task: dict[str, list[int]] = field(default_factory=dict)
    """Task -> the indexes of its requests in the server's lists."""
    _waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)
    """Who waits for the next request (``next_request``), each with its loop."""

    def __post_init__(self) -> None:
        self.server = ModelServer(self.reply)

    def reply(self, request: dict[str, Any]) -> Reply:
        task, turns, amount, done = parse(request)
        with self.lock:
            # the server calls this under its lock, its request just appended: the last one
            self._by_task.setdefault(task, []).append(len(self.server.requests) - 1)
            for loop, event in self._waiters:
                loop.call_soon_threadsafe(event.set)
            self._waiters.clear()
            held = self.holds.get(task) == done
            if held:
                del self.holds[task]
        if held:
            return Reply(body=completion("held"), delay_s=HOLD_S)
        return Reply(body=answer(task, turns, amount, done))

    def hold(self, task: str, done: int) -> None:
        """Hold the model call of ``task`` made after ``done`` tool results, once."""
        with self.lock:
            self.holds[task] = done

    async def next_request(self, seen: int, within_s: float) -> bool:
        """Wait until the server holds more than ``seen`` requests (its threads answer them);
        False if none came within ``within_s``."""
        event = asyncio.Event()
        with self.lock:
            if len(self.server.requests) > seen:
                return True
            self._waiters.append((asyncio.get_running_loop(), event))
        try:
            await asyncio.wait_for(event.wait(), within_s)
        except TimeoutError:
            return False
        return True

    def calls(self, task: str) -> list[tuple[dict[str, Any], Exchange]]:
        """The requests of ``task`` and what happened to each, in order."""
        with self.lock:
            indexes = list(self._by_task.get(task, ()))
        return [(self.server.requests[i], self.server.exchanges[i]) for i in indexes]
