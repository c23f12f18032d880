"""GPU-only (skipped without CUDA): the Triton decode attention equals SDPA with the mask."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("batch,attn_len", [(1, 576), (5, 256), (64, 1088), (3, 100)])
def test_triton_decode_attention_matches_sdpa(batch: int, attn_len: int) -> None:
    import torch.nn.functional as F

    from models.decode_attention import decode_attention

    generator = torch.Generator(device="cuda").manual_seed(batch)
    slots, heads, group, dim, positions = batch + 2, 8, 3, 128, attn_len + 40
    cache = torch.randn(2, 2, slots, heads, positions, dim, device="cuda", dtype=torch.bfloat16, generator=generator)
    kv = cache[:, 1]  # a per-layer view, as the runner hands out
    q = torch.randn(batch, heads, group, dim, device="cuda", dtype=torch.bfloat16, generator=generator)
    pos = torch.randint(0, attn_len, (batch,), device="cuda", generator=generator)
    pos[0] = attn_len - 1
    pos[-1] = positions - 1  # a padding row: its position is past attn_len, clipped
    out = decode_attention(q, kv, pos, attn_len)
    visible = torch.arange(attn_len, device="cuda")[None, :] <= pos[:, None]
    mask = torch.zeros(visible.shape, device="cuda", dtype=q.dtype).masked_fill_(~visible, float("-inf"))
    ref = F.scaled_dot_product_attention(q.float(), kv[0, :batch, :, :attn_len].float(),
                                         kv[1, :batch, :, :attn_len].float(), attn_mask=mask[:, None, None, :].float())
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert out.shape == q.shape and torch.isfinite(out).all() and err < 1e-2, err
