"""The transformers backend on a real (tiny, random) Hugging Face model: sampling, logprobs, batching, graphs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from helpers import wait_until_async

import scaffold as sf
from scaffold._errors import BackendError
from scaffold._types import Completion, Request
from scaffold.backends._base import Backend
from scaffold.backends._transformers import TransformersBackend

QUESTION = "what is two plus two?"


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Any) -> Iterator[TransformersBackend]:
    """The tiny model loaded from its directory, shared by the module."""
    loaded = TransformersBackend(tiny_model_dir)
    yield loaded
    loaded.close()


def chat(content: str = QUESTION, *, n: int = 1, logprobs: bool = False, seed: int | None = None,
         **params: Any) -> Request:
    """A one-message chat request."""
    return Request(messages=(("user", content),), params=params, n=n, logprobs=logprobs, seed=seed)


def complete(backend: TransformersBackend, request: Request) -> list[Completion]:
    """One call on a fresh event loop."""
    return asyncio.run(backend.complete(request))


def complete_together(backend: TransformersBackend, requests: list[Request]) -> list[list[Completion]]:
    """Concurrent calls on one event loop."""

    async def main() -> list[list[Completion]]:
        return list(await asyncio.gather(*(backend.complete(r) for r in requests)))

    return asyncio.run(main())


def prompt_ids(backend: TransformersBackend, content: str = QUESTION) -> list[int]:
    """The chat-templated prompt ids of one user message, built independently of the backend."""
    text = backend.tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                                 tokenize=False)
    return list(backend.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_declares_capabilities_and_exposes_model_and_tokenizer(backend: TransformersBackend) -> None:
    """It is a Backend that supports n, returns token ids, is trainable, and exposes the live model and tokenizer."""
    assert isinstance(backend, Backend)
    assert backend.capabilities.supports_n and backend.capabilities.returns_token_ids
    assert backend.capabilities.trainable and backend.capabilities.max_n is None
    assert backend.model.__class__.__name__ == "Qwen2ForCausalLM"
    assert backend.tokenizer.eos_token == "<|im_end|>"


def test_sampled_choices_differ_at_temperature_one(backend: TransformersBackend) -> None:
    """n=4 at temperature 1 gives four completions with different token ids."""
    choices = complete(backend, chat(n=4, temperature=1.0, max_tokens=12, seed=3))
    assert len(choices) == 4
    assert len({c.token_ids for c in choices}) == 4


def test_greedy_choices_are_identical_and_match_model_generate(backend: TransformersBackend) -> None:
    """temperature=0 gives n identical choices, equal to ``model.generate(do_sample=False)``."""
    choices = complete(backend, chat(n=3, temperature=0, max_tokens=10))
    assert len({c.token_ids for c in choices}) == 1
    ids = torch.tensor([prompt_ids(backend)])
    expected = backend.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=10)
    assert choices[0].token_ids == tuple(expected[0, ids.shape[1]:].tolist())


def test_logprobs_are_raw_and_match_a_teacher_forced_forward_pass(backend: TransformersBackend) -> None:
    """Logprobs of left-padded, top-p/top-k sampled choices equal log_softmax of a full forward pass at T=1."""
    contents = ["hi", "what is three times five? answer in \\boxed{}"]  # different lengths: padding matters
    requests = [chat(c, n=2, logprobs=True, temperature=0.7, top_p=0.9, top_k=40, max_tokens=12, seed=5)
                for c in contents]
    for content, choices in zip(contents, complete_together(backend, requests)):
        prompt = prompt_ids(backend, content)
        for choice in choices:
            assert choice.token_ids is not None and choice.logprobs is not None
            assert len(choice.logprobs) == len(choice.token_ids)
            full = torch.tensor([prompt + list(choice.token_ids)])
            with torch.no_grad():
                logits = backend.model(full).logits[0, len(prompt) - 1:-1].float()
            expected = torch.log_softmax(logits, -1).gather(-1, full[0, len(prompt):, None])[:, 0]
            assert torch.allclose(torch.tensor(choice.logprobs), expected, atol=1e-5)


def test_token_ids_decode_to_the_text_and_usage_counts_them(backend: TransformersBackend) -> None:
    """Without a stop string the text is the token ids decoded; usage counts prompt and generated tokens."""
    (choice,) = complete(backend, chat(temperature=1.0, max_tokens=16, seed=1))
    assert choice.token_ids is not None and choice.logprobs is None
    assert backend.tokenizer.decode(choice.token_ids, skip_special_tokens=True) == choice.text
    assert choice.usage.prompt_tokens == len(prompt_ids(backend))
    assert choice.usage.completion_tokens == len(choice.token_ids)
    assert choice.cost is None and choice.model == backend.name


def test_eos_ends_with_stop_and_stays_in_the_token_ids(backend: TransformersBackend) -> None:
    """A model that always emits EOS: finish_reason "stop", EOS kept in token_ids (with its logprob), empty text."""
    eos = backend.tokenizer.eos_token_id
    model = type(backend.model).from_pretrained(backend.name)
    boost = torch.zeros(model.config.vocab_size)
    boost[eos] = 100.0
    model.lm_head.register_forward_hook(lambda module, args, output: output + boost)
    eager = TransformersBackend(model, backend.tokenizer)
    try:
        (choice,) = complete(eager, chat(logprobs=True, max_tokens=8))
    finally:
        eager.close()
    assert choice.token_ids == (eos,) and choice.finish_reason == "stop" and choice.text == ""
    assert choice.logprobs is not None and choice.logprobs[0] == pytest.approx(0.0, abs=1e-4)


def test_stop_string_cuts_text_and_tokens_at_the_completing_token(backend: TransformersBackend) -> None:
    """The text ends before the first stop string; token ids end with the token that completes it."""
    (full,) = complete(backend, chat(temperature=0, max_tokens=24))
    assert full.token_ids is not None
    stop = next(full.text[i:i + 2] for i in range(len(full.text) // 2, len(full.text))
                if "\ufffd" not in full.text[i:i + 2])
    (cut,) = complete(backend, chat(temperature=0, max_tokens=24, stop=[stop, "never appears"], logprobs=True))
    assert cut.token_ids is not None and cut.logprobs is not None
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.find(stop)]
    assert full.token_ids[: len(cut.token_ids)] == cut.token_ids and len(cut.logprobs) == len(cut.token_ids)
    decode = backend.tokenizer.decode
    assert stop in decode(cut.token_ids, skip_special_tokens=True)
    assert stop not in decode(cut.token_ids[:-1], skip_special_tokens=True)


def test_max_tokens_gives_length_and_exactly_that_many_tokens(backend: TransformersBackend) -> None:
    """max_tokens=5 stops with finish_reason "length" after exactly 5 tokens."""
    choices = complete(backend, chat(n=2, temperature=1.0, max_tokens=5, logprobs=True, seed=0))
    assert [c.finish_reason for c in choices] == ["length", "length"]
    assert all(c.token_ids is not None and len(c.token_ids) == 5 for c in choices)
    assert all(c.logprobs is not None and len(c.logprobs) == 5 for c in choices)


def test_same_seed_reproduces_and_another_seed_differs(backend: TransformersBackend) -> None:
    """The same request and seed give the same choices; another seed gives others; params["seed"] wins."""
    first = complete(backend, chat(n=2, max_tokens=12, seed=11))
    assert complete(backend, chat(n=2, max_tokens=12, seed=11)) == first
    assert complete(backend, chat(n=2, max_tokens=12, seed=12)) != first
    overridden = Request(messages=(("user", QUESTION),), params={"max_tokens": 12, "seed": 11}, n=2, seed=99)
    assert complete(backend, overridden) == first
    assert complete(backend, chat(n=1, max_tokens=12, seed=11)) == first[:1]  # choice i does not depend on n


def test_concurrent_requests_share_one_batch_and_match_sequential_calls(backend: TransformersBackend) -> None:
    """Concurrent calls run as one padded batch and give what the same calls give one at a time."""
    requests = [
        chat("hi", n=2, temperature=0, max_tokens=10),
        chat("what is three times five?", n=1, temperature=0, max_tokens=6, logprobs=True),
        chat(QUESTION, n=3, temperature=1.0, top_p=0.8, max_tokens=10, seed=7),
        Request(prompt="The answer is", params={"temperature": 0.5, "max_tokens": 8}, seed=8),
    ]
    sequential = [complete(backend, r) for r in requests]
    batches, sequences = backend.batches, backend.sequences
    together = complete_together(backend, requests)
    assert (backend.batches, backend.sequences) == (batches + 1, sequences + 7)
    for alone, batched in zip(sequential, together):
        assert [c.token_ids for c in batched] == [c.token_ids for c in alone]
        assert [c.text for c in batched] == [c.text for c in alone]
        for a, b in zip(alone, batched):
            assert (a.logprobs is None) == (b.logprobs is None)
            assert a.logprobs is None or b.logprobs == pytest.approx(a.logprobs, abs=1e-5)


def test_max_batch_size_splits_choices_without_changing_them(backend: TransformersBackend) -> None:
    """With max_batch_size=2, n=5 runs as three batches and gives the choices one batch gives."""
    small = TransformersBackend(backend.model, backend.tokenizer, max_batch_size=2)
    try:
        split = complete(small, chat(n=5, max_tokens=8, seed=21))
    finally:
        small.close()
    assert small.batches == 3 and small.peak_batch_size == 2
    assert [c.token_ids for c in split] == [c.token_ids for c in complete(backend, chat(n=5, max_tokens=8, seed=21))]


def test_generation_runs_in_eval_mode_and_restores_training_mode(backend: TransformersBackend) -> None:
    """A model left in training mode by a trainer generates in eval mode and is handed back in training mode."""
    expected = complete(backend, chat(temperature=0, max_tokens=6))
    backend.model.train()
    try:
        assert complete(backend, chat(temperature=0, max_tokens=6)) == expected
        assert backend.model.training
    finally:
        backend.model.eval()


def test_raw_prompt_is_tokenised_as_is(backend: TransformersBackend) -> None:
    """A completion request skips the chat template: its prompt ids are the tokenizer's, greedy equals generate."""
    (choice,) = complete(backend, Request(prompt="The answer is", params={"temperature": 0, "max_tokens": 6}))
    ids = torch.tensor([backend.tokenizer("The answer is")["input_ids"]])
    expected = backend.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=6)
    assert choice.usage.prompt_tokens == ids.shape[1]
    assert choice.token_ids == tuple(expected[0, ids.shape[1]:].tolist())


