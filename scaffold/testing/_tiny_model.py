"""A tiny randomly initialised chat model, built locally with no download.

It speaks gibberish, but it is a real Hugging Face causal LM (a Qwen2 config) with a
real byte-level BPE tokenizer and a ChatML chat template, saved with ``save_pretrained``:
the transformers backend, a vLLM engine or server, and the trainer all load the same
directory. Tests use it wherever the real machinery (tokenisation, sampling, logprobs,
weight updates) matters more than what the model says.

The output embedding is *untied* from the input embedding: vLLM's in-place weight
updates silently skip a tied output layer.

Needs the ``train`` extra (torch, transformers, tokenizers).
"""

from __future__ import annotations

import json
from pathlib import Path

from scaffold.backends._chatml import CHAT_TEMPLATE, SPECIAL_TOKENS

_CORPUS = [
    "Solve the problem step by step and put the final answer in \\boxed{}.",
    "The answer is \\boxed{42}. First add 12 and 30, then check the sum.",
    "Candidate solutions: review each one, correct mistakes and write one solution.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 + - * / = ( ) { } [ ] < > ? ! . , ; :",
    "system user assistant what is two plus two? four. three times five is fifteen.",
]


def build_tiny_model(
    path: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 128,
    layers: int = 2,
    vocab_size: int = 512,
    max_positions: int = 1024,
) -> Path:
    """Build, save and return the directory of a tiny random Qwen2 chat model.

    Deterministic for a given ``seed``. Takes a few seconds (mostly imports). The default
    width gives 4 heads of 32 dimensions, the smallest head size vLLM's CPU attention takes.

    Examples:
        >>> from scaffold.testing import build_tiny_model
        >>> directory = build_tiny_model("/tmp/tiny-model")  # doctest: +SKIP
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    pad_id = int(tokenizer.convert_tokens_to_ids("<|endoftext|>"))  # type: ignore[arg-type]
    eos_id = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))  # type: ignore[arg-type]
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),  # no id the model can sample lacks a token
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "scaffold.json").write_text(json.dumps({"kind": "tiny-random", "seed": seed}))
    return path
