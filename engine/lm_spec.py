"""What a speech-LM family tells the engine (no torch: plain data and callables that the
family module builds in `load`, e.g. models/orpheus.py `make_spec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from engine.chunk_plan import ChunkShape, Window
from engine.request import Prepared, Request
from engine.types import GenerationFailed, SpeechRequest


@dataclass(frozen=True, slots=True)
class LMSpec:
    """A speech LM's prompt, tokens and defaults, as the scheduler and runner need them."""

    family: str
    voices: tuple[str, ...]  # default first
    prepare: Callable[[SpeechRequest], Prepared]  # validates, tokenises: UnknownVoice, InvalidInput, InputTooLong
    frame_codes: Callable[[Sequence[int]], list[list[int]]]  # whole frames' tokens -> their codes; ValueError
    stop_token_ids: tuple[int, ...]
    tokens_per_frame: int
    audio_token_base: int  # the audio token of code c at frame position k: audio_token_base + codebook_size * k + c
    codebook_size: int
    shape: ChunkShape
    temperature: float
    top_p: float
    repetition_penalty: float
    max_tokens: int
    max_text_chars: int = 0  # longest text one request may carry (0: no limit of its own)


def window_codes(spec: LMSpec, request: Request, window: Window) -> list[list[int]]:
    """`window`'s frames' codes from `request.tokens` (codec time); GenerationFailed: not audio."""
    start, stop = spec.tokens_per_frame * window.start, spec.tokens_per_frame * window.stop
    try:
        return spec.frame_codes(request.tokens[start:stop])
    except ValueError as error:
        raise GenerationFailed(f"generated tokens {start}..{stop - 1}: {error}") from None
