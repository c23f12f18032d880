"""Family `orpheus`: Orpheus-TTS 3B, a Llama-3.2-3B speech LM over SNAC 24 kHz codes.

Prompt and token ids (the English fine-tune `canopylabs/orpheus-3b-0.1-ft`): learned
from the authors' repo canopyai/Orpheus-TTS (`orpheus_tts_pypi/orpheus_tts/engine_class.py`
builds `[start_of_human] tokens("<voice>: <text>") [end_of_text, end_of_human,
start_of_ai, start_of_speech]`; `decoder.py` maps `<custom_token_N>` to codes with
`N - 10 - 4096 * (index % 7)`; `pretrain/train.py` adds `7 * 4096 + 10` tokens after
the 128256 Llama-3 tokens; `realtime_streaming_example/main.py` stops on 128258) and
their data-prep notebooks (`start_of_speech = 128256 + 1` ... `audio_tokens_start =
128256 + 10`). The shape is Llama-3.2-3B's (28 layers, 3072 hidden, 24/8 heads, 8192
MLP, rope theta 500000, llama3 scaling x32, tied head); the vocabulary, 156940 =
128256 + 28684 custom tokens, is the size a public GGML port of the fine-tune declares
(the training script's 28683 new tokens, padded). The README lists the voices in order
of realism and says `repetition_penalty >= 1.1` is needed for stable output, and that a
higher penalty makes speech faster. Not verified against the real weights here.

Audio: each codec frame (85.33 ms of 24 kHz audio) is 7 tokens. Token k of a frame
(k = 0..6) is `AUDIO_TOKEN_BASE + 4096 * k + code`, and the 7 codes fill SNAC's three
codebooks as coarse `[k0]`, middle `[k1, k4]`, fine `[k2, k3, k5, k6]`. A generation
that stops mid-frame loses that partial frame (as the authors' decoder does).

Streaming (models/snac.py): the first chunk is 1 frame (85 ms) and is ready once 4
frames (28 tokens) exist, 3 being right context; later chunks are 2, 4, then 8 frames
(171, 341, 683 ms).
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from models import InvalidModel
from models.context import get_context

FAMILY = "orpheus"

# -- token ids of the fine-tuned model (see module docstring for sources) ------------
LLAMA_VOCAB = 128256  # Llama-3 tokenizer size; Orpheus tokens follow it
BEGIN_OF_TEXT = 128000  # <|begin_of_text|>, what the Llama tokenizer prepends
END_OF_TEXT = 128009  # <|eot_id|>
START_OF_SPEECH = LLAMA_VOCAB + 1  # 128257
END_OF_SPEECH = LLAMA_VOCAB + 2  # 128258, the stop token
START_OF_HUMAN = LLAMA_VOCAB + 3  # 128259
END_OF_HUMAN = LLAMA_VOCAB + 4  # 128260
START_OF_AI = LLAMA_VOCAB + 5  # 128261
END_OF_AI = LLAMA_VOCAB + 6  # 128262
PAD_TOKEN = LLAMA_VOCAB + 7  # 128263
AUDIO_TOKEN_BASE = LLAMA_VOCAB + 10  # 128266 = <custom_token_10>, code 0 of slot 0
CODEBOOK_SIZE = 4096  # codes per SNAC codebook = id offset between frame positions
TOKENS_PER_FRAME = 7  # 1 + 2 + 4 codes of SNAC's three codebooks
VOCAB_SIZE = 156940  # 128256 + <custom_token_0..28683> (7 * 4096 + 10 used, 2 spare)
STOP_TOKEN_IDS = (END_OF_SPEECH,)
# Frame position k -> index in SNAC's canonical row [c0, c1a, c1b, c2a, c2b, c2c, c2d].
SNAC_ORDER = (0, 1, 3, 4, 2, 5, 6)

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")  # default first
# Sampling defaults: temperature and top-p as the authors' package; a repetition
# penalty of 1.1, the lowest the README calls stable, so speaking rate stays natural.
TEMPERATURE = 0.6
TOP_P = 0.8
REPETITION_PENALTY = 1.1
MAX_TOKENS = 2048  # ~25 s of audio (82 tokens/s); options["max_tokens"] may lower it
MAX_TEXT_CHARS = 2000


def prompt_ids(text_ids: Sequence[int]) -> list[int]:
    """Wrap the tokenized `"<voice>: <text>"` (no special tokens) in Orpheus' markers."""
    return [START_OF_HUMAN, BEGIN_OF_TEXT, *text_ids, END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]


