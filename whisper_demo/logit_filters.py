"""openai-whisper's logit filters of one window, as a few tensor operations over all beams.

openai-whisper's DecodingTask filters each step's logits with SuppressBlank, SuppressTokens
and ApplyTimestampRules. Those turn Python lists into indices on every step and loop over
the beams in Python (a `.tolist()` of each beam's history, its timestamps found with a
boolean index, a logsumexp and a max row by row, after a log-softmax of the whole batch):
~0.1 ms a greedy step and ~0.55 ms a beam-5 step on a 2-core CPU, at every step of a
window with timestamps. WindowFilters masks the same logits the same way in ~0.06 and
~0.24 ms (real steps replayed, tiny.en; docs/benchmarks.md, "Steps inside transcribe"):

- what a window can know once is worked out once: the tokens always suppressed (the suppress
  list, <|notimestamps|> with timestamps) and those suppressed at the first sampled step
  (SuppressBlank's), as index tensors on the logits' device; the first timestamp token;
  the last initial timestamp allowed (max_initial_timestamp);
- per step, the timestamp rules read every beam's history at once: whether its last and
  penultimate sampled tokens are timestamps, and its latest timestamp, give each beam its
  forbidden timestamp columns and whether text is forbidden; then "timestamp over text"
  (the timestamps' summed probability against the best text token's) is decided for all
  beams from the logits, with openai-whisper's own log-softmax kept for near ties
  (TimestampRules._timestamp_over_text says why that is the same decision).

The outputs are openai-whisper's, value for value and -inf for -inf
(tests/test_logit_filters.py compares them on random, constructed and real logits and
histories, greedy and beam 5). A task with a filter of another kind keeps its own filter
objects (AsTheyAre).
"""

import math
from typing import List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from whisper.decoding import ApplyTimestampRules, LogitFilter, SuppressBlank, SuppressTokens

NEG_INF = float("-inf")


