"""Parallel agents with an aggregator: ``n`` tool-using agents work on the problem independently, then one
aggregation reads their final answers.

The agents are :func:`graphs.react`'s (named tools, :func:`scaffold.tools.named_tools`); the aggregator
reads each agent's final turn (its answer, not its tool calls) with the generic aggregation prompt.
With ``aggregator_tools`` the aggregator is itself an agent with those named tools (``"candidates"``
gives it the candidate tools, :func:`scaffold.tools.candidate_tools`).
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT
from graphs.react import REACT_PROMPT
from scaffold.tools import named_tools


@sf.graph(name="agents")
def parallel_agents(problem: str, *, n: int = 4, tools: tuple[str, ...] = ("calculator",), max_turns: int = 8,
                    aggregator_tools: tuple[str, ...] = (), aggregator_turns: int = 8, model: str = "solver",
                    aggregator: str = "solver", prompt: str = REACT_PROMPT,
                    aggregate_prompt: str = AGGREGATE_PROMPT) -> Any:
    """``n`` agents (node ``agents``), then one aggregation of their answers (``aggregate``).

    Examples:
        >>> from graphs import parallel_agents
        >>> parallel_agents.build(n=3, max_turns=4).count_calls()
        {'solver': 13}
        >>> parallel_agents.build(n=3, max_turns=4, aggregator_tools=("candidates",), aggregator_turns=5).count_calls()
        {'solver': 17}
    """
    agents = sf.agent(prompt, model=model, tools=named_tools(tools), n=n, max_turns=max_turns, name="agents")
    if not aggregator_tools:
        return sf.aggregate(agents, model=aggregator, prompt=aggregate_prompt, name="aggregate")
    return sf.aggregate(agents, model=aggregator, prompt=aggregate_prompt, tools=named_tools(aggregator_tools),
                        max_turns=aggregator_turns, name="aggregate")
