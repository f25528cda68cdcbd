"""What a re-decode is given besides its audio, and how a loop takes it away.

Three things come from the session's past decodes: the prompt (the committed text said
before the buffer, as openai-whisper's transcribe conditions a window on the text before
it), the prefix (the words committed from the buffer itself, given as the start of the
transcript: live/decoders.py; the last of them without the punctuation after it when the
policy asks so: its reopens_last_word), and the draft (the previous decode's tokens, when it was
made for the same buffer start and prompt: speculative.py).

A decoder can loop on what it is given. Given words that end in a repeat ("Montreal. Uh.
Uh."), it can take the repeat up and loop on every decode after; without them it hears
the buffer anew (its committed words are then dropped by the policy's rule 1, as they
take their old times). So one loop with a prefix ends the prefix for that buffer, and
`loop_reset_after` loops in a row end its prompt. Both come back with the next buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ..events import DecodeResult
from .decoders import Prefix
from .transcript import Transcript


@dataclass(frozen=True)
class DecodeContext:
    prompt: Optional[str]
    prefix: Optional[Prefix]
    draft: Optional[Tuple[int, ...]]


class ContextKeeper:
    """The prompt, prefix and draft for each re-decode of a buffer (buffers are named by
    the stream sample they start at)."""

    def __init__(self, transcript: Transcript, reopens_last_word: bool, prompt_chars: int, loop_reset_after: int):
        self.transcript = transcript
        self.reopens_last_word = reopens_last_word  # the policy's (alignatt.py)
        self.prompt_chars = prompt_chars
        self.loop_reset_after = loop_reset_after
        self.loops_in_row = 0  # looped decodes of this buffer in a row
        self._unprompted_buffer: Optional[int] = None  # the buffer start that loops on its prompt
        self._unprefixed_buffer: Optional[int] = None  # the buffer start that looped on its prefix
        # the previous decode's tokens, with the buffer start and prompt it was made for
        self._draft: Optional[Tuple[int, Optional[str], Tuple[int, ...]]] = None

    def unprompted(self, buffer_start: int) -> bool:
        return self._unprompted_buffer == buffer_start

    def for_decode(self, buffer_start: int, buffer_start_s: float) -> DecodeContext:
        prompt = self.prompt(buffer_start, buffer_start_s)
        draft = None
        if self._draft is not None and self._draft[:2] == (buffer_start, prompt):
            draft = self._draft[2]  # same audio start and prompt: the text so far is known
        return DecodeContext(prompt, self._prefix(buffer_start, buffer_start_s), draft)

    def decoded(self, buffer_start: int, context: DecodeContext, result: Optional[DecodeResult],
                looped: bool) -> str:
        """Learn from a decode made with `context`; what changed, for the log ("" if nothing)."""
        self._draft = (buffer_start, context.prompt, tuple(result.tokens)) if result is not None else None
        self.loops_in_row = self.loops_in_row + 1 if looped else 0
        said = ""
        if looped and context.prefix is not None:
            self._unprefixed_buffer = buffer_start
            said += "; this buffer is decoded without the words committed from it from now on"
        if looped and self.loops_in_row == self.loop_reset_after:
            self._unprompted_buffer = buffer_start
            said += f"; {self.loops_in_row} in a row: this buffer is decoded without the prompt"
        return said

    def new_buffer(self) -> None:
        """The buffer was cut: loops are counted per buffer (LiveConfig.loop_reset_after)."""
        self.loops_in_row = 0

    def prompt(self, buffer_start: int, buffer_start_s: float) -> Optional[str]:
        """A streamed decode's prompt: the text before the buffer, unless its decodes
        keep looping on it."""
        return None if self.unprompted(buffer_start) else self.text_before(buffer_start_s)

    def text_before(self, buffer_start_s: float) -> Optional[str]:
        """The committed text said before the buffer (after a cut or a restart, all of it
        final): the final pass's prompt, whose temperature fallback deals with loops."""
        text = " ".join(w.text for w in self.transcript.committed_before(buffer_start_s))
        return text[-self.prompt_chars:].lstrip() or None

    def _prefix(self, buffer_start: int, buffer_start_s: float) -> Optional[Prefix]:
        """The words committed from this buffer: the decode is given them as its start
        (unless a decode of this buffer looped on them)."""
        if self._unprefixed_buffer == buffer_start:
            return None
        words = self.transcript.committed_after(buffer_start_s)
        if not words:
            return None
        texts = [w.text for w in words]
        if self.reopens_last_word:
            texts[-1] = without_closing_punctuation(texts[-1])
        return Prefix(tuple(texts), max(0.0, words[0].start - buffer_start_s))


def without_closing_punctuation(word: str) -> str:
    """"Montreal." -> "Montreal"; a word of punctuation only ("...") stays."""
    return word.rstrip(".,?!…;:\"')]") or word
