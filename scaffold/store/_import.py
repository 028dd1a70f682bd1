"""Recording outputs collected elsewhere (another framework, an earlier batch job, a public set of model traces) as
an evaluation of runs that can be voted, aggregated, replayed, browsed and exported like any other:
``Store.import_outputs`` (and ``scaffold.import_outputs``).

A file of rows (JSONL, CSV or Parquet), each a problem, its reference answer (optional) and a list of outputs,
becomes evaluation ``name``: one run per row (``{name}-{item}``, seed = item) of the graph ``imported``
(:data:`IMPORTED_SPEC`; :data:`scaffold.evaluation.IMPORTED` is that graph), whose node ``outputs`` holds the
outputs as external traces (with their model, tokens, cost, logprobs, and any other field as metadata:
``reasoning``...) and whose answer is their majority vote by the answer kind (node ``vote``). When rows carry a
reference, every output and the vote are scored as ``scaffold eval`` scores them, so ``load_report``,
:func:`~scaffold.evaluation.replay` and ``scaffold compare`` read an import as they read an evaluation.

The records are exactly those a run of that graph records (a test compares the two field by field), written
without running it: each output becomes the ``calls`` row its external trace would (:func:`output_row`, held equal
to it by a property test), the vote is computed as ``sf.vote`` computes it, and everything goes to the store's
writer in bulk, in the calling thread (``benchmarks/replay.py`` measures the rows a second). The garbage collector
is paused while the rows are read and the records written (they hold no cycles) and restored as it was.

Every row is checked before anything is recorded, so a bad row stops the import with a
:class:`~scaffold.DatasetError` naming its file and line and nothing recorded. Rows are recorded in order, each
scored last, so an import that was stopped resumes where it was, row by row, when run again with the same name
(the rows already scored are skipped). A row the database itself refuses (past the store's sanitiser) ends as an
``error`` run keeping what fitted, and the import raises a :class:`~scaffold.RecordError` naming the row once the
other rows are recorded: importing again records the refused rows again, scoring nothing twice.

Imported outputs carry no policy token ids or sampling logprobs of a model being trained: policy-gradient trainers
refuse them (see the training guide for supervised fine-tuning on them instead).
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scaffold._answers import Extractor
from scaffold._clusters import AnswerChecker, vote_summary
from scaffold._errors import DatasetError, EvaluationError, RecordError
from scaffold._external import TRACE_FIELDS as _TRACE_FIELDS
from scaffold._json import to_json
from scaffold._rows import read_table
from scaffold._types import Trace, TraceKind
from scaffold._values import INT32
from scaffold.answers import AnswerKind
from scaffold.answers import answer_kind as answer_kind_of
from scaffold.answers._kind import kind_settings
from scaffold.store import _codec as codec
from scaffold.store._evaluations import EVAL_SOURCE, same_evaluation
from scaffold.store._recorder import usage_totals

if TYPE_CHECKING:
    from scaffold.store._store import Store

__all__ = ["IMPORTED_SPEC", "Imported", "ImportedOutput", "ImportedRow", "import_rows"]

IMPORTED_SPEC: dict[str, Any] = {
    "name": "imported", "inputs": ["problem", "outputs"], "params": {},
    "nodes": [{"name": "outputs", "kind": "input", "alias": None, "size": None, "reads": [], "control": None},
              {"name": "vote", "kind": "vote", "alias": None, "size": 1, "reads": ["outputs"], "control": None}],
    "output": "vote",
}
"""The structure every imported run records: the spec of :data:`scaffold.evaluation.IMPORTED` (a test checks they
are the same)."""


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
    prompt_tokens: int = Field(default=0, ge=0, le=INT32[1])  # what every database's token columns hold
    completion_tokens: int = Field(default=0, ge=0, le=INT32[1])
    cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Dollars; ``None``: unknown (never taken as 0)."""
    logprobs: list[Annotated[float, Field(allow_inf_nan=False)]] | None = None
    """The sampled tokens' log-probabilities, when the file has them (DeepConf's confidence reads them)."""
    reasoning: str | None = None

    @field_validator("answer", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        """An answer given as a number (``42``, as a JSON file may hold it) is its text."""
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


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


def import_rows(store: Store, source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], *, name: str,
                answer_kind: AnswerKind | str | None = None, problem_key: str = "problem", answer_key: str = "answer",
                outputs_key: str = "outputs", dataset: str | None = None) -> Imported:
    """Record ``source`` (a file or rows) as evaluation ``name`` in ``store``; see :meth:`Store.import_outputs`."""
    if not isinstance(name, str) or not name or any(c.isspace() for c in name) or "/" in name:
        raise EvaluationError(f"an evaluation name must be non-empty without spaces or '/', got {name!r}")
    collecting = gc.isenabled()
    gc.disable()  # rows and records are acyclic: collecting young objects while making thousands a row only costs time
    try:
        return _import(store, source, name, answer_kind_of(answer_kind), problem_key, answer_key, outputs_key,
                       dataset or name)
    finally:
        if collecting:
            gc.enable()


