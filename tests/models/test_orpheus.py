from __future__ import annotations

import dataclasses

import json
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from models import InvalidModel, checkpoint, orpheus  # noqa: E402
from engine.chunk_plan import ChunkPlan  # noqa: E402
from models.llama import LlamaLM  # noqa: E402
from models.llama_args import rope_tables  # noqa: E402
from models.snac import CONTEXT_FRAMES, SAMPLES_PER_FRAME, SnacCodec  # noqa: E402


def test_special_token_ids_follow_the_orpheus_format(orpheus_tiny: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(orpheus_tiny / "backbone" / "tokenizer.json"))
    assert tokenizer.token_to_id("<custom_token_10>") == orpheus.AUDIO_TOKEN_BASE == 128266
    assert tokenizer.token_to_id("<|eot_id|>") == orpheus.END_OF_TEXT == 128009
    assert tokenizer.token_to_id("<custom_token_2>") == orpheus.END_OF_SPEECH == 128258
    assert tokenizer.get_vocab_size() == orpheus.VOCAB_SIZE == 156940
    text = tokenizer.encode("tara: Hi", add_special_tokens=False).ids
    assert orpheus.prompt_ids(text) == [128259, 128000, *text, 128009, 128260, 128261, 128257]
    assert tokenizer.decode(text) == "tara: Hi"


def test_frame_tokens_map_to_snac_codes_by_hand() -> None:
    # codes per frame position k: 5, 6, 7, 8, 9, 10, 11 -> ids 128266 + 4096 k + code
    tokens = [128266 + 5, 128266 + 4096 + 6, 128266 + 8192 + 7, 128266 + 12288 + 8,
              128266 + 16384 + 9, 128266 + 20480 + 10, 128266 + 24576 + 11]
    assert tokens == [orpheus.audio_token(k, 5 + k) for k in range(7)]
    # canonical SNAC row: c0=[k0], c1=[k1, k4], c2=[k2, k3, k5, k6]
    assert orpheus.frame_codes(tokens) == [[5, 6, 9, 7, 8, 10, 11]]
    assert orpheus.frame_codes([orpheus.audio_token(k, 4095) for k in range(7)] + tokens) == \
        [[4095] * 7, [5, 6, 9, 7, 8, 10, 11]]  # frames at once, each its own row


def test_token_in_the_wrong_slot_is_rejected_not_wrapped() -> None:
    tokens = [orpheus.audio_token(k, 0) for k in range(7)]
    tokens[3] = orpheus.audio_token(2, 100)  # a position-2 code in position 3
    with pytest.raises(ValueError, match="position 3"):
        orpheus.frame_codes(tokens)
    with pytest.raises(ValueError, match="position 3"):  # in a later frame of several
        orpheus.frame_codes([orpheus.audio_token(k, 0) for k in range(7)] + tokens)
    tokens[3] = orpheus.END_OF_SPEECH
    with pytest.raises(ValueError):
        orpheus.frame_codes(tokens)


def test_backbone_round_trips_through_safetensors(orpheus_tiny: Path) -> None:
    from safetensors.torch import load_file

    model = orpheus.load_backbone(orpheus_tiny / "backbone", "cpu", torch.float32)
    saved = load_file(str(orpheus_tiny / "backbone" / "model.safetensors"))
    state = model.state_dict()
    assert set(state) == set(saved) | {"lm_head.weight"}
    for name, tensor in saved.items():
        assert torch.equal(state[name], tensor), name
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    config = json.loads((orpheus_tiny / "backbone" / "config.json").read_text())
    assert orpheus.Args.from_hf(config) == orpheus.FLAVORS["tiny"]
    model.fuse_projections()  # one matmul for q/k/v and gate/up, same names and values
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in saved.items())
    assert model.model.layers[0].self_attn.q_proj.weight.data_ptr() == \
        model.model.layers[0].self_attn.qkv_weight.data_ptr()


