"""EnginePool on a real local Ray cluster: replicated transformers engines (tiny model, pocket model) as one backend."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import chain, wait_until_async

import graphs
import scaffold as sf
from scaffold._errors import BackendError
from scaffold._types import Request, TraceKind
from scaffold.backends._transformers import TransformersBackend
from scaffold.cluster._engines import EnginePool

ROOT = Path(__file__).resolve().parent.parent
GREEDY = {"temperature": 0, "max_tokens": 12}
PROBLEMS = ["1+2", "3+4", "5+6", "7+8"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool(ray_local: str, tiny_model_dir: Path) -> Iterator[EnginePool]:
    """Two CPU replicas of the tiny model, shared by the module (the fault test runs last)."""
    started = EnginePool(f"transformers:{tiny_model_dir}", 2, num_cpus=1, name="tiny")
    yield started
    started.close()


def model_traces(result: sf.RunResult) -> list[sf.Trace]:
    return [t for t in result.traces if t.kind is TraceKind.MODEL]


async def run_chains(backend: Any, problems: list[str], steps: int = 3, **params: Any) -> list[sf.RunResult]:
    """Concurrent runs of the sequential ``chain`` graph, one per problem, all on ``backend``."""
    model = sf.Model(backend, params={**GREEDY, **params})
    graph = chain.build(steps=steps)
    return list(await asyncio.gather(*(graph.run({"problem": p}, models={"m": model}, store=None, seed=i)
                                       for i, p in enumerate(problems))))


@pytest.fixture(scope="module")
def pooled_chains(pool: EnginePool) -> tuple[list[sf.RunResult], int]:
    """Four concurrent greedy chain runs on the pool; returns them and the requests the pool served for them."""
    before = sum(s.served for s in pool.stats())
    results = asyncio.run(run_chains(pool, PROBLEMS))
    return results, sum(s.served for s in pool.stats()) - before


def test_needs_a_running_ray_and_imports_it_lazily() -> None:
    """Importing the module leaves Ray unimported; a pool built before ray.init raises a non-retryable BackendError."""
    code = ("import sys\nfrom scaffold.cluster._engines import EnginePool\nassert 'ray' not in sys.modules\n"
            "from scaffold._errors import BackendError\n"
            "try:\n    EnginePool('transformers:/nowhere', 2)\nexcept BackendError as exc:\n"
            "    print(type(exc).__name__, exc.retryable, 'ray.init' in str(exc))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["BackendError", "False", "True"]


def test_declares_the_replicas_capabilities_without_streaming(pool: EnginePool) -> None:
    """Capabilities come from the replicas' backend (n, token ids), with streaming and training off."""
    assert isinstance(pool, sf.backends.Backend)
    caps = pool.capabilities
    assert caps.supports_n and caps.returns_token_ids
    assert not caps.streams and not caps.trainable


def test_concurrent_runs_use_both_replicas_and_each_run_stays_on_one(
        pool: EnginePool, pooled_chains: tuple[list[sf.RunResult], int]) -> None:
    """With one call in flight per run, the load stays even: runs spread over both replicas, each run on one."""
    results, served = pooled_chains
    assert all(r.ok for r in results)
    replicas_of_run = [{t.metadata["replica"] for t in model_traces(r)} for r in results]
    assert all(len(used) == 1 for used in replicas_of_run), replicas_of_run
    assert set().union(*replicas_of_run) == {0, 1}
    assert served == sum(len(model_traces(r)) for r in results) == len(PROBLEMS) * 3


def test_greedy_answers_equal_an_in_process_backend(
        tiny_model_dir: Path, pooled_chains: tuple[list[sf.RunResult], int]) -> None:
    """At temperature 0 every pooled call's text and token ids equal those of a TransformersBackend in this process."""
    results, _ = pooled_chains
    local = TransformersBackend(tiny_model_dir)
    try:
        expected = asyncio.run(run_chains(local, PROBLEMS))
    finally:
        local.close()
    for pooled, here in zip(results, expected):
        assert [(t.id.split("/")[1], t.text, t.token_ids) for t in model_traces(pooled)] == \
            [(t.id.split("/")[1], t.text, t.token_ids) for t in model_traces(here)]


