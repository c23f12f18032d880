"""Qwen3-TTS prompts: text, speaker, instructions and a reference recording -> talker inputs.

Learned from qwen-tts (`inference/qwen3_tts_model.py` builds the chat strings,
`Qwen3TTSForConditionalGeneration.generate` the embeddings; read for the format, checked by
tests/models/test_qwen3_tts_parity.py). Every talker input row is a text-side embedding
(text ids through `text_embedding` + `text_projection`) plus a codec-side one:

    [instruct]   user turn "<|im_start|>user\\n{instructions}<|im_end|>\\n", text only
    role         "<|im_start|>assistant\\n" (the first 3 ids of the assistant string), text only
    codec tags   tts_pad x (L - 2), tts_bos  +  [think | nothink, think_bos, (language), think_eos,
                 (speaker), pad]   (language only when one is given; speaker: a CustomVoice id's
                 embedding or a reference x-vector)
    then either  the first text token + codec bos, the rest of the text fed one token per
                 generated frame, then tts_eos, then tts_pad ("streaming text"), or all text
                 tokens + tts_eos over codec pad, then tts_pad + codec bos ("whole text");
    or (clone)   reference text + text + tts_eos over codec bos + the reference frames' summed
                 codebook embeddings, overlapped as far as both reach, the longer one's rest
                 fed per frame (streaming text) or laid out one after the other (whole text).

CustomVoice and VoiceDesign default to whole text, cloning to streaming text, as qwen-tts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from models.qwen3_tts_args import Args

# Qwen2's pre-tokenizer split (a format constant of the tokenizer, as Hugging Face's converter writes it)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
ROLE_TOKENS = 3  # "<|im_start|>", "assistant", "\n"
TAIL_TOKENS = 5  # "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def reference_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instructions: str) -> str:
    return f"<|im_start|>user\n{instructions}<|im_end|>\n"


def load_text_tokenizer(folder: Path) -> Any:
    """The Qwen2 BPE tokenizer of a model folder (`tokenizers.Tokenizer`): `tokenizer.json`
    if present, else `vocab.json` + `merges.txt` with the added tokens of `tokenizer_config.json`
    (their ids must follow the vocabulary without gaps; ValueError if they do not)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for token_id, token in sorted(config.get("added_tokens_decoder", {}).items(), key=lambda kv: int(kv[0])):
        added = AddedToken(token["content"], special=token.get("special", True), normalized=False)
        tokenizer.add_special_tokens([added]) if token.get("special", True) else tokenizer.add_tokens([added])
        if tokenizer.token_to_id(token["content"]) != int(token_id):
            raise ValueError(f"{folder}: added token {token['content']!r} must have id {token_id}")
    return tokenizer


@dataclass(frozen=True, slots=True)
class Reference:
    """A recording to clone (Base models): its transcript, its 12 Hz codes int64 `[T, 16]`
    (the speech tokenizer's encoder) and its speaker embedding `[hidden]` (the x-vector of
    the speaker encoder). `codes=None` clones from the x-vector alone."""

    text: str
    codes: torch.Tensor | None
    speaker_embedding: torch.Tensor


@dataclass(frozen=True, slots=True)
class Prompt:
    """Talker inputs of one request (model dtype, on the talker's device).

    prefill: `[T, hidden]`, the prompt rows; trailing: `[N, hidden]`, text rows added to the
    inputs of generated frames 0..N-1; pad: `[hidden]`, added to every later frame's input.
    """

    prefill: torch.Tensor
    trailing: torch.Tensor
    pad: torch.Tensor

    def text_row(self, step: int) -> torch.Tensor:
        """What generated frame `step`'s input adds to its summed codec embedding."""
        return self.trailing[step] if step < self.trailing.shape[0] else self.pad


def _ids(tokenizer: Any, text: str, device: torch.device) -> torch.Tensor:
    return torch.tensor(tokenizer.encode(text, add_special_tokens=False).ids, dtype=torch.int64, device=device)


