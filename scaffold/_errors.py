"""Typed errors. Build-time mistakes and run-time failures are separate families.

::

    ScaffoldError
    ├── GraphError (ValueError)          raised while building or validating a graph, before any call
    │   ├── SubsetSizeError              k > n, n < 1, k < 1
    │   ├── EmptySetError                aggregating or voting over a set that is empty by construction
    │   ├── TemplateError                a prompt template names a variable nothing provides
    │   ├── ModelAliasError              a graph uses an alias the run does not bind (lists the known ones)
    │   │   └── ModelSpecError           a model spec (``--model``, a served alias) names no runnable model
    │   └── GraphDefinitionError         anything else malformed (wrong argument types, bad selector...)
    ├── InputError (ValueError)          a run's inputs do not fit the graph (missing variable, bad candidate row)
    ├── DatasetError (ValueError)        a dataset file or row is malformed (names the file and line)
    ├── AnswerKindError (ValueError)     an unknown answer kind, or options the kind cannot take
    ├── ArgumentError (TypeError, ValueError)  a run's argument of the wrong form (models=, budget=, concurrency=), or a
    │                                    build parameter passed at run time (names the ``.build(...)`` to use)
    ├── EvaluationError (ValueError)     an evaluation cannot run or be read (a reused name, nothing to compare)
    ├── RunError (RuntimeError)          failures while a run executes
    │   ├── CallError                    a model call failed under the fail-fast policy (``.trace`` has the record)
    │   ├── QuorumError                  fewer successes than a node's quorum
    │   ├── EmptyInputError              every member of a set failed or was dropped
    │   ├── BackendError                 raised by backends; ``retryable`` says whether a retry may help
    │   │   ├── RateLimitError           429; retried after ``retry_after`` seconds
    │   │   ├── ServerError              5xx or a malformed response; retried
    │   │   ├── ConnectionFailed         the connection was refused or dropped; retried
    │   │   ├── RequestTimeout (TimeoutError)  one attempt ran past the model's ``timeout``; retried
    │   │   ├── AuthenticationError      401/403 or a missing key; never retried
    │   │   └── BadRequestError          400/404/422; never retried
    │   │       └── ContextLengthError   the prompt does not fit the model's context
    │   ├── BudgetExceeded               a call was refused: it could pass the run's token or dollar budget
    │   ├── CallTimeout (TimeoutError)   one call ran past its timeout
    │   ├── RunTimeout (TimeoutError)    the whole run ran past its timeout
    │   ├── ToolError                    a tool call failed; recorded on its ``tool`` trace, shown to the model
    │   │   ├── UnknownToolError         the model called a tool the agent does not have
    │   │   ├── ToolArgumentsError       the arguments are not JSON, or do not fit the tool's schema
    │   │   ├── ToolTimeout (TimeoutError)  the tool ran past its timeout
    │   │   ├── ToolFailed               the tool raised (``.cause_type`` names the exception)
    │   │   ├── ToolResultError          the result cannot be turned into text (not JSON-serialisable)
    │   │   └── ToolResultTooLarge       the result is longer than the tool's ``max_result_chars`` (cut)
    │   └── AgentLimitError              an agent still called tools on its last allowed turn
    ├── StoreError (RuntimeError)        the trajectory store could not be opened, read or written
    │   ├── RecordError (ValueError)     the store cannot record a value: a caller's (refused before the run)
    │   │                                or one the database refused (only that run fails; names the field)
    │   ├── SchemaVersionError           the store's schema is newer than this code (or not scaffold's)
    │   └── ResumeError                  a recorded run id was run again with another graph, inputs or seed
    ├── CatalogueError (LookupError)     no topology catalogue is installed, or its plugin failed to load
    ├── MissingDependencyError (ImportError)  an optional dependency is not installed (names the extra)
    └── ClusterError (RuntimeError)      a Ray cluster cannot run the job (no Ray, an unsafe store, every worker lost)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaffold._types import Trace


class ScaffoldError(Exception):
    """Root of every error Scaffold raises."""


class GraphError(ScaffoldError, ValueError):
    """A graph is malformed; raised at build or validation time, before any model call."""


class SubsetSizeError(GraphError):
    """A size parameter is impossible (``k > n``, ``n < 1``, ``k < 1``)."""


class EmptySetError(GraphError):
    """An aggregation, vote or selection reads a set that is empty by construction."""


class TemplateError(GraphError):
    """A prompt template uses a variable that neither the graph inputs nor the node provide."""


class ModelAliasError(GraphError):
    """A graph uses a model alias that the run does not bind."""


class ModelSpecError(ModelAliasError):
    """A model spec (``--model``, a served model's alias) names no model this installation can run."""


class GraphDefinitionError(GraphError):
    """Any other malformed graph: wrong argument types, bad selector output, misuse of the DSL."""


class InputError(ScaffoldError, ValueError):
    """A run's inputs do not fit the graph."""


class DatasetError(ScaffoldError, ValueError):
    """A dataset file or row is malformed; the message names the file and line."""


class ArgumentError(ScaffoldError, TypeError, ValueError):
    """A run's argument of the wrong form or value, or a build parameter passed at run time (a ``TypeError`` and a
    ``ValueError``, as what it replaces was one or the other)."""


class AnswerKindError(ScaffoldError, ValueError):
    """An unknown answer kind, or options an answer kind cannot take."""


class EvaluationError(ScaffoldError, ValueError):
    """An evaluation cannot run or be read: a name reused with other settings, an unknown name, nothing to compare."""


class RunError(ScaffoldError, RuntimeError):
    """A failure while a run executes."""


class CallError(RunError):
    """A model call failed and the node's policy does not tolerate failures.

    ``trace`` is the recorded failed trace (status ``error``).
    """

    def __init__(self, message: str, trace: Trace | None = None) -> None:
        super().__init__(message)
        self.trace = trace


class QuorumError(RunError):
    """A node finished with fewer successful members than its quorum."""


class EmptyInputError(RunError):
    """Every member of the set a node reads failed or was dropped."""


class BackendError(RunError):
    """Raised by a backend for a failed request.

    ``retryable`` says whether sending the same request again may succeed (rate limits,
    5xx, dropped connections) or not (authentication, bad request, context length).
    ``retry_after`` is the wait the provider asked for, in seconds, when it said;
    ``attempts`` is how many times the request was sent before giving up.
    Messages never contain API keys (backends redact them).
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        status_code: int | None = None,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.retryable = self.default_retryable if retryable is None else retryable
        self.status_code = status_code
        self.retry_after = retry_after
        self.attempts = attempts


class RateLimitError(BackendError):
    """The provider answered 429 (too many requests or tokens); retried after ``retry_after``."""

    default_retryable = True


class ServerError(BackendError):
    """The provider failed (5xx) or sent a response that could not be read; retried."""

    default_retryable = True


class ConnectionFailed(BackendError):
    """The connection was refused, reset or dropped before an answer; retried."""

    default_retryable = True


class RequestTimeout(BackendError, TimeoutError):
    """One attempt ran past the model's per-request ``timeout``; retried."""

    default_retryable = True


class AuthenticationError(BackendError):
    """The provider refused the credentials (401/403), or no API key was found; never retried."""


class BadRequestError(BackendError):
    """The provider rejected the request itself (400/404/422): bad parameter, unknown model; never retried."""


class ContextLengthError(BadRequestError):
    """The prompt (plus ``max_tokens``) does not fit the model's context window; never retried."""


class BudgetExceeded(RunError):
    """A call was not sent: it could pass the token or dollar :class:`~scaffold._budget.Budget` of its run."""


class CallTimeout(RunError, TimeoutError):
    """One model call ran past its timeout."""


class RunTimeout(RunError, TimeoutError):
    """A whole run ran past its timeout; in-flight calls were cancelled and recorded."""


class ToolError(RunError):
    """A tool call failed. The agent records it on the call's ``tool`` trace and shows it to the model as the
    tool's answer; it fails a run only where a tool is called outside an agent."""


class UnknownToolError(ToolError):
    """The model called a tool by a name the agent was not given."""


class ToolArgumentsError(ToolError):
    """A tool call's arguments are not a JSON object, or do not fit the tool's parameters (names the field)."""


class ToolTimeout(ToolError, TimeoutError):
    """A tool call ran past the tool's ``timeout``; it was cancelled (a thread running a sync tool is abandoned)."""


class ToolFailed(ToolError):
    """The tool's function raised; ``cause_type`` is the exception's class name."""

    def __init__(self, message: str, cause_type: str = "Exception") -> None:
        super().__init__(message)
        self.cause_type = cause_type


class ToolResultError(ToolError):
    """A tool returned a value that cannot be turned into text for the model (not JSON-serialisable)."""


class ToolResultTooLarge(ToolError):
    """A tool's result is longer than its ``max_result_chars``: the model is shown the first part and this note."""


class AgentLimitError(RunError):
    """An agent asked for tools on its last allowed turn (``max_turns`` or its token budget reached)."""


class StoreError(ScaffoldError, RuntimeError):
    """The trajectory store could not be opened, read or written (the message says which and why)."""


class RecordError(StoreError, ValueError):
    """A record the store cannot hold: a value passed by the caller (a non-finite reward, a dataset row
    nested too deeply), refused before anything is written, or a run's record that the database refused
    when it was written. Only that run fails (it ends as ``error``); the message names the run, the table,
    the row and the field."""


class SchemaVersionError(StoreError):
    """The store's schema is newer than this code, or the database was not made by scaffold."""


class ResumeError(StoreError):
    """A run id already in the store was run again with a different graph, inputs or seed."""


class CatalogueError(ScaffoldError, LookupError):
    """No topology catalogue is installed, or the plugin that supplies it failed to load."""


class MissingDependencyError(ScaffoldError, ImportError):
    """An optional dependency the chosen feature needs is not installed; the message says what to install."""


class ClusterError(ScaffoldError, RuntimeError):
    """A job cannot run on the Ray cluster: Ray missing or unreachable, a store workers cannot share
    safely (SQLite across machines), models that cannot be sent to workers, or every worker lost."""
