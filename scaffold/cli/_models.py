"""``--model`` options: which model each alias of a topology runs on, checked before anything runs.

A spec is ``pocket`` (the pocket model, built on first use), ``pocket:DIR`` (a pocket model
directory), a local model directory or ``transformers:DIR`` (in-process transformers),
``vllm:DIR`` (in-process vLLM), a model on an OpenAI-compatible server (``hosted_vllm/NAME``, or
any name with ``--api-base``: the native :class:`~scaffold.OpenAIBackend`), or any litellm model
name (``openai/gpt-4o-mini``; ``litellm:SPEC`` forces litellm). ``--model SPEC`` binds every
alias; ``--model ALIAS=SPEC`` one alias (it wins over the plain form). Aliases without a spec get
``pocket``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

DEFAULT_SPEC = "pocket"
POCKET_MAX_TOKENS = 128
"""New tokens per call on the pocket model (its whole context is 1,024 characters)."""

_ALIAS = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)=(.+)$")


def parse_model_options(values: Sequence[str]) -> dict[str | None, str]:
    """``["openai/x", "judge=pocket"]`` -> ``{None: "openai/x", "judge": "pocket"}``; a repeated target is an error."""
    specs: dict[str | None, str] = {}
    for value in values:
        found = _ALIAS.match(value.strip())
        alias, spec = (found.group(1), found.group(2).strip()) if found else (None, value.strip())
        if not spec:
            raise click.BadParameter(f"{value!r} names no model", param_hint="--model")
        if alias in specs:
            target = f"alias {alias!r}" if alias else "every alias"
            raise click.BadParameter(f"{target} is given two models ({specs[alias]!r} and {spec!r})",
                                     param_hint="--model")
        specs[alias] = spec
    return specs


@dataclass
class Bound:
    """The models of one topology: what runs, what is recorded, and whether the pocket prompts fit."""

    models: dict[str, Any]
    """Alias -> :class:`scaffold.Model`."""
    specs: dict[str, str]
    """Alias -> spec as given (recorded with an evaluation; never a key)."""
    pocket: bool
    """Every alias runs on a pocket model."""
    pocket_dir: Path | None = None
    params: dict[str, Any] = field(default_factory=dict)


def pocket_dir_of(spec: str) -> Path | None:
    """The pocket model directory a spec names (building the default one), ``None`` for other specs."""
    if spec == DEFAULT_SPEC:
        from scaffold.pocket import pocket_model

        return Path(pocket_model())
    if spec.startswith("pocket:"):
        path = Path(spec[len("pocket:"):]).expanduser()
        if not (path / "config.json").is_file():
            raise click.BadParameter(f"{spec!r}: {path} is not a model directory (no config.json)",
                                     param_hint="--model")
        return path
    return None


def bind_models(aliases: Sequence[str], specs: Mapping[str | None, str], *, api_base: str | None = None,
                temperature: float | None = None, max_tokens: int | None = None) -> Bound:
    """Bind every alias of a topology; an alias it does not use, or a missing API key, is a usage error."""
    import scaffold as sf
    from scaffold._errors import AuthenticationError

    unknown = sorted(a for a in specs if a is not None and a not in aliases)
    if unknown:
        raise click.BadParameter(f"the topology has no model alias {', '.join(map(repr, unknown))}; "
                                 f"its aliases: {', '.join(sorted(aliases))}", param_hint="--model")
    chosen = {alias: specs.get(alias, specs.get(None, DEFAULT_SPEC)) for alias in sorted(aliases)}
    _check_default_model([alias for alias in chosen if alias not in specs and None not in specs])
    pocket_dirs = {spec: pocket_dir_of(spec) for spec in set(chosen.values())}
    pocket = all(path is not None for path in pocket_dirs.values())
    params: dict[str, Any] = {}
    if temperature is not None:
        params["temperature"] = temperature
    tokens = max_tokens if max_tokens is not None else (POCKET_MAX_TOKENS if pocket else None)
    if tokens is not None:
        params["max_tokens"] = tokens
    made: dict[str, Any] = {}
    for spec in sorted(set(chosen.values())):
        path = pocket_dirs[spec]
        if path is not None:
            backend: Any = sf.TransformersBackend(path, max_batch_size=64)
            made[spec] = sf.Model(backend, name=f"pocket:{path.name}", params=params)
            continue
        backend = _backend(spec, api_base)
        check = getattr(backend, "check_credentials", None)
        if check is not None:
            try:
                check()
            except AuthenticationError as exc:
                raise click.UsageError(str(exc)) from None
        made[spec] = sf.Model(backend, params=params, max_in_flight=32)
    first = next((p for p in pocket_dirs.values() if p is not None), None)
    return Bound(models={alias: made[spec] for alias, spec in chosen.items()}, specs=chosen, pocket=pocket,
                 pocket_dir=first, params=params)


def _check_default_model(defaulted: Sequence[str]) -> None:
    """Aliases left to the default (the pocket model) on an install without its dependencies: one line that
    says what to install, or which ``--model`` to pass instead."""
    from scaffold.cli._extras import POCKET_MODULES, absent, install_hint

    missing = absent(POCKET_MODULES) if defaulted else []
    if missing:
        example = (f"--model {defaulted[0]}=openai/gpt-4o-mini" if len(defaulted) == 1
                   else "--model openai/gpt-4o-mini for every alias")
        raise click.ClickException(
            f"the default model is the local pocket model, which needs {missing[0]} "
            f"({install_hint(missing[0]) or 'pip install scaffold-sdk[train]'}); "
            f"or pass --model ALIAS=provider/model, e.g. {example}")


def _backend(spec: str, api_base: str | None) -> Any:
    from scaffold.backends._registry import backend_from_spec, default_kind

    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise click.BadParameter(f"{spec!r} is a directory but not a model (no config.json)", param_hint="--model")
        return backend_from_spec(f"transformers:{path}")
    if spec.startswith(("transformers:", "vllm:")):
        local = Path(spec.split(":", 1)[1]).expanduser()
        if not local.is_dir():
            raise click.BadParameter(f"{spec!r}: no model directory {local}", param_hint="--model")
        return backend_from_spec(spec)
    options = {"api_base": api_base} if api_base else {}
    kind, colon, rest = spec.partition(":")
    explicit = kind if colon and kind in ("openai", "litellm") else None
    name = rest if explicit else spec
    if (explicit or default_kind(name, api_base)) == "litellm" and not _litellm_knows(name):
        raise click.BadParameter(
            f"unknown model {spec!r}: give 'pocket', a model directory, transformers:DIR, vllm:DIR, a model "
            "on an OpenAI-compatible server (hosted_vllm/NAME, or any name with --api-base) or a litellm "
            "model name (openai/gpt-4o-mini)", param_hint="--model")
    return backend_from_spec(spec, **options)


def _litellm_knows(spec: str) -> bool:
    """Whether litellm can tell the provider of ``spec`` (its own message goes to stdout: kept quiet)."""
    import contextlib
    import io

    from scaffold.backends._litellm import import_litellm

    litellm = import_litellm()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            litellm.get_llm_provider(spec)
        except Exception:
            return False
    return True
