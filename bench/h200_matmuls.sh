#!/usr/bin/env bash
# The matmul table of bench/decode_matmuls.py alone (weights rotated past L2), one H200, .whl carried.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 400 python3 bench/decode_matmuls.py --steps 0 --sweep 1 --out $OUT/decode_matmuls_table.json > $OUT/table.log 2>&1
grep -v '^{' $OUT/table.log | tail -75
