"""Cloning through the engine: a Base request's reference goes through `prepare` (its encoders
and the model's reference cache) into the clone prompt, served by the unchanged runner.

The greedy stream is checked against qwen-tts's own generation from the same audio (its
encoders make the voice-clone prompt), on the tiny random Base checkpoint.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.types import InvalidInput, SpeechRequest  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_prompt import Reference  # noqa: E402
from models.qwen3_tts_references import ReferenceAudio, ReferenceCache, caches, forget  # noqa: E402
from models.qwen3_tts_spec import QwenPrepared  # noqa: E402
from models.qwen3_tts_stream import SAMPLES_PER_FRAME  # noqa: E402
from tests.models.test_qwen3_tts_encoders import _speech, reference_model, reference_tokenizer  # noqa: E402,F401
from tests.models.test_qwen3_tts_parity import _reference_frames  # noqa: E402
from tests.models.test_qwen3_tts_runner import GREEDY, _core, _run, variant  # noqa: E402

REF_TEXT = "The quick brown fox."
TEXT = "Jumps over the lazy dog."


def _pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1, 1) * 32767.0).round().astype("<i2").tobytes()


def _clone_spec(rid: str, reference: object, text: str = TEXT, voice: str = "alice", **options: Any) -> SpeechRequest:
    return SpeechRequest(rid, "tiny", (text,), voice, options={**GREEDY, "reference": reference, **options})


def test_greedy_clone_stream_equals_qwen_tts_generation_from_the_same_audio(
        qwen3_tts_tiny_base: Path, reference_model: Any, reference_tokenizer: Any) -> None:  # noqa: F811
    reference = ReferenceAudio.from_pcm16(_pcm16(_speech(1.5, seed=11)), REF_TEXT, "alice")
    audio = reference.samples()  # what the stored PCM16 reads back as, on both sides
    wave = torch.from_numpy(audio)[None]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        codes = reference_tokenizer.encode(wave, torch.ones_like(wave, dtype=torch.long)).audio_codes[0]
        embedding = reference_model.extract_speaker_embedding(audio, 24000)
    clone = {"ref_code": [codes], "ref_spk_embedding": [embedding], "x_vector_only_mode": [False],
             "icl_mode": [True]}
    expected = _reference_frames(reference_model, qwen3_tts_tiny_base, TEXT, 12, whole_text=False, clone=clone,
                                 ref_text=REF_TEXT)
    frames, streamed = _run(_core(qwen3_tts_tiny_base), [_clone_spec("a", reference, max_tokens=12)])
    assert frames["a"] == expected.tolist() and len(frames["a"]) == 12
    whole = qwen3_tts.load_parts(qwen3_tts_tiny_base).codec.decode_whole(expected[None])[0].numpy()
    assert streamed["a"].shape == (12 * SAMPLES_PER_FRAME,)
    np.testing.assert_allclose(streamed["a"], whole, atol=2e-5, rtol=0)


def test_the_prompt_holds_the_encoded_reference(qwen3_tts_tiny_base: Path) -> None:
    parts = qwen3_tts.load("tiny", qwen3_tts_tiny_base, {}, "cpu")
    model = parts.backbone
    reference = ReferenceAudio.from_pcm16(_pcm16(_speech(2.0, seed=3)), REF_TEXT)
    prepared = parts.spec.prepare(_clone_spec("a", reference))
    assert isinstance(prepared, QwenPrepared)
    encoded = model.encode_reference(reference.samples(), REF_TEXT)
    expected = model.prompt(TEXT, reference=encoded)
    assert encoded.codes.shape == (-(-reference.num_samples // SAMPLES_PER_FRAME), 16)
    torch.testing.assert_close(prepared.prompt.prefill, expected.prefill)
    torch.testing.assert_close(prepared.prompt.trailing, expected.trailing)
    x_vector_only = model.prompt(TEXT, reference=Reference("", None, encoded.speaker_embedding))
    assert prepared.prompt.prefill.shape[0] > x_vector_only.prefill.shape[0]  # the reference's frames are in


def test_a_second_request_with_the_same_audio_is_not_encoded_again(qwen3_tts_tiny_base: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    parts = qwen3_tts.load("tiny", qwen3_tts_tiny_base, {}, "cpu")
    model = parts.backbone
    calls: list[int] = []
    encode = model.speech_encoder.encode
    monkeypatch.setattr(model.speech_encoder, "encode", lambda audio: calls.append(len(audio)) or encode(audio))
    pcm = _pcm16(_speech(1.2, seed=5))
    first = parts.spec.prepare(_clone_spec("a", ReferenceAudio.from_pcm16(pcm, REF_TEXT, "alice")))
    # the same recording under another name and transcript: the same encoding, the new transcript
    second = parts.spec.prepare(_clone_spec("b", ReferenceAudio.from_pcm16(pcm, "Other words.", "bob"), voice="bob"))
    assert len(calls) == 1 and model.references.misses == 1 and model.references.hits == 1
    assert model.references in caches()
    assert not torch.equal(first.prompt.prefill, second.prompt.prefill)  # type: ignore[attr-defined]
    assert forget(ReferenceAudio.from_pcm16(pcm, None).sha256) >= 1  # the voice was deleted
    parts.spec.prepare(_clone_spec("c", ReferenceAudio.from_pcm16(pcm, REF_TEXT)))
    assert len(calls) == 2


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = ReferenceCache(max_entries=2)
    for key in ("a", "b"):
        cache.get(key, lambda: key.upper())
    assert cache.get("a", lambda: "never") == "A"  # a is now the most recent
    cache.get("c", lambda: "C")
    assert "b" not in cache and "a" in cache and "c" in cache and len(cache) == 2
    assert cache.forget("a") and not cache.forget("a")


def test_bad_references_are_refused_naming_the_field(qwen3_tts_tiny: Path, qwen3_tts_tiny_base: Path,
                                                     tmp_path: Path) -> None:
    good = ReferenceAudio.from_pcm16(_pcm16(_speech(1.0, seed=2)), REF_TEXT)
    base = qwen3_tts.load("tiny", qwen3_tts_tiny_base, {}, "cpu").spec.prepare
    no_encoders = variant(qwen3_tts_tiny, tmp_path / "bare-base", tts_model_type="base")
    cases = [
        (qwen3_tts.load("tiny", qwen3_tts_tiny, {}, "cpu").spec.prepare, good, "model", "does not clone"),
        (qwen3_tts.load("tiny", no_encoders, {}, "cpu").spec.prepare, good, "model", "no speaker encoder"),
        (base, ReferenceAudio.from_pcm16(b"\0\0" * 2000, REF_TEXT), "ref_audio", "at least 0.5 s"),
        (base, b"not a reference", "ref_audio", "must be a recording"),
        (base, None, "voice", "reference recording"),
    ]
    for prepare, reference, field, message in cases:
        with pytest.raises(InvalidInput, match=message) as refused:
            prepare(_clone_spec("a", reference))
        assert refused.value.field == field
    with pytest.raises(InvalidInput) as instructions:
        base(_clone_spec("a", good, instructions="Whisper."))
    assert instructions.value.field == "instructions"
