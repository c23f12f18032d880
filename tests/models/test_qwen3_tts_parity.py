"""Our Qwen3-TTS talker, code predictor, prompts and greedy loop against qwen-tts's modeling code.

The reference modules are built from the same tiny random checkpoint (config.json and the
safetensors our writer made), so the checkpoint format is checked too. Skipped where
qwen-tts is not installed (scripts/test.sh installs it).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_generate import generate_frames  # noqa: E402
from models.qwen3_tts_prompt import Reference, assistant_text, instruct_text, reference_text  # noqa: E402
from tests.models import qwen_reference  # noqa: E402
from tests.models.test_qwen3_tts_codec import _frames  # noqa: E402


@pytest.fixture(scope="module")
def ours(qwen3_tts_tiny: Path) -> qwen3_tts.Qwen3TTS:
    return qwen3_tts.load_parts(qwen3_tts_tiny)


def _reference_model(folder: Path, model_type: str = "custom_voice") -> Any:
    modeling, configuration, _, _ = qwen_reference.modules()
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    config["tts_model_type"] = model_type
    with warnings.catch_warnings():  # transformers' notes about init and attention backends
        warnings.simplefilter("ignore")
        model = modeling.Qwen3TTSForConditionalGeneration(configuration.Qwen3TTSConfig(**config)).eval()
    missing, unexpected = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    assert not unexpected and all(k.startswith("speaker_encoder.") for k in missing)
    return model


@pytest.fixture(scope="module")
def reference(qwen3_tts_tiny: Path) -> Any:
    return _reference_model(qwen3_tts_tiny)


def _hf_tokenizer(folder: Path) -> Any:
    from transformers import Qwen2TokenizerFast

    return Qwen2TokenizerFast.from_pretrained(str(folder))


def test_text_tokenizer_matches_transformers_qwen2(qwen3_tts_tiny: Path, ours: qwen3_tts.Qwen3TTS) -> None:
    hf = _hf_tokenizer(qwen3_tts_tiny)
    for text in (assistant_text("Hello, world! It's 12:30."), instruct_text("Speak slowly,\n\nwarmly."),
                 reference_text("Grüße aus Köln — 你好，世界"), "  spaces   and\ttabs "):
        assert ours.tokenizer.encode(text, add_special_tokens=False).ids == hf(text)["input_ids"]
    assert hf(assistant_text("x"))["input_ids"][0] == 151644


def test_talker_logits_match_reference(ours: qwen3_tts.Qwen3TTS, reference: Any) -> None:
    from models.context import additive
    from models.qwen3_tts_generate import allocate_kv_cache
    from models.context import Context, reset_context, set_context

    talker, length, steps = ours.talker, 9, 4
    embeds = torch.randn(length + steps, talker.args.hidden_size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref_hidden = reference.talker.model(inputs_embeds=embeds[None], use_cache=False).last_hidden_state[0]
        expected = reference.talker.codec_head(ref_hidden)
    allocate_kv_cache(talker, 32)
    positions = torch.arange(length)
    set_context(Context(True, torch.zeros(length, dtype=torch.int64), positions,
                        additive((positions[None] <= positions[:, None])[None, None], torch.float32)))
    rows = [talker.compute_logits(talker(embeds[:length], positions))]
    reset_context()
    for step in range(steps):  # decode steps through the KV cache
        position = torch.tensor([length + step])
        visible = torch.arange(length + step + 1) <= position
        set_context(Context(False, torch.zeros(1, dtype=torch.int64), position,
                            additive(visible[None, None, None], torch.float32), length + step + 1))
        rows.append(talker.compute_logits(talker(embeds[length + step:length + step + 1], position)))
        reset_context()
    torch.testing.assert_close(torch.cat(rows), expected, atol=1e-4, rtol=1e-4)


def test_predictor_logits_match_reference(ours: qwen3_tts.Qwen3TTS, reference: Any) -> None:
    predictor, ref = ours.talker.code_predictor, reference.talker.code_predictor
    generator = torch.Generator().manual_seed(6)
    batch, width = 3, ours.talker.args.hidden_size
    hidden = torch.randn(batch, width, generator=generator)
    codes = torch.randint(0, 2048, (batch, 16), generator=generator)
    predictor.setup_cache(batch, "cpu", torch.float32)
    sequence = [hidden, ours.talker.embed_codec(codes[:, 0])]
    x = torch.stack(sequence, dim=1)
    for step in range(15):  # teacher-forced: step j reads codebook j and predicts j + 1
        ours_logits = predictor.step_logits(x, step)
        with torch.no_grad():
            ref_hidden = ref.model(inputs_embeds=ref.small_to_mtp_projection(torch.stack(sequence, dim=1)),
                                   use_cache=False).last_hidden_state
            expected = ref.lm_head[step](ref_hidden[:, -1])
        torch.testing.assert_close(ours_logits, expected, atol=1e-4, rtol=1e-4)
        embed = predictor.model.codec_embedding[step](codes[:, step + 1])
        sequence.append(embed)
        x = embed[:, None]


def _reference_frames(model: Any, folder: Path, text: str, frames: int, speaker: str | None = None,
                      language: str = "auto", instructions: str | None = None, whole_text: bool = True,
                      clone: dict[str, Any] | None = None, ref_text: str | None = None) -> torch.Tensor:
    hf = _hf_tokenizer(folder)

    def ids(s: str) -> torch.Tensor:
        return torch.tensor([hf(s)["input_ids"]])

    with warnings.catch_warnings():  # generate() notes unused sampling flags under greedy decoding
        warnings.simplefilter("ignore")
        codes, _ = model.generate(
            input_ids=[ids(assistant_text(text))], languages=[language], speakers=[speaker],
            instruct_ids=[ids(instruct_text(instructions)) if instructions else None],
            ref_ids=[ids(reference_text(ref_text))] if ref_text else None, voice_clone_prompt=clone,
            non_streaming_mode=whole_text, do_sample=False, subtalker_dosample=False, repetition_penalty=1.0,
            max_new_tokens=frames + 1)  # the last sampled codebook-0 token gets no predictor pass
    return codes[0]


@pytest.mark.parametrize("speaker, language, instructions, whole_text", [
    ("ryan", "english", None, True),  # CustomVoice as qwen-tts calls it
    ("Aiden", "auto", "Cheerful, a little fast.", False),  # instructions, text fed per frame
    (None, "auto", "A deep, calm narrator's voice.", True),  # VoiceDesign: no speaker
    ("dylan", "chinese", None, True),  # a dialect speaker swaps the language tag
])
def test_greedy_frames_match_reference(qwen3_tts_tiny: Path, ours: qwen3_tts.Qwen3TTS, reference: Any,
                                       speaker: str | None, language: str, instructions: str | None,
                                       whole_text: bool) -> None:
    text = "Hello there, a short test."
    expected = _reference_frames(reference, qwen3_tts_tiny, text, 6, speaker, language, instructions, whole_text)
    prompt = ours.prompt(text, speaker, instructions, language, stream_text=not whole_text)
    got = generate_frames(ours.talker, prompt, 6)
    assert expected.shape == (6, 16)
    assert torch.equal(got, expected)


@pytest.fixture(scope="module")
def reference_base(qwen3_tts_tiny: Path) -> Any:
    """The reference as a Base model (its speaker encoder random: the tests hand it the x-vector)."""
    return _reference_model(qwen3_tts_tiny, "base")


@pytest.mark.parametrize("with_codes, whole_text", [(True, False), (True, True), (False, False)])
def test_clone_prompt_frames_match_reference(qwen3_tts_tiny: Path, ours: qwen3_tts.Qwen3TTS, reference_base: Any,
                                             with_codes: bool, whole_text: bool) -> None:
    base = reference_base
    ref_codes = _frames(1, 5, seed=7)[0]
    embedding = torch.randn(ours.talker.args.hidden_size, generator=torch.Generator().manual_seed(8))
    clone = {"ref_code": [ref_codes if with_codes else None], "ref_spk_embedding": [embedding],
             "x_vector_only_mode": [not with_codes], "icl_mode": [with_codes]}
    ref_text = "The quick brown fox."
    expected = _reference_frames(base, qwen3_tts_tiny, "Jumps over the lazy dog, twice over.", 5,
                                 whole_text=whole_text, clone=clone, ref_text=ref_text if with_codes else None)
    reference_voice = Reference(ref_text, ref_codes if with_codes else None, embedding)
    prompt = ours.prompt("Jumps over the lazy dog, twice over.", reference=reference_voice,
                         stream_text=not whole_text)
    assert torch.equal(generate_frames(ours.talker, prompt, 5), expected)


def test_unknown_speaker_and_language_are_refused(ours: qwen3_tts.Qwen3TTS) -> None:
    with pytest.raises(ValueError, match="unknown speaker 'nobody'"):
        ours.prompt("Hi.", "nobody")
    with pytest.raises(ValueError, match="unknown language 'klingon'"):
        ours.prompt("Hi.", "ryan", language="klingon")
