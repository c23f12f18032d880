"""Random checkpoints in the exact on-disk format a family loads (for tests and benchmarks).

`write_random("qwen3_tts", ...)` goes to models/qwen3_tts_checkpoint.py (a Hugging Face
Qwen3-TTS folder with its speech_tokenizer/); the rest of this file is Orpheus'.

`write_random("orpheus", "tiny" | "full", out_dir)` writes
- `out_dir/backbone/`: Hugging Face Llama folder: `config.json`, weights as
  `model.safetensors` (tiny, float32) or bf16 shards of <= 2 GiB with
  `model.safetensors.index.json` (full, ~6.6 GB), and a `tokenizer.json`;
- `out_dir/codec/`: SNAC folder: `config.json` + `pytorch_model.bin`.

The tokenizer (built with `tokenizers`) has the full 156940-id vocabulary: byte-level
BPE pieces for text at ids 0..255 (no merges, so text maps to one id per byte), unused
fillers up to 127999, the Llama-3 specials at 128000..128255 and `<custom_token_N>` at
128256 + N, so every Orpheus special and audio token sits at its real id.
Weights are seeded: the same (size, seed) always writes the same files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import torch

from models import orpheus
from models.llama import LlamaLM

SHARD_BYTES = 2 << 30
# SNAC 24 kHz architecture (hubertsiuzdak/snac_24khz config.json); tiny shrinks the widths only,
# so frames, hop and context are those of the real codec.
SNAC_CONFIGS = {
    "full": {"sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8], "decoder_dim": 1024,
             "decoder_rates": [8, 8, 4, 2], "attn_window_size": None, "codebook_size": 4096, "codebook_dim": 8,
             "vq_strides": [4, 2, 1], "noise": True, "depthwise": True},
}
SNAC_CONFIGS["tiny"] = {**SNAC_CONFIGS["full"], "encoder_dim": 8, "decoder_dim": 64}

_LLAMA_SPECIALS = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128006: "<|start_header_id|>",
                   128007: "<|end_header_id|>", 128008: "<|eom_id|>", 128009: "<|eot_id|>"}


def build_tokenizer() -> "tokenizers.Tokenizer":  # type: ignore[name-defined]  # noqa: F821
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {piece: i for i, piece in enumerate(sorted(alphabet))}
    assert len(vocab) == 256
    vocab.update({f"<|filler_{i}|>": i for i in range(256, orpheus.BEGIN_OF_TEXT)})
    specials = [_LLAMA_SPECIALS.get(i, f"<|reserved_special_token_{i - 128000}|>")
                for i in range(orpheus.BEGIN_OF_TEXT, orpheus.LLAMA_VOCAB)]
    specials += [f"<custom_token_{n}>" for n in range(orpheus.VOCAB_SIZE - orpheus.LLAMA_VOCAB)]
    vocab.update({token: orpheus.BEGIN_OF_TEXT + i for i, token in enumerate(specials)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    assert tokenizer.get_vocab_size() == orpheus.VOCAB_SIZE
    return tokenizer


def _random_backbone(args: orpheus.Args, generator: torch.Generator, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) in checkpoint order, one at a time (a 3B model never sits in memory whole)."""
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in LlamaLM(args).state_dict().items()}
    if args.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            yield name, torch.ones(shape, dtype=dtype)
        else:  # std 1/sqrt(fan_in): activations stay O(1), logits spread (no near-ties)
            std = 1.0 if "embed_tokens" in name else shape[-1] ** -0.5
            yield name, (torch.randn(shape, generator=generator) * std).to(dtype)


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """`safetensors.torch.save_file` to `path`, then the file's mode set as `open()` would set it
    (0o666 less the process umask: safetensors creates it 0o600, which another user running the
    server, or a container, could not read)."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})
    umask = os.umask(0o022)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def _save_shards(tensors: Iterator[tuple[str, torch.Tensor]], folder: Path) -> None:
    """One `model.safetensors`, or shards of <= SHARD_BYTES plus `model.safetensors.index.json`."""
    shards: list[list[str]] = []
    current: dict[str, torch.Tensor] = {}
    size = total = 0
    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > SHARD_BYTES:
            shards.append(list(current))
            save_safetensors(current, folder / f"shard-{len(shards)}.tmp")
            current, size = {}, 0
        current[name] = tensor
        size += nbytes
        total += nbytes
    if not shards:
        save_safetensors(current, folder / "model.safetensors")
        return
    shards.append(list(current))
    save_safetensors(current, folder / f"shard-{len(shards)}.tmp")
    weight_map = {}
    for i, names in enumerate(shards):
        final = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        (folder / f"shard-{i + 1}.tmp").rename(folder / final)
        weight_map.update({k: final for k in names})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))


def write_random(family: str, size: str, out_dir: Path, seed: int = 0, weights: bool = True,
                 model_type: str | None = None) -> Path:
    """Write a random `family` checkpoint of flavor `size` under `out_dir`; returns `out_dir`.
    `weights=False` (orpheus) leaves out the backbone's weights: a folder that loads with the
    model option `random_weights` (GPU benchmarks without writing 6.6 GB). `model_type`:
    qwen3_tts's (custom_voice by default, voice_design, base). Raises ValueError for another
    family, an unknown size, or a `model_type` given for orpheus."""
    if family == "qwen3_tts":  # its own layout: models/qwen3_tts_checkpoint.py
        from models import qwen3_tts_checkpoint

        return qwen3_tts_checkpoint.write_random(size, out_dir, seed, model_type or "custom_voice")
    if model_type is not None:
        raise ValueError(f"--type is for qwen3_tts checkpoints; {family} has one model type")
    if family != "orpheus":
        raise ValueError(f"no random checkpoints for family {family!r}")
    if size not in orpheus.FLAVORS:
        raise ValueError(f"size must be one of {', '.join(orpheus.FLAVORS)}, got {size!r}")
    from models.snac import snac_class

    out_dir = Path(out_dir)
    backbone, codec = out_dir / "backbone", out_dir / "codec"
    backbone.mkdir(parents=True, exist_ok=True)
    codec.mkdir(parents=True, exist_ok=True)
    args = orpheus.FLAVORS[size]
    dtype = torch.float32 if size == "tiny" else torch.bfloat16
    config = {**args.to_hf(bos_token_id=orpheus.BEGIN_OF_TEXT, eos_token_id=orpheus.END_OF_SPEECH,
                           pad_token_id=orpheus.PAD_TOKEN), "torch_dtype": str(dtype).removeprefix("torch.")}
    (backbone / "config.json").write_text(json.dumps(config, indent=2))
    if weights:
        _save_shards(_random_backbone(args, torch.Generator().manual_seed(seed), dtype), backbone)
    build_tokenizer().save(str(backbone / "tokenizer.json"))

    torch.manual_seed(seed)
    snac = snac_class()(**SNAC_CONFIGS[size])
    (codec / "config.json").write_text(json.dumps(SNAC_CONFIGS[size], indent=2))
    torch.save(snac.state_dict(), codec / "pytorch_model.bin")
    return out_dir


if __name__ == "__main__":
    import sys

    print(write_random("orpheus", sys.argv[1], Path(sys.argv[2])))
