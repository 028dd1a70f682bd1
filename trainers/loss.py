"""The update's tensors: token log-probabilities of a batch under a model, and the clipped policy-gradient loss.

Pure functions over tensors (shape suffixes: ``_B`` rows, ``_T`` positions). The loss is PPO's
clipped surrogate with a separate lower and upper clip range (DAPO's "clip-higher" when
``clip_high > clip_low``), importance-weighted by ``exp(new - old)`` against the recorded sampling
logprobs, with an optional KL penalty to a reference model estimated per token with Schulman's k3
(``exp(ref - new) - (ref - new) - 1``, unbiased and never negative). There is no value model: the
advantage is one scalar per sequence, given by credit assignment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

    from trainers.types import TrainBatch

Normalise = Literal["token", "sequence"]


def token_logprobs(model: Any, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy of each completion token of ``batch`` under ``model`` (0 elsewhere).

    Position ``t`` holds ``log_softmax(logits[t - 1])[input_ids[t]]``: the probability the model gave
    the token that was there, predicted from everything before it. Both tensors are float32,
    shaped like ``batch.input_ids_BT``, and carry gradients when ``model`` does.
    """
    import torch

    logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits[:, :-1].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, batch.input_ids_BT[:, 1:, None])[..., 0]
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    mask = batch.completion_mask_BT[:, 1:]
    zero = picked.new_zeros((picked.shape[0], 1))
    return torch.cat([zero, picked * mask], dim=1), torch.cat([zero, entropy * mask], dim=1)


def policy_loss(
    new_logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_coef: float = 0.0,
    ref_logprobs_BT: torch.Tensor | None = None,
    normalise: Normalise = "token",
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss to minimise, and what it measured.

    Per token: ``-min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)`` with ``r = exp(new - old)``,
    plus ``kl_coef * k3(ref, new)`` when ``kl_coef > 0`` (then ``ref_logprobs_BT`` is required).
    ``normalise="token"`` averages over every masked token of the batch (long sequences weigh
    more); ``"sequence"`` averages each sequence over its tokens, then over sequences.

    Metrics: ``clip_fraction`` (tokens whose gradient the clip removed), ``ratio_mean``, ``ratio_max``,
    ``kl`` (mean k3 over tokens; 0 without a reference) and ``tokens``.
    """
    import torch

    if kl_coef > 0 and ref_logprobs_BT is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs_BT")
    if normalise not in ("token", "sequence"):
        raise ValueError(f"normalise must be 'token' or 'sequence', not {normalise!r}")
    mask = mask_BT.float()
    advantages = advantages_B.float()[:, None]
    ratio = torch.exp((new_logprobs_BT - old_logprobs_BT) * mask)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if ref_logprobs_BT is not None:
        kl = k3(ref_logprobs_BT, new_logprobs_BT, mask)
        if kl_coef > 0:
            per_token = per_token + kl_coef * kl

    tokens = mask.sum()
    if normalise == "token":
        loss = (per_token * mask).sum() / tokens.clamp(min=1.0)
    else:
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        loss = per_sequence.mean()

    with torch.no_grad():
        was_clipped = ((clipped < unclipped) & (mask > 0)).float()
        denominator = float(tokens.clamp(min=1.0))
        metrics = {
            "clip_fraction": float(was_clipped.sum()) / denominator,
            "ratio_mean": float((ratio * mask).sum()) / denominator,
            "ratio_max": float(ratio.masked_fill(mask == 0, 0.0).max()) if tokens > 0 else 1.0,
            "kl": float((kl * mask).sum()) / denominator,
            "tokens": float(tokens),
        }
    return loss, metrics


def k3(ref_logprobs_BT: torch.Tensor, new_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(new || ref) per token: ``exp(ref - new) - (ref - new) - 1`` (0 where masked).

    Examples:
        >>> import torch
        >>> k3(torch.tensor([[-1.0]]), torch.tensor([[-1.0]]), torch.tensor([[1.0]])).item()
        0.0
    """
    import torch

    log_ratio = (ref_logprobs_BT - new_logprobs_BT) * mask_BT
    return torch.exp(log_ratio) - log_ratio - 1.0
