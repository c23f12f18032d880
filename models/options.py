"""A speech-LM request's sampling options, validated before it is queued (no torch).

Family modules call `parse_options` in their `prepare`; the engine only reads the
resulting `engine.request.Sampling`.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Sequence

from engine.lm_spec import LMSpec
from engine.request import Sampling
from engine.types import InputTooLong, InvalidInput, SpeechRequest, UnknownVoice

_CHECKS: dict[str, tuple[type, Callable[[Any], bool], str]] = {
    "temperature": (float, lambda v: 0 <= v <= 5, "between 0 and 5"),
    "top_p": (float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "repetition_penalty": (float, lambda v: 0 < v <= 5, "in (0, 5]"),
    "max_tokens": (int, lambda v: v >= 1, ">= 1"),
    "seed": (int, lambda v: 0 <= v < 2**62, "in [0, 2**62)"),
}


def force_tokens_limit(max_seq_len: int, fixed_prompt: int) -> tuple[int, str]:
    """The most `force_tokens` a model's KV slot can hold, and why, for `parse_options`:
    `max_seq_len` positions less the `fixed_prompt` tokens every prompt has (a request's
    text takes more, and its audio ends where the slot does)."""
    return max_seq_len - fixed_prompt, (f"the model's max_seq_len, {max_seq_len} positions, less the prompt's "
                                        f"{fixed_prompt} fixed tokens")


def parse_options(spec: LMSpec, options: Mapping[str, Any], limit: tuple[int, str] | None = None) -> Sampling:
    """Sampling settings from a request's `options` over the family defaults; raises InvalidInput.

    Keys: temperature, top_p, repetition_penalty, max_tokens, seed (default: random),
    force_tokens (see `Sampling`). Unknown keys are ignored. Numbers must be JSON numbers,
    integers where they count (700.5 and "700" are refused, not rounded). force_tokens is at
    least one frame's tokens (less makes no audio: engine/chunk_plan.py emits whole frames)
    and, with `limit` (`force_tokens_limit`, a preset's check), at most what the model holds.
    """
    out: dict[str, Any] = {"temperature": spec.temperature, "top_p": spec.top_p,
                           "repetition_penalty": spec.repetition_penalty, "max_tokens": spec.max_tokens,
                           "force_tokens": 0, "seed": None}
    low = spec.tokens_per_frame
    frame = f"one audio frame{f' of {low} tokens' if low > 1 else ''}, the least a chunk of audio holds"
    force_rule = f"from {low} ({frame}) to {limit[0]} ({limit[1]})" if limit else f">= {low} ({frame})"
    checks = {**_CHECKS, "force_tokens": (int, lambda v: low <= v <= (limit[0] if limit else v), force_rule)}
    for name, (kind, ok, rule) in checks.items():
        value = options.get(name)
        if value is None:
            continue
        what = "an integer" if kind is int else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                kind is int and not float(value).is_integer()):
            raise InvalidInput(f"options.{name} must be {what} {rule}, got {value!r}", field=f"options.{name}")
        if not ok(value):
            raise InvalidInput(f"options.{name} must be {what} {rule}, got {value!r}", field=f"options.{name}")
        out[name] = kind(value)
    if out["seed"] is None:
        out["seed"] = random.randrange(2**62)
    return Sampling(**out)


def check_request(request: SpeechRequest, voices: Sequence[str], max_chars: int) -> None:
    """What every speech-LM family's `prepare` checks first: a known voice (UnknownVoice, field
    `voice`), something to speak and at most `max_chars` characters (InvalidInput, InputTooLong,
    field `input`)."""
    if request.voice not in voices:
        raise UnknownVoice(f"model {request.model_id!r} has no voice {request.voice!r}; "
                           f"voices: {', '.join(voices)}", field="voice")
    if not request.text.strip():
        raise InvalidInput("nothing to speak", field="input")
    if len(request.text) > max_chars:
        raise InputTooLong(f"input has {len(request.text)} characters; the limit is {max_chars}", field="input")
