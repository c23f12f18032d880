"""espeak-ng, piper's phonemizer, in a child process: a text that crashes it fails its own request, not the server.

Why: piper-tts calls espeak-ng through a C extension (`piper.espeakbridge`) inside the calling process, and
espeak-ng overflows fixed word buffers on some inputs (runs of letters and dots, "é ." repeated, long words
of letters and marks: models/piper_units.py `espeak_safe` rewrites the ones found). A SIGSEGV there ended the
whole server, every stream with it. `ProcessPhonemizer` stands in for piper's module-level espeak phonemizer
(`piper.voice._ESPEAK_PHONEMIZER`, which `PiperVoice.phonemize` uses under its own lock, piper-tts 1.8): each
call goes to a child Python that runs piper's `EspeakPhonemizer` and answers one JSON line. If the child
dies (or takes longer than `timeout_s`), the call raises InvalidInput naming the text, and the next call
starts a new child (~0.2 s). A round trip costs ~0.1 ms beside espeak's own time (milliseconds a unit).
"""

from __future__ import annotations

import atexit
import json
import logging
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterable

from engine.types import InvalidInput

log = logging.getLogger(__name__)

# The child: piper's own EspeakPhonemizer, one JSON request a line ([voice, text, clusters]) and one JSON
# answer a line ({"phonemes": [[...], ...]} or {"error": "..."} for a Python exception).
CHILD = r"""
import json, sys
from piper.phonemize_espeak import EspeakPhonemizer
phonemizer = EspeakPhonemizer(sys.argv[1])
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    voice, text, clusters = json.loads(line)
    try:
        clusters = {tuple(c) for c in clusters} if clusters else None
        answer = {"phonemes": phonemizer.phonemize(voice, text, vowel_clusters=clusters)}
    except Exception as error:
        answer = {"error": f"{type(error).__name__}: {error}"}
    sys.stdout.write(json.dumps(answer) + "\n"); sys.stdout.flush()
"""
TIMEOUT_S = 10.0  # one text's phonemes (espeak takes milliseconds; a hang is a failure)
START_TIMEOUT_S = 60.0  # the child's start (Python, piper's import, espeak's data)


class ProcessPhonemizer:
    """piper's `EspeakPhonemizer.phonemize` run in a child process (module docstring). Thread-safe.

    `espeak_data_dir`: espeak-ng's data (piper's `ESPEAK_DATA_DIR`); `child_code` and `timeout_s` are for
    tests. `num_crashes` counts the children that died under a text.
    """

    def __init__(self, espeak_data_dir: str | Path, child_code: str = CHILD, timeout_s: float = TIMEOUT_S) -> None:
        self.espeak_data_dir, self.child_code, self.timeout_s = str(espeak_data_dir), child_code, timeout_s
        self._child: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self.num_crashes = 0

    def phonemize(self, voice: str, text: str,
                  vowel_clusters: Iterable[tuple[str, ...]] | None = None) -> list[list[str]]:
        """Phonemes (one str each, NFD code points) a sentence, as piper's `EspeakPhonemizer.phonemize`.
        Raises InvalidInput (field "input") when espeak-ng crashes or hangs on `text`."""
        request = json.dumps([voice, text, [list(c) for c in vowel_clusters] if vowel_clusters else None])
        with self._lock:
            child = self._child or self._start()
            try:
                assert child.stdin is not None
                child.stdin.write(request + "\n")
                child.stdin.flush()
                line = self._read_line(child, self.timeout_s)
            except (OSError, ValueError):  # (a broken pipe: it died before reading)
                line = ""
            if not line:
                self._stop()
                self.num_crashes += 1
                shown = text if len(text) <= 80 else text[:77] + "..."
                log.warning("espeak-ng crashed or hung on a text (%d characters: %r); its request fails, a new "
                            "phonemizer process starts", len(text), shown)
                raise InvalidInput(f"this text could not be read: espeak-ng, the voice's phonemizer, failed on "
                                   f"{shown!r}; rephrase it (long runs of letters and dots, or very long words, "
                                   "can do this)", field="input")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"espeak-ng phonemizer: {answer['error']}")
        return [list(sentence) for sentence in answer["phonemes"]]

    def start(self) -> None:
        """Start the child now (a model's load), not at the first text."""
        with self._lock:
            if self._child is None:
                self._start()

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self) -> subprocess.Popen[str]:
        child = subprocess.Popen([sys.executable, "-c", self.child_code, self.espeak_data_dir], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1)
        if self._read_line(child, START_TIMEOUT_S) != "ready\n":
            child.kill()
            child.wait()
            raise RuntimeError("the espeak-ng phonemizer process did not start (piper-tts missing?)")
        self._child = child
        return child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()

    @staticmethod
    def _read_line(child: subprocess.Popen[str], timeout_s: float) -> str:
        """A line from the child within `timeout_s` ("" when it ended or timed out)."""
        assert child.stdout is not None
        if sys.platform != "win32":  # (select takes no pipes on Windows: no time bound there)
            ready, _, _ = select.select([child.stdout], [], [], timeout_s)
            if not ready:
                return ""
        return child.stdout.readline()


_shared: ProcessPhonemizer | None = None
_shared_lock = threading.Lock()


def install(espeak_data_dir: str | Path) -> ProcessPhonemizer | None:
    """Make piper's voices phonemize through one shared ProcessPhonemizer (started now); returns it, or None
    (and piper phonemizes in this process, as before) where this piper-tts has no `_ESPEAK_PHONEMIZER`."""
    global _shared
    import piper.voice

    if not hasattr(piper.voice, "_ESPEAK_PHONEMIZER"):
        log.warning("piper-tts %s has no piper.voice._ESPEAK_PHONEMIZER: espeak-ng runs in the server's process, "
                    "where a text that crashes it ends the server", getattr(piper, "__version__", "?"))
        return None
    with _shared_lock:
        if _shared is None:
            _shared = ProcessPhonemizer(espeak_data_dir)
            atexit.register(_shared.close)
        phonemizer: Any = _shared
        piper.voice._ESPEAK_PHONEMIZER = phonemizer
    _shared.start()
    return _shared
