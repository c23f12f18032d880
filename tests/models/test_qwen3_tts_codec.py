"""The Qwen3-TTS 12 Hz decoder: whole decode against qwen-tts's, streaming against whole."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from models.qwen3_tts_codec import Qwen3TTSCodec  # noqa: E402
from models.qwen3_tts_stream import CHUNK_FRAMES, SAMPLES_PER_FRAME, StreamPlan  # noqa: E402
from tests.models import qwen_reference  # noqa: E402


def _frames(batch: int, count: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, count, 16), generator=torch.Generator().manual_seed(seed))


def test_whole_decode_matches_qwen_tts_decoder(qwen3_tts_tiny: Path) -> None:
    _, _, tokenizer_modeling, tokenizer_config = qwen_reference.modules()
    from safetensors.torch import load_file

    folder = qwen3_tts_tiny / "speech_tokenizer"
    config = tokenizer_config.Qwen3TTSTokenizerV2DecoderConfig(
        **json.loads((folder / "config.json").read_text())["decoder_config"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = tokenizer_modeling.Qwen3TTSTokenizerV2Decoder(config).eval()
    state = {k.removeprefix("decoder."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    reference.load_state_dict(state, strict=True)
    frames = _frames(2, 21, seed=1)  # 21 frames: past the tiny sliding window of 8
    with torch.no_grad():
        expected = reference(frames.transpose(1, 2))[:, 0]
    ours = Qwen3TTSCodec.from_dir(folder).decode_whole(frames)
    assert ours.shape == (2, 21 * SAMPLES_PER_FRAME)
    assert 0.05 < float(expected.std()) and float((expected.abs() >= 1).float().mean()) < 0.2  # a real signal
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)


def test_streamed_chunks_equal_a_whole_decode(qwen3_tts_tiny: Path) -> None:
    codec = Qwen3TTSCodec.from_dir(qwen3_tts_tiny / "speech_tokenizer")
    frames = _frames(1, 30, seed=2)
    whole = codec.decode_whole(frames)
    plan, state, pieces = StreamPlan(), codec.new_state(), []
    for produced in range(1, 31):  # frames arrive one by one; decode whenever the plan says so
        plan.num_frames = produced
        plan.is_final = produced == 30
        while (window := plan.next_window()) is not None:
            pieces.append(codec.decode(frames[:, window.start:window.stop], [state]) if window.num_frames
                          else torch.zeros(1, 0))
            plan.advance(window)
    assert plan.is_done and state.num_frames == 30
    assert [p.shape[1] // SAMPLES_PER_FRAME for p in pieces[:4]] == list(CHUNK_FRAMES)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, atol=2e-5, rtol=0)


def test_batched_streams_at_different_positions_match_their_own_decodes(qwen3_tts_tiny: Path) -> None:
    codec = Qwen3TTSCodec.from_dir(qwen3_tts_tiny / "speech_tokenizer")
    a, b = _frames(1, 14, seed=3), _frames(1, 3, seed=4)
    state_a, state_b = codec.new_state(), codec.new_state()
    head = codec.decode(a[:, :11], [state_a])  # a is 11 frames in (past the window), b is new
    tail = codec.decode(torch.cat([a[:, 11:], b]), [state_a, state_b])
    torch.testing.assert_close(torch.cat([head, tail[:1]], dim=1), codec.decode_whole(a), atol=2e-5, rtol=0)
    torch.testing.assert_close(tail[1:], codec.decode_whole(b), atol=2e-5, rtol=0)
