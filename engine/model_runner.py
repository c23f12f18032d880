"""Runner (engine/runner.py) for speech LMs: a Llama-style backbone + a frame codec.

The only owner of device memory. The constructor reads as a recipe: take the loaded
model and codec, `_allocate_kv_cache()`, `_allocate_state()`, `_capture_graphs()`.

- KV: one tensor `[2, layers, num_slots, kv_heads, max_seq_len + 1, head_dim]`, handed
  to each Attention as per-layer views; `engine/kv_cache.py` says who holds which slot.
  Position `max_seq_len` is a spare that padding rows write to and nobody reads.
- Continuous batching: `step_backbone` runs one packed prefill for newly admitted
  requests (their prompts concatenated, block-diagonal causal mask, no padding) and one
  decode step over slot rows `[0, B)`, B the batch bucket covering the highest running
  slot; rows not running this step are padding and write only the spare position.
- Per-slot decode state lives on the device (last token, position, step count,
  sampling settings, seen-token mask, stop flag); a decode step reads and updates it
  without the host, samples in one batched pass (engine/sampling.py) and writes
  `[token, was_active, stopped]` per row to a readback buffer. The host copies that
  buffer asynchronously and reads it one step late (after launching the next step),
  so stop checks never stall the GPU.
- GPU: bf16, one CUDA graph per (batch bucket, attention-length bucket), captured at
  load, largest first, into one pool; `enforce_eager` turns graphs off. The graphs'
  static inputs are the per-slot state tensors themselves (the host only writes
  `host_active`). CPU: float32, eager, the same code. Prefill always runs eagerly and
  reads its first tokens back at once (one host sync per prefill).
- Codec: chunk windows (models/snac.py) of equal length are decoded as one batch. GPU:
  through CUDA graphs captured at load for the streaming window lengths (first chunk up
  to steady chunks) x codec batch buckets, one pool; other lengths (a stream's last
  chunk) run eagerly, as does everything on CPU or with `enforce_eager`.

- GPU options: `compile_layers` torch.compiles the elementwise pieces and the sampler
  (slower load), `triton_attention` (default) runs decode attention in
  models/decode_attention.py. Step times vs the memory floor: bench/results/orpheus_decode.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from engine.kv_cache import KVSlots
from engine.lm_spec import LMSpec, parse_options
from engine.sampling import sample
from engine.types import ChunkOut, GenerationFailed, InputTooLong, InvalidInput, SpeechRequest, UnknownVoice
from models.context import Context, reset_context, set_context
from models.snac import CODES_PER_FRAME, SnacCodec, StreamState, Window, steady_window_frames


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    num_slots: int = 8  # requests running at once (KV slots)
    max_seq_len: int = 2560  # prompt + generated tokens per request
    enforce_eager: bool = False
    compile_layers: bool = False  # torch.compile the elementwise pieces and the sampler (GPU; slower load)
    max_codec_batch: int = 32
    codec_graph_batches: tuple[int, ...] | None = None  # default: 1, 2, 4, ... up to max_codec_batch
    triton_attention: bool = True  # GPU decode attention: models/decode_attention.py instead of SDPA
    attn_block: int = 256  # attention reads the cache in multiples of this many positions
    graph_batches: tuple[int, ...] | None = None  # default: 1, 2, 4, 8, 16, 32, ... up to num_slots

    def __post_init__(self) -> None:
        assert self.num_slots >= 1 and self.max_seq_len >= 2 and self.attn_block >= 1
        assert self.max_codec_batch >= 1


@dataclass(slots=True)
class _Seq:
    request_id: str
    slot: int
    prompt: list[int]
    max_tokens: int
    force_tokens: int  # 0: stop on the stop token
    temperature: float
    top_p: float
    penalty: float
    seed: int
    is_prefilled: bool = False
    is_stopped: bool = False
    error: str | None = None
    tokens: list[int] | None = None  # every generated token (stop token excluded)
    pending: list[int] | None = None  # tokens of the frame being filled
    stream: StreamState | None = None


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool mask (True = visible) -> 0 / -inf in `dtype`, what attention adds to its scores."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def pick_tokens(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, penalty: torch.Tensor,
                seen: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor, forced: torch.Tensor,
                vocab_ids: torch.Tensor, audio_token_base: int, codebook_size: int,
                tokens_per_frame: int) -> torch.Tensor:
    """engine/sampling.py `sample`, where forced rows may only pick an audio token of their
    frame position (`steps % tokens_per_frame`). Pure: compiled as one unit on GPU."""
    low = audio_token_base + codebook_size * (steps % tokens_per_frame)
    ids = vocab_ids[None, :]
    allowed = ((ids >= low[:, None]) & (ids < (low + codebook_size)[:, None])) | ~forced[:, None]
    return sample(logits, temperature, top_p, penalty, seen, seeds, steps, allowed)


def _buckets(limit: int) -> list[int]:
    sizes = [b for b in (1, 2, 4, 8) if b < limit] + list(range(16, limit, 16)) + [limit]
    return sorted(set(sizes))


def _codec_buckets(limit: int) -> list[int]:
    return sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b < limit} | {limit})


class CodecGraphs:
    """SNAC decode through CUDA graphs: one per (window frames, codec batch), for the
    streaming windows (models/snac.py `steady_window_frames`), captured largest first into
    one pool. Static inputs: codes `[B, F, 7]` and start frames `[B]`; rows past a call's
    count keep old (valid) codes and are decoded and dropped (rows are independent).
    Shapes without a graph (a stream's last chunk, or before `capture`) run eagerly."""

    def __init__(self, codec: Any, batches: Sequence[int]) -> None:
        self.codec = codec
        self.batches = sorted(set(batches))
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._io: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @torch.inference_mode()
    def capture(self) -> None:
        pool = None
        for frames in reversed(steady_window_frames()):
            for batch in reversed(self.batches):
                codes = torch.zeros(batch, frames, CODES_PER_FRAME, dtype=torch.int64, device=self.codec.device)
                starts = torch.zeros(batch, dtype=torch.int64, device=self.codec.device)
                self.codec.decode(codes, starts)  # warm-up (cuDNN picks its kernels) outside capture
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    pcm = self.codec.decode(codes, starts)
                pool = pool or graph.pool()
                self._graphs[(frames, batch)] = graph
                self._io[(frames, batch)] = (codes, starts, pcm)
        torch.cuda.synchronize()

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """Same contract as `SnacCodec.decode`: codes `[N, F, 7]`, start frames `[N]` ->
        float32 PCM `[N, F * 2048]` (a view of a static buffer when graphed: copy it out
        before the next call)."""
        count, num_frames = frames.shape[0], frames.shape[1]
        if not self._graphs or (num_frames, self.batches[-1]) not in self._graphs:
            return self.codec.decode(frames, starts)
        if count > self.batches[-1]:
            top = self.batches[-1]
            return torch.cat([self.decode(frames[i:i + top], starts[i:i + top]).clone() for i in range(0, count, top)])
        batch = next(b for b in self.batches if b >= count)
        codes, start, pcm = self._io[(num_frames, batch)]
        codes[:count].copy_(frames)
        start[:count].copy_(starts)
        self._graphs[(num_frames, batch)].replay()
        return pcm[:count]

    def close(self) -> None:
        self._graphs.clear()
        self._io.clear()


class ModelRunner:
    has_backbone = True

    def __init__(self, model_id: str, spec: LMSpec, model: Any, codec: SnacCodec, config: RunnerConfig,
                 device: torch.device | str) -> None:
        self.model_id = model_id
        self.family = spec.family
        self.spec = spec
        self.sample_rate = codec.sample_rate
        self.max_codec_batch = config.max_codec_batch
        self.config = config
        self.device = torch.device(device)
        self.model = model
        self.codec = codec
        self.kv = KVSlots(config.num_slots, config.max_seq_len)
        self.use_graphs = self.device.type == "cuda" and not config.enforce_eager
        self._seqs: dict[str, _Seq] = {}
        self._pending: tuple[torch.Tensor, Any, dict[int, str]] | None = None
        self._rng = random.Random()
        self.num_decode_steps = 0
        self.model.set_rope(config.max_seq_len + 1, self.device)
        self.model.fuse_projections()
        self._pick = pick_tokens
        is_compiled = config.compile_layers and self.device.type == "cuda"
        self.model.compile_layers(is_compiled)
        if is_compiled:
            self._pick = torch.compile(pick_tokens, dynamic=True, fullgraph=True)
        self.dtype = next(self.model.parameters()).dtype
        attention = None
        if config.triton_attention and self.device.type == "cuda":
            from models.decode_attention import decode_attention as attention
        for layer in self.model.model.layers:
            layer.self_attn.decode_attention_fn = attention
        self._allocate_kv_cache()
        self._allocate_state()
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        # Fixed for the runner's life; read on every decode step, so computed once here.
        self._batch_buckets = self._graph_batches()
        self._length_buckets = self._attn_lengths()
        self.codec_graphs = CodecGraphs(codec, config.codec_graph_batches or _codec_buckets(config.max_codec_batch))
        if self.use_graphs:
            self._capture_graphs()
            if isinstance(codec, SnacCodec) and codec.device.type == "cuda":
                self.codec_graphs.capture()

    # -- construction -------------------------------------------------------------------

    def _allocate_kv_cache(self) -> None:
        args = self.model.args
        dtype = next(self.model.parameters()).dtype
        self.kv_cache = torch.zeros(2, args.num_hidden_layers, self.config.num_slots, args.num_key_value_heads,
                                    self.config.max_seq_len + 1, args.head_dim, dtype=dtype, device=self.device)
        for i, layer in enumerate(self.model.model.layers):
            layer.self_attn.kv_cache = self.kv_cache[:, i]

    def _allocate_state(self) -> None:
        n, vocab, dev = self.config.num_slots, self.model.args.vocab_size, self.device
        self.tokens = torch.zeros(n, dtype=torch.int64, device=dev)  # last sampled token = next input
        self.positions = torch.zeros(n, dtype=torch.int64, device=dev)  # position of that token
        self.steps = torch.zeros(n, dtype=torch.int64, device=dev)  # tokens generated so far
        self.max_tokens = torch.zeros(n, dtype=torch.int64, device=dev)
        self.forced = torch.zeros(n, dtype=torch.bool, device=dev)  # ignore stop, audio slots only
        self.stopped = torch.zeros(n, dtype=torch.bool, device=dev)
        self.host_active = torch.zeros(n, dtype=torch.bool, device=dev)  # rows the host runs this step
        self.temperature = torch.zeros(n, dtype=torch.float32, device=dev)
        self.top_p = torch.ones(n, dtype=torch.float32, device=dev)
        self.penalty = torch.ones(n, dtype=torch.float32, device=dev)
        self.seeds = torch.zeros(n, dtype=torch.int64, device=dev)
        self.seen = torch.zeros(n, vocab, dtype=torch.bool, device=dev)
        self.readback = torch.zeros(3, n, dtype=torch.int64, device=dev)  # token, was_active, stopped
        self.row_index = torch.arange(n, dtype=torch.int64, device=dev)
        self.vocab_ids = torch.arange(vocab, dtype=torch.int64, device=dev)
        pin = self.device.type == "cuda"
        self._active_host = [torch.zeros(n, dtype=torch.bool, pin_memory=pin) for _ in range(2)]
        self._readback_host = [torch.zeros(3, n, dtype=torch.int64, pin_memory=pin) for _ in range(2)]
        self._readback_turn = 0

    def _graph_batches(self) -> list[int]:
        return sorted(self.config.graph_batches or _buckets(self.config.num_slots))

    def _attn_lengths(self) -> list[int]:
        block, top = self.config.attn_block, self.config.max_seq_len + 1
        return sorted({min(top, block * k) for k in range(1, -(-top // block) + 1)})

    @torch.inference_mode()
    def _capture_graphs(self) -> None:
        self.host_active.zero_()
        for batch in self._graph_batches():  # warm up every shape (and any compiled kernels) outside capture
            for length in self._attn_lengths():
                self._decode_step(batch, length)
        torch.cuda.synchronize()
        pool = None
        for batch in reversed(self._graph_batches()):
            for length in reversed(self._attn_lengths()):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self._decode_step(batch, length)
                pool = pool or graph.pool()
                self._graphs[(batch, length)] = graph
        torch.cuda.synchronize()

    # -- the decode step (graph-captured on GPU) ------------------------------------------

    def _sample_and_update(self, rows: torch.Tensor | slice, logits: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Sample for slot `rows` (int64 `[N]`, or a slice: views, no gathers), advance their
        state where `active`; returns tokens `[N]`."""
        steps = self.steps[rows]
        token = self._pick(logits, self.temperature[rows], self.top_p[rows], self.penalty[rows], self.seen[rows],
                           self.seeds[rows], steps, self.forced[rows], self.vocab_ids, self.spec.audio_token_base,
                           self.spec.codebook_size, self.spec.tokens_per_frame)
        self.tokens[rows] = torch.where(active, token, self.tokens[rows])
        if isinstance(rows, slice):
            self.seen[rows][self.row_index[:len(token)], token] |= active
        else:
            self.seen[rows, token] |= active
        is_stop = steps + 1 >= self.max_tokens[rows]  # before the update: `steps` may be a view
        self.steps[rows] = steps + active
        for stop_id in self.spec.stop_token_ids:
            is_stop |= (token == stop_id) & ~self.forced[rows]
        self.stopped[rows] |= active & is_stop
        return token

    def _decode_step(self, batch: int, length: int) -> None:
        rows = self.row_index[:batch]
        active = self.host_active[:batch] & ~self.stopped[:batch]
        write_positions = torch.where(active, self.positions[:batch], self.config.max_seq_len)
        mask = torch.arange(length, device=self.device)[None, :] <= write_positions[:, None]
        set_context(Context(False, rows, write_positions, _additive(mask[:, None, None, :], self.dtype), length))
        hidden = self.model(self.tokens[:batch], write_positions)
        token = self._sample_and_update(slice(0, batch), self.model.compute_logits(hidden), active)
        self.positions[:batch] += active
        self.readback[0, :batch] = token
        self.readback[1, :batch] = active
        self.readback[2, :batch] = self.stopped[:batch]
        reset_context()

    def _launch_decode(self, batch: int, length: int) -> None:
        graph = self._graphs.get((batch, length))
        if graph is not None:
            graph.replay()
        else:
            with torch.inference_mode():
                self._decode_step(batch, length)

    # -- prefill ----------------------------------------------------------------------------

    @torch.inference_mode()
    def _prefill(self, seqs: list[_Seq]) -> torch.Tensor:
        """Pack the prompts of `seqs` into one forward; sample each first token."""
        dev = self.device
        ids = torch.tensor([t for s in seqs for t in s.prompt], dtype=torch.int64, device=dev)
        positions = torch.cat([torch.arange(len(s.prompt), device=dev) for s in seqs])
        owner = torch.cat([torch.full((len(s.prompt),), i, device=dev) for i, s in enumerate(seqs)])
        slots = torch.tensor([s.slot for s in seqs], dtype=torch.int64, device=dev)
        mask = (owner[:, None] == owner[None, :]) & (positions[None, :] <= positions[:, None])
        for s in seqs:  # reset the slot's device state for its new owner
            row = s.slot
            self.seen[row] = False
            self.seen[row, torch.tensor(s.prompt, device=dev)] = True
            self.steps[row] = 0
            self.stopped[row] = False
            self.positions[row] = len(s.prompt)
            self.temperature[row] = s.temperature
            self.top_p[row] = s.top_p
            self.penalty[row] = s.penalty
            self.seeds[row] = s.seed
            self.forced[row] = s.force_tokens > 0
            self.max_tokens[row] = s.force_tokens or s.max_tokens
        set_context(Context(True, slots[owner], positions, _additive(mask[None, None], self.dtype), 0))
        try:
            hidden = self.model(ids, positions)
        finally:
            reset_context()
        last = torch.tensor(np.cumsum([len(s.prompt) for s in seqs]) - 1, device=dev)
        active = torch.ones(len(seqs), dtype=torch.bool, device=dev)
        token = self._sample_and_update(slots, self.model.compute_logits(hidden[last]), active)
        return torch.stack([token, active.long(), self.stopped[slots].long()])

    # -- host side of a step ----------------------------------------------------------------

    def _accept(self, seq: _Seq, token: int, stopped: bool) -> str | None:
        """Take one generated token; returns an error message if the request must fail."""
        assert seq.tokens is not None and seq.pending is not None and seq.stream is not None
        if token in self.spec.stop_token_ids and not seq.force_tokens:
            seq.is_stopped = True
        else:
            seq.tokens.append(token)
            seq.pending.append(token)
            if len(seq.pending) == self.spec.tokens_per_frame:
                try:
                    seq.stream.frames.append(self.spec.frame_codes(seq.pending))
                except ValueError as error:
                    seq.error = f"generated token {len(seq.tokens) - 1}: {error}"
                    seq.is_stopped = True
                    return seq.error
                seq.pending.clear()
        if stopped:
            seq.is_stopped = True
        if seq.is_stopped:
            seq.stream.is_final = True  # a trailing partial frame is dropped
        return None

    def _consume(self, values: np.ndarray, owners: dict[int, str]) -> list[ChunkOut]:
        """values: int64 `[3, rows]` = token, was_active, stopped per row."""
        failures = []
        for row, request_id in owners.items():
            seq = self._seqs.get(request_id)
            if seq is None or seq.slot != row or seq.is_stopped or not values[1, row]:
                continue
            error = self._accept(seq, int(values[0, row]), bool(values[2, row]))
            if error is not None:
                failures.append(ChunkOut(request_id, None, error=GenerationFailed(error)))
        return failures

    def _finish_pending(self) -> list[ChunkOut]:
        if self._pending is None:
            return []
        host, event, owners = self._pending
        self._pending = None
        if event is not None:
            event.synchronize()
        return self._consume(host.numpy(), owners)

    def step_backbone(self, request_ids: Sequence[str]) -> list[ChunkOut]:
        seqs = [self._seqs[i] for i in request_ids if i in self._seqs]
        running = [s for s in seqs if s.is_prefilled and not s.is_stopped]
        fresh = [s for s in seqs if not s.is_prefilled]
        launched = None
        if running:
            batch = next(b for b in self._batch_buckets + [self.config.num_slots]
                         if b >= max(s.slot for s in running) + 1)
            longest = max(len(s.prompt) + len(s.tokens or ()) for s in running) + 1  # host may lag one step
            length = next(n for n in self._length_buckets if n >= min(longest + 1, self.config.max_seq_len + 1))
            # Host buffers alternate: the one used two steps ago is surely copied by now.
            active_host = self._active_host[self._readback_turn]
            active_host.zero_()
            active_host[[s.slot for s in running]] = True
            self.host_active.copy_(active_host, non_blocking=True)
            self._launch_decode(batch, length)
            self.num_decode_steps += 1
            launched = (batch, {s.slot: s.request_id for s in running})
        failures = []
        if launched is not None:  # queue the readback before the (synchronous) prefill
            host = self._readback_host[self._readback_turn]
            self._readback_turn ^= 1
            host.copy_(self.readback, non_blocking=True)
            event = None
            if self.device.type == "cuda":
                event = torch.cuda.Event()
                event.record()
            failures += self._finish_pending()
            self._pending = (host, event, launched[1])
        if fresh:
            values = self._prefill(fresh).cpu().numpy()
            for i, s in enumerate(fresh):
                s.is_prefilled = True
                error = self._accept(s, int(values[0, i]), bool(values[2, i]))
                if error is not None:
                    failures.append(ChunkOut(s.request_id, None, error=GenerationFailed(error)))
        if launched is None:
            failures += self._finish_pending()
        return failures

    # -- requests ---------------------------------------------------------------------------

    def voices(self) -> list[str]:
        return list(self.spec.voices)

    def _options(self, request: SpeechRequest) -> dict[str, Any]:
        return parse_options(self.spec, request.options)

    def _prompt(self, request: SpeechRequest) -> list[int]:
        return self.spec.encode(request.voice, request.text)

    def check(self, request: SpeechRequest) -> None:
        if request.voice not in self.spec.voices:
            raise UnknownVoice(f"model {self.model_id!r} has no voice {request.voice!r}; "
                               f"voices: {', '.join(self.spec.voices)}", field="voice")
        if not request.text.strip():
            raise InvalidInput("nothing to speak", field="input")
        if len(request.text) > self.spec.max_text_chars:
            raise InputTooLong(f"input has {len(request.text)} characters; the limit is "
                               f"{self.spec.max_text_chars}", field="input")
        options = self._options(request)
        needed = len(self._prompt(request)) + min(options["force_tokens"] or options["max_tokens"], 7 * 4)
        if not self.kv.fits(needed):
            raise InputTooLong(f"prompt needs {needed} positions with the first audio; "
                               f"max_seq_len is {self.kv.max_seq_len}", field="input")

    def can_admit(self, request: SpeechRequest) -> bool:
        return self.kv.num_free > 0

    def admit(self, request: SpeechRequest) -> None:
        options = self._options(request)
        prompt = self._prompt(request)
        room = self.kv.max_seq_len - len(prompt)
        slot = self.kv.allocate(request.request_id, len(prompt) + 1)
        seed = options["seed"] if options["seed"] is not None else self._rng.randrange(2**62)
        self._seqs[request.request_id] = _Seq(
            request.request_id, slot, prompt, max(1, min(options["max_tokens"], room)),
            min(options["force_tokens"], room), options["temperature"], options["top_p"],
            options["repetition_penalty"], seed, tokens=[], pending=[], stream=StreamState())

    def needs_backbone(self, request_id: str) -> bool:
        seq = self._seqs.get(request_id)
        return seq is not None and not seq.is_stopped

    def ready_chunks(self) -> list[str]:
        return [rid for rid, s in self._seqs.items()
                if s.error is None and s.stream is not None and s.stream.next_window() is not None]

    def early_chunks(self) -> list[str]:
        return [rid for rid, s in self._seqs.items()
                if s.error is None and s.stream is not None and s.stream.next_window() is None
                and s.stream.next_window(early=True) is not None]

    def is_first_chunk(self, request_id: str) -> bool:
        seq = self._seqs.get(request_id)
        return seq is not None and seq.stream is not None and seq.stream.num_chunks == 0

    def decode_chunks(self, request_ids: Sequence[str]) -> list[ChunkOut]:
        jobs: list[tuple[str, StreamState, Window]] = []
        for rid in request_ids:
            seq = self._seqs.get(rid)
            stream = seq.stream if seq is not None else None
            window = (stream.next_window() or stream.next_window(early=True)) if stream is not None else None
            if seq is not None and seq.stream is not None and window is not None:
                jobs.append((rid, seq.stream, window))
        pcm: dict[str, np.ndarray] = {}
        groups: dict[int, list[tuple[str, StreamState, Window]]] = {}
        for job in jobs:
            if job[2].emit_to == job[2].emit_from:
                pcm[job[0]] = np.zeros(0, np.float32)
            else:
                groups.setdefault(job[2].stop - job[2].start, []).append(job)
        for group in groups.values():  # equal window lengths decode as one batch
            frames = torch.tensor([s.frames[w.start:w.stop] for _, s, w in group], dtype=torch.int64)
            starts = torch.tensor([w.start for _, _, w in group], dtype=torch.int64)
            audio = self.codec_graphs.decode(frames, starts).cpu().numpy()
            for row, (rid, _, window) in enumerate(group):
                pcm[rid] = np.ascontiguousarray(audio[row, window.crop])
        outs = []
        for rid, stream, window in jobs:
            stream.advance(window)
            outs.append(ChunkOut(rid, pcm[rid], is_last=window.is_last))
        return outs

    def release(self, request_id: str) -> None:
        if self._seqs.pop(request_id, None) is not None:
            self.kv.free(request_id)

    def memory_bytes(self) -> int:
        tensors = [*self.model.parameters(), self.kv_cache, self.seen]
        return sum(t.numel() * t.element_size() for t in tensors) + self.codec.memory_bytes()

    def close(self) -> None:
        self._seqs.clear()
        self._graphs.clear()
        self.codec_graphs.close()
        for layer in self.model.model.layers:
            layer.self_attn.kv_cache = None
        del self.kv_cache
