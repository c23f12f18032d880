#!/usr/bin/env bash
# Issue 10 on the device machine (one H200), .whl carried (session of 2026-12-03, eleventh): the
# residual add + norm and the SiLU-gate inside the one-row matmuls (models/gemv.py norm_linear,
# silu_linear). GPU tests, then the decode step at B 1 and 64 in five modes, one run:
#   bash bench/h200_fused.sh   -> $OUT/gpu_tests.log, $OUT/orpheus_decode_fused.json, $OUT/decode_fused.log
# Wheels: bash ../shared/scripts/device-wheels.sh snac limits deprecated babel emoji markdown-it-py mdurl
# pyloudnorm future httpx2 pytest-timeout soxr pysbd num2words
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 170 python3 -m pytest -q -x -p no:warnings -p no:cacheprovider tests/models/test_gemv_gpu.py \
    tests/engine/test_model_runner_gpu.py > $OUT/gpu_tests.log 2>&1
tail -25 $OUT/gpu_tests.log
timeout ${STEPS_S:-390} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64} --table-batches 1 --sweep 0 \
    --profile-batches 1 --fused-tiles "${TILES:-2,1024,1;4,1024,2;16,1024,4}" --out $OUT/orpheus_decode_fused.json > $OUT/decode_fused.log 2>&1
grep -v '^{' $OUT/decode_fused.log | tail -40
