"""Any Scaffold graph as a ``verifiers`` environment, so prime-rl, NeMo-RL or Atropos can train on it with
Scaffold's credit on every call.

:func:`verifiers_environment` wraps a graph, its rows and a reward into a ``verifiers.Environment``. One rollout
runs the graph once on one row, and every model call of the graph goes to the client and model the trainer
hands the rollout (its inference server), through the environment's own ``get_model_response``. So the
trainer's sampling arguments, token-in prompts and error handling apply to every call, as in any ``verifiers``
environment. Each call becomes one step of the rollout's ``trajectory``:

- ``prompt``, ``completion``, ``response`` and ``tokens``, as ``verifiers`` parses them from the server's
  response (token ids and logprobs when the server returns them, as vLLM does with ``return_token_ids``);
- ``reward`` (the trace's own reward) and ``advantage`` (the credit Scaffold assigned it, by ``scheme``:
  SPIRAL's set-level credit by default). Other stacks cannot compute set-level credit themselves: a step a
  scheme does not train gets advantage 0.

The rollout's own ``reward`` is the reward of the graph's final answer. ``verifiers`` then sets the rollout's
``advantage`` (its reward less its group's mean) but leaves the steps' advantages as Scaffold set them.
``state["scaffold"]`` holds the run's id, final answer and per-step trace ids, and, with a ``store``, every run
is recorded, to browse (``scaffold ui``), replay or train on offline.

:func:`load_environment` is the entry point ``verifiers.load_environment("trainers.verifiers_env", ...)`` and
the trainers that load environments by id call: a ready topology by name, a dataset by name or path, a reward
by name.

Needs the ``verifiers`` package (the ``export`` extra). Sampling parameters: the trainer's sampling arguments
are the base, and what a graph's node sets itself (``max_tokens``, ``temperature``...) wins, as it does over a
model's defaults in any run.

Examples:
    >>> import graphs
    >>> env = verifiers_environment(graphs.self_consistency.build(n=4),
    ...                             [{"problem": "2+2?", "answer": "4"}])  # doctest: +SKIP
    >>> outputs = env.evaluate_sync(client=AsyncOpenAI(base_url=URL), model="policy",
    ...                             num_examples=1, rollouts_per_example=2)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import scaffold as sf
from scaffold._messages import call_from_dict, message_dict
from scaffold.backends._openai import CLIENT_PARAMS
from trainers.credit import assign_credit
from trainers.rewards import RewardFn, math_reward, rewards_from
from trainers.types import ROLES

__all__ = ["verifiers_environment", "load_environment", "sampling_args", "TrainerBackend", "STEP_KEY"]

STEP_KEY = "verifiers_step"
"""The key of a model trace's ``metadata`` that names its step in the rollout's ``trajectory``."""

_NOT_SENT = CLIENT_PARAMS | {"n"}
"""Request parameters that configure a client, not the generation (and ``n``: one choice per call here)."""


def verifiers_environment(
    graph: sf.Graph | sf.GraphFunction,
    rows: Sequence[Mapping[str, Any]] | Any,
    *,
    reward: RewardFn = math_reward,
    scheme: str = "spiral",
    roles: Sequence[str] = ROLES,
    scale_by_std: bool = False,
    answer_key: str = "answer",
    answer_kind: str | None = None,
    store: Any = None,
    eval_rows: Sequence[Mapping[str, Any]] | Any = None,
    **env_options: Any,
) -> Any:
    """A ``verifiers.Environment`` whose rollout is one run of ``graph`` on a row, credited by ``scheme``.

    Args:
        graph: the graph (a built :class:`~scaffold.Graph`, or a graph function built with its defaults). Every
            model alias it names goes to the trainer's client and model.
        rows: the training rows (mappings, or a ``datasets.Dataset``): the graph's inputs (``problem``...) and
            the reference answer under ``answer_key``.
        reward: ``reward(trace, answer)`` for each trace; the final answer's reward is the rollout's.
        scheme: the credit scheme (:data:`trainers.credit.SCHEMES`: ``"spiral"``, ``"grpo"``, ``"rloo"``...).
        roles: the roles whose steps get Scaffold's advantage (others get 0).
        scale_by_std: divide advantages by their group's standard deviation.
        answer_kind: how answers are read (``"math"`` by default; :mod:`scaffold.answers`).
        store: where the runs are recorded (a :class:`~scaffold.Store`, URL or path); ``None`` records nothing.
        eval_rows: rows for ``evaluate`` (default: the training rows).
        env_options: passed to ``verifiers.Environment`` (``sampling_args``, ``max_seq_len``, ``env_id``...).

    Raises:
        ImportError: when ``verifiers`` is not installed.
        InputError: when a row lacks one of the graph's inputs or its answer.
    """
    built = graph.build() if isinstance(graph, sf.GraphFunction) else graph
    if not isinstance(built, sf.Graph):
        raise TypeError(f"graph must be a scaffold Graph or graph function, got {type(graph).__name__}")
    cls = _environment_class()
    dataset = _dataset(built, rows, answer_key)
    evaluation = None if eval_rows is None else _dataset(built, eval_rows, answer_key)
    return cls(graph=built, reward=reward, scheme=scheme, roles=tuple(roles), scale_by_std=scale_by_std,
               answer_kind=answer_kind, store=store, dataset=dataset, eval_dataset=evaluation, **env_options)


def load_environment(
    topology: str = "self_consistency",
    data: str = "math500",
    *,
    limit: int | None = None,
    reward: str = "math",
    scheme: str = "spiral",
    store: str | None = None,
    answer_kind: str | None = None,
    **params: Any,
) -> Any:
    """The environment ``verifiers.load_environment("trainers.verifiers_env", ...)`` loads: ready topology
    ``topology`` (:func:`graphs.registry.topology`, or ``FILE.py:NAME``) built with ``params``, on the problems
    ``data`` names (:func:`scaffold.load_problems`: a shipped set, a JSONL, CSV or Parquet file, a dataset
    directory), rewarded by ``reward`` (``"math"``, or the answer kind's own equivalence: ``"integer"``,
    ``"choice"``, ``"text"``).

    Examples:
        >>> env = load_environment("rsa", "math500", limit=8, n=4, k=2, steps=1)  # doctest: +SKIP
    """
    from graphs.registry import build_topology

    graph = build_topology(topology, params)
    rows = sf.load_problems(data, limit=limit, answer_kind=answer_kind)
    return verifiers_environment(graph, rows, reward=_reward(reward), scheme=scheme, store=store,
                                 answer_kind=answer_kind, env_id=f"scaffold-{topology}")


def _reward(name: str) -> RewardFn:
    if name == "math":
        return math_reward
    from scaffold.answers import answer_kind

    kind = answer_kind(name)

    def same(trace: sf.Trace, answer: str) -> float:
        return float(trace.answer is not None and kind.same(trace.answer, answer))

    same.__name__ = f"{name}_reward"
    return same


def _dataset(graph: sf.Graph, rows: Any, answer_key: str) -> Any:
    """The rows as the dataset ``verifiers`` reads: ``prompt`` (the problem as a user message), ``answer``,
    ``info`` (the graph's inputs, as JSON) and ``example_id``."""
    from datasets import Dataset

    records = []
    for i, row in enumerate(rows):
        missing = [name for name in (*graph.inputs, answer_key) if name not in row]
        if missing:
            raise sf.InputError(f"row {i} has no {', '.join(map(repr, missing))} (graph {graph.name!r} takes "
                                f"{', '.join(map(repr, graph.inputs))}; the answer is {answer_key!r})")
        inputs = {name: row[name] for name in graph.inputs}
        shown = str(inputs.get("problem", next(iter(inputs.values()), "")))
        records.append({"prompt": [{"role": "user", "content": shown}], "answer": str(row[answer_key]),
                        "info": json.dumps(inputs, default=str), "example_id": i, "task": graph.name})
    if not records:
        raise sf.InputError("no rows to build the environment's dataset from")
    return Dataset.from_list(records)


@functools.cache
def _environment_class() -> type:
    """The environment class, made on first use so that ``verifiers`` is imported only when needed."""
    try:
        import verifiers as vf
    except ImportError:
        raise ImportError("a verifiers environment needs the verifiers package: pip install 'scaffold-sdk[export]'") \
            from None

    class ScaffoldEnv(vf.Environment):  # type: ignore[misc]
        """A Scaffold graph as a ``verifiers`` environment (see :func:`verifiers_environment`)."""

        def __init__(self, *, graph: sf.Graph, reward: RewardFn, scheme: str, roles: tuple[str, ...],
                     scale_by_std: bool, answer_kind: str | None, store: Any, **kwargs: Any) -> None:
            self.graph, self.reward_fn, self.scheme, self.roles = graph, reward, scheme, roles
            self.scale_by_std, self.answer_kind, self.store = scale_by_std, answer_kind, store
            rubric = vf.Rubric(funcs=[self.graph_reward])
            super().__init__(rubric=rubric, message_type="chat", **kwargs)

        @vf.stop(priority=100)
        async def has_error(self, state: Any, **_: Any) -> bool:
            """The run failed (a call or the graph): the rollout ends with ``verifiers``' error."""
            return state.get("error") is not None

        @vf.stop
        async def graph_finished(self, state: Any, **_: Any) -> bool:
            """The run ended: one run is one rollout."""
            return "scaffold" in state

        async def graph_reward(self, state: Any, **_: Any) -> float:
            """The reward of the run's final answer (0 for a run that failed)."""
            return float(state.get("scaffold", {}).get("reward", 0.0))

        async def rollout(self, input: Any, client: Any, model: str, sampling_args: Any = None) -> Any:
            state = await self.init_state(input, client, model, sampling_args)
            info = state["info"]
            inputs = info if isinstance(info, dict) else json.loads(info)
            answer = str(state["answer"])
            steps: list[dict[str, Any]] = []
            backend = TrainerBackend(self, state, steps)
            result = await self.graph.run(inputs, models=dict.fromkeys(self.graph.aliases, backend),
                                          store=self.store, answer_kind=self.answer_kind, raise_on_error=False)
            state["trajectory"] = self._credited(result, answer, steps)
            output = result.output if isinstance(result.output, sf.Trace) else None
            state["completion"] = [{"role": "assistant", "content": output.text if output is not None else ""}]
            reward = 0.0
            if result.error is None and output is not None:
                reward = float(self.reward_fn(output, answer))
            else:
                state["error"] = _vf_error(vf, result.error or sf.RunError(
                    f"graph {self.graph.name!r} returned {type(result.output).__name__}, not one trace to reward"))
            state["scaffold"] = {"run_id": result.run_id, "answer": result.answer, "reward": reward,
                                 "traces": [step["extras"].get("trace_id") for step in state["trajectory"]]}
            await self.is_completed(state)  # the stop conditions: the rollout's timing, truncation and why it ended
            return state

        def _credited(self, result: sf.RunResult, answer: str, steps: list[dict[str, Any]]) -> list[Any]:
            """The steps in the order of the traces (node, index), each with its reward and Scaffold advantage."""
            model_traces = [t for t in result.traces if STEP_KEY in t.metadata]
            rewards = rewards_from(result.traces, answer, self.reward_fn)
            options = {"scale_by_std": True} if self.scale_by_std else {}
            credit = {c.trace.id: c for c in assign_credit(result.traces, rewards, scheme=self.scheme, **options)
                      if c.role in self.roles} if result.error is None else {}
            out = []
            for trace in sorted(model_traces, key=lambda t: (t.node, t.index)):
                step = steps[int(trace.metadata[STEP_KEY])]
                credited = credit.get(trace.id)
                step["reward"] = rewards.get(trace.id)
                step["advantage"] = float(credited.advantage) if credited is not None else 0.0
                step["extras"] = {**step["extras"], "trace_id": trace.id, "node": trace.node,
                                  "role": credited.role if credited is not None else None}
                out.append(step)
            return out

    return ScaffoldEnv


def _vf_error(vf: Any, error: BaseException | None) -> Any:
    """The ``verifiers`` error a failed run gives its rollout: the model's own error when a call failed on it."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, vf.Error):
            return cause
        cause = cause.__cause__
    wrapped = vf.Error(f"{type(error).__name__}: {error}")
    wrapped.__cause__ = error
    return wrapped


class TrainerBackend:
    """The backend every alias of a rollout's graph is bound to: each choice is one ``get_model_response`` of
    the environment, recorded as a trajectory step."""

    def __init__(self, env: Any, state: Any, steps: list[dict[str, Any]]) -> None:
        self.env, self.state, self.steps = env, state, steps
        self.capabilities = sf.Capabilities(supports_n=False, returns_token_ids=True)
        self.model_name = str(state["model"])

    async def complete(self, request: sf.Request) -> list[sf.Completion]:
        if request.prompt is not None and not request.messages:
            raise sf.BackendError("a verifiers environment sends chat messages; this call has a raw prompt")
        messages = [message_dict(m) for m in request.messages]
        args = sampling_args(self.state.get("sampling_args"), request)
        return [await self._one(request, messages, dict(args)) for _ in range(request.n)]

    async def _one(self, request: sf.Request, messages: list[dict[str, Any]],
                   args: dict[str, Any]) -> sf.Completion:
        import verifiers as vf
        from verifiers.utils.response_utils import parse_is_truncated, parse_response_messages, parse_response_tokens

        try:
            response = await self.env.get_model_response(self.state, messages, sampling_args=args,
                                                          oai_tools=list(request.tools) or None)
        except vf.Error as exc:
            raise sf.BackendError(f"{type(exc).__name__}: {exc.__cause__ or exc}") from exc
        completion_messages = await parse_response_messages(response, "chat")
        tokens = await parse_response_tokens(response, "chat", self.env.max_seq_len)
        truncated = await parse_is_truncated(response, "chat")
        index = len(self.steps)
        self.steps.append(dict(prompt=messages, completion=completion_messages, response=response,
                               tokens=tokens, reward=None, advantage=None,
                               is_truncated=bool(truncated or (tokens and tokens.get("is_truncated"))),
                               trajectory_id=self.state["trajectory_id"], extras={}))
        choice = response.choices[0]
        usage = getattr(response, "usage", None)
        calls = tuple(call_from_dict(c, i) for i, c in enumerate(choice.message.tool_calls or ()))
        return sf.Completion(
            text=choice.message.content or "",
            token_ids=tuple(tokens["completion_ids"]) if tokens else None,
            logprobs=tuple(tokens["completion_logprobs"]) if tokens else None,
            usage=sf.Usage(getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=choice.finish_reason, model=getattr(response, "model", None),
            metadata={STEP_KEY: index}, tool_calls=calls)


def sampling_args(base: Mapping[str, Any] | None, request: sf.Request) -> dict[str, Any]:
    """The sampling arguments of one call: the trainer's (``base``), then what the graph's node sets itself, the
    call's seed unless the trainer gives one, and logprobs with vLLM's token ids when the call asks for logprobs.

    Examples:
        >>> sampling_args({"temperature": 1.0, "max_tokens": 64}, sf.Request(params={"max_tokens": 8}, seed=3))
        {'temperature': 1.0, 'max_tokens': 8, 'seed': 3}
    """
    args = dict(base or {})
    extra = dict(args.get("extra_body") or {})
    for key, value in request.params.items():
        if key == "extra_body" and isinstance(value, Mapping):
            extra.update(value)
        elif key not in _NOT_SENT:
            args[key] = value
    if request.seed is not None and "seed" not in args:
        args["seed"] = request.seed
    if request.logprobs:
        args["logprobs"] = True
        extra.setdefault("return_token_ids", True)
    if extra:
        args["extra_body"] = extra
    return args
