"""Tools an agent may call: a typed Python function (sync or async), a graph, or a tool of an MCP server.

:func:`tool` turns a function into a :class:`Tool`. Its JSON schema is pydantic's, made from the
signature (types, defaults) and the docstring (the summary describes the tool, an ``Args:``
section each parameter); arguments are validated by the same pydantic model before the function
is called. A tool never raises into the agent: :meth:`Tool.call` returns a :class:`ToolOutcome`
whose ``error`` is a typed :class:`~scaffold.ToolError` (unknown arguments, a timeout, an
exception, a result that is not JSON, a result too long) and whose ``text`` is what the model is
shown: the result, or the error.

Examples:
    >>> import asyncio
    >>> @tool
    ... def add(a: int, b: int) -> int:
    ...     '''Add two integers.
    ...
    ...     Args:
    ...         a: The first term.
    ...         b: The second term.
    ...     '''
    ...     return a + b
    >>> add.spec()["function"]["parameters"]["properties"]["a"]
    {'description': 'The first term.', 'title': 'A', 'type': 'integer'}
    >>> asyncio.run(add.call('{"a": 2, "b": 3}')).text
    '5'
    >>> print(asyncio.run(add.call('{"a": "two"}')).text)
    ToolArgumentsError: add: a: Input should be a valid integer, unable to parse string as an integer; b: Field required
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_type_hints, overload

from scaffold._errors import (
    GraphDefinitionError,
    ToolArgumentsError,
    ToolError,
    ToolFailed,
    ToolResultError,
    ToolResultTooLarge,
    ToolTimeout,
)
from scaffold._limits import InFlightLimit

if TYPE_CHECKING:
    from pydantic import BaseModel

    from scaffold._types import Trace

__all__ = ["Tool", "ToolContext", "ToolOutcome", "current_tool_call", "tool", "tool_result_text"]

DEFAULT_MAX_RESULT_CHARS = 20_000
"""How much of a tool's result the model is shown by default (about 5,000 tokens); the rest is cut."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call gave: the text the model is shown, the typed error if it failed, and its latency."""

    text: str
    """The result as text, or the error's message (what goes back to the model)."""
    error: ToolError | None = None
    """``None`` when the tool answered; the typed failure otherwise (a cut result included)."""
    latency: float = 0.0
    """Seconds the call took, validation included."""
    metadata: Mapping[str, Any] | None = None
    """Extras a tool reports (a sub-run's id, an MCP error flag...)."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool running inside an agent can know of its call: see :func:`current_tool_call`."""

    run_id: str
    """The run of the agent."""
    trace_id: str
    """The id the call's ``tool`` trace is recorded under (stable across resumes)."""
    models: Mapping[str, Any]
    """The run's models by alias (a graph tool runs its sub-run on them)."""
    store: Any = None
    """The store the run records to (``None`` when it records nothing)."""
    candidates: tuple[Trace, ...] = ()
    """The candidates an aggregating agent (``sf.aggregate(..., tools=...)``) read, in the order it read them
    (what ``{candidates}`` would show); empty for a plain ``sf.agent``. The candidate tools
    (:func:`scaffold.tools.candidate_tools`) read them."""


_CURRENT: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar("scaffold_tool_call", default=None)


def current_tool_call() -> ToolContext | None:
    """The call being made, inside a tool that an agent called (``None`` elsewhere).

    Examples:
        >>> current_tool_call() is None
        True
    """
    return _CURRENT.get()


def set_tool_call(context: ToolContext | None) -> contextvars.Token[ToolContext | None]:
    """Make ``context`` the current call (the agent loop does, around each call)."""
    return _CURRENT.set(context)


def reset_tool_call(token: contextvars.Token[ToolContext | None]) -> None:
    """Undo :func:`set_tool_call`."""
    _CURRENT.reset(token)


