""":class:`Model`: a backend bound to a graph's model alias, with its defaults, limits and retries.

Everything that must hold across nested fan-out and many concurrent runs lives on this
object — the in-flight limit, requests and tokens per minute, the pace a provider's 429s impose —
so every run given the same ``Model`` shares one budget. ``Model.complete`` is the one
place a request is sent: limits, per-attempt timeout and retries wrap the backend there, all
kept on the model's :class:`~scaffold._clock.Clock` (real time unless a test gives a virtual one).
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, NamedTuple

from scaffold._clock import MONOTONIC, Clock, timeout
from scaffold._errors import BackendError, ModelAliasError, RateLimitError, RequestTimeout
from scaffold._limits import InFlightLimit, RateLimit
from scaffold._secrets import SECRET_HEADERS, SECRET_PARAMS
from scaffold._throttle import Throttle
from scaffold._types import Completion, Finished, Request, StreamItem
from scaffold.backends._base import Backend, stream_completions
from scaffold.backends._prices import EngineTime, Price
from scaffold.backends._retry import Retry

DEFAULT_MAX_TOKENS = 512
"""Completion tokens assumed per choice for the tokens-per-minute budget when a request sets no ``max_tokens``."""


class Reply(NamedTuple):
    """What :meth:`Model.complete` returns: the completions and how they were obtained."""

    completions: Sequence[Completion]
    attempts: int
    """How many times the request was sent (1: no retry)."""
    started: float
    """``time.time()`` when the successful attempt was sent."""
    latency: float
    """Seconds the successful attempt took (queueing and earlier attempts excluded)."""


def estimate_tokens(request: Request) -> int:
    """A cheap upper-leaning estimate of a request's tokens (prompt ≈ 4 characters per token)."""
    chars = sum(len(m[1] or "") for m in request.messages) + len(request.prompt or "")
    if request.tools:
        chars += sum(len(str(tool)) for tool in request.tools)
    params = request.params
    completion = params.get("max_tokens") or params.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
    return chars // 4 + 1 + request.n * int(completion)


