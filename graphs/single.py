"""A single sample: one chain of thought, the baseline every other topology is measured against.

Its accuracy over a dataset is pass@1; ``scaffold eval --topology single_sample`` is the
one-call-per-problem point on an accuracy-against-tokens plot.
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.prompts import SOLVE_PROMPT


@sf.graph(name="single_sample")
def single_sample(problem: str, *, model: str = "solver", prompt: str = SOLVE_PROMPT) -> Any:
    """One call (node ``sample``) whose answer is the output.

    Examples:
        >>> from graphs import single_sample
        >>> single_sample.build().count_calls()
        {'solver': 1}
    """
    return sf.generate(prompt, model=model, name="sample")
