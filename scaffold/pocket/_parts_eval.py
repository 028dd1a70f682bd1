"""Measuring a parts model: candidates, their coverage, the model's aggregation, RSA, token entropy.

:func:`score_parts` samples in large seeded batches straight from the model (prompts rendered exactly as a
scaffold run renders them, see :func:`scaffold.pocket._prompts.render`), so that an experiment can score
hundreds of problems with 32 samples each on two cores. Per problem (see :class:`PartsScores`):

- ``pass1``: the share of candidates whose part is right (the reward one candidate earns alone);
- ``pass{m}`` for every ``m`` of ``pass_at``: the chance that ``m`` candidates drawn from the ``samples``
  cover every part with a right value (what an aggregator that copies perfectly could reach), computed
  exactly from the counts (an inclusion-exclusion over parts, unbiased like the usual pass@k estimator);
- ``maj{k}``: a rule aggregator on consecutive groups of ``k`` of the first ``rsa_n`` candidates: per part,
  the value most of the group state; right when every part is (it cannot work a missing part);
- ``agg{k}``: the model aggregating the same groups (at ``aggregate_temperature``, greedy by default);
- ``rsa_pop`` / ``rsa_vote`` (with ``rsa_steps``): Recursive Self-Aggregation from the first ``rsa_n``
  candidates (``rsa_n`` aggregations of random ``k``-subsets per step, at ``temperature``): the mean accuracy of
  the final population (the paper's figure) and its vote;
- ``entropy_search``: the candidates' mean token entropy (nats); ``part_entropy``: the entropy (bits) of the
  part the candidates chose; ``distinct8``: distinct answers among the first 8 candidates; ``cover{k}``: the
  share of the groups whose right members cover every part.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from scaffold._answers import extract_boxed
from scaffold.pocket._evaluate import complete_ids
from scaffold.pocket._parts import PartsTask, task_of_rows
from scaffold.pocket._prompts import PARTS_AGGREGATE_PROMPT, PARTS_SOLVE_PROMPT, chat_prompt, render


@dataclass(frozen=True)
class PartsScores:
    """Per-problem scores of a parts model (see the module docstring); ``means()`` are the figures."""

    scores: dict[str, list[float]]
    """Metric name → one score per problem, in the order of the rows."""
    shares: dict[str, float] = field(default_factory=dict)
    """Part label → the share of candidates that chose it (``"none"``: no parts answer)."""
    accuracy: dict[str, float] = field(default_factory=dict)
    """Part label → the share of the candidates choosing it that got it right."""

    def means(self) -> dict[str, float]:
        return {name: sum(values) / len(values) for name, values in self.scores.items() if values}


def coverage_at(counts: Sequence[int], n: int, m: int) -> float:
    """The chance that ``m`` of ``n`` candidates drawn without replacement include, for every part, one of the
    ``counts[part]`` candidates right about it (each candidate states one part).

    Examples:
        >>> coverage_at([1, 1], 2, 2), coverage_at([1, 1], 2, 1), coverage_at([2, 0], 4, 4)
        (1.0, 0.0, 0.0)
        >>> round(coverage_at([1, 1], 4, 2), 4)  # 1 of the C(4, 2) = 6 pairs
        0.1667
    """
    if m > n:
        raise ValueError(f"cannot draw {m} of {n}")
    total = math.comb(n, m)
    parts = range(len(counts))
    value = 0
    for size in range(len(counts) + 1):
        for missing in combinations(parts, size):
            value += (-1) ** size * math.comb(n - sum(counts[p] for p in missing), m)
    return value / total


def score_parts(
    model: str | os.PathLike[str] | Any,
    rows: Sequence[Mapping[str, str]],
    *,
    samples: int = 8,
    k: int = 4,
    rsa_n: int = 8,
    rsa_steps: int = 0,
    pass_at: Sequence[int] = (8,),
    temperature: float = 1.0,
    aggregate_temperature: float = 0.0,
    seed: int = 0,
    tokenizer: Any = None,
    batch_size: int = 1024,
) -> PartsScores:
    """Score a parts model (a directory, or a loaded model with its ``tokenizer``) problem by problem.

    Examples:
        >>> rows = PartsTask().problems(100, seed=0, split="test")  # doctest: +SKIP
        >>> scores = score_parts(parts_model(), rows, samples=32, pass_at=(8, 32), rsa_steps=2)  # doctest: +SKIP
    """
    if rsa_n > samples or rsa_n % k:
        raise ValueError(f"rsa_n={rsa_n} must be a multiple of k={k} and at most samples={samples}")
    if any(m > samples for m in pass_at):
        raise ValueError(f"pass_at {tuple(pass_at)} asks for more than the {samples} samples")
    model, tokenizer = _loaded(model, tokenizer)
    task = task_of_rows(rows)
    sampler = _Sampler(model, tokenizer, batch_size, seed)
    problems = [row["problem"] for row in rows]
    references = [row["answer"] for row in rows]
    # 1) candidates
    users = [render(PARTS_SOLVE_PROMPT, p) for p in problems for _ in range(samples)]
    entropy: list[float] = []
    texts = sampler.run(users, temperature=temperature, max_new_tokens=task.solve_budget(), entropies=entropy)
    candidates = [texts[i * samples:(i + 1) * samples] for i in range(len(rows))]
    answers = [[extract_boxed(t) for t in group] for group in candidates]
    # 2) the model aggregating consecutive groups of k of the first rsa_n
    groups = [(i, candidates[i][j:j + k]) for i in range(len(rows)) for j in range(0, rsa_n, k)]
    merged = sampler.run([render(PARTS_AGGREGATE_PROMPT, problems[i], g, task.show_candidates) for i, g in groups],
                         temperature=aggregate_temperature, max_new_tokens=task.aggregate_budget())
    per_group = rsa_n // k
    scores: dict[str, list[float]] = {name: [] for name in (
        "pass1", *(f"pass{m}" for m in pass_at), f"maj{k}", f"agg{k}", f"cover{k}", "entropy_search",
        "part_entropy", "distinct8", "answered")}
    for i, reference in enumerate(references):
        mine = answers[i]
        right = [task.score(a, reference) for a in mine]
        counts = [sum(1 for a, r in zip(mine, right) if r and task.part_of(a) == label) for label in task.labels]
        scores["pass1"].append(sum(right) / samples)
        for m in pass_at:
            scores[f"pass{m}"].append(coverage_at(counts, samples, m))
        group_answers = [mine[j:j + k] for j in range(0, rsa_n, k)]
        scores[f"maj{k}"].append(_mean([task.score(part_vote(task, g), reference, whole=True) for g in group_answers]))
        scores[f"agg{k}"].append(_mean([task.score(extract_boxed(t), reference, whole=True)
                                        for t in merged[i * per_group:(i + 1) * per_group]]))
        scores[f"cover{k}"].append(_mean([float(covered(task, g, reference) == set(task.labels))
                                          for g in group_answers]))
        scores["entropy_search"].append(_mean(entropy[i * samples:(i + 1) * samples]))
        chosen = Counter(task.part_of(a) for a in mine)
        scores["part_entropy"].append(-sum(c / samples * math.log2(c / samples) for c in chosen.values()))
        scores["distinct8"].append(float(len({task.vote_key(a) for a in mine[:8]})))
        scores["answered"].append(sum(task.part_of(a) is not None for a in mine) / samples)
    # 3) RSA from the first rsa_n candidates
    if rsa_steps > 0:
        population = [group[:rsa_n] for group in candidates]
        rng = random.Random(f"parts-rsa/{seed}")
        for _ in range(rsa_steps):
            sets = [(i, rng.sample(population[i], k)) for i in range(len(rows)) for _ in range(rsa_n)]
            written = sampler.run([render(PARTS_AGGREGATE_PROMPT, problems[i], s, task.show_candidates)
                                   for i, s in sets],
                                  temperature=temperature, max_new_tokens=task.aggregate_budget())
            population = [written[i * rsa_n:(i + 1) * rsa_n] for i in range(len(rows))]
        scores["rsa_pop"], scores["rsa_vote"] = [], []
        for final, reference in zip(population, references):
            finals = [extract_boxed(t) for t in final]
            scores["rsa_pop"].append(_mean([task.score(a, reference, whole=True) for a in finals]))
            scores["rsa_vote"].append(task.score(vote(task, finals), reference, whole=True))
    flat = [(a, task.score(a, r)) for group, r in zip(answers, references) for a in group]
    shares = {label: sum(task.part_of(a) == label for a, _ in flat) / len(flat) for label in task.labels}
    shares["none"] = sum(task.part_of(a) is None for a, _ in flat) / len(flat)
    accuracy = {label: _mean([s for a, s in flat if task.part_of(a) == label]) for label in task.labels}
    return PartsScores(scores, shares, accuracy)


def part_vote(task: PartsTask, answers: Sequence[str | None]) -> str | None:
    """The rule aggregator: per part, the value most ``answers`` state (the first of a tie); ``None`` when a part is
    stated by none (it cannot work one).

    Examples:
        >>> part_vote(PartsTask(), ["A=1", "B=2", "A=1", "C=3"])
        'A=1,B=2,C=3'
    """
    stated: dict[str, list[int]] = {}
    for answer in answers:
        for label, value in (task.read(answer) or {}).items():
            if value != "?":
                stated.setdefault(label, []).append(int(value))
    if set(stated) != set(task.labels):
        return None
    return ",".join(f"{label}={Counter(stated[label]).most_common(1)[0][0]}" for label in task.labels)


def vote(task: PartsTask, answers: Sequence[str | None]) -> str | None:
    """The most common whole answer (normalised by :meth:`PartsTask.vote_key`; the first of a tie)."""
    keys = [task.vote_key(a) for a in answers]
    counted = Counter(k for k in keys if k is not None)
    return counted.most_common(1)[0][0] if counted else None


def covered(task: PartsTask, answers: Sequence[str | None], reference: str) -> set[str]:
    """The parts some of ``answers`` state rightly."""
    return set().union(*(task.right_parts(a, reference) for a in answers)) if answers else set()


class _Sampler:
    """:func:`complete_ids` over chunks of at most ``batch_size`` prompts, each chunk with its own derived seed."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int, seed: int) -> None:
        self.model, self.tokenizer, self.batch_size, self.seed, self.calls = model, tokenizer, batch_size, seed, 0

    def run(self, users: Sequence[str], *, temperature: float, max_new_tokens: int,
            entropies: list[float] | None = None) -> list[str]:
        self.calls += 1
        prompts = [self.tokenizer(chat_prompt(self.tokenizer, u), add_special_tokens=False)["input_ids"]
                   for u in users]
        # similar lengths together: less padding in each chunk
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[str] = [""] * len(prompts)
        found: list[float] = [0.0] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            measured: list[float] = []
            texts = complete_ids(self.model, self.tokenizer, [prompts[i] for i in chunk], temperature=temperature,
                                 max_new_tokens=max_new_tokens, seed=self.seed * 1_000_003 + self.calls * 1009 + start,
                                 entropies=measured if entropies is not None else None)
            for position, i in enumerate(chunk):
                out[i] = texts[position]
                if entropies is not None:
                    found[i] = measured[position]
        if entropies is not None:
            entropies.extend(found)
        return out


def _loaded(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    if not isinstance(model, (str, os.PathLike)):
        if tokenizer is None:
            raise ValueError("a loaded model needs its tokenizer")
        return model, tokenizer
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scaffold.backends._transformers import quiet_progress

    with quiet_progress():
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    return loaded, tokenizer or AutoTokenizer.from_pretrained(model)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
