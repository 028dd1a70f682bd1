"""Scaffold: test-time-compute graphs of sequential, parallel and aggregative model calls.

Example:
    >>> import scaffold as sf
    >>> from scaffold.testing import ScriptedBackend
    >>> @sf.graph
    ... def rsa(problem, *, n: int = 4, k: int = 2, steps: int = 2):
    ...     pop = sf.sample("Solve: {problem}", model="solver", n=n)
    ...     for _ in range(steps):
    ...         pop = sf.aggregate(pop, model="solver", k=k, n=n)
    ...     return sf.vote(pop)
    >>> solver = ScriptedBackend(lambda request: r"so the answer is \\boxed{7}")
    >>> rsa.run_sync({"problem": "3+4"}, models={"solver": solver}, seed=0).answer
    '7'
"""

from typing import TYPE_CHECKING, Any

from scaffold.answers import equivalent, extract_boxed, extract_last_number
from scaffold.backends import (
    Backend,
    Capabilities,
    LiteLLMBackend,
    Model,
    Retry,
    TransformersBackend,
    VLLMBackend,
    VLLMServer,
    load_models,
)
from scaffold.budget import Budget
from scaffold.builder import Input
from scaffold.control import loop
from scaffold.errors import (
    AuthenticationError,
    BackendError,
    BadRequestError,
    BudgetExceeded,
    CallError,
    CallTimeout,
    ConnectionFailed,
    ContextLengthError,
    DatasetError,
    EmptyInputError,
    EmptySetError,
    EvaluationError,
    GraphDefinitionError,
    GraphError,
    InputError,
    ModelAliasError,
    QuorumError,
    RateLimitError,
    RequestTimeout,
    ResumeError,
    RunError,
    RunTimeout,
    ScaffoldError,
    SchemaVersionError,
    ServerError,
    StoreError,
    SubsetSizeError,
    TemplateError,
)
from scaffold.events import CallStarted, Event, RunFinished, RunStarted, Subscriber, TraceFinished
from scaffold.executor import format_candidates
from scaffold.graph import Graph, GraphFunction, graph
from scaffold.limits import InFlightLimit, RateLimit
from scaffold.nodes import Node, Quorum, RuleOutput
from scaffold.primitives import AGGREGATE_PROMPT, aggregate, candidates, generate, sample
from scaffold.result import RunResult
from scaffold.rules import (
    agreement,
    best_of,
    cluster_answers,
    concat,
    map_traces,
    rule,
    select,
    top_k,
    vote,
    weighted_vote,
)
from scaffold.selectors import AllMembers, CustomSelector, Each, Pairs, Partition, RandomSubsets, Selector
from scaffold.store import close_stores
from scaffold.template import Template
from scaffold.types import Completion, Message, Request, Status, Trace, TraceKind, Usage

if TYPE_CHECKING:
    from scaffold.store import RunInfo, Store, Totals

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # the store's classes import SQLAlchemy (~0.4 s); load them on first use, not with `import scaffold`
    if name in ("Store", "RunInfo", "Totals"):
        from scaffold import store

        return getattr(store, name)
    raise AttributeError(f"module 'scaffold' has no attribute {name!r}")


__all__ = [
    # building graphs
    "graph",
    "Graph",
    "GraphFunction",
    "Node",
    "Input",
    "Template",
    "AGGREGATE_PROMPT",
    # primitives
    "generate",
    "sample",
    "aggregate",
    "candidates",
    # rules and set operations
    "vote",
    "weighted_vote",
    "best_of",
    "top_k",
    "select",
    "rule",
    "concat",
    "map_traces",
    "cluster_answers",
    "RuleOutput",
    # control
    "loop",
    "agreement",
    "Quorum",
    # subset selection
    "Selector",
    "AllMembers",
    "RandomSubsets",
    "Partition",
    "Each",
    "Pairs",
    "CustomSelector",
    "format_candidates",
    # answers
    "extract_boxed",
    "extract_last_number",
    "equivalent",
    # backends
    "Backend",
    "Capabilities",
    "Model",
    "Retry",
    "Budget",
    "LiteLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMServer",
    "load_models",
    "InFlightLimit",
    "RateLimit",
    # the trajectory store
    "Store",
    "RunInfo",
    "Totals",
    "close_stores",
    # records
    "Trace",
    "TraceKind",
    "Status",
    "Request",
    "Message",
    "Completion",
    "Usage",
    "RunResult",
    # events
    "Event",
    "Subscriber",
    "RunStarted",
    "CallStarted",
    "TraceFinished",
    "RunFinished",
    # errors
    "ScaffoldError",
    "GraphError",
    "SubsetSizeError",
    "EmptySetError",
    "TemplateError",
    "ModelAliasError",
    "GraphDefinitionError",
    "InputError",
    "DatasetError",
    "EvaluationError",
    "RunError",
    "CallError",
    "QuorumError",
    "EmptyInputError",
    "BackendError",
    "BudgetExceeded",
    "RateLimitError",
    "ServerError",
    "ConnectionFailed",
    "RequestTimeout",
    "AuthenticationError",
    "BadRequestError",
    "ContextLengthError",
    "CallTimeout",
    "RunTimeout",
    "StoreError",
    "SchemaVersionError",
    "ResumeError",
]
