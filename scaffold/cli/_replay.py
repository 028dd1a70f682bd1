"""``scaffold replay``: rule topologies over an evaluation's recorded samples, at every k, with no model call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

METHODS = ("vote", "weighted_vote", "best_of", "deepconf")
"""The rules ``--method`` takes: :data:`scaffold.evaluation.METHODS` (written out so the command line starts without
loading the evaluation package)."""


def _ks(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"--k takes sample counts separated by commas, e.g. 1,2,4,8; got {value!r}") \
            from None


@click.command("replay")
@click.option("--from", "name", required=True, metavar="EVALUATION",
              help="The recorded evaluation whose samples are replayed (`scaffold compare --list` shows them).")
@click.option("--method", "methods", multiple=True, type=click.Choice(list(METHODS)),
              help="A rule to replay (repeatable; default: vote). weighted_vote, best_of and deepconf weigh "
                   "samples by the confidence of their recorded logprobs.")
@click.option("--k", "ks", metavar="K,K,...", help="Sample counts to replay (default 1, 2, 4, ... and N).")
@click.option("--draws", type=click.IntRange(min=1), default=200, show_default=True,
              help="Random orders of each problem's samples (each gives every k).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--eta", type=click.FloatRange(min=0, min_open=True, max=1), default=0.1, show_default=True,
              help="The share of each subset DeepConf keeps (its confidence filter).")
@click.option("--samples-node", metavar="NODE", help="The node whose traces are the samples (default: the first "
                                                        "model node).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Write replay.json and the accuracy-against-budget plots (they need scaffold-sdk[plot]) here, "
                   "with the evaluation itself beside the replayed curves.")
@click.pass_obj
def replay_command(handle: Any, name: str, methods: tuple[str, ...], ks: str | None, draws: int, seed: int,
                   eta: float, samples_node: str | None, fmt: str, out: Path | None) -> None:
    """Replay rule topologies over a recorded evaluation's samples: self-consistency at every k up to the N
    sampled, and weighted votes, best-of-k and DeepConf's filter, with expected accuracy (95% bootstrap interval
    over problems), tokens and dollars at each k. No model is called.

    \b
    Examples:
      scaffold replay --from sc64
      scaffold replay --from sc64 --method vote --method deepconf --k 1,4,16,64 --out out/replay
      scaffold replay --from sc64 --format json
    """
    from scaffold.evaluation import load_report, replay

    store = handle.open()
    try:
        found = replay(store, name, methods=methods or ("vote",), ks=_ks(ks), draws=draws, seed=seed, eta=eta,
                       samples_node=samples_node)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(found.summary(), indent=2) if fmt == "json" else found.to_text())
    if out is not None:
        from scaffold.cli._evaluate import write_outputs

        for path in write_outputs([load_report(store, name)], out, [found]):
            click.echo(f"wrote {path}", err=True)
