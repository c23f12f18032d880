"""The shortest path from text to audio: the engine and the embedded voice, no server.

    python example.py "Hello there." out.wav
"""

import asyncio
import sys

import numpy as np
import soundfile as sf

from engine.engine import Engine
from engine.runner import build_runner
from engine.types import SpeechRequest
from gateway.text import check_input, split_segments
from models import family


async def main(text: str, path: str) -> None:
    engine = Engine()
    engine.start()
    engine.attach("piper-joe", build_runner("piper-joe", family("piper").load("piper-joe", None), "cpu")).result()
    segments = tuple(split_segments(check_input(text, 4096)))
    chunks = [c async for c in engine.submit(SpeechRequest("example", "piper-joe", segments, "default"))]
    engine.stop()
    sf.write(path, np.concatenate([c.pcm for c in chunks]), chunks[0].sample_rate)
    print(f"{path}: {sum(c.duration_ms for c in chunks) / 1000:.2f} s in {len(chunks)} chunks")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "Hello from Voxgate.",
                     sys.argv[2] if len(sys.argv) > 2 else "out.wav"))