class Tool:
    """Something an agent can call: a name, a description, a JSON schema of its parameters, and :meth:`invoke`.

    Subclass it (or use :func:`tool`) and implement :meth:`invoke`; :meth:`call` adds what every tool
    shares: JSON parsing, validation (:meth:`validate`), the timeout, the in-flight limit, and turning the
    result into text.

    ``timeout`` (seconds) bounds one call; ``max_in_flight`` how many calls run at once (across runs that
    share the tool); ``max_result_chars`` how much of the result the model is shown.
    """

    def __init__(self, name: str, description: str, parameters: Mapping[str, Any], *,
                 timeout: float | None = None, max_in_flight: int | None = None,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise GraphDefinitionError(f"tool name {name!r}: use 1 to 64 letters, digits, '_' or '-'")
        if timeout is not None and not timeout > 0:
            raise GraphDefinitionError(f"tool {name!r}: timeout must be positive, got {timeout!r}")
        if max_result_chars < 1:
            raise GraphDefinitionError(f"tool {name!r}: max_result_chars must be at least 1")
        self.name = name
        self.description = description
        self.parameters = dict(parameters)
        self.timeout = timeout
        self.max_result_chars = max_result_chars
        self.max_in_flight = max_in_flight
        self.limit = InFlightLimit(max_in_flight) if max_in_flight is not None else None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its in-flight limit (a Ray worker or another process gets a fresh one of its own)."""
        state = dict(self.__dict__)
        state["limit"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.max_in_flight is not None:
            self.limit = InFlightLimit(self.max_in_flight)

    def spec(self) -> dict[str, Any]:
        """The tool in OpenAI's function-calling format (what a request's ``tools`` holds)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments the function is called with; raise :class:`~scaffold.ToolArgumentsError` if they do not
        fit. The base class checks nothing beyond a JSON object (an MCP server validates its own)."""
        return arguments

    async def invoke(self, arguments: dict[str, Any]) -> Any:
        """Run the tool on validated arguments; return any JSON-serialisable value (or text)."""
        raise NotImplementedError

    async def call(self, arguments: str | Mapping[str, Any]) -> ToolOutcome:
        """Parse, validate and run one call; never raises (but for cancellation): failures are the outcome's
        ``error``, and its ``text`` says what went wrong."""
        started = time.perf_counter()
        try:
            result = await self._call(arguments)
            text = tool_result_text(result, self.name)
        except ToolError as exc:
            return ToolOutcome(f"{type(exc).__name__}: {exc}", exc, time.perf_counter() - started, self.recorded())
        latency = time.perf_counter() - started
        if len(text) > self.max_result_chars:
            error = ToolResultTooLarge(f"{self.name}: the result has {len(text)} characters; the first "
                                       f"{self.max_result_chars} were shown")
            shown = text[: self.max_result_chars] + f"\n[cut: {len(text)} characters, the first " \
                                                    f"{self.max_result_chars} shown]"
            return ToolOutcome(shown, error, latency, self.recorded())
        return ToolOutcome(text, None, latency, self.recorded())

    def recorded(self) -> Mapping[str, Any] | None:
        """Extras recorded with each call's trace (a sub-run's id, whether the network was cut...); none by
        default."""
        return None

    async def _call(self, arguments: str | Mapping[str, Any]) -> Any:
        parsed = _parse_arguments(arguments, self.name)
        validated = self.validate(parsed)
        if self.limit is not None:
            await self.limit.acquire()
        try:
            if self.timeout is None:
                return await self._invoke(validated)
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._invoke(validated)
            except TimeoutError:
                raise ToolTimeout(f"{self.name} ran past its timeout of {self.timeout}s") from None
        finally:
            if self.limit is not None:
                self.limit.release()

    async def _invoke(self, arguments: dict[str, Any]) -> Any:
        try:
            return await self.invoke(arguments)
        except (ToolError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise ToolFailed(f"{self.name} raised {type(exc).__name__}: {exc}", type(exc).__name__) from exc

    def __repr__(self) -> str:
        return f"<tool {self.name}>"


class FunctionTool(Tool):
    """A Python function as a tool (made by :func:`tool`): sync functions run in a worker thread."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                 timeout: float | None = None, max_in_flight: int | None = None,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, blocking: bool | None = None) -> None:
        summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.blocking = (not self.is_async) if blocking is None else blocking
        self.model = arguments_model(fn, arg_docs)
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        tool_name = str(name or getattr(fn, "__name__", ""))
        super().__init__(tool_name, description if description is not None else summary, schema, timeout=timeout,
                         max_in_flight=max_in_flight, max_result_chars=max_result_chars)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        try:
            model = self.model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(f"{self.name}: {_validation_message(exc)}") from None
        return {key: getattr(model, key) for key in type(model).model_fields}

    async def invoke(self, arguments: dict[str, Any]) -> Any:
        if self.is_async:
            return await self.fn(**arguments)
        if self.blocking:
            return await asyncio.to_thread(self.fn, **arguments)
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(fn: None = None, /, *, name: str | None = None, description: str | None = None,
         timeout: float | None = None, max_in_flight: int | None = None,
         max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, blocking: bool | None = None) -> Callable[..., Tool]: ...


@overload
def tool(fn: Any, /, *, name: str | None = None, description: str | None = None, timeout: float | None = None,
         max_in_flight: int | None = None, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
         blocking: bool | None = None) -> Tool: ...


