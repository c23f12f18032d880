"""GPU-only (skipped without CUDA): models/gemv.py's Triton matmuls equal cuBLAS, FP8 weights
equal their dequantized bf16, and a runner with them decodes the same greedy tokens."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 16, 33, 64, 100, 256, 300])
@pytest.mark.parametrize("n,k", [(5120, 3072), (3072, 8192), (1, 3072), (40, 200)])
def test_triton_linear_matches_cublas_in_bf16_and_fp8(rows: int, n: int, k: int) -> None:
    import torch.nn.functional as F

    from models.gemv import linear, quantize_fp8

    generator = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=generator)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=generator) / k ** 0.5
    ref = F.linear(x.float(), w.float())
    err = ((linear(x, w).float() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err  # bf16 output rounding
    q = quantize_fp8(w)
    dequantized = q.data.float() * q.scale[:, None]
    ref8 = F.linear(x.float(), dequantized)
    err8 = ((linear(x, q).float() - ref8).norm() / ref8.norm()).item()
    assert err8 < 1e-2, err8
    assert ((dequantized - w.float()).norm() / w.float().norm()).item() < 0.05  # e4m3: 3 mantissa bits


@pytest.mark.parametrize("rows", [2, 5, 16, 33, 64, 65, 256])
@pytest.mark.parametrize("n,k,tiles", [(5120, 3072, None), (3072, 8192, None), (100, 3072, (32, 128, 3, 4, 3)),
                                       (28672, 3072, (128, 128, 1, 4, 3))])
def test_split_k_linear_matches_cublas_and_repeats_bit_for_bit(rows: int, n: int, k: int, tiles: tuple | None) -> None:
    """split_k_linear (2-256 rows in row blocks of 64, K split over programs, the last of a column
    block adds the partials) equals float32 math in bf16 and on FP8 weights, gives the same bits call
    after call (graph replays) and leaves its counters at zero; ragged last column (n = 100) and row
    (65 rows) blocks too."""
    import torch.nn.functional as F

    from models.gemv import quantize_fp8, split_k_linear

    generator = torch.Generator(device="cuda").manual_seed(rows * 11 + n)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=generator)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=generator) / k ** 0.5
    counters = torch.zeros(4096, dtype=torch.int32, device="cuda")
    q = quantize_fp8(w)
    for weight, dense in ((w, w.float()), (q, q.data.float() * q.scale[:, None])):
        ref = F.linear(x.float(), dense)
        outs = [split_k_linear(x, weight, counters, tiles) for _ in range(3)]
        err = ((outs[0].float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, err
        assert all(torch.equal(outs[0], out) for out in outs[1:]) and not counters.any()


@pytest.mark.parametrize("rows", [1, 4, 16])
def test_every_fp8_code_is_decoded_exactly(rows: int) -> None:
    """Every finite float8_e4m3fn code (zeros and subnormals too) as weights: the kernels' products
    equal float32 math on the dequantized weights, one row, a few (CUDA cores) and 16 (tensor cores)."""
    import torch.nn.functional as F

    from models.gemv import Fp8Weight, linear

    codes = torch.arange(256, dtype=torch.int32)
    codes = torch.where((codes & 0x7F) == 0x7F, 0, codes).to(torch.uint8)  # 0x7F / 0xFF are NaN
    data = codes.view(torch.float8_e4m3fn).reshape(4, 64).repeat(6, 1).cuda()  # [24, 64]
    eye = torch.zeros(64, 64, device="cuda", dtype=torch.bfloat16)
    eye[torch.arange(64), torch.arange(64)] = 1.0
    x = torch.cat([eye, torch.randn(rows, 64, device="cuda", dtype=torch.bfloat16)])[:rows + 64]
    for scale in (1.0, 1e-3):
        q = Fp8Weight(data.contiguous(), torch.full((24,), scale, device="cuda"))
        ref = F.linear(x.float(), data.float() * scale)
        for start in range(0, len(x), rows):  # `rows` at a time: the kernel that size takes
            out = linear(x[start:start + rows], q).float()
            torch.testing.assert_close(out, ref[start:start + rows].bfloat16().float(), rtol=1e-2, atol=1e-6 * scale)


def test_runner_with_triton_matmuls_decodes_the_greedy_tokens_of_cublas() -> None:
    from bench.orpheus_decode import greedy_tokens, make_runner
    from models import orpheus

    model = orpheus.random_backbone(orpheus.FLAVORS["tiny"], "cuda", torch.bfloat16, 0)
    plain = make_runner(model, 8, 64, [1, 8], False, "cuda")
    expected = {b: greedy_tokens(plain, b, 64, True) for b in (1, 8)}
    del plain
    gemv = make_runner(model, 8, 64, [1, 8], False, "cuda", gemv=True)
    for batch, tokens in expected.items():
        assert (greedy_tokens(gemv, batch, 64, True) == tokens).float().mean().item() >= 0.75  # near-ties may flip
        assert (greedy_tokens(gemv, batch, 64, False) == greedy_tokens(gemv, batch, 64, True)).all()  # graph = eager
