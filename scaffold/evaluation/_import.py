"""Importing outputs collected elsewhere (another framework, an earlier batch job, a public set of model traces) as
recorded runs that can be voted, aggregated, replayed, browsed and exported like any other.

A file of rows (JSONL, CSV or Parquet), each a problem, its reference answer (optional) and a list of outputs,
becomes an evaluation named ``name``: one run per row (``{name}-{item}``) of the graph :data:`IMPORTED`, whose
outputs are external traces (node ``outputs``, with their model, tokens, cost, logprobs, and any other field as
metadata: ``reasoning``...) and whose answer is their majority vote by the answer kind. When rows carry a
reference, every output and the vote are scored as ``scaffold eval`` scores them, so ``load_report``,
:func:`~scaffold.evaluation.replay` and ``scaffold compare`` read an import as they read an evaluation.

Every row is checked before anything is recorded, so a bad row stops the import with a
:class:`~scaffold.DatasetError` naming its file and line and nothing half imported. Recording is an evaluation,
so an import that was stopped resumes where it was, row by row, when run again with the same name.

Imported outputs carry no policy token ids or sampling logprobs of a model being trained: policy-gradient trainers
refuse them (see the training guide for supervised fine-tuning on them instead).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scaffold._errors import DatasetError
from scaffold._graph import graph
from scaffold._rows import read_table
from scaffold._rules import vote
from scaffold._sync import no_running_loop, run_released
from scaffold.answers import AnswerKind
from scaffold.evaluation._harness import record_evaluation
from scaffold.store._default import resolve_store

if TYPE_CHECKING:
    from scaffold.store._store import Store

__all__ = ["IMPORTED", "Imported", "ImportedOutput", "ImportedRow", "import_outputs"]


@dataclass(frozen=True, slots=True)
class Imported:
    """What :func:`import_outputs` recorded: evaluation ``name``, its rows (runs), their outputs, and how many rows
    had a reference (those are scored). ``load_report(store, name)`` gives its report."""

    name: str
    rows: int
    outputs: int
    scored: int
    source: str


class ImportedOutput(BaseModel):
    """One output of an imported row: its text, and what else is known of it (other keys become metadata)."""

    model_config = ConfigDict(extra="allow", strict=False)

    text: str
    answer: str | None = None
    """The output's answer, when the file gives it; else extracted from the text by the answer kind."""
    model: str | None = None
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost: float | None = Field(default=None, ge=0)
    """Dollars; ``None``: unknown (never taken as 0)."""
    logprobs: list[float] | None = None
    """The sampled tokens' log-probabilities, when the file has them (DeepConf's confidence reads them)."""
    reasoning: str | None = None


