"""The pocket task: add a few n-digit numbers, column by column, and box the sum.

A problem is ``"482+915+307"``; its worked solution adds one column per line, right to left,
with the carry written out and every line the same width (a character-level model then finds
each operand digit at a fixed distance), and ends with the boxed sum::

    2+5=07+7=14+0=14
    8+1=09+0=09+1=10
    4+9=13+3=16+1=17
    \\boxed{1704}

Each line adds one digit at a time to a running sum (a 1M-parameter model learned that chain of
two-term additions in about half the steps a four-term sum in one go took), and the boxed answer
always has one digit more than the operands (``0704`` if need be, equal to 704 for math-verify),
so every answer digit is copied from a fixed distance too.

Problems fall into the ``"train"``, ``"validation"`` or ``"test"`` split by a hash of their text, so
no two splits share a problem whatever seeds drew them. Training reads the train split only;
choices made while training (which checkpoint to keep, which learning rate) read the validation
split; figures are measured on the test split. :meth:`PocketTask.slipped_solution`
writes wrong solutions the way a small model trained on this task gets them wrong (a miscopied
answer digit, a running sum off by one, the rest consistent with it): the candidates aggregation
is trained on.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Split = Literal["train", "validation", "test"]
"""``"train"`` problems are trained on; ``"validation"`` problems choose between models; ``"test"`` ones measure."""

SPLITS: tuple[Split, ...] = ("train", "validation", "test")
BUCKETS = 10
"""A problem's bucket is the CRC-32 of its text modulo this."""
SHARES: dict[str, int] = {"test": 2, "validation": 1, "train": 7}
"""Buckets per split: 20% of all problems of a task are test problems, 10% validation, 70% train
(buckets 0-1 test, 2 validation, the rest train)."""
SOURCE = "pocket"
"""The ``source`` field of exported rows."""


def split_of(problem: str) -> Split:
    """The split a problem belongs to, decided by its text alone (stable across processes and machines).

    Examples:
        >>> split_of("482+915+307") in ("train", "validation", "test")
        True
    """
    bucket = zlib.crc32(problem.encode()) % BUCKETS
    if bucket < SHARES["test"]:
        return "test"
    return "validation" if bucket < SHARES["test"] + SHARES["validation"] else "train"


@dataclass(frozen=True)
class Column:
    """One line of a worked solution: a column's digits and the carry into it, added one at a time."""

    digits: tuple[int, ...]
    carry: int
    partials: tuple[int, ...]
    """The running sums after the second digit, each later digit, and the carry; the last is the column's sum."""

    @classmethod
    def add(cls, digits: tuple[int, ...], carry: int) -> Column:
        """The correct line for ``digits`` plus ``carry``."""
        running, partials = digits[0], []
        for term in (*digits[1:], carry):
            running += term
            partials.append(running)
        return cls(digits, carry, tuple(partials))

    @property
    def total(self) -> int:
        return self.partials[-1]

    def line(self) -> str:
        """``"9+4=13+7=20+1=21"``: each digit, then the carry, added to a running sum written with two digits."""
        terms = (*self.digits[1:], self.carry)
        return str(self.digits[0]) + "".join(f"+{t}={p:02d}" for t, p in zip(terms, self.partials, strict=True))


