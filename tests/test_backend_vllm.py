"""vLLM on a real (tiny, random) model: the in-process engine backend and the OpenAI-compatible server.

Every reference value comes from Hugging Face transformers on the same directory: greedy
``generate`` for token ids, a teacher-forced forward pass for logprobs. One engine and one server
serve the whole module (each takes seconds to start on a CPU).
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import scaffold as sf
from scaffold._errors import BackendError
from scaffold._types import Completion, Request
from scaffold.backends._vllm_server import VLLMServer

pytest.importorskip("vllm")  # as in every vLLM test module; with CI=true a vLLM that does not import fails (conftest)

pytestmark = [
    # Third-party deprecations raised while vLLM starts an engine, none of them actionable here:
    # vLLM's kernel dispatcher inspects torch.distributed.reduce_op, which torch deprecates, and
    # importing vLLM's engine imports torch.utils.mkldnn, which uses torch.jit.script_method.
    pytest.mark.filterwarnings(r"ignore:`torch\.distributed\.reduce_op` is deprecated:FutureWarning"),
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.script_method` is deprecated:DeprecationWarning"),
    # one pytest-xdist worker runs the module, so its engine and its server start once, not once per worker
    pytest.mark.xdist_group("vllm"),
]

QUESTION = "what is two plus two?"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random chat model (head size 32: vLLM's CPU attention rejects 16)."""
    from scaffold.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-vllm"))


@pytest.fixture(scope="module")
def hf(model_dir: Path) -> Any:
    """The same model loaded by transformers (float32, eval mode): the reference."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[Any]:
    """One in-process engine for the module, with LoRA enabled."""
    from scaffold.backends._vllm import VLLMBackend

    backend = VLLMBackend(model_dir, enable_lora=True, max_lora_rank=16, max_model_len=1024)
    yield backend
    asyncio.run(backend.aclose())
    assert backend.closed and not [t for t in threading.enumerate() if t.name == "scaffold-vllm-engine"]
    with pytest.raises(BackendError, match="closed"):
        run(backend, chat(max_tokens=1))


def make_adapter(model_dir: Path, path: Path, seed: int) -> Any:
    """Save a rank-8 peft LoRA adapter with random (non-zero) weights at ``path``; return the merged HF model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, lora_dropout=0.0))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.save_pretrained(path)
    return model.merge_and_unload().eval()