def test_fold_norms_and_pair_rows_keep_the_function() -> None:
    """The one-row GPU path's premises (models/gemv.py rows_linear): LlamaLM.fold_norms scales q/k/v and
    gate/up columns by the norm before them and sets those norms' weights to 1, the final norm untouched;
    MLP.pair_rows puts gate/up rows in (gate_j, up_j) pairs, gate_proj/up_proj still their rows. A prefill
    and a decode step give the same hidden states (float32) before and after; second calls change nothing."""
    from models.context import Context, additive, reset_context, set_context

    args = orpheus.FLAVORS["tiny"]
    model = orpheus.random_backbone(args, "cpu", torch.float32, 0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(len(name)))
    model.set_rope(32, "cpu")
    model.fuse_projections()
    final = model.model.norm.weight.clone()

    def hidden() -> torch.Tensor:
        for layer in model.model.layers:
            layer.self_attn.kv_cache = torch.zeros(2, 1, args.num_key_value_heads, 33, args.head_dim)
        outs = []
        for positions in (torch.arange(5), torch.tensor([5])):  # a 5-token prefill, then one decode step
            keys = positions if len(positions) > 1 else torch.arange(33)  # a prefill attends to its own tokens
            mask = keys[None, :] <= positions[:, None]
            set_context(Context(len(positions) > 1, torch.zeros(len(positions), dtype=torch.int64), positions,
                                additive(mask[None, None], torch.float32), 33))
            try:
                outs.append(model(torch.tensor([7, 9, 11, 13, 15])[:len(positions)], positions))
            finally:
                reset_context()
        return torch.cat(outs)

    before = hidden()
    gate = model.model.layers[0].post_attention_layernorm.weight.clone()
    gate_up = model.model.layers[0].mlp.gate_up_weight.clone()
    for _ in range(2):
        model.fold_norms()
        for layer in model.model.layers:
            layer.mlp.pair_rows()
    layer = model.model.layers[0]
    assert torch.equal(layer.input_layernorm.weight, torch.ones(args.hidden_size))
    folded = gate_up * gate[None, :]
    assert torch.allclose(layer.mlp.gate_up_weight[0::2], folded[:args.intermediate_size])
    assert torch.allclose(layer.mlp.gate_up_weight[1::2], folded[args.intermediate_size:])
    assert torch.equal(layer.mlp.gate_proj.weight, layer.mlp.gate_up_weight[0::2])
    assert torch.equal(layer.mlp.up_proj.weight, layer.mlp.gate_up_weight[1::2])
    assert torch.equal(model.model.norm.weight, final)
    torch.testing.assert_close(hidden(), before, rtol=1e-5, atol=1e-5)


def test_sharded_checkpoint_loads_the_same(orpheus_tiny: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "SHARD_BYTES", 8 << 20)
    checkpoint.write_random("orpheus", "tiny", tmp_path, seed=0)
    assert (tmp_path / "backbone" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "backbone").glob("model-*-of-*.safetensors"))) > 1
    # readable as any file the process writes (safetensors alone makes them 0o600)
    umask = os.umask(0o022)
    os.umask(umask)
    for file in (tmp_path / "backbone").glob("model*.safetensors"):
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask, file
    sharded = orpheus.load_backbone(tmp_path / "backbone", "cpu", torch.float32).state_dict()
    single = orpheus.load_backbone(orpheus_tiny / "backbone", "cpu", torch.float32).state_dict()
    assert all(torch.equal(sharded[k], single[k]) for k in single)


def test_validate_reports_voices_and_rejects_broken_folders(orpheus_tiny: Path, tmp_path: Path) -> None:
    facts = orpheus.validate(orpheus_tiny)
    assert facts["voices"] == ["tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"]
    assert facts["sample_rate"] == 24000
    split = orpheus.validate(None, {"backbone_path": orpheus_tiny / "backbone", "codec_path": orpheus_tiny / "codec"})
    assert split["size_bytes"] == facts["size_bytes"]
    with pytest.raises(InvalidModel, match="config.json"):
        orpheus.validate(tmp_path)


def _cut(file: Path, num_bytes: int = 100) -> None:
    file.write_bytes(file.read_bytes()[:-num_bytes])


