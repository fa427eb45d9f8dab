"""The task workflow's patch ids, in one place: each with its day, the saved histories that pin its
new path, and when it may be deprecated.

A change to the commands a run emits is guarded by ``workflow.patched(ID)``: a run recorded before
it replays the old path, a later one records a marker and takes the new one
(``docs/replay-and-upgrades.md``). ``PATCHES`` records, per id, its day (``since``) and the
histories in ``tests/histories`` carrying its marker (``pinned_by``); ``deprecation_after`` is the
earliest day ``deprecate_patch`` may replace it, once every task started before it has closed and
the namespace's retention has passed. ``tests/workflows/test_patches.py`` checks both. Constants and
a frozen table only (read inside the workflow sandbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from types import MappingProxyType

RETENTION = timedelta(days=30)
"""The namespace retention ``agent-tasks setup`` sets (``worker.DEFAULT_RETENTION``): how long a
closed run's history stays replayable."""


@dataclass(frozen=True)
class Patch:
    """One patch id's record.

    Attributes:
        since: the day the patch was made (runs started before it take the old path).
        pinned_by: the saved histories (file names in ``tests/histories``) whose runs recorded
            its marker, so they replay its new path.
    """

    since: date
    pinned_by: tuple[str, ...]

    def deprecation_after(self) -> date:
        """The earliest day ``deprecate_patch`` may replace ``patched``: the patch's day plus the
        retention, for a deployment whose older tasks had all closed by then."""
        return self.since + RETENTION


MIRROR_WITHOUT_DEBOUNCE = "mirror-without-debounce-timer"
"""Patch id: the mirror starts as soon as a write waits, without the 200 ms debounce timer (which
the server's timer resolution stretched to about a second)."""

CANCEL_RULE = "one-cancellation-rule"
"""Patch id: after a cancel request no step, model call or wait of the agent starts or goes on; the
workflow cancels what runs and waits for it (``TaskWorkflow._cancelled``). Old runs cancelled the
agent's asyncio task."""

UNKNOWN_STAYS_UNKNOWN = "unknown-stays-unknown"
"""Patch id: a step that ended ``unknown`` and is reached again returns ``unknown``; it runs again
only on request (``AgentContext.retry``, ``retry_step``). Old runs ran it again under its key."""

TOOL_CALL_BOUNDS = "tool-call-bounds"
"""Patch id: a call naming no tool, or with arguments past the payload bound, fails its step without
running (the model hears why). Old runs failed the task or passed cut arguments."""

PROGRESS_BEFORE_PARKING = "progress-before-parking"
"""Patch id: ``checkpoint()`` parks for continue-as-new only after new work in the run, so a task
whose memoized reads alone pass the suggestion still progresses."""

TOOL_SPECS_BY_ACTIVITY = "tool-specs-by-activity"
"""Patch id: the lookup of an agent's tools is an activity, not a local activity, whose result can
reach the workflow in another workflow task on replay than when first run."""

APP_LIFECYCLE = "app-lifecycle"
"""Patch id: a recorded task waiting for input or children with nothing left to wait for is
``queued`` again (``workflows.lifecycle``); old runs never had those statuses."""

ANSWERS_BOUND = "answers-bound-to-requests"
"""Patch id: an answer by signal is bound to one request (``inbox.take_answer``), one early answer
kept per request, up to ``MAX_EARLY_ANSWERS``."""

TURN_RULES = "turn-rules"
"""Patch id: each run of an agent is marked in the log (``run_started``, ``run_finished``,
``run_failed``) and a failed run is rolled back (``docs/agent-tasks.md``)."""

CONTINUE_WITHOUT_MIRROR = "continue-as-new-without-mirror"
"""Patch id: a run continues-as-new when suggested without waiting for the mirror; what the graph
store lacks goes to the next run's ``mirror_backlog``, so an outage cannot grow a history to
Temporal's hard limit."""

MIRROR_DRAIN_BOUND = "mirror-drain-bound"
"""Patch id: ``MIRROR_DRAIN_WAIT`` bounds a mirror call in flight when continue-as-new is
suggested."""

PARK_ON_SUGGESTION = "park-on-suggestion"
"""Patch id: ``checkpoint()`` parks once Temporal suggests continue-as-new, read from the run's own
info, not only once the run loop set ``checkpoint_due`` between slow mirror calls."""

TOOL_APPROVAL = "tool-approval"
"""Patch id: a call of a tool that needs approval is checked by the worker and asked about before it
runs; old runs had no such tools."""

