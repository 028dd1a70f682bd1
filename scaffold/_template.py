"""Prompt templates whose variables are known before anything runs.

A placeholder is ``{name}`` where ``name`` is a Python identifier. Every other
brace is literal, so LaTeX such as ``\\boxed{}`` or ``\\frac{1}{2}`` needs no
escaping; write ``{{name}}`` for a literal ``{name}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaffold._errors import TemplateError

if TYPE_CHECKING:
    from scaffold._types import Trace

_PART = re.compile(r"\{\{[A-Za-z_][A-Za-z0-9_]*\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Template:
    """A string with ``{variable}`` placeholders, checked at build time.

    Examples:
        >>> t = Template("Solve: {problem}\\nPut the answer in \\\\boxed{}.")
        >>> sorted(t.variables)
        ['problem']
        >>> t.render({"problem": "1+1"}).splitlines()[0]
        'Solve: 1+1'
    """

    text: str
    _names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _first: str = field(init=False, repr=False, compare=False)
    _pairs: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TemplateError(f"a template must be a string, got {type(self.text).__name__}")
        # Split once into literal text and placeholders: rendering then only joins strings
        # (str.format_map would parse the whole template again on every call).
        literals: list[str] = []
        names: list[str] = []
        literal = ""
        pos = 0
        for m in _PART.finditer(self.text):
            literal += self.text[pos : m.start()]
            if m.group(1) is None:  # escaped {{name}}: a literal {name}
                literal += m.group(0)[1:-1]
            else:
                literals.append(literal)
                names.append(m.group(1))
                literal = ""
            pos = m.end()
        literals.append(literal + self.text[pos:])
        object.__setattr__(self, "_names", tuple(names))
        object.__setattr__(self, "_first", literals[0])
        object.__setattr__(self, "_pairs", tuple(zip(names, literals[1:])))

    @property
    def variables(self) -> frozenset[str]:
        """Names of the placeholders."""
        return frozenset(self._names)

    def check(self, available: set[str] | frozenset[str], *, where: str = "template") -> None:
        """Raise :class:`TemplateError` if a placeholder is not in ``available``."""
        missing = sorted(self.variables - set(available))
        if missing:
            known = ", ".join(sorted(available)) or "none"
            raise TemplateError(
                f"{where} uses {', '.join('{' + m + '}' for m in missing)} but only these variables "
                f"are available: {known}. Add it as a graph input or context, or write {{{{name}}}} "
                f"for a literal brace."
            )

    def render(self, values: Mapping[str, Any]) -> str:
        """Fill the placeholders from ``values`` (values are converted with ``str``)."""
        out = [self._first]
        for name, literal in self._pairs:
            try:
                value = values[name]
            except KeyError:
                raise TemplateError(f"no value for template variable {{{name}}}") from None
            out += (value if value.__class__ is str else format(value, ""), literal)
        return "".join(out)


def as_template(value: str | Template) -> Template:
    """Return ``value`` as a :class:`Template`."""
    return value if isinstance(value, Template) else Template(value)


def format_candidates(traces: Sequence[Trace]) -> str:
    """Default rendering of a candidate set inside an aggregation prompt (``{candidates}``).

    Examples:
        >>> from scaffold import Trace
        >>> print(format_candidates([Trace(id="a", run_id="r", node="n", index=0, text="x = 1"),
        ...                          Trace(id="b", run_id="r", node="n", index=1, text="x = 2")]))
        Candidate 1:
        x = 1
        <BLANKLINE>
        Candidate 2:
        x = 2
    """
    return "\n\n".join([f"Candidate {i}:\n{t.text}" for i, t in enumerate(traces, 1)])
