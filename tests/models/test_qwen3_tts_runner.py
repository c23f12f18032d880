"""Qwen3-TTS served by the engine (models/qwen3_tts_runner.py) on the tiny random checkpoint:
the real EngineCore and Engine against the eager reference loop (models/qwen3_tts_generate.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import AudioChunk, InputTooLong, InvalidInput, SpeechRequest, UnknownVoice  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_generate import MIN_FRAMES, generate_frames  # noqa: E402
from models.qwen3_tts_runner import Qwen3TTSRunner  # noqa: E402
from models.qwen3_tts_spec import STOP, frame_codes, pack_frame  # noqa: E402
from models.qwen3_tts_stream import SAMPLES_PER_FRAME  # noqa: E402
from tests.models.core_steps import add as _add, run_until_done  # noqa: E402

GREEDY = {"temperature": 0.0, "repetition_penalty": 1.0, "subtalker_temperature": 0.0}  # the reference loop's
TEXTS = {"a": "Hello there.", "b": "A somewhat longer sentence to speak.", "c": "Mid."}


def variant(folder: Path, out: Path, **config: Any) -> Path:
    """A copy of a model folder with top-level config.json fields changed (e.g. tts_model_type)."""
    shutil.copytree(folder, out)
    data = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**data, **config}))
    return out


@pytest.fixture(scope="module")
def design_folder(qwen3_tts_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return variant(qwen3_tts_tiny, tmp_path_factory.mktemp("design") / "m", tts_model_type="voice_design")


def _core(path: Path, max_running: int = 4, policy: str = "edf", **options: Any) -> EngineCore:
    parts = qwen3_tts.load("tiny", path, {"max_seq_len": 256, **options}, "cpu")
    runner = build_runner("tiny", parts, "cpu", max_running)
    assert isinstance(runner, Qwen3TTSRunner)
    return EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0, policy=policy))


def _spec(rid: str, voice: str = "ryan", **options: Any) -> SpeechRequest:
    return SpeechRequest(rid, "tiny", (TEXTS.get(rid, "Some text."),), voice, options={**GREEDY, **options})




def _run(core: EngineCore, specs: list[SpeechRequest], join_at: dict[str, int] | None = None,
         ) -> tuple[dict[str, list[list[int]]], dict[str, np.ndarray]]:
    """Step until every request ended (`join_at[id]`: added at that step); each one's frames
    and its streamed audio, checked to be whole chunks in order ending with `is_last`."""
    requests, sent = run_until_done(core, specs, join_at, max_steps=3000)
    for chunks in sent.values():
        assert all(isinstance(c, AudioChunk) for c in chunks) and chunks[-1].is_last, chunks
        assert [c.index for c in chunks] == list(range(len(chunks)))
    return ({rid: frame_codes(r.tokens) for rid, r in requests.items()},
            {rid: np.concatenate([c.pcm for c in chunks]) for rid, chunks in sent.items()})


def _reference(path: Path, text: str, frames: int, **prompt: Any) -> tuple[list[list[int]], np.ndarray]:
    """The eager loop on its own copy of the model (it installs its own KV cache)."""
    model = qwen3_tts.load_parts(path)
    codes = generate_frames(model.talker, model.prompt(text, **prompt), frames)
    return codes.tolist(), model.codec.decode_whole(codes[None])[0].numpy()


@pytest.mark.parametrize("case", ["custom_voice", "instructions", "voice_design"])
def test_greedy_stream_equals_the_reference_loop(case: str, qwen3_tts_tiny: Path, design_folder: Path) -> None:
    folder = design_folder if case == "voice_design" else qwen3_tts_tiny
    voice = "default" if case == "voice_design" else "ryan"
    instructions = {"custom_voice": None, "instructions": "Speak slowly and warmly.",
                    "voice_design": "A deep, calm male voice."}[case]
    options = {"max_tokens": 21} | ({"instructions": instructions} if instructions else {})
    frames, audio = _run(_core(folder), [_spec("a", voice, **options)])
    ref_frames, ref_audio = _reference(folder, TEXTS["a"], 21, voice=voice, instructions=instructions)
    assert frames["a"] == ref_frames and len(ref_frames) == 21
    assert audio["a"].shape == (21 * SAMPLES_PER_FRAME,) == ref_audio.shape
    np.testing.assert_allclose(audio["a"], ref_audio, atol=2e-5, rtol=0)
    assert float(np.std(audio["a"])) > 0.01  # real audio, not silence


def test_the_stream_starts_with_a_one_frame_chunk_then_ramps(qwen3_tts_tiny: Path) -> None:
    core = _core(qwen3_tts_tiny, policy="fifo")  # planned chunks only
    request = _add(core, _spec("a", max_tokens=20))
    chunks: list[AudioChunk] = []
    first_at = None
    while core.has_work:
        chunks += [x for _, x in core.step()]  # type: ignore[misc]
        if chunks and first_at is None:
            first_at = len(request.tokens)  # frames: one token each
    # No right context: frame 0's chunk is complete at the prefill and goes out in the prefill's own
    # step (engine/scheduler.py first_chunks), not a step later nor after 2 frames as Orpheus' needs.
    assert first_at == 1
    assert [len(c.pcm) // SAMPLES_PER_FRAME for c in chunks] == [1, 2, 4, 8, 5]


def test_early_chunks_of_any_size_still_equal_the_reference(qwen3_tts_tiny: Path) -> None:
    core = _core(qwen3_tts_tiny)
    request = _add(core, _spec("a", max_tokens=18))
    chunks: list[AudioChunk] = []
    while core.has_work:
        request.clock.on_report(0.0, 0.0, True)  # a listener always about to run dry: takes what is there
        chunks += [x for _, x in core.step()]  # type: ignore[misc]
    sizes = [len(c.pcm) // SAMPLES_PER_FRAME for c in chunks]
    assert sum(sizes) == 18 and sizes[:4] != [1, 2, 4, 8]  # some went out early, smaller than planned
    _, ref_audio = _reference(qwen3_tts_tiny, TEXTS["a"], 18, voice="ryan")
    np.testing.assert_allclose(np.concatenate([c.pcm for c in chunks]), ref_audio, atol=2e-5, rtol=0)


def test_batched_requests_at_different_positions_get_their_own_audio(qwen3_tts_tiny: Path) -> None:
    specs = [_spec("a", max_tokens=30), _spec("b", "serena", max_tokens=17),
             _spec("c", max_tokens=24, instructions="Whisper.")]
    alone: dict[str, Any] = {}
    for s in specs:
        frames, audio = _run(_core(qwen3_tts_tiny), [s])
        alone[s.request_id] = (frames[s.request_id], audio[s.request_id])
    frames, audio = _run(_core(qwen3_tts_tiny), specs, join_at={"b": 5, "c": 11})
    for rid, (alone_frames, alone_audio) in alone.items():
        assert frames[rid] == alone_frames
        np.testing.assert_allclose(audio[rid], alone_audio, atol=2e-5, rtol=0)
    assert len({tuple(map(tuple, f)) for f, _ in alone.values()}) == 3  # three different streams


def test_seeded_sampling_is_the_same_alone_and_batched(qwen3_tts_tiny: Path) -> None:
    def sampled(rid: str, seed: int) -> SpeechRequest:
        return SpeechRequest(rid, "tiny", (TEXTS[rid],), "ryan",
                             options={"seed": seed, "max_tokens": 12, "force_tokens": 12})  # qwen-tts's defaults

    specs = [sampled(rid, 7 + i) for i, rid in enumerate("abc")]
    alone = {s.request_id: _run(_core(qwen3_tts_tiny), [s])[0][s.request_id] for s in specs}
    assert _run(_core(qwen3_tts_tiny), specs)[0] == alone
    other = _run(_core(qwen3_tts_tiny), [sampled("a", 8)])[0]["a"]
    assert other != alone["a"] and alone["a"] != _run(_core(qwen3_tts_tiny), [_spec("a", max_tokens=12)])[0]["a"]


def _stop_at(core: EngineCore, frame: int | None = None) -> None:
    """Make the stop id the talker's favourite (from `frame` on; None: always)."""
    runner = core.runner
    assert isinstance(runner, Qwen3TTSRunner)
    inner, calls = runner.talker.compute_logits, [0]

    def logits(hidden: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        out = inner(hidden)
        if frame is None or calls[0] > frame:
            out[:, runner.eos] = 1e4
        return out

    runner.talker.compute_logits = logits  # type: ignore[method-assign]


def test_the_stop_id_ends_a_stream_after_the_first_frames(qwen3_tts_tiny: Path) -> None:
    core = _core(qwen3_tts_tiny)
    _stop_at(core)
    frames, audio = _run(core, [_spec("a", max_tokens=50)])
    assert len(frames["a"]) == MIN_FRAMES and audio["a"].shape == (MIN_FRAMES * SAMPLES_PER_FRAME,)
    core = _core(qwen3_tts_tiny)
    _stop_at(core, frame=6)
    assert len(_run(core, [_spec("a", max_tokens=50)])[0]["a"]) == 6
    core = _core(qwen3_tts_tiny)
    _stop_at(core)
    assert len(_run(core, [_spec("a", force_tokens=9)])[0]["a"]) == 9  # forced: never stops early


def test_a_cancelled_requests_slot_and_codec_state_go_to_the_next(qwen3_tts_tiny: Path) -> None:
    core = _core(qwen3_tts_tiny, max_running=1)
    runner = core.runner
    assert isinstance(runner, Qwen3TTSRunner)
    _add(core, _spec("a", force_tokens=200))
    waiting = _add(core, _spec("b", max_tokens=10))
    for _ in range(8):
        core.step()
    assert waiting in core.scheduler.waiting and set(runner._codec_slot) == {"a"}
    assert core.cancel("a") and not core.cancel("a")
    _, audio = _run(core, [])
    alone = _run(_core(qwen3_tts_tiny), [_spec("b", max_tokens=10)])[0]["b"]
    assert set(audio) == {"b"} and waiting.slot == 0 and frame_codes(waiting.tokens) == alone
    assert runner._codec_slot == {} and len(runner.codec_slots.free_slots) == runner.codec_slots.num_slots
    assert core.scheduler.kv is not None and core.scheduler.kv.num_free == 1


def test_engine_streams_and_cancel_frees_the_slot(qwen3_tts_tiny: Path) -> None:
    engine, core = Engine(), _core(qwen3_tts_tiny, max_running=1)
    engine.start()
    engine.attach("tiny", core.runner, core).result(timeout=10)
    kv = core.scheduler.kv
    assert kv is not None
    try:
        async def scenario() -> tuple[int, list[AudioChunk]]:
            stream = engine.submit(_spec("gone", force_tokens=300))
            first = await stream.__anext__()
            await stream.aclose()
            later = [chunk async for chunk in engine.submit(_spec("a", max_tokens=9))]  # gets the one slot
            return first.index, later

        index, later = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    finally:
        engine.stop()
    assert index == 0 and later[-1].is_last and [c.index for c in later] == list(range(len(later)))
    _, ref_audio = _reference(qwen3_tts_tiny, TEXTS["a"], 9, voice="ryan")
    np.testing.assert_allclose(np.concatenate([c.pcm for c in later]), ref_audio, atol=2e-5, rtol=0)
    assert kv.num_free == kv.num_slots


def test_prepare_refuses_unknown_voices_and_instructions_a_model_does_not_follow(
        qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    prepare = qwen3_tts.load("tiny", qwen3_tts_tiny, {}, "cpu").spec.prepare
    with pytest.raises(UnknownVoice) as unknown:
        prepare(_spec("a", "nobody"))
    assert unknown.value.field == "voice" and "ryan" in unknown.value.message
    for options, field in (({"top_k": 0}, "options.top_k"), ({"subtalker_temperature": "hot"},
                                                             "options.subtalker_temperature"),
                           ({"language": "klingon"}, "options.language"), ({"instructions": 3}, "instructions")):
        with pytest.raises(InvalidInput) as bad:
            prepare(_spec("a", **options))
        assert bad.value.field == field, options
    small = variant(qwen3_tts_tiny, tmp_path / "small", tts_model_size="0b6")
    base = variant(qwen3_tts_tiny, tmp_path / "base", tts_model_type="base")
    for folder, field in ((small, "instructions"), (base, "instructions")):
        with pytest.raises(InvalidInput, match="does not follow instructions") as refused:
            qwen3_tts.load("tiny", folder, {}, "cpu").spec.prepare(_spec("a", "default" if folder == base else "ryan",
                                                                         instructions="Whisper."))
        assert refused.value.field == field
    with pytest.raises(InvalidInput, match="reference recording") as no_reference:
        qwen3_tts.load("tiny", base, {}, "cpu").spec.prepare(_spec("a", "default"))
    assert no_reference.value.field == "voice"
    prepared = qwen3_tts.load("tiny", small, {}, "cpu").spec.prepare(_spec("a"))  # no instructions: fine
    assert len(prepared.prompt_ids) == prepared.prompt.prefill.shape[0]  # type: ignore[attr-defined]
    with pytest.raises(InputTooLong) as too_long:  # the prompt leaves no position for audio
        _add(_core(qwen3_tts_tiny, max_seq_len=len(prepared.prompt_ids)), _spec("a"))
    assert too_long.value.field == "input" and too_long.value.message.startswith("the prompt takes")
    instructed = qwen3_tts.load("tiny", qwen3_tts_tiny, {}, "cpu").spec.prepare(_spec("a", instructions="Slowly."))
    with pytest.raises(InputTooLong) as too_long:  # the instructions' share said too (found by a new-user trial)
        _add(_core(qwen3_tts_tiny, max_seq_len=len(instructed.prompt_ids)), _spec("a", instructions="Slowly."))
    assert too_long.value.message.startswith("the prompt (the text with its instructions) takes")


def test_frames_pack_into_one_token_and_back() -> None:
    codes = [2047, 0, 5, *range(100, 1400, 100)]
    assert frame_codes([pack_frame(codes)]) == [codes] and pack_frame([0] * 16) == 0
    with pytest.raises(ValueError, match="not a packed frame"):
        frame_codes([STOP])
    assert qwen3_tts.validate_settings({"top_k": 20, "instructions": "Calm.", "seed": 3}) == {
        "top_k": 20, "instructions": "Calm.", "seed": 3}
    with pytest.raises(InvalidInput) as bad:
        qwen3_tts.validate_settings({"top_k": 0})
    assert bad.value.field == "settings.top_k"
    with pytest.raises(InvalidInput) as unknown:
        qwen3_tts.validate_settings({"speaker": "x"})
    assert unknown.value.field == "settings.speaker"
    with pytest.raises(InvalidInput) as language:  # a preset is checked when saved, not when used
        qwen3_tts.validate_settings({"language": "klingon"})
    assert language.value.field == "settings.language" and "english" in language.value.message
    assert qwen3_tts.validate_settings({"language": "English"}) == {"language": "English"}
    # force_tokens: whole frames, at most a KV slot (max_seq_len, default 2048) less the prompt's fixed rows
    assert qwen3_tts.validate_settings({"force_tokens": 2040}) == {"force_tokens": 2040}
    for value, options in ((0, {}), (1.5, {}), (2041, {}), (249, {"max_seq_len": 256})):
        with pytest.raises(InvalidInput) as force:
            qwen3_tts.validate_settings({"force_tokens": value}, options)
        assert force.value.field == "settings.force_tokens", value
        assert f"to {options.get('max_seq_len', 2048) - 8} (the model's max_seq_len" in force.value.message


def test_bfloat16_weights_run_through_the_same_path(qwen3_tts_tiny: Path) -> None:
    """The GPU's dtype (bf16 talker, float32 codec), here on the CPU: valid frames and audio."""
    core = _core(qwen3_tts_tiny, dtype="bfloat16")
    assert core.runner.kv_cache.dtype == torch.bfloat16  # type: ignore[attr-defined]
    specs = [SpeechRequest(rid, "tiny", (TEXTS[rid],), "ryan", options={"seed": 3, "force_tokens": 10}) for rid in "ab"]
    frames, audio = _run(core, specs)
    assert all(len(f) == 10 and max(max(frame) for frame in f) < 2048 for f in frames.values())
    assert all(a.dtype == np.float32 and a.shape == (10 * SAMPLES_PER_FRAME,) and np.isfinite(a).all()
               for a in audio.values())
