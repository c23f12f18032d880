"""The qwen3_tts family: folder checks, loading, the greedy loop into audio (the engine serving it:
tests/models/test_qwen3_tts_runner.py, tests/gateway/test_qwen3_tts_e2e.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gateway.cli import main  # noqa: E402
from models import InvalidModel, family  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_generate import generate_frames, synthesize  # noqa: E402
from models.qwen3_tts_stream import SAMPLES_PER_FRAME, StreamPlan  # noqa: E402


@pytest.fixture(scope="module")
def model(qwen3_tts_tiny: Path) -> qwen3_tts.Qwen3TTS:
    return qwen3_tts.load_parts(qwen3_tts_tiny)


def test_family_is_registered_and_validates_the_tiny_folder(qwen3_tts_tiny: Path) -> None:
    assert family("qwen3_tts") is qwen3_tts
    facts = qwen3_tts.validate(qwen3_tts_tiny)
    assert facts["voices"][:2] == ["vivian", "serena"] and "ryan" in facts["voices"]
    assert facts["sample_rate"] == 24000 and facts["model_type"] == "custom_voice" and facts["size_bytes"] > 0


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    return copy


def test_validate_names_what_is_wrong(qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    folder = _copy(qwen3_tts_tiny, tmp_path)
    (folder / "speech_tokenizer" / "model.safetensors").unlink()
    with pytest.raises(InvalidModel, match="speech_tokenizer/model.safetensors is missing"):
        qwen3_tts.validate(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(InvalidModel, match="not a Qwen3-TTS config: model_type is 'llama'"):
        qwen3_tts.validate(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(InvalidModel, match="not a Qwen3-TTS config"):
        qwen3_tts.validate(folder)
    with pytest.raises(InvalidModel, match="nowhere does not exist"):
        qwen3_tts.validate(tmp_path / "nowhere")
    with pytest.raises(InvalidModel, match="config.json is not a folder"):
        qwen3_tts.validate(folder / "config.json")
    (folder / "config.json").unlink()
    with pytest.raises(InvalidModel, match="config.json is missing"):
        qwen3_tts.validate(folder)


def test_validate_reads_every_weight_file_to_its_end(qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    """A truncated file was taken at install and failed only at the first load (503, retried)."""
    folder = _copy(qwen3_tts_tiny, tmp_path)
    for part in ("model.safetensors", "speech_tokenizer/model.safetensors"):
        data = (folder / part).read_bytes()
        (folder / part).write_bytes(data[: len(data) // 2])
        with pytest.raises(InvalidModel, match=f"{part} is not a complete safetensors file"):
            qwen3_tts.validate(folder)
        (folder / part).write_bytes(data)
    qwen3_tts.validate(folder)


def test_weights_that_do_not_match_the_config_are_refused(qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    folder = _copy(qwen3_tts_tiny, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["talker_config"]["num_hidden_layers"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InvalidModel, match="weights do not match config.json"):
        qwen3_tts.load_parts(folder)


def test_greedy_loop_makes_audio_that_streams_like_a_whole_decode(model: qwen3_tts.Qwen3TTS) -> None:
    frames = generate_frames(model.talker, model.prompt("Hello there.", "ryan"), 9)
    assert frames.shape == (9, 16) and int(frames.max()) < 2048
    whole = model.codec.decode_whole(frames[None])[0]
    assert whole.shape == (9 * SAMPLES_PER_FRAME,) and float(whole.std()) > 0.05
    plan, state, pieces = StreamPlan(num_frames=9, is_final=True), model.codec.new_state(), []
    while (window := plan.next_window()) is not None:
        pieces.append(model.codec.decode(frames[None, window.start:window.stop], [state])[0])
        plan.advance(window)
    torch.testing.assert_close(torch.cat(pieces), whole, atol=2e-5, rtol=0)
    audio = synthesize(model, "Hello there.", max_frames=9, voice="ryan")
    torch.testing.assert_close(audio, whole)  # greedy: the same frames again


def test_prompts_differ_by_speaker_and_instructions(model: qwen3_tts.Qwen3TTS) -> None:
    plain = model.prompt("Hello.", "ryan")
    assert not torch.equal(plain.prefill, model.prompt("Hello.", "serena").prefill)
    instructed = model.prompt("Hello.", "ryan", instructions="Whisper.")
    assert instructed.prefill.shape[0] > plain.prefill.shape[0]
    with pytest.raises(ValueError, match="at most 2000"):
        model.prompt("x" * 2001, "ryan")


def test_cli_writes_a_qwen3_tts_checkpoint_and_refuses_an_unknown_size(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "random", "--family", "orpheus", "--size", "0.6b", str(tmp_path / "o")]) == 2
    assert "size must be one of" in capsys.readouterr().err
    folder = tmp_path / "q"
    assert main(["checkpoint", "random", "--family", "qwen3_tts", "--size", "tiny", str(folder)]) == 0
    assert qwen3_tts.validate(folder)["num_layers"] == 2
    assert json.loads((folder / "config.json").read_text())["tts_model_type"] == "custom_voice"
    design = tmp_path / "d"
    assert main(["checkpoint", "random", "--family", "qwen3_tts", "--type", "voice_design", str(design)]) == 0
    assert json.loads((design / "config.json").read_text())["tts_model_type"] == "voice_design"
    assert qwen3_tts.validate(design)["voices"] == ["default"]  # no named speakers: the description is the voice
    assert main(["checkpoint", "random", "--family", "orpheus", "--type", "voice_design", str(tmp_path / "o2")]) == 2
    assert "--type is for qwen3_tts" in capsys.readouterr().err
    assert main(["checkpoint", "random", "--family", "qwen3_tts", str(design)]) == 2  # not over a model
    assert "exists and is not empty" in capsys.readouterr().err
    assert json.loads((design / "config.json").read_text())["tts_model_type"] == "voice_design"
    assert main(["checkpoint", "random", "--family", "qwen3_tts", "--force", str(design)]) == 0


def test_position_options_past_the_talker_are_refused_naming_them(tmp_path: Path) -> None:
    """max_seq_len and attn_block above the talker's positions would allocate a cache for nothing
    (a new user's trial: max_seq_len=100000000 was taken, then the first load ran out of memory)."""
    from models import InvalidModel, checkpoint, qwen3_tts

    folder = checkpoint.write_random("qwen3_tts", "tiny", tmp_path / "q")
    for name in ("max_seq_len", "attn_block"):
        with pytest.raises(InvalidModel, match=rf"{name}.*from 1|{name}.*from 2"):
            qwen3_tts.validate(folder, {name: qwen3_tts.MAX_SEQ_LEN + 1})
    qwen3_tts.validate(folder, {"max_seq_len": 4096, "attn_block": 512})
