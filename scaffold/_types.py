"""Core records: what a model call asks for and what it gives back.

Every record is a small frozen dataclass. A :class:`Trace` is the unit the
executor produces, the store records and the trainer credits: one model output
(or one rule aggregation) with its request, result and lineage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import Any, NamedTuple, TypeVar

_R = TypeVar("_R")
_UNSET: Any = object()


def record_maker(cls: type[_R]) -> Callable[..., _R]:
    """A fast keyword-only constructor for a frozen slotted record (the executor's hot path).

    A frozen dataclass ``__init__`` sets each field through ``object.__setattr__``; the
    function returned here sets the slots through their descriptors directly, about twice
    as fast, with the same fields and defaults. Arguments are not validated.

    Examples:
        >>> make_usage = record_maker(Usage)
        >>> make_usage(prompt_tokens=3).total_tokens
        3
    """
    env: dict[str, Any] = {"new": object.__new__, "cls": cls, "UNSET": _UNSET}
    params, body = [], []
    for i, f in enumerate(fields(cls)):  # type: ignore[arg-type]
        env[f"set{i}"] = cls.__dict__[f.name].__set__
        if f.default is not MISSING:
            env[f"d{i}"] = f.default
            params.append(f"{f.name}=d{i}")
            body.append(f"    set{i}(o, {f.name})")
        elif f.default_factory is not MISSING:
            env[f"f{i}"] = f.default_factory
            params.append(f"{f.name}=UNSET")
            body.append(f"    set{i}(o, f{i}() if {f.name} is UNSET else {f.name})")
        else:
            params.insert(sum(1 for p in params if "=" not in p), f.name)
            body.append(f"    set{i}(o, {f.name})")
    source = f"def make(*, {', '.join(params)}):\n    o = new(cls)\n" + "\n".join(body) + "\n    return o\n"
    exec(source, env)  # generated once per record type from its field names; no user input reaches it
    return env["make"]  # type: ignore[no-any-return]


class Status(StrEnum):
    """Outcome of one trace."""

    OK = "ok"
    """The call (or rule) finished and produced text."""
    ERROR = "error"
    """The call failed; ``Trace.error`` says why."""
    CANCELLED = "cancelled"
    """The run stopped (failure elsewhere, timeout, cancellation) while this call was in flight."""
    SKIPPED = "skipped"
    """Never run: a loop stopped before this iteration, or an input was skipped."""


class TraceKind(StrEnum):
    """What produced a trace."""

    MODEL = "model"
    """A model call (``generate``, ``sample``, ``aggregate``)."""
    RULE = "rule"
    """A rule aggregation or set operation (``vote``, ``best_of``, ``map_traces``)."""
    EXTERNAL = "external"
    """An output collected outside the graph and passed in as an input."""
    TOOL = "tool"
    """One tool call an agent made: its arguments, result (the text), error and latency."""


class Message(NamedTuple):
    """One chat message: ``role`` (``"system"``, ``"user"``, ``"assistant"``) and ``content``.

    Requests hold messages as plain ``(role, content)`` pairs (the executor builds exact
    tuples: CPython's garbage collector stops tracking a tuple of strings, and a run keeps
    one per model call); ``Message`` is a named tuple of the same shape, equal to the pair,
    for code that builds requests by hand. The messages of a tool loop carry a third item, a
    mapping: an assistant turn's ``{"tool_calls": [...]}`` or a tool result's
    ``{"tool_call_id": ..., "name": ...}`` (build them with :func:`scaffold.assistant_message`
    and :func:`scaffold.tool_message`).

    Examples:
        >>> Message("user", "2+2?").role
        'user'
    """

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class Request:
    """What one model call sends to a backend.

    Examples:
        >>> Request(messages=(Message("user", "2+2?"),), n=4).n
        4
    """

    messages: tuple[tuple[Any, ...], ...] = ()
    """Chat messages as ``(role, content)`` pairs (``Message`` fits), or ``(role, content, extra)`` for the
    turns of a tool loop (see :class:`Message`); empty when ``prompt`` is used."""
    prompt: str | None = None
    """A raw completion prompt, for backends that take one, instead of ``messages``."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Sampling parameters (``temperature``, ``max_tokens``, ``top_p``, ``stop``...)."""
    n: int = 1
    """How many independent choices this request asks for."""
    logprobs: bool = False
    """Ask the backend for token ids and sampling logprobs."""
    model: str | None = None
    """The concrete model name the alias is bound to (``"openai/gpt-4o-mini"``)."""
    seed: int | None = None
    """A per-call seed derived from the run seed, so scripted and sampling backends are reproducible."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """Tools the model may call, in OpenAI's format (``{"type": "function", "function": {name, description,
    parameters}}``); empty for a plain call."""
    tool_choice: str | Mapping[str, Any] | None = None
    """``"auto"``, ``"none"``, ``"required"`` or one named function; ``None`` leaves it to the server."""

    @property
    def last_content(self) -> str:
        """The content of the last message (the prompt itself for completion requests)."""
        return self.messages[-1][1] if self.messages else (self.prompt or "")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one call (or one choice)."""

    prompt_tokens: int = 0
    """Tokens in the request."""
    completion_tokens: int = 0
    """Tokens generated."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a tool a model asked for: its id, the tool's name and the arguments as JSON text.

    The arguments stay the model's text until the tool validates them, so a malformed call is
    recorded as the model wrote it.

    Examples:
        >>> ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 2}').name
        'add'
    """

    id: str
    """The call's id; the tool's answer names it (``tool_call_id``)."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments, a JSON object as text."""

    def as_dict(self) -> dict[str, Any]:
        """The call in OpenAI's wire format."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Completion:
    """One choice returned by a backend."""

    text: str
    """The generated text."""
    token_ids: tuple[int, ...] | None = None
    """Exact generated token ids, when the backend returns them."""
    logprobs: tuple[float, ...] | None = None
    """Sampling logprob of each generated token, when the backend returns them."""
    usage: Usage = Usage()
    """Token counts attributed to this choice."""
    finish_reason: str | None = None
    """``"stop"``, ``"length"``... as the backend reports it."""
    cost: float | None = None
    """Dollar cost of this choice; ``None`` when the price is unknown (never 0 for unknown)."""
    model: str | None = None
    """The concrete model that answered, if the backend knows it."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Backend-specific extras (e.g. simulated latency)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tools the model asked to call (``finish_reason`` is then usually ``"tool_calls"``)."""


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of one choice's text, as a streaming backend produces it (see ``Backend.stream``).

    The texts of a choice's deltas, in order, concatenate to the final :class:`Completion`'s text.

    Examples:
        >>> Delta(choice=0, text="so the").text
        'so the'
    """

    choice: int
    """Index of the choice (``0`` to ``n - 1``) this piece belongs to."""
    text: str
    """New text since the choice's previous delta (may be empty when only tokens arrived)."""
    token_ids: tuple[int, ...] | None = None
    """Token ids generated since the previous delta, when the backend gives them."""
    logprobs: tuple[float, ...] | None = None
    """Sampling logprobs of those tokens, when asked for and given."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The last item of a stream: the same completions ``complete`` would have returned, one per choice.

    Examples:
        >>> Finished((Completion(text="4"),)).completions[0].text
        '4'
    """

    completions: tuple[Completion, ...]
    """One record per choice, in choice order, with usage, finish reason, token ids and cost."""


