"""The task workflow's patch ids, in one place: each with the day it was made, the saved
histories that pin its new path, and when it may be deprecated.

A change to workflow code that changes the commands a run emits is guarded by
``workflow.patched(ID)`` (docs/replay-and-upgrades.md): a run recorded before the change replays
the old path, one started after it records a marker (``core_patch``) and takes the new one. Each
id below is such a guard; ``PATCHES`` says, for each, when it was made (``since``) and which saved
histories in ``tests/histories`` carry its marker (``pinned_by``: they replay its new path; the
histories captured before it, without the marker, replay its old one).

When a patch may be deprecated. ``workflow.deprecate_patch(ID)`` in place of ``patched(ID)``, and
later the removal of the old path's code, are safe once no run that could take the old path can
be replayed any more: every task whose run started before the patch's ``since`` has closed, and
the namespace's retention (30 days as ``agent-tasks setup`` sets it, ``DEFAULT_RETENTION``) has
passed since, so no query, reset or replay reaches its history. At that point the saved
histories of the old path leave ``tests/histories`` with the old code, and those in
``pinned_by`` stay (they replay the new path). ``deprecation_after`` gives the earliest day for a
deployment whose tasks all closed by the patch's day. ``tests/workflows/test_patches.py`` checks
that every ``patched`` call in ``workflows/`` names an id of this module and that ``pinned_by``
is exactly the histories carrying each marker.

Constants and a frozen table only (the module is read inside the workflow sandbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from types import MappingProxyType

RETENTION = timedelta(days=30)
"""The namespace retention ``agent-tasks setup`` sets (``worker.DEFAULT_RETENTION``): how long
the history of a closed run stays replayable."""


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
        """The earliest day ``deprecate_patch`` may replace ``patched`` (module docstring): the
        patch's day plus the retention, for a deployment whose tasks started before it had all
        closed by then (later for any that closed later: its close plus the retention)."""
        return self.since + RETENTION


MIRROR_WITHOUT_DEBOUNCE = "mirror-without-debounce-timer"
"""Patch id: the mirror starts as soon as a write waits, without the 200 ms debounce timer
(whose firing the dev server rounds to about a second, which made the mirror lag ~1 s)."""

CANCEL_RULE = "one-cancellation-rule"
"""Patch id: after a cancel request no step, model call or wait of the agent starts or goes on
(``AgentContext.cancelled``); the workflow cancels what runs and waits for it to end
(``TaskWorkflow._cancelled``). Runs recorded before it cancelled the agent's asyncio task."""

UNKNOWN_STAYS_UNKNOWN = "unknown-stays-unknown"
"""Patch id: a step that ended ``unknown`` and is reached again returns its ``unknown``
outcome; it runs again only when someone asked (``AgentContext.retry``, ``retry_step``). Runs
recorded before it ran such a step again under its old key."""

TOOL_CALL_BOUNDS = "tool-call-bounds"
"""Patch id: a call that names no tool, or whose arguments pass the payload bound, fails its
step without running (the model hears why); runs recorded before it failed the task on an
empty name and passed cut arguments to the tool."""

PROGRESS_BEFORE_PARKING = "progress-before-parking"
"""Patch id: ``checkpoint()`` parks the agent for continue-as-new only after it did new work in
the run. Agent code memoized by step name starts over from the top in each run, reading each
memoized result (an activity apiece); when those reads alone passed the history length at
which Temporal suggests continue-as-new, every run parked before any new step and the task
continued as new for ever without progress."""

TOOL_SPECS_BY_ACTIVITY = "tool-specs-by-activity"
"""Patch id: the lookup of an agent's tools is an activity, no longer a local activity. A local
activity's result can reach the workflow in the next workflow task when it is first run but in
the same one on replay (seen with continue-as-new under load: the commands after it moved to
another workflow task, and a query of the run then failed replay); an activity's result is an
event of its own, delivered the same way both times."""

APP_LIFECYCLE = "app-lifecycle"
"""Patch id: a recorded task that waits for input or children and has nothing left to wait for
goes back to ``queued`` after an answer or a child's end (``workflows.lifecycle``). Runs
recorded before it never had those statuses, so they never reach it."""

