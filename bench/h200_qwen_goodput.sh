#!/usr/bin/env bash
# One H200, .whl carried: issue 10's decode step at batch 1 (cuBLAS, the Triton GEMV, FP8), then
# bench/goodput.py on a random full-size Qwen3-TTS (edf and fifo):  bash bench/h200_qwen_goodput.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${STEPS_S:-150} python3 bench/decode_matmuls.py --batches 1 --table-batches 1 --sweep 0 --profile-batches 1 \
    --out $OUT/orpheus_decode_fp8_b1.json > $OUT/decode_b1.log 2>&1
grep -v '^{' $OUT/decode_b1.log | tail -22
timeout ${GOODPUT_S:-400} python3 bench/goodput.py --family qwen3_tts --rates ${RATES:-8,16,32,48,64} --requests 200 \
    --out $OUT/goodput_qwen3_tts.json > $OUT/goodput.log 2>&1
tail -20 $OUT/goodput.log