MIRROR_FOLLOWS_RUN = "mirror-follows-run"
"""Patch id: the current run is mirrored by a call that follows it (``MirrorInput.follow``); old
runs call once per batch."""

MODEL_CALL_CANCEL = "model-call-cancel"
"""Patch id: the model call has a heartbeat timeout (``MODEL_HEARTBEAT``) and a longer
start-to-close (``MODEL_LONGEST_CALL``), and a cancel waits for it to end
(``WAIT_CANCELLATION_COMPLETED``), so its HTTP request closes and no token is published after
``cancelled``. Old runs dropped the call at once (``TRY_CANCEL``)."""

IGNORE_REASON = "ignore-with-reason"
"""Patch id: an ignore with a reason (``ApprovalChoice.text``) ends the step with ``IGNORED`` and
the reason (``ignored_result``), so the model reads why; old runs gave ``IGNORED`` alone."""

CANCEL_AFTER_END = "cancel-after-end"
"""Patch id: a cancel request reaching a task already ``done`` or ``failed`` (children still
running) is recorded without changing its status (``_cancelled_after_end``); old runs closed the
workflow as cancelled."""

BRANCH_REUSE = "branch-reuses-before-point"
"""Patch id: an agent task's branch takes over what its source settled before the branch point
(``reuse_before_point``); old branches started with no steps and no answers."""

BOUNDED_WORKFLOW_IDS = "bounded-workflow-ids"
"""Patch id: a workflow id past 255 characters is cut with a digest (``task_workflow_id``) in
commands naming another task (``workflows.spawning.task_id``); old runs used the plain id, which SQL
persistence refuses."""

APPROVAL_BOUND = "approval-bound-to-call"
"""Patch id: an approval request names its call's digest (``ApprovalAsk.digest``), expires at the
tool's ``approval_expires_s`` (a timer), and a tool with ``approvers`` over 1 asks until that many
distinct people accepted; older requests are decided by one answer."""

RESUME_OPEN_CALLS = "resume-open-calls"
"""Patch id: the tool loop keeps its turn's calls in ``AgentRun.open_calls`` until each ended, so a
run continued as new during an approval resumes them (same step names, same request) before it calls
the model; old runs asked the model again."""

SAME_CALL_SAME_KEY = "same-call-same-key"
"""Patch id: a tool loop call identical to one whose step ended ``unknown``
(``AgentRun.unknown_calls``) runs as a retry of that step under its key (a ``decision`` citing it),
so a server deduplicating by key performs it once; old runs used a new step and key."""

MCP_LIST_CANCEL = "mcp-list-cancel"
"""Patch id: an MCP server's listing heartbeats and a cancel of the task cancels it
(``registry.MCP_LIST_HEARTBEAT``); old runs waited for the listing to end."""

MCP_OPEN_CANCEL = "mcp-open-cancel"
"""Patch id: the open of a stateful MCP session heartbeats and a cancel cancels it, as
``MCP_LIST_CANCEL``; old runs waited for the open."""

ANSWERS_BY_DEADLINE = "answers-by-deadline"
"""Patch id: an answer by signal to a request past its deadline by workflow time is recorded
``late`` and the request closes at its timer (signals arrive before the timers of the same workflow
task); the ``respond`` validator refuses it ``input_closed`` (validators need no patch)."""

ONE_PERSON_ONE_APPROVER = "one-person-one-approver"
"""Patch id: a second accept by one of the earlier approvers under another spelling
(``contract.person_key``) is recorded ``rejected`` by signal (``approver_repeated`` by the
``respond`` validator); old runs compared names exactly."""

MIRROR_REFUSAL_CLOSES = "mirror-refusal-closes"
"""Patch id: a closing task whose mirror call the graph store refused and recorded
(``MIRROR_REFUSED``) completes with the refusal in its view (``MirrorCalls.refused``); old runs
paused and called again for ever."""

