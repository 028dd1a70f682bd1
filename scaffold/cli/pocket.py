"""``scaffold pocket``: build the pocket model and write its problems."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def pocket() -> None:
    """The pocket model: a tiny local reasoning model that needs no key, GPU or download.

    \b
    Examples:
      scaffold pocket build                # build once into the cache (a few minutes on 2 cores)
      scaffold pocket build --rebuild
      scaffold pocket problems --n 100 --split test --out pocket_test.jsonl
    """


@pocket.command("build")
@click.option("--rebuild", is_flag=True, help="Build again even if the cache has a model.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where models are cached (default: $SCAFFOLD_CACHE, else ~/.cache/scaffold).")
def build(rebuild: bool, cache_dir: Path | None) -> None:
    """Build (or find) the pocket model and print where it is and what it scores."""
    from scaffold.pocket import pocket_model

    path = pocket_model(cache_dir=cache_dir, rebuild=rebuild)
    report = path / "pocket_report.json"
    click.echo(f"pocket model: {path}")
    if report.is_file():
        figures = json.loads(report.read_text())
        shown = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
                          if k in ("pass1", "pass8", "maj8", "maj4", "agg4", "build_seconds"))
        click.echo(f"held-out figures: {shown}")
    click.echo(f"use it: sf.TransformersBackend({str(path)!r}), or `vllm serve {path}`")


@pocket.command("problems")
@click.option("--n", "count", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--split", type=click.Choice(["train", "test"]), default="test", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A JSONL file in the schema of the benchmark data (id, problem, answer, source).")
def problems(count: int, split: str, seed: int, out: Path) -> None:
    """Write pocket problems as JSONL."""
    from scaffold.pocket import PocketTask

    task = PocketTask()
    rows = task.problems(count, seed=seed, split=split)
    task.write_jsonl(out, rows)
    click.echo(f"{len(rows)} problems written to {out}")
