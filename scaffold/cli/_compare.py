"""``scaffold compare``: evaluations side by side at equal budget: table, paired difference and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


@click.command("compare")
@click.argument("names", nargs=-1, required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "csv", "json"]), default="text",
              show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Write report.json, problems.csv, compare.md/.csv and the plots (PNG; they need "
                   "scaffold-sdk[plot]) here.")
@click.option("--list", "list_only", is_flag=True, help="List the evaluations in the store and exit.")
@click.option("--replay", "replayed", multiple=True, metavar="NAME",
              help="Also replay majority votes over this evaluation's recorded samples at every k (no model "
                   "call; see `scaffold replay`): printed, and drawn beside the evaluations. Repeatable.")
@click.pass_obj
def compare(handle: Any, names: tuple[str, ...], fmt: str, out: Path | None, list_only: bool,
            replayed: tuple[str, ...]) -> None:
    """Compare evaluations (by name, or by a prefix naming several): accuracy against tokens and dollars.

    The table has one row per evaluation, cheapest first: accuracy with its 95% bootstrap
    interval, pass@1, majority@k, tokens, dollars, seconds and calls per problem. Two
    evaluations of the same dataset also get their paired difference (accuracy of the first
    minus the second, problem by problem, with a bootstrap interval).

    \b
    Examples:
      scaffold compare --list
      scaffold compare rsa-pocket-3x3-test-s0-n100-1a2b3c self_consistency-pocket-3x3-test-s0-n100-4d5e6f
      scaffold compare sc-sweep rsa-sweep --out out/compare     # every evaluation named sc-sweep.* and rsa-sweep.*
      scaffold compare A B --format markdown >> RESULTS.md
      scaffold compare sc4 sc8 --replay sc64 --out out/compare   # sc@1..64 from sc64's samples, beside them
    """
    from scaffold.evaluation import (
        comparison_rows,
        load_report,
        paired_difference,
        replay,
        to_csv,
        to_markdown,
        to_text,
    )

    store = handle.open()
    if list_only:
        for info in store.evaluations():
            click.echo(f"{info.name}  {info.graph}  {info.dataset}  {info.problems} problems")
        return
    if not names and not replayed:
        raise click.UsageError("name the evaluations to compare (scaffold compare --list shows them)")
    chosen: list[str] = []
    for name in names:
        matching = [e.name for e in store.evaluations(prefix=name)]
        found = [name] if name in matching else matching  # an exact name, else every name it begins
        if not found:
            raise click.UsageError(f"no evaluation named {name!r} (or starting with it) in the store; "
                                   "scaffold compare --list shows them")
        chosen += [n for n in found if n not in chosen]
    reports = [load_report(store, name) for name in chosen]
    replays = [replay(store, name) for name in replayed]
    rows = comparison_rows(reports)
    pair = None
    if len(reports) == 2 and reports[0].dataset == reports[1].dataset:
        pair = paired_difference(reports[0], reports[1])
    if fmt == "json":
        click.echo(json.dumps({"rows": rows, "paired": None if pair is None else {
            "a": pair.a, "b": pair.b, "problems": pair.problems, "difference": pair.difference.as_dict(),
            "only_a": pair.only_a, "only_b": pair.only_b, "token_ratio": pair.token_ratio},
            "replays": [r.summary() for r in replays]}, indent=2))
    elif fmt == "csv":
        click.echo(to_csv(rows), nl=False)
    else:
        click.echo(to_markdown(rows) if fmt == "markdown" else to_text(rows))
        if pair is not None:
            click.echo()
            click.echo(str(pair))
        for curves in replays:
            click.echo()
            click.echo(curves.to_text())
    if out is not None:
        from scaffold.cli._evaluate import write_outputs

        for path in write_outputs(reports, out, replays):
            click.echo(f"wrote {path}", err=True)
