"""Measuring a pocket model: a fast in-training check, and the full held-out evaluation through scaffold.

:func:`evaluate_pocket` runs two scaffold graphs on a :class:`~scaffold.backends.TransformersBackend`
(nothing recorded): ``samples`` solutions per problem at ``temperature``, then the model
aggregating its own solutions in consecutive groups of ``k`` (samples 1–4, 5–8) with
:data:`~scaffold.pocket.AGGREGATE_PROMPT`. Majority@k is scored on the very same groups, so the two
figures compare like with like. Answers are ``\\boxed{}`` contents checked with math-verify
(:func:`scaffold._answers.equivalent`); majorities use :func:`scaffold._rules.cluster_answers` (ties
go to the answer sampled first, i.e. at random).

:func:`check_accuracy` (pass@1) and :func:`check_figures` (every figure) are the build's looks at a
live model: a plain batched sampling loop with one seeded generator and a fixed batch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaffold._answers import equivalent, extract_boxed
from scaffold._graph import graph
from scaffold._primitives import aggregate, sample
from scaffold._rules import cluster_answers, vote
from scaffold._types import Trace
from scaffold.pocket._prompts import AGGREGATE_PROMPT, SOLVE_PROMPT, aggregate_prompt, chat_prompt, solve_prompt
from scaffold.pocket._task import PocketTask

ALIAS = "pocket"
"""The model alias the evaluation graphs use."""


@graph
def solve_graph(problem: Any, *, samples: int = 8, temperature: float = 1.0, max_tokens: int = 64) -> Any:
    """``samples`` independent solutions of one pocket problem."""
    return sample(SOLVE_PROMPT, model=ALIAS, n=samples, params={"temperature": temperature, "max_tokens": max_tokens})


@graph
def aggregate_graph(problem: Any, candidates: Any, *, k: int = 4, temperature: float = 0.0,
                    max_tokens: int = 64) -> Any:
    """The model reads its own candidates ``k`` at a time (consecutive groups) and writes one solution per group."""
    return aggregate(candidates, model=ALIAS, prompt=AGGREGATE_PROMPT, select="partition", k=k,
                     params={"temperature": temperature, "max_tokens": max_tokens})


@graph
def rsa_graph(problem: Any, population: Any, *, n: int = 8, k: int = 4, steps: int = 2, temperature: float = 1.0,
              max_tokens: int = 64) -> Any:
    """Recursive Self-Aggregation from a given population: ``steps`` rounds of ``n`` aggregations of random
    ``k``-subsets, then an equivalence-clustered vote."""
    for _ in range(steps):
        population = aggregate(population, model=ALIAS, prompt=AGGREGATE_PROMPT, k=k, n=n,
                               params={"temperature": temperature, "max_tokens": max_tokens})
    return vote(population)


@dataclass(frozen=True)
class PocketScores:
    """Per-problem scores of a pocket model (see :func:`score_pocket`); ``means()`` are the figures."""

    scores: dict[str, list[float]]
    """Metric name → one score per problem, in the order of the rows."""
    answered: float
    """Share of samples with a boxed answer."""
    seconds: dict[str, float]
    """Wall time of each phase: ``solve``, ``aggregate``, ``rsa``."""

    def means(self) -> dict[str, float]:
        return {name: sum(values) / len(values) for name, values in self.scores.items()}


def score_pocket(
    model: str | os.PathLike[str] | Any,
    rows: Sequence[Mapping[str, str]],
    *,
    samples: int = 8,
    k: int = 4,
    temperature: float = 1.0,
    aggregate_temperature: float = 0.0,
    rsa_steps: int = 0,
    seed: int = 0,
    tokenizer: Any = None,
    max_batch_size: int = 256,
) -> PocketScores:
    """Score a pocket model (a directory, or a loaded model with ``tokenizer``) problem by problem.

    Per problem: ``pass1`` (share of the ``samples`` temperature-1 solutions that are right),
    ``pass{samples}`` (any right), ``maj{samples}``, ``maj{k}`` (majority of each consecutive group
    of ``k``, averaged over groups), ``agg{k}`` (the model aggregating the same groups with
    :data:`~scaffold.pocket.AGGREGATE_PROMPT` at ``aggregate_temperature``; 0 is greedy), and with
    ``rsa_steps > 0`` also ``rsa``: Recursive Self-Aggregation (population ``samples``, subsets of
    ``k``, ``rsa_steps`` steps at ``temperature``, final vote) started from those same samples.
    Runs scaffold graphs on a :class:`~scaffold.TransformersBackend`, nothing recorded.

    Examples:
        >>> rows = PocketTask().problems(200, seed=0, split="test")  # doctest: +SKIP
        >>> score_pocket(pocket_model(), rows, rsa_steps=2).means()["rsa"]  # doctest: +SKIP
        0.8
    """
    from scaffold.backends._transformers import TransformersBackend

    if samples % k:
        raise ValueError(f"samples={samples} must be a multiple of k={k}")
    task = _task_of(rows)
    limit = len(task.solution(rows[0]["problem"])) + 16
    backend = TransformersBackend(model, tokenizer, max_batch_size=max_batch_size, max_new_tokens=limit)
    models = {ALIAS: backend}
    seconds: dict[str, float] = {}
    try:
        started = time.perf_counter()
        solved = solve_graph.build(samples=samples, temperature=temperature, max_tokens=limit).map_sync(
            [{"problem": row["problem"]} for row in rows], models=models, store=None, seed=seed,
            concurrency=len(rows))
        seconds["solve"] = time.perf_counter() - started
        _raise_on_failures(solved)
        populations: list[list[Trace]] = [list(result.output) for result in solved]
        given = [{"problem": row["problem"], "candidates": population} for row, population in zip(rows, populations)]
        started = time.perf_counter()
        aggregated = aggregate_graph.build(k=k, temperature=aggregate_temperature, max_tokens=limit).map_sync(
            given, models=models, store=None, seed=seed + 1, concurrency=len(rows))
        seconds["aggregate"] = time.perf_counter() - started
        _raise_on_failures(aggregated)
        rsa: list[Any] = []
        if rsa_steps > 0:
            started = time.perf_counter()
            rsa = rsa_graph.build(n=samples, k=k, steps=rsa_steps, temperature=temperature, max_tokens=limit).map_sync(
                [{"problem": g["problem"], "population": g["candidates"]} for g in given], models=models,
                store=None, seed=seed + 2, concurrency=len(rows))
            seconds["rsa"] = time.perf_counter() - started
            _raise_on_failures(rsa)
    finally:
        backend.close()
    references = [row["answer"] for row in rows]
    answers = [[t.answer for t in population] for population in populations]
    scores = problem_scores(references, answers, [[t.answer for t in r.output] for r in aggregated], k)
    if rsa:
        scores["rsa"] = [float(equivalent(result.answer, reference)) for result, reference in zip(rsa, references)]
    answered = sum(a is not None for row in answers for a in row) / (len(rows) * samples)
    return PocketScores(scores, answered, seconds)


def evaluate_pocket(
    model: str | os.PathLike[str] | Any,
    rows: Sequence[Mapping[str, str]],
    *,
    samples: int = 8,
    k: int = 4,
    temperature: float = 1.0,
    aggregate_temperature: float = 0.0,
    seed: int = 0,
    tokenizer: Any = None,
    max_batch_size: int = 256,
) -> dict[str, float]:
    """The figures of :func:`score_pocket` averaged over problems, with ``problems``, ``answered`` and speeds.

    Returns fractions in [0, 1]: ``pass1``, ``pass{samples}``, ``maj{samples}``, ``maj{k}``,
    ``agg{k}``, ``answered`` (share of samples with a boxed answer); and speeds:
    ``samples_per_second``, ``aggregations_per_second``.

    Examples:
        >>> rows = PocketTask().problems(200, seed=0, split="test")  # doctest: +SKIP
        >>> evaluate_pocket(pocket_model(), rows)["pass1"]  # doctest: +SKIP
        0.41
    """
    scored = score_pocket(model, rows, samples=samples, k=k, temperature=temperature,
                          aggregate_temperature=aggregate_temperature, seed=seed, tokenizer=tokenizer,
                          max_batch_size=max_batch_size)
    n = len(rows)
    return {"problems": float(n), **scored.means(), "answered": scored.answered,
            "samples_per_second": n * samples / scored.seconds["solve"],
            "aggregations_per_second": n * (samples // k) / scored.seconds["aggregate"]}


def problem_scores(references: Sequence[str], samples: Sequence[Sequence[str | None]],
                   merged: Sequence[Sequence[str | None]], k: int) -> dict[str, list[float]]:
    """Per problem ``i``: its sampled answers ``samples[i]`` and the answers ``merged[i]`` of its aggregations
    of their consecutive groups of ``k`` scored against ``references[i]`` (see :func:`score_pocket`).

    Examples:
        >>> s = problem_scores(["4", "7"], [["4", "5", "5", "4"], ["1", "1", "7", "2"]], [["4"], ["1"]], k=4)
        >>> s["pass1"], s["pass4"], s["maj4"], s["agg4"]
        ([0.5, 0.25], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0])
    """
    count = len(samples[0])
    out: dict[str, list[float]] = {}
    for reference, population, aggregated in zip(references, samples, merged, strict=True):
        right = [equivalent(answer, reference) for answer in population]
        groups = [population[i:i + k] for i in range(0, count, k)]
        row = {"pass1": sum(right) / count, f"pass{count}": float(any(right)),
               f"maj{count}": float(_majority_right(population, reference)),
               f"maj{k}": sum(_majority_right(group, reference) for group in groups) / len(groups),
               f"agg{k}": sum(equivalent(answer, reference) for answer in aggregated) / len(aggregated)}
        for name, value in row.items():
            out.setdefault(name, []).append(value)
    return out


def _raise_on_failures(results: Sequence[Any]) -> None:
    failed = [result.error for result in results if not result.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(results)} evaluation runs failed; the first: {failed[0]!r}")


def _majority_right(answers: Sequence[str | None], reference: str) -> bool:
    members = [Trace(id=str(i), run_id="", node="", index=i, answer=answer) for i, answer in enumerate(answers)]
    clusters = cluster_answers(members)
    return bool(clusters) and equivalent(clusters[0][0], reference)


def _task_of(rows: Sequence[Mapping[str, str]]) -> PocketTask:
    operands = rows[0]["problem"].split("+")
    return PocketTask(digits=len(operands[0]), terms=len(operands))


def sample_texts(model: Any, tokenizer: Any, users: Sequence[str], *, temperature: float, max_new_tokens: int,
                 seed: int) -> list[str]:
    """Answer each user message once, in one batch, with one seeded generator (greedy at temperature 0)."""
    ids = [tokenizer(chat_prompt(tokenizer, user), add_special_tokens=False)["input_ids"] for user in users]
    return complete_ids(model, tokenizer, ids, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)


def complete_ids(model: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], *, temperature: float,
                 max_new_tokens: int, seed: int, entropies: list[float] | None = None) -> list[str]:
    """Continue each prompt (token ids) once, in one batch, with one seeded generator (greedy at temperature 0).

    With ``entropies`` (a list), the mean token entropy (nats, of the model's own distribution) of each row's
    sampled tokens is appended to it, row by row.
    """
    import torch

    from scaffold.backends._kv_cache import cache_argument, decoding_cache

    ids = [list(row) for row in prompts]
    width = max(map(len, ids))
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in ids])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in ids])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    generator = torch.Generator().manual_seed(seed)
    done = torch.zeros(len(ids), dtype=torch.bool)
    out: list[Any] = []
    entropy_sum = torch.zeros(len(ids), dtype=torch.float64)
    entropy_count = torch.zeros(len(ids), dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            cache = decoding_cache(model, width + max_new_tokens + 1)
            logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           **cache_argument(model, cache))
            for _ in range(max_new_tokens):
                last = logits.logits[:, -1, :].float()
                if entropies is not None:
                    live = (~done).double()
                    logp = torch.log_softmax(last, -1)
                    entropy_sum += -(logp.exp() * logp).sum(-1).double() * live
                    entropy_count += live
                if temperature <= 0:
                    token = last.argmax(-1)
                else:
                    token = torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=generator)[:, 0]
                token = torch.where(done, torch.full_like(token, pad), token)
                out.append(token)
                done |= token == eos
                if bool(done.all()):
                    break
                mask = torch.cat([mask, (~done | (token == eos)).long()[:, None]], dim=1)
                positions = positions[:, -1:] + 1
                logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=positions,
                               use_cache=True, **cache_argument(model, cache))
    finally:
        if was_training:
            model.train()
    tokens = torch.stack(out, 1).tolist() if out else [[] for _ in ids]
    if entropies is not None:
        entropies.extend((entropy_sum / entropy_count.clamp(min=1)).tolist())
    return [tokenizer.decode(row[: row.index(eos)] if eos in row else row, skip_special_tokens=True)
            for row in tokens]


def check_accuracy(model: Any, tokenizer: Any, task: PocketTask, rows: Sequence[Mapping[str, str]], *,
                   samples: int, seed: int) -> float:
    """Accuracy of ``samples`` temperature-1 solutions per row (the training loop's stopping check)."""
    users = [solve_prompt(row["problem"]) for row in rows for _ in range(samples)]
    answers = [row["answer"] for row in rows for _ in range(samples)]
    limit = len(task.solution(rows[0]["problem"])) + 16
    texts = sample_texts(model, tokenizer, users, temperature=1.0, max_new_tokens=limit, seed=seed)
    return sum(equivalent(extract_boxed(text), answer) for text, answer in zip(texts, answers)) / len(texts)


def check_figures(model: Any, tokenizer: Any, task: PocketTask, rows: Sequence[Mapping[str, str]], *,
                  samples: int = 8, k: int = 4, seed: int = 0) -> dict[str, float]:
    """:func:`evaluate_pocket`'s figures for a live model, by one batched sampling loop (a build's regime check).

    ``samples`` temperature-1 solutions per row, then the model aggregating each consecutive group
    of ``k`` of them greedily; seeded, so a check is repeatable on one machine.
    """
    limit = len(task.solution(rows[0]["problem"])) + 16
    users = [solve_prompt(row["problem"]) for row in rows for _ in range(samples)]
    texts = sample_texts(model, tokenizer, users, temperature=1.0, max_new_tokens=limit, seed=seed)
    groups = [texts[i:i + k] for i in range(0, len(texts), k)]
    merging = [aggregate_prompt(row["problem"], group)
               for row, group in zip((row for row in rows for _ in range(samples // k)), groups)]
    merged = sample_texts(model, tokenizer, merging, temperature=0.0, max_new_tokens=limit, seed=seed)
    per, answers = samples // k, [extract_boxed(t) for t in texts]
    scores = problem_scores([row["answer"] for row in rows],
                            [answers[i * samples:(i + 1) * samples] for i in range(len(rows))],
                            [[extract_boxed(t) for t in merged[i * per:(i + 1) * per]] for i in range(len(rows))], k)
    return {name: sum(values) / len(values) for name, values in scores.items()}
