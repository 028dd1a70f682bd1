"""Training examples for a pocket build: worked solutions, and aggregations of synthetic or the model's own candidates.

An aggregation example is the problem and four candidates, answered by the correct worked
solution. Candidates come from two sources, mixed per example (``own_share``):

- *synthetic*: right, or wrong the way a small model on this task is wrong
  (:meth:`~scaffold.pocket.PocketTask.slipped_solution`), the share of right ones drawn per example;
- *the model's own*: four temperature-1 samples of the model being trained (the weight average),
  drawn in pools of ``pool`` problems once the model answers some problems at all.

Why both: trained on synthetic candidates only, the aggregator learns to copy a candidate and ends
up no better than a majority vote over the model's own samples, whose mistakes (carry slips in
particular) look different; trained on its own samples, it learns to correct them, and its own
aggregation beats its vote. The synthetic half keeps it sound on candidates it did not write.
"""

from __future__ import annotations

import random
from typing import Any

from scaffold.pocket._evaluate import sample_texts
from scaffold.pocket._prompts import aggregate_prompt, encode_example, solve_prompt
from scaffold.pocket._task import PocketTask

CANDIDATES = 4
"""Candidates per aggregation training example."""

Example = tuple[list[int], int]
"""Token ids of one example and the position its answer starts at."""


class Examples:
    """An endless, seeded supply of tokenised training examples from the train split."""

    def __init__(self, task: PocketTask, tokenizer: Any, seed: int, *, own_share: float = 0.0) -> None:
        self.task = task
        self.tokenizer = tokenizer
        self.own_share = own_share
        self.rng = random.Random(f"pocket-train/{seed}")
        self.problems = task.stream(self.rng, "train")
        self.pool: list[tuple[str, list[str]]] = []
        """Problems with four of the model's own candidates each, used up by :meth:`aggregation`."""

    def solving(self, count: int) -> list[Example]:
        """Problem → worked solution."""
        out = []
        for _ in range(count):
            problem = next(self.problems)
            out.append(encode_example(self.tokenizer, solve_prompt(problem), self.task.solution(problem)))
        return out

    def aggregation(self, count: int) -> list[Example]:
        """Problem and four candidates → the worked solution (``own_share`` of them own, while the pool lasts)."""
        out = []
        for _ in range(count):
            if self.pool and self.rng.random() < self.own_share:
                problem, candidates = self.pool.pop()
            else:
                problem = next(self.problems)
                candidates = self.synthetic_candidates(problem)
            out.append(encode_example(self.tokenizer, aggregate_prompt(problem, candidates),
                                      self.task.solution(problem)))
        return out

    def synthetic_candidates(self, problem: str) -> list[str]:
        """Four candidates, each right or with one or two slips (the share of right ones drawn per call)."""
        solution = self.task.solution(problem)
        share_right = self.rng.uniform(0.0, 0.8)
        return [
            solution if self.rng.random() < share_right
            else self.task.slipped_solution(problem, self.rng, slips=1 if self.rng.random() < 0.75 else 2)
            for _ in range(CANDIDATES)
        ]

    def refill(self, model: Any, count: int, *, seed: int) -> None:
        """Replace the pool with ``count`` train problems, each with four temperature-1 samples of ``model``."""
        problems = [next(self.problems) for _ in range(count)]
        limit = len(self.task.solution(problems[0])) + 16
        users = [solve_prompt(problem) for problem in problems for _ in range(CANDIDATES)]
        texts = sample_texts(model, self.tokenizer, users, temperature=1.0, max_new_tokens=limit, seed=seed)
        self.pool = [(problem, texts[i * CANDIDATES:(i + 1) * CANDIDATES]) for i, problem in enumerate(problems)]
