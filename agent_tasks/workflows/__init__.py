"""Deterministic workflow code only (stdlib, pydantic, temporalio): the task workflow, the ledger
and its rooms, step rules and agent code; what it shares with callers is ``agent_tasks.contract``.
No I/O, clock, environment or graph-store driver here (ruff bans those APIs)."""