@pytest.fixture(scope="module")
def adapter(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A LoRA adapter directory and the merged model it implies."""
    path = tmp_path_factory.mktemp("lora") / "perturbed"
    return path, make_adapter(model_dir, path, seed=1)


def chat(content: str = QUESTION, *, n: int = 1, logprobs: bool = False, seed: int | None = None,
         **params: Any) -> Request:
    return Request(messages=(("user", content),), params=params, n=n, logprobs=logprobs, seed=seed)


def run(backend: Any, request: Request) -> list[Completion]:
    return asyncio.run(backend.complete(request))


def prompt_ids(tokenizer: Any, content: str = QUESTION) -> list[int]:
    """The chat-templated prompt of one user message, built with transformers."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                         tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def reference_logprobs(model: Any, prompt: list[int], completion: tuple[int, ...]) -> list[float]:
    """log_softmax of a teacher-forced forward pass, at each completion token."""
    import torch

    ids = torch.tensor([prompt + list(completion)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    positions = torch.arange(len(prompt) - 1, ids.shape[1] - 1)
    return logprobs[positions, ids[0, len(prompt):]].tolist()


def greedy_reference(model: Any, prompt: list[int], max_new_tokens: int) -> tuple[int, ...]:
    """transformers' greedy ``generate`` (stops at EOS, which it keeps)."""
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new_tokens)
    return tuple(out[0, len(prompt):].tolist())


def decoded(tokenizer: Any, token_ids: tuple[int, ...]) -> str:
    """The text vLLM reports for ``token_ids``: it holds back the bytes of an unfinished UTF-8 character at the end."""
    return str(tokenizer.decode(token_ids, skip_special_tokens=True)).rstrip("\ufffd")


def assert_close(values: tuple[float, ...] | None, expected: list[float]) -> None:
    assert values is not None and len(values) == len(expected)
    assert max(abs(a - b) for a, b in zip(values, expected)) < TOLERANCE


# --- the in-process engine -------------------------------------------------------------------------


@pytest.mark.slow
def test_n_choices_carry_token_ids_logprobs_and_usage(engine: Any, tokenizer: Any) -> None:
    """One request with n=4 gives four distinct choices whose ids, logprobs and usage line up."""
    completions = run(engine, chat(n=4, logprobs=True, seed=3, max_tokens=12))
    assert len(completions) == 4
    prompt_length = len(prompt_ids(tokenizer))
    for c in completions:
        assert c.token_ids is not None and c.logprobs is not None
        assert len(c.token_ids) == len(c.logprobs) == c.usage.completion_tokens <= 12
        assert c.usage.prompt_tokens == prompt_length
        assert c.finish_reason in ("stop", "length")
        assert c.cost is None and c.model == engine.name
        assert c.text == decoded(tokenizer, c.token_ids)
        assert all(lp <= 0 for lp in c.logprobs)
        assert c.metadata["weight_versions"] == (("0", 0, len(c.token_ids)),)
    assert len({c.token_ids for c in completions}) > 1
    again = run(engine, chat(n=4, logprobs=True, seed=3, max_tokens=12))
    assert [c.token_ids for c in again] == [c.token_ids for c in completions]


@pytest.mark.slow
def test_greedy_token_ids_equal_transformers_generate(engine: Any, hf: Any, tokenizer: Any) -> None:
    """Greedy decoding picks exactly the tokens transformers' greedy generate picks."""
    for content in (QUESTION, "Solve 12 + 30 step by step.", "Candidate solutions: review each one"):
        (c,) = run(engine, chat(content, temperature=0, max_tokens=24))
        assert c.token_ids == greedy_reference(hf, prompt_ids(tokenizer, content), 24)


def test_a_request_with_tools_is_rendered_with_the_text_protocol_in_process(engine: Any, hf: Any,
                                                                           tokenizer: Any) -> None:
    """The tiny model's template knows no tools: the engine's prompt is the text protocol's (tools in a system
    message, the earlier call and its answer as text), exactly what transformers decodes greedily from it."""
    import scaffold as sf
    from scaffold.backends._tool_text import chat_messages

    tool = {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {"type": "object"}}}
    request = Request(messages=(("user", QUESTION), sf.assistant_message("", [sf.ToolCall("c1", "add", '{"a": 2}')]),
                                sf.tool_message("c1", "add", "4")), tools=(tool,), params={"temperature": 0,
                                                                                            "max_tokens": 16})
    (completion,) = run(engine, request)
    messages, extra = chat_messages(request, native=False)
    assert extra == {} and messages[0]["role"] == "system" and '"name": "add"' in messages[0]["content"]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert completion.token_ids == greedy_reference(hf, prompt, 16)
    assert completion.tool_calls == ()  # a random model writes no <tool_call>


@pytest.mark.slow
def test_sampled_logprobs_equal_a_teacher_forced_forward_pass(engine: Any, hf: Any, tokenizer: Any) -> None:
    """Logprobs are the raw model's (before temperature and top-p), matching transformers to 1e-4."""
    completions = run(engine, chat(n=4, logprobs=True, seed=11, temperature=1.3, top_p=0.9, max_tokens=16))
    prompt = prompt_ids(tokenizer)
    for c in completions:
        assert c.token_ids is not None
        assert_close(c.logprobs, reference_logprobs(hf, prompt, c.token_ids))


@pytest.mark.slow
def test_stop_strings_cut_the_text_and_max_tokens_the_length(engine: Any, tokenizer: Any) -> None:
    """``max_tokens`` ends with "length"; a stop string ends with "stop", text cut before it, ids a prefix."""
    params = {"temperature": 0, "max_tokens": 20, "ignore_eos": True}  # ignore_eos: passed through to vLLM
    (full,) = run(engine, Request(prompt="The answer is", params=params))
    assert full.finish_reason == "length" and len(full.token_ids or ()) == 20
    stop = next(pair for i in range(3, len(full.text) - 1)  # two printable characters, first seen past the start
                if (pair := full.text[i:i + 2]).isascii() and pair.strip() and full.text.index(pair) == i)
    (cut,) = run(engine, Request(prompt="The answer is", params={**params, "stop": [stop]}))
    assert cut.finish_reason == "stop" and cut.metadata["stop_reason"] == stop
    assert cut.text == full.text[:full.text.index(stop)]
    assert cut.token_ids is not None and full.token_ids is not None
    assert cut.token_ids == full.token_ids[:len(cut.token_ids)]
    assert stop in tokenizer.decode(cut.token_ids)


@pytest.mark.slow
def test_repeated_prompt_prefix_hits_the_prefix_cache(engine: Any) -> None:
    """A long shared prefix is served from the prefix cache the second time, with the same greedy output."""
    long_prompt = " ".join(f"step {i}: add {i} and {i + 1}." for i in range(40))
    first = run(engine, chat(long_prompt, temperature=0, max_tokens=8))[0]
    second = run(engine, chat(long_prompt, temperature=0, max_tokens=8))[0]
    assert second.metadata["cached_prompt_tokens"] > 0
    assert second.token_ids == first.token_ids


@pytest.mark.slow
def test_graph_sample_then_aggregate_records_token_ids_logprobs_and_lineage(engine: Any) -> None:
    """A real graph run through the executor: four samples in one request, then an aggregation reading them."""
    import scaffold as sf

    @sf.graph
    def sample_then_aggregate(problem):
        params = {"max_tokens": 12, "temperature": 1.0}
        population = sf.sample("Solve: {problem}", model="solver", n=4, logprobs=True, params=params)
        return sf.aggregate(population, model="solver", logprobs=True, params=params)

    result = sample_then_aggregate.run_sync({"problem": "2+2"}, models={"solver": engine}, seed=5)
    assert result.ok
    samples = result.node("sample")
    (aggregation,) = [t for t in result.traces if t.inputs]
    assert len(samples) == 4
    assert len({t.request.seed for t in samples if t.request is not None}) == 1  # one request with n=4
    for trace in [*samples, aggregation]:
        assert trace.token_ids and trace.logprobs and len(trace.token_ids) == len(trace.logprobs)
    assert sorted(aggregation.inputs) == sorted(t.id for t in samples)
    assert aggregation.request is not None and all(t.text in aggregation.request.last_content for t in samples)


@pytest.mark.slow
def test_cancelled_call_is_aborted_and_the_engine_keeps_serving(engine: Any) -> None:
    """A call cancelled mid-generation (a timeout) leaves the engine answering other calls."""

    async def main() -> list[Completion]:
        long = Request(prompt="count", params={"max_tokens": 900, "ignore_eos": True})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(engine.complete(long), timeout=0.3)
        return await engine.complete(Request(prompt="count", params={"max_tokens": 4, "ignore_eos": True}))

    (c,) = asyncio.run(main())
    assert len(c.token_ids or ()) == 4


@pytest.mark.slow
def test_bad_requests_raise_non_retryable_backend_errors(engine: Any) -> None:
    """Unknown parameters, values vLLM rejects, prompts past the context and unknown adapters fail alone."""
    bad = [
        chat(frobnicate=1),
        chat(temperature=-1),
        Request(prompt="x " * 1200, params={"max_tokens": 4}),
        chat(lora="nope"),
        Request(),
    ]
    for request in bad:
        with pytest.raises(BackendError) as caught:
            run(engine, request)
        assert not caught.value.retryable
    assert run(engine, chat(max_tokens=2, ignore_eos=True))[0].usage.completion_tokens == 2


@pytest.mark.slow
def test_lora_adapter_changes_outputs_as_the_merged_model_predicts(engine: Any, adapter: tuple[Path, Any],
                                                                 hf: Any, tokenizer: Any) -> None:
    """A peft adapter, loaded by path, gives the merged model's greedy tokens and logprobs; ``lora`` picks it."""
    path, merged = adapter
    prompt = prompt_ids(tokenizer)
    name = engine.load_lora(path, activate=False)
    assert name == "perturbed" and engine.active_lora is None
    (base,) = run(engine, chat(temperature=0, max_tokens=16, logprobs=True))
    (tuned,) = run(engine, chat(temperature=0, max_tokens=16, logprobs=True, lora=name))
    assert tuned.token_ids == greedy_reference(merged, prompt, 16) != base.token_ids
    assert tuned.token_ids is not None
    assert_close(tuned.logprobs, reference_logprobs(merged, prompt, tuned.token_ids))
    assert tuned.metadata["lora"] == name
    try:
        engine.active_lora = name
        assert run(engine, chat(temperature=0, max_tokens=16))[0].token_ids == tuned.token_ids
        assert run(engine, chat(temperature=0, max_tokens=16, lora=None))[0].token_ids == base.token_ids
    finally:
        engine.active_lora = None


@pytest.mark.slow
def test_reloading_an_adapter_under_its_name_serves_the_new_checkpoint(engine: Any, model_dir: Path, tokenizer: Any,
                                                                       tmp_path: Path) -> None:
    """An RL loop saving each LoRA checkpoint to one directory: every load under one name serves the latest."""
    long_prompt = " ".join(f"step {i}" for i in range(60))  # long enough to be prefix-cached between loads
    prompt = list(tokenizer(long_prompt)["input_ids"])
    try:
        for seed in (2, 3):
            merged = make_adapter(model_dir, tmp_path / "policy", seed)
            assert engine.load_lora(tmp_path / "policy") == "policy" == engine.active_lora
            (c,) = run(engine, Request(prompt=long_prompt, params={"temperature": 0, "max_tokens": 12}))
            assert c.token_ids == greedy_reference(merged, prompt, 12)
    finally:
        engine.active_lora = None


@pytest.mark.slow
def test_update_weights_refreshes_the_engine_in_place(engine: Any, hf: Any, tokenizer: Any,
                                                     adapter: tuple[Path, Any]) -> None:
    """After ``update_weights`` the engine's logprobs match the updated HF model to 1e-4, adapters included."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    original = {name: tensor.clone() for name, tensor in hf.state_dict().items()}
    generator = torch.Generator().manual_seed(7)
    updated = {name: tensor + 0.05 * torch.randn(tensor.shape, generator=generator)
               for name, tensor in original.items()}
    policy = AutoModelForCausalLM.from_pretrained(engine.name, dtype="float32").eval()
    policy.load_state_dict(updated)
    prompt = prompt_ids(tokenizer)
    (before,) = run(engine, chat(temperature=0, max_tokens=16))
    try:
        with pytest.raises(ValueError, match="k_proj"):  # a fused layer given in part, refused before any change
            engine.update_weights({"model.layers.0.self_attn.q_proj.weight": updated[
                "model.layers.0.self_attn.q_proj.weight"]})
        assert run(engine, chat(temperature=0, max_tokens=16))[0].token_ids == before.token_ids

        version = engine.update_weights(policy.named_parameters())
        assert version == engine.weights_version == 1
        for c in run(engine, chat(n=4, logprobs=True, seed=2, max_tokens=16)):
            assert c.token_ids is not None
            assert_close(c.logprobs, reference_logprobs(policy, prompt, c.token_ids))
            assert c.metadata["weight_versions"] == (("1", 0, len(c.token_ids)),)

        name = engine.load_lora(adapter[0], "perturbed", activate=False)
        merged = PeftModel.from_pretrained(policy, adapter[0]).merge_and_unload().eval()
        (tuned,) = run(engine, chat(logprobs=True, seed=4, max_tokens=16, lora=name))
        assert tuned.token_ids is not None
        assert_close(tuned.logprobs, reference_logprobs(merged, prompt, tuned.token_ids))
    finally:
        engine.update_weights(original)
    (after,) = run(engine, chat(temperature=0, max_tokens=16))
    assert after.token_ids == before.token_ids


@pytest.mark.slow
def test_a_second_engine_in_the_same_process_is_refused(model_dir: Path, engine: Any) -> None:
    """vLLM's parallel state is process-wide: a second live engine fails at construction, clearly."""
    from scaffold.backends._vllm import VLLMBackend

    with pytest.raises(RuntimeError, match="one in-process engine at a time"):
        VLLMBackend(model_dir)
    assert run(engine, chat(max_tokens=2, ignore_eos=True))[0].usage.completion_tokens == 2


def test_module_imports_without_vllm_and_names_the_extra() -> None:
    """Without vLLM the module imports; constructing the backend says which extra to install."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['vllm'] = None\n"
            "from scaffold.backends._vllm import VLLMBackend\n"
            "try:\n    VLLMBackend('x')\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'scaffold-sdk[vllm]'" in out


# --- the OpenAI-compatible server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[VLLMServer]:
    """One vLLM server on the tiny model for the module; every process it started is gone after ``stop``."""
    import psutil
    running = VLLMServer(model_dir, model_name="tiny", tool_call_parser="hermes").start()
    assert running.process is not None
    group = [running.process.pid] + [p.pid for p in psutil.Process(running.process.pid).children(recursive=True)]
    yield running
    running.stop()
    deadline = time.monotonic() + 10
    while any(_alive(psutil, pid) for pid in group) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(psutil, pid) for pid in group)


def _alive(psutil: Any, pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_an_agent_talks_to_the_vllm_server_with_its_tool_call_parser(server: VLLMServer) -> None:
    """The server runs with ``--tool-call-parser hermes``: it takes an agent's tools and a conversation that holds
    an earlier tool call and its answer (rendered by the model's chat template), and answers in OpenAI's shape. The
    tiny random model writes no ``<tool_call>``, so the agent ends after one turn."""
    import scaffold as sf

    @sf.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    backend = sf.OpenAIBackend("tiny", base_url=server.base_url)
    request = sf.Request(
        messages=(("user", QUESTION), sf.assistant_message("", [sf.ToolCall("call_1", "add", '{"a": 1, "b": 2}')]),
                  sf.tool_message("call_1", "add", "3")),
        tools=(add.spec(),), params={"max_tokens": 8}, seed=1)
    async def complete() -> sf.Completion:
        try:
            return (await backend.complete(request))[0]
        finally:
            await backend.release_loop()

    completion = asyncio.run(complete())
    assert completion.usage.completion_tokens > 0 and completion.tool_calls == ()
    assert completion.finish_reason in ("stop", "length")

    @sf.graph
    def agent(problem):
        return sf.agent("{problem}", model="m", tools=[add], params={"max_tokens": 8})

    result = agent.run_sync({"problem": QUESTION}, models={"m": backend}, store=None, seed=2)
    assert result.ok and [t.id.split("/")[1] for t in result.traces] == ["agent#0"]
    assert result.output.request.tools == (add.spec(),)


def test_the_tool_call_parser_turns_on_vllms_tool_calling() -> None:
    command = VLLMServer("/models/qwen", tool_call_parser="hermes", fast_start=False, port=8000).command()
    assert command[-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


@pytest.mark.slow
def test_server_returns_token_ids_logprobs_and_usage_per_choice(server: VLLMServer, hf: Any,
                                                                tokenizer: Any) -> None:
    """``/v1/chat/completions`` with n=4 and ``return_token_ids`` gives each choice's ids and raw logprobs."""
    import httpx

    body = {"model": "tiny", "messages": [{"role": "user", "content": QUESTION}], "n": 4, "max_tokens": 12,
            "seed": 1, "logprobs": True, "top_logprobs": 0, "return_token_ids": True}
    reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60).json()
    prompt = prompt_ids(tokenizer)
    assert reply["model"] == server.model_name and reply["prompt_token_ids"] == prompt
    assert len(reply["choices"]) == 4
    for choice in reply["choices"]:
        token_ids = tuple(choice["token_ids"])
        logprobs = tuple(step["logprob"] for step in choice["logprobs"]["content"])
        assert len(token_ids) == len(logprobs) > 0
        assert_close(logprobs, reference_logprobs(hf, prompt, token_ids))
        assert choice["message"]["content"] == decoded(tokenizer, token_ids)
    usage = reply["usage"]
    assert usage["prompt_tokens"] == len(prompt)  # counted once for all n choices
    assert usage["completion_tokens"] == sum(len(c["token_ids"]) for c in reply["choices"])


@pytest.mark.slow
def test_graph_through_litellm_to_the_vllm_server_records_exact_ids_and_logprobs(server: VLLMServer, hf: Any,
                                                                                 tokenizer: Any) -> None:
    """sample-then-aggregate via ``hosted_vllm/`` over HTTP: one n=4 request, ids and logprobs equal transformers'."""
    backend = sf.LiteLLMBackend(f"hosted_vllm/{server.model_name}", api_base=server.base_url)
    model = sf.Model(backend, params={"max_tokens": 12, "temperature": 1.0})

    @sf.graph
    def g(problem):
        pop = sf.sample("{problem}", model="m", n=4, logprobs=True)
        return sf.aggregate(pop, model="m", logprobs=True)

    result = g.run_sync({"problem": QUESTION}, models={"m": model}, seed=3)
    samples = [t for t in result.traces if t.node == "sample"]
    assert len(samples) == 4 and len({t.text for t in samples}) > 1
    prompt = prompt_ids(tokenizer)
    for trace in samples:
        assert trace.token_ids is not None and trace.logprobs is not None
        assert len(trace.token_ids) == len(trace.logprobs) == trace.usage.completion_tokens
        assert_close(trace.logprobs, reference_logprobs(hf, prompt, trace.token_ids))
        assert trace.cost is None  # a local server has no price: unknown, not zero
    final = result.traces[-1]
    assert final.node == "aggregate" and set(final.inputs) == {t.id for t in samples}
    assert final.token_ids is not None


@pytest.mark.slow
def test_native_backend_to_the_vllm_server_records_exact_ids_and_logprobs(server: VLLMServer, hf: Any,
                                                                          tokenizer: Any) -> None:
    """sample-then-aggregate through ``sf.OpenAIBackend``: one n=4 request, ids and logprobs equal transformers'."""
    backend = sf.OpenAIBackend(server.model_name, base_url=server.base_url)
    model = sf.Model(backend, params={"max_tokens": 12, "temperature": 1.0})

    @sf.graph
    def g(problem):
        pop = sf.sample("{problem}", model="m", n=4, logprobs=True)
        return sf.aggregate(pop, model="m", logprobs=True)

    result = g.run_sync({"problem": QUESTION}, models={"m": model}, seed=3)
    samples = [t for t in result.traces if t.node == "sample"]
    assert len(samples) == 4 and len({t.token_ids for t in samples}) > 1
    prompt = prompt_ids(tokenizer)
    for trace in samples:
        assert trace.token_ids is not None and trace.logprobs is not None
        assert len(trace.token_ids) == len(trace.logprobs) == trace.usage.completion_tokens
        assert_close(trace.logprobs, reference_logprobs(hf, prompt, trace.token_ids))
        assert trace.text == decoded(tokenizer, trace.token_ids) and trace.cost is None
    assert sum(t.usage.prompt_tokens for t in samples) == len(prompt)  # counted once, split over the choices
    final = result.traces[-1]
    assert final.node == "aggregate" and set(final.inputs) == {t.id for t in samples} and final.token_ids


@pytest.mark.slow
def test_native_backend_streams_from_the_vllm_server(server: VLLMServer, hf: Any, tokenizer: Any) -> None:
    """A streamed n=2 chat and a streamed completion: deltas add up to the text, per-chunk token ids to the
    completion's ids (whose logprobs match transformers'), usage arrives; the same seed unstreamed agrees."""
    backend = sf.OpenAIBackend(server.model_name, base_url=server.base_url)
    chat_request = chat(n=2, logprobs=True, seed=5, max_tokens=10)
    text_request = Request(prompt="The answer is", params={"max_tokens": 6, "temperature": 0}, logprobs=True)

    async def main() -> tuple[list[Any], list[Any], list[Completion]]:
        try:
            streamed = [item async for item in backend.stream(chat_request)]
            text = [item async for item in backend.stream(text_request)]
            return streamed, text, list(await backend.complete(chat_request))
        finally:
            await backend.release_loop()

    streamed, text, plain = asyncio.run(main())
    prompt = prompt_ids(tokenizer)
    for items, n in ((streamed, 2), (text, 1)):
        *deltas, finished = items
        assert isinstance(finished, sf.Finished) and len(finished.completions) == n
        for index, completion in enumerate(finished.completions):
            mine = [d for d in deltas if d.choice == index]
            assert "".join(d.text for d in mine) == completion.text
            assert tuple(i for d in mine for i in d.token_ids or ()) == completion.token_ids
            assert completion.token_ids and completion.usage.completion_tokens == len(completion.token_ids)
            assert completion.usage.prompt_tokens > 0
    for completion in streamed[-1].completions:
        assert_close(completion.logprobs, reference_logprobs(hf, prompt, completion.token_ids))
    assert [c.token_ids for c in streamed[-1].completions] == [c.token_ids for c in plain]
    assert len(text[-1].completions[0].token_ids or ()) == 6


@pytest.mark.slow
def test_native_backend_maps_the_vllm_servers_refusals(server: VLLMServer) -> None:
    """vLLM's own 4xx answers: a prompt past the context is a ContextLengthError, an unknown model a BadRequestError."""
    async def failure(backend: sf.OpenAIBackend, request: Request) -> BackendError:
        try:
            await backend.complete(request)
        except BackendError as exc:
            return exc
        finally:
            await backend.release_loop()
        raise AssertionError("the request did not fail")

    too_long = asyncio.run(failure(sf.OpenAIBackend(server.model_name, base_url=server.base_url),
                                   Request(prompt="x " * 1200, params={"max_tokens": 4})))
    unknown = asyncio.run(failure(sf.OpenAIBackend("no-such-model", base_url=server.base_url), chat(max_tokens=2)))
    assert isinstance(too_long, sf.ContextLengthError) and not too_long.retryable
    assert isinstance(unknown, sf.BadRequestError) and unknown.status_code == 404 and not unknown.retryable


@pytest.mark.slow
def test_server_completions_return_token_ids_per_choice(server: VLLMServer, tokenizer: Any) -> None:
    """``/v1/completions`` returns ids under each choice, the prompt's too, and ``token_logprobs``."""
    import httpx

    body = {"model": "tiny", "prompt": "The answer is", "n": 2, "max_tokens": 5, "logprobs": 0,
            "return_token_ids": True, "ignore_eos": True}
    reply = httpx.post(f"{server.base_url}/completions", json=body, timeout=60).json()
    for choice in reply["choices"]:
        assert choice["prompt_token_ids"] == tokenizer("The answer is")["input_ids"]
        assert len(choice["token_ids"]) == len(choice["logprobs"]["token_logprobs"]) == 5
    assert server.log_path is not None and "Application startup complete" in server.log_path.read_text()


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return os.fspath(script)


def test_server_that_exits_early_raises_with_its_log_tail(tmp_path: Path) -> None:
    """A server that dies before ``/health`` answers raises at once, quoting its log."""
    python = _fake_python(tmp_path, 'echo "cannot load the model: $*"; exit 3')
    server = VLLMServer(tmp_path / "model", model_name="m", python=python, fast_start=True)
    with pytest.raises(BackendError, match=r"exited with code 3(.|\n)*cannot load the model: -m "
                                           r"vllm\.entrypoints\.openai\.api_server --model"):
        server.start()
    assert not server.running
    assert "--enforce-eager" in server.command() and "--max-model-len" in server.command()


def test_server_that_never_answers_times_out_and_is_killed(tmp_path: Path) -> None:
    """Past ``startup_timeout`` the start fails with the log's tail and the process group is stopped."""
    python = _fake_python(tmp_path, 'echo "still loading"; exec sleep 60')
    server = VLLMServer(tmp_path / "model", python=python, startup_timeout=1.0, log_path=tmp_path / "server.log")
    # "did not answer" is raised while the process still runs (one that ended says "exited with code"): the start
    # gave up at its 1-second timeout, not once the 60-second sleep was over
    with pytest.raises(BackendError, match="did not answer(.|\n)*still loading"):
        server.start()
    assert not server.running and server.base_url.startswith("http://127.0.0.1:")


def test_server_flags_given_explicitly_win_over_fast_start(tmp_path: Path) -> None:
    """``dtype``, ``max_model_len`` and extra arguments replace the fast-start defaults instead of doubling them."""
    server = VLLMServer(tmp_path, dtype="bfloat16", max_model_len=2048, extra_args=["--enforce-eager"],
                        fast_start=True, env={"VLLM_CPU_KVCACHE_SPACE": "2"}, port=8123)
    command = server.command()
    assert command.count("--dtype") == command.count("--max-model-len") == command.count("--enforce-eager") == 1
    assert command[command.index("--dtype") + 1] == "bfloat16"
    assert command[command.index("--max-model-len") + 1] == "2048"
    assert server.environment()["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert server.base_url == "http://127.0.0.1:8123/v1" and server.model_name == tmp_path.name
    # chunked prefill is off on the CPU (seeded requests prefilled in two steps kill its engine), unless asked for
    assert "--no-enable-chunked-prefill" in command
    chunked = VLLMServer(tmp_path, fast_start=True, extra_args=["--enable-chunked-prefill"]).command()
    assert "--no-enable-chunked-prefill" not in chunked and chunked.count("--enable-chunked-prefill") == 1


@pytest.mark.slow
def test_a_vllm_server_serves_the_pocket_model_directory(pocket_quick: tuple[Path, Any]) -> None:
    """The directory the pocket build saved loads in a vLLM server; greedy answers over HTTP match transformers'."""
    from scaffold.pocket import SOLVE_PROMPT, pocket_task

    path, _ = pocket_quick

    @sf.graph
    def solve(problem):
        return sf.generate(SOLVE_PROMPT, model="pocket", params={"temperature": 0, "max_tokens": 40})

    rows = pocket_task(path).problems(16, seed=7, split="test")
    inputs = [{"problem": row["problem"]} for row in rows]
    local = sf.TransformersBackend(path)
    try:
        reference = solve.build().map_sync(inputs, models={"pocket": local}, store=None, concurrency=16)
    finally:
        local.close()
    server = VLLMServer(path, model_name="pocket").start()
    try:
        remote = sf.Model(sf.backends.backend_from_spec("hosted_vllm/pocket", api_base=server.base_url))
        served = solve.build().map_sync(inputs, models={"pocket": remote}, store=None, concurrency=16)
    finally:
        server.stop()
    assert all(result.ok and result.answer is not None for result in served)
    right = sum(sf.equivalent(result.answer, row["answer"]) for result, row in zip(served, rows))
    same = sum(a.answer == b.answer for a, b in zip(served, reference))
    assert right / len(rows) >= 0.3
    assert same >= 0.75 * len(rows), [(a.answer, b.answer) for a, b in zip(served, reference)]
