"""The elementwise pieces of a Llama layer (rotary, RMSNorm, SiLU-gate), plain functions that
models/llama.py `LlamaLM.compile_layers` can hand to torch.compile; the Qwen3-TTS modules use
them too. Shapes as each docstring says; the arithmetic follows Hugging Face's Llama modules."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: `[T, heads, head_dim]`; cos/sin: `[T, 1, head_dim]` (half-split rotation, as HF)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise in float32, scale in the model dtype (as HF's LlamaRMSNorm)."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`[T, 2 * I]` (gate then up) -> `[T, I]`."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_mul_pairs(gate_up: torch.Tensor) -> torch.Tensor:
    """`[T, 2 * I]` (gate_0, up_0, gate_1, ...: `MLP.pair_rows`) -> `[T, I]`."""
    gate, up = gate_up.unflatten(-1, (-1, 2)).unbind(-1)
    return F.silu(gate) * up


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then norm: returns (x + delta, rms_norm(x + delta)); one kernel compiled."""
    x = x + delta
    return x, rms_norm(x, weight, eps)


def rotate_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int,
               num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """qkv `[T, (heads + 2 * kv_heads) * head_dim]` -> rotated q `[T, heads, D]` and
    kv `[T, 2, kv_heads, D]` (rotated k, v: one tensor, stored in the cache by one write);
    cos/sin `[T, 1, D]`."""
    num_tokens, dim = qkv.shape[0], cos.shape[-1]
    q, k, v = qkv.view(num_tokens, num_heads + 2 * num_kv_heads, dim).split(
        [num_heads, num_kv_heads, num_kv_heads], dim=1)
    return rotate(q, cos, sin), torch.stack([rotate(k, cos, sin), v], dim=1)
