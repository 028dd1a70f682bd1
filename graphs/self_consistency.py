"""Self-consistency (Wang et al. 2022, "Self-Consistency Improves Chain of Thought Reasoning in Language Models").

Sample ``n`` (the paper's m) chains of thought at temperature > 0 and return the most common final answer.
Answers are clustered by mathematical equivalence (``1/2``, ``0.5`` and ``\\frac{1}{2}`` are one
answer, via math-verify) rather than by exact string match, which is what the paper's
"marginalising out the reasoning paths" amounts to for math answers. The paper samples 40 paths;
that is the default. Departure: ties go to the answer seen first (the paper does not say).
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.prompts import SOLVE_PROMPT


@sf.graph(name="self_consistency")
def self_consistency(problem: str, *, n: int = 40, model: str = "solver", prompt: str = SOLVE_PROMPT) -> Any:
    """``n`` samples (node ``samples``), then an equivalence-clustered majority vote (node ``vote``).

    Examples:
        >>> from graphs import self_consistency
        >>> self_consistency.build(n=5).count_calls()
        {'solver': 5}
    """
    samples = sf.sample(prompt, model=model, n=n, name="samples")
    return sf.vote(samples, name="vote")
