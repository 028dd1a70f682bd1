"""The native OpenAI-compatible backend: keys, connections, and which backend strings and registry entries choose.

Keys reach the server and nothing else (records, logs, reprs, errors, chained errors); an OpenAI
key goes only where it is asked for; one keep-alive session per event loop, several loops (threads)
sharing one Model; ``hosted_vllm/`` and ``api_base`` specs go native, providers' own APIs stay on
litellm, and ``litellm:`` / ``backend = "litellm"`` force it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from collections.abc import Iterator

import pytest
from helpers import peak_in_flight
from openai_helpers import (
    FAST,
    KEY,
    QUESTION,
    backend_for,
    collect_garbage_after,  # noqa: F401  (an autouse fixture)
    complete,
    failure,
    numbered,
    run,
    sample_then_aggregate,
)

import scaffold as sf
import scaffold.testing._server as server_module
from scaffold.backends import Retry
from scaffold.testing._fake_answers import Refusal, error_response
from scaffold.testing._server import Fault, OpenAIServer


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A local OpenAI-compatible server that checks the API key."""
    with OpenAIServer(policy=numbered, api_key=KEY) as running:
        yield running


# -- keys ----------------------------------------------------------------------------------------------


def test_keys_from_the_environment_or_params_reach_the_server_and_nothing_else(server, monkeypatch, caplog, capfd):
    """A key from ``api_key_env``, from params or in a secret header is sent, yet in no trace, log, repr or error."""
    monkeypatch.setenv("SCAFFOLD_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    bare = sf.OpenAIBackend("test-model", base_url=server.base_url)
    from_env = sf.Model(sf.OpenAIBackend("test-model", base_url=server.base_url, api_key_env="SCAFFOLD_TEST_KEY"),
                        retry=FAST)
    from_params = sf.Model(bare, params={"api_key": KEY, "temperature": 0.5}, retry=FAST)
    from_header = sf.Model(bare, params={"extra_headers": {"Authorization": f"Bearer {KEY}"}}, retry=FAST)
    assert "api_key" not in from_params.params and "extra_headers" not in from_header.params
    records = [run(sample_then_aggregate, model) for model in (from_env, from_params, from_header)]
    assert all(r.status == "ok" for r in records)
    server.inject(Fault.server_error(500), times=10)
    with pytest.raises(sf.CallError) as info:
        run(sample_then_aggregate, from_env)
    dumped = repr(records) + repr(info.value.trace) + str(info.value) + repr(from_params) + repr(from_env)
    dumped += repr(from_header) + repr(vars(from_params.backend)) + caplog.text + "".join(capfd.readouterr())
    assert KEY not in dumped


def test_a_key_quoted_back_by_the_server_is_nowhere_in_the_error_chain(monkeypatch, caplog, capfd):
    """A 401 quoting the key sent reaches no message, repr, chained error, traceback or log."""
    key = "tgp-v1-7c1d2e3f4a5b6c7d8e9f"  # not shaped like an OpenAI key: only redaction by value hides it
    monkeypatch.setenv("SCAFFOLD_ADVERSARIAL_KEY", key)

    def quoting_check(headers, api_key):
        sent = headers.get("authorization", "").removeprefix("Bearer ")
        if sent != api_key:
            raise Refusal(error_response(401, f"Incorrect API key provided: {sent}.", code="invalid_api_key"))

    monkeypatch.setattr(server_module, "check_api_key", quoting_check)
    caplog.set_level(logging.DEBUG)
    with OpenAIServer(api_key="sk-the-right-one-000000") as server:
        backend = sf.OpenAIBackend("test-model", base_url=server.base_url, api_key_env="SCAFFOLD_ADVERSARIAL_KEY")
        model = sf.Model(backend, retry=Retry.never())
        with pytest.raises(sf.CallError) as info:
            run(sample_then_aggregate, model)
    chain, todo = [], [info.value]
    while todo:
        current = todo.pop()
        if current is not None and all(current is not seen for seen in chain):
            chain.append(current)
            todo += [current.__cause__, current.__context__]
    assert any(isinstance(e, sf.AuthenticationError) for e in chain)
    dumped = "".join(f"{e!s}{e!r}{vars(e)!r}" for e in chain) + "".join(traceback.format_exception(info.value))
    dumped += repr(model) + repr(info.value.trace) + caplog.text + "".join(capfd.readouterr())
    assert "Incorrect API key provided" in dumped and key not in dumped


def test_an_openai_key_goes_only_where_it_is_asked_for(server, monkeypatch):
    """``OPENAI_API_KEY`` is sent by ``openai/NAME`` specs and to OpenAI itself, never to another server unasked."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    unasked = failure(sf.OpenAIBackend("test-model", base_url=server.base_url))
    assert isinstance(unasked, sf.AuthenticationError) and "didn't provide an API key" in str(unasked)
    spec = sf.backends.backend_from_spec("openai/test-model", api_base=server.base_url)
    assert [c.text for c in complete(spec, QUESTION)] == ["draft 0 for what is 2+2?: \\boxed{0}"]


def test_missing_key_variables_are_named_before_anything_is_sent(monkeypatch):
    """An unset ``api_key_env``, or no OPENAI_API_KEY for OpenAI's own API, fails naming the variable."""
    monkeypatch.delenv("SCAFFOLD_MISSING_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(sf.AuthenticationError, match="SCAFFOLD_MISSING_KEY"):
        sf.OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key_env="SCAFFOLD_MISSING_KEY").check_credentials()
    with pytest.raises(sf.AuthenticationError, match="OPENAI_API_KEY"):
        sf.OpenAIBackend("gpt-4o-mini").check_credentials()
    sf.OpenAIBackend("m", base_url="http://127.0.0.1:9/v1").check_credentials()  # a local server needs none
    with pytest.raises(sf.CallError, match="SCAFFOLD_MISSING_KEY"):
        run(sample_then_aggregate, sf.Model(sf.OpenAIBackend("m", base_url="http://127.0.0.1:9/v1",
                                                             api_key_env="SCAFFOLD_MISSING_KEY")))


# -- connections ---------------------------------------------------------------------------------------


def test_one_keep_alive_session_per_event_loop(server):
    """Sequential calls on one loop share one connection; another loop opens its own; release closes them."""
    backend = backend_for(server)

    async def calls(count: int) -> None:
        try:
            for _ in range(count):
                await backend.complete(QUESTION)
            assert len(backend._sessions) == 1
        finally:
            await backend.release_loop()
        assert len(backend._sessions) == 0

    asyncio.run(calls(5))
    assert server.connections_opened == 1
    asyncio.run(calls(2))
    assert server.connections_opened == 2


def test_one_model_shared_by_threads_each_on_its_own_loop(server):
    """Two threads running run_sync on one Model finish; the server sees the in-flight limit held."""
    server.latency = 0.02
    model = sf.Model(backend_for(server, supports_n=False), max_in_flight=2, retry=FAST)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(2):
                assert run(sample_then_aggregate.build(n=3), model, problem=f"p{i}").status == "ok"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert errors == [] and not any(t.is_alive() for t in threads)
    served = [r for r in server.requests if r.status == 200]
    assert len(served) == 16 and peak_in_flight(served) <= 2


# -- which backend a spec chooses ----------------------------------------------------------------------

LOCAL = "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(("spec", "options", "kind", "sent"), [
    ("hosted_vllm/pocket", {}, "OpenAIBackend", "pocket"),
    ("hosted_vllm/pocket", {"api_base": "http://10.0.0.2:9000/v1"}, "OpenAIBackend", "pocket"),
    ("openai/gpt-4o-mini", {"api_base": LOCAL}, "OpenAIBackend", "gpt-4o-mini"),
    ("pocket", {"api_base": LOCAL}, "OpenAIBackend", "pocket"),
    ("Qwen/Qwen2.5-0.5B-Instruct", {"api_base": LOCAL}, "OpenAIBackend", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("openai:gpt-4o-mini", {}, "OpenAIBackend", "gpt-4o-mini"),
    ("openai/gpt-4o-mini", {}, "LiteLLMBackend", None),
    ("anthropic/claude-3-5-haiku-latest", {}, "LiteLLMBackend", None),
    ("azure/my-deployment", {"api_base": "https://x.openai.azure.com"}, "LiteLLMBackend", None),
    ("litellm:hosted_vllm/pocket", {"api_base": LOCAL}, "LiteLLMBackend", None),
], ids=lambda value: str(value) if isinstance(value, str) else None)
def test_spec_strings_choose_the_native_backend_for_openai_compatible_servers(spec, options, kind, sent, monkeypatch):
    """hosted_vllm/ and any OpenAI-compatible name with an api_base go native; providers' own APIs stay on litellm."""
    monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused-0000000000")  # litellm's environment check for openai/
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-unused-000000")
    backend = sf.backends.backend_from_spec(spec, **options)
    assert type(backend).__name__ == kind
    if sent is not None:
        assert backend.model == sent and backend.model_name == spec.removeprefix("openai:")
        assert backend.base_url == options.get("api_base", LOCAL if spec.startswith("hosted_vllm/")
                                               else "https://api.openai.com/v1")


