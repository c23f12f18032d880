#!/usr/bin/env bash
# Issue 9's host time per step on the device machine (one H200), .whl carried (and ab_head/, a copy
# of the previous tree's engine/, models/ and bench/, for a same-machine simulator A/B, if present):
#   bash bench/h200_issue9.sh   -> $OUT/orpheus_serve_host_ms.json, $OUT/simulate_host_ms_*.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket" > $OUT/cpu.txt
SIM="--cost bench/results/cost_orpheus_h200.json --rates 14 --requests 200 --lanes 1 --host-ms 0.3 --policies edf,fifo"
for round in 1 2; do
  if [ -d ab_head ]; then python3 ab_head/bench/simulate.py $SIM --out $OUT/simulate_host_ms_before_$round.json > $OUT/simulate_before_$round.log 2>&1; fi
  python3 bench/simulate.py $SIM --out $OUT/simulate_host_ms_after_$round.json > $OUT/simulate_after_$round.log 2>&1
done
timeout 420 python3 bench/orpheus_serve.py --arrival poisson --sessions 64 --requests 200 --max-running 256 \
    --policies edf,fifo --host-variants ${VARIANTS:-plain,gc_off,gc_freeze,pin,breakdown,plain} \
    --out $OUT/orpheus_serve_host_ms.json > $OUT/serve.log 2>&1
cat $OUT/cpu.txt; grep -h "^ *\(edf\|fifo\) " $OUT/simulate_*.log
python3 - <<'PY'
import json, os
path = os.path.join(os.environ["OUT"], "orpheus_serve_host_ms.json")
if os.path.exists(path):
    d = json.load(open(path))
    for r in d["rows"] + d.get("host_variants", []):
        print(r.get("variant", r["policy"]), r["attainment"], r["ms_per_step"], r["host_ms_p50"], r["host_ms_p90"],
              json.dumps(r.get("gc")))
    for r in d.get("host_variants", []):
        if "breakdown" in r:
            print(json.dumps(r["breakdown"]))
else:
    print("orpheus_serve_host_ms.json missing")
PY
tail -3 $OUT/serve.log
