#!/usr/bin/env bash
# Issue 10 (session 14): the split-K kernel against cuBLAS and the old Triton kernels at 2-256 rows (no sweep),
# then the in-process engine at higher loads than v8's (bench/orpheus_serve.py, edf, Poisson waves), on the
# device machine (one H200), .whl carried:
#   bash bench/h200_split_k_serve.sh -> $OUT/skinny_matmuls.json, .log, serve_s14.json, .log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout ${SKINNY_S:-200} python3 bench/skinny_matmuls.py --batches 2,8,16,32,64,128,256 --sweep "" \
    --out $OUT/skinny_matmuls.json > $OUT/skinny_matmuls.log 2>&1
grep -v '^{' $OUT/skinny_matmuls.log | grep -v "^$" | tail -8
timeout ${WAVE_S:-330} python3 bench/orpheus_serve.py --arrival poisson --sessions ${SESSIONS:-128,192} \
    --requests ${REQUESTS:-200,200} --max-running 256 --policies edf --out $OUT/serve_s14.json > $OUT/serve_s14.log 2>&1
python3 - <<'PY'
import json, os
path = os.path.join(os.environ["OUT"], "serve_s14.json")
for r in (json.load(open(path))["rows"] if os.path.exists(path) else []):
    print({k: r.get(k) for k in ("policy", "sessions", "attainment", "ttfa_p50_ms", "ttfa_p95_ms",
          "requests_with_stall", "ms_per_step", "wall_s")})
PY
tail -3 $OUT/serve_s14.log