def test_unsupported_or_invalid_parameters_raise_non_retryable_errors(backend: TransformersBackend) -> None:
    """A parameter that would change sampling is refused by name; harmless and neutral ones are accepted."""
    for params in ({"frequency_penalty": 0.5}, {"logit_bias": {1: 5}}, {"temperature": -1}, {"top_p": 0},
                   {"max_tokens": 0}, {"stop": 3}, {"seed": "x"}):
        with pytest.raises(BackendError) as caught:
            complete(backend, Request(messages=(("user", QUESTION),), params=params))
        assert not caught.value.retryable and next(iter(params)) in str(caught.value)
    (accepted,) = complete(backend, chat(max_completion_tokens=2, timeout=30, frequency_penalty=0, top_k=-1,
                                         seed=0))
    # max_completion_tokens caps the sample; a random tiny model may end it early with its end-of-sequence token.
    assert accepted.token_ids is not None and 1 <= len(accepted.token_ids) <= 2
    if len(accepted.token_ids) == 2:
        assert accepted.finish_reason == "length"
    else:
        assert accepted.finish_reason == "stop" and accepted.token_ids[-1] == backend.tokenizer.eos_token_id


def test_cancelled_call_does_not_block_later_calls(backend: TransformersBackend) -> None:
    """A call cancelled by a timeout is abandoned and the backend keeps answering."""

    async def main() -> list[Completion]:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(backend.complete(chat(max_tokens=500)), timeout=0.01)
        return await backend.complete(chat(max_tokens=3))

    (answer,) = asyncio.run(main())
    tokens = answer.token_ids or ()  # a random tiny model may sample its end token before its limit
    assert 1 <= len(tokens) <= 3 and (len(tokens) == 3 or tokens[-1] in backend.eos_ids)


