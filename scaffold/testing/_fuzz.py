"""Hypothesis strategies for fuzzing a served graph and the viewer over HTTP (needs ``hypothesis``, in the
``dev`` extra; imported when called).

:func:`request_bodies` draws ``(path, body bytes, content type)`` for ``/v1/chat/completions`` and
``/v1/completions``: a valid request with fields replaced by any JSON value, bodies nested thousands deep,
raw bytes, and other content types. :func:`viewer_queries` draws paths with query strings for ``scaffold ui``.

Examples:
    >>> from hypothesis import given, settings
    >>> seen = []
    >>> @settings(max_examples=5, database=None)
    ... @given(request_bodies())
    ... def draw(request):
    ...     seen.append(request[0])
    >>> draw()
    >>> set(seen) <= {"/v1/chat/completions", "/v1/completions"}
    True
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

__all__ = ["request_bodies", "viewer_queries"]

CHAT_FIELDS = ("model", "messages", "n", "stream", "stream_options", "temperature", "top_p", "max_tokens",
               "max_completion_tokens", "stop", "seed", "presence_penalty", "frequency_penalty", "tools",
               "tool_choice", "user", "metadata", "response_format", "logprobs", "scaffold")
SCAFFOLD_FIELDS = ("params", "progress", "timeout", "budget", "seed")
CONTENT_TYPES = ("application/json",) * 8 + (None, "text/plain", "text/plain;charset=UTF-8",
                                              "application/json; charset=utf-8", "application/x-www-form-urlencoded",
                                              "multipart/form-data; boundary=x", "application/jsonl", "")
VIEWER_PATHS = ("/api/runs", "/api/evaluations", "/api/compare", "/api/training", "/api/runs/", "/api/training/",
                "/", "/health", "/static/")
VIEWER_KEYS = ("offset", "limit", "since", "until", "graph", "dataset", "model", "status", "names", "a", "b",
               "differing")


def _strategies() -> Any:
    from hypothesis import strategies as st

    text = st.text(st.characters(exclude_categories=()), max_size=24)
    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62, max_value=2**80)
               | st.floats() | text)
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(text, inner, max_size=3), max_leaves=8)
    return st, text, values


def request_bodies(model: str = "m") -> Any:
    """A strategy of ``(path, body, content_type)`` aimed at served model ``model``."""
    st, text, values = _strategies()

    @st.composite
    def draw(draw: Any) -> tuple[str, bytes, str | None]:
        chat = draw(st.integers(0, 4)) > 0
        path = "/v1/chat/completions" if chat else "/v1/completions"
        base: dict[str, Any] = {"model": model}
        if chat:
            base["messages"] = [{"role": "user", "content": "What is 2+2?"}]
        else:
            base["prompt"] = "What is 2+2?"
        kind = draw(st.sampled_from(("valid", "mutated", "mutated", "mutated", "message", "scaffold", "deep", "raw")))
        if kind == "valid":
            base["n"] = draw(st.integers(1, 3))
            base["stream"] = draw(st.booleans())
            content = json.dumps(base).encode()
        elif kind == "raw":
            content = draw(st.binary(max_size=300) | text.map(lambda t: t.encode("utf-8", "surrogatepass")))
        elif kind == "deep":
            depth = draw(st.integers(10, 120_000))
            opening, closing = draw(st.sampled_from((("[", "]"), ('{"a": ', "}"))))
            field = draw(st.sampled_from(("metadata", "tools", "n", "scaffold")))
            inner = opening * depth + "1" + closing * depth if opening != "[" else "[" * depth + "]" * depth
            content = (json.dumps(base)[:-1] + f', "{field}": ' + inner + "}").encode()
        else:
            body = dict(base)
            for _ in range(draw(st.integers(1, 3))):
                if kind == "message" and chat:
                    message = {"role": draw(st.sampled_from(("user", "system", "assistant", "tool", "robot")) | text),
                               "content": draw(values)}
                    body["messages"] = [message] + draw(st.lists(values, max_size=2))
                elif kind == "scaffold":
                    body["scaffold"] = {draw(st.sampled_from(SCAFFOLD_FIELDS) | text): draw(values)}
                    if draw(st.booleans()):
                        body["scaffold"]["params"] = {draw(st.sampled_from(("n", "k", "prompt")) | text): draw(values)}
                else:
                    body[draw(st.sampled_from(CHAT_FIELDS) | text)] = draw(values)
            content = json.dumps(body, allow_nan=True).encode()
        return path, content, draw(st.sampled_from(CONTENT_TYPES))

    return draw()


def viewer_queries() -> Any:
    """A strategy of viewer targets: a path (with a drawn run id or log index) and a drawn query string."""
    st, text, values = _strategies()

    def quote(value: str) -> str:
        return urllib.parse.quote(value, safe="", errors="surrogatepass")

    @st.composite
    def draw(draw: Any) -> str:
        path = draw(st.sampled_from(VIEWER_PATHS))
        if path.endswith("/") and path != "/":
            path += quote(draw(text | st.integers().map(str)))
        pairs = draw(st.lists(st.tuples(st.sampled_from(VIEWER_KEYS) | text,
                                        text | st.integers().map(str) | st.floats().map(repr)), max_size=4))
        query = "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
        return path + ("?" + query if query else "")

    return draw()