def test_validate_reads_every_weight_file_to_its_end(orpheus_tiny: Path, tmp_path: Path) -> None:
    """A truncated file was taken at install and failed only at the first load (503, retried)."""
    import shutil

    for part, needle in (("backbone/model.safetensors", "is not a complete safetensors file"),
                         ("codec/pytorch_model.bin", "is not a complete PyTorch checkpoint")):
        folder = tmp_path / part.replace("/", "-")
        shutil.copytree(orpheus_tiny, folder)
        _cut(folder / part)
        with pytest.raises(InvalidModel, match=needle) as refused:
            orpheus.validate(folder)
        assert str(folder / part) in refused.value.message and "copy or download it again" in refused.value.message
    (folder / "codec" / "pytorch_model.bin").write_bytes(b"<html>Not found</html>")  # an error page saved
    with pytest.raises(InvalidModel, match="is not a PyTorch checkpoint"):
        orpheus.validate(folder)
    index = tmp_path / "sharded" / "model.safetensors.index.json"
    index.parent.mkdir()
    index.write_text("{}")
    with pytest.raises(InvalidModel, match="is not a safetensors index"):
        orpheus._weight_files(index.parent)
    with pytest.raises(InvalidModel, match="nowhere does not exist"):
        orpheus.validate(tmp_path / "nowhere")


def test_a_bad_dtype_is_refused_naming_the_option_and_fp8_needs_cuda(orpheus_tiny: Path) -> None:
    with pytest.raises(InvalidModel, match="options.dtype must be one of") as bad:
        orpheus.validate(orpheus_tiny, {"dtype": "int4"})
    assert bad.value.field == "options.dtype"
    assert orpheus.validate(orpheus_tiny, {"dtype": "fp8"})["voices"]  # a valid name: checked again at load
    with pytest.raises(InvalidModel, match="needs a CUDA device") as cpu:
        orpheus.load("tiny", orpheus_tiny, {"dtype": "fp8"}, "cpu")
    assert cpu.value.field == "options.dtype"


def test_full_flavor_has_the_llama_3_2_3b_shape() -> None:
    args = orpheus.FLAVORS["full"]
    assert (args.num_hidden_layers, args.hidden_size, args.num_attention_heads, args.num_key_value_heads,
            args.intermediate_size, args.head_dim) == (28, 3072, 24, 8, 8192, 128)
    with torch.device("meta"):
        model = LlamaLM(args)
    assert 3.2e9 < sum(p.numel() for p in model.parameters()) < 3.4e9


def test_llama3_rope_scaling_leaves_high_frequencies_alone() -> None:
    args = orpheus.FLAVORS["full"]
    cos, sin = rope_tables(args, 3, "cpu")
    assert torch.allclose(cos[1, 0], torch.cos(torch.tensor(1.0)))  # fastest frequency, unscaled
    plain = 1.0 / args.rope_theta ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    assert torch.allclose(torch.atan2(sin[1, 63], cos[1, 63]).double(), plain[-1] / 32, rtol=1e-3)


EXACT = dataclasses.replace(orpheus.CHUNK_SHAPE, ramp_context=None)  # full context for the first chunk too


def _codec(orpheus_tiny: Path) -> SnacCodec:
    return SnacCodec.from_dir(orpheus_tiny / "codec", "cpu")


def test_streamed_chunks_equal_one_whole_decode(orpheus_tiny: Path) -> None:
    codec = _codec(orpheus_tiny)
    frames = torch.randint(0, 4096, (1, 23, 7), generator=torch.Generator().manual_seed(1))
    whole = codec.decode(frames, torch.zeros(1, dtype=torch.int64))[0].numpy()
    stream, pieces, sizes = ChunkPlan(EXACT), [], []
    for i in range(23):  # frames arrive one by one; decode whatever is ready
        stream.num_frames += 1
        stream.is_final = i == 22
        while (window := stream.next_window()) is not None:
            chunk = codec.decode(frames[:, window.start:window.stop], torch.tensor([window.start]))[0]
            pieces.append(chunk.numpy()[window.crop(SAMPLES_PER_FRAME)])
            sizes.append(window.emit_to - window.emit_from)
            stream.advance(window)
    assert stream.is_done and sizes[:3] == [1, 2, 4]
    streamed = np.concatenate(pieces)
    assert streamed.shape == whole.shape == (23 * SAMPLES_PER_FRAME,)
    assert np.abs(streamed - whole).max() < 1e-4
    assert np.abs(whole).max() > 1e-3  # not trivially silent


