"""The parts task: a pocket task where the *set* matters, for set-level RL.

A problem has three labelled sub-sums of growing size, every number written four digits wide, and its answer is
the tuple of their sums::

    A:0047+0085 B:0362+0519 C:4821+3390      ->      A=132,B=881,C=8211

A *candidate* (a solving call, budgeted to fit one part's worked lines) picks a part with its first
token, restates it and works only that part, column by column as the pocket task does::

    C:4821+3390
    1+0=01+0=01
    2+9=11+0=11
    8+3=11+1=12
    4+3=07+1=08
    \\boxed{A=?????,B=?????,C=08211}

It boxes the whole tuple with a slot for every part and only its own filled in. Writing every number and every
value equally wide makes every candidate, whichever part it works, the same length, and puts each part's
numbers at regular places in the problem and each part's value at a regular place in every candidate: a
character-level model then finds what it needs by position, both when it works a part and when it aggregates.
(A 0.68M-parameter model trained for minutes copies by position readily and by content not at all: with each
candidate boxing only its own part, an aggregator has to find a part's value by its label, and it had not
learned to after 1,350 steps, even on 30-character drills.)

An *aggregation* reads a set of candidates (each shown as its boxed tuple, :meth:`PartsTask.show_candidates`) and
then the problem, works the first part none of them gives, and boxes the whole tuple: for every part the value most
candidates give (a blank slot when none does, and the part is not the one worked)::

    B:0362+0519
    2+9=11+0=11
    ...
    \\boxed{A=00132,B=00881,C=08211}

The problem comes last in both prompts, so an aggregation restates the part it works at the same distance from the
problem as a candidate does, and one lookup serves both.

So an aggregation can only be right when its set covers all parts but one, with right values: how
useful a candidate is depends on what the rest of its set already covers. A model trained on this
task picks the easy part most often (the build skews the choice), so sets of its samples start
redundant: crediting a candidate by its own part (GRPO) rewards the easy part, crediting it by its
sets (SPIRAL) rewards the part its sets lack. :meth:`PartsTask.score` is the task's one binary reward:
a candidate is right when every part it states is right; an aggregation (``whole=True``) when it
states every part, all right.

Problems are split into train, validation and test by a hash of their text, as the pocket task's are.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from scaffold._answers import extract_boxed
from scaffold.pocket._task import SOURCE, SPLITS, PocketTask, Split, split_of

UNKNOWN = "?"
"""What an aggregation writes for a part it neither copied nor worked."""

_PART = re.compile(r"([A-Z])=(\d+|\?+)")


@dataclass(frozen=True)
class PartsTask:
    """Sum every labelled part of a problem: part ``labels[i]`` adds ``terms`` numbers of ``digits[i]`` digits.

    Examples:
        >>> task = PartsTask()
        >>> row = task.problems(1, seed=0, split="test")[0]
        >>> sorted(task.read(row["answer"])) == list(task.labels)
        True
        >>> print(task.part_solution("A:0047+0085 B:0362+0519 C:4821+3390", "A"))
        A:0047+0085
        7+5=12+0=12
        4+8=12+1=13
        0+0=00+1=01
        0+0=00+0=00
        \\boxed{A=00132,B=?????,C=?????}
    """

    digits: tuple[int, ...] = (2, 3, 4)
    """Digits of the numbers of each part: the parts grow harder from first to last."""
    terms: int = 2
    """Numbers added in every part."""

    def __post_init__(self) -> None:
        if not 2 <= len(self.digits) <= 5:
            raise ValueError(f"a parts task has 2 to 5 parts, not {len(self.digits)}")
        for d in self.digits:
            PocketTask(digits=d, terms=self.terms)  # the same bounds as the pocket task's

    @property
    def labels(self) -> tuple[str, ...]:
        """``("A", "B", "C")``: one capital letter per part."""
        return tuple("ABCDE"[: len(self.digits)])

    @property
    def name(self) -> str:
        """``"parts-2.3.4x2"``: the parts' digits and the terms."""
        return f"parts-{'.'.join(map(str, self.digits))}x{self.terms}"

    @property
    def width(self) -> int:
        """Digits every number is written with: the widest part's (narrower parts' numbers have leading zeros)."""
        return max(self.digits)

    def part_task(self, label: str) -> PocketTask:
        """The pocket task one part is a problem of (every part's numbers are written :attr:`width` digits wide)."""
        self.labels.index(label)  # a ValueError for a label this task has not
        return PocketTask(digits=self.width, terms=self.terms)

    def parts(self, problem: str) -> dict[str, str]:
        """Label → the part's sum as a pocket problem (``"0047+0085"``); ``ValueError`` if not one of this task."""
        pieces = problem.split(" ")
        out: dict[str, str] = {}
        for label, piece in zip(self.labels, pieces):
            head, _, body = piece.partition(":")
            if head != label:
                break
            out[label] = body
        if len(pieces) != len(self.labels) or list(out) != list(self.labels):
            raise ValueError(f"not a {self.name} problem: {problem!r}")
        for (label, body), digits in zip(out.items(), self.digits):
            try:
                numbers = self.part_task(label).operands(body)
            except ValueError:
                raise ValueError(f"not a {self.name} problem: {problem!r} (its part {label} is {body!r})") from None
            if max(numbers) >= 10**digits:
                raise ValueError(f"not a {self.name} problem: {problem!r} (part {label} adds {digits}-digit numbers)")
        return out

    def draw(self, rng: random.Random) -> str:
        """One problem drawn uniformly from the whole task (either split)."""
        return " ".join(f"{label}:" + "+".join(str(rng.randint(10 ** (d - 1), 10**d - 1)).zfill(self.width)
                                               for _ in range(self.terms))
                        for label, d in zip(self.labels, self.digits))

    def answer(self, problem: str) -> str:
        """The reference answer, ``"A=132,B=881,C=8211"``."""
        return ",".join(f"{label}={self.part_task(label).answer(body)}" for label, body in self.parts(problem).items())

    def problems(self, n: int, *, seed: int = 0, split: Split | str = "test") -> list[dict[str, str]]:
        """``n`` distinct problems of ``split`` as JSONL rows ``{"id", "problem", "answer", "source"}``.

        Deterministic given ``seed``; ``ValueError`` for an unknown split.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        rng = random.Random(f"pocket/{self.name}/{split}/{seed}")
        seen: dict[str, None] = {}
        while len(seen) < n:
            problem = self.draw(rng)
            if split_of(problem) == split:
                seen.setdefault(problem)
        return [{"id": f"pocket-{self.name}-{split}-{seed}-{i}", "problem": p, "answer": self.answer(p),
                 "source": SOURCE} for i, p in enumerate(seen)]

    def stream(self, rng: random.Random, split: Split | str) -> Any:
        """Endless problems of one split (repeats possible), for training."""
        while True:
            problem = self.draw(rng)
            if split_of(problem) == split:
                yield problem

    # ----- candidates and aggregations -------------------------------------------------------------

    @cached_property
    def blank(self) -> str:
        """What a tuple writes in the slot of a part it does not state: ``"?????"``, as wide as a part's value."""
        return UNKNOWN * len(self._value(self._widest_problem(), self.labels[-1]))

    def _value(self, problem: str, label: str) -> str:
        """Part ``label``'s right value as a worked solution boxes it (``"08211"``)."""
        return self.part_task(label).solution(self.parts(problem)[label]).rsplit("{", 1)[1].rstrip("}")

    def tuple_text(self, values: Mapping[str, str]) -> str:
        """The boxed tuple with a slot for every part, in order: ``A=?????,B=?????,C=08211`` (:attr:`blank` for a part
        ``values`` lacks or holds as ``"?"``)."""
        blank = self.blank
        return ",".join(f"{label}={blank if values.get(label, UNKNOWN) == UNKNOWN else values[label]}"
                        for label in self.labels)

    def part_solution(self, problem: str, label: str, *, rng: random.Random | None = None, slips: int = 0) -> str:
        """A candidate working part ``label``: right, or with ``slips`` slips (drawn from ``rng``) the way the pocket
        task's wrong solutions are (:meth:`PocketTask.slipped_solution`). It boxes the whole tuple with only its
        own part filled in."""
        body = self.parts(problem)[label]
        part = self.part_task(label)
        text = part.slipped_solution(body, rng or random.Random(0), slips=slips) if slips else part.solution(body)
        lines, boxed = text.rsplit("\n", 1)
        return f"{label}:{body}\n{lines}\n\\boxed{{{self.tuple_text({label: extract_boxed(boxed) or ''})}}}"

    def worked_lines(self, problem: str, label: str) -> str:
        """Part ``label`` restated (``C:4821+3390``) and its worked column lines, without the boxed line.

        Restating the part first puts its numbers at the same distance from every column line whichever part is
        worked, as the pocket task's solutions have them: the model learns one way of adding, not one per part.
        """
        body = self.parts(problem)[label]
        return f"{label}:{body}\n" + self.part_task(label).solution(body).rsplit("\n", 1)[0]

    def aggregation(self, problem: str, candidates: Sequence[str | None]) -> str:
        """What an aggregation of ``candidates`` (their texts or answers) writes.

        The first part none of them states, worked as a candidate works it (none when every part is stated), then the
        tuple boxed: for every part the value most candidates state (the first stated of a tie), so what is written
        follows from what is read, as a per-part vote; the worked value for the worked part; :attr:`blank` for any
        other part none states.
        """
        stated: dict[str, list[str]] = {}
        for text in candidates:
            for label, value in (self.read(_answer_of(text)) or {}).items():
                if value != UNKNOWN:
                    stated.setdefault(label, []).append(value)
        # ties: the first stated (a Counter keeps insertion order)
        values = {label: Counter(given).most_common(1)[0][0] for label, given in stated.items()}
        lines = []
        missing = [label for label in self.labels if label not in values]
        if missing:
            values[missing[0]] = self._value(problem, missing[0])
            lines.append(self.worked_lines(problem, missing[0]))
        return "\n".join([*lines, "\\boxed{" + self.tuple_text(values) + "}"])

    def show_candidates(self, candidates: Sequence[Any]) -> str:
        """How an aggregation prompt shows its candidates (``{candidates}``): one line each with the tuple it boxed
        (``Candidate 2: A=?????,B=?????,C=08211``), read as :meth:`read` reads it and written as :meth:`tuple_text`
        writes it (a value as the candidate stated it, a blank slot as wide as the widest value; every slot blank for
        a candidate that boxed no parts answer).

        The aggregator needs only the values, not how they were worked: showing them alone makes an aggregation a
        third as long as one showing every worked line, and puts each part's value at a regular place. Give it to
        the aggregating node (``sf.aggregate(..., render=task.show_candidates)``); ``candidates`` are traces or texts.

        Examples:
            >>> task = PartsTask()
            >>> print(task.show_candidates([task.part_solution("A:0047+0085 B:0362+0519 C:4821+3390", "C"), "no box"]))
            Candidate 1: A=?????,B=?????,C=08211
            Candidate 2: A=?????,B=?????,C=?????
        """
        lines = []
        for i, candidate in enumerate(candidates, 1):
            text = candidate if isinstance(candidate, str) or candidate is None else candidate.text
            lines.append(f"Candidate {i}: {self.tuple_text(self.read(_answer_of(text)) or {})}")
        return "\n".join(lines)

    def solve_budget(self) -> int:
        """A candidate's token budget (one token a character): the longest part's worked lines fit, with a little to
        spare, and no two parts do."""
        return max(len(self._widest_part(label)) for label in self.labels) + 4

    def aggregate_budget(self) -> int:
        """An aggregation's token budget: every part copied, the longest worked in their place, the boxed tuple."""
        problem = self._widest_problem()
        worst = max(len(self.aggregation(problem, [self.part_solution(problem, other) for other in self.labels
                                                   if other != label])) for label in self.labels)
        return worst + 8

    def _widest_problem(self) -> str:
        return " ".join(f"{label}:" + "+".join(["9" * d] * self.terms).replace("9" * d, ("9" * d).zfill(self.width))
                        for label, d in zip(self.labels, self.digits))

    def _widest_part(self, label: str) -> str:
        return self.part_solution(self._widest_problem(), label)

    # ----- reading and scoring answers -------------------------------------------------------------

    def read(self, answer: str | None) -> dict[str, str] | None:
        """An answer's parts, label → value (``"?"`` where unknown: a blank slot); ``None`` if it is not a parts answer.

        Examples:
            >>> PartsTask().read("A=0144,C=?????")
            {'A': '0144', 'C': '?'}
            >>> PartsTask().read("144") is None
            True
        """
        if answer is None:
            return None
        pieces = [p.strip() for p in answer.split(",")]
        out: dict[str, str] = {}
        for piece in pieces:
            match = _PART.fullmatch(piece)
            if match is None or match.group(1) not in self.labels or match.group(1) in out:
                return None
            out[match.group(1)] = UNKNOWN if match.group(2).startswith(UNKNOWN) else match.group(2)
        return out or None

    def right_parts(self, answer: str | None, reference: str) -> set[str]:
        """The parts an answer states rightly."""
        stated, truth = self.read(answer) or {}, self.read(reference) or {}
        return {label for label, value in stated.items()
                if value != UNKNOWN and label in truth and int(value) == int(truth[label])}

    def score(self, answer: str | None, reference: str, *, whole: bool = False) -> float:
        """The task's reward: 1.0 when ``answer`` states a part and every part it states is right (and, with
        ``whole``, it states every part), else 0.0. A blank slot (``?``) states nothing.

        Examples:
            >>> task = PartsTask()
            >>> task.score("B=881", "A=132,B=881,C=8211"), task.score("B=881", "A=132,B=881,C=8211", whole=True)
            (1.0, 0.0)
            >>> task.score("A=132,B=0881,C=08211", "A=132,B=881,C=8211", whole=True)
            1.0
        """
        stated = {label for label, value in (self.read(answer) or {}).items() if value != UNKNOWN}
        if not stated or (whole and len(stated) != len(self.labels)):
            return 0.0
        return float(self.right_parts(answer, reference) == stated)

    def reward(self, trace: Any, reference: str) -> float:
        """The trainer's reward (``reward_fn(trace, reference)``): an aggregation (a trace with inputs) must state the
        whole tuple; a candidate, its own part."""
        return self.score(trace.answer, reference, whole=bool(trace.inputs))

    def part_of(self, answer: str | None) -> str | None:
        """The part a candidate chose (its first stated part), ``None`` when it stated none."""
        stated = self.read(answer) or {}
        return next((label for label, value in stated.items() if value != UNKNOWN), None)

    def vote_key(self, answer: str | None) -> str | None:
        """An answer normalised for voting (leading zeros dropped), ``None`` when it is not a parts answer."""
        stated = self.read(answer)
        if not stated:
            return None
        return ",".join(f"{k}={v if v == UNKNOWN else int(v)}" for k, v in sorted(stated.items()))

    def same(self, a: str | None, b: str | None) -> bool:
        """Whether two answers vote together: the same :meth:`vote_key` (an answer that is not a parts answer
        matches none). The equivalence to give a vote over this task's answers (``sf.vote(..., equivalence=
        task.same)``, ``recipe(..., equivalence=task.same)``): mathematical equivalence reads a tuple as a set of
        equations, which is slow and not this task's notion of the same answer.

        Examples:
            >>> task = PartsTask()
            >>> task.same("A=012,B=?????,C=7", "C=7,A=12,B=?"), task.same("A=1", "A=2"), task.same("x", "x")
            (True, False, False)
        """
        key = self.vote_key(a)
        return key is not None and key == self.vote_key(b)


def _answer_of(text: str | None) -> str | None:
    """A candidate's answer: the boxed content of a text, or the text itself when it is an answer already."""
    if text is None:
        return None
    boxed = extract_boxed(text)
    return boxed if boxed is not None else text


def task_of_rows(rows: Sequence[Mapping[str, str]]) -> PartsTask:
    """The parts task some problem rows come from (read from their first problem)."""
    pieces = rows[0]["problem"].split(" ")
    bodies = [p.partition(":")[2].split("+") for p in pieces]
    return PartsTask(digits=tuple(len(b[0]) for b in bodies), terms=len(bodies[0]))

