"""Streaming from the in-process transformers backend: text handed out as the batch loop samples tokens.

Each streamed choice (a row of a generation batch) carries a :class:`RowStream`. After every
sampled token the worker thread decodes the row's ids so far and sends a
:class:`~scaffold._types.Delta` to the caller's event loop: the token id (and its logprob when
asked) and whatever text has become certain. Text is held back while it could still change:
the last ``len(longest stop string) - 1`` characters (a stop string may be completing; the final
text is cut before it) and a trailing unfinished UTF-8 character. When the choice ends,
:func:`stream_request` sends what remains of the final text, then the completions.

The deltas' ids concatenate to the completion's ``token_ids``; their texts to its ``text`` (for
tokenizers whose decoding of a prefix is a prefix of the whole decoding, as byte-level BPE's is;
otherwise the held text is handed out only at the end).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from scaffold._types import Delta, Finished, Request, StreamItem
from scaffold.backends._tool_text import with_tool_calls

if TYPE_CHECKING:
    from scaffold.backends._transformers import TransformersBackend

__all__ = ["RowStream", "stream_request"]


class RowStream:
    """Where one streamed choice's deltas go (built on the event loop, fed by the worker thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Delta | None], choice: int,
                 stops: Sequence[str]) -> None:
        self.loop = loop
        self.queue = queue
        self.choice = choice
        self.hold = max((len(stop) for stop in stops), default=1) - 1
        self.sent = ""
        """The text handed out so far."""

    def push(self, token: int, logprob: float | None, text: str | None) -> None:
        """Hand out ``token`` and the text that became certain; ``text`` is the row's decoded text so far
        (``None`` once the row has finished: its remainder comes with the final text)."""
        new = ""
        if text is not None:
            text = text.rstrip("\ufffd")  # the bytes of a character not yet complete
            visible = text[: max(0, len(text) - self.hold)]
            if len(visible) > len(self.sent) and visible.startswith(self.sent):
                new, self.sent = visible[len(self.sent):], visible
        delta = Delta(self.choice, new, (token,), None if logprob is None else (logprob,))
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, delta)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass


async def stream_request(backend: TransformersBackend, request: Request) -> AsyncIterator[StreamItem]:
    """Stream ``request`` on ``backend``: deltas as the batch loop samples, then one ``Finished``."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Delta | None] = asyncio.Queue()
    stops = backend._stop_strings(request)
    streams = [RowStream(loop, queue, choice, stops) for choice in range(request.n)]
    job = backend._submit(request, streams)
    job.future.add_done_callback(lambda _: queue.put_nowait(None))  # after every delta the worker sent
    try:
        while (delta := await queue.get()) is not None:
            yield delta
        completions = job.future.result()
        for choice, (completion, stream) in enumerate(zip(completions, streams)):
            text = completion.text
            if len(text) > len(stream.sent) and text.startswith(stream.sent):
                yield Delta(choice, text[len(stream.sent):])
        yield Finished(tuple(with_tool_calls(request, completions)))
    finally:
        if not job.future.done():  # left early: the batch loop drops the rows of a finished job
            job.future.cancel()
