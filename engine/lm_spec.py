"""What a speech-LM family tells the engine (no torch: plain data and callables that the
family module builds in `load`, e.g. models/orpheus.py `make_spec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from engine.chunk_plan import ChunkShape
from engine.request import Prepared
from engine.types import SpeechRequest


@dataclass(frozen=True, slots=True)
class LMSpec:
    """A speech LM's prompt, tokens and defaults, as the scheduler and runner need them.

    `prepare(spec)` validates a request (voice, text, options) and tokenises its prompt;
    raises UnknownVoice, InvalidInput or InputTooLong. `frame_codes(tokens)` maps one
    frame's `tokens_per_frame` tokens to codec codes; ValueError if a token is not an
    audio token of its position. Audio token ids: `audio_token_base + codebook_size * k +
    code` at frame position k.
    """

    family: str
    voices: tuple[str, ...]  # default first
    prepare: Callable[[SpeechRequest], Prepared]
    frame_codes: Callable[[Sequence[int]], list[int]]
    stop_token_ids: tuple[int, ...]
    tokens_per_frame: int
    audio_token_base: int
    codebook_size: int
    shape: ChunkShape
    temperature: float
    top_p: float
    repetition_penalty: float
    max_tokens: int
    max_text_chars: int = 0  # longest text one request may carry (0: no limit of its own)
