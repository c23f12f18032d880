"""A Llama-architecture causal LM over the runner's KV cache (Orpheus' backbone).

Parameter names equal Hugging Face `LlamaForCausalLM` keys, so checkpoints load with
`load_state_dict(assign=True)`. `forward(input_ids, positions)` returns hidden states and
`compute_logits` the head's float32 logits; attention reads how to use the KV cache from
models/context.py, set by the runner around each call. Llama-3 rope scaling, fused
q/k/v and gate/up projections, optional torch.compile of the elementwise pieces.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from models.context import Context, get_context
from models.llama_args import Args, rope_tables
from models.llama_ops import add_rms_norm, rms_norm, rotate, rotate_qkv, silu_mul, silu_mul_pairs

# bf16 matmuls with up to this many rows run on models/gemv.py when enabled, cuBLAS above: the
# Triton kernel beats cuBLAS at one row only (bench/results/decode_matmuls_table.json)
GEMV_MAX_ROWS = 1
# FP8 matmuls with 2 to this many rows run on models/gemv.py split_k_linear, others on gemv.linear: at 256
# rows the split-K kernel made the step slower (bench/results/orpheus_decode_split_k.json)
FP8_SPLIT_K_MAX_ROWS = 64


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


def cached_attention(attn: Any, q: torch.Tensor, kv: torch.Tensor, ctx: Context) -> torch.Tensor:
    """GQA attention over the runner's KV cache, for `attn` (this file's `Attention`, or
    models/qwen3_tts_talker.py `TalkerAttention`: `kv_cache`, `num_heads`, `num_kv_heads`,
    `head_dim`, `decode_attention_fn`) under `ctx` (models/context.py).

    q: rotated queries `[T, heads, D]`; kv: rotated keys and values `[T, 2, kv_heads, D]`, first
    written to each row's slot (`ctx.slots`) at `ctx.write_positions`. Prefill: packed prompts,
    all from position 0, attend to the new K/V under `ctx.mask`; decode: row b is slot b, over
    cache positions `[0, ctx.attn_len)`. Returns `[T, heads * D]` in q's dtype."""
    num_tokens, group = q.shape[0], attn.num_heads // attn.num_kv_heads
    assert attn.kv_cache is not None, "KV cache not allocated"
    attn.kv_cache[:, ctx.slots, :, ctx.write_positions] = kv  # indexed dims go first: [T, 2, H, D]
    if ctx.is_prefill:
        # GPU: the memory-efficient kernel, not cuDNN, which builds a plan for every new
        # prompt length (a stall per prefill); K/V heads expanded, so GQA is no constraint.
        k, v = kv[:, 0].repeat_interleave(group, dim=1), kv[:, 1].repeat_interleave(group, dim=1)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]) if q.is_cuda else nullcontext():
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                attn_mask=ctx.mask)[0].transpose(0, 1)
    else:  # one query per slot row; the query heads sharing a KV head form its "length"
        q = q.reshape(num_tokens, attn.num_kv_heads, group, attn.head_dim)
        if attn.decode_attention_fn is not None:
            out = attn.decode_attention_fn(q, attn.kv_cache, ctx.write_positions, ctx.attn_len)
        else:
            keys = attn.kv_cache[0, :num_tokens, :, :ctx.attn_len]
            values = attn.kv_cache[1, :num_tokens, :, :ctx.attn_len]
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=ctx.mask)
    return out.reshape(num_tokens, attn.num_heads * attn.head_dim)


