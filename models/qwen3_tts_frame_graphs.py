"""CUDA graphs of a Qwen3-TTS frame over static buffers: the talker step, then the sampling.

A frame is two graphs replayed back to back, with no host work between them:

- the talker's decode step, one graph per (batch bucket, attention-length bucket): each row's
  input (its slot's last summed frame + this frame's text row, gathered on the device from
  the slot's copy of its prompt's trailing text rows) through the 28 layers, the hidden
  states into a static `hidden`;
- the frame's sampling, one graph per batch bucket (it does not read the KV cache, so the
  length does not matter): codebook 0 (repetition penalty, masks, top-k/top-p) and the code
  predictor's 15 depth steps with their sampling, the codes into a static `codes`, the
  slot's `seen` and `summed` advanced where the row is active. Frame 0 is a decode step too:
  its input is the prompt's last row, which the prefill leaves in `summed` (no text row).

Rows are slots (row b = slot b, as models/lm_runner.py), so the per-slot state the runner
keeps (settings, seeds, `seen`, `summed`, the KV cache) is read as `[:batch]` views, never
gathered. The host gives a step three int64 rows, `[write position, frame index, active]`
per slot, in one pinned buffer and one copy; rows of the bucket outside the step write the
spare KV position and change no state. The candidates' width of each top-k is static in a
graph (`TOP_K`): a batch wanting more runs the runner's eager path (the sampled codes are
the same at any width that covers each row's `top_k`).

Off a GPU (or if capture fails) the same functions run on the same buffers, eagerly, so the
plumbing is tested on the CPU (tests/models/test_qwen3_tts_frame_graphs.py).

Memory besides the graphs: the text rows, `[max_running, max_seq_len, H]` in the model dtype
(every row a frame can read; 2 GiB at 256 slots of 2048 positions, H 2048, bf16: 3.6 % of the
talker's KV cache of the same slots). `capture` records its own time and device memory.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np
import torch

from models import cuda_graphs

TOP_K = 64  # the candidates of a captured top-k (qwen-tts's default top_k and subtalker_top_k are 50)
WRITE, STEP, ACTIVE = range(3)  # rows of the step buffer


class FrameGraphs:
    """Static buffers and graphs of `runner`'s frame (a models.qwen3_tts_runner.Qwen3TTSRunner:
    its `_talker_step`, `_sample_frame`, per-slot state and buckets)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        n, dev, dtype = runner.max_running, runner.torch_device, runner.dtype
        hidden_size = runner.talker.args.hidden_size
        self.step = torch.zeros(3, n, dtype=torch.int64, device=dev)  # WRITE, STEP, ACTIVE per slot
        self.host = torch.zeros(3, n, dtype=torch.int64, pin_memory=dev.type == "cuda")
        self.host_np = self.host.numpy()
        self.hidden = torch.zeros(n, hidden_size, dtype=dtype, device=dev)
        self.codes = torch.zeros(n, runner.talker.args.num_code_groups, dtype=torch.int64, device=dev)
        self.text_rows = torch.zeros(n, runner.max_seq_len, hidden_size, dtype=dtype, device=dev)
        self.text_len = torch.zeros(n, dtype=torch.int64, device=dev)
        self.talker_graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.sample_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.capture_s, self.capture_bytes = 0.0, 0

    @property
    def num_graphs(self) -> int:
        return len(self.talker_graphs) + len(self.sample_graphs)

    def memory_bytes(self) -> int:
        tensors = (self.step, self.hidden, self.codes, self.text_rows, self.text_len)
        return int(sum(t.numel() * t.element_size() for t in tensors)) + self.capture_bytes

    def set_text(self, slots: Sequence[int], trailing: Sequence[torch.Tensor]) -> None:
        """Each new owner's trailing text rows `[N, H]` (models/qwen3_tts_prompt.py `Prompt`)
        into its slot: frame j >= 1 adds row j - 1 while j - 1 < N, the pad after."""
        cap = self.text_rows.shape[1]  # a frame's row index stays below max_seq_len - prompt length
        for slot, rows in zip(slots, trailing):
            count = min(int(rows.shape[0]), cap)
            self.text_rows[slot, :count] = rows[:count]
            self.text_len[slot] = count

    # -- what the graphs hold -------------------------------------------------------------

    def _talk(self, batch: int, length: int) -> None:
        """Graph body: the talker step of slot rows `[0, batch)` reading `length` cache positions."""
        runner, step = self.runner, self.step
        index = step[STEP, :batch] - 1  # frame j reads text row j - 1
        rows = runner.row_index[:batch]
        text = self.text_rows[:batch][rows, index.clamp(0, self.text_rows.shape[1] - 1)]
        text = torch.where((index < self.text_len[:batch])[:, None], text, runner.pad)
        text = torch.where((index < 0)[:, None], 0, text)  # frame 0: the prompt's last row alone, in `summed`
        self.hidden[:batch] = runner._talker_step(runner.summed[:batch] + text, step[WRITE, :batch], length)

    def _sample(self, batch: int) -> None:
        """Graph body: the frame's 16 codes of slot rows `[0, batch)` from `hidden`."""
        active = self.step[ACTIVE, :batch] > 0
        self.codes[:batch] = self.runner._sample_frame(batch, self.hidden[:batch], self.step[STEP, :batch], active,
                                                       TOP_K, TOP_K)

    def capture(self) -> None:
        """Every shape warmed up, then one graph each, largest first, one memory pool; on failure
        the buffers run eagerly (and say so)."""
        batches, lengths = self.runner.batch_buckets, self.runner.length_buckets
        self._fill(max(batches), [], [], [])  # all rows outside: the spare position, no state change
        bodies: list[tuple[tuple[int, ...], Callable[[], None]]] = []
        for batch in reversed(batches):
            bodies += [((batch, length), functools.partial(self._talk, batch, length)) for length in reversed(lengths)]
            bodies.append(((batch,), functools.partial(self._sample, batch)))
        done = cuda_graphs.capture(bodies, self.runner.torch_device, "Qwen3-TTS frame graphs")
        self.talker_graphs = {(k[0], k[1]): g for k, g in done.graphs.items() if len(k) == 2}
        self.sample_graphs = {k[0]: g for k, g in done.graphs.items() if len(k) == 1}
        self.capture_s, self.capture_bytes = done.seconds, done.bytes

    # -- a step ---------------------------------------------------------------------------

    def _fill(self, batch: int, slots: Sequence[int], writes: Sequence[int], steps: Sequence[int]) -> None:
        """Rows `[0, batch)` of the step buffer: `slots` active at `writes`, frame `steps`; the
        rest write the spare position. One copy (the whole buffer: contiguous, pinned)."""
        host = self.host_np
        host[WRITE, :batch], host[STEP, :batch], host[ACTIVE, :batch] = self.runner.max_seq_len, 0, 0
        host[WRITE, slots], host[STEP, slots], host[ACTIVE, slots] = writes, steps, 1
        # The previous step's copy is done: every step and prefill ends reading codes back.
        self.step.copy_(self.host, non_blocking=True)

    def _run_sample(self, batch: int, slots: Sequence[int]) -> tuple[np.ndarray, bool]:
        graph = self.sample_graphs.get(batch)
        if graph is not None:
            graph.replay()
        else:
            self._sample(batch)
        return self.codes[:batch].cpu().numpy()[list(slots)], graph is not None

    def decode(self, batch: int, length: int, slots: Sequence[int], writes: Sequence[int],
               steps: Sequence[int]) -> tuple[np.ndarray, bool]:
        """One frame of `slots` (row b = slot b, b < batch, a bucket), written at positions
        `writes`, frame indices `steps` (>= 0), attention over `length` positions (a bucket).
        Returns int64 codes `[len(slots), 16]` and whether both graphs replayed."""
        self._fill(batch, slots, writes, steps)
        graph = self.talker_graphs.get((batch, length))
        if graph is not None:
            graph.replay()
        else:
            self._talk(batch, length)
        codes, sampled = self._run_sample(batch, slots)
        return codes, sampled and graph is not None

    def close(self) -> None:
        self.talker_graphs, self.sample_graphs = {}, {}
