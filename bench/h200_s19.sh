#!/usr/bin/env bash
# Issue 10, session 19: the one-row decode path's kernels with programmatic dependent launch (`pdl`:
# models/gemv.py rows_linear, models/decode_attention.py decode_attention_qkv), beside the session-18
# defaults, on the device machine, from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   bash bench/h200_s19.sh   -> $OUT/gpu_tests.log, $OUT/orpheus_decode_pdl.json, .log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
if [ "${TESTS_S:-150}" != 0 ]; then
  TESTS="tests/models/test_fused_rows_gpu.py ${MORE_TESTS:-tests/models/test_decode_attention_gpu.py tests/models/test_gemv_gpu.py}"
  { echo "# command: python3 -m pytest -q $TESTS"
    echo "# machine: $(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
  } > $OUT/gpu_tests.log
  timeout ${TESTS_S:-150} python3 -m pytest -q -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests.log 2>&1
  tail -15 $OUT/gpu_tests.log
fi
timeout ${STEPS_S:-380} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64,256} --table-batches 1 --sweep 0 \
    --profile-batches ${PROFILE:-1} --modes ${MODES:-cublas,gemv,fused,fused_pdl_regs,fused_pdl,fp8,fp8_fused,fp8_fused_pdl} \
    --out $OUT/orpheus_decode_${NAME:-pdl}.json > $OUT/orpheus_decode_${NAME:-pdl}.log 2>&1
grep -v "^{" $OUT/orpheus_decode_${NAME:-pdl}.log | tail -40
