"""Math answers (the default kind) and integer answers (AIME-style)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from scaffold._answers import as_number, equivalent, extract_boxed, normalise
from scaffold.answers._kind import AnswerKind, register_kind


@dataclass(frozen=True)
class MathAnswer(AnswerKind):
    r"""The last ``\boxed{...}`` of a text, compared by mathematical equivalence (``"1/2"`` is ``"0.5"``).

    Today's behaviour and the default kind: :func:`scaffold.extract_boxed` and :func:`scaffold.equivalent`.

    Examples:
        >>> from scaffold.answers import MathAnswer
        >>> kind = MathAnswer()
        >>> kind.extract(r"so \boxed{\frac{1}{2}}"), kind.same(r"\frac{1}{2}", "0.5")
        ('\\frac{1}{2}', True)
    """

    name = "math"

    @property
    def instruction(self) -> str:
        return "End with the final answer in \\boxed{}."

    def extract(self, text: str) -> str | None:
        return extract_boxed(text)

    def key(self, answer: str) -> str | None:
        """A cheap canonical form (the exact value of a plain number); equivalence goes further (:meth:`same`)."""
        value = as_number(normalise(answer))
        return str(value) if value is not None else normalise(answer) or None

    def same(self, a: str | None, b: str | None) -> bool:
        return equivalent(a, b)


_SEPARATED = re.compile(r"(?<![\d.])(-?\d{1,3}(?:(?:,|\\,|\{,\}|\u2009|\u202f)\d{3})+)(?![\d.]|,\d)")
_INTEGER = re.compile(r"(?<![\d.])(-?\d+)(?:\.0+)?(?![\d]|\.\d)")


@dataclass(frozen=True)
class IntegerAnswer(AnswerKind):
    r"""The last integer the answer states (AIME-style): leading zeros and thousands separators do not count.

    The answer is read from the last ``\boxed{...}`` when there is one, else from the whole text; within it, the
    last integer (``x = 12`` is 12, ``1,024`` and ``1\,024`` are 1024, ``007`` is 7, ``12.0`` is 12). A number
    with a fraction (``12.5``) is not an integer: an answer that states only such numbers is ``None``.

    Examples:
        >>> from scaffold.answers import IntegerAnswer
        >>> kind = IntegerAnswer()
        >>> kind.extract(r"Hence $\boxed{033}$."), kind.extract("so it is 1,024 in all"), kind.extract("x = 2.5")
        ('33', '1024', None)
        >>> kind.same("033", "33"), kind.correct(r"1\,024", "1024")
        (True, True)
    """

    name = "integer"

    @property
    def instruction(self) -> str:
        return "End with the final answer, an integer, in \\boxed{}."

    def extract(self, text: str) -> str | None:
        boxed = extract_boxed(text)
        return self.key(boxed if boxed is not None else text)

    def key(self, answer: str) -> str | None:
        text = answer.replace("\\!", "")
        found: list[tuple[int, str]] = [(m.end(), m.group(1)) for m in _SEPARATED.finditer(text)]
        covered = [(m.start(), m.end()) for m in _SEPARATED.finditer(text)]
        for m in _INTEGER.finditer(text):
            if not any(start <= m.start() < end for start, end in covered):
                found.append((m.end(), m.group(1)))
        if not found:
            return None
        digits = re.sub(r"[^\d-]", "", max(found)[1])
        try:
            return str(int(digits))
        except ValueError:
            return None


register_kind("math", MathAnswer)
register_kind("integer", IntegerAnswer)