class TimestampRules:
    """ApplyTimestampRules over the batch: the same masks, without a loop over beams.

    The histories are read on the CPU as one numpy array (the few sampled tokens of every
    beam: microseconds, where a torch operator on a tiny tensor costs several), and the
    logits are masked on their device: a row of forbidden timestamp columns per beam, and
    text only in the rows that need it (a fill of ~50,000 columns is the costly part)."""

    def __init__(self, tokenizer, sample_begin: int, max_initial_timestamp_index: Optional[int],
                 n_vocab: int, device):
        self.sample_begin = sample_begin
        self.eot = tokenizer.eot
        self.begin = tokenizer.timestamp_begin  # the first timestamp token, <|0.00|>
        # the first step: nothing but a timestamp, and none after the last allowed
        self.last_allowed = (None if max_initial_timestamp_index is None
                             else self.begin + max_initial_timestamp_index)
        self.n_timestamps = max(0, n_vocab - self.begin)
        # n timestamps' summed probability is at most n times the largest one's
        self.log_n = math.log(max(1, self.n_timestamps))
        # timestamp columns, relative to `begin`, to compare each beam's bound with
        self.columns = torch.arange(self.n_timestamps, device=device)
        self.positions = np.arange(0)  # of sampled tokens; grown as needed

    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        if tokens.shape[1] == self.sample_begin:
            self._first_step(logits)
        elif tokens.shape[0] == 1:  # greedy, or one sample: one history
            self._pairs_and_order_of_one(logits, tokens[0, self.sample_begin:].tolist())
        else:
            self._pairs_and_order(logits, tokens[:, self.sample_begin:].cpu().numpy())
        if logits.shape[0] == 1:
            self._timestamp_over_text_of_one(logits)
        else:
            self._timestamp_over_text(logits)

    def _first_step(self, logits: Tensor) -> None:
        """No beam has a history yet: only the first-step rules apply."""
        logits[:, : self.begin] = NEG_INF
        if self.last_allowed is not None:
            logits[:, self.last_allowed + 1:] = NEG_INF

    def _pairs_and_order(self, logits: Tensor, sampled: np.ndarray) -> None:
        """Timestamps come in pairs (except before end-of-text) and never go back; a segment
        has a length. Per beam, from its last two sampled tokens and its latest timestamp."""
        bound, opens_pair = self.bounds(sampled)
        forbidden = self.columns < torch.from_numpy(bound).to(logits.device)[:, None]
        logits[:, self.begin:].masked_fill_(forbidden, NEG_INF)
        _fill_rows(logits, np.flatnonzero(opens_pair), self.eot)

    def _pairs_and_order_of_one(self, logits: Tensor, sampled: List[int]) -> None:
        """_pairs_and_order for one history, in Python ints: the same masks in two slice
        fills. Inside transcribe a step's small numpy and torch calls cost several times
        their isolated time (the forward has just swept the caches), and a greedy step
        needs none of bounds()' arrays."""
        begin = self.begin
        last = sampled[-1] >= begin
        penultimate = sampled[-2] >= begin if len(sampled) >= 2 else True
        opens_pair = last and not penultimate
        if last and penultimate:
            bound = self.n_timestamps
        else:
            latest = next((t for t in reversed(sampled) if t >= begin), None)
            bound = 0 if latest is None else latest - begin + 1 - opens_pair
        if bound > 0:
            logits[0, begin:begin + bound] = NEG_INF
        if opens_pair:
            logits[0, :self.eot] = NEG_INF

    def bounds(self, sampled: np.ndarray):
        """(per beam, how many timestamp columns from <|0.00|> on are forbidden; per beam,
        whether text is), as ApplyTimestampRules decides them from the beam's history."""
        n = sampled.shape[1]
        is_stamp = sampled >= self.begin
        last = is_stamp[:, -1]
        penultimate = is_stamp[:, -2] if n >= 2 else np.ones_like(last)
        opens_pair = last & ~penultimate  # one timestamp after text: no text next
        if self.positions.shape[0] < n:
            self.positions = np.arange(max(n, 2 * self.positions.shape[0]))
        # the latest timestamp (its position; -1: none): none before it, nor it again
        # unless it opens a pair (a segment's end may be the next one's start)
        where = np.where(is_stamp, self.positions[:n], -1).max(axis=1)
        latest = np.take_along_axis(sampled, np.maximum(where, 0)[:, None], axis=1)[:, 0]
        bound = np.where(where >= 0, latest - self.begin + 1 - opens_pair, 0)
        # two timestamps in a row: text must follow, no timestamp at all
        bound = np.where(last & penultimate, self.n_timestamps, bound)
        return bound.astype(np.int64), opens_pair

    def _timestamp_over_text(self, logits: Tensor) -> None:
        """Where the timestamps' summed probability beats every text token, a timestamp.

        openai-whisper decides it on the log-softmax of the whole row: logsumexp over the
        timestamps' log-probabilities against the best text token's. A row's log-softmax is
        its logits less one number, so the same comparison holds on the logits themselves,
        without the log-softmax of 51,864 columns per row. It is decided there from two
        maxima where they leave no doubt (the timestamps' summed probability lies between
        the largest one's and n times it), then from the timestamps' logsumexp for the
        rows still open; each test keeps a margin (1e-3, plus 2^-14 of the values' size)
        hundreds of times the float32 rounding of either computation, the logsumexp's sum
        of 1,501 terms included. A row within the margin (a near tie) is decided by
        openai-whisper's own computation. Real steps: ~80 % of rows decided by the maxima,
        the rest by the logsumexp, none needed the exact computation."""
        x = logits.float()
        text = _numpy(x[:, : self.begin].amax(dim=-1))
        stamp = _numpy(x[:, self.begin:].amax(dim=-1))
        with np.errstate(invalid="ignore"):  # infinities: their rows are decided below or left open
            margin = 1e-3 + (np.maximum(np.abs(text), np.abs(stamp)) + 16) * 2.0 ** -14
            wins = (stamp > text + margin) | ((text == NEG_INF) & (stamp > NEG_INF))
            loses = (stamp + self.log_n + margin < text) | (stamp == NEG_INF)
            open_rows = ~(wins | loses)
            if open_rows.any():
                total = _numpy(x[:, self.begin:].logsumexp(dim=-1))
                wins |= open_rows & (total > text + margin)
                open_rows &= ~wins & ~(total + margin < text)
        if open_rows.any():  # a near tie: openai-whisper's own numbers decide
            wins = np.where(open_rows, self._exactly(logits), wins)
        _fill_rows(logits, np.flatnonzero(wins), self.begin)

    def _timestamp_over_text_of_one(self, logits: Tensor) -> None:
        """_timestamp_over_text for one row, with Python floats (float64, as its numpy
        arrays): the same tests in the same order, a third of its calls."""
        x = logits.float()
        text = x[0, : self.begin].max().item()
        stamp = x[0, self.begin:].max().item()
        margin = 1e-3 + (max(abs(text), abs(stamp)) + 16) * 2.0 ** -14
        if (text == NEG_INF and stamp > NEG_INF) or stamp > text + margin:
            wins = True
        elif stamp == NEG_INF or stamp + self.log_n + margin < text:
            wins = False
        else:
            total = x[:, self.begin:].logsumexp(dim=-1).item()
            if total > text + margin:
                wins = True
            elif total + margin < text:
                wins = False
            else:  # a near tie: openai-whisper's own numbers decide
                wins = bool(self._exactly(logits)[0])
        if wins:
            logits[0, : self.begin] = NEG_INF

    def _exactly(self, logits: Tensor) -> np.ndarray:
        """ApplyTimestampRules' comparison, as it computes it, for every row."""
        logprobs = F.log_softmax(logits.float(), dim=-1)
        timestamp = logprobs[:, self.begin:].logsumexp(dim=-1)
        text = logprobs[:, : self.begin].amax(dim=-1)
        return _numpy(timestamp > text)


