#!/usr/bin/env bash
# One H200, .whl carried: the Qwen3-TTS frame graphs (GPU tests, then frame time against the
# floor at batch 1/64/256 with a graphs-vs-eager parity check) and issue 10's decode step at
# batch 1 (cuBLAS, the Triton GEMV, FP8):  bash bench/h200_frames.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_qwen3_tts_frame_graphs_gpu.py \
    tests/models/test_decode_attention_gpu.py > $OUT/gpu_tests.log 2>&1
tail -5 $OUT/gpu_tests.log
timeout ${FRAME_S:-300} python3 bench/qwen3_tts_frame.py --size full --batches ${QBATCHES:-1,64,256} --parity 4 \
    --out $OUT/qwen3_tts_frame_graphs_h200.json > $OUT/qwen3_tts_frame.log 2>&1
tail -30 $OUT/qwen3_tts_frame.log
timeout ${STEPS_S:-140} python3 bench/decode_matmuls.py --batches 1 --table-batches 1 --sweep 0 --profile-batches 1 \
    --out $OUT/orpheus_decode_fp8_b1.json > $OUT/decode_b1.log 2>&1
grep -v '^{' $OUT/decode_b1.log | tail -22
