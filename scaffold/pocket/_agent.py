"""The pocket agent: a tiny model that adds long sums with a calculator, built from scratch offline.

The task is the pocket task on longer sums (by default four 5-digit numbers, :class:`PocketAgentConfig`).
Without a tool the agent writes the sum in one go, ``\\boxed{195818}``, with no working: a model this small
does not learn to add four 5-digit numbers that way in its training budget. Offered the calculator
(:data:`scaffold.tools.calculator`), it can instead call it and copy the result::

    <|im_start|>system
    tools: calculator<|im_end|>
    <|im_start|>user
    Add 48291+37260+99812+10455<|im_end|>
    <|im_start|>assistant
    <tool_call>{"name": "calculator", "arguments": {"expression": "48291+37260+99812+10455"}}</tool_call><|im_end|>
    <|im_start|>tool
    195818<|im_end|>
    <|im_start|>assistant
    \\boxed{195818}<|im_end|>

Its chat template (:data:`AGENT_TEMPLATE`) reads ``tools`` itself (a one-line system message naming
them) and writes tool calls Hermes-style, so the transformers backend renders and parses them natively
and a vLLM server reads them with ``--tool-call-parser hermes``. The build trains on a share
``tool_share`` of tool-using solutions and the rest answered in one go, so the agent starts out reaching for
its tool on about that share of problems: what it does when it has the choice is left for reinforcement
learning on its own rollouts to shape (see the training guide). A share ``bare_share`` of examples offers
no tool, and is always answered in one go. Training goes on until a check on validation problems finds the
copying learned (:func:`copy_accuracy`), which takes a seed-dependent number of steps.

Examples:
    >>> config = PocketAgentConfig(max_steps=2000)
    >>> config.task.name, config.tool_share
    ('4x5', 0.5)
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from scaffold._answers import equivalent
from scaffold._messages import assistant_message, tool_message
from scaffold._types import Request, ToolCall
from scaffold.pocket._cache import cache_root, cached_build
from scaffold.pocket._config import REPORT, PocketConfig
from scaffold.pocket._prompts import SOLVE_PROMPT, solve_prompt
from scaffold.pocket._task import PocketTask
from scaffold.tools import calculator

AGENT_PROMPT = SOLVE_PROMPT
"""The pocket agent's prompt (``Add {problem}``), the tools travelling with the request."""

AGENT_FORMAT = 3
"""Bumped whenever the template, the examples or the training change what an agent build produces."""

