"""Putting the browser microphone's streamed chunks back in the order they were recorded.

Why: Gradio 6.31's streaming microphone uploads each 0.1 s chunk as its own POST /upload and
then announces it with its own POST /stream. Neither carries a position, and both race on
separate connections: measured here on a 25 s recording, about 1 chunk in 25 reached the
server before the one recorded just before it (at the start of a recording, the first four
arrived as 3, 1, 2, 0). Sorting by upload time does not help (the uploads themselves finish
out of order). Each swap garbles a tenth of a second of speech.

So the page numbers its own recordings: `NUMBERING_JS` (put in the page's <head>) wraps
`fetch` and renames each uploaded "audio.wav" (the name Gradio's recorder gives every chunk)
to "audio.seq00000042.wav", counting in the order the recorder produced them. The server
reads the number back from the uploaded file's name (`chunk_number`) and a
`ChunkSequencer` per page releases chunks in that order. A client that does not
number its chunks (an API caller, or a page without the script) keeps arrival order.
"""

from __future__ import annotations

import heapq
import re
import time
from pathlib import Path
from typing import Callable, List, Optional, Tuple

NUMBERING_JS = """
<script>
// whisper-kv: number the microphone's streamed chunks (see whisper_demo/ui/chunk_order.py)
(() => {
  const realFetch = window.fetch;
  let next = 0;
  window.fetch = function (input, init) {
    try {
      const url = typeof input === "string" ? input : (input && input.url) || "";
      const body = init && init.body;
      if (init && init.method === "POST" && /\\/gradio_api\\/upload(\\?|$)/.test(url)
          && body instanceof FormData) {
        const files = body.getAll("files");
        if (files.length === 1 && files[0] instanceof File && files[0].name === "audio.wav") {
          const numbered = new FormData();
          const n = String(next++).padStart(8, "0");
          numbered.append("files", files[0], `audio.seq${n}.wav`);
          init = Object.assign({}, init, { body: numbered });
        }
      }
    } catch (e) {
      // never stand between the page and its uploads
    }
    return realFetch.call(this, input, init);
  };
})();
</script>
"""

_NUMBER = re.compile(r"\.seq(\d{1,12})\.wav$")


def chunk_number(path) -> Optional[int]:
    """The recording position the page gave this uploaded chunk, or None."""
    match = _NUMBER.search(Path(str(path)).name)
    return int(match.group(1)) if match else None


class ChunkSequencer:
    """One page's streamed chunks in, the same chunks out in recording order.

    A numbered chunk is released once every chunk numbered before it has been. One that
    follows a gap waits at most `max_wait_s` for the missing chunk; after that the gap is
    accepted (the chunk was lost, or its number went to another recording on the page,
    e.g. the Transcribe tab's microphone). A chunk that arrives after its place was given
    up is released at once, late, rather than dropped. Unnumbered chunks are released as
    they come. The page counts from 0, and keeps counting across its recordings, so one
    sequencer serves all the live sessions of one page.
    """

    def __init__(self, max_wait_s: float = 0.4, clock: Callable[[], float] = time.monotonic):
        self.next_number = 0
        self.max_wait_s = max_wait_s
        self.clock = clock
        self._held: List[Tuple[int, float, object]] = []  # heap of (number, arrived at, chunk)
        self._highest = -1
        self.numbered = 0  # chunks that carried a number
        self.unnumbered = 0
        self.reordered = 0  # arrived after a chunk recorded later than them: put back in place
        self.late = 0  # arrived after their place had been given up: released out of order
        self.skipped = 0  # numbers never seen, given up after max_wait_s

    def add(self, number: Optional[int], chunk) -> List[object]:
        """Take one chunk; returns the chunks now ready, oldest first."""
        if number is None:
            self.unnumbered += 1
            return [chunk]
        self.numbered += 1
        if number < self._highest:
            self.reordered += 1
        self._highest = max(self._highest, number)
        if number < self.next_number:
            self.late += 1
            return [chunk]
        heapq.heappush(self._held, (number, self.clock(), chunk))
        return self.ready()

    def ready(self, flush: bool = False) -> List[object]:
        """Chunks that may go now; with flush=True (the recording ended), all of them."""
        out = []
        while self._held:
            number = self._held[0][0]
            in_turn = number == self.next_number
            oldest = min(arrived for _, arrived, _ in self._held)
            if not (in_turn or flush or self.clock() - oldest >= self.max_wait_s):
                break
            number, _, chunk = heapq.heappop(self._held)
            if number > self.next_number:
                self.skipped += number - self.next_number
            self.next_number = number + 1
            out.append(chunk)
        return out

    def new_recording(self) -> None:
        """Zero the counts (they are shown per recording); the numbering goes on."""
        self.numbered = self.unnumbered = self.reordered = self.late = self.skipped = 0

    def summary(self) -> str:
        return (f"{self.numbered} numbered chunks ({self.reordered} arrived out of order and were put "
                f"back, {self.late} late, {self.skipped} never came), {self.unnumbered} unnumbered")

    @property
    def waiting(self) -> int:
        return len(self._held)
