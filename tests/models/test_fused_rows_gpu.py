"""GPU-only (skipped without CUDA): the one-row decode path (models/gemv.py `rows_linear`, models/llama.py
`forward_rows` after `fold_norms`) computes what the separate kernels do, and models/sample_step.py samples
what models/sampling.py does and updates the slots as the runner's plain path does."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

import torch.nn.functional as F  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("fp8", [False, True])
def test_rows_linear_fuses_the_norm_the_silu_gate_and_the_residual(rows: int, fp8: bool) -> None:
    from models.gemv import quantize_fp8, rows_linear

    generator = torch.Generator(device="cuda").manual_seed(rows + 10 * fp8)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=generator)

    hidden, inter, eps = 3072, 8192, 1e-5
    x = (randn(rows, hidden) * 3).bfloat16()
    w_qkv, w_gu, w_down = (randn(n, k).div(k ** 0.5).bfloat16() for n, k in
                           ((5120, hidden), (2 * inter, hidden), (hidden, inter)))
    h = randn(rows, inter).bfloat16()
    weights = [quantize_fp8(w) if fp8 else w for w in (w_qkv, w_gu, w_down)]
    dense = [w.data.float() * w.scale[:, None] if fp8 else w.float() for w in weights]  # type: ignore[union-attr]
    normed = F.rms_norm(x.float(), (hidden,), eps=eps)
    gate_up = F.linear(normed, dense[1])  # its rows are (gate, up) pairs (models/llama.py MLP.pair_rows)
    cases = [(rows_linear(x, weights[0], norm_eps=eps), F.linear(normed, dense[0])),
             (rows_linear(x, weights[1], norm_eps=eps, glu=True), F.silu(gate_up[:, 0::2]) * gate_up[:, 1::2]),
             (rows_linear(h, weights[2], residual=x), x.float() + F.linear(h.float(), dense[2])),
             (rows_linear(h, weights[2]), F.linear(h.float(), dense[2]))]
    for out, ref in cases:
        assert out.shape == ref.shape and out.dtype == torch.bfloat16
        assert _rel(out, ref) < 1e-2  # bf16 roundings


def _state(batch: int, head: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    def ints(high: int) -> torch.Tensor:
        return torch.randint(0, high, (batch + 1,), device="cuda", generator=generator)

    return {"tokens": ints(1000), "positions": ints(1000), "steps": ints(700), "max_tokens": ints(1400) + 1,
            "forced": ints(4) == 0, "stopped": ints(6) == 0, "host_active": ints(8) != 0,
            "temperature": torch.full((batch + 1,), 0.6, device="cuda"), "top_p": torch.full((batch + 1,), 0.8,
                                                                                           device="cuda"),
            "penalty": torch.full((batch + 1,), 1.1, device="cuda"), "seeds": ints(1 << 30),
            "seen": torch.rand(batch + 1, head, device="cuda", generator=generator) < 0.05,
            "readback": torch.zeros(3, batch + 1, dtype=torch.int64, device="cuda")}


@pytest.mark.parametrize("temperature,top_p,scale", [(0.6, 0.8, 3.0), (0.6, 0.8, 0.3), (1.0, 1.0, 1.0),
                                                     (0.0, 0.8, 1.0)])
def test_sample_step_samples_as_the_plain_sampler_and_updates_the_slots(temperature: float, top_p: float,
                                                                        scale: float) -> None:
    """256 rows of float32 logits (no ties) over Orpheus' head (7 x 4096 codes + a stop token): the
    kernel picks what pick_audio_tokens picks (the same hash, candidates, nucleus and race) but for
    rounding near a cut, and each slot changes as the runner's plain update says."""
    from models.sample_step import sample_step
    from models.sampling import pick_audio_tokens

    batch, codes, frame = 256, 4096, 7
    generator = torch.Generator(device="cuda").manual_seed(int(scale * 10 + temperature * 100))
    audio = torch.randn(batch, frame * codes, device="cuda", generator=generator) * scale
    stop = torch.randn(batch, 1, device="cuda", generator=generator) * scale + 2 * scale  # often picked at 0
    head_ids = torch.arange(100, 100 + frame * codes + 1, device="cuda")
    state = _state(batch, frame * codes + 1, generator)
    state["temperature"].fill_(temperature)
    state["top_p"].fill_(top_p)
    before = {k: v.clone() for k, v in state.items()}
    rows = slice(0, batch)
    expected = pick_audio_tokens(torch.cat([audio, stop], 1), before["temperature"][rows], before["top_p"][rows],
                                 before["penalty"][rows], before["seen"][rows], before["seeds"][rows],
                                 before["steps"][rows], before["forced"][rows], codes, frame)
    sample_step(audio, stop, head_ids, codebook_size=codes, tokens_per_frame=frame, **state)
    picked = state["readback"][0, rows] - 100
    agreement = (picked == expected).float().mean().item()
    assert agreement == 1.0 if temperature == 0 else agreement >= 0.98, agreement
    position = before["steps"][rows] % frame  # a pick is one of its frame position's codes, or the stop
    is_stop = picked == frame * codes
    assert ((picked // codes == position) | (is_stop & (position == 0) & ~before["forced"][rows])).all()
    active = before["host_active"][rows] & ~before["stopped"][rows]
    assert torch.equal(state["readback"][1, rows], active.long())
    assert torch.equal(state["tokens"][rows], torch.where(active, picked + 100, before["tokens"][rows]))
    assert torch.equal(state["steps"][rows], before["steps"][rows] + active)
    assert torch.equal(state["positions"][rows], before["positions"][rows] + active)
    ends = (before["steps"][rows] + 1 >= before["max_tokens"][rows]) | is_stop
    assert torch.equal(state["stopped"][rows], before["stopped"][rows] | (active & ends))
    assert torch.equal(state["readback"][2, rows], state["stopped"][rows].long())
    seen = before["seen"].clone()
    seen[torch.arange(batch, device="cuda")[active], picked[active]] = True
    assert torch.equal(state["seen"], seen)
    for name in ("tokens", "positions", "steps", "stopped", "seen"):  # the spare row past B is left alone
        assert torch.equal(state[name][batch], before[name][batch])


def test_runner_one_row_steps_follow_the_unfused_model_and_graphs_equal_eager() -> None:
    """A tiny Orpheus backbone with random norm weights: its one-row steps through forward_rows (folded
    norms, paired gate/up rows, fused kernels, the fused sampler) give logits within bf16 rounding of the unfused runner's,
    and the same greedy tokens from a graph as eagerly."""
    import copy

    from bench.decode_matmuls import step_logits
    from bench.orpheus_decode import greedy_tokens, make_runner
    from models import orpheus

    model = orpheus.random_backbone(orpheus.FLAVORS["tiny"], "cuda", torch.bfloat16, 0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    plain = make_runner(copy.deepcopy(model), 4, 64, [1, 4], False, "cuda", triton_attention=True, gemv=True)
    fused = make_runner(model, 4, 64, [1, 4], False, "cuda", triton_attention=True, gemv=True, fused_rows=True,
                        fused_sampler=True)
    assert model.fused_rows and model.norms_folded and model.model.layers[0].mlp.paired
    tokens = orpheus.AUDIO_TOKEN_BASE + torch.arange(0, 28672, 1000, device="cuda")
    for token in tokens:
        ref, out = (step_logits(runner, token[None], 64) for runner in (plain, fused))
        assert F.cosine_similarity(out, ref).item() > 0.999
    for batch in (1, 4):
        assert torch.equal(greedy_tokens(fused, batch, 64, True), greedy_tokens(fused, batch, 64, False))


needs_sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                                reason="programmatic dependent launch needs sm90+")


@needs_sm90
def test_rows_linear_with_programmatic_dependent_launch_gives_the_same_bits_in_a_graph() -> None:
    """A chain of full-size one-row layers, each reading what the one before wrote (and the residual
    from two before), with PDL: the same bits as without, eagerly and replayed from a CUDA graph
    (a wait in the wrong place would read a half-written x)."""
    from models.gemv import rows_linear

    assert_pdl_chain_keeps_its_bits(rows_linear, rows=1, seed=7, replays=3)


def assert_pdl_chain_keeps_its_bits(matmul: Any, rows: int, seed: int, replays: int) -> None:
    """Four full-size layers of `matmul` (models/gemv.py `rows_linear`'s contract) on `rows` rows, each
    reading what the one before wrote and the residual from two before: with PDL the same bits as
    without, eagerly and in each of `replays` replays of a CUDA graph (also tests/models/test_skinny_gpu.py)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    hidden, inter = 3072, 8192
    x = torch.randn(rows, hidden, device="cuda", generator=generator).bfloat16()
    w_qkv, w_o, w_gu, w_down = (torch.randn(n, k, device="cuda", generator=generator).div(k ** 0.5).bfloat16()
                                for n, k in ((hidden, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter)))

    def layers(x: torch.Tensor, pdl: bool) -> torch.Tensor:
        for _ in range(4):
            q = matmul(x, w_qkv, norm_eps=1e-5, pdl=pdl)
            x = matmul(q, w_o, residual=x, pdl=pdl)
            h = matmul(x, w_gu, norm_eps=1e-5, glu=True, pdl=pdl)
            x = matmul(h, w_down, residual=x, pdl=pdl)
        return x

    ref = layers(x, False)
    assert torch.equal(layers(x, True), ref)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layers(x, True)
    for _ in range(replays):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, ref)


@needs_sm90
def test_runner_with_programmatic_dependent_launch_steps_as_without() -> None:
    """The runner's `pdl` (one-row layers and the fused attention launched with PDL): the same logits
    as without, and graph tokens equal eager tokens; the attention is PDL-launched in the one-row path
    only (beside cuBLAS's matmuls, at 4 rows, it is not)."""
    import copy

    from bench.decode_matmuls import step_logits
    from bench.orpheus_decode import greedy_tokens, make_runner
    from models import orpheus

    model = orpheus.random_backbone(orpheus.FLAVORS["tiny"], "cuda", torch.bfloat16, 0)
    options = dict(triton_attention=True, gemv=True, fused_rows=True, fused_sampler=True)
    plain = make_runner(copy.deepcopy(model), 4, 64, [1, 4], False, "cuda", **options)  # type: ignore[arg-type]
    pdl = make_runner(model, 4, 64, [1, 4], False, "cuda", pdl=True, **options)  # type: ignore[arg-type]
    assert model.pdl
    tokens = orpheus.AUDIO_TOKEN_BASE + torch.arange(0, 28672, 4000, device="cuda")
    for token in tokens:
        assert torch.equal(step_logits(pdl, token[None], 64), step_logits(plain, token[None], 64))
    assert torch.equal(greedy_tokens(pdl, 1, 64, True), greedy_tokens(pdl, 1, 64, False))
    assert torch.equal(greedy_tokens(pdl, 1, 64, True), greedy_tokens(plain, 1, 64, True))
    seen: list[tuple[int, bool]] = []
    for layer in model.model.layers:
        def record(*args, fn=layer.self_attn.decode_qkv_fn, **kwargs):  # type: ignore[no-untyped-def]
            seen.append((args[0].shape[0], kwargs.get("pdl", False)))
            return fn(*args, **kwargs)
        layer.self_attn.decode_qkv_fn = record
    greedy_tokens(pdl, 1, 64, False)
    greedy_tokens(pdl, 4, 64, False)
    assert set(seen) == {(1, True), (4, False)}