AGENT_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\ntools: ' }}"
    "{% for tool in tools %}{{ (tool.function.name if tool.function is defined else tool.name) }}"
    "{% if not loop.last %}{{ ', ' }}{% endif %}{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message['role'] == 'assistant' and message['tool_calls'] %}{% for call in message['tool_calls'] %}"
    "{{ '<tool_call>{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}"
    "{% if call['function']['arguments'] is string %}{{ call['function']['arguments'] }}"
    "{% else %}{{ call['function']['arguments'] | tojson }}{% endif %}{{ '}</tool_call>' }}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML with tools: a ``tools: name, name`` system line when tools are offered, Hermes-style
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` calls in assistant turns, ``tool`` turns for
results. A call's arguments may come as an object (the transformers backend) or as JSON text."""


@dataclass(frozen=True, kw_only=True)
class PocketAgentConfig:
    """Everything that decides a pocket agent build: its task, size, mix of examples and schedule.

    Deterministic given ``seed`` and ``threads`` on one machine (native arithmetic: an Intel and an AMD
    processor train slightly different agents).
    """

    digits: int = 5
    """Digits of every operand (the pocket model adds three 3-digit numbers)."""
    terms: int = 4
    tool_share: float = 0.5
    """Share of tool-offering examples solved with the calculator (the rest answered in one go)."""
    bare_share: float = 0.1
    """Share of examples that offer no tool (always answered in one go)."""
    random_results: float = 0.3
    """Share of the answer-turn examples whose calculator result is a random number instead of the sum: the
    agent learns to report what its tool said rather than to redo the sum from the problem (trained without
    them, some seeds learned to add and never to copy the result)."""
    hidden_size: int = 64
    layers: int = 3
    heads: int = 2
    kv_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 512
    seed: int = 0
    threads: int = 2
    max_steps: int = 3000
    """The last training ends here if the copy check never reads ``copy_target``."""
    attempts: int = 3
    """Trainings tried: one whose copy check has not read ``copy_target`` by ``give_up_at`` steps is dropped and
    the build trains afresh from the seed ``seed + 1000 * attempt`` (copying emerges suddenly, at a step that
    varies a lot with the seed: seed 2 had not begun by step 2,300 on an AMD EPYC, seeds 0 and 1 had it by 600
    and 1,100)."""
    give_up_at: int = 1500
    check_from: int = 600
    check_every: int = 100
    """From ``check_from`` on, every this many steps the weight average is checked on validation problems: sampling
    at temperature 1, does it write the calculator call of the problem, and copy the calculator's result into
    ``\\boxed{}``?"""
    check_problems: int = 64
    copy_target: float = 0.95
    """Training ends at the first check where this share of validation problems get both turns exactly right.
    When the copying is learned depends on the seed (measured on an AMD EPYC: between steps 600 and 1,000), so
    the build checks for it instead of counting on a fixed number of steps."""
    batch_size: int = 16
    """Problems per step (a tool-using one gives two examples: the call and the answer)."""
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.1
    ema_decay: float = 0.95
    """The agent saved is this exponential moving average of the trained weights."""
    eval_problems: int = 100
    """Held-out (test split) problems the build measures the saved agent on."""

    @property
    def task(self) -> PocketTask:
        return PocketTask(digits=self.digits, terms=self.terms)

    def fingerprint(self) -> str:
        """A short hash of the config and :data:`AGENT_FORMAT`: the cache directory's name (after ``agent-``)."""
        text = json.dumps({"agent_format": AGENT_FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def model_config(self) -> PocketConfig:
        """The model shape and seed as the pocket model's builder takes them."""
        return PocketConfig(digits=self.digits, terms=self.terms, hidden_size=self.hidden_size, layers=self.layers,
                            heads=self.heads, kv_heads=self.kv_heads, intermediate_size=self.intermediate_size,
                            max_positions=self.max_positions, seed=self.seed)


@dataclass(frozen=True)
class AgentScores:
    """What an agent did on some problems, as fractions in [0, 1]."""

    problems: int
    success: float
    """Answers equal to the reference."""
    tool_use: float
    """Problems on which it called a tool."""
    tool_success: float
    """Success among the problems on which it called a tool (0 when it never did)."""
    direct_success: float
    """Success among the problems it answered without a tool (0 when it always called)."""
    per_problem: tuple[int, ...] = ()
    """1 or 0 per problem, in the rows' order (for paired comparisons)."""
    failed: int = 0
    """Runs that ended in an error (a backend's, or the agent's turns running out): counted as wrong."""
    errors: tuple[str, ...] = ()
    """The first few of their errors."""


@dataclass(frozen=True, kw_only=True)
class AgentReport:
    """What a pocket agent build did, and how the saved agent does on held-out problems."""

    build_seconds: float
    train_seconds: float
    steps: int
    params: int
    losses: tuple[tuple[int, float], ...]
    """(step, training loss) every 50 steps."""
    checks: tuple[tuple[int, float], ...] = ()
    """(step, copy accuracy on validation problems) of every check of the training kept."""
    attempts: int = 1
    """Trainings made (see :attr:`PocketAgentConfig.attempts`)."""
    trained_seed: int = 0
    """The seed of the training kept."""
    held_out: dict[str, float] = field(default_factory=dict)
    """:class:`AgentScores` at temperature 1 (``success``, ``tool_use``, ``tool_success``, ``direct_success``)."""
    greedy: dict[str, float] = field(default_factory=dict)
    """The same at temperature 0."""
    cpu: str = ""


def tool_specs() -> tuple[dict[str, Any], ...]:
    """The tools the agent is trained with: the calculator's schema."""
    return (calculator.spec(),)


def agent_tokenizer() -> Any:
    """The pocket tokenizer (one token a character) with :data:`AGENT_TEMPLATE` as its chat template."""
    from scaffold.pocket._tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = AGENT_TEMPLATE
    return tokenizer


def tool_call_text(problem: str) -> str:
    """What the agent writes to call the calculator on ``problem`` (as :data:`AGENT_TEMPLATE` renders a call)."""
    return '<tool_call>{"name": "calculator", "arguments": ' + json.dumps({"expression": problem}) + "}</tool_call>"


def episode(task: PocketTask, problem: str, *, tools: bool, use_tool: bool,
            result: str | None = None) -> list[tuple[Request, str]]:
    """The turns of one solved problem: (request as the agent loop sends it, the answer the agent should write).

    ``result`` is what the calculator answers (default: the sum).

    Examples:
        >>> turns = episode(PocketTask(digits=2, terms=2), "47+85", tools=True, use_tool=True)
        >>> [answer for _, answer in turns][1], turns[1][0].messages[-1][1]
        ('\\\\boxed{132}', '132')
    """
    user = Request(messages=(("user", solve_prompt(problem)),), tools=tool_specs() if tools else ())
    if not (tools and use_tool):
        return [(user, "\\boxed{" + str(sum(task.operands(problem))) + "}")]
    call = ToolCall("call_0", "calculator", json.dumps({"expression": problem}))
    result = str(sum(task.operands(problem))) if result is None else result
    then = Request(messages=(*user.messages, assistant_message("", [call]), tool_message("call_0", "calculator",
                                                                                           result)),
                   tools=user.tools)
    return [(user, tool_call_text(problem)), (then, "\\boxed{" + result + "}")]


def encode_turn(tokenizer: Any, request: Request, answer: str) -> tuple[list[int], int]:
    """Token ids of one turn (the prompt exactly as the transformers backend renders it, the answer, EOS) and
    where the answer starts."""
    from scaffold.backends._transformers import encode_prompt

    prompt = encode_prompt(tokenizer, request)
    reply = tokenizer(answer, add_special_tokens=False)["input_ids"]
    return [*prompt, *reply, tokenizer.eos_token_id], len(prompt)


def examples(task: PocketTask, tokenizer: Any, rng: random.Random, problems: Any, count: int,
             config: PocketAgentConfig) -> list[tuple[list[int], int]]:
    """Training examples of ``count`` train-split problems, each turn of each one an example."""
    out = []
    for _ in range(count):
        problem = next(problems)
        tools = rng.random() >= config.bare_share
        use_tool = rng.random() < config.tool_share
        result = None
        if tools and use_tool and rng.random() < config.random_results:
            result = str(rng.randint(10 ** (task.digits - 1) * task.terms, (10**task.digits - 1) * task.terms))
        turns = episode(task, problem, tools=tools, use_tool=use_tool, result=result)
        out += [encode_turn(tokenizer, request, answer) for request, answer in turns]
    return out


def build_pocket_agent(out_dir: str | Path, config: PocketAgentConfig | None = None, *,
                       progress: bool = True) -> AgentReport:
    """Train a pocket agent from scratch, save it to ``out_dir`` and measure it on held-out problems.

    Saves the model and tokenizer (``save_pretrained``, :data:`AGENT_TEMPLATE` as the chat template),
    ``scaffold.json`` (kind ``pocket-agent``) and ``pocket_report.json`` (the :class:`AgentReport`).

    Examples:
        >>> report = build_pocket_agent("/tmp/agent", PocketAgentConfig(seed=1))  # doctest: +SKIP
        >>> report.held_out["tool_use"]  # doctest: +SKIP
    """
    import torch

    from scaffold.backends._transformers import quiet_progress
    from scaffold.pocket._portable import cpu_name
    from scaffold.pocket._train import new_model, save_built

    config = config or PocketAgentConfig()
    say: Callable[[str], None] = print if progress else (lambda _: None)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        task = config.task
        tokenizer = agent_tokenizer()
        params = sum(p.numel() for p in new_model(config.model_config(), tokenizer).parameters())
        say(f"pocket agent: task {task.name}, {params / 1e6:.2f}M parameters, at most {config.max_steps} steps")
        validation = task.problems(config.check_problems, seed=1, split="validation")
        attempt, seed = 0, config.seed
        while True:
            model, average, step, losses, checks = train(config, tokenizer, task, validation, seed, say,
                                                         last=attempt + 1 >= config.attempts)
            if (checks and checks[-1][1] >= config.copy_target) or attempt + 1 >= config.attempts:
                break
            attempt += 1
            seed = config.seed + 1000 * attempt
            say(f"pocket agent: no copying by step {step}; training afresh from seed {seed}")
        average.copy_to_model()
        train_seconds = time.perf_counter() - started
        out = save_built(model, tokenizer, out_dir, kind="pocket-agent", version=AGENT_FORMAT,
                         fingerprint=config.fingerprint(), config=asdict(config))
    finally:
        torch.set_num_threads(threads)
    rows = task.problems(config.eval_problems, seed=0, split="test")
    with quiet_progress():
        sampled = evaluate_agent(out, rows, temperature=1.0, seed=config.seed)
        greedy = evaluate_agent(out, rows, temperature=0.0, seed=config.seed)
    report = AgentReport(build_seconds=time.perf_counter() - started, train_seconds=train_seconds,
                         steps=step, params=params, losses=tuple(losses), checks=tuple(checks),
                         attempts=attempt + 1, trained_seed=seed,
                         held_out=_figures(sampled),
                         greedy=_figures(greedy), cpu=cpu_name())
    (out / REPORT).write_text(json.dumps(asdict(report), indent=2) + "\n")
    say(f"pocket agent: held-out ({sampled.problems} problems, temperature 1): success {sampled.success:.3f}, "
        f"tool use {sampled.tool_use:.3f} (success with the tool {sampled.tool_success:.3f}, without "
        f"{sampled.direct_success:.3f}); greedy success {greedy.success:.3f}")
    return report


def train(config: PocketAgentConfig, tokenizer: Any, task: PocketTask, validation: Sequence[dict[str, str]],
          seed: int, say: Callable[[str], None], *, last: bool) -> tuple[Any, Any, int, list[tuple[int, float]],
                                                                   list[tuple[int, float]]]:
    """One training from ``seed``: until the copy check reads the target, ``give_up_at`` steps, or (the last
    training) ``max_steps``. Returns the model, its weight average, the steps taken, the losses and the checks."""
    import torch

    from scaffold.pocket._train import WeightAverage, new_model, update

    model = new_model(replace(config.model_config(), seed=seed), tokenizer)
    rng = random.Random(f"pocket-agent/{seed}")
    problems = task.stream(rng, "train")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay)
    average = WeightAverage(model, config.ema_decay)
    losses: list[tuple[int, float]] = []
    checks: list[tuple[int, float]] = []
    model.train()
    step = 0
    started = time.perf_counter()
    for step in range(1, (config.max_steps if last else min(config.give_up_at, config.max_steps)) + 1):
        batch = examples(task, tokenizer, rng, problems, config.batch_size, config)
        loss = update(model, optimizer, batch, tokenizer.pad_token_id,
                      config.lr * min(1.0, step / max(1, config.warmup_steps)))
        average.update(step)
        if step % 50 == 0:
            losses.append((step, loss))
        if step >= config.check_from and step % config.check_every == 0:
            with average.swapped_in():
                checks.append((step, copy_accuracy(model, tokenizer, task, validation, seed=seed + step)))
            say(f"  step {step:4d}  loss {loss:.4f}  copy {checks[-1][1]:.3f}  {time.perf_counter() - started:.0f} s")
            if checks[-1][1] >= config.copy_target:
                break
    return model, average, step, losses, checks


def copy_accuracy(model: Any, tokenizer: Any, task: PocketTask, rows: Sequence[dict[str, str]], *,
                  seed: int = 0) -> float:
    """The share of ``rows`` on which the model, sampling at temperature 1 as the agent does, copies the problem
    into the calculator call *and* the calculator's result into ``\\boxed{}`` (each turn given the conversation
    before it).

    The call is checked from where the expression starts (the call's opening is given), so the check measures
    copying, not whether the agent chose to call the tool, which the build leaves open.
    """
    from scaffold.pocket._evaluate import complete_ids

    opening = tool_call_text("")[: tool_call_text("").index('""') + 1]
    prompts, wanted = [], []
    for row in rows:
        (first, call), (second, answer) = episode(task, row["problem"], tools=True, use_tool=True)
        ids, start = encode_turn(tokenizer, first, call)
        given = start + len(tokenizer(opening, add_special_tokens=False)["input_ids"])
        then, answer_start = encode_turn(tokenizer, second, answer)
        prompts += [ids[:given], then[:answer_start]]
        wanted += [call[len(opening):], answer]
    written = complete_ids(model, tokenizer, prompts, temperature=1.0,
                           max_new_tokens=max(len(w) for w in wanted) + 4, seed=seed)
    right = [a == b for a, b in zip(written, wanted)]
    return sum(right[i] and right[i + 1] for i in range(0, len(right), 2)) / len(rows)


def pocket_agent(cache_dir: str | Path | None = None, *, config: PocketAgentConfig | None = None,
                 rebuild: bool = False, progress: bool = True) -> Path:
    """The directory of the pocket agent for ``config`` (the default one if ``None``), built on first use.

    It is ``<cache>/pocket/agent-<fingerprint>`` (see :func:`~scaffold.pocket.cache_root`); the default
    build takes about a minute on two CPU cores.

    Examples:
        >>> import scaffold as sf
        >>> from scaffold.pocket import pocket_agent
        >>> backend = sf.TransformersBackend(pocket_agent())  # doctest: +SKIP
    """
    config = config or PocketAgentConfig()
    target = cache_root(cache_dir) / f"agent-{config.fingerprint()}"
    return cached_build(target, lambda building: build_pocket_agent(building, config, progress=progress),
                        rebuild=rebuild)


def evaluate_agent(model: Any, rows: Sequence[dict[str, str]], *, temperature: float = 1.0, seed: int = 0,
                   max_turns: int = 3) -> AgentScores:
    """Run the agent (with the calculator, ``max_turns`` turns) once per row and score its answers.

    ``model`` is a model directory or a :class:`~scaffold.Backend` (a vLLM server's, for one). Runs
    through scaffold (``sf.agent`` over the backend, nothing recorded), the path users take.
    """
    from scaffold._graph import graph
    from scaffold._primitives import agent
    from scaffold._sync import run_released
    from scaffold.backends._model import Model
    from scaffold.backends._transformers import TransformersBackend

    @graph
    def solve(problem: Any) -> Any:
        return agent(AGENT_PROMPT, model="agent", tools=[calculator], max_turns=max_turns,
                     params={"temperature": temperature, "max_tokens": 128})

    backend = TransformersBackend(str(model)) if isinstance(model, (str, Path)) else model
    models = {"agent": Model(backend)}
    results = run_released(_map(solve, rows, models, seed), models)
    hits, used = [], []
    errors = [str(result.error) for result in results if not result.ok]
    for row, result in zip(rows, results):
        answer = result.output.answer if result.ok and result.output is not None else None
        hits.append(int(equivalent(answer, row["answer"])))
        used.append(any(t.kind.value == "tool" for t in result.traces))
    with_tool = [h for h, u in zip(hits, used) if u]
    by_hand = [h for h, u in zip(hits, used) if not u]
    return AgentScores(problems=len(rows), success=_share(hits), tool_use=_share([int(u) for u in used]),
                       tool_success=_share(with_tool), direct_success=_share(by_hand), per_problem=tuple(hits),
                       failed=len(errors), errors=tuple(errors[:5]))


async def _map(solve: Any, rows: Sequence[dict[str, str]], models: dict[str, Any], seed: int) -> list[Any]:
    results = [r async for r in solve.map([{"problem": r["problem"]} for r in rows], models=models,
                                          store=None, seed=seed, concurrency=64)]
    results.sort(key=lambda r: r.index or 0)
    return results


def _share(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _figures(scores: AgentScores) -> dict[str, float]:
    return {"problems": scores.problems, "success": scores.success, "tool_use": scores.tool_use,
            "tool_success": scores.tool_success, "direct_success": scores.direct_success, "failed": scores.failed}