class RMSNorm(nn.Module):
    norm_fn = staticmethod(rms_norm)  # LlamaLM.compile_layers() swaps in compiled ones
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
    # (qkv [B, (heads + 2 kv_heads) D], cos [B, D], sin [B, D], kv cache view, positions [B], attn_len)
    # -> [B, heads D]: rotary, KV write and decode attention in one (models/decode_attention.py
    # decode_attention_qkv, set by the runner on GPU); used for decode steps with fused q/k/v.
    decode_qkv_fn: Any = None
    linear_fn: Any = staticmethod(F.linear)  # (x, weight) -> x @ weight.T; LlamaLM.set_matmuls swaps it

    def __init__(self, args: Args) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_attention_heads, args.num_key_value_heads, args.head_dim
        self.q_proj = nn.Linear(args.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(args.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, args.hidden_size, bias=False)
        self.kv_cache: torch.Tensor | None = None
        self.qkv_weight: Any = None  # set by fuse(): one matmul instead of three (a tensor, or an Fp8Weight)
        self.o_fp8: Any = None  # o_proj's weight as an Fp8Weight (set_matmuls)

    def fuse(self) -> None:
        """Store q/k/v weights in one tensor; the three parameters become views of it."""
        self.qkv_weight = _fuse(self.q_proj, self.k_proj, self.v_proj)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        num_tokens = x.shape[0]
        ctx = get_context()
        o_weight = self.o_proj.weight if self.o_fp8 is None else self.o_fp8
        if not ctx.is_prefill and self.decode_qkv_fn is not None and self.qkv_weight is not None:
            assert self.kv_cache is not None, "KV cache not allocated"
            out = self.decode_qkv_fn(self.linear_fn(x, self.qkv_weight), cos.view(num_tokens, -1),
                                     sin.view(num_tokens, -1), self.kv_cache, ctx.write_positions, ctx.attn_len)
            return self.linear_fn(out, o_weight)
        if self.qkv_weight is not None:
            q, kv = self.rotate_qkv_fn(self.linear_fn(x, self.qkv_weight), cos, sin, self.num_heads, self.num_kv_heads)
        else:
            q = self.rotate_fn(self.q_proj(x).view(num_tokens, self.num_heads, self.head_dim), cos, sin)
            kv = torch.stack([self.rotate_fn(self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim), cos, sin),
                              self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)], dim=1)
        return self.linear_fn(cached_attention(self, q, kv, ctx), o_weight)


class MLP(nn.Module):
    act_fn = staticmethod(silu_mul)
    pairs_act_fn = staticmethod(silu_mul_pairs)  # after pair_rows
    linear_fn: Any = staticmethod(F.linear)

    def __init__(self, args: Args) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.up_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)
        self.gate_up_weight: Any = None  # set by fuse()
        self.down_fp8: Any = None
        self.paired = False  # pair_rows done

    def fuse(self) -> None:
        self.gate_up_weight = _fuse(self.gate_proj, self.up_proj)

    def pair_rows(self) -> None:
        """Reorder the fused gate/up weight's rows in place as (gate_0, up_0, gate_1, up_1, ...), so that a
        one-row matmul's program reads a gate row and its up row side by side and multiplies them
        itself (models/gemv.py `rows_linear(glu=True)`: rows far apart streamed at 0.90 of copy bandwidth,
        adjacent ones 0.98, H100). gate_proj/up_proj stay (strided) views of their rows. Before FP8; idempotent."""
        if self.paired:
            return
        weight = self.gate_up_weight
        assert isinstance(weight, torch.Tensor), "pair_rows: fuse first, before fp8"
        rows = weight.shape[0] // 2
        with torch.no_grad():
            weight.copy_(weight.view(2, rows, -1).transpose(0, 1).reshape(2 * rows, -1))
        pairs = weight.view(rows, 2, -1)
        self.gate_proj.weight = nn.Parameter(pairs[:, 0], requires_grad=False)
        self.up_proj.weight = nn.Parameter(pairs[:, 1], requires_grad=False)
        self.paired = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is not None:
            gate_up = self.linear_fn(x, self.gate_up_weight)
        else:
            gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
        act = self.pairs_act_fn(gate_up) if self.paired else self.act_fn(gate_up)
        return self.linear_fn(act, self.down_proj.weight if self.down_fp8 is None else self.down_fp8)


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

    def forward_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pdl: bool) -> torch.Tensor:
        """A decode step of few rows as five kernels (`LlamaLM.forward`, after `fold_norms`): the
        residual stream `x` `[B, hidden]` in, out. Each norm runs inside the matmul after it, the
        SiLU-gate inside gate/up's, each residual add inside o's and down's (models/gemv.py
        `rows_linear`; above `GEMV_MAX_ROWS` rows models/skinny.py `skinny_linear`, the same on the tensor cores);
        rotary, KV write and attention are the runner's `decode_qkv_fn` (models/decode_attention.py
        `decode_attention_qkv`). `pdl`: all five launched with programmatic dependent launch."""
        from models.gemv import rows_linear

        attn, mlp, ctx = self.self_attn, self.mlp, get_context()
        matmul: Any = rows_linear
        if x.shape[0] > GEMV_MAX_ROWS:  # (up to LlamaLM.fused_max_rows: bf16 weights, the tensor cores)
            from models.skinny import skinny_linear as matmul
        qkv = matmul(x, attn.qkv_weight, norm_eps=self.input_layernorm.eps, pdl=pdl)
        out = attn.decode_qkv_fn(qkv, cos.view(x.shape[0], -1), sin.view(x.shape[0], -1), attn.kv_cache,
                                 ctx.write_positions, ctx.attn_len, pdl=pdl)
        x = matmul(out, attn.o_proj.weight if attn.o_fp8 is None else attn.o_fp8, residual=x, pdl=pdl)
        h = matmul(x, mlp.gate_up_weight, norm_eps=self.post_attention_layernorm.eps, glu=True, pdl=pdl)
        return matmul(h, mlp.down_proj.weight if mlp.down_fp8 is None else mlp.down_fp8, residual=x, pdl=pdl)


