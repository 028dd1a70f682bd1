"""The native OpenAI-compatible backend: vLLM, SGLang, any server speaking OpenAI's API, and OpenAI itself.

:class:`OpenAIBackend` posts JSON straight to ``/chat/completions`` (``Request.messages``) or
``/completions`` (``Request.prompt``) over one keep-alive ``aiohttp`` session per event loop, and
reads the answer as plain JSON: no SDK objects, so a call costs the client a fraction of what the
official ``openai`` client or litellm spend (``benchmarks/backends.py`` measures both).

Same meaning as :class:`~scaffold.backends.LiteLLMBackend`:

- ``n`` goes out natively; each choice becomes its own completion, with the request's usage split
  per choice (:mod:`scaffold.backends._choices`).
- With ``request.logprobs`` the body asks for logprobs and, unless ``token_ids=False``, vLLM's
  ``return_token_ids`` (ids come back per choice; OpenAI itself is never asked).
- Retries, pacing and limits are :class:`~scaffold.backends.Model`'s: a failure is raised once,
  as a typed :class:`~scaffold._errors.BackendError` (:mod:`scaffold.backends._openai_errors`).
- Cost from the prices given, else, on OpenAI's own endpoint only, from litellm's price map when litellm is
  installed (:mod:`scaffold.backends._prices`): a server elsewhere is not priced by its model's name. An unknown
  price is ``None``, never 0. Cached prompt tokens (``prompt_tokens_details.cached_tokens``) are recorded as
  ``metadata["cached_prompt_tokens"]`` and priced at the cache price.
- Keys never appear in errors, reprs or records (:mod:`scaffold._secrets`).

``stream(request)`` sends ``stream: true`` with ``include_usage`` and yields
:class:`~scaffold._types.Delta` records as the server-sent events arrive, then the same
completions as ``complete`` (:class:`~scaffold._types.Finished`).

Needs ``aiohttp`` (the ``api`` extra).
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from scaffold._errors import AuthenticationError, BackendError, BadRequestError, ServerError
from scaffold._messages import call_from_dict, message_dict
from scaffold._secrets import MaskedKey, environment_secrets, redact
from scaffold._types import Completion, Delta, Finished, Request, StreamItem, ToolCall
from scaffold.backends._base import Capabilities
from scaffold.backends._choices import Choice, cached_prompt_tokens, completions_from
from scaffold.backends._openai_errors import error_for_status, error_message, is_context_error, transport_error
from scaffold.backends._prices import cache_read_price, price_per_token
from scaffold.backends._streaming import StreamAssembler

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where requests go without a ``base_url`` (or ``$OPENAI_BASE_URL``)."""

CLIENT_PARAMS = frozenset({"timeout", "request_timeout", "num_retries", "max_retries", "api_base", "base_url",
                           "api_key", "stream", "stream_options", "extra_headers", "extra_body"})
"""Request parameters that configure a client, not the generation: never copied into the body as is."""

_UNSET: Any = object()


OPENAI_COMPATIBLE = ("hosted_vllm", "openai", "custom_openai", "text-completion-openai")
"""litellm provider prefixes that mean an OpenAI-compatible server: stripped from the name sent."""

VLLM_DEFAULT_BASE = "http://127.0.0.1:8000/v1"
"""Where ``hosted_vllm/NAME`` without an ``api_base`` (or ``$HOSTED_VLLM_API_BASE``) goes: ``vllm serve``'s default."""


