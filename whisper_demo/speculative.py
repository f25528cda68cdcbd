"""Lossless self-speculative decoding: check a guess of a window's tokens in few forwards.

A live session re-decodes a growing buffer; most of what it decodes, the previous decode
of the same audio start already said. That previous hypothesis is the draft
(DecodeOptions.draft_tokens). One decoder forward runs the tokens so far plus the draft,
so its logits row j is what the j-th step would compute if the draft's first j tokens are
right. window_decode.py still filters each row and picks each token exactly as its step
loop does; while the pick equals the draft token, the next row stays valid. At a
difference the pick stands, the static cache drops the draft's positions after it
(StaticCache.truncate), and the draft is realigned to what the model said; further passes
check the rest (short ones first, see PROBE). A step no pass covers runs its own forward,
as without a draft. The tokens are therefore the greedy decode's, up to float rounding (a batched forward's sums are not
ordered as a single step's: allclose, not bitwise; a near-tie could in principle flip).

Why realign: as the buffer grows, the model mostly repeats itself but moves segment
timestamps by a few frames (<|2.56|><|2.56|> becomes <|2.72|><|2.72|>) and now and then
changes, adds or drops a word. Without realigning, a draft would help only up to the first
segment's end.
"""

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

# How many draft tokens a pass checks. The first checks the whole draft: a re-decode mostly
# repeats the previous one. After a difference the next pass checks only PROBE tokens, as
# the realignment is a guess: a forward over a few tokens costs about one step, and even
# when it confirms nothing it still gives the step its logits. A pass confirmed to its end
# is followed by one twice as long.
PROBE = 4
# Passes in a row that confirm nothing before the window goes on without the draft.
MAX_FAILED_PASSES = 4
# How far ahead a pick is looked for in the draft: the model dropped that many draft tokens.
LOOKAHEAD = 4
# A sampled retry drafted by the attempt before it (decode.py) strays from it sooner than
# a re-decode of a grown buffer: its first pass checks this many tokens, not the whole
# draft (then twice as many after each pass confirmed to its end). On base's fallback
# windows of a 10-minute file: 8 made its retries 2.4 s faster, the whole draft 0.9 s.
SAMPLED_FIRST_PASS = 8


def usable_draft(draft, tokenizer, n_vocab: int) -> List[int]:
    """The draft up to its first token that is neither text nor a timestamp (a stray
    special would only be rejected; an id past the vocabulary could not be embedded), or
    that starts a second window: DecodeResult.tokens of a long audio holds every window's
    tokens, and each window's timestamps start again from <|0.00|>."""
    usable, latest_time = [], tokenizer.timestamp_begin
    for token in draft:
        if not (0 <= token < tokenizer.eot or tokenizer.timestamp_begin <= token < n_vocab):
            break
        if token >= tokenizer.timestamp_begin:
            if token < latest_time:
                break
            latest_time = token
        usable.append(int(token))
    return usable


def realign(draft: List[int], expected: int, pick: int, tokenizer) -> int:
    """Where to resume the draft after the model picked `pick` instead of draft[expected]:
    the index of the draft token expected next. May edit `draft` (a timestamp pair).
    A wrong guess costs one pass, never a token: every pick is checked again."""
    if pick == tokenizer.eot:
        return len(draft)
    ts = tokenizer.timestamp_begin
    wanted = draft[expected]
    if pick >= ts and wanted >= ts:
        # The same segment boundary at another time: the next segment starts at it too.
        if expected + 1 < len(draft) and draft[expected + 1] == wanted:
            draft[expected + 1] = pick
        return expected + 1
    if pick >= ts:
        # A boundary the draft did not have: its pair comes next, then the draft's text.
        draft.insert(expected, pick)
        return expected
    if wanted >= ts:
        # The draft's boundary is gone: resume at its next text token, after this pick.
        resume = expected
        while resume < len(draft) and draft[resume] >= ts:
            resume += 1
        return resume + 1 if resume < len(draft) and draft[resume] == pick else resume
    # Text for text. The pick may be a draft token a little further on (the model dropped
    # some), or the one just before (the model inserted a token, seen one step late);
    # otherwise take it as a substitution for draft[expected].
    for k in [expected - 1, *range(expected + 1, min(expected + 1 + LOOKAHEAD, len(draft)))]:
        if 0 <= k and draft[k] == pick:
            return k + 1
    return expected + 1


class DraftVerifier:
    """The draft of one window, checked pass by pass against the model's own picks."""

    def __init__(self, draft: List[int], cache, audio_features: Tensor, sot_index: int, tokenizer,
                 first_pass: Optional[int] = None):
        self.draft = list(draft)
        self.offered = len(self.draft)
        self.cache = cache
        self.audio_features = audio_features
        self.sot_index = sot_index
        self.tokenizer = tokenizer
        self.expected = 0  # index in self.draft of the token the next step should pick
        self.rows: Optional[Callable[[int], Tensor]] = None  # the current pass's logits rows
        self.n_rows = 0
        self.row = 0  # the row of the step about to run
        self.span = first_pass or len(self.draft)  # draft tokens the next pass checks
        self.accepted = 0
        self.passes = 0
        self.failed_passes = 0  # in a row

    def logits(self, tokens: Tensor, room: int) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
        """The logits for the step about to pick a token after `tokens`, from a pass over
        the draft (run now if one is due), or None when the draft has nothing left to check.
        room: how many more tokens the window may hold (steps and positions left)."""
        if self.rows is None:
            if self.expected >= len(self.draft) or self.failed_passes >= MAX_FAILED_PASSES or room < 1:
                return None
            checking = self.draft[self.expected : self.expected + min(room, self.span)]
            with_draft = torch.cat([tokens, tokens.new_tensor([checking] * tokens.shape[0])], dim=1)
            self.rows, sot_logits = self.cache.draft_logits(
                with_draft, self.audio_features, self.sot_index, len(checking))
            self.row, self.n_rows = 0, len(checking) + 1
            self.passes += 1
            return self.rows(0), sot_logits
        return self.rows(self.row), None

    def follow(self, tokens: Tensor) -> None:
        """After a step that took its logits elsewhere picked tokens[0, -1] (a retry's first
        step, from the window's shared first forward): the draft moves past that pick."""
        if self.expected < len(self.draft):
            pick = tokens[0, -1].item()
            self.expected = (self.expected + 1 if pick == self.draft[self.expected]
                             else realign(self.draft, self.expected, pick, self.tokenizer))

    def check(self, tokens: Tensor) -> bool:
        """After a step that used this draft's logits picked tokens[0, -1]: whether the pick
        is the draft's token. The pass ends at a difference or at its last row; after a
        difference the cache keeps the positions up to the pick, and the draft is realigned
        to what the model said."""
        pick = tokens[0, -1].item()
        self.row += 1
        last_row = self.row == self.n_rows  # the row after the pass's last draft token
        if self.expected < len(self.draft) and pick == self.draft[self.expected]:
            self.expected += 1
            self.accepted += 1
            if last_row:  # confirmed to its end (the last row even guessed one more right)
                self.rows, self.span, self.failed_passes = None, 2 * self.span, 0
            return True
        self.cache.truncate(tokens.shape[1] - 1)  # the next step writes the pick's position
        if self.expected < len(self.draft):
            self.expected = realign(self.draft, self.expected, pick, self.tokenizer)
        self.failed_passes = self.failed_passes + 1 if self.row == 1 else 0
        self.rows, self.span = None, PROBE
        return False
