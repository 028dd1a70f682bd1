"""Problem rows: read from a JSONL stream or a Hugging Face dataset, and checked before anything runs.

Every row becomes a dict with ``problem`` and ``answer`` as strings (other fields kept). A row that is not
JSON, lacks ``problem`` or ``answer``, or has an empty one raises :class:`~scaffold._errors.DatasetError`
naming where it is (file and line, or dataset, split and row). Which file or dataset a name means is
:func:`scaffold.load_problems`'s business (:mod:`scaffold._data`).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from typing import Any

from scaffold._errors import DatasetError


def read_jsonl(lines: Iterable[str], where: str, *, limit: int | None = None, problem_key: str = "problem",
               answer_key: str = "answer") -> list[dict[str, Any]]:
    """The checked rows of JSONL ``lines`` (blank lines skipped); errors name ``where`` and the line.

    Examples:
        >>> read_jsonl(['{"problem": "1+1", "answer": 2}', "", '{"problem": "2+3", "answer": "5"}'], "p.jsonl")
        [{'problem': '1+1', 'answer': '2'}, {'problem': '2+3', 'answer': '5'}]
        >>> read_jsonl(['{"problem": "1+1", "answer": 2}', "{oops"], "p.jsonl")
        Traceback (most recent call last):
        scaffold._errors.DatasetError: p.jsonl:2: not JSON (Expecting property name enclosed in double quotes)
    """
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = _json_line(line, f"{where}:{number}")
        rows.append(check_row(row, f"{where}:{number}", problem_key, answer_key))
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DatasetError(f"{where}: the dataset is empty")
    return rows


def check_row(row: Any, where: str, problem_key: str = "problem", answer_key: str = "answer") -> dict[str, Any]:
    """``row`` with ``problem`` and ``answer`` as strings; :class:`DatasetError` naming ``where`` if it has none.

    A whole-number float answer (``27.0``, as some hub copies store them) becomes ``"27"``.

    Examples:
        >>> check_row({"question": "1+1", "solution": 2.0}, "f.jsonl:3", "question", "solution")["answer"]
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
    answer = row[answer_key]
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    return {**row, "problem": str(row[problem_key]), "answer": str(answer)}


def open_hub(name: str, split: str) -> Any:
    """The split ``split`` of the Hugging Face dataset ``name`` (a hub name, a local dataset directory of data files,
    or one ``save_to_disk`` wrote: a ``Dataset`` is its only split, a ``DatasetDict`` has them by name).

    Raises :class:`DatasetError` in one line when ``datasets`` is not installed or the dataset cannot be
    loaded (offline, unknown name, unknown split); never a traceback.
    """
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"{name}: loading a Hugging Face dataset needs the datasets package "
                           "(pip install scaffold-sdk[hub])") from None
    try:
        if os.path.isdir(name) and any(os.path.exists(os.path.join(name, f)) for f in ("state.json",
                                                                                       "dataset_dict.json")):
            saved = datasets.load_from_disk(name)  # written by Dataset.save_to_disk
            return saved[split] if isinstance(saved, datasets.DatasetDict) else saved
        return datasets.load_dataset(name, split=split)
    except Exception as error:  # offline, unknown name, unknown split: one message, never a traceback
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DatasetError(f"{name}: cannot load split {split!r} from the Hugging Face hub ({first})") from None


def hub_rows(table: Iterable[Any], where: str, *, limit: int | None = None, problem_key: str = "problem",
             answer_key: str = "answer") -> list[dict[str, Any]]:
    """The checked rows of a loaded Hugging Face split; errors name ``where`` and the row number.

    Examples:
        >>> hub_rows([{"question": "1+1", "answer": 2}], "org/set[test]", problem_key="question")
        [{'question': '1+1', 'answer': '2', 'problem': '1+1'}]
    """
    rows: list[dict[str, Any]] = []
    for number, row in enumerate(table):
        rows.append(check_row(dict(row), f"{where} row {number}", problem_key, answer_key))
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DatasetError(f"{where}: the dataset is empty")
    return rows


