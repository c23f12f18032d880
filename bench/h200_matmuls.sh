#!/usr/bin/env bash
# The matmul table of bench/decode_matmuls.py alone (weights rotated past L2, tile sweep), with the
# GEMV GPU tests first; one H200, .whl carried:  bash bench/h200_matmuls.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_gemv_gpu.py > $OUT/gpu_tests.log 2>&1
tail -5 $OUT/gpu_tests.log
timeout ${TABLE_S:-400} python3 bench/decode_matmuls.py --steps 0 --sweep 1 --batches ${BATCHES:-1,2,4,8,16,64} \
    --out $OUT/decode_matmuls_table.json > $OUT/table.log 2>&1
grep -v '^{' $OUT/table.log | tail -80