def test_graph_run_records_token_ids_logprobs_and_usage(backend: TransformersBackend) -> None:
    """sample then aggregate through the executor: traces carry token ids, usage, and logprobs where asked."""

    @sf.graph
    def sample_then_aggregate(problem):
        pop = sf.sample("Solve: {problem}", model="solver", n=4, params={"max_tokens": 8}, logprobs=True)
        return sf.aggregate(pop, model="solver", k=2, n=2, params={"max_tokens": 8})

    batches = backend.batches
    result = sample_then_aggregate.run_sync({"problem": "2+2"}, models={"solver": backend}, seed=0)
    assert result.ok and backend.batches == batches + 2  # the two aggregate calls shared a batch
    samples, aggregates = result.node("sample"), result.node("aggregate")
    assert len(samples) == 4 and len(aggregates) == 2
    for trace in samples + aggregates:
        assert trace.token_ids and trace.usage.completion_tokens == len(trace.token_ids)
        assert trace.usage.prompt_tokens > 0
    assert all(t.logprobs is not None and len(t.logprobs) == len(t.token_ids or ()) for t in samples)
    assert all(t.logprobs is None for t in aggregates)
    again = sample_then_aggregate.run_sync({"problem": "2+2"}, models={"solver": backend}, seed=0)
    assert [t.text for t in again.node("aggregate")] == [t.text for t in aggregates]


