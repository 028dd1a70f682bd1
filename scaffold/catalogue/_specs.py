"""Model specs: which model each alias of a topology runs on, checked before anything runs.

A spec is ``pocket`` (the pocket model, built on first use), ``pocket:DIR`` (a pocket model
directory), or any model string of the backends' grammar
(:func:`~scaffold.backends._registry.parse_spec`): a local model directory or ``transformers:DIR``
(in-process transformers), ``vllm:DIR`` (in-process vLLM), a model on an OpenAI-compatible server
(``hosted_vllm/NAME``, or any name with ``api_base``: the native :class:`~scaffold.OpenAIBackend`),
or any litellm model name (``openai/gpt-4o-mini``; ``litellm:SPEC`` forces litellm). The command
line's ``--model SPEC`` binds every alias and ``--model ALIAS=SPEC`` one alias (it wins over the
plain form); aliases without a spec get ``pocket``. The command line and the server both bind here;
a spec that names no runnable model raises :class:`~scaffold.ModelSpecError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaffold._errors import MissingDependencyError, ModelSpecError
from scaffold._extras import POCKET_MODULES, absent, install_hint
from scaffold.backends._model import Model
from scaffold.backends._prices import Price
from scaffold.backends._registry import backend_from_spec, parse_spec

DEFAULT_SPEC = "pocket"
POCKET_MAX_TOKENS = 128
"""New tokens per call on the pocket model (its whole context is 1,024 characters)."""

_ALIAS = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)=(.+)$")


def parse_model_specs(values: Sequence[str]) -> dict[str | None, str]:
    """``["openai/x", "judge=pocket"]`` -> ``{None: "openai/x", "judge": "pocket"}``; a repeated target is an error.

    Examples:
        >>> parse_model_specs(["openai/x", "judge=pocket"])
        {None: 'openai/x', 'judge': 'pocket'}
    """
    specs: dict[str | None, str] = {}
    for value in values:
        found = _ALIAS.match(value.strip())
        alias, spec = (found.group(1), found.group(2).strip()) if found else (None, value.strip())
        if not spec:
            raise ModelSpecError(f"{value!r} names no model")
        if alias in specs:
            target = f"alias {alias!r}" if alias else "every alias"
            raise ModelSpecError(f"{target} is given two models ({specs[alias]!r} and {spec!r})")
        specs[alias] = spec
    return specs


@dataclass
class Bound:
    """The models of one topology: what runs, what is recorded, and whether the pocket prompts fit."""

    models: dict[str, Model]
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
            raise ModelSpecError(f"{spec!r}: {path} is not a model directory (no config.json)")
        return path
    return None


def bind_specs(aliases: Sequence[str], specs: Mapping[str | None, str], *, api_base: str | None = None,
               temperature: float | None = None, max_tokens: int | None = None, price: Price | None = None) -> Bound:
    """Bind every alias of a topology to the model its spec names (``specs[None]``: every alias without its own).

    An alias the topology does not use, or a spec that names no runnable model, raises
    :class:`~scaffold.ModelSpecError`; a missing API key :class:`~scaffold.AuthenticationError`; the default
    (pocket) model without its dependencies :class:`~scaffold.MissingDependencyError`. One :class:`Model` is
    made per distinct spec, so aliases that share a spec share its limits. ``price`` (a :class:`~scaffold.Price`)
    prices every model that is not the pocket model.
    """
    from scaffold.backends._transformers import TransformersBackend

    unknown = sorted(a for a in specs if a is not None and a not in aliases)
    if unknown:
        raise ModelSpecError(f"the topology has no model alias {', '.join(map(repr, unknown))}; "
                             f"its aliases: {', '.join(sorted(aliases))}")
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
    made: dict[str, Model] = {}
    for spec in sorted(set(chosen.values())):
        path = pocket_dirs[spec]
        if path is not None:
            made[spec] = Model(TransformersBackend(path, max_batch_size=64), name=f"pocket:{path.name}",
                               params=params)
            continue
        backend = backend_for_spec(spec, api_base)
        check = getattr(backend, "check_credentials", None)
        if check is not None:
            check()
        made[spec] = Model(backend, params=params, max_in_flight=32, price=price)
    first = next((p for p in pocket_dirs.values() if p is not None), None)
    return Bound(models={alias: made[spec] for alias, spec in chosen.items()}, specs=chosen, pocket=pocket,
                 pocket_dir=first, params=params)


def backend_for_spec(spec: str, api_base: str | None = None) -> Any:
    """The backend a (non-pocket) spec names, checked first: a local model must be a model directory, and a
    litellm name one whose provider litellm knows (:class:`~scaffold.ModelSpecError` otherwise)."""
    kind, model = parse_spec(spec, api_base)
    if kind in ("transformers", "vllm"):
        path = Path(model).expanduser()
        if not path.is_dir():
            raise ModelSpecError(f"{spec!r}: no model directory {path}")
        if not (path / "config.json").is_file():
            raise ModelSpecError(f"{spec!r} is a directory but not a model (no config.json)")
        return backend_from_spec(f"{kind}:{path}")
    if kind == "litellm" and not _litellm_knows(model):
        raise ModelSpecError(
            f"unknown model {spec!r}: give 'pocket', a model directory, transformers:DIR, vllm:DIR, a model "
            "on an OpenAI-compatible server (hosted_vllm/NAME, or any name with --api-base) or a litellm "
            "model name (openai/gpt-4o-mini)")
    return backend_from_spec(spec, **({"api_base": api_base} if api_base else {}))


def _check_default_model(defaulted: Sequence[str]) -> None:
    """Aliases left to the default (the pocket model) on an install without its dependencies: one line that
    says what to install, or which model to name instead."""
    missing = absent(POCKET_MODULES) if defaulted else []
    if missing:
        example = (f"--model {defaulted[0]}=openai/gpt-4o-mini" if len(defaulted) == 1
                   else "--model openai/gpt-4o-mini for every alias")
        raise MissingDependencyError(
            f"the default model is the local pocket model, which needs {missing[0]} "
            f"({install_hint(missing[0]) or 'pip install scaffold-sdk[train]'}); "
            f"or pass --model ALIAS=provider/model, e.g. {example}")


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
