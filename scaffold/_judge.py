"""Judged and embedding equivalence: a model decides whether two answers mean the same (or their embeddings are
close), so a vote can cluster free text.

``sf.vote(items, equivalence=sf.judge(model="judge"))`` groups answers the run's answer kind calls equal without
a call, then compares each new answer with one representative of each cluster (largest first) until the judge
says "same": as few calls as clustering by representatives allows, each pair asked at most once per run. Every
judgment is a model trace of the vote's node (id ``<vote>#0.<i>``) reading the two answers' traces, so it is
recorded, budgeted, resumed and browsed like any call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scaffold._errors import GraphDefinitionError
from scaffold._template import Template

JUDGE_SAME_PROMPT = (
    "Question:\n{problem}\n\nAnswer 1:\n{first}\n\nAnswer 2:\n{second}\n\n"
    "Do the two answers give the same final answer to the question, whatever their wording? "
    "Reply with one word on the last line: Same or Different."
)
"""The judge's prompt when the graph has a ``problem`` input (``{first}`` and ``{second}`` are the answers)."""

JUDGE_SAME_PROMPT_NO_QUESTION = (
    "Answer 1:\n{first}\n\nAnswer 2:\n{second}\n\n"
    "Do the two answers say the same thing, whatever their wording? "
    "Reply with one word on the last line: Same or Different."
)
"""The judge's prompt for a graph without a ``problem`` input."""

_VERDICT = re.compile(r"\b(same|different|yes|no|equivalent|not\s+equivalent)\b", re.IGNORECASE)


def verdict(text: str) -> bool | None:
    """The judge's verdict: its last "same"/"yes"/"equivalent" (``True``) or "different"/"no"/"not equivalent"
    (``False``); ``None`` when it says neither (counted as different).

    Examples:
        >>> from scaffold._judge import verdict
        >>> verdict("Both say Paris.\\nSame"), verdict("**Different**"), verdict("hmm")
        (True, False, None)
    """
    found = _VERDICT.findall(text)
    if not found:
        return None
    last = " ".join(found[-1].lower().split())
    return last in ("same", "yes", "equivalent")


@dataclass(frozen=True)
class Judge:
    """An equivalence decided by a model (made by :func:`judge`), for ``sf.vote(..., equivalence=...)``."""

    model: str
    prompt: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    max_calls: int | None = None

    def template(self, available: set[str]) -> Template:
        """The prompt as a template: the given one, else the default with the question when ``problem`` is an
        available variable."""
        if self.prompt is not None:
            return Template(self.prompt)
        return Template(JUDGE_SAME_PROMPT if "problem" in available else JUDGE_SAME_PROMPT_NO_QUESTION)


def judge(model: str, *, prompt: str | None = None, params: Mapping[str, Any] | None = None,
          max_calls: int | None = None) -> Judge:
    """An equivalence a model decides: give it to a vote as ``equivalence=`` to cluster answers that mean the same
    in other words (free text, units, paraphrases).

    ``model`` is the judge's alias (bound at run time like any other). ``prompt`` is a template with ``{first}``
    and ``{second}`` (the two answers) and any graph input (default: :data:`JUDGE_SAME_PROMPT`, or
    :data:`JUDGE_SAME_PROMPT_NO_QUESTION` without a ``problem`` input); the judge's last "Same" or "Different"
    (also yes/no) is its verdict, and no verdict counts as different. ``params`` go with every judge call
    (default ``temperature`` 0). ``max_calls`` caps the judge calls of one vote: past it, answers are compared
    by the run's answer kind alone. Budgets and limits apply to judge calls like any other call.

    Examples:
        >>> import scaffold as sf
        >>> from scaffold.testing import ScriptedBackend
        >>> @sf.graph
        ... def moa(problem):
        ...     drafts = sf.sample("{problem}", model="m", n=3)
        ...     return sf.vote(drafts, equivalence=sf.judge(model="judge"))
        >>> texts = iter(["The capital is Paris.", "Paris, the capital.", "It is Lyon."])
        >>> def judge_model(request):  # a stand-in judge: the same when the second answer names Paris
        ...     return "Same" if "Paris" in request.last_content.split("Answer 2:")[1] else "Different"
        >>> models = {"m": ScriptedBackend(lambda r: next(texts)), "judge": ScriptedBackend(judge_model)}
        >>> result = moa.run_sync({"problem": "Capital of France?"}, models=models, answer_kind="text", store=None)
        >>> result.answer, result.output.metadata["judge_calls"]
        ('The capital is Paris.', 2)
    """
    if not isinstance(model, str) or not model:
        raise GraphDefinitionError(f"sf.judge(model=...) takes a model alias string such as 'judge', got {model!r}")
    if prompt is not None:
        missing = {"first", "second"} - Template(prompt).variables
        if missing:
            raise GraphDefinitionError(f"sf.judge(prompt=...) must show both answers: it lacks "
                                       f"{', '.join('{' + m + '}' for m in sorted(missing))}")
    if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0):
        raise GraphDefinitionError(f"sf.judge(max_calls=...) is a count of calls (0 or more), got {max_calls!r}")
    return Judge(model, prompt, dict({"temperature": 0.0} if params is None else params), max_calls)


@dataclass(frozen=True)
class Similar:
    """An equivalence by embedding similarity (made by :func:`similar`), for ``sf.vote(..., equivalence=...)``."""

    model: str
    threshold: float = 0.9


def similar(model: str, *, threshold: float = 0.9) -> Similar:
    """An equivalence by embedding similarity: two answers are the same when the cosine of their embeddings is at
    least ``threshold``. ``model`` is an alias whose backend gives embeddings (``embed(texts)``: an
    OpenAI-compatible server's ``/embeddings``, :class:`~scaffold.OpenAIBackend`). A vote embeds its distinct answers
    in one call (recorded as a model trace of the vote reading the answers' traces; a resumed run embeds again) and
    clusters them greedily: each joins the largest cluster whose first answer is similar enough.

    Examples:
        >>> import scaffold as sf
        >>> from scaffold.testing import ScriptedBackend
        >>> @sf.graph
        ... def sc(problem):
        ...     return sf.vote(sf.sample("{problem}", model="m", n=3), equivalence=sf.similar(model="e"))
        >>> texts = iter(["Paris, France", "france: paris", "Lyon"])
        >>> embedder = ScriptedBackend(lambda r: "", embed=lambda t: [1.0, 0.0] if "aris" in t else [0.0, 1.0])
        >>> result = sc.run_sync({"problem": "?"}, models={"m": ScriptedBackend(lambda r: next(texts)), "e": embedder},
        ...                      answer_kind="text", store=None)
        >>> result.output.metadata["counts"]
        [['Paris, France', 2.0, 2], ['Lyon', 1.0, 1]]
    """
    if not isinstance(model, str) or not model:
        raise GraphDefinitionError(f"sf.similar(model=...) takes a model alias string such as 'embedder', got "
                                   f"{model!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not -1.0 <= threshold <= 1.0:
        raise GraphDefinitionError(f"sf.similar(threshold=...) is a cosine between -1 and 1, got {threshold!r}")
    return Similar(model, float(threshold))