class Model:
    """A backend bound to an alias, with default parameters, limits, timeout and retries.

    ``backend`` may be a :class:`~scaffold.backends.Backend` or a string spec
    (``"openai/gpt-4o-mini"``, ``"hosted_vllm/NAME"``, ``"transformers:/path"``,
    ``"vllm:/path"``: see :func:`~scaffold.backends.backend_from_spec`).
    Credentials found in ``params`` (``api_key``...) are handed to the backend and
    removed from ``params``, which are recorded with every request.

    Every limit is counted on this object: give the same ``Model`` to every run (and
    every alias) that must share one budget.

    Args:
        backend: what answers the requests.
        name: concrete model name sent as ``Request.model`` (default: the backend's ``model_name``).
        params: default sampling parameters; a node's ``params`` override them.
        max_in_flight: most requests in flight at once (``None``: unlimited); a request backing off
            before a retry holds no place.
        requests_per_minute: most requests started per minute, paced evenly with one second's worth of burst.
        tokens_per_minute: most tokens (prompt + completion) per minute; estimated before sending
            (prompt characters / 4 + ``n`` × ``max_tokens``), corrected from the reported usage.
        timeout: seconds one attempt may take before it is abandoned (and retried).
        retry: retry policy for retryable backend errors (default: ``Retry()``); a 429's ``Retry-After``
            delays the retry of the request that received it (capped by ``max_retry_after``).
        throttle: the pacing that engages when the provider shows a rate limit (default: ``Throttle()``;
            see :mod:`scaffold._throttle`), shared by every run using this ``Model``.
        price: what every completion costs (a :class:`~scaffold.Price`), over what the backend reports: for a local
            engine or a self-hosted server no price map knows, so budgets and cost reports work for them too.
        clock: what the pacers, the default throttle, the retry backoff, the per-attempt ``timeout`` and a
            run's ``call_timeout`` read and wait on (default: the real monotonic clock). A test passes
            :class:`scaffold.testing.VirtualClock` to run them in virtual time; a ``throttle`` given keeps
            its own clock.

    Examples:
        >>> from scaffold.testing import ScriptedBackend
        >>> solver = Model(ScriptedBackend(lambda r: "\\boxed{4}"), max_in_flight=8, requests_per_minute=600)
        >>> solver.limit.limit, solver.rpm.per_minute
        (8, 600)
    """

    backend: Backend
    name: str | None
    params: Mapping[str, Any]
    limit: InFlightLimit | None
    """The in-flight limiter (``None`` without ``max_in_flight``)."""
    rpm: RateLimit | None
    """The requests-per-minute pacer."""
    tpm: RateLimit | None
    """The tokens-per-minute pacer."""
    throttle: Throttle
    """The pace this model's 429 answers impose (off until they show a limit), shared by every run."""
    clock: Clock
    """The clock its limits, backoff and timeouts are kept on."""

    def __init__(
        self,
        backend: Backend | str,
        name: str | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        max_in_flight: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        timeout: float | None = None,
        retry: Retry | None = None,
        throttle: Throttle | None = None,
        clock: Clock | None = None,
        price: Price | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"a timeout must be positive, got {timeout}")
        params = dict(params or {})
        secrets = {key: params.pop(key) for key in list(params) if key.lower() in SECRET_PARAMS}
        headers = params.get("extra_headers")
        if isinstance(headers, Mapping) and any(name.lower() in SECRET_HEADERS for name in headers):
            secrets["extra_headers"] = params.pop("extra_headers")
        if isinstance(backend, str):
            from scaffold.backends._registry import backend_from_spec

            backend = backend_from_spec(backend, **secrets)
        elif secrets:
            with_secrets = getattr(backend, "with_secrets", None)
            if with_secrets is None:
                raise ModelAliasError(
                    f"params carry credentials ({', '.join(sorted(secrets))}) but {type(backend).__name__} "
                    f"takes none; params are recorded, so pass credentials to the backend itself"
                )
            backend = with_secrets(**secrets)
        if not isinstance(backend, Backend):
            raise ModelAliasError(
                f"{backend!r} is not a backend: it needs a `capabilities` attribute and an async `complete`"
            )
        self.backend = backend
        self.name = name if name is not None else getattr(backend, "model_name", None)
        self.params = params
        self.max_in_flight = max_in_flight
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.timeout = timeout
        self.retry = retry if retry is not None else Retry()
        self.clock = clock = MONOTONIC if clock is None else clock
        self.limit = InFlightLimit(max_in_flight) if max_in_flight is not None else None
        self.rpm = RateLimit(requests_per_minute, clock=clock) if requests_per_minute is not None else None
        self.tpm = RateLimit(tokens_per_minute, clock=clock) if tokens_per_minute is not None else None
        self.throttle = throttle if throttle is not None else Throttle(clock=clock)
        if price is not None and not isinstance(price, Price):
            raise ModelAliasError(f"price= takes a scaffold.Price, e.g. sf.Price(input=1e-7, output=4e-7); got "
                                  f"{type(price).__name__}")
        self.price = price
        """The price every completion is charged at, over the backend's own cost (``None``: the backend's)."""
        self.engine_time = EngineTime()
        """The backend's busy time shared among this model's calls in flight (what ``Price.per_second`` charges)."""
        self._rng = random.Random(self.retry.seed)

    def __repr__(self) -> str:
        limits = [f"{key}={value!r}" for key, value in (
            ("max_in_flight", self.max_in_flight), ("requests_per_minute", self.requests_per_minute),
            ("tokens_per_minute", self.tokens_per_minute), ("timeout", self.timeout)) if value is not None]
        return f"Model({self.backend!r}, name={self.name!r}, params={self.params!r}{''.join(', ' + x for x in limits)})"

    async def complete(self, request: Request) -> Reply:
        """Send ``request`` under this model's limits, timeout and retry policy."""
        attempt, backoff = 1, 0.0
        while True:
            if backoff:  # waited without a place: a request backing off is not in flight
                await self.clock.sleep(backoff)
            limit = self.limit
            if limit is not None:
                await limit.acquire()
            try:
                # pace after taking a place: paced requests queued behind the in-flight limit would go out in bursts
                tokens = await self._wait_for_budget(request)
            except BaseException:
                if limit is not None:
                    limit.release()
                raise
            number = self.throttle.started()
            started, t0 = time.time(), time.perf_counter()
            ticket = self.engine_time.start()
            try:
                if self.timeout is None:
                    completions = await self.backend.complete(request)
                else:
                    try:
                        async with timeout(self.clock, self.timeout):
                            completions = await self.backend.complete(request)
                    except TimeoutError:
                        raise RequestTimeout(f"no answer within {self.timeout}s") from None
            except BackendError as exc:
                self._failed(exc, tokens, number)
                if not self.retry.should_retry(exc, attempt):
                    exc.attempts = attempt
                    raise
                backoff = self.retry.delay(attempt, exc, self._rng)
                attempt += 1
                continue
            finally:
                engine_seconds = self.engine_time.stop(ticket)
                if limit is not None:
                    limit.release()
            latency = time.perf_counter() - t0
            if self.tpm is not None:
                used = sum(c.usage.total_tokens for c in completions)
                if used:
                    self.tpm.adjust(used - tokens)
            if self.price is not None:
                completions = self.price.priced(completions, engine_seconds)
            return Reply(completions, attempt, started, latency)

    async def stream(self, request: Request) -> AsyncIterator[StreamItem]:
        """Stream ``request`` under this model's limits: :class:`~scaffold._types.Delta` records, then one
        :class:`~scaffold._types.Finished` (any backend: one that does not stream gives one delta per choice).

        The request holds its in-flight place and passes the pacers as :meth:`complete` does. An attempt
        that fails before its first item is retried under the same policy (and ``timeout`` bounds the wait
        for that first item); once text has been handed on, a failure is raised as it is, with ``attempts``.

        Examples:
            >>> import asyncio
            >>> from scaffold.testing import ScriptedBackend
            >>> async def deltas():
            ...     model = Model(ScriptedBackend(lambda r: "so 4"), max_in_flight=1)
            ...     return [item async for item in model.stream(Request(messages=(("user", "2+2?"),)))]
            >>> [type(item).__name__ for item in asyncio.run(deltas())]
            ['Delta', 'Finished']
        """
        attempt, backoff = 1, 0.0
        while True:
            if backoff:
                await self.clock.sleep(backoff)
            limit = self.limit
            if limit is not None:
                await limit.acquire()
            handed_on = False
            try:
                tokens = await self._wait_for_budget(request)
                number = self.throttle.started()
                ticket = self.engine_time.start()
                items = stream_completions(self.backend, request)
                try:
                    if self.timeout is None:
                        first = await anext(items)
                    else:
                        try:
                            async with timeout(self.clock, self.timeout):
                                first = await anext(items)
                        except TimeoutError:
                            raise RequestTimeout(f"no answer within {self.timeout}s") from None
                    handed_on = True
                    yield self._priced(first, ticket)
                    item = first
                    async for item in items:
                        yield self._priced(item, ticket)
                except BackendError as exc:
                    self._failed(exc, tokens, number)
                    if handed_on or not self.retry.should_retry(exc, attempt):
                        exc.attempts = attempt
                        raise
                    backoff = self.retry.delay(attempt, exc, self._rng)
                    attempt += 1
                    continue
                finally:
                    self.engine_time.stop(ticket)  # a stream left early: its share is nobody's charge
                    close = getattr(items, "aclose", None)
                    if close is not None:
                        await close()
            finally:
                if limit is not None:
                    limit.release()
            if self.tpm is not None and isinstance(item, Finished):
                used = sum(c.usage.total_tokens for c in item.completions)
                if used:
                    self.tpm.adjust(used - tokens)
            return

    def _priced(self, item: StreamItem, ticket: int) -> StreamItem:
        """A stream's item, its completions priced by :attr:`price` when there is one (``ticket``: the stream's
        :class:`~scaffold.backends._prices.EngineTime` ticket, stopped at its end)."""
        if not isinstance(item, Finished):
            return item
        seconds = self.engine_time.stop(ticket)
        if self.price is None:
            return item
        return Finished(tuple(self.price.priced(item.completions, seconds)))

    async def _wait_for_budget(self, request: Request) -> int:
        if self.throttle.rate is not None:
            await self.throttle.wait()
        if self.rpm is not None:
            await self.rpm.acquire()
        tokens = 0
        if self.tpm is not None:
            tokens = estimate_tokens(request)
            await self.tpm.acquire(tokens)
        return tokens

    def _failed(self, exc: BackendError, tokens: int, number: int) -> None:
        """Tell the throttle and the token pacer about a failed attempt."""
        if isinstance(exc, RateLimitError):
            self.throttle.rate_limited(number)
            if self.tpm is not None:
                self.tpm.adjust(-tokens)  # a refused request used none of the budget


def resolve_model(spec: Model | Backend | str | Any, alias: str) -> Model:
    """Turn what a user bound to ``alias`` into a :class:`Model`.

    Examples:
        >>> from scaffold.testing import ScriptedBackend
        >>> resolve_model(ScriptedBackend(lambda r: "hi"), "solver").backend.calls
        0
    """
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, (Backend, str)):
        return Model(spec)
    raise ModelAliasError(f"model alias {alias!r} is bound to {spec!r}, which is not a Backend, Model or model name")
