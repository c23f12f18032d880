"""The Base model's encoders against qwen-tts's: speaker embedding (x-vector) and speech codes.

Both sides load the same tiny random Base checkpoint that our writer made (so its on-disk
format is checked too): qwen-tts's `Qwen3TTSForConditionalGeneration.extract_speaker_embedding`
(its mel front end included) and `Qwen3TTSTokenizerV2Model.encode` (transformers' Mimi
encoder). Skipped where qwen-tts is not installed (scripts/test.sh installs it).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from models.qwen3_tts_encoder import SAMPLES_PER_FRAME, SpeechEncoder  # noqa: E402
from models.qwen3_tts_speaker import MIN_SAMPLES, SpeakerArgs, SpeakerEncoder, speaker_embedding  # noqa: E402
from tests.models import qwen_reference  # noqa: E402


def _speech(seconds: float, seed: int) -> np.ndarray:
    """A voiced-like test signal: a few harmonics with a wandering pitch, plus noise, in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(24000 * seconds)) / 24000
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(pitch) / 24000
    wave = sum(np.sin(k * phase) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (0.3 * wave + 0.02 * rng.standard_normal(t.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def reference_model(qwen3_tts_tiny_base: Path) -> Any:
    modeling, configuration, _, _ = qwen_reference.modules()
    from safetensors.torch import load_file

    config = json.loads((qwen3_tts_tiny_base / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = modeling.Qwen3TTSForConditionalGeneration(configuration.Qwen3TTSConfig(**config)).eval()
    model.load_state_dict(load_file(str(qwen3_tts_tiny_base / "model.safetensors")), strict=True)
    return model


@pytest.fixture(scope="module")
def reference_tokenizer(qwen3_tts_tiny_base: Path) -> Any:
    _, _, modeling, configuration = qwen_reference.modules()
    from safetensors.torch import load_file

    folder = qwen3_tts_tiny_base / "speech_tokenizer"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = modeling.Qwen3TTSTokenizerV2Model(
            configuration.Qwen3TTSTokenizerV2Config(**json.loads((folder / "config.json").read_text()))).eval()
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)  # all 32 codebooks
    return model


def _our_speaker_encoder(folder: Path) -> SpeakerEncoder:
    from models.qwen3_tts import load_speaker_encoder

    encoder = load_speaker_encoder(folder, "cpu")
    assert encoder is not None
    return encoder


@pytest.mark.parametrize("seconds", [1.0, 3.3])
def test_speaker_embedding_matches_reference(qwen3_tts_tiny_base: Path, reference_model: Any,
                                             seconds: float) -> None:
    audio = _speech(seconds, seed=int(seconds * 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = reference_model.extract_speaker_embedding(audio, 24000)
    got = speaker_embedding(_our_speaker_encoder(qwen3_tts_tiny_base), audio)
    assert got.shape == (64,) and got.dtype == torch.float32
    assert float(expected.std()) > 1e-3  # a real vector, not a constant
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=1e-4)


def test_speaker_embeddings_of_different_voices_differ(qwen3_tts_tiny_base: Path) -> None:
    encoder = _our_speaker_encoder(qwen3_tts_tiny_base)
    a, b = speaker_embedding(encoder, _speech(2.0, 1)), speaker_embedding(encoder, _speech(2.0, 2) * 0.5)
    assert not torch.allclose(a, b, atol=1e-3)


def test_speaker_embedding_refuses_too_short_audio(qwen3_tts_tiny_base: Path) -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_SAMPLES} samples"):
        speaker_embedding(_our_speaker_encoder(qwen3_tts_tiny_base), np.zeros(MIN_SAMPLES - 1, np.float32))


@pytest.mark.parametrize("samples", [24000, 2 * 24000 + 777, 5 * 24000])  # 5 s: 63 frames, past the window of 4
def test_speech_codes_match_reference_exactly(qwen3_tts_tiny_base: Path, reference_tokenizer: Any,
                                              samples: int) -> None:
    audio = _speech(samples / 24000, seed=samples)
    wave = torch.from_numpy(audio)[None]
    with torch.inference_mode():
        expected = reference_tokenizer.encode(wave, torch.ones_like(wave, dtype=torch.long)).audio_codes[0]
    got = SpeechEncoder.from_dir(qwen3_tts_tiny_base / "speech_tokenizer").encode(audio)
    assert got.shape == (-(-samples // SAMPLES_PER_FRAME), 16) and got.dtype == torch.int64
    assert len(set(got[:, 0].tolist())) > 1  # codes vary over the clip
    assert torch.equal(got, expected.cpu())


def test_speech_encoder_loads_only_valid_codebooks_and_refuses_empty_audio(qwen3_tts_tiny_base: Path) -> None:
    encoder = SpeechEncoder.from_dir(qwen3_tts_tiny_base / "speech_tokenizer")
    assert len(encoder.encoder.quantizer.acoustic_residual_vector_quantizer.layers) == 15
    with pytest.raises(ValueError, match="at least one sample"):
        encoder.encode(np.zeros(0, np.float32))


def test_random_base_checkpoint_round_trips_its_configs(qwen3_tts_tiny_base: Path) -> None:
    config = json.loads((qwen3_tts_tiny_base / "config.json").read_text())
    args = SpeakerArgs.from_hf(config["speaker_encoder_config"])
    assert args.enc_dim == config["talker_config"]["hidden_size"] and args.to_hf() == config["speaker_encoder_config"]


@pytest.mark.parametrize("ref_text", ["The quick brown fox.", None])  # ICL, and the x-vector-only mode
def test_cloned_greedy_frames_match_reference_from_the_same_audio(qwen3_tts_tiny_base: Path, reference_model: Any,
                                                                  reference_tokenizer: Any,
                                                                  ref_text: str | None) -> None:
    """Audio -> qwen-tts's voice-clone prompt (its encoders) -> its greedy generation, against
    audio -> `encode_reference` -> our prompt -> our greedy loop."""
    from models import qwen3_tts
    from models.qwen3_tts_generate import generate_frames
    from tests.models.test_qwen3_tts_parity import _reference_frames

    audio = _speech(1.5, seed=4)
    wave = torch.from_numpy(audio)[None]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        codes = reference_tokenizer.encode(wave, torch.ones_like(wave, dtype=torch.long)).audio_codes[0]
        embedding = reference_model.extract_speaker_embedding(audio, 24000)
    clone = {"ref_code": [codes if ref_text else None], "ref_spk_embedding": [embedding],
             "x_vector_only_mode": [ref_text is None], "icl_mode": [ref_text is not None]}
    text = "Jumps over the lazy dog."
    expected = _reference_frames(reference_model, qwen3_tts_tiny_base, text, 5, whole_text=False, clone=clone,
                                 ref_text=ref_text)
    ours = qwen3_tts.load_parts(qwen3_tts_tiny_base)
    reference = ours.encode_reference(audio, ref_text)
    assert (reference.codes is None) == (ref_text is None)
    assert torch.equal(generate_frames(ours.talker, ours.prompt(text, reference=reference), 5), expected)
