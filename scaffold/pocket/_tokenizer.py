"""The pocket model's tokenizer: one token per character, built locally with ``tokenizers``.

Every printable ASCII character and the newline is a token, plus ChatML's three special tokens;
a character outside that alphabet is dropped when encoding. It is saved as a
``PreTrainedTokenizerFast`` with the ChatML chat template, so ``AutoTokenizer``, the transformers
backend and a vLLM server read it from the model directory.

The characters are stored in their byte-level spelling (space is ``Ġ``, newline ``Ċ``) behind a
byte-level pre-tokenizer, as Qwen2 tokenizers are: transformers 5 loads any tokenizer saved next
to a Qwen2 config as a ``Qwen2Tokenizer``, which imposes that pipeline, and a plain character
vocabulary would then lose its spaces and newlines. With no merges the pipeline still yields one
token per character, and the tokenizer built here encodes exactly as the one loaded from disk.
"""

from __future__ import annotations

import string
from typing import Any

from scaffold.backends._chatml import CHAT_TEMPLATE, SPECIAL_TOKENS

ALPHABET = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
"""The 96 characters with a token: printable ASCII (space included) and the newline."""

_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""Qwen2's pre-tokenizing pattern (irrelevant to the ids here: without merges every character is a token)."""


def byte_level(char: str) -> str:
    """The byte-level spelling of an ASCII character (GPT-2's ``bytes_to_unicode``)."""
    code = ord(char)
    if 33 <= code <= 126:
        return char
    shifted = [b for b in range(256) if not (33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255)]
    return chr(256 + shifted.index(code))


def build_tokenizer() -> Any:
    """A character-level ``PreTrainedTokenizerFast`` with ChatML special tokens and chat template.

    Ids: ``<|endoftext|>`` (padding) 0, ``<|im_start|>`` 1, ``<|im_end|>`` (end of sequence) 2,
    then the characters of :data:`ALPHABET` in order.

    Examples:
        >>> tokenizer = build_tokenizer()
        >>> tokenizer.decode(tokenizer("1 + 2\\n")["input_ids"])
        '1 + 2\\n'
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *map(byte_level, ALPHABET)])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
