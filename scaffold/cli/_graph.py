"""``scaffold graph``: list the topologies a command line can name, show one's parameters and structure.

Nothing here touches a model: ``show`` builds the topology (with generic prompts unless told
otherwise) and prints its Mermaid flowchart, its node table or its JSON spec, with the model
calls of a dry run per alias.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from scaffold.cli._common import table
from scaffold.cli._options import split_params

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def summary(name: str) -> str:
    """One line about topology ``name``: the first line of its function's docstring (else its module's)."""
    import sys

    from scaffold.catalogue import topologies

    function = topologies().topology(name)
    doc = function.fn.__doc__ or sys.modules[function.fn.__module__].__doc__ or ""
    first = next((line.strip() for line in doc.strip().splitlines() if line.strip()), "")
    return _LITERAL.sub(r"`\1`", _ROLE.sub(r"\1", first))


def _build(name: str, params: dict[str, str], prompts: str) -> Any:
    """Topology ``name`` built with ``params``; an unknown name or parameter, or a bad value, is a usage error."""
    from scaffold._errors import GraphError
    from scaffold.cli._options import build

    try:
        # model_dir=None: the pocket prompts and the default pocket task, never a model build.
        return build(name, params, prompts=prompts, model_dir=None)
    except GraphError as exc:
        raise click.UsageError(str(exc).splitlines()[0]) from None


def _parameters(name: str) -> str:
    from scaffold._errors import GraphError
    from scaffold.catalogue import topologies

    catalogue = topologies()
    try:
        return catalogue.describe_parameters(name)
    except GraphError as exc:
        raise click.UsageError(str(exc)) from None


def _calls(counts: dict[str, int]) -> str:
    return ", ".join(f"{alias}={n}" for alias, n in sorted(counts.items())) or "none"


@click.group("graph")
def graph_group() -> None:
    """List the ready-made topologies and show one's parameters and structure (no model needed).

    \b
    Examples:
      scaffold graph list
      scaffold graph params rsa
      scaffold graph show rsa -p n=8 -p steps=3
      scaffold graph show best_of_n --format text
    """


@graph_group.command("list")
@click.option("--params", "with_params", is_flag=True, help="Also list each topology's build parameters.")
def list_command(with_params: bool) -> None:
    """List the topologies `scaffold run` and `scaffold graph show` can name, one line each.

    \b
    Examples:
      scaffold graph list
      scaffold graph list --params
    """
    from scaffold.catalogue import topologies

    names = list(topologies().TOPOLOGIES)
    if not with_params:
        click.echo(table(["TOPOLOGY", "DESCRIPTION"], [[name, summary(name)] for name in names]))
        return
    for position, name in enumerate(names):
        if position:
            click.echo("")
        click.echo(f"{name}: {summary(name)}")
        for line in _parameters(name).splitlines():
            click.echo(f"  {line}")


@graph_group.command("params")
@click.argument("topology")
def params_command(topology: str) -> None:
    """Print the build parameters of TOPOLOGY with their defaults (what -p KEY=VALUE sets).

    \b
    Examples:
      scaffold graph params rsa
      scaffold graph params mixture_of_agents
    """
    click.echo(_parameters(topology))


@graph_group.command("show")
@click.argument("topology")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A build parameter (repeatable), e.g. -p n=8 -p steps=3; "
                   "`scaffold graph params TOPOLOGY` lists them.")
@click.option("--prompts", type=click.Choice(["pocket", "generic"]), default="generic", show_default=True,
              help="The topology's own prompts or the pocket model's (no model is built either way).")
@click.option("--format", "fmt", type=click.Choice(["mermaid", "text", "json"]), default="mermaid",
              show_default=True, help="A Mermaid flowchart, a table of nodes, or the JSON spec.")
def show_command(topology: str, params: tuple[str, ...], prompts: str, fmt: str) -> None:
    """Show TOPOLOGY's structure, built with its parameters, and its model calls per alias.

    TOPOLOGY is a ready-made one (`scaffold graph list`) or your own @sf.graph function as
    FILE.py:NAME or MODULE:NAME.

    The Mermaid flowchart ends with a `%% calls: ALIAS=N` comment (still valid Mermaid); the
    text table ends with its own `calls:` line. The counts come from a dry run: no model
    is called (loops that stop early count their most calls).

    \b
    Examples:
      scaffold graph show rsa -p n=8 -p steps=3
      scaffold graph show rsa --format text
      scaffold graph show self_consistency -p n=16 --format json | jq '.nodes[].name'
      scaffold graph show best_of_n --prompts pocket > best_of_n.mmd
    """
    graph = _build(topology, split_params(params), prompts)
    if fmt == "json":
        click.echo(json.dumps(graph.spec(), indent=2, default=str))
    elif fmt == "text":
        click.echo(graph.describe())  # its last line is already the dry-run call count per alias
    else:
        click.echo(graph.mermaid())
        click.echo(f"%% calls: {_calls(graph.count_calls())}")
