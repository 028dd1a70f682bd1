"""A backend with seeded, realistic latency and no model: for benchmarks, examples and load tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import weakref
from collections.abc import Callable
from statistics import NormalDist

from scaffold._types import Completion, Request, Usage, record_maker
from scaffold.backends._base import Capabilities

_new_completion = record_maker(Completion)
_NORMAL = NormalDist()
_MASK = (1 << 64) - 1


def _uniform(seed: int) -> float:
    """A uniform number in (0, 1) from a seed (splitmix64): cheap, pure and well mixed."""
    z = (seed * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return (z + 0.5) / 2.0**64


def lognormal_latency(request: Request, median: float, sigma: float) -> float:
    """The latency a :class:`SimulatedBackend` gives ``request``: a pure function of its seed.

    Examples:
        >>> r = Request(seed=7)
        >>> lognormal_latency(r, 0.05, 0.5) == lognormal_latency(r, 0.05, 0.5) > 0
        True
    """
    if median <= 0:
        return 0.0
    return median * math.exp(sigma * _NORMAL.inv_cdf(_uniform(request.seed or 0)))


class SimulatedBackend:
    """Sleeps a lognormal latency drawn from the request's seed, then answers ``answer(request)``.

    The latency depends only on the request's seed (derived from the run seed, the node
    and the index), so a benchmark can recompute every latency and the exact critical-path
    bound. ``median=0`` answers at once without sleeping (to measure pure overhead).
    Each completion records its latency in ``metadata["simulated_latency"]``.

    Examples:
        >>> import asyncio
        >>> from scaffold._types import Request
        >>> b = SimulatedBackend(median=0.001, sigma=0.5)
        >>> asyncio.run(b.complete(Request(seed=1)))[0].text
        '\\\\boxed{42}'
    """

    provider = "scaffold.testing"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry)."""

    def __init__(
        self,
        *,
        median: float = 0.05,
        sigma: float = 0.5,
        answer: Callable[[Request], str] | None = None,
        supports_n: bool = False,
    ) -> None:
        self.median = median
        self.sigma = sigma
        self.answer = answer
        self.capabilities = Capabilities(supports_n=supports_n)
        self.calls = 0
        self._usage = Usage(16, 16)
        # Wake-ups kept in our own heap of tuples, with one loop timer for the earliest:
        # asyncio's timer heap compares handles in Python, which would dominate a benchmark.
        self._due: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._loop: asyncio.AbstractEventLoop | None = None

    def __getstate__(self) -> dict[str, object]:
        """Picklable (a cluster sends it to its workers): pending wake-ups belong to this process's loop."""
        state = dict(self.__dict__)
        state.update(_due=[], _order=None, _timer=None, _timer_at=math.inf, _loop=None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._order = itertools.count()

    async def complete(self, request: Request) -> list[Completion]:
        self.calls += 1
        latency = lognormal_latency(request, self.median, self.sigma)
        if latency > 0:
            await self._sleep(latency)
        text = self.answer(request) if self.answer is not None else "\\boxed{42}"
        completion = _new_completion(text=text, usage=self._usage, finish_reason="stop",
                                     metadata={"simulated_latency": latency})
        return [completion] * request.n

    def _sleep(self, delay: float) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (another run_sync): forget the old loop's wake-ups
            self._loop, self._due, self._timer, self._timer_at = loop, [], None, math.inf
        fut: asyncio.Future[None] = loop.create_future()
        when = loop.time() + delay
        heapq.heappush(self._due, (when, next(self._order), fut))
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = self._arm(loop, when), when
        return fut

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> asyncio.TimerHandle:
        # the timer reaches us through a weak reference: one still pending when its loop closes (a run
        # that failed or timed out) would otherwise keep this backend in a reference cycle with it
        return loop.call_at(when, _wake, weakref.ref(self))

    def _wake(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time() + 1e-6
        due = self._due
        while due and due[0][0] <= now:
            fut = heapq.heappop(due)[2]
            if not fut.done():
                fut.set_result(None)
        self._timer, self._timer_at = None, math.inf
        if due:
            self._timer, self._timer_at = self._arm(loop, due[0][0]), due[0][0]


def _wake(backend: weakref.ReferenceType[SimulatedBackend]) -> None:
    alive = backend()
    if alive is not None:
        alive._wake()
