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


@pytest.mark.parametrize("batch,attn_len,programs", [(1, 576, 264), (3, 100, 264), (64, 1088, 264), (5, 256, 8)])
def test_fused_rotary_cache_write_and_attention_match_the_separate_kernels(batch: int, attn_len: int,
                                                                           programs: int) -> None:
    """decode_attention_qkv = rotate_qkv (float32, one rounding) + the cache write + decode_attention,
    with several splits merged by the last one to finish (1, 3, 64 rows) and with one split (5
    rows, 8 programs); calls in a row give the same output and leave the counters zero."""
    from models.decode_attention import decode_attention, decode_attention_qkv
    from models.llama_ops import rotate_qkv

    generator = torch.Generator(device="cuda").manual_seed(batch)
    heads, kv_heads, dim = 24, 8, 128
    cache = torch.randn(2, batch + 2, kv_heads, attn_len + 40, dim, device="cuda", dtype=torch.bfloat16,
                        generator=generator)
    qkv = torch.randn(batch, (heads + 2 * kv_heads) * dim, device="cuda", dtype=torch.bfloat16, generator=generator)
    pos = torch.randint(0, attn_len, (batch,), device="cuda", generator=generator)
    pos[0] = attn_len - 1
    pos[-1] = attn_len + 39 if batch > 1 else pos[-1]  # a padding row writes the spare position
    angle = torch.rand(batch, dim, device="cuda", generator=generator) * 6
    cos, sin = angle.cos().bfloat16(), angle.sin().bfloat16()
    q, kv = rotate_qkv(qkv.float(), cos.float()[:, None], sin.float()[:, None], heads, kv_heads)
    expected_cache = cache.clone()
    expected_cache[:, torch.arange(batch, device="cuda"), :, pos] = kv.bfloat16()
    expected = decode_attention(q.bfloat16().view(batch, kv_heads, heads // kv_heads, dim), expected_cache, pos,
                                attn_len, programs).view(batch, -1)
    counters = torch.zeros(batch * kv_heads, dtype=torch.int32, device="cuda")
    outs = []
    for _ in range(3):
        written = cache.clone()
        outs.append(decode_attention_qkv(qkv, cos, sin, written, pos, attn_len, counters, programs))
    torch.testing.assert_close(written, expected_cache, rtol=1e-2, atol=1e-2)  # k: a bf16 rounding apart at most
    assert (written != expected_cache).float().mean().item() < 1e-3
    real = slice(0, batch - 1) if batch > 1 else slice(0, 1)  # the padding row's output is not used
    err = ((outs[0][real].float() - expected[real].float()).norm() / expected[real].float().norm()).item()
    assert err < 1e-2, err
    assert all(torch.equal(outs[0], out) for out in outs[1:]) and not counters.any()


@pytest.mark.parametrize("batch,attn_len,programs", [(1, 576, 264), (3, 100, 264), (64, 1088, 264), (5, 256, 8)])
def test_fused_attention_under_pdl_gives_the_same_bits(batch: int, attn_len: int, programs: int) -> None:
    """With `pdl`, where a split is one block of keys (1 and 3 rows here), each program reads it
    before waiting for the kernel before: output and cache are the same bits as without, the new key
    inside that block included; and where it does not read early (64 rows: 9 blocks a split; 5 rows
    on 8 programs: one split)."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm90+")
    from models.decode_attention import decode_attention_qkv

    generator = torch.Generator(device="cuda").manual_seed(100 + batch)
    heads, kv_heads, dim = 24, 8, 128
    cache = torch.randn(2, batch + 2, kv_heads, attn_len + 40, dim, device="cuda", dtype=torch.bfloat16,
                        generator=generator)
    qkv = torch.randn(batch, (heads + 2 * kv_heads) * dim, device="cuda", dtype=torch.bfloat16, generator=generator)
    pos = torch.randint(0, attn_len, (batch,), device="cuda", generator=generator)
    pos[0] = 5  # the new key in the first block of the first split
    pos[-1] = attn_len + 39 if batch > 1 else pos[-1]
    angle = torch.rand(batch, dim, device="cuda", generator=generator) * 6
    cos, sin = angle.cos().bfloat16(), angle.sin().bfloat16()
    counters = torch.zeros(batch * kv_heads, dtype=torch.int32, device="cuda")
    caches = [cache.clone(), cache.clone()]
    outs = [decode_attention_qkv(qkv, cos, sin, c, pos, attn_len, counters, programs, pdl=pdl)
            for c, pdl in zip(caches, (False, True))]
    assert torch.equal(outs[0], outs[1]) and torch.equal(caches[0], caches[1]) and not counters.any()
