"""``Graph.map``: many rows, bounded concurrency, failures reported per row, shared limits."""

from __future__ import annotations

import asyncio

import pytest
from helpers import boxed, prompt_of

import scaffold as sf
from scaffold.testing import ScriptedBackend


@sf.graph
def echo(problem):
    return sf.generate("Solve {problem}", model="m")


def echo_backend(delay: float = 0.0) -> ScriptedBackend:
    """Answers ``\\boxed{<problem>}`` so every row's result is recognisable."""
    return ScriptedBackend(lambda r: boxed(prompt_of(r).removeprefix("Solve ")), delay=delay)


async def collect(aiter):
    return [r async for r in aiter]


def test_map_yields_every_row_with_its_index():
    """``map`` yields one result per row; ``.index`` is the row's position and the answer matches the row."""
    rows = [{"problem": str(i)} for i in range(10)]
    results = asyncio.run(collect(echo.map(rows, models={"m": echo_backend(0.01)}, concurrency=4)))
    assert sorted(r.index for r in results) == list(range(10))
    assert all(r.ok and r.answer == str(r.index) for r in results)


def test_map_runs_at_most_concurrency_rows_at_once():
    """With one call per run, at most ``concurrency`` requests are ever in flight, and that many are reached."""
    backend = echo_backend(0.03)
    rows = [{"problem": str(i)} for i in range(12)]
    results = asyncio.run(collect(echo.map(rows, models={"m": backend}, concurrency=4)))
    assert len(results) == 12
    assert backend.peak_in_flight == 4


def test_map_yields_results_as_they_finish():
    """A slow first row does not hold back the rows after it."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=lambda r: 0.3 if prompt_of(r) == "Solve slow" else 0.01)
    rows = [{"problem": "slow"}] + [{"problem": str(i)} for i in range(3)]
    results = asyncio.run(collect(echo.map(rows, models={"m": backend}, concurrency=4)))
    assert [r.index for r in results][-1] == 0


def test_bad_row_yields_an_error_result_instead_of_stopping_the_batch():
    """A row missing an input yields a result with status error and InputError; the other rows still run."""
    rows = [{"problem": "1"}, {"question": "oops"}, {"problem": "3"}]
    results = sorted(asyncio.run(collect(echo.map(rows, models={"m": echo_backend()}))), key=lambda r: r.index)
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert isinstance(results[1].error, sf.InputError)
    assert results[1].index == 1
    assert [results[0].answer, results[2].answer] == ["1", "3"]


@pytest.mark.parametrize(
    ("candidates", "error"),
    [(["a"], sf.SubsetSizeError), ([], sf.EmptySetError)],
    ids=["too-few-for-k", "empty"],
)
def test_row_with_unusable_candidates_does_not_stop_the_batch(candidates, error):
    """A row whose candidate set is too small (or empty) for the graph yields an error result; the rest run."""

    @sf.graph
    def agg(problem, candidates):
        return sf.aggregate(candidates, model="m", k=2, n=2)

    rows = [
        {"problem": "a", "candidates": ["x", "y", "z"]},
        {"problem": "b", "candidates": candidates},
        {"problem": "c", "candidates": ["x", "y"]},
    ]
    backend = ScriptedBackend(lambda r: boxed(1))
    results = sorted(asyncio.run(collect(agg.map(rows, models={"m": backend}, seed=0))), key=lambda r: r.index)
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert isinstance(results[1].error, error)
    assert backend.calls == 4


def test_failed_run_is_reported_not_raised():
    """A row whose run fails (a backend error) yields status error with the CallError attached."""
    backend = ScriptedBackend(lambda r: sf.BackendError("down") if prompt_of(r) == "Solve 1" else boxed(0))
    results = echo.build().map_sync([{"problem": str(i)} for i in range(3)], models={"m": backend})
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert isinstance(results[1].error, sf.CallError)


def test_map_sync_returns_results_in_dataset_order():
    """``map_sync`` collects every result sorted by row position, even when later rows finish first."""
    backend = ScriptedBackend(
        lambda r: boxed(prompt_of(r).removeprefix("Solve ")), delay=lambda r: 0.05 if prompt_of(r) == "Solve 0" else 0.0
    )
    results = echo.build().map_sync([{"problem": str(i)} for i in range(6)], models={"m": backend}, concurrency=6)
    assert [r.index for r in results] == list(range(6))
    assert [r.answer for r in results] == [str(i) for i in range(6)]


def test_map_gives_each_row_its_own_seed():
    """With ``seed=s`` row i runs with seed ``s + i`` (recorded in its result)."""
    results = echo.build().map_sync([{"problem": str(i)} for i in range(4)], models={"m": echo_backend()}, seed=100)
    assert [r.seed for r in results] == [100, 101, 102, 103]


def test_map_shares_a_model_limit_across_rows():
    """A Model's in-flight limit holds across all the rows of a batch."""
    backend = echo_backend(0.02)
    model = sf.Model(backend, max_in_flight=2)
    results = echo.build().map_sync([{"problem": str(i)} for i in range(8)], models={"m": model}, concurrency=8)
    assert all(r.ok for r in results)
    assert backend.peak_in_flight == 2 and model.limit.peak == 2


def test_map_rejects_non_positive_concurrency():
    """``concurrency < 1`` is a ValueError."""
    with pytest.raises(ValueError):
        echo.build().map_sync([{"problem": "1"}], models={"m": echo_backend()}, concurrency=0)


