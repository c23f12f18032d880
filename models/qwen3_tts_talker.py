"""Qwen3-TTS talker: the Qwen3 LM that writes codebook 0 of each 80 ms frame.

Module and attribute names equal the checkpoint keys under `talker.` (qwen-tts's
`Qwen3TTSTalkerForConditionalGeneration`, read for the format): `model.layers.N.*`,
`model.codec_embedding` (codec ids -> hidden), `model.text_embedding` (text ids -> text
width), `text_projection.linear_fc{1,2}` (text width -> hidden, SiLU MLP with bias),
`codec_head` (hidden -> codec logits) and `code_predictor.*` (models/qwen3_tts_predictor.py).

A layer is Qwen3's: pre-norm attention with RMSNorm on each query and key head before the
rotary embedding, GQA, SwiGLU MLP. The talker's M-RoPE gives the temporal, height and width
sections their own position ids; speech has one position per token (all three equal), and
then M-RoPE is exactly the ordinary rotary embedding over the whole head (the parity tests
run qwen-tts's M-RoPE code against this), so `rope_tables` here is the 1-D one.

Inputs are embeddings, not ids: a prompt row is a text embedding plus a codec embedding,
and a generated frame's next input is the sum of its 16 codebook embeddings plus the next
text embedding (models/qwen3_tts_prompt.py builds both). The KV cache and the attention
metadata follow Orpheus exactly (models/context.py; `kv_cache` is the runner's
`[2, num_slots, kv_heads, max_seq_len + 1, head_dim]` view per layer), so its runner
(models/qwen3_tts_runner.py) batches it as models/lm_runner.py batches Orpheus.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.context import get_context
from models.llama import MLP, RMSNorm, cached_attention
from models.qwen3_tts_args import Args
from models.qwen3_tts_layers import project_qkv, rope_tables
from models.qwen3_tts_predictor import CodePredictor


class TalkerAttention(nn.Module):
    """GQA self-attention over the runner's KV cache (models/context.py), as Orpheus'."""

    # Same contract as models.llama.Attention.decode_attention_fn (the runner may set
    # models/decode_attention.py's Triton kernel here on GPU); None: SDPA.
    decode_attention_fn: Any = None

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)
        self.kv_cache: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, v = project_qkv(self, x, cos, sin)
        return self.o_proj(cached_attention(self, q, torch.stack([k, v], dim=1), get_context()))


class TalkerLayer(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.self_attn = TalkerAttention(args.hidden_size, args.num_attention_heads, args.num_key_value_heads,
                                         args.head_dim, args.rms_norm_eps)
        self.mlp = MLP(args)  # type: ignore[arg-type]  # reads hidden_size, intermediate_size only
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class TalkerModel(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TalkerLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.codec_embedding = nn.Embedding(args.vocab_size, args.hidden_size)
        self.text_embedding = nn.Embedding(args.text_vocab_size, args.text_hidden_size)


class TextProjection(nn.Module):
    """Text width -> talker width: fc2(silu(fc1(x))), both with bias."""

    def __init__(self, text_size: int, hidden_size: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_size, text_size, bias=True)
        self.linear_fc2 = nn.Linear(text_size, hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    """The `talker.*` weights: talker LM, text projection, codec head and code predictor.

    Call `set_rope(num_positions, device)` once after the weights are in place.
    """

    def __init__(self, args: Args) -> None:
        super().__init__()
        self.args = args
        self.model = TalkerModel(args)
        self.text_projection = TextProjection(args.text_hidden_size, args.hidden_size)
        self.codec_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.code_predictor = CodePredictor(args.predictor, args.hidden_size)
        self.cos: torch.Tensor | None = None
        self.sin: torch.Tensor | None = None

    def set_rope(self, num_positions: int, device: torch.device | str) -> None:
        self.cos, self.sin = rope_tables(self.args.head_dim, self.args.rope_theta, num_positions, device)
        self.code_predictor.set_rope(device)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """Text token ids int64 `[...]` -> talker-width embeddings `[..., hidden]`."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        """Codec ids (codebook-0 codes or control/speaker ids) int64 `[...]` -> `[..., hidden]`."""
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """A frame's 16 codes int64 `[N, 16]` -> the sum of their embeddings `[N, hidden]`
        (codebook 0 through the talker's table, codebook j >= 1 through the predictor's
        table j - 1): the talker's codec input for that frame."""
        total = self.embed_codec(codes[:, 0])
        for j, table in enumerate(self.code_predictor.model.codec_embedding):
            total = total + table(codes[:, j + 1])
        return total

    def forward(self, input_embeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """input_embeds `[T, hidden]` (model dtype), positions int64 `[T]` -> hidden states
        `[T, hidden]` after the final norm. Attention metadata from models/context.py."""
        assert self.cos is not None and self.sin is not None, "call set_rope first"
        x = input_embeds
        cos = self.cos[positions].to(x.dtype)[:, None, :]
        sin = self.sin[positions].to(x.dtype)[:, None, :]
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden `[N, hidden]` -> float32 codec logits `[N, vocab_size]` (codebook 0)."""
        return self.codec_head(hidden).float()

    def suppressed_ids(self) -> torch.Tensor:
        """int64 ids the talker must never sample: the last 1024 ids (control and speaker
        ids, 2048..3071 in the released vocabulary) except the stop id, as qwen-tts's
        `suppress_tokens`."""
        ids = torch.arange(self.args.vocab_size - 1024, self.args.vocab_size)
        return ids[ids != self.args.codec_eos_token_id]
