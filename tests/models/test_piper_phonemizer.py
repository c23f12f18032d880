"""espeak-ng in a child process (models/piper_phonemizer.py): a text that crashes it fails its own request
with InvalidInput, and the server (this test process) and the next texts go on. The crashing texts are raw
units, as they reach the voice: "a." x 150 segfaulted espeak-ng inside the server before."""

from __future__ import annotations

import os

import pytest

from engine.plan import CodecItem
from engine.request import Prepared, Request
from engine.runner import SynthRunner
from engine.types import ChunkOut, InvalidInput, SpeechRequest
from models import piper_phonemizer
from models.piper import load
from models.piper_phonemizer import ProcessPhonemizer

# espeak-ng's overflow crashes it or not by the memory around it: "a." x 150 did 4 times in 6 fresh processes,
# x 3000 16 in 16 (a process that survived one may go on with its memory overwritten) (models/piper_units.py espeak_safe rewrites such runs before a unit is made).
CRASHES_ESPEAK = "a." * 3000
# piper's child, which dies by SIGSEGV on the text "die" and hangs on "hang"
DYING_CHILD = piper_phonemizer.CHILD.replace(
    "    try:\n", "    if text == 'die':\n        import os; os.kill(os.getpid(), 11)\n"
    "    if text == 'hang':\n        import time; time.sleep(60)\n    try:\n", 1)


@pytest.fixture(scope="module")
def runner() -> SynthRunner:
    return SynthRunner("piper-joe", load("piper-joe", None, {"workers": 1}), max_running=4)


def _unit(runner: SynthRunner, text: str) -> ChunkOut:
    """The ChunkOut of one unit `text` (as it reaches the voice, past `prepare`), as the codec lane runs it."""
    spec = SpeechRequest("r", "piper-joe", (text,), "default")
    request = Request.create(spec, Prepared(units=(text,), sentence_ends=(True,)), runner.spec.shape)
    window = request.plan.next_window()
    assert window is not None
    (out,) = runner.decode_codec([CodecItem(request, window)])
    return out


def test_a_voice_phonemizes_in_a_child_and_a_crash_fails_only_its_text(runner: SynthRunner) -> None:
    import piper.voice

    shared = piper.voice._ESPEAK_PHONEMIZER
    assert isinstance(shared, ProcessPhonemizer)  # installed by the voice's load
    voice = runner.synthesizers[0]._voice  # type: ignore[attr-defined]
    before = voice.phonemize("Hello there.")
    crashes, raised = shared.num_crashes, []
    for _ in range(5):
        shared.close()  # a new child's first text, as in the fresh processes counted above
        try:
            voice.phonemize(CRASHES_ESPEAK)
        except InvalidInput as error:
            raised.append(error)
            break
    assert raised and raised[0].field == "input" and "espeak-ng" in raised[0].message
    assert shared.num_crashes == crashes + 1
    assert voice.phonemize("Hello there.") == before  # a new child answers the next text
    assert os.getpid()  # (this process is alive: before, the segfault ended the test run)


def test_the_engine_gets_invalid_input_for_that_unit(runner: SynthRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import piper.voice

    phonemizer = ProcessPhonemizer(_data_dir(), child_code=DYING_CHILD)  # (a crash every time, not by chance)
    monkeypatch.setattr(piper.voice, "_ESPEAK_PHONEMIZER", phonemizer)
    try:
        out = _unit(runner, "die")
        assert out.pcm is None and isinstance(out.error, InvalidInput)  # (not GenerationFailed: a 500)
        assert _unit(runner, "Fine again.").error is None
    finally:
        phonemizer.close()


def test_a_child_that_dies_or_hangs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    phonemizer = ProcessPhonemizer(_data_dir(), child_code=DYING_CHILD, timeout_s=1.0)
    try:
        good = phonemizer.phonemize("en-us", "one")
        for bad in ("die", "hang"):
            with pytest.raises(InvalidInput):
                phonemizer.phonemize("en-us", bad)
            assert phonemizer.phonemize("en-us", "one") == good
        assert phonemizer.num_crashes == 2
    finally:
        phonemizer.close()


def _data_dir() -> str:
    from piper.voice import ESPEAK_DATA_DIR
    return str(ESPEAK_DATA_DIR)
