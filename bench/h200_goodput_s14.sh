#!/usr/bin/env bash
# One H200, .whl carried: bench/goodput.py for Orpheus-3B (edf) after issue 10's v9 kernels, at rates past
# goodput_orpheus.json's capacity (14 req/s):  bash bench/h200_goodput_s14.sh -> $OUT/goodput_orpheus_s14.json, .log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${GOODPUT_S:-560} python3 bench/goodput.py --policies ${POLICIES:-edf} --rates ${RATES:-14,18,22,26,30} \
    --requests 200 --out $OUT/goodput_orpheus_s14.json > $OUT/goodput_orpheus_s14.log 2>&1
tail -25 $OUT/goodput_orpheus_s14.log
