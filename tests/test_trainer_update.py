"""The update on real torch: the loss by hand, collation, and policy steps on the pocket model's own samples.

The rollouts are sampled once from the quick pocket model through ``TransformersBackend`` with
``logprobs=True``; every policy (full fine-tuning or LoRA) starts from the same weights, so the
recorded logprobs are its own at step 0.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from scaffold._types import Request, Trace
from scaffold.backends._transformers import TransformersBackend
from scaffold.pocket import PocketTask, solve_prompt
from trainers.batch import collate, prompt_ids
from trainers.loss import policy_loss, token_logprobs
from trainers.policy import LoraSettings, Policy, PolicyConfig
from trainers.types import Credited

FULL = PolicyConfig(lr=1e-4)
LORA = PolicyConfig(lr=3e-3, lora=LoraSettings(rank=4, alpha=8))


def trace(request: Request, index: int, token_ids: tuple[int, ...], logprobs: tuple[float, ...] | None) -> Trace:
    return Trace(id=f"r/solve#{index}", run_id="r", node="solve", index=index, model="pocket", request=request,
                 token_ids=token_ids, logprobs=logprobs)


@pytest.fixture(scope="module")
def pocket_dir(pocket_quick: Any) -> Path:
    return Path(pocket_quick[0])


@pytest.fixture(scope="module")
def rollouts(pocket_dir: Path) -> list[Credited]:
    """The two likeliest distinct samples of two problems: the likelier credited -1, the other +1.

    Against the model's preference, so both directions have room; one of each per problem, so the
    tokens they share get no net gradient at the first step and the update acts where they differ.
    """
    backend = TransformersBackend(pocket_dir)
    items: list[Credited] = []
    for number, row in enumerate(PocketTask(digits=2, terms=2).problems(12, seed=3, split="train")):
        request = Request(messages=(("user", solve_prompt(row["problem"])),), n=12, logprobs=True,
                          params={"temperature": 1.0, "max_tokens": 48}, seed=number)
        completions = asyncio.run(backend.complete(request))
        distinct = sorted({c.token_ids: c for c in completions}.values(), key=lambda c: -sum(c.logprobs or ()))
        if len(distinct) < 2:  # the model is sure of this one: no pair to pull apart
            continue
        for advantage, c in zip((-1.0, 1.0), distinct, strict=False):
            assert c.token_ids is not None and c.logprobs is not None
            items.append(Credited(trace(request, len(items), c.token_ids, c.logprobs), advantage, group=str(number)))
        if len(items) == 4:
            break
    backend.close()
    assert len(items) == 4
    return items


def mean_logprob(policy: Policy, items: list[Credited]) -> float:
    """Mean per-token log-probability of ``items``' recorded tokens under the policy."""
    batch = collate(items, policy.tokenizer, pad_id=policy.pad_id)
    with torch.no_grad():
        logprobs, _ = token_logprobs(policy.model, batch)
    return float(logprobs.sum() / batch.completion_mask_BT.sum())


# --- the loss by hand ------------------------------------------------------------------------------


def test_loss_at_ratio_one_is_minus_the_advantage_weighted_token_mean() -> None:
    """With new == old the loss is -mean(A) over tokens and its gradient is A per token (divided by the count)."""
    new = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, 0.0]], requires_grad=True)
    old = new.detach().clone()
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    loss, metrics = policy_loss(new, old, torch.tensor([2.0, -1.0]), mask)
    assert loss.item() == pytest.approx(-(2 + 2 - 1) / 3)
    loss.backward()
    assert new.grad is not None
    assert torch.allclose(new.grad, torch.tensor([[0.0, -2 / 3, -2 / 3], [0.0, 1 / 3, 0.0]]))
    assert metrics["clip_fraction"] == 0.0 and metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["tokens"] == 3.0


