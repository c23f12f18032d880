#!/usr/bin/env bash
# Issue 10, fused decode attention (rotary + KV write + split merge in one kernel) and the PDL
# experiment, on the device machine (one H200), from a copy of this tree with .whl carried:
#   TESTS=1 MODES=gemv_unfused,gemv,gemv_pdl BATCHES=1,64 bash bench/h200_fused_attention.sh
#   -> $OUT/gpu_tests.log, $OUT/orpheus_decode_fused_attention.json, $OUT/decode_matmuls.log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "${TESTS:-1}" = 1 ]; then
  timeout 220 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_decode_attention_gpu.py \
      tests/models/test_gemv_gpu.py tests/models/test_lm_runner_gpu.py > $OUT/gpu_tests.log 2>&1
  tail -25 $OUT/gpu_tests.log
fi
timeout ${STEPS_S:-360} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64,256} --table-batches 1 --sweep 0 \
    --profile-batches ${PROFILE:-1} --modes ${MODES:-cublas,gemv_unfused,gemv,gemv_pdl} \
    --out $OUT/orpheus_decode_fused_attention.json > $OUT/decode_matmuls.log 2>&1
grep -v '^{' $OUT/decode_matmuls.log | tail -40
