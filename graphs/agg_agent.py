"""AggAgent-style aggregation: ``n`` samples, then one tool-using aggregator that reads them through tools.

After AggAgent (aggregation as an agent): instead of one call that reads every candidate at once,
which stops fitting a model's context once there are many long candidates, the aggregator is an agent
whose prompt states the problem and how many candidates there are, and whose tools
(:func:`scaffold.tools.candidate_tools`) list the candidates' final answers, open a solution's end or
a range of its lines, search them, and cite the ones the answer relies on. It finishes with the
answer in ``\\boxed{}``.

Departures: the tools are ours (five, reading the traces the aggregator read, numbered from 1); the
agent's last turn is forced (``tool_choice="none"``) once one turn's conversation reaches
``context_budget`` tokens (or after ``max_turns``), where the paper's agent is told its budget.
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.prompts import SOLVE_PROMPT
from scaffold.tools import candidate_tools

AGG_AGENT_PROMPT = (
    "Problem:\n{problem}\n\n"
    "{k} candidate solutions to this problem were written. They are not shown here: read them with the tools. "
    "list_candidates gives each one's final answer; get_solution, get_segment and search_candidates show their "
    "text. Check the candidates where they disagree and cite the ones your answer relies on. {answer_format}"
)
"""The aggregator's prompt: the problem and the number of candidates, not the candidates themselves."""


@sf.graph(name="agg_agent")
def agg_agent(problem: str, *, n: int = 16, max_turns: int = 12, context_budget: int = 32_000,
              max_chars: int = 2000, model: str = "solver", aggregator: str = "solver",
              prompt: str = SOLVE_PROMPT, aggregate_prompt: str = AGG_AGENT_PROMPT) -> Any:
    """``n`` samples (node ``candidates``), then one aggregating agent over all of them (``aggregate``).

    Examples:
        >>> from graphs import agg_agent
        >>> agg_agent.build(n=8, max_turns=6).count_calls()
        {'solver': 14}
    """
    candidates = sf.sample(prompt, model=model, n=n, name="candidates")
    tools = candidate_tools(max_chars=max_chars)
    return sf.aggregate(candidates, model=aggregator, prompt=aggregate_prompt, tools=tools, max_turns=max_turns,
                        context_budget=context_budget, name="aggregate")