def test_a_backend_error_in_a_replica_reaches_the_caller_as_itself(pool: EnginePool) -> None:
    """A replica's BackendError (an unknown sampling parameter) comes back as BackendError, not RayTaskError."""
    from ray.exceptions import RayTaskError

    request = Request(messages=(("user", "hi"),), params={"not_a_parameter": 1})
    with pytest.raises(BackendError, match="not_a_parameter") as caught:
        asyncio.run(pool.complete(request))
    assert type(caught.value) is BackendError and not isinstance(caught.value, RayTaskError)
    assert caught.value.retryable is False


def test_a_pickled_pool_answers_from_a_ray_task(ray_local: str, pool: EnginePool) -> None:
    """A pool sent to a Ray task (pickled) answers there as here, with counters of its own."""
    import ray

    request = Request(messages=(("user", "2+2?"),), params=GREEDY)
    copy = pickle.loads(pickle.dumps(pool))
    assert all(s.served == 0 for s in copy.stats()) and copy.capabilities == pool.capabilities

    @ray.remote(num_cpus=0)
    def answer(sent: EnginePool) -> str:
        return asyncio.run(sent.complete(request))[0].text

    here = asyncio.run(pool.complete(request))[0].text
    assert ray.get(answer.remote(pool), timeout=120) == here


def test_a_killed_replica_is_replaced_and_every_request_answered_once(pool: EnginePool) -> None:
    """SIGKILL on a replica with requests in flight: each call still returns once, the replica is restarted."""
    import ray

    before = pool.stats()[0]
    pid = ray.get(pool.actors[0].pid.remote(), timeout=60)
    problems = [f"{i}+{i}" for i in range(6)]

    async def main() -> list[sf.RunResult]:
        runs = asyncio.ensure_future(run_chains(pool, problems, steps=4, max_tokens=24))
        # replica 0 has answered a call of these runs and has another in flight: kill it now
        await wait_until_async(lambda: runs.done() or (pool.stats()[0].in_flight > 0
                                                       and pool.stats()[0].served > before.served),
                               timeout=300, message=lambda: f"replica 0 never took a second call: {pool.stats()}")
        assert not runs.done(), f"the runs ended before the replica could be killed: {runs.result()}"
        os.kill(pid, signal.SIGKILL)  # the replica's PID, which the test asked it for
        return await runs

    results = asyncio.run(main())
    assert all(r.ok for r in results)
    for result in results:
        traces = model_traces(result)
        assert len(traces) == 4 and len({t.id for t in traces}) == 4 and all(t.ok for t in traces)
    after = pool.stats()[0]
    assert after.restarts == before.restarts + 1 and after.alive
    assert after.failed_over > before.failed_over
    assert ray.get(pool.actors[0].pid.remote(), timeout=120) != pid
    served = [s.served for s in pool.stats()]
    request = Request(messages=(("user", "again"),), params=GREEDY)

    async def two() -> None:
        await asyncio.wait_for(asyncio.gather(pool.complete(request), pool.complete(request)), 120)

    asyncio.run(two())
    assert [s.served for s in pool.stats()] == [n + 1 for n in served]  # both replicas answer again


def test_pocket_replicas_answer_a_real_rsa_run(ray_local: str, pocket_quick: tuple[Path, Any]) -> None:
    """Two CPU replicas of the pocket model answer every call of an RSA run (N=4, K=2, T=2)."""
    from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, pocket_task

    path, _ = pocket_quick
    row = pocket_task(path).problems(1, seed=0, split="test")[0]
    graph = graphs.rsa.build(n=4, k=2, steps=2, prompt=SOLVE_PROMPT, aggregate_prompt=AGGREGATE_PROMPT)
    with EnginePool(f"transformers:{path}", 2, num_cpus=1, name="pocket") as pocket:
        model = sf.Model(pocket, params={"temperature": 1.0})
        result = graph.run_sync({"problem": row["problem"]}, models={"solver": model}, store=None, seed=0)
        stats = pocket.stats()
    assert result.ok and result.answer is not None
    traces = model_traces(result)
    assert len(traces) == 4 * 3 and all(t.ok and t.metadata["replica"] in (0, 1) for t in traces)
    assert sum(s.served for s in stats) == 1 + 4 * 2  # the 4 samples go out as one request with n=4
