"""A backend that answers from a script."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scaffold._errors import BackendError
from scaffold._types import Completion, Request, Usage
from scaffold.backends._base import Capabilities

Reply = str | Completion | BaseException
Script = Callable[[Request], Any] | Mapping[str, Reply | Sequence[Reply]]


class ScriptedBackend:
    """Answers each request from ``script``: a function of the request (sync or async), or a table.

    A function is called once per choice and returns a string or :class:`Completion`, or
    raises (or returns an exception) to simulate a failure. A table maps a substring of the
    last user message to a reply, or to a list of replies used in turn.

    ``delay`` (seconds, or a function of the request) makes every call that slow;
    ``supports_n`` makes sibling samples arrive as one request; ``json_schema`` makes it a backend that takes a
    ``response_format`` (a JSON answer kind then sends one: see ``request.params``); ``embed`` (a function of a text
    to a vector) gives it :meth:`embed`, for similarity votes (``sf.similar``).

    Examples:
        >>> import asyncio
        >>> from scaffold._types import Message, Request
        >>> b = ScriptedBackend({"2+2": r"\\boxed{4}"})
        >>> asyncio.run(b.complete(Request(messages=(Message("user", "what is 2+2?"),))))[0].text
        '\\\\boxed{4}'
    """

    provider = "scaffold.testing"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry)."""

    def __init__(
        self,
        script: Script,
        *,
        delay: float | Callable[[Request], float] = 0.0,
        supports_n: bool = False,
        max_n: int | None = None,
        default: Reply | None = None,
        json_schema: bool = False,
        embed: Callable[[str], Sequence[float]] | None = None,
    ) -> None:
        self.script = script
        self._embed = embed
        self.delay = delay
        self.default = default
        self.capabilities = Capabilities(supports_n=supports_n, max_n=max_n, json_schema=json_schema)
        self.requests: list[Request] = []
        """Every request received, in arrival order."""
        self.embedded: list[str] = []
        """Every text embedded (``embed``), in order."""
        self.in_flight = 0
        self.peak_in_flight = 0
        """Largest number of requests in flight at once (measured, not configured)."""
        self._turns: dict[str, int] = {}

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors ``embed`` (given to the constructor) makes of ``texts``; each text counts in
        :attr:`embedded`. ``NotImplementedError`` when none was given."""
        if self._embed is None:
            raise NotImplementedError("this ScriptedBackend was given no embed= function")
        self.embedded.extend(texts)
        await asyncio.sleep(0)
        return [[float(x) for x in self._embed(text)] for text in texts]

    @property
    def calls(self) -> int:
        """Number of requests received."""
        return len(self.requests)

    async def complete(self, request: Request) -> list[Completion]:
        self.requests.append(request)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            delay = self.delay(request) if callable(self.delay) else self.delay
            if delay:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            return [await self._one(request, i) for i in range(request.n)]
        finally:
            self.in_flight -= 1

    async def _one(self, request: Request, choice: int) -> Completion:
        if callable(self.script):
            reply = self.script(request)
            if inspect.isawaitable(reply):
                reply = await reply
        else:
            reply = self._from_table(request)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        if not isinstance(reply, str):
            raise BackendError(f"scripted reply must be a string or Completion, got {type(reply).__name__}")
        prompt = request.last_content
        return Completion(text=reply, usage=Usage(len(prompt.split()), len(reply.split())), finish_reason="stop")

    def _from_table(self, request: Request) -> Reply:
        assert isinstance(self.script, Mapping)
        text = request.last_content
        for key, replies in self.script.items():
            if key in text:
                if isinstance(replies, (str, Completion, BaseException)):
                    return replies
                turn = self._turns.get(key, 0)
                self._turns[key] = turn + 1
                return replies[turn % len(replies)]
        if self.default is not None:
            return self.default
        raise BackendError(f"no scripted reply matches the prompt {text[:80]!r}")
