"""The preallocated decoding cache gives exactly transformers' own results, past its capacity too."""

from __future__ import annotations

from typing import Any

import torch

from scaffold.backends._kv_cache import PreallocatedLayer, cache_argument, decoding_cache


def greedy_logits(model: Any, prompt_BT: torch.Tensor, steps: int, cache: Any) -> list[torch.Tensor]:
    """The last-position logits of ``steps`` greedy decoding steps from a left-padded batch."""
    mask = torch.ones_like(prompt_BT)
    mask[0, :2] = 0  # the first row is padded on the left
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=prompt_BT, attention_mask=mask, position_ids=positions, use_cache=True,
                **cache_argument(model, cache))
    seen = []
    next_positions = positions[:, -1:] + 1
    for _ in range(steps):
        logits = out.logits[:, -1, :]
        seen.append(logits)
        token = logits.argmax(-1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_positions, use_cache=True,
                    **cache_argument(model, cache))
        next_positions = next_positions + 1
    return seen


def test_decoding_cache_matches_the_default_cache_and_grows(tiny_model_dir: Any) -> None:
    """Greedy logits over 12 steps equal DynamicCache's with room for 3 positions (grown by doubling) or 64."""
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompt = torch.randint(3, 50, (2, 6))
    with torch.no_grad():
        expected = greedy_logits(model, prompt, 12, DynamicCache(config=model.config))
        for capacity in (3, 64):
            cache = decoding_cache(model, capacity)
            assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
            got = greedy_logits(model, prompt, 12, cache)
            assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
            assert cache.get_seq_length() == 6 + 12


def test_the_cache_goes_by_the_name_the_installed_transformers_takes(tiny_model_dir: Any) -> None:
    """``cache`` where forward takes it, else ``past_key_values``; a real decode warns about neither."""
    import warnings

    from transformers import AutoModelForCausalLM

    class Renamed(torch.nn.Module):
        def forward(self, input_ids: Any = None, cache: Any = None, **kwargs: Any) -> None: ...

    class Older(torch.nn.Module):
        def forward(self, input_ids: Any = None, past_key_values: Any = None, **kwargs: Any) -> None: ...

    assert list(cache_argument(Renamed(), "c")) == ["cache"]
    assert list(cache_argument(Older(), "c")) == ["past_key_values"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        greedy_logits(model, torch.randint(3, 50, (2, 6)), 3, decoding_cache(model, 16))
    assert not [w for w in caught if "past_key_values" in str(w.message) or "cache_params" in str(w.message)]