@dataclass(frozen=True)
class PocketTask:
    """Add ``terms`` numbers of exactly ``digits`` digits each; the difficulty knob is both numbers.

    Examples:
        >>> task = PocketTask(digits=2, terms=2)
        >>> rows = task.problems(3, seed=0, split="test")
        >>> [sorted(row) for row in rows][0]
        ['answer', 'id', 'problem', 'source']
        >>> print(task.solution("47+85"))
        7+5=12+0=12
        4+8=12+1=13
        \\boxed{132}
    """

    digits: int = 3
    """Digits of every operand (the leading one is never 0)."""
    terms: int = 3
    """How many numbers are added."""

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 12:
            raise ValueError(f"digits must be between 1 and 12, got {self.digits}")
        if not 2 <= self.terms <= 10:  # keeps every column sum, carry included, below 100
            raise ValueError(f"terms must be between 2 and 10, got {self.terms}")

    @property
    def name(self) -> str:
        """``"3x3"``: terms × digits."""
        return f"{self.terms}x{self.digits}"

    @property
    def space(self) -> int:
        """How many distinct problems the task has (ordered operands)."""
        return (9 * 10 ** (self.digits - 1)) ** self.terms

    def operands(self, problem: str) -> list[int]:
        """The numbers a problem adds."""
        parts = problem.split("+")
        if len(parts) != self.terms or not all(p.isdigit() and len(p) == self.digits for p in parts):
            raise ValueError(f"not a {self.name} pocket problem: {problem!r}")
        return [int(p) for p in parts]

    def answer(self, problem: str) -> str:
        """The exact reference answer."""
        return str(sum(self.operands(problem)))

    def draw(self, rng: random.Random) -> str:
        """One problem drawn uniformly from the whole task (either split)."""
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        return "+".join(str(rng.randint(low, high)) for _ in range(self.terms))

    def stream(self, rng: random.Random, split: Split | str) -> Iterator[str]:
        """Endless problems of one split (repeats possible), for training."""
        while True:
            problem = self.draw(rng)
            if split_of(problem) == split:
                yield problem

    def problems(self, n: int, *, seed: int = 0, split: Split | str = "test") -> list[dict[str, str]]:
        """``n`` distinct problems of ``split`` as JSONL rows ``{"id", "problem", "answer", "source"}``.

        Deterministic given ``seed``; raises ``ValueError`` for an unknown split or when the split
        has fewer than ``n`` problems.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        available = self.space * SHARES[split] // BUCKETS
        if n > available * 0.9:  # a hash split is only roughly its share; stay clear of exhausting it
            raise ValueError(f"the {split} split of the {self.name} task has about {available} problems, asked {n}")
        rng = random.Random(f"pocket/{self.name}/{split}/{seed}")
        seen: dict[str, None] = {}
        for problem in self.stream(rng, split):
            if len(seen) == n:
                break
            seen.setdefault(problem)
        return [
            {"id": f"pocket-{self.name}-{split}-{seed}-{i}", "problem": p, "answer": self.answer(p), "source": SOURCE}
            for i, p in enumerate(seen)
        ]

    def columns(self, problem: str) -> list[Column]:
        """The correct column additions, right to left."""
        numbers = [str(x).zfill(self.digits) for x in self.operands(problem)]
        out: list[Column] = []
        carry = 0
        for place in range(self.digits - 1, -1, -1):
            out.append(Column.add(tuple(int(n[place]) for n in numbers), carry))
            carry = out[-1].total // 10
        return out

    def solution(self, problem: str | dict[str, str]) -> str:
        """The worked solution of a problem (its text or its row), ending in ``\\boxed{sum}``."""
        text = problem["problem"] if isinstance(problem, dict) else problem
        return render_solution(self.columns(text))

    def slipped_solution(self, problem: str, rng: random.Random, *, slips: int = 1) -> str:
        """A plausible wrong solution: ``slips`` things go wrong, everything after follows from them.

        The slips, in the proportions a small model trained on this task makes them: a digit of
        the boxed answer miscopied (40%), a running sum off by one or ten (40%), an operand digit
        miscopied into a line (15%), a carry off by one (5%). Later sums, carries and the boxed
        answer are computed from the wrong values, as a model that slipped once would go on.
        """
        numbers = [str(x).zfill(self.digits) for x in self.operands(problem)]
        kinds = rng.choices(("answer", "sum", "operand", "carry"), weights=(8, 8, 3, 1), k=slips)
        places = rng.sample(range(self.digits), min(slips, self.digits))
        plan = {place: kind for place, kind in zip(places, kinds) if kind != "answer"}
        lines: list[Column] = []
        carry = 0
        for index, place in enumerate(range(self.digits - 1, -1, -1)):
            digits = tuple(int(n[place]) for n in numbers)
            kind = plan.get(index)
            if kind == "carry":
                carry = carry + 1 if carry == 0 or rng.random() < 0.5 else carry - 1
            if kind == "operand":
                at = rng.randrange(len(digits))
                digits = (*digits[:at], (digits[at] + rng.choice((1, 9))) % 10, *digits[at + 1 :])
            line = Column.add(digits, carry)
            if kind == "sum":
                line = _slipped_sum(line, rng)
            lines.append(line)
            carry = line.total // 10
        answer = assemble(lines)
        if "answer" in kinds:
            answer = _miscopied(answer, rng)
        while int(answer) == int(self.answer(problem)):  # two slips that cancel out are no slip
            answer = _miscopied(answer, rng)
        return render_solution(lines, answer)

    def check_steps(self, problem: str, text: str) -> float:
        """The share of a solution's lines that follow from the problem and the lines before them.

        A process verifier that needs no reference answer: a column line is consistent when its
        digits are that column's operand digits (right to left), its carry is the one the line
        before it (as written) passes on, and every running sum adds the term to the sum before
        it; the ``\\boxed{}`` line is consistent when it is the sum the column lines (as written)
        spell. A line that cannot be read counts as inconsistent, and so does every line missing
        from or added to the ``digits + 1`` a solution has. An error is charged where it is
        made, not again in the lines that follow from it. Raises ``ValueError`` when ``problem``
        is not a problem of this task.

        Examples:
            >>> task = PocketTask(digits=2, terms=2)
            >>> task.check_steps("47+85", task.solution("47+85"))
            1.0
            >>> task.check_steps("47+85", "7+5=12+0=12\\n4+8=12+1=13\\n\\\\boxed{142}")  # a miscopied answer
            0.6666666666666666
        """
        expected = self.columns(problem)
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        good = 0
        carry: int | None = 0
        written: list[Column] = []
        for index, line in enumerate(lines):
            if index == len(expected):
                boxed = _BOXED.fullmatch(line)
                if boxed and len(written) == len(expected) and int(boxed.group(1)) == int(assemble(written)):
                    good += 1
                continue
            column = _read_line(line, self.terms) if index < len(expected) else None
            if column is None:
                carry = None  # the next line's carry has nothing to follow from: any carry goes
                continue
            written.append(column)
            partials_ok = column.partials == Column.add(column.digits, column.carry).partials
            if column.digits == expected[index].digits and carry in (None, column.carry) and partials_ok:
                good += 1
            carry = column.total // 10
        return good / max(len(lines), len(expected) + 1)

    def write_jsonl(self, path: str | Path, rows: Iterable[dict[str, str]]) -> Path:
        """Write rows as JSON lines (the schema of the problem sets shipped with scaffold) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps({key: str(row[key]) for key in ("id", "problem", "answer", "source")}) + "\n")
        return path