class OpenAIBackend:
    """A model on an OpenAI-compatible server (``model`` is sent as is).

    ``base_url`` is the API root (``http://127.0.0.1:8000/v1`` for ``vllm serve``); without one,
    ``$OPENAI_BASE_URL`` or OpenAI's own API. The key is ``api_key``, else the variable
    ``api_key_env`` names (an error when it is unset), else ``default_key_env`` when set — by
    default ``OPENAI_API_KEY`` for OpenAI's own API and nothing for other servers, so an OpenAI key
    is never sent elsewhere unless asked.

    Args:
        model: the model name the server knows (``"gpt-4o-mini"``, vLLM's ``--served-model-name``).
        supports_n: the server takes ``n`` (vLLM, SGLang, OpenAI do); ``False`` fans samples out.
        max_n: largest ``n`` per request.
        token_ids: ask for vLLM's ``return_token_ids`` with logprobs (default: any server but OpenAI's).
        input_cost_per_token: dollars per prompt token; without it, litellm's price map.
        output_cost_per_token: dollars per completion token; without it, litellm's price map.
        name: recorded as the model's name and looked up in the price map (default: ``model``).
        headers: sent with every request; ``extra_body``: merged into every request body.
        timeout: seconds without a byte from the server before an attempt fails (``Model`` has its own).
        max_connections: open connections per event loop (``Model.max_in_flight`` limits requests).

    Examples:
        >>> backend = OpenAIBackend("tiny", base_url="http://127.0.0.1:8000/v1")
        >>> backend.capabilities.supports_n, backend.capabilities.streams, backend
        (True, True, OpenAIBackend('tiny', base_url='http://127.0.0.1:8000/v1'))
        >>> import asyncio
        >>> from scaffold.testing import OpenAIServer
        >>> async def ask(backend):
        ...     try:
        ...         return await backend.complete(Request(messages=(("user", "2+2?"),), n=2))
        ...     finally:
        ...         await backend.release_loop()  # run_sync / map_sync do this for you
        >>> with OpenAIServer(policy="the answer is 4") as server:
        ...     completions = asyncio.run(ask(OpenAIBackend("m", base_url=server.base_url)))
        >>> [(c.text, c.usage.completion_tokens, c.finish_reason) for c in completions]
        [('the answer is 4', 7, 'stop'), ('the answer is 4', 7, 'stop')]
    """

    provider = "openai"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry)."""

    @classmethod
    def from_spec(cls, model: str, options: Mapping[str, Any]) -> OpenAIBackend:
        """The backend for a litellm-style name: ``hosted_vllm/NAME`` sends ``NAME`` (to ``api_base``,
        ``$HOSTED_VLLM_API_BASE`` or ``vllm serve``'s default address, key from ``$HOSTED_VLLM_API_KEY`` if set),
        ``openai/NAME`` sends ``NAME`` (key from ``$OPENAI_API_KEY`` if set); the name as given is what is
        recorded and priced.

        Examples:
            >>> OpenAIBackend.from_spec("hosted_vllm/tiny", {})
            OpenAIBackend('tiny', base_url='http://127.0.0.1:8000/v1')
        """
        options = dict(options)
        api_base, base_url = options.pop("api_base", None), options.pop("base_url", None)
        base_url = api_base or base_url
        prefix, slash, rest = model.partition("/")
        sent, defaults = model, {}
        if slash and prefix in OPENAI_COMPATIBLE:
            sent = rest
            defaults = {"name": model, "default_key_env": "OPENAI_API_KEY"}
            if prefix == "hosted_vllm":
                base_url = base_url or os.environ.get("HOSTED_VLLM_API_BASE") or VLLM_DEFAULT_BASE
                defaults["default_key_env"] = "HOSTED_VLLM_API_KEY"
        return cls(sent, base_url=base_url, **{**defaults, **options})
    settings = frozenset({"api_base", "api_key_env", "supports_n", "max_n", "token_ids", "input_cost_per_token",
                          "output_cost_per_token", "price_by_name", "headers", "extra_body"})
    """The keys a registry entry (``models.toml``, a server config) may give this backend."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        default_key_env: str | None = _UNSET,
        supports_n: bool = True,
        max_n: int | None = None,
        token_ids: bool | None = None,
        input_cost_per_token: float | None = None,
        output_cost_per_token: float | None = None,
        price_by_name: bool | None = None,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float | None = 600.0,
        max_connections: int = 1000,
    ) -> None:
        official = base_url is None and not os.environ.get("OPENAI_BASE_URL")
        self.model = model
        """The model name sent in every request."""
        self.model_name = name if name is not None else model
        """The name recorded for this model (``Model.name``) and priced."""
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL).rstrip("/")
        self._api_key = None if api_key is None else MaskedKey(api_key)
        self.api_key_env = api_key_env
        if default_key_env is _UNSET:
            default_key_env = "OPENAI_API_KEY" if official else None
        self.default_key_env = default_key_env
        """The variable read for a key when neither ``api_key`` nor ``api_key_env`` is given (may be unset)."""
        self.token_ids = (self.base_url != OPENAI_BASE_URL) if token_ids is None else token_ids
        self.capabilities = Capabilities(supports_n=supports_n, max_n=max_n, returns_token_ids=self.token_ids,
                                         json_schema=True,
                                         streams=True)
        self.headers = dict(headers or {})
        self._secret_headers: dict[str, str] = {}
        """Credential headers handed over by ``with_secrets`` (shown as ``'***'``)."""
        self.extra_body = dict(extra_body or {})
        self.timeout = timeout
        self.max_connections = max_connections
        self._given_prices = (input_cost_per_token, output_cost_per_token)
        self.price_by_name = self.base_url == OPENAI_BASE_URL if price_by_name is None else bool(price_by_name)
        """Price the model by its name from litellm's map (when no prices are given): on OpenAI's own endpoint by
        default; ``price_by_name=True`` for a gateway that serves OpenAI's models at OpenAI's prices."""
        self._prices: tuple[float, float] | None | Any = _UNSET
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.model!r}, base_url={self.base_url!r})"

    def with_secrets(
        self, api_key: str | None = None, extra_headers: Mapping[str, str] | None = None, **others: Any
    ) -> OpenAIBackend:
        """A copy that sends ``api_key`` and secret ``extra_headers`` (how :class:`~scaffold.backends.Model`
        hands over credentials found in recorded parameters)."""
        if others:
            raise BadRequestError(f"unknown credential parameter(s): {', '.join(sorted(others))}")
        copy = object.__new__(OpenAIBackend)
        copy.__dict__.update(self.__dict__)
        copy._api_key = MaskedKey(api_key) if api_key is not None else self._api_key
        copy._secret_headers = {**self._secret_headers, **{k: MaskedKey(v) for k, v in (extra_headers or {}).items()}}
        copy._sessions = weakref.WeakKeyDictionary()
        return copy

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (a cluster sends backends to its workers): the per-loop HTTP sessions stay behind."""
        state = dict(self.__dict__)
        state["_sessions"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # the "not given" sentinel does not survive pickling as itself: restore this process's one
        self.__dict__.update({key: _UNSET if type(value) is object else value for key, value in state.items()})
        self._sessions = weakref.WeakKeyDictionary()

    def check_credentials(self) -> None:
        """Raise :class:`~scaffold._errors.AuthenticationError` naming the missing variable, if a key is required.

        Nothing is sent. A key is required when ``api_key_env`` is given, or for OpenAI's own API.
        """
        self._key()

    async def release_loop(self) -> None:
        """Close the connections this backend opened on the running event loop.

        ``run_sync`` and ``map_sync`` call this before closing their loop; call it yourself before
        closing a loop of your own (or the sockets outlive it).
        """
        try:
            session = self._sessions.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            return
        if session is not None:
            await session.close()

    # -- one call ---------------------------------------------------------------------------------
    async def complete(self, request: Request) -> list[Completion]:
        """Send ``request`` once; any failure is a typed :class:`~scaffold._errors.BackendError`."""
        path, body = self._body(request, stream=False)
        session, headers = self._session(), self._request_headers(request)
        error: BackendError | None = None
        try:
            async with session.post(self.base_url + path, data=body, headers=headers) as response:
                raw = await response.read()
                status = response.status
                if status >= 400:
                    error = error_for_status(status, response.headers, raw, self.model)
                else:
                    answer = json.loads(raw)
        except Exception as exc:
            error = transport_error(exc, self.model)
        if error is not None:  # raised outside the handler: nothing quoting a key rides along as __context__
            raise self._redacted(error)
        try:
            return self._completions(answer, request)
        except BackendError as exc:
            error = exc
        except Exception as exc:
            error = ServerError(f"{self.model}: could not read the answer: {type(exc).__name__}: {exc}")
        raise self._redacted(error)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The embeddings of ``texts`` from the server's ``/embeddings`` (one vector per text, in order); any failure
        is a typed :class:`~scaffold._errors.BackendError`."""
        body = json.dumps({"model": self.model, "input": list(texts)}).encode()
        session = self._session()
        error: BackendError | None = None
        try:
            async with session.post(self.base_url + "/embeddings", data=body, headers=None) as response:
                raw = await response.read()
                if response.status >= 400:
                    error = error_for_status(response.status, response.headers, raw, self.model)
                else:
                    answer = json.loads(raw)
        except Exception as exc:
            error = transport_error(exc, self.model)
        if error is not None:
            raise self._redacted(error)
        try:
            rows = sorted(answer["data"], key=lambda row: row.get("index", 0))
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        except Exception as exc:
            raise self._redacted(ServerError(f"{self.model}: could not read the embeddings: {exc}")) from None
        if len(vectors) != len(texts):
            raise self._redacted(ServerError(f"{self.model} returned {len(vectors)} embeddings for {len(texts)} texts"))
        return vectors

    async def stream(self, request: Request) -> AsyncIterator[StreamItem]:
        """Stream ``request``: :class:`~scaffold._types.Delta` records as they arrive, then one ``Finished``."""
        path, body = self._body(request, stream=True)
        session, headers = self._session(), self._request_headers(request)
        parts, usage, model, done = StreamAssembler(request.n), None, None, False
        text_endpoint = request.prompt is not None and not request.messages
        error: BackendError | None = None
        whole: list[Completion] | None = None
        try:
            async with session.post(self.base_url + path, data=body, headers=headers) as response:
                if response.status >= 400:
                    raw = await response.read()
                    error = error_for_status(response.status, response.headers, raw, self.model)
                elif "event-stream" not in response.headers.get("Content-Type", "text/event-stream"):
                    whole = self._completions(json.loads(await response.read()), request)  # `stream` ignored
                else:
                    async for event in _events(response.content):
                        if done:  # read on to the end, so the connection can be reused
                            continue
                        if event == "[DONE]":
                            done = True
                            continue
                        chunk = json.loads(event)
                        if not isinstance(chunk, dict):
                            raise ServerError(f"{self.model}: a stream event is not an object: {event[:200]}")
                        if chunk.get("error") is not None:
                            error = _stream_error(chunk, self.model)
                            break
                        model = chunk.get("model") or model
                        usage = chunk.get("usage") or usage
                        for delta in _chunk_deltas(parts, chunk, text_endpoint):
                            yield delta
        except Exception as exc:
            error = transport_error(exc, self.model)
        if error is None and whole is not None:
            for index, completion in enumerate(whole):
                yield Delta(index, completion.text, completion.token_ids, completion.logprobs)
            yield Finished(tuple(whole))
            return
        if error is None and not done:
            error = ServerError(f"{self.model}: the stream ended before [DONE]")
        if error is not None:
            raise self._redacted(error)
        prompt_tokens = int((usage or {}).get("prompt_tokens") or 0)
        completion_tokens = int((usage or {}).get("completion_tokens") or 0) if usage else parts.completion_tokens()
        completions = completions_from(parts.choices(), prompt_tokens=prompt_tokens,
                                       completion_tokens=completion_tokens, model=model or self.model,
                                       prices=self._price() if usage else None, logprobs=request.logprobs,
                                       cached_tokens=cached_prompt_tokens(usage or {}),
                                       cache_price=self._cache_price())
        yield Finished(tuple(completions))

    # -- the request ------------------------------------------------------------------------------
    def _body(self, request: Request, *, stream: bool) -> tuple[str, bytes]:
        text = request.prompt is not None and not request.messages
        body: dict[str, Any] = {"model": self.model}
        if text:
            body["prompt"] = request.prompt
        else:
            body["messages"] = [message_dict(m) for m in request.messages]
            if request.tools:
                body["tools"] = list(request.tools)
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        params = request.params
        for key, value in params.items():
            if key not in CLIENT_PARAMS:
                body[key] = value
        if request.n > 1:
            body["n"] = request.n
        if request.seed is not None and "seed" not in params:
            body["seed"] = request.seed
        if request.logprobs:
            body["logprobs"] = 1 if text else True
            if self.token_ids:
                body["return_token_ids"] = True
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        extra = params.get("extra_body")
        if self.extra_body or extra:
            body.update(self.extra_body)
            if isinstance(extra, Mapping):
                body.update(extra)
        return ("/completions" if text else "/chat/completions"), json.dumps(body).encode()

    def _request_headers(self, request: Request) -> Mapping[str, str] | None:
        extra = request.params.get("extra_headers")
        return dict(extra) if isinstance(extra, Mapping) and extra else None

    def _key(self) -> str | None:
        if self._api_key is not None:
            return self._api_key
        if self.api_key_env is not None:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise AuthenticationError(f"{self.model_name}: environment variable {self.api_key_env} is not set")
            return value
        if self.default_key_env is not None:
            value = os.environ.get(self.default_key_env)
            if value:
                return value
            if self.base_url == OPENAI_BASE_URL:
                raise AuthenticationError(f"{self.model_name}: no API key; set {self.default_key_env} in the "
                                          f"environment (or give the backend api_key / api_key_env)")
        return None

    def _session(self) -> Any:
        """This event loop's keep-alive session (sessions are bound to the loop that made them)."""
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            try:
                import aiohttp
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ImportError("OpenAIBackend needs aiohttp: pip install 'scaffold-sdk[api]'") from exc
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            key = self._key()
            if key is not None:
                headers["Authorization"] = MaskedKey(f"Bearer {key}")
            for name, value in {**self.headers, **self._secret_headers}.items():  # given headers win, any case
                for same in [h for h in headers if h.lower() == name.lower()]:
                    del headers[same]
                headers[name] = value
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout)
            connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300)
            session = aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout,
                                            read_bufsize=2**20, max_line_size=2**20, max_field_size=2**16)
            self._sessions[loop] = session
        return session

    # -- the answer -------------------------------------------------------------------------------
    def _completions(self, answer: Any, request: Request) -> list[Completion]:
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            raise ServerError(f"{self.model}: the answer has no choices: {str(answer)[:200]}")
        raw_choices = sorted(answer["choices"], key=lambda choice: choice.get("index", 0))
        if len(raw_choices) != request.n:
            raise ServerError(f"{self.model} returned {len(raw_choices)} choices for n={request.n}")
        text = request.prompt is not None and not request.messages
        usage = answer.get("usage") or {}
        return completions_from(
            [_choice(choice, text) for choice in raw_choices],
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            model=answer.get("model") or self.model,
            prices=self._price() if usage else None,
            logprobs=request.logprobs,
            cached_tokens=cached_prompt_tokens(usage), cache_price=self._cache_price(),
        )

    def _price(self) -> tuple[float, float] | None:
        """Dollars per input and output token: the prices given, else (on OpenAI's own endpoint only) the price
        map's; a server elsewhere may call its model anything, so its cost is unknown unless given."""
        if self._prices is _UNSET:
            given = self._given_prices
            if given[0] is not None and given[1] is not None:
                self._prices = (float(given[0]), float(given[1]))
            elif self.price_by_name:
                self._prices = price_per_token(self.model_name)
            else:
                self._prices = None
        prices: tuple[float, float] | None = self._prices
        return prices

    def _cache_price(self) -> float | None:
        """Dollars per cached prompt token: the map's cache price on OpenAI's own endpoint, else the input price."""
        prices = self._price()
        if prices is None:
            return None
        if self.price_by_name and self._given_prices[0] is None:
            cached = cache_read_price(self.model_name)
            if cached is not None:
                return cached
        return prices[0]

    def _redacted(self, error: BackendError) -> BackendError:
        secrets = [s for s in (self._api_key, os.environ.get(self.api_key_env or "") or None,
                               *self._secret_headers.values()) if s]
        message = redact(str(error), secrets + environment_secrets())
        if message != str(error):
            error.args = (message,)
        return error


