"""Runner (engine/runner.py) for Qwen3-TTS: one whole 80 ms frame per engine step.

A step for B running rows is the talker's decode step (codebook 0's logits) then the code
predictor's 15 steps (codebooks 1..15), all rows together; codes are sampled on the device
(models/qwen3_tts_sampling.py) and read back at the end of the step, so `decode` returns this
step's frames (models/qwen3_tts_spec.py packs each into one token). Not here: CUDA graphs of
the frame and Orpheus' one-step-late readback (engine/model_runner.py), which only pay on a GPU.

Device state per KV slot (row b = slot b, as engine/model_runner.py): the talker's KV cache
`[2, layers, max_running, kv_heads, max_seq_len + 1, head_dim]` (position `max_seq_len`: a
spare that rows outside the step write), `summed [max_running, H]` (the slot's last frame's 16
codebook embeddings summed: its next talker input, before the text row), `seen [max_running,
vocab]` bool (codebook-0 ids generated so far: the repetition penalty's) and each slot's
sampling settings. The code predictor's own tiny cache restarts every frame.

Prefill packs new prompts (embeddings `[T, H]` each) into one talker forward under a
block-diagonal causal mask and samples frame 0 from each prompt's last hidden state. Frame
j >= 1 reads `summed` of frame j - 1 plus `prompt.text_row(j - 1)` at position T + j - 1, as
models/qwen3_tts_generate.py (the reference loop) does; the stop id is masked for the first
`MIN_FRAMES` frames and for forced requests.

Codec: the 12 Hz decoder's streaming state per request (`CodecState`, made at prefill, dropped
at `release`, so a cancelled stream's late codec call never touches a new owner's state),
windows of equal length decoded as one batch whatever their positions. CPU: the codec runs on
one lane beside the steps; GPU: in the step (no stream partition for this family yet).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import torch

from engine.lm_spec import LMSpec
from engine.model_runner import device_name
from engine.plan import CodecItem, Timing, Tokens
from engine.request import Request
from engine.runner import LMParts, Runner
from engine.types import ChunkOut
from models.codec_windows import decode_windows
from models.context import Context, additive, reset_context, set_context
from models.qwen3_tts_generate import MIN_FRAMES
from models.qwen3_tts_graphs import TOP_K as GRAPH_TOP_K, PredictorGraphs
from models.qwen3_tts_sampling import sample_codes
from models.qwen3_tts_spec import STOP, Extra, QwenPrepared, pack_frame

MAX_SEQ_LEN = 2048  # talker positions per slot: prompt + frames (2048 frames = 164 s)
STEPS_PER_FRAME = 16  # draws per frame: the seed's step counter advances by this much a frame


class Qwen3TTSRunner(Runner):
    """Options (`LMParts.options`): `max_seq_len` (default MAX_SEQ_LEN), `max_codec_batch` (32),
    `max_prefill_batch` (8); `max_running` is build_runner's."""

    has_backbone = True
    spec: LMSpec

    def __init__(self, model_id: str, parts: LMParts, device: torch.device | str, max_running: int) -> None:
        super().__init__(model_id, parts.spec, max_running)
        options = parts.options
        self.max_seq_len = int(options.get("max_seq_len", MAX_SEQ_LEN))
        self.max_codec_batch = int(options.get("max_codec_batch", 32))
        self.max_prefill_batch = int(options.get("max_prefill_batch", 8))
        assert self.max_seq_len >= 2 and self.max_codec_batch >= 1 and self.max_prefill_batch >= 1
        self.model, self.codec = parts.backbone, parts.codec  # models.qwen3_tts.Qwen3TTS, Qwen3TTSCodec
        self.talker = talker = self.model.talker
        self.torch_device, self.device = torch.device(device), device_name(device)
        self.sample_rate = int(self.codec.sample_rate)
        self.lanes = {"codec": 1} if self.torch_device.type == "cpu" else {}
        args, dev = talker.args, self.torch_device
        self.dtype = talker.codec_head.weight.dtype
        self.eos = args.codec_eos_token_id
        talker.set_rope(self.max_seq_len + 1, dev)  # + the spare position
        talker.code_predictor.setup_cache(max(max_running, self.max_prefill_batch), dev, self.dtype)
        # models/qwen3_tts_graphs.py: captured on a GPU by default; `predictor_graphs` on a CPU
        # runs the same buffers eagerly (tests), off: the plain eager loop.
        use_graphs = bool(options.get("predictor_graphs", dev.type == "cuda"))
        self.predictor_graphs = PredictorGraphs(talker.code_predictor, max(max_running, self.max_prefill_batch),
                                                args.hidden_size, self.dtype, dev) if use_graphs else None
        self.kv_cache = torch.zeros(2, args.num_hidden_layers, max_running, args.num_key_value_heads,
                                    self.max_seq_len + 1, args.head_dim, dtype=self.dtype, device=dev)
        for i, layer in enumerate(talker.model.layers):
            layer.self_attn.kv_cache = self.kv_cache[:, i]
        n = max_running
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
        self._codec_states: dict[str, Any] = {}  # request id -> models.qwen3_tts_codec.CodecState
        if self.predictor_graphs is not None and dev.type == "cuda":
            with torch.inference_mode():
                self.predictor_graphs.capture()

    # -- one frame for rows of the batch --------------------------------------------------

    def _frame(self, rows: torch.Tensor, hidden: torch.Tensor, steps: torch.Tensor, active: torch.Tensor,
               extras: Sequence[Extra]) -> torch.Tensor:
        """Codes int64 `[B, 16]` of slots `rows` (int64 `[B]`) from their talker hidden states
        `[B, H]` at frame index `steps` (int64 `[B]`); the slot state advances where `active`."""
        logits = self.talker.compute_logits(hidden)
        allowed = self.allowed.expand(len(rows), -1).clone()
        allowed[:, self.eos] = (steps >= MIN_FRAMES) & ~self.forced[rows]
        seeds, draw = self.seeds[rows], steps * STEPS_PER_FRAME
        first = sample_codes(logits, self.temperature[rows], self.top_k[rows], self.top_p[rows], seeds, draw,
                             max(e.top_k for e in extras), penalty=self.penalty[rows], seen=self.seen[rows],
                             allowed=allowed)
        sub_temperature, sub_top_k, sub_top_p = self.sub_temperature[rows], self.sub_top_k[rows], self.sub_top_p[rows]
        sub_k = max(e.sub_top_k for e in extras)
        first_embed = self.talker.embed_codec(first)
        if self.predictor_graphs is not None and sub_k <= GRAPH_TOP_K:  # the 15 depth steps as one graph
            codes, summed = self.predictor_graphs.run(hidden=hidden, first_embed=first_embed, first=first,
                                                      temperature=sub_temperature, top_k=sub_top_k,
                                                      top_p=sub_top_p, seeds=seeds, draw=draw)
        else:
            def sample(step_logits: torch.Tensor, step: int) -> torch.Tensor:
                return sample_codes(step_logits, sub_temperature, sub_top_k, sub_top_p, seeds, draw + 1 + step, sub_k)

            frame: tuple[torch.Tensor, torch.Tensor] = self.talker.code_predictor.predict_frame(
                hidden, first_embed, first, sample)
            codes, summed = frame
        self.seen[rows, first] |= active
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

    # -- what the engine calls ------------------------------------------------------------

    def prefill(self, requests: Sequence[Request]) -> Tokens:
        """Pack the prompts of `requests` into one talker forward; sample each frame 0."""
        t0 = time.perf_counter()
        dev = self.torch_device
        prepared = [self._prepared(r) for r in requests]
        lens = [int(p.prompt.prefill.shape[0]) for p in prepared]
        with torch.inference_mode():
            rows = torch.tensor([r.slot for r in requests], dtype=torch.int64, device=dev)
            self._reset(rows, prepared)
            x = torch.cat([p.prompt.prefill for p in prepared]).to(self.dtype)
            positions = torch.cat([torch.arange(k, device=dev) for k in lens])
            owner = torch.repeat_interleave(torch.arange(len(lens), device=dev), torch.tensor(lens, device=dev))
            mask = (owner[:, None] == owner[None, :]) & (positions[None, :] <= positions[:, None])
            set_context(Context(True, rows[owner], positions, additive(mask[None, None], self.dtype)))
            try:
                hidden = self.talker(x, positions)
            finally:
                reset_context()
            last = torch.tensor(np.cumsum(lens) - 1, device=dev)
            zeros = torch.zeros(len(requests), dtype=torch.int64, device=dev)
            codes = self._frame(rows, hidden[last], zeros, torch.ones_like(zeros, dtype=torch.bool),
                                [p.extra for p in prepared if p.extra is not None]).tolist()
        for request in requests:
            self._codec_states[request.request_id] = self.codec.new_state()
        self._timings.append(Timing("prefill", sum(lens), 1, 1000.0 * (time.perf_counter() - t0)))
        return self._outs(requests, codes)

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
        dev, batch = self.torch_device, max(r.slot for r in requests) + 1
        write = [self.max_seq_len] * batch  # rows outside the step write the spare position
        steps, active = [0] * batch, [False] * batch
        with torch.inference_mode():
            text = self.pad.expand(batch, -1).clone()
            for r in requests:  # frame j's input: frame j - 1's codes and text row j - 1
                j = len(r.tokens)
                write[r.slot], steps[r.slot], active[r.slot] = len(r.prepared.prompt_ids) + j - 1, j, True
                trailing = self._prepared(r).prompt.trailing
                if j - 1 < trailing.shape[0]:
                    text[r.slot] = trailing[j - 1]
            length = max(write[r.slot] for r in requests) + 1
            positions = torch.tensor(write, dtype=torch.int64, device=dev)
            rows = torch.arange(batch, device=dev)
            visible = torch.arange(length, device=dev)[None, :] <= positions[:, None]
            set_context(Context(False, rows, positions, additive(visible[:, None, None, :], self.dtype), length))
            try:
                hidden = self.talker(self.summed[:batch] + text, positions)
            finally:
                reset_context()
            codes = self._frame(rows, hidden, torch.tensor(steps, device=dev), torch.tensor(active, device=dev),
                                [self._prepared(r).extra for r in requests]).tolist()  # type: ignore[misc]
        self._timings.append(Timing("step", batch, length, 1000.0 * (time.perf_counter() - t0)))
        return self._outs(requests, [codes[r.slot] for r in requests])

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step") -> list[ChunkOut]:
        """One chunk per item, in order: windows of equal length decode as one batch."""
        states = [self._codec_states.get(item.request.request_id) for item in items]  # None: released

        def decode(frames: torch.Tensor, members: list[int]) -> np.ndarray:
            return self.codec.decode(frames, [states[i] for i in members]).cpu().numpy()
        return decode_windows(items, self.spec, decode, int(self.codec.samples_per_frame), self._timings,
                              skip=lambda i: states[i] is None)

    def release(self, request: Request) -> None:
        self._codec_states.pop(request.request_id, None)

    def memory_bytes(self) -> int:
        tensors = [*self.talker.parameters(), self.kv_cache, self.seen, self.summed]
        return int(sum(t.numel() * t.element_size() for t in tensors)) + int(self.codec.memory_bytes())

    def close(self) -> None:
        for layer in self.talker.model.layers:
            layer.self_attn.kv_cache = None
        self._codec_states.clear()
