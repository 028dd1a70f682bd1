"""Chat messages with tool calls: how a tool loop's turns are held in a request, and their OpenAI wire form.

A request's messages are tuples. A plain message is ``(role, content)``; the turns of a tool
loop carry a third item, a mapping:

- an assistant turn that called tools: ``("assistant", content, {"tool_calls": [call, ...]})``,
  each call in OpenAI's format (``{"id", "type": "function", "function": {"name", "arguments"}}``);
- a tool's answer: ``("tool", content, {"tool_call_id": id, "name": tool})``.

Plain messages keep their two-item shape, so a request without tools is stored and keyed for
resume exactly as before tools existed. Every backend turns messages into its wire format with
:func:`message_dict`, the one place that knows the shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._types import ToolCall

__all__ = ["assistant_message", "message_dict", "message_from_dict", "tool_calls_of", "tool_message"]


def assistant_message(content: str, tool_calls: Sequence[ToolCall]) -> tuple[Any, ...]:
    """The assistant turn that asked for ``tool_calls`` (a plain ``("assistant", content)`` pair without any).

    Examples:
        >>> assistant_message("", [ToolCall("c1", "add", '{"a": 1}')])[2]["tool_calls"][0]["function"]["name"]
        'add'
    """
    if not tool_calls:
        return ("assistant", content)
    return ("assistant", content, {"tool_calls": [call.as_dict() for call in tool_calls]})


def tool_message(call_id: str, name: str, content: str) -> tuple[str, str, dict[str, str]]:
    """A tool's answer to the call ``call_id``.

    Examples:
        >>> tool_message("c1", "add", "3")
        ('tool', '3', {'tool_call_id': 'c1', 'name': 'add'})
    """
    return ("tool", content, {"tool_call_id": call_id, "name": name})


def message_dict(message: Sequence[Any]) -> dict[str, Any]:
    """One message in OpenAI's chat format.

    Examples:
        >>> message_dict(("user", "hi"))
        {'role': 'user', 'content': 'hi'}
        >>> message_dict(("tool", "3", {"tool_call_id": "c1", "name": "add"}))["tool_call_id"]
        'c1'
    """
    out: dict[str, Any] = {"role": message[0], "content": message[1]}
    if len(message) > 2 and message[2]:
        extra = message[2]
        if "tool_calls" in extra:
            out["tool_calls"] = [dict(call) for call in extra["tool_calls"]]
            if not message[1]:
                out["content"] = None
        for key in ("tool_call_id", "name"):
            if key in extra:
                out[key] = extra[key]
    return out


def message_from_dict(data: Mapping[str, Any], content: str) -> tuple[Any, ...]:
    """A message tuple from OpenAI's chat format (``content`` already made text by the caller).

    Examples:
        >>> message_from_dict({"role": "tool", "tool_call_id": "c1"}, "3")
        ('tool', '3', {'tool_call_id': 'c1'})
    """
    role = str(data.get("role", ""))
    if role == "assistant" and data.get("tool_calls"):
        calls = [call_from_dict(call, i) for i, call in enumerate(data["tool_calls"])]
        return assistant_message(content, calls)
    if role == "tool":
        extra = {"tool_call_id": str(data.get("tool_call_id") or "")}
        if data.get("name"):
            extra["name"] = str(data["name"])
        return ("tool", content, extra)
    return (role, content)


def call_from_dict(data: Any, position: int = 0) -> ToolCall:
    """A :class:`ToolCall` from OpenAI's format (a dict or an SDK object); arguments that are not text become
    JSON text, a missing id becomes ``call_{position}``."""
    function = _field(data, "function") or {}
    arguments = _field(function, "arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(id=str(_field(data, "id") or f"call_{position}"), name=str(_field(function, "name") or ""),
                    arguments=arguments)


def _field(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, Mapping) else getattr(data, key, None)


def tool_calls_of(message: Sequence[Any]) -> tuple[ToolCall, ...]:
    """The tool calls an assistant message holds (none for any other message).

    Examples:
        >>> tool_calls_of(assistant_message("", [ToolCall("c1", "add")]))[0].id
        'c1'
    """
    if len(message) < 3 or not message[2] or "tool_calls" not in message[2]:
        return ()
    return tuple(call_from_dict(call, i) for i, call in enumerate(message[2]["tool_calls"]))
