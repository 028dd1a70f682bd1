"""The litellm backend: every API provider (OpenAI, Anthropic, Gemini, Together...) and any
OpenAI-compatible server, vLLM's included, through one async call.

- ``n`` goes out natively where litellm says the provider takes it; otherwise the backend
  declares ``supports_n=False`` and the executor sends one request per sample.
- Retries, limits and timeouts are :class:`~scaffold.backends.Model`'s job: litellm's own
  retries are switched off, and its errors are mapped to typed
  :class:`~scaffold._errors.BackendError` subclasses that say whether to retry
  (:mod:`scaffold.backends._litellm_errors`).
- Token ids and logprobs come back when asked: vLLM's per-choice ``token_ids`` arrive in
  litellm's ``provider_specific_fields``.
- ``stream(request)`` streams with litellm's ``stream=True`` (:mod:`scaffold.backends._litellm_stream`).
- Cost comes from prices given here, or (for a provider's own endpoint: no ``api_base``) from litellm's price
  map, cached prompt tokens included; an unknown price is
  recorded as ``None``, never as 0.
- API keys come from the environment (litellm's provider variables, or ``api_key_env``) or
  from ``api_key``; they are redacted from every error message (:mod:`scaffold._secrets`) and
  never put in requests.

litellm is imported on first use (it takes seconds), with its price map read locally.
"""

from __future__ import annotations

import asyncio
import os
import warnings
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any

from scaffold._errors import AuthenticationError, BackendError, BadRequestError, ServerError
from scaffold._messages import call_from_dict, message_dict
from scaffold._secrets import MaskedKey, environment_secrets, redact
from scaffold._types import Completion, Request, StreamItem, ToolCall
from scaffold.backends._base import Capabilities
from scaffold.backends._choices import Choice, cached_prompt_tokens, completions_from
from scaffold.backends._litellm_errors import typed_error

NATIVE_N_PROVIDERS = frozenset({"openai", "hosted_vllm", "azure", "text-completion-openai", "custom_openai"})
"""Providers whose ``n`` is sent as is (litellm's supported-parameter list is also consulted)."""

TOKEN_ID_PROVIDERS = frozenset({"hosted_vllm"})
"""Providers asked for vLLM's ``return_token_ids`` when a request wants logprobs."""

