"""Reference recordings for a Qwen3-TTS Base model: what a request carries, and a cache of encodings.

A cloning request carries a `ReferenceAudio` in its options (`options["reference"]`): the
recording as PCM16 LE mono at 24 kHz (what gateway/references.py stores), its transcript and
the SHA-256 of the PCM bytes. The family's `prepare` turns it into a `Reference` (codes and
speaker embedding, models/qwen3_tts.py `encode_reference`) through the model's
`ReferenceCache`, so a voice used again is not encoded again: entries are keyed by the audio's
content hash (the transcript is not part of the encoding, only of the prompt), bounded
(least recently used out first) and dropped by `forget` when the voice is deleted, in every
loaded model. No torch here: the gateway builds `ReferenceAudio` and calls `forget`.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

SAMPLE_RATE = 24000
MAX_CACHED = 64  # per model; an entry is ~50 KB for a 30 s reference (375 frames x 16 codes + an x-vector)


@dataclass(frozen=True, slots=True)
class ReferenceAudio:
    """A recording to clone. pcm16: PCM16 LE mono samples at 24 kHz; transcript: what it says
    (None or empty: the x-vector-only mode, no reference codes); sha256: hex of `pcm16`."""

    pcm16: bytes
    transcript: str | None
    sha256: str
    name: str | None = None  # the library voice's name, for logs and errors

    @classmethod
    def from_pcm16(cls, pcm16: bytes, transcript: str | None, name: str | None = None) -> ReferenceAudio:
        return cls(pcm16, transcript, hashlib.sha256(pcm16).hexdigest(), name)

    @property
    def num_samples(self) -> int:
        return len(self.pcm16) // 2

    def samples(self) -> Any:
        """float32 numpy `[num_samples]` in [-1, 1) (x / 32768, as soundfile reads PCM16)."""
        import numpy as np

        return np.frombuffer(self.pcm16[: 2 * self.num_samples], dtype="<i2").astype(np.float32) / 32768.0


class ReferenceCache:
    """sha256 -> the encoding of that audio (whatever `encode` returned), at most `max_entries`."""

    def __init__(self, max_entries: int = MAX_CACHED) -> None:
        assert max_entries >= 1
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # requests are prepared on a small thread pool
        self.hits = self.misses = 0
        _CACHES.add(self)

    def get(self, sha256: str, encode: Callable[[], Any]) -> Any:
        """The cached encoding of `sha256`, or `encode()`'s (then kept). Two threads missing the
        same key at once may both encode; the result is the same, one is kept."""
        with self._lock:
            if sha256 in self._entries:
                self._entries.move_to_end(sha256)
                self.hits += 1
                return self._entries[sha256]
            self.misses += 1
        value = encode()  # outside the lock: encoding a long clip takes a while on a CPU
        with self._lock:
            self._entries[sha256] = value
            self._entries.move_to_end(sha256)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def forget(self, sha256: str) -> bool:
        with self._lock:
            return self._entries.pop(sha256, None) is not None

    def __contains__(self, sha256: object) -> bool:
        with self._lock:
            return sha256 in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


_CACHES: weakref.WeakSet[ReferenceCache] = weakref.WeakSet()  # those of the loaded models


def forget(sha256: str) -> int:
    """Drop the encoding of `sha256` from every loaded model's cache; how many held it."""
    return sum(cache.forget(sha256) for cache in list(_CACHES))


def caches() -> list[ReferenceCache]:
    """The caches of the loaded models (for tests and metrics)."""
    return list(_CACHES)