ANSWERS_BOUND = "answers-bound-to-requests"
"""Patch id: an answer by signal is bound to one request (``inbox.take_answer``: without an
input id only to a request open when it arrives; a late one is recorded as late), one early
answer kept per request, up to ``MAX_EARLY_ANSWERS``."""

TURN_RULES = "turn-rules"
"""Patch id: each run of an agent is marked in the log (``run_started``, ``run_finished``,
``run_failed``) and a failed run is rolled back (``rolled_back``), the runtime's turn rules
(docs/agent-tasks.md). Runs recorded before it have no run notes."""

CONTINUE_WITHOUT_MIRROR = "continue-as-new-without-mirror"
"""Patch id: a run continues-as-new when Temporal suggests it without waiting for the mirror;
what Neo4j lacks goes to the next run's ``mirror_backlog``. Before it, a run waited for the
mirror, so a long Neo4j outage grew its history towards Temporal's hard limit."""

MIRROR_DRAIN_BOUND = "mirror-drain-bound"
"""Patch id: ``MIRROR_DRAIN_WAIT`` bounds a mirror call in flight when continue-as-new is
suggested."""

PARK_ON_SUGGESTION = "park-on-suggestion"
"""Patch id: ``checkpoint()`` parks once Temporal suggests continue-as-new, read from the run's
own info, not only once the run loop has set ``checkpoint_due``. The loop sets the flag between
its mirror calls, so while one call was slow (a Neo4j write taking a second, or held up to
``MIRROR_DRAIN_WAIT`` by a stall) a fast agent went on well past the suggestion, and a short task
could end in its first run, its history hundreds of events past it."""

TOOL_APPROVAL = "tool-approval"
"""Patch id: a call of a tool that needs approval is checked by the worker and asked about
before it runs. Runs recorded before it had no such tools (``ToolSpec.approval`` is new), so
they never reach it."""

MIRROR_FOLLOWS_RUN = "mirror-follows-run"
"""Patch id: the current run is mirrored by a call that follows it (``MirrorInput.follow``)
instead of a call per waiting write; runs recorded before it call once per batch."""

MODEL_CALL_CANCEL = "model-call-cancel"
"""Patch id: the model call is scheduled with a heartbeat timeout (``MODEL_HEARTBEAT``) and a
longer start-to-close timeout (``MODEL_LONGEST_CALL``), and the workflow waits for it to
acknowledge a cancel (``WAIT_CANCELLATION_COMPLETED``) before the task goes on to its end. The
activity heartbeats every second (``activities.heartbeat.CANCEL_BEAT_S``), so a cancel reaches
it within about two seconds and closes its HTTP request, and the task's ``cancelled`` comes
after the last token it published. Runs recorded before dropped the call at once
(``TRY_CANCEL``): the task ended while the model's request ran on to its end, its tokens still
published."""

IGNORE_REASON = "ignore-with-reason"
"""Patch id: an ignore that gives a reason (``ApprovalChoice.text``) ends the step with
``IGNORED`` and the reason (``ignored_result``), so the model reads why (the fix of
openai-agents-python#2658 and #3359: a rejection reason dropped before the model saw it).
Runs recorded before it ended every ignored call with ``IGNORED`` alone."""

CANCEL_AFTER_END = "cancel-after-end"
"""Patch id: a cancel request that reaches a task already ended ``done`` or ``failed`` (its
workflow still open while its children run) is recorded without changing its status
(``_cancelled_after_end``): the view, the search attribute, Neo4j and Temporal (``COMPLETED``)
keep saying how it ended. Runs recorded before it closed such a workflow as cancelled while the
task said ``done``."""

BRANCH_REUSE = "branch-reuses-before-point"
"""Patch id: an agent task's branch, once its log is copied, takes over what its source settled
before the branch point (``reuse_before_point``): agent code run again from the top reads those
steps' recorded results and those questions' answers instead of running and asking them again.
Branches recorded before it started with no steps and no answers."""

