"""Refreshing an in-process vLLM engine from the policy on vLLM's CPU build (one engine per process: its own module).

After policy steps and ``policy.refresh(engine)``, vLLM's greedy tokens and their logprobs equal
those of the updated transformers model: for full fine-tuning (``update_weights``), for LoRA through
``load_lora`` and for LoRA merged into the base weights.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from scaffold._types import Completion, Request, Trace
from trainers.batch import collate
from trainers.loss import token_logprobs
from trainers.policy import LoraSettings, Policy, PolicyConfig
from trainers.types import Credited

pytest.importorskip("vllm")  # as in every vLLM test module; with CI=true a vLLM that does not import fails (conftest)

pytestmark = [
    pytest.mark.slow,
    # Raised by vLLM while it starts an engine (see tests/test_backend_vllm.py); not actionable here.
    pytest.mark.filterwarnings(r"ignore:`torch\.distributed\.reduce_op` is deprecated:FutureWarning"),
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.script_method` is deprecated:DeprecationWarning"),
    # one pytest-xdist worker runs the module, so its engine starts once, not once per worker
    pytest.mark.xdist_group("vllm"),
]

QUESTION = "what is two plus two?"


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Iterator[Any]:
    """One in-process vLLM engine over the tiny model, with LoRA enabled."""
    from scaffold.backends._vllm import VLLMBackend

    backend = VLLMBackend(tiny_model_dir, enable_lora=True, max_lora_rank=16, max_model_len=512)
    yield backend
    backend.close()


def run(backend: Any, request: Request) -> list[Completion]:
    return asyncio.run(backend.complete(request))


def credited_rollouts(policy: Policy) -> list[Credited]:
    """Eight samples of the policy's own, credited +1 / -1 alternately."""
    backend = policy.backend()
    request = Request(messages=(("user", QUESTION),), n=8, logprobs=True, params={"max_tokens": 16}, seed=5)
    completions = run(backend, request)
    backend.close()
    return [Credited(Trace(id=f"r/s#{i}", run_id="r", node="s", index=i, request=request, token_ids=c.token_ids,
                           logprobs=c.logprobs), 1.0 if i % 2 == 0 else -1.0) for i, c in enumerate(completions)]


def assert_engine_matches_policy(engine: Any, policy: Policy) -> tuple[int, ...]:
    """vLLM's greedy completion is the policy's greedy completion, with the policy's logprobs (1e-4)."""
    greedy = Request(messages=(("user", QUESTION),), params={"temperature": 0, "max_tokens": 16}, logprobs=True)
    (served,) = run(engine, greedy)
    backend = policy.backend()
    (reference,) = run(backend, greedy)
    backend.close()
    assert served.token_ids == reference.token_ids and served.token_ids is not None
    item = Credited(Trace(id="r/g#0", run_id="r", node="g", index=0, request=greedy, token_ids=served.token_ids,
                          logprobs=served.logprobs), 0.0)
    batch = collate([item], policy.tokenizer, pad_id=policy.pad_id)
    with torch.no_grad():
        own, _ = token_logprobs(policy.model, batch)
    mask = batch.completion_mask_BT.bool()
    assert (own[mask] - batch.old_logprobs_BT[mask]).abs().max() < 1e-4
    return served.token_ids


@pytest.mark.parametrize("merge", [False, True], ids=["adapter", "merged"])
def test_lora_refresh_serves_the_trained_adapter(engine: Any, tiny_model_dir: Path, merge: bool) -> None:
    """A LoRA policy after two steps: vLLM serves it (loaded adapter, or merged weights) as transformers does."""
    policy = Policy(tiny_model_dir, PolicyConfig(lr=5e-2, lora=LoraSettings(rank=8)))
    items = credited_rollouts(policy)
    original = policy.merged_weights()
    before = assert_engine_matches_policy(engine, policy)
    policy.step(items)
    policy.step(items)
    try:
        policy.refresh(engine, merge=merge)
        assert engine.active_lora == (None if merge else "policy")
        assert assert_engine_matches_policy(engine, policy) != before
    finally:
        engine.active_lora = None
        if merge:
            engine.update_weights(original)


def test_full_refresh_updates_the_engine_weights_in_place(engine: Any, tiny_model_dir: Path) -> None:
    """A fully fine-tuned policy after two steps: ``update_weights`` makes vLLM answer as the updated model."""
    policy = Policy(tiny_model_dir, PolicyConfig(lr=1e-2))
    original = {name: tensor.clone() for name, tensor in policy.merged_weights().items()}
    items = credited_rollouts(policy)
    before = assert_engine_matches_policy(engine, policy)
    policy.step(items)
    policy.step(items)
    try:
        policy.refresh(engine)
        assert engine.weights_version == policy.steps_done == 2  # labelled with the policy's version
        assert assert_engine_matches_policy(engine, policy) != before
    finally:
        engine.update_weights(original)
