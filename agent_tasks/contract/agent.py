"""The agent half of the task model: what an agent task is started with, and the inputs and results
of its activities (tools and the model call).

Activity inputs carry references, never bodies already in the history (a tool reads its call's
arguments, the model its transcript, back by seq), so the history grows with the events, not with
the turns. Fields added later are optional.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictStr, model_validator

from agent_tasks.contract.text import ShortText

AgentName = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
"""A registered agent's or tool's name: 1 to 64 of ``[A-Za-z0-9_.-]``."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budgets(_Spec):
    """Limits of one agent run (None: no limit); one reached ends the task ``failed`` with an
    ``error`` event naming it."""

    max_rounds: int | None = Field(default=None, ge=1)
    """Model calls."""
    max_tool_calls: int | None = Field(default=None, ge=1)
    """Tool calls (steps run)."""
    max_seconds: float | None = Field(default=None, gt=0)
    """Workflow time from the agent's start (seconds)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Model tokens, input and output together."""


class ModelSpec(_Spec):
    """Which model the tool-calling loop calls."""

    provider: Literal["scripted", "openai"] = "scripted"
    """``scripted``: a deterministic script registered on the worker (tests, the demo); ``openai``:
    an OpenAI-compatible chat completions API (configured by environment)."""
    model: ShortText = "demo"
    """The model's name (``openai``) or the script's name (``scripted``)."""
    system: Annotated[StrictStr, Field(max_length=4_000)] | None = None
    """The system prompt."""
    stream: bool = Field(default=False, exclude_if=lambda value: value is False)
    """``openai``: stream the response, its tokens published to the broker as they arrive
    (``activities.model``); the turn is recorded whole either way."""


class McpServer(_Spec):
    """An MCP server whose tools an agent may call (``activities.mcp``): a command the worker runs
    over stdio, or a streamable HTTP URL; its tools reach the model as ``{name}_{tool}``. All of it
    is in the history, so secrets never are: HTTP headers are named and taken from the worker."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9\-]+$")]
    """The server's name in this spec: the prefix of its tools' names (``{name}_{tool}``)."""
    command: Annotated[StrictStr, Field(min_length=1, max_length=1_000)] | None = None
    """stdio: the program the worker starts for each call, or once per agent run when
    ``stateful``."""
    args: list[Annotated[StrictStr, Field(max_length=1_000)]] = Field(
        default_factory=list, max_length=64
    )
    """stdio: the program's arguments."""
    env: dict[str, Annotated[StrictStr, Field(max_length=1_000)]] = Field(
        default_factory=dict, max_length=64
    )
    """stdio: environment variables over the MCP SDK's safe defaults (``HOME``, ``PATH``...); no
    secrets: they are in the history."""
    url: Annotated[StrictStr, Field(pattern=r"^https?://", max_length=2_000)] | None = None
    """Streamable HTTP: the server's endpoint."""
    headers: AgentName | None = None
    """Streamable HTTP: the name of a header set in the worker's configuration
    (``AGENT_TASKS_MCP_HEADERS``); a worker without it fails the call, not retried."""
    approval: bool | list[AgentName] = False
    """A person approves each call before it runs: ``True`` for every tool, or the tools' names
    (without the prefix)."""
    idempotent: bool | list[AgentName] = False
    """Tools that may be retried with the same idempotency key: ``True`` for all, or names; a tool
    the server marks ``idempotentHint`` or ``readOnlyHint`` is too. Others run at most once (a lost
    worker or connection leaves the step ``unknown``)."""
    tools: list[AgentName] | None = None
    """Only these of the server's tools (None: all it lists)."""
    start_to_close_s: float = Field(default=60.0, gt=0)
    """Longest attempt of one call (seconds)."""
    heartbeat_s: float = Field(default=10.0, gt=0)
    """Heartbeat timeout of a call (seconds): how soon a dead worker is noticed."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts of an idempotent tool's call."""
    stateful: bool = Field(default=False, exclude_if=lambda value: not value)
    """One session per agent run (``docs/mcp.md``, "Sessions"), held by the worker that opened it
    and closed when the run ends; a lost worker fails the next call ``McpSessionLost``. False: a
    session per call."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give one of command (stdio) or url")
        if self.url is None and self.headers is not None:
            raise ValueError(f"MCP server {self.name!r}: headers are for a url")
        return self

    def named(self, rule: bool | list[str], tool: str) -> bool:
        """Whether a per-server rule (``approval``, ``idempotent``) covers ``tool``."""
        return rule if isinstance(rule, bool) else tool in rule


class McpCall(BaseModel):
    """Which MCP server and tool a tool spec runs (``ToolSpec.mcp``, ``ToolInput.mcp``)."""

    model_config = ConfigDict(frozen=True)

    server: McpServer
    """The server, as the agent's spec names it."""
    tool: str
    """The tool's name on the server."""


