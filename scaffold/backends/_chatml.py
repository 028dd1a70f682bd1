"""ChatML, the chat format of Qwen2 models: its template and its three special tokens.

The tiny test model (:mod:`scaffold.testing`) and the pocket model's tokenizer (:mod:`scaffold.pocket`)
both save it beside their weights, so the transformers backend and a vLLM server format chats the same way.

Examples:
    >>> SPECIAL_TOKENS[1]
    '<|im_start|>'
"""

from __future__ import annotations

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML, the template Qwen2 models use."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""End of text, start of a message, end of a message."""
