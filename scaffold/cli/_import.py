"""``scaffold runs import``: outputs collected elsewhere, recorded as runs (see :mod:`scaffold.evaluation._import`)."""

from __future__ import annotations

from pathlib import Path

import click

from scaffold.cli._common import StoreHandle


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="The evaluation the rows become (runs NAME-0, NAME-1, ...); the same "
                                            "name again resumes an import that was stopped.")
@click.option("--answer-kind", type=click.Choice(["math", "integer", "choice", "text", "json"]), default="math",
              show_default=True, help="How the outputs' answers are read, voted and scored (scaffold.answers).")
@click.option("--numbered", is_flag=True, help="With --answer-kind choice: the prompts numbered their options 1, 2, "
                                              "..., so an answer stated as a number (\"Answer: 3\") is its option's "
                                              "letter (C).")
@click.option("--problem-key", default="problem", show_default=True, help="The problem field of the rows.")
@click.option("--answer-key", default="answer", show_default=True,
              help="The reference answer field (optional: rows without it are recorded, not scored).")
@click.option("--outputs-key", default="outputs", show_default=True,
              help="The outputs field: a list of texts, or of objects with text and any of answer, model, "
                   "prompt_tokens, completion_tokens, cost, logprobs, reasoning (other keys are kept as metadata; "
                   "a CSV cell holds the list as JSON).")
@click.option("--dataset", help="The dataset the rows are recorded as (default: the name).")
def import_command(file: Path, name: str, answer_kind: str, numbered: bool, problem_key: str, answer_key: str,
                   outputs_key: str, dataset: str | None) -> None:
    """Import a JSONL, CSV or Parquet file of outputs collected elsewhere as recorded runs: one run per row, its
    outputs voted by the answer kind and, where the row has a reference, scored. The runs can then be compared,
    replayed (`scaffold replay --from NAME`), browsed (`scaffold ui`) and exported like any evaluation's.

    Every row is checked first: a bad row stops the import naming its file and line, with nothing recorded. A row
    the database itself refuses is named too, after the other rows are recorded; the same name again records it.

    \b
    Examples:
      scaffold runs import outputs.jsonl --name elsewhere
      scaffold runs import mmlu_outputs.csv --name mmlu-gpt --answer-kind choice
      scaffold runs import ksat_outputs.jsonl --name ksat --answer-kind choice --numbered
      scaffold compare elsewhere
      scaffold replay --from elsewhere --k 1,2,4,8
    """
    from scaffold.answers import answer_kind as answer_kind_of
    from scaffold.evaluation import import_outputs
    from scaffold.store._default import resolve_store

    if numbered and answer_kind != "choice":
        raise click.BadParameter("--numbered reads option numbers: it goes with --answer-kind choice",
                                 param_hint="--numbered")
    kind = answer_kind_of(answer_kind, **({"numbered": True} if numbered else {}))

    handle = click.get_current_context().find_object(StoreHandle)
    assert handle is not None, "the scaffold group sets the store handle"
    store = resolve_store(handle.target)  # made if it is not there yet: an import records
    if store is None:
        raise click.UsageError("an import is recorded in a store; $SCAFFOLD_STORE turns it off: pass --store")
    done = import_outputs(file, store=store, name=name, answer_kind=kind, problem_key=problem_key,
                          answer_key=answer_key, outputs_key=outputs_key, dataset=dataset)
    click.echo(f"imported {done.rows} rows ({done.outputs} outputs, {done.scored} with a reference) as "
               f"evaluation {done.name!r}")
