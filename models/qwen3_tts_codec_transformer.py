"""The 12 Hz decoder's transformer (`decoder.pre_transformer.*`), streaming over frames.

Pre-norm layers with layer scale on both residual branches, plain multi-head (or grouped)
attention without q/k norms, rotary embedding at the stream's absolute frame positions
(theta 10000), SwiGLU MLP; `input_proj` / `output_proj` map the latent width to the layer
width and back. Attention is causal within a sliding window: frame t sees frames
`t - sliding_window + 1 .. t` (Hugging Face's sliding-window mask, which qwen-tts uses).

The stream's cache holds, per layer, the last `sliding_window - 1` rotated keys and values
(`[B, kv_heads, window - 1, head_dim]`, left-padded while a stream is young; padding is
masked by position) and `positions` `[B]`, frames seen so far: a chunk of n frames
attends to those plus itself, so chunks of any size give the same output as a whole pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.llama import MLP, RMSNorm
from models.llama_ops import rotate
from models.qwen3_tts_args import CodecArgs

Cache = dict[str, torch.Tensor]


class LayerScale(nn.Module):
    def __init__(self, dim: int, initial: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class CodecAttention(nn.Module):
    def __init__(self, args: CodecArgs) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = args.num_attention_heads, args.num_key_value_heads
        self.head_dim = args.head_dim
        self.window = args.sliding_window
        self.q_proj = nn.Linear(args.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, args.hidden_size, bias=False)
        self.key = ""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                cache: Cache) -> torch.Tensor:
        """x `[B, n, hidden]`; cos/sin `[B, 1, n, D]`; mask bool `[B, 1, n, window - 1 + n]`."""
        batch, length, _ = x.shape
        q = rotate(self.q_proj(x).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2), cos, sin)
        k = rotate(self.k_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        keys = torch.cat([cache[self.key + ".k"], k], dim=2)
        values = torch.cat([cache[self.key + ".v"], v], dim=2)
        cache[self.key + ".k"], cache[self.key + ".v"] = keys[:, :, length:], values[:, :, length:]
        group = self.num_heads // self.num_kv_heads
        out = F.scaled_dot_product_attention(q, keys.repeat_interleave(group, dim=1),
                                             values.repeat_interleave(group, dim=1), attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim))


class CodecLayer(nn.Module):
    def __init__(self, args: CodecArgs) -> None:
        super().__init__()
        self.self_attn = CodecAttention(args)
        self.mlp = MLP(args)  # type: ignore[arg-type]  # reads hidden_size, intermediate_size only
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(args.hidden_size, args.layer_scale_initial_scale)
        self.mlp_layer_scale = LayerScale(args.hidden_size, args.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                cache: Cache) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, cache))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    def __init__(self, args: CodecArgs) -> None:
        super().__init__()
        assert args.sliding_window >= 2, "the decoder transformer needs a sliding window"
        self.args = args
        self.layers = nn.ModuleList(CodecLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.input_proj = nn.Linear(args.latent_dim, args.hidden_size)
        self.output_proj = nn.Linear(args.hidden_size, args.latent_dim)

    def new_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> Cache:
        a, cache = self.args, {}
        for layer in self.layers:
            for part in (".k", ".v"):
                cache[layer.self_attn.key + part] = torch.zeros(batch, a.num_key_value_heads, a.sliding_window - 1,
                                                                a.head_dim, device=device, dtype=dtype)
        return cache

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        """x `[B, n, latent_dim]`, the next n frames of B streams -> `[B, n, latent_dim]`."""
        length, past = x.shape[1], self.args.sliding_window - 1
        start = cache["positions"]  # [B]
        positions = start[:, None] + torch.arange(length, device=x.device)  # [B, n]
        inv_freq = 1.0 / (self.args.rope_theta ** (
            torch.arange(0, self.args.head_dim, 2, device=x.device, dtype=torch.int64).float() / self.args.head_dim))
        freqs = positions.float()[..., None] * inv_freq  # float32, as Hugging Face's rotary embedding
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        # key j of [cache, new] sits at position start - past + j; visible if it exists and is
        # within the window up to the query (`q - window < k <= q`)
        key_pos = start[:, None] - past + torch.arange(past + length, device=x.device)  # [B, S]
        delta = positions[:, :, None] - key_pos[:, None, :]
        mask = ((key_pos[:, None, :] >= 0) & (delta >= 0) & (delta < self.args.sliding_window))[:, None]
        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, cos, sin, mask, cache)
        cache["positions"] = start + length
        return self.output_proj(self.norm(h))
