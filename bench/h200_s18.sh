#!/usr/bin/env bash
# Issue 10, session 18: the one-row decode path (norms, SiLU-gate and residual adds inside the GEMVs:
# models/gemv.py rows_linear, models/llama.py forward_rows) and the fused sampler (models/sample_step.py),
# on the device machine (one H200), from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh snac einops):
#   PART=all bash bench/h200_s18.sh   -> $OUT/gpu_tests.log, $OUT/orpheus_decode_fused_rows.json, .log
#   PART=steps bash bench/h200_s18.sh -> the decode steps only (MODES, BATCHES)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
if [ "${PART:-all}" = all ]; then
  timeout ${TESTS_S:-200} python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_fused_rows_gpu.py \
      tests/models/test_lm_runner_gpu.py tests/models/test_gemv_gpu.py ${MORE_TESTS:-} > $OUT/gpu_tests.log 2>&1
  tail -15 $OUT/gpu_tests.log
fi
timeout ${STEPS_S:-380} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,8,64,256} --table-batches 1 --sweep 0 \
    --profile-batches ${PROFILE:-1,64} --modes ${MODES:-cublas,gemv,gemv_sampler,rows,fused,fp8,fp8_fused} \
    --out $OUT/orpheus_decode_fused_rows.json > $OUT/orpheus_decode_fused_rows.log 2>&1
grep -v '^{' $OUT/orpheus_decode_fused_rows.log | tail -40
