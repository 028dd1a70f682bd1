"""Free-text answers: a normalised exact match (case, whitespace, punctuation and articles do not count)."""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass

from scaffold._answers import extract_boxed
from scaffold.answers._kind import AnswerKind, register_kind

_ANSWER_LINE = re.compile(r"^[\s*#>_-]*(?:final\s+answer|answer)\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_WRAPPER = re.compile(r"\\text(?:bf|it)?\s*\{([^{}]*)\}")
_DROP = str.maketrans("", "", string.punctuation + "“”‘’«»…–—")


def normalise_text(text: str) -> str:
    """A free-text answer's canonical form: Unicode-folded, lower case, no punctuation, no articles (a, an, the),
    single spaces (the usual normalisation of exact-match QA scoring).

    Examples:
        >>> from scaffold.answers import normalise_text
        >>> normalise_text("  The Eiffel   Tower! "), normalise_text("“Eiffel-Tower”")
        ('eiffel tower', 'eiffeltower')
    """
    text = unicodedata.normalize("NFKC", _WRAPPER.sub(r"\1", text)).casefold()
    text = text.translate(_DROP)
    return " ".join(_ARTICLES.sub(" ", text).split())


@dataclass(frozen=True)
class TextAnswer(AnswerKind):
    r"""A free-text answer, compared by :func:`normalise_text` (an exact match after normalisation).

    The answer of a text is its last ``\boxed{...}`` when it has one, else its last ``Answer: ...`` (or
    ``Final answer: ...``) line, else the whole text, stripped. ``max_chars`` bounds a whole-text answer (longer
    texts are cut there). For answers that mean the same in other words, vote with a judged equivalence
    (:func:`scaffold.judge`) instead.

    Examples:
        >>> from scaffold.answers import TextAnswer
        >>> kind = TextAnswer()
        >>> kind.extract("Thinking...\nFinal answer: The Eiffel Tower."), kind.same("the eiffel tower", "Eiffel Tower")
        ('The Eiffel Tower.', True)
        >>> kind.extract("Paris, of course.")
        'Paris, of course.'
    """

    max_chars: int = 4000

    name = "text"

    @property
    def instruction(self) -> str:
        return "End with your final answer on its own line, as: Answer: <your answer>"

    def extract(self, text: str) -> str | None:
        boxed = extract_boxed(text)
        if boxed is not None:
            return boxed.strip() or None
        lines = _ANSWER_LINE.findall(text)
        if lines:
            return lines[-1].strip("*_ ").strip() or None
        stripped = text.strip()
        return stripped[: self.max_chars] or None

    def key(self, answer: str) -> str | None:
        return normalise_text(answer) or None

    def describe(self) -> dict[str, object]:
        return {"kind": self.name, "max_chars": self.max_chars}


register_kind("text", TextAnswer)