@torch.inference_mode()
def build_prompt(talker: Any, tokenizer: Any, text: str, speaker: str | None = None, language: str = "auto",
                 instructions: str | None = None, reference: Reference | None = None,
                 stream_text: bool | None = None) -> Prompt:
    """The talker inputs for `text` (see the module docstring).

    talker: models.qwen3_tts_talker.Talker; speaker: a CustomVoice speaker name (any case) or
    None; language: "auto" or a key of `codec_language_id`; stream_text: None = qwen-tts's
    default (True when cloning). Raises ValueError for an unknown speaker or language.
    """
    args: Args = talker.args
    device = talker.codec_head.weight.device
    stream = reference is not None if stream_text is None else stream_text
    ids = _ids(tokenizer, assistant_text(text), device)
    text_ids = ids[ROLE_TOKENS:-TAIL_TOKENS]
    bos, eos, pad = talker.embed_text(torch.tensor(
        [args.tts_bos_token_id, args.tts_eos_token_id, args.tts_pad_token_id], device=device))

    def codec(*codec_ids: int) -> torch.Tensor:
        return talker.embed_codec(torch.tensor(codec_ids, dtype=torch.int64, device=device))

    language_id = None
    if language.lower() != "auto":
        if language.lower() not in args.codec_language_id:
            raise ValueError(f"unknown language {language!r}; one of auto, {', '.join(args.codec_language_id)}")
        language_id = args.codec_language_id[language.lower()]
    speaker_row = None
    if reference is not None:
        speaker_row = reference.speaker_embedding.to(device=device, dtype=bos.dtype)
    elif speaker:
        name = speaker.lower()
        if name not in args.spk_id:
            raise ValueError(f"unknown speaker {speaker!r}; one of {', '.join(args.spk_id)}")
        speaker_row = codec(args.spk_id[name])[0]
        dialect = args.spk_is_dialect.get(name, False)
        if language.lower() in ("chinese", "auto") and dialect:
            language_id = args.codec_language_id[str(dialect)]

    tags = ([args.codec_nothink_id, args.codec_think_bos_id, args.codec_think_eos_id] if language_id is None else
            [args.codec_think_id, args.codec_think_bos_id, language_id, args.codec_think_eos_id])
    codec_rows = [codec(*tags)] + ([speaker_row[None]] if speaker_row is not None else [])
    codec_rows.append(codec(args.codec_pad_id, args.codec_bos_id))
    codec_part = torch.cat(codec_rows)  # ends with codec bos
    text_part = torch.cat([pad[None].expand(codec_part.shape[0] - 2, -1), bos[None]])
    rows = [talker.embed_text(ids[:ROLE_TOKENS]), text_part + codec_part[:-1]]
    if instructions:
        rows.insert(0, talker.embed_text(_ids(tokenizer, instruct_text(instructions), device)))
    trailing = pad.new_zeros(0, pad.shape[0])

    if reference is not None and reference.codes is not None:
        ref_ids = _ids(tokenizer, reference_text(reference.text), device)[ROLE_TOKENS:-2]
        texts = torch.cat([talker.embed_text(torch.cat([ref_ids, text_ids])), eos[None]])
        codes = reference.codes.to(device)
        frames = torch.cat([codec(args.codec_bos_id), talker.embed_frame(codes)])
        if not stream:
            rows += [texts + codec(args.codec_pad_id), frames + pad]
        elif texts.shape[0] > frames.shape[0]:
            rows.append(texts[:frames.shape[0]] + frames)
            trailing = texts[frames.shape[0]:]
        else:
            rows.append(torch.cat([texts, pad[None].expand(frames.shape[0] - texts.shape[0], -1)]) + frames)
    elif stream:
        rows.append(talker.embed_text(text_ids[:1]) + codec_part[-1:])
        trailing = torch.cat([talker.embed_text(text_ids[1:]), eos[None]])
    else:
        rows += [torch.cat([talker.embed_text(text_ids), eos[None]]) + codec(args.codec_pad_id),
                 pad[None] + codec_part[-1:]]
    return Prompt(torch.cat(rows), trailing, pad)
