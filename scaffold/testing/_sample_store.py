"""A store with something to look at: RSA runs evaluated against a vote, from a scripted model (no download).

:func:`sample_store` records two evaluations of the same problems: ``rsa`` (N samples, T steps of N
aggregations over K-subsets, then a vote: the RSA paper's shape) and ``vote`` (N samples and a vote).
The scripted model answers a problem right with probability 0.35 when it samples; when it aggregates it
spots a right candidate among those it read 45% of the time, else takes their most common answer (or
slips): so the right answer appears, spreads or dies out across RSA's steps as in a real run. Its first reply to a
chosen few requests is a 503, retried, so some calls show a second attempt. Answers are seeded: the
same arguments record the same runs. For ``scaffold ui``, its tests and benchmark, and trying it out.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaffold._errors import ServerError
from scaffold._types import Request

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclass(frozen=True)
class SampleStore:
    """What :func:`sample_store` recorded.

    Examples:
        >>> SampleStore("runs.db", ("rsa", "vote"), 12, 16, 4, 10).evaluations
        ('rsa', 'vote')
    """

    path: str
    evaluations: tuple[str, str]
    """The RSA evaluation's name, then the vote's (runs ``{name}-{i}``)."""
    problems: int
    n: int
    k: int
    steps: int


class _Answers:
    """The scripted model: right 35% of the time when sampling; when aggregating, it spots a right candidate
    45% of the time, else takes the candidates' majority (or slips)."""

    def __init__(self, answers: dict[str, str], seed: int, retry_every: int) -> None:
        self.answers, self.seed, self.retry_every = answers, seed, retry_every
        self.failed: set[int] = set()

    def __call__(self, request: Request) -> str:
        prompt = "\n".join(m[1] for m in request.messages) if request.messages else (request.prompt or "")
        call = request.seed or 0
        rng = random.Random(f"{self.seed}:{call}")
        if self.retry_every and call % self.retry_every == 0 and call not in self.failed:
            self.failed.add(call)
            raise ServerError("the sample model's scripted 503 (retried)", status_code=503)
        problem = next((p for p in self.answers if p in prompt), None)
        right = self.answers.get(problem or "", "0")
        seen = _BOXED.findall(prompt)
        if seen:  # an aggregation: a right candidate it spots, else the majority of what it read, or a slip
            majority = Counter(seen).most_common(1)[0][0]
            if right in seen and rng.random() < 0.45:
                answer = right
            else:
                answer = majority if rng.random() < 0.85 else str(int(right) + rng.choice((-10, -1, 1, 10)))
        else:
            answer = right if rng.random() < 0.35 else str(int(right) + rng.choice((-10, -1, 1, 2, 10)))
        return f"Adding step by step gives \\boxed{{{answer}}}."


def sample_store(path: str | Path, *, problems: int = 12, n: int = 16, k: int = 4, steps: int = 10,
                 votes: int | None = None, seed: int = 0, retry_every: int = 37) -> SampleStore:
    """Record the ``rsa`` and ``vote`` evaluations (see the module docstring) into the SQLite file ``path``.

    RSA samples ``n`` and aggregates ``k`` at a time for ``steps`` steps; the vote is over ``votes``
    samples (default ``2 * n``, so its samples node has more traces than the viewer shows expanded).

    Examples:
        >>> import os, tempfile
        >>> made = sample_store(os.path.join(tempfile.mkdtemp(), "runs.db"), problems=2, n=4, k=2, steps=2)
        >>> made.evaluations
        ('rsa', 'vote')
    """
    import scaffold as sf
    from scaffold.evaluation import evaluate
    from scaffold.testing._scripted import ScriptedBackend

    rng = random.Random(seed)
    rows = []
    for _ in range(problems):
        terms = [rng.randint(10, 99) for _ in range(3)]
        rows.append({"problem": " + ".join(map(str, terms)), "answer": str(sum(terms))})
    answers = _Answers({row["problem"]: row["answer"] for row in rows}, seed, retry_every)
    model = sf.Model(ScriptedBackend(answers), retry=sf.Retry(attempts=3, initial_delay=0.0))

    @sf.graph
    def rsa(problem: Any) -> Any:
        population = sf.sample("What is {problem}? Put the answer in \\boxed{{}}.", model="solver", n=n, name="step0")
        for step in range(1, steps + 1):
            population = sf.aggregate(population, model="solver", k=k, n=n, name=f"step{step}")
        return sf.vote(population, name="vote")

    @sf.graph
    def vote(problem: Any) -> Any:
        return sf.vote(sf.sample("What is {problem}? Put the answer in \\boxed{{}}.", model="solver",
                                 n=votes or 2 * n, name="samples"), name="vote")

    store = sf.Store(path)
    try:
        for graph, name in ((rsa.build(), "rsa"), (vote.build(), "vote")):
            evaluate(graph, rows, {"solver": model}, name=name, store=store, dataset="sample-sums", seed=seed)
    finally:
        store.close()
    return SampleStore(str(path), ("rsa", "vote"), problems, n, k, steps)