StreamItem = Delta | Finished
"""What ``Backend.stream`` yields: any number of :class:`Delta`, then exactly one :class:`Finished`."""


@dataclass(frozen=True, slots=True)
class Trace:
    """One recorded output of a run: a model call, a rule aggregation or an external input.

    Examples:
        >>> t = Trace(id="r1/solve#0", run_id="r1", node="solve", index=0, text=r"\\boxed{4}", answer="4")
        >>> t.ok
        True
    """

    id: str
    """Unique and deterministic within a run: ``{run_id}/{node}#{index}``."""
    run_id: str
    """The run this trace belongs to."""
    node: str
    """Name of the graph node that produced it (loop iterations carry an ``@i`` suffix)."""
    index: int
    """Position inside its node's output set."""
    kind: TraceKind = TraceKind.MODEL
    """What produced it."""
    model: str | None = None
    """The model alias (``"solver"``); ``None`` for rules and external inputs."""
    request: Request | None = None
    """What was sent to the backend (model traces only)."""
    text: str = ""
    """The output text."""
    answer: str | None = None
    """The extracted final answer (``\\boxed{...}`` by default), ``None`` if none was found."""
    token_ids: tuple[int, ...] | None = None
    """Generated token ids, when the backend gave them."""
    logprobs: tuple[float, ...] | None = None
    """Sampling logprobs of the generated tokens, when the backend gave them."""
    usage: Usage = Usage()
    """Token counts."""
    cost: float | None = None
    """Dollar cost, ``None`` when unknown."""
    latency: float = 0.0
    """Seconds from sending the request to receiving the answer (0 for rules)."""
    started_at: float = 0.0
    """``time.time()`` when the call was sent."""
    inputs: tuple[str, ...] = ()
    """Lineage: ids of the traces this one read, in the order they were shown."""
    status: Status = Status.OK
    """Outcome."""
    error: str | None = None
    """Error type and message when ``status`` is not ``OK``."""
    attempt: int = 1
    """Which attempt produced it (backends with retries set this)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Extras: vote counts, scores, finish reason, simulated latency..."""

    @property
    def ok(self) -> bool:
        """True when the trace finished successfully."""
        return self.status is Status.OK
