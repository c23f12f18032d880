"""Runner (engine/runner.py) for speech LMs: a Llama-style backbone + a frame codec.

It owns all device memory; the constructor is a recipe: KV cache, per-slot state, graphs.
KV: `[2, layers, max_running, kv_heads, max_seq_len + 1, head_dim]` in per-layer views
(position `max_seq_len`: a spare for padding rows). A decode step covers slot rows `[0, B)`
(B: the batch bucket above the highest slot), its `[token, was_active, stopped]` read back
one step late so stop checks never stall the GPU. GPU: bf16, CUDA graphs per (batch,
attention-length) bucket; CPU: float32, eager. Timings: decode by CUDA events (GPU) or the
host clock, the rest by the host clock. Step times: bench/results/orpheus_decode.md.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from engine.lanes import GpuLanes
from engine.lm_spec import LMSpec
from engine.plan import CodecItem, Timing, Tokens
from engine.request import Request
from engine.runner import Emit, LMParts, Runner
from engine.types import ChunkOut
from models import cuda_graphs
from models.codec_graphs import CodecGraphs
from models.codec_windows import decode_windows
from models.context import Context, additive, reset_context, set_context
from models.cuda_graphs import buckets, codec_buckets, length_buckets
from models.lm_prefill import PrefillGraphs
from models.lm_warm_up import guarded, warm_up_lm
from models.sampling import pick_audio_tokens

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class RunnerConfig:
    max_seq_len: int = 2560  # prompt + generated tokens per request
    enforce_eager: bool = False
    compile_layers: bool = False  # torch.compile the elementwise pieces and the sampler (GPU; slower load)
    max_codec_batch: int = 32
    codec_graph_batches: tuple[int, ...] | None = None  # default: 1, 2, 4, ... up to max_codec_batch
    triton_attention: bool = True  # GPU decode attention: models/decode_attention.py instead of SDPA
    fused_attention: bool = True  # with it: rotary + KV write + attention in one kernel (decode_attention_qkv)
    attn_block: int = 256  # attention reads the cache in multiples of this many positions
    graph_batches: tuple[int, ...] | None = None  # default: 1, 2, 4, 8, 16, 32, ... up to max_running
    lanes: bool = True  # GPU: codec on urgent and background lanes beside the LM (engine/lanes.py)
    lm_sms: int = 0  # GPU: SMs of the LM lane's partition and the background codec lane's (0: no partition)
    codec_sms: int = 0
    urgent_codec_batch: int = 8  # the urgent lane's largest codec batch (its graphs)
    gemv: bool = True  # GPU: one-row decode matmuls on models/gemv.py (models/llama.py GEMV_MAX_ROWS), not cuBLAS
    fp8: bool = False  # GPU: projection weights in float8_e4m3fn, a scale per row (models/llama.py set_matmuls)
    split_k: bool = True  # GPU, fp8: 2-64-row matmuls on models/gemv.py split_k_linear (models/llama.py)
    fused_rows: bool = True  # GPU, fused attention: one-row steps as 5 kernels a layer (models/llama.py forward_rows)
    fused_sampler: bool = True  # GPU: a decode step's sampling and slot update in one kernel (models/sample_step.py)
    pdl: bool = True  # sm90+, fused rows: their kernels with programmatic dependent launch (models/gemv.py rows_linear)
    skinny_rows: bool = True  # fused rows, bf16: steps of 2-64 rows as 5 kernels a layer too (models/skinny.py)
    max_prefill_batch: int = 8  # prompts one prefill takes (its CUDA graphs are padded to this many)

    def __post_init__(self) -> None:
        assert self.max_seq_len >= 2 and self.attn_block >= 1 and self.max_codec_batch >= 1


def device_name(device: torch.device | str) -> str:
    """A worker key: "cpu", or "cuda:N" with the index made explicit."""
    dev = torch.device(device)
    return f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}" if dev.type == "cuda" else dev.type


class ModelRunner(Runner):
    has_backbone = True
    spec: LMSpec

    def __init__(self, model_id: str, parts: LMParts, device: torch.device | str, max_running: int) -> None:
        super().__init__(model_id, parts.spec, max_running)
        names = RunnerConfig.__dataclass_fields__
        config = RunnerConfig(**{k: v for k, v in parts.options.items() if k in names})
        self.max_seq_len, self.max_codec_batch = config.max_seq_len, config.max_codec_batch
        self.max_prefill_batch = config.max_prefill_batch
        self.torch_device, self.device = torch.device(device), device_name(device)
        self.model, self.codec, self.sample_rate = parts.backbone, parts.codec, int(parts.codec.sample_rate)
        on_gpu = self.torch_device.type == "cuda"
        self.use_graphs = on_gpu and not config.enforce_eager
        self._pending: tuple[torch.Tensor, Any, dict[int, Request], tuple[Any, int, int]] | None = None
        self.num_decode_steps = 0
        self.graph_counts = {"hit": 0, "miss": 0}  # GPU decode steps replayed from a graph, or run eagerly
        self.model.set_rope(config.max_seq_len + 1, self.torch_device)
        self.model.fuse_projections()
        is_compiled = config.compile_layers and on_gpu
        self.model.compile_layers(is_compiled)
        pdl = config.pdl and on_gpu and torch.cuda.get_device_capability(self.torch_device)[0] >= 9
        self.model.set_matmuls(config.gemv and on_gpu, config.fp8, config.split_k,
                               config.fused_rows and on_gpu and config.triton_attention and config.fused_attention,
                               pdl, config.skinny_rows)
        self._sample_step: Any = None
        if on_gpu and config.fused_sampler:
            from models.sample_step import sample_step  # (Triton: imported on GPU only)

            self._sample_step = sample_step
        self._pick = torch.compile(pick_audio_tokens, dynamic=True, fullgraph=True) if is_compiled else \
            pick_audio_tokens
        # The audio head: only the rows that can be sampled (each frame position's codes, a
        # contiguous slice of the LM head, then the stop tokens): less to read per step.
        spec, weight = parts.spec, self.model.lm_head.weight
        audio = spec.tokens_per_frame * spec.codebook_size
        self._w_audio = weight[spec.audio_token_base:spec.audio_token_base + audio]
        self._w_stop = weight[list(spec.stop_token_ids)]
        self.head_ids = torch.tensor([*range(spec.audio_token_base, spec.audio_token_base + audio),
                                      *spec.stop_token_ids], dtype=torch.int64, device=self.torch_device)
        self.dtype = next(self.model.parameters()).dtype
        self._allocate_kv_cache()
        self._allocate_state()
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._batch_buckets = sorted(config.graph_batches or buckets(max_running))
        self._length_buckets = length_buckets(config.max_seq_len + 1, config.attn_block)
        self.gpu_lanes = GpuLanes(self.torch_device, config.lm_sms, config.codec_sms) if on_gpu and config.lanes else None
        self.lanes = {"codec": 1} if not on_gpu else {"urgent": 1, "background": 1} if self.gpu_lanes else {}
        attention = fused = None
        if config.triton_attention and on_gpu:  # split-K sized from the LM lane's SMs
            from models.decode_attention import decode_attention, decode_attention_qkv

            programs = 2 * (self.gpu_lanes.sms["lm"] if self.gpu_lanes else torch.cuda.get_device_properties(
                self.torch_device).multi_processor_count)
            attention = functools.partial(decode_attention, target_programs=programs)
            if config.fused_attention:  # one counter buffer: the LM's steps run one at a time on its stream
                counters = torch.zeros((max_running + 1) * self.model.args.num_key_value_heads, dtype=torch.int32,
                                       device=self.torch_device)
                # (launched with PDL in the one-row path only, LlamaLM.pdl: beside cuBLAS's matmuls at 64 and 256 rows
                # it made the step 0.6-3 % longer, bench/results/orpheus_decode.md v12)
                fused = functools.partial(decode_attention_qkv, counters=counters, target_programs=programs)
        self._triton_attention = attention is not None
        for layer in self.model.model.layers:
            layer.self_attn.decode_attention_fn = attention
            layer.self_attn.decode_qkv_fn = fused
        windows = parts.spec.shape.window_lengths()
        batches = config.codec_graph_batches or codec_buckets(config.max_codec_batch)
        self.codec_graphs = {lane: CodecGraphs(self.codec, [b for b in batches if b <= config.urgent_codec_batch]
                                               if lane == "urgent" else batches, windows)
                             for lane in (self.lanes or {"step": 1})}
        self._prefill = PrefillGraphs()
        if self.use_graphs:
            self._prefill.capture(self)
            self._capture_graphs()
            if torch.device(self.codec.device).type == "cuda":
                for graphs in self.codec_graphs.values():
                    graphs.capture()

    def _allocate_kv_cache(self) -> None:
        args = self.model.args
        self.kv_cache = torch.zeros(2, args.num_hidden_layers, self.max_running, args.num_key_value_heads,
                                    self.max_seq_len + 1, args.head_dim, dtype=self.dtype, device=self.torch_device)
        for i, layer in enumerate(self.model.model.layers):
            layer.self_attn.kv_cache = self.kv_cache[:, i]

    def _allocate_state(self) -> None:
        # Row `max_running` is a spare: padding prompts of a captured prefill write it.
        n, dev = self.max_running + 1, self.torch_device
        zeros = functools.partial(torch.zeros, n, device=dev)
        self.tokens, self.positions = zeros(dtype=torch.int64), zeros(dtype=torch.int64)  # next input, its position
        self.steps, self.max_tokens = zeros(dtype=torch.int64), zeros(dtype=torch.int64)  # generated so far, limit
        self.forced, self.stopped = zeros(dtype=torch.bool), zeros(dtype=torch.bool)  # forced: never stop
        self.host_active = zeros(dtype=torch.bool)  # rows the host runs this step
        self.temperature, self.seeds = zeros(dtype=torch.float32), zeros(dtype=torch.int64)
        self.top_p, self.penalty = torch.ones(n, device=dev), torch.ones(n, device=dev)
        head = self.spec.tokens_per_frame * self.spec.codebook_size + len(self.spec.stop_token_ids)
        self.seen = torch.zeros(n, head, dtype=torch.bool, device=dev)  # per audio-head index
        self.readback = torch.zeros(3, n, dtype=torch.int64, device=dev)  # token, was_active, stopped
        self.row_index = torch.arange(n, dtype=torch.int64, device=dev)
        self._active_host = [torch.zeros(n, dtype=torch.bool, pin_memory=dev.type == "cuda") for _ in range(2)]
        self._readback_host = [torch.zeros(3, n, dtype=torch.int64, pin_memory=dev.type == "cuda") for _ in range(2)]
        self._turn = 0

    @torch.inference_mode()
    def _capture_graphs(self) -> None:
        self.host_active.zero_()
        shapes = [(b, n) for b in reversed(self._batch_buckets) for n in reversed(self._length_buckets)]
        self._graphs = cuda_graphs.capture([((b, n), functools.partial(self._decode_step, b, n)) for b, n in shapes],
                                           self.torch_device, "decode step graphs", eager_fallback=False).graphs

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden `[N, hidden_size]` -> float32 logits of the audio head `[N, audio + stops]`."""
        return torch.cat([self.model.linear(hidden, self._w_audio), F.linear(hidden, self._w_stop)], dim=-1).float()

    def _sample_and_update(self, rows: torch.Tensor | slice, hidden: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Sample for slot `rows` (int64 `[N]`, or a slice: views, no gathers) from their hidden
        states, advance their state where `active`; returns token ids `[N]`."""
        spec = self.spec
        steps = self.steps[rows]
        index = self._pick(self._logits(hidden), self.temperature[rows], self.top_p[rows], self.penalty[rows],
                           self.seen[rows], self.seeds[rows], steps, self.forced[rows], spec.codebook_size,
                           spec.tokens_per_frame)
        token = self.head_ids[index]
        self.tokens[rows] = torch.where(active, token, self.tokens[rows])
        if isinstance(rows, slice):
            self.seen[rows][self.row_index[:len(index)], index] |= active
        else:
            self.seen[rows, index] |= active
        is_stop = steps + 1 >= self.max_tokens[rows]  # before the update: `steps` may be a view
        self.steps[rows] = steps + active
        for stop_id in spec.stop_token_ids:
            is_stop |= (token == stop_id) & ~self.forced[rows]
        self.stopped[rows] |= active & is_stop
        return token

    def _decode_step(self, batch: int, length: int) -> None:
        rows = self.row_index[:batch]
        active = self.host_active[:batch] & ~self.stopped[:batch]
        write_positions = torch.where(active, self.positions[:batch], self.max_seq_len)
        mask = None if self._triton_attention else additive(
            (torch.arange(length, device=self.torch_device)[None, :] <= write_positions[:, None])[:, None, None, :],
            self.dtype)  # (the GPU's Triton attention reads the positions, not a mask)
        set_context(Context(False, rows, write_positions, mask, length))
        hidden = self.model(self.tokens[:batch], write_positions)
        if self._sample_step is not None:
            self._sample_step(self.model.linear(hidden, self._w_audio), F.linear(hidden, self._w_stop), self.head_ids,
                              tokens=self.tokens, positions=self.positions, steps=self.steps,
                              max_tokens=self.max_tokens, forced=self.forced, stopped=self.stopped,
                              host_active=self.host_active, temperature=self.temperature, top_p=self.top_p,
                              penalty=self.penalty, seeds=self.seeds, seen=self.seen, readback=self.readback,
                              codebook_size=self.spec.codebook_size, tokens_per_frame=self.spec.tokens_per_frame)
        else:
            self.readback[0, :batch] = self._sample_and_update(slice(0, batch), hidden, active)
            self.positions[:batch] += active
            self.readback[1, :batch] = active
            self.readback[2, :batch] = self.stopped[:batch]
        reset_context()

    def _launch_decode(self, batch: int, length: int) -> None:
        graph = self._graphs.get((batch, length))
        if self.use_graphs:
            self.graph_counts["hit" if graph is not None else "miss"] += 1
        if graph is not None:
            graph.replay()
        else:
            with torch.inference_mode():
                self._decode_step(batch, length)

    def _on(self, lane: str) -> Any:
        return self.gpu_lanes.on(lane) if self.gpu_lanes is not None and lane in self.gpu_lanes.streams else \
            contextlib.nullcontext()

    def decode(self, requests: Sequence[Request]) -> Tokens:
        """Launch one decode step for `requests` (LM lane); returns the previous step's tokens."""
        with self._on("lm"):
            return self._decode(requests)

    def _decode(self, requests: Sequence[Request]) -> Tokens:
        launched = None
        if requests:
            batch = next(b for b in self._batch_buckets + [self.max_running] if b >= max(r.slot for r in requests) + 1)
            longest = max(r.num_tokens for r in requests) + 1  # the host may lag the device by one step
            length = next(n for n in self._length_buckets if n >= min(longest + 1, self.max_seq_len + 1))
            active_host = self._active_host[self._turn]  # the one used two steps ago is surely copied
            active_host.zero_()
            active_host[[r.slot for r in requests]] = True
            self.host_active.copy_(active_host, non_blocking=True)
            events, t0 = None, time.perf_counter()
            if self.torch_device.type == "cuda":
                events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                events[0].record()
            self._launch_decode(batch, length)
            self.num_decode_steps += 1
            if events is not None:
                events[1].record()
            else:
                self._timings.append(Timing("step", batch, length, 1000.0 * (time.perf_counter() - t0)))
            launched = ({r.slot: r for r in requests}, (events, batch, length))
        outs = self._finish_pending()
        if launched is not None:
            host = self._readback_host[self._turn]
            self._turn ^= 1
            host.copy_(self.readback, non_blocking=True)
            done = torch.cuda.Event() if self.torch_device.type == "cuda" else None
            if done is not None:
                done.record()
            self._pending = (host, done, launched[0], launched[1])
        return outs

    def _finish_pending(self) -> Tokens:
        if self._pending is None:
            return Tokens([], [], [])
        (host, done, owners, (events, batch, length)), self._pending = self._pending, None
        if done is not None:
            done.synchronize()
        if events is not None:
            self._timings.append(Timing("step", batch, length, events[0].elapsed_time(events[1])))
        token, active, stop = host[:, :batch].tolist()
        rows = [row for row in owners if active[row]]  # (a row the device stopped is not active)
        return Tokens([owners[r] for r in rows], [token[r] for r in rows], [i for i, r in enumerate(rows) if stop[r]])

    def prefill(self, requests: Sequence[Request]) -> Tokens:
        """Pack the prompts of `requests` into one forward (LM lane, models/lm_prefill.py); sample
        each first token."""
        with self._on("lm"), torch.inference_mode():
            t0 = time.perf_counter()
            values = self._prefill.run(self, requests)
            total = sum(len(r.prepared.prompt_ids) for r in requests)
            self._timings.append(Timing("prefill", total, 1, 1000.0 * (time.perf_counter() - t0)))
        return Tokens(list(requests), values[0].tolist(), np.flatnonzero(values[1]).tolist())

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step", emit: Emit = None) -> list[ChunkOut]:
        """One chunk per item, in order, on `lane`: windows of equal length decode as one batch."""
        with self._on(lane):
            return self._decode_codec(items, self.codec_graphs.get(lane) or next(iter(self.codec_graphs.values())))

    def _decode_codec(self, items: Sequence[CodecItem], graphs: CodecGraphs) -> list[ChunkOut]:
        def decode(frames: torch.Tensor, members: list[int]) -> np.ndarray:
            starts = torch.tensor([items[i].window.start for i in members], dtype=torch.int64)
            return graphs.decode(frames, starts).cpu().numpy()
        return decode_windows(items, self.spec, decode, int(self.codec.samples_per_frame), self._timings)

    def warm_up(self) -> None:
        """Decode steps (batch 1 and the largest bucket, at the shortest and longest attention length),
        prefills and a first chunk's and the longest codec window, each timed once as serving times it (ms)
        into `take_timings()`, changing no slot's state (models/lm_warm_up.py); a failure is logged and the
        model serves with the estimates it did not time at their defaults."""
        guarded(self, warm_up_lm)

    def memory_bytes(self) -> int:
        state = sum(t.numel() * t.element_size() for t in (self.kv_cache, self.seen))
        return self.model.memory_bytes() + state + int(self.codec.memory_bytes())

    def close(self) -> None:
        self._graphs.clear()
        for graphs in self.codec_graphs.values():
            graphs.close()
        for layer in self.model.model.layers:
            layer.self_attn.kv_cache = None
        del self.kv_cache