def audio_token(position: int, code: int) -> int:
    """Token id of SNAC `code` (0..4095) at frame position `position` (0..6)."""
    assert 0 <= position < TOKENS_PER_FRAME and 0 <= code < CODEBOOK_SIZE
    return AUDIO_TOKEN_BASE + CODEBOOK_SIZE * position + code


def frame_codes(tokens: Sequence[int]) -> list[int]:
    """Seven audio tokens of one frame -> seven SNAC codes in canonical order.

    Raises ValueError naming the first token outside its position's 4096-id range
    (never wraps it into range: a wrong-slot token means the generation went astray).
    """
    assert len(tokens) == TOKENS_PER_FRAME
    codes = [0] * TOKENS_PER_FRAME
    for position, token in enumerate(tokens):
        code = int(token) - AUDIO_TOKEN_BASE - CODEBOOK_SIZE * position
        if not 0 <= code < CODEBOOK_SIZE:
            raise ValueError(f"token {int(token)} at frame position {position} is not an audio token of that position")
        codes[SNAC_ORDER[position]] = code
    return codes


# -- backbone -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Args:
    vocab_size: int = VOCAB_SIZE
    hidden_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 24
    num_key_value_heads: int = 8
    intermediate_size: int = 8192
    rope_theta: float = 500000.0
    rope_scaling: dict[str, Any] | None = field(default_factory=lambda: {
        "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192})
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 131072

    def __post_init__(self) -> None:
        assert self.hidden_size % self.num_attention_heads == 0
        assert self.num_attention_heads % self.num_key_value_heads == 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Args:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in config.items() if k in names})

    def to_hf(self) -> dict[str, Any]:
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                "head_dim": self.head_dim, "bos_token_id": BEGIN_OF_TEXT, "eos_token_id": END_OF_SPEECH,
                "pad_token_id": PAD_TOKEN, **asdict(self)}


