"""The prompts the pocket model was trained on, and the one way training examples are rendered.

A training example is rendered exactly as a scaffold run renders the call: the prompt with
:class:`~scaffold._template.Template` (candidates with :func:`~scaffold._template.format_candidates`),
as the only user message, through the tokenizer's chat template with a generation prompt (what
:class:`~scaffold.backends.TransformersBackend` sends to the model), followed by the answer and
``<|im_end|>``. So ``sf.sample(SOLVE_PROMPT, ...)`` and ``sf.aggregate(..., prompt=AGGREGATE_PROMPT)``
ask the model exactly what it learned to answer. Prompts are short: every character is a token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scaffold._template import Template, format_candidates
from scaffold._types import Trace, TraceKind

SOLVE_PROMPT = "Add {problem}"
"""The pocket model's solving prompt (for ``sf.generate`` / ``sf.sample``); ``{problem}`` is e.g. ``482+915+307``."""

AGGREGATE_PROMPT = "Add {problem}\n\n{candidates}\n\nFix any mistakes:"
"""The pocket model's aggregation prompt, the one it was trained on (``sf.aggregate(...,
prompt=AGGREGATE_PROMPT)``); ``{candidates}`` as :func:`~scaffold._template.format_candidates` renders
them. Model-specific, not a default: the generic default is :data:`scaffold.AGGREGATE_PROMPT`."""

PARTS_SOLVE_PROMPT = "Part of {problem}"
"""The parts model's solving prompt: work one part of ``{problem}`` (e.g. ``A:47+85 B:362+519 C:4821+3390``)."""

PARTS_AGGREGATE_PROMPT = "{candidates}\n\nAll of {problem}"
"""The parts model's aggregation prompt: copy the parts the candidates give, work one they lack, box the tuple. Its
``{candidates}`` shows each candidate's boxed tuple only, one line each: give the aggregating node
``render=PartsTask().show_candidates`` (:meth:`~scaffold.pocket.PartsTask.show_candidates`).
The problem comes last, as in :data:`PARTS_SOLVE_PROMPT`: an aggregation's worked part then restates the part at
the distance a candidate's does (with the problem first and the candidates' whole texts between, the model had to
learn that lookup a second time, at another distance: after 300 steps of aggregating, the parts it worked were
restated wrong)."""

_SOLVE = Template(SOLVE_PROMPT)
_AGGREGATE = Template(AGGREGATE_PROMPT)
_TEMPLATES: dict[str, Template] = {}


def render(prompt: str, problem: str, candidates: Sequence[str] | None = None,
           show: Callable[[Sequence[Trace]], str] = format_candidates) -> str:
    """The user message scaffold sends for ``prompt`` (a solving prompt, or an aggregation prompt over the candidate
    texts ``candidates``, shown by ``show`` as the aggregating node's ``render`` shows them), rendered as
    :class:`~scaffold._template.Template` renders it."""
    template = _TEMPLATES.get(prompt) or _TEMPLATES.setdefault(prompt, Template(prompt))
    if candidates is None:
        return template.render({"problem": problem})
    traces = [Trace(id=f"pocket/candidate#{i}", run_id="pocket", node="candidate", index=i, kind=TraceKind.EXTERNAL,
                    text=text) for i, text in enumerate(candidates)]
    return template.render({"problem": problem, "candidates": show(traces), "k": len(traces)})


def solve_prompt(problem: str) -> str:
    """The user message of a solving call."""
    return _SOLVE.render({"problem": problem})


def aggregate_prompt(problem: str, candidates: Sequence[str]) -> str:
    """The user message of an aggregation call over candidate solution texts."""
    traces = [Trace(id=f"pocket/candidate#{i}", run_id="pocket", node="candidate", index=i, kind=TraceKind.EXTERNAL,
                    text=text) for i, text in enumerate(candidates)]
    return _AGGREGATE.render({"problem": problem, "candidates": format_candidates(traces), "k": len(traces)})


def chat_prompt(tokenizer: Any, user: str) -> str:
    """What the model reads before it answers ``user``: the chat template with a generation prompt."""
    text: str = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                              tokenize=False)
    return text


def encode_example(tokenizer: Any, user: str, answer: str) -> tuple[list[int], int]:
    """Token ids of one training example (prompt, answer, ``<|im_end|>``) and where the answer starts."""
    prompt = tokenizer(chat_prompt(tokenizer, user), add_special_tokens=False)["input_ids"]
    reply = tokenizer(answer, add_special_tokens=False)["input_ids"]
    return [*prompt, *reply, tokenizer.eos_token_id], len(prompt)
