"""Problem datasets: JSONL files of ``problem`` / ``answer`` rows, from any path.

The benchmark files of ``../shared/data/`` (AIME, HMMT, MATH-500, GSM8K, MATH train) and the
pocket task's exports share one schema: ``id``, ``problem``, ``answer`` (a string), ``source``.
:func:`load_problems` reads any such file; a row that is not JSON, lacks ``problem`` or
``answer``, or has an empty one raises :class:`~scaffold.errors.DatasetError` naming the file
and line, before anything runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from scaffold.errors import DatasetError


def load_problems(path: str | os.PathLike[str], *, limit: int | None = None,
                  problem_key: str = "problem", answer_key: str = "answer") -> list[dict[str, Any]]:
    """The rows of a JSONL problem file, each with ``problem`` and ``answer`` as strings (other fields kept).

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "p.jsonl"
        >>> _ = f.write_text('{"id": "a", "problem": "1+1", "answer": 2}\\n')
        >>> load_problems(f)
        [{'id': 'a', 'problem': '1+1', 'answer': '2'}]
    """
    file = Path(path)
    if not file.is_file():
        raise DatasetError(f"{file}: no such dataset file")
    rows: list[dict[str, Any]] = []
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetError(f"{file}:{number}: not JSON ({error.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{file}:{number}: a row must be a JSON object, got {type(row).__name__}")
            for key in (problem_key, answer_key):
                value = row.get(key)
                if value is None or (isinstance(value, str) and not value.strip()):
                    raise DatasetError(f"{file}:{number}: the row has no {key!r}")
                if isinstance(value, (dict, list)):
                    raise DatasetError(f"{file}:{number}: {key!r} must be a string or number")
            row = {**row, "problem": str(row[problem_key]), "answer": str(row[answer_key])}
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise DatasetError(f"{file}: the dataset is empty")
    return rows
