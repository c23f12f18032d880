"""The SNAC decoder in float32, bfloat16 and float16 (Orpheus' `codec_dtype` option): time and error.

    python bench/codec_dtype.py --out bench/results/codec_dtype.json

One random full-size 24 kHz SNAC (`models/checkpoint.py SNAC_CONFIGS["full"]`, seed 0), the same
weights cast to each dtype (`models/snac.py SnacCodec`, PCM float32 out), decoded through CUDA
graphs as the runner does (`models/codec_graphs.py`) at the shapes the scheduler uses: (codec
batch, window frames) = (1, 4) a first chunk's, (8, 12) and (32, 12) batched chunks. Per dtype and
shape: ms per call (CUDA events, median of `--iters`) and, against float32 on the same random
codes, the largest and RMS sample difference and the SNR in dB (10 log10 of signal over error
energy). Random weights: the error says how the dtype rounds this network's arithmetic, not how
a trained SNAC sounds; no trained weights can be fetched here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing import median_ms  # noqa: E402
from models.checkpoint import SNAC_CONFIGS  # noqa: E402
from models.codec_graphs import CodecGraphs  # noqa: E402
from models.orpheus import CODEC_DTYPES  # noqa: E402
from models.snac import SnacCodec  # noqa: E402

SHAPES = ((1, 4), (8, 12), (32, 12))


def build(flavor: str, device: str, dtype: torch.dtype, seed: int) -> SnacCodec:
    """A random SNAC of `flavor`, the same weights for the same seed, in `dtype`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from snac import SNAC
    torch.manual_seed(seed)
    return SnacCodec(SNAC(**SNAC_CONFIGS[flavor]), device, dtype)


def compare(reference: torch.Tensor, pcm: torch.Tensor) -> dict[str, float]:
    """Largest and RMS difference of `pcm` from `reference` (float32 `[B, T]`) and SNR (dB)."""
    error = (pcm.float() - reference.float())
    signal, noise = float((reference.float() ** 2).sum()), float((error ** 2).sum())
    return {"max_abs": round(float(error.abs().max()), 6), "rms": round(float(error.pow(2).mean().sqrt()), 7),
            "snr_db": round(10 * math.log10(signal / noise), 1) if noise > 0 else float("inf")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flavor", default="full")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/codec_dtype.json")
    opts = parser.parse_args()
    generator = torch.Generator().manual_seed(opts.seed + 1)
    inputs = {shape: (torch.randint(0, 4096, (*shape, 7), generator=generator).to(opts.device),
                      torch.randint(0, 500, (shape[0],), generator=generator).to(opts.device)) for shape in SHAPES}
    on_gpu = opts.device.startswith("cuda")
    rows, reference = [], {}
    for name in CODEC_DTYPES:  # float32 first: the reference
        codec = build(opts.flavor, opts.device, getattr(torch, name), opts.seed)
        graphs = CodecGraphs(codec, [b for b, _ in SHAPES], [f for _, f in SHAPES])
        if on_gpu:
            graphs.capture()
        for shape, (codes, starts) in inputs.items():
            pcm = graphs.decode(codes, starts).clone()
            reference.setdefault(shape, pcm)
            ms = median_ms(lambda: graphs.decode(codes, starts), opts.iters)
            rows.append({"dtype": name, "batch": shape[0], "frames": shape[1], "ms": round(ms, 3),
                         **compare(reference[shape], pcm)})
            print(json.dumps(rows[-1]), flush=True)
        graphs.close()
        del codec, graphs
        if on_gpu:
            torch.cuda.empty_cache()
    record = {"command": " ".join(["python", *sys.argv]), "device": torch.cuda.get_device_name() if on_gpu else "cpu",
              "torch": torch.__version__, "rows": rows}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\n{'dtype':>9} {'B':>3} {'F':>3} {'ms':>7} {'x fp32':>7} {'max abs':>9} {'rms':>10} {'SNR dB':>7}")
    base = {(r["batch"], r["frames"]): r["ms"] for r in rows if r["dtype"] == "float32"}
    for r in rows:
        print(f"{r['dtype']:>9} {r['batch']:3d} {r['frames']:3d} {r['ms']:7.3f} {r['ms'] / base[(r['batch'], r['frames'])]:7.2f} "
              f"{r['max_abs']:9.5f} {r['rms']:10.6f} {r['snr_db']:7.1f}")


if __name__ == "__main__":
    main()