def _import(store: Store, source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], name: str, kind: AnswerKind,
            problem_key: str, answer_key: str, outputs_key: str, dataset: str) -> Imported:
    where = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "rows"
    found = read_table(where) if isinstance(source, (str, os.PathLike)) else [
        (f"row {number}", row) for number, row in enumerate(source)]
    if not found:
        raise DatasetError(f"{where}: no rows to import")
    rows = [_checked(at, row, problem_key, answer_key, outputs_key) for at, row in found]
    settings: dict[str, Any] = {"graph": "imported", "imported_from": where, "rows": len(rows)}
    settings.update(kind_settings(kind))  # recorded, so that a report read later scores by the same kind
    saved = store.save_evaluation(name, graph="imported", dataset=dataset, settings=settings, problems=len(rows))
    same_evaluation(saved, "imported", dataset, to_json(settings), len(rows))
    run_ids = [f"{name}-{i}" for i in range(len(rows))]
    before = store.rewards_of(run_ids, source=EVAL_SOURCE)  # a resumed import: what is already scored
    failed = {run.id for run in store.runs(dataset=dataset, status="error")}  # refused before: recorded again
    scored = {r["run_id"] for r in before if r["call_id"] is None} - failed
    rewarded = {r["call_id"] or r["run_id"] for r in before}  # the ids of the calls and runs already scored
    data = store.dataset_rows(dataset, rows)  # checked, as JSON: each is the dataset's item and the run's inputs
    read = ("problem", "outputs", *(key for key in kind.inputs if key not in ("problem", "outputs")))

    def records() -> Iterator[tuple[Any, ...]]:
        yield ("dataset", {"name": dataset, "source": where if where != "rows" else None, "created_at": time.time()})
        for item, row in enumerate(data):
            yield ("item", {"dataset": dataset, "position": item, "data": row})
        for item, row in enumerate(rows):
            if run_ids[item] not in scored:
                inputs = {key: data[item][key] for key in read if key in data[item]}
                yield from _run_records(run_ids[item], item, row, inputs, kind, dataset, rewarded)

    store.writer.write(records())  # in this thread, in batches (no hand-over to the writer thread)
    # the runs the store refused end as ``error`` (the store counts them all; the writer remembers only its latest
    # refusals, but also those whose run row itself was refused)
    ended = {run.id: run.error for run in store.runs(dataset=dataset, status="error")}
    refused = [(at, why) for (at, _), run_id in zip(found, run_ids)
               if (why := store.writer.refusal(run_id) or ended.get(run_id))]
    if refused:
        raise RecordError(f"{where}: the store refused {len(refused)} of {len(rows)} rows (the first, {refused[0][0]}: "
                          f"{refused[0][1]}); the others are recorded, and importing again as {name!r} records the "
                          f"refused ones again")
    return Imported(name=name, rows=len(rows), outputs=sum(len(r["outputs"]) for r in rows),
                    scored=sum(r.get("answer") is not None for r in rows), source=where)


