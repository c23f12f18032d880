"""Runner (engine/runner.py) for Qwen3-TTS: one whole 80 ms frame per engine step.

A step for the rows below the highest running slot, padded to a batch bucket, is the
talker's decode step (codebook 0's logits) then the code predictor's 15 steps (codebooks
1..15), all rows together; codes are sampled on the device (models/qwen3_tts_sampling.py)
and read back at the end of the step, so `decode` returns this step's frames
(models/qwen3_tts_spec.py packs each into one token). Not here: Orpheus' one-step-late
readback (models/lm_runner.py).

Two paths run a frame, with the same functions (`_talker_step`, `_sample_frame`) and the
same bucketed shapes, so they give the same codes:
- the frame's buffers (models/qwen3_tts_frame_graphs.py, option `frame_graphs`: default on a
  GPU, where they replay as CUDA graphs per (batch, attention-length) bucket; on a CPU the
  same buffers run eagerly): the host fills one pinned buffer of positions, frame indices and
  active rows per step;
- eager (`frame_graphs` off, or a batch wanting more top-k candidates than a graph holds):
  text rows and positions built on the host each step.

Device state per KV slot (row b = slot b, as models/lm_runner.py): the talker's KV cache
`[2, layers, max_running, kv_heads, max_seq_len + 1, head_dim]` (position `max_seq_len`: a
spare that rows outside the step write), `summed [max_running, H]` (the slot's last frame's 16
codebook embeddings summed: its next talker input, before the text row), `seen [max_running,
vocab]` bool (codebook-0 ids generated so far: the repetition penalty's) and each slot's
sampling settings. The code predictor's own tiny cache restarts every frame.

Prefill packs new prompts (embeddings `[T, H]` each) but their last rows into one talker
forward under a block-diagonal causal mask (their KV at positions `[0, T - 1)`) and leaves
each last row in its slot's `summed`. Frame 0 is then a decode step like any other, in the
same iteration (`prefill_joins_step`): its input is that row alone at position T - 1, so it
is sampled from the prompt's last hidden state with the running rows' frames, by the same
graphs, and no sampling pass of its own holds the step up. Frame j >= 1 reads `summed` of
frame j - 1 plus `prompt.text_row(j - 1)` at position T + j - 1, as
models/qwen3_tts_generate.py (the reference loop) does; the stop id is masked for the first
`MIN_FRAMES` frames and for forced requests.

Codec: the 12 Hz decoder's streaming state in device slots (models/qwen3_tts_codec_graphs.py
`CodecSlots`, CUDA graphs per (codec batch bucket, window length) on a GPU, option
`codec_graphs`), windows of equal length decoded as one batch whatever their positions. A
request takes a codec slot at prefill (zeroed) and gives it back at `release`; a released
request's late codec item is skipped, and a slot released while a codec call that holds it is
in flight (the CPU's lane) goes back to the free list when that call ends, so a new owner
never sees the old owner's state. Codec slots: `max_running`, plus `max_codec_batch` where the
codec runs on a lane (those a call in flight may still hold). CPU: the codec runs on one lane
beside the steps; GPU: in the step (no stream partition for this family yet).
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Sequence

import numpy as np
import torch

from engine.lm_spec import LMSpec
from models.lm_runner import device_name
from models.cuda_graphs import buckets, codec_buckets, length_buckets
from engine.plan import CodecItem, Timing, Tokens
from engine.request import Request
from engine.runner import Emit, LMParts, Runner
from engine.types import ChunkOut
from models.codec_windows import decode_windows
from models.lm_warm_up import guarded, warm_up_qwen
from models.context import Context, additive, reset_context, set_context
from models.qwen3_tts_codec_graphs import CodecSlots
from models.qwen3_tts_frame_graphs import TOP_K as GRAPH_TOP_K, FrameGraphs
from models.qwen3_tts_generate import MIN_FRAMES
from models.qwen3_tts_prefill_graphs import PrefillGraphs, packed_forward
from models.qwen3_tts_sampling import sample_codes
from models.qwen3_tts_spec import STOP, QwenPrepared, pack_frame

MAX_SEQ_LEN = 2048  # talker positions per slot: prompt + frames (2048 frames = 164 s)
STEPS_PER_FRAME = 16  # draws per frame: the seed's step counter advances by this much a frame
# A step's attention reads the cache in multiples of this many positions: 4 length buckets at
# 2048 positions (Orpheus: 256), so 20 batch x 4 length talker graphs at 256 slots (the Triton
# attention skips keys past each row's position, so a coarse bucket costs little).
ATTN_BLOCK = 512


class Qwen3TTSRunner(Runner):
    """Options (`LMParts.options`): `max_seq_len` (default MAX_SEQ_LEN), `max_codec_batch` (32),
    `max_prefill_batch` (8), `frame_graphs` (the frame's static buffers, CUDA graphs on a GPU;
    default: on a GPU; `predictor_graphs` is its older name), `attn_block` (ATTN_BLOCK),
    `triton_attention` (GPU: models/decode_attention.py for the talker's decode attention;
    true), `codec_graphs` (the codec decode as CUDA graphs per (codec batch bucket, window
    length); default: on a GPU; off, or on a CPU: the same slot buffers eagerly);
    `prefill_graphs` (the packed prefill as CUDA graphs per token bucket; default: on a GPU;
    on a CPU the same buffers eagerly); `max_running` is build_runner's."""

    has_backbone = True
    prefill_joins_step = True  # frame 0 comes from the decode step after the prefill, in the same iteration
    spec: LMSpec

    def __init__(self, model_id: str, parts: LMParts, device: torch.device | str, max_running: int) -> None:
        super().__init__(model_id, parts.spec, max_running)
        options = parts.options
        self.max_seq_len = int(options.get("max_seq_len", MAX_SEQ_LEN))
        self.max_codec_batch = int(options.get("max_codec_batch", 32))
        self.max_prefill_batch = int(options.get("max_prefill_batch", 8))
        attn_block = int(options.get("attn_block", ATTN_BLOCK))
        assert self.max_seq_len >= 2 and self.max_codec_batch >= 1 and self.max_prefill_batch >= 1 and attn_block >= 1
        self.model, self.codec = parts.backbone, parts.codec  # models.qwen3_tts.Qwen3TTS, Qwen3TTSCodec
        self.talker = talker = self.model.talker
        self.torch_device, self.device = torch.device(device), device_name(device)
        self.sample_rate = int(self.codec.sample_rate)
        self.lanes = {"codec": 1} if self.torch_device.type == "cpu" else {}
        args, dev = talker.args, self.torch_device
        self.dtype = talker.codec_head.weight.dtype
        self.eos = args.codec_eos_token_id
        self.batch_buckets = buckets(max_running)  # a step runs slot rows [0, bucket)
        self.length_buckets = length_buckets(self.max_seq_len, attn_block)
        talker.set_rope(self.max_seq_len + 1, dev)  # + the spare position
        talker.code_predictor.setup_cache(max_running, dev, self.dtype)
        self.kv_cache = torch.zeros(2, args.num_hidden_layers, max_running, args.num_key_value_heads,
                                    self.max_seq_len + 1, args.head_dim, dtype=self.dtype, device=dev)
        for i, layer in enumerate(talker.model.layers):
            layer.self_attn.kv_cache = self.kv_cache[:, i]
        self.attention = self._set_attention(bool(options.get("triton_attention", True)))
        n = max_running
        self.row_index = torch.arange(n, device=dev)
        self.summed = torch.zeros(n, args.hidden_size, dtype=self.dtype, device=dev)
        self.seen = torch.zeros(n, args.vocab_size, dtype=torch.bool, device=dev)
        floats = {name: torch.ones(n, device=dev) for name in ("temperature", "top_p", "penalty",
                                                               "sub_temperature", "sub_top_p")}
        self.temperature, self.top_p, self.penalty = floats["temperature"], floats["top_p"], floats["penalty"]
        self.sub_temperature, self.sub_top_p = floats["sub_temperature"], floats["sub_top_p"]
        self.top_k, self.sub_top_k, self.seeds = (torch.ones(n, dtype=torch.int64, device=dev) for _ in range(3))
        self.forced = torch.zeros(n, dtype=torch.bool, device=dev)
        self.allowed = torch.ones(args.vocab_size, dtype=torch.bool, device=dev)
        self.allowed[talker.suppressed_ids().to(dev)] = False
        with torch.inference_mode():  # what every frame past the prompt's text adds (Prompt.pad)
            pad_id = torch.tensor([args.tts_pad_token_id], device=dev)
            self.pad = talker.embed_text(pad_id)[0].clone()
        # the codec's state in slots: request id -> codec slot; slots a codec call holds now; released
        # slots to free when that call ends. The lock guards these three (the CPU's codec lane).
        self._codec_slot: dict[str, int] = {}
        self._codec_busy: set[int] = set()
        self._codec_deferred: list[int] = []
        self._codec_lock = threading.Lock()
        codec_batches = codec_buckets(self.max_codec_batch)
        self.codec_slots = CodecSlots(self.codec, max_running + (self.max_codec_batch if self.lanes else 0),
                                      codec_batches, parts.spec.shape.window_lengths())
        # models/qwen3_tts_frame_graphs.py: captured on a GPU by default; on a CPU `frame_graphs`
        # runs the same buffers eagerly (tests); off: the eager path.
        use_graphs = bool(options.get("frame_graphs", options.get("predictor_graphs", dev.type == "cuda")))
        self.frame_graphs = FrameGraphs(self) if use_graphs else None
        self.frame_counts = {"graphed": 0, "buffers": 0, "eager": 0}  # decode steps run by each path
        if self.frame_graphs is not None and dev.type == "cuda":
            with torch.inference_mode():
                self.frame_graphs.capture()
        if bool(options.get("codec_graphs", dev.type == "cuda")) and dev.type == "cuda":
            self.codec_slots.capture()
        # models/qwen3_tts_prefill_graphs.py: the packed prefill per token bucket (GPU; buffers on a CPU)
        use_prefill = bool(options.get("prefill_graphs", dev.type == "cuda"))
        self.prefill_graphs = PrefillGraphs(self, self.max_seq_len) if use_prefill else None
        if self.prefill_graphs is not None and dev.type == "cuda":
            with torch.inference_mode():
                self.prefill_graphs.capture()

    def _set_attention(self, use_triton: bool) -> str:
        """The talker's decode attention: Triton (models/decode_attention.py, split-K sized from
        the SMs) on a GPU for bf16/fp16 and a head_dim that is a power of two >= 64; else SDPA
        over the additive mask. Returns "triton" or "sdpa"."""
        head_dim, attention = self.talker.args.head_dim, None
        if use_triton and self.torch_device.type == "cuda" and self.dtype in (torch.bfloat16, torch.float16) \
                and head_dim >= 64 and head_dim & (head_dim - 1) == 0:
            from models.decode_attention import decode_attention

            sms = torch.cuda.get_device_properties(self.torch_device).multi_processor_count
            attention = functools.partial(decode_attention, target_programs=2 * sms)
        for layer in self.talker.model.layers:
            layer.self_attn.decode_attention_fn = attention
        return "sdpa" if attention is None else "triton"

    # -- a frame of slot rows [0, batch): both paths ----------------------------------------

    def _talker_step(self, x: torch.Tensor, write_positions: torch.Tensor, length: int) -> torch.Tensor:
        """The talker's decode step of slot rows `[0, B)`: inputs `[B, H]` written at
        `write_positions` (int64 `[B]`; rows outside the step: the spare position), attention over
        cache positions `[0, length)`. Returns hidden states `[B, H]`."""
        visible = torch.arange(length, device=x.device)[None, :] <= write_positions[:, None]
        set_context(Context(False, self.row_index[:len(x)], write_positions,
                            additive(visible[:, None, None, :], self.dtype), length))
        try:
            return self.talker(x, write_positions)
        finally:
            reset_context()

    def _sample_frame(self, batch: int, hidden: torch.Tensor, steps: torch.Tensor, active: torch.Tensor,
                      width: int, sub_width: int) -> torch.Tensor:
        """Codes int64 `[batch, 16]` of slot rows `[0, batch)` from their talker hidden states
        `[batch, H]` at frame indices `steps` (int64 `[batch]`); top-k over `width` candidates
        for codebook 0 and `sub_width` for the predictor's (each >= every row's own top_k). The
        slots' `seen` and `summed` advance where `active` (bool `[batch]`)."""
        rows = slice(0, batch)  # views of the per-slot state, no gathers
        logits = self.talker.compute_logits(hidden)
        allowed = self.allowed.expand(batch, -1).clone()
        allowed[:, self.eos] = (steps >= MIN_FRAMES) & ~self.forced[rows]
        seeds, draw = self.seeds[rows], steps * STEPS_PER_FRAME
        first = sample_codes(logits, self.temperature[rows], self.top_k[rows], self.top_p[rows], seeds, draw, width,
                             penalty=self.penalty[rows], seen=self.seen[rows], allowed=allowed)
        sub_temperature, sub_top_k, sub_top_p = self.sub_temperature[rows], self.sub_top_k[rows], self.sub_top_p[rows]

        def sample(step_logits: torch.Tensor, step: int) -> torch.Tensor:
            return sample_codes(step_logits, sub_temperature, sub_top_k, sub_top_p, seeds, draw + 1 + step, sub_width)

        frame: tuple[torch.Tensor, torch.Tensor] = self.talker.code_predictor.predict_frame(
            hidden, self.talker.embed_codec(first), first, sample)
        codes, summed = frame
        self.seen[self.row_index[:batch], first] |= active
        self.summed[rows] = torch.where(active[:, None], summed, self.summed[rows])
        return codes

    def _outs(self, requests: Sequence[Request], codes: list[list[int]]) -> Tokens:
        """Frames as tokens (models/qwen3_tts_spec.py pack_frame); flagged: the stop, or the last."""
        return Tokens(list(requests), [STOP if frame[0] == self.eos else pack_frame(frame) for frame in codes],
                      [i for i, (r, frame) in enumerate(zip(requests, codes))
                       if frame[0] == self.eos or len(r.tokens) + 1 >= r.max_tokens])

    @staticmethod
    def _prepared(request: Request) -> QwenPrepared:
        prepared = request.prepared
        assert isinstance(prepared, QwenPrepared) and prepared.extra is not None and prepared.sampling is not None
        return prepared

    @staticmethod
    def _widths(prepared: Sequence[QwenPrepared]) -> tuple[int, int]:
        """The top-k widths a batch needs: codebook 0's, the predictor's."""
        extras = [p.extra for p in prepared if p.extra is not None]
        return max(e.top_k for e in extras), max(e.sub_top_k for e in extras)

    # -- what the engine calls ------------------------------------------------------------

    def prefill(self, requests: Sequence[Request]) -> Tokens:
        """Pack the prompts of `requests` but their last rows into one talker forward (their KV);
        each last row waits in `summed` for frame 0, which this iteration's decode step makes
        with the running rows' frames (`prefill_joins_step`). Returns no tokens."""
        t0 = time.perf_counter()
        dev = self.torch_device
        prepared = [self._prepared(r) for r in requests]
        lens = [int(p.prompt.prefill.shape[0]) - 1 for p in prepared]  # all but the last row
        with torch.inference_mode():
            rows = torch.tensor([r.slot for r in requests], dtype=torch.int64, device=dev)
            self._reset(rows, prepared)
            self.summed[rows] = torch.stack([p.prompt.prefill[-1] for p in prepared]).to(self.dtype)
            graphs = self.prefill_graphs
            if sum(lens) and (graphs is None or not graphs.run([p.prompt.prefill[:-1] for p in prepared],
                                                                 [r.slot for r in requests])):
                x = torch.cat([p.prompt.prefill[:-1] for p in prepared]).to(self.dtype)
                positions = torch.cat([torch.arange(k, device=dev) for k in lens])
                owner = torch.repeat_interleave(torch.arange(len(lens), device=dev), torch.tensor(lens, device=dev))
                packed_forward(self.talker, x, positions, positions, rows[owner], owner)
            if self.frame_graphs is not None:
                self.frame_graphs.set_text([r.slot for r in requests], [p.prompt.trailing for p in prepared])
        with self._codec_lock:
            slots = self.codec_slots.allocate(len(requests))
            self._codec_slot.update((r.request_id, slot) for r, slot in zip(requests, slots))
        self._timings.append(Timing("prefill", sum(lens), 1, 1000.0 * (time.perf_counter() - t0)))
        return Tokens([], [], [])

    def _reset(self, rows: torch.Tensor, prepared: Sequence[QwenPrepared]) -> None:
        """A slot's state for its new owner: nothing seen, the request's settings."""
        sampling = [p.sampling for p in prepared if p.sampling is not None]
        extras = [p.extra for p in prepared if p.extra is not None]
        dev = self.torch_device
        self.seen[rows] = False
        for tensor, values in ((self.temperature, [s.temperature for s in sampling]),
                               (self.top_p, [s.top_p for s in sampling]),
                               (self.penalty, [s.repetition_penalty for s in sampling]),
                               (self.sub_temperature, [e.sub_temperature for e in extras]),
                               (self.sub_top_p, [e.sub_top_p for e in extras])):
            tensor[rows] = torch.tensor(values, dtype=torch.float32, device=dev)
        for tensor, ints in ((self.top_k, [e.top_k for e in extras]), (self.sub_top_k, [e.sub_top_k for e in extras]),
                             (self.seeds, [s.seed for s in sampling])):
            tensor[rows] = torch.tensor(ints, dtype=torch.int64, device=dev)
        self.forced[rows] = torch.tensor([s.force_tokens > 0 for s in sampling], device=dev)

    def decode(self, requests: Sequence[Request]) -> Tokens:
        """One frame for each of `requests` (talker step + 15 predictor steps); returns them."""
        if not requests:
            return Tokens([], [], [])
        t0 = time.perf_counter()
        slots = [r.slot for r in requests]
        steps = [len(r.tokens) for r in requests]  # frame j's input: frame j - 1's codes and text row j - 1
        writes = [len(r.prepared.prompt_ids) + j - 1 for r, j in zip(requests, steps)]
        width, sub_width = self._widths([self._prepared(r) for r in requests])
        batch = next(b for b in self.batch_buckets if b > max(slots))
        context = max(writes) + 1
        length = next(n for n in self.length_buckets if n >= context)
        with torch.inference_mode():
            if self.frame_graphs is not None and max(width, sub_width) <= GRAPH_TOP_K:
                codes, graphed = self.frame_graphs.decode(batch, length, slots, writes, steps)
                self.frame_counts["graphed" if graphed else "buffers"] += 1
            else:
                codes = self._decode_eager(requests, batch, length, writes, steps, width, sub_width)
                self.frame_counts["eager"] += 1
        self._timings.append(Timing("step", batch, context, 1000.0 * (time.perf_counter() - t0)))
        return self._outs(requests, codes.tolist())

    def _decode_eager(self, requests: Sequence[Request], batch: int, length: int, writes: list[int],
                      steps: list[int], width: int, sub_width: int) -> np.ndarray:
        """`decode`'s frame with its inputs built on the host (positions, text rows), no static
        buffers. Returns int64 codes `[len(requests), 16]`."""
        dev = self.torch_device
        write, step, active = [self.max_seq_len] * batch, [0] * batch, [False] * batch
        text = self.pad.expand(batch, -1).clone()
        for r, position, j in zip(requests, writes, steps):
            write[r.slot], step[r.slot], active[r.slot] = position, j, True
            trailing = self._prepared(r).prompt.trailing
            if j == 0:  # the prompt's last row, in `summed` since the prefill
                text[r.slot] = 0
            elif j - 1 < trailing.shape[0]:
                text[r.slot] = trailing[j - 1]
        hidden = self._talker_step(self.summed[:batch] + text, torch.tensor(write, device=dev), length)
        codes = self._sample_frame(batch, hidden, torch.tensor(step, device=dev), torch.tensor(active, device=dev),
                                   width, sub_width)
        return codes.cpu().numpy()[[r.slot for r in requests]]

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step", emit: Emit = None) -> list[ChunkOut]:
        """One chunk per item, in order: windows of equal length decode as one batch."""
        with self._codec_lock:  # None: released; the others stay this call's until it ends
            slots = [self._codec_slot.get(item.request.request_id) for item in items]
            held = {slot for slot in slots if slot is not None}
            self._codec_busy |= held

        def decode(frames: torch.Tensor, members: list[int]) -> np.ndarray:
            rows = [slot for slot in (slots[i] for i in members) if slot is not None]
            assert len(rows) == len(members)  # released items are skipped
            return self.codec_slots.decode(frames, rows).cpu().numpy()
        try:
            return decode_windows(items, self.spec, decode, int(self.codec.samples_per_frame), self._timings,
                                  skip=lambda i: slots[i] is None)
        finally:
            with self._codec_lock:
                self._codec_busy -= held
                for slot in [s for s in self._codec_deferred if s in held]:
                    self._codec_deferred.remove(slot)
                    self.codec_slots.free(slot)

    def release(self, request: Request) -> None:
        with self._codec_lock:
            slot = self._codec_slot.pop(request.request_id, None)
            if slot is not None and slot in self._codec_busy:
                self._codec_deferred.append(slot)  # a codec call in flight still writes it
            elif slot is not None:
                self.codec_slots.free(slot)

    def warm_up(self) -> None:
        """Frames (batch 1 and the largest bucket, at the shortest and longest attention length), prefills
        and a first chunk's and the longest codec window, each timed once as serving times it (ms) into
        `take_timings()`, changing no slot's state (models/lm_warm_up.py); a failure is logged and the
        model serves with the estimates it did not time at their defaults."""
        guarded(self, warm_up_qwen)

    def memory_bytes(self) -> int:
        tensors = [*self.talker.parameters(), self.kv_cache, self.seen, self.summed]
        graphs = sum(g.memory_bytes() for g in (self.frame_graphs, self.prefill_graphs) if g is not None)
        return (int(sum(t.numel() * t.element_size() for t in tensors)) + graphs + int(self.codec.memory_bytes())
                + self.codec_slots.memory_bytes())

    def close(self) -> None:
        for graphs in (self.frame_graphs, self.prefill_graphs):
            if graphs is not None:
                graphs.close()
        for layer in self.talker.model.layers:
            layer.self_attn.kv_cache = None
            layer.self_attn.decode_attention_fn = None
        self.codec_slots.close()
        with self._codec_lock:
            self._codec_slot.clear()
