"""Deterministic workflow code only (stdlib, pydantic, temporalio): the task workflow, the
ledger, step rules, the error vocabulary and the models. Nothing here does I/O, reads the
clock or the environment, or loads the Neo4j driver (ruff bans those APIs here)."""