def test_early_chunks_take_what_has_context_and_still_equal_one_whole_decode(orpheus_tiny: Path) -> None:
    codec = _codec(orpheus_tiny)
    frames = torch.randint(0, 4096, (1, 17, 7), generator=torch.Generator().manual_seed(3))
    whole = codec.decode(frames, torch.zeros(1, dtype=torch.int64))[0].numpy()
    stream, pieces, sizes = ChunkPlan(EXACT), [], []
    for i in range(17):  # a listener always about to run dry: decode early whenever possible
        stream.num_frames += 1
        stream.is_final = i == 16
        while (window := stream.next_window() or stream.next_window(early=True)) is not None:
            chunk = codec.decode(frames[:, window.start:window.stop], torch.tensor([window.start]))[0]
            pieces.append(chunk.numpy()[window.crop(SAMPLES_PER_FRAME)])
            sizes.append(window.emit_to - window.emit_from)
            stream.advance(window)
    assert stream.is_done and sizes[:4] == [1, 1, 1, 1]  # one frame as soon as it has its context
    early = ChunkPlan(EXACT, num_frames=5)
    early.num_emitted, early.num_chunks = 1, 1
    assert early.next_window() is None  # the planned 2 frames need frames up to 6
    window = early.next_window(early=True)
    assert window is not None and (window.emit_from, window.emit_to) == (1, 2)
    streamed = np.concatenate(pieces)
    assert streamed.shape == whole.shape and np.abs(streamed - whole).max() < 1e-4


def test_context_frames_cover_the_decoder_receptive_field(orpheus_tiny: Path) -> None:
    codec = _codec(orpheus_tiny)
    frames = torch.randint(0, 4096, (1, 12, 7), generator=torch.Generator().manual_seed(2))
    changed = frames.clone()
    changed[0, 6] = (changed[0, 6] + 1) % 4096
    start = torch.zeros(1, dtype=torch.int64)
    diff = (codec.decode(frames, start) - codec.decode(changed, start))[0].abs()
    touched = (diff > 0).nonzero().flatten()
    first, last = int(touched.min()) // SAMPLES_PER_FRAME, int(touched.max()) // SAMPLES_PER_FRAME
    assert 6 - CONTEXT_FRAMES <= first < 6 and 6 < last <= 6 + CONTEXT_FRAMES


def test_the_attention_context_is_per_thread() -> None:
    """Two device workers (threads) each set their own context (models/context.py)."""
    import threading

    import torch

    from models.context import Context, get_context, reset_context, set_context

    seen: dict[str, int] = {}
    ready, done = threading.Barrier(2), threading.Barrier(2)

    def worker(name: str, slots: int) -> None:
        set_context(Context(False, torch.arange(slots), torch.zeros(slots, dtype=torch.int64), torch.zeros(1)))
        ready.wait()  # both have set theirs before either reads
        seen[name] = len(get_context().slots)
        done.wait()
        reset_context()

    threads = [threading.Thread(target=worker, args=(name, n)) for name, n in (("a", 2), ("b", 5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": 2, "b": 5}


def test_codec_dtype_runs_snac_in_bfloat16_and_pcm_stays_float32(orpheus_tiny: Path) -> None:
    with pytest.raises(InvalidModel, match="options.codec_dtype must be one of") as bad:
        orpheus.validate(orpheus_tiny, {"codec_dtype": "float8"})
    assert bad.value.field == "options.codec_dtype"
    full = orpheus.load("tiny", orpheus_tiny, {}, "cpu").codec
    half = orpheus.load("tiny", orpheus_tiny, {"codec_dtype": "bfloat16"}, "cpu").codec
    assert next(full.model.parameters()).dtype == torch.float32
    assert next(half.model.parameters()).dtype == torch.bfloat16
    frames = torch.randint(0, 4096, (2, 9, 7), generator=torch.Generator().manual_seed(3))
    start = torch.tensor([0, 5])
    reference, pcm = full.decode(frames, start), half.decode(frames, start)
    assert pcm.dtype == torch.float32 and pcm.shape == reference.shape == (2, 9 * SAMPLES_PER_FRAME)
    error = (pcm - reference).abs().max().item()
    assert 0 < error < 0.1 * reference.abs().max().item()  # rounded, not another signal