def test_clipping_removes_the_gradient_only_beyond_the_range_in_the_advantage_direction() -> None:
    """Ratio 1.5 with A>0 and ratio 0.5 with A<0 are clipped (no gradient); ratio 0.5 with A>0 is not."""
    ratios = torch.tensor([[1.5], [0.5], [0.5]])
    new = torch.log(ratios).requires_grad_(True)
    old = torch.zeros(3, 1)
    advantages = torch.tensor([1.0, 1.0, -1.0])
    loss, metrics = policy_loss(new, old, advantages, torch.ones(3, 1), clip_low=0.2, clip_high=0.3)
    # per token: -min(1.5, 1.3) = -1.3; -min(0.5, 0.8) = -0.5; -min(-0.5, -0.8) = 0.8
    assert loss.item() == pytest.approx((-1.3 - 0.5 + 0.8) / 3)
    loss.backward()
    assert new.grad is not None
    assert torch.allclose(new.grad, torch.tensor([[0.0], [-0.5 / 3], [0.0]]))
    assert metrics["clip_fraction"] == pytest.approx(2 / 3)
    assert metrics["ratio_mean"] == pytest.approx(2.5 / 3) and metrics["ratio_max"] == pytest.approx(1.5)


def test_k3_kl_penalty_and_sequence_normalisation_by_hand() -> None:
    """k3 = exp(ref - new) - (ref - new) - 1 per token; "sequence" averages each row first, then the rows."""
    new = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.0, -1.0 + 0.5, -1.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    k3 = torch.exp(torch.tensor(0.5)).item() - 0.5 - 1
    loss, metrics = policy_loss(new, new, torch.tensor([0.0, 0.0]), mask, kl_coef=0.1, ref_logprobs_BT=ref)
    assert metrics["kl"] == pytest.approx(k3 / 4)
    assert loss.item() == pytest.approx(0.1 * k3 / 4)
    loss, _ = policy_loss(new, new, torch.tensor([1.0, 4.0]), mask, normalise="sequence")
    assert loss.item() == pytest.approx(-(1.0 + 4.0) / 2)
    with pytest.raises(ValueError, match="ref_logprobs_BT"):
        policy_loss(new, new, torch.tensor([0.0, 0.0]), mask, kl_coef=0.1)


def test_token_logprobs_gather_the_previous_positions_log_softmax(tiny_model_dir: Any) -> None:
    """Position t holds log_softmax(logits[t-1])[id_t] for completion tokens, 0 elsewhere; entropy likewise."""
    policy = Policy(tiny_model_dir)
    request = Request(messages=(("user", "hi"),))
    items = [Credited(trace(request, 0, (5, 6, 7), (0.0,) * 3), 1.0),
             Credited(trace(request, 1, (9,), (0.0,)), -1.0)]
    batch = collate(items, policy.tokenizer, pad_id=policy.pad_id)
    logprobs, entropy = token_logprobs(policy.model, batch)
    prompt = prompt_ids(policy.tokenizer, request)
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt + [5, 6, 7]])).logits[0]
    expected = torch.log_softmax(logits, -1)[torch.arange(len(prompt) - 1, len(prompt) + 2), torch.tensor([5, 6, 7])]
    assert torch.allclose(logprobs[0, len(prompt):len(prompt) + 3], expected, atol=1e-5)
    assert logprobs[0, :len(prompt)].abs().sum() == 0 and logprobs[1, len(prompt) + 1:].abs().sum() == 0
    assert (entropy[0, len(prompt):len(prompt) + 3] > 0).all() and entropy[1, len(prompt) + 1:].abs().sum() == 0


# --- collation -------------------------------------------------------------------------------------


