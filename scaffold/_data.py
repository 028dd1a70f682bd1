"""Problem sets by name: three ship with the package, the competition sets load from the hub, or any path.

:func:`load_problems` looks its argument up in this order:

1. among the shipped sets (:data:`DATASETS`): ``math500``, ``gsm8k`` and ``math_train``, MIT-licensed
   and packaged in ``scaffold/data/`` with their provenance (``PROVENANCE.md`` there);
2. as a path: a JSONL file of ``problem`` / ``answer`` rows, or a local Hugging Face dataset directory;
3. as a Hugging Face hub dataset, through ``datasets`` (``pip install scaffold-sdk[hub]``): a competition
   set known by name (:data:`HUB_DATASETS`: ``aime24``, ``aime25``, ``hmmt_feb25``, ``amc23``) or any
   ``OWNER/NAME``.

When nothing resolves, :class:`~scaffold._errors.DatasetError` says what each step found. AIME, AMC and
HMMT problems belong to their organisers (MAA, HMMT), so they do not ship: they load from the hub where
you have access, or from a file you make. Rows are read and checked by :mod:`scaffold._rows`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from scaffold._errors import DatasetError
from scaffold._rows import check_row, hub_rows, load_hub_problems, not_utf8, open_hub, read_jsonl, read_table
from scaffold.answers import CHOICES_TEMPLATE, AnswerKind, ChoiceAnswer
from scaffold.answers import answer_kind as answer_kind_of
from scaffold.answers._rows import choice_rows_at


@dataclass(frozen=True, kw_only=True)
class ShippedDataset:
    """A problem set that ships inside the package: MIT-licensed, its provenance in ``scaffold/data/PROVENANCE.md``.

    Examples:
        >>> import scaffold as sf
        >>> sf.DATASETS["gsm8k"].rows, sf.DATASETS["gsm8k"].license
        (1319, 'MIT')
    """

    name: str
    """What :func:`load_problems` and ``scaffold eval --data`` take."""
    title: str
    """What the set is, in a few words."""
    file: str
    """The JSONL file in the package's ``data`` folder."""
    rows: int
    """How many problems it holds."""
    split: str
    """The split of the original dataset it is (``test`` or ``train``)."""
    source: str
    """The public repository it was copied from, as ``owner/name@commit``."""
    license: str
    """The license of that repository (and of the data)."""

    def open(self) -> IO[str]:
        """The packaged file, open for reading (found through ``importlib.resources``, so a wheel works too)."""
        return (resources.files("scaffold") / "data" / self.file).open("r", encoding="utf-8")


@dataclass(frozen=True, kw_only=True)
class HubDataset:
    """A competition set known by name that does not ship (its problems belong to its organiser): it loads
    from the Hugging Face hub, where you have access.

    Examples:
        >>> import scaffold as sf
        >>> sf.HUB_DATASETS["aime24"].hub, sf.HUB_DATASETS["aime24"].split
        ('HuggingFaceH4/aime_2024', 'train')
    """

    name: str
    """What :func:`load_problems` and ``scaffold eval --data`` take."""
    title: str
    """The competition and year."""
    owner: str
    """Whose problems they are."""
    hub: str
    """The Hugging Face hub dataset it loads from."""
    split: str
    """The split of that dataset that holds the problems."""
    problem_key: str = "problem"
    """The column of the problem statement."""
    answer_key: str = "answer"
    """The column of the final answer."""


DATASETS: Mapping[str, ShippedDataset] = MappingProxyType({d.name: d for d in (
    ShippedDataset(name="math500", title="MATH-500, the 500-problem test subset of MATH", file="math500.jsonl",
                   rows=500, split="test", source="hkust-nlp/simpleRL-reason@cf1c7858bfc145a27aa733e75d930d34f0d318a6",
                   license="MIT"),
    ShippedDataset(name="gsm8k", title="GSM8K, grade-school math word problems", file="gsm8k_test.jsonl",
                   rows=1319, split="test", source="openai/grade-school-math@3101c7d5072418e28b9008a6636bde82a006892c",
                   license="MIT"),
    ShippedDataset(name="math_train", title="MATH train split, answers taken from the solutions' \\boxed{}",
                   file="math_train.jsonl", rows=7464, split="train",
                   source="agentica-project/deepscaler@95ef74ffee001cce89463f2d61dfdce1d03576c1", license="MIT"),
)})
"""The problem sets that ship with the package, by name: ``math500``, ``gsm8k`` (the test split), ``math_train``."""

HUB_DATASETS: Mapping[str, HubDataset] = MappingProxyType({d.name: d for d in (
    HubDataset(name="aime24", title="AIME 2024 (I and II)", owner="MAA", hub="HuggingFaceH4/aime_2024", split="train"),
    HubDataset(name="aime25", title="AIME 2025 (I and II)", owner="MAA", hub="MathArena/aime_2025", split="train"),
    HubDataset(name="hmmt_feb25", title="HMMT February 2025", owner="HMMT", hub="MathArena/hmmt_feb_2025",
               split="train"),
    HubDataset(name="amc23", title="AMC 2023", owner="MAA", hub="math-ai/amc23", split="test",
               problem_key="question"),
)})
"""The competition sets known by name that do not ship, by name: each loads from its Hugging Face dataset."""

_ALIASES = {"gsm8k_test": "gsm8k"}
_HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")
_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt", ".gz")


