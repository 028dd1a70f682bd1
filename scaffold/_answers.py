"""Answer extraction and mathematical equivalence.

``extract_boxed`` pulls the last ``\\boxed{...}`` (nested braces allowed).
``equivalent`` says whether two answers are the same number or expression: a
cheap normalised string comparison first, then math-verify (imported lazily,
bounded in time in every thread: :mod:`scaffold._math_verify`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

from scaffold._math_verify import math_equal

Extractor = Callable[[str], "str | None"]
"""Turns an output text into its final answer, or ``None`` when there is none."""

Equivalence = Callable[[str, str], bool]
"""Says whether two extracted answers are the same."""

def extract_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Examples:
        >>> extract_boxed(r"so \\boxed{\\frac{1}{2}}.")
        '\\\\frac{1}{2}'
        >>> extract_boxed("no answer") is None
        True
    """
    end = len(text)
    while True:
        boxed, fbox = text.rfind("\\boxed", 0, end), text.rfind("\\fbox", 0, end)
        at = max(boxed, fbox)
        if at < 0:
            return None
        found = _boxed_content(text, at + (6 if at == boxed else 5))
        if found is not None:
            return found
        end = at


def _boxed_content(text: str, start: int) -> str | None:
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text):
        return None
    if text[start] != "{":  # "\boxed 5"
        m = re.match(r"[^\s$.,;{}]+", text[start:])
        return m.group(0) if m else None
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i].strip()
    return None


def extract_last_number(text: str) -> str | None:
    """Return the last integer or decimal in ``text`` (a fallback extractor, GSM8K style).

    Examples:
        >>> extract_last_number("it costs 1,200 dollars, i.e. 12.5 each")
        '12.5'
    """
    found = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return found[-1].replace(",", "") if found else None


_SPACE = re.compile(r"\s+|\\[,;!: ]|\\left|\\right|\$")


def normalise(answer: str) -> str:
    """A cheap canonical form: no spaces, no ``$``, no ``\\left``/``\\right``, ``dfrac``→``frac``."""
    s = _SPACE.sub("", answer).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if s.startswith("\\text{") and s.endswith("}"):
        s = s[6:-1]
    return s.rstrip(".")


_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")
_FRAC = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}")


def as_number(answer: str) -> Fraction | None:
    r"""The exact value of a plain numeric answer (``"12"``, ``"-0.5"``, ``"3/4"``, ``"\frac{3}{4}"``), else ``None``.

    Examples:
        >>> as_number(r"\frac{1}{2}") == as_number("0.5") == as_number("1/2")
        True
    """
    s = answer.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+", answer) else answer
    try:
        if _NUMBER.fullmatch(s):
            return Fraction(s)
        m = _FRAC.fullmatch(s)
        if m:
            value = Fraction(int(m.group(2)), int(m.group(3)))
            return -value if m.group(1) else value
        if s.count("/") == 1:
            num, den = s.split("/")
            if _NUMBER.fullmatch(num) and _NUMBER.fullmatch(den):
                return Fraction(num) / Fraction(den)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def equivalent(a: str | None, b: str | None) -> bool:
    r"""True when two answers are the same mathematical value (``"1/2"`` and ``"0.5"``).

    Plain numbers are compared exactly without sympy; anything else goes to math-verify.

    Examples:
        >>> equivalent("1/2", "0.5"), equivalent(r"\sqrt{4}", "2"), equivalent("3", "4")
        (True, True, False)
    """
    if a is None or b is None:
        return False
    return _equivalent(a, b)


@lru_cache(maxsize=65536)
def _equivalent(a: str, b: str) -> bool:
    """:func:`equivalent` of two texts, remembered (a vote or a scoring compares the same few answers again and
    again)."""
    na, nb = normalise(a), normalise(b)
    if na == nb:
        return True
    if not na or not nb:
        return False
    xa, xb = as_number(na), as_number(nb)
    if xa is not None and xb is not None:
        return xa == xb
    return math_equal(*sorted((na, nb)))