def test_collate_keeps_the_recorded_token_ids_and_right_pads(tiny_model_dir: Any) -> None:
    """Rows are the backend's prompt ids + the trace's exact token ids, right-padded, masks and logprobs aligned."""
    backend = TransformersBackend(tiny_model_dir)
    request = Request(messages=(("user", "what is two plus two?"),))
    assert prompt_ids(backend.tokenizer, request) == backend._encode(request)
    prompt = backend._encode(request)
    recorded = (backend.tokenizer.eos_token_id, 17, 17, 300)  # ids no text round trip would give back
    items = [Credited(trace(request, 0, recorded, (-0.1, -0.2, -0.3, -0.4)), 0.5, role="search"),
             Credited(trace(request, 1, (42,), (-1.5,)), -2.0, role="aggregate")]
    batch = collate(items, backend.tokenizer, pad_id=0)
    width = len(prompt) + 4
    assert batch.input_ids_BT.shape == (2, width)
    assert batch.input_ids_BT[0].tolist() == prompt + list(recorded)
    assert batch.input_ids_BT[1].tolist() == prompt + [42] + [0] * 3
    assert batch.attention_mask_BT[1].tolist() == [1] * (len(prompt) + 1) + [0] * 3
    assert batch.completion_mask_BT[0].tolist() == [0.0] * len(prompt) + [1.0] * 4
    assert batch.old_logprobs_BT[1, len(prompt)].item() == pytest.approx(-1.5)
    assert batch.advantages_B.tolist() == [0.5, -2.0] and batch.roles == ["search", "aggregate"]
    assert batch.tokens == 5
    short = collate(items, backend.tokenizer, pad_id=0, max_length=len(prompt) + 2)
    assert short.input_ids_BT[0].tolist() == prompt + list(recorded[:2]) and short.tokens == 3
    backend.close()


def test_a_trace_without_logprobs_raises_unless_the_policy_supplies_them(tiny_model_dir: Any) -> None:
    """Missing sampling logprobs are an error, or the current policy's no-grad logprobs when the caller asks."""
    policy = Policy(tiny_model_dir)
    request = Request(messages=(("user", "hi"),))
    items = [Credited(trace(request, 0, (5, 6), None), 1.0), Credited(trace(request, 1, (7,), (-0.25,)), 1.0)]
    with pytest.raises(ValueError, match="without logprobs"):
        collate(items, policy.tokenizer, pad_id=policy.pad_id)
    batch = collate(items, policy.tokenizer, pad_id=policy.pad_id, model=policy.model)
    with torch.no_grad():
        own, _ = token_logprobs(policy.model, batch)
    assert torch.allclose(batch.old_logprobs_BT[0], own[0]) and not batch.old_logprobs_BT.requires_grad
    assert batch.old_logprobs_BT[1].sum().item() == pytest.approx(-0.25)
    with pytest.raises(ValueError, match="without logprobs"):
        policy.step(items)
    assert policy.steps_done == 0 and policy.step(items, fill_logprobs=True).tokens == 3


# --- policy steps on the pocket model's own samples ------------------------------------------------


@pytest.mark.parametrize("config", [FULL, LORA], ids=["full", "lora"])
def test_recorded_logprobs_are_the_policys_own_before_any_update(pocket_dir: Path, rollouts: list[Credited],
                                                                 config: PolicyConfig) -> None:
    """At step 0 the importance ratio of every recorded token is 1 within 1e-4 (full fine-tuning and LoRA)."""
    policy = Policy(pocket_dir, config)
    batch = collate(rollouts, policy.tokenizer, pad_id=policy.pad_id)
    with torch.no_grad():
        logprobs, _ = token_logprobs(policy.model, batch)
    mask = batch.completion_mask_BT.bool()
    assert (logprobs[mask] - batch.old_logprobs_BT[mask]).abs().max() < 1e-4


