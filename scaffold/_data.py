"""Problem datasets: JSONL files of ``problem`` / ``answer`` rows, from any path.

The benchmark files of ``../shared/data/`` (AIME, HMMT, MATH-500, GSM8K, MATH train) and the
pocket task's exports share one schema: ``id``, ``problem``, ``answer`` (a string), ``source``.
:func:`load_problems` reads any such file; a row that is not JSON, lacks ``problem`` or
``answer``, or has an empty one raises :class:`~scaffold._errors.DatasetError` naming the file
and line, before anything runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from scaffold._errors import DatasetError


def load_problems(path: str | os.PathLike[str], *, limit: int | None = None,
                  problem_key: str = "problem", answer_key: str = "answer") -> list[dict[str, Any]]:
    """The rows of a JSONL problem file, each with ``problem`` and ``answer`` as strings (other fields kept).

    Examples:
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
            row = check_row(row, f"{file}:{number}", problem_key, answer_key)
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise DatasetError(f"{file}: the dataset is empty")
    return rows


def check_row(row: Any, where: str, problem_key: str = "problem", answer_key: str = "answer") -> dict[str, Any]:
    """``row`` with ``problem`` and ``answer`` as strings; :class:`DatasetError` naming ``where`` if it has none.

    Examples:
        >>> check_row({"question": "1+1", "solution": 2}, "f.jsonl:3", "question", "solution")["answer"]
        '2'
        >>> check_row({"problem": "1+1"}, "f.jsonl:3")
        Traceback (most recent call last):
        scaffold._errors.DatasetError: f.jsonl:3: the row has no 'answer'
    """
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    for key in (problem_key, answer_key):
        value = row.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise DatasetError(f"{where}: the row has no {key!r}")
        if isinstance(value, (dict, list)):
            raise DatasetError(f"{where}: {key!r} must be a string or number")
    return {**row, "problem": str(row[problem_key]), "answer": str(row[answer_key])}


def load_hub_problems(name: str, *, split: str = "test", limit: int | None = None, problem_key: str = "problem",
                      answer_key: str = "answer") -> list[dict[str, Any]]:
    """The rows of a Hugging Face dataset (a hub name, or a local dataset directory), checked like a JSONL file.

    Needs ``pip install datasets`` and, for a hub name, the network (or the hub cache). A row
    without ``problem_key`` / ``answer_key`` raises :class:`DatasetError` naming the dataset,
    split and row number.

    Example (needs the network)::

        rows = load_hub_problems("HuggingFaceH4/MATH-500", split="test", limit=50)
    """
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"{name}: loading a Hugging Face dataset needs the datasets package "
                           "(pip install scaffold-sdk[hub])") from None
    try:
        table = datasets.load_dataset(name, split=split)
    except Exception as error:  # offline, unknown name, unknown split: one message, never a traceback
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DatasetError(f"{name}: cannot load split {split!r} from the Hugging Face hub ({first})") from None
    rows: list[dict[str, Any]] = []
    for number, row in enumerate(table):
        rows.append(check_row(dict(row), f"{name}[{split}] row {number}", problem_key, answer_key))
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DatasetError(f"{name}[{split}]: the dataset is empty")
    return rows
