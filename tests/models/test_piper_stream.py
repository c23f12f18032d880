"""The embedded voice as prior + decoder: a streamed opening is the whole decode's start (models/piper_stream.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.types import SpeechRequest
from models import InvalidModel
from models.piper import CALIBRATION_RMS, CALIBRATION_TEXT, PiperSynthesizer, load
from models.piper_stream import HEAD_CONTEXT_FRAMES, HEAD_SAFETY, SplitSession, split_model

PCM16_STEP = 1.0 / 32768  # one step of 16-bit PCM: the bound for "the same audio"
TEXT = "But then the picture was gone as quickly as it came, and the room was dark again."


@pytest.fixture(scope="module")
def synth() -> Iterator[PiperSynthesizer]:
    synthesizer = load("piper-joe", None, {"workers": 1}).synthesizers[0]
    assert isinstance(synthesizer, PiperSynthesizer)
    yield synthesizer
    synthesizer.close()


def _request(text: str = TEXT) -> SpeechRequest:  # noise off: the same audio every run
    return SpeechRequest("r", "piper-joe", (text,), "default", options={"noise_scale": 0.0, "noise_w_scale": 0.0})


def _session(synth: PiperSynthesizer) -> SplitSession:
    session = synth._voice.session
    assert isinstance(session, SplitSession)
    return session


def test_opening_and_rest_are_the_whole_unit_and_its_words_move_with_it(synth: PiperSynthesizer) -> None:
    assert synth.streams
    whole, words = synth.synthesize(TEXT, _request(), pause=False)
    openings: list[np.ndarray] = []
    session = _session(synth)
    session.decode_ms = 0.05 * session.frame_ms  # a fast decoder: a loaded machine's would make the opening the whole unit
    rest, rest_words = synth.synthesize(TEXT, _request(), pause=False, first=True, head=openings.append)
    (opening,) = openings
    assert opening.dtype == np.float32 and rest.dtype == np.float32
    hop = int(synth._voice.config.hop_length)
    assert len(opening) >= session.head_frames * hop and len(opening) % hop == 0
    assert len(opening) + len(rest) == len(whole)
    assert np.abs(np.concatenate([opening, rest]) - whole).max() < PCM16_STEP
    shift_ms = 1000.0 * len(opening) / synth.sample_rate
    assert [w.word for w in rest_words] == [w.word for w in words] == TEXT.split()
    for moved, kept in zip(rest_words, words):
        assert moved.start_ms == pytest.approx(kept.start_ms - shift_ms)
    assert rest_words[0].start_ms < 0 < rest_words[-1].start_ms  # the opening's words start before the rest


def test_a_unit_too_short_for_an_opening_is_returned_whole(synth: PiperSynthesizer) -> None:
    openings: list[np.ndarray] = []
    pcm, _ = synth.synthesize("Yes.", _request("Yes."), pause=False, first=True, head=openings.append)
    assert openings == [] and len(pcm) > 0
    assert _session(synth).head is None  # disarmed for the next unit


def test_the_opening_grows_where_the_rest_could_not_be_decoded_while_it_plays(synth: PiperSynthesizer) -> None:
    session = _session(synth)
    assert session.decode_ms > 0  # measured at load (the calibration text)
    session.decode_ms = 0.1 * session.frame_ms  # fixed: how far the opening grows depends on the machine's load
    frames_short, frames_long = 4 * session.head_frames, 4000
    assert session.opening_frames(frames_short) == session.head_frames
    count = session.opening_frames(frames_long)
    assert count > session.head_frames
    rest_ms = (frames_long - count + HEAD_CONTEXT_FRAMES) * session.decode_ms
    assert rest_ms <= HEAD_SAFETY * count * session.frame_ms + session.decode_ms
    assert session.opening_frames(2 * session.head_frames + HEAD_CONTEXT_FRAMES - 1) == 0  # no rest worth a call


def test_every_unit_is_scaled_by_the_voice_gain_measured_at_load(synth: PiperSynthesizer) -> None:
    pcm, _ = synth.synthesize(CALIBRATION_TEXT, _request(CALIBRATION_TEXT), pause=False)
    rms = math.sqrt(float(np.mean(np.square(pcm, dtype=np.float64))))
    assert rms == pytest.approx(CALIBRATION_RMS, rel=0.02)
    assert 0.5 < synth.gain < 3.0


def test_head_ms_zero_runs_each_unit_whole_at_its_own_peak() -> None:
    synthesizer = load("piper-joe", None, {"workers": 1, "head_ms": 0}).synthesizers[0]
    assert isinstance(synthesizer, PiperSynthesizer) and not synthesizer.streams
    openings: list[np.ndarray] = []
    pcm, _ = synthesizer.synthesize(TEXT, _request(), pause=False, first=True, head=openings.append)
    assert openings == [] and float(np.abs(pcm).max()) == pytest.approx(1.0, abs=1e-6)  # piper's normalisation


@pytest.mark.parametrize("value", [-1, 2.5, "long", True])
def test_a_bad_head_ms_is_refused_naming_it(value: object) -> None:
    with pytest.raises(InvalidModel) as caught:
        load("piper-joe", None, {"workers": 1, "head_ms": value})
    assert caught.value.field == "head_ms"


def test_a_graph_without_the_vits_decoder_is_not_split(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "plain",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert split_model(str(path)) is None
    assert split_model(b"not an onnx graph") is None