PATCHES: MappingProxyType[str, Patch] = MappingProxyType(
    {
        MIRROR_WITHOUT_DEBOUNCE: Patch(
            since=date(2026, 11, 29),
            pinned_by=(
                "agent_cancel.json",
                "agent_failed.json",
                "agent_loop.json",
                "agent_resumed.json",
                "answers_bound.json",
                "answers_by_deadline.json",
                "app_lifecycle.json",
                "app_lifecycle_child.json",
                "approval_bound.json",
                "approval_choices.json",
                "approval_ignore_reason.json",
                "backlog_run1.json",
                "backlog_run2.json",
                "branch_continued.json",
                "branch_reused.json",
                "branch_reused_child.json",
                "cancel_after_end.json",
                "cancel_after_end_kept.json",
                "cancel_rule_input.json",
                "cancel_rule_tool.json",
                "children_cancel.json",
                "children_child.json",
                "children_parent.json",
                "children_reconciled.json",
                "cut_arguments.json",
                "input_answered.json",
                "input_early.json",
                "long_ids_child.json",
                "long_ids_parent.json",
                "mcp_call.json",
                "mcp_list_cancelled.json",
                "mcp_open_cancelled.json",
                "mcp_stateful.json",
                "mirror_at_once.json",
                "mirror_follows.json",
                "mirror_refused.json",
                "model_cancel.json",
                "model_mistake.json",
                "one_person.json",
                "open_calls_run1.json",
                "open_calls_run2.json",
                "parked_run1.json",
                "parked_run2.json",
                "same_call_continued.json",
                "sealed_decisions.json",
                "spawn_taken.json",
                "step_retried.json",
                "steps_at_once.json",
                "tool_call_bounds.json",
                "turn_continued.json",
                "turn_failed.json",
                "turn_resumed.json",
            ),
        ),
        CANCEL_RULE: Patch(
            since=date(2026, 12, 1),
            pinned_by=(
                "cancel_rule_input.json",
                "cancel_rule_tool.json",
                "mcp_list_cancelled.json",
                "mcp_open_cancelled.json",
                "model_cancel.json",
                "spawn_taken.json",
            ),
        ),
        UNKNOWN_STAYS_UNKNOWN: Patch(
            since=date(2026, 12, 1),
            pinned_by=(),
        ),
        TOOL_CALL_BOUNDS: Patch(
            since=date(2026, 12, 1),
            pinned_by=(
                "cut_arguments.json",
                "tool_call_bounds.json",
            ),
        ),
        PROGRESS_BEFORE_PARKING: Patch(
            since=date(2026, 12, 1),
            pinned_by=(),
        ),
        TOOL_SPECS_BY_ACTIVITY: Patch(
            since=date(2026, 12, 1),
            pinned_by=(
                "answers_bound.json",
                "answers_by_deadline.json",
                "approval_bound.json",
                "approval_choices.json",
                "approval_ignore_reason.json",
                "branch_continued.json",
                "branch_reused.json",
                "branch_reused_child.json",
                "cancel_after_end.json",
                "cancel_after_end_kept.json",
                "cancel_rule_input.json",
                "cancel_rule_tool.json",
                "children_reconciled.json",
                "cut_arguments.json",
                "long_ids_parent.json",
                "mcp_call.json",
                "mcp_list_cancelled.json",
                "mcp_open_cancelled.json",
                "mcp_stateful.json",
                "model_cancel.json",
                "model_mistake.json",
                "one_person.json",
                "open_calls_run1.json",
                "open_calls_run2.json",
                "parked_run1.json",
                "parked_run2.json",
                "same_call_continued.json",
                "spawn_taken.json",
                "step_retried.json",
                "steps_at_once.json",
                "tool_call_bounds.json",
                "turn_continued.json",
                "turn_failed.json",
                "turn_resumed.json",
            ),
        ),
        APP_LIFECYCLE: Patch(
            since=date(2026, 12, 1),
            pinned_by=("app_lifecycle.json",),
        ),
        ANSWERS_BOUND: Patch(
            since=date(2026, 12, 1),
            pinned_by=(
                "answers_bound.json",
                "answers_by_deadline.json",
                "one_person.json",
            ),
        ),
        TURN_RULES: Patch(
            since=date(2026, 12, 1),
            pinned_by=(
                "answers_by_deadline.json",
                "approval_bound.json",
                "approval_choices.json",
                "approval_ignore_reason.json",
                "branch_continued.json",
                "branch_reused.json",
                "branch_reused_child.json",
                "cancel_after_end.json",
                "cancel_after_end_kept.json",
                "cut_arguments.json",
                "long_ids_parent.json",
                "mcp_call.json",
                "mcp_list_cancelled.json",
                "mcp_open_cancelled.json",
                "mcp_stateful.json",
                "model_cancel.json",
                "model_mistake.json",
                "one_person.json",
                "open_calls_run1.json",
                "parked_run1.json",
                "same_call_continued.json",
                "step_retried.json",
                "steps_at_once.json",
                "tool_call_bounds.json",
                "turn_continued.json",
                "turn_failed.json",
                "turn_resumed.json",
            ),
        ),
        CONTINUE_WITHOUT_MIRROR: Patch(
            since=date(2026, 12, 1),
            pinned_by=(
                "backlog_run1.json",
                "open_calls_run1.json",
                "parked_run1.json",
                "parked_run2.json",
            ),
        ),
        MIRROR_DRAIN_BOUND: Patch(
            since=date(2026, 12, 1),
            pinned_by=("parked_run1.json", "parked_run2.json"),
        ),
        PARK_ON_SUGGESTION: Patch(
            since=date(2026, 12, 2),
            pinned_by=("parked_run1.json", "parked_run2.json"),
        ),
        TOOL_APPROVAL: Patch(
            since=date(2026, 12, 2),
            pinned_by=(
                "answers_by_deadline.json",
                "approval_bound.json",
                "approval_choices.json",
                "approval_ignore_reason.json",
                "one_person.json",
                "open_calls_run1.json",
                "open_calls_run2.json",
            ),
        ),
        MIRROR_FOLLOWS_RUN: Patch(
            since=date(2026, 12, 2),
            pinned_by=(
                "answers_by_deadline.json",
                "approval_bound.json",
                "approval_ignore_reason.json",
                "branch_reused.json",
                "branch_reused_child.json",
                "cancel_after_end.json",
                "cancel_after_end_kept.json",
                "cut_arguments.json",
                "long_ids_child.json",
                "long_ids_parent.json",
                "mcp_call.json",
                "mcp_list_cancelled.json",
                "mcp_open_cancelled.json",
                "mcp_stateful.json",
                "mirror_follows.json",
                "mirror_refused.json",
                "model_cancel.json",
                "model_mistake.json",
                "one_person.json",
                "open_calls_run1.json",
                "open_calls_run2.json",
                "same_call_continued.json",
                "steps_at_once.json",
            ),
        ),
        MODEL_CALL_CANCEL: Patch(
            since=date(2026, 12, 4),
            pinned_by=(
                "answers_by_deadline.json",
                "approval_bound.json",
                "approval_ignore_reason.json",
                "cut_arguments.json",
                "mcp_call.json",
                "mcp_stateful.json",
                "model_cancel.json",
                "model_mistake.json",
                "one_person.json",
                "open_calls_run1.json",
                "open_calls_run2.json",
                "same_call_continued.json",
            ),
        ),
        IGNORE_REASON: Patch(
            since=date(2026, 12, 4),
            pinned_by=("approval_ignore_reason.json",),
        ),
        CANCEL_AFTER_END: Patch(
            since=date(2026, 12, 4),
            pinned_by=("cancel_after_end.json", "cancel_after_end_kept.json"),
        ),
        BRANCH_REUSE: Patch(
            since=date(2026, 12, 4),
            pinned_by=("branch_reused.json", "branch_reused_child.json"),
        ),
        APPROVAL_BOUND: Patch(
            since=date(2026, 12, 4),
            pinned_by=(
                "answers_by_deadline.json",
                "approval_bound.json",
                "one_person.json",
                "open_calls_run1.json",
            ),
        ),
        BOUNDED_WORKFLOW_IDS: Patch(
            since=date(2026, 12, 4),
            pinned_by=("long_ids_parent.json", "long_ids_child.json"),
        ),
        RESUME_OPEN_CALLS: Patch(
            since=date(2026, 12, 5),
            pinned_by=(
                "answers_by_deadline.json",
                "cut_arguments.json",
                "mcp_stateful.json",
                "one_person.json",
                "open_calls_run1.json",
                "same_call_continued.json",
            ),
        ),
        MCP_LIST_CANCEL: Patch(
            since=date(2026, 12, 5),
            pinned_by=("mcp_list_cancelled.json",),
        ),
        MCP_OPEN_CANCEL: Patch(
            since=date(2026, 12, 5),
            pinned_by=("mcp_open_cancelled.json",),
        ),
        MIRROR_REFUSAL_CLOSES: Patch(
            since=date(2026, 12, 7),
            pinned_by=("mirror_refused.json",),
        ),
        SAME_CALL_SAME_KEY: Patch(
            since=date(2026, 12, 5),
            pinned_by=("same_call_continued.json",),
        ),
        ANSWERS_BY_DEADLINE: Patch(
            since=date(2026, 12, 7),
            pinned_by=("answers_by_deadline.json",),
        ),
        ONE_PERSON_ONE_APPROVER: Patch(
            since=date(2026, 12, 7),
            pinned_by=("one_person.json",),
        ),
    }
)
"""Every patch id of the task workflow -> its record (read-only: shared by every run).

``unknown-stays-unknown`` (tested by ``tests/workflows/test_turns.py``, not saved) and
``progress-before-parking`` (not yet captured) have no saved history of their new path."""
