"""Deterministic workflow code only (stdlib, pydantic, temporalio): the task workflow, the
ledger and its rooms, step rules and agent code; the models, the error vocabulary and the handler
names it shares with its callers are ``agent_tasks.contract``. Nothing here does I/O, reads the
clock or the environment, or loads a graph store's driver (ruff bans those APIs here)."""