def _choice(choice: Mapping[str, Any], text_endpoint: bool) -> Choice:
    """One choice of a (non-streamed) answer."""
    calls: tuple[ToolCall, ...] = ()
    if text_endpoint:
        text = choice.get("text")
    else:
        message = choice.get("message") or {}
        text = message.get("content")
        raw_calls = message.get("tool_calls")
        if raw_calls:
            if not isinstance(raw_calls, list):
                raise ServerError(f"the answer's tool_calls is not a list: {str(raw_calls)[:200]}")
            calls = tuple(call_from_dict(call, i) for i, call in enumerate(raw_calls))
    ids = choice.get("token_ids")
    return Choice(text or "", tuple(ids) if ids is not None else None, _logprobs(choice.get("logprobs")),
                  choice.get("finish_reason"), calls)


def _chunk_deltas(parts: StreamAssembler, chunk: Mapping[str, Any], text_endpoint: bool) -> list[Delta]:
    """Add one stream chunk's choices (text, tokens, tool-call pieces) to ``parts``; the deltas to hand on."""
    deltas = []
    for choice in chunk.get("choices") or ():
        delta = parts.add(*_chunk_choice(choice, text_endpoint))
        calls = None if text_endpoint else (choice.get("delta") or {}).get("tool_calls")
        if calls:
            parts.add_tool_calls(int(choice.get("index", 0)), calls)
        if delta is not None:
            deltas.append(delta)
    return deltas