def test_module_imports_without_torch_and_asks_for_the_train_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the module loads no torch; building a backend without torch names the extra to install."""
    code = "import sys, scaffold.backends._transformers; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"scaffold-sdk\[train\]"):
        TransformersBackend("any-model")


def test_update_weights_waits_for_the_running_batch_and_labels_later_completions(tiny_model_dir: Any) -> None:
    """New weights land between batches: a batch running during the update keeps the old version's label and
    tokens, the next one has the new label and the new weights' logprobs; bad names or shapes change nothing."""
    engine = TransformersBackend(tiny_model_dir)
    try:
        request = chat(max_tokens=24, temperature=0, logprobs=True)
        before = complete(engine, request)[0]
        name = "model.layers.0.mlp.down_proj.weight"
        original = engine.model.state_dict()[name].clone()
        with pytest.raises(ValueError, match="no weights named"):
            engine.update_weights({"not.a.weight": original})
        with pytest.raises(ValueError, match="wrong shape"):
            engine.update_weights({name: original[:1]})
        assert engine.weights_version == 0 and torch.equal(engine.model.state_dict()[name], original)

        async def update_while_running() -> tuple[Completion, int, Completion]:
            running = asyncio.ensure_future(engine.complete(request))
            await wait_until_async(lambda: engine.batches != 1, timeout=120,  # the second batch (this request's)
                                   message="the request's batch never started", interval=0.001)
            version = await asyncio.to_thread(engine.update_weights, {name: original * 3}, version=7)
            return (await running)[0], version, (await engine.complete(request))[0]

        during, version, after = asyncio.run(update_while_running())
        assert version == 7 == engine.weights_version
        assert during.metadata["weight_versions"] == (("0", 0, len(during.token_ids)),)
        assert during.token_ids == before.token_ids and during.logprobs == before.logprobs
        assert after.metadata["weight_versions"] == (("7", 0, len(after.token_ids)),)
        assert after.logprobs != before.logprobs
        assert engine.update_weights([]) == 8  # no weights: only the label moves
    finally:
        engine.close()
