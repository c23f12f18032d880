"""Qwen3-TTS code predictor: a depth transformer that writes codebooks 1..15 of a frame.

Per frame it reads two inputs, the talker's last hidden state `h` (the one whose logits
gave codebook 0) and codebook 0's embedding (the talker's codec table), both projected to
its own width (`small_to_mtp_projection`, absent when the widths agree), and predicts
codebook 1 with `lm_head[0]`; then it feeds codebook j through `model.codec_embedding[j -
1]` and predicts codebook j + 1 with `lm_head[j]`, 15 sequential steps in all, at positions
0..15 of its own short sequence. Its KV cache is reset every frame: each frame is a new
sequence of at most 16 positions, so the cache is a small fixed buffer here (gpt-fast's
KVCache), not the runner's per-slot one.

Key names equal the checkpoint's under `talker.code_predictor.` (qwen-tts's
`Qwen3TTSTalkerCodePredictorModelForConditionalGeneration`, read for the format). Layers are
Qwen3's, as the talker's, with the plain 1-D rotary embedding.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from models.llama import MLP, RMSNorm
from models.qwen3_tts_args import PredictorArgs
from models.qwen3_tts_layers import project_qkv, rope_tables

# (logits float32 [B, vocab], step j = 0..14 predicting codebook j + 1) -> codes int64 [B]
Sampler = Callable[[torch.Tensor, int], torch.Tensor]


def greedy(logits: torch.Tensor, step: int) -> torch.Tensor:
    """The argmax code of each row."""
    return logits.argmax(dim=-1)


class PredictorAttention(nn.Module):
    def __init__(self, args: PredictorArgs) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = args.num_attention_heads, args.num_key_value_heads
        self.head_dim = args.head_dim
        self.q_proj = nn.Linear(args.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, args.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
        self.kv_cache: torch.Tensor | None = None  # [2, max_batch, kv_heads, 16, head_dim]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int) -> torch.Tensor:
        """x `[B, L, hidden]`: L new positions `start .. start + L - 1` of every row;
        cos/sin `[L, D]`. Attends causally to positions 0 .. start + L - 1."""
        batch, length, _ = x.shape
        q, k, v = project_qkv(self, x.reshape(batch * length, -1), cos.repeat(batch, 1)[:, None],
                              sin.repeat(batch, 1)[:, None])
        q = q.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        assert self.kv_cache is not None, "call CodePredictor.setup_cache first"
        stop = start + length
        shape = (batch, length, self.num_kv_heads, self.head_dim)
        self.kv_cache[0, :batch, :, start:stop] = k.view(shape).transpose(1, 2)
        self.kv_cache[1, :batch, :, start:stop] = v.view(shape).transpose(1, 2)
        keys, values = self.kv_cache[0, :batch, :, :stop], self.kv_cache[1, :batch, :, :stop]
        group = self.num_heads // self.num_kv_heads
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
        mask = None
        if length > 1:  # new positions see the cached ones and the new ones up to themselves
            mask = torch.ones(length, stop, dtype=torch.bool, device=x.device).tril(start)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim))


class PredictorLayer(nn.Module):
    def __init__(self, args: PredictorArgs) -> None:
        super().__init__()
        self.self_attn = PredictorAttention(args)
        self.mlp = MLP(args)  # type: ignore[arg-type]  # reads hidden_size, intermediate_size only
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class PredictorModel(nn.Module):
    def __init__(self, args: PredictorArgs, talker_hidden: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(PredictorLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        # codebook j + 1 -> talker width (the talker sums these into its next input)
        self.codec_embedding = nn.ModuleList(nn.Embedding(args.vocab_size, talker_hidden)
                                             for _ in range(args.num_code_groups - 1))


class CodePredictor(nn.Module):
    """`talker.code_predictor.*`. Call `setup_cache(max_batch, ...)` before `predict_frame`."""

    def __init__(self, args: PredictorArgs, talker_hidden: int) -> None:
        super().__init__()
        self.args = args
        self.model = PredictorModel(args, talker_hidden)
        self.lm_head = nn.ModuleList(nn.Linear(args.hidden_size, args.vocab_size, bias=False)
                                     for _ in range(args.num_code_groups - 1))
        self.small_to_mtp_projection: nn.Module = (
            nn.Linear(talker_hidden, args.hidden_size, bias=True) if args.hidden_size != talker_hidden
            else nn.Identity())
        self.cos: torch.Tensor | None = None
        self.sin: torch.Tensor | None = None
        self.max_batch = 0

    def set_rope(self, device: torch.device | str) -> None:
        self.cos, self.sin = rope_tables(self.args.head_dim, self.args.rope_theta, self.args.num_code_groups, device)

    def setup_cache(self, max_batch: int, device: torch.device | str, dtype: torch.dtype) -> None:
        """Allocate the per-frame KV buffer for up to `max_batch` rows (no-op if big enough)."""
        if max_batch <= self.max_batch:
            return
        a = self.args
        cache = torch.zeros(a.num_hidden_layers, 2, max_batch, a.num_key_value_heads, a.num_code_groups, a.head_dim,
                            device=device, dtype=dtype)
        for i, layer in enumerate(self.model.layers):
            layer.self_attn.kv_cache = cache[i]
        self.max_batch = max_batch

    def _forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x `[B, L, talker_hidden]` at positions `start..` -> normed hidden of the last position `[B, hidden]`."""
        assert self.cos is not None and self.sin is not None, "call set_rope first"
        x = self.small_to_mtp_projection(x)
        length = x.shape[1]
        cos = self.cos[start:start + length].to(x.dtype)
        sin = self.sin[start:start + length].to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, start)
        return self.model.norm(x[:, -1])

    def step_logits(self, x: torch.Tensor, step: int) -> torch.Tensor:
        """One depth step. step 0: x `[B, 2, talker_hidden]` = (talker hidden, codebook-0
        embedding) at positions 0, 1; step j >= 1: x `[B, 1, talker_hidden]` = the embedding of
        codebook j at position j + 1. Returns float32 logits `[B, vocab]` of codebook step + 1."""
        start = 0 if step == 0 else step + 1
        return self.lm_head[step](self._forward(x, start)).float()

    @torch.inference_mode()
    def predict_frame(self, hidden: torch.Tensor, first_embed: torch.Tensor, first_code: torch.Tensor,
                      sample: Sampler = greedy) -> tuple[torch.Tensor, torch.Tensor]:
        """Codebooks 1..15 for B rows at once (15 sequential steps; the cache restarts here).

        hidden: the talker's last hidden state per row `[B, talker_hidden]` (model dtype);
        first_embed: codebook 0's talker embedding `[B, talker_hidden]`; first_code: int64 `[B]`.
        `sample(logits, step)` picks each step's codes (default: greedy).
        Returns (codes int64 `[B, 16]`, codebook 0 first; the sum of the 16 codebook
        embeddings `[B, talker_hidden]`, the talker's codec input for the next step).
        """
        assert hidden.shape[0] <= self.max_batch, "setup_cache with a larger max_batch"
        codes = [first_code]
        total = first_embed
        x = torch.stack([hidden, first_embed], dim=1)
        for step in range(self.args.num_code_groups - 1):
            code = sample(self.step_logits(x, step), step)
            embed = self.model.codec_embedding[step](code)
            codes.append(code)
            total = total + embed
            x = embed[:, None]
        return torch.stack(codes, dim=1), total
