"""The static cache of a batch of pieces (batched.py): one row per piece.

cache.StaticCache serves one window: its beams share one audio, so the cross-attention K/V
are computed once and read by every row. A batch of pieces is B different audios: each
row has its own cross K/V (runner.forward takes them per row), and its own self K/V, in
[rows, heads, n_text_ctx, head_dim] buffers allocated once, as StaticCache's.

A step runs all live rows through the decoder at once: each weight matrix is read once
for B pieces, which is what makes a batch faster than B decodes (a step is bound by
reading weights). A row that has finished is dropped (drop_rows), so it costs nothing
after.

Each row's numbers are those of its piece decoded alone (tests/test_batched.py):
- a step's rows (at most runner.PACKED_MAX_ROWS) go through the packed kernels, which give
  a row the same numbers in any batch (runner.step_linear);
- the first forward (the start-of-transcript tokens, n of them) runs row by row: B x n
  rows would be a real matrix product, whose float32 numbers depend on the row count.
So it holds with the kernels built and a batch of at most 8, in the exact precision and
the int8 one (its matrices, the vocabulary projection included, are packed int8 weights
times float32 rows: a row's numbers do not depend on the others). A larger batch, or
PyTorch's float32 matmuls (no C++ compiler), gives close numbers, not the same.
"""

from typing import List, Tuple

import torch
from torch import Tensor

from .runner import DecoderRunner

KV = List[Tuple[Tensor, Tensor]]  # per layer


class BatchCache:
    def __init__(self, runner: DecoderRunner, features: List[Tensor]):
        """features: per piece, its encoder output [1, n_audio_ctx, d_model]."""
        self.runner = runner
        r = runner
        shape = (len(features), r.n_head, r.n_ctx, r.d_model // r.n_head)
        like = dict(dtype=r.dtype, device=features[0].device)
        self.self_kv: KV = [(torch.empty(shape, **like), torch.empty(shape, **like)) for _ in r.blocks]
        self.cross_kv: List[KV] = [r.cross_keys_values(f) for f in features]  # per row
        self.length = 0  # positions filled, in every row
        one_row = [t[:1, :, :1] for kv in self.self_kv for t in kv]
        self._position_bytes = sum(t.nbytes for t in one_row)  # one position of one row
        self._reserved_row_bytes = self._position_bytes * r.n_ctx
        self._cross_row_bytes = sum(k.nbytes + v.nbytes for k, v in self.cross_kv[0])

    @property
    def rows(self) -> int:
        return len(self.cross_kv)

    def prefill(self, tokens: Tensor, sot_index: int) -> Tuple[Tensor, Tensor]:
        """The first forward: `tokens` [rows, n] (the start-of-transcript tokens) row by row.
        Returns (logits at the last position, logits at start-of-transcript), [rows, vocab]."""
        last, sot = [], []
        n = tokens.shape[1]
        for i in range(self.rows):
            row_kv = [(k[i:i + 1], v[i:i + 1]) for k, v in self.self_kv]  # views: written in place
            logits = self.runner.forward(tokens[i:i + 1], 0, row_kv, self.cross_kv[i], [sot_index, n - 1])
            sot.append(logits[:, 0])
            last.append(logits[:, -1])
        self.length = n
        return torch.cat(last), torch.cat(sot)

    def step(self, new_tokens: Tensor) -> Tensor:
        """One step: `new_tokens` [rows, 1] at the next position. Returns logits [rows, vocab]."""
        layers = range(len(self.self_kv))
        cross = [([row[i][0] for row in self.cross_kv], [row[i][1] for row in self.cross_kv]) for i in layers]
        logits = self.runner.forward(new_tokens, self.length, self.self_kv, cross, [0])
        self.length += 1
        return logits[:, -1]

    def drop_rows(self, keep: List[int]) -> None:
        """Keep only the rows `keep` (finished pieces leave the batch)."""
        index = torch.tensor(keep, dtype=torch.long, device=self.self_kv[0][0].device)
        self.self_kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.self_kv]
        self.cross_kv = [self.cross_kv[i] for i in keep]

    # --- what the panel shows ----------------------------------------------------------------

    def self_cache_bytes(self) -> int:
        """The positions filled, in every live row."""
        return self._position_bytes * self.length * self.rows

    def self_cache_reserved_bytes(self) -> int:
        return self._reserved_row_bytes * self.rows

    def cross_cache_bytes(self) -> int:
        """One audio's K/V per live row."""
        return self._cross_row_bytes * self.rows

    def release(self) -> None:
        self.self_kv, self.cross_kv = [], []