_LINE = re.compile(r"(\d)((?:\+\d=\d\d)+)")
_TERM = re.compile(r"\+(\d)=(\d\d)")
_BOXED = re.compile(r"\\boxed\{(\d+)\}")


def _read_line(line: str, terms: int) -> Column | None:
    """A column line as written (its sums unchecked), or ``None`` if it is not one of ``terms`` terms."""
    match = _LINE.fullmatch(line)
    if match is None:
        return None
    steps = [(int(t), int(p)) for t, p in _TERM.findall(match.group(2))]
    if len(steps) != terms:
        return None
    digits = (int(match.group(1)), *(t for t, _ in steps[:-1]))
    return Column(digits, steps[-1][0], tuple(p for _, p in steps))


def assemble(lines: Sequence[Column]) -> str:
    """The sum the lines spell: the last carry (even 0), then the units digits from the last line to the first.

    The answer always has one digit more than the operands (``0704``, equal to 704 for
    :func:`~scaffold._answers.equivalent`), so every answer digit sits at a fixed distance from the
    line it is copied from.
    """
    return str(lines[-1].total // 10) + "".join(str(line.total % 10) for line in reversed(lines))


def render_solution(lines: Sequence[Column], answer: str | None = None) -> str:
    """The worked solution text of some column lines (the answer assembled from them by default)."""
    return "\n".join([*(line.line() for line in lines), "\\boxed{" + (answer or assemble(lines)) + "}"])


def _slipped_sum(line: Column, rng: random.Random) -> Column:
    """The line with one running sum off by one or ten, and the sums after it continuing from there."""
    at = rng.randrange(len(line.partials))
    step = rng.choice((-1, 1, 1, -10, 10))
    wrong = line.partials[at] + step
    if not 0 <= wrong <= 99 - 9 * (len(line.partials) - at):
        wrong = line.partials[at] - step
    terms = (*line.digits[1:], line.carry)
    partials = [*line.partials[:at], wrong]
    for term in terms[at + 1 :]:
        partials.append(partials[-1] + term)
    return Column(line.digits, line.carry, tuple(partials))


def _miscopied(answer: str, rng: random.Random) -> str:
    at = rng.randrange(len(answer))
    digit = str((int(answer[at]) + rng.choice((1, 9))) % 10)
    return answer[:at] + digit + answer[at + 1 :]
