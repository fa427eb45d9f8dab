"""The agent half of the task model: what an agent task is started with, and the inputs and
results of its activities (tools and the model call).

Activity inputs carry references, never bodies already in the history: a tool reads its call's
arguments, and the model its transcript, back from the task by seq (so the history grows with
the events, not with the turns: a model input that carried the transcript would make each
turn's history larger than the last). Fields added later are optional.
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
    """Limits of one agent run; each one reached ends the task ``failed`` with an ``error``
    event that names it. None: no limit."""

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
    """``scripted``: a deterministic script registered on the worker (tests, the demo);
    ``openai``: an OpenAI-compatible chat completions API (configured by environment)."""
    model: ShortText = "demo"
    """The model's name (``openai``) or the script's name (``scripted``)."""
    system: Annotated[StrictStr, Field(max_length=4_000)] | None = None
    """The system prompt."""
    stream: bool = Field(default=False, exclude_if=lambda value: value is False)
    """``openai``: stream the response (``stream=True``), its tokens published to the broker
    as they arrive (``activities.model``); the turn is recorded whole either way. (The scripted
    provider always publishes its turn's tokens.) Added later: left out of the JSON while
    False, so an old task's argument digest is unchanged."""


class McpServer(_Spec):
    """An MCP server whose tools an agent may call (``AgentSpec.mcp_servers``;
    ``activities.mcp``): a command the worker runs over stdio, or a streamable HTTP URL. Its
    tools reach the model as ``{name}_{tool}``. Everything here is in the task's history: a
    secret never is (HTTP headers are named, ``headers``, and taken from the worker's
    configuration)."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9\-]+$")]
    """The server's name in this spec: the prefix of its tools' names (``{name}_{tool}``)."""
    command: Annotated[StrictStr, Field(min_length=1, max_length=1_000)] | None = None
    """stdio: the program the worker starts for each call (one session per call), or once
    for a run of the agent when ``stateful``."""
    args: list[Annotated[StrictStr, Field(max_length=1_000)]] = Field(
        default_factory=list, max_length=64
    )
    """stdio: the program's arguments."""
    env: dict[str, Annotated[StrictStr, Field(max_length=1_000)]] = Field(
        default_factory=dict, max_length=64
    )
    """stdio: environment variables over the MCP SDK's safe defaults (``HOME``, ``PATH``...;
    none of the worker's other variables); no secrets: they are in the history."""
    url: Annotated[StrictStr, Field(pattern=r"^https?://", max_length=2_000)] | None = None
    """Streamable HTTP: the server's endpoint."""
    headers: AgentName | None = None
    """Streamable HTTP: the name of a set of headers in the worker's configuration
    (``AGENT_TASKS_MCP_HEADERS``, or ``build_worker(mcp_headers=...)``); a worker without it
    fails the call, not retried."""
    approval: bool | list[AgentName] = False
    """A person approves each call before it runs: ``True`` for every tool of the server, or
    the names (the server's, without the prefix) of the tools that need it."""
    idempotent: bool | list[AgentName] = False
    """Tools that may run again (retried with the same idempotency key): ``True`` for all, or
    names; a tool the server marks ``idempotentHint`` or ``readOnlyHint`` is too. The others
    run at most once: a worker or connection lost during the call leaves the step
    ``unknown``."""
    tools: list[AgentName] | None = None
    """Only these of the server's tools (None: all it lists)."""
    start_to_close_s: float = Field(default=60.0, gt=0)
    """Longest attempt of one call (seconds)."""
    heartbeat_s: float = Field(default=10.0, gt=0)
    """Heartbeat timeout of a call (seconds): a dead worker is noticed this soon, and a cancel
    reaches the call (and the server, as ``notifications/cancelled``) within about a second."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts of an idempotent tool's call."""
    stateful: bool = Field(default=False, exclude_if=lambda value: not value)
    """One session for a run of the agent (docs/mcp.md, "Sessions"): opened by the run's first
    use of the server, held by the worker that opened it, its listing and calls run on that
    worker's own task queue, closed when the agent's run ends. A worker that dies takes the
    session (and the server's state) with it: the next call fails ``McpSessionLost`` and the
    one after opens a new session. False (left out of the JSON): a session per call."""

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
    """A registered agent: agent code (``workflows.agents.agent``) or the ready tool-calling
    loop ``tool_loop``."""
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
    """MCP servers whose tools the agent may call besides ``tools`` (``activities.mcp``).
    Added later: left out of the JSON while empty, so an old task's argument digest is
    unchanged."""

    @model_validator(mode="after")
    def _mcp_prefixes_are_the_servers(self) -> AgentSpec:
        """A server's name is the prefix of its tools' names (``{name}_{tool}``): two servers
        of one name, or a worker's tool named with a server's prefix, would give two tools
        one name, the later listed silently taking it."""
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
    """Set when the model call cut ``arguments``, which were longer than an event holds
    (``MAX_PAYLOAD_CHARS``; such a call is refused, never run): the characters of the full
    text, which the call's event records and its refusal names. Added later: left out of the
    JSON while unset."""
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
    """Set when the model call cut ``content`` to ``MAX_PAYLOAD_CHARS`` (``bound_text``: a
    longer answer would only be cut by the event that records it, after crossing Temporal
    whole): the characters of the full text, recorded as the message's ``full_length``. Added
    later: left out of the JSON while unset."""
    content_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", exclude_if=lambda value: value is None
    )
    """With ``content_full_length``: the SHA-256 hex of the full text (``full_sha256``)."""
    mistake: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set when the model call could not take the answer as the model sent it
    (``activities.chat_protocol.too_large``): its tool calls were dropped, and this is what the
    model reads next (the workflow records it as a user message and calls the model again).
    Added later: left out of the JSON while unset."""


class ModelInput(BaseModel):
    """Input of the model activity: references only."""

    workflow_id: str
    """The task."""
    run_id: str
    """The run to read the newest events from (older ones come from Neo4j or earlier runs)."""
    up_to_seq: int
    """The transcript is the task's events 1 to up_to_seq."""
    model: ModelSpec
    """Which model."""
    tools: list[str]
    """The tools offered to the model."""
    mcp_tools: list[ToolOffer] = Field(default_factory=list, exclude_if=lambda value: not value)
    """The MCP servers' tools offered besides ``tools`` (as the run listed them; a worker
    registers no spec of theirs). Added later: empty in older inputs."""


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
    """The arguments (the ``tool_call`` event's payload, at most ``MAX_PAYLOAD_CHARS``
    characters: a longer call is refused before it runs), so the activity reads nothing back:
    a query per step filled the server's query buffer of the task ("consistent query buffer is
    full") once hundreds of steps ran at once. None in inputs recorded before (added later):
    the activity reads them by ``call_seq``."""
    mcp: McpCall | None = Field(default=None, exclude_if=lambda value: value is None)
    """An MCP server's tool: the server and the tool's name there (``activities.mcp``).
    Added later: None for the worker's own tools."""


class ToolOutput(BaseModel):
    """What a tool returned, as text bounded like a payload (the result model as JSON)."""

    text: str
    """At most ``MAX_PAYLOAD_CHARS`` characters."""
    full_length: int
    """Characters of the full text."""
    full_sha256: str
    """SHA-256 hex of the full text."""
