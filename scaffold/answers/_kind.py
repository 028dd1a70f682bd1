"""What an answer is: the base of every answer kind, and the resolver of kinds by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from scaffold._errors import AnswerKindError


@dataclass(frozen=True)
class AnswerKind:
    """How answers of one kind are read from a text and compared: an extractor and an equivalence.

    A kind reads the final answer of an output (:meth:`extract`), gives an answer its canonical form
    (:meth:`key`: two answers with the same key are the same answer), compares two answers (:meth:`same`) and
    an answer against a reference (:meth:`correct`), and says how a prompt asks for it (:attr:`instruction`,
    which fills ``{answer_format}`` in a prompt). :meth:`bind` gives the kind a run's inputs, so a kind that needs
    the row (the options of a multiple-choice question) sees them.

    Subclasses override :meth:`extract` and :meth:`key` (and :meth:`same` when equality is not equality of
    keys). Kinds are frozen dataclasses, so they compare and hash by their options.

    Examples:
        >>> from scaffold.answers import answer_kind
        >>> kind = answer_kind("integer")
        >>> kind.extract(r"so the total is \\boxed{1,024}"), kind.same("007", "7")
        ('1024', True)
    """

    name: ClassVar[str] = "custom"
    inputs: ClassVar[tuple[str, ...]] = ()
    """Row fields the kind reads besides the answer (an evaluation passes them into each run's inputs)."""

    @property
    def instruction(self) -> str:
        """The sentence a prompt's ``{answer_format}`` becomes: how to state an answer of this kind."""
        return "State your final answer clearly at the end."

    def extract(self, text: str) -> str | None:
        """The final answer a text states, ``None`` when it states none."""
        raise NotImplementedError

    def key(self, answer: str) -> str | None:
        """The canonical form of an answer (``None``: not an answer of this kind); equal keys mean one answer."""
        raise NotImplementedError

    def same(self, a: str | None, b: str | None) -> bool:
        """Whether two answers are the same (an equivalence: what a vote clusters by). ``None`` matches nothing."""
        if a is None or b is None:
            return False
        key = self.key(a)
        return key is not None and key == self.key(b)

    def correct(self, answer: str | None, reference: str) -> bool:
        """Whether ``answer`` is right against the row's reference answer."""
        return self.same(answer, str(reference))

    @property
    def reasks(self) -> int:
        """How many times a call whose reply :meth:`check` refuses is asked again (0 for most kinds)."""
        return 0

    def check(self, text: str) -> str | None:
        """Why ``text`` is no valid answer of this kind, as a model can be told it; ``None`` when it is one (a kind
        that re-asks, :attr:`reasks`, says so here)."""
        return None

    def response_format(self) -> dict[str, Any] | None:
        """The OpenAI ``response_format`` a backend that supports JSON schemas is sent, ``None`` for none."""
        return None

    def bind(self, inputs: Mapping[str, Any]) -> AnswerKind:
        """This kind for one run's inputs (a multiple-choice kind takes the row's ``choices``); itself by default."""
        return self

    def describe(self) -> dict[str, Any]:
        """The kind's name and options, as JSON."""
        return {"kind": self.name, **self.options()}

    def options(self) -> dict[str, Any]:
        """The options (JSON) that make this kind again by name, ``answer_kind(kind.name, **kind.options())``:
        recorded with an evaluation, so a report read later scores by the same kind. None by default."""
        return {}

    def __call__(self, text: str) -> str | None:
        """A kind is an extractor too: ``kind(text)`` is ``kind.extract(text)``."""
        return self.extract(text)


_KINDS: dict[str, Callable[..., AnswerKind]] = {}


def register_kind(name: str, factory: Callable[..., AnswerKind]) -> None:
    """Make ``answer_kind(name, **options)`` build ``factory(**options)`` (a kind of your own, by name)."""
    _KINDS[name] = factory


def kind_names() -> list[str]:
    """The names :func:`answer_kind` knows."""
    return sorted(_KINDS)


def kind_settings(kind: AnswerKind) -> dict[str, Any]:
    """What an evaluation records of its kind: nothing for math (evaluations from before kinds read as they were),
    else its name and, when it has any, its :meth:`~AnswerKind.options`."""
    if kind.name == "math":
        return {}
    options = kind.options()
    return {"answer_kind": kind.name, **({"answer_kind_options": options} if options else {})}


def recorded_kind(settings: Mapping[str, Any]) -> AnswerKind:
    """The kind an evaluation's recorded settings name (:func:`kind_settings`); math when they name none."""
    return answer_kind(settings.get("answer_kind"), **dict(settings.get("answer_kind_options") or {}))


def answer_kind(spec: str | AnswerKind | None = None, **options: Any) -> AnswerKind:
    """The answer kind ``spec`` names (``"math"``, ``"integer"``, ``"choice"``, ``"text"``, ``"json"``), or ``spec``
    itself when it is a kind already; ``None`` is ``"math"``, today's default. ``options`` go to the kind
    (``answer_kind("choice", letters="ABCDE")``). Raises :class:`AnswerKindError` for an unknown name, naming the
    known ones.

    Examples:
        >>> from scaffold.answers import answer_kind
        >>> answer_kind("choice").extract("The correct option is **(B)**.")
        'B'
        >>> answer_kind("choise")
        Traceback (most recent call last):
        ...
        scaffold._errors.AnswerKindError: unknown answer kind 'choise'; choose one of choice, integer, json, math, text
    """
    if isinstance(spec, AnswerKind):
        if options:
            raise AnswerKindError(f"options {sorted(options)} go with a kind's name, not with a kind object")
        return spec
    name = "math" if spec is None else spec
    if not isinstance(name, str) or name not in _KINDS:
        raise AnswerKindError(f"unknown answer kind {name!r}; choose one of {', '.join(kind_names())}")
    try:
        return _KINDS[name](**options)
    except TypeError as exc:
        raise AnswerKindError(f"answer kind {name!r} does not take these options: {exc}") from None


def as_extractor(value: Callable[[str], str | None] | AnswerKind | str | None, where: str
                 ) -> Callable[[str], str | None] | AnswerKind | None:
    """A node's ``extract=``: ``None``, a function of the text, an :class:`AnswerKind`, or a kind's name (made a
    kind here). Raises :class:`~scaffold.GraphDefinitionError` naming ``where`` for anything else, and
    :class:`~scaffold.AnswerKindError` for an unknown name.

    Examples:
        >>> from scaffold.answers import as_extractor
        >>> as_extractor("integer", "sf.sample()").name
        'integer'
    """
    from scaffold._errors import GraphDefinitionError

    if value is None or isinstance(value, AnswerKind):
        return value
    if isinstance(value, str):
        return answer_kind(value)
    if not callable(value):
        raise GraphDefinitionError(f"{where}: extract= takes a function of the text, an answer kind or a kind's "
                                   f"name ({', '.join(kind_names())}), got {type(value).__name__}")
    return value
