"""The rows of ``docs/comparison.md``, in order, each with why a peer may do better than ours
there (shown under the row only when it did in the run)."""

from __future__ import annotations

from bench.peers.measures import Measure

_NO_SERVER = (
    "it runs the agent in the app's own process against PostgreSQL, with no server between: "
    "a turn is a few SQL statements, where ours is Temporal commands plus the graph mirror"
)
MEASURES = (
    Measure("task", "a whole task (N turns), end to end", "cost", {
        "pydantic_dbos": _NO_SERVER + ".",
        "langgraph": _NO_SERVER + ".",
        "pydantic_temporal": "its workflow writes no ledger events and no mirror: each turn is "
        "a model activity and a tool activity, where ours also records the turn's events by "
        "the task's own ledger and mirrors them to the graph store.",
        "openai_temporal": "its workflow writes no ledger events and no mirror: each turn is a "
        "model activity and a tool activity, where ours also records the turn's events.",
    }),
    Measure("turn", "one turn (model call + one tool)", "cost", {
        "pydantic_dbos": _NO_SERVER + ".",
        "langgraph": _NO_SERVER + ".",
        "pydantic_temporal": "fewer workflow tasks per turn (no ledger events, no mirror).",
        "openai_temporal": "fewer workflow tasks per turn (no ledger events, no mirror).",
    }),
    Measure("cpu", "CPU per turn by process (ms)", "cost", {
        "pydantic_dbos": "no Temporal server and no graph store: the database does the "
        "durable writes.",
        "langgraph": "no server and no graph store: one checkpoint per step in PostgreSQL.",
        "pydantic_temporal": "no graph mirror and no ledger: ours spends the graph store's "
        "CPU and more worker CPU per turn to keep the cross-task view.",
        "openai_temporal": "no graph mirror and no ledger: ours spends the graph store's CPU "
        "and more worker CPU per turn to keep the cross-task view.",
    }),
    Measure("memory", "worker memory per open (waiting) task", "cost", {
        "langgraph": "an interrupted thread is rows in PostgreSQL: no process holds it.",
        "pydantic_dbos": "a waiting DBOS workflow is a coroutine in the worker and rows in "
        "PostgreSQL: no replay cache of its history.",
        "pydantic_temporal": "its cached workflow holds less state than our task workflow.",
        "openai_temporal": "its cached workflow holds less state than our task workflow.",
    }),
    Measure("storage", "storage per turn", "cost", {
        "langgraph": "a checkpoint holds the state; ours keeps every event in the history "
        "and again in the graph store.",
        "pydantic_dbos": "one row per step output; ours keeps every event in the history and "
        "again in the graph store.",
        "pydantic_temporal": "the history holds the activities' inputs and results only; ours "
        "adds the ledger's event updates.",
        "openai_temporal": "the history holds the activities' inputs and results only; ours "
        "adds the ledger's event updates.",
    }),
    Measure("recovery", "crash (SIGKILL of the worker) to the task running again", "cost", {
        "pydantic_dbos": "a new DBOS process recovers its executor's pending workflows as it "
        "starts, where Temporal waits for the dead worker's activity to time out (ours: the "
        "model call's 10 s heartbeat timeout).",
        "langgraph": "the app itself calls the graph again as it starts: there is no timeout to "
        "wait for (and no one else notices the crash).",
    }),
    Measure("kill_charge", "SIGKILL during `charge` after its effect, new worker", "fault"),
    Measure("kill_model", "SIGKILL during the model call, new worker", "fault"),
    Measure("cancel_model", "cancel during the model call: request closed?", "fault"),
    Measure("cancel_charge", "cancel during `charge`", "fault"),
    Measure(
        "approval_restart", "approval, worker restarted while it waits, then answered", "fault"
    ),
    Measure("answer_twice", "the approval answered twice at once", "fault"),
    Measure(
        "long_task",
        "a long task: Temporal's history limits (scaled down) or LangGraph's recursion limit",
        "fault",
        {
            "pydantic_dbos": "DBOS has no history to outgrow: each step is a row, a run has "
            "no event limit and nothing to continue as new.",
        },
    ),
    Measure("replay", "replay of the saved run against the code (pre-deploy check)", "fault"),
)  # fmt: skip
