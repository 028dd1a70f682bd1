"""A ReAct-style agent: the model reasons, calls tools, reads their answers, and answers when it knows.

The tools are named (:func:`scaffold.tools.named_tools`): the calculator, the sandboxed Python executor,
an MCP server's tools, or any tool importable as ``module:attribute``. With ``n > 1`` several agents
run independently and vote; with ``n = 1`` the agent is the output, so a server that serves this
topology can offer it the client's own tools too (``tools = true`` in its config).
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from scaffold.tools import named_tools

REACT_PROMPT = (
    "Solve the problem below. Think step by step. When a step needs computing or looking up, call a tool "
    "instead of guessing, and use its answer. {answer_format}\n\n"
    "Problem:\n{problem}"
)
"""The agent's prompt (its own text; the tool descriptions travel with the request)."""


@sf.graph(name="react")
def react(problem: str, *, tools: tuple[str, ...] = ("calculator",), n: int = 1, max_turns: int = 8,
          model: str = "solver", prompt: str = REACT_PROMPT) -> Any:
    """One tool-using agent (``n = 1``), or ``n`` agents voted.

    Examples:
        >>> from graphs import react
        >>> react.build(tools=("calculator", "python"), n=3, max_turns=4).count_calls()
        {'solver': 12}
    """
    agents = sf.agent(prompt, model=model, tools=named_tools(tools), n=n, max_turns=max_turns, name="agent")
    return agents if n == 1 else sf.vote(agents)
