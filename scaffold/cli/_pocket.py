"""``scaffold pocket``: build the pocket model and write its problems."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def pocket() -> None:
    """The pocket model: a tiny local reasoning model that needs no key, GPU or download.

    It needs torch: pip install 'scaffold-sdk[train]'. Its problems need nothing more.

    \b
    Examples:
      scaffold pocket build              # once, into the cache (minutes on 2 cores); needs scaffold-sdk[train]
      scaffold pocket build --rebuild                                              # needs scaffold-sdk[train]
      scaffold pocket build --quick      # a seconds-sized model for smoke tests; needs scaffold-sdk[train]
      scaffold pocket build --native     # faster, but this CPU's own model; needs scaffold-sdk[train]
      scaffold pocket problems --n 100 --split test --out pocket_test.jsonl
      scaffold pocket agent              # the pocket agent: long sums with a calculator; needs scaffold-sdk[train]
      scaffold pocket build --task parts # the task where the set matters (set-RL); needs scaffold-sdk[train]
      scaffold pocket problems --task parts --n 500 --split test --out parts_test.jsonl
    """


TASKS = ("sums", "parts")
"""``sums``: add a few numbers (the pocket model); ``parts``: sum every labelled part (the parts model, for set-RL)."""


@pocket.command("build")
@click.option("--task", type=click.Choice(TASKS), default="sums", show_default=True,
              help="sums: the pocket model (add a few numbers); parts: the parts model, whose candidates each work one "
                   "part of a problem and whose aggregation needs them to cover the parts (the task for set-RL).")
@click.option("--rebuild", is_flag=True, help="Build again even if the cache has a model.")
@click.option("--quick", is_flag=True,
              help="The seconds-sized model of the tests (2 x 2-digit sums), not the default one.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds weights, data and checks.")
@click.option("--native", is_flag=True,
              help="Train with this CPU's own kernels (about as fast) instead of the portable arithmetic "
                   "(pinned MKL and ATen kernels, whatever the caller's settings).")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where models are cached (default: $SCAFFOLD_CACHE, else ~/.cache/scaffold).")
def build(task: str, rebuild: bool, quick: bool, seed: int, native: bool, cache_dir: Path | None) -> None:
    """Build (or find) the pocket model and print where it is and what it scores."""
    from scaffold.pocket import PocketConfig, pocket_model

    if task == "parts":
        _build_parts(rebuild, quick, seed, native, cache_dir)
        return

    config = (PocketConfig.quick if quick else PocketConfig)(seed=seed, portable=not native)
    path = pocket_model(cache_dir=cache_dir, config=config, rebuild=rebuild)
    report = path / "pocket_report.json"
    click.echo(f"pocket model: {path}")
    if report.is_file():
        figures = json.loads(report.read_text())
        shown = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
                          if k in ("pass1", "pass8", "maj8", "maj4", "agg4", "build_seconds"))
        click.echo(f"held-out figures: {shown}")
    click.echo(f"use it: sf.TransformersBackend({str(path)!r}), or `vllm serve {path}`")
    click.echo(f"its problems: scaffold pocket problems --model-dir {path} --out problems.jsonl")


def _build_parts(rebuild: bool, quick: bool, seed: int, native: bool, cache_dir: Path | None) -> None:
    from scaffold.pocket import PartsConfig, parts_model

    if native:
        click.echo("note: the parts model always trains in this CPU's native arithmetic; --native changes nothing")
    config = (PartsConfig.quick if quick else PartsConfig)(seed=seed)
    path = parts_model(cache_dir=cache_dir, config=config, rebuild=rebuild)
    report = path / "pocket_report.json"
    click.echo(f"parts model: {path}")
    if report.is_file():
        figures = json.loads(report.read_text())
        held_out = figures.get("held_out", {})
        shown = ", ".join(f"{k} {held_out[k]:.2f}" for k in ("pass1", "pass8", "maj4", "agg4", "cover4")
                          if k in held_out)
        chosen = ", ".join(f"{k} {v:.2f}" for k, v in figures.get("shares", {}).items() if k != "none")
        seconds = figures.get("build_seconds", 0)
        click.echo(f"held-out figures: {shown}; parts chosen: {chosen}; built in {seconds:.0f} s")
    click.echo(f"use it: sf.TransformersBackend({str(path)!r}) with PARTS_SOLVE_PROMPT, and PARTS_AGGREGATE_PROMPT "
               "with render=PartsTask().show_candidates")
    click.echo("its problems: scaffold pocket problems --task parts --out problems.jsonl")


@pocket.command("agent")
@click.option("--rebuild", is_flag=True, help="Build again even if the cache has the agent.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the weights and the examples.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where models are cached (default: $SCAFFOLD_CACHE, else ~/.cache/scaffold).")
def agent(rebuild: bool, seed: int, cache_dir: Path | None) -> None:
    """Build (or find) the pocket agent, a tiny model that calls a calculator, and print what it scores."""
    from scaffold.pocket import PocketAgentConfig, pocket_agent

    path = pocket_agent(cache_dir=cache_dir, config=PocketAgentConfig(seed=seed), rebuild=rebuild)
    report = path / "pocket_report.json"
    click.echo(f"pocket agent: {path}")
    if report.is_file():
        figures = json.loads(report.read_text())
        held_out = figures.get("held_out", {})
        shown = ", ".join(f"{k} {held_out[k]:.2f}" for k in ("success", "tool_use", "tool_success", "direct_success")
                          if k in held_out)
        click.echo(f"held-out figures (temperature 1): {shown}; built in {figures.get('build_seconds', 0):.0f} s")
    click.echo(f"use it: sf.agent(AGENT_PROMPT, tools=[calculator], ...) on sf.TransformersBackend({str(path)!r}), "
               f"or `vllm serve {path} --enable-auto-tool-choice --tool-call-parser hermes`")


@pocket.command("problems")
@click.option("--task", type=click.Choice(TASKS), default="sums", show_default=True,
              help="sums: a few numbers to add; parts: labelled parts to sum (the parts model's task).")
@click.option("--n", "count", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--split", type=click.Choice(["train", "validation", "test"]), default="test", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--digits", type=click.IntRange(min=1), help="Digits per operand (default 3, or the model's).")
@click.option("--terms", type=click.IntRange(min=2), help="Operands per problem (default 3, or the model's).")
@click.option("--model-dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Write problems of the task this pocket model was trained on.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A JSONL file in the schema of the benchmark data (id, problem, answer, source).")
def problems(task: str, count: int, split: str, seed: int, digits: int | None, terms: int | None,
             model_dir: Path | None, out: Path) -> None:
    """Write pocket problems as JSONL (the train, validation and test splits never share a problem)."""
    from scaffold.pocket import PartsTask, PocketTask, pocket_task

    if task == "parts":
        if digits is not None or terms is not None:
            raise click.UsageError("--digits and --terms shape the sums task; the parts task has its own")
        parts = PartsTask()
        if model_dir is not None:
            from scaffold.pocket._parts_build import parts_config

            try:
                parts = parts_config(model_dir).task
            except ValueError as error:
                raise click.UsageError(str(error)) from None
        PocketTask().write_jsonl(out, parts.problems(count, seed=seed, split=split))
        click.echo(f"{count} problems written to {out}")
        return

    try:
        base = pocket_task(model_dir) if model_dir is not None else PocketTask()
        sums = PocketTask(digits=digits or base.digits, terms=terms or base.terms)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    try:
        rows = sums.problems(count, seed=seed, split=split)
    except ValueError as error:  # more problems than the split holds
        raise click.UsageError(str(error)) from None
    sums.write_jsonl(out, rows)
    click.echo(f"{len(rows)} problems written to {out}")