def load_problems(source: str | os.PathLike[str], *, limit: int | None = None, split: str | None = None,
                  problem_key: str = "problem", answer_key: str = "answer",
                  answer_kind: str | AnswerKind | None = None, choices_key: str = "choices",
                  template: str = CHOICES_TEMPLATE) -> list[dict[str, Any]]:
    """The problems ``source`` names, each row with ``problem`` and ``answer`` as strings (other fields kept).

    ``source`` is a shipped set's name (:data:`DATASETS`), else a path (a JSONL, CSV or Parquet file, or a local
    Hugging Face dataset directory), else a Hugging Face hub dataset (a name of :data:`HUB_DATASETS` or
    ``OWNER/NAME``); a ``Path`` object is only ever a path. ``limit`` keeps the first rows; ``split``
    picks a hub dataset's split (default: the known set's own, else ``test``); ``problem_key`` and
    ``answer_key`` name the fields of a file or hub dataset of your own. Raises :class:`DatasetError`
    naming what was tried when nothing resolves, and the file and line of a malformed row.

    With ``answer_kind="choice"`` the rows are multiple-choice questions (:func:`scaffold.answers.choice_rows`):
    the question in ``problem_key`` (``"problem"`` means ``question``, else ``problem``), the options in
    ``choices_key`` or in columns ``A``, ``B``..., the answer a letter, an option's text or a 0-based index;
    each becomes a row whose ``problem`` is the question with its lettered options (``template``), whose
    ``choices`` are the options and whose ``answer`` is the right letter.

    Examples:
        >>> import scaffold as sf
        >>> rows = sf.load_problems("math500", limit=2)
        >>> len(rows), rows[0]["id"]
        (2, 'test/precalculus/807.json')
        >>> len(sf.load_problems("gsm8k"))
        1319
    """
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be at least 1, got {limit}")
    if answer_kind is not None and isinstance(answer_kind_of(answer_kind), ChoiceAnswer):
        return choice_rows_at(_raw_rows(source, limit=limit, split=split),
                              question_key="question" if problem_key == "problem" else problem_key,
                              choices_key=choices_key, answer_key=answer_key, template=template)
    name = os.fspath(source)
    shipped = DATASETS.get(_ALIASES.get(name, name)) if isinstance(source, str) else None
    if shipped is not None:
        if split not in (None, shipped.split):
            raise DatasetError(f"{name}: the shipped set is the {shipped.split} split only, not {split!r}")
        with shipped.open() as lines:
            return read_jsonl(lines, shipped.name, limit=limit)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix.lower() in (".csv", ".parquet"):
        rows = [check_row(row, where, problem_key, answer_key) for where, row in read_table(str(path), limit=limit)]
        if not rows:
            raise DatasetError(f"{path}: the dataset is empty")
        return rows
    if path.is_file():
        try:
            with path.open(encoding="utf-8") as lines:
                return read_jsonl(lines, str(path), limit=limit, problem_key=problem_key, answer_key=answer_key)
        except UnicodeDecodeError as error:
            raise not_utf8(str(path), error) from None
    if path.is_dir():
        return load_hub_problems(str(path), split=split or "test", limit=limit, problem_key=problem_key,
                                 answer_key=answer_key)
    if not isinstance(source, str):
        raise DatasetError(f"{path}: no such dataset file or directory")
    return _load_from_hub(name, limit=limit, split=split, problem_key=problem_key, answer_key=answer_key)


def _raw_rows(source: str | os.PathLike[str], *, limit: int | None, split: str | None
              ) -> list[tuple[str, Any]]:
    """The rows ``source`` names as they are (for a kind that reads its own fields), each with where it is (a
    file's line, a hub dataset's row)."""
    name = os.fspath(source)
    path = Path(name).expanduser()
    if path.is_file():
        rows = read_table(str(path), limit=limit)
    elif path.is_dir() or (isinstance(source, str) and _HUB_NAME.fullmatch(name)):
        rows = []
        name = f"{name}[{split or 'test'}]"
        for number, row in enumerate(open_hub(str(path) if path.is_dir() else os.fspath(source), split or "test")):
            rows.append((f"{name} row {number}", dict(row)))
            if limit is not None and len(rows) >= limit:
                break
    else:
        raise DatasetError(f"no multiple-choice dataset {name!r}: not a file (JSONL, CSV or Parquet), a local "
                           f"Hugging Face dataset directory or a hub name OWNER/NAME")
    if not rows:
        raise DatasetError(f"{name}: the dataset is empty")
    return rows


def _load_from_hub(name: str, *, limit: int | None, split: str | None, problem_key: str,
                   answer_key: str) -> list[dict[str, Any]]:
    """The last step of :func:`load_problems`: ``name`` on the hub, or the error that lists every step."""
    tried = [f"not a shipped set ({', '.join(DATASETS)})", f"no file or directory {name!r}"]
    known = HUB_DATASETS.get(name)
    if known is not None:
        hub, hub_split, problem_key, answer_key = known.hub, split or known.split, known.problem_key, known.answer_key
    elif _HUB_NAME.fullmatch(name) and not name.lower().endswith(_FILE_SUFFIXES):
        hub, hub_split = name, split or "test"
    else:
        tried.append(f"not a Hugging Face dataset (neither a known set, {', '.join(HUB_DATASETS)}, nor OWNER/NAME)")
        raise DatasetError(f"no dataset {name!r}: " + "; ".join(tried))
    try:
        table = open_hub(hub, hub_split)
    except DatasetError as error:
        tried.append(str(error))
        message = f"no dataset {name!r}: " + "; ".join(tried)
        if known is not None:
            message += (f". {known.title} problems belong to the {known.owner} and do not ship with scaffold: "
                        f"load them from the hub where you have access (pip install scaffold-sdk[hub]), or pass "
                        f"a JSONL file of problem/answer rows")
        raise DatasetError(message) from None
    return hub_rows(table, f"{hub}[{hub_split}]", limit=limit, problem_key=problem_key, answer_key=answer_key)
