#!/usr/bin/env bash
# Issue 10 v8 end to end: the in-process engine (bench/orpheus_serve.py, edf, Poisson waves) with the fused
# decode attention off and on, one process each, on the device machine (one H200), .whl carried:
#   bash bench/h200_serve_fused.sh   -> $OUT/serve_fused_<0|1>.json, .log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for fused in ${ORDER:-0 1}; do
  timeout ${WAVE_S:-270} python3 bench/orpheus_serve.py --arrival poisson --sessions ${SESSIONS:-64,96} \
      --requests ${REQUESTS:-200,200} --max-running 256 --policies edf --fused $fused \
      --out $OUT/serve_fused_$fused.json > $OUT/serve_fused_$fused.log 2>&1
  grep -v '^{' $OUT/serve_fused_$fused.log | tail -5
done
python3 - <<'PY'
import json, os
for fused in os.environ.get("ORDER", "0 1").split():
    path = os.path.join(os.environ["OUT"], f"serve_fused_{fused}.json")
    if not os.path.exists(path):
        print(fused, "missing"); continue
    for r in json.load(open(path))["rows"]:
        print("fused", fused, {k: r.get(k) for k in ("policy", "sessions", "attainment", "ttfa_p50_ms", "ttfa_p95_ms",
              "requests_with_stall", "ms_per_step", "wall_s")})
PY
