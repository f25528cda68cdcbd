"""When a streamed token is worth a page update: the Transcribe tab's limit on redraws.

One rule, kept apart from the handlers that stream the decode so it can be read (and tested)
on its own: no gradio here, only time.perf_counter.
"""

import time


class Throttle:
    """Decides when a streamed token is worth a page update.

    A page update ships the transcript, the panel and the whole chart to the browser, which
    redraws them on the same thread that answers clicks; at tiny.en's 5-15 ms per token that
    is more than a browser wants to redraw. So: the first token at once (time to first token
    is part of the experience), then whenever 3 tokens and 100 ms have passed, or 200 ms
    whatever the count (slow, uncached decodes update every token or two). Five updates a
    second still read as streaming, and leave the page free to answer during a long decode
    on two cores. The caller always sends the final state itself.
    """

    def __init__(self, every_tokens: int = 3, min_interval: float = 0.1, max_interval: float = 0.2):
        self.every_tokens = every_tokens
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.pending = 0
        self.last = None

    def due(self) -> bool:
        self.pending += 1
        now = time.perf_counter()
        if self.last is None:
            fire = True
        else:
            dt = now - self.last
            fire = dt >= self.max_interval or (self.pending >= self.every_tokens and dt >= self.min_interval)
        if fire:
            self.pending, self.last = 0, now
        return fire
