"""Answer kinds: how a final answer is read from a model's text and when two answers are the same.

A kind pairs an extractor with an equivalence. ``math`` (the default: ``\\boxed{}`` and mathematical equivalence)
is what every graph used before kinds existed; ``integer`` reads AIME-style integers; ``choice`` reads the letter
of a multiple-choice answer from every common phrasing; ``text`` compares free text after normalisation; ``json``
validates a JSON object against a pydantic model. A kind is chosen per run (``graph.run(..., answer_kind="choice")``),
per node (``sf.sample(..., answer_kind="integer")``), per evaluation and on the command line (``--answer-kind``); a
vote clusters by its run's kind unless it is given its own ``equivalence``.

Examples:
    >>> import scaffold as sf
    >>> from scaffold.testing import ScriptedBackend
    >>> @sf.graph
    ... def sc(problem):
    ...     return sf.vote(sf.sample("{problem} {answer_format}", model="m", n=3))
    >>> texts = iter(["The answer is (B).", "**Answer: C**", "Answer: b"])
    >>> result = sc.run_sync({"problem": "Which?"}, models={"m": ScriptedBackend(lambda r: next(texts))},
    ...                      answer_kind="choice", store=None)
    >>> result.answer, result.output.metadata["share"]
    ('B', 0.6666666666666666)
"""

from scaffold.answers._choice import ChoiceAnswer
from scaffold.answers._kind import AnswerKind, answer_kind, as_extractor, kind_names, register_kind
from scaffold.answers._math import IntegerAnswer, MathAnswer
from scaffold.answers._rows import CHOICES_TEMPLATE, choice_rows, format_choices
from scaffold.answers._structured import JsonAnswer
from scaffold.answers._text import TextAnswer, normalise_text

__all__ = [
    "AnswerKind",
    "answer_kind",
    "as_extractor",
    "kind_names",
    "register_kind",
    "MathAnswer",
    "IntegerAnswer",
    "ChoiceAnswer",
    "TextAnswer",
    "JsonAnswer",
    "normalise_text",
    "choice_rows",
    "format_choices",
    "CHOICES_TEMPLATE",
]
