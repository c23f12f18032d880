"""GPU-only (skipped without CUDA): models/fp8_dot.py `fp8_dot_linear` (FP8 weights times x quantized to FP8 a row,
on the tensor cores) computes its torch `reference`, with the norm, SiLU-gate and residual fused as models/gemv.py
`rows_linear` fuses them, in both orientations and with K split; the same bits on every call; and a runner whose
one-row FP8 steps take it (`fp8_dot.ONE_ROW`) gives graph tokens equal to eager ones."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

import torch.nn.functional as F  # noqa: E402

TILES = [(True, 64, 256, 1, 4, 4), (True, 64, 256, 2, 4, 4), (True, 64, 128, 4, 4, 6), (True, 128, 256, 1, 8, 4),
         (False, 32, 256, 1, 4, 4), (False, 64, 256, 2, 4, 4)]


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("rows,tiles", list(itertools.product([1, 3, 16, 33, 64], TILES)))
def test_fp8_dot_linear_is_its_reference_with_the_fused_neighbours(rows: int, tiles: tuple) -> None:
    from models import fp8_dot, gemv

    generator = torch.Generator(device="cuda").manual_seed(rows)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=generator)

    hidden, inter, eps = 3072, 8192, 1e-5
    counters = torch.zeros(4096, dtype=torch.int32, device="cuda")
    x = (randn(rows, hidden) * 3).bfloat16()
    x[:, 7] = 40.0  # an outlier: the row's scale follows its largest |x|
    w_qkv, w_o, w_gu, w_down = (gemv.quantize_fp8(randn(n, k).div(k ** 0.5)) for n, k in
                                ((5120, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter)))
    h = randn(rows, inter).bfloat16()
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    gate_up = (fp8_dot.reference(x, w_gu) * rstd).bfloat16().float()  # (gate, up) pairs, each rounded
    down = fp8_dot.reference(h, w_down).bfloat16().float()

    def run(*args, **kwargs):
        return fp8_dot.fp8_dot_linear(*args, counters, tiles=tiles, **kwargs)

    cases = [(run(x, w_qkv, norm_eps=eps), fp8_dot.reference(x, w_qkv) * rstd),
             (run(x, w_gu, norm_eps=eps, glu=True), F.silu(gate_up[:, 0::2]) * gate_up[:, 1::2]),
             (run(h, w_down, residual=x), x.float() + down),
             (run(x, w_o), fp8_dot.reference(x, w_o))]
    for out, ref in cases:
        assert out.shape == ref.shape and out.dtype == torch.bfloat16
        assert _rel(out, ref) < 1.5e-2  # bf16 roundings (of the output, and of gate and up before the SiLU-gate)
    assert not counters.any()  # left zero for the next call
    again = run(x, w_gu, norm_eps=eps, glu=True)
    assert torch.equal(again, cases[1][0])  # split K: the partials added in one order every call


def test_w8a8_stays_near_the_bf16_product() -> None:
    """x's rounding to FP8 adds to the weights': both stay near the bf16 product (relative error ~0.05 on random
    data, where W8A16 is ~0.03); a kernel that dropped x's scale or a row's outlier would be far off."""
    from models import fp8_dot, gemv

    generator = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(3072, 3072, device="cuda", generator=generator) / 3072 ** 0.5
    x = torch.randn(1, 3072, device="cuda", generator=generator).bfloat16()
    x[0, 5] = 50.0
    out = fp8_dot.fp8_dot_linear(x, gemv.quantize_fp8(w), tiles=(True, 64, 256, 1, 4, 4))
    assert _rel(out, x.float() @ w.T) < 0.1


def test_one_row_fp8_steps_through_fp8_dot_follow_w8a16_and_graphs_equal_eager(monkeypatch) -> None:
    import copy

    from bench.decode_matmuls import step_logits
    from bench.orpheus_decode import greedy_tokens, make_runner, random_model
    from models import fp8_dot, orpheus

    model = random_model("tiny", "cuda", torch.bfloat16, 0)
    options = dict(gemv=True, fp8=True, split_k=True, fused_rows=True, fused_sampler=True, pdl=True)
    tokens = orpheus.AUDIO_TOKEN_BASE + torch.arange(0, 28672, 1000, device="cuda")
    w8a16 = make_runner(copy.deepcopy(model), 4, 64, [1, 4], False, "cuda", True, True, **options)
    refs = [step_logits(w8a16, token[None], 64) for token in tokens]  # (eager steps read ONE_ROW: before it is set)
    w8a16.close()
    monkeypatch.setattr(fp8_dot, "ONE_ROW", True)
    w8a8 = make_runner(model, 4, 64, [1, 4], False, "cuda", True, True, **options)
    try:
        for token, ref in zip(tokens, refs):
            assert F.cosine_similarity(step_logits(w8a8, token[None], 64), ref).item() > 0.98
        for batch in (1, 4):
            assert torch.equal(greedy_tokens(w8a8, batch, 64, True), greedy_tokens(w8a8, batch, 64, False))
    finally:
        w8a8.close()
