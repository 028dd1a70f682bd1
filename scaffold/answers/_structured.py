"""Structured answers: a JSON object validated against a pydantic model, the answer one of its fields."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scaffold.answers._kind import AnswerKind, register_kind
from scaffold.answers._text import normalise_text

if TYPE_CHECKING:
    from pydantic import BaseModel

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class JsonAnswer(AnswerKind):
    """A JSON object as the answer, validated against ``schema`` (a pydantic model; ``None``: any object).

    The object is read from a fenced code block, else the whole text, else the last ``{...}`` in it. The answer
    is ``field``'s value (a string as it is, anything else as compact JSON), or, with ``field=None``, the whole
    object as canonical JSON (sorted keys). Answers compare by their canonical JSON (strings by
    :func:`~scaffold.answers.normalise_text`). :meth:`parse` gives the validated object or the validation
    error: a call whose reply is invalid is asked again, with the error, up to ``reask`` times (its invalid replies
    recorded, linked to the final one). :meth:`response_format` is what a backend that supports JSON schemas is
    sent with every call of this kind (OpenAI-compatible servers, vLLM's among them, and litellm).

    Examples:
        >>> from pydantic import BaseModel
        >>> from scaffold.answers import JsonAnswer
        >>> class Capital(BaseModel):
        ...     country: str
        ...     city: str
        >>> kind = JsonAnswer(Capital, field="city")
        >>> kind.extract('Sure: ```json\\n{"country": "France", "city": "Paris"}\\n```')
        'Paris'
        >>> kind.parse('{"country": "France"}')[1].splitlines()[0]
        '1 validation error for Capital'
        >>> kind.response_format()["json_schema"]["name"]
        'Capital'
    """

    schema: type[BaseModel] | None = None
    field: str | None = None
    reask: int = 2

    name = "json"

    def __post_init__(self) -> None:
        from pydantic import BaseModel  # imported when a JSON kind is made: ``import scaffold`` stays light

        from scaffold._errors import AnswerKindError

        if self.schema is not None and not (isinstance(self.schema, type) and issubclass(self.schema, BaseModel)):
            raise AnswerKindError(f"a JSON answer's schema is a pydantic model class, got {self.schema!r}")
        if isinstance(self.reask, bool) or not isinstance(self.reask, int) or self.reask < 0:
            raise AnswerKindError(f"reask is a count of re-asks (0 or more), got {self.reask!r}")
        if self.field is not None and self.schema is not None and self.field not in self.schema.model_fields:
            raise AnswerKindError(f"{self.schema.__name__} has no field {self.field!r}; its fields are "
                                  f"{', '.join(self.schema.model_fields)}")

    @property
    def instruction(self) -> str:
        if self.schema is None:
            return "Reply with one JSON object and nothing else."
        schema = json.dumps(self.schema.model_json_schema(), separators=(",", ":"))
        return f"Reply with one JSON object and nothing else, matching this JSON schema: {schema}"

    @property
    def reasks(self) -> int:
        return self.reask

    def check(self, text: str) -> str | None:
        """The validation error of a reply (``None`` for a valid object), which a call re-asks with."""
        return self.parse(text)[1]

    def parse(self, text: str) -> tuple[Any, str | None]:
        """``(object, None)`` for a text holding a valid object (a model instance with a schema, else a dict), else
        ``(None, why)``: the JSON or validation error, as a model can be told it."""
        data, error = _json_object(text)
        if error is not None:
            return None, error
        if self.schema is None:
            return data, None
        from pydantic import ValidationError

        try:
            return self.schema.model_validate(data), None
        except ValidationError as exc:
            return None, str(exc)

    def extract(self, text: str) -> str | None:
        value, error = self.parse(text)
        if error is not None:
            return None
        data = value if isinstance(value, dict) else value.model_dump(mode="json")
        if self.field is not None:
            if self.field not in data:
                return None
            data = data[self.field]
            if isinstance(data, str):
                return data
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def key(self, answer: str) -> str | None:
        try:
            data = json.loads(answer)
        except ValueError:
            return normalise_text(answer) or None
        if isinstance(data, str):
            return normalise_text(data) or None
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def response_format(self) -> dict[str, Any]:
        """The OpenAI ``response_format`` asking for this answer: a JSON schema, or any JSON object."""
        if self.schema is None:
            return {"type": "json_object"}
        return {"type": "json_schema",
                "json_schema": {"name": self.schema.__name__, "schema": self.schema.model_json_schema()}}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "schema": None if self.schema is None else self.schema.__name__,
                "field": self.field, "reask": self.reask}


def _json_object(text: str) -> tuple[Any, str | None]:
    candidates = [m.group(1) for m in _FENCE.finditer(text)][::-1] + [text]
    last = text.rfind("{")
    while last >= 0:
        candidates.append(text[last:])
        last = text.rfind("{", 0, last)
        if len(candidates) > 12:
            break
    error = "no JSON object found"
    decoder = json.JSONDecoder()
    for candidate in candidates:
        stripped = candidate.strip()
        if not stripped.startswith("{"):
            continue
        try:
            data, _ = decoder.raw_decode(stripped)
        except ValueError as exc:
            error = f"invalid JSON: {exc}"
            continue
        if isinstance(data, dict):
            return data, None
    return None, error


register_kind("json", JsonAnswer)
