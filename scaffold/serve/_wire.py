"""Request bodies of the OpenAI API as the server takes them (pydantic), and the ``scaffold`` extension.

Fields the server cannot honour are refused with a 400 that names them — never dropped in silence —
except a few that change nothing about the answer (:data:`HARMLESS_FIELDS`). Per-request options go in
the body's ``scaffold`` object (``extra_body={"scaffold": {...}}`` in the ``openai`` SDK).

Types are strict, as JSON has them: ``"n": "3"``, ``"n": true`` and ``"stream": "yes"`` are refused, not
coerced; numbers must be finite and integers fit their use (a seed in 64 bits, token counts in 32).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ChatMessage", "ChatRequest", "CompletionRequest", "ScaffoldOptions", "StreamOptions"]

HARMLESS_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls", "logit_bias",
                             "logprobs", "top_logprobs", "echo", "best_of", "suffix", "modalities",
                             "response_format", "prompt_cache_key", "safety_identifier"})
"""Fields accepted when they ask for nothing (``null``, ``false``, empty, ``{"type": "text"}``...)."""


INT32_MAX = 2**31 - 1
INT64 = (-(2**63), 2**63 - 1)
_STRICT = ConfigDict(strict=True, frozen=True, allow_inf_nan=False)


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", **_STRICT)

    def unsupported(self) -> list[str]:
        """Fields set that the server does not support (``extra`` ones that ask for something)."""
        out = []
        for key, value in (self.model_extra or {}).items():
            if key in HARMLESS_FIELDS and _asks_nothing(key, value):
                continue
            out.append(key)
        return sorted(out)


def _asks_nothing(key: str, value: Any) -> bool:
    if value in (None, False, 0, "", [], {}):
        return True
    if key == "response_format":
        return isinstance(value, dict) and value.get("type") == "text"
    if key == "modalities":
        return value == ["text"]
    if key == "best_of":
        return value == 1
    return key in ("user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key",
                   "safety_identifier")


class BudgetRequest(BaseModel):
    """A per-request budget (capped by the served model's ``max_budget``)."""

    model_config = ConfigDict(extra="forbid", **_STRICT)

    tokens: Annotated[int, Field(ge=1, le=INT64[1])] | None = None
    dollars: Annotated[float, Field(gt=0)] | None = None


class ScaffoldOptions(BaseModel):
    """The ``scaffold`` object of a request body.

    Examples:
        >>> ScaffoldOptions.model_validate({"params": {"n": 4}, "progress": True}).params
        {'n': 4}
    """

    model_config = ConfigDict(extra="forbid", **_STRICT)

    params: dict[str, Any] = Field(default_factory=dict)
    """Build parameters for this request only (checked against the graph's and the config's allowed ones)."""
    progress: bool | Literal["reasoning", "comments"] | None = None
    """Progress events in a stream: ``reasoning_content`` deltas (``true``/``"reasoning"``) or SSE comments."""
    timeout: Annotated[float, Field(gt=0)] | None = None
    """Seconds this request may run (capped by the config's ``max_timeout``)."""
    budget: BudgetRequest | None = None
    seed: Annotated[int, Field(ge=INT64[0], le=INT64[1])] | None = None
    """Fixes every random choice of the run (the OpenAI ``seed`` field does the same)."""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", **_STRICT)

    include_usage: bool = False


class ChatMessage(BaseModel):
    """One message; ``content`` is a string or a list of text parts."""

    model_config = ConfigDict(extra="allow", **_STRICT)

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    """The tools an assistant turn called (sent back by a client that ran them)."""
    tool_call_id: str | None = None
    """The call a ``tool`` message answers."""

    def text(self) -> str:
        """The content as text; a part that is not text (an image, audio) is refused."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        pieces = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"content parts of type {part.get('type')!r} are not supported (text only)")
            pieces.append(part["text"])
        return "".join(pieces)


Stop = str | list[str] | None


class _Sampling(_Body):
    model: str
    n: Annotated[int, Field(ge=1, le=INT32_MAX)] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    stop: Stop = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    seed: Annotated[int, Field(ge=INT64[0], le=INT64[1])] | None = None
    scaffold: ScaffoldOptions = Field(default_factory=ScaffoldOptions)

    def sampling(self, allowed: list[str]) -> tuple[dict[str, Any], list[str]]:
        """The sampling fields the config lets through, and the ones set that it does not."""
        passed: dict[str, Any] = {}
        refused: list[str] = []
        for key in ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "presence_penalty",
                    "frequency_penalty"):
            value = getattr(self, key)
            if value is None:
                continue
            if key in allowed:
                passed[key] = value
            else:
                refused.append(key)
        return passed, refused


class ChatRequest(_Sampling):
    """A ``POST /v1/chat/completions`` body."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @field_validator("messages")
    @classmethod
    def _has_user(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        if not any(m.role == "user" for m in messages):
            raise ValueError("needs at least one user message (its text is the graph's problem)")
        return messages


class CompletionRequest(_Sampling):
    """A ``POST /v1/completions`` body (``prompt``: a string, or a list holding one)."""

    prompt: str | list[str]

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("one prompt per request (a list of prompts is several requests)")
        return self.prompt[0]
