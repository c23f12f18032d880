"""Our backbone against Hugging Face's LlamaForCausalLM on the same checkpoint.

Runs where `transformers` is installed (skipped otherwise): it checks the pieces a
real Orpheus checkpoint depends on (key names, Llama-3 rope scaling, GQA head layout,
tied head) by comparing logits of the cached runner path with HF's full forward.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models import orpheus  # noqa: E402
from models.llama_args import rope_tables  # noqa: E402


def test_runner_logits_match_hugging_face_llama(orpheus_tiny: Path) -> None:
    reference = transformers.LlamaForCausalLM.from_pretrained(str(orpheus_tiny / "backbone"),
                                                              torch_dtype=torch.float32).eval()
    parts = orpheus.load("tiny", orpheus_tiny, {"max_seq_len": 256}, "cpu")
    core = EngineCore(build_runner("tiny", parts, "cpu", 2), EngineConfig())
    calls: list[torch.Tensor] = []
    runner = core.runner
    inner = runner._logits  # type: ignore[attr-defined]
    runner._logits = lambda h: calls.append(inner(h)) or calls[-1]  # type: ignore[attr-defined]
    spec = SpeechRequest("a", "tiny", ("Hello there.",), "tara", options={"force_tokens": 20, "temperature": 0})
    request = core.add(spec, parts.spec.prepare(spec))
    while core.has_work:
        core.step()
    prompt = list(request.prepared.prompt_ids)
    ids = torch.tensor([prompt + request.tokens[:-1]])
    with torch.no_grad():
        expected = reference(ids).logits[0, len(prompt) - 1:][:, runner.head_ids]  # the audio head's rows
    ours = torch.stack([calls[0][0]] + [c[0] for c in calls[1:20]])
    torch.testing.assert_close(ours, expected, atol=2e-4, rtol=2e-4)


def test_rope_tables_match_hugging_face_at_long_positions() -> None:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    args = orpheus.FLAVORS["full"]
    config = transformers.LlamaConfig(**{k: v for k, v in args.to_hf().items() if k not in ("architectures",)})
    rotary = LlamaRotaryEmbedding(config)
    positions = torch.tensor([[0, 1, 511, 4095, 8191, 20000]])
    cos, sin = rotary(torch.zeros(1, dtype=torch.float32), positions)
    ours_cos, ours_sin = rope_tables(args, 20001, "cpu")
    torch.testing.assert_close(ours_cos[positions[0]], cos[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_sin[positions[0]], sin[0], atol=1e-6, rtol=0)
