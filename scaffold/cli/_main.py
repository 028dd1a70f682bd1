"""The ``scaffold`` command line: run, evaluate and compare topologies; browse and export runs; train.

::

    scaffold [--store PATH_OR_URL] runs list   [filters] [--limit N] [--json]
    scaffold [--store PATH_OR_URL] runs show   RUN [--json] [--full]
    scaffold [--store PATH_OR_URL] runs export --out PATH [--format jsonl|parquet] [filters] [--run RUN ...]
    scaffold pocket build [--rebuild]
    scaffold pocket problems --n 100 --split test --out FILE
    scaffold [--store PATH_OR_URL] eval TOPOLOGY [-p KEY=VALUE ...] [--data NAME|FILE] [--model [ALIAS=]SPEC ...]
    scaffold data list [--json]
    scaffold [--store PATH_OR_URL] compare EVAL_A EVAL_B [--out DIR]
    scaffold [--store PATH_OR_URL] train [--model DIR] [--topology spiral|grpo|agglm] [--data NAME|FILE] [--steps N]
    scaffold [--store PATH_OR_URL] run TOPOLOGY --problem TEXT [-p KEY=VALUE ...] [--model [ALIAS=]SPEC ...] [--json]
    scaffold graph list [--params] | graph params TOPOLOGY | graph show TOPOLOGY [-p KEY=VALUE ...] [--format F]
    scaffold [--store PATH_OR_URL] serve TOPOLOGY [-p KEY=VALUE ...] [--model [ALIAS=]SPEC ...] [--name NAME] [--port N]
    scaffold [--store PATH_OR_URL] serve --config serve.toml
    scaffold [--store PATH_OR_URL] ui [--port N] [--training-log FILE ...]

``train`` comes from the ``trainers`` package and the topologies that ``run``, ``eval`` and ``graph``
name from ``graphs``: both are plugins, found through the ``scaffold.cli`` entry points
(:mod:`scaffold.catalogue`), so this package imports neither.

Also ``python -m scaffold``. Errors (an unknown run, a store that cannot be opened, a bad
time, a missing optional dependency: :mod:`scaffold.cli._extras` names its extra) print one line
and exit with a non-zero status; a store URL's password is never shown.
"""

from __future__ import annotations

import os
from typing import Any

import click

from scaffold.catalogue import registry
from scaffold.cli._common import StoreHandle
from scaffold.cli._compare import compare
from scaffold.cli._data import data_group
from scaffold.cli._evaluate import eval_command
from scaffold.cli._extras import missing_dependency
from scaffold.cli._graph import graph_group
from scaffold.cli._import import import_command
from scaffold.cli._pocket import pocket
from scaffold.cli._replay import replay_command
from scaffold.cli._run import run_command
from scaffold.cli._runs import runs
from scaffold.cli._serve import serve_command
from scaffold.cli._ui import ui_command


class _Group(click.Group):
    """The root group: store and database errors, and a missing optional dependency (with the extra that
    installs it), become one-line messages, never tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        from sqlalchemy.exc import SQLAlchemyError

        from scaffold._errors import ScaffoldError

        try:
            return super().invoke(ctx)
        except (ScaffoldError, SQLAlchemyError) as exc:
            handle = ctx.find_object(StoreHandle)
            message = f"{exc}" if isinstance(exc, ScaffoldError) else f"{type(exc).__name__}: {exc}"
            message = message.splitlines()[0] if message else type(exc).__name__
            raise click.ClickException(handle.redact(message) if handle is not None else message) from None
        except ImportError as exc:
            name = ctx.invoked_subcommand or ""
            command = self.commands.get(name)
            takes_models = command is not None and any(p.name == "model_values" for p in command.params)
            line = missing_dependency(exc, name, takes_models=takes_models)
            if line is None:
                raise
            raise click.ClickException(line) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", "target", metavar="PATH_OR_URL",
              help="The store to read and record into: a SQLite file or a database URL (sqlite:///runs.db, "
                   "postgresql://user@host/db). Default: $SCAFFOLD_STORE, else ./scaffold.db.")
@click.pass_context
def main(ctx: click.Context, target: str | None) -> None:
    """Scaffold: run and evaluate topologies, compare them at equal budget, browse recorded runs, train.

    \b
    The examples need `pip install 'scaffold-sdk[api]'` (and the provider's API key),
    unless they say what else they need: the default model, the local pocket model,
    needs scaffold-sdk[train].

    \b
    Examples:
      scaffold run self_consistency --model solver=openai/gpt-4o-mini -p n=8 --problem "12+7+30" --answer 49
      scaffold run self_consistency -p n=8 --problem "12+7+30" --answer 49   # needs scaffold-sdk[train]
      scaffold graph show rsa -p n=8 -p steps=3
      scaffold eval rsa --model openai/gpt-4o-mini --data math500 --limit 100 -p n=8 -p steps=1,3 --out out/rsa
      scaffold compare --list
      scaffold replay --from sc64 --method vote --method deepconf   # SC@1..64 from recorded samples, no calls
      scaffold runs list --since 2h
      scaffold runs show 3f2a9c
      python -m scaffold runs list --json
      scaffold --store postgresql://me@db/sf runs export --out calls.parquet   # needs scaffold-sdk[postgres,parquet]
      scaffold serve rsa --model solver=openai/gpt-4o-mini -p n=8 --name rsa-mini   # needs scaffold-sdk[serve]
      scaffold pocket build                                 # needs scaffold-sdk[train]
      scaffold train --topology spiral --steps 30           # needs scaffold-sdk[train]
    """
    from scaffold.store._default import ENV_VAR, default_target

    if target is not None:
        handle = StoreHandle(target, "--store")
    else:
        origin = f"${ENV_VAR}" if os.environ.get(ENV_VAR) is not None else "the default ./scaffold.db"
        handle = StoreHandle(default_target(), origin)
    ctx.obj = handle
    ctx.call_on_close(handle.close)


runs.add_command(import_command)
main.add_command(runs)
main.add_command(pocket)
main.add_command(eval_command)
main.add_command(compare)
main.add_command(replay_command)
main.add_command(data_group)
main.add_command(run_command)
main.add_command(graph_group)
main.add_command(serve_command)
main.add_command(ui_command)
for _command in registry().commands.values():  # train, from the trainers plugin
    main.add_command(_command)

__all__ = ["main"]