def _chunk_choice(choice: Mapping[str, Any], text_endpoint: bool) -> tuple[int, str | None, Any, Any, str | None]:
    """``(index, text, token_ids, logprobs, finish_reason)`` of one choice of a stream chunk."""
    text = choice.get("text") if text_endpoint else (choice.get("delta") or {}).get("content")
    return (int(choice.get("index", 0)), text, choice.get("token_ids"), _logprobs(choice.get("logprobs")),
            choice.get("finish_reason"))


def _logprobs(raw: Any) -> tuple[float, ...] | None:
    """Sampled-token logprobs: chat's ``content[].logprob`` or completions' ``token_logprobs``."""
    if not isinstance(raw, Mapping):
        return None
    content = raw.get("content")
    if content is not None:
        return tuple(float(entry["logprob"]) for entry in content)
    values = raw.get("token_logprobs")
    return tuple(float(x) for x in values) if values is not None else None


def _stream_error(chunk: Mapping[str, Any], where: str) -> BackendError:
    """An error event in the middle of a stream (vLLM sends these): the status it names, else a server error."""
    message, code = error_message(chunk)
    inner = chunk.get("error")
    status = inner.get("code") if isinstance(inner, Mapping) else None
    if isinstance(status, int) and status >= 400:
        return error_for_status(status, {}, json.dumps(chunk).encode(), where)
    if is_context_error(message, code):
        return error_for_status(400, {}, json.dumps(chunk).encode(), where)
    return ServerError(f"{where}: error in the stream: {message}")


async def _events(content: Any) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (data lines joined; comments and other fields skipped)."""
    data: list[str] = []
    async for raw in content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)
