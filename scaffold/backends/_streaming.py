"""Assembling a streamed answer: per-choice deltas in, :class:`~scaffold._types.Delta` records and the final
choices out. Shared by the OpenAI-compatible and litellm backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._errors import ServerError
from scaffold._types import Delta, ToolCall
from scaffold.backends._choices import Choice

__all__ = ["StreamAssembler"]


class StreamAssembler:
    """Collects the pieces of ``n`` streamed choices.

    Examples:
        >>> parts = StreamAssembler(1)
        >>> parts.add(0, "so ", (7,))
        Delta(choice=0, text='so ', token_ids=(7,), logprobs=None)
        >>> parts.add(0, "4", (9,), finish_reason="stop").text
        '4'
        >>> parts.choices()
        [Choice(text='so 4', token_ids=(7, 9), logprobs=None, finish_reason='stop', tool_calls=())]
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.texts: list[list[str]] = [[] for _ in range(n)]
        self.token_ids: list[list[int] | None] = [None] * n
        self.logprobs: list[list[float] | None] = [None] * n
        self.finish: list[str | None] = [None] * n
        self.pieces = [0] * n
        """Deltas that carried text, per choice (a token count for streams without usage or ids)."""
        self.calls: list[dict[int, list[str]]] = [{} for _ in range(n)]
        """Per choice, each tool call's ``[id, name, arguments so far]`` by its position."""

    def add(self, index: int, text: str | None, token_ids: Sequence[int] | None = None,
            logprobs: Sequence[float] | None = None, finish_reason: str | None = None) -> Delta | None:
        """Record one piece of choice ``index``; the :class:`Delta` to hand on, ``None`` when it carries nothing."""
        if not 0 <= index < self.n:
            raise ServerError(f"the stream sent choice {index} for n={self.n}")
        if finish_reason is not None:
            self.finish[index] = finish_reason
        ids = tuple(int(i) for i in token_ids) if token_ids else None
        lps = tuple(float(x) for x in logprobs) if logprobs else None
        if ids is not None:
            held = self.token_ids[index]
            if held is None:
                self.token_ids[index] = list(ids)
            else:
                held.extend(ids)
        if lps is not None:
            held_lps = self.logprobs[index]
            if held_lps is None:
                self.logprobs[index] = list(lps)
            else:
                held_lps.extend(lps)
        if not text and ids is None:
            return None
        if text:
            self.texts[index].append(text)
            self.pieces[index] += 1
        return Delta(index, text or "", ids, lps)

    def add_tool_calls(self, index: int, deltas: Sequence[Any]) -> None:
        """Record pieces of choice ``index``'s tool calls (OpenAI's streamed ``delta.tool_calls``: each names its
        position; the first piece of a call brings its id and name, later ones more of its arguments).

        Examples:
            >>> parts = StreamAssembler(1)
            >>> parts.add_tool_calls(0, [{"index": 0, "id": "c1", "function": {"name": "add", "arguments": '{"a"'}}])
            >>> parts.add_tool_calls(0, [{"index": 0, "function": {"arguments": ': 1}'}}])
            >>> parts.choices()[0].tool_calls
            (ToolCall(id='c1', name='add', arguments='{"a": 1}'),)
        """
        if not 0 <= index < self.n:
            raise ServerError(f"the stream sent choice {index} for n={self.n}")
        calls = self.calls[index]
        for delta in deltas:
            position = _get(delta, "index")
            position = len(calls) if position is None else int(position)
            held = calls.setdefault(position, ["", "", ""])
            function = _get(delta, "function") or {}
            if _get(delta, "id"):
                held[0] = str(_get(delta, "id"))
            if _get(function, "name"):
                held[1] += str(_get(function, "name")) if not held[1] else ""
            if _get(function, "arguments"):
                held[2] += str(_get(function, "arguments"))

    def choices(self) -> list[Choice]:
        """The choices so far, in index order."""
        return [
            Choice("".join(texts), tuple(ids) if ids is not None else None, tuple(lps) if lps is not None else None,
                   finish, tuple(ToolCall(call[0] or f"call_{position}", call[1], call[2] or "{}")
                                 for position, call in sorted(calls.items())))
            for texts, ids, lps, finish, calls in zip(self.texts, self.token_ids, self.logprobs, self.finish,
                                                      self.calls)
        ]

    def completion_tokens(self) -> int:
        """Tokens generated, counted from the pieces (for a stream that sent no usage)."""
        return sum(len(ids) if ids is not None else (len(lps) if lps is not None else pieces)
                   for ids, lps, pieces in zip(self.token_ids, self.logprobs, self.pieces))


def _get(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, Mapping) else getattr(data, key, None)
