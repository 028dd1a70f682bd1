"""What counts as a credential, in one place: parameter and header names, and how to hide keys in text.

A leaf module (standard library only): the DSL refuses secret node parameters, :class:`~scaffold.Model`
moves them to the backend, the store drops them before recording, and the litellm backend and the
command line redact key-shaped text from error messages, all from these lists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

SECRET_PARAMS = frozenset({"api_key", "api-key", "key", "token", "access_token", "authorization", "secret"})
"""Parameter names that are credentials: taken out of ``params`` so they are never recorded."""

SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "proxy-authorization", "x-goog-api-key"})
"""Header names whose values are credentials: ``extra_headers`` carrying one are handled like ``api_key``."""

SECRET_VARIABLE_SUFFIXES = ("_API_KEY", "_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
"""Environment variables named like this hold secrets (``OPENAI_API_KEY``, ``HF_TOKEN``...)."""

_SECRET_PATTERNS = (
    re.compile(r"sk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(bearer\s+)[^\s'\",}]+"),
    re.compile(r"(?i)(api[_-]?key['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+"),
)


class MaskedKey(str):
    """An API key that shows as ``'***'`` in ``repr``, so tracebacks that print local variables hide it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"


def environment_secrets() -> list[str]:
    """Values of environment variables named like secrets (``*_API_KEY``, ``*_TOKEN``...), 8 characters or more."""
    return [value for name, value in os.environ.items()
            if len(value) >= 8 and name.upper().endswith(SECRET_VARIABLE_SUFFIXES)]


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """Remove ``secrets`` and anything shaped like a key or bearer token from ``text``.

    Examples:
        >>> redact("Incorrect API key provided: sk-abc123456789. Bearer xyz", ())
        'Incorrect API key provided: sk-***. Bearer ***'
    """
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    text = _SECRET_PATTERNS[0].sub("sk-***", text)
    text = _SECRET_PATTERNS[1].sub(r"\1***", text)
    return _SECRET_PATTERNS[2].sub(r"\1***", text)