def import_litellm() -> Any:
    """Import litellm quietly, with its bundled price map (no network at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the litellm backend needs litellm: pip install 'scaffold-sdk[api]'") from exc
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    # litellm silences pydantic's `ReadOnly` warning (raised while it builds schemas lazily, during
    # calls) with a filter set once at import; an enclosing warnings.catch_warnings() (pytest wraps
    # each test in one) discards it, and the calls then fail under -W error. Keep it in front.
    warnings.filterwarnings("ignore", message=".*`ReadOnly` qualifier.*", category=UserWarning)
    # litellm's streamed text completions read `model_fields` off an instance (pydantic >= 2.11
    # deprecates that); under -W error the warning becomes an exception that litellm reports as a failed call
    warnings.filterwarnings("ignore", message="Accessing the 'model_(computed_)?fields' attribute on the instance",
                            category=DeprecationWarning)
    return litellm


class LiteLLMBackend:
    """Any litellm model (``"openai/gpt-4o-mini"``, ``"anthropic/claude-..."``, ``"hosted_vllm/NAME"``...).

    Strings and registry entries choose :class:`~scaffold.backends.OpenAIBackend` for OpenAI-compatible
    servers (``hosted_vllm/NAME``, anything with an ``api_base``); building this class, or the spec
    ``litellm:NAME``, keeps litellm.

    Examples:
        >>> backend = LiteLLMBackend("hosted_vllm/tiny", api_base="http://127.0.0.1:8000/v1")
        >>> backend.capabilities.supports_n, backend.capabilities.returns_token_ids
        (True, True)
    """

    provider = "litellm"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry; a model named ``provider/...`` says its own)."""
    settings = frozenset({"api_base", "api_key_env", "supports_n", "max_n", "token_ids", "input_cost_per_token",
                          "output_cost_per_token", "price_by_name", "extra"})
    """The keys a registry entry (``models.toml``, a server config) may give this backend."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        supports_n: bool | None = None,
        max_n: int | None = None,
        token_ids: bool | None = None,
        input_cost_per_token: float | None = None,
        output_cost_per_token: float | None = None,
        extra: Mapping[str, Any] | None = None,
        price_by_name: bool | None = None,
    ) -> None:
        litellm = import_litellm()
        self.model_name = model
        """The litellm model string."""
        try:
            _, self.provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
        except Exception as exc:
            raise BadRequestError(f"litellm does not know the provider of model {model!r}: {exc}") from None
        self.api_base = api_base
        self._api_key = api_key
        self.api_key_env = api_key_env
        self._environment_checked = False
        self._text_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self.extra = dict(extra or {})
        """Extra keyword arguments for every litellm call (``extra_headers``, ``api_version``...)."""
        self.prices = (input_cost_per_token, output_cost_per_token)
        self.price_by_name = api_base is None if price_by_name is None else bool(price_by_name)
        """Price the model by its name from litellm's map (when no prices are given): for a provider's own endpoint
        (no ``api_base``) by default; ``True`` for a gateway serving the provider's models at its prices."""
        try:
            supported = set(litellm.get_supported_openai_params(model=model, custom_llm_provider=self.provider) or ())
        except Exception:
            supported = set()
        self.supported_params = frozenset(supported)
        if supports_n is None:
            supports_n = self.provider in NATIVE_N_PROVIDERS and ("n" in supported or not supported)
        self.token_ids = self.provider in TOKEN_ID_PROVIDERS if token_ids is None else token_ids
        self.capabilities = Capabilities(supports_n=supports_n, max_n=max_n, returns_token_ids=self.token_ids,
                                         json_schema=True,
                                         streams=True)

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (a cluster sends backends to its workers): the per-loop clients stay behind."""
        state = dict(self.__dict__)
        state["_text_clients"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._text_clients = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        base = f", api_base={self.api_base!r}" if self.api_base else ""
        return f"LiteLLMBackend({self.model_name!r}{base})"

    def with_secrets(
        self, api_key: str | None = None, extra_headers: Mapping[str, str] | None = None, **others: Any
    ) -> LiteLLMBackend:
        """A copy that sends ``api_key`` and secret ``extra_headers`` (how :class:`~scaffold.backends.Model`
        hands over credentials found in recorded parameters)."""
        if others:
            raise BadRequestError(f"unknown credential parameter(s): {', '.join(sorted(others))}")
        copy = object.__new__(LiteLLMBackend)
        copy.__dict__.update(self.__dict__)
        copy._api_key = api_key if api_key is not None else self._api_key
        copy._text_clients = weakref.WeakKeyDictionary()
        if extra_headers:
            copy.extra = {**self.extra, "extra_headers": {**self.extra.get("extra_headers", {}), **extra_headers}}
        return copy

    async def release_loop(self) -> None:
        """Close the HTTP clients litellm opened on the running event loop, after its logging drained.

        ``run_sync`` and ``map_sync`` call this before closing their loop. In async code that
        keeps one loop for the program's life there is nothing to do; call it before closing
        a loop of your own to avoid unclosed-connection warnings.
        """
        try:
            client = self._text_clients.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            client = None
        if client is not None:
            await client.close()
        await release_litellm_loop()

    def _text_client(self, kwargs: Mapping[str, Any]) -> Any:
        """An OpenAI client for text completions on this loop (litellm leaks the one it makes per call)."""
        if self.provider not in NATIVE_N_PROVIDERS or self.api_base is None:
            return None
        loop = asyncio.get_running_loop()
        client = self._text_clients.get(loop)
        if client is None:
            import openai

            client = openai.AsyncOpenAI(base_url=self.api_base, api_key=kwargs.get("api_key") or "none", max_retries=0)
            self._text_clients[loop] = client
        return client

    # -- one call ---------------------------------------------------------------------------------
    async def _send(self, litellm: Any, request: Request, kwargs: dict[str, Any]) -> Any:
        """One litellm call for ``request`` (streamed if ``kwargs`` says so): the text endpoint for a raw
        prompt, else chat."""
        if request.prompt is not None and not request.messages:
            client = self._text_client(kwargs)
            if client is not None:
                kwargs["client"] = client
            return await litellm.atext_completion(prompt=request.prompt, **kwargs)
        messages = [message_dict(m) for m in request.messages]
        return await litellm.acompletion(messages=messages, **kwargs)

    async def complete(self, request: Request) -> list[Completion]:
        """Send ``request`` once; map any failure to a typed :class:`BackendError`."""
        litellm = import_litellm()
        kwargs = self._kwargs(request)
        error: BackendError | None = None
        try:
            response = await self._send(litellm, request, kwargs)
        except Exception as exc:
            error = typed_error(litellm, exc, self._redact(
                f"{self.model_name}: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"))
        if error is not None:  # raised outside the handler: the original may quote the key, so no __context__
            raise error
        try:
            return self._completions(response, request)
        except BackendError:
            raise
        except Exception as exc:
            error = ServerError(self._redact(f"could not read the response of {self.model_name}: {exc!r}"))
        raise error

    def stream(self, request: Request) -> AsyncIterator[StreamItem]:
        """Stream ``request`` (litellm's ``stream=True``): :class:`~scaffold._types.Delta` records, then one
        :class:`~scaffold._types.Finished` (:mod:`scaffold.backends._litellm_stream`)."""
        from scaffold.backends._litellm_stream import stream_litellm

        return stream_litellm(self, request, import_litellm)

    def check_credentials(self) -> None:
        """Raise :class:`~scaffold._errors.AuthenticationError` naming the missing environment variable, if any.

        Nothing is sent: this checks ``api_key_env`` or, without one, the variables litellm
        expects for the provider (``OPENAI_API_KEY``...); a model with an ``api_base`` (a local
        server) needs none. Calls check the same on their own; this lets a command fail first.
        """
        self._api_key_value()

    def _api_key_value(self) -> str | None:
        if self._api_key is not None:
            return self._api_key
        if self.api_key_env is not None:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise AuthenticationError(f"{self.model_name}: environment variable {self.api_key_env} is not set")
            return value
        if not self._environment_checked:
            try:
                found = import_litellm().validate_environment(model=self.model_name, api_base=self.api_base)
            except Exception:
                found = {}
            missing = found.get("missing_keys") or []
            if missing and self.api_base is None:
                raise AuthenticationError(
                    f"{self.model_name}: no API key; set {' and '.join(missing)} in the environment "
                    f"(or give the backend api_key / api_key_env)"
                )
            self._environment_checked = True
        return None

    def _kwargs(self, request: Request) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model_name, **self.extra, **request.params}
        kwargs.update(num_retries=0, max_retries=0)  # Model owns retries
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        key = self._api_key_value()
        if key is not None:
            kwargs["api_key"] = MaskedKey(key)
        if request.n > 1:
            kwargs["n"] = request.n
        if request.tools:
            kwargs["tools"] = list(request.tools)
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
        if request.seed is not None and "seed" not in kwargs and "seed" in self.supported_params:
            kwargs["seed"] = request.seed
        if request.logprobs:
            kwargs["logprobs"] = True if request.messages else 1
            if self.token_ids:
                extra_body = dict(kwargs.get("extra_body") or {})
                extra_body["return_token_ids"] = True
                kwargs["extra_body"] = extra_body
        return kwargs

    # -- reading the response ---------------------------------------------------------------------
    def _completions(self, response: Any, request: Request) -> list[Completion]:
        choices = list(response.choices)
        if len(choices) != request.n:
            raise ServerError(f"{self.model_name} returned {len(choices)} choices for n={request.n}")
        usage = getattr(response, "usage", None)
        prices = self.token_prices() if usage is not None else None
        return completions_from(
            [Choice(*self._choice(choice), _tool_calls(choice)) for choice in choices],
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            model=getattr(response, "model", None) or self.model_name, prices=prices, logprobs=request.logprobs,
            cached_tokens=cached_prompt_tokens(usage) if usage is not None else 0,
            cache_price=self.cache_token_price() if prices else None)

    @staticmethod
    def _choice(choice: Any) -> tuple[str, tuple[int, ...] | None, tuple[float, ...] | None, str | None]:
        message = getattr(choice, "message", None)
        text = (message.content if message is not None else getattr(choice, "text", None)) or ""
        ids = None
        for holder in (choice, message):
            fields = getattr(holder, "provider_specific_fields", None) or {}
            found = fields.get("token_ids") if isinstance(fields, dict) else None
            if found is None:
                found = getattr(holder, "token_ids", None)
            if found is not None:
                ids = tuple(int(i) for i in found)
                break
        logprobs = None
        raw = getattr(choice, "logprobs", None)
        if raw is not None:
            if isinstance(raw, dict):
                content, token_logprobs = raw.get("content"), raw.get("token_logprobs")
            else:
                content, token_logprobs = getattr(raw, "content", None), getattr(raw, "token_logprobs", None)
            if content is not None:
                logprobs = tuple(float(e["logprob"] if isinstance(e, dict) else e.logprob) for e in content)
            elif token_logprobs is not None:
                logprobs = tuple(float(x) for x in token_logprobs)
        return text, ids, logprobs, getattr(choice, "finish_reason", None)

    def token_prices(self) -> tuple[float, float] | None:
        """Dollars per input and output token: the prices given, else litellm's map for a provider's own endpoint
        (``price_by_name``), else ``None`` (unknown, never 0: a custom ``api_base`` is not priced by its name)."""
        given_in, given_out = self.prices
        if given_in is not None and given_out is not None:
            return float(given_in), float(given_out)
        if not self.price_by_name:
            return None
        try:
            info = import_litellm().get_model_info(self.model_name)
            return float(info["input_cost_per_token"]), float(info["output_cost_per_token"])
        except Exception:  # not in the price map: unknown, not free
            return None

    def cache_token_price(self) -> float | None:
        """Dollars per cached prompt token: the provider's cache price from litellm's map for its own endpoint,
        else ``None`` (cached tokens are charged as input)."""
        if None not in self.prices or not self.price_by_name:
            return None
        try:
            found = import_litellm().get_model_info(self.model_name).get("cache_read_input_token_cost")
            return None if found is None else float(found)
        except Exception:
            return None

    # -- errors -----------------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        secrets = [s for s in (self._api_key, os.environ.get(self.api_key_env or "") or None) if s]
        return redact(text, secrets + environment_secrets())  # providers' own variables too (GEMINI_API_KEY...)

async def release_litellm_loop() -> None:
    """Drain litellm's logging queue and close its clients cached for the running loop.

    litellm caches one HTTP client per event loop and keeps a logging queue bound to a
    loop; a loop that closes with them open leaks sockets (``ResourceWarning``) and makes
    litellm carry stale logging tasks onto the next loop. This touches litellm internals,
    so every step is best-effort.
    """
    litellm = import_litellm()
    try:
        from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

        for _ in range(3):  # success logs are handed over by tasks spawned per call: let them run first
            await asyncio.sleep(0)
        await GLOBAL_LOGGING_WORKER.flush()
        await GLOBAL_LOGGING_WORKER.stop()
    except Exception:
        pass
    try:
        from litellm.caching.evicted_client_closer import running_loop_token

        token = running_loop_token()
        cache = litellm.in_memory_llm_clients_cache
        entries = getattr(cache, "cache_dict", {})
    except Exception:
        return
    suffix = f"-{token}"
    for key in [k for k in list(entries) if isinstance(k, str) and k.endswith(suffix)]:
        client = entries.pop(key, None)
        getattr(cache, "ttl_dict", {}).pop(key, None)
        for name in ("aclose", "close"):
            close = getattr(client, name, None)
            if close is None:
                continue
            try:
                outcome = close()
                if hasattr(outcome, "__await__"):
                    await outcome
                break
            except Exception:
                continue



def _tool_calls(choice: Any) -> tuple[ToolCall, ...]:
    """The tool calls of one litellm choice (its message's ``tool_calls``, SDK objects or dicts)."""
    message = getattr(choice, "message", None)
    raw = getattr(message, "tool_calls", None) if message is not None else None
    if not raw:
        return ()
    return tuple(call_from_dict(call, i) for i, call in enumerate(raw))
