"""``--model`` options: the catalogue's model specs (:mod:`scaffold.catalogue`), with the command line's messages.

A spec that names no model is a usage error on ``--model``; a missing API key a usage error; the default
model without its dependencies one ``Error:`` line saying what to install.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from scaffold._errors import AuthenticationError, ModelSpecError
from scaffold.catalogue import Bound, bind_specs, parse_model_specs


def parse_model_options(values: Sequence[str]) -> dict[str | None, str]:
    """``--model`` values by alias (:func:`~scaffold.catalogue.parse_model_specs`); a mistake is a usage error."""
    try:
        return parse_model_specs(values)
    except ModelSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None


def bind_cli_models(aliases: Sequence[str], specs: Mapping[str | None, str], *, api_base: str | None = None,
                    temperature: float | None = None, max_tokens: int | None = None, price: Any = None) -> Bound:
    """:func:`~scaffold.catalogue.bind_specs` with the command line's errors."""
    try:
        return bind_specs(aliases, specs, api_base=api_base, temperature=temperature, max_tokens=max_tokens,
                          price=price)
    except ModelSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None
    except AuthenticationError as exc:
        raise click.UsageError(str(exc)) from None
