"""``scaffold data list``: the problem sets ``--data`` takes by name, shipped or on the Hugging Face hub."""

from __future__ import annotations

import json

import click


@click.group("data")
def data_group() -> None:
    """The problem sets that --data takes by name (see `scaffold data list`)."""


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the sets as JSON.")
def data_list(as_json: bool) -> None:
    """The sets that ship with scaffold (rows, license) and the competition sets loaded from the hub.

    \b
    Examples:
      scaffold data list
      scaffold eval rsa --data math500 --limit 50 --model openai/gpt-4o-mini
    """
    from dataclasses import asdict

    from scaffold._data import DATASETS, HUB_DATASETS

    if as_json:
        click.echo(json.dumps({"shipped": [asdict(d) for d in DATASETS.values()],
                               "hub": [asdict(d) for d in HUB_DATASETS.values()]}, indent=2))
        return
    click.echo("shipped with scaffold (load offline):")
    for shipped in DATASETS.values():
        click.echo(f"  {shipped.name:<12} {shipped.rows:>5} rows  {shipped.split:<5}  {shipped.license}  "
                   f"{shipped.title}")
    click.echo("not shipped, loaded from the Hugging Face hub (pip install scaffold-sdk[hub]; needs hub access):")
    for known in HUB_DATASETS.values():
        click.echo(f"  {known.name:<12} {known.hub} [{known.split}]  {known.title}; problems owned by {known.owner}")


data_group.add_command(data_list)