class ToolOffer(BaseModel):
    """A tool as the model is offered it (name, description, JSON Schema of the arguments)."""

    name: str
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=dict)


class AgentSpec(_Spec):
    """What runs an agent task (``TaskStart.agent``)."""

    name: AgentName = "tool_loop"
    """A registered agent: agent code (``workflows.agents.agent``) or the ready loop
    ``tool_loop``."""
    tools: list[AgentName] = Field(default_factory=list, max_length=64)
    """The tools the agent may call (registered on the worker)."""
    model: ModelSpec | None = None
    """The model of ``tool_loop``."""
    budgets: Budgets = Field(default_factory=Budgets)
    """Limits of the run."""
    input: dict[str, JsonValue] = Field(default_factory=dict)
    """Free input for agent code (small: it is carried with the task)."""
    mcp_servers: list[McpServer] = Field(
        default_factory=list, max_length=8, exclude_if=lambda value: not value
    )
    """MCP servers whose tools the agent may call besides ``tools`` (``activities.mcp``)."""

    @model_validator(mode="after")
    def _mcp_prefixes_are_the_servers(self) -> AgentSpec:
        """A server's name prefixes its tools' names, so two servers of one name, or a worker tool
        named with a server's prefix, are refused: the later one would silently take the name."""
        names = [server.name for server in self.mcp_servers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"MCP server {twice[0]!r} is named twice (its tools' prefix)")
        for tool in self.tools:
            prefix = next((name for name in names if tool.startswith(f"{name}_")), None)
            if prefix is not None:
                raise ValueError(
                    f"tool {tool!r} starts with {prefix + '_'!r}, the prefix of MCP server "
                    f"{prefix!r}'s tools"
                )
        return self


class TokenUsage(BaseModel):
    """Tokens of one model call."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)


class ToolCall(BaseModel):
    """A tool call the model asks for."""

    name: str
    """The tool's name (may name no registered tool: that step then fails)."""
    arguments: str = "{}"
    """The arguments as JSON text."""
    call_id: str | None = None
    """The model's id of the call (links its result)."""
    arguments_full_length: int | None = Field(
        default=None, ge=0, exclude_if=lambda value: value is None
    )
    """Set when the model call cut ``arguments`` past ``MAX_PAYLOAD_CHARS`` (such a call is refused,
    never run): the full text's characters, which its event records."""
    arguments_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", exclude_if=lambda value: value is None
    )
    """With ``arguments_full_length``: the SHA-256 hex of the full text."""


class ModelTurn(BaseModel):
    """What one model call returned: text, tool calls, or both; no tool calls is the final
    answer."""

    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    content_full_length: int | None = Field(
        default=None, ge=0, exclude_if=lambda value: value is None
    )
    """Set when the model call cut ``content`` to ``MAX_PAYLOAD_CHARS`` (``bound_text``): the full
    text's characters, recorded as the message's ``full_length``."""
    content_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", exclude_if=lambda value: value is None
    )
    """With ``content_full_length``: the SHA-256 hex of the full text (``full_sha256``)."""
    mistake: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set when the model call could not take the answer as sent (``activities.chat_protocol``): its
    tool calls were dropped, and this is recorded as a user message for the model's next call."""


class ModelInput(BaseModel):
    """Input of the model activity: references only."""

    workflow_id: str
    """The task."""
    run_id: str
    """The run to read the newest events from (older ones come from the graph store or earlier
    runs)."""
    up_to_seq: int
    """The transcript is the task's events 1 to up_to_seq."""
    model: ModelSpec
    """Which model."""
    tools: list[str]
    """The tools offered to the model."""
    mcp_tools: list[ToolOffer] = Field(default_factory=list, exclude_if=lambda value: not value)
    """The MCP servers' tools offered besides ``tools``, as the run listed them."""


class ToolInput(BaseModel):
    """Input of a tool activity: references, and the call's own arguments."""

    workflow_id: str
    """The task."""
    run_id: str
    """The run holding the call event."""
    call_seq: int
    """Seq of the ``tool_call`` event whose payload is the arguments (JSON text)."""
    step_name: str
    """The step running the call."""
    idempotency_key: str
    """``{workflow_id}/{step}/{attempt}``: the same on every retry of this attempt."""
    arguments: str | None = None
    """The arguments (the ``tool_call`` event's payload), so the activity queries nothing per step
    (a query per step fills the task's query buffer when hundreds run at once). None in older
    inputs: read by ``call_seq``."""
    mcp: McpCall | None = Field(default=None, exclude_if=lambda value: value is None)
    """An MCP server's tool (``activities.mcp``); None for the worker's own tools."""


class ToolOutput(BaseModel):
    """What a tool returned, as text bounded like a payload (the result model as JSON)."""

    text: str
    """At most ``MAX_PAYLOAD_CHARS`` characters."""
    full_length: int
    """Characters of the full text."""
    full_sha256: str
    """SHA-256 hex of the full text."""
