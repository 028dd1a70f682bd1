"""Measuring a pocket model: a fast in-training check, and the full held-out evaluation through scaffold.

:func:`evaluate_pocket` runs two scaffold graphs on a :class:`~scaffold.backends.TransformersBackend`
(nothing recorded): ``samples`` solutions per problem at ``temperature``, then the model
aggregating its own solutions in consecutive groups of ``k`` (samples 1–4, 5–8) with
:data:`~scaffold.pocket.AGGREGATE_PROMPT`. Majority@k is scored on the very same groups, so the two
figures compare like with like. Answers are ``\\boxed{}`` contents checked with math-verify
(:func:`scaffold.answers.equivalent`); majorities use :func:`scaffold.rules.cluster_answers` (ties
go to the answer sampled first, i.e. at random).

:func:`check_accuracy` is the training loop's quick look: a plain batched sampling loop with one
seeded generator and a fixed batch, so the step training stops at is the same on every run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold.answers import equivalent, extract_boxed
from scaffold.graph import graph
from scaffold.pocket.prompts import AGGREGATE_PROMPT, SOLVE_PROMPT, chat_prompt, solve_prompt
from scaffold.pocket.task import PocketTask
from scaffold.primitives import aggregate, sample
from scaffold.rules import cluster_answers
from scaffold.types import Trace

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
    max_batch_size: int = 64,
) -> dict[str, float]:
    """Score a pocket model (a directory, or a loaded model with ``tokenizer``) on problem rows.

    Returns fractions in [0, 1]: ``pass1`` (mean accuracy of one sample), ``pass{samples}`` (any
    sample right), ``maj{samples}``, ``maj{k}`` (majority over each group of ``k``), ``agg{k}`` (the
    model aggregating each group, at ``aggregate_temperature``; 0 is greedy), ``answered`` (share
    of samples with a boxed answer); and speeds: ``samples_per_second``, ``aggregations_per_second``.

    Example:
        >>> rows = PocketTask().problems(200, seed=0, split="test")  # doctest: +SKIP
        >>> evaluate_pocket(pocket_model(), rows)["pass1"]  # doctest: +SKIP
        0.41
    """
    from scaffold.backends.transformers import TransformersBackend

    if samples % k:
        raise ValueError(f"samples={samples} must be a multiple of k={k}")
    task = _task_of(rows)
    limit = len(task.solution(rows[0]["problem"])) + 16
    backend = TransformersBackend(model, tokenizer, max_batch_size=max_batch_size, max_new_tokens=limit)
    models = {ALIAS: backend}
    try:
        inputs = [{"problem": row["problem"]} for row in rows]
        started = time.perf_counter()
        solved = solve_graph.build(samples=samples, temperature=temperature, max_tokens=limit).map_sync(
            inputs, models=models, store=None, seed=seed, concurrency=len(rows))
        solve_seconds = time.perf_counter() - started
        _raise_on_failures(solved)
        populations: list[list[Trace]] = [list(result.output) for result in solved]
        started = time.perf_counter()
        aggregated = aggregate_graph.build(k=k, temperature=aggregate_temperature, max_tokens=limit).map_sync(
            [{"problem": row["problem"], "candidates": population} for row, population in zip(rows, populations)],
            models=models, store=None, seed=seed + 1, concurrency=len(rows))
        aggregate_seconds = time.perf_counter() - started
    finally:
        backend.close()
    _raise_on_failures(aggregated)
    return _score(rows, populations, [list(r.output) for r in aggregated], k, solve_seconds, aggregate_seconds)


def _score(rows: Sequence[Mapping[str, str]], populations: list[list[Trace]], aggregations: list[list[Trace]],
           k: int, solve_seconds: float, aggregate_seconds: float) -> dict[str, float]:
    samples = len(populations[0])
    pass1 = pass_all = maj_all = maj_k = agg_k = answered = 0.0
    for row, population, merged in zip(rows, populations, aggregations, strict=True):
        right = [equivalent(t.answer, row["answer"]) for t in population]
        pass1 += sum(right) / samples
        pass_all += any(right)
        maj_all += _majority_right(population, row["answer"])
        groups = [population[i:i + k] for i in range(0, samples, k)]
        maj_k += sum(_majority_right(group, row["answer"]) for group in groups) / len(groups)
        agg_k += sum(equivalent(t.answer, row["answer"]) for t in merged) / len(merged)
        answered += sum(t.answer is not None for t in population) / samples
    n = len(rows)
    return {
        "problems": float(n),
        "pass1": pass1 / n,
        f"pass{samples}": pass_all / n,
        f"maj{samples}": maj_all / n,
        f"maj{k}": maj_k / n,
        f"agg{k}": agg_k / n,
        "answered": answered / n,
        "samples_per_second": n * samples / solve_seconds,
        "aggregations_per_second": n * (samples // k) / aggregate_seconds,
    }


def _raise_on_failures(results: Sequence[Any]) -> None:
    failed = [result.error for result in results if not result.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(results)} evaluation runs failed; the first: {failed[0]!r}")


def _majority_right(traces: Sequence[Trace], reference: str) -> bool:
    clusters = cluster_answers(traces)
    return bool(clusters) and equivalent(clusters[0][0], reference)


def _task_of(rows: Sequence[Mapping[str, str]]) -> PocketTask:
    operands = rows[0]["problem"].split("+")
    return PocketTask(digits=len(operands[0]), terms=len(operands))


def sample_texts(model: Any, tokenizer: Any, users: Sequence[str], *, temperature: float, max_new_tokens: int,
                 seed: int) -> list[str]:
    """Answer each user message once, in one batch, with one seeded generator (greedy at temperature 0)."""
    import torch

    ids = [tokenizer(chat_prompt(tokenizer, user), add_special_tokens=False)["input_ids"] for user in users]
    width = max(map(len, ids))
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in ids])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in ids])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    generator = torch.Generator().manual_seed(seed)
    done = torch.zeros(len(ids), dtype=torch.bool)
    out: list[Any] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
            for _ in range(max_new_tokens):
                last = logits.logits[:, -1, :].float()
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
                               past_key_values=logits.past_key_values, use_cache=True)
    finally:
        if was_training:
            model.train()
    tokens = torch.stack(out, 1).tolist() if out else [[] for _ in ids]
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
