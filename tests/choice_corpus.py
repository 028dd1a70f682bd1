"""The hand-labelled corpus of multiple-choice answers (``tests/data/choice_phrasings_*``) and its split into a
development half and a held-out half: one definition, read by the tests (``test_answers.py``) and the benchmark
(``benchmarks/answers.py``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from scaffold.answers import ChoiceAnswer

DATA = Path(__file__).resolve().parent / "data"

WHOLE = {"blind2": False, "blind4": True}
"""Sets kept whole on one side of the split: ``blind2`` was read in full while developing the extractor (so it is
development data); ``blind4`` was collected blind and is never read (later changes read the development half
only), and is held out. Every other set is split in half by a hash of the text (only the development half of a
set is read while developing)."""


def corpus() -> list[dict[str, Any]]:
    """Every row of every set (written phrasings and real model outputs: see the .md files), each with its set's
    name as ``file`` (``choice_phrasings_blind5``)."""
    rows = []
    for path in sorted(DATA.glob("choice_phrasings_*.jsonl")):
        rows += [json.loads(line) | {"file": path.stem} for line in path.read_text().splitlines() if line.strip()]
    return rows


def held_out(row: dict[str, Any]) -> bool:
    """Whether a row is held out: :data:`WHOLE` sets on their side, the others by a hash of the text."""
    for name, held in WHOLE.items():
        if row["file"].endswith(f"_{name}"):
            return held
    return int(hashlib.sha256(row["text"].encode()).hexdigest(), 16) % 2 == 1


def choice_of(row: dict[str, Any]) -> ChoiceAnswer:
    """The kind a user of the row's source would set: its options when the row gives them, and ``numbered`` where
    the source's prompt numbered the options 1, 2, ... (a row's ``numbered``)."""
    choices = tuple(row["choices"]) if row.get("choices") else None
    return ChoiceAnswer(choices=choices, numbered=bool(row.get("numbered")))
