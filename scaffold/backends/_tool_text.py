"""Tool calls for models served in-process (transformers, vLLM): the chat template's ``tools``, or a text protocol.

**Native.** A tokenizer whose chat template reads ``tools`` (Qwen2.5, Llama 3.1, Hermes, Mistral...)
is given the tools and the conversation in OpenAI's shape (a call's arguments as an object), and
renders them the way the model was trained to see them.

**The text protocol**, for a template that knows nothing of tools (the pocket model's ChatML, for
one). The tools are described at the end of the system message (one is added if there is none):

    You can call tools. To call one, write on a line of its own
    <tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>
    and stop; its result comes back in <tool_response>...</tool_response>. Call several tools by
    writing several <tool_call> lines. When you have the answer, write it without any <tool_call>.
    Tools (JSON schemas): ...

An assistant turn that called tools is rendered as its text followed by its ``<tool_call>`` lines;
the tools' answers as one user message of ``<tool_response>`` blocks, in call order.

**Parsing** is the same for both, since the models these templates belong to write Hermes-style
``<tool_call>{...}</tool_call>`` blocks: every block becomes a :class:`~scaffold.ToolCall` (ids
``call_0``, ``call_1``... per completion), and the text outside the blocks is the turn's text. A block
whose JSON does not parse is still a call, of its raw text, so the agent records the model's mistake
as the tool's ``ToolArgumentsError`` instead of losing it. Nothing is parsed when the request offers
no tools or says ``tool_choice="none"``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._messages import message_dict, tool_calls_of
from scaffold._types import Completion, Request, ToolCall

__all__ = ["chat_messages", "parse_tool_calls", "with_tool_calls"]

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

INSTRUCTIONS = (
    "You can call tools. To call one, write on a line of its own\n"
    '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
    "and stop; its result comes back in <tool_response>...</tool_response>. Call several tools by writing several "
    "<tool_call> lines. When you have the answer, write it without any <tool_call>.\n"
    "Tools (JSON schemas):"
)
"""The text protocol's instructions, before the tools' schemas (one JSON object a line)."""


def native_tools(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s chat template reads ``tools`` itself."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in template


def chat_messages(request: Request, native: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The conversation to render with a chat template, and the template's extra arguments (``tools=``).

    Examples:
        >>> from scaffold._messages import assistant_message, tool_message
        >>> request = Request(messages=(("user", "2+3?"), assistant_message("", [ToolCall("c1", "add", '{"a": 2}')]),
        ...                             tool_message("c1", "add", "5")), tools=({"type": "function",
        ...                             "function": {"name": "add", "parameters": {}}},))
        >>> messages, extra = chat_messages(request, native=False)
        >>> [m["role"] for m in messages], extra
        (['system', 'user', 'assistant', 'user'], {})
        >>> messages[2]["content"]
        '<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>'
    """
    offered = bool(request.tools) and request.tool_choice != "none"
    if native:
        return [_native(m) for m in request.messages], ({"tools": [dict(t) for t in request.tools]} if offered else {})
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        role, content = message[0], message[1] or ""
        if role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if messages and messages[-1].get("tool_responses"):
                messages[-1]["content"] += "\n" + block
            else:
                messages.append({"role": "user", "content": block, "tool_responses": True})
            continue
        calls = tool_calls_of(message)
        if calls:
            lines = [content] if content else []
            lines += [f"<tool_call>{_call_json(call)}</tool_call>" for call in calls]
            content = "\n".join(lines)
        messages.append({"role": role, "content": content})
    for made in messages:
        made.pop("tool_responses", None)
    if offered:
        described = INSTRUCTIONS + "\n" + "\n".join(json.dumps(_function(t)) for t in request.tools)
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = messages[0]["content"] + "\n\n" + described
        else:
            messages.insert(0, {"role": "system", "content": described})
    return messages, {}


def parse_tool_calls(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """The text outside ``<tool_call>`` blocks, and the calls the blocks hold.

    Examples:
        >>> parse_tool_calls('Let me add.\\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
        ('Let me add.', (ToolCall(id='call_0', name='add', arguments='{"a": 1}'),))
        >>> parse_tool_calls("<tool_call>{oops</tool_call>")[1][0].arguments
        '{oops'
    """
    if "<tool_call>" not in text:
        return text, ()
    calls = []
    for position, match in enumerate(_BLOCK.finditer(text)):
        raw = match.group(1).strip()
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            arguments = data.get("arguments", data.get("parameters", {}))
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
            calls.append(ToolCall(f"call_{position}", data["name"], arguments))
        else:
            name = data.get("name") if isinstance(data, dict) else None
            calls.append(ToolCall(f"call_{position}", str(name or "?"), raw))
    return _BLOCK.sub("", text).strip(), tuple(calls)


def with_tool_calls(request: Request, completions: Sequence[Completion]) -> list[Completion]:
    """``completions`` with the tool calls their text holds parsed out, when ``request`` offers tools."""
    if not request.tools or request.tool_choice == "none":
        return list(completions)
    out = []
    for completion in completions:
        text, calls = parse_tool_calls(completion.text)
        if calls:
            completion = dataclasses.replace(completion, text=text, tool_calls=calls, finish_reason="tool_calls")
        out.append(completion)
    return out


def _native(message: Sequence[Any]) -> dict[str, Any]:
    out = message_dict(message)
    if out.get("content") is None:
        out["content"] = ""
    for call in out.get("tool_calls") or ():
        function = call["function"] = dict(call["function"])
        try:
            function["arguments"] = json.loads(function["arguments"])
        except (ValueError, TypeError):
            pass
    return out


def _call_json(call: ToolCall) -> str:
    try:
        arguments: Any = json.loads(call.arguments)
    except ValueError:
        arguments = call.arguments
    return json.dumps({"name": call.name, "arguments": arguments})


def _function(tool: Mapping[str, Any]) -> Any:
    return tool.get("function", tool)
