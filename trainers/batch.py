"""Credited traces to padded tensors: the prompt rebuilt as the backend encoded it, the completion as recorded.

The completion is never re-tokenised: ``trace.token_ids`` are the ids the model sampled (EOS
included), and decoding then re-encoding text can give other ids for the same string. The prompt is
rebuilt with :func:`scaffold.backends._transformers.encode_prompt`, the function the transformers
backend itself uses, so the sequence trained on is the sequence that was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scaffold._types import Request
from scaffold.backends._transformers import encode_prompt
from trainers.types import Credited, TrainBatch

if TYPE_CHECKING:
    import torch


def prompt_ids(tokenizer: Any, request: Request) -> list[int]:
    """The prompt token ids of ``request``, exactly as :class:`~scaffold.TransformersBackend` encodes them."""
    return encode_prompt(tokenizer, request)


def collate(items: Sequence[Credited], tokenizer: Any, *, pad_id: int, max_length: int | None = None,
            model: Any = None) -> TrainBatch:
    """Right-padded prompt + recorded completion ids, masks, sampling logprobs and advantages of ``items``.

    ``old_logprobs_BT`` come from ``trace.logprobs``. A trace recorded without logprobs raises
    ``ValueError`` unless ``model`` is given: then a no-grad forward pass of ``model`` (the current
    policy) supplies them, which makes that trace's importance ratio 1 at the first update.
    ``max_length`` caps prompt + completion: the completion's tail is cut (the tokens kept are still
    the sampled ones), and a prompt that leaves no room for a completion token raises ``ValueError``.
    """
    import torch

    if not items:
        raise ValueError("collate needs at least one credited trace")
    rows: list[tuple[list[int], list[int], list[float] | None]] = []
    for item in items:
        trace = item.trace
        if trace.request is None or not trace.token_ids:
            raise ValueError(f"trace {trace.id} has no request or no recorded token ids: it cannot be trained on")
        if trace.logprobs is not None and len(trace.logprobs) != len(trace.token_ids):
            raise ValueError(f"trace {trace.id} has {len(trace.logprobs)} logprobs for {len(trace.token_ids)} tokens")
        if trace.logprobs is None and model is None:
            raise ValueError(f"trace {trace.id} was recorded without logprobs; sample with logprobs=True "
                             "or pass model=... to compute them with the current policy")
        prompt = prompt_ids(tokenizer, trace.request)
        completion = list(trace.token_ids)
        logprobs = list(trace.logprobs) if trace.logprobs is not None else None
        if max_length is not None:
            room = max_length - len(prompt)
            if room < 1:
                raise ValueError(f"trace {trace.id}: the prompt has {len(prompt)} tokens, max_length is {max_length}")
            completion = completion[:room]
            logprobs = logprobs[:room] if logprobs is not None else None
        rows.append((prompt, completion, logprobs))

    width = max(len(prompt) + len(completion) for prompt, completion, _ in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    attention = torch.zeros(shape, dtype=torch.long)
    completion_mask = torch.zeros(shape, dtype=torch.float32)
    old_logprobs = torch.zeros(shape, dtype=torch.float32)
    for i, (prompt, completion, logprobs) in enumerate(rows):
        start, end = len(prompt), len(prompt) + len(completion)
        input_ids[i, :end] = torch.tensor(prompt + completion, dtype=torch.long)
        attention[i, :end] = 1
        completion_mask[i, start:end] = 1.0
        if logprobs is not None:
            old_logprobs[i, start:end] = torch.tensor(logprobs, dtype=torch.float32)
    batch = TrainBatch(
        input_ids_BT=input_ids,
        attention_mask_BT=attention,
        completion_mask_BT=completion_mask,
        old_logprobs_BT=old_logprobs,
        advantages_B=torch.tensor([item.advantage for item in items], dtype=torch.float32),
        roles=[item.role for item in items],
    )
    missing = [i for i, (_, _, logprobs) in enumerate(rows) if logprobs is None]
    if missing:
        batch.old_logprobs_BT[missing] = _policy_logprobs(model, batch)[missing]
    return batch


def _policy_logprobs(model: Any, batch: TrainBatch) -> torch.Tensor:
    """The current policy's logprobs of the batch's completion tokens, without a graph."""
    import torch

    from trainers.loss import token_logprobs

    was_training = model.training
    model.eval()  # no dropout: these stand for the sampling distribution
    try:
        with torch.no_grad():
            logprobs, _ = token_logprobs(model, batch)
    finally:
        model.train(was_training)
    return logprobs.float()
