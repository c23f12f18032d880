"""GPU-only (skipped without CUDA): models/skinny.py `skinny_linear` (2-64-row decode matmuls on the tensor
cores with the norm, SiLU-gate and residual fused) computes what the separate steps do, and a runner with
`skinny_rows` steps 2-64 rows through `forward_rows` as the unfused runner does, graphs equal to eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

import torch.nn.functional as F  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("rows", [2, 5, 16, 33, 64])
def test_skinny_linear_fuses_the_norm_the_silu_gate_and_the_residual(rows: int) -> None:
    from models.skinny import skinny_linear

    generator = torch.Generator(device="cuda").manual_seed(rows)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=generator)

    hidden, inter, eps = 3072, 8192, 1e-5
    x = (randn(rows, hidden) * 3).bfloat16()
    w_qkv, w_o, w_gu, w_down = (randn(n, k).div(k ** 0.5).bfloat16() for n, k in
                                ((5120, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter)))
    h = randn(rows, inter).bfloat16()
    normed = F.rms_norm(x.float(), (hidden,), eps=eps)
    gate_up = F.linear(normed, w_gu.float())  # its rows are (gate, up) pairs (models/llama.py MLP.pair_rows)
    cases = [(skinny_linear(x, w_qkv, norm_eps=eps), F.linear(normed, w_qkv.float())),
             (skinny_linear(x, w_gu, norm_eps=eps, glu=True), F.silu(gate_up[:, 0::2]) * gate_up[:, 1::2]),
             (skinny_linear(h, w_down, residual=x), x.float() + F.linear(h.float(), w_down.float())),
             (skinny_linear(x, w_o), F.linear(x.float(), w_o.float())),
             (skinny_linear(x[:, :200], w_o[:100, :200]), F.linear(x[:, :200].float(), w_o[:100, :200].float()))]
    for out, ref in cases:  # the last: K not a multiple of the K block, N not of the column block
        assert out.shape == ref.shape and out.dtype == torch.bfloat16
        assert _rel(out, ref) < 1e-2  # bf16 roundings


def test_skinny_norm_is_right_at_every_row_count() -> None:
    """The norm's squares at 2-64 rows: taken elementwise with the K loop in 3-6 pipeline stages (the
    code before session 23), 33 and 63 rows (not 17, 48 or 64) came out wrong on an H100 with Triton 3.6."""
    from models import skinny

    generator = torch.Generator(device="cuda").manual_seed(3)
    hidden, eps = 3072, 1e-5
    weights = [torch.randn(n, hidden, device="cuda", generator=generator).div(hidden ** 0.5).bfloat16()
               for n in (5120, 16384)]
    x = (torch.randn(64, hidden, device="cuda", generator=generator) * 3).bfloat16()
    for rows in range(2, 65):
        normed = F.rms_norm(x[:rows].float(), (hidden,), eps=eps)
        for w in weights:
            assert _rel(skinny.skinny_linear(x[:rows], w, norm_eps=eps), F.linear(normed, w.float())) < 1e-2, rows


def test_skinny_linear_with_programmatic_dependent_launch_gives_the_same_bits_in_a_graph() -> None:
    """A chain of full-size 64-row layers, each reading what the one before wrote, with PDL: the same
    bits as without, eagerly and replayed from a CUDA graph."""
    from models.skinny import skinny_linear

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm90+")
    from tests.models.test_fused_rows_gpu import assert_pdl_chain_keeps_its_bits

    # 20 replays: with the norm's squares taken elementwise in 2 stages, the first replay differed (session 23)
    assert_pdl_chain_keeps_its_bits(skinny_linear, rows=64, seed=9, replays=20)


@pytest.mark.parametrize("pdl", [False, True])
def test_runner_with_skinny_rows_follows_the_unfused_model_and_graphs_equal_eager(pdl: bool) -> None:
    """A tiny Orpheus backbone with random norm weights: its 4- and 48-row steps (below and above
    SKINNY_PDL_MIN_ROWS) through forward_rows on skinny_linear, where SKINNY_MIN_ROWS lets them, give
    logits within bf16 rounding of the unfused runner's, greedy tokens from a graph are those of eager
    steps, and FP8 weights keep the plain path above one row."""
    import copy

    from bench.decode_matmuls import step_logits
    from bench.orpheus_decode import greedy_tokens, make_runner
    from models import orpheus
    from models import skinny as skinny_module

    if pdl and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm90+")
    model = orpheus.random_backbone(orpheus.FLAVORS["tiny"], "cuda", torch.bfloat16, 0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    plain = make_runner(copy.deepcopy(model), 48, 64, [1, 4, 48], False, "cuda", triton_attention=True, gemv=True)
    fp8_model = copy.deepcopy(model)
    skinny = make_runner(model, 48, 64, [1, 4, 48], False, "cuda", triton_attention=True, gemv=True,
                         fused_rows=True, fused_sampler=True, pdl=pdl, skinny_rows=True)
    assert (model.skinny_min_rows, model.skinny_pdl_min_rows, model.fused_max_rows) == \
        (skinny_module.SKINNY_MIN_ROWS, skinny_module.SKINNY_PDL_MIN_ROWS, 64)
    calls: list[int] = []
    layer = model.model.layers[0]
    layer.forward_rows = lambda x, *a, fn=layer.forward_rows: (calls.append(x.shape[0]), fn(x, *a))[1]  # type: ignore
    tokens = orpheus.AUDIO_TOKEN_BASE + torch.arange(0, 28672, 590, device="cuda")[:48]
    for rows in (4, 48):
        ref, out = (step_logits(runner, tokens[:rows], 64) for runner in (plain, skinny))
        assert F.cosine_similarity(out, ref).min().item() > 0.999
    assert calls == [rows for rows in (4, 48) if rows >= skinny_module.SKINNY_MIN_ROWS]
    for batch in (1, 4, 48):
        assert torch.equal(greedy_tokens(skinny, batch, 64, True), greedy_tokens(skinny, batch, 64, False))
    make_runner(fp8_model, 4, 64, [1, 4], False, "cuda", triton_attention=True, fp8=True, split_k=True,
                fused_rows=True, skinny_rows=True)
    assert fp8_model.fused_max_rows == 1
