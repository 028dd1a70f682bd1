"""Options shared by the commands that run a topology (``run``, ``eval``, ``graph show``) and their parsing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from scaffold import catalogue
from scaffold.catalogue import Bound
from scaffold.cli._models import bind_cli_models, parse_model_options

F = TypeVar("F", bound=Callable[..., Any])


def param_options(command: F) -> F:
    """``-p/--param KEY=VALUE`` (repeatable) and ``--prompts``."""
    command = click.option("--prompts", type=click.Choice(["pocket", "generic"]),
                           help="The pocket model's prompts or the topology's own "
                                "(default: pocket when every alias runs on a pocket model).")(command)
    return click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
                        help="A build parameter of the topology (repeatable), e.g. -p n=8 -p steps=3; "
                             "`scaffold graph list` shows them.")(command)


def model_options(command: F) -> F:
    """``--model`` (repeatable), ``--api-base``, ``--price``, ``--temperature`` and ``--max-tokens``."""
    for option in reversed([
        click.option("--model", "model_values", multiple=True, metavar="[ALIAS=]SPEC",
                     help="The model of every alias (SPEC) or of one alias (ALIAS=SPEC); repeatable. SPEC: pocket "
                          "(the default, a local model that needs torch: scaffold-sdk[train]), pocket:DIR, a model "
                          "directory, transformers:DIR, vllm:DIR, a model on an OpenAI-compatible server "
                          "(hosted_vllm/NAME, or any name with --api-base) or a litellm name such as "
                          "openai/gpt-4o-mini (litellm:SPEC forces litellm)."),
        click.option("--api-base", metavar="URL",
                     help="The OpenAI-compatible server of the API models (e.g. http://127.0.0.1:8000/v1)."),
        click.option("--price", metavar="IN,OUT", callback=_price,
                     help="Dollars per million prompt and completion tokens of the API models, e.g. 0.15,0.6: a "
                          "server of your own is priced by no price map (its cost is unknown otherwise)."),
        click.option("--temperature", type=float, default=1.0, show_default=True),
        click.option("--max-tokens", type=click.IntRange(min=1),
                     help="New tokens per call (default: 128 on the pocket model, the provider's otherwise)."),
    ]):
        command = option(command)
    return command


def _price(context: click.Context, parameter: click.Parameter, value: str | None) -> Any:
    """``--price IN,OUT`` (dollars per million tokens) as a :class:`~scaffold.Price`."""
    if value is None:
        return None
    from scaffold.backends import Price

    parts = value.split(",")
    try:
        numbers = [float(part) for part in parts]
        if len(numbers) != 2:
            raise ValueError
        return Price(input=numbers[0] / 1e6, output=numbers[1] / 1e6)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not IN,OUT: dollars per million prompt and completion tokens, "
                                 f"two numbers of 0 or more (e.g. 0.15,0.6)", param_hint="--price") from None


def split_params(values: Sequence[str]) -> dict[str, str]:
    """``["n=8", "steps=3"]`` -> ``{"n": "8", "steps": "3"}``; a value without ``=`` or a repeated key is an error."""
    params: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        key = key.strip()
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--param")
        if key in params:
            raise click.BadParameter(f"{key!r} is given twice", param_hint="--param")
        params[key] = text.strip()
    return params


def build(name: str, params: Mapping[str, str], *, warn: bool = True, **options: Any) -> Any:
    """Topology ``name`` built by the installed catalogue (:func:`scaffold.catalogue.build`); a renamed parameter
    (``-p population=8``) still works, and its deprecation is one ``warning:`` line on stderr (``warn=False``:
    silently, for a dry build)."""
    return catalogue.build(name, params, warn=_warning_line if warn else None, **options)


def _warning_line(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


topology_aliases = catalogue.topology_aliases


def prepare(name: str, params: dict[str, str], model_values: Sequence[str], *, api_base: str | None,
            prompts: str | None, temperature: float | None, max_tokens: int | None,
            price: Any = None) -> tuple[Any, Bound]:
    """Build topology ``name`` and bind its models; every mistake is a one-line usage error before any call."""
    from scaffold._errors import GraphError

    try:
        aliases = topology_aliases(name, params)
        bound = bind_cli_models(aliases, parse_model_options(model_values), api_base=api_base,
                                temperature=temperature, max_tokens=max_tokens, price=price)
        use_pocket = (prompts or ("pocket" if bound.pocket else "generic")) == "pocket"
        graph = build(name, params, prompts="pocket" if use_pocket else "generic", model_dir=bound.pocket_dir)
    except GraphError as exc:
        raise click.UsageError(str(exc)) from None
    return graph, bound