@pytest.mark.parametrize("config", [FULL, LORA], ids=["full", "lora"])
def test_updates_raise_positively_and_lower_negatively_credited_traces(pocket_dir: Path, rollouts: list[Credited],
                                                                       config: PolicyConfig) -> None:
    """A few steps on a fixed credited batch move each trace's mean token logprob in its advantage's direction."""
    policy = Policy(pocket_dir, config)
    positive = [item for item in rollouts if item.advantage > 0]
    negative = [item for item in rollouts if item.advantage < 0]
    before = mean_logprob(policy, positive), mean_logprob(policy, negative)
    metrics = [policy.step(rollouts) for _ in range(4)]
    after = mean_logprob(policy, positive), mean_logprob(policy, negative)
    assert after[0] > before[0] + 0.02 and after[1] < before[1] - 0.02, (before, after)
    assert metrics[0].clip_fraction == 0.0 and metrics[0].extra["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert [m.step for m in metrics] == [1, 2, 3, 4] and policy.steps_done == 4
    assert metrics[0].tokens == sum(len(item.trace.token_ids or ()) for item in rollouts)
    assert metrics[-1].tokens_per_s > 0 and metrics[-1].entropy > 0 and metrics[-1].kl is None


def test_micro_batches_sum_to_the_whole_batch_gradient(pocket_dir: Path, rollouts: list[Credited]) -> None:
    """One step over 3 accumulated micro-batches gives the weights of one step over the whole batch."""
    whole, split = Policy(pocket_dir, FULL), Policy(pocket_dir, replace(FULL, grad_accumulation=3))
    assert len(split._micro_batches(len(rollouts))) == 3
    whole.step(rollouts)
    split.step(rollouts)
    for a, b in zip(whole.model.parameters(), split.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("config", [PolicyConfig(lr=1e-4, kl_coef=0.1, micro_batch_size=3),
                                    PolicyConfig(lr=3e-3, lora=LoraSettings(rank=4, dropout=0.1))],
                         ids=["full-kl", "lora-dropout"])
def test_resume_continues_exactly(pocket_dir: Path, rollouts: list[Credited], tmp_path: Path,
                                  config: PolicyConfig) -> None:
    """2 steps, save, resume, 1 step gives the weights of 3 uninterrupted steps (optimiser state and RNG included)."""
    straight = Policy(pocket_dir, config)
    for _ in range(3):
        straight.step(rollouts)
    expected = {name: tensor.clone() for name, tensor in straight.merged_weights().items()}

    first = Policy(pocket_dir, config)
    first.step(rollouts)
    first.step(rollouts)
    first.save(tmp_path / "ckpt")
    torch.manual_seed(1234)  # whatever ran in between
    resumed = Policy.resume(tmp_path / "ckpt")
    assert resumed.steps_done == 2 and resumed.config == config
    metrics = resumed.step(rollouts)
    assert metrics.step == 3 and (metrics.kl is not None) == (config.kl_coef > 0)
    for name, tensor in resumed.merged_weights().items():
        assert torch.allclose(tensor, expected[name], atol=1e-6), name


@pytest.mark.parametrize("config", [FULL, LORA], ids=["full", "lora"])
def test_backend_refresh_and_export_serve_the_current_weights(pocket_dir: Path, rollouts: list[Credited],
                                                              tmp_path: Path, config: PolicyConfig) -> None:
    """policy.backend() shares the live model; refresh copies into another one; export reloads with transformers."""
    from transformers import AutoModelForCausalLM

    policy = Policy(pocket_dir, config)
    shared = policy.backend()
    separate = TransformersBackend(pocket_dir)
    policy.step(rollouts)
    policy.step(rollouts)
    policy.refresh(shared)
    policy.refresh(separate)
    exported = AutoModelForCausalLM.from_pretrained(policy.export(tmp_path / "export"), dtype=torch.float32)
    request = rollouts[0].trace.request
    assert request is not None
    greedy = Request(messages=request.messages, params={"temperature": 0, "max_tokens": 24}, logprobs=True)
    (live,) = asyncio.run(shared.complete(greedy))
    (copied,) = asyncio.run(separate.complete(greedy))
    assert shared.model is policy.model and live.token_ids == copied.token_ids
    assert live.logprobs is not None and copied.logprobs is not None
    assert max(abs(a - b) for a, b in zip(live.logprobs, copied.logprobs, strict=True)) < 1e-4
    item = Credited(trace(greedy, 0, live.token_ids or (), live.logprobs), 1.0)
    batch = collate([item], policy.tokenizer, pad_id=policy.pad_id)
    with torch.no_grad():
        reloaded, _ = token_logprobs(exported, batch)
    mask = batch.completion_mask_BT.bool()
    assert (reloaded[mask] - batch.old_logprobs_BT[mask]).abs().max() < 1e-4
    shared.close()
    separate.close()
