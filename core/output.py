"""Output: the verified tokens so far, streaming text deltas, and the stop rules. A stop string
cuts the text and the ids alike: the ids kept are the fewest that spell the kept text, so every
method reports the same ids and counts (with stop strings, ids wait in events until their text
is released)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Event:
    """What one commit adds: target token ids, where each came from, the new text."""
    tokens: list[int] = field(default_factory=list)
    # "target" (the target's own), "draft" (model-drafted, accepted), "lookup" (proposed by
    # the suffix index, accepted)
    sources: list[str] = field(default_factory=list)
    text: str = ""
    done: bool = False
    stats: dict | None = None  # set on the final event
    logprobs: list | None = None  # core.logprobs.TokenLogprob per token, when asked for


class Output:
    """Decodes incrementally: the ids before `_head` are settled (their text released and
    before any place a stop string may still start); only the ids after it are decoded again,
    with a few settled ids before them for the tokenizer's spacing."""
    CONTEXT = 4  # settled ids decoded before the tail, so the tail is spaced as in full text
    KEEP = 8  # ids kept in the tail when the head moves on

    def __init__(self, decode: Callable[[list[int]], str], eos_ids: set[int],
                 max_new_tokens: int, stop_strings: tuple[str, ...] = ()):
        self.decode, self.eos_ids = decode, eos_ids
        self.max_new_tokens, self.stop_strings = max_new_tokens, tuple(s for s in stop_strings if s)
        self.limit_reason = "max_new_tokens"  # or "context_window" when the window is nearer
        self.ids: list[int] = []
        self.sources: list[str] = []
        self.logprobs: list | None = None  # TokenLogprob per id, once a push brings them
        self.sent = 0  # ids handed out in events so far
        self.text = ""  # text released so far
        self.done = False
        self.reason = ""
        self._head, self._head_chars = 0, 0  # settled ids, and the characters of their text
        self._longest = max(map(len, self.stop_strings), default=0)

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.ids)

    def push(self, tokens: list[int], sources: list[str], logprobs: list | None = None) -> Event:
        """Commit verified tokens, stopping at EOS, max tokens or a stop string."""
        ev = Event()
        if logprobs is not None and self.logprobs is None:
            self.logprobs = []
        for i, (tok, src) in enumerate(zip(tokens, sources)):
            if self.done:
                break
            if tok in self.eos_ids:
                self._finish("eos")
                break
            self.ids.append(tok)
            self.sources.append(src)
            if logprobs is not None:
                self.logprobs.append(logprobs[i])
            if self.remaining <= 0:
                self._finish(self.limit_reason)
        ev.text = self._release()
        self._hand_out(ev)
        ev.done = self.done
        return ev

    def stop(self) -> Event:
        """The caller stopped early: release any text held back, as a last event."""
        self._finish("stopped")
        ev = Event(text=self._release(), done=True)
        self._hand_out(ev)
        return ev

    def _tail(self, end: int | None = None) -> str:
        """The text of ids[_head:end], spaced as in the text of all ids up to end."""
        lo = max(0, self._head - self.CONTEXT)
        before = self.decode(self.ids[lo:self._head]) if lo < self._head else ""
        text = self.decode(self.ids[lo:end])
        return text[len(before):]

    def _hand_out(self, ev: Event) -> None:
        """Put the ids whose text is out (all of them once done) in the event."""
        n = len(self.ids)
        if self.stop_strings and not self.done:
            out = len(self.text) - self._head_chars
            while n > self.sent and len(self._tail(n)) > out:
                n -= 1
        ev.tokens, ev.sources = self.ids[self.sent:n], self.sources[self.sent:n]
        if self.logprobs is not None:
            ev.logprobs = self.logprobs[self.sent:n]
        self.sent = n
        self._settle()

    def _settle(self) -> None:
        """Move the head on (KEEP ids at a time, at least KEEP before the last handed out) to
        where the text before it is out, ends on a whole character and ends before any stop
        string may start."""
        k = self.sent - self.KEEP
        while not self.done and k - self._head >= self.KEEP:
            head = self._tail(k)
            chars = self._head_chars + len(head)
            if not head.endswith("\ufffd") and chars <= len(self.text) - self._longest:
                self._head, self._head_chars = k, chars
                return
            k -= self.KEEP

    def _cut_ids(self, cut: int) -> None:
        """Keep the fewest ids whose text reaches `cut` (the stop string's start, counted in
        the tail's characters)."""
        k = max(self.sent, self._head)
        while k < len(self.ids) and len(self._tail(k)) < cut:
            k += 1
        del self.ids[k:], self.sources[k:]
        if self.logprobs is not None:
            del self.logprobs[k:]

    def _finish(self, reason: str) -> None:
        self.done, self.reason = True, reason

    def _release(self) -> str:
        """The new text to hand out; all text before the head is out already."""
        tail, out = self._tail(), self.text[self._head_chars:]
        cut = self._stop_cut(tail, out)
        if cut is not None:
            tail = tail[:cut]
            self._cut_ids(cut)
            self._finish("stop_string")
        elif not self.done:
            tail = tail.rstrip("\ufffd")  # wait for the rest of a split UTF-8 character
            tail = tail[:max(len(tail) - self._hold(tail), 0)]
        if not tail.startswith(out):  # tokenizer re-spaced earlier text: release as is
            tail = out + tail[len(out):]
        delta = tail[len(out):]
        self.text += delta
        return delta

    def _stop_cut(self, tail: str, out: str) -> int | None:
        hits = [tail.find(s, max(0, len(out) - len(s))) for s in self.stop_strings]
        hits = [h for h in hits if h >= 0]
        return min(hits) if hits else None

    def _hold(self, full: str) -> int:
        """Characters to hold back because they may be the start of a stop string."""
        hold = 0
        for s in self.stop_strings:
            for k in range(min(len(s) - 1, len(full)), 0, -1):
                if full.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        return hold
