#!/usr/bin/env bash
# Issue 9's host time per step on the device machine (one H200), .whl carried:
#   bash bench/h200_issue9.sh   -> $OUT/orpheus_serve_host_ms*.json, $OUT/simulate_host_ms_gpuhost.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket" > $OUT/cpu.txt
python3 bench/simulate.py --cost bench/results/cost_orpheus_h200.json --rates 14 --requests 200 --lanes 1 \
    --host-ms 0.3 --repeat 3 --policies edf,fifo --out $OUT/simulate_host_ms_gpuhost.json > $OUT/simulate.log 2>&1
timeout 300 python3 bench/orpheus_serve.py --arrival poisson --sessions 64 --requests 200 --max-running 256 \
    --policies edf,fifo --host-variants 1 --out $OUT/orpheus_serve_host_ms.json > $OUT/serve.log 2>&1
cat $OUT/cpu.txt; tail -4 $OUT/simulate.log
python3 - <<'PY'
import json, os
for name in ("orpheus_serve_host_ms.json",):
    path = os.path.join(os.environ["OUT"], name)
    if not os.path.exists(path):
        print(name, "missing"); continue
    d = json.load(open(path))
    for r in d["rows"] + d.get("host_variants", []):
        print(name, r.get("variant", r["policy"]), r["attainment"], r["ms_per_step"], r["host_ms_p50"], r["host_ms_p90"])
    for r in d.get("host_variants", []):
        if "breakdown" in r:
            print(json.dumps(r["breakdown"]))
PY