FLAVORS: dict[str, Args] = {
    "full": Args(),  # Llama-3.2-3B shape with the Orpheus vocabulary
    "tiny": replace(Args(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128),
}


def rope_tables(args: Args, num_positions: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: float32 `[num_positions, head_dim]`, with Llama-3 frequency scaling.

    Computed in float32 like Hugging Face's LlamaRotaryEmbedding (the checkpoint was trained
    with it): at position 20000 float64 angles would differ from it by ~1e-3 rad.
    """
    dim = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    scaling = args.rope_scaling or {}
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor, old_len = float(scaling["factor"]), float(scaling["original_max_position_embeddings"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        inv_freq = torch.where(is_medium, scaled, inv_freq)
    freqs = torch.outer(torch.arange(num_positions, device=device).float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: `[T, heads, head_dim]`; cos/sin: `[T, 1, head_dim]` (half-split rotation, as HF)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _fuse(*linears: nn.Linear) -> torch.Tensor:
    """Concatenate the linears' weights (output dim) and make each weight a view into it,
    so checkpoint names and memory stay as they were."""
    fused = torch.cat([linear.weight.detach() for linear in linears])
    start = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = nn.Parameter(fused[start:start + rows], requires_grad=False)
        start += rows
    return fused


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise in float32, scale in the model dtype (as HF's LlamaRMSNorm)."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`[T, 2 * I]` (gate then up) -> `[T, I]`."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then norm: returns (x + delta, rms_norm(x + delta)); one kernel compiled."""
    x = x + delta
    return x, rms_norm(x, weight, eps)


def rotate_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int,
               num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """qkv `[T, (heads + 2 * kv_heads) * head_dim]` -> rotated q `[T, heads, D]` and
    kv `[T, 2, kv_heads, D]` (rotated k, v: one tensor, stored in the cache by one write);
    cos/sin `[T, 1, D]`."""
    num_tokens, dim = qkv.shape[0], cos.shape[-1]
    q, k, v = qkv.view(num_tokens, num_heads + 2 * num_kv_heads, dim).split(
        [num_heads, num_kv_heads, num_kv_heads], dim=1)
    return rotate(q, cos, sin), torch.stack([rotate(k, cos, sin), v], dim=1)


class RMSNorm(nn.Module):
    norm_fn = staticmethod(rms_norm)  # OrpheusLM.compile_layers() swaps in compiled ones
    add_norm_fn = staticmethod(add_rms_norm)

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm_fn(x, self.weight, self.eps)

    def add_forward(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + delta, norm(x + delta))."""
        return self.add_norm_fn(x, delta, self.weight, self.eps)


class Attention(nn.Module):
    """GQA self-attention over the runner's KV cache (see models/context.py).

    `kv_cache`: `[2, num_slots, kv_heads, max_seq_len + 1, head_dim]` view of the runner's
    one cache tensor (k then v); the last position is the write-only spare for padding rows.
    """

    rotate_fn = staticmethod(rotate)
    rotate_qkv_fn = staticmethod(rotate_qkv)
    # (q [B, kv_heads, group, D], kv cache view, positions [B], attn_len) -> like q; None: SDPA.
    # The runner sets models/decode_attention.py's Triton kernel here on GPU.
    decode_attention_fn: Any = None

    def __init__(self, args: Args) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_attention_heads, args.num_key_value_heads, args.head_dim
        self.q_proj = nn.Linear(args.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, args.hidden_size, bias=False)
        self.kv_cache: torch.Tensor | None = None
        self.qkv_weight: torch.Tensor | None = None  # set by fuse(): one matmul instead of three

    def fuse(self) -> None:
        """Store q/k/v weights in one tensor; the three parameters become views of it."""
        self.qkv_weight = _fuse(self.q_proj, self.k_proj, self.v_proj)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        num_tokens = x.shape[0]
        if self.qkv_weight is not None:
            q, kv = self.rotate_qkv_fn(F.linear(x, self.qkv_weight), cos, sin, self.num_heads, self.num_kv_heads)
        else:
            q = self.rotate_fn(self.q_proj(x).view(num_tokens, self.num_heads, self.head_dim), cos, sin)
            kv = torch.stack([self.rotate_fn(self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim), cos, sin),
                              self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)], dim=1)
        k, v = kv[:, 0], kv[:, 1]
        ctx = get_context()
        assert self.kv_cache is not None, "KV cache not allocated"
        self.kv_cache[:, ctx.slots, :, ctx.write_positions] = kv  # indexed dims go first: [T, 2, H, D]
        if ctx.is_prefill:  # packed prompts, all starting at position 0: attend to the new K/V
            # GPU: the memory-efficient kernel, not cuDNN, which builds a plan for every new
            # prompt length (a stall per prefill); K/V heads expanded, so GQA is no constraint.
            group = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]) if q.is_cuda else nullcontext():
                out = F.scaled_dot_product_attention(
                    q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                    attn_mask=ctx.mask)[0].transpose(0, 1)
        else:  # one query per slot row; the query heads sharing a KV head form its "length"
            q = q.reshape(num_tokens, self.num_kv_heads, self.num_heads // self.num_kv_heads, self.head_dim)
            if self.decode_attention_fn is not None:
                out = self.decode_attention_fn(q, self.kv_cache, ctx.write_positions, ctx.attn_len)
            else:
                keys = self.kv_cache[0, :num_tokens, :, :ctx.attn_len]
                values = self.kv_cache[1, :num_tokens, :, :ctx.attn_len]
                out = F.scaled_dot_product_attention(q, keys, values, attn_mask=ctx.mask)
        return self.o_proj(out.reshape(num_tokens, self.num_heads * self.head_dim))


class MLP(nn.Module):
    act_fn = staticmethod(silu_mul)

    def __init__(self, args: Args) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.up_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)
        self.gate_up_weight: torch.Tensor | None = None  # set by fuse()

    def fuse(self) -> None:
        self.gate_up_weight = _fuse(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is not None:
            gate_up = F.linear(x, self.gate_up_weight)
        else:
            gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
        return self.down_proj(self.act_fn(gate_up))


class DecoderLayer(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, x: torch.Tensor, delta: torch.Tensor | None, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual stream `x` plus the previous layer's output `delta` (None for the first
        layer) -> (stream, this layer's output): each residual add shares a kernel with the
        norm after it. Same arithmetic as `x + attn(norm(x))`, `x + mlp(norm(x))`."""
        if delta is None:
            h = self.input_layernorm(x)
        else:
            x, h = self.input_layernorm.add_forward(x, delta)
        x, h = self.post_attention_layernorm.add_forward(x, self.self_attn(h, cos, sin))
        return x, self.mlp(h)


class LlamaModel(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class OrpheusLM(nn.Module):
    """Llama causal LM; parameter names equal Hugging Face `LlamaForCausalLM` keys.

    Call `set_rope(num_positions, device)` once after the weights are in place.
    """

    def __init__(self, args: Args) -> None:
        super().__init__()
        self.args = args
        self.model = LlamaModel(args)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.cos: torch.Tensor | None = None
        self.sin: torch.Tensor | None = None

    def set_rope(self, num_positions: int, device: torch.device | str) -> None:
        self.cos, self.sin = rope_tables(self.args, num_positions, device)

    def compile_layers(self, enabled: bool = True) -> None:
        """torch.compile the elementwise pieces between the matmuls (residual add + norm,
        q/k rotary, SiLU-gate): one kernel each instead of several. Compiled once for any
        token count (dynamic shapes). Call before capturing CUDA graphs (GPU only).
        `enabled=False` puts the plain functions back."""
        plain = (rms_norm, add_rms_norm, rotate, rotate_qkv, silu_mul)
        norm, add_norm, rot, rot_qkv, act = (torch.compile(f, dynamic=True, fullgraph=True) if enabled else f
                                             for f in plain)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                module.norm_fn, module.add_norm_fn = norm, add_norm
            elif isinstance(module, Attention):
                module.rotate_fn, module.rotate_qkv_fn = rot, rot_qkv
            elif isinstance(module, MLP):
                module.act_fn = act

    def fuse_projections(self) -> None:
        """q/k/v and gate/up as one matmul each (fewer kernels per decode step)."""
        for layer in self.model.layers:
            if layer.self_attn.qkv_weight is None:
                layer.self_attn.fuse()
                layer.mlp.fuse()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """input_ids, positions: int64 `[T]` -> hidden states `[T, hidden_size]` (model dtype)."""
        assert self.cos is not None and self.sin is not None, "call set_rope first"
        x = self.model.embed_tokens(input_ids)
        cos = self.cos[positions].to(x.dtype)[:, None, :]
        sin = self.sin[positions].to(x.dtype)[:, None, :]
        delta = None
        for layer in self.model.layers:
            x, delta = layer(x, delta, cos, sin)
        return self.model.norm(x) if delta is None else self.model.norm.add_forward(x, delta)[1]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden `[N, hidden_size]` -> float32 logits `[N, vocab_size]`."""
        return self.lm_head(hidden).float()


# -- loading ----------------------------------------------------------------------------

def _folders(path: Path | None, options: dict[str, Any]) -> tuple[Path, Path]:
    """(backbone, codec) folders: `<path>/backbone`, `<path>/codec` unless options name them."""
    backbone = options.get("backbone_path") or (Path(path) / "backbone" if path is not None else None)
    codec = options.get("codec_path") or (Path(path) / "codec" if path is not None else None)
    if backbone is None or codec is None:
        raise InvalidModel("give a model folder or both options.backbone_path and options.codec_path")
    return Path(backbone), Path(codec)


def _weight_files(backbone: Path) -> list[Path]:
    single = backbone / "model.safetensors"
    if single.is_file():
        return [single]
    index = backbone / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (backbone / s).is_file()]
        if missing:
            raise InvalidModel(f"{backbone} lacks shards {', '.join(missing)}")
        return [backbone / s for s in shards]
    raise InvalidModel(f"{backbone} has neither model.safetensors nor model.safetensors.index.json")


def validate(path: Path | None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check an Orpheus folder (backbone/ + codec/) without loading weights."""
    from tokenizers import Tokenizer

    backbone, codec = _folders(path, options or {})
    for required in (backbone / "config.json", backbone / "tokenizer.json", codec / "config.json"):
        if not required.is_file():
            raise InvalidModel(f"{required} is missing")
    try:
        args = Args.from_hf(json.loads((backbone / "config.json").read_text()))
    except (ValueError, TypeError, AssertionError) as error:
        raise InvalidModel(f"{backbone / 'config.json'} is not a Llama config: {error}") from error
    if args.vocab_size < VOCAB_SIZE:
        raise InvalidModel(f"vocab_size {args.vocab_size} < {VOCAB_SIZE}: not an Orpheus fine-tune")
    tokenizer = Tokenizer.from_file(str(backbone / "tokenizer.json"))
    if tokenizer.token_to_id(f"<custom_token_{AUDIO_TOKEN_BASE - LLAMA_VOCAB}>") != AUDIO_TOKEN_BASE:
        raise InvalidModel(f"{backbone / 'tokenizer.json'} lacks the Orpheus audio tokens at {AUDIO_TOKEN_BASE}")
    codec_weights = [codec / n for n in ("pytorch_model.bin", "model.safetensors") if (codec / n).is_file()]
    if not codec_weights:
        raise InvalidModel(f"{codec} has neither pytorch_model.bin nor model.safetensors")
    files = _weight_files(backbone) + codec_weights
    return {"voices": list(VOICES), "sample_rate": 24000, "size_bytes": sum(f.stat().st_size for f in files),
            "num_layers": args.num_hidden_layers, "hidden_size": args.hidden_size}


def validate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A preset's `settings` for this family, checked by `engine.lm_spec.parse_options` as a
    request's options are: temperature, top_p, repetition_penalty, max_tokens, seed,
    force_tokens. Raises InvalidInput with field `settings.<key>` for an unknown key or a
    bad value; returns the given keys with their parsed values.
    """
    from engine.lm_spec import LMSpec, parse_options
    from engine.types import InvalidInput

    spec = LMSpec(FAMILY, VOICES, lambda voice, text: [], frame_codes, STOP_TOKEN_IDS, TOKENS_PER_FRAME,
                  AUDIO_TOKEN_BASE, CODEBOOK_SIZE, TEMPERATURE, TOP_P, REPETITION_PENALTY, MAX_TOKENS, MAX_TEXT_CHARS)
    known = parse_options(spec, {})
    for key in settings:
        if key not in known:
            raise InvalidInput(f"orpheus has no setting {key!r}; settings: {', '.join(known)}", field=f"settings.{key}")
    try:
        parsed = parse_options(spec, settings)
    except InvalidInput as error:
        field = (error.field or "").removeprefix("options.")
        raise InvalidInput(error.message.replace("options.", "settings.", 1), field=f"settings.{field}") from None
    return {key: parsed[key] for key in settings if settings[key] is not None}


def load_backbone(backbone: Path, device: torch.device | str, dtype: torch.dtype) -> OrpheusLM:
    """Build on the meta device, then assign the safetensors weights (cast to `dtype`)."""
    from safetensors.torch import load_file

    args = Args.from_hf(json.loads((backbone / "config.json").read_text()))
    with torch.device("meta"):
        model = OrpheusLM(args)
    state: dict[str, torch.Tensor] = {}
    for file in _weight_files(backbone):
        state.update({k: v.to(dtype) for k, v in load_file(str(file), device=str(device)).items()})
    if args.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as error:
        raise InvalidModel(f"{backbone}: weights do not match config.json: {error}") from error
    if args.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def load(model_id: str, path: Path | None, options: dict[str, Any] | None = None, device: str = "cpu") -> Any:
    """Load backbone + codec and return a ready `engine.model_runner.ModelRunner`.

    options: `backbone_path`, `codec_path`, `dtype` ("bfloat16" | "float32"; default bf16
    on CUDA, float32 on CPU), `num_slots`, `max_seq_len`, `enforce_eager`, `max_codec_batch`,
    `compile_layers` (GPU: slower load, faster decode; see bench/results/orpheus_decode.md), `triton_attention`.
    """
    from tokenizers import Tokenizer

    from engine.lm_spec import LMSpec
    from engine.model_runner import ModelRunner, RunnerConfig
    from models.snac import SnacCodec

    options = dict(options or {})
    validate(path, options)
    backbone, codec_dir = _folders(path, options)
    on_gpu = torch.device(device).type == "cuda"
    dtype = getattr(torch, options.get("dtype") or ("bfloat16" if on_gpu else "float32"))
    model = load_backbone(backbone, device, dtype)
    codec = SnacCodec.from_dir(codec_dir, device, torch.float32)
    tokenizer = Tokenizer.from_file(str(backbone / "tokenizer.json"))

    def encode(voice: str, text: str) -> list[int]:
        return prompt_ids(tokenizer.encode(f"{voice}: {text}", add_special_tokens=False).ids)

    spec = LMSpec(FAMILY, VOICES, encode, frame_codes, STOP_TOKEN_IDS, TOKENS_PER_FRAME, AUDIO_TOKEN_BASE,
                  CODEBOOK_SIZE, TEMPERATURE, TOP_P, REPETITION_PENALTY, MAX_TOKENS, MAX_TEXT_CHARS)
    names = RunnerConfig.__dataclass_fields__
    config = RunnerConfig(**{k: v for k, v in options.items() if k in names})
    return ModelRunner(model_id, spec, model, codec, config, device)
