"""Synthetic SPIRAL records for timing credit assignment (``python -m trainers.credit_bench``).

Per prompt (one run each): ``search`` sampled traces, ``sets`` distinct subsets of ``set_size`` of
them, ``per_set`` aggregations of each subset; every aggregation rewarded 0 or 1 at random (seeded).
The defaults — 256 prompts × (8 + 4 × 4) = 24 traces — are a typical SPIRAL batch.
"""

from __future__ import annotations

import random
import time

from scaffold._types import Trace
from trainers.credit import assign_credit


def synthetic_spiral_records(
    prompts: int = 256, search: int = 8, sets: int = 4, set_size: int = 4, per_set: int = 4, seed: int = 0
) -> tuple[list[Trace], dict[str, float]]:
    """Traces (``token_ids=(1, 2, 3)``) and rewards of ``prompts`` SPIRAL runs, reproducible from ``seed``.

    Examples:
        >>> traces, rewards = synthetic_spiral_records(prompts=2)
        >>> len(traces), len(rewards), traces[-1].node, len(traces[-1].inputs)
        (48, 48, 'aggregate', 4)
    """
    if set_size > search:
        raise ValueError(f"set_size {set_size} is larger than the {search} search traces")
    rng = random.Random(seed)
    traces: list[Trace] = []
    rewards: dict[str, float] = {}
    for p in range(prompts):
        run = f"bench{p}"
        pool = [Trace(id=f"{run}/search#{j}", run_id=run, node="search", index=j, token_ids=(1, 2, 3))
                for j in range(search)]
        chosen: list[tuple[str, ...]] = []
        seen: set[frozenset[str]] = set()
        for _ in range(100 * sets):
            if len(chosen) == sets:
                break
            members = tuple(t.id for t in rng.sample(pool, set_size))
            if frozenset(members) not in seen:
                seen.add(frozenset(members))
                chosen.append(members)
        else:
            raise ValueError(f"could not draw {sets} distinct subsets of {set_size} from {search}")
        aggs = [Trace(id=f"{run}/aggregate#{i}", run_id=run, node="aggregate", index=i, token_ids=(1, 2, 3),
                      inputs=members)
                for i, members in enumerate(m for m in chosen for _ in range(per_set))]
        for t in pool + aggs:
            traces.append(t)
            rewards[t.id] = float(rng.random() < 0.5)
    return traces, rewards


def main(repeats: int = 5) -> None:
    """Print the best wall time of ``assign_credit`` (SPIRAL) over the default records."""
    traces, rewards = synthetic_spiral_records()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        credited = assign_credit(traces, rewards, scheme="spiral")
        best = min(best, time.perf_counter() - start)
    print(f"assign_credit(spiral): {len(traces)} traces -> {len(credited)} credited in {best * 1000:.1f} ms")


if __name__ == "__main__":
    main()