class ImportedRow(BaseModel):
    """One imported row, as :func:`import_outputs` reads it (after its keys are mapped)."""

    model_config = ConfigDict(extra="allow")

    problem: str = Field(min_length=1)
    answer: str | None = None
    """The reference answer (optional: without it the outputs are recorded and voted, not scored)."""
    outputs: list[ImportedOutput] = Field(min_length=1)

    @field_validator("outputs", mode="before")
    @classmethod
    def _outputs(cls, value: Any) -> Any:
        if isinstance(value, str):  # a CSV cell: the outputs as a JSON list
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError("outputs must be a list (a CSV cell holds it as JSON)") from None
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            return [{"text": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _reference(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return value if isinstance(value, str) else str(value)


@graph
def imported(problem: Any, outputs: Any) -> Any:
    """Outputs collected elsewhere, voted by the run's answer kind."""
    return vote(outputs)


IMPORTED = imported.build()
"""The graph every imported row is a run of: its ``outputs`` (external traces), then their vote."""


def import_outputs(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], *, store: Store | str, name: str,
                   answer_kind: AnswerKind | str | None = None, problem_key: str = "problem",
                   answer_key: str = "answer", outputs_key: str = "outputs", dataset: str | None = None,
                   concurrency: int = 256) -> Imported:
    """Import a file (JSONL, CSV or Parquet) or rows of outputs collected elsewhere as evaluation ``name`` in
    ``store``; returns what was recorded (:class:`Imported`). ``load_report(store, name)`` reports it as an
    evaluation (accuracy of the vote, pass@k and majority@k of the outputs, for rows with references).

    A row has a problem (``problem_key``), optionally a reference answer (``answer_key``) and a list of outputs
    (``outputs_key``): strings, or objects with ``text`` and any of ``answer``, ``model``, ``prompt_tokens``,
    ``completion_tokens``, ``cost``, ``logprobs`` and ``reasoning`` (other keys are kept as metadata). In CSV,
    the outputs cell holds that list as JSON. A row's other keys are kept with it in the dataset (``store.item``).

    Examples:
        >>> import os, tempfile
        >>> import scaffold as sf
        >>> rows = [{"problem": "2+2", "answer": "4", "outputs": [r"\\boxed{4}", r"\\boxed{5}", r"\\boxed{4}"]},
        ...         {"problem": "3+3", "answer": "6", "outputs": [{"text": r"\\boxed{7}", "model": "m1"}]}]
        >>> store = sf.Store(os.path.join(tempfile.mkdtemp(), "imported.db"))
        >>> sf.import_outputs(rows, store=store, name="elsewhere")
        Imported(name='elsewhere', rows=2, outputs=4, scored=2, source='rows')
        >>> from scaffold.evaluation import load_report
        >>> report = load_report(store, "elsewhere")
        >>> report.accuracy.value, report.pass_at_k[1].value
        (0.5, 0.3333333333333333)
        >>> store.close()
    """
    no_running_loop("import_outputs", "the graph scaffold.evaluation.IMPORTED with record_evaluation(...)")
    where = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "rows"
    found = read_table(where) if isinstance(source, (str, os.PathLike)) else [
        (f"row {number}", row) for number, row in enumerate(source)]
    if not found:
        raise DatasetError(f"{where}: no rows to import")
    rows = [_checked(at, row, problem_key, answer_key, outputs_key) for at, row in found]
    target = resolve_store(store)
    if target is None:
        raise DatasetError("an import is recorded in a store; store=None is not allowed")
    run_released(record_evaluation(IMPORTED, rows, {}, name=name, store=target, dataset=dataset or name,
                                   source=where if where != "rows" else None, concurrency=concurrency,
                                   answer_kind=answer_kind, require_answers=False,
                                   settings={"graph": "imported", "imported_from": where, "rows": len(rows)}), {})
    return Imported(name=name, rows=len(rows), outputs=sum(len(r["outputs"]) for r in rows),
                    scored=sum(r.get("answer") is not None for r in rows), source=where)


def _checked(at: str, row: Mapping[str, Any], problem_key: str, answer_key: str, outputs_key: str) -> dict[str, Any]:
    """One row, checked and made into a run's inputs (``problem``, ``outputs``; ``answer``: the reference)."""
    if not isinstance(row, Mapping):
        raise DatasetError(f"{at}: a row is an object with {problem_key!r} and {outputs_key!r}, got "
                           f"{type(row).__name__}")
    missing = [key for key in (problem_key, outputs_key) if key not in row]
    if missing:
        raise DatasetError(f"{at}: no {' and no '.join(repr(k) for k in missing)} (the row has "
                           f"{', '.join(map(repr, row)) or 'no keys'})")
    mapped = {key: value for key, value in row.items() if key not in (problem_key, answer_key, outputs_key)}
    mapped.update(problem=row[problem_key], answer=row.get(answer_key), outputs=row[outputs_key])
    try:
        checked = ImportedRow.model_validate(mapped)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise DatasetError(f"{at}: {field}: {first['msg']}") from None
    inputs = {key: value for key, value in mapped.items() if key not in ("problem", "answer", "outputs")}
    inputs.update(problem=checked.problem, outputs=[_output(o) for o in checked.outputs])
    if checked.answer is not None:
        inputs["answer"] = checked.answer
    return inputs


def _output(output: ImportedOutput) -> dict[str, Any]:
    """An output as a candidate mapping (its extra keys and a known reasoning as metadata)."""
    values = output.model_dump(exclude_none=True)
    for key in ("prompt_tokens", "completion_tokens"):
        if not values.get(key):
            values.pop(key, None)
    return values