def load_hub_problems(name: str, *, split: str = "test", limit: int | None = None, problem_key: str = "problem",
                      answer_key: str = "answer") -> list[dict[str, Any]]:
    """The rows of a Hugging Face dataset (a hub name, or a local dataset directory), checked like a JSONL file.

    Needs ``pip install scaffold-sdk[hub]`` and, for a hub name, hub access (or the hub cache). A row
    without ``problem_key`` / ``answer_key`` raises :class:`DatasetError` naming the dataset, split and
    row number.

    Example (needs hub access)::

        rows = load_hub_problems("HuggingFaceH4/MATH-500", split="test", limit=50)
    """
    return hub_rows(open_hub(name, split), f"{name}[{split}]", limit=limit, problem_key=problem_key,
                    answer_key=answer_key)


TABLE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
"""The file kinds a problem file may be: JSON lines, CSV (a header row), Parquet (needs ``pyarrow``)."""


def _json_line(line: str, where: str) -> Any:
    """One line of a JSONL file as JSON data, or a :class:`DatasetError` naming ``where`` (``file:line``)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{where}: not JSON ({error.msg})") from None
    except RecursionError:
        raise DatasetError(f"{where}: nested too deeply to read") from None


def read_table(path: str, *, limit: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The rows of a JSONL, CSV or Parquet file as they are, each with where it is (``file:line``, or ``file row
    N`` for Parquet); not yet checked. Raises :class:`DatasetError` naming the file (and line) when it cannot be
    read.

    Examples:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "mc.csv"
        >>> _ = path.write_text("question,A,B,answer\\n2+2?,3,4,B\\n")
        >>> read_table(str(path))  # doctest: +ELLIPSIS
        [('...mc.csv:2', {'question': '2+2?', 'A': '3', 'B': '4', 'answer': 'B'})]
    """
    suffix = os.path.splitext(path)[1].lower()
    out: list[tuple[str, dict[str, Any]]] = []
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install scaffold-sdk[parquet])") from None
        try:
            table = pq.read_table(path)
        except Exception as error:  # not Parquet, truncated: one line, never a traceback
            raise DatasetError(f"{path}: not a readable Parquet file ({str(error).splitlines()[0]})") from None
        for number, row in enumerate(table.to_pylist()):
            out.append((f"{path} row {number}", row))
            if limit is not None and len(out) >= limit:
                break
        return out
    try:
        with open(path, encoding="utf-8", newline="" if suffix == ".csv" else None) as handle:
            return _csv_rows(handle, path, limit) if suffix == ".csv" else _jsonl_rows(handle, path, limit)
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None


def not_utf8(path: str, error: UnicodeDecodeError) -> DatasetError:
    """The error for a file that is not UTF-8 text, naming it and the first byte that is not."""
    return DatasetError(f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x} near byte {error.start} "
                        "of a block read)")


def _csv_rows(handle: Any, path: str, limit: int | None) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    reader = csv.DictReader(handle)
    before = csv.field_size_limit(_CSV_FIELD)  # a cell may hold a long output: the default stops at 131,072
    try:
        for row in reader:
            if None in row:
                raise DatasetError(f"{path}:{reader.line_num}: more fields than the header names")
            out.append((f"{path}:{reader.line_num}", dict(row)))
            if limit is not None and len(out) >= limit:
                break
    except csv.Error as error:
        raise DatasetError(f"{path}:{reader.line_num}: not CSV ({error})") from None
    finally:
        csv.field_size_limit(before)
    return out


_CSV_FIELD = 2**31 - 1
"""Characters a CSV cell may hold (the csv module's default is 131,072)."""


def _jsonl_rows(handle: Any, path: str, limit: int | None) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        row = _json_line(line, f"{path}:{number}")
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{number}: a row is a JSON object, got {type(row).__name__}")
        out.append((f"{path}:{number}", row))
        if limit is not None and len(out) >= limit:
            break
    return out