def _numpy(t: Tensor) -> np.ndarray:
    return t.cpu().numpy().astype(np.float64) if t.is_floating_point() else t.cpu().numpy()


def _fill_rows(logits: Tensor, rows, end: int) -> None:
    """logits[rows, :end] = -inf, for those rows only (none: nothing to do)."""
    if len(rows) == 0:
        return
    if len(rows) == logits.shape[0]:
        logits[:, :end] = NEG_INF
    else:
        rows = torch.as_tensor(rows, device=logits.device)
        logits[rows, :end] = NEG_INF


class WindowFilters:
    """The logit filters of one window's DecodingTask, in its order and with its numbers:
    SuppressBlank and SuppressTokens as index tensors made once, ApplyTimestampRules as
    TimestampRules. `apply(logits, tokens)` is the loop's `for f in task.logit_filters:
    f.apply(logits, tokens)`, in place."""

    def __init__(self, logit_filters: Sequence[LogitFilter], n_vocab: int, device):
        self.sample_begin: Optional[int] = None
        always: List[int] = []  # suppressed at every step
        first: List[int] = []  # suppressed at the first sampled step only
        self.timestamps: Optional[TimestampRules] = None
        for f in logit_filters:
            if type(f) is SuppressBlank:
                first += f.tokenizer.encode(" ") + [f.tokenizer.eot]
                self._same_begin(f.sample_begin)
            elif type(f) is SuppressTokens:
                always += f.suppress_tokens
            elif type(f) is ApplyTimestampRules and self.timestamps is None:
                if f.tokenizer.no_timestamps is not None:
                    always.append(f.tokenizer.no_timestamps)
                self.timestamps = TimestampRules(f.tokenizer, f.sample_begin,
                                                 f.max_initial_timestamp_index, n_vocab, device)
                self._same_begin(f.sample_begin)
            else:  # another kind (or two timestamp rules): its place in the order may matter
                raise ValueError(f"not one of openai-whisper's three filters: {type(f).__name__}")
        self.always = _index(always, device)
        self.first = _index(sorted(set(always + first)), device)

    @classmethod
    def of_task(cls, task, n_vocab: int, device) -> "WindowFilters":
        """The task's own filters, as tensor operations where they are openai-whisper's
        three kinds; a task with another kind of filter keeps its filters as they are."""
        try:
            return cls(task.logit_filters, n_vocab, device)
        except ValueError:
            return AsTheyAre(task.logit_filters)

    def _same_begin(self, sample_begin: int) -> None:
        if self.sample_begin not in (None, sample_begin):
            raise ValueError("filters of one window disagree on where sampling begins")
        self.sample_begin = sample_begin

    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        first = self.sample_begin is not None and tokens.shape[1] == self.sample_begin
        suppressed = self.first if first else self.always
        if suppressed is not None:
            logits.index_fill_(1, suppressed, NEG_INF)
        if self.timestamps is not None:
            self.timestamps.apply(logits, tokens)


class AsTheyAre:
    """openai-whisper's filter objects, applied one by one (a task this module cannot vouch for)."""

    def __init__(self, logit_filters: Sequence[LogitFilter]):
        self.logit_filters = list(logit_filters)

    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        for f in self.logit_filters:
            f.apply(logits, tokens)


def _index(tokens: List[int], device) -> Optional[Tensor]:
    return torch.tensor(sorted(set(tokens)), dtype=torch.long, device=device) if tokens else None