def test_map_checks_aliases_before_running_any_row():
    """An unbound alias fails the whole batch up front with ModelAliasError; no row runs."""
    backend = echo_backend()
    with pytest.raises(sf.ModelAliasError):
        echo.build().map_sync([{"problem": "1"}], models={"other": backend})
    assert backend.calls == 0


def test_map_reads_an_async_iterable_lazily() -> None:
    """map accepts an async generator of rows and reads it only as fast as the concurrency allows."""
    import asyncio

    import scaffold as sf
    from scaffold.testing import ScriptedBackend

    @sf.graph
    def solve(problem):
        return sf.generate("Solve {problem}", model="m")

    produced: list[int] = []

    async def rows():
        for i in range(6):
            produced.append(i)
            yield {"problem": str(i)}

    async def main() -> list[tuple[int | None, int]]:
        backend = ScriptedBackend(lambda r: rf"\boxed{{{r.last_content.split()[-1]}}}", delay=0.01)
        out = []
        async for result in solve.map(rows(), models={"m": backend}, concurrency=2):
            out.append((result.index, len(produced)))
            assert result.answer == str(result.index)
        return out

    out = asyncio.run(main())
    assert sorted(i for i, _ in out) == list(range(6))
    assert out[0][1] <= 3  # when the first result arrives, at most concurrency + 1 rows were read


def test_map_progress_bar_counts_every_row(capsys) -> None:  # type: ignore[no-untyped-def]
    """progress=True draws a bar that reaches the number of rows."""
    import scaffold as sf
    from scaffold.testing import ScriptedBackend

    @sf.graph
    def solve(problem):
        return sf.generate("Solve {problem}", model="m")

    results = solve.build().map_sync([{"problem": "x"}] * 5, models={"m": ScriptedBackend(lambda r: "ok")},
                                     progress=True)
    assert len(results) == 5
    assert "5/5" in capsys.readouterr().err


class RecordingRunner:
    """A runner of our own: keeps the request it was given and runs it in this process."""

    def __init__(self) -> None:
        self.requests: list[sf.MapRequest] = []

    def map(self, request):
        self.requests.append(request)
        return sf.LocalRunner().map(request)


def test_a_runner_of_your_own_receives_the_whole_request_and_its_results_are_the_maps():
    """``runner=`` hands the map's arguments to any object with ``map(request)``; its results are what the default
    runner gives for the same rows (same run ids, seeds and answers)."""
    rows = [{"problem": str(i)} for i in range(5)]
    runner = RecordingRunner()
    mine = asyncio.run(collect(echo.map(rows, models={"m": echo_backend()}, concurrency=2, seed=7, run_id="own",
                                        store=None, runner=runner, timeout=30)))
    (request,) = runner.requests
    assert (request.graph.name, request.concurrency, request.seed, request.run_id) == ("echo", 2, 7, "own")
    assert request.run_kwargs == {"timeout": 30} and request.rows is rows
    default = asyncio.run(collect(echo.map(rows, models={"m": echo_backend()}, concurrency=2, seed=7, run_id="own",
                                           store=None)))
    key = sorted((r.index, r.run_id, r.seed, r.answer) for r in mine)
    assert key == sorted((r.index, r.run_id, r.seed, r.answer) for r in default)
    assert key == [(i, f"own-{i}", 7 + i, str(i)) for i in range(5)]


def test_runner_and_cluster_together_or_a_runner_without_map_are_refused():
    """``cluster=`` is another spelling of ``runner=``: both at once is a ValueError; an object that is not a runner
    is a TypeError naming its type."""
    with pytest.raises(ValueError, match="not both"):
        echo.map([], models={"m": echo_backend()}, runner=sf.LocalRunner(), cluster=sf.LocalRunner())
    with pytest.raises(TypeError, match="not a int"):
        echo.map([], models={"m": echo_backend()}, runner=3)


def test_every_runner_numbers_rows_one_way():
    """Row i's seed is seed + i, its run id ``{run_id}-{i}``, its dataset item i; ``items`` gives positions; fresh
    ids are new per row; without a dataset no item is recorded."""
    assert sf.plan_row({"a": 1}, 4, seed=None, run_id=None, recorded=False) == \
        sf.PlannedRow({"a": 1}, 4, None, None, None)
    fresh = {sf.plan_row({}, 0, seed=0, run_id=None, recorded=True, fresh_id=True).run_id for _ in range(20)}
    assert len(fresh) == 20 and all(isinstance(i, str) and len(i) == 16 for i in fresh)
    from scaffold._runner import RowFeed

    async def planned(items):
        feed = RowFeed(sf.MapRequest(graph=echo, rows=[{}, {}, {}], models={}, concurrency=1, seed=100,
                                     run_id="r", dataset="d", items=items, run_kwargs={}))
        return [await feed.next() for _ in range(4)]

    first, second, third, end = asyncio.run(planned([5, 9, 2]))
    assert [(p.position, p.seed, p.run_id, p.item) for p in (first, second, third)] == \
        [(5, 105, "r-5", 5), (9, 109, "r-9", 9), (2, 102, "r-2", 2)]
    assert end is None
    with pytest.raises(ValueError, match="fewer positions"):
        asyncio.run(planned([1]))