def test_hosted_vllm_reads_litellm_s_environment_variables(monkeypatch):
    """Without an api_base, ``hosted_vllm/NAME`` goes to $HOSTED_VLLM_API_BASE and sends $HOSTED_VLLM_API_KEY."""
    monkeypatch.setenv("HOSTED_VLLM_API_BASE", "http://10.1.2.3:8000/v1")
    monkeypatch.setenv("HOSTED_VLLM_API_KEY", KEY)
    model = sf.Model("hosted_vllm/tiny")
    assert isinstance(model.backend, sf.OpenAIBackend) and model.name == "hosted_vllm/tiny"
    assert model.backend.base_url == "http://10.1.2.3:8000/v1" and model.backend._key() == KEY


def test_registry_entries_choose_a_backend_and_check_its_settings(server, monkeypatch):
    """An entry without ``backend`` for a server goes native; ``backend = "litellm"`` forces litellm; settings the
    chosen backend does not take are refused naming it."""
    monkeypatch.setenv("SCAFFOLD_TEST_KEY", KEY)
    models = sf.load_models({"models": {
        "native": {"model": "hosted_vllm/test-model", "api_base": server.base_url, "api_key_env": "SCAFFOLD_TEST_KEY",
                   "max_in_flight": 2, "params": {"temperature": 0.7}},
        "forced": {"backend": "litellm", "model": "hosted_vllm/test-model", "api_base": server.base_url},
        "explicit": {"backend": "openai", "model": "test-model", "api_base": server.base_url, "token_ids": False,
                     "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6, "headers": {"X-Team": "a"}},
    }})
    assert type(models["native"].backend).__name__ == "OpenAIBackend"
    assert type(models["forced"].backend).__name__ == "LiteLLMBackend"
    assert models["explicit"].backend.capabilities.returns_token_ids is False
    result = run(sample_then_aggregate, models["native"])
    assert result.status == "ok" and server.requests[0].request.body["temperature"] == 0.7
    with pytest.raises(sf.ModelAliasError, match="extra.*allowed for backend 'openai'"):
        sf.load_models({"models": {"a": {"model": "hosted_vllm/x", "extra": {"api_version": "1"}}}})


def test_a_model_built_from_a_spec_takes_credentials_from_params(server, monkeypatch):
    """``Model("hosted_vllm/NAME", params=...)`` hands an ``api_key`` or a secret header to the backend built from
    the string (litellm's too), not to the records."""
    monkeypatch.setenv("HOSTED_VLLM_API_BASE", server.base_url)
    model = sf.Model("hosted_vllm/test-model", params={"api_key": KEY}, retry=FAST)
    assert model.params == {} and isinstance(model.backend, sf.OpenAIBackend)
    assert run(sample_then_aggregate, model).status == "ok"
    header = {"Authorization": f"Bearer {KEY}"}
    model = sf.Model("hosted_vllm/test-model", params={"extra_headers": header}, retry=FAST)
    assert model.params == {} and run(sample_then_aggregate, model).status == "ok"
    forced = sf.Model("litellm:hosted_vllm/test-model", params={"extra_headers": header})
    assert forced.params == {} and forced.backend.extra["extra_headers"] == header  # type: ignore[attr-defined]


def test_the_protocol_and_capabilities():
    """The native backend is a StreamingBackend with native n; a plain backend still satisfies Backend."""
    from scaffold.testing import ScriptedBackend

    backend = sf.OpenAIBackend("m", base_url=LOCAL, max_n=8)
    assert isinstance(backend, sf.StreamingBackend) and isinstance(backend, sf.Backend)
    assert backend.capabilities == sf.Capabilities(supports_n=True, max_n=8, returns_token_ids=True, streams=True,
                                                   json_schema=True)
    scripted = ScriptedBackend(lambda r: "x")
    assert isinstance(scripted, sf.Backend) and not isinstance(scripted, sf.StreamingBackend)
    assert repr(sf.OpenAIBackend("m", base_url=LOCAL + "/", api_key=KEY)) == f"OpenAIBackend('m', base_url='{LOCAL}')"


def test_a_new_backend_is_its_class_plus_one_registry_line(monkeypatch, tmp_path):
    """A backend kind is one line in ``BACKENDS``: the registry's entries then accept the settings its class declares
    (and refuse the others), ``kind:model`` strings and ``backend = "..."`` entries build it, and its ``provider``
    is what it reports."""
    from scaffold.backends import _entry, _registry

    class EchoBackend:
        provider = "echo-labs"
        settings = frozenset({"voice"})
        capabilities = sf.Capabilities()

        def __init__(self, model: str, voice: str = "plain") -> None:
            self.model, self.voice = model, voice

        async def complete(self, request):
            return [sf.Completion(text=f"{self.voice}:{self.model}")] * request.n

    monkeypatch.setitem(_registry.BACKENDS, "echo", EchoBackend)  # the one line a new backend adds
    models = sf.load_models({"models": {"a": {"backend": "echo", "model": "m", "voice": "loud"}}})
    assert isinstance(models["a"].backend, EchoBackend) and models["a"].backend.voice == "loud"
    with pytest.raises(sf.ModelAliasError, match="unknown setting.*device.*allowed for backend 'echo'"):
        sf.load_models({"models": {"a": {"backend": "echo", "model": "m", "device": "cpu"}}})
    built = sf.backends.backend_from_spec("echo:hello")
    assert isinstance(built, EchoBackend) and built.model == "hello"
    from scaffold.backends._base import provider_of

    assert provider_of(built) == "echo-labs"
    assert _entry.backend_keys("echo") == {"voice"}
    assert _entry.backend_keys("openai") == sf.OpenAIBackend.settings
