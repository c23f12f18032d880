"""Pieces the talker and the code predictor share: Qwen3 q/k/v with per-head norms, rope."""

from __future__ import annotations

from typing import Any

import torch

from models.llama_ops import rotate


def rope_tables(head_dim: int, theta: float, num_positions: int,
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: float32 `[num_positions, head_dim]` (half-split layout, as Hugging Face's
    default rotary embedding, computed in float32 like it)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    freqs = torch.outer(torch.arange(num_positions, device=device).float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def project_qkv(attn: Any, x: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Qwen3 projections: x `[T, hidden]`, cos/sin `[T, 1, D]` -> q `[T, heads, D]`, k and v
    `[T, kv_heads, D]`; q and k RMS-normed per head, then rotated."""
    num_tokens = x.shape[0]
    q = attn.q_norm(attn.q_proj(x).view(num_tokens, attn.num_heads, attn.head_dim))
    k = attn.k_norm(attn.k_proj(x).view(num_tokens, attn.num_kv_heads, attn.head_dim))
    v = attn.v_proj(x).view(num_tokens, attn.num_kv_heads, attn.head_dim)
    return rotate(q, cos, sin), rotate(k, cos, sin), v
