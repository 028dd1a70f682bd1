"""What to install when an optional dependency is missing: one line that names the extra, never a traceback.

Every such error exits with status 1 (``Error: ...``, a :class:`click.ClickException`), like the CLI's
other failures; the extras themselves are read by :mod:`scaffold._extras`.
"""

from __future__ import annotations

import click

from scaffold._extras import OURS, POCKET_MODULES, absent, extras, install_hint

__all__ = ["POCKET_MODULES", "absent", "extras", "install_hint", "missing_dependency", "require"]


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
    elif module is not None and module not in OURS:
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
