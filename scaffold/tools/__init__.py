"""Ready tools for agents: a calculator, a sandboxed Python executor, the tools of any MCP server, and tools that
read an aggregating agent's candidates (:func:`candidate_tools`).

Examples:
    >>> import scaffold as sf
    >>> from scaffold.tools import calculator, python_executor
    >>> @sf.graph
    ... def solve(problem):
    ...     return sf.agent("Solve: {problem}", model="solver", tools=[calculator, python_executor()])
    >>> solve.build().count_calls()
    {'solver': 10}
"""

from scaffold.tools._calculator import CalculatorError, calculator, evaluate
from scaffold.tools._candidates import CiteTool, candidate_tools
from scaffold.tools._mcp import MCPServer, MCPTool
from scaffold.tools._named import named_tools
from scaffold.tools._python import PythonExecutor, network_isolated, python_executor

__all__ = [
    "calculator",
    "evaluate",
    "CalculatorError",
    "python_executor",
    "PythonExecutor",
    "network_isolated",
    "MCPServer",
    "MCPTool",
    "named_tools",
    "candidate_tools",
    "CiteTool",
]
