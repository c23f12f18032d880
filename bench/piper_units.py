"""What clause units cost the embedded voice: whole sentences against their clause units.

    python bench/piper_units.py --out bench/results/piper_units.json

Over the workload's sentences that `models/piper.py split_unit` cuts (first `--sentences`
of them), on one single-threaded Piper session (a pool worker's): synthesis time and audio
of each sentence synthesised whole, and summed over its units, both in the same pass,
alternating which goes first. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import load_texts  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models.piper import load  # noqa: E402
from models.piper_units import split_unit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--out", default="bench/results/piper_units.json")
    opts = parser.parse_args()
    synthesizer = load("bench", None, {"workers": 1, "num_threads": 1, "alone_threads": 0}).synthesizers[0]
    request = SpeechRequest("bench", "bench", ("warm",), "default", options={"noise_w_scale": 0.0})
    synthesizer.synthesize("A sentence to warm the session up.", request, False)
    texts = [t for t in load_texts() if len(split_unit(t)) > 1][:opts.sentences]
    totals = {"whole_s": 0.0, "units_s": 0.0, "whole_audio_s": 0.0, "units_audio_s": 0.0}
    units_per_sentence = []
    for i, text in enumerate(texts):
        units = split_unit(text)
        units_per_sentence.append(len(units))
        for kind in ("whole", "units") if i % 2 else ("units", "whole"):
            pieces = [text] if kind == "whole" else units
            t0 = time.perf_counter()
            samples = sum(len(synthesizer.synthesize(piece, request, False)[0]) for piece in pieces)
            totals[f"{kind}_s"] += time.perf_counter() - t0
            totals[f"{kind}_audio_s"] += samples / synthesizer.sample_rate
    record = {"command": " ".join(["python", *sys.argv]), "machine": f"{os.cpu_count()} CPUs", "gpu": None,
              "sentences": len(texts), "units_per_sentence": round(sum(units_per_sentence) / len(texts), 2),
              **{k: round(v, 3) for k, v in totals.items()},
              "rtf_whole": round(totals["whole_s"] / totals["whole_audio_s"], 4),
              "rtf_units": round(totals["units_s"] / totals["units_audio_s"], 4),
              "synthesis_ratio": round(totals["units_s"] / totals["whole_s"], 3),
              "audio_ratio": round(totals["units_audio_s"] / totals["whole_audio_s"], 3)}
    print(f"{'':>8} {'synthesis s':>12} {'audio s':>9} {'RTF':>7}")
    for kind in ("whole", "units"):
        print(f"{kind:>8} {totals[kind + '_s']:12.2f} {totals[kind + '_audio_s']:9.1f} {record['rtf_' + kind]:7.4f}")
    print(f"{len(texts)} sentences, {record['units_per_sentence']} units each; clause units take "
          f"{record['synthesis_ratio']:.3f}x the synthesis and {record['audio_ratio']:.3f}x the audio")
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
