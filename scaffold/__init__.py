"""Scaffold: test-time-compute graphs of sequential, parallel and aggregative model calls.

Examples:
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

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from scaffold._answers import Equivalence, Extractor, equivalent, extract_boxed, extract_last_number
from scaffold._budget import Budget
from scaffold._builder import Input
from scaffold._clock import MONOTONIC, Clock
from scaffold._confidence import CONFIDENCE_MEASURES, trace_confidence
from scaffold._control import loop
from scaffold._data import DATASETS, HUB_DATASETS, HubDataset, ShippedDataset, load_problems
from scaffold._errors import (
    AgentLimitError,
    AnswerKindError,
    ArgumentError,
    AuthenticationError,
    BackendError,
    BadRequestError,
    BudgetExceeded,
    CallError,
    CallTimeout,
    CatalogueError,
    ClusterError,
    ConnectionFailed,
    ContextLengthError,
    DatasetError,
    EmptyInputError,
    EmptySetError,
    EvaluationError,
    GraphDefinitionError,
    GraphError,
    InputError,
    MissingDependencyError,
    ModelAliasError,
    ModelSpecError,
    QuorumError,
    RateLimitError,
    RecordError,
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
    ToolArgumentsError,
    ToolError,
    ToolFailed,
    ToolResultError,
    ToolResultTooLarge,
    ToolTimeout,
    UnknownToolError,
)
from scaffold._events import CallStarted, Event, RunFinished, RunStarted, Subscriber, TraceFinished
from scaffold._graph import Graph, GraphFunction, graph
from scaffold._graph_map import LocalRunner
from scaffold._judge import JUDGE_SAME_PROMPT, Judge, Similar, judge, similar
from scaffold._limits import InFlightLimit, RateLimit
from scaffold._messages import assistant_message, tool_message
from scaffold._nodes import Node, Quorum, RuleOutput
from scaffold._otel import OTelExporter, export_otlp, otel_exporter
from scaffold._primitives import AGGREGATE_PROMPT, agent, aggregate, candidates, generate, sample
from scaffold._result import RunResult
from scaffold._rules import (
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
from scaffold._runner import MapRequest, PlannedRow, Runner, plan_row
from scaffold._selectors import AllMembers, CustomSelector, Each, Pairs, Partition, RandomSubsets, Selector
from scaffold._template import Template, format_candidates
from scaffold._throttle import Throttle
from scaffold._tools import Tool, ToolContext, ToolOutcome, current_tool_call, tool
from scaffold._types import Completion, Delta, Finished, Message, Request, Status, ToolCall, Trace, TraceKind, Usage
from scaffold.backends import (
    Backend,
    Capabilities,
    LiteLLMBackend,
    Model,
    OpenAIBackend,
    Price,
    Retry,
    StreamingBackend,
    TransformersBackend,
    VLLMBackend,
    VLLMServer,
    load_models,
)
from scaffold.store import close_stores

if _TYPE_CHECKING:
    from scaffold.evaluation._import import import_outputs
    from scaffold.evaluation._replay import ReplayReport, replay
    from scaffold.store import RunInfo, Store, Totals

__version__ = "0.1.0"


def __getattr__(name: str) -> _Any:
    # the store's classes import SQLAlchemy (~0.4 s); load them on first use, not with `import scaffold`
    if name in ("Store", "RunInfo", "Totals"):
        from scaffold import store

        return getattr(store, name)
    if name in ("replay", "ReplayReport"):  # reads the store: loaded on first use too
        from scaffold.evaluation import _replay

        return getattr(_replay, name)
    if name == "import_outputs":
        from scaffold.evaluation import _import

        return _import.import_outputs
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
    # agents and tools
    "agent",
    "tool",
    "Tool",
    "ToolOutcome",
    "ToolContext",
    "current_tool_call",
    # rules and set operations
    "vote",
    "judge",
    "Judge",
    "similar",
    "Similar",
    "JUDGE_SAME_PROMPT",
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
    # where a map's rows run
    "Runner",
    "LocalRunner",
    "MapRequest",
    "PlannedRow",
    "plan_row",
    # answers
    "extract_boxed",
    "extract_last_number",
    "equivalent",
    "Equivalence",
    "Extractor",
    # datasets
    "load_problems",
    "DATASETS",
    "ShippedDataset",
    "HUB_DATASETS",
    "HubDataset",
    # backends
    "Backend",
    "StreamingBackend",
    "Capabilities",
    "Model",
    "Retry",
    "Price",
    "Budget",
    "OpenAIBackend",
    "LiteLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMServer",
    "load_models",
    "InFlightLimit",
    "RateLimit",
    "Clock",
    "MONOTONIC",
    "Throttle",
    # the trajectory store
    "Store",
    "RunInfo",
    "Totals",
    "close_stores",
    # replaying recorded samples
    "replay",
    "ReplayReport",
    "trace_confidence",
    "CONFIDENCE_MEASURES",
    "import_outputs",
    # records
    "Trace",
    "TraceKind",
    "Status",
    "Request",
    "Message",
    "assistant_message",
    "tool_message",
    "ToolCall",
    "Completion",
    "Usage",
    "Delta",
    "Finished",
    "RunResult",
    # events
    "Event",
    "Subscriber",
    "RunStarted",
    "CallStarted",
    "TraceFinished",
    "RunFinished",
    # OpenTelemetry
    "otel_exporter",
    "OTelExporter",
    "export_otlp",
    # errors
    "ScaffoldError",
    "GraphError",
    "SubsetSizeError",
    "EmptySetError",
    "TemplateError",
    "ModelAliasError",
    "ModelSpecError",
    "GraphDefinitionError",
    "InputError",
    "DatasetError",
    "AnswerKindError",
    "ArgumentError",
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
    "ToolError",
    "UnknownToolError",
    "ToolArgumentsError",
    "ToolTimeout",
    "ToolFailed",
    "ToolResultError",
    "ToolResultTooLarge",
    "AgentLimitError",
    "StoreError",
    "RecordError",
    "SchemaVersionError",
    "ResumeError",
    "CatalogueError",
    "MissingDependencyError",
    "ClusterError",
]