def _run_records(run_id: str, item: int, row: Mapping[str, Any], inputs: dict[str, Any], kind: AnswerKind,
                 dataset: str, rewarded: set[str]) -> Iterable[tuple[Any, ...]]:
    """What a run of ``imported`` over ``row`` records, in the order it records it, its scores last. The outputs
    go to the writer as ready ``calls`` rows (:func:`output_row`): the rows their external traces would give."""
    started = time.time()
    yield ("run", {
        "id": run_id, "graph": "imported", "spec": IMPORTED_SPEC, "params": {},
        "inputs": inputs, "models": {}, "seed": item,
        "status": "running", "error": None, "started_at": started, "finished_at": None, "output": None,
        "answer": None, "dataset": dataset, "item": item, "calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
        "cost": None, "attempts": 1,
    })
    bound = kind.bind(row)
    outputs = [output_row(run_id, "outputs", i, value, bound.extract) for i, value in enumerate(row["outputs"])]
    voters = [_Voter(o[0], o[_TEXT], o[_ANSWER]) for o in outputs]
    text, answer, metadata = vote_summary(voters, None, bound.same)
    voted = Trace(id=f"{run_id}/vote#0", run_id=run_id, node="vote", index=0, kind=TraceKind.RULE, text=text,
                  answer=answer, inputs=tuple(v.id for v in voters), started_at=time.time(), metadata=metadata)
    yield ("calls", outputs)
    yield ("trace", voted, None)
    yield ("end", {"id": run_id, "status": "ok", "error": None, "finished_at": time.time(), "output": voted.id,
                   "answer": answer, **usage_totals([], [(o[_PROMPT], o[_COMPLETION], o[_COST]) for o in outputs])},
           None)
    reference = row.get("answer")
    if reference is None:
        return
    check = AnswerChecker(str(reference), bound.same)
    rewards = [_reward(run_id, voter.id, check(voter.answer), {}) for voter in voters if voter.id not in rewarded]
    if run_id not in rewarded:
        rewards.append(_reward(run_id, None, check(answer), {"reference": str(reference)}))
    if rewards:
        yield ("rewards", rewards)


class _Voter(NamedTuple):
    """What a vote reads of an output (a :class:`~scaffold._clusters.Voter`)."""

    id: str
    text: str
    answer: str | None


_TEXT, _ANSWER, _PROMPT, _COMPLETION, _COST = (codec.CALL_COLUMNS.index(name) for name in (
    "text", "answer", "prompt_tokens", "completion_tokens", "cost"))


def output_row(run_id: str, node: str, index: int, value: Mapping[str, Any], extract: Extractor) -> tuple[Any, ...]:
    """The ``calls`` row (:data:`~scaffold.store._codec.CALL_COLUMNS`) of an output checked by :class:`ImportedOutput`
    (a mapping with ``text``), the same as ``codec.call_values(external_trace(...), None, None)`` without making the
    trace: an import makes one per output (a test holds the two equal)."""
    text = value["text"]
    answer = value.get("answer")
    metadata = {k: v for k, v in value.items() if k not in _TRACE_FIELDS} if len(value) > 1 else None
    finish_reason = metadata.pop("finish_reason", None) if metadata else None
    cost = value.get("cost")
    return (
        f"{run_id}/{node}#{index}", run_id, node, index, "external", value.get("model"), None, None, None, 1, None,
        text, str(answer) if answer is not None else extract(text), None, codec.pack_floats(value.get("logprobs")),
        value.get("prompt_tokens", 0), value.get("completion_tokens", 0), float(cost) if cost is not None else None,
        0.0, 0.0, 1, "ok", None, str(finish_reason) if finish_reason is not None else None,
        codec.json_text(metadata),
    )


def _reward(run_id: str, call_id: str | None, right: bool, metadata: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": run_id, "call_id": call_id, "value": float(right), "source": EVAL_SOURCE,
            "created_at": time.time(), "metadata": metadata}


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
    outputs = checked.model_dump(include={"outputs"}, exclude_none=True)["outputs"]  # one call for all of them
    inputs.update(problem=checked.problem, outputs=[_output(o) for o in outputs])
    if checked.answer is not None:
        inputs["answer"] = checked.answer
    return inputs


def _output(values: dict[str, Any]) -> dict[str, Any]:
    """An output (an :class:`ImportedOutput`'s values without its ``None`` fields) as a candidate mapping, without
    token counts of 0 (unknown); its extra keys and a known reasoning become the trace's metadata."""
    for key in ("prompt_tokens", "completion_tokens"):
        if not values.get(key):
            values.pop(key, None)
    return values
