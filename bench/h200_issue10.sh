#!/usr/bin/env bash
# Issue 10 on the device machine (one H200), from a copy of this tree with .whl carried:
#   bash bench/h200_issue10.sh   -> $OUT/gpu_tests.log, $OUT/orpheus_decode_fp8.json, $OUT/decode_matmuls.log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_gemv_gpu.py \
    tests/models/test_lm_runner_gpu.py tests/models/test_decode_attention_gpu.py > $OUT/gpu_tests.log 2>&1
tail -25 $OUT/gpu_tests.log
timeout ${STEPS_S:-380} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64,256} --table-batches ${TABLE:-1} \
    --profile-batches 1 --out $OUT/orpheus_decode_fp8.json > $OUT/decode_matmuls.log 2>&1
grep -v '^{' $OUT/decode_matmuls.log | tail -60