def tool(fn: Any = None, /, *, name: str | None = None, description: str | None = None,
         timeout: float | None = None, max_in_flight: int | None = None,
         max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, blocking: bool | None = None) -> Any:
    """Make a tool of a typed function (sync or async), or of a graph (its inputs become string parameters).

    Used bare (``@sf.tool``) or with options (``@sf.tool(timeout=5)``). A sync function runs in a worker
    thread unless ``blocking=False`` says it returns at once. See :class:`Tool` for the options.

    Examples:
        >>> @tool(timeout=2.0)
        ... async def lookup(term: str) -> str:
        ...     '''Look a term up.'''
        ...     return term.upper()
        >>> lookup.name, lookup.timeout, lookup.spec()["function"]["description"]
        ('lookup', 2.0, 'Look a term up.')
    """
    options = {"name": name, "description": description, "timeout": timeout, "max_in_flight": max_in_flight,
               "max_result_chars": max_result_chars}

    def make(target: Any) -> Tool:
        if isinstance(target, Tool):
            return target
        as_tool = getattr(target, "as_tool", None)
        if as_tool is not None and not inspect.isfunction(target):
            return as_tool(**options)  # type: ignore[no-any-return]
        if not callable(target):
            raise GraphDefinitionError(f"sf.tool() takes a function or a graph, got {type(target).__name__}")
        return FunctionTool(target, blocking=blocking, **options)  # type: ignore[arg-type]

    return make if fn is None else make(fn)


# -- schemas from signatures and docstrings ---------------------------------------------------------
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples|Example|Note|Notes):\s*$")
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A docstring's summary (the text before its first section) and its ``Args:`` descriptions (Google style).

    Examples:
        >>> parse_docstring("Add.\\n\\nArgs:\\n    a: first.\\n    b (int): second,\\n        continued.")
        ('Add.', {'a': 'first.', 'b': 'second, continued.'})
    """
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        header = _SECTION.match(line.strip())
        if header:
            section, current = header.group(1), None
            continue
        if section is None:
            summary.append(line.strip())
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            indent = len(line) - len(line.lstrip())
            match = _ARG.match(line)
            if match and (current is None or indent <= _arg_indent(doc)):
                current = match.group(1).lstrip("*")
                args[current] = match.group(2).strip()
            elif current is not None:
                args[current] = (args[current] + " " + line.strip()).strip()
    return " ".join(" ".join(summary).split()), args


def _arg_indent(doc: str) -> int:
    """The indentation of the first line after ``Args:`` (an argument's; continuation lines are deeper)."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if _SECTION.match(line.strip()) and line.strip().startswith(("Args", "Arguments", "Parameters")):
            for following in lines[i + 1:]:
                if following.strip():
                    return len(following) - len(following.lstrip())
    return 0


def arguments_model(fn: Callable[..., Any], descriptions: Mapping[str, str]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (types from annotations, defaults kept, descriptions from the
    docstring); ``*args``, ``**kwargs`` and parameters without a default or annotation are refused or typed
    ``Any`` as pydantic would."""
    from pydantic import ConfigDict, Field, create_model

    name = getattr(fn, "__name__", "tool")
    try:
        hints = get_type_hints(fn)
    except Exception as exc:
        raise GraphDefinitionError(f"tool {name!r}: cannot read its type annotations: {exc}") from None
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise GraphDefinitionError(f"tool {name!r}: *{param.name} has no schema; list the parameters")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=descriptions.get(param.name)))
    try:
        return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:  # an annotation pydantic cannot schema (a plain class, say)
        raise GraphDefinitionError(f"tool {name!r}: its parameters have no JSON schema: {exc}") from None


def _validation_message(exc: Any) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "arguments"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def _parse_arguments(arguments: str | Mapping[str, Any], name: str) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        raise ToolArgumentsError(f"{name}: arguments must be a JSON object, got {type(arguments).__name__}")
    text = arguments.strip() or "{}"
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ToolArgumentsError(f"{name}: the arguments are not JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(parsed, dict):
        raise ToolArgumentsError(f"{name}: the arguments must be a JSON object, got {type(parsed).__name__}")
    return parsed


def tool_result_text(result: Any, name: str = "tool") -> str:
    """A tool's result as the text the model is shown: text as it is, anything else as JSON (pydantic's
    serialiser: models, dataclasses, dates...); :class:`~scaffold.ToolResultError` if it is not serialisable.

    Examples:
        >>> tool_result_text({"sum": 5})
        '{"sum":5}'
        >>> tool_result_text(object())
        Traceback (most recent call last):
        ...
        scaffold._errors.ToolResultError: tool returned a object, which is not JSON-serialisable
    """
    if isinstance(result, str):
        return result
    from pydantic_core import to_json

    try:
        return to_json(result).decode()
    except Exception:
        raise ToolResultError(f"{name} returned a {type(result).__name__}, which is not JSON-serialisable") from None


def tools_by_name(tools: Sequence[Tool], where: str) -> dict[str, Tool]:
    """Tools keyed by name; two tools of one name are a :class:`~scaffold.GraphDefinitionError`."""
    out: dict[str, Tool] = {}
    for item in tools:
        if not isinstance(item, Tool):
            raise GraphDefinitionError(f"{where}: tools must be sf.tool(...) objects, got {type(item).__name__}")
        if item.name in out:
            raise GraphDefinitionError(f"{where}: two tools are named {item.name!r}")
        out[item.name] = item
    return out