class LlamaModel(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class LlamaLM(nn.Module):
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
        self.linear: Any = F.linear  # (x, weight) -> x @ weight.T, as the layers multiply (set_matmuls)
        self.fused_rows = False  # decode steps of up to fused_max_rows rows on DecoderLayer.forward_rows
        self.fused_max_rows = GEMV_MAX_ROWS  # (set_matmuls: models/skinny.py SKINNY_MAX_ROWS with `skinny_rows`)
        self.skinny_min_rows = GEMV_MAX_ROWS + 1  # steps above GEMV_MAX_ROWS rows and below this: unfused (set_matmuls)
        self.skinny_pdl_min_rows = GEMV_MAX_ROWS + 1  # fused steps above GEMV_MAX_ROWS rows and below this: no PDL
        self.norms_folded = False  # fold_norms done
        self.pdl = False  # forward_rows' kernels with programmatic dependent launch (set_matmuls)

    def set_rope(self, num_positions: int, device: torch.device | str) -> None:
        self.cos, self.sin = rope_tables(self.args, num_positions, device)

    def compile_layers(self, enabled: bool = True) -> None:
        """torch.compile the elementwise pieces between the matmuls (residual add + norm,
        q/k rotary, SiLU-gate): one kernel each instead of several. Compiled once for any
        token count (dynamic shapes). Call before capturing CUDA graphs (GPU only).
        `enabled=False` puts the plain functions back."""
        plain = (rms_norm, add_rms_norm, rotate, rotate_qkv, silu_mul, silu_mul_pairs)
        norm, add_norm, rot, rot_qkv, act, pairs_act = (torch.compile(f, dynamic=True, fullgraph=True) if enabled
                                                        else f for f in plain)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                module.norm_fn, module.add_norm_fn = norm, add_norm
            elif isinstance(module, Attention):
                module.rotate_fn, module.rotate_qkv_fn = rot, rot_qkv
            elif isinstance(module, MLP):
                module.act_fn, module.pairs_act_fn = act, pairs_act

    def fold_norms(self) -> None:
        """Fold each layer's two RMSNorm weights into the columns of the matmul after it (q/k/v,
        gate/up: `W[:, k] *= g[k]`, rounded once to the weight's dtype) and set the norms' weights
        to 1: the same function (rounded at another point), and the norm before a matmul is then
        only its row scale, which `rows_linear` computes inside the matmul. The final norm stays
        (the head is tied to the embeddings). Call after `fuse_projections`, before FP8; idempotent."""
        if self.norms_folded:
            return
        with torch.no_grad():
            for layer in self.model.layers:
                for norm, weight in ((layer.input_layernorm, layer.self_attn.qkv_weight),
                                     (layer.post_attention_layernorm, layer.mlp.gate_up_weight)):
                    assert isinstance(weight, torch.Tensor), "fold_norms: fuse_projections first, before fp8"
                    weight.copy_(weight.float() * norm.weight.float()[None, :])
                    norm.weight.fill_(1.0)
        self.norms_folded = True

    def set_matmuls(self, gemv: bool, fp8: bool, split_k: bool = False, fused_rows: bool = False,
                    pdl: bool = False, skinny_rows: bool = False) -> None:
        """Decode matmuls on models/gemv.py's Triton kernels (GPU): `gemv` for bf16 weights with up to `GEMV_MAX_ROWS`
        rows (larger ones, e.g. prefills, stay on cuBLAS); `fp8` quantizes the layers' projection weights to
        float8_e4m3fn with a scale per output row (issue 10) and frees the bf16 ones (embeddings, norms and the tied
        head stay); `split_k`: FP8 weights at 2 to `FP8_SPLIT_K_MAX_ROWS` rows on `split_k_linear` (K a multiple of
        128; bf16 ones there stay on cuBLAS, as fast or faster); all False: cuBLAS (not after fp8). `fused_rows` (with
        `gemv` or `fp8`): `fold_norms` and `MLP.pair_rows`, and decode steps of up to `GEMV_MAX_ROWS` rows run
        `DecoderLayer.forward_rows` when the layers have a `decode_qkv_fn`; `pdl` (with `fused_rows`, sm90+): their
        matmuls with programmatic dependent launch (`rows_linear`); `skinny_rows` (with `fused_rows`, bf16 weights):
        decode steps of models/skinny.py `SKINNY_MIN_ROWS` to `SKINNY_MAX_ROWS` rows run `forward_rows` too, their
        matmuls on `skinny_linear`, with PDL (`pdl`) from `SKINNY_PDL_MIN_ROWS` rows. `self.linear` is then the
        matmul for other weights too. Call after `fuse_projections`,
        before capturing CUDA graphs. Raises ValueError for fp8 off CUDA."""
        quantized = not isinstance(self.model.layers[0].self_attn.qkv_weight, (torch.Tensor, type(None)))
        if (fp8 or quantized) and not self.model.embed_tokens.weight.is_cuda:
            raise ValueError("fp8 weights need a CUDA device (Triton kernels)")
        linear: Any = F.linear
        if gemv or fp8 or quantized:
            from models import gemv as kernels

            # a counter per column block and row block of the widest weight (the matmuls share one stream)
            counters = torch.zeros(4096, dtype=torch.int32, device=self.model.embed_tokens.weight.device) \
                if split_k else None

            def linear(x: torch.Tensor, weight: Any) -> torch.Tensor:
                rows = x.shape[0]
                if isinstance(weight, kernels.Fp8Weight) and counters is not None and \
                        1 < rows <= FP8_SPLIT_K_MAX_ROWS and x.shape[1] % 128 == 0:
                    return kernels.split_k_linear(x, weight, counters)
                if isinstance(weight, kernels.Fp8Weight) or rows <= GEMV_MAX_ROWS:
                    return kernels.linear(x, weight)
                return F.linear(x, weight)

        self.linear = linear
        # the norms must be folded before the weights are quantized: FP8 weights quantized unfolded stay unfused
        self.fused_rows = fused_rows and (gemv or fp8 or quantized) and (self.norms_folded or not quantized)
        self.pdl = self.fused_rows and pdl
        self.fused_max_rows = GEMV_MAX_ROWS
        if self.fused_rows and skinny_rows and not (fp8 or quantized):
            from models import skinny

            self.fused_max_rows, self.skinny_min_rows = skinny.SKINNY_MAX_ROWS, skinny.SKINNY_MIN_ROWS
            self.skinny_pdl_min_rows = skinny.SKINNY_PDL_MIN_ROWS
        if self.fused_rows:
            self.fold_norms()
        for layer in self.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if self.fused_rows:
                mlp.pair_rows()  # (before FP8, below)
            attn.linear_fn = mlp.linear_fn = linear  # an instance attribute: not bound
            if fp8 and not quantized:
                attn.qkv_weight = kernels.quantize_fp8(attn.qkv_weight)
                attn.o_fp8 = kernels.quantize_fp8(attn.o_proj.weight)
                mlp.gate_up_weight = kernels.quantize_fp8(mlp.gate_up_weight)
                mlp.down_fp8 = kernels.quantize_fp8(mlp.down_proj.weight)
                for linear_layer in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj,
                                     mlp.down_proj):
                    linear_layer.weight = None  # the bf16 copy goes (its fused tensor with the last view)
        if fp8 and not quantized:
            torch.cuda.empty_cache()

    def memory_bytes(self) -> int:
        """Bytes of the weights: parameters and FP8 weights (`set_matmuls`)."""
        fp8 = [w for layer in self.model.layers for w in (layer.self_attn.qkv_weight, layer.self_attn.o_fp8,
                                                          layer.mlp.gate_up_weight, layer.mlp.down_fp8)
               if w is not None and not isinstance(w, torch.Tensor)]
        return (sum(p.numel() * p.element_size() for p in self.parameters())
                + sum(w.data.numel() + 4 * w.scale.numel() for w in fp8))

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
        rows = x.shape[0]
        if self.fused_rows and (rows <= GEMV_MAX_ROWS or self.skinny_min_rows <= rows <= self.fused_max_rows) and \
                not get_context().is_prefill and self.model.layers[0].self_attn.decode_qkv_fn is not None:
            pdl = self.pdl and (rows <= GEMV_MAX_ROWS or rows >= self.skinny_pdl_min_rows)
            for layer in self.model.layers:
                x = layer.forward_rows(x, cos, sin, pdl)
            return self.model.norm(x)
        delta = None
        for layer in self.model.layers:
            x, delta = layer(x, delta, cos, sin)
        return self.model.norm(x) if delta is None else self.model.norm.add_forward(x, delta)[1]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden `[N, hidden_size]` -> float32 logits `[N, vocab_size]`."""
        return self.lm_head(hidden).float()