BOUNDED_WORKFLOW_IDS = "bounded-workflow-ids"
"""Patch id: a task's workflow id that would pass 255 characters (a long project id and a
long name; SQL persistence's ``VARCHAR(255)``) is cut with a digest (``task_workflow_id``) in
the commands that name another task (a child's start, the parent's ``child_ended`` signal, a
cascade's cancel; ``workflows.spawning.task_id``). Runs recorded before it named such a task
by its plain id, which a PostgreSQL cluster refuses."""

APPROVAL_BOUND = "approval-bound-to-call"
"""Patch id: an approval request names the digest of the exact call (``ApprovalAsk.digest``;
an answer naming another is refused ``approval_stale``), closes as ``expired`` when the
tool's ``approval_expires_s`` passes first (a workflow timer; the step fails and the model
reads it), and a tool with ``approvers`` over 1 asks again until that many distinct people
accepted. Requests asked before it carry none of these and are decided by one answer."""

RESUME_OPEN_CALLS = "resume-open-calls"
"""Patch id: the tool loop keeps its turn's tool calls in ``AgentRun.open_calls`` until each
ended, so a run that continues as new while one waits for approval leaves them to the next
run, which resumes them first (the same step names: the waiting call on its same request, its
answer running it once) and only then calls the model. Runs recorded before it asked the
model again, whose new call opened a new request."""

SAME_CALL_SAME_KEY = "same-call-same-key"
"""Patch id: a tool loop's call of the same tool with the same arguments as an earlier call
whose step ended ``unknown`` (``AgentRun.unknown_calls``; in this run, or one before it:
``continue``, ``resume``, continue-as-new) runs as a retry of that step, under its idempotency
key (a ``decision`` citing it), so a server that deduplicates by the key performs the effect
once. Runs recorded before it ran such a call as a new step under a new key."""

MCP_LIST_CANCEL = "mcp-list-cancel"
"""Patch id: an MCP server's listing heartbeats and a cancel request of the task cancels it
(``registry.MCP_LIST_HEARTBEAT``), waiting for it to end; runs recorded before it waited for
the listing (up to three attempts of a minute) before the task could end ``cancelled``."""

MCP_OPEN_CANCEL = "mcp-open-cancel"
"""Patch id: the open of a stateful MCP server's session heartbeats and a cancel request of the
task cancels it (as ``MCP_LIST_CANCEL`` the listing), waiting for it to end; runs recorded
before it waited for the open (up to three attempts of a minute)."""

ANSWERS_BY_DEADLINE = "answers-by-deadline"
"""Patch id: an answer by signal to an open request whose deadline has passed by the
workflow's time (``workflow.now()``) is recorded ``late`` and changes nothing; the request
closes at its timer as it would have unanswered. Temporal hands a workflow the signals of a
workflow task before the timers that fired in it (a worker down at the deadline sees both at
once), so runs recorded before it took such an answer and then closed the request too. The
``respond`` update's validator refuses the same answer ``input_closed`` (validators never run
on replay: no patch)."""

ONE_PERSON_ONE_APPROVER = "one-person-one-approver"
"""Patch id: a second accept of a call by an author whose name is one of the earlier
approvers' under another spelling (``contract.person_key``: case, white space, Unicode
forms) is recorded ``rejected`` when it comes by signal, so one person never counts as two
approvers. Runs recorded before it compared names exactly. The ``respond`` update's validator
refuses it ``approver_repeated`` (no patch: validators never run on replay)."""

MIRROR_REFUSAL_CLOSES = "mirror-refusal-closes"
"""Patch id: a closing task whose mirror call the graph store refused for its data, the refusal
kept in the store for a later retry (``MIRROR_REFUSED``), completes with the refusal in its view
(``MirrorCalls.refused``); runs recorded before it paused and called again for ever, and the
finished task stayed running."""

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
"""Every patch id of the task workflow (the constants above) -> its record (read-only: the
module is shared by every run).

Two have no saved history of their new path: ``unknown-stays-unknown`` (run by
``tests/workflows/test_turns.py``'s unknown-step tests, not saved) and ``progress-before-parking``
(neither saved nor isolated by a test yet: a gap to fill with a capture)."""
