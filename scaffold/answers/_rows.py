"""Multiple-choice rows: a question, its options and the right one, made into a problem a graph can solve."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._errors import DatasetError

CHOICES_TEMPLATE = "{question}\n\n{options}"
"""How a multiple-choice row becomes a problem: the question, a blank line, then one line per option as
``(A) text``. A graph's own prompt adds how to answer (``{answer_format}``)."""

_OPTION_COLUMNS = tuple("ABCDEFGHIJ")


def format_choices(question: str, choices: Sequence[str], template: str = CHOICES_TEMPLATE) -> str:
    """The problem text of a multiple-choice question: ``template`` with ``{question}`` and ``{options}``.

    Examples:
        >>> from scaffold.answers import format_choices
        >>> print(format_choices("Capital of France?", ["Paris", "Rome"]))
        Capital of France?
        <BLANKLINE>
        (A) Paris
        (B) Rome
    """
    options = "\n".join(f"({_OPTION_COLUMNS[i]}) {text}" for i, text in enumerate(choices))
    return template.replace("{question}", question).replace("{options}", options)


def choice_rows(rows: Sequence[Mapping[str, Any]], where: str, *, question_key: str = "question",
                choices_key: str = "choices", answer_key: str = "answer",
                template: str = CHOICES_TEMPLATE) -> list[dict[str, Any]]:
    """Multiple-choice rows made ready for a graph: ``problem`` (the question and its lettered options, by
    ``template``), ``choices`` (the option texts) and ``answer`` (the right option's letter).

    A row's options are a list in ``choices_key`` (or a JSON list as a string, as CSV files hold them), or
    columns ``A``, ``B``, ``C``... (MMLU's CSV layout). Its answer may be a letter (``"B"``, ``"(B)"``), an
    option's text, or a 0-based index (an int, as Hugging Face copies of MMLU store it, or a whole number in a
    string that is no option's text, as a CSV file holds it). The question is
    ``question_key``, else ``problem``. A row that has no question, fewer than two options, more than ten, or an
    answer that is none of them raises :class:`~scaffold.DatasetError` naming ``where`` and the row.

    Examples:
        >>> from scaffold.answers import choice_rows
        >>> rows = choice_rows([{"question": "2+2?", "choices": ["3", "4"], "answer": 1},
        ...                     {"question": "Red?", "A": "apple", "B": "sky", "answer": "apple"}], "demo")
        >>> [(r["answer"], r["choices"]) for r in rows]
        [('B', ['3', '4']), ('A', ['apple', 'sky'])]
    """
    return choice_rows_at([(f"{where} row {number}", row) for number, row in enumerate(rows)],
                          question_key=question_key, choices_key=choices_key, answer_key=answer_key, template=template)


def choice_rows_at(found: Sequence[tuple[str, Any]], *, question_key: str = "question", choices_key: str = "choices",
                   answer_key: str = "answer", template: str = CHOICES_TEMPLATE) -> list[dict[str, Any]]:
    """:func:`choice_rows` of rows each given with where it is (``file:line``, as :func:`scaffold._rows.read_table`
    gives them): an error names that place."""
    out = []
    for at, row in found:
        if not isinstance(row, Mapping):
            raise DatasetError(f"{at}: a multiple-choice row is an object with a question, its options and the "
                               f"answer, got {type(row).__name__}")
        question = row.get(question_key, row.get("problem"))
        if question is None or not str(question).strip():
            raise DatasetError(f"{at}: no question ({question_key!r} or 'problem')")
        choices = _options(row, choices_key, at)
        letter = _letter(row.get(answer_key), choices, at, answer_key)
        out.append({**row, "question": str(question), "choices": choices, "answer": letter,
                    "problem": format_choices(str(question), choices, template)})
    return out


def _options(row: Mapping[str, Any], key: str, at: str) -> list[str]:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise DatasetError(f"{at}: {key!r} is a string that is not a JSON list of options") from None
    if value is None:
        value = [row[c] for c in _OPTION_COLUMNS if row.get(c) not in (None, "")]
    if isinstance(value, Mapping) and "text" in value:  # {"label": [...], "text": [...]} (ARC, CommonsenseQA)
        value = value["text"]
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) < 2:
        raise DatasetError(f"{at}: a multiple-choice row needs at least two options in {key!r} (a list) or in "
                           f"columns A, B, ...; found {value!r:.80}")
    if len(value) > len(_OPTION_COLUMNS):
        raise DatasetError(f"{at}: {len(value)} options; at most {len(_OPTION_COLUMNS)} are lettered (A to J)")
    return [str(v) for v in value]


def _letter(answer: Any, choices: list[str], at: str, key: str) -> str:
    letters = _OPTION_COLUMNS[: len(choices)]
    if isinstance(answer, bool) or answer is None:
        raise DatasetError(f"{at}: no answer in {key!r}")
    if isinstance(answer, int) or (isinstance(answer, float) and answer.is_integer()):
        index = int(answer)
        if not 0 <= index < len(choices):
            raise DatasetError(f"{at}: answer index {index} is not one of the {len(choices)} options (0-based)")
        return letters[index]
    text = str(answer).strip()
    m = re.fullmatch(r"[\(\[]?\s*([A-Ja-j])\s*[\)\]]?\.?", text)
    if m is not None and m.group(1).upper() in letters:
        return m.group(1).upper()
    matches = [letters[i] for i, option in enumerate(choices) if option.strip().casefold() == text.casefold()]
    if len(matches) == 1:
        return matches[0]
    if not matches and text.isdigit() and int(text) < len(choices):  # "1" in a CSV file: an index, as 1 would be
        return letters[int(text)]
    raise DatasetError(f"{at}: answer {text!r:.60} is neither a letter {letters[0]}-{letters[-1]} nor the text of "
                       f"exactly one option")
