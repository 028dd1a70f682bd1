"""Importing outputs collected elsewhere (another framework, an earlier batch job, a public set of model traces) as
recorded runs that can be voted, aggregated, replayed, browsed and exported like any other.

:func:`import_outputs` records a file (JSONL, CSV or Parquet) or rows as an evaluation of runs of :data:`IMPORTED`
(see :meth:`Store.import_outputs <scaffold.Store.import_outputs>`, which it calls, and
:mod:`scaffold.store._import`, which writes the records a run of :data:`IMPORTED` would, in bulk).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from scaffold._errors import DatasetError
from scaffold._graph import graph
from scaffold._rules import vote
from scaffold.answers import AnswerKind
from scaffold.store._default import resolve_store
from scaffold.store._import import Imported, ImportedOutput, ImportedRow

if TYPE_CHECKING:
    from scaffold.store._store import Store

__all__ = ["IMPORTED", "Imported", "ImportedOutput", "ImportedRow", "import_outputs"]


@graph
def imported(problem: Any, outputs: Any) -> Any:
    """Outputs collected elsewhere, voted by the run's answer kind."""
    return vote(outputs)


IMPORTED = imported.build()
"""The graph every imported row is a run of: its ``outputs`` (external traces), then their vote. An import records
what a run of it records without running it; :data:`scaffold.store._import.IMPORTED_SPEC` is its spec."""


def import_outputs(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], *, store: Store | str, name: str,
                   answer_kind: AnswerKind | str | None = None, problem_key: str = "problem",
                   answer_key: str = "answer", outputs_key: str = "outputs",
                   dataset: str | None = None) -> Imported:
    """Import a file (JSONL, CSV or Parquet) or rows of outputs collected elsewhere as evaluation ``name`` in
    ``store`` (a :class:`~scaffold.Store`, or a path or URL to open one): :meth:`Store.import_outputs
    <scaffold.Store.import_outputs>`, which says what a row holds. ``load_report(store, name)`` reports it as an
    evaluation: accuracy of the vote, pass@k and majority@k of the outputs, for rows with references.

    Examples:
        >>> import json, pathlib, tempfile
        >>> import scaffold as sf
        >>> from scaffold.evaluation import load_report
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "outputs.jsonl").write_text(json.dumps(
        ...     {"problem": "2+2", "answer": "4", "outputs": [r"\\boxed{4}", r"\\boxed{5}", r"\\boxed{4}"]}) + "\\n")
        >>> store = sf.Store(str(folder / "imported.db"))
        >>> sf.import_outputs(folder / "outputs.jsonl", store=store, name="elsewhere").outputs
        3
        >>> report = load_report(store, "elsewhere")
        >>> report.accuracy.value, round(report.pass_at_k[1].value, 3)
        (1.0, 0.667)
        >>> store.close()
    """
    target = resolve_store(store)
    if target is None:
        raise DatasetError("an import is recorded in a store; store=None is not allowed")
    return target.import_outputs(source, name=name, answer_kind=answer_kind, problem_key=problem_key,
                                 answer_key=answer_key, outputs_key=outputs_key, dataset=dataset)
