"""A plain eager generation loop for one request: prompt -> frames -> audio (greedy).

The reference the engine integration is checked against, and the shortest path from text
to audio for this family; it shows every call a runner makes, in order:

1. prefill: `talker(prompt.prefill, arange(T))` under a prefill `Context`; logits of the
   last row -> codebook 0 of frame 0 (`suppressed_ids()` masked; the stop id too for the
   first `MIN_FRAMES` frames);
2. per frame: `code_predictor.predict_frame(h, embed_codec(c0), c0)` -> the 16 codes and
   their summed embedding; stop before it if c0 is the stop id;
3. the next talker input is that sum + `prompt.text_row(step)`, one decode step at the
   next position under a decode `Context`; its hidden state `h` gives the next c0;
4. the codec decodes frames as they come (in the engine, engine/chunk_plan.py plans the chunks
   with models/qwen3_tts_spec.py `CHUNK_SHAPE`; here `synthesize` decodes them whole).
"""

from __future__ import annotations

from typing import Any

import torch

from models.context import Context, additive, reset_context, set_context
from models.qwen3_tts_prompt import Prompt
from models.qwen3_tts_talker import Talker

MIN_FRAMES = 2  # qwen-tts passes min_new_tokens=2: the stop id is masked for the first two


def allocate_kv_cache(talker: Talker, max_seq_len: int) -> torch.Tensor:
    """One slot's talker cache `[2, layers, 1, kv_heads, max_seq_len + 1, head_dim]`, views
    handed to each layer (the engine's runner allocates the same shape for many slots)."""
    a, weight = talker.args, talker.codec_head.weight
    cache = torch.zeros(2, a.num_hidden_layers, 1, a.num_key_value_heads, max_seq_len + 1, a.head_dim,
                        dtype=weight.dtype, device=weight.device)
    for i, layer in enumerate(talker.model.layers):
        layer.self_attn.kv_cache = cache[:, i]
    return cache


def pick_first_code(talker: Talker, hidden: torch.Tensor, step: int) -> torch.Tensor:
    """Greedy codebook 0 from the talker's hidden state `[1, hidden]` -> int64 `[1]`."""
    logits = talker.compute_logits(hidden)
    logits[:, talker.suppressed_ids().to(logits.device)] = float("-inf")
    if step < MIN_FRAMES:
        logits[:, talker.args.codec_eos_token_id] = float("-inf")
    return logits.argmax(dim=-1)


@torch.inference_mode()
def generate_frames(talker: Talker, prompt: Prompt, max_frames: int) -> torch.Tensor:
    """Greedy frames for one prompt until the stop id or `max_frames`: int64 `[F, 16]`."""
    device, dtype = prompt.prefill.device, prompt.prefill.dtype
    length = prompt.prefill.shape[0]
    max_seq_len = length + max_frames
    allocate_kv_cache(talker, max_seq_len)
    talker.code_predictor.setup_cache(1, device, dtype)
    positions = torch.arange(length, device=device)
    causal = positions[None, :] <= positions[:, None]
    set_context(Context(True, torch.zeros(length, dtype=torch.int64, device=device), positions,
                        additive(causal[None, None], dtype)))
    try:
        hidden = talker(prompt.prefill, positions)[-1:]
    finally:
        reset_context()
    frames: list[torch.Tensor] = []
    for step in range(max_frames):
        first = pick_first_code(talker, hidden, step)
        if int(first) == talker.args.codec_eos_token_id:
            break
        codes, summed = talker.code_predictor.predict_frame(hidden, talker.embed_codec(first), first)
        frames.append(codes[0])
        if step + 1 == max_frames:
            break
        position = torch.tensor([length + step], device=device)
        visible = torch.arange(length + step + 1, device=device) <= position
        set_context(Context(False, torch.zeros(1, dtype=torch.int64, device=device), position,
                            additive(visible[None, None, None], dtype), length + step + 1))
        try:
            hidden = talker(summed + prompt.text_row(step)[None], position)
        finally:
            reset_context()
    return torch.stack(frames) if frames else torch.zeros(0, talker.args.num_code_groups, dtype=torch.int64)


def synthesize(model: Any, text: str, max_frames: int = 250, **prompt_options: Any) -> torch.Tensor:
    """Text -> float32 audio `[F * 1920]` at 24 kHz with a loaded `models.qwen3_tts.Qwen3TTS`
    (prompt options as `Qwen3TTS.prompt`); greedy, so random weights give a fixed noise."""
    frames = generate_frames(model.talker, model.prompt(text, **prompt_options), max_frames)
    return model.codec.decode_whole(frames[None])[0]
