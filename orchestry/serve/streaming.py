"""Token-by-token streaming: a streamed request's text sent as its tokens are generated.

The batching worker runs a generate call in the generator's streaming context (`Served.streaming`,
given by the composition root), which reports each decode step's new token of every row. Each
streamed request holds a `TokenStream`: it decodes its tokens so far and passes on (`emit`, from
the worker thread) only text that cannot change any more, holding back

- the end of the text that may be the start of a stop string (OpenAI leaves stop strings out, so
  a stream never sends one, nor part of one), and everything after a stop string;
- with tools offered, everything from the first `<tool` on (it may become a call, sent as
  `tool_calls` at the end);
- an incomplete UTF-8 character (decoded as U+FFFD until its last byte comes).

The app's side (`Deltas`) carries the emitted text from the worker thread to the event loop that
writes the response; when a request's reply is ready, its stream sends what is left of it (what
the stream held back), its finish, then usage and `[DONE]` (`app.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)

CALL_OPEN = "<tool"
"""What may begin a tool call (envs/tools/protocol.OPEN): a stream holds text from it on."""


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to its first stop string (OpenAI leaves the stop string out), and whether one
    was met (the generation cut its tokens at the token completing it)."""
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(found)], True) if found else (text, False)


def _partial(text: str, marker: str) -> int:
    """How many characters at the end of `text` may begin `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class TokenStream:
    """One streamed request's text, passed on as its tokens come (module doc)."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        stop: Sequence[str],
        emit: Callable[[str], None],
        before_call: bool = False,
    ) -> None:
        """`decode(ids)`: the text of the tokens so far, as the generator decodes its completions
        (cut at the end of sequence); `stop`: the client's stop strings; `emit(text)`: send the
        next piece; `before_call`: tools are offered, so text from `<tool` on is held."""
        self._decode, self._stop, self._emit = decode, tuple(stop), emit
        self._before_call = before_call
        self._ids: list[int] = []
        self._ended = False
        self.sent = ""
        """The text sent so far."""

    def add(self, token: int) -> None:
        """The request's next token (in the worker thread)."""
        if self._ended:
            return
        self._ids.append(token)
        final = self._final(self._decode(self._ids))
        if len(final) > len(self.sent) and final.startswith(self.sent):
            self._emit(final[len(self.sent) :])
            self.sent = final

    def restart(self) -> bool:
        """Forget the tokens (the request is generated again); False when text was sent."""
        if self.sent:
            return False
        self._ids.clear()
        self._ended = False
        return True

    def _final(self, text: str) -> str:
        text, stopped = cut_at_stop(text, self._stop)
        if stopped:
            self._ended = True
            return text
        if self._before_call:
            found = text.lower().find(CALL_OPEN)
            if found >= 0:
                self._ended = True
                return text[:found]
        markers = [*self._stop, *([CALL_OPEN] if self._before_call else [])]
        held = max(
            (_partial(text.lower() if m == CALL_OPEN else text, m) for m in markers), default=0
        )
        return text[: len(text) - held].rstrip("\ufffd")


class Deltas:
    """The emitted text of a request's streams, carried from the worker thread to the event loop:
    `(index, text)` as it comes, `(index, None)` once the stream's future is done."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()

    def emitter(self, index: int) -> Callable[[str], None]:
        """What stream `index` calls (from the worker thread) with its next piece of text."""
        return lambda text: self._put((index, text))

    def watch(self, index: int, future: Future[Any]) -> None:
        future.add_done_callback(lambda _: self._put((index, None)))

    def _put(self, item: tuple[int, str | None]) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop closed (the server stops): nobody reads it
            pass

    async def items(self, streams: int) -> AsyncIterator[tuple[int, str | None]]:
        """Every item until each of `streams` streams is done."""
        done = 0
        while done < streams:
            item = await self._queue.get()
            done += item[1] is None
            yield item
