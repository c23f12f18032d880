"""A piper voice as two onnxruntime sessions, the VITS prior and its decoder, so that the
opening of a first chunk can be decoded and sent before the rest of its unit.

A VITS voice (Kim et al. 2021, "Conditional Variational Autoencoder with Adversarial
Learning for End-to-End Text-to-Speech", §2) turns phonemes into a latent `z` `[1, 192,
frames]` (text encoder, duration predictor, flow: the *prior* here) and `z` into audio with
a HiFi-GAN *decoder* (convolutions, transposed convolutions, leaky ReLU, tanh: every op is
local in time), `hop` samples a frame (256 for piper's voices). On the embedded voice the
decoder is ~70 % of a unit's time (measured: 164 of 233 ms for a 2.7 s sentence on one
thread). Decoding `z[:, :, :H + C]` and keeping the first `H * hop` samples gives the
whole decode's first samples to within float rounding once `C` covers the decoder's
receptive field. Measured on the embedded voice (12 workload sentences, H = 22): the largest
deviation of the opening / of the rest from the whole decode was 1.5e-6 / 0 with `C =
HEAD_CONTEXT_FRAMES` (12) and 4.1e-6 / 2.3e-6 with 10 frames, below one step of 16-bit PCM
(3.1e-5); with 8 frames 1.2e-3 / 2.8e-3 (tests/models/test_piper_stream.py checks the bound).
The rest is decoded from `z[:, :, H - C:]` with the first `C * hop` samples dropped.

`split_model` finds the decoder by its first convolution's weight (`dec.conv_pre.weight`,
the name piper's exporter gives it) and cuts the graph there with `onnx.utils.Extractor`;
a voice whose graph does not have it is run whole (`split_model` returns None).
`SplitSession` stands in for piper's onnxruntime session, so that piper's own code still
phonemises, aligns and scales the audio.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

log = logging.getLogger(__name__)

DECODER_WEIGHT = "dec.conv_pre.weight"
HEAD_CONTEXT_FRAMES = 12  # right context of the head's decode, left context of the rest's
SPEAKER_INPUT = "sid"  # a multi-speaker voice's decoder is conditioned on the speaker too
# The rest of a unit must decode within this share of the head's playback, at the decoder's
# speed measured over the last units (so a long first unit gets a longer head).
HEAD_SAFETY = 0.5


@dataclass(frozen=True, slots=True)
class SplitModel:
    prior: bytes  # inputs as the whole model's; outputs: the latent, then the model's other outputs
    decoder: bytes  # inputs: the latent (and `sid` where the decoder takes it); output: audio
    latent: str  # the tensor between them
    decoder_inputs: tuple[str, ...]


def split_model(model: bytes | str) -> SplitModel | None:
    """The voice's ONNX graph (bytes, or a path) cut between prior and decoder; None when
    it has no `dec.conv_pre` convolution or the cut does not give two runnable graphs."""
    try:
        import onnx
        import onnxruntime
        from onnx.utils import Extractor
    except ImportError:  # piper-tts without its [alignment] extra
        return None
    try:
        graph_model = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        graph = graph_model.graph
        conv = next((n for n in graph.node if n.op_type == "Conv" and DECODER_WEIGHT in n.input), None)
        if conv is None:
            return None
        latent = conv.input[0]
        inputs = [i.name for i in graph.input]
        outputs = [o.name for o in graph.output]
        extractor = Extractor(graph_model)
        prior = extractor.extract_model(inputs, [latent, *outputs[1:]]).SerializeToString()
        for decoder_inputs in ([latent], [latent, SPEAKER_INPUT] if SPEAKER_INPUT in inputs else None):
            if decoder_inputs is None:
                break
            decoder = extractor.extract_model(decoder_inputs, outputs[:1]).SerializeToString()
            try:  # a decoder that needs more than it was given does not load
                onnxruntime.InferenceSession(decoder, providers=["CPUExecutionProvider"])
            except Exception:  # noqa: BLE001 (onnxruntime raises its own Fail / InvalidGraph)
                continue
            return SplitModel(prior, decoder, latent, tuple(decoder_inputs))
    except Exception:  # noqa: BLE001 (a graph onnx cannot cut is run whole)
        log.warning("piper voice: cannot split the graph at %s; each unit is decoded whole", DECODER_WEIGHT,
                    exc_info=True)
    return None


class SplitSession:
    """piper's view of an onnxruntime session (`run(None, feed) -> [audio [1, 1, 1, samples],
    *others]`) running the prior, then the decoder.

    Arm `head` (a callable taking the raw float32 model output `[samples]`) before a
    synthesis: the next `run` decodes the opening frames first and calls it with their
    samples, then decodes the rest; it returns the same audio as a whole decode (to float
    rounding, see the module docstring). The opening is `head_frames` frames, or more where
    the rest would not decode within `HEAD_SAFETY` of the opening's playback at the
    decoder's measured speed (`frame_ms`: audio ms a frame; `decode_ms`: decoder ms a frame,
    an exponential mean over its runs). A latent under twice the opening (plus the context)
    is decoded whole and `head` is not called. `head` is disarmed by the run it fires in (a unit espeak reads
    as two sentences streams only its first). Not thread-safe: one synthesis at a time.
    """

    def __init__(self, split: SplitModel, options: Any, frame_ms: float) -> None:
        import onnxruntime

        providers = ["CPUExecutionProvider"]
        self._prior = onnxruntime.InferenceSession(split.prior, sess_options=options, providers=providers)
        self._decoder = onnxruntime.InferenceSession(split.decoder, sess_options=options, providers=providers)
        self._latent, self._decoder_inputs = split.latent, split.decoder_inputs
        self.head: Callable[[np.ndarray], None] | None = None
        self.head_frames = 0
        self.frame_ms = frame_ms
        self.decode_ms = 0.0  # 0: not measured yet (the first run decodes whole)

    def get_session_options(self) -> Any:
        """The onnxruntime SessionOptions both sessions were made with."""
        return self._prior.get_session_options()

    def opening_frames(self, frames: int) -> int:
        """Frames of the opening for a latent of `frames` (0: decode it whole)."""
        if self.head_frames <= 0 or self.decode_ms <= 0:
            return 0
        d = self.decode_ms  # rest (frames - n + C) * d <= HEAD_SAFETY * n * frame_ms
        count = max(self.head_frames, math.ceil((frames + HEAD_CONTEXT_FRAMES) * d / (HEAD_SAFETY * self.frame_ms + d)))
        return count if frames >= 2 * count + HEAD_CONTEXT_FRAMES else 0  # a rest too short to pay for its call

    def run(self, output_names: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        latent, *others = self._prior.run(None, feed)
        head, self.head = self.head, None
        frames, context = latent.shape[-1], HEAD_CONTEXT_FRAMES
        count = self.opening_frames(frames) if head is not None else 0
        if not count:
            return [self._decode(latent, feed), *others]
        opening = self._decode(latent[:, :, :count + context], feed)
        hop = opening.shape[-1] // (count + context)
        opening = opening[..., :count * hop]
        head(opening.reshape(-1))
        rest = self._decode(latent[:, :, count - context:], feed)[..., context * hop:]
        return [np.concatenate([opening, rest], axis=-1), *others]

    def _decode(self, latent: np.ndarray, feed: dict[str, np.ndarray]) -> np.ndarray:
        inputs = {self._latent: latent}
        if SPEAKER_INPUT in self._decoder_inputs:
            inputs[SPEAKER_INPUT] = feed[SPEAKER_INPUT]
        t0 = time.perf_counter()
        audio: np.ndarray = self._decoder.run(None, inputs)[0]
        ms = 1000.0 * (time.perf_counter() - t0) / max(1, latent.shape[-1])
        self.decode_ms = ms if self.decode_ms <= 0 else 0.8 * self.decode_ms + 0.2 * ms
        return audio
